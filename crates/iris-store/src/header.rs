//! The working header: state shared by every process that maps the volume, living in the mapping
//! itself (never persisted on purpose). It is trusted at open only when it was written during the
//! current boot: then the page cache kept every completed store, even if its writer was killed.
//! After a reboot it is rebuilt from the newest superblock (see `recovery`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::StoreError;
use crate::key::Key;
use crate::layout::{Layout, HEADER_BYTES};
use crate::region::Region;
use crate::superblock::{SnapshotEntry, MAX_SNAPSHOTS, SNAP_ENTRY_BYTES};

/// "IRISHDR3": the live header of a build whose writers partition keys as [`partition_of`]
/// does and take the partition locks of `volume_lock` (a build that partitions them or locks
/// otherwise must not share it: it refuses a header of another magic while others use it, and
/// rebuilds it from the last commit and the intent log when alone).
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"IRISHDR3");

// Field offsets inside the header. Every field is an aligned u64.
const MAGIC: u64 = 0;
const BOOT_HI: u64 = 8;
const BOOT_LO: u64 = 16;
const WORKING_ROOT: u64 = 24;
const WORKING_GEN: u64 = 32;
const COMMITTED_GEN: u64 = 40;
const COMMITTED_ROOT: u64 = 48;
const BACKED_BLOCKS: u64 = 56;
const USED_BLOCKS: u64 = 64;
/// The allocation cursor of the whole bitmap (partitions have their own, see `part_hint`).
const ALLOC_HINT: u64 = 72;
const COMMITS: u64 = 80;
const BYTES_PERSISTED: u64 = 88;
const SNAPSHOT_HELD: u64 = 96;
const LAST_COMMIT_NS: u64 = 104;
const DIRTY: u64 = 112;
const FAILED: u64 = 120;
/// Value of the failed word when a writer found the tree and the allocator disagreeing (any
/// other non-zero value: a persist failed).
const FAILED_INCONSISTENT: u64 = 2;
const PENDING_BLOCKS: u64 = 128;
const COMMITTED_SLOT: u64 = 136;
const SNAP_COUNT: u64 = 144;
const SNAP_TABLE: u64 = 152;
/// End of the snapshot table (576..640 held the single volume lock before format 3).
const SNAP_TABLE_END: u64 = 576;
const VOLUME_ID: u64 = 640;
/// Range of pending-free summary words touched since the last commit (lo, hi inclusive).
const PENDING_LO: u64 = 672;
const PENDING_HI: u64 = 680;

