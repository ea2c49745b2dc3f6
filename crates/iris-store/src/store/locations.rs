//! Where this process last found out-of-line values: a table of (key, change stamp, block)
//! entries, four to a set, so that [`Store::get`](super::Store::get) of a value seen before
//! goes straight to its block, with no read section and no walk down the tree, and checks
//! afterwards that the key's change stamp and its partition's write marks did not move (a
//! stamp moves before the value's block can be reused: see `Header::change_stamp`);
//! [`Store::get_with`](super::Store::get_with) checks them before it hands the bytes over,
//! inside a read section that keeps the block from reuse. A hint table: a stale, lost or
//! overwritten entry only sends a lookup the long way. Its size follows the volume's (a slot
//! per two blocks, 64K to 2M slots of 64 bytes, touched only where gets land: see `Table`).
//! A key may sit in any slot of its set, so that keys of one set do not keep pushing each
//! other out (with one slot per key, one get in eight of a volume's keys at random went the
//! long way).
//!
//! Beside each slot, a 4-byte hint (`hints`): the tag of its key (bits of the key's hash) and,
//! for a value a whole block long, its block; 16 hints to a cache line (256 KiB to 8 MiB of
//! them), small enough to stay in the cache where the slots cannot. A get copies from the
//! block its key's hint names while the slot is still on its way from memory, and checks
//! afterwards that the slot names that block for its key: two misses at once rather than one
//! after the other. Only a guess: what a get returns is decided by the slot.
//!
//! Each slot is seqlocked by its own word (odd while a fill writes it); readers never wait and
//! a fill that finds its slot busy is dropped. Only atomics: nothing here can be held across a
//! fork.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::BlockRef;
use crate::key::Key;

/// Slots per set: a key's entry may be in any of them (its hint tells which).
const WAYS: usize = 4;
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
    /// `WAYS` slots per set; a key's set is `index(key)`.
    slots: Table<Slot>,
    /// `hints[i]`: the tag of the key of `slots[i]`'s last fill above, in its low
    /// `block_bits` bits, its block if its value is `whole` bytes long (else 0: a data block
    /// is never block 0). 0: an empty slot.
    hints: Table<AtomicU32>,
    /// The length of the values whose block a hint carries: the volume's block size.
    whole: u32,
    /// Bits of a hint that hold its block: enough for every block of the volume, but for
    /// `MIN_TAG_BITS` left to the tag (blocks past them get no hint of their block).
    block_bits: u32,
}

/// Fewest bits of a key's tag in a hint: with fewer, too many hints would send a get to
/// another key's slot.
const MIN_TAG_BITS: u32 = 4;

/// Where a hint sends a get: the slot to read, and the block to copy before reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hint {
    slot: usize,
    /// The whole block the slot was last filled with, if its value filled one.
    pub(super) at: Option<BlockRef>,
}

/// What a [`Table`] may hold: types for which all-zero bytes are a valid value.
///
/// # Safety
/// An implementor must be valid when every byte of it is zero.
unsafe trait Zeroable {}
// SAFETY: atomic integers; zero is a valid (empty) slot.
unsafe impl Zeroable for Slot {}
// SAFETY: an atomic integer.
unsafe impl Zeroable for AtomicU32 {}

/// `len` values of `T` in anonymous memory of their own: zero until touched. (The global
/// allocator's zeroed allocation writes every byte when the alignment is a cache line's:
/// 128 MiB of memset, 160 ms of system time, at every open of a big volume, even by a process
/// that only inherited an Iris fd.)
struct Table<T: Zeroable> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: the table owns its mapping; its values are atomics, shared between threads by design.
unsafe impl<T: Zeroable + Sync> Send for Table<T> {}
// SAFETY: as above.
unsafe impl<T: Zeroable + Sync> Sync for Table<T> {}

