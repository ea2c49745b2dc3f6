//! stdio on Iris files. glibc's FILE functions call libc-internal read/write, which no interposer
//! sees, so a FILE on an Iris fd is a `fopencookie` stream whose callbacks are the interposed
//! calls (its `_fileno` is set to the Iris fd so `fileno()` works). When fd 0, 1 or 2 becomes an
//! Iris fd (shell redirection, or inherited across exec), the process's `stdin`/`stdout`/`stderr`
//! pointer is switched to such a stream, and switched back when the fd stops being Iris's.
#![allow(clippy::missing_safety_doc)]

use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};

use crate::errno::set;
use crate::fdtable;
use crate::route::{target, Target};

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// Byte offset of `_fileno` in glibc's `struct _IO_FILE` on 64-bit Linux (checked by a test).
const FILENO_OFFSET: usize = 112;

// A cookie is the fd number; bit 32 marks a standard stream whose close must not close the fd.
const KEEP_FD: usize = 1 << 32;

fn cookie_fd(c: *mut c_void) -> c_int {
    (c as usize & 0xffff_ffff) as c_int
}

unsafe extern "C" fn ck_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio passes a buffer of n bytes.
    unsafe { crate::calls::read(cookie_fd(c), buf.cast(), n) }
}

unsafe extern "C" fn ck_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio passes a buffer of n bytes.
    let r = unsafe { crate::calls::write(cookie_fd(c), buf.cast(), n) };
    // A cookie write returning 0 means error to stdio.
    if r < 0 {
        0
    } else {
        r
    }
}

unsafe extern "C" fn ck_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio passes a valid offset pointer.
    let r = unsafe { crate::calls::lseek64(cookie_fd(c), *off, whence) };
    if r < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *off = r };
    0
}

unsafe extern "C" fn ck_close(c: *mut c_void) -> c_int {
    if c as usize & KEEP_FD != 0 {
        return 0;
    }
    // SAFETY: closing the fd this stream owns.
    unsafe { crate::calls::close(cookie_fd(c)) }
}

/// A stdio stream over Iris fd `fd`.
///
/// # Safety
/// `mode` a valid C string.
unsafe fn stream(fd: c_int, mode: *const c_char, keep_fd: bool) -> *mut FILE {
    let io = CookieIo {
        read: Some(ck_read),
        write: Some(ck_write),
        seek: Some(ck_seek),
        close: Some(ck_close),
    };
    let cookie = (fd as u32 as usize | if keep_fd { KEEP_FD } else { 0 }) as *mut c_void;
    // SAFETY: valid mode string and callbacks.
    let f = unsafe { fopencookie(cookie, mode, io) };
    if !f.is_null() {
        // SAFETY: `f` is a glibc FILE; _fileno lies at FILENO_OFFSET, an int.
        unsafe { *(f.cast::<u8>().add(FILENO_OFFSET).cast::<c_int>()) = fd };
    }
    f
}

/// open(2) flags for an fopen mode string.
fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut flags = match mode.first()? {
        b'r' if plus => libc::O_RDWR,
        b'r' => libc::O_RDONLY,
        b'w' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        b'w' => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        b'a' if plus => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        b'a' => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    Some(flags)
}

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;
type FdopenFn = unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE;

macro_rules! real_ptr {
    ($slot:ident, $sym:literal, $ty:ty) => {{
        static $slot: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = crate::real::resolve(&$slot, concat!($sym, "\0").as_bytes());
        #[allow(unused_unsafe)]
        // SAFETY: libc's definition of the symbol has this C signature.
        let f = (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) });
        f
    }};
}