const _: () = assert!(SNAP_TABLE + (MAX_SNAPSHOTS * SNAP_ENTRY_BYTES) as u64 <= SNAP_TABLE_END);
const _: () = assert!(VOLUME_ID + 8 <= crate::readers::EPOCH_OFF);
const _: () = assert!(PENDING_HI + 8 <= crate::readers::LIMBO_OFF);
/// Set when a partition lock's holder died and the repair (which needs every lock) is due.
const REPAIR_NEEDED: u64 = 688;
/// The id of the process whose thread backs the volume's next growth ahead of need now (see
/// [`Header::grow_ahead_pid`]); 0 when none does.
const GROW_AHEAD_PID: u64 = 696;
/// The intent log's first block and length in blocks (0: no log; see `log_record`), and the
/// first record number the last commit does not hold.
const LOG_FIRST: u64 = 704;
const LOG_BLOCKS: u64 = 712;
const LOG_START: u64 = 720;
/// The next record number: its own cache line (writers of any partition take numbers).
const LOG_SEQ: u64 = 768;
const _: () = assert!(GROW_AHEAD_PID + 8 <= LOG_FIRST);
const _: () = assert!(LOG_START + 8 <= LOG_SEQ && LOG_SEQ + 64 <= SHAPE_SEQ);
/// The shape sequence: moved by every change that may move a key to another leaf (see
/// [`Header::shape_seq`]); its own cache line.
const SHAPE_SEQ: u64 = 1024;
const _: () = assert!(SHAPE_SEQ + 64 <= crate::readers::INFLIGHT_OFF);
/// Per-partition write sequences, one cache line each (see [`Header::in_place`]): odd while
/// a writer of the partition changes bytes or several slots where readers may be looking.
const WRITE_SEQS: u64 = 20736;
const _: () = assert!(WRITE_SEQS + PARTITIONS * 64 <= crate::layout::HEADER_BYTES);
/// Per stamp bucket: the working generation of the last change published to a key of the
/// bucket (see [`Header::note_written`]), so a sync of some keys can tell that the last commit
/// already holds every change to them.
const WRITE_GENS: u64 = WRITE_SEQS + PARTITIONS * 64;
const _: () = assert!(WRITE_GENS + STAMP_BUCKETS * 8 <= crate::layout::HEADER_BYTES);
/// Per partition, one cache line of recently freed blocks (see `Allocator::take_recent`).
const RECENT_FREES: u64 = WRITE_GENS + STAMP_BUCKETS * 8;
/// Recently freed blocks remembered per partition.
pub(crate) const RECENT_PER_PARTITION: u64 = 8;
/// The mask of recently-freed slots that hold a block, one bit per slot (its own cache line).
const RECENT_MASK: u64 = RECENT_FREES + PARTITIONS * RECENT_PER_PARTITION * 8;
const _: () = assert!(PARTITIONS * RECENT_PER_PARTITION <= 64);
const _: () = assert!(RECENT_MASK + 64 <= crate::layout::HEADER_BYTES);
/// Per-share counters of used blocks, one cache line each (writers of different partitions
/// allocate and free without sharing a line); the used count is USED_BLOCKS plus all of them.
const USED_SHARES: u64 = 6656;
const _: () = assert!(PARTITION_LINES + PARTITIONS * PARTITION_LINE <= USED_SHARES);
const _: () = assert!(USED_SHARES + PARTITIONS * 64 <= LIMBO_LISTS);
/// Change stamps: one counter per bucket of key high words (see [`Header::change_stamp`]).
const CHANGE_STAMPS: u64 = 4096;
/// Writer partitions: keys are spread over them by high word; each has its own lock, so writers
/// of different inodes do not wait for each other on the common path (see `Store`).
pub(crate) const PARTITIONS: u64 = 8;
/// One cache line per partition: its lock (see `volume_lock`), its allocation cursor, its limbo
/// count.
const PARTITION_LINES: u64 = 6144;
const PARTITION_LINE: u64 = 64;
const PART_HINT: u64 = 48;
/// Offset of partition `p`'s limbo count inside the header (see `readers`).
pub(crate) const fn limbo_count_off(p: u64) -> u64 {
    PARTITION_LINES + p * PARTITION_LINE + 56
}
/// Partition limbo lists follow (then, up to 20736, the undo records of formats before 7).
pub(crate) const LIMBO_LISTS: u64 = 8192;
/// One undo record per partition (see `undo`), after everything else.
const UNDO_RECORDS: u64 = 24576;
/// Offset of partition `p`'s undo record inside the header.
pub(crate) const fn undo_off(p: u64) -> u64 {
    UNDO_RECORDS + p * crate::undo::UNDO_RECORD_BYTES
}
/// Buckets of change stamps (a power of two).
pub(crate) const STAMP_BUCKETS: u64 = 256;
const _: () = assert!(crate::readers::END_OFF <= CHANGE_STAMPS);
const _: () = assert!(CHANGE_STAMPS + STAMP_BUCKETS * 8 <= PARTITION_LINES);
const _: () = assert!(PARTITION_LINES + PARTITIONS * PARTITION_LINE <= LIMBO_LISTS);
const _: () = assert!(LIMBO_LISTS + PARTITIONS * crate::readers::LIMBO_CAPACITY * 8 <= WRITE_SEQS);
const _: () = assert!(RECENT_MASK + 64 <= UNDO_RECORDS);
const _: () = assert!(undo_off(PARTITIONS) <= crate::layout::HEADER_BYTES);
const _: () = assert!(PART_HINT >= LOCK_WAITERS + 4);
/// A partition lock's words at the start of its line: the holder, then the waiter count.
const LOCK_HOLDER: u64 = 0;
const LOCK_WAITERS: u64 = 8;

