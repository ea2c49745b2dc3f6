//! Repair records of changes made in place. A write of up to 4 KiB into a data block
//! that no commit or snapshot reaches yet changes the block where it is instead of copying the
//! whole block, under its partition's lock. Power loss cannot tear it (the block is not part of
//! the last commit), but a process killed in the middle of the copy could; so the new bytes go
//! first into the partition's record in the working header, and a repair (the next locker hears
//! `OwnerDied`, see `volume_lock`) copies them again: the write is then whole, never torn. (The
//! record holds the new bytes rather than the old ones so that the write never loads the block's
//! old bytes: the block is usually cold, and its load was a quarter of a small write's time.)
//!
//! The same record also serves overwrites of several blocks under their partitions' locks (see
//! `Store::overwrite_blocks`): each new block is published in its leaf slot by one store, so a
//! writer killed among those stores would leave some published; the record lists every slot's
//! old value first, and the repair puts them all back. And appends into a block's unused tail
//! (`Store::append_in_place`): the value's length word and the file's size and times change by
//! several stores in tree nodes; the record holds their old values.

use std::sync::atomic::{compiler_fence, Ordering};

use crate::header::{undo_off, PARTITIONS};
use crate::layout::Layout;
use crate::region::Region;

/// Largest write made in place (bigger ones copy the block): a whole block of the default
/// size, so a 4 KiB overwrite of a block written since the last commit changes it where it is
/// (two copies, one into this record, which stays in the CPU's caches) instead of filling a
/// new block and publishing it.
pub(crate) const UNDO_MAX_BYTES: u64 = 4096;
/// Bytes of one partition's record: state, block, offset, length, then the bytes.
pub(crate) const UNDO_RECORD_BYTES: u64 = 32 + UNDO_MAX_BYTES;

/// Writes of at least this many bytes go into the block with streaming stores (see
/// `stream`): the block is usually cold, and ordinary stores would first read each of its
/// lines. fio 4 KiB random writes, one job, alternated: 0.86-0.99M -> 1.01-1.17M IOPS; 512 B
/// writes lost 5-12 % that way (the fence waits for the stores, and fewer lines to skip).
const STREAM_MIN_BYTES: u64 = 4096;

/// Whether a write of `len` bytes in place goes into its block with streaming stores (then
/// its lines are not worth loading into the cache first).
#[inline]
pub(crate) fn streams(len: usize) -> bool {
    len as u64 >= STREAM_MIN_BYTES
}

const STATE: u64 = 0;
const BLOCK: u64 = 8;
const OFFSET: u64 = 16;
const LEN: u64 = 24;
const BYTES: u64 = 32;

/// State word: the record holds bytes to copy into a block: the new bytes of a write in
/// progress (older builds put the old bytes there; the repair's copy serves both).
const ARMED: u64 = 1;
/// State word: the record holds the old values of leaf slots being republished.
const ARMED_SLOTS: u64 = 2;
/// State word: the record holds the old values of words changed in place (see
/// [`Undo::arm_words`]).
const ARMED_WORDS: u64 = 3;
/// Bytes of one word entry: the word's region offset and its old value.
const WORD_ENTRY: u64 = 16;
/// Most words one record holds.
pub(crate) const UNDO_MAX_WORDS: usize = (UNDO_MAX_BYTES / WORD_ENTRY) as usize;
/// State word: as [`ARMED_SLOTS`], with the entries past the record's own in a chain of
/// overflow blocks (the first named in the block field, each naming the next in its last word)
/// that nothing else references.
const ARMED_SLOTS_EXT: u64 = 4;
/// Most overflow blocks one record chains.
const OVERFLOW_BLOCKS: usize = 4;
/// Bytes of one slot entry: the slot's region offset, its old block and generation.
const SLOT_ENTRY: u64 = 24;
/// Most slots one record holds in itself.
pub(crate) const UNDO_MAX_SLOTS: usize = (UNDO_MAX_BYTES / SLOT_ENTRY) as usize;

