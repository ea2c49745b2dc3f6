//! Linux native AIO through libaio (`io_submit`, `io_getevents`) on Iris files. libaio's
//! functions are thin wrappers over system calls, so the kernel ran a request on an Iris fd
//! against its placeholder, the description's memfd: a read returned the description's bytes,
//! a write overwrote them. A request on an Iris fd is now served at submission through Iris's
//! own pread/pwrite/fsync, and its completion is posted through the kernel's ring of the
//! context (see [`complete_in_kernel`]), so threads waiting in the kernel and programs reading
//! the ring see it; one that cannot be posted so waits in a queue, which `io_getevents` hands
//! out before it asks the kernel for the rest. Requests on other fds go to the
//! kernel as before. (io_uring has no library call to interpose: see the README.)
//!
//! libaio's convention: a negative errno as the return value, errno untouched.

use iris_fs::ForkSafeMutex as Mutex;
use libc::{c_int, c_long, c_void, timespec};

use crate::fdtable;

/// libaio's `io_context_t`: the address of the kernel's ring for the context.
type Ctx = usize;

/// `struct iocb` (the kernel's ABI, as libaio lays it out on 64-bit Linux).
#[repr(C)]
pub struct Iocb {
    data: u64,
    key: u32,
    rw_flags: c_int,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const CMD_PREAD: u16 = 0;
const CMD_PWRITE: u16 = 1;
const CMD_FSYNC: u16 = 2;
const CMD_FDSYNC: u16 = 3;
const CMD_PREADV: u16 = 7;
const CMD_PWRITEV: u16 = 8;
/// `aio_flags`: signal the eventfd `aio_resfd` at completion.
const FLAG_RESFD: u32 = 1;

/// Completions of requests on Iris fds not yet handed out, with their contexts, oldest first.
static DONE: Mutex<Vec<(Ctx, IoEvent)>> = Mutex::new(Vec::new());

/// Contexts the kernel knew when this process submitted Iris requests to them (see
/// [`known_context`]), until their `io_destroy`.
static CONTEXTS: Mutex<Vec<Ctx>> = Mutex::new(Vec::new());

/// Hold the queue across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(SINKS.lock());
    std::mem::forget(DONE.lock());
    std::mem::forget(CONTEXTS.lock());
}

/// Release what [`lock_for_fork`] took; a child also forgets the queue (contexts are not
/// inherited: the kernel's are gone in the child too).
pub(crate) fn unlock_after_fork(child: bool) {
    // SAFETY: only called after lock_for_fork, whose guards were forgotten.
    unsafe {
        CONTEXTS.force_unlock();
        DONE.force_unlock();
        SINKS.force_unlock();
    }
    if child {
        DONE.lock().clear();
        CONTEXTS.lock().clear();
    }
}

/// Whether the kernel knows context `ctx`: an empty submission to it tells (EINVAL for a
/// context that was never set up, was destroyed, or is the parent's in a forked child), once
/// per context. Iris requests are served before the kernel sees the context, so without this
/// a bad context served them and reported success where the kernel refuses the call.
unsafe fn known_context(ctx: Ctx) -> Result<(), c_int> {
    // Held across the question and the note, which `io_destroy` removes after the kernel's
    // destroy: a stale context is never left noted.
    let mut known = CONTEXTS.lock();
    if known.contains(&ctx) {
        return Ok(());
    }
    // SAFETY: no request is passed; the kernel only looks the context up (it never blocks).
    let r = unsafe { real_io_submit(ctx, 0, std::ptr::null_mut()) };
    if r < 0 {
        return Err(-r);
    }
    known.push(ctx);
    Ok(())
}

/// The result of an Iris call that returns -1 and sets errno: the value, or -errno.
fn result(r: i64) -> i64 {
    if r < 0 {
        -i64::from(crate::errno::get())
    } else {
        r
    }
}

