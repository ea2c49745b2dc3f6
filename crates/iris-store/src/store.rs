//! The public store: open/create a volume, then get/put/delete/scan/batch under the volume lock,
//! commit (explicit, grouped, or on a timer), snapshots, statistics and verification.
//!
//! Here: the options and value types, the writer locks (`Inner::lock` takes every partition,
//! `lock_partition` one), and the write paths that take them. Beside it: `open.rs` (create,
//! open, recover), `view.rs` (reads), `in_place.rs` (changes under one partition's lock),
//! `overwrite.rs` (several blocks under their partitions' locks), `prepared.rs` (blocks filled
//! before a transaction), `tx.rs` (transactions), `snapshot.rs`, `inspect.rs` (stats, shape,
//! verify, garbage), `hint.rs` (where this thread last found a key).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use iris_media::{LatencyModel, Media};

use crate::allocator::Allocator;
use crate::commit::{self, VolumeFacts};
use crate::error::{Result, StoreError};
use crate::header::{partition_mask, partition_of, Header, PARTITIONS};
use crate::key::Key;
use crate::layout::{Layout, MAX_BLOCK_SIZE};
use crate::node::{Node, Val};
use crate::recovery::{self};
use crate::region::Region;
use crate::tree::{Ctx, Parts, Txn};
use crate::undo::Undo;
use crate::volume_lock::{self, Acquired};

mod hint;
mod in_place;
mod inspect;
mod intent;
mod locations;
mod open;
mod overwrite;
mod prepared;
mod snapshot;
mod tx;
mod view;

pub use in_place::{Piece, MAX_PIECES};
pub use prepared::Prepared;
pub use snapshot::SnapshotView;
pub use tx::{Places, Tx};
pub use view::{KnownView, View, WriteMarks};

/// How to create a volume.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Block size in bytes: a power of two from 512 to 65536. Default 4096.
    pub block_size: u32,
    /// The most the volume may grow to (for a block device: ignored, its size rules).
    pub size_limit_bytes: u64,
    /// Bytes backed at creation (a growable file starts here and grows in steps).
    pub initial_bytes: u64,
    /// Largest value kept inside tree nodes; larger ones go to data blocks. Default: block / 4.
    pub inline_max: Option<u32>,
    /// Bytes of pending messages each internal node may buffer (the Bε-tree knob, a multiple of
    /// 8, at most half a block). 0, the default, gives a plain B+-tree.
    pub buffer_bytes: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            block_size: 4096,
            size_limit_bytes: 1 << 30,
            initial_bytes: 16 << 20,
            inline_max: None,
            buffer_bytes: 0,
        }
    }
}

/// How to open a volume.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Override the boot id (tests simulate a reboot by changing it). Default: the kernel's.
    pub boot_id: Option<u128>,
    /// Commit on this interval from a background thread. `None`: only explicit commits.
    pub commit_interval: Option<Duration>,
}

/// One operation of a batch.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    /// Insert or replace.
    Put(Key, &'a [u8]),
    /// Remove (absent keys are fine).
    Delete(Key),
}

/// Up to eight 8-byte words to overwrite in a value (see [`Store::patch_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Patch {
    words: [(usize, u64); 8],
    count: usize,
}

impl Patch {
    /// The words `f` chooses given `old`, checked to lie inside it.
    fn chosen(old: &[u8], f: impl FnOnce(&[u8], &mut Patch)) -> Result<Patch> {
        let mut patch = Patch::default();
        f(old, &mut patch);
        if patch.words().iter().any(|(off, _)| off + 8 > old.len()) {
            return Err(StoreError::Invalid(
                "patch past the end of the value".into(),
            ));
        }
        Ok(patch)
    }

    /// The words set so far.
    fn words(&self) -> &[(usize, u64)] {
        &self.words[..self.count]
    }

    /// Whether every word already holds its value in `old` (the patch would change nothing).
    fn holds_in(&self, old: &[u8]) -> bool {
        self.words().iter().all(|&(off, w)| {
            old.get(off..off + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .is_some_and(|b| u64::from_le_bytes(b) == w)
        })
    }

    /// Set the little-endian u64 at byte `offset` to `value`. At most eight words per patch;
    /// more are ignored (callers patch fixed records).
    pub fn set(&mut self, offset: usize, value: u64) {
        if let Some(slot) = self.words.get_mut(self.count) {
            *slot = (offset, value);
            self.count += 1;
        } else {
            debug_assert!(false, "more than eight words in one patch");
        }
    }
}

/// The type of an absent [`ThenPatch`]: `None::<NoPatch>` for a put without a patch.
pub type NoPatch = ThenPatch<fn(&[u8], bool, &mut Patch)>;

/// The patch [`Store::put_block_then_patch`] applies after its put, in the same hold of the lock.
pub struct ThenPatch<F> {
    /// The key whose value is patched (a file's inode).
    pub key: Key,
    /// Skip the patch when the put replaced a value and the change stamp of `key.hi` still
    /// reads this: the caller saw the value at that stamp and knows the patch would change
    /// nothing.
    pub unless_unchanged_since: Option<u64>,
    /// Chooses the words from the value it is given (the current one; it may be called more
    /// than once, when a first attempt has to be redone holding more locks); told whether the
    /// put replaced a value. A patch whose words already hold their values is not written.
    pub patch: F,
    /// The caller expects a sync of this write right after it (as under `fdatasync` after each
    /// write). With this set, the writes that can ([`Store::put_block_then_patch`],
    /// [`Store::put_sized_then_patch`], [`Store::insert_growing_then_patch`]) make themselves
    /// durable before they return, so that the sync finds nothing to do: on a volume with an
    /// intent log, when neither key has a change since the last commit the log does not hold,
    /// by persisting the value's block and a record of the write (see `intent`); otherwise by
    /// taking every lock at once (the last commit is likely recent and the key's leaf
    /// committed, so the write would copy the leaf's path under every lock anyway) and
    /// committing before releasing them. Others ignore it. A hint: making a write durable early
    /// is always safe; a failed commit is left for the sync to report.
    pub sync_expected: bool,
    /// Write nothing, and fail with [`StoreError::Changed`], unless the change stamp of `key`
    /// (see [`Store::change_stamp`]: shared with other keys, so a change of one of them fails
    /// the write too) still reads this under the locks the write holds: the caller chose where to write from
    /// the patched value as it was at that stamp (an `O_APPEND` write, at the size it read).
    /// Checked before anything changes, holding the patched key's partition lock (or every
    /// lock).
    pub only_if_unchanged_since: Option<u64>,
}

/// [`StoreError::Changed`] when `then` is conditional and its key's change stamp moved (the
/// caller holds the key's partition lock, or every lock).
fn check_then<F>(inner: &Inner, then: Option<&ThenPatch<F>>) -> Result<()> {
    match then.and_then(|t| t.only_if_unchanged_since.map(|s| (t.key, s))) {
        Some((key, s)) if inner.header.change_stamp(key) != s => Err(StoreError::Changed),
        _ => Ok(()),
    }
}

/// What [`Store::put_block_then_patch`] did.
#[derive(Clone, Copy, Debug)]
pub struct BlockPut {
    /// Whether the patched key existed (true when there was nothing to patch).
    pub found: bool,
    /// Whether the put replaced a value (rather than adding a key).
    pub replaced: bool,
    /// Whether a patch was applied.
    pub patched: bool,
    /// The change stamp of the put key right after the put and where the value now lives;
    /// `None` when the value went inline.
    pub located: Option<(u64, BlockRef)>,
    /// Whether this put itself moved the put key's change stamp (the value got a new block or
    /// length) before `located`'s stamp was read under its locks: a caller whose map of the
    /// key's neighbours was current at the stamp just before `located`'s may keep every other
    /// entry (see `FileCache::carry` in iris-fs). False for a write of bytes where they were.
    pub moved: bool,
    /// The change stamp of the patched key right after the write, when at that stamp the key
    /// holds exactly the value the caller's patch last saw, patched if `patched` (or, if the
    /// patch was skipped unseen, the value it saw at `unless_unchanged_since`): the caller may
    /// cache that value tagged with this stamp.
    pub patched_stamp: Option<u64>,
}

/// The key a patch changes and its change stamp before (see `Store::finish_in_place`).
type PatchStart = Option<(Key, u64)>;

/// Where [`ThenPatch`] goes, holding one partition's lock.
enum PatchPlan {
    /// Nothing to write: skipped, or every word already holds its value.
    Nothing,
    /// Words to write in place into the patched key's inline value.
    InPlace(PlannedPatch),
    /// Only holding every lock.
    Escalate,
}

/// A patch planned in place: `patch`'s words go into the inline value of `key` at region
/// offset `value_off`, in a leaf private to the working tree (checked under the locks the
/// planner holds until the patch is made). No spot is kept: a plan is moved on every write,
/// and a boxed spot cost an allocation and a free per patched write.
struct PlannedPatch {
    key: Key,
    value_off: u64,
    patch: Patch,
}

/// Most bytes [`Store::prefetch_bytes`] asks for: the first lines of a read; the hardware's
/// own prefetchers follow the copy from there.
pub const PREFETCH_BYTES: usize = 1024;

/// Where a caller last saw a key's out-of-line value (see [`Store::write_in_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    /// The key's change stamp when the value was seen there.
    pub stamp: u64,
    /// Where it was.
    pub at: BlockRef,
}

