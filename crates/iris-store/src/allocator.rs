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
use crate::header::Header;
use crate::layout::{Layout, SUMMARY_SPAN_BLOCKS};
use crate::readers::Readers;
use crate::region::Region;

/// Bytes the volume grows by at least, when it runs out of blocks.
const GROW_STEP_BYTES: u64 = 16 << 20;

/// Allocation over the bitmaps of one volume. Callers hold the volume lock.
#[derive(Clone, Copy)]
pub(crate) struct Allocator {
    region: Region,
    layout: Layout,
    header: Header,
    readers: Readers,
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
    /// after the next grace period.
    pub fn release(&self, b: u64) {
        if self.readers.park(b) {
            self.drain();
        }
    }

    /// Free the blocks of writers that died between allocating and publishing them.
    pub fn reap_dead_writers(&self) {
        for b in self.readers.reap_dead() {
            if self.is_used(b) {
                self.free_now(b);
            }
        }
    }

    /// Wait out the readers, then free every parked block.
    pub fn drain(&self) {
        if self.readers.parked() == 0 {
            return;
        }
        self.readers.grace_period();
        let mut parked = Vec::with_capacity(crate::readers::LIMBO_CAPACITY as usize);
        self.readers.take_parked(&mut parked);
        for b in parked {
            self.free_now(b);
        }
    }

    #[inline]
    fn w_word_off(&self, word: u64) -> u64 {
        self.layout.w_off + word * 8
    }

    #[inline]
    fn p_word_off(&self, word: u64) -> u64 {
        self.layout.p_off + word * 8
    }

    /// Whether block `b` is set in W.
    pub fn is_used(&self, b: u64) -> bool {
        b < self.layout.max_blocks
            && self.region.read_u64(self.w_word_off(b / 64)) & (1 << (b % 64)) != 0
    }

    /// Whether block `b` waits in P for the next commit.
    pub fn is_pending(&self, b: u64) -> bool {
        b < self.layout.max_blocks
            && self.region.read_u64(self.p_word_off(b / 64)) & (1 << (b % 64)) != 0
    }

    /// Allocate one block, growing the volume if it is full. Fails with `NoSpace` at the limit.
    pub fn alloc(&self, media: &dyn Media) -> Result<u64> {
        if let Some(b) = self.scan() {
            return Ok(b);
        }
        if self.readers.parked() > 0 {
            self.drain();
            if let Some(b) = self.scan() {
                return Ok(b);
            }
        }
        self.grow(media)?;
        self.scan().ok_or(StoreError::NoSpace)
    }

    /// Next-fit search from the hint, wrapping once.
    fn scan(&self) -> Option<u64> {
        let backed = self.header.backed_blocks().min(self.layout.max_blocks);
        let first_word = self.layout.data_start / 64;
        let end_word = backed.div_ceil(64);
        let hint = self
            .header
            .alloc_hint()
            .clamp(first_word, end_word.max(first_word + 1) - 1);
        for word in (hint..end_word).chain(first_word..hint) {
            let off = self.w_word_off(word);
            let bits = self.region.read_u64(off);
            if bits == u64::MAX {
                continue;
            }
            let bit = u64::from((!bits).trailing_zeros());
            let b = word * 64 + bit;
            if b >= backed || b < self.layout.data_start {
                // Only the first and last words can hold out-of-range bits; metadata bits are
                // preset, so this is the tail of the volume.
                continue;
            }
            self.region.write_u64(off, bits | (1 << bit));
            self.header.add_used(1);
            self.header.set_alloc_hint(word);
            return Some(b);
        }
        None
    }

    fn grow(&self, media: &dyn Media) -> Result<()> {
        let backed = self.header.backed_blocks();
        if backed >= self.layout.max_blocks {
            return Err(StoreError::NoSpace);
        }
        let step = (backed / 2).max(GROW_STEP_BYTES / self.layout.bs());
        let new_backed = (backed + step).min(self.layout.max_blocks);
        media.grow(self.layout.offset(new_backed))?;
        self.header.set_backed_blocks(new_backed);
        Ok(())
    }

    /// Return `b` to the free space now (it was never committed).
    pub fn free_now(&self, b: u64) {
        debug_assert!(
            b >= self.layout.data_start && self.is_used(b),
            "double free of {b}"
        );
        let off = self.w_word_off(b / 64);
        let bits = self.region.read_u64(off);
        if bits & (1 << (b % 64)) != 0 {
            self.region.write_u64(off, bits & !(1 << (b % 64)));
            self.header.add_used(-1);
            // Reuse freed blocks before untouched ones: their pages are already backed and
            // likely cached, where a never-used page of a sparse volume costs a zero-fill fault.
            if b / 64 < self.header.alloc_hint() {
                self.header.set_alloc_hint(b / 64);
            }
        }
    }

