//! Which files this process syncs after every single write (as under `fdatasync=1`, or O_DSYNC
//! emulated by the caller): when a file's last sync covered exactly one write, the next write
//! is likely followed by a sync too, so it makes itself durable before it returns (through the
//! volume's intent log, else by committing: see `iris_store::ThenPatch::sync_expected`); the
//! sync then has nothing left to do. A file written several times per sync (a database's
//! pages, a log's records) never qualifies: committing at its first write would add a commit
//! to each of its syncs.
//!
//! A hint table, not a record: a collision or a race costs at most one commit too many or too
//! few, never a lost sync (the sync still commits whatever is not durable).

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots of the table; files hash to one by inode number.
const SLOTS: usize = 64;

/// In a slot's state word: the file's last sync covered exactly one write.
const EXPECT: u64 = 1 << 63;
/// The rest of the state word: writes since the last sync, counted up to 2.
const WRITES: u64 = 3;

/// One slot on its own cache line: writers of different files do not share a line.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    /// One plus the inode number of the file the slot follows (0: none).
    tag: AtomicU64,
    /// [`EXPECT`] and the count of writes since that file's last sync.
    state: AtomicU64,
}

/// The table. A sync claims its file's slot; a write only updates the slot of its own file.
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

    fn slot(&self, ino: u64) -> &Slot {
        &self.slots[(ino % SLOTS as u64) as usize]
    }

    /// `ino` was just synced.
    pub(crate) fn synced(&self, ino: u64) {
        let s = self.slot(ino);
        let tag = ino.wrapping_add(1);
        let next = if s.tag.load(Ordering::Relaxed) == tag {
            let writes = s.state.load(Ordering::Relaxed) & WRITES;
            if writes == 1 {
                EXPECT
            } else {
                0
            }
        } else {
            s.tag.store(tag, Ordering::Relaxed);
            0
        };
        if s.state.load(Ordering::Relaxed) != next {
            s.state.store(next, Ordering::Relaxed);
        }
    }

    /// A write of `ino` starts: whether a sync is expected right after it (its file's last sync
    /// covered exactly one write, and this is the first write since). Plain loads, and no store,
    /// for files this table does not follow or that have been written twice since their sync.
    pub(crate) fn take(&self, ino: u64) -> bool {
        let s = self.slot(ino);
        if s.tag.load(Ordering::Relaxed) != ino.wrapping_add(1) {
            return false;
        }
        let state = s.state.load(Ordering::Relaxed);
        let writes = state & WRITES;
        if writes >= 2 {
            return false;
        }
        s.state
            .store((state & EXPECT) | (writes + 1), Ordering::Relaxed);
        writes == 0 && state & EXPECT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_file_synced_after_each_single_write_expects_a_sync() {
        let h = SyncHints::new();
        assert!(!h.take(7), "never synced");
        h.synced(7); // claims the slot
        assert!(
            !h.take(7),
            "the sync before covered no write this table saw"
        );
        h.synced(7); // covered one write
        assert!(h.take(7), "one write per sync");
        h.synced(7);
        assert!(h.take(7), "and again");
        assert!(!h.take(7), "the second write since the sync");
        assert!(!h.take(7));
        h.synced(7); // covered three writes
        assert!(!h.take(7), "several writes per sync: no early commit");
        h.synced(7); // covered one write again
        assert!(h.take(7));
        // Another file of the same slot takes it over at its sync; the first loses its hint.
        h.synced(7 + SLOTS as u64);
        assert!(!h.take(7));
        assert!(!h.take(7 + SLOTS as u64));
        h.synced(7 + SLOTS as u64);
        assert!(h.take(7 + SLOTS as u64));
    }
}