/// Where an out-of-line value lives: valid for as long as the change stamp of its key's high
/// word reads what it read when the location was learned (see [`Store::change_stamp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    block: u64,
    len: u32,
}

/// Bits of a packed [`BlockRef`] that hold the length (values are at most 64 KiB).
const REF_LEN_BITS: u32 = 17;

impl BlockRef {
    /// The location as one non-zero word (for caches made of atomic words).
    pub fn pack(self) -> u64 {
        (self.block << REF_LEN_BITS) | u64::from(self.len)
    }

    /// A location from [`BlockRef::pack`]; `None` for 0 (an empty cache word).
    pub fn unpack(word: u64) -> Option<BlockRef> {
        (word != 0).then_some(BlockRef {
            block: word >> REF_LEN_BITS,
            len: (word & ((1 << REF_LEN_BITS) - 1)) as u32,
        })
    }

    /// The location of a value of `len` bytes at volume block `block`, as a caller guesses it
    /// (for [`Store::prefetch_bytes`]: nothing reads through a guessed location).
    pub fn new(block: u64, len: u32) -> BlockRef {
        BlockRef { block, len }
    }

    /// The volume block the value starts at.
    pub fn block(self) -> u64 {
        self.block
    }

    /// Length of the value in bytes.
    pub fn len(self) -> usize {
        self.len as usize
    }

    /// Whether the value is empty.
    pub fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// A value found by [`View::get_located`].
#[derive(Clone, Copy, Debug)]
pub enum Located<'a> {
    /// A small value, in a tree node: its bytes (valid for the read section only).
    Inline(&'a [u8]),
    /// An out-of-line value: its data block.
    Block(BlockRef),
}

/// Counters and sizes, cheap to read (no tree walk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks the volume may grow to.
    pub max_blocks: u64,
    /// Blocks backed now.
    pub backed_blocks: u64,
    /// Blocks in use (metadata, tree, data, and blocks waiting for the next commit).
    pub used_blocks: u64,
    /// Blocks that can still be allocated (including by growing).
    pub free_blocks: u64,
    /// Of the free blocks, those held back for transactions that free space (see
    /// [`Tx::use_reserve`]): ordinary writes fail with `NoSpace` before they take them.
    pub reserve_blocks: u64,
    /// Blocks freed by the working tree, reusable after the next commit.
    pub pending_free_blocks: u64,
    /// Blocks kept only by snapshots.
    pub snapshot_held_blocks: u64,
    /// Generation of the last commit.
    pub committed_generation: u64,
    /// Commits made since the volume was last recovered.
    pub commits: u64,
    /// Bytes persisted by those commits.
    pub bytes_persisted: u64,
    /// Wall-clock time of the last commit, ns since the epoch.
    pub last_commit_ns: u64,
    /// Levels in the working tree (0 when empty).
    pub tree_height: u32,
    /// Whether uncommitted changes exist.
    pub dirty: bool,
    /// 128-byte slots of the intent log (0: the volume has none, format 7): a record naming a
    /// block takes one, a data record one for its head and one per 120 bytes it carries.
    pub log_capacity: u64,
    /// Slots taken since the last commit (synced writes it does not hold yet; a full log makes
    /// the next sync commit).
    pub log_records: u64,
}

/// Shape of a tree, from a full walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeShape {
    /// Levels (0 when empty).
    pub height: u32,
    /// Leaf nodes.
    pub leaf_nodes: u64,
    /// Internal nodes.
    pub inner_nodes: u64,
    /// Key/value entries.
    pub entries: u64,
    /// Out-of-line data blocks.
    pub data_blocks: u64,
    /// Messages waiting in internal nodes' buffers (Bε volumes).
    pub messages: u64,
}

/// What `verify` found besides corruption (which is an error).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Blocks reachable from some root.
    pub reachable_blocks: u64,
    /// Blocks marked used that nothing reaches and no commit is waiting to free (leaks).
    pub leaked_blocks: u64,
    /// The first few leaked block numbers (to look at what they hold).
    pub leaked_sample: Vec<u64>,
}

/// Copies of a value a get makes while changes in place keep overlapping them before it waits
/// for the writers (or, inside another read of this thread, which a waiting writer may be
/// waiting for, returns the last copy as it is).
const RETRIES_BEFORE_WAIT: u32 = 1000;

thread_local! {
    /// Read sections this thread is inside (a get must not wait for a writer in one).
    static READ_DEPTH: Cell<u32> = const { Cell::new(0) };
}