/// Keys sharing a high word and `lo >> REGION_BITS` share a writer partition: a file's blocks
/// fall in 32 MiB regions (4 KiB blocks), which take [`FILE_PARTITIONS`] of the partitions in
/// turn, from a start four apart for consecutive high words. So writers of different parts of
/// one file take different locks (the two halves of a 128 MiB file take two each), and the
/// files of consecutive inode numbers (made one after another) take none of each other's.
/// Each write copies its bytes into its partition's undo record and takes its lock: a
/// partition two processes write by turns passes those lines between their CPUs on every
/// write. With 1 MiB regions hashed over all 8 partitions, every file took every partition.
/// fio 4 KiB random writes, 128 MiB files, by hand, builds alternated, the host in its slower
/// mode: two jobs each on its own file 2.19M -> 3.20-3.21M IOPS; two threads on the two halves
/// of one file 2.23M -> 3.42-3.43M; two threads anywhere in one file 2.07M -> 1.99-2.10M. (With
/// 64 MiB regions over all 8 partitions in turn, the last fell to 1.71M against 2.19M in a
/// pair of its own: two partitions for two writers of one file.)
const REGION_BITS: u32 = 13;
/// Partitions one high word's regions take in turn.
const FILE_PARTITIONS: u64 = 4;

/// The writer partition of `key`.
#[inline]
pub(crate) fn partition_of(key: Key) -> u64 {
    let start = key.hi.wrapping_mul(FILE_PARTITIONS);
    start.wrapping_add((key.lo >> REGION_BITS) % FILE_PARTITIONS) % PARTITIONS
}

/// The partitions of `keys`, one bit each.
#[inline]
pub(crate) fn partition_mask(keys: impl IntoIterator<Item = Key>) -> u64 {
    let mut held = 0u64;
    for k in keys {
        held |= 1 << partition_of(k);
        if held == (1 << PARTITIONS) - 1 {
            break;
        }
    }
    held
}

/// A change in place in progress (see [`Header::in_place`]).
pub(crate) struct InPlace<'a> {
    header: &'a Header,
    held: u64,
}

impl Drop for InPlace<'_> {
    fn drop(&mut self) {
        self.header.end_in_place(self.held);
    }
}

/// The change-stamp buckets an operation touched (one bit per bucket), and the writer
/// partitions of the keys it touched (one bit each).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct StampMask([u64; (STAMP_BUCKETS / 64) as usize], u64);

impl StampMask {
    /// Note a change to `key`.
    #[inline]
    pub fn touch(&mut self, key: Key) {
        let b = stamp_bucket(key);
        self.0[(b / 64) as usize] |= 1 << (b % 64);
        self.1 |= 1 << partition_of(key);
    }

    /// The writer partitions of the keys touched.
    #[inline]
    pub fn partitions(&self) -> u64 {
        self.1
    }

    /// Whether a change to a key sharing `key`'s stamp was noted.
    #[inline]
    pub fn has(&self, key: Key) -> bool {
        let b = stamp_bucket(key);
        self.0[(b / 64) as usize] & (1 << (b % 64)) != 0
    }
}

/// The change-stamp bucket of `key`: keys sharing the high word and the top byte of the low word
/// (the file layer's record kind: inode, directory entries, data, ...) share a stamp, so a file's
/// data writes do not move its inode record's stamp.
#[inline]
pub(crate) fn stamp_bucket(key: Key) -> u64 {
    let h = key.hi.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (key.lo >> 56).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h >> (64 - STAMP_BUCKETS.trailing_zeros())
}

/// Header words updated with atomic read-modify-write by writers of different partitions.
#[derive(Clone, Copy)]
pub(crate) enum HeaderWord {
    /// Lowest summary word with pending frees.
    Lo,
    /// Highest summary word with pending frees.
    Hi,
    /// Blocks waiting for the next commit.
    Blocks,
}

/// Typed access to the header fields.
#[derive(Clone, Copy)]
pub(crate) struct Header {
    region: Region,
    off: u64,
    /// Whether the whole header, `[off, off + HEADER_BYTES)`, lies in the region with `off` a
    /// multiple of 8 (checked once: then [`Header::word_at`] skips the per-access checks).
    fits: bool,
}

