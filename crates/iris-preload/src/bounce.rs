//! Bounce buffers for the calls that copy through memory of Iris's own (`readv` and `preadv`
//! into several buffers, `copy_file_range`, `sendfile` and `splice` between two fds): one per
//! thread, kept between calls. A new zeroed buffer per call cost more than the copy: glibc
//! serves a 1 MiB allocation from its heap once one was freed, and clears it (`cp -r` of
//! /usr/include within Iris spent 43 % of its time in that `memset`).

use std::cell::Cell;

/// Largest buffer kept for the next call; a call that needs more gets one of its own.
const KEEP_MAX: usize = 1 << 20;

thread_local! {
    /// The thread's buffer between calls (empty while a call uses it: a signal handler's call
    /// that arrives meanwhile gets one of its own).
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Run `f` with a buffer of `len` bytes. Its contents are unspecified (bytes of an earlier
/// call): `f` must hand out only what it wrote into it.
pub(crate) fn with<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if len > KEEP_MAX {
        // One of its own, and the kept one stays kept.
        return f(&mut vec![0u8; len]);
    }
    let mut buf = SPARE.try_with(Cell::take).unwrap_or_default();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let r = f(&mut buf[..len]);
    let _ = SPARE.try_with(|s| s.set(buf));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_kept_for_the_next_call_and_a_nested_call_gets_its_own() {
        let first = with(4096, |b| {
            b[..5].copy_from_slice(b"hello");
            b.as_ptr() as usize
        });
        // The same memory again (no new allocation), the earlier bytes still in it.
        let (again, seen) = with(100, |b| (b.as_ptr() as usize, b[..5].to_vec()));
        assert_eq!(again, first);
        assert_eq!(seen, b"hello");
        // A call inside a call (a signal handler's) gets a buffer of its own.
        with(64, |outer| {
            let outer_at = outer.as_ptr() as usize;
            with(64, |inner| assert_ne!(inner.as_ptr() as usize, outer_at));
        });
        // A buffer larger than kept is its own, and the kept one stays.
        with(KEEP_MAX + 1, |b| assert_ne!(b.as_ptr() as usize, first));
        with(8, |b| assert_eq!(b.as_ptr() as usize, first));
    }
}
