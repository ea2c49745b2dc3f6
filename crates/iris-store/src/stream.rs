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
    let mut i = 0;
    while i < len {
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
        i += 64;
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
}