macro_rules! field {
    ($get:ident, $set:ident, $off:expr) => {
        #[inline]
        pub fn $get(&self) -> u64 {
            self.word_at($off).load(Ordering::Acquire)
        }
        #[inline]
        pub fn $set(&self, v: u64) {
            self.word_at($off).store(v, Ordering::Release)
        }
    };
}

impl Header {
    pub fn new(region: Region, layout: &Layout) -> Self {
        let off = layout.header_off;
        let fits = off.is_multiple_of(8)
            && off
                .checked_add(HEADER_BYTES)
                .is_some_and(|end| end <= region.len());
        Header { region, off, fits }
    }

    /// Whether the `size`-byte word at byte `at` of the header may be reached without a check
    /// (`at` a multiple of `size` and `at + size <= HEADER_BYTES`, asserted: the hot accessors
    /// pass constants or bounded indices, so the assertion folds away; and the whole header
    /// inside the region, `fits`).
    #[inline]
    fn proved(&self, at: u64, size: u64) -> bool {
        assert!(
            at.is_multiple_of(size) && at + size <= HEADER_BYTES,
            "header word {at} out of bounds"
        );
        self.fits
    }

    /// The 8-byte word at byte `at` of the header.
    #[inline]
    fn word_at(&self, at: u64) -> &AtomicU64 {
        if self.proved(at, 8) {
            // SAFETY: `off + HEADER_BYTES <= region.len()` with `off` a multiple of 8, and
            // `at + 8 <= HEADER_BYTES` with `at` a multiple of 8 (`proved`).
            unsafe { self.region.atomic_u64_unchecked(self.off + at) }
        } else {
            self.region.atomic_u64(self.off + at)
        }
    }

    /// The 4-byte word at byte `at` of the header (a lock's waiter count).
    #[inline]
    fn word32_at(&self, at: u64) -> &AtomicU32 {
        if self.proved(at, 4) {
            // SAFETY: as in `word_at`, with `at + 4 <= HEADER_BYTES` and `at` a multiple of 4.
            unsafe { self.region.atomic_u32_unchecked(self.off + at) }
        } else {
            self.region.atomic_u32(self.off + at)
        }
    }

    field!(magic, set_magic, MAGIC);
    field!(working_root, set_working_root, WORKING_ROOT);
    field!(working_gen, set_working_gen, WORKING_GEN);
    field!(committed_gen, set_committed_gen, COMMITTED_GEN);
    field!(committed_root, set_committed_root, COMMITTED_ROOT);
    field!(backed_blocks, set_backed_blocks, BACKED_BLOCKS);
    field!(commits, set_commits, COMMITS);
    field!(bytes_persisted, set_bytes_persisted, BYTES_PERSISTED);
    field!(snapshot_held, set_snapshot_held, SNAPSHOT_HELD);
    field!(last_commit_ns, set_last_commit_ns, LAST_COMMIT_NS);
    field!(dirty, set_dirty, DIRTY);
    field!(failed, set_failed, FAILED);
    field!(pending_blocks, set_pending_blocks, PENDING_BLOCKS);
    field!(committed_slot, set_committed_slot, COMMITTED_SLOT);
    field!(volume_id, set_volume_id, VOLUME_ID);
    field!(pending_lo, set_pending_lo, PENDING_LO);
    field!(pending_hi, set_pending_hi, PENDING_HI);
    /// The first intent-log record number the last commit does not hold (synced writes keep
    /// their records within one lap of it).
    pub fn log_start(&self) -> u64 {
        self.word_at(LOG_START).load(Ordering::Acquire)
    }

    /// Note the log start a commit wrote (see [`Header::log_start`]).
    pub fn set_log_start(&self, v: u64) {
        self.word_at(LOG_START).store(v, Ordering::Release)
    }

    /// The intent log's place (first block, blocks), if the volume has one.
    pub fn log_area(&self) -> Option<(u64, u32)> {
        let blocks = self.region.read_u64(self.off + LOG_BLOCKS);
        (blocks != 0).then(|| (self.region.read_u64(self.off + LOG_FIRST), blocks as u32))
    }

