//! The `*at` variants not covered in `calls`, the old time setters, temporary files, statfs,
//! sync calls, flock, close_range and mknod/mkfifo.
#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;

use iris_fs::{Errno, Fs};
use libc::{c_char, c_int, c_uint, mode_t, off64_t, size_t, ssize_t};

use crate::errno::{fail, set};
use crate::fdtable;
use crate::real;
use crate::route::{target, target_at, Target};
use crate::state::{self, cred, Busy};

fn op(f: impl FnOnce(&Fs) -> Result<(), Errno>) -> c_int {
    let _b = Busy::enter();
    match state::fs().ok_or(Errno::EIO).and_then(f) {
        Ok(()) => 0,
        Err(e) => fail(e.0),
    }
}

/// # Safety
/// `p` a valid C string.
unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => op(|fs| {
            let c = cred();
            let ino = fs.resolve(&c, start, &path, flags & libc::AT_SYMLINK_NOFOLLOW == 0)?;
            if flags & libc::AT_SYMLINK_NOFOLLOW != 0 && fs.getattr(ino)?.is_symlink() {
                return Err(Errno::EOPNOTSUPP);
            }
            fs.chmod(&c, ino, mode)
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::fchmodat(dirfd, path, mode, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    // SAFETY: caller's path (may be empty with AT_EMPTY_PATH).
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() && unsafe { *path } == 0 {
        if let Some(f) = fdtable::get(dirfd) {
            return op(|fs| fs.chown(&cred(), f.ino, uid, gid));
        }
    }
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => op(|fs| {
            let c = cred();
            let ino = fs.resolve(&c, start, &path, flags & libc::AT_SYMLINK_NOFOLLOW == 0)?;
            fs.chown(&c, ino, uid, gid)
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::fchownat(dirfd, path, uid, gid, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: caller's paths.
    match unsafe { (target_at(da, a), target_at(db, b)) } {
        (
            Target::Iris {
                start: sa,
                path: pa,
            },
            Target::Iris {
                start: sb,
                path: pb,
            },
        ) => op(|fs| {
            fs.link(
                &cred(),
                sa,
                &pa,
                sb,
                &pb,
                flags & libc::AT_SYMLINK_FOLLOW != 0,
            )
        }),
        // SAFETY: forwarding.
        (Target::Host, Target::Host) => unsafe { real::linkat(da, a, db, b, flags) },
        _ => fail(libc::EXDEV),
    }
}

#[no_mangle]
pub unsafe extern "C" fn symlinkat(t: *const c_char, dirfd: c_int, p: *const c_char) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, p) } {
        Target::Iris { start, path } => {
            if t.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: caller's target string.
            let tb = unsafe { bytes(t) }.to_vec();
            op(|fs| fs.symlink(&cred(), &tb, start, &path).map(|_| ()))
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::symlinkat(t, dirfd, p) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    p: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, p) } {
        Target::Iris { start, path } => {
            let _b = Busy::enter();
            match state::fs()
                .ok_or(Errno::EIO)
                .and_then(|fs| fs.readlink(&cred(), start, &path))
            {
                // SAFETY: the caller's buffer of `n` bytes.
                Ok(t) => unsafe { crate::calls::give_link(&t, buf, n) },
                Err(e) => fail(e.0),
            }
        }
        // SAFETY: the caller's path (an absolute one names the same link from any dirfd) and
        // buffer.
        Target::Host => match unsafe { crate::calls::readlink_fd_link(p, buf, n) } {
            Some(r) => r,
            // SAFETY: forwarding.
            None => unsafe { real::readlinkat(dirfd, p, buf, n) },
        },
    }
}

fn tv_ns(t: &libc::timeval) -> i64 {
    t.tv_sec * 1_000_000_000 + t.tv_usec * 1000
}

/// Set times from an optional pair of timevals (NULL = now).
fn set_times(fs: &Fs, ino: u64, tv: Option<(i64, i64)>) -> Result<(), Errno> {
    match tv {
        Some((a, m)) => fs.utimens(&cred(), ino, Some(a), Some(m), true),
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or(0);
            fs.utimens(&cred(), ino, Some(now), Some(now), false)
        }
    }
}

/// # Safety
/// `t` NULL or two timevals.
unsafe fn tv_pair(t: *const libc::timeval) -> Option<(i64, i64)> {
    // SAFETY: per the contract.
    (!t.is_null()).then(|| unsafe { (tv_ns(&*t), tv_ns(&*t.add(1))) })
}

#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(p) } {
        Target::Iris { start, path } => op(|fs| {
            let ino = fs.resolve(&cred(), start, &path, true)?;
            // SAFETY: caller's times.
            set_times(fs, ino, unsafe { tv_pair(t) })
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::utimes(p, t) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(p) } {
        Target::Iris { start, path } => op(|fs| {
            let ino = fs.resolve(&cred(), start, &path, false)?;
            // SAFETY: caller's times.
            set_times(fs, ino, unsafe { tv_pair(t) })
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::lutimes(p, t) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, t: *const libc::timeval) -> c_int {
    match fdtable::get(fd) {
        // SAFETY: caller's times.
        Some(f) => op(|fs| set_times(fs, f.ino, unsafe { tv_pair(t) })),
        // SAFETY: forwarding.
        None => unsafe { real::futimes(fd, t) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, t: *const libc::utimbuf) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(p) } {
        Target::Iris { start, path } => op(|fs| {
            let ino = fs.resolve(&cred(), start, &path, true)?;
            // SAFETY: caller's utimbuf.
            let tv = (!t.is_null())
                .then(|| unsafe { ((*t).actime * 1_000_000_000, (*t).modtime * 1_000_000_000) });
            set_times(fs, ino, tv)
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::utime(p, t) },
    }
}

/// Fill the X's before `suffix_len` trailing bytes of `template` and create the file (or
/// directory) in Iris, retrying on collisions as glibc does.
///
/// # Safety
/// `template` a writable C string.
unsafe fn make_temp(template: *mut c_char, suffix_len: c_int, flags: c_int, dir: bool) -> c_int {
    // SAFETY: per the contract.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffix_len).unwrap_or(usize::MAX);
    if suffix > len || len - suffix < 6 {
        return fail(libc::EINVAL);
    }
    let xs = len - suffix - 6;
    // SAFETY: within the string.
    let t = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    if &t[xs..xs + 6] != b"XXXXXX" {
        return fail(libc::EINVAL);
    }
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
        ^ (u64::from(std::process::id()) << 20)
        ^ (template as u64);
    for _ in 0..1000 {
        for c in t[xs..xs + 6].iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *c = CHARS[(seed % CHARS.len() as u64) as usize];
        }
        let r = if dir {
            // SAFETY: our own mkdir on the filled template.
            unsafe { crate::calls::mkdir(template, 0o700) }
        } else {
            // SAFETY: our own open on the filled template.
            unsafe {
                crate::calls::open(
                    template,
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE),
                    0o600,
                )
            }
        };
        // SAFETY: reading errno.
        if r >= 0 || unsafe { *libc::__errno_location() } != libc::EEXIST {
            return r;
        }
    }
    fail(libc::EEXIST)
}

/// The directory glibc's tmpfile(3) puts its file in (`P_tmpdir`).
const TMPFILE_DIR: &[u8] = b"/tmp\0";

/// tmpfile(3): glibc makes the file in /tmp with internal calls an interposer cannot see, so when
/// /tmp is under an Iris mount prefix the file is made here instead: unnamed (O_TMPFILE) in the
/// volume, as a stream over an Iris fd.
unsafe fn tmpfile_any(real: unsafe fn() -> *mut libc::FILE) -> *mut libc::FILE {
    // SAFETY: a NUL-terminated constant path.
    match unsafe { target(TMPFILE_DIR.as_ptr().cast()) } {
        Target::Iris { .. } => {
            // SAFETY: our own open on a constant path.
            let fd = unsafe {
                crate::calls::open(
                    TMPFILE_DIR.as_ptr().cast(),
                    libc::O_RDWR | libc::O_TMPFILE,
                    0o600,
                )
            };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            // SAFETY: an Iris fd we own and a constant mode.
            let f = unsafe { crate::stdio::fdopen(fd, c"w+".as_ptr()) };
            if f.is_null() {
                // SAFETY: our fd.
                unsafe { crate::calls::close(fd) };
            }
            f
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real() },
    }
}

#[no_mangle]
pub unsafe extern "C" fn tmpfile() -> *mut libc::FILE {
    // SAFETY: see tmpfile_any.
    unsafe { tmpfile_any(real::tmpfile) }
}

#[no_mangle]
pub unsafe extern "C" fn tmpfile64() -> *mut libc::FILE {
    // SAFETY: see tmpfile_any.
    unsafe { tmpfile_any(real::tmpfile64) }
}

macro_rules! mkstemp_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: *mut c_char) -> c_int {
            // SAFETY: caller's template.
            match unsafe { target(t) } {
                // SAFETY: caller's template.
                Target::Iris { .. } => unsafe { make_temp(t, 0, 0, false) },
                // SAFETY: forwarding.
                Target::Host => unsafe { real::$real(t) },
            }
        }
    };
}
mkstemp_fn!(mkstemp, mkstemp);
mkstemp_fn!(mkstemp64, mkstemp64);

