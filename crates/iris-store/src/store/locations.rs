//! Where this process last found out-of-line values: a direct-mapped table of (key, change
//! stamp, block) entries, so that [`Store::get`](super::Store::get) of a value seen before goes
//! straight to its block, with no read section and no walk down the tree, and checks afterwards
//! that the key's change stamp and its partition's write marks did not move (a stamp moves
//! before the value's block can be reused: see `Header::change_stamp`);
//! [`Store::get_with`](super::Store::get_with) checks them before it hands the bytes over,
//! inside a read section that keeps the block from reuse. A hint table: a stale, lost or
//! overwritten entry only sends a lookup the long way. Its size follows the volume's (a slot
//! per two blocks, 64K to 2M slots of 64 bytes, touched only where gets land: see
//! `SlotTable`).
//!
//! Each slot is seqlocked by its own word (odd while a fill writes it); readers never wait and
//! a fill that finds its slot busy is dropped. Only atomics: nothing here can be held across a
//! fork.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::BlockRef;
use crate::key::Key;

/// Fewest slots of a table: 4 MiB of address space, touched only where gets land.
const MIN_SLOTS: usize = 1 << 16;
/// Most slots of a table: 128 MiB of address space (a 8 GiB volume of 4 KiB blocks and more).
const MAX_SLOTS: usize = 1 << 21;

#[repr(align(64))]
struct Slot {
    seq: AtomicU64,
    hi: AtomicU64,
    lo: AtomicU64,
    stamp: AtomicU64,
    /// The packed location; 0 for an empty slot.
    at: AtomicU64,
}

/// Ask for transparent huge pages under the whole pages of `[start, start + len)` (a hint,
/// honoured where the kernel's `enabled` setting is `madvise` or `always`): a big table's slots
/// land at random, and with 4 KiB pages each get would miss the TLB on the table as well as on
/// the value's block.
fn prefer_huge_pages(start: *const u8, len: usize) {
    const PAGE: usize = 4096;
    let first = (start as usize).next_multiple_of(PAGE);
    let end = (start as usize + len) & !(PAGE - 1);
    if end > first {
        // SAFETY: madvise with MADV_HUGEPAGE changes no contents, only how the kernel backs
        // pages of this process's own allocation (`[first, end)` lies inside it).
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

/// The table of one open store.
pub(super) struct Locations {
    slots: SlotTable,
}

/// The slots, in anonymous memory of their own: zero (empty slots) until touched. (The global
/// allocator's zeroed allocation writes every byte when the alignment is a cache line's:
/// 128 MiB of memset, 160 ms of system time, at every open of a big volume, even by a process
/// that only inherited an Iris fd.)
struct SlotTable {
    ptr: std::ptr::NonNull<Slot>,
    len: usize,
}

// SAFETY: the table owns its mapping; slots are atomics, shared between threads by design.
unsafe impl Send for SlotTable {}
// SAFETY: as above.
unsafe impl Sync for SlotTable {}

impl SlotTable {
    /// `len` empty slots.
    fn new(len: usize) -> SlotTable {
        let bytes = len
            .checked_mul(std::mem::size_of::<Slot>())
            .expect("a table of bounded size");
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        let Some(ptr) = std::ptr::NonNull::new(p.cast::<Slot>()).filter(|_| p != libc::MAP_FAILED)
        else {
            // As the allocator does when memory runs out.
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<Slot>(len).expect("a table of bounded size"),
            );
        };
        prefer_huge_pages(p.cast(), bytes);
        SlotTable { ptr, len }
    }
}

impl std::ops::Deref for SlotTable {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        // SAFETY: the mapping holds `len` slots, page-aligned (past a Slot's alignment), zero
        // at first (a valid, empty Slot: atomic integers), and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SlotTable {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`; no reference to it outlives `self`.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<Slot>(),
            )
        };
    }
}

