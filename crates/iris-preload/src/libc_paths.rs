//! libc functions that reach files through glibc's internal calls, which no interposer sees:
//! `remove`, `canonicalize_file_name`, `pathconf`, `glob` and the tree walks `nftw` and `ftw`.
//! Given an Iris path, each asked the kernel, which knows no such path (or, for a relative one,
//! looked in its own working directory). Each is made here from interposed calls: `remove` from
//! `unlink` and `rmdir`, `glob` by libc's own matcher given the interposed directory and stat
//! functions (`GLOB_ALTDIRFUNC`), the walks by a walk of their own over Iris paths.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString};

use libc::{c_char, c_int, c_long, c_void};

use crate::errno::{fail, set};
use crate::real;
use crate::route::{target, Target};

#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    // As glibc's: unlink, and rmdir if that says it is a directory.
    // SAFETY: the caller's path, to the interposed unlink.
    if unsafe { crate::calls::unlink(path) } == 0 {
        return 0;
    }
    if crate::errno::get() != libc::EISDIR {
        return -1;
    }
    // SAFETY: as above, to the interposed rmdir.
    unsafe { crate::calls::rmdir(path) }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: glibc's definition: realpath with a buffer it allocates (the interposed one).
    unsafe { crate::more::realpath(path, std::ptr::null_mut()) }
}

