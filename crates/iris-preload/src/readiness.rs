//! poll, ppoll, epoll_ctl, ioctl, isatty and tcgetattr on Iris fds, answered as the kernel
//! answers them for a regular file. The kernel cannot: an Iris fd is an `O_PATH` open of its
//! description memfd (see `description.rs`), for which poll says POLLNVAL and epoll_ctl and
//! ioctl EBADF.
#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_ulong, c_void, nfds_t, pollfd, sigset_t, timespec};

use crate::errno::fail;
use crate::fdtable;
use crate::real::{real_epoll_ctl, real_ioctl, real_poll, real_ppoll};

/// What a regular file is always ready for.
const FILE_READY: i16 = libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM;

/// Answer the Iris fds of `fds` here and hide them from the kernel (fd -1, which it skips);
/// their indices and fds to put back, and how many are ready.
///
/// # Safety
/// `fds` points to `n` valid entries.
unsafe fn take_iris(fds: *mut pollfd, n: nfds_t) -> (Vec<(usize, c_int)>, c_int) {
    let mut taken = Vec::new();
    let mut ready = 0;
    for i in 0..n as usize {
        // SAFETY: i < n, per the contract.
        let p = unsafe { &mut *fds.add(i) };
        if p.fd >= 0 && fdtable::is_iris(p.fd) {
            taken.push((i, p.fd));
            p.fd = -1;
        }
    }
    for &(i, _) in &taken {
        // SAFETY: as above.
        let p = unsafe { &mut *fds.add(i) };
        p.revents = FILE_READY & p.events;
        ready += c_int::from(p.revents != 0);
    }
    (taken, ready)
}

/// Put back the Iris fds hidden by [`take_iris`], with the answers given there (the kernel
/// left revents 0 for them); the total of ready entries.
///
/// # Safety
/// As for [`take_iris`].
unsafe fn give_back(
    fds: *mut pollfd,
    taken: &[(usize, c_int)],
    ready: c_int,
    kernel: c_int,
) -> c_int {
    // The kernel zeroed revents of the skipped entries: answer them again.
    for &(i, fd) in taken {
        // SAFETY: an index taken from the caller's array.
        let p = unsafe { &mut *fds.add(i) };
        p.fd = fd;
        p.revents = FILE_READY & p.events;
    }
    if kernel < 0 {
        kernel
    } else {
        kernel + ready
    }
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() {
        // SAFETY: forwarding.
        return unsafe { real_poll(fds, n, timeout) };
    }
    // SAFETY: the caller's `n` entries.
    let (taken, ready) = unsafe { take_iris(fds, n) };
    if taken.is_empty() {
        // SAFETY: forwarding.
        return unsafe { real_poll(fds, n, timeout) };
    }
    // (Something is ready already: the kernel only adds to it, without waiting.)
    let timeout = if ready > 0 { 0 } else { timeout };
    // SAFETY: forwarding, Iris entries hidden.
    let r = unsafe { real_poll(fds, n, timeout) };
    // SAFETY: as above.
    unsafe { give_back(fds, &taken, ready, r) }
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: libc::size_t,
) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        // glibc's fortify check: the array is shorter than n.
        std::process::abort();
    }
    // SAFETY: checked above.
    unsafe { poll(fds, n, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if fds.is_null() {
        // SAFETY: forwarding.
        return unsafe { real_ppoll(fds, n, t, mask) };
    }
    // SAFETY: the caller's `n` entries.
    let (taken, ready) = unsafe { take_iris(fds, n) };
    if taken.is_empty() {
        // SAFETY: forwarding.
        return unsafe { real_ppoll(fds, n, t, mask) };
    }
    let zero = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let t = if ready > 0 { &zero } else { t };
    // SAFETY: forwarding, Iris entries hidden.
    let r = unsafe { real_ppoll(fds, n, t, mask) };
    // SAFETY: as above.
    unsafe { give_back(fds, &taken, ready, r) }
}

#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const timespec,
    mask: *const sigset_t,
    fdslen: libc::size_t,
) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        std::process::abort();
    }
    // SAFETY: checked above.
    unsafe { ppoll(fds, n, t, mask) }
}

/// epoll refuses regular files, whatever the operation: EPERM.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    ep: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    if fdtable::is_iris(fd) && !fdtable::is_iris(ep) {
        return fail(libc::EPERM);
    }
    // SAFETY: forwarding.
    unsafe { real_epoll_ctl(ep, op, fd, ev) }
}