impl Drop for ReadSection<'_> {
    fn drop(&mut self) {
        READ_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The outcome of one attempt of [`Store::get`].
enum GetOnce {
    Done(Option<usize>),
    /// A change in place overlapped the copy, or a writer is mid-change: read again.
    Again,
}

pub(crate) struct Inner {
    media: Box<dyn Media>,
    region: Region,
    layout: Layout,
    header: Header,
    alloc: Allocator,
    facts: VolumeFacts,
    latency: LatencyModel,
    /// Undo records of in-place small writes.
    undo: Undo,
    failed: AtomicBool,
    /// The handles above (and the buffer knob) as tree operations take them (see [`Ctx`]).
    parts: Parts,
    /// Whether this open rebuilt the working state from the superblocks (first open after a
    /// reboot or power loss).
    recovered: bool,
    /// Where this process last found values `get` copied (see `locations`).
    locations: locations::Locations,
    /// This store, for the threads it starts (see [`Inner::grow_ahead_in_background`]).
    me: Weak<Inner>,
    /// The process (`readers::me() >> 32`) whose thread is backing the next growth ahead of
    /// need, 0 when none is: one at a time per process, and a child forked meanwhile starts its
    /// own.
    growing: AtomicU64,
    /// That thread, with the process that started it, for the store's close to wait for.
    grow_thread: std::sync::Mutex<Option<(u64, std::thread::JoinHandle<()>)>>,
    /// Set when the store closes: no more growth ahead starts.
    closing: AtomicBool,
}

/// A volume opened as a key-value store. Cheap to share between threads (`&Store` is enough).
pub struct Store {
    inner: Arc<Inner>,
    timer_stop: Arc<AtomicBool>,
    timer: Option<std::thread::JoinHandle<()>>,
}

/// A read in progress: a reader slot, or (all slots busy) the volume lock.
enum ReadSection<'a> {
    Slot(#[allow(dead_code)] crate::readers::ReadGuard),
    Locked(#[allow(dead_code)] Guard<'a>),
}

/// The partition locks an in-place change holds (released on drop).
enum InPlaceLocks<'a> {
    /// The changed key's partition only.
    One(#[allow(dead_code)] Guard<'a>),
    /// Several partitions (the changed key's and the patched key's), indexed by partition
    /// (boxed: the common `One` is moved on every write, and rarely needs room for eight).
    Many(#[allow(dead_code)] Box<[Option<Guard<'a>>; PARTITIONS as usize]>),
}

/// What an attempt at an in-place change under some partitions' locks came to.
enum InPlaceOutcome {
    /// Done.
    Done(BlockPut),
    /// Nothing done: the patch needs its key's partition, which the attempt did not hold.
    NeedsPatchPartition,
    /// Nothing done: the change needs these partitions too (an append's leaf's last key's).
    NeedsPartitions(u64),
    /// Nothing done: the change needs every lock (or does not qualify at all).
    No,
    /// Nothing done: the write starts at or past the value's end (an append's case).
    PastEnd,
}

/// Partitions an in-place change of `key` with the patch `then` takes at first: the key's, and
/// the patched key's too when the caller knows the patch will be written (it has no stamp to
/// skip it by), so that a write that moves a file's times does not first try without the
/// inode's partition, fail, and take every lock (which also moves the shape sequence that every
/// thread's remembered leaves are tagged with).
fn in_place_partitions<F>(key: Key, then: &Option<ThenPatch<F>>) -> (u64, u64) {
    let patch_bit = then.as_ref().map_or(0, |t| 1 << partition_of(t.key));
    let needs_patch = then
        .as_ref()
        .is_some_and(|t| t.unless_unchanged_since.is_none());
    let held = (1 << partition_of(key)) | if needs_patch { patch_bit } else { 0 };
    (held, patch_bit)
}

/// Holds writer locks: every partition's (the volume lock) or one partition's. Releases them on
/// drop.
struct Guard<'a> {
    inner: &'a Inner,
    /// `Some(p)`: only partition `p`'s lock.
    only: Option<u64>,
}

impl Guard<'_> {
    /// Whether this guard holds every lock.
    fn is_all(&self) -> bool {
        self.only.is_none()
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        match self.only {
            Some(p) => volume_lock::unlock(&self.inner.header, p),
            None => {
                for p in (0..PARTITIONS).rev() {
                    volume_lock::unlock(&self.inner.header, p);
                }
                // (Growth holds every lock: a growth in this hold may have asked for the next
                // one's space ahead of need.)
                if self.inner.media.wants_grow_ahead() {
                    self.inner.grow_ahead_in_background();
                }
            }
        }
    }
}

impl Inner {
    /// Back the volume's next growth ahead of need in a thread of its own (see
    /// `Media::grow_ahead`): allocating and mapping the space costs about a microsecond per
    /// 4 KiB page on a RAM drive here, which a growth would otherwise spend holding every lock.
    #[cold]
    fn grow_ahead_in_background(&self) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        let pid = crate::readers::me() >> 32;
        let was = self.growing.load(Ordering::Acquire);
        if was == pid
            || self
                .growing
                .compare_exchange(was, pid, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return; // this process's grower runs already
        }
        let me = self.me.clone();
        let started = std::thread::Builder::new()
            .name("iris-grow".into())
            .spawn(move || {
                let Some(inner) = me.upgrade() else { return };
                loop {
                    while inner.media.wants_grow_ahead() && !inner.closing.load(Ordering::Acquire) {
                        // Other processes' growths wait for this one (see `Allocator::grow`).
                        let me = std::process::id();
                        inner.header.note_grow_ahead(me, true);
                        inner.media.grow_ahead();
                        inner.header.note_grow_ahead(me, false);
                    }
                    inner.growing.store(0, Ordering::Release);
                    // A growth that asked while this thread was finishing found it running:
                    // its request is this thread's to serve.
                    if inner.closing.load(Ordering::Acquire)
                        || !inner.media.wants_grow_ahead()
                        || inner
                            .growing
                            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                    {
                        return;
                    }
                }
            });
        match started {
            // (The handle of an earlier thread, finished by now, is dropped: detached.)
            Ok(h) => match self.grow_thread.try_lock() {
                Ok(mut t) => *t = Some((pid, h)),
                Err(_) => drop(h),
            },
            Err(_) => self.growing.store(0, Ordering::Release), // the growth will do it
        }
    }

    /// Wait for this process's thread growing the volume ahead of need, if one runs (it holds
    /// the store open: its mapping and its lock on the volume).
    fn wait_for_grower(&self) {
        self.closing.store(true, Ordering::Release);
        // Tried, not waited for: a child forked while a thread of its parent held this lock
        // (for the instant of a spawn) would wait for ever; a spawn in this process lets go at
        // once.
        let mut t = None;
        for _ in 0..1000 {
            match self.grow_thread.try_lock() {
                Ok(mut g) => {
                    t = g.take();
                    break;
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    t = p.into_inner().take();
                    break;
                }
                Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
        if let Some((pid, h)) = t {
            if pid == crate::readers::me() >> 32 {
                let _ = h.join();
            } else {
                // The thread of the parent this process was forked from: not ours to join or
                // detach.
                std::mem::forget(h);
            }
        }
    }

    fn cx(&self) -> Ctx<'_> {
        Ctx::new(&self.parts, self.media.as_ref())
    }

    /// Take every partition's lock, in order: the volume lock, for anything that changes the
    /// tree's shape, commits, or walks it whole.
    fn lock(&self) -> Result<Guard<'_>> {
        let mut died = false;
        for p in 0..PARTITIONS {
            match volume_lock::lock(&self.header, p) {
                Ok(Acquired::Clean) => {}
                Ok(Acquired::OwnerDied) => died = true,
                Err(e) => {
                    for q in (0..p).rev() {
                        volume_lock::unlock(&self.header, q);
                    }
                    return Err(e);
                }
            }
        }
        let guard = Guard {
            inner: self,
            only: None,
        };
        if died || self.header.repair_needed() {
            self.header.set_repair_needed(true);
            // A holder died mid-operation. The tree is consistent (publish by one store); it may
            // have published without moving the change stamps, so move them all first, then
            // finish a half-done commit and reclaim what the dead holder had allocated.
            self.header.bump_all_change_stamps();
            self.undo.roll_back();
            self.header.settle_write_seqs();
            let cx = self.cx();
            commit::reconcile(&cx).and_then(|_| recovery::collect(&cx))?;
            self.header.set_repair_needed(false);
        }
        Ok(guard)
    }

    /// Where `key` is, for a change in place by `txn`, which holds the key's partition lock:
    /// from the leaf this thread last found it in while the shape has not moved since, or (in a
    /// B+-tree) from the leaf it last found a neighbour in, else from the root (and remembered).
    fn locate_in_place(&self, txn: &Txn<'_>, key: Key) -> Result<crate::tree::Spot> {
        let seq = self.header.shape_seq();
        let volume = self.facts.volume_id;
        if let Some((leaf, slot)) = hint::lookup(volume, key, seq) {
            if let Ok(node) = txn.cx().load(leaf, Some(0)) {
                if slot < node.count && node.key(slot) == key {
                    return Ok(crate::tree::Spot::from_leaf(node, slot));
                }
            }
        }
        if self.facts.buffer_bytes == 0 {
            if let Some((leaf, guess)) = hint::lookup_run(volume, key, seq) {
                if let Ok(node) = txn.cx().load(leaf, Some(0)) {
                    if let Ok(slot) = node.search_from(key, guess) {
                        hint::remember(volume, key, seq, leaf, slot);
                        return Ok(crate::tree::Spot::from_leaf(node, slot));
                    }
                }
            }
        }
        let spot = txn.locate(key)?;
        if let Some((leaf, slot)) = spot.found_in_leaf() {
            hint::remember(volume, key, seq, leaf, slot);
        }
        Ok(spot)
    }

    /// Start loading the lines of the leaf (header and slot) where this thread's hints say
    /// `key` lives, so that the misses overlap work done before `locate_in_place` (a hint:
    /// nothing is read, and a stale hint costs only a wasted prefetch).
    #[inline]
    fn prefetch_spot(&self, key: Key) {
        let seq = self.header.shape_seq();
        let volume = self.facts.volume_id;
        let spot = hint::lookup(volume, key, seq).or_else(|| {
            (self.facts.buffer_bytes == 0)
                .then(|| hint::lookup_run(volume, key, seq))
                .flatten()
        });
        if let Some((leaf, slot)) = spot {
            if leaf < self.layout.max_blocks {
                let at = self.layout.offset(leaf);
                self.region.prefetch(at);
                let slot_at = crate::node::leaf_slot_offset(slot).min(self.layout.bs() - 64);
                self.region.prefetch(at + slot_at);
            }
        }
    }

    /// While a writer waits for `key`'s partition lock: find the key's leaf and slot without a
    /// lock, as a reader does, and leave them in this thread's hints, so that the walk's cache
    /// misses fall in the wait instead of the hold (shorter holds, fewer waits for writers of
    /// other keys) and `locate_in_place` under the lock goes straight there. B+-trees only (in a Bε-tree a
    /// message above a leaf may shadow its value). A hint: the shape sequence read first tags
    /// it, so a tree that changes meanwhile leaves it unused, and the lock holder checks it.
    fn warm_spot(&self, key: Key) {
        if self.facts.buffer_bytes != 0 {
            return;
        }
        let seq = self.header.shape_seq();
        let volume = self.facts.volume_id;
        if hint::lookup(volume, key, seq).is_some() {
            return;
        }
        let Some(_reading) = self.alloc.readers().enter() else {
            return; // every reader slot busy: the locked walk will do
        };
        if let Ok(Some((leaf, slot))) = self.cx().locate_leaf(self.header.working_root(), key) {
            hint::remember(volume, key, seq, leaf, slot);
        }
    }

    /// Take partition `p`'s lock only: enough for in-place changes of existing values of keys
    /// in that partition (see `Txn::begin_in`). Falls back to every lock when a repair is due.
    fn lock_partition(&self, p: u64) -> Result<Guard<'_>> {
        let got = volume_lock::lock(&self.header, p)?;
        self.partition_guard(p, got)
    }

    /// [`Inner::lock_partition`] for a change of `key`: when another holds the lock, the
    /// wait walks to `key`'s leaf first (`warm_spot`), so that this writer's own hold is short.
    fn lock_partition_for(&self, p: u64, key: Key) -> Result<Guard<'_>> {
        if let Some(g) = self.try_lock_partition(p) {
            return g;
        }
        self.warm_spot(key);
        self.lock_partition(p)
    }

    /// The locks an in-place change of `key` (in partition `p`) takes: `p`'s alone when `held`
    /// is just that (tried first, see [`Inner::lock_partition_for`]), else every partition in
    /// `held`, in ascending order. `None` (none held) when a repair is due: the caller goes the
    /// way that takes every lock.
    fn lock_in_place(&self, p: u64, key: Key, held: u64) -> Result<Option<InPlaceLocks<'_>>> {
        if held == 1 << p {
            let g = self.lock_partition_for(p, key)?;
            return Ok((!g.is_all()).then_some(InPlaceLocks::One(g)));
        }
        Ok(overwrite::lock_partitions(self, held)?.map(|g| InPlaceLocks::Many(Box::new(g))))
    }

    /// Run `attempt(held, then)` under the locks of the partitions in `held`: those
    /// [`in_place_partitions`] names, and once more with the patched key's too when the first
    /// attempt says the patch needs it. The locks are released when this returns; `No` when
    /// none could be taken (a repair is due).
    fn in_place<F>(
        &self,
        p: u64,
        key: Key,
        then: &mut Option<ThenPatch<F>>,
        mut attempt: impl FnMut(u64, &mut Option<ThenPatch<F>>) -> Result<InPlaceOutcome>,
    ) -> Result<InPlaceOutcome> {
        let (mut held, patch_bit) = in_place_partitions(key, then);
        loop {
            let Some(_locks) = self.lock_in_place(p, key, held)? else {
                return Ok(InPlaceOutcome::No);
            };
            match attempt(held, then)? {
                InPlaceOutcome::NeedsPatchPartition if held & patch_bit == 0 => held |= patch_bit,
                InPlaceOutcome::NeedsPartitions(more) if held | more != held => held |= more,
                outcome => return Ok(outcome),
            }
        }
    }

    /// [`Inner::lock_partition`] if the lock is free now; `None` (nothing held) if not.
    fn try_lock_partition(&self, p: u64) -> Option<Result<Guard<'_>>> {
        volume_lock::try_lock(&self.header, p).map(|got| self.partition_guard(p, got))
    }

    /// The guard of partition `p`'s lock, just acquired as `got`.
    fn partition_guard(&self, p: u64, got: Acquired) -> Result<Guard<'_>> {
        match got {
            Acquired::Clean if !self.header.repair_needed() => Ok(Guard {
                inner: self,
                only: Some(p),
            }),
            Acquired::Clean => {
                volume_lock::unlock(&self.header, p);
                self.lock()
            }
            Acquired::OwnerDied => {
                // The repair needs every lock, taken in order: hand this one back, marked.
                self.header.set_repair_needed(true);
                volume_lock::unlock(&self.header, p);
                self.lock()
            }
        }
    }

    /// Inside a read section: the bytes of `key`'s value where this process last found it
    /// (see `locations`), if they still are its value: its change stamp reads what it read
    /// then, with no change in place of its partition begun or under way meanwhile. The
    /// section keeps the block from reuse while the caller holds the bytes.
    #[inline]
    fn remembered_in_section(&self, key: Key) -> Option<&[u8]> {
        let (stamp, at) = self.locations.get(key)?;
        let marks = self.in_place_marks(std::iter::once(key))?;
        if self.header.change_stamp(key) != stamp || !self.unchanged_since(&marks) {
            return None;
        }
        self.block_bytes(at).ok()
    }

    /// Enter a lock-free read section (see `readers`), or take the lock if the reader table is
    /// full. Either keeps every block reachable from the working root from being reused.
    fn read_section(&self) -> Result<ReadSection<'_>> {
        let section = match self.alloc.readers().enter() {
            Some(g) => ReadSection::Slot(g),
            None => ReadSection::Locked(self.lock()?),
        };
        READ_DEPTH.with(|d| d.set(d.get() + 1));
        Ok(section)
    }

    fn check_writable(&self) -> Result<()> {
        if let Some(e) = self.header.refusal() {
            return Err(e);
        }
        if self.failed.load(Ordering::Relaxed) {
            return Err(StoreError::Failed);
        }
        Ok(())
    }

    fn commit_locked(&self) -> Result<u64> {
        self.alloc.reap_dead_writers();
        let r = commit::commit(&self.cx(), &self.facts);
        if let Err(StoreError::Media(_) | StoreError::Failed) = &r {
            self.failed.store(true, Ordering::Relaxed);
        }
        r
    }
}

