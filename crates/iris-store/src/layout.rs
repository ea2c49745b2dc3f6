//! Where things are on a volume. Block 0 and 1 hold superblocks A and B; then the working header
//! (shared state of the processes that map the volume: lock, working root, generations), the working
//! allocation bitmap W, the pending-free bitmap P and its summary, the fresh map F (which blocks
//! were allocated in the working generation, see `Allocator::is_fresh`); the rest are tree nodes
//! and data blocks, handed out by the allocator.

use crate::error::{Result, StoreError};

/// Smallest block size a volume may use.
pub const MIN_BLOCK_SIZE: u32 = 512;
/// Largest block size a volume may use.
pub const MAX_BLOCK_SIZE: u32 = 64 * 1024;
/// Bytes reserved for the working header.
pub(crate) const HEADER_BYTES: u64 = 61440;
/// Blocks covered by one bit of the pending-free summary (one u64 word of P).
pub(crate) const SUMMARY_SPAN_BLOCKS: u64 = 64;

/// Region offsets of one volume, derived from its block size and size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub block_size: u32,
    pub block_shift: u32,
    pub max_blocks: u64,
    pub header_off: u64,
    pub w_off: u64,
    pub p_off: u64,
    pub summary_off: u64,
    pub bitmap_bytes: u64,
    pub summary_bytes: u64,
    /// The fresh map: a (generation, bits) pair of words per W word.
    pub fresh_off: u64,
    pub fresh_bytes: u64,
    /// First block the allocator may hand out.
    pub data_start: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Layout {
    /// The layout of a volume with `block_size` and room for `max_blocks` blocks.
    pub fn new(block_size: u32, max_blocks: u64) -> Result<Self> {
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
        {
            return Err(StoreError::Invalid(format!(
                "block size {block_size} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
            )));
        }
        let bs = u64::from(block_size);
        let bitmap_bytes = round_up(max_blocks.div_ceil(8), bs);
        let summary_bytes = round_up(max_blocks.div_ceil(SUMMARY_SPAN_BLOCKS * 8), bs);
        let header_off = 2 * bs;
        let w_off = header_off + round_up(HEADER_BYTES, bs);
        let p_off = w_off + bitmap_bytes;
        let summary_off = p_off + bitmap_bytes;
        let fresh_off = summary_off + summary_bytes;
        let fresh_bytes = round_up(bitmap_bytes * 2, bs);
        let data_start = (fresh_off + fresh_bytes) / bs;
        if data_start + 8 > max_blocks {
            return Err(StoreError::Invalid(format!(
                "volume of {max_blocks} blocks is too small: metadata alone takes {data_start}"
            )));
        }
        Ok(Layout {
            block_size,
            block_shift: block_size.trailing_zeros(),
            max_blocks,
            header_off,
            w_off,
            p_off,
            summary_off,
            bitmap_bytes,
            summary_bytes,
            fresh_off,
            fresh_bytes,
            data_start,
        })
    }

    /// Byte offset of block `b`.
    #[inline]
    pub fn offset(&self, block: u64) -> u64 {
        block << self.block_shift
    }

    /// Block size in bytes, as u64.
    #[inline]
    pub fn bs(&self) -> u64 {
        u64::from(self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_do_not_overlap_and_are_block_aligned() {
        for bs in [512u32, 4096, 65536] {
            let l = Layout::new(bs, 100_000).expect("layout");
            let b = u64::from(bs);
            assert!(l.header_off + HEADER_BYTES <= l.w_off);
            assert_eq!(l.w_off % b, 0);
            assert_eq!(l.p_off, l.w_off + l.bitmap_bytes);
            assert!(l.bitmap_bytes * 8 >= 100_000);
            assert!(l.summary_bytes * 8 * SUMMARY_SPAN_BLOCKS >= 100_000);
            assert!(l.fresh_off >= l.summary_off + l.summary_bytes);
            assert!(l.fresh_bytes >= l.bitmap_bytes * 2);
            assert!(l.offset(l.data_start) >= l.fresh_off + l.fresh_bytes);
        }
    }

    #[test]
    fn rejects_bad_block_sizes_and_tiny_volumes() {
        assert!(Layout::new(1000, 1000).is_err());
        assert!(Layout::new(256, 1000).is_err());
        assert!(Layout::new(128 * 1024, 1000).is_err());
        assert!(Layout::new(4096, 4).is_err());
    }
}
