//! A working directory inside Iris. The kernel cannot chdir into an Iris directory, so the
//! interposer keeps it: relative paths then resolve from that directory, and `getcwd` reports it.
//! The kernel's working directory is set to "/" meanwhile. A new program image adopts an Iris
//! working directory, when the kernel's is "/", from `IRIS_CWD` (which every exec and spawn
//! through Iris passes on) or else from `PWD` (which shells export).
#![allow(clippy::missing_safety_doc)]

use iris_fs::ForkSafeMutex as Mutex;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_char, c_int, size_t};

use crate::errno::{fail, set};
use crate::fdtable;
use crate::real;
use crate::route::{strip_prefix, target, Target};
use crate::state::{self, cred, Busy};

/// The Iris working directory: (inode, absolute path including the mount prefix).
static CWD: Mutex<Option<(u64, Vec<u8>)>> = Mutex::new(None);

/// Hold the Iris working directory across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(CWD.lock());
    std::mem::forget(HOST_CWD.lock());
}

/// Release what [`lock_for_fork`] took (parent and child after the fork).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only called after lock_for_fork, whose guard was forgotten.
    unsafe {
        HOST_CWD.force_unlock();
        CWD.force_unlock();
    }
}
static IN_IRIS: AtomicBool = AtomicBool::new(false);

/// The inode of the Iris working directory, if the working directory is in Iris.
#[inline]
pub(crate) fn iris_cwd() -> Option<u64> {
    if !IN_IRIS.load(Ordering::Acquire) {
        return None;
    }
    CWD.lock().as_ref().map(|(ino, _)| *ino)
}

fn current_abs() -> Option<Vec<u8>> {
    CWD.lock().as_ref().map(|(_, p)| p.clone())
}

/// The absolute path of the Iris working directory, if the working directory is in Iris.
pub(crate) fn iris_cwd_path() -> Option<Vec<u8>> {
    if !IN_IRIS.load(Ordering::Acquire) {
        return None;
    }
    current_abs()
}

/// Whether absolute `path` is normal already: no empty, "." or ".." component.
fn is_normal(path: &[u8]) -> bool {
    path.len() > 1
        && path[1..]
            .split(|b| *b == b'/')
            .all(|c| !matches!(c, b"" | b"." | b".."))
}

