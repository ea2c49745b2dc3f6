//! Opening a floor file for serving: the flags its backing file is opened with, the mapping, and
//! keeping the size the fd table believes in step with the file's. Anything that cannot be served
//! (not a regular file, fd beyond the table, mapping refused, no write access for a write-only
//! open) is left a plain kernel fd on the backing file, which is still correct, only slower.

use std::sync::atomic::Ordering;

use libc::c_int;

use crate::fdtable::{self, OpenFile, ACCESS_APPEND, ACCESS_READ, ACCESS_WRITE};
use crate::{errno, real, MAX_FILE_BYTES};

/// Open a backing file with `open` (given the flags to use) and serve the fd if it can be.
/// O_DIRECT is dropped (no I/O goes through the fd, and the backing file system may refuse it);
/// a write-only open is made read-write, since a shared writable mapping needs both.
pub(crate) fn open_served(flags: c_int, open: impl Fn(c_int) -> c_int) -> c_int {
    let plain = flags & !libc::O_DIRECT;
    let mapped = if flags & libc::O_ACCMODE == libc::O_WRONLY {
        (plain & !libc::O_ACCMODE) | libc::O_RDWR
    } else {
        plain
    };
    let fd = open(mapped);
    if fd < 0 {
        // SAFETY: reading the calling thread's errno.
        let e = unsafe { *libc::__errno_location() };
        if mapped != plain && e == libc::EACCES {
            return open(plain); // write-only permission: the kernel serves it
        }
        return fd;
    }
    serve(fd, flags);
    fd
}

/// Map `fd` (a backing file just opened with `flags`) and enter it in the fd table.
fn serve(fd: c_int, flags: c_int) {
    let Some(size_bytes) = regular_size(fd) else {
        return; // a directory or special file: the kernel serves it
    };
    if usize::try_from(fd).map_or(true, |i| i >= fdtable::MAX_FDS) {
        return;
    }
    let mut access = 0;
    let mut prot = libc::PROT_READ;
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => access |= ACCESS_READ,
        libc::O_WRONLY => access |= ACCESS_WRITE,
        _ => access |= ACCESS_READ | ACCESS_WRITE,
    }
    if access & ACCESS_WRITE != 0 {
        prot |= libc::PROT_WRITE;
    }
    if flags & libc::O_APPEND != 0 {
        access |= ACCESS_APPEND;
    }
    let Some(base) = map_aligned(fd, prot) else {
        return;
    };
    if fully_allocated(fd, size_bytes) {
        collapse(base, size_bytes);
    }
    if !fdtable::install(fd, base.cast(), size_bytes, access) {
        unmap(base.cast());
    }
}

/// Size and alignment of a huge page.
const HUGE_PAGE: usize = iris_media::HUGE_PAGE;

/// Map MAX_FILE_BYTES of `fd` shared at a 2 MiB-aligned address, as Iris maps its volume (see
/// `iris_media::map_aligned`), so the kernel can use huge pages for it; `None` if it refuses.
/// Pages past the file's end are never touched: the data path stays below the size in the fd
/// table.
fn map_aligned(fd: c_int, prot: c_int) -> Option<*mut u8> {
    iris_media::map_aligned(fd, MAX_FILE_BYTES as usize, prot, libc::MAP_NORESERVE).ok()
}

/// Whether every byte of the file's `size_bytes` has storage (no holes to fill with memory).
fn fully_allocated(fd: c_int, size_bytes: u64) -> bool {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    u64::try_from(st.st_blocks).unwrap_or(0) * 512 >= size_bytes
}

/// Ask for huge pages under the whole huge pages of `[0, size_bytes)` (MADV_COLLAPSE, a hint:
/// refused by older kernels and other file systems), as Iris does for its volume.
fn collapse(base: *mut u8, size_bytes: u64) {
    const MADV_COLLAPSE: c_int = 25;
    let len = usize::try_from(size_bytes).unwrap_or(0) & !(HUGE_PAGE - 1);
    if len > 0 {
        // SAFETY: the range lies inside the mapping and the file backs it (fully allocated);
        // collapsing changes no byte.
        unsafe { libc::madvise(base.cast(), len, MADV_COLLAPSE) };
    }
}

/// Release a mapping made by [`serve`].
pub(crate) fn unmap(base: *mut u8) {
    // SAFETY: `base` is a mapping of MAX_FILE_BYTES made by `serve` and no longer in the table.
    unsafe { libc::munmap(base.cast(), MAX_FILE_BYTES as usize) };
}

/// The size of `fd` if it is a regular file.
fn regular_size(fd: c_int) -> Option<u64> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat buffer. The shim does not export fstat, so this is libc's.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then(|| u64::try_from(st.st_size).unwrap_or(0))
}

/// Re-read the backing file's size (another fd or process may have grown it).
pub(crate) fn refresh_size(file: &OpenFile, fd: c_int) -> u64 {
    let size = regular_size(fd).unwrap_or_else(|| file.size_bytes.load(Ordering::Relaxed));
    file.size_bytes.store(size, Ordering::Relaxed);
    size
}

/// Make the backing file at least `end_bytes` long; errno on failure.
pub(crate) fn grow_to(file: &OpenFile, fd: c_int, end_bytes: u64) -> Result<(), c_int> {
    debug_assert!(end_bytes <= MAX_FILE_BYTES);
    file.resizing(|| {
        if refresh_size(file, fd) >= end_bytes {
            return Ok(());
        }
        let len = libc::off64_t::try_from(end_bytes).map_err(|_| libc::EFBIG)?;
        // SAFETY: libc's ftruncate on an fd the shim owns the table entry of.
        if unsafe { real::ftruncate64(fd, len) } != 0 {
            // SAFETY: reading the calling thread's errno.
            return Err(unsafe { *libc::__errno_location() });
        }
        file.size_bytes.store(end_bytes, Ordering::Relaxed);
        Ok(())
    })
}

/// Run a call that changes the file's size (ftruncate, fallocate) under the resize lock, then
/// re-read the size; returns the call's result with its errno intact.
pub(crate) fn resize<T>(file: &OpenFile, fd: c_int, call: impl FnOnce() -> T) -> T {
    file.resizing(|| {
        let out = call();
        // SAFETY: reading the calling thread's errno, restored after the fstat below.
        let e = unsafe { *libc::__errno_location() };
        refresh_size(file, fd);
        errno::set(e);
        out
    })
}
