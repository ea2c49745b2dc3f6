//! Which files this process syncs after each write: a file synced since its last write (as
//! under `fdatasync` after every write, or O_DSYNC emulated by the caller) will likely be synced
//! again right after its next write, so that write may commit while it holds every lock anyway
//! (see `iris_store::ThenPatch::sync_expected`). A hint table, not a record: a collision or a
//! race costs one commit too many or too few, never a lost sync.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots of the table; files hash to one by inode number.
const SLOTS: usize = 64;

/// One slot on its own cache line: writers of different files do not share a line.
#[repr(align(64))]
#[derive(Default)]
struct Slot(AtomicU64);

/// The table: each slot holds one plus the inode number of a file synced since its last write
/// (0: none).
pub(crate) struct SyncHints {
    slots: [Slot; SLOTS],
}

impl SyncHints {
    /// An empty table.
    pub(crate) fn new() -> Self {
        SyncHints {
            slots: std::array::from_fn(|_| Slot::default()),
        }
    }

    fn slot(&self, ino: u64) -> &AtomicU64 {
        &self.slots[(ino % SLOTS as u64) as usize].0
    }

    /// `ino` was just synced.
    pub(crate) fn synced(&self, ino: u64) {
        let s = self.slot(ino);
        let tag = ino.wrapping_add(1);
        if s.load(Ordering::Relaxed) != tag {
            s.store(tag, Ordering::Relaxed);
        }
    }

    /// A write of `ino` starts: whether the file was synced since its last write (the mark is
    /// taken, so only the first write after a sync expects one). A plain load when not: writes
    /// of files nobody syncs never write the table.
    pub(crate) fn take(&self, ino: u64) -> bool {
        let s = self.slot(ino);
        let tag = ino.wrapping_add(1);
        if s.load(Ordering::Relaxed) == tag {
            s.store(0, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_write_after_a_sync_expects_one() {
        let h = SyncHints::new();
        assert!(!h.take(7), "never synced");
        h.synced(7);
        assert!(h.take(7));
        assert!(!h.take(7), "the second write since the sync");
        h.synced(0);
        assert!(!h.take(SLOTS as u64), "another file of the same slot");
        assert!(h.take(0));
    }
}
