//! The real libc functions, found with `dlsym(RTLD_NEXT)` on first use. Code inside the
//! interposer calls these (never the interposed names) so it cannot recurse into itself.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Look up `sym` (NUL-terminated) once and cache it in `slot`.
pub(crate) fn resolve(slot: &AtomicUsize, sym: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `sym` is a NUL-terminated static string; RTLD_NEXT asks for the next definition
    // after this library, i.e. libc's.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, sym.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

/// Declare `pub unsafe fn name(args) -> ret` calling libc's `name`; `fail` is returned (with
/// errno ENOSYS) if libc lacks it.
macro_rules! real_fn {
    ($name:ident, $sym:literal, fn($($a:ident: $t:ty),* $(,)?) -> $r:ty, $fail:expr $(,)?) => {
        #[allow(clippy::missing_safety_doc)]
        pub unsafe fn $name($($a: $t),*) -> $r {
            static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let p = $crate::real::resolve(&SLOT, concat!($sym, "\0").as_bytes());
            if p == 0 {
                $crate::errno::set(libc::ENOSYS);
                return $fail;
            }
            // SAFETY: `p` is libc's definition of this symbol, whose C signature is the one
            // declared here.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            unsafe { f($($a),*) }
        }
    };
}

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t};

real_fn!(
    open,
    "open",
    fn(p: *const c_char, f: c_int, m: mode_t) -> c_int,
    -1
);
real_fn!(
    open64,
    "open64",
    fn(p: *const c_char, f: c_int, m: mode_t) -> c_int,
    -1
);
real_fn!(
    openat,
    "openat",
    fn(d: c_int, p: *const c_char, f: c_int, m: mode_t) -> c_int,
    -1
);
real_fn!(
    openat64,
    "openat64",
    fn(d: c_int, p: *const c_char, f: c_int, m: mode_t) -> c_int,
    -1
);
real_fn!(
    open_2,
    "__open_2",
    fn(p: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    open64_2,
    "__open64_2",
    fn(p: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    openat_2,
    "__openat_2",
    fn(d: c_int, p: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    openat64_2,
    "__openat64_2",
    fn(d: c_int, p: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(creat, "creat", fn(p: *const c_char, m: mode_t) -> c_int, -1);
real_fn!(
    creat64,
    "creat64",
    fn(p: *const c_char, m: mode_t) -> c_int,
    -1
);
real_fn!(close, "close", fn(fd: c_int) -> c_int, -1);
real_fn!(
    read,
    "read",
    fn(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    read_chk,
    "__read_chk",
    fn(fd: c_int, b: *mut c_void, n: size_t, bl: size_t) -> ssize_t,
    -1
);
real_fn!(
    write,
    "write",
    fn(fd: c_int, b: *const c_void, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    pread,
    "pread",
    fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t,
    -1
);
real_fn!(
    pread64,
    "pread64",
    fn(fd: c_int, b: *mut c_void, n: size_t, o: off64_t) -> ssize_t,
    -1
);
real_fn!(
    pread_chk,
    "__pread_chk",
    fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t, bl: size_t) -> ssize_t,
    -1
);
real_fn!(
    pread64_chk,
    "__pread64_chk",
    fn(fd: c_int, b: *mut c_void, n: size_t, o: off64_t, bl: size_t) -> ssize_t,
    -1
);
real_fn!(
    pwrite,
    "pwrite",
    fn(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t,
    -1
);
real_fn!(
    pwrite64,
    "pwrite64",
    fn(fd: c_int, b: *const c_void, n: size_t, o: off64_t) -> ssize_t,
    -1
);
real_fn!(
    readv,
    "readv",
    fn(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t,
    -1
);
real_fn!(
    writev,
    "writev",
    fn(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t,
    -1
);
real_fn!(
    preadv,
    "preadv",
    fn(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t,
    -1
);
real_fn!(
    pwritev,
    "pwritev",
    fn(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t,
    -1
);
real_fn!(
    lseek,
    "lseek",
    fn(fd: c_int, o: off_t, w: c_int) -> off_t,
    -1
);
real_fn!(
    lseek64,
    "lseek64",
    fn(fd: c_int, o: off64_t, w: c_int) -> off64_t,
    -1
);
real_fn!(
    fstat,
    "fstat",
    fn(fd: c_int, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    fstat64,
    "fstat64",
    fn(fd: c_int, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    stat,
    "stat",
    fn(p: *const c_char, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    stat64,
    "stat64",
    fn(p: *const c_char, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    lstat,
    "lstat",
    fn(p: *const c_char, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    lstat64,
    "lstat64",
    fn(p: *const c_char, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    fstatat,
    "fstatat",
    fn(d: c_int, p: *const c_char, s: *mut libc::stat, f: c_int) -> c_int,
    -1
);
real_fn!(
    fstatat64,
    "fstatat64",
    fn(d: c_int, p: *const c_char, s: *mut libc::stat64, f: c_int) -> c_int,
    -1
);
real_fn!(
    xstat,
    "__xstat",
    fn(v: c_int, p: *const c_char, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    xstat64,
    "__xstat64",
    fn(v: c_int, p: *const c_char, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    lxstat,
    "__lxstat",
    fn(v: c_int, p: *const c_char, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    lxstat64,
    "__lxstat64",
    fn(v: c_int, p: *const c_char, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    fxstat,
    "__fxstat",
    fn(v: c_int, fd: c_int, s: *mut libc::stat) -> c_int,
    -1
);
real_fn!(
    fxstat64,
    "__fxstat64",
    fn(v: c_int, fd: c_int, s: *mut libc::stat64) -> c_int,
    -1
);
real_fn!(
    fxstatat,
    "__fxstatat",
    fn(v: c_int, d: c_int, p: *const c_char, s: *mut libc::stat, f: c_int) -> c_int,
    -1
);
real_fn!(
    fxstatat64,
    "__fxstatat64",
    fn(v: c_int, d: c_int, p: *const c_char, s: *mut libc::stat64, f: c_int) -> c_int,
    -1
);
real_fn!(
    statx,
    "statx",
    fn(d: c_int, p: *const c_char, f: c_int, m: c_uint, s: *mut libc::statx) -> c_int,
    -1
);
real_fn!(
    access,
    "access",
    fn(p: *const c_char, m: c_int) -> c_int,
    -1
);
real_fn!(
    faccessat,
    "faccessat",
    fn(d: c_int, p: *const c_char, m: c_int, f: c_int) -> c_int,
    -1
);
real_fn!(unlink, "unlink", fn(p: *const c_char) -> c_int, -1);
real_fn!(
    mknodat,
    "mknodat",
    fn(d: c_int, p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int,
    -1
);
real_fn!(
    unlinkat,
    "unlinkat",
    fn(d: c_int, p: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(mkdir, "mkdir", fn(p: *const c_char, m: mode_t) -> c_int, -1);
real_fn!(
    mkdirat,
    "mkdirat",
    fn(d: c_int, p: *const c_char, m: mode_t) -> c_int,
    -1
);
real_fn!(rmdir, "rmdir", fn(p: *const c_char) -> c_int, -1);
real_fn!(
    rename,
    "rename",
    fn(a: *const c_char, b: *const c_char) -> c_int,
    -1
);
real_fn!(
    renameat,
    "renameat",
    fn(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> c_int,
    -1
);
real_fn!(
    renameat2,
    "renameat2",
    fn(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_uint) -> c_int,
    -1
);
real_fn!(ftruncate, "ftruncate", fn(fd: c_int, l: off_t) -> c_int, -1);
real_fn!(
    ftruncate64,
    "ftruncate64",
    fn(fd: c_int, l: off64_t) -> c_int,
    -1
);
real_fn!(
    truncate,
    "truncate",
    fn(p: *const c_char, l: off_t) -> c_int,
    -1
);
real_fn!(
    truncate64,
    "truncate64",
    fn(p: *const c_char, l: off64_t) -> c_int,
    -1
);
real_fn!(fsync, "fsync", fn(fd: c_int) -> c_int, -1);
real_fn!(fdatasync, "fdatasync", fn(fd: c_int) -> c_int, -1);
real_fn!(
    fcntl,
    "fcntl",
    fn(fd: c_int, cmd: c_int, arg: usize) -> c_int,
    -1
);
real_fn!(
    fcntl64,
    "fcntl64",
    fn(fd: c_int, cmd: c_int, arg: usize) -> c_int,
    -1
);
real_fn!(dup, "dup", fn(fd: c_int) -> c_int, -1);
real_fn!(dup2, "dup2", fn(a: c_int, b: c_int) -> c_int, -1);
real_fn!(dup3, "dup3", fn(a: c_int, b: c_int, f: c_int) -> c_int, -1);
real_fn!(
    mmap,
    "mmap",
    fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void,
    libc::MAP_FAILED
);
real_fn!(
    mmap64,
    "mmap64",
    fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off64_t) -> *mut c_void,
    libc::MAP_FAILED
);
real_fn!(
    posix_fadvise,
    "posix_fadvise",
    fn(fd: c_int, o: off_t, l: off_t, a: c_int) -> c_int,
    libc::ENOSYS
);
real_fn!(
    posix_fadvise64,
    "posix_fadvise64",
    fn(fd: c_int, o: off64_t, l: off64_t, a: c_int) -> c_int,
    libc::ENOSYS
);
real_fn!(
    fallocate,
    "fallocate",
    fn(fd: c_int, m: c_int, o: off_t, l: off_t) -> c_int,
    -1
);
real_fn!(
    fallocate64,
    "fallocate64",
    fn(fd: c_int, m: c_int, o: off64_t, l: off64_t) -> c_int,
    -1
);
real_fn!(
    posix_fallocate,
    "posix_fallocate",
    fn(fd: c_int, o: off_t, l: off_t) -> c_int,
    libc::ENOSYS
);
real_fn!(
    posix_fallocate64,
    "posix_fallocate64",
    fn(fd: c_int, o: off64_t, l: off64_t) -> c_int,
    libc::ENOSYS
);
real_fn!(chmod, "chmod", fn(p: *const c_char, m: mode_t) -> c_int, -1);
real_fn!(fchmod, "fchmod", fn(fd: c_int, m: mode_t) -> c_int, -1);
real_fn!(
    chown,
    "chown",
    fn(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int,
    -1
);
real_fn!(
    lchown,
    "lchown",
    fn(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int,
    -1
);
real_fn!(
    fchown,
    "fchown",
    fn(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int,
    -1
);
real_fn!(
    symlink,
    "symlink",
    fn(t: *const c_char, p: *const c_char) -> c_int,
    -1
);
real_fn!(
    readlink,
    "readlink",
    fn(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    link,
    "link",
    fn(a: *const c_char, b: *const c_char) -> c_int,
    -1
);
real_fn!(
    utimensat,
    "utimensat",
    fn(d: c_int, p: *const c_char, t: *const libc::timespec, f: c_int) -> c_int,
    -1
);
real_fn!(
    futimens,
    "futimens",
    fn(fd: c_int, t: *const libc::timespec) -> c_int,
    -1
);
real_fn!(
    euidaccess,
    "euidaccess",
    fn(p: *const c_char, m: c_int) -> c_int,
    -1
);
real_fn!(
    eaccess,
    "eaccess",
    fn(p: *const c_char, m: c_int) -> c_int,
    -1
);
real_fn!(
    copy_file_range,
    "copy_file_range",
    fn(a: c_int, ao: *mut off64_t, b: c_int, bo: *mut off64_t, n: size_t, f: c_uint) -> ssize_t,
    -1
);
real_fn!(
    sendfile,
    "sendfile",
    fn(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    sendfile64,
    "sendfile64",
    fn(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t,
    -1
);
real_fn!(chdir, "chdir", fn(p: *const c_char) -> c_int, -1);
real_fn!(fchdir, "fchdir", fn(fd: c_int) -> c_int, -1);
real_fn!(
    getcwd,
    "getcwd",
    fn(b: *mut c_char, n: size_t) -> *mut c_char,
    std::ptr::null_mut()
);
real_fn!(
    getxattr,
    "getxattr",
    fn(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    lgetxattr,
    "lgetxattr",
    fn(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    fgetxattr,
    "fgetxattr",
    fn(fd: c_int, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    setxattr,
    "setxattr",
    fn(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int,
    -1
);
real_fn!(
    lsetxattr,
    "lsetxattr",
    fn(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int,
    -1
);
real_fn!(
    fsetxattr,
    "fsetxattr",
    fn(fd: c_int, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int,
    -1
);
real_fn!(
    listxattr,
    "listxattr",
    fn(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    llistxattr,
    "llistxattr",
    fn(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    flistxattr,
    "flistxattr",
    fn(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t,
    -1
);
real_fn!(
    removexattr,
    "removexattr",
    fn(p: *const c_char, n: *const c_char) -> c_int,
    -1
);
real_fn!(
    lremovexattr,
    "lremovexattr",
    fn(p: *const c_char, n: *const c_char) -> c_int,
    -1
);
real_fn!(
    fremovexattr,
    "fremovexattr",
    fn(fd: c_int, n: *const c_char) -> c_int,
    -1
);
real_fn!(
    fchmodat,
    "fchmodat",
    fn(d: c_int, p: *const c_char, m: mode_t, f: c_int) -> c_int,
    -1
);
real_fn!(
    fchownat,
    "fchownat",
    fn(d: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, f: c_int) -> c_int,
    -1
);
real_fn!(
    linkat,
    "linkat",
    fn(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    symlinkat,
    "symlinkat",
    fn(t: *const c_char, d: c_int, p: *const c_char) -> c_int,
    -1
);
real_fn!(
    readlinkat,
    "readlinkat",
    fn(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    utimes,
    "utimes",
    fn(p: *const c_char, t: *const libc::timeval) -> c_int,
    -1
);
real_fn!(
    lutimes,
    "lutimes",
    fn(p: *const c_char, t: *const libc::timeval) -> c_int,
    -1
);
real_fn!(
    futimes,
    "futimes",
    fn(fd: c_int, t: *const libc::timeval) -> c_int,
    -1
);
real_fn!(
    utime,
    "utime",
    fn(p: *const c_char, t: *const libc::utimbuf) -> c_int,
    -1
);
real_fn!(mkstemp, "mkstemp", fn(t: *mut c_char) -> c_int, -1);
real_fn!(
    tmpfile,
    "tmpfile",
    fn() -> *mut libc::FILE,
    std::ptr::null_mut()
);
real_fn!(
    tmpfile64,
    "tmpfile64",
    fn() -> *mut libc::FILE,
    std::ptr::null_mut()
);
real_fn!(mkstemp64, "mkstemp64", fn(t: *mut c_char) -> c_int, -1);
real_fn!(
    mkostemp,
    "mkostemp",
    fn(t: *mut c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    mkostemp64,
    "mkostemp64",
    fn(t: *mut c_char, f: c_int) -> c_int,
    -1
);
real_fn!(
    mkstemps,
    "mkstemps",
    fn(t: *mut c_char, s: c_int) -> c_int,
    -1
);
real_fn!(
    mkstemps64,
    "mkstemps64",
    fn(t: *mut c_char, s: c_int) -> c_int,
    -1
);
real_fn!(
    mkostemps,
    "mkostemps",
    fn(t: *mut c_char, s: c_int, f: c_int) -> c_int,
    -1
);
real_fn!(
    mkostemps64,
    "mkostemps64",
    fn(t: *mut c_char, s: c_int, f: c_int) -> c_int,
    -1
);
real_fn!(
    mkdtemp,
    "mkdtemp",
    fn(t: *mut c_char) -> *mut c_char,
    std::ptr::null_mut()
);
real_fn!(
    statfs,
    "statfs",
    fn(p: *const c_char, b: *mut libc::statfs) -> c_int,
    -1
);
real_fn!(
    fstatfs,
    "fstatfs",
    fn(fd: c_int, b: *mut libc::statfs) -> c_int,
    -1
);
real_fn!(
    statvfs,
    "statvfs",
    fn(p: *const c_char, b: *mut libc::statvfs) -> c_int,
    -1
);
real_fn!(
    fstatvfs,
    "fstatvfs",
    fn(fd: c_int, b: *mut libc::statvfs) -> c_int,
    -1
);
real_fn!(syncfs, "syncfs", fn(fd: c_int) -> c_int, -1);
real_fn!(
    sync_file_range,
    "sync_file_range",
    fn(fd: c_int, o: off64_t, n: off64_t, f: c_uint) -> c_int,
    -1
);
real_fn!(flock, "flock", fn(fd: c_int, op: c_int) -> c_int, -1);
real_fn!(
    lockf,
    "lockf",
    fn(fd: c_int, cmd: c_int, len: off_t) -> c_int,
    -1
);
real_fn!(
    lockf64,
    "lockf64",
    fn(fd: c_int, cmd: c_int, len: off64_t) -> c_int,
    -1
);
real_fn!(
    close_range,
    "close_range",
    fn(a: c_uint, b: c_uint, f: c_int) -> c_int,
    -1
);
real_fn!(
    realpath,
    "realpath",
    fn(p: *const c_char, r: *mut c_char) -> *mut c_char,
    std::ptr::null_mut()
);
real_fn!(
    execve,
    "execve",
    fn(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int,
    -1
);
real_fn!(
    execvpe,
    "execvpe",
    fn(p: *const c_char, a: *const *const c_char, e: *const *const c_char) -> c_int,
    -1
);
real_fn!(
    fexecve,
    "fexecve",
    fn(fd: c_int, a: *const *const c_char, e: *const *const c_char) -> c_int,
    -1
);
real_fn!(
    posix_spawn,
    "posix_spawn",
    fn(
        pid: *mut libc::pid_t,
        p: *const c_char,
        fa: *const libc::posix_spawn_file_actions_t,
        at: *const libc::posix_spawnattr_t,
        a: *const *mut c_char,
        e: *const *mut c_char,
    ) -> c_int,
    libc::ENOSYS
);
real_fn!(
    posix_spawnp,
    "posix_spawnp",
    fn(
        pid: *mut libc::pid_t,
        p: *const c_char,
        fa: *const libc::posix_spawn_file_actions_t,
        at: *const libc::posix_spawnattr_t,
        a: *const *mut c_char,
        e: *const *mut c_char,
    ) -> c_int,
    libc::ENOSYS
);
real_fn!(
    preadv2,
    "preadv2",
    fn(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t, f: c_int) -> ssize_t,
    -1
);
real_fn!(
    pwritev2,
    "pwritev2",
    fn(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t, f: c_int) -> ssize_t,
    -1
);
/// libc's sync (no result to fail with, so not through `real_fn!`).
pub unsafe fn sync() {
    static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let p = resolve(&SLOT, b"sync\0");
    if p != 0 {
        // SAFETY: libc's sync takes no arguments and returns nothing.
        let f: unsafe extern "C" fn() = unsafe { std::mem::transmute(p) };
        // SAFETY: as above.
        unsafe { f() }
    }
}
real_fn!(
    sigaction,
    "sigaction",
    fn(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int,
    -1
);
real_fn!(
    munmap,
    "munmap",
    fn(addr: *mut c_void, len: size_t) -> c_int,
    -1
);
real_fn!(
    msync,
    "msync",
    fn(addr: *mut c_void, len: size_t, flags: c_int) -> c_int,
    -1
);
real_fn!(
    mremap,
    "mremap",
    fn(
        old: *mut c_void,
        old_len: size_t,
        new_len: size_t,
        flags: c_int,
        new_addr: *mut c_void,
    ) -> *mut c_void,
    libc::MAP_FAILED
);
real_fn!(
    syscall,
    "syscall",
    fn(
        n: libc::c_long,
        a1: libc::c_long,
        a2: libc::c_long,
        a3: libc::c_long,
        a4: libc::c_long,
        a5: libc::c_long,
        a6: libc::c_long,
    ) -> libc::c_long,
    -1
);
real_fn!(
    real_poll,
    "poll",
    fn(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int,
    -1
);
real_fn!(
    real_ppoll,
    "ppoll",
    fn(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        t: *const libc::timespec,
        mask: *const libc::sigset_t,
    ) -> c_int,
    -1
);
real_fn!(
    real_epoll_ctl,
    "epoll_ctl",
    fn(ep: c_int, op: c_int, fd: c_int, ev: *mut libc::epoll_event) -> c_int,
    -1
);
real_fn!(
    real_ioctl,
    "ioctl",
    fn(fd: c_int, req: libc::c_ulong, arg: *mut c_void) -> c_int,
    -1
);
real_fn!(fork, "fork", fn() -> libc::pid_t, -1);
real_fn!(fork_bare, "_Fork", fn() -> libc::pid_t, -1);
real_fn!(
    clone,
    "clone",
    fn(
        f: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
        stack: *mut c_void,
        flags: c_int,
        arg: *mut c_void,
        ptid: *mut libc::pid_t,
        tls: *mut c_void,
        ctid: *mut libc::pid_t,
    ) -> c_int,
    -1
);
real_fn!(system, "system", fn(command: *const c_char) -> c_int, -1);
real_fn!(
    popen,
    "popen",
    fn(command: *const c_char, mode: *const c_char) -> *mut libc::FILE,
    std::ptr::null_mut()
);
real_fn!(
    wordexp,
    "wordexp",
    fn(words: *const c_char, out: *mut c_void, flags: c_int) -> c_int,
    libc::ENOSYS
);
real_fn!(
    readahead,
    "readahead",
    fn(fd: c_int, off: off64_t, n: size_t) -> ssize_t,
    -1
);
real_fn!(
    recvmsg,
    "recvmsg",
    fn(sock: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize,
    -1
);
real_fn!(
    recvmmsg,
    "recvmmsg",
    fn(
        sock: c_int,
        msgs: *mut libc::mmsghdr,
        n: c_uint,
        flags: c_int,
        timeout: *mut libc::timespec,
    ) -> c_int,
    -1
);
real_fn!(isatty, "isatty", fn(fd: c_int) -> c_int, 0);
real_fn!(
    tcgetattr,
    "tcgetattr",
    fn(fd: c_int, t: *mut libc::termios) -> c_int,
    -1
);
real_fn!(real_aio_read, "aio_read", fn(cb: *mut c_void) -> c_int, -1);
real_fn!(
    real_aio_write,
    "aio_write",
    fn(cb: *mut c_void) -> c_int,
    -1
);
real_fn!(
    real_aio_fsync,
    "aio_fsync",
    fn(op: c_int, cb: *mut c_void) -> c_int,
    -1
);
real_fn!(
    real_lio_listio,
    "lio_listio",
    fn(mode: c_int, list: *const *mut c_void, n: c_int, sig: *mut libc::sigevent) -> c_int,
    -1
);
real_fn!(
    splice,
    "splice",
    fn(
        fd_in: c_int,
        off_in: *mut libc::loff_t,
        fd_out: c_int,
        off_out: *mut libc::loff_t,
        len: size_t,
        flags: c_uint,
    ) -> ssize_t,
    -1
);
real_fn!(
    tee,
    "tee",
    fn(fd_in: c_int, fd_out: c_int, len: size_t, flags: c_uint) -> ssize_t,
    -1
);
real_fn!(
    posix_spawn_file_actions_addopen,
    "posix_spawn_file_actions_addopen",
    fn(
        actions: *mut libc::posix_spawn_file_actions_t,
        fd: c_int,
        path: *const c_char,
        oflag: c_int,
        mode: mode_t,
    ) -> c_int,
    libc::ENOSYS
);
real_fn!(
    posix_spawn_file_actions_adddup2,
    "posix_spawn_file_actions_adddup2",
    fn(actions: *mut libc::posix_spawn_file_actions_t, fd: c_int, new: c_int) -> c_int,
    libc::ENOSYS
);
real_fn!(
    posix_spawn_file_actions_destroy,
    "posix_spawn_file_actions_destroy",
    fn(actions: *mut libc::posix_spawn_file_actions_t) -> c_int,
    libc::ENOSYS
);
real_fn!(
    sendmsg,
    "sendmsg",
    fn(sock: c_int, msg: *const libc::msghdr, flags: c_int) -> isize,
    -1
);
real_fn!(
    sendmmsg,
    "sendmmsg",
    fn(sock: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int,
    -1
);

real_fn!(umask, "umask", fn(mask: mode_t) -> mode_t, 0);
real_fn!(setuid, "setuid", fn(uid: libc::uid_t) -> c_int, -1);
real_fn!(seteuid, "seteuid", fn(uid: libc::uid_t) -> c_int, -1);
real_fn!(
    setreuid,
    "setreuid",
    fn(r: libc::uid_t, e: libc::uid_t) -> c_int,
    -1
);
real_fn!(
    setresuid,
    "setresuid",
    fn(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int,
    -1
);
real_fn!(setgid, "setgid", fn(gid: libc::gid_t) -> c_int, -1);
real_fn!(setegid, "setegid", fn(gid: libc::gid_t) -> c_int, -1);
real_fn!(
    setregid,
    "setregid",
    fn(r: libc::gid_t, e: libc::gid_t) -> c_int,
    -1
);
real_fn!(
    setresgid,
    "setresgid",
    fn(r: libc::gid_t, e: libc::gid_t, s: libc::gid_t) -> c_int,
    -1
);
real_fn!(
    setgroups,
    "setgroups",
    fn(n: size_t, groups: *const libc::gid_t) -> c_int,
    -1
);
real_fn!(
    initgroups,
    "initgroups",
    fn(user: *const c_char, group: libc::gid_t) -> c_int,
    -1
);
real_fn!(setfsuid, "setfsuid", fn(uid: libc::uid_t) -> c_int, -1);
real_fn!(setfsgid, "setfsgid", fn(gid: libc::gid_t) -> c_int, -1);
real_fn!(unshare, "unshare", fn(flags: c_int) -> c_int, -1);
real_fn!(setns, "setns", fn(fd: c_int, kind: c_int) -> c_int, -1);
real_fn!(
    pathconf,
    "pathconf",
    fn(p: *const c_char, n: c_int) -> libc::c_long,
    -1
);
real_fn!(
    glob,
    "glob",
    fn(
        p: *const c_char,
        f: c_int,
        e: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
        g: *mut crate::libc_paths::GlobT,
    ) -> c_int,
    libc::GLOB_NOSPACE
);
real_fn!(
    glob64,
    "glob64",
    fn(
        p: *const c_char,
        f: c_int,
        e: Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>,
        g: *mut crate::libc_paths::GlobT,
    ) -> c_int,
    libc::GLOB_NOSPACE
);
real_fn!(
    nftw,
    "nftw",
    fn(p: *const c_char, f: crate::libc_paths::NftwFn, n: c_int, fl: c_int) -> c_int,
    -1
);
real_fn!(
    nftw64,
    "nftw64",
    fn(p: *const c_char, f: crate::libc_paths::NftwFn, n: c_int, fl: c_int) -> c_int,
    -1
);
real_fn!(
    ftw,
    "ftw",
    fn(p: *const c_char, f: crate::libc_paths::FtwFn, n: c_int) -> c_int,
    -1
);
real_fn!(
    ftw64,
    "ftw64",
    fn(p: *const c_char, f: crate::libc_paths::FtwFn, n: c_int) -> c_int,
    -1
);
real_fn!(
    dlopen,
    "dlopen",
    fn(p: *const c_char, f: c_int) -> *mut c_void,
    std::ptr::null_mut()
);
real_fn!(
    posix_spawn_file_actions_addchdir_np,
    "posix_spawn_file_actions_addchdir_np",
    fn(a: *mut libc::posix_spawn_file_actions_t, p: *const c_char) -> c_int,
    libc::ENOSYS
);
real_fn!(
    bind,
    "bind",
    fn(fd: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int,
    -1
);
real_fn!(
    connect,
    "connect",
    fn(fd: c_int, a: *const libc::sockaddr, l: libc::socklen_t) -> c_int,
    -1
);
real_fn!(
    posix_spawn_file_actions_addfchdir_np,
    "posix_spawn_file_actions_addfchdir_np",
    fn(a: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int,
    libc::ENOSYS
);