/// ioctl on an Iris fd: FIONREAD (bytes from the offset to the end of a file), FIOCLEX,
/// FIONCLEX, FIONBIO, FIOASYNC, FIOQSIZE and FIGETBSZ; ENOTTY for any other request, as for a
/// file on tmpfs.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if !fdtable::is_iris(fd) {
        // SAFETY: forwarding.
        return unsafe { real_ioctl(fd, req, arg) };
    }
    match req {
        libc::FIOCLEX => {
            // SAFETY: Iris's own fcntl on the caller's fd.
            unsafe { crate::calls::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC as usize) }
        }
        libc::FIONCLEX => {
            // SAFETY: as above.
            unsafe { crate::calls::fcntl(fd, libc::F_SETFD, 0) }
        }
        libc::FIONREAD => {
            if arg.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: an all-zero stat is a valid value to be overwritten.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: Iris's own fstat and lseek on the caller's fd.
            let (r, pos) = unsafe {
                (
                    crate::calls::fstat(fd, &mut st),
                    crate::calls::lseek(fd, 0, libc::SEEK_CUR),
                )
            };
            if r != 0 || pos < 0 {
                return -1;
            }
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return fail(libc::ENOTTY);
            }
            let n = c_int::try_from((st.st_size - pos).max(0)).unwrap_or(c_int::MAX);
            // SAFETY: the caller's int, as FIONREAD takes it.
            unsafe { arg.cast::<c_int>().write_unaligned(n) };
            0
        }
        // Generic requests Linux answers for any file.
        libc::FIONBIO | libc::FIOASYNC => {
            if arg.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: the caller's int, as these requests take it.
            let on = unsafe { arg.cast::<c_int>().read_unaligned() } != 0;
            let bit = if req == libc::FIONBIO {
                libc::O_NONBLOCK
            } else {
                libc::O_ASYNC
            };
            // SAFETY: Iris's own fcntl on the caller's fd.
            let fl = unsafe { crate::calls::fcntl(fd, libc::F_GETFL, 0) };
            if fl < 0 {
                return -1;
            }
            if req == libc::FIOASYNC && on && fl & bit == 0 {
                // A tmpfs file has no async notification to turn on.
                return fail(libc::ENOTTY);
            }
            let fl = if on { fl | bit } else { fl & !bit };
            // SAFETY: as above.
            unsafe { crate::calls::fcntl(fd, libc::F_SETFL, fl as usize) }
        }
        FIOQSIZE | FIGETBSZ => {
            if arg.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: an all-zero stat is a valid value to be overwritten.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: Iris's own fstat on the caller's fd.
            if unsafe { crate::calls::fstat(fd, &mut st) } != 0 {
                return -1;
            }
            // SAFETY: the caller's loff_t (FIOQSIZE) or int (FIGETBSZ).
            unsafe {
                if req == FIOQSIZE {
                    // (The bytes it occupies, as Linux's inode_get_bytes.)
                    arg.cast::<i64>().write_unaligned(st.st_blocks * 512);
                } else {
                    arg.cast::<c_int>().write_unaligned(st.st_blksize as c_int);
                }
            }
            0
        }
        _ => fail(libc::ENOTTY),
    }
}

/// Generic file ioctls (asm-generic/ioctls.h, linux/fs.h).
const FIOQSIZE: c_ulong = 0x5460;
const FIGETBSZ: c_ulong = 2;

/// isatty on an Iris fd: not a terminal, errno ENOTTY (glibc asks through its own ioctl,
/// which the placeholder refuses with EBADF).
#[no_mangle]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    if fdtable::is_iris(fd) {
        crate::errno::set(libc::ENOTTY);
        return 0;
    }
    // SAFETY: forwarding.
    unsafe { crate::real::isatty(fd) }
}

/// tcgetattr on an Iris fd: ENOTTY, as for any file (see [`isatty`]).
#[no_mangle]
pub unsafe extern "C" fn tcgetattr(fd: c_int, t: *mut libc::termios) -> c_int {
    if fdtable::is_iris(fd) {
        return fail(libc::ENOTTY);
    }
    // SAFETY: forwarding.
    unsafe { crate::real::tcgetattr(fd, t) }
}