/// Lexically normalise an absolute path ("." and ".." removed).
pub(crate) fn normalize(path: &[u8]) -> Vec<u8> {
    if is_normal(path) {
        return path.to_vec(); // the common case, without the pieces
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::new();
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

fn enter(ino: u64, abs: Vec<u8>) -> c_int {
    // SAFETY: a NUL-terminated literal path; libc's own chdir.
    unsafe { real::chdir(c"/".as_ptr()) };
    *CWD.lock() = Some((ino, abs));
    IN_IRIS.store(true, Ordering::Release);
    0
}

fn leave() {
    IN_IRIS.store(false, Ordering::Release);
    *CWD.lock() = None;
    *HOST_CWD.lock() = None;
}

/// The host working directory's path as getcwd last gave it (None: not asked since the last
/// chdir), for relative paths that climb out of it (see `route::through_host_dir`).
static HOST_CWD: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// The host working directory changed where Iris did not see it (a raw system call).
pub(crate) fn forget_host_cwd() {
    let _b = Busy::enter();
    *HOST_CWD.lock() = None;
}

/// Call `f` with the host working directory's path (asked once per chdir).
pub(crate) fn with_host_cwd<R>(f: impl FnOnce(&[u8]) -> Option<R>) -> Option<R> {
    // (Signals wait: a handler's path call would find the lock held by its own thread.)
    let _b = Busy::enter();
    let mut g = HOST_CWD.lock();
    if g.is_none() {
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: a buffer of buf.len() bytes; libc's own getcwd.
        let p = unsafe { real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if p.is_null() {
            return None;
        }
        buf.truncate(buf.iter().position(|&b| b == 0)?);
        *g = Some(buf);
    }
    g.as_deref().and_then(f)
}

/// chdir into an Iris directory at `start`/`path`, whose absolute form is `abs`.
fn chdir_iris(start: u64, path: &[u8], abs: Vec<u8>) -> c_int {
    let _b = Busy::enter();
    let Some(fs) = state::fs() else {
        return fail(libc::EIO);
    };
    let c = cred();
    let r = fs.resolve(&c, start, path, true).and_then(|ino| {
        let i = fs.getattr(ino)?;
        if !i.is_dir() {
            return Err(iris_fs::Errno::ENOTDIR);
        }
        c.check(&i, iris_fs::X_OK)?;
        Ok(ino)
    });
    match r {
        Ok(ino) => enter(ino, abs),
        Err(iris_fs::Errno::EXDEV) => match crate::route::left_for_host(start, path, true) {
            // Through a symlink out of Iris: the host directory it names.
            Some(host) => {
                // SAFETY: a NUL-terminated path of our own.
                let r = unsafe { real::chdir(host.as_ptr()) };
                if r == 0 {
                    leave();
                    *HOST_CWD.lock() = None;
                }
                r
            }
            None => fail(libc::EXDEV),
        },
        Err(e) => fail(e.0),
    }
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    if path.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: caller's path.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path: rel } => {
            let abs = if bytes.first() == Some(&b'/') {
                normalize(bytes)
            } else {
                let mut base = current_abs().unwrap_or_default();
                base.push(b'/');
                base.extend_from_slice(bytes);
                normalize(&base)
            };
            if strip_prefix(&abs).is_none() {
                // ".." climbed out of the mount: the host takes over from the prefix's parent.
                leave();
                let c = std::ffi::CString::new(abs).unwrap_or_default();
                // SAFETY: a valid C string.
                let r = unsafe { real::chdir(c.as_ptr()) };
                // (A lookup between `leave` and the chdir may have cached the old directory.)
                *HOST_CWD.lock() = None;
                return r;
            }
            chdir_iris(start, &rel, abs)
        }
        Target::Host => {
            // SAFETY: forwarding.
            let r = unsafe { real::chdir(path) };
            if r == 0 {
                leave();
            }
            r
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        if !f.is_dir {
            return fail(libc::ENOTDIR);
        }
        return match &f.path {
            Some(abs) => enter(f.ino, abs.clone()),
            None => fail(libc::ENOENT),
        };
    }
    // SAFETY: forwarding.
    let r = unsafe { real::fchdir(fd) };
    if r == 0 {
        leave();
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let Some(abs) = (if IN_IRIS.load(Ordering::Acquire) {
        current_abs()
    } else {
        None
    }) else {
        // SAFETY: forwarding.
        return unsafe { real::getcwd(buf, size) };
    };
    let need = abs.len() + 1;
    // SAFETY: filling the caller's buffer (or one we malloc, as glibc does for NULL).
    unsafe {
        let out = if buf.is_null() {
            let n = if size == 0 { need } else { size };
            if n < need {
                set(libc::ERANGE);
                return std::ptr::null_mut();
            }
            let p = libc::malloc(n) as *mut c_char;
            if p.is_null() {
                set(libc::ENOMEM);
                return std::ptr::null_mut();
            }
            p
        } else {
            if size < need {
                set(libc::ERANGE);
                return std::ptr::null_mut();
            }
            buf
        };
        std::ptr::copy_nonoverlapping(abs.as_ptr().cast(), out, abs.len());
        *out.add(abs.len()) = 0;
        out
    }
}

#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    // SAFETY: getcwd with NULL allocates.
    unsafe { getcwd(std::ptr::null_mut(), 0) }
}

/// At start-up: adopt `IRIS_CWD`, else `PWD`, if it names an Iris directory and the kernel's
/// cwd is "/".
pub(crate) fn adopt_pwd() {
    let Some(pwd) = std::env::var_os(crate::exec::CWD_VAR).or_else(|| std::env::var_os("PWD"))
    else {
        return;
    };
    let pwd = normalize(pwd.as_encoded_bytes());
    let Some(rel) = strip_prefix(&pwd) else {
        return;
    };
    let Ok(host) = std::env::current_dir() else {
        return;
    };
    if host.as_os_str() != "/" {
        return;
    }
    let _b = Busy::enter();
    let Some(fs) = state::fs() else { return };
    if let Ok(ino) = fs.resolve(&cred(), iris_fs::ROOT_INO, &rel, true) {
        if fs.getattr(ino).is_ok_and(|i| i.is_dir()) {
            enter(ino, pwd);
        }
    }
}

/// [`absolute`] of a path under the first mount prefix, given relative to the Iris root
/// (`/a/b`), in one allocation when it is normal already.
pub(crate) fn under_first_prefix(path: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(64 + path.len());
    crate::prefix::for_each(|x| {
        p.extend_from_slice(x);
        false
    });
    p.extend_from_slice(path);
    if is_normal(&p) {
        p
    } else {
        normalize(&p)
    }
}

/// `path` made absolute from the Iris cwd (if relative), without normalising it: for a
/// resolution that must meet each component, `..` after a symlink included.
pub(crate) fn joined(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() == Some(&b'/') {
        return Some(path.to_vec());
    }
    let mut base = current_abs()?;
    base.push(b'/');
    base.extend_from_slice(path);
    Some(base)
}

/// Absolute Iris path (with prefix) of `path` given from the Iris cwd or absolute.
pub(crate) fn absolute(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() == Some(&b'/') {
        return Some(normalize(path));
    }
    let mut base = current_abs()?;
    base.push(b'/');
    base.extend_from_slice(path);
    Some(normalize(&base))
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normalising_drops_dots_and_empty_components_and_keeps_plain_paths() {
        for (path, want) in [
            (&b"/iris/a/b"[..], &b"/iris/a/b"[..]),
            (b"/", b"/"),
            (b"/iris/", b"/iris"),
            (b"//iris//a", b"/iris/a"),
            (b"/iris/./a/.", b"/iris/a"),
            (b"/iris/a/../b/..", b"/iris"),
            (b"/..", b"/"),
            (b"/iris/.hidden/..x", b"/iris/.hidden/..x"),
        ] {
            assert_eq!(normalize(path), want, "{}", String::from_utf8_lossy(path));
        }
    }
}
