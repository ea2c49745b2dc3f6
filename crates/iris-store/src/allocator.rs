//! The space allocator: a working bitmap W (one bit per block, in the mapping) and a pending-free
//! bitmap P for blocks the working tree dropped but the last commit still references. Such a block
//! stays set in W until the next commit is durable; then `apply_pending` clears it (W &= !P).
//! Blocks allocated since the last commit are freed at once when dropped: only the working tree
//! could reach them. A summary bitmap (one bit per P word) keeps `apply_pending` proportional to the
//! frees, not to the volume.
//!
//! The committed free map is never persisted: after power loss, recovery rebuilds W by walking the
//! committed tree and the snapshots, so it cannot disagree with them.

use iris_media::Media;

use crate::error::{Result, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::header::{Header, HeaderWord, PARTITIONS, RECENT_PER_PARTITION};
use crate::layout::{Layout, SUMMARY_SPAN_BLOCKS};
use crate::readers::Readers;
use crate::region::Region;

/// How long a growth waits at most for another process's growth ahead (see
/// [`Allocator::wait_for_grow_ahead`]): 64 MiB took ~5-15 ms here.
const GROW_AHEAD_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether process `pid` exists (see `liveness`).
fn process_alive(pid: u32) -> bool {
    libc::pid_t::try_from(pid).is_ok_and(crate::liveness::process_exists)
}

/// Bytes the volume grows by at least, when it runs out of blocks.
const GROW_STEP_BYTES: u64 = 16 << 20;
/// The reserve (see [`Allocator::reserve_blocks`]): this fraction of the volume's data blocks,
/// within these bounds.
const RESERVE_FRACTION: u64 = 64;
const RESERVE_MIN_BLOCKS: u64 = 16;
const RESERVE_MAX_BLOCKS: u64 = 1024;
/// Bytes the volume grows by at most at once: growth allocates (and on a RAM drive maps) the
/// new space while every writer waits, about 0.5 s per GiB on the 2-CPU machines here.
const GROW_MAX_BYTES: u64 = 64 << 20;
/// The smallest step tried when the medium is nearly full, before reporting no space.
const GROW_MIN_BYTES: u64 = 64 << 10;

/// Allocation over the bitmaps of one volume. Every bitmap word changes by one atomic
/// read-modify-write, so writers holding the locks of different partitions allocate and free at
/// once; each partition allocates first from its own share of the bitmap (every
/// `PARTITIONS`-th cache line of it), so they seldom touch the same words.
#[derive(Clone, Copy)]
pub(crate) struct Allocator {
    region: Region,
    layout: Layout,
    header: Header,
    readers: Readers,
}

/// Entries of a list of in-flight blocks in one block of `block_size` bytes (a count, then
/// the blocks).
pub(crate) fn list_capacity(block_size: u64) -> usize {
    (block_size / 8 - 1) as usize
}

/// Bitmap words per cache line: the unit of a partition's share.
const LINE_WORDS: u64 = 8;
/// Lines of its share a partition walks before it falls back to the whole bitmap.
const SHARE_WALK_LINES: u64 = 64;

/// The partition whose share holds bitmap word `w`.
#[inline]
fn share_of(w: u64) -> u64 {
    (w / LINE_WORDS) % PARTITIONS
}

/// Move an allocation cursor to word `w`, storing only if it moves: a cursor shares its cache
/// line with its partition's lock, which writers of other threads take to publish, so a store
/// per allocation would pass the line back and forth (the cursor stays on one word for up to
/// 64 allocations).
#[inline]
fn advance(cursor: &std::sync::atomic::AtomicU64, w: u64) {
    if cursor.load(Ordering::Relaxed) != w {
        cursor.store(w, Ordering::Relaxed);
    }
}

/// Lower `cursor` to `w` if that is lower, without taking its cache line when it is not (the
/// cursors live in lines every writer reads).
#[inline]
fn lower(cursor: &std::sync::atomic::AtomicU64, w: u64) {
    if cursor.load(Ordering::Relaxed) > w {
        cursor.fetch_min(w, Ordering::AcqRel);
    }
}

impl Allocator {
    pub fn new(region: Region, layout: Layout, header: Header) -> Self {
        Allocator {
            region,
            layout,
            header,
            readers: Readers::new(region, layout.header_off),
        }
    }

    /// The reader table this allocator waits for before reusing blocks.
    pub fn readers(&self) -> Readers {
        self.readers
    }

    /// A block the working tree stopped referencing, which readers may still be reading: free it
    /// after the next grace period. `p` is the partition whose lock the caller holds.
    pub fn release(&self, p: u64, b: u64) {
        if self.readers.park(p, b) {
            self.drain(p);
        }
    }

    /// Free the blocks of writers that died between allocating and publishing them (caller holds
    /// every lock).
    pub fn reap_dead_writers(&self) {
        for word in self.readers.reap_dead() {
            for b in self.inflight_blocks(word) {
                if self.is_used(b) {
                    self.free_now(b);
                }
            }
        }
    }

    /// Blocks live writers are filling outside the lock (caller holds every lock).
    pub fn reserved(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for word in self.readers.reserved() {
            out.extend(self.inflight_blocks(word));
        }
        out
    }

    /// Blocks any in-flight slot names, its writer live or dead, changing nothing (caller
    /// holds every lock).
    pub fn named_by_slots(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for word in self.readers.named() {
            out.extend(self.inflight_blocks(word));
        }
        out
    }

    /// The blocks an in-flight slot's word names: one block, or a list block and the blocks
    /// it lists (entries past a torn count or outside the data area are skipped).
    fn inflight_blocks(&self, word: u64) -> Vec<u64> {
        let data = self.layout.data_start..self.layout.max_blocks;
        if word & crate::readers::INFLIGHT_LIST == 0 {
            return if data.contains(&word) {
                vec![word]
            } else {
                Vec::new()
            };
        }
        let list = word & !crate::readers::INFLIGHT_LIST;
        if !data.contains(&list) {
            return Vec::new();
        }
        let at = self.layout.offset(list);
        let count = self
            .region
            .atomic_u64(at)
            .load(Ordering::Acquire)
            .min(list_capacity(self.layout.bs()) as u64);
        let mut out = vec![list];
        out.extend(
            (0..count)
                .map(|i| self.region.read_u64(at + 8 + i * 8))
                .filter(|b| data.contains(b)),
        );
        out
    }

    /// Start a list of blocks to fill outside the lock in block `list` (allocated by the
    /// caller): empty until [`Allocator::list_push`].
    pub fn list_start(&self, list: u64) {
        self.region
            .atomic_u64(self.layout.offset(list))
            .store(0, Ordering::Release);
    }

    /// Add block `b` as entry `i` of list `list` (entries in order, at most
    /// [`list_capacity`]): the entry first, then the count that makes it part of the list.
    pub fn list_push(&self, list: u64, i: u64, b: u64) {
        let at = self.layout.offset(list);
        self.region.write_u64(at + 8 + i * 8, b);
        self.region.atomic_u64(at).store(i + 1, Ordering::Release);
    }

    /// Wait out the readers, then free every block parked in partition `p`'s limbo.
    pub fn drain(&self, p: u64) {
        if self.readers.parked_in(p) == 0 {
            return;
        }
        self.readers.grace_period();
        let mut parked = Vec::with_capacity(crate::readers::LIMBO_CAPACITY as usize);
        self.readers.take_parked(p, &mut parked);
        for b in parked {
            self.free_now(b);
        }
    }

    /// Drain every partition's limbo after one grace period (caller holds every lock).
    pub fn drain_all(&self) {
        if self.readers.parked() == 0 {
            return;
        }
        self.readers.grace_period();
        self.drain_all_now();
    }

    /// Free every block parked in any partition's limbo, right away: the caller waited a grace
    /// period after the last of them was parked (and holds every lock, so none is parked since).
    fn drain_all_now(&self) {
        if self.readers.parked() == 0 {
            return;
        }
        let mut parked = Vec::new();
        for p in 0..PARTITIONS {
            self.readers.take_parked(p, &mut parked);
        }
        for b in parked {
            self.free_now(b);
        }
    }

    #[inline]
    fn w_word(&self, word: u64) -> &AtomicU64 {
        self.region.atomic_u64(self.layout.w_off + word * 8)
    }

    #[inline]
    fn p_word(&self, word: u64) -> &AtomicU64 {
        self.region.atomic_u64(self.layout.p_off + word * 8)
    }

    #[inline]
    fn summary_word(&self, sw: u64) -> &AtomicU64 {
        self.region.atomic_u64(self.layout.summary_off + sw * 8)
    }

    /// The fresh map's pair for W word `word`: (generation, bits).
    #[inline]
    fn fresh_pair(&self, word: u64) -> (&AtomicU64, &AtomicU64) {
        self.region
            .atomic_u64_pair(self.layout.fresh_off + word * 16)
    }

    /// Note that block `b`, just taken in W, is allocated in the working generation (caller
    /// holds a lock, so no commit moves the generation meanwhile).
    #[inline]
    fn note_fresh(&self, b: u64) {
        let (gen_word, bits) = self.fresh_pair(b / 64);
        let gen = self.header.working_gen();
        if gen_word.load(Ordering::Acquire) != gen {
            // Bits of an older generation: none of those blocks is fresh now. Clear them before
            // the generation says they are of this one (a reader that sees the new generation
            // sees them cleared). A writer of another partition doing the same at once may clear
            // the bit set here: a fresh block then reads as not fresh, which only costs a
            // lookup; never the other way round.
            bits.store(0, Ordering::Relaxed);
            gen_word.store(gen, Ordering::Release);
        }
        bits.fetch_or(1 << (b % 64), Ordering::AcqRel);
    }

    /// Whether block `b` was allocated in the working generation, so neither the last commit nor
    /// a snapshot reaches it: a block its key still names may change in place. Exact while the
    /// caller holds a lock (no commit can move the generation); otherwise a hint. May read
    /// false for a fresh block (see `note_fresh`), never true for one that is not.
    #[inline]
    pub fn is_fresh(&self, b: u64) -> bool {
        if b < self.layout.data_start || b >= self.layout.max_blocks {
            return false;
        }
        let (gen_word, bits) = self.fresh_pair(b / 64);
        let gen = gen_word.load(Ordering::Acquire);
        let set = bits.load(Ordering::Acquire) & (1 << (b % 64)) != 0;
        set && gen == self.header.working_gen()
    }

    /// Block `b`, allocated in the working generation, is named by an intent-log record (see
    /// `log_record`): no longer fresh, so nothing writes it in place (replay would point its key
    /// at bytes changed after the sync) and its free waits for the next commit (replay would
    /// point the key at another value's bytes). Caller holds the lock of the partition whose
    /// key names it.
    pub fn settle_logged(&self, b: u64) {
        if b < self.layout.data_start || b >= self.layout.max_blocks {
            return;
        }
        let (_, bits) = self.fresh_pair(b / 64);
        bits.fetch_and(!(1 << (b % 64)), Ordering::AcqRel);
    }

    /// Start loading the fresh map's line for block `b` (a hint).
    #[inline]
    pub fn prefetch_fresh(&self, b: u64) {
        if b < self.layout.max_blocks {
            self.region.prefetch(self.layout.fresh_off + b / 64 * 16);
        }
    }

    /// Whether block `b` is set in W.
    pub fn is_used(&self, b: u64) -> bool {
        b < self.layout.max_blocks
            && self.w_word(b / 64).load(Ordering::Acquire) & (1 << (b % 64)) != 0
    }

    /// Whether `b` is a data-area block in use: one a writer may free (a tree of a corrupt
    /// volume may name others).
    #[inline]
    pub fn holds(&self, b: u64) -> bool {
        b >= self.layout.data_start && self.is_used(b)
    }

    /// Whether `b` may be freed (see [`Allocator::holds`]). A valid volume never asks to free
    /// another block: this one's shared state was forged or is not what its writers left, and a
    /// block freed twice could be handed out twice, so the volume refuses writes and commits
    /// until reopened (see `Header::refuse_inconsistent`) and the block is left alone.
    fn refuse_unless_held(&self, b: u64) -> bool {
        let held = self.holds(b);
        if !held {
            self.header.refuse_inconsistent();
        }
        held
    }

    /// Whether block `b` waits in P for the next commit.
    pub fn is_pending(&self, b: u64) -> bool {
        b < self.layout.max_blocks
            && self.p_word(b / 64).load(Ordering::Acquire) & (1 << (b % 64)) != 0
    }

    /// Allocate one block for partition `p`, draining limbos and growing the volume if it is
    /// full (caller holds every lock). Fails with `NoSpace` at the limit. Only with `reserve`
    /// (a transaction that frees space) may it take one of the blocks held back at the end of
    /// the backed volume (see [`Allocator::reserve_blocks`]).
    pub fn alloc(&self, p: u64, media: &dyn Media, reserve: bool) -> Result<u64> {
        if let Some(b) = self.scan(p, self.end(false)) {
            return Ok(b);
        }
        if self.readers.parked() > 0 {
            self.drain_all();
            if let Some(b) = self.scan(p, self.end(false)) {
                return Ok(b);
            }
        }
        match self.grow(media) {
            Ok(()) | Err(StoreError::NoSpace) => {}
            Err(e) => return Err(e),
        }
        self.scan(p, self.end(false))
            .or_else(|| reserve.then(|| self.scan(p, self.end(true))).flatten())
            .ok_or(StoreError::NoSpace)
    }

    /// Allocate one block holding only partition `p`'s lock: no growth, only `p`'s limbo
    /// drained, never from the reserve. `None` when the caller must retry holding every lock.
    pub fn alloc_in(&self, p: u64) -> Option<u64> {
        self.alloc_holding(p, true)
    }

    /// [`Allocator::alloc_in`] from `p`'s share only (and the blocks a commit freed lately):
    /// `None` when the share's walk finds nothing, without the walk of the whole bitmap from
    /// the shared cursor, whose line every allocating writer would then write. The caller
    /// tries another partition's share.
    pub fn alloc_in_share(&self, p: u64) -> Option<u64> {
        self.alloc_holding(p, false)
    }

    fn alloc_holding(&self, p: u64, wide: bool) -> Option<u64> {
        let end = self.end(false);
        if let Some(b) = self.scan_from(p, end, wide) {
            return Some(b);
        }
        if self.readers.parked_in(p) > 0 {
            self.drain(p);
            return self.scan_from(p, end, wide);
        }
        None
    }

    /// Claim block `b` itself, if it is a free data block of the backed volume (caller holds
    /// every lock): for a value whose block was chosen before the free map was rebuilt (an
    /// intent-log record's, see `Store::replay_log`). False, nothing changed, otherwise.
    pub fn claim(&self, b: u64) -> bool {
        let backed = self.header.backed_blocks().min(self.layout.max_blocks);
        if b < self.layout.data_start || b >= backed {
            return false;
        }
        let (word, bit) = (b / 64, 1u64 << (b % 64));
        if self.w_word(word).fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return false;
        }
        self.header.add_used(share_of(word), 1);
        true
    }

    /// Blocks held back for transactions that free space: deleting a file must first copy the
    /// leaves it changes (copy on write), and only the commit after it gives its blocks back,
    /// so a volume that filled up must still have room for that or it could never be emptied.
    /// They are the last blocks of the backed volume; ordinary allocations grow the volume
    /// rather than take them, and fail with `NoSpace` once it cannot grow.
    pub fn reserve_blocks(&self) -> u64 {
        ((self.layout.max_blocks - self.layout.data_start) / RESERVE_FRACTION)
            .clamp(RESERVE_MIN_BLOCKS, RESERVE_MAX_BLOCKS)
    }

    /// The end of the blocks an allocation may take: the backed volume, less the reserve
    /// unless `reserve`.
    #[inline]
    fn end(&self, reserve: bool) -> u64 {
        let backed = self.header.backed_blocks().min(self.layout.max_blocks);
        if reserve {
            backed
        } else {
            backed.saturating_sub(self.reserve_blocks())
        }
    }

    /// Next-fit search for partition `p`: a bounded walk of its own share from its cursor, then
    /// the whole bitmap from the shared cursor. A partition whose walk found nothing parks its
    /// cursor at `u64::MAX` (its share is full) until a free in its share lowers it again, so a
    /// full share costs one bounded walk, not one per allocation.
    fn scan(&self, p: u64, backed: u64) -> Option<u64> {
        self.scan_from(p, backed, true)
    }

    /// [`Allocator::scan`]; without `wide`, its own share only (`None` where the whole bitmap
    /// would be walked).
    fn scan_from(&self, p: u64, backed: u64, wide: bool) -> Option<u64> {
        if let Some(b) = self.take_recent(p, backed) {
            return Some(b);
        }
        let first_word = self.layout.data_start / 64;
        let end_word = backed.div_ceil(64);
        if end_word <= first_word {
            return None;
        }
        let cursor = self.header.part_hint(p);
        let hint = cursor.load(Ordering::Relaxed);
        if hint != u64::MAX {
            let (first_line, end_line) = (first_word / LINE_WORDS, end_word.div_ceil(LINE_WORDS));
            let lines = end_line - first_line;
            let start = hint.clamp(first_word, end_word - 1);
            // The share's lines from the cursor's, wrapping within the backed volume.
            let mut line = start / LINE_WORDS;
            line += (p + PARTITIONS - share_of(line * LINE_WORDS)) % PARTITIONS;
            for k in 0..SHARE_WALK_LINES.min(lines.div_ceil(PARTITIONS)) {
                let mut l = line + k * PARTITIONS;
                if l >= end_line {
                    l = first_line + (l - first_line) % lines;
                    l += (p + PARTITIONS - share_of(l * LINE_WORDS)) % PARTITIONS;
                }
                let from = if k == 0 {
                    start.max(l * LINE_WORDS)
                } else {
                    l * LINE_WORDS
                };
                for word in from..((l + 1) * LINE_WORDS).min(end_word) {
                    if let Some(b) = self.take_bit(word, backed) {
                        advance(cursor, word);
                        return Some(b);
                    }
                }
            }
            cursor.store(u64::MAX, Ordering::Relaxed);
        }
        if !wide {
            return None;
        }
        let shared = self.header.shared_hint();
        let hint = shared
            .load(Ordering::Relaxed)
            .clamp(first_word, end_word - 1);
        for word in (hint..end_word).chain(first_word..hint) {
            if let Some(b) = self.take_bit(word, backed) {
                advance(shared, word);
                return Some(b);
            }
        }
        None
    }

    /// Claim a block a commit freed lately (in partition `p`'s share first), below `backed`, if
    /// one is noted and still free: freed blocks are reused first (their pages are backed and
    /// likely cached), and found without a walk of the bitmap, where a copy-on-write volume's
    /// frees lie scattered among used blocks (a walk from the lowest freed word crossed
    /// hundreds of full words per allocation when every write was followed by a commit).
    fn take_recent(&self, p: u64, backed: u64) -> Option<u64> {
        let mask_word = self.header.recent_mask();
        let mask = mask_word.load(Ordering::Acquire);
        if mask == 0 {
            return None;
        }
        // Its own share's first, then the others' (a transaction holding every lock allocates
        // for partition 0, whatever it changes): the mask turned so that `p`'s bits come first.
        // Only the slots a commit filled are looked at (was: all 64, most of them empty, at
        // every allocation: 8 % of a write followed by a sync).
        let own = p % PARTITIONS * RECENT_PER_PARTITION;
        let mut turned = mask.rotate_right(own as u32);
        let mut visited = 0u64;
        let mut found = None;
        while turned != 0 {
            let n = (u64::from(turned.trailing_zeros()) + own) % 64;
            turned &= turned - 1;
            visited |= 1 << n;
            let slot = self
                .header
                .recent_free(n / RECENT_PER_PARTITION, n % RECENT_PER_PARTITION);
            let b = slot.swap(0, Ordering::AcqRel);
            if b >= self.layout.data_start && b < backed {
                let (word, bit) = (b / 64, 1u64 << (b % 64));
                if self.w_word(word).fetch_or(bit, Ordering::AcqRel) & bit == 0 {
                    self.header.add_used(share_of(word), 1);
                    self.note_fresh(b);
                    found = Some(b);
                    break;
                }
            }
        }
        // One write of the shared mask per call. Fills happen only under every lock and this
        // caller holds one: no fill can race this clear.
        mask_word.fetch_and(!visited, Ordering::AcqRel);
        found
    }

    /// Note free block `b` in an empty slot of its share's recently freed ones, if one is
    /// empty (caller holds every lock: a commit).
    fn note_recent(&self, b: u64) {
        let mask_word = self.header.recent_mask();
        let mask = mask_word.load(Ordering::Acquire);
        let first = share_of(b / 64) * RECENT_PER_PARTITION;
        for n in first..first + RECENT_PER_PARTITION {
            if mask & (1 << n) == 0 {
                // The slot first, then its bit: a taker that sees the bit finds the block.
                self.header
                    .recent_free(n / RECENT_PER_PARTITION, n % RECENT_PER_PARTITION)
                    .store(b, Ordering::Release);
                mask_word.fetch_or(1 << n, Ordering::AcqRel);
                return;
            }
        }
    }

    /// Claim a clear bit of word `word` below `backed`, if it has one.
    #[inline]
    fn take_bit(&self, word: u64, backed: u64) -> Option<u64> {
        let w = self.w_word(word);
        let mut bits = w.load(Ordering::Acquire);
        loop {
            if bits == u64::MAX {
                return None;
            }
            let bit = u64::from((!bits).trailing_zeros());
            let b = word * 64 + bit;
            if b >= backed || b < self.layout.data_start {
                // Only the first and last words can hold out-of-range bits; metadata bits are
                // preset, so this is the tail of the volume.
                return None;
            }
            match w.compare_exchange_weak(
                bits,
                bits | (1 << bit),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.header.add_used(share_of(word), 1);
                    self.note_fresh(b);
                    return Some(b);
                }
                Err(now) => bits = now,
            }
        }
    }

    fn grow(&self, media: &dyn Media) -> Result<()> {
        self.wait_for_grow_ahead();
        let backed = self.header.backed_blocks();
        if backed >= self.layout.max_blocks {
            return Err(StoreError::NoSpace);
        }
        let bs = self.layout.bs();
        let mut step = (backed / 2).clamp(GROW_STEP_BYTES / bs, GROW_MAX_BYTES / bs);
        loop {
            let new_backed = (backed + step).min(self.layout.max_blocks);
            match media.grow(self.layout.offset(new_backed)) {
                Ok(()) => {
                    self.header.set_backed_blocks(new_backed);
                    // A share whose walk found nothing parked its cursor (see `scan`): point
                    // it at its first word of the new space, which only this growth frees.
                    let first = backed / 64;
                    for p in 0..PARTITIONS {
                        let line = (first / LINE_WORDS).next_multiple_of(PARTITIONS) + p;
                        lower(self.header.part_hint(p), line * LINE_WORDS);
                    }
                    return Ok(());
                }
                // The medium is short of room for the whole step: take what it has.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    if step * bs <= GROW_MIN_BYTES {
                        return Err(StoreError::NoSpace);
                    }
                    step /= 2;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait (at most [`GROW_AHEAD_WAIT`]) while another live process backs the volume's next
    /// space ahead of need (see `Header::grow_ahead_pid`): a growth beside it allocates the
    /// same space at the same time, which on a RAM drive made its huge-page collapse fail and
    /// left the space in small pages for the commit timers to copy. (This process's own growth
    /// ahead is waited for by the medium.) A note left by a dead process is cleared, and so is
    /// one that outlasts the wait (its process died and the number went to another).
    fn wait_for_grow_ahead(&self) {
        let me = std::process::id();
        let since = std::time::Instant::now();
        while let Some(pid) = self.header.grow_ahead_pid().filter(|p| *p != me) {
            if !process_alive(pid) || since.elapsed() >= GROW_AHEAD_WAIT {
                self.header.note_grow_ahead(pid, false);
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// Return `b` to the free space now (nothing committed or published still reaches it).
    pub fn free_now(&self, b: u64) {
        if !self.refuse_unless_held(b) {
            return;
        }
        let word = b / 64;
        // Not fresh any more: a free block is no key's (a location someone still holds must
        // not read as writable in place; reused, the block is noted fresh again).
        let (_, fresh_bits) = self.fresh_pair(word);
        if fresh_bits.load(Ordering::Relaxed) & (1 << (b % 64)) != 0 {
            fresh_bits.fetch_and(!(1 << (b % 64)), Ordering::AcqRel);
        }
        let prev = self
            .w_word(word)
            .fetch_and(!(1 << (b % 64)), Ordering::AcqRel);
        if prev & (1 << (b % 64)) != 0 {
            self.header.add_used(share_of(word), -1);
            // Reuse freed blocks before untouched ones: their pages are already backed and
            // likely cached, where a never-used page of a sparse volume costs a zero-fill fault.
            lower(self.header.part_hint(share_of(word)), word);
            lower(self.header.shared_hint(), word);
        }
    }

    /// Free `b` once the next commit is durable (the last commit still references it).
    pub fn defer_free(&self, b: u64) {
        if !self.refuse_unless_held(b) {
            return;
        }
        let word = b / 64;
        let prev = self.p_word(word).fetch_or(1 << (b % 64), Ordering::AcqRel);
        if prev & (1 << (b % 64)) != 0 {
            return;
        }
        // One summary bit per P word; remember which summary words to visit at commit.
        let sw = word / 64;
        lower(self.header.word(HeaderWord::Lo), sw);
        let hi = self.header.word(HeaderWord::Hi);
        if hi.load(Ordering::Acquire) < sw {
            hi.fetch_max(sw, Ordering::AcqRel);
        }
        self.summary_word(sw)
            .fetch_or(1 << (word % 64), Ordering::AcqRel);
        self.header
            .word(HeaderWord::Blocks)
            .fetch_add(1, Ordering::AcqRel);
    }

    /// After a durable commit: every pending block becomes free (W &= !P, P = 0). Caller holds
    /// every lock.
    pub fn apply_pending(&self) {
        // Readers that loaded the previous working tree may still be inside these blocks, and
        // in the parked ones (parked before this grace period: every lock is held).
        self.readers.grace_period();
        self.drain_all_now();
        let summary_words = self.layout.summary_bytes / 8;
        let (lo, hi) = (self.header.pending_lo(), self.header.pending_hi());
        for sw in (lo..=hi.min(summary_words.saturating_sub(1))).filter(|_| lo <= hi) {
            let mut sbits = self.summary_word(sw).load(Ordering::Acquire);
            while sbits != 0 {
                let bit = u64::from(sbits.trailing_zeros());
                sbits &= sbits - 1;
                let w = sw * 64 + bit;
                debug_assert!(w * SUMMARY_SPAN_BLOCKS < self.layout.max_blocks);
                let p = self.p_word(w).load(Ordering::Acquire);
                if p == 0 {
                    continue;
                }
                let freed = self.w_word(w).fetch_and(!p, Ordering::AcqRel) & p;
                self.header
                    .add_used(share_of(w), -i64::from(freed.count_ones()));
                if freed != 0 {
                    lower(self.header.part_hint(share_of(w)), w);
                    lower(self.header.shared_hint(), w);
                    let mut bits = freed;
                    while bits != 0 {
                        self.note_recent(w * 64 + u64::from(bits.trailing_zeros()));
                        bits &= bits - 1;
                    }
                }
                self.p_word(w).store(0, Ordering::Release);
            }
            self.summary_word(sw).store(0, Ordering::Release);
        }
        // Reset the range last: a writer killed above leaves it covering what is left.
        self.header.set_pending_lo(u64::MAX);
        self.header.set_pending_hi(0);
        self.header.set_pending_blocks(0);
    }

    /// Zero W, P and the summary, then mark the metadata blocks used (recovery and creation).
    pub fn reset(&self) {
        self.readers.reset();
        let l = &self.layout;
        self.region.bytes_mut(l.w_off, l.bitmap_bytes).fill(0);
        self.region.bytes_mut(l.p_off, l.bitmap_bytes).fill(0);
        self.region
            .bytes_mut(l.summary_off, l.summary_bytes)
            .fill(0);
        self.region.bytes_mut(l.fresh_off, l.fresh_bytes).fill(0);
        for b in 0..l.data_start {
            self.set_used(b);
        }
        self.header.set_used_blocks(l.data_start);
        self.header.set_pending_blocks(0);
        self.header.set_pending_lo(u64::MAX);
        self.header.set_pending_hi(0);
        self.header
            .shared_hint()
            .store(l.data_start / 64, Ordering::Relaxed);
        // Partitions start allocating at evenly spaced points of the backed volume.
        let first = l.data_start / 64;
        let end = self
            .header
            .backed_blocks()
            .min(l.max_blocks)
            .div_ceil(64)
            .max(first + 1);
        for p in 0..PARTITIONS {
            let at = first + (end - first) * p / PARTITIONS;
            // The first word of partition p's share at or after `at`.
            let line = (at / LINE_WORDS).next_multiple_of(PARTITIONS) + p;
            self.header
                .part_hint(p)
                .store((line * LINE_WORDS).max(first), Ordering::Relaxed);
        }
    }

    /// Set `b` in W without counting (recovery marks, then recounts).
    pub fn set_used(&self, b: u64) {
        self.w_word(b / 64)
            .fetch_or(1 << (b % 64), Ordering::AcqRel);
    }

    /// OR `marks` into W (recovery: every block a committed tree reaches is in use).
    pub fn mark_used(&self, marks: &[u64]) {
        let words = (self.layout.bitmap_bytes / 8).min(marks.len() as u64);
        for w in 0..words {
            let m = marks[w as usize];
            if m != 0 {
                self.w_word(w).fetch_or(m, Ordering::AcqRel);
            }
        }
    }

    /// Count W bits (after a recovery walk).
    pub fn count_used(&self) -> u64 {
        let words = self.layout.bitmap_bytes / 8;
        (0..words)
            .map(|w| u64::from(self.w_word(w).load(Ordering::Acquire).count_ones()))
            .sum()
    }

    /// Every block in W that `keep` does not hold is freed (and dropped from P): the sweep of
    /// garbage collection. Returns the number of blocks freed.
    pub fn sweep(&self, keep: &[u64]) -> u64 {
        self.readers.grace_period();
        // Parked blocks are unreachable: the sweep frees them, so forget them here.
        let mut parked = Vec::new();
        for p in 0..PARTITIONS {
            self.readers.take_parked(p, &mut parked);
        }
        let mut freed = 0u64;
        let mut unpended = 0u64;
        let words = (self.layout.bitmap_bytes / 8).min(keep.len() as u64);
        for w in 0..words {
            let bits = self.w_word(w).load(Ordering::Acquire);
            let mut k = keep[w as usize];
            if w == 0 || w * 64 < self.layout.data_start {
                // Metadata blocks are always kept.
                for b in w * 64..(w * 64 + 64).min(self.layout.data_start) {
                    k |= 1 << (b % 64);
                }
            }
            let drop = bits & !k;
            if drop != 0 {
                self.w_word(w).fetch_and(!drop, Ordering::AcqRel);
                freed += u64::from(drop.count_ones());
            }
            // A pending-free bit only ever names a block in use. One left on a free block (a
            // commit killed inside `apply_pending`, between freeing a word and clearing its P
            // word) would free that block again, under its next owner, at the next commit.
            let used = bits & !drop;
            let p = self.p_word(w).fetch_and(used, Ordering::AcqRel);
            unpended += u64::from((p & !used).count_ones());
        }
        self.header.add_used(0, -(freed as i64));
        self.header
            .set_pending_blocks(self.header.pending_blocks().saturating_sub(unpended));
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An allocator over a fresh in-memory volume of `blocks` 4 KiB blocks, all backed (`buf`
    /// keeps the memory alive).
    fn scratch(blocks: u64, buf: &mut Vec<u64>) -> Allocator {
        let layout = Layout::new(4096, blocks).expect("layout");
        *buf = vec![0u64; (blocks * 4096 / 8) as usize];
        let region = Region::new(buf.as_mut_ptr().cast(), blocks * 4096);
        let header = Header::new(region, &layout);
        header.set_backed_blocks(blocks);
        let alloc = Allocator::new(region, layout, header);
        alloc.reset();
        alloc
    }

    /// A pid no process has: a child that exited and was reaped (a pid is not reused before
    /// it wraps, far beyond one test).
    fn dead_pid() -> u64 {
        let child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = u64::from(child.id());
        let _ = child.wait_with_output();
        pid
    }

    #[test]
    fn a_dead_writers_slot_stays_named_until_the_reaper_frees_its_block() {
        let mut buf = Vec::new();
        let alloc = scratch(4096, &mut buf);
        let live = alloc.alloc_in(1).expect("room");
        let dead = alloc.alloc_in(1).expect("room");
        alloc.readers.reserve(1, live).expect("slot");
        let slot = alloc.readers.reserve(1, dead).expect("slot");
        // The second writer dies while filling its block.
        alloc.readers.set_owner(slot, dead_pid() << 32 | 1);
        // A verification looks at every slot without clearing one: both blocks stay named, so
        // neither counts as leaked, and the dead writer's stays the reaper's to free.
        let mut named = alloc.named_by_slots();
        named.sort_unstable();
        assert_eq!(named, vec![live.min(dead), live.max(dead)]);
        assert_eq!(alloc.named_by_slots().len(), 2, "looking cleared a slot");
        alloc.reap_dead_writers();
        assert!(
            !alloc.is_used(dead),
            "the reaper frees the dead writer's block"
        );
        assert!(alloc.is_used(live), "and keeps the live one's");
        assert_eq!(alloc.named_by_slots(), vec![live]);
    }

    #[test]
    fn blocks_a_commit_freed_are_reused_first_and_only_slots_marked_filled_are_read() {
        let mut buf = Vec::new();
        let alloc = scratch(16384, &mut buf);
        let blocks: Vec<u64> = (0..40).map(|_| alloc.alloc_in(2).expect("room")).collect();
        // A commit frees five of them (defer, then apply): they go into the recent slots of
        // their shares, one bit each in the mask.
        let freed = [blocks[3], blocks[11], blocks[19], blocks[27], blocks[35]];
        for b in freed {
            alloc.defer_free(b);
        }
        alloc.apply_pending();
        let mask = alloc.header.recent_mask().load(Ordering::Relaxed);
        assert_eq!(mask.count_ones(), 5, "one bit per noted block: {mask:#x}");
        // The next allocations take exactly those, clearing their bits.
        let mut again: Vec<u64> = (0..5).map(|_| alloc.alloc_in(2).expect("room")).collect();
        again.sort_unstable();
        let mut want = freed.to_vec();
        want.sort_unstable();
        assert_eq!(again, want);
        assert_eq!(alloc.header.recent_mask().load(Ordering::Relaxed), 0);
        // A slot whose bit is clear is empty whatever it holds: a free block far from the
        // bitmap walk's cursor, left in one, is not taken; with its bit set, it is.
        let far = alloc.layout.max_blocks - alloc.reserve_blocks() - 1;
        assert!(!alloc.is_used(far));
        alloc.header.recent_free(2, 0).store(far, Ordering::Relaxed);
        let next = alloc.alloc_in(2).expect("room");
        assert_ne!(next, far, "a slot not marked filled was read");
        alloc.header.recent_free(2, 0).store(far, Ordering::Relaxed);
        alloc
            .header
            .recent_mask()
            .store(1 << (2 * RECENT_PER_PARTITION), Ordering::Relaxed);
        assert_eq!(alloc.alloc_in(2), Some(far));
        assert_eq!(alloc.header.recent_mask().load(Ordering::Relaxed), 0);
        // The allocating partition's own slots come first, then the next ones, wrapping: with
        // blocks noted in partitions 1 and 5, partition 3 takes 5's, then 1's.
        let (b1, b5) = (far - 1, far - 2);
        alloc.header.recent_free(1, 4).store(b1, Ordering::Relaxed);
        alloc.header.recent_free(5, 0).store(b5, Ordering::Relaxed);
        let bits = (1 << (RECENT_PER_PARTITION + 4)) | (1 << (5 * RECENT_PER_PARTITION));
        alloc.header.recent_mask().store(bits, Ordering::Relaxed);
        assert_eq!(alloc.alloc_in(3), Some(b5));
        assert_eq!(alloc.alloc_in(3), Some(b1));
        assert_eq!(alloc.header.recent_mask().load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_share_only_allocation_stays_in_its_share_and_a_full_share_gives_none() {
        let mut buf = Vec::new();
        let alloc = scratch(16384, &mut buf);
        let reserve = alloc.reserve_blocks();
        let usable = 16384 - reserve - alloc.layout.data_start;
        let mut mine = 0u64;
        while let Some(b) = alloc.alloc_in_share(3) {
            assert_eq!(share_of(b / 64), 3, "block {b} is another share's");
            mine += 1;
            assert!(mine <= usable, "allocated more than the volume holds");
        }
        // The share's walk ends within its own lines: it found roughly an eighth of the space.
        assert!(
            mine >= usable / PARTITIONS - LINE_WORDS * 64
                && mine <= usable / PARTITIONS + LINE_WORDS * 64,
            "{mine} blocks of {usable}"
        );
        // Another share still has room; the wide allocation for the full share finds it too.
        let b = alloc.alloc_in_share(4).expect("share 4 has room");
        assert_eq!(share_of(b / 64), 4);
        let b = alloc.alloc_in(3).expect("the whole bitmap has room");
        assert_ne!(share_of(b / 64), 3);
        // A block of share 3 freed is found again by the share's own allocation.
        let first = alloc
            .layout
            .data_start
            .next_multiple_of(64 * LINE_WORDS * PARTITIONS)
            + 3 * 64 * LINE_WORDS;
        assert!(alloc.is_used(first));
        alloc.free_now(first);
        assert_eq!(alloc.alloc_in_share(3), Some(first));
        assert_eq!(alloc.alloc_in_share(3), None);
    }

    #[test]
    fn a_share_that_filled_up_finds_the_space_a_growth_adds() {
        let blocks = 16384;
        let media = iris_media::SimMedia::new(blocks * 4096);
        let layout = Layout::new(4096, blocks).expect("layout");
        let region = Region::new(media.base(), blocks * 4096);
        let header = Header::new(region, &layout);
        let backed = layout.data_start + 4096;
        header.set_backed_blocks(backed);
        let alloc = Allocator::new(region, layout, header);
        alloc.reset();
        while alloc.alloc_in_share(2).is_some() {}
        alloc.grow(&media).expect("grow");
        assert!(header.backed_blocks() > backed);
        let b = alloc.alloc_in_share(2).expect("room after the growth");
        assert!(b >= backed, "block {b} is not of the new space");
        assert_eq!(share_of(b / 64), 2);
    }

    #[test]
    fn a_growth_waits_for_another_processs_growth_ahead_and_not_for_a_dead_ones() {
        let blocks = 16384;
        let media = iris_media::SimMedia::new(blocks * 4096);
        let layout = Layout::new(4096, blocks).expect("layout");
        let region = Region::new(media.base(), blocks * 4096);
        let header = Header::new(region, &layout);
        header.set_backed_blocks(layout.data_start + 4096);
        let alloc = Allocator::new(region, layout, header);
        alloc.reset();
        let mut other = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .expect("another process");
        header.note_grow_ahead(other.id(), true);
        let started = std::time::Instant::now();
        let ended = std::thread::scope(|s| {
            let ahead = s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                header.note_grow_ahead(other.id(), false);
                started.elapsed()
            });
            alloc.grow(&media).expect("grow");
            let grown = started.elapsed();
            let ended = ahead.join().expect("the growth ahead");
            assert!(grown >= ended, "grew after {grown:?}, before {ended:?}");
            ended
        });
        assert!(ended < GROW_AHEAD_WAIT);
        // A note its process left behind when it died is not waited for, and goes.
        let _ = other.kill();
        let _ = other.wait();
        header.note_grow_ahead(other.id(), true);
        let started = std::time::Instant::now();
        alloc.grow(&media).expect("grow");
        assert!(started.elapsed() < std::time::Duration::from_millis(200));
        assert_eq!(header.grow_ahead_pid(), None);
        // Nor is this process's own (the medium waits for that one).
        header.note_grow_ahead(std::process::id(), true);
        let started = std::time::Instant::now();
        alloc.grow(&media).expect("grow");
        assert!(started.elapsed() < std::time::Duration::from_millis(200));
    }

    #[test]
    fn a_block_is_fresh_in_the_generation_it_was_allocated_in_only() {
        let mut buf = Vec::new();
        let alloc = scratch(4096, &mut buf);
        let header = alloc.header;
        header.set_working_gen(5);
        let a = alloc.alloc_in(1).expect("block");
        let b = alloc.alloc_in(1).expect("block");
        assert!(alloc.is_fresh(a) && alloc.is_fresh(b));
        assert!(!alloc.is_fresh(b + 1), "not allocated");
        assert!(
            !alloc.is_fresh(0) && !alloc.is_fresh(u64::MAX),
            "outside the data area"
        );
        // A commit moves the generation: what was fresh is the commit's now.
        header.set_working_gen(6);
        assert!(!alloc.is_fresh(a) && !alloc.is_fresh(b));
        // A block allocated in the new generation, in the same word, clears the old bits first.
        let c = alloc.alloc_in(1).expect("block");
        assert_eq!(c / 64, a / 64, "same word of the map");
        assert!(alloc.is_fresh(c));
        assert!(
            !alloc.is_fresh(a) && !alloc.is_fresh(b),
            "an old bit came back"
        );
        // Freed: not fresh; taken again in this generation: fresh (only this generation
        // reaches it).
        alloc.free_now(a);
        assert!(!alloc.is_fresh(a), "a free block reads fresh");
        let again = alloc.alloc_in(1).expect("block");
        assert_eq!(again, a, "the freed block is reused first");
        assert!(alloc.is_fresh(again));
        // Recovery starts from nothing fresh.
        alloc.reset();
        assert!(!alloc.is_fresh(c) && !alloc.is_fresh(again));
    }
}