macro_rules! mkostemp_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: *mut c_char, flags: c_int) -> c_int {
            // SAFETY: caller's template.
            match unsafe { target(t) } {
                // SAFETY: caller's template.
                Target::Iris { .. } => unsafe { make_temp(t, 0, flags, false) },
                // SAFETY: forwarding.
                Target::Host => unsafe { real::$real(t, flags) },
            }
        }
    };
}
mkostemp_fn!(mkostemp, mkostemp);
mkostemp_fn!(mkostemp64, mkostemp64);

macro_rules! mkstemps_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: *mut c_char, s: c_int) -> c_int {
            // SAFETY: caller's template.
            match unsafe { target(t) } {
                // SAFETY: caller's template.
                Target::Iris { .. } => unsafe { make_temp(t, s, 0, false) },
                // SAFETY: forwarding.
                Target::Host => unsafe { real::$real(t, s) },
            }
        }
    };
}
mkstemps_fn!(mkstemps, mkstemps);
mkstemps_fn!(mkstemps64, mkstemps64);

macro_rules! mkostemps_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: *mut c_char, s: c_int, flags: c_int) -> c_int {
            // SAFETY: caller's template.
            match unsafe { target(t) } {
                // SAFETY: caller's template.
                Target::Iris { .. } => unsafe { make_temp(t, s, flags, false) },
                // SAFETY: forwarding.
                Target::Host => unsafe { real::$real(t, s, flags) },
            }
        }
    };
}
mkostemps_fn!(mkostemps, mkostemps);
mkostemps_fn!(mkostemps64, mkostemps64);

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(t: *mut c_char) -> *mut c_char {
    // SAFETY: caller's template.
    match unsafe { target(t) } {
        // SAFETY: caller's template.
        Target::Iris { .. } => {
            if unsafe { make_temp(t, 0, 0, true) } == 0 {
                t
            } else {
                std::ptr::null_mut()
            }
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::mkdtemp(t) },
    }
}