impl Locations {
    /// A table for a volume of `blocks` blocks: a slot per two blocks (a power of two, within
    /// `MIN_SLOTS..=MAX_SLOTS`), so that the values of a volume mostly full of out-of-line
    /// values mostly have a slot of their own.
    pub(super) fn for_volume(blocks: u64) -> Locations {
        let want = usize::try_from(blocks / 2).unwrap_or(MAX_SLOTS);
        Self::with_slots(want.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two())
    }

    /// A table of `slots` slots (a power of two).
    fn with_slots(slots: usize) -> Locations {
        debug_assert!(slots.is_power_of_two());
        let slots = SlotTable::new(slots);
        Locations { slots }
    }

    #[inline]
    fn slot(&self, key: Key) -> &Slot {
        let h =
            key.hi.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.lo.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        &self.slots[((h ^ (h >> 29)) as usize) & (self.slots.len() - 1)]
    }

    /// Where `key`'s value was last found, and its change stamp then, if this slot holds it.
    #[inline]
    pub(super) fn get(&self, key: Key) -> Option<(u64, BlockRef)> {
        let s = self.slot(key);
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let (hi, lo, stamp, at) = (
            s.hi.load(Ordering::Relaxed),
            s.lo.load(Ordering::Relaxed),
            s.stamp.load(Ordering::Relaxed),
            s.at.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != s1 || hi != key.hi || lo != key.lo {
            return None;
        }
        BlockRef::unpack(at).map(|at| (stamp, at))
    }

    /// Remember that `key`'s value was found at `at` by a lookup that read change stamp `stamp`
    /// before it began (unless the slot holds that already, or another thread is filling it).
    #[inline]
    pub(super) fn put(&self, key: Key, stamp: u64, at: BlockRef) {
        if self.get(key) == Some((stamp, at)) {
            return; // readers of a settled value keep the line shared
        }
        let s = self.slot(key);
        let seq = s.seq.load(Ordering::Relaxed);
        if seq & 1 != 0
            || s.seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        s.hi.store(key.hi, Ordering::Relaxed);
        s.lo.store(key.lo, Ordering::Relaxed);
        s.stamp.store(stamp, Ordering::Relaxed);
        s.at.store(at.pack(), Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_answers_for_its_own_key_only_and_the_last_fill_wins() {
        let l = Locations::with_slots(MIN_SLOTS);
        let (k, at) = (Key::new(3, 9), BlockRef::new(1234, 4096));
        assert_eq!(l.get(k), None);
        l.put(k, 7, at);
        assert_eq!(l.get(k), Some((7, at)));
        assert_eq!(l.get(Key::new(3, 10)), None, "another key");
        l.put(k, 8, BlockRef::new(99, 512));
        assert_eq!(l.get(k), Some((8, BlockRef::new(99, 512))));
        // A slot being filled reads as a miss.
        let s = l.slot(k);
        s.seq.fetch_add(1, Ordering::SeqCst);
        assert_eq!(l.get(k), None);
        l.put(k, 9, at); // dropped: the slot is busy
        s.seq.fetch_add(1, Ordering::SeqCst);
        assert_eq!(l.get(k), Some((8, BlockRef::new(99, 512))));
    }

    #[test]
    fn a_table_grows_with_its_volume_within_bounds() {
        assert_eq!(Locations::for_volume(0).slots.len(), MIN_SLOTS);
        assert_eq!(Locations::for_volume(1 << 20).slots.len(), 1 << 19);
        assert_eq!(Locations::for_volume((1 << 20) + 3).slots.len(), 1 << 20);
        assert_eq!(Locations::for_volume(u64::MAX).slots.len(), MAX_SLOTS);
    }

    #[test]
    fn concurrent_fills_never_mix_entries() {
        let l = std::sync::Arc::new(Locations::with_slots(MIN_SLOTS));
        // Two keys that share a slot, each always filled with its own (stamp, block).
        let a = Key::new(1, 1);
        let b = (2..u64::MAX)
            .map(|lo| Key::new(1, lo))
            .find(|k| std::ptr::eq(l.slot(*k), l.slot(a)))
            .expect("a colliding key");
        let fillers: Vec<_> = [(a, 11u64), (b, 22u64)]
            .into_iter()
            .map(|(k, tag)| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..200_000 {
                        l.put(k, tag, BlockRef::new(tag * 100, 4096));
                        if let Some((stamp, at)) = l.get(k) {
                            assert_eq!((stamp, at), (tag, BlockRef::new(tag * 100, 4096)));
                        }
                    }
                })
            })
            .collect();
        for f in fillers {
            f.join().expect("filler");
        }
    }