/// Slot entries one overflow block of `block_size` bytes holds (its last word names the next).
fn per_overflow(block_size: u64) -> usize {
    ((block_size - 8) / SLOT_ENTRY) as usize
}

/// Most slots one record holds with its overflow blocks of `block_size` bytes (850 for 4 KiB).
pub(crate) fn max_slots_with_overflow(block_size: u64) -> usize {
    UNDO_MAX_SLOTS + OVERFLOW_BLOCKS * per_overflow(block_size)
}

/// Overflow blocks a record of `slots` slots needs.
pub(crate) fn overflow_blocks_for(slots: usize, block_size: u64) -> usize {
    slots
        .saturating_sub(UNDO_MAX_SLOTS)
        .div_ceil(per_overflow(block_size))
}

/// The undo records of one volume.
#[derive(Clone, Copy)]
pub(crate) struct Undo {
    region: Region,
    header_off: u64,
    layout: Layout,
}

impl Undo {
    pub fn new(region: Region, layout: Layout) -> Self {
        Undo {
            region,
            header_off: layout.header_off,
            layout,
        }
    }

    fn at(&self, p: u64) -> u64 {
        self.header_off + undo_off(p)
    }

    /// Write `data` at byte `offset` of data block `block`, in place, recoverably (caller holds
    /// partition `p`'s lock, `offset + data.len()` is within the block, and `data` is at most
    /// [`UNDO_MAX_BYTES`]). A process killed before the record is armed leaves the block as it
    /// was; after, the repair finishes the copy.
    pub fn write(&self, p: u64, block: u64, offset: u64, data: &[u8]) {
        debug_assert!(data.len() as u64 <= UNDO_MAX_BYTES);
        let rec = self.at(p);
        let state = self.region.atomic_u64(rec + STATE);
        // The record is refilled only after the last change it guarded was disarmed (a kill
        // stops this process between two of its instructions: only their order matters).
        compiler_fence(Ordering::SeqCst);
        self.region.write_u64(rec + BLOCK, block);
        self.region.write_u64(rec + OFFSET, offset);
        self.region.write_u64(rec + LEN, data.len() as u64);
        self.region.copy_in(rec + BYTES, data);
        state.store(ARMED, Ordering::Release);
        let at = self.layout.offset(block) + offset;
        if streams(data.len()) {
            crate::stream::copy_streaming(self.region.bytes_mut(at, data.len() as u64), data);
        } else {
            self.region.copy_in(at, data);
        }
        state.store(0, Ordering::Release);
    }

    /// Note the old value (block, generation) of each leaf value slot at region offset `at`,
    /// before they are republished one by one (caller holds partition `p`'s lock and the locks
    /// of every key concerned). Past [`UNDO_MAX_SLOTS`] the rest go into `overflow`, blocks the
    /// caller allocated and nothing references ([`overflow_blocks_for`] of them; at most
    /// [`max_slots_with_overflow`] slots in all); they must stay allocated until the record is
    /// disarmed (a repair reads them). [`Undo::disarm`] follows the last.
    pub fn arm_slots(&self, p: u64, slots: &[(u64, u64, u64)], overflow: &[u64]) {
        let rec = self.at(p);
        let bs = self.layout.bs();
        let inline = slots.len().min(UNDO_MAX_SLOTS);
        let state = if slots.len() > UNDO_MAX_SLOTS {
            debug_assert!(slots.len() <= max_slots_with_overflow(bs));
            debug_assert_eq!(overflow.len(), overflow_blocks_for(slots.len(), bs));
            let rest = slots[inline..].chunks(per_overflow(bs));
            for (j, (entries, &block)) in rest.zip(overflow).enumerate() {
                let base = self.layout.offset(block);
                for (i, entry) in entries.iter().enumerate() {
                    self.write_slot(base + i as u64 * SLOT_ENTRY, *entry);
                }
                let next = overflow.get(j + 1).copied().unwrap_or(0);
                self.region.write_u64(base + bs - 8, next);
            }
            self.region.write_u64(rec + BLOCK, overflow[0]);
            ARMED_SLOTS_EXT
        } else {
            ARMED_SLOTS
        };
        self.region.write_u64(rec + LEN, slots.len() as u64);
        for (i, entry) in slots[..inline].iter().enumerate() {
            self.write_slot(rec + BYTES + i as u64 * SLOT_ENTRY, *entry);
        }
        self.region
            .atomic_u64(rec + STATE)
            .store(state, Ordering::Release);
    }