/// Whether the kernel would take request `cb` on Iris fd `fd` at submission: a known
/// operation, on an fd open for it (else the errno it gives then: EINVAL, EBADF).
fn admissible(cb: &Iocb, fd: c_int) -> Result<(), c_int> {
    let Some(file) = fdtable::get(fd) else {
        return Err(libc::EBADF);
    };
    match cb.opcode {
        CMD_PREAD | CMD_PREADV if !file.readable() => Err(libc::EBADF),
        CMD_PWRITE | CMD_PWRITEV if !file.writable() => Err(libc::EBADF),
        CMD_PREAD | CMD_PREADV | CMD_PWRITE | CMD_PWRITEV | CMD_FSYNC | CMD_FDSYNC => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

/// Run request `cb` on Iris fd `fd` now; its result (bytes, or -errno).
///
/// # Safety
/// `cb`'s buffers are the caller's, valid as the request describes them.
unsafe fn serve(cb: &Iocb, fd: c_int) -> i64 {
    let buf = cb.buf as *mut c_void;
    let iov = cb.buf as *const libc::iovec;
    let Ok(len) = usize::try_from(cb.nbytes) else {
        return -i64::from(libc::EINVAL);
    };
    let count = c_int::try_from(cb.nbytes).unwrap_or(c_int::MAX);
    let saved = crate::errno::get();
    // SAFETY: the caller's buffers as the request gives them, through Iris's own calls.
    let r = unsafe {
        match cb.opcode {
            CMD_PREAD if cb.rw_flags == 0 => {
                result(crate::calls::pread64(fd, buf, len, cb.offset) as i64)
            }
            CMD_PWRITE if cb.rw_flags == 0 => {
                result(crate::calls::pwrite64(fd, buf, len, cb.offset) as i64)
            }
            CMD_PREAD => {
                let one = libc::iovec {
                    iov_base: buf,
                    iov_len: len,
                };
                result(crate::calls::preadv2(fd, &one, 1, cb.offset, cb.rw_flags) as i64)
            }
            CMD_PWRITE => {
                let one = libc::iovec {
                    iov_base: buf,
                    iov_len: len,
                };
                result(crate::calls::pwritev2(fd, &one, 1, cb.offset, cb.rw_flags) as i64)
            }
            CMD_PREADV => {
                result(crate::calls::preadv2(fd, iov, count, cb.offset, cb.rw_flags) as i64)
            }
            CMD_PWRITEV => {
                result(crate::calls::pwritev2(fd, iov, count, cb.offset, cb.rw_flags) as i64)
            }
            CMD_FSYNC => result(i64::from(crate::calls::fsync(fd))),
            CMD_FDSYNC => result(i64::from(crate::calls::fdatasync(fd))),
            _ => -i64::from(libc::EINVAL),
        }
    };
    crate::errno::set(saved);
    r
}

/// /dev/null and /dev/full, open for writing (see [`complete_in_kernel`]), once opened.
static SINKS: Mutex<Option<(iris_media::OwnFd, iris_media::OwnFd)>> = Mutex::new(None);

/// What [`rewrite`] changed in a request, to put back.
type Saved = (u16, u32, u64, u64, i64, c_int);

/// The sinks (/dev/null, /dev/full), opened on first use.
fn sinks() -> Option<(c_int, c_int)> {
    let mut g = SINKS.lock();
    if g.is_none() {
        let open = |p: &std::ffi::CStr| {
            // SAFETY: a NUL-terminated path; libc's own open.
            let fd = unsafe { crate::real::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC, 0) };
            iris_media::OwnFd::adopt(fd)
        };
        if let (Some(null), Some(full)) = (open(c"/dev/null"), open(c"/dev/full")) {
            *g = Some((null, full));
        }
    }
    g.as_ref().map(|(n, f)| (n.raw(), f.raw()))
}

/// Rewrite request `cb`, served here with result `res`, for the kernel to finish at once with
/// that result: a write of `res` bytes of its own buffers to /dev/null (of one byte to
/// /dev/full for a write's ENOSPC). Submitted to the kernel, its completion then comes through the
/// context's own ring, so a thread already waiting in the kernel (a reaper thread), a program
/// that reads the ring itself and the request's eventfd all see it as a kernel request's. The
/// kernel copies a request (and its iovecs) when it takes it: put it back with [`restore`]
/// right after. None when it cannot be done so (another error): the completion is queued
/// instead.
///
/// # Safety
/// `cb` is the caller's valid request, served already, not in the kernel's hands.
unsafe fn rewrite(
    cb: *mut Iocb,
    res: i64,
    (null, full): (c_int, c_int),
    iovs: &mut Vec<libc::iovec>,
) -> Option<Saved> {
    // SAFETY: the caller's request.
    let r = unsafe { &mut *cb };
    let (op, buf, len, sink) = match res {
        0.. => match r.opcode {
            CMD_PREAD | CMD_PWRITE if res as u64 <= r.nbytes => {
                (CMD_PWRITE, r.buf, res as u64, null)
            }
            CMD_PREADV | CMD_PWRITEV => {
                // The request's own iovecs, cut at `res` bytes, in `iovs` (the kernel copies
                // them at submission; the caller keeps them alive until then).
                let n = usize::try_from(r.nbytes).ok()?;
                // SAFETY: the request's `n` iovecs.
                let all = unsafe { std::slice::from_raw_parts(r.buf as *const libc::iovec, n) };
                let mut left = res as usize;
                for v in all {
                    if left == 0 {
                        break;
                    }
                    let take = v.iov_len.min(left);
                    iovs.push(libc::iovec {
                        iov_base: v.iov_base,
                        iov_len: take,
                    });
                    left -= take;
                }
                if left > 0 {
                    return None;
                }
                (CMD_PWRITEV, iovs.as_ptr() as u64, iovs.len() as u64, null)
            }
            // (Nothing is read from a zero-byte buffer: any address serves.)
            CMD_FSYNC | CMD_FDSYNC => (CMD_PWRITE, cb as u64, 0, null),
            _ => return None,
        },
        e if e == -i64::from(libc::ENOSPC) && r.nbytes > 0 => match r.opcode {
            CMD_PWRITE => (CMD_PWRITE, r.buf, 1, full),
            _ => return None,
        },
        _ => return None,
    };
    let saved = (r.opcode, r.fildes, r.buf, r.nbytes, r.offset, r.rw_flags);
    r.opcode = op;
    r.fildes = sink as u32;
    r.buf = buf;
    r.nbytes = len;
    r.offset = 0;
    r.rw_flags = 0;
    Some(saved)
}

/// Put back what [`rewrite`] changed.
///
/// # Safety
/// `cb` is the request `saved` came from.
unsafe fn restore(cb: *mut Iocb, saved: Saved) {
    // SAFETY: the caller's request.
    let r = unsafe { &mut *cb };
    (r.opcode, r.fildes, r.buf, r.nbytes, r.offset, r.rw_flags) = saved;
}

/// Queue the completion of request `cb` (result `res`) for `ctx`, and tell its eventfd.
///
/// # Safety
/// `cb` is the caller's valid request.
unsafe fn queue(ctx: Ctx, cb: *mut Iocb, res: i64) {
    // SAFETY: the caller's request.
    let (data, flags, resfd) = unsafe { ((*cb).data, (*cb).flags, (*cb).resfd) };
    DONE.lock().push((
        ctx,
        IoEvent {
            data,
            obj: cb as u64,
            res,
            res2: 0,
        },
    ));
    if flags & FLAG_RESFD != 0 {
        let one = 1u64;
        // SAFETY: an 8-byte write to the caller's eventfd, as the kernel would make.
        unsafe { libc::write(resfd as c_int, (&one as *const u64).cast(), 8) };
    }
}

/// Serve the requests `cbs` (on Iris fds) and post their completions (see [`rewrite`]), in
/// one system call for those the kernel can finish.
///
/// # Safety
/// `cbs` are the caller's valid requests.
unsafe fn serve_run(ctx: Ctx, cbs: &[*mut Iocb]) {
    let sinks = sinks();
    let mut posted: Vec<(*mut Iocb, i64, Saved)> = Vec::with_capacity(cbs.len());
    // Cut iovecs of vectored requests, alive until the submission below.
    let mut iovs: Vec<Vec<libc::iovec>> = Vec::new();
    for &cb in cbs {
        // SAFETY: the caller's request and its buffers.
        let res = unsafe { serve(&*cb, (*cb).fildes as c_int) };
        let mut cut = Vec::new();
        // SAFETY: as above, served now.
        let rewritten = sinks.and_then(|s| unsafe { rewrite(cb, res, s, &mut cut) });
        // (Moving the Vec keeps its heap buffer where `rewrite` pointed the request.)
        iovs.push(cut);
        match rewritten {
            Some(saved) => posted.push((cb, res, saved)),
            // SAFETY: as above.
            None => unsafe { queue(ctx, cb, res) },
        }
    }
    if posted.is_empty() {
        return;
    }
    let mut ptrs: Vec<*mut Iocb> = posted.iter().map(|p| p.0).collect();
    // SAFETY: the rewritten requests, each buffer valid for its length.
    let n = unsafe { real_io_submit(ctx, ptrs.len() as c_long, ptrs.as_mut_ptr()) };
    let taken = usize::try_from(n).unwrap_or(0);
    for (i, (cb, res, saved)) in posted.into_iter().enumerate() {
        // SAFETY: the request rewritten above (the kernel copied it if it took it).
        unsafe { restore(cb, saved) };
        if i >= taken {
            // (The ring was full, or the kernel refused: queued here instead.)
            // SAFETY: as above.
            unsafe { queue(ctx, cb, res) };
        }
    }
}

/// io_submit: requests on Iris fds served here, runs of the others passed to the kernel.
#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: Ctx, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    if nr < 0 {
        return -libc::EINVAL;
    }
    if iocbs.is_null() {
        return -libc::EFAULT;
    }
    let nr = nr as usize;
    let mut done = 0usize;
    while done < nr {
        // SAFETY: the caller's array of `nr` request pointers.
        let cb = unsafe { *iocbs.add(done) };
        if cb.is_null() {
            return if done > 0 {
                done as c_int
            } else {
                -libc::EFAULT
            };
        }
        // SAFETY: the caller's request.
        let fd = unsafe { (*cb).fildes } as c_int;
        if fdtable::get(fd).is_some() {
            // A run of requests on Iris fds, served here, up to the first the kernel would
            // refuse at submission (the submission stops there, as the kernel's does).
            // SAFETY: the caller's context and request.
            if let Err(e) = unsafe { known_context(ctx).and_then(|()| admissible(&*cb, fd)) } {
                return if done > 0 { done as c_int } else { -e };
            }
            let mut end = done + 1;
            // SAFETY: the caller's requests, as above.
            while end < nr && unsafe { !(*iocbs.add(end)).is_null() } && {
                let cb = unsafe { *iocbs.add(end) };
                let fd = unsafe { (*cb).fildes } as c_int;
                fdtable::get(fd).is_some() && unsafe { admissible(&*cb, fd) }.is_ok()
            } {
                end += 1;
            }
            // SAFETY: the caller's array holds `nr` requests.
            let run = unsafe { std::slice::from_raw_parts(iocbs.add(done), end - done) };
            // SAFETY: the caller's requests and their buffers.
            unsafe { serve_run(ctx, run) };
            done = end;
            continue;
        }
        // A run of requests on other fds, for the kernel in one call.
        let mut end = done + 1;
        // SAFETY: the caller's requests, as above.
        while end < nr && unsafe { !(*iocbs.add(end)).is_null() } && {
            let fd = unsafe { (**iocbs.add(end)).fildes } as c_int;
            fdtable::get(fd).is_none()
        } {
            end += 1;
        }
        let want = end - done;
        // SAFETY: forwarding part of the caller's array.
        let r = unsafe { real_io_submit(ctx, want as c_long, iocbs.add(done)) };
        if r < 0 {
            return if done > 0 { done as c_int } else { r };
        }
        done += r as usize;
        if (r as usize) < want {
            // The kernel took fewer than offered: stop there, as it did.
            return done as c_int;
        }
    }
    done as c_int
}