thread_local! {
    /// The partition whose share of the free space this thread allocates from first: where its
    /// last allocation found the lock free (see [`home_share`]), and the thread's ids when it
    /// was chosen (a child forked by this thread starts afresh).
    static HOME_SHARE: Cell<(u64, u64)> = const { Cell::new((0, u64::MAX)) };
}

/// The partition whose share of the free space (lock, cursor, counters, in-flight slots,
/// bitmap words) this thread allocates from first. A thread that keeps to one share keeps those
/// lines in its own cache, and so do the frees of blocks it allocated there; the partition of
/// the written key moves with every 32 MiB region of a file, so two writers allocating by it
/// would pass every line back and forth. Chosen from the thread's ids at first, then wherever
/// the thread last found a lock free, so writers spread over the shares by themselves.
pub(crate) fn home_share() -> u64 {
    let me = crate::readers::me();
    HOME_SHARE.with(|h| {
        let (ids, s) = h.get();
        if ids == me && s < PARTITIONS {
            return s;
        }
        let s = (me.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % PARTITIONS;
        h.set((me, s));
        s
    })
}

/// This thread allocated from partition `p`'s share (see [`home_share`]).
pub(crate) fn set_home_share(p: u64) {
    let me = crate::readers::me();
    HOME_SHARE.with(|h| h.set((me, p)));
}

/// The kernel's boot id, as a number.
pub fn kernel_boot_id() -> u128 {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| u128::from_str_radix(&s.trim().replace('-', ""), 16).ok())
        .unwrap_or(0)
}