/// `pathconf` of an Iris path: the limits of the file system (as tmpfs gives them).
fn iris_pathconf(name: c_int) -> c_long {
    match name {
        libc::_PC_LINK_MAX => 65_000,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        libc::_PC_NAME_MAX => iris_fs::NAME_MAX as c_long,
        libc::_PC_PATH_MAX => iris_fs::PATH_MAX as c_long,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_CHOWN_RESTRICTED | libc::_PC_NO_TRUNC | libc::_PC_2_SYMLINKS => 1,
        libc::_PC_VDISABLE => 0,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE | libc::_PC_REC_XFER_ALIGN => {
            crate::state::fs().map_or(4096, |fs| fs.block_size() as c_long)
        }
        libc::_PC_REC_INCR_XFER_SIZE
        | libc::_PC_REC_MAX_XFER_SIZE
        | libc::_PC_SYMLINK_MAX
        | libc::_PC_SYNC_IO
        | libc::_PC_ASYNC_IO
        | libc::_PC_PRIO_IO => -1,
        _ => {
            set(libc::EINVAL);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> c_long {
    // SAFETY: the caller's path.
    match unsafe { target(path) } {
        Target::Iris { .. } => {
            // The path must name something (ENOENT, ENOTDIR, EACCES as stat says).
            // SAFETY: all-zero is a valid stat; the interposed stat fills it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: the caller's path and our buffer.
            if unsafe { crate::calls::stat(path, &mut st) } != 0 {
                return -1;
            }
            iris_pathconf(name)
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::pathconf(path, name) },
    }
}

/// glibc's `glob_t`, with the directory functions `GLOB_ALTDIRFUNC` makes it use (the `libc`
/// crate keeps them private).
#[repr(C)]
pub struct GlobT {
    gl_pathc: usize,
    gl_pathv: *mut *mut c_char,
    gl_offs: usize,
    gl_flags: c_int,
    gl_closedir: Option<unsafe extern "C" fn(*mut c_void)>,
    gl_readdir: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    gl_opendir: Option<unsafe extern "C" fn(*const c_char) -> *mut c_void>,
    gl_lstat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
    gl_stat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
}

/// glibc's `GLOB_ALTDIRFUNC`: use the `gl_*dir` and `gl_*stat` functions of the `glob_t`.
const GLOB_ALTDIRFUNC: c_int = 1 << 9;

unsafe extern "C" fn glob_closedir(d: *mut c_void) {
    // SAFETY: a stream glob_opendir returned.
    unsafe { crate::dirstream::closedir(d.cast()) };
}

unsafe extern "C" fn glob_readdir(d: *mut c_void) -> *mut c_void {
    // SAFETY: as above.
    unsafe { crate::dirstream::readdir(d.cast()) }.cast()
}

unsafe extern "C" fn glob_readdir64(d: *mut c_void) -> *mut c_void {
    // SAFETY: as above.
    unsafe { crate::dirstream::readdir64(d.cast()) }.cast()
}

unsafe extern "C" fn glob_opendir(p: *const c_char) -> *mut c_void {
    // SAFETY: a path glob built.
    unsafe { crate::dirstream::opendir(p) }.cast()
}

unsafe extern "C" fn glob_stat(p: *const c_char, st: *mut c_void) -> c_int {
    // SAFETY: a path glob built and its stat buffer (struct stat and stat64 agree on x86-64).
    unsafe { crate::calls::stat(p, st.cast()) }
}

unsafe extern "C" fn glob_lstat(p: *const c_char, st: *mut c_void) -> c_int {
    // SAFETY: as above.
    unsafe { crate::calls::lstat(p, st.cast()) }
}

/// glob with the interposed directory and stat functions, unless the caller gave its own.
///
/// # Safety
/// As glob's arguments; `real` is libc's glob or glob64.
unsafe fn glob_with(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut GlobT,
    wide: bool,
    real: unsafe fn(
        *const c_char,
        c_int,
        Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
        *mut GlobT,
    ) -> c_int,
) -> c_int {
    if flags & GLOB_ALTDIRFUNC != 0 || pglob.is_null() {
        // SAFETY: forwarding.
        return unsafe { real(pattern, flags, errfunc, pglob) };
    }
    // SAFETY: the caller's glob_t, which glob fills; the functions are set before the call
    // (glob reads them only with GLOB_ALTDIRFUNC, which it keeps in gl_flags).
    unsafe {
        (*pglob).gl_closedir = Some(glob_closedir);
        (*pglob).gl_readdir = Some(if wide { glob_readdir64 } else { glob_readdir });
        (*pglob).gl_opendir = Some(glob_opendir);
        (*pglob).gl_stat = Some(glob_stat);
        (*pglob).gl_lstat = Some(glob_lstat);
    }
    // SAFETY: forwarding with the functions above.
    let r = unsafe { real(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob) };
    // SAFETY: as above; the caller did not ask for GLOB_ALTDIRFUNC, so it is not reported.
    unsafe { (*pglob).gl_flags &= !GLOB_ALTDIRFUNC };
    r
}

#[no_mangle]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut GlobT,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { glob_with(pattern, flags, errfunc, pglob, false, real::glob) }
}

#[no_mangle]
pub unsafe extern "C" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
    pglob: *mut GlobT,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { glob_with(pattern, flags, errfunc, pglob, true, real::glob64) }
}

/// glibc's `<ftw.h>` values (the `libc` crate has none).
mod ftw {
    use libc::c_int;
    /// A file.
    pub const F: c_int = 0;
    /// A directory (before its entries).
    pub const D: c_int = 1;
    /// A directory that cannot be read.
    pub const DNR: c_int = 2;
    /// A file that cannot be stat'ed.
    pub const NS: c_int = 3;
    /// A symlink (with `PHYS`).
    pub const SL: c_int = 4;
    /// A directory (after its entries, with `DEPTH`).
    pub const DP: c_int = 5;
    /// A dangling symlink (without `PHYS`).
    pub const SLN: c_int = 6;
    /// Flag: do not follow symlinks.
    pub const PHYS: c_int = 1;
    /// Flag: change into each directory.
    pub const CHDIR: c_int = 4;
    /// Flag: a directory after its entries.
    pub const DEPTH: c_int = 8;
    /// Flag: the function's answer steers the walk.
    pub const ACTIONRETVAL: c_int = 16;
    /// Answer: go on.
    pub const CONTINUE: c_int = 0;
    /// Answer: skip this directory's entries.
    pub const SKIP_SUBTREE: c_int = 2;
    /// Answer: skip the rest of this directory.
    pub const SKIP_SIBLINGS: c_int = 3;
}

/// What `nftw` tells its function about a position: `base` (offset of the name in the path)
/// and `level` (depth below the start).
#[repr(C)]
pub struct Ftw {
    base: c_int,
    level: c_int,
}

/// nftw's function.
pub(crate) type NftwFn =
    unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut Ftw) -> c_int;