    /// Name the intent log's place (while nobody else uses the header: creation, recovery).
    pub fn set_log_area(&self, first: u64, blocks: u32) {
        self.region.write_u64(self.off + LOG_FIRST, first);
        self.region
            .write_u64(self.off + LOG_BLOCKS, u64::from(blocks));
    }

    /// The next intent-log record number.
    pub fn log_seq(&self) -> &std::sync::atomic::AtomicU64 {
        self.word_at(LOG_SEQ)
    }

    /// Mark the intent log's blocks in `marks` (they are in use though no tree reaches them).
    pub fn mark_log(&self, marks: &mut crate::recovery::Marks) {
        if let Some((first, blocks)) = self.log_area() {
            for b in first..first + u64::from(blocks) {
                marks.set(b);
            }
        }
    }

    /// Offset of the working-root word (the publish point of the whole working tree).
    pub fn working_root_off(&self) -> u64 {
        self.off + WORKING_ROOT
    }

    /// Whether the header was written during the boot identified by `boot_id`.
    pub fn is_valid_for_boot(&self, boot_id: u128) -> bool {
        self.magic() == HEADER_MAGIC
            && self.region.read_u64(self.off + BOOT_HI) == (boot_id >> 64) as u64
            && self.region.read_u64(self.off + BOOT_LO) == boot_id as u64
    }

    /// Stamp the header as valid for `boot_id`. Written last by recovery (after its replay).
    pub fn stamp(&self, boot_id: u128) {
        self.region
            .write_u64(self.off + BOOT_HI, (boot_id >> 64) as u64);
        self.region.write_u64(self.off + BOOT_LO, boot_id as u64);
        self.set_magic(HEADER_MAGIC);
    }

    /// Invalidate (recovery in progress).
    pub fn clear_magic(&self) {
        self.set_magic(0);
    }

    /// The working snapshot table (written into every superblock at commit).
    pub fn snapshots(&self) -> Vec<SnapshotEntry> {
        let count = (self.region.read_u64(self.off + SNAP_COUNT) as usize).min(MAX_SNAPSHOTS);
        (0..count)
            .filter_map(|i| {
                let at = self.off + SNAP_TABLE + (i * SNAP_ENTRY_BYTES) as u64;
                SnapshotEntry::decode(self.region.bytes(at, SNAP_ENTRY_BYTES as u64)).ok()
            })
            .collect()
    }

    /// Replace the working snapshot table.
    pub fn set_snapshots(&self, table: &[SnapshotEntry]) {
        let count = table.len().min(MAX_SNAPSHOTS);
        for (i, s) in table.iter().take(count).enumerate() {
            let at = self.off + SNAP_TABLE + (i * SNAP_ENTRY_BYTES) as u64;
            s.encode(self.region.bytes_mut(at, SNAP_ENTRY_BYTES as u64));
        }
        self.region.write_u64(self.off + SNAP_COUNT, count as u64);
    }

    /// The oldest-first list of snapshot generations (for the retention rule).
    pub fn newest_snapshot_generation(&self) -> Option<u64> {
        let count = (self.region.read_u64(self.off + SNAP_COUNT) as usize).min(MAX_SNAPSHOTS);
        (0..count)
            .map(|i| {
                self.region
                    .read_u64(self.off + SNAP_TABLE + (i * SNAP_ENTRY_BYTES) as u64 + 32)
            })
            .max()
    }

    /// Add `delta` to the used-block count, on the counter line of bitmap share `share`.
    #[inline]
    pub fn add_used(&self, share: u64, delta: i64) {
        self.word_at(USED_SHARES + (share % PARTITIONS) * 64)
            .fetch_add(delta as u64, Ordering::AcqRel);
    }

    /// Blocks in use (metadata included).
    pub fn used_blocks(&self) -> u64 {
        (0..PARTITIONS).fold(self.region.read_u64(self.off + USED_BLOCKS), |n, s| {
            n.wrapping_add(self.word_at(USED_SHARES + s * 64).load(Ordering::Acquire))
        })
    }

