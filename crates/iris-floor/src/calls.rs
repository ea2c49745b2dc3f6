//! The exported C entry points. Each checks whether its path is under the prefix or its fd is in
//! the table; if not, it calls libc's own function untouched. `open` and `openat` are
//! C-variadic; stable Rust cannot define variadic functions, so they take the mode as a fixed
//! third (fourth) argument, which the x86-64 and AArch64 Linux ABIs pass in the same register
//! either way (garbage when the caller passed none, and then unused: only O_CREAT and O_TMPFILE
//! read it).
//!
//! fd calls that move no data (fstat, fcntl, statx on an fd, mmap, dup) are not interposed: the
//! fd *is* the backing file, so the kernel answers them exactly.
#![allow(clippy::missing_safety_doc)]

use std::sync::atomic::{fence, Ordering};

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::copy::{read_at, read_next, seek, write_at, write_next};
use crate::errno::fail;
use crate::fdtable;
use crate::mapping::{open_served, resize, unmap};
use crate::path::{route, Route, PATH_BYTES};
use crate::real;

macro_rules! open_fn {
    ($name:ident, $real:ident) => {
        /// libc's open, with paths under the prefix opened in the backing directory and served.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let mut backing = [0u8; PATH_BYTES];
            // SAFETY: `path` comes from the caller as for libc's open.
            match unsafe { route(path, &mut backing) } {
                // SAFETY: forwarding the caller's arguments to libc.
                Route::Host => unsafe { real::$real(path, flags, mode) },
                Route::TooLong => fail(libc::ENAMETOOLONG),
                Route::Floor => open_served(flags, |f| {
                    // SAFETY: `backing` is a NUL-terminated path.
                    unsafe { real::$real(backing.as_ptr().cast(), f, mode) }
                }),
            }
        }
    };
}
open_fn!(open, open);
open_fn!(open64, open64);

macro_rules! open2_fn {
    ($name:ident, $real:ident) => {
        /// Fortified open without a mode (flags without O_CREAT), routed as open is.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let mut backing = [0u8; PATH_BYTES];
            // SAFETY: as for open.
            match unsafe { route(path, &mut backing) } {
                // SAFETY: forwarding.
                Route::Host => unsafe { real::$real(path, flags) },
                Route::TooLong => fail(libc::ENAMETOOLONG),
                Route::Floor => open_served(flags, |f| {
                    // SAFETY: `backing` is a NUL-terminated path.
                    unsafe { real::$real(backing.as_ptr().cast(), f) }
                }),
            }
        }
    };
}
open2_fn!(__open_2, open_2);
open2_fn!(__open64_2, open64_2);

macro_rules! openat_fn {
    ($name:ident, $real:ident) => {
        /// libc's openat; an absolute path under the prefix is routed as open routes it.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            flags: c_int,
            mode: mode_t,
        ) -> c_int {
            let mut backing = [0u8; PATH_BYTES];
            // SAFETY: as for open (only absolute paths match the prefix, so `dirfd` is moot).
            match unsafe { route(path, &mut backing) } {
                // SAFETY: forwarding.
                Route::Host => unsafe { real::$real(dirfd, path, flags, mode) },
                Route::TooLong => fail(libc::ENAMETOOLONG),
                Route::Floor => open_served(flags, |f| {
                    // SAFETY: `backing` is a NUL-terminated absolute path.
                    unsafe { real::$real(dirfd, backing.as_ptr().cast(), f, mode) }
                }),
            }
        }
    };
}
openat_fn!(openat, openat);
openat_fn!(openat64, openat64);

/// libc's close; a served fd's mapping is released first.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(base) = fdtable::remove(fd) {
        unmap(base);
    }
    // SAFETY: closing the caller's fd.
    unsafe { real::close(fd) }
}

/// libc's read; a served fd copies from the mapping at its offset.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match fdtable::get(fd) {
        // SAFETY: `buf` holds `n` bytes (read's contract).
        Some(file) => unsafe { read_next(file, fd, buf, n) },
        // SAFETY: forwarding.
        None => unsafe { real::read(fd, buf, n) },
    }
}

/// libc's write; a served fd copies into the mapping at its offset.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match fdtable::get(fd) {
        // SAFETY: `buf` holds `n` bytes (write's contract).
        Some(file) => unsafe { write_next(file, fd, buf, n) },
        // SAFETY: forwarding.
        None => unsafe { real::write(fd, buf, n) },
    }
}

macro_rules! pread_fn {
    ($name:ident, $real:ident, $off:ty) => {
        /// libc's pread; a served fd is one memcpy from the mapping.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: $off,
        ) -> ssize_t {
            match fdtable::get(fd) {
                // SAFETY: `buf` holds `n` bytes (pread's contract).
                Some(file) => unsafe { read_at(file, fd, buf, n, off64_t::from(off)) },
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, buf, n, off) },
            }
        }
    };
}
pread_fn!(pread, pread, off_t);
pread_fn!(pread64, pread64, off64_t);

