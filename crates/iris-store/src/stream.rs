//! Copying a whole block into a freshly allocated one with non-temporal stores: the destination
//! is cold (the allocator hands out blocks nobody touched lately), so ordinary stores would first
//! read every line of it from memory only to overwrite it. Streaming stores skip that read and
//! leave the caches to the data the program works on.

/// Copy `src` into `dst` (same length). Uses streaming stores when the CPU and alignment allow,
/// and orders them before any later store (an `sfence`), so a publish after it is safe.
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        if (dst.as_ptr() as usize).is_multiple_of(16) && dst.len().is_multiple_of(64) {
            // SAFETY: SSE2 is part of x86_64; both slices are valid for `len` bytes, `dst` is
            // 16-byte aligned (checked) and the lengths are a multiple of 64 (checked).
            unsafe { stream_sse2(dst.as_mut_ptr(), src.as_ptr(), dst.len()) };
            return;
        }
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    // Backwards when the destination lies 1-31 bytes past the source modulo 4 KiB: forwards,
    // each group's loads would wait for the stores just before them (see `copy`).
    let skew = (dst as usize).wrapping_sub(src as usize) & 4095;
    let backwards = (1..32).contains(&skew);
    for step in 0..len / 64 {
        let i = if backwards {
            len - 64 * (step + 1)
        } else {
            64 * step
        };
        // SAFETY: i + 64 <= len for both buffers (len is a multiple of 64); dst + i is 16-byte
        // aligned because dst is and i is a multiple of 64.
        unsafe {
            let s = src.add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    // SAFETY: a fence has no preconditions.
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_aligned_or_not() {
        let src: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut buf = vec![0u8; 8192 + 64];
        let off = buf.as_ptr().align_offset(64);
        for (start, len) in [(off, 4096), (off + 1, 4096), (off, 100), (off + 16, 512)] {
            buf.fill(0);
            copy_streaming(&mut buf[start..start + len], &src[3..3 + len]);
            assert_eq!(&buf[start..start + len], &src[3..3 + len]);
            assert!(buf[..start].iter().all(|&b| b == 0));
            assert!(buf[start + len..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn copies_every_byte_from_a_source_just_before_the_destination_modulo_4k() {
        let src: Vec<u8> = (0..3 * 4096u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut buf = vec![0u8; 3 * 4096];
        let page = buf.as_ptr().align_offset(4096);
        for skew in [1usize, 16, 31, 32, 63] {
            // A source whose address is `skew` bytes before a page boundary, and a page-aligned
            // destination: the destination lies `skew` bytes past it modulo 4 KiB.
            let s = (src.as_ptr() as usize).wrapping_neg().wrapping_sub(skew) & 4095;
            let start = page + 4096;
            buf.fill(0);
            copy_streaming(&mut buf[start..start + 4096], &src[s..s + 4096]);
            assert_eq!(&buf[start..start + 4096], &src[s..s + 4096], "skew {skew}");
            assert!(buf[..start].iter().all(|&b| b == 0));
            assert!(buf[start + 4096..].iter().all(|&b| b == 0));
        }
    }
}