    /// While `write` runs on another thread paused between its publish and the move of its
    /// stamps: a get of `key` through the tree and one from its remembered location both return
    /// the new value (first byte `new`).
    fn check_window(s: &super::super::Store, key: Key, new: u8, write: impl FnOnce() + Send) {
        use crate::tree::test_pause;
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            s.get(key, &mut buf).expect("get").expect("present"); // remembered
        }
        std::thread::scope(|t| {
            let writer = t.spawn(|| {
                test_pause::arm(Duration::from_millis(300));
                write();
            });
            while !test_pause::IN_WINDOW.load(Ordering::SeqCst) {
                assert!(!writer.is_finished(), "the writer never paused");
                std::thread::yield_now();
            }
            let through_tree = s
                .get_with(key, |v| v[0])
                .expect("get_with")
                .expect("present");
            assert_eq!(through_tree, new, "the new block is published");
            assert_eq!(s.get(key, &mut buf).expect("get"), Some(4096));
            assert_eq!(buf[0], new, "a remembered location served the old block");
            writer.join().expect("writer");
        });
    }

    /// A get from a remembered location in the window between a new block's publish and the
    /// move of its key's stamp (held open by a test pause) returns the new value, as a get
    /// through the tree does, for every kind of publish: a block published in its leaf under
    /// the key's partition lock; under every lock, a new root, a copied leaf published in a
    /// parent written since the commit, a block published in a leaf written since the commit.
    #[test]
    fn a_remembered_location_is_not_served_between_a_publish_and_its_stamp_move() {
        let s = super::super::test_store();
        let fill = |k: Key, b: u8| s.put_block(k, 4096, |out| out.fill(b)).expect("put");
        let key = Key::new(3, 4);
        fill(key, 10);
        // Under the key's partition lock, into its leaf (written since the last commit).
        check_window(&s, key, 11, || fill(key, 11));
        // Under every lock: after a commit, the put copies the leaf, which is the root.
        s.commit().expect("commit");
        check_window(&s, key, 12, || fill(key, 12));
        // A tree of several leaves: after a commit, a first put copies its leaf's path up to
        // the root; a put into another committed leaf then publishes its copy in that root.
        let (a, b) = (Key::new(5, 0), Key::new(5, 399));
        for i in 0..400 {
            fill(Key::new(5, i), 1);
        }
        s.commit().expect("commit");
        fill(a, 2);
        check_window(&s, b, 3, || fill(b, 3));
        // And a put (every lock) of a value of the same length into that leaf, now written
        // since the commit: published in the leaf.
        check_window(&s, b, 4, || s.put(b, &[4u8; 4096]).expect("put"));
    }

    #[test]
    fn a_new_table_leaves_its_pages_untouched_until_slots_are_used() {
        let t = SlotTable::new(MAX_SLOTS);
        let bytes = t.len() * std::mem::size_of::<Slot>();
        let mut resident = vec![0u8; bytes.div_ceil(4096)];
        // SAFETY: mincore reads the residency of our own mapping into a vector of one byte
        // per page.
        let rc = unsafe { libc::mincore(t.ptr.as_ptr().cast(), bytes, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        let touched = resident.iter().filter(|&&b| b & 1 != 0).count();
        assert!(
            touched <= 1,
            "{touched} of {} pages resident in a new table",
            resident.len()
        );
    }
}