/// ftw's function.
pub(crate) type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

/// The walk's callback: nftw's or ftw's.
#[derive(Clone, Copy)]
enum Visit {
    Nftw(NftwFn),
    Ftw(FtwFn),
}

/// What the callback's answer says to do next (`FTW_ACTIONRETVAL` or not).
enum Next {
    Go,
    SkipSubtree,
    SkipSiblings,
    Stop(c_int),
}

/// One tree walk over Iris paths, as glibc's nftw walks (its order is readdir's).
struct Walk {
    visit: Visit,
    flags: c_int,
}

impl Walk {
    fn call(&self, path: &CStr, st: &libc::stat, kind: c_int, base: usize, level: usize) -> Next {
        let r = match self.visit {
            Visit::Nftw(f) => {
                let mut ftw = Ftw {
                    base: base as c_int,
                    level: level as c_int,
                };
                // SAFETY: the caller's function with a path, a stat and an FTW of ours.
                unsafe { f(path.as_ptr(), st, kind, &mut ftw) }
            }
            // SAFETY: as above.
            Visit::Ftw(f) => unsafe { f(path.as_ptr(), st, kind) },
        };
        if self.flags & ftw::ACTIONRETVAL != 0 {
            match r {
                ftw::CONTINUE => Next::Go,
                ftw::SKIP_SUBTREE => Next::SkipSubtree,
                ftw::SKIP_SIBLINGS => Next::SkipSiblings,
                _ => Next::Stop(r),
            }
        } else if r != 0 {
            Next::Stop(r)
        } else {
            Next::Go
        }
    }

    /// Visit `path` (at `level`, its name at `base`) and what lies below it.
    fn walk(&self, path: &CStr, base: usize, level: usize) -> Next {
        // SAFETY: all-zero is a valid stat, which the interposed calls fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let phys = self.flags & ftw::PHYS != 0;
        // SAFETY: a NUL-terminated path and our buffer.
        let got = if phys {
            unsafe { crate::calls::lstat(path.as_ptr(), &mut st) }
        } else {
            unsafe { crate::calls::stat(path.as_ptr(), &mut st) }
        };
        let kind = if got != 0 {
            // A dangling symlink (followed) is FTW_SLN for nftw, else the stat failed.
            // SAFETY: as above.
            let is_link = unsafe { crate::calls::lstat(path.as_ptr(), &mut st) } == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFLNK;
            match self.visit {
                Visit::Nftw(_) if is_link => ftw::SLN,
                _ => ftw::NS,
            }
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => ftw::D,
                libc::S_IFLNK => ftw::SL,
                _ => ftw::F,
            }
        };
        if kind != ftw::D {
            return self.call(path, &st, kind, base, level);
        }
        let depth_first = self.flags & ftw::DEPTH != 0;
        // SAFETY: a NUL-terminated path, to the interposed opendir.
        let dir = unsafe { crate::dirstream::opendir(path.as_ptr()) };
        if dir.is_null() {
            return self.call(path, &st, ftw::DNR, base, level);
        }
        if !depth_first {
            match self.call(path, &st, ftw::D, base, level) {
                Next::Go => {}
                Next::SkipSubtree => {
                    // SAFETY: the stream opened above.
                    unsafe { crate::dirstream::closedir(dir) };
                    return Next::Go;
                }
                other => {
                    // SAFETY: as above.
                    unsafe { crate::dirstream::closedir(dir) };
                    return other;
                }
            }
        }
        let mut names = Vec::new();
        loop {
            // SAFETY: the stream opened above.
            let e = unsafe { crate::dirstream::readdir(dir) };
            if e.is_null() {
                break;
            }
            // SAFETY: readdir's entry, valid until the next call on the stream.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        // SAFETY: as above.
        unsafe { crate::dirstream::closedir(dir) };
        let parent = path.to_bytes();
        for name in names {
            let mut child = parent.to_vec();
            if !child.ends_with(b"/") {
                child.push(b'/');
            }
            let child_base = child.len();
            child.extend_from_slice(&name);
            let Ok(child) = CString::new(child) else {
                continue;
            };
            match self.walk(&child, child_base, level + 1) {
                Next::Go | Next::SkipSubtree => {}
                Next::SkipSiblings => break,
                Next::Stop(r) => return Next::Stop(r),
            }
        }
        if depth_first {
            return self.call(path, &st, ftw::DP, base, level);
        }
        Next::Go
    }