    /// Set the used-block count (no writer may be allocating or freeing).
    pub fn set_used_blocks(&self, n: u64) {
        for s in 0..PARTITIONS {
            self.word_at(USED_SHARES + s * 64)
                .store(0, Ordering::Release);
        }
        self.region.write_u64(self.off + USED_BLOCKS, n);
    }

    /// The shape sequence. It moves (under every writer lock) before the locks are released
    /// after any change that may have moved a key to another node: a transaction that held every
    /// lock, a roll-back, a repair. While it reads the same, every leaf where a key was found
    /// still holds it, so a writer holding the key's partition lock may go straight there.
    #[inline]
    pub fn shape_seq(&self) -> u64 {
        self.word_at(SHAPE_SEQ).load(Ordering::Acquire)
    }

    /// Start the shape sequence at `seed` (a header being made or rebuilt: no process uses it),
    /// so its values do not repeat those of the header's earlier lives.
    pub fn seed_shape_seq(&self, seed: u64) {
        self.word_at(SHAPE_SEQ).store(seed, Ordering::Release);
    }

    /// Move the shape sequence (caller holds every lock).
    pub fn bump_shape_seq(&self) {
        self.word_at(SHAPE_SEQ).fetch_add(1, Ordering::AcqRel);
    }

    /// Partition `p`'s write sequence.
    #[inline]
    fn write_seq_word(&self, p: u64) -> &std::sync::atomic::AtomicU64 {
        self.word_at(WRITE_SEQS + (p % PARTITIONS) * 64)
    }

    /// Partition `p`'s write sequence: even when no writer is changing anything in place there.
    #[inline]
    pub fn write_seq(&self, p: u64) -> u64 {
        self.write_seq_word(p).load(Ordering::Acquire)
    }

    /// Before changing, in place, bytes or more than one slot readers may be looking at (the
    /// caller holds the locks of the partitions in `held`): make their sequences odd, so a
    /// reader that overlaps the change sees a sequence move and reads again.
    pub(crate) fn begin_in_place(&self, held: u64) {
        for p in (0..PARTITIONS).filter(|p| held & (1 << p) != 0) {
            let w = self.write_seq_word(p);
            w.store(w.load(Ordering::Relaxed) | 1, Ordering::Relaxed);
        }
        // The odd values are visible before any byte of the change (the seqlock writer's
        // fence: store-store order, free on x86).
        std::sync::atomic::fence(Ordering::Release);
    }

