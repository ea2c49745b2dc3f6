//! The other names glibc exports for the same calls (64-bit variants, internal aliases some
//! binaries link against). On 64-bit Linux they take the same arguments as the plain names.
//! Every name must be here: a call on an Iris fd that reaches the kernel would act on the fd's
//! description memfd instead of the file.
#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void, mode_t, off64_t, size_t, ssize_t};

use crate::calls;
use crate::more;

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
) -> ssize_t {
    // SAFETY: same contract as preadv.
    unsafe { calls::preadv(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
) -> ssize_t {
    // SAFETY: same contract as pwritev.
    unsafe { calls::pwritev(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
    f: c_int,
) -> ssize_t {
    // SAFETY: same contract as preadv2.
    unsafe { calls::preadv2(fd, iov, n, off, f) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
    f: c_int,
) -> ssize_t {
    // SAFETY: same contract as pwritev2.
    unsafe { calls::pwritev2(fd, iov, n, off, f) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: same contract as open64.
    unsafe { calls::open64(path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    // SAFETY: same contract as pread64.
    unsafe { calls::pread64(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    // SAFETY: same contract as pwrite64.
    unsafe { calls::pwrite64(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __fstat64(fd: c_int, st: *mut libc::stat64) -> c_int {
    // SAFETY: same contract as fstat64.
    unsafe { calls::fstat64(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn statfs64(p: *const c_char, b: *mut libc::statfs64) -> c_int {
    // SAFETY: struct statfs64 is struct statfs on 64-bit Linux.
    unsafe { more::statfs(p, b.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, b: *mut libc::statfs64) -> c_int {
    // SAFETY: as above.
    unsafe { more::fstatfs(fd, b.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs64(p: *const c_char, b: *mut libc::statvfs64) -> c_int {
    // SAFETY: struct statvfs64 is struct statvfs on 64-bit Linux.
    unsafe { more::statvfs(p, b.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, b: *mut libc::statvfs64) -> c_int {
    // SAFETY: as above.
    unsafe { more::fstatvfs(fd, b.cast()) }
}

const _: () = assert!(std::mem::size_of::<libc::statfs>() == std::mem::size_of::<libc::statfs64>());
const _: () =
    assert!(std::mem::size_of::<libc::statvfs>() == std::mem::size_of::<libc::statvfs64>());