    /// Walk from `path`: nftw's result.
    fn run(&self, path: &CStr) -> c_int {
        let bytes = path.to_bytes();
        let trimmed = bytes.len()
            - bytes
                .iter()
                .rev()
                .take_while(|b| **b == b'/')
                .count()
                .min(bytes.len().saturating_sub(1));
        let base = bytes[..trimmed]
            .iter()
            .rposition(|b| *b == b'/')
            .map_or(0, |i| i + 1);
        // A start that cannot be stat'ed fails the walk (no call), unless nftw follows links
        // and it is a dangling one (FTW_SLN).
        // SAFETY: all-zero is a valid stat, which the interposed calls fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let phys = self.flags & ftw::PHYS != 0;
        // SAFETY: a NUL-terminated path and our buffer.
        let found = unsafe {
            if phys {
                crate::calls::lstat(path.as_ptr(), &mut st)
            } else {
                crate::calls::stat(path.as_ptr(), &mut st)
            }
        } == 0;
        if !found {
            let errno = crate::errno::get();
            // SAFETY: as above.
            let dangling = !phys
                && matches!(self.visit, Visit::Nftw(_))
                && unsafe { crate::calls::lstat(path.as_ptr(), &mut st) } == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFLNK;
            if !dangling {
                return fail(errno);
            }
        }
        match self.walk(path, base, 0) {
            Next::Stop(r) => r,
            _ => 0,
        }
    }
}

/// nftw over an Iris path; `None` for a host path (libc's walk).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn nftw_iris(path: *const c_char, visit: Visit, flags: c_int) -> Option<c_int> {
    // SAFETY: the caller's path.
    let Target::Iris { .. } = (unsafe { target(path) }) else {
        return None;
    };
    if flags & ftw::CHDIR != 0 {
        // Changing into each directory is not done by this walk.
        return Some(fail(libc::ENOTSUP));
    }
    // SAFETY: routed to Iris, so non-null and NUL-terminated.
    let path = unsafe { CStr::from_ptr(path) };
    Some(Walk { visit, flags }.run(path))
}

#[no_mangle]
pub unsafe extern "C" fn nftw(path: *const c_char, f: NftwFn, fds: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's path.
    match unsafe { nftw_iris(path, Visit::Nftw(f), flags) } {
        Some(r) => r,
        // SAFETY: forwarding.
        None => unsafe { real::nftw(path, f, fds, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nftw64(path: *const c_char, f: NftwFn, fds: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's path.
    match unsafe { nftw_iris(path, Visit::Nftw(f), flags) } {
        Some(r) => r,
        // SAFETY: forwarding.
        None => unsafe { real::nftw64(path, f, fds, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftw(path: *const c_char, f: FtwFn, fds: c_int) -> c_int {
    // SAFETY: the caller's path.
    match unsafe { nftw_iris(path, Visit::Ftw(f), 0) } {
        Some(r) => r,
        // SAFETY: forwarding.
        None => unsafe { real::ftw(path, f, fds) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftw64(path: *const c_char, f: FtwFn, fds: c_int) -> c_int {
    // SAFETY: the caller's path.
    match unsafe { nftw_iris(path, Visit::Ftw(f), 0) } {
        Some(r) => r,
        // SAFETY: forwarding.
        None => unsafe { real::ftw64(path, f, fds) },
    }
}