    fn write_slot(&self, e: u64, (at, block, gen): (u64, u64, u64)) {
        self.region.write_u64(e, at);
        self.region.write_u64(e + 8, block);
        self.region.write_u64(e + 16, gen);
    }

    /// Note the old value of each 8-byte word at region offset `at` inside tree nodes, before
    /// they change in place (caller holds partition `p`'s lock and the locks of every key
    /// concerned; at most [`UNDO_MAX_WORDS`]): a change made of several stores that must all
    /// happen or none. [`Undo::disarm`] follows the last.
    pub fn arm_words(&self, p: u64, words: &[(u64, u64)]) {
        debug_assert!(words.len() <= UNDO_MAX_WORDS);
        let rec = self.at(p);
        self.region.write_u64(rec + LEN, words.len() as u64);
        for (i, (at, old)) in words.iter().enumerate() {
            let e = rec + BYTES + i as u64 * WORD_ENTRY;
            self.region.write_u64(e, *at);
            self.region.write_u64(e + 8, *old);
        }
        self.region
            .atomic_u64(rec + STATE)
            .store(ARMED_WORDS, Ordering::Release);
    }

    /// Put back the old values of the words a dead process was changing.
    fn roll_back_words(&self, rec: u64) -> bool {
        let n = self.region.read_u64(rec + LEN);
        if n > UNDO_MAX_WORDS as u64 {
            return false;
        }
        let (start, end) = (
            self.layout.offset(self.layout.data_start),
            self.layout.offset(self.layout.max_blocks),
        );
        for i in 0..n {
            let e = rec + BYTES + i * WORD_ENTRY;
            let (at, old) = (self.region.read_u64(e), self.region.read_u64(e + 8));
            if at >= start && at.checked_add(8).is_some_and(|x| x <= end) {
                self.region.write_u64(at, old);
            }
        }
        true
    }

    /// The change that [`Undo::arm_slots`] or [`Undo::arm_words`] guarded is complete.
    pub fn disarm(&self, p: u64) {
        self.region
            .atomic_u64(self.at(p) + STATE)
            .store(0, Ordering::Release);
    }

    /// Put back the old values of the slots a dead process was republishing; `ext`: past the
    /// record's own entries, the rest are in its chain of overflow blocks.
    fn roll_back_slots(&self, rec: u64, ext: bool) -> bool {
        let n = self.region.read_u64(rec + LEN);
        let bs = self.layout.bs();
        let max = if ext {
            max_slots_with_overflow(bs)
        } else {
            UNDO_MAX_SLOTS
        };
        if n > max as u64 {
            return false;
        }
        // The region offset of every entry, the overflow chain followed and checked first.
        let data = self.layout.data_start..self.layout.max_blocks;
        let mut chain = Vec::new();
        if ext {
            let mut block = self.region.read_u64(rec + BLOCK);
            for _ in 0..overflow_blocks_for(n as usize, bs) {
                if !data.contains(&block) {
                    return false;
                }
                chain.push(self.layout.offset(block));
                block = self.region.read_u64(self.layout.offset(block) + bs - 8);
            }
        }
        let per = per_overflow(bs) as u64;
        let end = self.layout.offset(self.layout.max_blocks);
        for i in 0..n {
            let e = match i.checked_sub(UNDO_MAX_SLOTS as u64) {
                None => rec + BYTES + i * SLOT_ENTRY,
                Some(j) => chain[(j / per) as usize] + (j % per) * SLOT_ENTRY,
            };
            let at = self.region.read_u64(e);
            let (block, gen) = (self.region.read_u64(e + 8), self.region.read_u64(e + 16));
            let in_data = at >= self.layout.offset(self.layout.data_start)
                && at.checked_add(16).is_some_and(|x| x <= end);
            if in_data && at.is_multiple_of(8) && data.contains(&block) {
                self.region.publish_u64(at, block);
                self.region.write_u64(at + 8, gen);
            }
        }
        true
    }