unsafe fn fopen_any(path: *const c_char, mode: *const c_char, real: Option<FopenFn>) -> *mut FILE {
    // SAFETY: caller's path.
    let target = match unsafe { target(path) } {
        // (A reopen of an Iris fd, `/dev/stdout` say: our open serves it.)
        // SAFETY: as above.
        Target::Host if unsafe { crate::route::reopened(path) }.is_some() => Target::Iris {
            start: iris_fs::ROOT_INO,
            path: Vec::new(),
        },
        t => t,
    };
    match target {
        Target::Iris { .. } => {
            if mode.is_null() {
                set(libc::EINVAL);
                return std::ptr::null_mut();
            }
            // SAFETY: a valid C string from the caller.
            let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
            let Some(flags) = mode_flags(m) else {
                set(libc::EINVAL);
                return std::ptr::null_mut();
            };
            // SAFETY: caller's path; our own open serves it.
            let fd = unsafe { crate::calls::open(path, flags, 0o666) };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            // SAFETY: valid mode.
            let f = unsafe { stream(fd, mode, false) };
            if f.is_null() {
                // SAFETY: our fd.
                unsafe { crate::calls::close(fd) };
            }
            f
        }
        Target::Host => match real {
            // SAFETY: forwarding.
            Some(r) => unsafe { r(path, mode) },
            None => {
                set(libc::ENOSYS);
                std::ptr::null_mut()
            }
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let real = real_ptr!(SLOT, "fopen", FopenFn);
    // SAFETY: caller's arguments.
    unsafe { fopen_any(path, mode, real) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let real = real_ptr!(SLOT, "fopen64", FopenFn);
    // SAFETY: caller's arguments.
    unsafe { fopen_any(path, mode, real) }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if fdtable::is_iris(fd) {
        // SAFETY: caller's mode string.
        return unsafe { stream(fd, mode, false) };
    }
    match real_ptr!(SLOT, "fdopen", FdopenFn) {
        // SAFETY: forwarding.
        Some(r) => unsafe { r(fd, mode) },
        None => {
            set(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

static ORIGINAL: [AtomicPtr<FILE>; 3] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

/// Point stdin/stdout/stderr at a stream over fd `fd` (0, 1 or 2) if it is an Iris fd, or back at
/// the original stream if it no longer is.
pub(crate) fn sync_std_stream(fd: c_int) {
    let Ok(i) = usize::try_from(fd) else { return };
    if i > 2 {
        return;
    }
    // SAFETY: the standard stream variables are plain pointers owned by the C library; the
    // program is between stdio calls on this stream while it changes what fd `fd` is.
    unsafe {
        let var: *mut *mut FILE = match i {
            0 => &raw mut stdin,
            1 => &raw mut stdout,
            _ => &raw mut stderr,
        };
        let orig = ORIGINAL[i].load(Ordering::Acquire);
        if fdtable::is_iris(fd) {
            if orig.is_null() {
                let mode = if i == 0 { c"r" } else { c"w" };
                let f = stream(fd, mode.as_ptr(), true);
                if f.is_null() {
                    return;
                }
                if i == 2 {
                    libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
                }
                ORIGINAL[i].store(*var, Ordering::Release);
                *var = f;
            }
        } else if !orig.is_null() {
            let ours = *var;
            libc::fflush(ours);
            *var = orig;
            ORIGINAL[i].store(std::ptr::null_mut(), Ordering::Release);
            libc::fclose(ours);
        }
    }
}

/// Flush the stream that writes to fd `fd` before the fd changes underneath it.
pub(crate) fn flush_std_stream(fd: c_int) {
    // SAFETY: flushing the current standard stream, as the program itself could.
    unsafe {
        match fd {
            1 => {
                libc::fflush(stdout);
            }
            2 => {
                libc::fflush(stderr);
            }
            _ => {}
        }
    }
}

type FreopenFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;

/// freopen onto an Iris path. For stdin/stdout/stderr the Iris fd takes the stream's fd number
/// (so `stdout` and fd 1 agree, as after freopen on a kernel file) and the standard stream
/// switches to an Iris stream; for any other stream a new Iris stream is returned in its place
/// (glibc cannot re-point an existing FILE at interposed I/O).
unsafe fn freopen_any(
    path: *const c_char,
    mode: *const c_char,
    old: *mut FILE,
    real: Option<FreopenFn>,
) -> *mut FILE {
    // SAFETY: caller's path (NULL means "change the mode only", which glibc handles).
    match unsafe { target(path) } {
        Target::Iris { .. } if !old.is_null() && !mode.is_null() => {
            // SAFETY: flushing and querying the caller's stream.
            let fd_old = unsafe {
                libc::fflush(old);
                libc::fileno(old)
            };
            // SAFETY: a valid C string from the caller.
            let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
            let Some(flags) = mode_flags(m) else {
                set(libc::EINVAL);
                return std::ptr::null_mut();
            };
            // SAFETY: caller's path; our own open serves it.
            let fd = unsafe { crate::calls::open(path, flags, 0o666) };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            if (0..=2).contains(&fd_old) {
                // SAFETY: our own dup2/close switch the standard stream (see sync_std_stream).
                unsafe {
                    crate::calls::dup2(fd, fd_old);
                    crate::calls::close(fd);
                    return match fd_old {
                        0 => stdin,
                        1 => stdout,
                        _ => stderr,
                    };
                }
            }
            // SAFETY: closing the caller's old stream, then a new Iris stream on our fd.
            unsafe {
                libc::fclose(old);
                stream(fd, mode, false)
            }
        }
        _ => match real {
            // SAFETY: forwarding.
            Some(r) => unsafe { r(path, mode, old) },
            None => {
                set(libc::ENOSYS);
                std::ptr::null_mut()
            }
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    old: *mut FILE,
) -> *mut FILE {
    let real = real_ptr!(SLOT, "freopen", FreopenFn);
    // SAFETY: caller's arguments.
    unsafe { freopen_any(path, mode, old, real) }
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    old: *mut FILE,
) -> *mut FILE {
    let real = real_ptr!(SLOT, "freopen64", FreopenFn);
    // SAFETY: caller's arguments.
    unsafe { freopen_any(path, mode, old, real) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fileno_offset_matches_glibc() {
        // SAFETY: opening and closing a FILE on a file that exists on every Linux.
        unsafe {
            let f = libc::fopen(c"/proc/self/status".as_ptr(), c"r".as_ptr());
            assert!(!f.is_null());
            let at = *(f
                .cast::<u8>()
                .add(super::FILENO_OFFSET)
                .cast::<libc::c_int>());
            assert_eq!(at, libc::fileno(f));
            libc::fclose(f);
        }
    }
}
