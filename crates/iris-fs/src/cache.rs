//! Lookup caches of one process: inode records, directory entries and the data-block locations
//! of file blocks, tagged with the store's change stamp of the inode record, of the entry's key
//! and of the file's data respectively (see `iris_store::Store::change_stamp`). An entry is used only while its stamp still reads the
//! same, so a hit is exactly what a tree lookup would return, at the cost of a load or two instead
//! of a descent. Any change to those keys, by any process, moves the stamp and turns its entries
//! into misses.
//!
//! Inode records and directory entries sit in direct-mapped tables of seqlocked slots made of atomic words: many
//! threads read and fill it without a lock; a slot being filled reads as a miss, and a fill that
//! finds its slot busy is dropped. Block locations sit in a [`FileCache`] per open inode: one
//! word per file block, indexed by block number (8 bytes per block, so a file's map stays in the
//! CPU caches where a hashed table of tagged entries would not).

use std::sync::atomic::AtomicPtr;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use iris_store::BlockRef;

use crate::inode::{self, Inode, INODE_BYTES};
use crate::range_lock::RangeLock;

/// Slots of the inode table (a power of two).
const INODE_SLOTS: usize = 1 << 9;
/// Slots of the directory-entry table (a power of two): 512 KiB, touched where lookups land.
const DENTRY_SLOTS: usize = 1 << 12;
/// Words of a name the directory-entry table keeps.
const DENTRY_NAME_WORDS: usize = 6;
/// Longest name the directory-entry table keeps: longer ones are looked up each time.
pub(crate) const DENTRY_NAME_MAX: usize = DENTRY_NAME_WORDS * 8;
/// Words of a directory-entry slot: directory, stamp, name length, child (0: no such name),
/// then the name's bytes.
const DENTRY_WORDS: usize = 4 + DENTRY_NAME_WORDS;
/// Words of an encoded inode record.
const INODE_WORDS: usize = INODE_BYTES / 8;

/// One seqlocked slot of `N` words. `seq` is odd while a fill is in progress.
#[repr(align(64))]
struct Slot<const N: usize> {
    seq: AtomicU64,
    words: [AtomicU64; N],
}

impl<const N: usize> Slot<N> {
    /// A consistent copy of the words, or `None` if a fill is in progress or raced the read.
    #[inline]
    fn read(&self) -> Option<[u64; N]> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let out: [u64; N] = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(out)
    }

    /// A consistent copy of the words at `at`, or `None` as for [`Slot::read`].
    #[inline]
    fn read_words<const M: usize>(&self, at: [usize; M]) -> Option<[u64; M]> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let out: [u64; M] = at.map(|i| self.words[i].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(out)
    }

    /// Whether the slot's first two words read `a` and `b` (with plain loads: a slot that
    /// already holds what a writer would put there is not written, so threads that keep
    /// refreshing one entry leave its lines shared instead of passing them back and forth).
    #[inline]
    fn begins_with(&self, a: u64, b: u64) -> bool {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return false;
        }
        let (w0, w1) = (
            self.words[0].load(Ordering::Relaxed),
            self.words[1].load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s1 && w0 == a && w1 == b
    }

    /// Replace the words, unless another thread is filling the slot.
    #[inline]
    fn write(&self, words: &[u64; N]) {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 != 0
            || self
                .seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        for (w, v) in self.words.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
        self.seq.store(s + 2, Ordering::Release);
    }
}

/// A direct-mapped table of slots, zeroed (every word 0 reads as an empty slot), in anonymous
/// memory of its own: its pages are the kernel's zero pages until a slot on them is filled.
/// (The global allocator's zeroed allocation writes every byte when the alignment is a cache
/// line's: the 512 KiB name table cost every process that opened a volume about a fifth of its
/// start-up, `true` with its working directory in Iris 3.5 ms against 1.6 ms outside.)
struct Table<const N: usize> {
    ptr: std::ptr::NonNull<Slot<N>>,
    len: usize,
}

// SAFETY: the table owns its mapping; slots are atomics, shared between threads by design.
unsafe impl<const N: usize> Send for Table<N> {}
// SAFETY: as above.
unsafe impl<const N: usize> Sync for Table<N> {}

impl<const N: usize> Table<N> {
    fn new(len: usize) -> Self {
        debug_assert!(len.is_power_of_two());
        let layout =
            std::alloc::Layout::array::<Slot<N>>(len).expect("cache tables have constant sizes");
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        let Some(ptr) =
            std::ptr::NonNull::new(p.cast::<Slot<N>>()).filter(|_| p != libc::MAP_FAILED)
        else {
            // As the allocator does when memory runs out.
            std::alloc::handle_alloc_error(layout);
        };
        Table { ptr, len }
    }

