//! libc's own functions, found with `dlsym(RTLD_NEXT)` on first use and cached. The shim calls
//! these, never its own exported names, so it cannot recurse into itself. Stat buffers are passed
//! as untyped pointers: the shim never looks inside them.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t};

/// Look up `sym` (NUL-terminated) once and cache it in `slot`; 0 if libc lacks it.
pub(crate) fn resolve(slot: &AtomicUsize, sym: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    debug_assert_eq!(sym.last(), Some(&0));
    // SAFETY: `sym` is a NUL-terminated static string; RTLD_NEXT asks for the next definition
    // after this library, i.e. libc's.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, sym.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

/// Declare `pub unsafe fn name(args) -> ret` calling libc's `sym`; `fail` is returned (with
/// errno ENOSYS) if libc lacks it.
macro_rules! real_fn {
    ($name:ident, $sym:literal, fn($($a:ident: $t:ty),*) -> $r:ty, $fail:expr) => {
        #[allow(clippy::missing_safety_doc)]
        pub(crate) unsafe fn $name($($a: $t),*) -> $r {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = resolve(&SLOT, concat!($sym, "\0").as_bytes());
            if p == 0 {
                crate::errno::set(libc::ENOSYS);
                return $fail;
            }
            // SAFETY: `p` is libc's definition of this symbol, whose C signature is the one
            // declared here.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller passes arguments valid for libc's function.
            unsafe { f($($a),*) }
        }
    };
}

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
real_fn!(close, "close", fn(fd: c_int) -> c_int, -1);
real_fn!(
    read,
    "read",
    fn(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t,
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
    stat,
    "stat",
    fn(p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    stat64,
    "stat64",
    fn(p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    lstat,
    "lstat",
    fn(p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    lstat64,
    "lstat64",
    fn(p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    xstat,
    "__xstat",
    fn(v: c_int, p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    xstat64,
    "__xstat64",
    fn(v: c_int, p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    lxstat,
    "__lxstat",
    fn(v: c_int, p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    lxstat64,
    "__lxstat64",
    fn(v: c_int, p: *const c_char, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    statx,
    "statx",
    fn(d: c_int, p: *const c_char, f: c_int, m: c_uint, s: *mut c_void) -> c_int,
    -1
);
real_fn!(
    access,
    "access",
    fn(p: *const c_char, m: c_int) -> c_int,
    -1
);
real_fn!(unlink, "unlink", fn(p: *const c_char) -> c_int, -1);
real_fn!(mkdir, "mkdir", fn(p: *const c_char, m: mode_t) -> c_int, -1);
real_fn!(rmdir, "rmdir", fn(p: *const c_char) -> c_int, -1);
real_fn!(fsync, "fsync", fn(fd: c_int) -> c_int, -1);
real_fn!(fdatasync, "fdatasync", fn(fd: c_int) -> c_int, -1);
real_fn!(ftruncate, "ftruncate", fn(fd: c_int, l: off_t) -> c_int, -1);
real_fn!(
    ftruncate64,
    "ftruncate64",
    fn(fd: c_int, l: off64_t) -> c_int,
    -1
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
