//! splice and tee with an Iris fd on one side. The kernel moves pages between a pipe and a
//! file it knows; an Iris fd is a placeholder it refuses (EBADF). Here the bytes go through a
//! buffer instead: from an Iris file they are read by Iris and written into the pipe, and the
//! file's offset (or `*off_in`) moves by what the pipe took; into an Iris file they are read
//! from the pipe and written by Iris. tee needs two pipes: EINVAL with an Iris fd, as Linux
//! gives for a file.
#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_uint, c_void, loff_t, size_t, ssize_t};

use crate::errno::fail;
use crate::fdtable;

/// Most bytes moved by one call (a pipe holds 64 KiB by default; a short count is allowed).
const MOST: usize = 1 << 20;

#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (from_iris, to_iris) = (fdtable::is_iris(fd_in), fdtable::is_iris(fd_out));
    if !from_iris && !to_iris {
        // SAFETY: forwarding.
        return unsafe { crate::real::splice(fd_in, off_in, fd_out, off_out, len, flags) };
    }
    if from_iris && to_iris {
        // One side must be a pipe.
        return fail(libc::EINVAL);
    }
    if from_iris {
        if !off_out.is_null() {
            return fail(libc::ESPIPE); // the pipe side has no offset
        }
        // As much as the pipe takes now (as the kernel moves): a splice into a pipe the
        // caller drains itself must not block on more than fits.
        let room = match pipe_room(fd_out, flags) {
            Ok(room) => room,
            Err(e) => return fail(e),
        };
        // SAFETY: Iris's own calls on the caller's fds and offset.
        crate::bounce::with(len.min(room).min(MOST), |buf| unsafe {
            from_file(fd_in, off_in, fd_out, buf)
        })
    } else {
        if !off_in.is_null() {
            return fail(libc::ESPIPE);
        }
        // SAFETY: as above.
        crate::bounce::with(len.min(MOST), |buf| unsafe {
            into_file(fd_in, fd_out, off_out, buf)
        })
    }
}

/// Free bytes in pipe `pipe`, waiting for some unless the pipe or `flags` say not to
/// (EAGAIN); EINVAL if it is not a pipe.
fn pipe_room(pipe: c_int, flags: c_uint) -> Result<usize, c_int> {
    loop {
        // SAFETY: F_GETPIPE_SZ and FIONREAD on the caller's fd; `queued` is a live int.
        let (size, queued) = unsafe {
            let size = crate::real::fcntl(pipe, libc::F_GETPIPE_SZ, 0);
            let mut queued: c_int = 0;
            let q = libc::ioctl(pipe, libc::FIONREAD, &mut queued);
            (size, if q < 0 { -1 } else { queued })
        };
        if size < 0 || queued < 0 {
            return Err(libc::EINVAL);
        }
        // (A pipe holds whole pages: what is queued may take a page it only partly fills.)
        let room = (size - (queued as u32).next_multiple_of(4096) as c_int).max(0) as usize;
        if room > 0 {
            return Ok(room);
        }
        // SAFETY: F_GETFL on the caller's fd.
        let nonblock =
            unsafe { crate::real::fcntl(pipe, libc::F_GETFL, 0) } & libc::O_NONBLOCK != 0;
        if flags & libc::SPLICE_F_NONBLOCK != 0 || nonblock {
            return Err(libc::EAGAIN);
        }
        let mut p = libc::pollfd {
            fd: pipe,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: poll of one live pollfd (the caller's pipe: no Iris fd).
        if unsafe { crate::real::real_poll(&mut p, 1, -1) } < 0 {
            return Err(crate::errno::get());
        }
    }
}

/// Iris file `fd` (at `*off`, or its offset) into pipe `pipe`.
///
/// # Safety
/// `off` is null or the caller's offset.
unsafe fn from_file(fd: c_int, off: *mut loff_t, pipe: c_int, buf: &mut [u8]) -> ssize_t {
    use crate::calls;
    // SAFETY: Iris's lseek on the caller's fd; the caller's offset.
    let at = if off.is_null() {
        unsafe { calls::lseek(fd, 0, libc::SEEK_CUR) }
    } else {
        unsafe { *off }
    };
    if at < 0 {
        return fail(if off.is_null() {
            crate::errno::get()
        } else {
            libc::EINVAL
        });
    }
    // SAFETY: a buffer of buf.len() bytes.
    let n = unsafe { calls::pread64(fd, buf.as_mut_ptr().cast::<c_void>(), buf.len(), at) };
    if n <= 0 {
        return n;
    }
    // SAFETY: writing our own bytes into the caller's pipe.
    let w = unsafe { crate::real::write(pipe, buf.as_ptr().cast::<c_void>(), n as usize) };
    if w > 0 {
        if off.is_null() {
            // SAFETY: Iris's lseek: the file offset moves by what the pipe took.
            unsafe { calls::lseek(fd, at + w as i64, libc::SEEK_SET) };
        } else {
            // SAFETY: the caller's offset.
            unsafe { *off = at + w as i64 };
        }
    }
    w
}

/// Pipe `pipe` into Iris file `fd` (at `*off`, or its offset).
///
/// # Safety
/// `off` is null or the caller's offset.
unsafe fn into_file(pipe: c_int, fd: c_int, off: *mut loff_t, buf: &mut [u8]) -> ssize_t {
    use crate::calls;
    if !off.is_null() && unsafe { *off } < 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: reading the caller's pipe into our buffer.
    let n = unsafe { crate::real::read(pipe, buf.as_mut_ptr().cast::<c_void>(), buf.len()) };
    if n <= 0 {
        return n;
    }
    let data = buf.as_ptr().cast::<c_void>();
    // SAFETY: Iris's own write of the bytes read; the caller's offset.
    unsafe {
        if off.is_null() {
            calls::write(fd, data, n as usize)
        } else {
            let w = calls::pwrite64(fd, data, n as usize, *off);
            if w > 0 {
                *off += w as i64;
            }
            w
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn tee(fd_in: c_int, fd_out: c_int, len: size_t, flags: c_uint) -> ssize_t {
    if fdtable::is_iris(fd_in) || fdtable::is_iris(fd_out) {
        return fail(libc::EINVAL);
    }
    // SAFETY: forwarding.
    unsafe { crate::real::tee(fd_in, fd_out, len, flags) }
}