    /// Free `b` once the next commit is durable (the last commit still references it).
    pub fn defer_free(&self, b: u64) {
        debug_assert!(b >= self.layout.data_start && self.is_used(b));
        let word = b / 64;
        let off = self.p_word_off(word);
        let bits = self.region.read_u64(off);
        if bits & (1 << (b % 64)) != 0 {
            return;
        }
        self.region.write_u64(off, bits | (1 << (b % 64)));
        // One summary bit per P word; remember which summary words to visit at commit.
        let sw = word / 64;
        if sw < self.header.pending_lo() {
            self.header.set_pending_lo(sw);
        }
        if sw > self.header.pending_hi() {
            self.header.set_pending_hi(sw);
        }
        let soff = self.layout.summary_off + sw * 8;
        let sbits = self.region.read_u64(soff);
        self.region.write_u64(soff, sbits | (1 << (word % 64)));
        self.header
            .set_pending_blocks(self.header.pending_blocks() + 1);
    }

    /// After a durable commit: every pending block becomes free (W &= !P, P = 0).
    pub fn apply_pending(&self) {
        // Readers that loaded the previous working tree may still be inside these blocks.
        self.readers.grace_period();
        self.drain();
        let summary_words = self.layout.summary_bytes / 8;
        let (lo, hi) = (self.header.pending_lo(), self.header.pending_hi());
        for sw in (lo..=hi.min(summary_words.saturating_sub(1))).filter(|_| lo <= hi) {
            let soff = self.layout.summary_off + sw * 8;
            let mut sbits = self.region.read_u64(soff);
            while sbits != 0 {
                let bit = u64::from(sbits.trailing_zeros());
                sbits &= sbits - 1;
                let w = sw * 64 + bit;
                debug_assert!(w * SUMMARY_SPAN_BLOCKS < self.layout.max_blocks);
                {
                    let p = self.region.read_u64(self.p_word_off(w));
                    if p == 0 {
                        continue;
                    }
                    let woff = self.w_word_off(w);
                    let bits = self.region.read_u64(woff);
                    let freed = bits & p;
                    self.region.write_u64(woff, bits & !p);
                    self.header.add_used(-i64::from(freed.count_ones()));
                    if freed != 0 && w < self.header.alloc_hint() {
                        self.header.set_alloc_hint(w);
                    }
                    self.region.write_u64(self.p_word_off(w), 0);
                }
            }
            self.region.write_u64(soff, 0);
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
        for b in 0..l.data_start {
            self.set_used(b);
        }
        self.header.set_used_blocks(l.data_start);
        self.header.set_pending_blocks(0);
        self.header.set_pending_lo(u64::MAX);
        self.header.set_pending_hi(0);
        self.header.set_alloc_hint(l.data_start / 64);
    }

    /// Set `b` in W without counting (recovery marks, then recounts).
    pub fn set_used(&self, b: u64) {
        let off = self.w_word_off(b / 64);
        let bits = self.region.read_u64(off);
        self.region.write_u64(off, bits | (1 << (b % 64)));
    }

    /// OR `marks` into W (recovery: every block a committed tree reaches is in use).
    pub fn mark_used(&self, marks: &[u64]) {
        let words = (self.layout.bitmap_bytes / 8).min(marks.len() as u64);
        for w in 0..words {
            let m = marks[w as usize];
            if m != 0 {
                let off = self.w_word_off(w);
                self.region.write_u64(off, self.region.read_u64(off) | m);
            }
        }
    }

    /// Count W bits (after a recovery walk).
    pub fn count_used(&self) -> u64 {
        let words = self.layout.bitmap_bytes / 8;
        (0..words)
            .map(|w| u64::from(self.region.read_u64(self.w_word_off(w)).count_ones()))
            .sum()
    }

    /// Every block in W that `keep` does not hold is freed (and dropped from P): the sweep of
    /// garbage collection. Returns the number of blocks freed.
    pub fn sweep(&self, keep: &[u64]) -> u64 {
        self.readers.grace_period();
        // Parked blocks are unreachable: the sweep frees them, so forget them here.
        let mut parked = Vec::new();
        self.readers.take_parked(&mut parked);
        let mut freed = 0u64;
        let mut unpended = 0u64;
        let words = (self.layout.bitmap_bytes / 8).min(keep.len() as u64);
        for w in 0..words {
            let woff = self.w_word_off(w);
            let bits = self.region.read_u64(woff);
            let mut k = keep[w as usize];
            if w == 0 || w * 64 < self.layout.data_start {
                // Metadata blocks are always kept.
                for b in w * 64..(w * 64 + 64).min(self.layout.data_start) {
                    k |= 1 << (b % 64);
                }
            }
            let drop = bits & !k;
            if drop != 0 {
                self.region.write_u64(woff, bits & !drop);
                freed += u64::from(drop.count_ones());
                let poff = self.p_word_off(w);
                let p = self.region.read_u64(poff);
                if p & drop != 0 {
                    unpended += u64::from((p & drop).count_ones());
                    self.region.write_u64(poff, p & !drop);
                }
            }
        }
        self.header.add_used(-(freed as i64));
        self.header
            .set_pending_blocks(self.header.pending_blocks().saturating_sub(unpended));
        freed
    }
}
