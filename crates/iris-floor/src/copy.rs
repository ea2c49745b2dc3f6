//! The data path: `memcpy` between the caller's buffer and the mapping, within the file's size.
//! This is the whole cost of a served read or write; there is nothing else to do. The only
//! system calls are on the slow edges: a read reaching past the size this fd knows (the file may
//! have grown elsewhere) and a write that grows the file (one ftruncate).

use std::sync::atomic::Ordering;

use libc::{c_int, c_void, off64_t, size_t, ssize_t};

use crate::errno::fail;
use crate::fdtable::{OpenFile, ACCESS_APPEND, ACCESS_READ, ACCESS_WRITE};
use crate::mapping::{grow_to, refresh_size};
use crate::{real, MAX_FILE_BYTES};

/// pread on a served fd.
///
/// # Safety
/// `buf` is writable for `n` bytes.
pub(crate) unsafe fn read_at(
    file: &OpenFile,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    if !file.allows(ACCESS_READ) {
        return fail(libc::EBADF);
    }
    let Ok(off) = u64::try_from(off) else {
        return fail(libc::EINVAL);
    };
    let want = (n as u64).min(isize::MAX as u64);
    let mut size = file.size_bytes.load(Ordering::Relaxed);
    if off.saturating_add(want) > size {
        size = refresh_size(file, fd);
    }
    if off >= MAX_FILE_BYTES {
        // Past the mapping: the kernel reads it.
        // SAFETY: forwarding the caller's arguments to libc.
        return unsafe { real::pread64(fd, buf, n, off as off64_t) };
    }
    let end = size.min(MAX_FILE_BYTES);
    if off >= end {
        return 0;
    }
    let len = want.min(end - off) as usize;
    // SAFETY: [off, off + len) lies below the file's size and inside the mapping, so the pages
    // exist; `buf` holds `n >= len` bytes (the caller's contract) and cannot overlap a mapping
    // the shim made.
    unsafe { std::ptr::copy_nonoverlapping(file.base().add(off as usize), buf.cast(), len) };
    len as ssize_t
}

/// pwrite on a served fd.
///
/// # Safety
/// `buf` is readable for `n` bytes.
pub(crate) unsafe fn write_at(
    file: &OpenFile,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    if !file.allows(ACCESS_WRITE) {
        return fail(libc::EBADF);
    }
    let Ok(off) = u64::try_from(off) else {
        return fail(libc::EINVAL);
    };
    let len = (n as u64).min(isize::MAX as u64);
    let Some(end) = off.checked_add(len) else {
        return fail(libc::EFBIG);
    };
    if end > MAX_FILE_BYTES {
        // Past the mapping: the kernel writes it (and grows the file).
        // SAFETY: forwarding the caller's arguments to libc.
        let r = unsafe { real::pwrite64(fd, buf, n, off as off64_t) };
        refresh_size(file, fd);
        return r;
    }
    if end > file.size_bytes.load(Ordering::Relaxed) {
        if let Err(e) = grow_to(file, fd, end) {
            return fail(e);
        }
    }
    // SAFETY: [off, end) lies below the file's size (just ensured) and inside the mapping, which
    // is writable because the fd was opened for writing; `buf` holds `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.cast(), file.base().add(off as usize), len as usize)
    };
    len as ssize_t
}

/// read on a served fd: at the fd's offset, which then moves past what was read.
///
/// # Safety
/// As for [`read_at`].
pub(crate) unsafe fn read_next(file: &OpenFile, fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let off = file.offset_bytes.load(Ordering::Relaxed);
    // SAFETY: the caller's contract.
    let r = unsafe { read_at(file, fd, buf, n, off as off64_t) };
    if r > 0 {
        file.offset_bytes.store(off + r as u64, Ordering::Relaxed);
    }
    r
}

/// write on a served fd: at the fd's offset (at the end for O_APPEND), which then moves past
/// what was written.
///
/// # Safety
/// As for [`write_at`].
pub(crate) unsafe fn write_next(
    file: &OpenFile,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
) -> ssize_t {
    let off = if file.allows(ACCESS_APPEND) {
        refresh_size(file, fd)
    } else {
        file.offset_bytes.load(Ordering::Relaxed)
    };
    // SAFETY: the caller's contract.
    let r = unsafe { write_at(file, fd, buf, n, off as off64_t) };
    if r > 0 {
        file.offset_bytes.store(off + r as u64, Ordering::Relaxed);
    }
    r
}

/// lseek on a served fd: moves the user-space offset. SEEK_DATA and SEEK_HOLE ask the kernel.
pub(crate) fn seek(file: &OpenFile, fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => file.offset_bytes.load(Ordering::Relaxed) as i64,
        libc::SEEK_END => refresh_size(file, fd) as i64,
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            // SAFETY: forwarding to libc; the kernel knows the holes.
            let r = unsafe { real::lseek64(fd, off, whence) };
            if r >= 0 {
                file.offset_bytes.store(r as u64, Ordering::Relaxed);
            }
            return r;
        }
        _ => return fail(libc::EINVAL),
    };
    match base.checked_add(off) {
        Some(new) if new >= 0 => {
            file.offset_bytes.store(new as u64, Ordering::Relaxed);
            new
        }
        _ => fail(libc::EINVAL),
    }
}