/// Move up to `max` queued completions of `ctx` into `out`; how many.
fn take_done(ctx: Ctx, out: *mut IoEvent, max: usize) -> usize {
    if max == 0 {
        return 0;
    }
    let mut q = DONE.lock();
    let mut n = 0;
    q.retain(|(c, ev)| {
        if *c != ctx || n == max {
            return true;
        }
        // SAFETY: the caller's array of at least `max` events.
        unsafe { *out.add(n) = *ev };
        n += 1;
        false
    });
    n
}

/// io_getevents: the queued completions of Iris requests first, then the kernel's.
#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    ctx: Ctx,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { get_events(ctx, min_nr, nr, events, timeout, None) }
}

/// io_pgetevents (libaio 0.3.111): as [`io_getevents`], with a signal mask for the wait.
#[no_mangle]
pub unsafe extern "C" fn io_pgetevents(
    ctx: Ctx,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { get_events(ctx, min_nr, nr, events, timeout, Some(sigmask)) }
}

/// The queued completions of `ctx` first; then, short of `min_nr`, the kernel's (waiting under
/// `sigmask` when it is given, as io_pgetevents does).
unsafe fn get_events(
    ctx: Ctx,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
    sigmask: Option<*const libc::sigset_t>,
) -> c_int {
    let kernel = |min: c_long, n: c_long, at: *mut IoEvent| match sigmask {
        // SAFETY: forwarding the caller's arguments.
        None => unsafe { real_io_getevents(ctx, min, n, at, timeout) },
        // SAFETY: as above.
        Some(mask) => unsafe { real_io_pgetevents(ctx, min, n, at, timeout, mask) },
    };
    if nr < 0 || min_nr < 0 || events.is_null() {
        // The kernel's errors.
        return kernel(min_nr, nr, events);
    }
    let got = take_done(ctx, events, nr as usize);
    if got > 0 && got as c_long >= min_nr {
        return got as c_int;
    }
    let rest_min = (min_nr - got as c_long).max(0);
    // SAFETY: the rest of the caller's array.
    let r = kernel(rest_min, nr - got as c_long, unsafe { events.add(got) });
    if r < 0 {
        return if got > 0 { got as c_int } else { r };
    }
    got as c_int + r
}