fn fill_statfs(fs: &Fs, out: &mut libc::statfs) -> Result<(), Errno> {
    let st = fs.statfs()?;
    // SAFETY: all-zero is a valid statfs.
    *out = unsafe { std::mem::zeroed() };
    out.f_type = 0x4952_4953; // "IRIS"
    out.f_bsize = st.block_size as _;
    out.f_frsize = st.block_size as _;
    out.f_blocks = st.blocks;
    out.f_bfree = st.blocks_free;
    out.f_bavail = st.blocks_avail;
    out.f_files = st.files + st.blocks_free;
    out.f_ffree = st.blocks_free;
    out.f_namelen = iris_fs::NAME_MAX as _;
    Ok(())
}

fn fill_statvfs(fs: &Fs, out: &mut libc::statvfs) -> Result<(), Errno> {
    let st = fs.statfs()?;
    // SAFETY: all-zero is a valid statvfs.
    *out = unsafe { std::mem::zeroed() };
    out.f_bsize = st.block_size as _;
    out.f_frsize = st.block_size as _;
    out.f_blocks = st.blocks;
    out.f_bfree = st.blocks_free;
    out.f_bavail = st.blocks_avail;
    out.f_files = st.files + st.blocks_free;
    out.f_ffree = st.blocks_free;
    out.f_favail = st.blocks_free;
    out.f_fsid = st.fsid as _;
    out.f_namemax = iris_fs::NAME_MAX as _;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn statfs(p: *const c_char, b: *mut libc::statfs) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(p) } {
        Target::Iris { start, path } => op(|fs| {
            fs.resolve(&cred(), start, &path, true)?;
            // SAFETY: caller's buffer.
            fill_statfs(fs, unsafe { &mut *b })
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::statfs(p, b) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int {
    if fdtable::is_iris(fd) {
        // SAFETY: caller's buffer.
        return op(|fs| fill_statfs(fs, unsafe { &mut *b }));
    }
    // SAFETY: forwarding.
    unsafe { real::fstatfs(fd, b) }
}

#[no_mangle]
pub unsafe extern "C" fn statvfs(p: *const c_char, b: *mut libc::statvfs) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(p) } {
        Target::Iris { start, path } => op(|fs| {
            fs.resolve(&cred(), start, &path, true)?;
            // SAFETY: caller's buffer.
            fill_statvfs(fs, unsafe { &mut *b })
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::statvfs(p, b) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, b: *mut libc::statvfs) -> c_int {
    if fdtable::is_iris(fd) {
        // SAFETY: caller's buffer.
        return op(|fs| fill_statvfs(fs, unsafe { &mut *b }));
    }
    // SAFETY: forwarding.
    unsafe { real::fstatvfs(fd, b) }
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    if fdtable::is_iris(fd) {
        return op(|fs| fs.sync());
    }
    // SAFETY: forwarding.
    unsafe { real::syncfs(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    off: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    if fdtable::is_iris(fd) {
        if flags & libc::SYNC_FILE_RANGE_WRITE != 0 && flags & libc::SYNC_FILE_RANGE_WAIT_AFTER != 0
        {
            return op(|fs| fs.sync());
        }
        return 0;
    }
    // SAFETY: forwarding.
    unsafe { real::sync_file_range(fd, off, n, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, operation: c_int) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        return crate::locks::flock(&f, operation);
    }
    // SAFETY: forwarding.
    unsafe { real::flock(fd, operation) }
}

/// lockf and lockf64: glibc's make the fcntl call inside libc, which Iris would not see (the
/// kernel then locked the placeholder: F_LOCK on an Iris fd failed with EBADF).
macro_rules! lockf_fn {
    ($name:ident, $real:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, len: $off) -> c_int {
            if let Some(f) = fdtable::get(fd) {
                return crate::locks::lockf(&f, cmd, len);
            }
            // SAFETY: forwarding.
            unsafe { real::$real(fd, cmd, len) }
        }
    };
}
lockf_fn!(lockf, lockf, libc::off_t);
lockf_fn!(lockf64, lockf64, libc::off64_t);

/// closefrom (glibc 2.34): as close_range to the last fd, so the Iris fds it ends leave the
/// table too (glibc's closefrom makes the system call itself, which Iris would not see: reads
/// of a closed fd were served from its stale entry). Iris's own fds are stepped over.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let first = c_uint::try_from(low.max(0)).unwrap_or(0);
    // SAFETY: closing the caller's range.
    if unsafe { close_range(first, c_uint::MAX, 0) } != 0 {
        // What glibc's closefrom does without close_range: each fd up to the limit.
        // SAFETY: sysconf reads a limit of the process.
        let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
        let max = c_uint::try_from(max).unwrap_or(crate::fdtable::MAX_FDS as c_uint);
        for fd in first..max {
            // SAFETY: closing an fd in the caller's range (ours refuse, see `close`).
            unsafe { crate::calls::close(fd as c_int) };
        }
    }
}

/// close_range: the Iris fds in the range leave the table; Iris's own fds (the volume's, the
/// lock files') are stepped over, as the program never opened them: the range is closed in the
/// pieces between them.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if first > last {
        // SAFETY: forwarding (EINVAL).
        return unsafe { real::close_range(first, last, flags) };
    }
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        let to_fd = |n: c_uint| c_int::try_from(n).unwrap_or(c_int::MAX);
        crate::uring::forget_range(to_fd(first), to_fd(last));
        let top = last.min(crate::fdtable::MAX_FDS as c_uint - 1);
        for fd in first..=top {
            if fdtable::is_iris(fd as c_int) {
                // SAFETY: closing an fd in the caller's range.
                unsafe { crate::calls::close(fd as c_int) };
            }
        }
    }
    let to_fd = |n: c_uint| c_int::try_from(n).unwrap_or(c_int::MAX);
    let own: Vec<c_uint> = iris_media::own_fd::within(to_fd(first), to_fd(last))
        .into_iter()
        .filter_map(|fd| c_uint::try_from(fd).ok())
        .collect();
    for (from, to) in pieces_between(first, last, &own) {
        // SAFETY: closing a piece of the caller's range.
        let r = unsafe { real::close_range(from, to, flags) };
        if r != 0 {
            return r;
        }
    }
    0
}

/// The pieces of `first..=last` between the numbers in `skip` (ascending), as inclusive
/// ranges, in order.
fn pieces_between(first: c_uint, last: c_uint, skip: &[c_uint]) -> Vec<(c_uint, c_uint)> {
    let mut out = Vec::new();
    let mut from = Some(first);
    for &fd in skip {
        let Some(f) = from else { break };
        if fd < f || fd > last {
            continue;
        }
        if fd > f {
            out.push((f, fd - 1));
        }
        from = fd.checked_add(1);
    }
    if let Some(f) = from.filter(|&f| f <= last) {
        out.push((f, last));
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn realpath(p: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: caller's path.
    let Target::Iris { start, path } = (unsafe { target(p) }) else {
        // A path to an Iris fd (`/dev/stdin`, `/proc/self/fd/N`) resolves to the file's path
        // (see `calls::fd_link_text`), not to its placeholder.
        // SAFETY: caller's path.
        let named = unsafe { crate::route::reopened(p) }
            .and_then(|f| crate::calls::fd_link_text(&f))
            .filter(|t| !t.ends_with(b" (deleted)"))
            .and_then(|t| std::ffi::CString::new(t).ok());
        return match named {
            // SAFETY: a valid C string, and the caller's buffer.
            Some(t) => unsafe { realpath(t.as_ptr(), resolved) },
            // SAFETY: forwarding.
            None => unsafe { real::realpath(p, resolved) },
        };
    };
    let _b = Busy::enter();
    let Some(fs) = state::fs() else {
        set(libc::EIO);
        return std::ptr::null_mut();
    };
    // Resolve for existence (and errors), then build the canonical path from the components,
    // following each symlink met on the way.
    if let Err(e) = fs.resolve(&cred(), start, &path, true) {
        set(e.0);
        return std::ptr::null_mut();
    }
    // SAFETY: caller's path.
    let raw = unsafe { bytes(p) };
    let abs = match crate::cwd::joined(raw)
        .ok_or(libc::ENOENT)
        .and_then(|a| canonical(fs, &a))
    {
        Ok(Canonical::Iris(abs)) => abs,
        Ok(Canonical::Host(abs)) => {
            drop(_b);
            // A symlink led out of Iris: the host resolves the rest.
            let Ok(c) = std::ffi::CString::new(abs) else {
                set(libc::ENOENT);
                return std::ptr::null_mut();
            };
            // SAFETY: a valid C string, and the caller's buffer.
            return unsafe { real::realpath(c.as_ptr(), resolved) };
        }
        Err(e) => {
            set(e);
            return std::ptr::null_mut();
        }
    };
    let n = abs.len() + 1;
    if n > libc::PATH_MAX as usize {
        set(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    // SAFETY: writing the result into the caller's PATH_MAX buffer or a malloc'd one.
    unsafe {
        let out = if resolved.is_null() {
            libc::malloc(n) as *mut c_char
        } else {
            resolved
        };
        if out.is_null() {
            set(libc::ENOMEM);
            return std::ptr::null_mut();
        }
        std::ptr::copy_nonoverlapping(abs.as_ptr().cast(), out, abs.len());
        *out.add(abs.len()) = 0;
        out
    }
}

/// What [`canonical`] found.
enum Canonical {
    /// The canonical path, under a mount prefix.
    Iris(Vec<u8>),
    /// A path outside Iris (a symlink led there), for the host to resolve.
    Host(Vec<u8>),
}

/// Symlinks one resolution follows at most (Linux's limit).
const MAX_SYMLINKS: usize = 40;

/// The canonical form of absolute path `abs` as realpath(3) gives it: `.` and `..` taken
/// away and every symlink met followed, component by component.
fn canonical(fs: &iris_fs::Fs, abs: &[u8]) -> Result<Canonical, c_int> {
    let parts = |p: &[u8]| -> Vec<Vec<u8>> {
        p.split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .rev()
            .map(<[u8]>::to_vec)
            .collect()
    };
    // Components still to walk, the next one last.
    let mut todo = parts(abs);
    let mut out: Vec<u8> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.as_slice() {
            b"." => continue,
            b".." => {
                let cut = out.iter().rposition(|b| *b == b'/').unwrap_or(0);
                out.truncate(cut);
                continue;
            }
            _ => {}
        }
        let mut next = out.clone();
        next.push(b'/');
        next.extend_from_slice(&c);
        let Some(rel) = crate::route::strip_prefix(&next) else {
            // Above the mount (a directory on its way) or outside Iris.
            let mut above = false;
            crate::prefix::for_each(|m| {
                above |= m.len() > next.len() && m.starts_with(&next) && m[next.len()] == b'/';
                !above
            });
            if above {
                out = next;
                continue;
            }
            for rest in todo.iter().rev() {
                next.push(b'/');
                next.extend_from_slice(rest);
            }
            return Ok(Canonical::Host(next));
        };
        let c = cred();
        let ino = fs
            .resolve(&c, iris_fs::ROOT_INO, &rel, false)
            .map_err(|e| e.0)?;
        let inode = fs.getattr(ino).map_err(|e| e.0)?;
        if inode.is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(libc::ELOOP);
            }
            let target = fs.readlink(&c, iris_fs::ROOT_INO, &rel).map_err(|e| e.0)?;
            if target.first() == Some(&b'/') {
                out.clear();
            }
            todo.extend(parts(&target));
            continue;
        }
        if !todo.is_empty() && !inode.is_dir() {
            return Err(libc::ENOTDIR);
        }
        out = next;
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(Canonical::Iris(out))
}

/// readahead on an Iris fd: nothing to read ahead into (no page cache), done at once.
#[no_mangle]
pub unsafe extern "C" fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t {
    if fdtable::is_iris(fd) {
        return 0;
    }
    // SAFETY: forwarding.
    unsafe { real::readahead(fd, off, n) }
}

/// mknod on an Iris path: a regular file (type 0 or `S_IFREG`) is made empty, as an exclusive
/// create makes it; special files (FIFOs, devices, sockets) are not served: EPERM, as Linux
/// answers on a file system without them (EEXIST first if the name is taken).
fn mknod_iris(start: u64, path: &[u8], mode: mode_t) -> c_int {
    op(|fs| {
        let c = cred();
        let kind = mode & libc::S_IFMT;
        if kind == 0 || kind == libc::S_IFREG {
            let perm = mode & !crate::ident::umask_now() & 0o7777;
            let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
            return fs.open(&c, start, path, flags, perm).map(|_| ());
        }
        match fs.resolve(&c, start, path, false) {
            Ok(_) => Err(Errno::EEXIST),
            Err(Errno::ENOENT) => {
                // The parent must be there (ENOENT for a missing one, as for any create).
                fs.resolve_parent(&c, start, path)?;
                Err(Errno::EPERM)
            }
            Err(e) => Err(e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => mknod_iris(start, &path, mode),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::mknodat(dirfd, path, mode, dev) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    // SAFETY: as mknodat from the working directory (glibc's mknod is that call).
    unsafe { mknodat(libc::AT_FDCWD, path, mode, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: as mknodat of a FIFO (glibc's mkfifoat is that call).
    unsafe { mknodat(dirfd, path, (mode & 0o7777) | libc::S_IFIFO, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: as mkfifoat from the working directory.
    unsafe { mkfifoat(libc::AT_FDCWD, path, mode) }
}

#[cfg(test)]
mod tests {
    use super::pieces_between;

    #[test]
    fn a_range_is_closed_in_the_pieces_between_the_numbers_skipped() {
        assert_eq!(pieces_between(0, 2, &[]), vec![(0, 2)]);
        assert_eq!(pieces_between(3, u32::MAX, &[]), vec![(3, u32::MAX)]);
        assert_eq!(
            pieces_between(3, u32::MAX, &[512, 513, 700]),
            vec![(3, 511), (514, 699), (701, u32::MAX)]
        );
        assert_eq!(pieces_between(512, 513, &[512, 513]), vec![]);
        assert_eq!(pieces_between(0, 10, &[0, 10]), vec![(1, 9)]);
        assert_eq!(pieces_between(5, 9, &[2, 12]), vec![(5, 9)]);
        assert_eq!(
            pieces_between(0, u32::MAX, &[u32::MAX]),
            vec![(0, u32::MAX - 1)]
        );
    }
}
