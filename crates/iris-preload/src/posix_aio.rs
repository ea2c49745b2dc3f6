//! POSIX AIO (`aio_read`, `aio_write`, `aio_fsync`, `lio_listio`; fio's `posixaio` engine) on
//! Iris fds. glibc runs these requests on threads of its own that call its internal pread and
//! pwrite, which the interposer does not see: on an Iris fd they met the placeholder (EBADF).
//! A request on an Iris fd is carried out at submission through Iris's own calls, and its
//! result left where glibc's `aio_error`, `aio_return` and `aio_suspend` read it (the request's
//! private error and return fields), so those need nothing; its notification (signal or
//! thread) is made then. Requests on other fds go to glibc as before.
#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_void, sigevent};

use crate::fdtable;
use crate::real::{real_aio_fsync, real_aio_read, real_aio_write, real_lio_listio};

/// glibc's `struct aiocb` on 64-bit Linux (`aiocb64` is the same), with the private fields
/// this module writes.
#[repr(C)]
pub struct Aiocb {
    fildes: c_int,
    lio_opcode: c_int,
    reqprio: c_int,
    buf: *mut c_void,
    nbytes: usize,
    sigevent: sigevent,
    next_prio: *mut Aiocb,
    abs_prio: c_int,
    policy: c_int,
    error_code: c_int,
    return_value: isize,
    offset: i64,
    reserved: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<Aiocb>() == std::mem::size_of::<libc::aiocb>());

/// What a request does.
enum Op {
    Read,
    Write,
    Fsync,
    Fdatasync,
}

/// Carry out `cb` on its Iris fd and leave the result for `aio_error`/`aio_return`, then
/// notify as it asks (if `notify_it`).
///
/// # Safety
/// `cb` is the caller's valid request, its buffer as it describes it.
unsafe fn serve(cb: *mut Aiocb, op: Op, notify_it: bool) {
    // SAFETY: the caller's request.
    let r = unsafe { &mut *cb };
    let saved = crate::errno::get();
    // SAFETY: the request's buffer, through Iris's own calls.
    let n: isize = unsafe {
        match op {
            Op::Read => crate::calls::pread64(r.fildes, r.buf, r.nbytes, r.offset),
            Op::Write => crate::calls::pwrite64(r.fildes, r.buf, r.nbytes, r.offset),
            Op::Fsync => crate::calls::fsync(r.fildes) as isize,
            Op::Fdatasync => crate::calls::fdatasync(r.fildes) as isize,
        }
    };
    let err = if n < 0 { crate::errno::get() } else { 0 };
    crate::errno::set(saved);
    r.return_value = n;
    // Published after the return value: `aio_error` reads this one first.
    // SAFETY: an aligned int of the caller's request.
    unsafe { std::sync::atomic::AtomicI32::from_ptr(&mut r.error_code) }
        .store(err, std::sync::atomic::Ordering::Release);
    if notify_it {
        notify(&r.sigevent);
    }
}