/// io_destroy: the context's queued completions go with it.
#[no_mangle]
pub unsafe extern "C" fn io_destroy(ctx: Ctx) -> c_int {
    DONE.lock().retain(|(c, _)| *c != ctx);
    // SAFETY: forwarding.
    let r = unsafe { real_io_destroy(ctx) };
    // Forgotten after the kernel's destroy: a question asked before it is answered yes and
    // noted before this, one asked after is answered no (see `known_context`).
    CONTEXTS.lock().retain(|c| *c != ctx);
    r
}

// The kernel's calls, made directly as libaio makes them (its functions are these system
// calls in its convention: -errno on failure).

/// A system call's result in libaio's convention.
fn negative_errno(r: c_long) -> c_int {
    if r < 0 {
        -crate::errno::get()
    } else {
        r as c_int
    }
}

unsafe fn real_io_submit(ctx: Ctx, nr: c_long, iocbs: *mut *mut Iocb) -> c_int {
    // SAFETY: the caller's arguments, to the kernel.
    negative_errno(unsafe { libc::syscall(libc::SYS_io_submit, ctx, nr, iocbs) })
}

unsafe fn real_io_getevents(
    ctx: Ctx,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
) -> c_int {
    // SAFETY: the caller's arguments, to the kernel.
    negative_errno(unsafe {
        libc::syscall(libc::SYS_io_getevents, ctx, min_nr, nr, events, timeout)
    })
}

