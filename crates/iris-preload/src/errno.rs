//! Reading and setting the caller's errno.

/// Set errno for the calling thread.
#[inline]
pub(crate) fn set(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
#[inline]
pub(crate) fn get() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Set errno and return -1 (the libc failure convention).
#[inline]
pub(crate) fn fail<T: From<i8>>(e: i32) -> T {
    set(e);
    T::from(-1)
}