impl<T: Zeroable> Table<T> {
    /// `len` zero values.
    fn new(len: usize) -> Table<T> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
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
        let Some(ptr) = std::ptr::NonNull::new(p.cast::<T>()).filter(|_| p != libc::MAP_FAILED)
        else {
            // As the allocator does when memory runs out.
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<T>(len).expect("a table of bounded size"),
            );
        };
        prefer_huge_pages(p.cast(), bytes);
        Table { ptr, len }
    }
}

impl<T: Zeroable> std::ops::Deref for Table<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` values, page-aligned (past any T's alignment: T is
        // at most a cache line), zero at first (valid: `T: Zeroable`), and lives as long as
        // `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for Table<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`; no reference to it outlives `self`.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<T>(),
            )
        };
    }
}

impl Locations {
    /// A table for a volume of `blocks` blocks of `block_size` bytes: a slot per two blocks (a
    /// power of two, within `MIN_SLOTS..=MAX_SLOTS`), so that the values of a volume mostly
    /// full of out-of-line values mostly have a slot of their own.
    pub(super) fn for_volume(blocks: u64, block_size: u32) -> Locations {
        let want = usize::try_from(blocks / 2).unwrap_or(MAX_SLOTS);
        let block_bits = u64::BITS - blocks.saturating_sub(1).leading_zeros();
        Self::with_slots(
            want.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two(),
            block_size,
            block_bits,
        )
    }

    /// A table of `slots` slots (a power of two) for a volume of `block_size`-byte blocks,
    /// hinting at blocks numbered below `2^block_bits` (at most `32 - MIN_TAG_BITS` bits).
    fn with_slots(slots: usize, block_size: u32, block_bits: u32) -> Locations {
        debug_assert!(slots.is_power_of_two() && slots >= WAYS);
        Locations {
            slots: Table::new(slots),
            hints: Table::new(slots),
            whole: block_size,
            block_bits: block_bits.clamp(1, u32::BITS - MIN_TAG_BITS),
        }
    }

    /// The bits of a hint that hold its block.
    #[inline]
    fn block_mask(&self) -> u32 {
        (1u32 << self.block_bits) - 1
    }

    /// `key`'s set (its first slot) and its tag: the bits above a hint's block, from bits of
    /// the key's hash that did not choose the set, the lowest forced to 1 (no hint of a key
    /// is 0, the empty hint).
    #[inline]
    fn index(&self, key: Key) -> (usize, u32) {
        let h =
            key.hi.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.lo.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        let sets = self.slots.len() / WAYS;
        let set = ((h ^ (h >> 29)) as usize) & (sets - 1);
        let tag = ((h >> 32) as u32 & !self.block_mask()) | (1 << self.block_bits);
        (set * WAYS, tag)
    }

    /// The hint of a key tagged `tag` whose value is at `at`: the tag, and the block if the
    /// value is a whole block whose number fits below the tag.
    #[inline]
    fn hint_word(&self, tag: u32, at: BlockRef) -> u32 {
        let fits = at.len() == self.whole as usize && at.block() <= u64::from(self.block_mask());
        // `at.block()` fits in the bits below the tag when `fits`.
        tag | if fits { at.block() as u32 } else { 0 }
    }

    /// The slot of `key`'s set whose hint carries `key`'s tag (the one that likely holds it;
    /// with no such slot, none does, but for a fill in progress), and the whole block it was
    /// last filled with, if any: where a get may copy from before [`Locations::get_hinted`]
    /// answers, if it checks afterwards that the slot names that block for `key` (it may be
    /// another key's, or freed since).
    #[inline]
    pub(super) fn hint(&self, key: Key) -> Option<Hint> {
        let (first, tag) = self.index(key);
        let mask = self.block_mask();
        (first..first + WAYS).find_map(|slot| {
            let w = self.hints[slot].load(Ordering::Relaxed);
            (w & !mask == tag).then(|| Hint {
                slot,
                at: (w & mask != 0).then(|| BlockRef::new(u64::from(w & mask), self.whole)),
            })
        })
    }

    /// Where `key`'s value was last found, and its change stamp then, if the slot its hint
    /// names holds it.
    #[inline]
    pub(super) fn get(&self, key: Key) -> Option<(u64, BlockRef)> {
        self.get_hinted(self.hint(key)?, key)
    }

    /// Start loading the slot `hint` names into the cache (a prefetch: nothing waits for it,
    /// where a load would hold every later instruction back from retiring until it arrives).
    #[inline]
    pub(super) fn prefetch(&self, hint: Hint) {
        #[cfg(target_arch = "x86_64")]
        if let Some(slot) = self.slots.get(hint.slot) {
            // SAFETY: a prefetch of an address inside the table never faults and changes no
            // memory.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    (slot as *const Slot).cast::<i8>(),
                )
            };
        }
    }

    /// [`Locations::get`] from the slot `hint` names.
    #[inline]
    pub(super) fn get_hinted(&self, hint: Hint, key: Key) -> Option<(u64, BlockRef)> {
        self.get_in(hint.slot, key)
    }

    /// What slot `slot` holds, if it holds `key`.
    #[inline]
    fn get_in(&self, slot: usize, key: Key) -> Option<(u64, BlockRef)> {
        let s = &self.slots[slot];
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

    /// The slot of `key`'s set to fill for it: one that holds it, else one whose hint has its
    /// tag (two keys with one tag in a set would hide one another), else an empty one, else
    /// each in turn (per thread), pushing another key out.
    fn victim(&self, first: usize, key: Key, tag: u32) -> usize {
        let ways = first..first + WAYS;
        let holds = |slot: &usize| {
            let s = &self.slots[*slot];
            s.hi.load(Ordering::Relaxed) == key.hi && s.lo.load(Ordering::Relaxed) == key.lo
        };
        let hint = |slot: &usize| self.hints[*slot].load(Ordering::Relaxed);
        ways.clone()
            .find(holds)
            .or_else(|| ways.clone().find(|s| hint(s) & !self.block_mask() == tag))
            .or_else(|| ways.clone().find(|s| hint(s) == 0))
            .unwrap_or_else(|| {
                thread_local!(static TURN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
                first
                    + TURN.with(|t| {
                        t.set(t.get().wrapping_add(1));
                        t.get() % WAYS
                    })
            })
    }

    /// Remember that `key`'s value was found at `at` by a lookup that read change stamp `stamp`
    /// before it began (unless a slot holds that already, or another thread is filling it).
    #[inline]
    pub(super) fn put(&self, key: Key, stamp: u64, at: BlockRef) {
        if self.get(key) == Some((stamp, at)) {
            return; // readers of a settled value keep the line shared
        }
        let (first, tag) = self.index(key);
        let slot = self.victim(first, key, tag);
        let s = &self.slots[slot];
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
        let hint = &self.hints[slot];
        let word = self.hint_word(tag, at);
        if hint.load(Ordering::Relaxed) != word {
            hint.store(word, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table like a 4 KiB-block volume's of 2^20 blocks.
    fn table() -> Locations {
        Locations::with_slots(MIN_SLOTS, 4096, 20)
    }

    /// `n` keys that share `key`'s set, each with a tag of its own, `key` first.
    fn set_of(l: &Locations, key: Key, n: usize) -> Vec<Key> {
        let set = l.index(key).0;
        let mut tags = std::collections::HashSet::new();
        std::iter::once(key)
            .chain((key.lo + 1..u64::MAX).map(|lo| Key::new(key.hi, lo)))
            .filter(|k| l.index(*k).0 == set && tags.insert(l.index(*k).1))
            .take(n)
            .collect()
    }

    /// The slot that holds `key`.
    fn slot_of(l: &Locations, key: Key) -> &Slot {
        let first = l.index(key).0;
        (first..first + WAYS)
            .map(|i| &l.slots[i])
            .find(|s| {
                s.hi.load(Ordering::SeqCst) == key.hi && s.lo.load(Ordering::SeqCst) == key.lo
            })
            .expect("a slot holds the key")
    }

    #[test]
    fn an_entry_answers_for_its_own_key_only_and_the_last_fill_wins() {
        let l = table();
        let (k, at) = (Key::new(3, 9), BlockRef::new(1234, 4096));
        assert_eq!(l.get(k), None);
        l.put(k, 7, at);
        assert_eq!(l.get(k), Some((7, at)));
        assert_eq!(l.get(Key::new(3, 10)), None, "another key");
        l.put(k, 8, BlockRef::new(99, 512));
        assert_eq!(l.get(k), Some((8, BlockRef::new(99, 512))));
        // A slot being filled reads as a miss.
        let s = slot_of(&l, k);
        s.seq.fetch_add(1, Ordering::SeqCst);
        assert_eq!(l.get(k), None);
        l.put(k, 9, at); // dropped: the slot is busy
        s.seq.fetch_add(1, Ordering::SeqCst);
        assert_eq!(l.get(k), Some((8, BlockRef::new(99, 512))));
    }

    #[test]
    fn as_many_keys_of_one_set_as_it_has_slots_are_all_remembered_and_one_more_pushes_one_out() {
        let l = table();
        let keys = set_of(&l, Key::new(5, 1), WAYS + 1);
        let at = |i: usize| BlockRef::new(100 + i as u64, 4096);
        for round in 0..3 {
            for (i, k) in keys[..WAYS].iter().enumerate() {
                l.put(*k, round, at(i));
            }
            for (i, k) in keys[..WAYS].iter().enumerate() {
                assert_eq!(l.get(*k), Some((round, at(i))), "round {round} key {i}");
            }
        }
        l.put(keys[WAYS], 1, at(WAYS));
        assert_eq!(l.get(keys[WAYS]), Some((1, at(WAYS))));
        let kept: Vec<usize> = (0..WAYS).filter(|i| l.get(keys[*i]).is_some()).collect();
        assert_eq!(kept.len(), WAYS - 1, "a set holds {WAYS} keys");
        // Refilling a key that a slot holds changes that slot, not another key's.
        l.put(keys[kept[0]], 9, at(kept[0]));
        assert_eq!(l.get(keys[kept[0]]), Some((9, at(kept[0]))));
        assert_eq!(l.get(keys[WAYS]), Some((1, at(WAYS))));
        for i in &kept[1..] {
            assert_eq!(l.get(keys[*i]), Some((2, at(*i))));
        }
    }

    #[test]
    fn a_hint_names_its_keys_slot_and_whole_block() {
        let l = table();
        let keys = set_of(&l, Key::new(3, 9), 3);
        let k = keys[0];
        assert_eq!(l.hint(k), None);
        l.put(k, 7, BlockRef::new(1234, 4096));
        let h = l.hint(k).expect("a hint");
        assert_eq!(h.at, Some(BlockRef::new(1234, 4096)));
        assert_eq!(l.get_hinted(h, k), Some((7, BlockRef::new(1234, 4096))));
        // Another key of the set has a hint of its own beside it, and names its own block.
        l.put(keys[1], 1, BlockRef::new(77, 4096));
        assert_eq!(
            l.hint(keys[1]).and_then(|h| h.at),
            Some(BlockRef::new(77, 4096))
        );
        assert_eq!(
            l.hint(k).and_then(|h| h.at),
            Some(BlockRef::new(1234, 4096))
        );
        // A key of the set with another tag gets no hint: remembered nowhere, without a look
        // at any slot.
        let tag = |key: Key| l.index(key).1;
        let stranger = set_of(&l, k, 64)
            .into_iter()
            .find(|o| tag(*o) != tag(k) && tag(*o) != tag(keys[1]))
            .expect("a key with another tag");
        assert_eq!(l.hint(stranger), None);
        assert_eq!(l.get(stranger), None);
        // A value shorter than a block, or at a block past the bits below the tag, has a hint
        // that names its slot but no block: none rather than a wrong length or a truncated
        // block.
        l.put(k, 8, BlockRef::new(55, 3000));
        assert_eq!(l.hint(k).map(|h| h.at), Some(None));
        assert_eq!(l.get(k), Some((8, BlockRef::new(55, 3000))));
        l.put(k, 9, BlockRef::new(1 << 20 | 5, 4096));
        assert_eq!(l.hint(k).map(|h| h.at), Some(None));
        assert_eq!(l.get(k), Some((9, BlockRef::new(1 << 20 | 5, 4096))));
        l.put(k, 10, BlockRef::new(56, 4096));
        assert_eq!(l.hint(k).and_then(|h| h.at), Some(BlockRef::new(56, 4096)));
    }

    #[test]
    fn a_key_takes_the_slot_of_another_with_its_tag() {
        let l = table();
        let k = Key::new(8, 1);
        let (set, tag) = l.index(k);
        let twin = (2..u64::MAX)
            .map(|lo| Key::new(8, lo))
            .find(|o| l.index(*o) == (set, tag))
            .expect("a key with the same set and tag");
        l.put(k, 1, BlockRef::new(10, 4096));
        l.put(twin, 2, BlockRef::new(20, 4096));
        assert_eq!(l.get(twin), Some((2, BlockRef::new(20, 4096))));
        assert_eq!(
            l.get(k),
            None,
            "pushed out by its twin, which would have hidden it"
        );
        let with_tag = (set..set + WAYS)
            .filter(|i| l.hints[*i].load(Ordering::SeqCst) & !l.block_mask() == tag)
            .count();
        assert_eq!(with_tag, 1);
    }

    #[test]
    fn a_big_volume_keeps_bits_for_the_tag() {
        assert_eq!(Locations::for_volume(1 << 20, 4096).block_bits, 20);
        assert_eq!(Locations::for_volume((1 << 20) + 1, 4096).block_bits, 21);
        assert_eq!(Locations::for_volume(1 << 28, 4096).block_bits, 28);
        let big = Locations::for_volume(1 << 40, 4096);
        assert_eq!(big.block_bits, 32 - MIN_TAG_BITS);
        let (k, far) = (Key::new(1, 1), BlockRef::new(1 << 39, 4096));
        big.put(k, 1, far);
        assert_eq!(big.hint(k).map(|h| h.at), Some(None), "no truncated block");
        assert_eq!(big.get(k), Some((1, far)));
    }

    #[test]
    fn a_table_grows_with_its_volume_within_bounds() {
        assert_eq!(Locations::for_volume(0, 4096).slots.len(), MIN_SLOTS);
        assert_eq!(Locations::for_volume(1 << 20, 4096).slots.len(), 1 << 19);
        assert_eq!(
            Locations::for_volume((1 << 20) + 3, 4096).slots.len(),
            1 << 20
        );
        assert_eq!(Locations::for_volume(u64::MAX, 4096).slots.len(), MAX_SLOTS);
    }

    #[test]
    fn concurrent_fills_never_mix_entries() {
        let l = std::sync::Arc::new(table());
        // Keys of one set, one more than it holds, each always filled with its own (stamp,
        // block).
        let keys = set_of(&l, Key::new(1, 1), WAYS + 1);
        let fillers: Vec<_> = keys
            .into_iter()
            .zip((1..).map(|i| 11 * i as u64))
            .map(|(k, tag)| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u32;
                    for _ in 0..200_000 {
                        l.put(k, tag, BlockRef::new(tag * 100, 4096));
                        if let Some((stamp, at)) = l.get(k) {
                            assert_eq!((stamp, at), (tag, BlockRef::new(tag * 100, 4096)));
                            seen += 1;
                        }
                        if let Some(h) = l.hint(k) {
                            if let Some((_, at)) = l.get_hinted(h, k) {
                                assert_eq!(at, BlockRef::new(tag * 100, 4096));
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        for f in fillers {
            assert!(f.join().expect("filler") > 0, "a key never found");
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
        let t = Table::<Slot>::new(MAX_SLOTS);
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