macro_rules! pwrite_fn {
    ($name:ident, $real:ident, $off:ty) => {
        /// libc's pwrite; a served fd is one memcpy into the mapping.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *const c_void,
            n: size_t,
            off: $off,
        ) -> ssize_t {
            match fdtable::get(fd) {
                // SAFETY: `buf` holds `n` bytes (pwrite's contract).
                Some(file) => unsafe { write_at(file, fd, buf, n, off64_t::from(off)) },
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, buf, n, off) },
            }
        }
    };
}
pwrite_fn!(pwrite, pwrite, off_t);
pwrite_fn!(pwrite64, pwrite64, off64_t);

macro_rules! lseek_fn {
    ($name:ident, $real:ident, $off:ty) => {
        /// libc's lseek; a served fd's offset lives in user space.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: $off, whence: c_int) -> $off {
            match fdtable::get(fd) {
                Some(file) => seek(file, fd, off64_t::from(off), whence) as $off,
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, off, whence) },
            }
        }
    };
}
lseek_fn!(lseek, lseek, off_t);
lseek_fn!(lseek64, lseek64, off64_t);

macro_rules! sync_fn {
    ($name:ident, $real:ident) => {
        /// libc's fsync/fdatasync. A served file's medium is memory mapped shared: its stores are
        /// already where every reader looks, so durability here is a store fence, no system call.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int) -> c_int {
            if fdtable::get(fd).is_some() {
                fence(Ordering::SeqCst);
                return 0;
            }
            // SAFETY: forwarding.
            unsafe { real::$real(fd) }
        }
    };
}
sync_fn!(fsync, fsync);
sync_fn!(fdatasync, fdatasync);

macro_rules! resize_fn {
    ($name:ident, $real:ident, fn($($a:ident: $t:ty),*)) => {
        /// libc's size-changing call; for a served fd the table's size follows the file's.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> c_int {
            match fdtable::get(fd) {
                // SAFETY: forwarding to libc under the resize lock.
                Some(file) => resize(file, fd, || unsafe { real::$real(fd, $($a),*) }),
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, $($a),*) },
            }
        }
    };
}
resize_fn!(ftruncate, ftruncate, fn(len: off_t));
resize_fn!(ftruncate64, ftruncate64, fn(len: off64_t));
resize_fn!(
    fallocate,
    fallocate,
    fn(mode: c_int, off: off_t, len: off_t)
);
resize_fn!(
    fallocate64,
    fallocate64,
    fn(mode: c_int, off: off64_t, len: off64_t)
);
resize_fn!(posix_fallocate, posix_fallocate, fn(off: off_t, len: off_t));
resize_fn!(
    posix_fallocate64,
    posix_fallocate64,
    fn(off: off64_t, len: off64_t)
);

macro_rules! fadvise_fn {
    ($name:ident, $real:ident, $off:ty) => {
        /// libc's posix_fadvise; a served file has no cache apart from its mapping: nothing to do.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: $off, len: $off, advice: c_int) -> c_int {
            if fdtable::get(fd).is_some() {
                return 0;
            }
            // SAFETY: forwarding.
            unsafe { real::$real(fd, off, len, advice) }
        }
    };
}
fadvise_fn!(posix_fadvise, posix_fadvise, off_t);
fadvise_fn!(posix_fadvise64, posix_fadvise64, off64_t);

/// Declare an exported path call whose path (first argument after `pre`) is rewritten to the
/// backing path when under the prefix.
macro_rules! path_fn {
    ($name:ident, $real:ident, ($($pre:ident: $pt:ty),*), ($($post:ident: $qt:ty),*)) => {
        /// libc's function of the same name, with a path under the prefix rewritten to its
        /// backing path.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* path: *const c_char, $($post: $qt),*) -> c_int {
            let mut backing = [0u8; PATH_BYTES];
            // SAFETY: `path` comes from the caller as for libc's function.
            match unsafe { route(path, &mut backing) } {
                // SAFETY: forwarding.
                Route::Host => unsafe { real::$real($($pre,)* path, $($post),*) },
                Route::TooLong => fail(libc::ENAMETOOLONG),
                // SAFETY: `backing` is a NUL-terminated path.
                Route::Floor => unsafe { real::$real($($pre,)* backing.as_ptr().cast(), $($post),*) },
            }
        }
    };
}
path_fn!(stat, stat, (), (buf: *mut c_void));
path_fn!(stat64, stat64, (), (buf: *mut c_void));
path_fn!(lstat, lstat, (), (buf: *mut c_void));
path_fn!(lstat64, lstat64, (), (buf: *mut c_void));
path_fn!(__xstat, xstat, (ver: c_int), (buf: *mut c_void));
path_fn!(__xstat64, xstat64, (ver: c_int), (buf: *mut c_void));
path_fn!(__lxstat, lxstat, (ver: c_int), (buf: *mut c_void));
path_fn!(__lxstat64, lxstat64, (ver: c_int), (buf: *mut c_void));
path_fn!(statx, statx, (dirfd: c_int), (flags: c_int, mask: c_uint, buf: *mut c_void));
path_fn!(access, access, (), (mode: c_int));
path_fn!(unlink, unlink, (), ());
path_fn!(mkdir, mkdir, (), (mode: mode_t));
path_fn!(rmdir, rmdir, (), ());