/// Make the notification `ev` asks for.
fn notify(ev: &sigevent) {
    match ev.sigev_notify {
        libc::SIGEV_SIGNAL => {
            // SAFETY: sigqueue to this process with the caller's signal and value.
            unsafe { libc::sigqueue(libc::getpid(), ev.sigev_signo, ev.sigev_value) };
        }
        libc::SIGEV_THREAD => {
            // glibc's layout: the function and its attributes follow signo and notify.
            // SAFETY: reading the union member SIGEV_THREAD selects.
            let f: Option<extern "C" fn(libc::sigval)> = unsafe {
                std::ptr::from_ref(ev)
                    .cast::<u8>()
                    .add(16)
                    .cast::<Option<extern "C" fn(libc::sigval)>>()
                    .read_unaligned()
            };
            if let Some(f) = f {
                let v = ev.sigev_value.sival_ptr as usize;
                // (No thread to be had: the notification is lost, as it would be in glibc.)
                let _ = std::thread::Builder::new().spawn(move || {
                    f(libc::sigval {
                        sival_ptr: v as *mut c_void,
                    })
                });
            }
        }
        libc::SIGEV_THREAD_ID => {
            // SAFETY: sending the caller's signal to the thread it names, in this process.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    ev.sigev_notify_thread_id,
                    ev.sigev_signo,
                )
            };
        }
        _ => {}
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_read(cb: *mut Aiocb) -> c_int {
    // SAFETY: the caller's request (a null one goes to glibc).
    if cb.is_null() || !fdtable::is_iris(unsafe { (*cb).fildes }) {
        // SAFETY: forwarding.
        return unsafe { real_aio_read(cb.cast()) };
    }
    // SAFETY: as above.
    unsafe { serve(cb, Op::Read, true) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn aio_read64(cb: *mut Aiocb) -> c_int {
    // SAFETY: the same structure on 64-bit Linux.
    unsafe { aio_read(cb) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_write(cb: *mut Aiocb) -> c_int {
    // SAFETY: the caller's request (a null one goes to glibc).
    if cb.is_null() || !fdtable::is_iris(unsafe { (*cb).fildes }) {
        // SAFETY: forwarding.
        return unsafe { real_aio_write(cb.cast()) };
    }
    // SAFETY: as above.
    unsafe { serve(cb, Op::Write, true) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn aio_write64(cb: *mut Aiocb) -> c_int {
    // SAFETY: the same structure on 64-bit Linux.
    unsafe { aio_write(cb) }
}

#[no_mangle]
pub unsafe extern "C" fn aio_fsync(op: c_int, cb: *mut Aiocb) -> c_int {
    // SAFETY: the caller's request (a null one goes to glibc).
    if cb.is_null() || !fdtable::is_iris(unsafe { (*cb).fildes }) {
        // SAFETY: forwarding.
        return unsafe { real_aio_fsync(op, cb.cast()) };
    }
    let op = match op {
        libc::O_SYNC => Op::Fsync,
        libc::O_DSYNC => Op::Fdatasync,
        _ => return crate::errno::fail(libc::EINVAL),
    };
    // SAFETY: as above.
    unsafe { serve(cb, op, true) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn aio_fsync64(op: c_int, cb: *mut Aiocb) -> c_int {
    // SAFETY: the same structure on 64-bit Linux.
    unsafe { aio_fsync(op, cb) }
}

/// lio_listio: the requests on Iris fds are carried out here (each notified as it asks, as
/// glibc does), the others (the list with those left out) go to glibc, which waits for them
/// (LIO_WAIT) and makes the list's notification. Under LIO_WAIT a failed request makes the
/// call fail with EIO, as glibc's does.
#[no_mangle]
pub unsafe extern "C" fn lio_listio(
    mode: c_int,
    list: *const *mut Aiocb,
    n: c_int,
    sig: *mut sigevent,
) -> c_int {
    if list.is_null() || n <= 0 || !matches!(mode, libc::LIO_WAIT | libc::LIO_NOWAIT) {
        // SAFETY: forwarding (glibc's own answer: EINVAL for a bad mode).
        return unsafe { real_lio_listio(mode, list.cast(), n, sig) };
    }
    // SAFETY: the caller's `n` entries.
    let entries = unsafe { std::slice::from_raw_parts(list, n as usize) };
    // SAFETY: each non-null entry is the caller's request.
    let iris = |cb: *mut Aiocb| !cb.is_null() && fdtable::is_iris(unsafe { (*cb).fildes });
    if !entries.iter().any(|&cb| iris(cb)) {
        // SAFETY: forwarding.
        return unsafe { real_lio_listio(mode, list.cast(), n, sig) };
    }
    let mut rest = Vec::with_capacity(entries.len());
    let mut failed = false;
    for &cb in entries {
        if iris(cb) {
            // SAFETY: the caller's request on an Iris fd.
            let op = match unsafe { (*cb).lio_opcode } {
                libc::LIO_READ => Some(Op::Read),
                libc::LIO_WRITE => Some(Op::Write),
                _ => None,
            };
            if let Some(op) = op {
                // SAFETY: as above.
                unsafe { serve(cb, op, true) };
                // SAFETY: as above (the result just written).
                failed |= unsafe { (*cb).return_value } < 0;
            }
            rest.push(std::ptr::null_mut());
        } else {
            rest.push(cb);
        }
    }
    // SAFETY: the caller's list with the Iris requests left out (null entries are skipped).
    let r = unsafe { real_lio_listio(mode, rest.as_ptr().cast(), n, sig) };
    if r == 0 && failed && mode == libc::LIO_WAIT {
        return crate::errno::fail(libc::EIO);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn lio_listio64(
    mode: c_int,
    list: *const *mut Aiocb,
    n: c_int,
    sig: *mut sigevent,
) -> c_int {
    // SAFETY: the same structure on 64-bit Linux.
    unsafe { lio_listio(mode, list, n, sig) }
}
