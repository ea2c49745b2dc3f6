//! Extended attribute calls on Iris files.
#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;

use iris_fs::{Errno, Fs};
use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::errno::fail;
use crate::fdtable;
use crate::real;
use crate::route::{target, Target};
use crate::state::{self, cred, Busy};

/// Which inode a call names: a path (following the last symlink or not) or an fd.
enum Subject {
    Path(u64, Vec<u8>, bool),
    Fd(u64),
}

fn with_ino<T>(s: Subject, f: impl FnOnce(&Fs, u64) -> Result<T, Errno>) -> Result<T, Errno> {
    let _b = Busy::enter();
    let fs = state::fs().ok_or(Errno::EIO)?;
    let ino = match s {
        Subject::Path(start, p, follow) => fs.resolve(&cred(), start, &p, follow)?,
        Subject::Fd(ino) => ino,
    };
    f(fs, ino)
}

/// # Safety
/// `name` a valid C string.
unsafe fn cname<'a>(name: *const c_char) -> Result<&'a [u8], Errno> {
    if name.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: per the contract.
    Ok(unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Copy `data` out with the getxattr size protocol (size 0 asks for the length).
///
/// # Safety
/// `out` valid for `size` bytes.
unsafe fn give(data: &[u8], out: *mut c_void, size: size_t) -> ssize_t {
    if size == 0 {
        return data.len() as ssize_t;
    }
    if data.len() > size {
        return fail(libc::ERANGE);
    }
    // SAFETY: per the contract.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), out.cast(), data.len()) };
    data.len() as ssize_t
}

unsafe fn get(s: Subject, name: *const c_char, out: *mut c_void, size: size_t) -> ssize_t {
    // SAFETY: caller's name.
    let r =
        unsafe { cname(name) }.and_then(|n| with_ino(s, |fs, ino| fs.getxattr(&cred(), ino, n)));
    match r {
        // SAFETY: caller's buffer.
        Ok(v) => unsafe { give(&v, out, size) },
        Err(e) => fail(e.0),
    }
}

unsafe fn set(
    s: Subject,
    name: *const c_char,
    v: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    let value: &[u8] = if size == 0 || v.is_null() {
        &[]
    } else {
        // SAFETY: the caller's value buffer of `size` bytes.
        unsafe { std::slice::from_raw_parts(v.cast(), size) }
    };
    // SAFETY: caller's name.
    let r = unsafe { cname(name) }
        .and_then(|n| with_ino(s, |fs, ino| fs.setxattr(&cred(), ino, n, value, flags)));
    match r {
        Ok(()) => 0,
        Err(e) => fail(e.0),
    }
}

unsafe fn list(s: Subject, out: *mut c_char, size: size_t) -> ssize_t {
    match with_ino(s, |fs, ino| fs.listxattr(&cred(), ino)) {
        Ok(names) => {
            let mut all = Vec::new();
            for n in names {
                all.extend_from_slice(&n);
                all.push(0);
            }
            // SAFETY: caller's buffer.
            unsafe { give(&all, out.cast(), size) }
        }
        Err(e) => fail(e.0),
    }
}

unsafe fn remove(s: Subject, name: *const c_char) -> c_int {
    // SAFETY: caller's name.
    let r =
        unsafe { cname(name) }.and_then(|n| with_ino(s, |fs, ino| fs.removexattr(&cred(), ino, n)));
    match r {
        Ok(()) => 0,
        Err(e) => fail(e.0),
    }
}

/// The host path an Iris call on `path` should be made on instead, when it `failed` with EXDEV
/// (see `route::left_for_host`).
fn left_after(failed: bool, start: u64, path: &[u8], follow: bool) -> Option<std::ffi::CString> {
    if !failed || crate::errno::get() != libc::EXDEV {
        return None;
    }
    crate::route::left_for_host(start, path, follow)
}

macro_rules! path_fns {
    ($get:ident, $set:ident, $list:ident, $remove:ident, $follow:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $get(
            p: *const c_char,
            n: *const c_char,
            v: *mut c_void,
            s: size_t,
        ) -> ssize_t {
            // SAFETY: caller's arguments.
            unsafe {
                match target(p) {
                    Target::Iris { start, path } => {
                        let r = get(Subject::Path(start, path.clone(), $follow), n, v, s);
                        // Through a symlink out of Iris: the host file's.
                        match left_after(r < 0, start, &path, $follow) {
                            Some(host) => real::$get(host.as_ptr(), n, v, s),
                            None => r,
                        }
                    }
                    Target::Host => real::$get(p, n, v, s),
                }
            }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $set(
            p: *const c_char,
            n: *const c_char,
            v: *const c_void,
            s: size_t,
            f: c_int,
        ) -> c_int {
            // SAFETY: caller's arguments.
            unsafe {
                match target(p) {
                    Target::Iris { start, path } => {
                        set(Subject::Path(start, path, $follow), n, v, s, f)
                    }
                    Target::Host => real::$set(p, n, v, s, f),
                }
            }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $list(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t {
            // SAFETY: caller's arguments.
            unsafe {
                match target(p) {
                    Target::Iris { start, path } => {
                        let r = list(Subject::Path(start, path.clone(), $follow), l, s);
                        match left_after(r < 0, start, &path, $follow) {
                            Some(host) => real::$list(host.as_ptr(), l, s),
                            None => r,
                        }
                    }
                    Target::Host => real::$list(p, l, s),
                }
            }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $remove(p: *const c_char, n: *const c_char) -> c_int {
            // SAFETY: caller's arguments.
            unsafe {
                match target(p) {
                    Target::Iris { start, path } => remove(Subject::Path(start, path, $follow), n),
                    Target::Host => real::$remove(p, n),
                }
            }
        }
    };
}
path_fns!(getxattr, setxattr, listxattr, removexattr, true);
path_fns!(lgetxattr, lsetxattr, llistxattr, lremovexattr, false);

#[no_mangle]
pub unsafe extern "C" fn fgetxattr(
    fd: c_int,
    n: *const c_char,
    v: *mut c_void,
    s: size_t,
) -> ssize_t {
    // SAFETY: caller's arguments.
    unsafe {
        match fdtable::get(fd) {
            Some(f) => get(Subject::Fd(f.ino), n, v, s),
            None => real::fgetxattr(fd, n, v, s),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    n: *const c_char,
    v: *const c_void,
    s: size_t,
    fl: c_int,
) -> c_int {
    // SAFETY: caller's arguments.
    unsafe {
        match fdtable::get(fd) {
            Some(f) => set(Subject::Fd(f.ino), n, v, s, fl),
            None => real::fsetxattr(fd, n, v, s, fl),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t {
    // SAFETY: caller's arguments.
    unsafe {
        match fdtable::get(fd) {
            Some(f) => list(Subject::Fd(f.ino), l, s),
            None => real::flistxattr(fd, l, s),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, n: *const c_char) -> c_int {
    // SAFETY: caller's arguments.
    unsafe {
        match fdtable::get(fd) {
            Some(f) => remove(Subject::Fd(f.ino), n),
            None => real::fremovexattr(fd, n),
        }
    }
}
