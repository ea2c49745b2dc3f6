//! Raw access to the mapped volume. This is the one module of the store that dereferences
//! pointers into the mapping; everything else asks it by byte offset.
//!
//! Invariant: `base` points at a live mapping of `len` bytes that outlives the `Region` (the store
//! owns the media). Offsets passed here come from validated layout or node fields; a bad offset is a
//! bug, and trips the bounds assertion instead of touching memory outside the mapping. The
//! `_unchecked` accessors leave that check to a caller that proved a whole area in bounds once
//! (the working header, see `Header::word_at`): their contract says so.

use std::sync::atomic::{AtomicU64, Ordering};

/// The mapped volume, addressed by byte offset.
#[derive(Clone, Copy)]
pub(crate) struct Region {
    base: *mut u8,
    len: u64,
}

// SAFETY: the mapping is shared memory meant for concurrent use; mutation is coordinated by the
// volume lock (a process-shared mutex in the mapping) and by atomic publishes.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Wrap a mapping. Caller guarantees `base` is valid for `len` bytes for the Region's life.
    pub(crate) fn new(base: *mut u8, len: u64) -> Self {
        Region { base, len }
    }

    /// The mapping's length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// [`Region::atomic_u64`] without its checks, for a caller that proved a whole area in
    /// bounds once (the working header: see `Header::word_at`).
    ///
    /// # Safety
    /// `off + 8 <= self.len()` and `off` is a multiple of 8.
    #[inline]
    pub(crate) unsafe fn atomic_u64_unchecked(&self, off: u64) -> &AtomicU64 {
        debug_assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "unchecked word out of bounds"
        );
        // SAFETY: the caller's contract (in bounds, 8-byte aligned; the mapping is page
        // aligned), and AtomicU64 has the layout of u64; the memory lives as long as the Region.
        unsafe { &*(self.base.add(off as usize) as *const AtomicU64) }
    }

    #[inline]
    fn check(&self, off: u64, len: u64) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "volume access out of bounds: {off}+{len} > {}",
            self.len
        );
    }

    /// Start loading every cache line of bytes `[start, end)` (cut at the mapping's end), for
    /// writing (`for_write`: the lines come exclusive) or for reading. A hint; the range is
    /// checked once, not per line.
    #[inline]
    pub(crate) fn prefetch_range(&self, start: u64, end: u64, for_write: bool) {
        #[cfg(target_arch = "x86_64")]
        {
            let end = end.min(self.len);
            let mut line = start & !63;
            while line < end {
                // SAFETY: `line < end <= len`, inside the mapping; a prefetch never faults and
                // changes no memory.
                unsafe {
                    let p = self.base.add(line as usize).cast::<i8>();
                    if for_write {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(p);
                    } else {
                        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p);
                    }
                }
                line += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (start, end, for_write);
    }

    /// Start loading the cache line at `off` (a hint; out-of-range offsets are ignored).
    #[inline]
    pub(crate) fn prefetch(&self, off: u64) {
        if off >= self.len {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `off` is inside the mapping; a prefetch never faults and changes no memory.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.base.add(off as usize).cast::<i8>(),
            )
        };
    }

    #[inline]
    pub(crate) fn read_u64(&self, off: u64) -> u64 {
        self.check(off, 8);
        // SAFETY: bounds checked above; unaligned read of plain bytes.
        unsafe { std::ptr::read_unaligned(self.base.add(off as usize) as *const u64) }
    }

    #[inline]
    pub(crate) fn write_u64(&self, off: u64, v: u64) {
        self.check(off, 8);
        // SAFETY: bounds checked; the caller holds the volume lock or owns the block.
        unsafe { std::ptr::write_unaligned(self.base.add(off as usize) as *mut u64, v) }
    }

    #[inline]
    pub(crate) fn read_u32(&self, off: u64) -> u32 {
        self.check(off, 4);
        // SAFETY: bounds checked above.
        unsafe { std::ptr::read_unaligned(self.base.add(off as usize) as *const u32) }
    }

    #[inline]
    pub(crate) fn write_u32(&self, off: u64, v: u32) {
        self.check(off, 4);
        // SAFETY: bounds checked; the caller holds the volume lock or owns the block.
        unsafe { std::ptr::write_unaligned(self.base.add(off as usize) as *mut u32, v) }
    }

    #[inline]
    pub(crate) fn read_u16(&self, off: u64) -> u16 {
        self.check(off, 2);
        // SAFETY: bounds checked above.
        unsafe { std::ptr::read_unaligned(self.base.add(off as usize) as *const u16) }
    }

    #[inline]
    pub(crate) fn write_u16(&self, off: u64, v: u16) {
        self.check(off, 2);
        // SAFETY: bounds checked; the caller holds the volume lock or owns the block.
        unsafe { std::ptr::write_unaligned(self.base.add(off as usize) as *mut u16, v) }
    }

    /// An 8-byte word used for publishing (roots, child pointers) and shared counters.
    #[inline]
    pub(crate) fn atomic_u64(&self, off: u64) -> &AtomicU64 {
        self.check(off, 8);
        assert_eq!(off % 8, 0, "atomic word not aligned");
        // SAFETY: in bounds, 8-byte aligned (the mapping is page aligned), and AtomicU64 has the
        // layout of u64; the memory lives as long as the Region.
        unsafe { &*(self.base.add(off as usize) as *const AtomicU64) }
    }

    /// [`Region::atomic_u32`] without its checks (see [`Region::atomic_u64_unchecked`]).
    ///
    /// # Safety
    /// `off + 4 <= self.len()` and `off` is a multiple of 4.
    #[inline]
    pub(crate) unsafe fn atomic_u32_unchecked(&self, off: u64) -> &std::sync::atomic::AtomicU32 {
        debug_assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "unchecked word out of bounds"
        );
        // SAFETY: the caller's contract (in bounds, 4-byte aligned; the mapping is page
        // aligned), and AtomicU32 has the layout of u32; the memory lives as long as the Region.
        unsafe { &*(self.base.add(off as usize) as *const std::sync::atomic::AtomicU32) }
    }

    /// The two 8-byte words at `off` and `off + 8`, checked once.
    #[inline]
    pub(crate) fn atomic_u64_pair(&self, off: u64) -> (&AtomicU64, &AtomicU64) {
        self.check(off, 16);
        assert_eq!(off % 8, 0, "atomic word not aligned");
        // SAFETY: `off + 16 <= len` (checked) and `off` is 8-byte aligned (checked).
        unsafe {
            (
                self.atomic_u64_unchecked(off),
                self.atomic_u64_unchecked(off + 8),
            )
        }
    }

    /// A 4-byte word shared between processes (a lock's waiter count).
    #[inline]
    pub(crate) fn atomic_u32(&self, off: u64) -> &std::sync::atomic::AtomicU32 {
        self.check(off, 4);
        assert_eq!(off % 4, 0, "atomic 4-byte word not aligned");
        // SAFETY: in bounds, 4-byte aligned (the mapping is page aligned), and AtomicU32 has the
        // layout of u32; the memory lives as long as the Region.
        unsafe { &*(self.base.add(off as usize) as *const std::sync::atomic::AtomicU32) }
    }

    /// Publish `v` at `off` with one aligned 8-byte store (see DESIGN: publish by one atomic store).
    #[inline]
    pub(crate) fn publish_u64(&self, off: u64, v: u64) {
        self.atomic_u64(off).store(v, Ordering::Release);
    }

    /// Publish `v` at `off` with one aligned 2-byte store, ordered after every store before it
    /// (a node's slot count: see `Node::append_block_slot`).
    #[inline]
    pub(crate) fn publish_u16(&self, off: u64, v: u16) {
        self.check(off, 2);
        assert_eq!(off % 2, 0, "atomic half-word not aligned");
        // SAFETY: in bounds, 2-byte aligned (checked; the mapping is page aligned), and
        // AtomicU16 has the layout of u16; the memory lives as long as the Region.
        let word =
            unsafe { &*(self.base.add(off as usize) as *const std::sync::atomic::AtomicU16) };
        word.store(v, Ordering::Release);
    }

    /// A view of `len` bytes at `off`. Valid while the caller holds the volume lock, which keeps
    /// the block from being freed and rewritten.
    #[inline]
    pub(crate) fn bytes(&self, off: u64, len: u64) -> &[u8] {
        self.check(off, len);
        // SAFETY: in bounds; the volume lock excludes writers of this block while the view lives.
        unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len as usize) }
    }

    /// A mutable view of `len` bytes at `off`, for filling a block nothing else references yet.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn bytes_mut(&self, off: u64, len: u64) -> &mut [u8] {
        self.check(off, len);
        // SAFETY: in bounds; callers only take this for blocks they allocated and have not yet
        // published (or header fields they own under the lock), so no other reference aliases it.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off as usize), len as usize) }
    }

    #[inline]
    pub(crate) fn copy_in(&self, off: u64, src: &[u8]) {
        crate::copy::copy_bytes(self.bytes_mut(off, src.len() as u64), src);
    }

    /// Copy `len` bytes from `src` to `dst` (the ranges may overlap).
    #[inline]
    pub(crate) fn copy_within(&self, src: u64, dst: u64, len: u64) {
        self.check(src, len);
        self.check(dst, len);
        // SAFETY: both ranges are in bounds; `copy` allows overlap. Callers only write into
        // blocks they own (fresh, unpublished) under the volume lock.
        unsafe {
            std::ptr::copy(
                self.base.add(src as usize),
                self.base.add(dst as usize),
                len as usize,
            )
        }
    }
}