    /// Finish every write a dead process left half done, and put back the old values of slots
    /// and words it was changing (caller holds every lock). Returns how many records it applied.
    pub fn roll_back(&self) -> u64 {
        let mut undone = 0;
        for p in 0..PARTITIONS {
            let rec = self.at(p);
            let done = match self.region.atomic_u64(rec + STATE).load(Ordering::Acquire) {
                ARMED => self.copy_bytes(rec),
                ARMED_SLOTS => self.roll_back_slots(rec, false),
                ARMED_SLOTS_EXT => self.roll_back_slots(rec, true),
                ARMED_WORDS => self.roll_back_words(rec),
                _ => continue,
            };
            undone += u64::from(done);
            self.region
                .atomic_u64(rec + STATE)
                .store(0, Ordering::Release);
        }
        undone
    }

    /// Copy the bytes of a small write a dead process left half done to their place.
    fn copy_bytes(&self, rec: u64) -> bool {
        let block = self.region.read_u64(rec + BLOCK);
        let offset = self.region.read_u64(rec + OFFSET);
        let len = self.region.read_u64(rec + LEN);
        let fits = block >= self.layout.data_start
            && block < self.layout.max_blocks
            && len <= UNDO_MAX_BYTES
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.layout.bs());
        if fits {
            self.region
                .copy_within(rec + BYTES, self.layout.offset(block) + offset, len);
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume of `blocks` 4 KiB blocks in memory (`buf` keeps it alive) and its undo records.
    fn scratch(blocks: u64, buf: &mut Vec<u64>) -> (Layout, Region, Undo) {
        let layout = Layout::new(4096, blocks).expect("layout");
        *buf = vec![0u64; (blocks * 4096 / 8) as usize];
        let region = Region::new(buf.as_mut_ptr().cast(), blocks * 4096);
        (layout, region, Undo::new(region, layout))
    }

    #[test]
    fn a_write_cut_short_is_finished_and_a_finished_one_is_kept() {
        let mut buf = Vec::new();
        let (layout, region, undo) = scratch(64, &mut buf);
        let block = layout.data_start + 3;
        let at = layout.offset(block);
        region.bytes_mut(at, 4096).fill(0xaa);

        // A finished write stays, and leaves nothing to apply.
        undo.write(2, block, 100, &[0x11; 512]);
        assert_eq!(undo.roll_back(), 0);
        assert!(region.bytes(at + 100, 512).iter().all(|&b| b == 0x11));

        // A writer killed halfway through its copy: the record is armed with the new bytes,
        // half of them in the block. The repair finishes the write.
        let rec = layout.header_off + undo_off(5);
        let arm = |offset: u64, bytes: &[u8]| {
            region.write_u64(rec + BLOCK, block);
            region.write_u64(rec + OFFSET, offset);
            region.write_u64(rec + LEN, bytes.len() as u64);
            region.copy_in(rec + BYTES, bytes);
            region
                .atomic_u64(rec + STATE)
                .store(ARMED, Ordering::Release);
        };
        arm(1000, &[0x22; 300]);
        region.bytes_mut(at + 1000, 150).fill(0x22);
        assert_eq!(undo.roll_back(), 1);
        assert!(region.bytes(at + 1000, 300).iter().all(|&b| b == 0x22));
        assert!(region.bytes(at + 1300, 10).iter().all(|&b| b == 0xaa));
        assert!(region.bytes(at + 100, 512).iter().all(|&b| b == 0x11));
        assert_eq!(undo.roll_back(), 0, "a record is applied once");

        // A record an older build armed holds the old bytes: the same copy undoes its write.
        arm(2000, &[0xaa; 200]);
        region.bytes_mut(at + 2000, 50).fill(0x33);
        assert_eq!(undo.roll_back(), 1);
        assert!(region.bytes(at + 2000, 200).iter().all(|&b| b == 0xaa));

        // A corrupt record (length past the block) is dropped, not applied.
        region.write_u64(rec + OFFSET, 4000);
        region.write_u64(rec + LEN, 300);
        region
            .atomic_u64(rec + STATE)
            .store(ARMED, Ordering::Release);
        assert_eq!(undo.roll_back(), 0);
    }

    #[test]
    fn slots_past_the_records_room_are_put_back_from_the_overflow_chain() {
        let mut buf = Vec::new();
        let (layout, region, undo) = scratch(1024, &mut buf);
        // The slots lie in the blocks from here on (past the overflow blocks below).
        let leaf = layout.offset(layout.data_start + 12);
        let n = max_slots_with_overflow(layout.bs());
        assert_eq!(n, UNDO_MAX_SLOTS + 4 * 170);
        // Overflow blocks in no order, as the allocator hands them out.
        let overflow: Vec<u64> = [9, 4, 7, 5].iter().map(|b| layout.data_start + b).collect();
        assert_eq!(overflow_blocks_for(n, layout.bs()), 4);
        assert_eq!(overflow_blocks_for(UNDO_MAX_SLOTS + 171, layout.bs()), 2);
        // Slot i of two leaves holds (block, generation); the old ones are (20 + i % 500, 1).
        let slots: Vec<(u64, u64, u64)> = (0..n as u64)
            .map(|i| (leaf + i * 16, layout.data_start + 20 + i % 500, 1))
            .collect();
        undo.arm_slots(3, &slots, &overflow);
        // A writer killed after republishing every slot but the last two.
        for (at, _, _) in &slots[..n - 2] {
            region.write_u64(*at, layout.data_start + 15);
            region.write_u64(*at + 8, 2);
        }
        assert_eq!(undo.roll_back(), 1);
        for (at, block, gen) in &slots {
            assert_eq!(
                (region.read_u64(*at), region.read_u64(*at + 8)),
                (*block, *gen)
            );
        }
        assert_eq!(undo.roll_back(), 0, "a record is rolled back once");

        // A chain that leaves the data area: the record is dropped, nothing written.
        undo.arm_slots(3, &slots, &overflow);
        region.write_u64(slots[0].0, layout.data_start + 15);
        let second = layout.offset(overflow[1]);
        region.write_u64(second + layout.bs() - 8, layout.max_blocks);
        assert_eq!(undo.roll_back(), 0);
        assert_eq!(region.read_u64(slots[0].0), layout.data_start + 15);
    }

    #[test]
    fn words_changed_by_a_dead_writer_are_put_back_and_finished_ones_kept() {
        let mut buf = Vec::new();
        let (layout, region, undo) = scratch(64, &mut buf);
        let at = layout.offset(layout.data_start + 2);
        // Two words, one of them unaligned (inline values lie anywhere in a leaf's heap).
        let words = [(at + 64, 7u64), (at + 203, 9u64)];
        for (w, v) in words {
            region.write_u64(w, v);
        }
        undo.arm_words(1, &words);
        region.write_u64(at + 64, 70);
        undo.disarm(1);
        assert_eq!(undo.roll_back(), 0, "a finished change stays");
        assert_eq!(region.read_u64(at + 64), 70);

        undo.arm_words(1, &[(at + 64, 70), (at + 203, 9)]);
        region.write_u64(at + 64, 700);
        region.write_u64(at + 203, 900);
        assert_eq!(undo.roll_back(), 1);
        assert_eq!(
            (region.read_u64(at + 64), region.read_u64(at + 203)),
            (70, 9)
        );
        assert_eq!(undo.roll_back(), 0, "a record is rolled back once");

        // A word outside the data area (the header, say) is never written.
        let outside = layout.header_off;
        let before = region.read_u64(outside);
        undo.arm_words(1, &[(outside, before ^ 1)]);
        undo.roll_back();
        assert_eq!(region.read_u64(outside), before);
    }
}