    #[inline]
    fn slot(&self, hash: u64) -> &Slot<N> {
        let i = (hash as usize) & (self.len - 1);
        // SAFETY: the mapping holds `len` slots (`i < len`), page-aligned (past a slot's
        // alignment), zero at first (a valid, empty slot: atomic integers), and lives as long
        // as `self`.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }
}

impl<const N: usize> Drop for Table<N> {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`; no reference to it outlives `self`.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<Slot<N>>(),
            )
        };
    }
}

#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let h = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^ (h >> 29)
}

/// The inode-record and directory-entry caches of one `Fs`.
pub(crate) struct Caches {
    /// (ino, stamp, record words...).
    inodes: Table<{ 2 + INODE_WORDS }>,
    /// (directory, stamp, name length, child or 0, name words...): what a name of a directory
    /// names, or that it names nothing, while the stamp of the name's entry key reads the same.
    dentries: Table<DENTRY_WORDS>,
}

/// A name packed into words for the directory-entry table, if it is short enough.
fn name_words(name: &[u8]) -> Option<[u64; DENTRY_NAME_WORDS]> {
    if name.is_empty() || name.len() > DENTRY_NAME_MAX {
        return None;
    }
    let mut w = [0u64; DENTRY_NAME_WORDS];
    for (word, chunk) in w.iter_mut().zip(name.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_le_bytes(b);
    }
    Some(w)
}

impl Caches {
    pub fn new() -> Self {
        Caches {
            inodes: Table::new(INODE_SLOTS),
            dentries: Table::new(DENTRY_SLOTS),
        }
    }

    /// What `name` in directory `dir` names, if cached at change stamp `stamp` (the stamp of
    /// the name's entry key): `Some(Some(ino))`, `Some(None)` when it names nothing, `None`
    /// when not known.
    #[inline]
    pub fn dentry(&self, dir: u64, name: &[u8], hash: u64, stamp: u64) -> Option<Option<u64>> {
        let want = name_words(name)?;
        let w = self.dentries.slot(mix(dir, hash)).read()?;
        if w[0] != dir || dir == 0 || w[1] != stamp || w[2] != name.len() as u64 {
            return None;
        }
        (w[4..] == want[..]).then_some((w[3] != 0).then_some(w[3]))
    }

    /// Remember what `name` in directory `dir` names (`None`: nothing), read at `stamp`.
    #[inline]
    pub fn put_dentry(&self, dir: u64, name: &[u8], hash: u64, stamp: u64, child: Option<u64>) {
        let Some(words) = name_words(name) else {
            return;
        };
        if dir == 0 {
            return;
        }
        let mut w = [0u64; DENTRY_WORDS];
        w[0] = dir;
        w[1] = stamp;
        w[2] = name.len() as u64;
        w[3] = child.unwrap_or(0);
        w[4..].copy_from_slice(&words);
        self.dentries.slot(mix(dir, hash)).write(&w);
    }

    /// The inode record of `ino`, if cached at change stamp `stamp`.
    #[inline]
    pub fn inode(&self, ino: u64, stamp: u64) -> Option<Inode> {
        let w = self.inodes.slot(mix(ino, u64::MAX)).read()?;
        if w[0] != ino || w[1] != stamp || ino == 0 {
            return None;
        }
        let mut bytes = [0u8; INODE_BYTES];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(&w[2..]) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        Inode::decode(ino, &bytes).ok()
    }

    /// Whether the inode record of `ino` cached at change stamp `stamp` is a file a write of
    /// bytes ending at `end` at time `now` leaves as it is: not a directory, not shadowed, at
    /// least `end` bytes long, its times `now` already. `false` when it is not cached so. Only
    /// the words it needs, not the whole record (a write's look at its inode).
    #[inline]
    pub fn inode_unchanged_by_write(&self, ino: u64, stamp: u64, end: u64, now: i64) -> bool {
        // Words of the slot: ino, stamp, then the record's (see `Inode::encode`).
        const MODE: usize = 2;
        const SIZE: usize = 2 + inode::SIZE_OFF / 8;
        const MTIME: usize = 2 + inode::MTIME_OFF / 8;
        const CTIME: usize = 2 + inode::CTIME_OFF / 8;
        const FLAGS: usize = 2 + inode::FLAGS_OFF / 8;
        let slot = self.inodes.slot(mix(ino, u64::MAX));
        let Some([i, s, mode, size, mtime, ctime, flags]) =
            slot.read_words([0, 1, MODE, SIZE, MTIME, CTIME, FLAGS])
        else {
            return false;
        };
        let inode = Inode {
            ino,
            mode: mode as u32,
            size,
            flags,
            ..Inode::default()
        };
        i == ino
            && s == stamp
            && ino != 0
            && !inode.is_dir()
            && !inode.is_shadowed()
            && size >= end
            && mtime == now as u64
            && ctime == now as u64
    }

    /// Remember the inode record of `ino`, read at change stamp `stamp`. Nothing is written when
    /// the slot holds the record at that stamp already (the stamp moves with every change of
    /// the record, so it is the same record): the common case of writes that leave the inode
    /// as it was.
    #[inline]
    pub fn put_inode(&self, inode: &Inode, stamp: u64) {
        let slot = self.inodes.slot(mix(inode.ino, u64::MAX));
        if inode.ino != 0 && slot.begins_with(inode.ino, stamp) {
            return;
        }
        let bytes = inode.encode();
        let mut w = [0u64; 2 + INODE_WORDS];
        w[0] = inode.ino;
        w[1] = stamp;
        for (word, chunk) in w[2..].iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *word = u64::from_le_bytes(b);
        }
        slot.write(&w);
    }
}

/// Bits of an epoch: the local stand-in for a change stamp in map words.
const EPOCH_BITS: u32 = 9;
const EPOCH_MASK: u64 = (1 << EPOCH_BITS) - 1;
/// Bits of a packed `BlockRef` kept in a map word (the rest hold the epoch).
const REF_BITS: u32 = 64 - EPOCH_BITS;
/// Map words per chunk (allocated on first use): 32 KiB, 16 MiB of file at 4 KiB blocks.
const CHUNK_WORDS: u64 = 4096;
/// Chunks per file: blocks past `CHUNKS * CHUNK_WORDS` are not cached (8 GiB at 4 KiB).
const CHUNKS: usize = 512;
/// File blocks per run word (see [`FileCache::predict`]).
const RUN_BLOCKS: u64 = 64;
/// Run words per map (a power of two): groups further apart share one (256 MiB of file at
/// 4 KiB blocks before two do; a shared word only predicts less often).
const RUNS: usize = 1024;
/// The bit of a run word that says two looks agreed on it.
const RUN_CONFIRMED: u64 = 1;

/// The block map of one inode in this process: for each file block, where its data block was
/// found, tagged with the epoch in force then. `state` maps the inode's current change stamp to
/// an epoch (a small counter that moves whenever a reader sees the stamp moved), so one word per
/// block suffices; when the epoch wraps, every word becomes a hint. A word of epoch 0 is only a hint of
/// where the block was last seen (`FileCache::last_seen`): no epoch is 0, so it never answers a
/// lookup.
///
/// Beside the words, the map keeps one *run word* per 64 file blocks: how far from the file's
/// block number the group's data blocks were last seen to lie. A file laid out in order lies in
/// long runs, so the run word names where a block is likely to be before its own map word is
/// loaded, and a read starts both loads at once (see `FileCache::predict`; only ever a hint).
///
/// Fills and epoch moves take the `advance` lock (tried, never waited for), and a fill stores
/// only while the state is the one its lookup began in: a fill that raced a move, or a wrap and
/// the moves after it, can never leave a word that reads as current for another stamp. (Writes
/// trust the map's answer, checked against the stamp under the store's lock: a stale word there
/// would name another block.) A write that moved the stamp itself by copying a block may move
/// the map to the new stamp with its words kept ([`FileCache::carry`]): also under that lock,
/// and a move of the state, so fills begun before it store nothing.
pub struct FileCache {
    ino: u64,
    /// (stamp << EPOCH_BITS) | epoch; 0 before first use.
    state: AtomicU64,
    /// Serializes fills and moves to a new epoch.
    advance: Mutex<()>,
    /// Chunks of `CHUNK_WORDS` words, allocated on first use and installed by one
    /// compare-exchange (never a lock: a child forked while a thread of its parent was
    /// allocating one must not wait for it), freed with the map.
    chunks: Box<[AtomicPtr<AtomicU64>]>,
    /// Run words, by group of `RUN_BLOCKS` file blocks modulo `RUNS`.
    runs: Box<[AtomicU64]>,
    /// The byte ranges of this file that changes in flight in this process hold.
    ranges: RangeLock,
}

/// An epoch of a [`FileCache`]: the state it was read in (its stamp and epoch number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Epoch(u64);

impl FileCache {
    pub(crate) fn new(ino: u64) -> Self {
        FileCache {
            ino,
            state: AtomicU64::new(0),
            advance: Mutex::new(()),
            chunks: (0..CHUNKS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            runs: (0..RUNS).map(|_| AtomicU64::new(0)).collect(),
            ranges: RangeLock::default(),
        }
    }

    /// The byte ranges in flight on this file in this process: every change of its bytes
    /// through [`crate::Fs`] takes its range here first (see `range_lock`).
    pub fn ranges(&self) -> &RangeLock {
        &self.ranges
    }

    /// The inode this map belongs to.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The epoch standing for change stamp `stamp`, moving to a new one if the stamp moved;
    /// `None` if this reader's stamp is older than one already seen (it must not cache), or
    /// another thread is moving the epoch.
    #[inline]
    pub(crate) fn epoch(&self, stamp: u64) -> Option<Epoch> {
        self.epoch_now(stamp)
            .or_else(|| self.advance_to(stamp_bits(stamp)))
    }

    /// The epoch standing for `stamp` if it is the one in force (no move).
    #[inline]
    pub(crate) fn epoch_now(&self, stamp: u64) -> Option<Epoch> {
        let st = self.state.load(Ordering::SeqCst);
        (st != 0 && st >> EPOCH_BITS == stamp_bits(stamp)).then_some(Epoch(st))
    }

    #[cold]
    fn advance_to(&self, want: u64) -> Option<Epoch> {
        // Never waits: a reader that finds another advancing reads past the map this once (and
        // a child forked while a thread of its parent held this lock never blocks on it).
        let _g = self.advance.try_lock().ok()?;
        let st = self.state.load(Ordering::SeqCst);
        if st != 0 && st >> EPOCH_BITS >= want {
            return (st >> EPOCH_BITS == want).then_some(Epoch(st));
        }
        let mut epoch = (st & EPOCH_MASK) + 1;
        if epoch > EPOCH_MASK {
            // Wrapped: words of old epochs would read as current ones, so each becomes a hint
            // of epoch 0 (where its block was last seen). No fill runs meanwhile (they hold
            // this lock), and lookups of the old state miss from here on.
            self.state.store(0, Ordering::SeqCst);
            for chunk in (0..CHUNKS).filter_map(|c| self.chunk(c)) {
                for w in chunk.iter() {
                    let v = w.load(Ordering::Relaxed);
                    if v & EPOCH_MASK != 0 {
                        w.store(v & !EPOCH_MASK, Ordering::Relaxed);
                    }
                }
            }
            epoch = 1;
        }
        let st = (want << EPOCH_BITS) | epoch;
        self.state.store(st, Ordering::SeqCst);
        Some(Epoch(st))
    }

    /// Where file block `block` lives, if known in `epoch`.
    #[inline]
    pub(crate) fn get(&self, block: u64, epoch: Epoch) -> Option<BlockRef> {
        let w = self.word(block)?.load(Ordering::Acquire);
        if w & EPOCH_MASK == epoch.0 & EPOCH_MASK {
            BlockRef::unpack(w >> EPOCH_BITS)
        } else {
            None
        }
    }

    /// Where file block `block` lived when last seen, if its word is of the epoch in force now:
    /// a hint for prefetching (the stamp is not checked; [`FileCache::get`] is the answer).
    #[inline]
    pub(crate) fn peek(&self, block: u64) -> Option<BlockRef> {
        let w = self.word(block)?.load(Ordering::Relaxed);
        let epoch = self.state.load(Ordering::Relaxed) & EPOCH_MASK;
        (w & EPOCH_MASK == epoch && epoch != 0)
            .then(|| BlockRef::unpack(w >> EPOCH_BITS))
            .flatten()
    }

    /// Where file block `block` was last seen, in whatever epoch: only a hint (the block may
    /// have moved since).
    #[inline]
    pub(crate) fn last_seen(&self, block: u64) -> Option<BlockRef> {
        BlockRef::unpack(self.word(block)?.load(Ordering::Relaxed) >> EPOCH_BITS)
    }

    #[inline]
    fn word(&self, block: u64) -> Option<&AtomicU64> {
        let chunk = self.chunk((block / CHUNK_WORDS) as usize)?;
        Some(&chunk[(block % CHUNK_WORDS) as usize])
    }

    /// Where file block `block` probably lives, from its group's run word, if two looks at
    /// blocks of the group agreed on it (`len`: the length to assume, a whole block's). Only a
    /// hint for prefetching: nothing is checked, and the block may never have lived there.
    #[inline]
    pub(crate) fn predict(&self, block: u64, len: u32) -> Option<BlockRef> {
        let run = self.runs[run_index(block)].load(Ordering::Relaxed);
        if run & RUN_CONFIRMED == 0 {
            return None;
        }
        let delta = ((run as i64) >> 1) as u64;
        Some(BlockRef::new(block.wrapping_add(delta), len))
    }

    /// Note that file block `block` was seen at volume block `at` in its group's run word:
    /// confirmed when it agrees with the word's last look, else the word's new (unconfirmed)
    /// distance. Written only when it changes, so readers of a settled file share its line.
    #[inline]
    fn note_run(&self, block: u64, at: u64) {
        let run = &self.runs[run_index(block)];
        let seen = at.wrapping_sub(block) << 1;
        let old = run.load(Ordering::Relaxed);
        let new = if old & !RUN_CONFIRMED == seen {
            seen | RUN_CONFIRMED
        } else {
            seen
        };
        if new != old {
            run.store(new, Ordering::Relaxed);
        }
    }

    /// Start loading the map word of file block `block` into the cache, so that the miss overlaps
    /// the work a read does before it looks (a hint: no effect on what is read).
    #[inline]
    pub(crate) fn prefetch(&self, block: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(w) = self.word(block) {
            // SAFETY: a prefetch of a valid address never faults and changes no memory.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    (w as *const AtomicU64).cast(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = block;
    }

    /// Remember where file block `block` lives, found by a lookup made in `epoch`: stored only
    /// if that is still the epoch in force (and no other fill or move is running: then it is
    /// simply not cached).
    pub(crate) fn put(&self, block: u64, epoch: Epoch, at: BlockRef) {
        let Some(slot) = self.slot(block, at) else {
            return;
        };
        let Ok(_g) = self.advance.try_lock() else {
            return;
        };
        if self.state.load(Ordering::SeqCst) == epoch.0 {
            slot.1.store(
                (slot.0 << EPOCH_BITS) | (epoch.0 & EPOCH_MASK),
                Ordering::Release,
            );
        }
    }

    /// After this process's own change of where file block `block` lives (a copy to a new block,
    /// a new length) moved the data's change stamp to `stamp` (read under the write's lock, right
    /// after it): if the map was in force at the stamp just before, that move was this write's
    /// alone (every change moves the stamp once, so another one would have moved it past
    /// `stamp`), and every other word is as right at `stamp` as it was. The map then moves to
    /// `stamp` keeping its words, with `block`'s word at `at` first (so nobody reads the old one
    /// as current at `stamp`). Otherwise the map starts a new epoch at `stamp` knowing `block`
    /// alone (unless it is past `stamp` already: then `at` is kept as a hint, see
    /// [`FileCache::hint`]). Without this, each such write turned every word of the map into a
    /// miss: after a commit, random writes of a big file walked the tree until they had
    /// relearned every block, and so did small random writes into a file's holes.
    pub(crate) fn carry(&self, block: u64, stamp: u64, at: BlockRef) {
        let Some((packed, slot)) = self.slot(block, at) else {
            return;
        };
        if let Ok(_g) = self.advance.try_lock() {
            let st = self.state.load(Ordering::SeqCst);
            let before = stamp_bits(stamp.wrapping_sub(1));
            if st != 0 && st >> EPOCH_BITS == before && stamp_bits(stamp) == before + 1 {
                let epoch = st & EPOCH_MASK;
                slot.store((packed << EPOCH_BITS) | epoch, Ordering::Release);
                self.state
                    .store((stamp_bits(stamp) << EPOCH_BITS) | epoch, Ordering::SeqCst);
                return;
            }
        }
        match self.epoch(stamp) {
            Some(e) => self.put(block, e, at),
            None => self.hint(block, at),
        }
    }

    /// Forget where file block `block` lives (its word answers no epoch), before a change that
    /// moves it carries the map to a new epoch: a word left as it was would read as current
    /// there (see [`FileCache::carry`]) if the block's new place is not put after.
    pub(crate) fn forget(&self, block: u64) {
        if let Some(w) = self.word(block) {
            w.store(0, Ordering::Release);
        }
    }

    /// Note where file block `block` was just written, with no epoch: a hint for
    /// [`FileCache::last_seen`], never an answer of [`FileCache::get`].
    pub(crate) fn hint(&self, block: u64, at: BlockRef) {
        if let Some((packed, slot)) = self.slot(block, at) {
            slot.store(packed << EPOCH_BITS, Ordering::Relaxed);
        }
    }

    /// The packed location and the word of `block` (allocating its chunk), if it fits; the
    /// location is noted in the group's run word too.
    fn slot(&self, block: u64, at: BlockRef) -> Option<(u64, &AtomicU64)> {
        let packed = at.pack();
        if packed >> REF_BITS != 0 {
            return None; // a block number too large to pack beside the epoch
        }
        let c = (block / CHUNK_WORDS) as usize;
        let chunk = match self.chunk(c) {
            Some(chunk) => chunk,
            None => {
                let cell = self.chunks.get(c)?;
                let fresh: Box<[AtomicU64]> = (0..CHUNK_WORDS).map(|_| AtomicU64::new(0)).collect();
                let ptr = Box::into_raw(fresh).cast::<AtomicU64>();
                if let Err(_other) = cell.compare_exchange(
                    std::ptr::null_mut(),
                    ptr,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // SAFETY: `ptr` came from Box::into_raw of a slice of CHUNK_WORDS words
                    // just above and was never shared (the exchange failed).
                    drop(unsafe {
                        Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                            ptr,
                            CHUNK_WORDS as usize,
                        ))
                    });
                }
                self.chunk(c)?
            }
        };
        self.note_run(block, at.block());
        Some((packed, &chunk[(block % CHUNK_WORDS) as usize]))
    }

    /// Chunk `c`, if allocated.
    #[inline]
    fn chunk(&self, c: usize) -> Option<&[AtomicU64]> {
        let ptr = self.chunks.get(c)?.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a chunk of CHUNK_WORDS words installed by `slot` and
        // freed only when the map drops, which outlives `&self`.
        (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr, CHUNK_WORDS as usize) })
    }
}

impl Drop for FileCache {
    fn drop(&mut self) {
        // Plain loads through `&mut`: an atomic swap per word cost ~3 us per map here (512
        // words), which every last close of a file paid.
        for cell in self.chunks.iter_mut() {
            let ptr = std::mem::replace(cell.get_mut(), std::ptr::null_mut());
            if !ptr.is_null() {
                // SAFETY: installed by `slot` from Box::into_raw of a slice of CHUNK_WORDS
                // words; `&mut self` means nobody else holds it now.
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                        ptr,
                        CHUNK_WORDS as usize,
                    ))
                });
            }
        }
    }
}

/// The index of file block `block`'s run word.
#[inline]
fn run_index(block: u64) -> usize {
    (block / RUN_BLOCKS) as usize & (RUNS - 1)
}

/// The bits of a change stamp a state keeps.
#[inline]
fn stamp_bits(stamp: u64) -> u64 {
    stamp & (u64::MAX >> EPOCH_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(ino: u64, size: u64) -> Inode {
        Inode {
            ino,
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            size,
            mtime_ns: 17,
            ..Inode::default()
        }
    }

    fn at(block: u64) -> BlockRef {
        BlockRef::unpack(block << 17 | 4096).expect("non-zero")
    }

    #[test]
    fn a_cached_inode_says_which_writes_leave_it_as_it_is() {
        let c = Caches::new();
        let now = 1_000_000_007i64;
        let file = Inode {
            mtime_ns: now,
            ctime_ns: now,
            ..inode(9, 1000)
        };
        c.put_inode(&file, 5);
        assert!(c.inode_unchanged_by_write(9, 5, 1000, now));
        assert!(c.inode_unchanged_by_write(9, 5, 1, now));
        assert!(
            !c.inode_unchanged_by_write(9, 5, 1001, now),
            "grows the file"
        );
        assert!(
            !c.inode_unchanged_by_write(9, 5, 10, now + 1),
            "another tick"
        );
        assert!(!c.inode_unchanged_by_write(9, 6, 10, now), "another stamp");
        assert!(!c.inode_unchanged_by_write(10, 5, 10, now), "another inode");
        let old_ctime = Inode {
            ctime_ns: now - 1,
            ..file
        };
        c.put_inode(&old_ctime, 7);
        assert!(!c.inode_unchanged_by_write(9, 7, 10, now), "ctime moves");
        let dir = Inode {
            mode: libc::S_IFDIR | 0o755,
            ..file
        };
        c.put_inode(&dir, 8);
        assert!(!c.inode_unchanged_by_write(9, 8, 10, now), "a directory");
        let shadowed = Inode {
            flags: Inode::SHADOWED,
            ..file
        };
        c.put_inode(&shadowed, 9);
        assert!(!c.inode_unchanged_by_write(9, 9, 10, now), "shadowed");
        c.put_inode(&file, 10);
        assert!(c.inode_unchanged_by_write(9, 10, 10, now));
    }

    #[test]
    fn a_block_hits_only_in_the_epoch_of_its_stamp() {
        let c = FileCache::new(7);
        let e = c.epoch(10).expect("first epoch");
        assert_eq!(c.get(3, e), None);
        c.put(3, e, at(12345));
        assert_eq!(c.get(3, e), Some(at(12345)));
        assert_eq!(c.epoch(10), Some(e), "same stamp, same epoch");
        let e2 = c.epoch(11).expect("next epoch");
        assert_ne!(e, e2);
        assert_eq!(c.get(3, e2), None, "a moved stamp is a miss");
        assert_eq!(c.epoch(10), None, "an older stamp than seen does not cache");
        assert_eq!(c.get(4, e2), None);
        // Far blocks are simply not cached.
        let far = CHUNK_WORDS * CHUNKS as u64 + 1;
        c.put(far, e2, at(1));
        assert_eq!(c.get(far, e2), None);
    }

    #[test]
    fn a_carry_keeps_the_map_across_the_one_move_it_made() {
        let c = FileCache::new(7);
        let e = c.epoch(10).expect("first epoch");
        c.put(3, e, at(100));
        c.put(4, e, at(200));
        // This process's copy of block 3 moved the stamp 10 -> 11: block 4 stays known, block 3
        // is where the copy went.
        c.carry(3, 11, at(300));
        let e11 = c.epoch_now(11).expect("the map is in force at 11");
        assert_eq!(c.get(4, e11), Some(at(200)));
        assert_eq!(c.get(3, e11), Some(at(300)));
        assert_eq!(c.epoch_now(10), None, "no longer in force at 10");
        // A move the map did not see (11 -> 12 by someone else), then a copy that moved it to
        // 13: nothing is carried; the map starts again at 13, knowing the copy alone.
        c.carry(4, 13, at(400));
        let e13 = c.epoch_now(13).expect("a new epoch at 13");
        assert_eq!(c.get(3, e13), None, "nothing of the old epoch is carried");
        assert_eq!(c.get(4, e13), Some(at(400)));
        // A copy whose stamp the map is already past: a hint only.
        c.carry(3, 12, at(600));
        assert!(c.epoch_now(13).is_some());
        assert_eq!(c.get(3, e13), None);
        assert_eq!(c.last_seen(3), Some(at(600)));
        // A map not in force yet starts at the copy's stamp.
        let fresh = FileCache::new(8);
        fresh.carry(1, 5, at(500));
        let e5 = fresh.epoch_now(5).expect("in force at 5");
        assert_eq!(fresh.get(1, e5), Some(at(500)));
    }

    #[test]
    fn a_peek_names_a_block_of_the_epoch_in_force_only() {
        let c = FileCache::new(7);
        assert_eq!(c.peek(3), None, "nothing seen yet");
        let e = c.epoch(10).expect("first epoch");
        assert_eq!(c.peek(3), None);
        c.put(3, e, at(12345));
        assert_eq!(c.peek(3), Some(at(12345)));
        c.epoch(11).expect("next epoch");
        assert_eq!(c.peek(3), None, "a word of an older epoch is no hint");
        assert_eq!(c.peek(CHUNK_WORDS * CHUNKS as u64 + 1), None, "far blocks");
    }

    #[test]
    fn a_run_is_predicted_once_two_blocks_of_its_group_agree() {
        let c = FileCache::new(7);
        let e = c.epoch(10).expect("epoch");
        assert_eq!(c.predict(5, 4096), None, "nothing seen yet");
        // Blocks 0..64 of the file lie at volume blocks 1000.. (a file written in order).
        c.put(0, e, at(1000));
        assert_eq!(c.predict(5, 4096), None, "one look is not a run");
        c.hint(1, at(1001));
        assert_eq!(c.predict(5, 4096), Some(at(1005)), "two looks agree");
        assert_eq!(c.predict(63, 4096), Some(at(1063)));
        assert_eq!(c.predict(64, 4096), None, "another group");
        // Below the file's block number (a volume block smaller than the file block).
        c.put(64 + 9, e, at(10));
        c.put(64 + 10, e, at(11));
        assert_eq!(c.predict(64, 4096), Some(at(1)));
        // A block copied elsewhere unsettles its group until two looks agree again.
        c.hint(2, at(5000));
        assert_eq!(c.predict(5, 4096), None, "a block seen elsewhere");
        c.hint(3, at(5001));
        assert_eq!(c.predict(5, 4096), Some(at(5003)));
        // Runs survive epoch moves and wraps (they are hints, never answers).
        c.epoch(11).expect("next epoch");
        assert_eq!(c.predict(5, 4096), Some(at(5003)));
        assert_eq!(c.get(3, c.epoch(11).expect("epoch")), None);
    }

    #[test]
    fn epochs_wrap_by_clearing_the_map() {
        let c = FileCache::new(1);
        let e = c.epoch(1).expect("epoch");
        c.put(0, e, at(99));
        let mut stamp = 1;
        // Walk the epoch all the way round to the same number.
        loop {
            stamp += 1;
            let now = c.epoch(stamp).expect("epoch");
            if now.0 & EPOCH_MASK == e.0 & EPOCH_MASK {
                assert_eq!(
                    c.get(0, now),
                    None,
                    "a word from the previous round is not current"
                );
                // A fill looked up in the first round, landing now: the epoch number is the
                // same, the stamp is not, so it must not be stored.
                c.put(1, e, at(7));
                assert_eq!(c.get(1, now), None, "a fill from an older round is dropped");
                assert_eq!(c.last_seen(0), Some(at(99)), "a cleared word stays a hint");
                break;
            }
            assert!(stamp < 2 * EPOCH_MASK + 4, "epoch never came back");
        }
    }

    #[test]
    fn a_fill_from_an_epoch_no_longer_in_force_is_dropped() {
        let c = FileCache::new(1);
        let e = c.epoch(10).expect("epoch");
        let e2 = c.epoch(11).expect("next epoch");
        c.put(5, e, at(50));
        assert_eq!(c.get(5, e2), None);
        assert_eq!(c.last_seen(5), None, "nothing stored");
        c.put(5, e2, at(51));
        assert_eq!(c.get(5, e2), Some(at(51)));
        assert_eq!(c.epoch_now(11), Some(e2));
        assert_eq!(c.epoch_now(12), None, "no move without epoch()");
        assert_eq!(c.epoch_now(11), Some(e2));
    }

    #[test]
    fn a_hint_says_where_a_block_was_last_seen_but_never_answers_a_lookup() {
        let c = FileCache::new(1);
        let e = c.epoch(3).expect("epoch");
        c.hint(9, at(90));
        assert_eq!(c.last_seen(9), Some(at(90)));
        assert_eq!(c.get(9, e), None, "a hint is not a location of this epoch");
        assert_eq!(c.peek(9), None, "nor a prefetch hint");
        c.put(9, e, at(91));
        assert_eq!(c.get(9, e), Some(at(91)));
        let e2 = c.epoch(4).expect("next epoch");
        assert_eq!(c.get(9, e2), None);
        assert_eq!(
            c.last_seen(9),
            Some(at(91)),
            "the word is still a hint after a move"
        );
    }

    #[test]
    fn a_directory_entry_hits_only_for_its_directory_name_and_stamp() {
        let c = Caches::new();
        let name = b"videodev2.h";
        c.put_dentry(9, name, 77, 5, Some(1234));
        assert_eq!(c.dentry(9, name, 77, 5), Some(Some(1234)));
        assert_eq!(c.dentry(9, name, 77, 6), None, "another stamp");
        assert_eq!(c.dentry(8, name, 77, 5), None, "another directory");
        // Another name in the same slot (same hash given): the bytes decide.
        assert_eq!(c.dentry(9, b"videodev2.c", 77, 5), None);
        assert_eq!(c.dentry(9, b"videodev2.hh", 77, 5), None);
        // A name that names nothing is remembered as such.
        c.put_dentry(9, b"absent", 78, 5, None);
        assert_eq!(c.dentry(9, b"absent", 78, 5), Some(None));
        // Names longer than the slot keeps are never cached.
        let long = [b'x'; DENTRY_NAME_MAX + 1];
        c.put_dentry(9, &long, 79, 5, Some(1));
        assert_eq!(c.dentry(9, &long, 79, 5), None);
        let longest = [b'y'; DENTRY_NAME_MAX];
        c.put_dentry(9, &longest, 80, 5, Some(2));
        assert_eq!(c.dentry(9, &longest, 80, 5), Some(Some(2)));
    }

    /// Pages of `t`'s slots the kernel has resident.
    fn resident_pages<const N: usize>(t: &Table<N>) -> usize {
        let bytes = t.len * std::mem::size_of::<Slot<N>>();
        let mut resident = vec![0u8; bytes.div_ceil(4096)];
        // SAFETY: mincore reads the residency of the table's own mapping into a vector of one
        // byte per page.
        let rc = unsafe { libc::mincore(t.ptr.as_ptr().cast(), bytes, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        resident.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn new_tables_leave_their_pages_untouched_until_slots_are_filled() {
        // Every process that opens a volume makes them: zeroing them cost a fifth of a short
        // process's start-up.
        let c = Caches::new();
        assert_eq!(resident_pages(&c.dentries), 0);
        assert_eq!(resident_pages(&c.inodes), 0);
        c.put_dentry(9, b"name", 1, 1, Some(2));
        assert_eq!(resident_pages(&c.dentries), 1);
    }

    #[test]
    fn an_inode_hits_only_at_its_stamp() {
        let c = Caches::new();
        c.put_inode(&inode(7, 99), 5);
        assert_eq!(c.inode(7, 5), Some(inode(7, 99)));
        assert_eq!(c.inode(7, 6), None);
        assert_eq!(c.inode(8, 5), None);
    }

    #[test]
    fn a_record_cached_at_its_stamp_already_is_not_written_again() {
        let c = Caches::new();
        c.put_inode(&inode(7, 99), 5);
        let slot = c.inodes.slot(mix(7, u64::MAX));
        let seq = slot.seq.load(Ordering::Relaxed);
        c.put_inode(&inode(7, 99), 5);
        assert_eq!(slot.seq.load(Ordering::Relaxed), seq, "rewritten");
        // A new stamp is written.
        c.put_inode(&inode(7, 100), 6);
        assert_eq!(slot.seq.load(Ordering::Relaxed), seq + 2);
        assert_eq!(c.inode(7, 6), Some(inode(7, 100)));
        assert_eq!(c.inode(7, 5), None);
    }

    #[test]
    fn a_slot_being_filled_reads_as_a_miss() {
        let c = Caches::new();
        c.put_inode(&inode(1, 1), 1);
        let slot = c.inodes.slot(mix(1, u64::MAX));
        let s = slot.seq.load(Ordering::Relaxed);
        slot.seq.store(s + 1, Ordering::Relaxed);
        assert_eq!(c.inode(1, 1), None);
        // A fill that finds the slot busy is dropped.
        c.put_inode(&inode(1, 2), 2);
        slot.seq.store(s, Ordering::Relaxed);
        assert_eq!(c.inode(1, 2), None);
        assert_eq!(c.inode(1, 1), Some(inode(1, 1)));
    }

    #[test]
    fn concurrent_fills_never_mix_records() {
        let c = std::sync::Arc::new(Caches::new());
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..100_000u64 {
                        // Both threads fill the same slot with self-consistent records.
                        let v = t * 1_000_000 + i + 1;
                        c.put_inode(&inode(1, v), v);
                        for s in [v, v.wrapping_sub(1)] {
                            if let Some(got) = c.inode(1, s) {
                                assert_eq!(got.size, s, "record from another fill");
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
    }
}