    /// [`Header::begin_in_place`], ended by the guard's drop (after the change is published and
    /// its change stamps moved, so a reader using a location cached before the change reads
    /// again too).
    pub fn in_place(&self, held: u64) -> InPlace<'_> {
        self.begin_in_place(held);
        InPlace { header: self, held }
    }

    /// After the change [`Header::begin_in_place`] announced: even again, one higher.
    pub(crate) fn end_in_place(&self, held: u64) {
        for p in (0..PARTITIONS).filter(|p| held & (1 << p) != 0) {
            let w = self.write_seq_word(p);
            w.store((w.load(Ordering::Relaxed) | 1) + 1, Ordering::Release);
        }
    }

    /// Make every write sequence even (a repair, holding every lock, after rolling back what a
    /// dead writer left half done).
    pub fn settle_write_seqs(&self) {
        self.end_in_place((1 << PARTITIONS) - 1);
    }

    /// Why this volume refuses writes until it is reopened, if it does: a persist failed
    /// ([`StoreError::Failed`]), or a writer found the tree and the allocator disagreeing
    /// ([`StoreError::Corrupt`], see [`Header::refuse_inconsistent`]).
    pub fn refusal(&self) -> Option<StoreError> {
        match self.failed() {
            0 => None,
            FAILED_INCONSISTENT => Some(StoreError::corrupt(
                "the tree and the allocator disagree (a block to free was not in use); writes \
                 refused until the volume is reopened",
            )),
            _ => Some(StoreError::Failed),
        }
    }

    /// Refuse writes (and commits) until the volume is reopened because a block to free was
    /// not in use (the tree referenced a block the allocator holds free, or the shared state
    /// named one): a commit would make that state durable, and the block may be handed out
    /// again while the last commit still reaches it.
    pub fn refuse_inconsistent(&self) {
        self.word_at(FAILED)
            .compare_exchange(0, FAILED_INCONSISTENT, Ordering::AcqRel, Ordering::Acquire)
            .ok();
    }

    /// Mark the working tree changed since the last commit (a store only when it was not).
    #[inline]
    pub fn mark_dirty(&self) {
        if self.dirty() == 0 {
            self.set_dirty(1);
        }
    }

    /// The change stamp of `key` (see [`stamp_bucket`]): it moves after every published change
    /// of a key in its bucket, and before the old value's blocks can be reused, so a value
    /// location learned while the stamp read `s` stays valid for as long as it reads `s`.
    #[inline]
    pub fn change_stamp(&self, key: Key) -> u64 {
        self.word_at(CHANGE_STAMPS + stamp_bucket(key) * 8)
            .load(Ordering::SeqCst)
    }

    /// Move the stamps of every bucket in `mask` (caller holds the lock, after publishing).
    pub fn bump_change_stamps(&self, mask: &StampMask) {
        for (w, bits) in mask.0.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                let b = w as u64 * 64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                self.word_at(CHANGE_STAMPS + b * 8)
                    .fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Note that changes to the keys of the buckets in `mask`, and to `also` (bytes changed in
    /// place, which move no stamp), are published in working generation `gen` (caller holds
    /// their locks, after publishing). A bucket's word only grows.
    pub fn note_written(&self, mask: &StampMask, also: Option<Key>, gen: u64) {
        for (w, bits) in mask.0.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                self.note_written_bucket(w as u64 * 64 + u64::from(bits.trailing_zeros()), gen);
                bits &= bits - 1;
            }
        }
        if let Some(k) = also {
            self.note_written_key(k, gen);
        }
    }

    /// [`Header::note_written`] of one key's bucket alone.
    #[inline]
    pub fn note_written_key(&self, key: Key, gen: u64) {
        self.note_written_bucket(stamp_bucket(key), gen);
    }

    fn note_written_bucket(&self, b: u64, gen: u64) {
        let w = self.word_at(WRITE_GENS + b * 8);
        // Most writes of a generation find it noted already: no store, the line stays shared
        // between writers.
        if w.load(Ordering::Relaxed) < gen {
            w.fetch_max(gen, Ordering::AcqRel);
        }
    }

    /// The newest working generation a change to a key sharing `key`'s stamp bucket was
    /// published in (0: none since the header was built; an over-estimate when other keys
    /// share the bucket).
    pub fn written_gen(&self, key: Key) -> u64 {
        self.word_at(WRITE_GENS + stamp_bucket(key) * 8)
            .load(Ordering::Acquire)
    }

    /// Move every change stamp (the whole tree may have changed: rollback, a dead writer).
    pub fn bump_all_change_stamps(&self) {
        self.bump_shape_seq();
        for b in 0..STAMP_BUCKETS {
            self.word_at(CHANGE_STAMPS + b * 8)
                .fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Slot `i` of partition `p`'s recently freed blocks (empty unless its bit in `recent_mask`
    /// is set; a hint, never trusted: the bitmap decides).
    #[inline]
    pub fn recent_free(&self, p: u64, i: u64) -> &std::sync::atomic::AtomicU64 {
        self.region.atomic_u64(
            self.off
                + RECENT_FREES
                + ((p % PARTITIONS) * RECENT_PER_PARTITION + i % RECENT_PER_PARTITION) * 8,
        )
    }

    /// Which recently-freed slots a commit filled: bit `p * RECENT_PER_PARTITION + i` for slot
    /// `i` of partition `p` (see `recent_free`); a slot whose bit is clear is empty, whatever
    /// it holds.
    #[inline]
    pub fn recent_mask(&self) -> &std::sync::atomic::AtomicU64 {
        self.word_at(RECENT_MASK)
    }

    /// The words of writer partition `p`'s lock (see `volume_lock`): its holder, and the
    /// count of its sleeping waiters.
    #[inline]
    pub(crate) fn lock_words(&self, p: u64) -> (&AtomicU64, &AtomicU32) {
        let line = PARTITION_LINES + (p % PARTITIONS) * PARTITION_LINE;
        (
            self.word_at(line + LOCK_HOLDER),
            self.word32_at(line + LOCK_WAITERS),
        )
    }

    /// Partition `p`'s allocation cursor (a word index of the working bitmap).
    #[inline]
    pub fn part_hint(&self, p: u64) -> &std::sync::atomic::AtomicU64 {
        self.word_at(PARTITION_LINES + (p % PARTITIONS) * PARTITION_LINE + PART_HINT)
    }

    /// The shared allocation cursor (a word index of the working bitmap).
    #[inline]
    pub fn shared_hint(&self) -> &std::sync::atomic::AtomicU64 {
        self.word_at(ALLOC_HINT)
    }

    /// Whether a lock holder died and the repair that needs every lock is still due.
    pub fn repair_needed(&self) -> bool {
        self.word_at(REPAIR_NEEDED).load(Ordering::Acquire) != 0
    }

    /// The process backing the next growth's space ahead of need now, if one is (a hint
    /// between processes: a growth waits a while for it rather than allocate the same space
    /// beside it, see `Allocator::grow`).
    pub fn grow_ahead_pid(&self) -> Option<u32> {
        let v = self
            .region
            .atomic_u64(self.off + GROW_AHEAD_PID)
            .load(Ordering::Acquire);
        u32::try_from(v).ok().filter(|p| *p != 0)
    }

    /// Note that process `pid` backs space ahead now (`running`), or that it stopped (the note
    /// is cleared only if it is still `pid`'s).
    pub fn note_grow_ahead(&self, pid: u32, running: bool) {
        let w = self.word_at(GROW_AHEAD_PID);
        if running {
            w.store(u64::from(pid), Ordering::Release);
        } else {
            let _ = w.compare_exchange(u64::from(pid), 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Note (or clear) that the repair is due.
    pub fn set_repair_needed(&self, on: bool) {
        self.word_at(REPAIR_NEEDED)
            .store(u64::from(on), Ordering::Release);
    }

    /// Add to the blocks held only by snapshots, atomically (writers of several partitions).
    pub fn add_snapshot_held(&self, n: u64) {
        self.word_at(SNAPSHOT_HELD).fetch_add(n, Ordering::AcqRel);
    }

    /// Atomic view of a header word (for the pending-free range and count).
    pub fn word(&self, off: HeaderWord) -> &std::sync::atomic::AtomicU64 {
        self.region.atomic_u64(
            self.off
                + match off {
                    HeaderWord::Lo => PENDING_LO,
                    HeaderWord::Hi => PENDING_HI,
                    HeaderWord::Blocks => PENDING_BLOCKS,
                },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partitions of the first `regions` regions of the keys of high word `hi`.
    fn spread(hi: u64, regions: u64) -> u64 {
        (0..regions).fold(0, |m, r| {
            m | 1 << partition_of(Key::new(hi, r << REGION_BITS))
        })
    }

    #[test]
    fn a_region_is_one_partition_and_a_files_regions_take_different_ones() {
        for hi in [0, 1, 7, 1 << 40] {
            for r in 0..3u64 {
                let first = partition_of(Key::new(hi, r << REGION_BITS));
                let last = partition_of(Key::new(hi, ((r + 1) << REGION_BITS) - 1));
                assert_eq!(first, last, "one region, one partition");
            }
            // Two writers of the two halves of a file of two regions take different locks; a
            // file's regions take FILE_PARTITIONS partitions in all.
            assert_eq!(spread(hi, 2).count_ones(), 2);
            assert_eq!(
                spread(hi, 2 * FILE_PARTITIONS).count_ones(),
                FILE_PARTITIONS as u32
            );
        }
    }

    #[test]
    fn files_of_consecutive_inodes_take_disjoint_partitions() {
        for ino in 1..100u64 {
            assert_eq!(
                spread(ino, 2 * FILE_PARTITIONS) & spread(ino + 1, 2 * FILE_PARTITIONS),
                0,
                "inodes {ino} and next"
            );
        }
    }
}