impl Store {
    /// Commit every `interval` from a background thread while there are changes.
    pub fn start_commit_timer(&mut self, interval: Duration) {
        if self.timer.is_some() {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let stop = self.timer_stop.clone();
        let handle = std::thread::Builder::new()
            .name("iris-commit".into())
            .spawn(move || commit_timer(weak, stop, interval));
        self.timer = handle.ok();
    }

    /// Give the volume's backed bytes the medium's best page size now (huge pages on a RAM
    /// drive: see `Media::settle_pages`), which the commit timer otherwise does in the
    /// background. The first time it took 2-7 ms per 2 MiB here; the bytes do not change.
    pub fn settle_pages(&self) {
        self.inner.media.settle_pages();
    }

    /// Whether opening rebuilt the working state from the last commit (after a reboot or power
    /// loss): no other process can be using the volume, and in-memory-only state is gone.
    pub fn recovered(&self) -> bool {
        self.inner.recovered
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.inner.layout.block_size
    }

    /// Largest value stored inline in nodes.
    pub fn inline_max(&self) -> u32 {
        self.inner.facts.inline_max
    }

    /// Bytes each internal node may buffer as pending messages (0: a plain B+-tree).
    pub fn buffer_bytes(&self) -> u32 {
        self.inner.facts.buffer_bytes
    }

    /// The volume's id (stable across opens; a file layer can use it as st_dev).
    pub fn volume_id(&self) -> u64 {
        self.inner.facts.volume_id
    }

    /// Copy the value of `key` into `buf` (as much as fits); returns the value's full length.
    /// An out-of-line value this process found before is copied from where it was, without a
    /// read section or a walk down the tree, and the copy counts only if the key's change stamp
    /// and its partition's write marks read the same afterwards (see `locations`); else, and
    /// the first time, the tree says where it is. Either way a copy that a change in place of
    /// an out-of-line value overlapped (its partition's write marks moved) is made again; after
    /// `RETRIES_BEFORE_WAIT` copies the get waits for the writers, unless it runs inside another
    /// read of this thread (a writer may be waiting for that one): then it returns the last
    /// copy as it is. Not covered: an inline value patched word by word.
    pub fn get(&self, key: Key, buf: &mut [u8]) -> Result<Option<usize>> {
        let inner = &*self.inner;
        let mut attempt = 0u32;
        loop {
            if let Some(len) = self.get_remembered(key, buf) {
                return Ok(Some(len));
            }
            let nested = READ_DEPTH.with(|d| d.get() > 0);
            if attempt >= RETRIES_BEFORE_WAIT && !nested {
                // Writers keep overlapping the copies (or one died mid-change): wait for them
                // (their locks; which repairs a dead one), then copy again.
                self.wait_for_writers(std::iter::once(key))?;
            } else if attempt > 0 {
                std::thread::yield_now();
            }
            let last = attempt >= RETRIES_BEFORE_WAIT && nested;
            let got = self.read(|view| {
                // Read before the lookup (the view reads its root at its first lookup): a
                // location remembered with it is at least as new as the stamp.
                let stamp = view.change_stamp(key);
                let marks = view.in_place_marks(std::iter::once(key));
                if marks.is_none() && !last {
                    return Ok(GetOnce::Again); // a writer is mid-change: read after it
                }
                let (bytes, at) = match view.get_located(key)? {
                    None => return Ok(GetOnce::Done(None)),
                    Some(Located::Inline(bytes)) => (bytes, None),
                    Some(Located::Block(at)) => (view.block_bytes(at)?, Some(at)),
                };
                let n = bytes.len().min(buf.len());
                crate::copy::copy_bytes(&mut buf[..n], &bytes[..n]);
                let whole = marks.is_some_and(|m| view.unchanged_since(&m));
                if !whole && !last {
                    return Ok(GetOnce::Again); // a change in place overlapped the copy
                }
                if let (Some(at), true) = (at, whole) {
                    inner.locations.put(key, stamp, at);
                }
                Ok(GetOnce::Done(Some(bytes.len())))
            })?;
            if let GetOnce::Done(len) = got {
                return Ok(len);
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// [`Store::get`] from where this process last found the value, if it knows and the value
    /// is still there, whole (see `locations`).
    #[inline]
    fn get_remembered(&self, key: Key, buf: &mut [u8]) -> Option<usize> {
        let inner = &*self.inner;
        let hint = inner.locations.hint(key)?;
        if let Some(at) = hint.at {
            if let Some(whole) = buf.get_mut(..at.len()) {
                if let Some(len) = self.get_hinted(key, hint, at, whole) {
                    return Some(len);
                }
            }
        }
        let (stamp, at) = inner.locations.get_hinted(hint, key)?;
        // The value's first lines start on their way while the stamp and marks are checked.
        self.prefetch_bytes(at, 0, buf.len());
        self.read_known(|v| {
            if v.change_stamp(key) != stamp {
                return None;
            }
            let marks = v.in_place_marks(std::iter::once(key))?;
            let bytes = v.block_bytes(at).ok()?;
            let n = bytes.len().min(buf.len());
            crate::copy::copy_bytes(&mut buf[..n], &bytes[..n]);
            (v.unchanged_since(&marks) && v.change_stamp(key) == stamp).then_some(bytes.len())
        })
    }

    /// [`Store::get_remembered`] of the whole block `at` that `hint` names (`buf` is as long),
    /// copied before the hint's slot is known: the slot's load from memory overlaps the copy's
    /// (no byte of the copy waits for it), and the copy counts only if, afterwards, the slot
    /// names `at` for `key` under the stamp read before the copy and still read after it. May
    /// write `buf` and then answer `None`.
    #[inline]
    fn get_hinted(
        &self,
        key: Key,
        hint: locations::Hint,
        at: BlockRef,
        buf: &mut [u8],
    ) -> Option<usize> {
        let locations = &self.inner.locations;
        // Every line of the block on its way at once (the copy takes them all), then the slot.
        self.prefetch_up_to(at, 0, at.len());
        locations.prefetch(hint);
        self.read_known(|v| {
            let stamp = v.change_stamp(key);
            let marks = v.in_place_marks(std::iter::once(key))?;
            let bytes = v.block_bytes(at).ok()?;
            crate::copy::copy_bytes(buf, bytes);
            (v.unchanged_since(&marks)
                && v.change_stamp(key) == stamp
                && locations.get_hinted(hint, key) == Some((stamp, at)))
            .then_some(bytes.len())
        })
    }

    /// Call `f` with the value of `key` in place (no copy), without taking the volume lock. `f`
    /// must not write to this store (a write waits for readers, `f` among them). A value this
    /// process found before is served from where it was found, without a walk down the tree,
    /// while its change stamp and write marks say it is still there (see `locations`).
    pub fn get_with<R>(&self, key: Key, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let inner = &*self.inner;
        let _r = inner.read_section()?;
        if let Some(bytes) = inner.remembered_in_section(key) {
            return Ok(Some(f(bytes)));
        }
        // Read before the lookup, as `get` does: a location remembered with them is at least
        // as new as the stamp, and none is remembered if a change in place overlapped.
        let stamp = inner.header.change_stamp(key);
        let marks = inner.in_place_marks(std::iter::once(key));
        let cx = inner.cx();
        match cx.lookup(inner.header.working_root(), key)? {
            None => Ok(None),
            Some(v) => {
                if let Val::Block { block, len, .. } = v {
                    inner.latency.on_read(1);
                    if marks.is_some_and(|m| inner.unchanged_since(&m)) {
                        inner.locations.put(key, stamp, BlockRef { block, len });
                    }
                }
                Ok(Some(f(Node::value_bytes(&inner.region, &inner.layout, v))))
            }
        }
    }

    /// Insert or replace `key` with `value` (at most one block).
    pub fn put(&self, key: Key, value: &[u8]) -> Result<()> {
        if value.len() > self.inner.facts.inline_max as usize {
            // Out of line: copy into the (cold, fresh) data block outside the lock, with
            // streaming stores that skip reading its lines first.
            return self.put_block(key, value.len(), |out| {
                crate::stream::copy_streaming(out, value)
            });
        }
        self.put_with(key, value.len(), |_, out| out.copy_from_slice(value))
    }

    /// Insert or replace `key` with a value of `len` bytes that `fill` writes, given the old value
    /// (for read-modify-write of part of a block without a second lookup or copy).
    pub fn put_with(
        &self,
        key: Key,
        len: usize,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
    ) -> Result<()> {
        self.put_sized(key, |_| len, fill)
    }

    /// Like [`Store::put_with`], the new length chosen from the old value's (`None` if absent).
    pub fn put_sized(
        &self,
        key: Key,
        len_of: impl Fn(Option<usize>) -> usize,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
    ) -> Result<()> {
        self.put_sized_then_patch(key, len_of, fill, None::<NoPatch>)
            .map(|_| ())
    }

    /// [`Store::put_sized`], then the patch `then` describes in the same hold of every lock
    /// (skipped as [`ThenPatch`] says): a partial write of a block, with its file's size and
    /// times. `found` is false when the patched key is absent.
    pub fn put_sized_then_patch(
        &self,
        key: Key,
        len_of: impl Fn(Option<usize>) -> usize,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<BlockPut> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let mut fill = Some(fill);
        let mut then = then;
        // A sync follows and the value keeps its length (a write inside a block): into the
        // intent log under the partitions' locks when it may (see `intent`).
        if then
            .as_ref()
            .is_some_and(|t| t.sync_expected && t.only_if_unchanged_since.is_none())
            && inner.header.log_area().is_some()
        {
            if let Some(put) = self.rewrite_logged(key, &len_of, &mut fill, &mut then)? {
                return Ok(put);
            }
        }
        let mut len = None;
        for attempt in 0..2 {
            let g = inner.lock()?;
            check_then(inner, then.as_ref())?;
            let cx = inner.cx();
            let stamp_before = then.as_ref().map(|t| inner.header.change_stamp(t.key));
            // A sync follows: into the intent log instead of a commit, if the value goes out
            // of line and the log may take it (see `intent`).
            let loggable = then
                .as_ref()
                .is_some_and(|t| t.sync_expected && inner.log_room(key, t.key));
            let mut txn = Txn::begin(cx, false);
            let mut replaced = false;
            let r = (|| {
                let spot = txn.locate(key)?;
                let old = txn.value_at(&spot)?;
                replaced = old.is_some();
                let old_bytes = old.map(|v| Node::value_bytes(&inner.region, &inner.layout, v));
                let len = match len {
                    Some(l) => l,
                    None => {
                        let l = len_of(old_bytes.map(<[u8]>::len));
                        len = Some(l);
                        l
                    }
                };
                if len > inner.layout.block_size as usize {
                    return Err(StoreError::Invalid(format!(
                        "value of {len} bytes exceeds the block size"
                    )));
                }
                // (Out of line when it goes into the log, however short: a record names a
                // block. A file appended to and synced each time, as a database's log is.)
                if len <= inner.facts.inline_max as usize && !loggable {
                    let f = fill
                        .take()
                        .ok_or(StoreError::Invalid("retry without filler".into()))?;
                    let mut tmp = [0u8; MAX_BLOCK_SIZE as usize / 4];
                    f(old_bytes, &mut tmp[..len]);
                    txn.put_at(&spot, key, Val::Inline(&tmp[..len]))
                        .map(|()| None)
                } else {
                    let (block, gen) = txn.alloc_data()?;
                    let f = fill
                        .take()
                        .ok_or(StoreError::Invalid("retry without filler".into()))?;
                    let out = inner
                        .region
                        .bytes_mut(inner.layout.offset(block), len as u64);
                    f(old_bytes, out);
                    inner.latency.on_write(1);
                    if loggable {
                        inner.persist_logged_block(block, len as u64)?;
                        txn.set_logged();
                    }
                    txn.put_at(
                        &spot,
                        key,
                        Val::Block {
                            block,
                            len: len as u32,
                            gen,
                        },
                    )
                    .map(|()| {
                        Some(BlockRef {
                            block,
                            len: len as u32,
                        })
                    })
                }
            })();
            match r {
                Ok(at) => {
                    txn.commit_publish();
                    // (The key's stamp right after its publish, before the patch's.)
                    let located = at.map(|at| (inner.header.change_stamp(key), at));
                    let expected = then.as_ref().is_some_and(|t| t.sync_expected);
                    let patch_key = then.as_ref().map(|t| t.key);
                    let mut words = Patch::default();
                    let logged_at = at.filter(|_| loggable);
                    let (found, patched) = Self::then_patch_locked(
                        inner,
                        then,
                        replaced,
                        stamp_before,
                        logged_at.map(|_| &mut words),
                    )?;
                    // Every lock held: the patched key's stamp now is the one right after this
                    // write (read before the commit, which may move stamps).
                    let patched_stamp = patch_key.map(|k| inner.header.change_stamp(k));
                    let logged = match (logged_at, patch_key) {
                        (Some(at), Some(pk)) => {
                            inner.log_write(key, at.block, at.len, pk, words.words())?
                        }
                        _ => false,
                    };
                    Self::commit_if_sync_expected(inner, &g, expected && !logged);
                    drop(g);
                    return Ok(BlockPut {
                        found,
                        replaced,
                        patched,
                        moved: located.is_some(),
                        located,
                        patched_stamp,
                    });
                }
                Err(StoreError::NoSpace)
                    if attempt == 0 && inner.header.pending_blocks() > 0 && fill.is_some() =>
                {
                    // Blocks freed since the last commit come back once it is durable.
                    txn.abort();
                    inner.commit_locked()?;
                    drop(g);
                }
                Err(e) => {
                    txn.abort();
                    return Err(e);
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// Insert `key` with an out-of-line value of `len` bytes (at most a block) that `fill`
    /// writes, even when it is short enough to live in its leaf, then make the patch `then`
    /// describes, in one hold of every lock: for the new last block of a growing file, so that
    /// the appends that follow land in its unused tail in place (see `Store::append_in_place`)
    /// instead of rewriting the leaf each time. `None` (nothing done) when the key exists or
    /// space is short: the caller writes another way.
    pub fn insert_growing_then_patch(
        &self,
        key: Key,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        mut then: ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        if len == 0 || len > inner.layout.block_size as usize {
            return Ok(None);
        }
        let g = inner.lock()?;
        check_then(inner, Some(&then))?;
        // A sync follows: into the intent log instead of a commit if it may (see `intent`).
        let loggable = then.sync_expected && inner.log_room(key, then.key);
        let mut txn = Txn::begin(inner.cx(), false);
        let inserted = (|| {
            let spot = txn.locate(key)?;
            if txn.value_at(&spot)?.is_some() {
                return Ok(None);
            }
            let (block, gen) = match txn.alloc_data() {
                Ok(b) => b,
                Err(StoreError::NoSpace) => return Ok(None),
                Err(e) => return Err(e),
            };
            fill(
                inner
                    .region
                    .bytes_mut(inner.layout.offset(block), len as u64),
            );
            inner.latency.on_write(1);
            if loggable {
                inner.persist_logged_block(block, len as u64)?;
                txn.set_logged();
            }
            let at = BlockRef {
                block,
                len: len as u32,
            };
            txn.put_at(
                &spot,
                key,
                Val::Block {
                    block,
                    len: at.len,
                    gen,
                },
            )?;
            Ok(Some(at))
        })();
        let at = match inserted {
            Ok(Some(at)) => at,
            other => {
                txn.abort();
                return other.map(|_| None);
            }
        };
        txn.commit_publish();
        let mut words = Patch::default();
        let found = Self::patch_locked_logged(
            inner,
            then.key,
            |old, p| (then.patch)(old, false, p),
            true,
            loggable.then_some(&mut words),
        )?;
        let logged = loggable && inner.log_write(key, at.block, at.len, then.key, words.words())?;
        let put = BlockPut {
            found,
            replaced: false,
            patched: true,
            patched_stamp: found.then(|| inner.header.change_stamp(then.key)),
            located: Some((inner.header.change_stamp(key), at)),
            moved: true,
        };
        Self::commit_if_sync_expected(inner, &g, then.sync_expected && !logged);
        Ok(Some(put))
    }

    /// Insert or replace `key` with an out-of-line value of `len` bytes (more than the inline
    /// limit, at most a block) written by `fill` into a fresh data block *outside* the volume
    /// lock: the copy of the data, the bulk of a block write, runs in parallel with other writers.
    /// The lock is held only to allocate the block and to publish it.
    pub fn put_block(&self, key: Key, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.put_block_then_patch(key, len, fill, None::<NoPatch>)
            .map(|_| ())
    }

    /// [`Store::put_block`], then, in the same hold of the lock, the patch `then` describes (a
    /// file's data block and its inode's size and times: one lock round trip).
    pub fn put_block_then_patch(
        &self,
        key: Key,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<BlockPut> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let conditional = then
            .as_ref()
            .is_some_and(|t| t.only_if_unchanged_since.is_some());
        if !conditional
            && (len > inner.layout.block_size as usize || len <= inner.facts.inline_max as usize)
        {
            // Inline-sized values go through the ordinary path (which puts and patches in two
            // holds of the lock: never for a conditional write).
            return self.put_block_under_lock(key, len, fill, then);
        }
        // A sync follows: into the intent log if it may take the write (see `intent`), which
        // then goes the way of writes between commits, its record persisted in the publish's
        // hold (checked again there).
        let sync_expected = then.as_ref().is_some_and(|t| t.sync_expected);
        let logging = sync_expected
            && !conditional
            && then.as_ref().is_some_and(|t| inner.log_room(key, t.key));
        if conditional || (sync_expected && !logging) {
            // A sync follows, so the last commit is likely recent and the key's leaf committed:
            // the publish will copy its path, which takes every lock. Take them at once and do
            // everything in that one hold (an attempt under the partition's lock first, and the
            // reservation of the block under another, cost two more lock round trips), then
            // commit. A conditional write too: its condition is checked before the block is
            // filled.
            return self.put_sized_then_patch(key, |_| len, |_, out| fill(out), then);
        }
        let p = partition_of(key);
        let Some((block, slot)) = Self::reserve_block(inner)? else {
            // Every in-flight slot is busy: fill under the lock instead.
            return self.put_block_under_lock(key, len, fill, then);
        };
        inner.prefetch_spot(key);
        // The block is allocated but referenced by nothing: only this thread touches it. A
        // process killed here leaks it until the next garbage collection.
        fill(
            inner
                .region
                .bytes_mut(inner.layout.offset(block), len as u64),
        );
        inner.latency.on_write(1);
        if logging {
            // Durable before any record names it. (A failure fails the volume: the block is
            // left to the repair's collection.)
            inner.persist_logged_block(block, len as u64)?;
        }
        let patch_key = then.as_ref().map(|t| t.key);
        // Whether the write goes into the log, decided under the locks of its publish.
        let log_now = |k: Key| logging && patch_key.is_some_and(|pk| inner.log_room(k, pk));
        let mut then = then;
        if let InPlaceOutcome::Done(done) = inner.in_place(p, key, &mut then, |held, then| {
            let mut words = Patch::default();
            let logged = log_now(key);
            let outcome = Self::publish_in_place(
                inner,
                p,
                held,
                key,
                block,
                len,
                slot,
                then,
                logged.then_some(&mut words),
            )?;
            if let (InPlaceOutcome::Done(_), true, Some(pk)) = (&outcome, logged, patch_key) {
                inner.log_write(key, block, len as u32, pk, words.words())?;
            }
            Ok(outcome)
        })? {
            return Ok(done);
        }
        let g = inner.lock()?;
        inner.alloc.readers().unreserve(slot);
        let logged = log_now(key);
        let stamp_before = patch_key.map(|k| inner.header.change_stamp(k));
        let mut txn = Txn::begin(inner.cx(), false);
        if logged {
            txn.set_logged();
        }
        let gen = inner.header.working_gen();
        let replaced = match txn.put(
            key,
            Val::Block {
                block,
                len: len as u32,
                gen,
            },
        ) {
            Ok(replaced) => replaced,
            Err(e) => {
                txn.abort();
                inner.alloc.free_now(block);
                drop(g);
                return Err(e);
            }
        };
        txn.commit_publish();
        let mut words = Patch::default();
        let (found, patched) = Self::then_patch_locked(
            inner,
            then,
            replaced,
            stamp_before,
            logged.then_some(&mut words),
        )?;
        if let (true, Some(pk)) = (logged, patch_key) {
            inner.log_write(key, block, len as u32, pk, words.words())?;
        }
        let stamp = inner.header.change_stamp(key);
        let patched_stamp = patch_key.map(|k| inner.header.change_stamp(k));
        drop(g);
        Ok(BlockPut {
            found,
            replaced,
            patched,
            patched_stamp,
            moved: true,
            located: Some((
                stamp,
                BlockRef {
                    block,
                    len: len as u32,
                },
            )),
        })
    }

    /// Whether the block at `at` was allocated since the last commit, as far as a look without
    /// a lock can tell (a commit may make it false the next moment): a writer that knows where
    /// a block was may try [`Store::write_in_place`] when this says yes, and copy the block at
    /// once when it says no.
    #[inline]
    pub fn looks_fresh(&self, at: BlockRef) -> bool {
        self.inner.alloc.is_fresh(at.block)
    }

    /// Start loading the cache lines where this thread last found `key` or a neighbour of it,
    /// ahead of a write of it (a hint: no effect on what is read or written).
    #[inline]
    pub fn prefetch_location(&self, key: Key) {
        self.inner.prefetch_spot(key);
    }

    /// Start loading bytes `offset..offset + len` of the out-of-line value at `at` (at most
    /// `PREFETCH_BYTES` (1 KiB) of them) into the cache: a caller that learned where a value lives
    /// (a file's block map, valid or not by now) lets the memory's latency overlap its checks.
    /// A hint: no effect on what is read, harmless on a stale or foreign location.
    #[inline]
    pub fn prefetch_bytes(&self, at: BlockRef, offset: usize, len: usize) {
        self.prefetch_up_to(at, offset, len.min(PREFETCH_BYTES));
    }

    /// [`Store::prefetch_bytes`] for writing (the lines come exclusive, so the stores into them
    /// do not wait): a writer that learned where the bytes it will overwrite live.
    #[inline]
    pub fn prefetch_bytes_for_write(&self, at: BlockRef, offset: usize, len: usize) {
        self.prefetch_lines(at, offset, len.min(PREFETCH_BYTES), true);
    }

    /// [`Store::prefetch_bytes`] of up to `len` bytes, however many.
    #[inline]
    fn prefetch_up_to(&self, at: BlockRef, offset: usize, len: usize) {
        self.prefetch_lines(at, offset, len, false);
    }

    /// Prefetch the lines of bytes `offset..offset + len` of the value at `at` (cut at its
    /// end), `for_write` or for reading; nothing for a block outside the volume's data.
    #[inline]
    fn prefetch_lines(&self, at: BlockRef, offset: usize, len: usize, for_write: bool) {
        let inner = &*self.inner;
        if at.block < inner.layout.data_start || at.block >= inner.layout.max_blocks {
            return;
        }
        let start = inner.layout.offset(at.block) + offset as u64;
        let end = start + len.min(at.len() - offset.min(at.len())) as u64;
        inner.region.prefetch_range(start, end, for_write);
    }

    /// [`Store::put_block_then_patch`] with the value filled under the lock (inline-sized values,
    /// or every in-flight slot busy).
    fn put_block_under_lock(
        &self,
        key: Key,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<BlockPut> {
        let replaced = Cell::new(false);
        let mut fill = Some(fill);
        self.put_with(key, len, |old, out| {
            replaced.set(old.is_some());
            if let Some(f) = fill.take() {
                f(out)
            }
        })?;
        let replaced = replaced.get();
        let found = match then {
            Some(mut t) => self.patch_with(t.key, |old, p| (t.patch)(old, replaced, p))?,
            None => true,
        };
        Ok(BlockPut {
            found,
            replaced,
            patched: true,
            located: None,
            moved: false,
            patched_stamp: None,
        })
    }

    /// Update 8-byte little-endian words of the value of `key`, chosen by `f` from the old value:
    /// in place when the value's leaf is private to the working tree (no copy of the leaf), else
    /// by rewriting the value. Returns false if the key is absent.
    pub fn patch_with(&self, key: Key, f: impl FnOnce(&[u8], &mut Patch)) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let p = partition_of(key);
        let g = inner.lock_partition(p)?;
        let _g = if g.is_all() {
            g
        } else {
            // In place under this partition's lock when the leaf allows; else every lock.
            let mut txn = Txn::begin_in(inner.cx(), p);
            let spot = txn.locate(key)?;
            if txn.patchable_in_place(&spot)? {
                let Some(old) = txn.value_at(&spot)? else {
                    return Ok(false);
                };
                let old_bytes = Node::value_bytes(&inner.region, &inner.layout, old);
                let patch = Patch::chosen(old_bytes, |old, p| f(old, p))?;
                if patch.holds_in(old_bytes) {
                    return Ok(true); // nothing to change (times at the same coarse tick)
                }
                let done = txn.patch_at(&spot, patch.words())?;
                txn.commit_publish();
                return Ok(done == Some(true));
            }
            if !spot.present() {
                return Ok(false);
            }
            drop(g);
            inner.lock()?
        };
        Self::patch_locked(inner, key, f, false)
    }

    /// The patch `then` after a put under every lock, skipped when the put `replaced` a value
    /// and the patched key's stamp still reads what the caller saw (`stamp_before`, read under
    /// the same hold). Returns (patched key found, patched).
    fn then_patch_locked<F: FnMut(&[u8], bool, &mut Patch)>(
        inner: &Inner,
        then: Option<ThenPatch<F>>,
        replaced: bool,
        stamp_before: Option<u64>,
        logged: Option<&mut Patch>,
    ) -> Result<(bool, bool)> {
        match then {
            Some(t)
                if replaced
                    && t.unless_unchanged_since
                        .is_some_and(|s| Some(s) == stamp_before) =>
            {
                Ok((true, false))
            }
            Some(mut t) => {
                let found = Self::patch_locked_logged(
                    inner,
                    t.key,
                    |old, p| (t.patch)(old, replaced, p),
                    true,
                    logged,
                )?;
                Ok((found, true))
            }
            None => Ok((true, false)),
        }
    }

    /// Before a hold of every lock taken by a write is released: commit when its patch said a
    /// sync is expected (see [`ThenPatch::sync_expected`]). The write is published whatever
    /// happens here: a failed commit marks the store failed (or is met again by the sync),
    /// which reports it; the write does not.
    fn commit_if_sync_expected(inner: &Inner, g: &Guard<'_>, expected: bool) {
        if expected && g.is_all() {
            let _ = inner.commit_locked();
        }
    }

    /// [`Store::patch_with`] with the lock already held.
    ///
    /// `follows_a_write`: the patch completes a change published in the same hold (a file's
    /// size after its data): it may copy its leaf with the blocks a full volume keeps for
    /// deletions, since failing here would leave the write half done (its data without its
    /// size). A write that needs space fails before it publishes, so this takes at most one
    /// leaf's path from the reserve per write that met a full volume.
    fn patch_locked(
        inner: &Inner,
        key: Key,
        f: impl FnOnce(&[u8], &mut Patch),
        follows_a_write: bool,
    ) -> Result<bool> {
        Self::patch_locked_logged(inner, key, f, follows_a_write, None)
    }

    /// [`Store::patch_locked`]; with `logged`, the patch completes a write going into the
    /// intent log: its publish notes nothing for syncs (see `Txn::set_logged`) and the words
    /// it set are left in `logged` (none when it changed nothing) for the record.
    fn patch_locked_logged(
        inner: &Inner,
        key: Key,
        f: impl FnOnce(&[u8], &mut Patch),
        follows_a_write: bool,
        logged: Option<&mut Patch>,
    ) -> Result<bool> {
        let cx = inner.cx();
        let mut txn = Txn::begin(cx, false);
        if follows_a_write {
            txn.use_reserve();
        }
        if logged.is_some() {
            txn.set_logged();
        }
        let spot = txn.locate(key)?;
        let Some(old) = txn.value_at(&spot)? else {
            return Ok(false);
        };
        let old_bytes = Node::value_bytes(&inner.region, &inner.layout, old);
        let patch = Patch::chosen(old_bytes, f)?;
        if patch.holds_in(old_bytes) {
            // Nothing to change: no copy of a committed leaf, nothing for the next commit.
            txn.abort();
            return Ok(true);
        }
        if let Some(out) = logged {
            *out = patch;
        }
        let words = patch.words();
        let r = match txn.patch_at(&spot, words) {
            Ok(Some(true)) => Ok(()),
            Ok(_) => {
                let mut bytes = old_bytes.to_vec();
                for (off, w) in words {
                    bytes[*off..*off + 8].copy_from_slice(&w.to_le_bytes());
                }
                if bytes.len() <= inner.facts.inline_max as usize {
                    txn.put_at(&spot, key, Val::Inline(&bytes))
                } else {
                    txn.alloc_data().and_then(|(block, gen)| {
                        inner.region.copy_in(inner.layout.offset(block), &bytes);
                        txn.put_at(
                            &spot,
                            key,
                            Val::Block {
                                block,
                                len: bytes.len() as u32,
                                gen,
                            },
                        )
                    })
                }
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => {
                txn.commit_publish();
                Ok(true)
            }
            Err(e) => {
                txn.abort();
                Err(e)
            }
        }
    }

    /// Remove `key`; returns whether it existed.
    pub fn delete(&self, key: Key) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let mut attempt = 0;
        loop {
            let g = inner.lock()?;
            let mut txn = Txn::begin(inner.cx(), false);
            // A deletion frees space: it may copy its leaf with the blocks a full volume keeps.
            txn.use_reserve();
            match txn.delete(key) {
                Ok(found) => {
                    txn.commit_publish();
                    return Ok(found);
                }
                Err(StoreError::NoSpace) if attempt == 0 && inner.header.pending_blocks() > 0 => {
                    // Blocks freed since the last commit (the reserve's too) come back once it
                    // is durable.
                    txn.abort();
                    inner.commit_locked()?;
                    drop(g);
                    attempt += 1;
                }
                Err(e) => {
                    txn.abort();
                    return Err(e);
                }
            }
        }
    }

    /// Apply `ops` atomically: after any crash, all of them or none are present.
    pub fn apply(&self, ops: &[Op<'_>]) -> Result<()> {
        let inner = &*self.inner;
        inner.check_writable()?;
        for op in ops {
            if let Op::Put(_, v) = op {
                if v.len() > inner.layout.block_size as usize {
                    return Err(StoreError::Invalid("value exceeds the block size".into()));
                }
            }
        }
        let _g = inner.lock()?;
        let mut txn = Txn::begin(inner.cx(), true);
        let r = (|| {
            for op in ops {
                match *op {
                    Op::Put(k, v) if v.len() <= inner.facts.inline_max as usize => {
                        txn.put(k, Val::Inline(v))?;
                    }
                    Op::Put(k, v) => {
                        let (block, gen) = txn.alloc_data()?;
                        inner.region.copy_in(inner.layout.offset(block), v);
                        inner.latency.on_write(1);
                        txn.put(
                            k,
                            Val::Block {
                                block,
                                len: v.len() as u32,
                                gen,
                            },
                        )?;
                    }
                    Op::Delete(k) => {
                        txn.delete(k)?;
                    }
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                txn.commit_publish();
                Ok(())
            }
            Err(e) => {
                txn.abort();
                Err(e)
            }
        }
    }

    /// Wait until no writer is in the middle of a change in place in the partitions of `keys`
    /// (see [`KnownView::in_place_marks`]), repairing what a dead one left half done: takes their
    /// locks, then releases them. Call it outside any read.
    pub fn wait_for_writers(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        let held = partition_mask(keys);
        for p in (0..PARTITIONS).filter(|p| held & (1 << p) != 0) {
            drop(self.inner.lock_partition(p)?);
        }
        Ok(())
    }

    /// Run `f` with a read-only view of the working tree: several lookups from one root, lock-free.
    pub fn read<R>(&self, f: impl FnOnce(&View<'_>) -> Result<R>) -> Result<R> {
        let inner = &*self.inner;
        let _r = inner.read_section()?;
        let view = View {
            known: KnownView { inner },
            inner,
            root: Cell::new(None),
        };
        f(&view)
    }

    /// Call `f` with a view for reads at locations learned before (a file's block map),
    /// without a read section: no atomic read-modify-write, no barrier. A block may be freed
    /// and reused while `f` copies from it, so what `f` copies is worth something only if,
    /// after the copy, the change stamp of its key still reads what it read before the
    /// location was taken (a block is reused only after its key's stamp moved, see
    /// [`Store::change_stamp`]) and, for bytes changed in place, the write marks hold
    /// ([`KnownView::unchanged_since`], whose fence orders the copy before the checks).
    pub fn read_known<R>(&self, f: impl FnOnce(&KnownView<'_>) -> R) -> R {
        f(&KnownView { inner: &self.inner })
    }

    /// The change stamp of `key`: a counter in the shared header that moves after every published
    /// change of a key in its bucket (keys sharing the high word and the top byte of the low
    /// word), before the old value's data block can be reused. A value or location learned by a
    /// lookup made after reading stamp `s` stays valid while the stamp reads `s` (read both
    /// inside one read section), which lets callers cache lookups. The bytes of an out-of-line
    /// value may change where they are ([`Store::write_in_place`]) without moving the stamp:
    /// its location stays valid; readers of the bytes use [`KnownView::in_place_marks`].
    pub fn change_stamp(&self, key: Key) -> u64 {
        self.inner.header.change_stamp(key)
    }

    /// Visit keys in `[start, end)` in ascending order until `f` returns false.
    pub fn scan(&self, start: Key, end: Key, mut f: impl FnMut(Key, &[u8]) -> bool) -> Result<()> {
        let inner = &*self.inner;
        let _r = inner.read_section()?;
        inner
            .cx()
            .scan(inner.header.working_root(), start, end, &mut f)
            .map(|_| ())
    }

    /// Up to `limit` entries of `[start, end)`, ascending, copied out.
    pub fn range(&self, start: Key, end: Key, limit: usize) -> Result<Vec<(Key, Vec<u8>)>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.scan(start, end, |k, v| {
            out.push((k, v.to_vec()));
            out.len() < limit
        })?;
        Ok(out)
    }

    /// Make every completed update durable. Concurrent callers share one commit (group commit).
    /// Returns the committed generation.
    pub fn commit(&self) -> Result<u64> {
        self.commit_to(self.inner.header.working_gen())
    }

    /// Commit unless nothing was published since the last commit, or, once every lock is
    /// held, generation `target` is committed already.
    fn commit_to(&self, target: u64) -> Result<u64> {
        let inner = &*self.inner;
        // Nothing published since the last commit: return without waiting for the locks (a
        // writer may hold one as long as its change takes; taking all eight only to find
        // nothing to do made two threads that each put and commit wait on each other). A
        // publish marks the tree dirty holding a lock that a commit's hold excludes, and a
        // commit clears the mark last, after its superblock: a clear mark read here covers
        // every publish made before this call.
        if inner.header.dirty() == 0 && inner.check_writable().is_ok() {
            return Ok(inner.header.committed_gen());
        }
        let _g = inner.lock()?;
        if inner.header.committed_gen() >= target {
            // Someone committed our changes while we waited for the lock.
            return Ok(inner.header.committed_gen());
        }
        inner.commit_locked()
    }

    /// The newest working generation a change to `key`, or to a key sharing its change stamp
    /// (see [`Store::change_stamp`]), was published in: a sync of those keys is done once that
    /// generation is committed ([`Store::commit_through`]). Over-estimates, never under.
    pub fn written_gen(&self, key: Key) -> u64 {
        self.inner.header.written_gen(key)
    }

    /// Make generation `gen` durable: return at once if the last commit is at least `gen`
    /// (everything published in it or before is committed), else commit. For a sync of a few
    /// keys (a file's), whose last changes [`Store::written_gen`] dates, that must not commit
    /// everybody else's work when its own is already durable.
    pub fn commit_through(&self, gen: u64) -> Result<u64> {
        let committed = self.inner.header.committed_gen();
        if gen <= committed {
            return Ok(committed);
        }
        self.commit_to(gen)
    }
}

/// A B+-tree store of 16 MiB (4 KiB blocks) on simulated media, for this crate's unit tests.
#[cfg(test)]
pub(crate) fn test_store() -> Store {
    test_store_on_sim().1
}

/// [`test_store`] with its simulated medium (for tests that lose power).
#[cfg(test)]
pub(crate) fn test_store_on_sim() -> (std::sync::Arc<iris_media::SimMedia>, Store) {
    let sim = std::sync::Arc::new(iris_media::SimMedia::new(16 << 20));
    let opts = CreateOptions {
        block_size: 4096,
        size_limit_bytes: 16 << 20,
        initial_bytes: 16 << 20,
        inline_max: None,
        buffer_bytes: 0,
    };
    let boot = OpenOptions {
        boot_id: Some(1),
        commit_interval: None,
    };
    let store = Store::create_on(Box::new(sim.clone()), &opts, &boot)
        .expect("a test store on simulated media");
    (sim, store)
}

impl Drop for Store {
    fn drop(&mut self) {
        self.timer_stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.timer.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        // A clean close commits; failures here were already reported to writers.
        if self.inner.check_writable().is_ok() && self.inner.header.dirty() != 0 {
            let _ = self.commit();
        }
        self.inner.wait_for_grower();
    }
}

/// How long the commit timer waits before it first gives the volume huge pages: a process that
/// ends sooner (ls, cat, a shell's commands) never starts on them. Collapsing 64 MiB of fresh
/// small pages cost ~170 ms of system time here, which every short process on a new volume
/// spent again (its exit cut the work short, so the next one found it undone).
const FIRST_SETTLE_DELAY: Duration = Duration::from_secs(1);

fn commit_timer(weak: Weak<Inner>, stop: Arc<AtomicBool>, interval: Duration) {
    let first = FIRST_SETTLE_DELAY.min(interval);
    std::thread::park_timeout(first);
    let mut wait = interval - first;
    while !stop.load(Ordering::SeqCst) {
        // Off the I/O path: space the volume grew by since the last tick gets huge pages.
        match weak.upgrade() {
            Some(inner) => inner.media.settle_pages(),
            None => return,
        }
        std::thread::park_timeout(wait);
        wait = interval;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Some(inner) = weak.upgrade() else { return };
        if inner.header.dirty() != 0 && inner.check_writable().is_ok() {
            if let Ok(_g) = inner.lock() {
                let _ = inner.commit_locked();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Run `commit` on another thread while a writer holds partition 3's lock: whether it
    /// returned within `wait`, and what it returned (once the writer let go, if it waited).
    fn commit_beside_a_writer(store: &Store, wait: Duration) -> (bool, Result<u64>) {
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                let g = store.inner.lock_partition(3).expect("partition lock");
                held_tx.send(()).expect("report the hold");
                let _ = release_rx.recv_timeout(Duration::from_secs(60));
                drop(g);
            });
            held_rx.recv().expect("the writer holds its lock");
            s.spawn(move || done_tx.send(store.commit()));
            let early = done_rx.recv_timeout(wait).ok();
            release_tx.send(()).expect("let the writer go");
            match early {
                Some(r) => (true, r),
                None => (
                    false,
                    done_rx
                        .recv()
                        .expect("the commit ends once the lock is free"),
                ),
            }
        })
    }

    #[test]
    fn a_commit_with_nothing_new_returns_without_waiting_for_a_writer() {
        let store = test_store();
        store.put(Key::new(1, 1), b"one").expect("put");
        let first = store.commit().expect("commit");
        let (returned, got) = commit_beside_a_writer(&store, Duration::from_secs(20));
        assert!(
            returned,
            "a commit with nothing to do waited for a writer's lock"
        );
        assert_eq!(
            got.expect("commit"),
            first,
            "no new generation is committed"
        );
    }

    #[test]
    fn a_commit_with_something_new_waits_for_the_writer_and_commits_it() {
        let store = test_store();
        store.put(Key::new(1, 1), b"one").expect("put");
        let first = store.commit().expect("commit");
        store.put(Key::new(1, 2), b"two").expect("put");
        let (returned, got) = commit_beside_a_writer(&store, Duration::from_millis(200));
        assert!(
            !returned,
            "a commit with a change to make did not wait for the locks"
        );
        assert!(got.expect("commit") > first, "the change is committed");
        assert_eq!(store.inner.header.dirty(), 0);
    }

    #[test]
    fn a_volume_that_refuses_writes_refuses_a_commit_with_nothing_new() {
        let store = test_store();
        store.commit().expect("commit");
        store.inner.header.refuse_inconsistent();
        assert!(
            store.commit().is_err(),
            "a refusing volume reported a commit"
        );
    }
}