/// io_pgetevents's system call number (Linux 4.18; the libc crate does not name it).
#[cfg(target_arch = "x86_64")]
const SYS_IO_PGETEVENTS: c_long = 333;
#[cfg(not(target_arch = "x86_64"))]
const SYS_IO_PGETEVENTS: c_long = 292;

unsafe fn real_io_pgetevents(
    ctx: Ctx,
    min_nr: c_long,
    nr: c_long,
    events: *mut IoEvent,
    timeout: *mut timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    /// The system call's form of the mask: where, and how many bytes (the kernel's sigset).
    #[repr(C)]
    struct Mask {
        set: *const libc::sigset_t,
        size: usize,
    }
    let mask = Mask {
        set: sigmask,
        size: 8,
    };
    let arg = if sigmask.is_null() {
        std::ptr::null()
    } else {
        &mask as *const Mask
    };
    // SAFETY: the caller's arguments, to the kernel; `mask` outlives the call.
    negative_errno(unsafe {
        libc::syscall(SYS_IO_PGETEVENTS, ctx, min_nr, nr, events, timeout, arg)
    })
}

unsafe fn real_io_destroy(ctx: Ctx) -> c_int {
    // SAFETY: the caller's argument, to the kernel.
    negative_errno(unsafe { libc::syscall(libc::SYS_io_destroy, ctx) })
}
