//! The interposed libc entry points. Each checks whether its fd or path is Iris's; if not, it
//! calls libc's own function untouched. `open`, `openat` and `fcntl` are C-variadic; Rust 1.95
//! cannot define variadic functions, so they take the optional argument as a fixed one, which the
//! x86-64 and AArch64 Linux ABIs pass in the same register either way.
#![allow(clippy::missing_safety_doc)]

use std::sync::Arc;

use iris_fs::{Errno, Fs, Inode};
use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::description::Desc;
use crate::errno::{fail, set};
use crate::fdtable::{self, OpenFile};
use crate::real;
use crate::report::{count, Call};
use crate::route::{target, target_at, Target};
use crate::state::{self, cred, Busy};

fn fs_or_eio() -> Result<&'static Fs, Errno> {
    state::fs().ok_or(Errno::EIO)
}

use crate::ident::umask_now;

/// Open `path` in Iris (from directory inode `start`, which is `dirfd`'s, or the working
/// directory's for AT_FDCWD, or the root's for an absolute path) and give it a placeholder fd.
fn iris_open(dirfd: c_int, start: u64, path: &[u8], flags: c_int, mode: mode_t) -> c_int {
    count(Call::Open);
    let _b = Busy::enter();
    let fs = match fs_or_eio() {
        Ok(f) => f,
        Err(e) => return fail(e.0),
    };
    let opened = if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        let c = cred();
        let acc = flags & libc::O_ACCMODE;
        if acc != libc::O_WRONLY && acc != libc::O_RDWR {
            return fail(libc::EINVAL);
        }
        fs.resolve(&c, start, path, true)
            .and_then(|dir| fs.create_unnamed(&c, dir, mode & !umask_now() & 0o7777))
    } else {
        // The mask matters only to a file this open may create (two system calls).
        let masked = if flags & libc::O_CREAT != 0 {
            mode & !umask_now() & 0o7777
        } else {
            0
        };
        fs.open(&cred(), start, path, flags, masked)
    };
    let inode = match opened {
        Ok(i) => i,
        Err(Errno::EXDEV) => {
            // Through a symlink out of Iris: the host file (the kernel applies the umask).
            let follow = flags & libc::O_NOFOLLOW == 0;
            return match crate::route::left_for_host(start, path, follow) {
                // SAFETY: a NUL-terminated path of our own, the caller's flags and mode.
                Some(host) => host_open(|| unsafe { real::open(host.as_ptr(), flags, mode) }),
                None => fail(libc::EXDEV),
            };
        }
        Err(e) => return fail(e.0),
    };
    // A directory's path is normalised (fchdir makes it the working directory); a file's is
    // kept as given, `..` and all, and resolved when it is read (see `fd_link_text`): `..`
    // after a symlink is not the component before it.
    // (An O_TMPFILE open names the directory the file is made in.)
    let names_dir = inode.is_dir() || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    let normal = |p: Vec<u8>| {
        if names_dir {
            crate::cwd::absolute(&p)
        } else {
            Some(p)
        }
    };
    let abs = if path.first() == Some(&b'/') {
        if names_dir {
            Some(crate::cwd::under_first_prefix(path))
        } else {
            Some([crate::prefix::first().as_slice(), path].concat())
        }
    } else if dirfd == libc::AT_FDCWD {
        crate::cwd::joined(path).and_then(normal)
    } else {
        // Relative to a directory fd: from the path that directory was opened by.
        fdtable::get(dirfd)
            .and_then(|d| d.path.clone())
            .and_then(|mut p| {
                p.push(b'/');
                p.extend_from_slice(path);
                normal(p)
            })
    };
    // An unnamed file (O_TMPFILE) is named as Linux names it: `DIR/#INO`, deleted.
    let abs = match abs {
        Some(mut dir) if flags & libc::O_TMPFILE == libc::O_TMPFILE => {
            dir.extend_from_slice(format!("/#{}", inode.ino).as_bytes());
            Some(dir)
        }
        abs => abs,
    };
    install_open(fs, inode, flags, abs)
}

/// A reopen of Iris fd `of` by one of the paths Linux reopens an open file by
/// (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`): a new description of the same inode, with
/// `flags`. The kernel would reopen the placeholder instead.
pub(crate) fn iris_reopen(of: &OpenFile, flags: c_int) -> c_int {
    count(Call::Open);
    let _b = Busy::enter();
    let fs = match fs_or_eio() {
        Ok(f) => f,
        Err(e) => return fail(e.0),
    };
    match fs.open_inode(&cred(), of.ino, flags & !(libc::O_CREAT | libc::O_EXCL)) {
        Ok(inode) => install_open(fs, inode, flags, of.path.clone()),
        Err(e) => fail(e.0),
    }
}

/// Give opened `inode` a description and a placeholder fd (`abs`: the absolute path it was
/// opened by, for fchdir and for `readlink` of `/proc/self/fd/N`).
fn install_open(fs: &Fs, inode: Inode, flags: c_int, abs: Option<Vec<u8>>) -> c_int {
    let flags = if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        flags & !libc::O_TMPFILE
    } else {
        flags
    };
    let keep =
        flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY | libc::O_CLOEXEC);
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let (fd, desc) = match Desc::create(
        fs.store().volume_id(),
        inode.ino,
        keep,
        inode.is_dir(),
        cloexec,
    ) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    if fd as usize >= fdtable::MAX_FDS {
        // SAFETY: closing the memfd we just created.
        unsafe { real::close(fd) };
        return fail(libc::EMFILE);
    }
    if let Some(p) = &abs {
        desc.set_path(p);
    }
    fs.retain(inode.ino);
    let file = Arc::new(OpenFile {
        ino: inode.ino,
        cache: fs.file_cache(inode.ino),
        is_dir: inode.is_dir(),
        desc,
        path: abs,
        flock_fd: crate::locks::LockFd::new(),
        ofd_fd: crate::locks::LockFd::new(),
        _count: fdtable::OpenCount(inode.ino),
    });
    fdtable::install(fd, file);
    fd
}

/// Read through the volume, or through the shadow file when the inode is shadowed.
fn read_file(fs: &Fs, file: &OpenFile, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    if let Some(n) = fs.read_file(&file.cache, off, buf)? {
        return Ok(n);
    }
    let ino = file.ino;
    match crate::shadow::open(fs, ino, false) {
        Ok(fd) => {
            // SAFETY: reading the shadow into the caller's buffer.
            let n = unsafe { real::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as i64) };
            if n < 0 {
                Err(Errno::EIO)
            } else {
                Ok(n as usize)
            }
        }
        // A stale flag (shadow lost): the volume's bytes serve.
        Err(Errno::ENOENT) => fs.read(ino, off, buf),
        Err(e) => Err(e),
    }
}

/// Write through the volume, or through the shadow file when the inode is shadowed.
fn write_file(fs: &Fs, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
    if let Some(n) = fs.write_unless_shadowed(ino, off, data)? {
        return Ok(n);
    }
    write_shadow(fs, ino, off, data)
}

/// [`write_file`] through the description's block map.
fn write_open_file(fs: &Fs, file: &OpenFile, off: u64, data: &[u8]) -> Result<usize, Errno> {
    if let Some(n) = fs.write_file(&file.cache, off, data)? {
        return Ok(n);
    }
    write_shadow(fs, file.ino, off, data)
}

/// A write of a file whose bytes live in a shadow file (see `shadow`).
fn write_shadow(fs: &Fs, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
    match crate::shadow::open(fs, ino, false) {
        Ok(fd) => {
            // SAFETY: writing the caller's bytes into the shadow.
            let n = unsafe { real::pwrite(fd, data.as_ptr().cast(), data.len(), off as i64) };
            crate::shadow::note_changed(ino);
            if n < 0 {
                Err(Errno::EIO)
            } else {
                Ok(n as usize)
            }
        }
        Err(Errno::ENOENT) => fs.write(ino, off, data),
        Err(e) => Err(e),
    }
}

/// The shadow fd of `ino` if its bytes live in one.
fn shadow_of(fs: &Fs, ino: u64) -> Option<i32> {
    if fs.getattr(ino).ok()?.is_shadowed() {
        crate::shadow::open(fs, ino, false).ok()
    } else {
        None
    }
}

/// An `O_APPEND` write of `data` through `file`: where it landed and how many bytes (through
/// the shadow file when the bytes live in one).
fn append_open_file(fs: &Fs, file: &OpenFile, data: &[u8]) -> Result<(u64, usize), Errno> {
    match fs.append_file(&file.cache, data)? {
        Some(at) => Ok((at, data.len())),
        None => file_size(fs, file.ino)
            .and_then(|at| write_file(fs, file.ino, at, data).map(|n| (at, n))),
    }
}

/// Size of the file, from the shadow when there is one.
fn file_size(fs: &Fs, ino: u64) -> Result<u64, Errno> {
    match shadow_of(fs, ino) {
        Some(fd) => crate::shadow::size(fd),
        None => Ok(fs.getattr(ino)?.size),
    }
}

/// The last reference to an open file, whose last fd `fd` is being closed: its locks go, the
/// description is retired through `fd` (see `Desc::retire`), and the inode's open count as
/// the rest drops (see `fdtable::OpenCount`).
fn retire_last(file: OpenFile, fd: c_int) {
    // Its locks go before the description can be reused; the inode when `file` drops.
    file.flock_fd.close();
    file.ofd_fd.close();
    file.desc.retire(fd);
}

/// An open of a host file: when the process is out of fd numbers (EMFILE), the spare
/// descriptions' numbers are given back (see `desc_pool`) and the open tried once more.
fn host_open(open: impl Fn() -> c_int) -> c_int {
    let fd = open();
    if fd < 0 && crate::errno::get() == libc::EMFILE && crate::desc_pool::drain() > 0 {
        return open();
    }
    fd
}

macro_rules! open_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            // SAFETY: `path` comes from the caller as for libc's open.
            match unsafe { target(path) } {
                Target::Iris { start, path } => {
                    iris_open(libc::AT_FDCWD, start, &path, flags, mode)
                }
                // SAFETY: as above.
                Target::Host => match unsafe { crate::route::reopened(path) } {
                    Some(f) => iris_reopen(&f, flags),
                    // SAFETY: forwarding the caller's arguments to libc.
                    None => host_open(|| unsafe { real::$real(path, flags, mode) }),
                },
            }
        }
    };
}
open_fn!(open, open);
open_fn!(open64, open64);

macro_rules! open2_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            // SAFETY: as for open.
            match unsafe { target(path) } {
                Target::Iris { start, path } => iris_open(libc::AT_FDCWD, start, &path, flags, 0),
                // SAFETY: as above.
                Target::Host => match unsafe { crate::route::reopened(path) } {
                    Some(f) => iris_reopen(&f, flags),
                    // SAFETY: forwarding.
                    None => host_open(|| unsafe { real::$real(path, flags) }),
                },
            }
        }
    };
}
open2_fn!(__open_2, open_2);
open2_fn!(__open64_2, open64_2);

macro_rules! openat_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            flags: c_int,
            mode: mode_t,
        ) -> c_int {
            // SAFETY: as for open.
            match unsafe { target_at(dirfd, path) } {
                Target::Iris { start, path } => iris_open(dirfd, start, &path, flags, mode),
                // SAFETY: as above.
                Target::Host => match unsafe { crate::route::reopened(path) } {
                    Some(f) => iris_reopen(&f, flags),
                    // SAFETY: forwarding.
                    None => host_open(|| unsafe { real::$real(dirfd, path, flags, mode) }),
                },
            }
        }
    };
}
openat_fn!(openat, openat);
openat_fn!(openat64, openat64);

macro_rules! openat2_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            // SAFETY: as for open.
            match unsafe { target_at(dirfd, path) } {
                Target::Iris { start, path } => iris_open(dirfd, start, &path, flags, 0),
                // SAFETY: as above.
                Target::Host => match unsafe { crate::route::reopened(path) } {
                    Some(f) => iris_reopen(&f, flags),
                    // SAFETY: forwarding.
                    None => host_open(|| unsafe { real::$real(dirfd, path, flags) }),
                },
            }
        }
    };
}
openat2_fn!(__openat_2, openat_2);
openat2_fn!(__openat64_2, openat64_2);

macro_rules! creat_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            // SAFETY: as for open.
            match unsafe { target(path) } {
                Target::Iris { start, path } => iris_open(
                    libc::AT_FDCWD,
                    start,
                    &path,
                    libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                    mode,
                ),
                // SAFETY: as above.
                Target::Host => match unsafe { crate::route::reopened(path) } {
                    Some(f) => iris_reopen(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC),
                    // SAFETY: forwarding.
                    None => host_open(|| unsafe { real::$real(path, mode) }),
                },
            }
        }
    };
}
creat_fn!(creat, creat);
creat_fn!(creat64, creat64);

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let was_iris = match fdtable::remove(fd) {
        Some(file) => {
            count(Call::Close);
            crate::locks::release_process_locks(file.ino);
            if let Some(fs) = state::fs() {
                let _b = Busy::enter();
                if shadow_of(fs, file.ino).is_some() {
                    let _ = crate::shadow::write_back_if_changed(fs, file.ino);
                }
            }
            match Arc::try_unwrap(file) {
                // Its last fd, and no call in flight holds it: the description may be kept
                // for reuse (before `fd` is closed below).
                Ok(last) => retire_last(last, fd),
                Err(file) => drop(file),
            }
            true
        }
        // One of Iris's own (the volume's, a lock file's): the program never opened it.
        None if iris_media::own_fd::is_own(fd) => return fail(libc::EBADF),
        None => {
            crate::uring::forget(fd);
            false
        }
    };
    // SAFETY: closing the caller's fd (the description memfd, for an Iris fd).
    let r = unsafe { real::close(fd) };
    if was_iris {
        crate::stdio::sync_std_stream(fd);
    }
    r
}

/// Read at the description's offset and advance it.
fn read_at_offset(file: &OpenFile, buf: &mut [u8]) -> ssize_t {
    count(Call::Read);
    if !file.readable() {
        return fail(libc::EBADF);
    }
    if file.is_dir {
        return fail(libc::EISDIR);
    }
    let _b = Busy::enter();
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    file.desc
        .with_offset(|off| match read_file(fs, file, *off, buf) {
            Ok(n) => {
                *off += n as u64;
                n as ssize_t
            }
            Err(e) => fail(e.0),
        })
}

fn write_at_offset(file: &OpenFile, data: &[u8]) -> ssize_t {
    count(Call::Write);
    if !file.writable() {
        return fail(libc::EBADF);
    }
    let _b = Busy::enter();
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    let r = file.desc.with_offset(|off| {
        let r = if file.append() {
            append_open_file(fs, file, data).map(|(at, n)| at + n as u64)
        } else {
            write_open_file(fs, file, *off, data).map(|n| *off + n as u64)
        };
        if let Ok(end) = r {
            *off = end;
        }
        r
    });
    match r {
        Ok(_) => {
            if file.flags() & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                if let Err(e) = fs.sync_inode(file.ino) {
                    return fail(e.0);
                }
            }
            data.len() as ssize_t
        }
        Err(e) => fail(e.0),
    }
}

fn pread_file(file: &OpenFile, buf: &mut [u8], off: i64) -> ssize_t {
    let _b = Busy::enter();
    pread_busy(file, buf, off)
}

/// [`pread_file`] for a caller that holds [`Busy`] already (as [`fdtable::with`]'s closure
/// does): one thread-local access less on the path of every read.
fn pread_busy(file: &OpenFile, buf: &mut [u8], off: i64) -> ssize_t {
    debug_assert!(crate::state::busy(), "pread_busy outside Busy");
    count(Call::Pread);
    if !file.readable() {
        return fail(libc::EBADF);
    }
    if file.is_dir {
        return fail(libc::EISDIR);
    }
    if off < 0 {
        return fail(libc::EINVAL);
    }
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    match read_file(fs, file, off as u64, buf) {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e.0),
    }
}

fn pwrite_file(file: &OpenFile, data: &[u8], off: i64) -> ssize_t {
    let _b = Busy::enter();
    pwrite_busy(file, data, off)
}

/// [`pwrite_file`] for a caller that holds [`Busy`] already (as [`fdtable::with`]'s closure
/// does).
fn pwrite_busy(file: &OpenFile, data: &[u8], off: i64) -> ssize_t {
    debug_assert!(crate::state::busy(), "pwrite_busy outside Busy");
    count(Call::Pwrite);
    if !file.writable() {
        return fail(libc::EBADF);
    }
    if off < 0 {
        return fail(libc::EINVAL);
    }
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    // Linux: pwrite on an O_APPEND description appends, whatever the offset.
    let r = if file.append() {
        append_open_file(fs, file, data).map(|(_, n)| n)
    } else {
        write_open_file(fs, file, off as u64, data)
    };
    match r {
        Ok(n) => {
            if file.flags() & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                if let Err(e) = fs.sync_inode(file.ino) {
                    return fail(e.0);
                }
            }
            n as ssize_t
        }
        Err(e) => fail(e.0),
    }
}

/// The caller's buffer as a slice.
///
/// # Safety
/// `buf` must be valid for `n` bytes (the caller's contract for read/write).
unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        return &mut [];
    }
    // SAFETY: per the function contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
}

/// # Safety
/// As [`slice_mut`].
unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: per the function contract.
    unsafe { std::slice::from_raw_parts(buf.cast(), n) }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY: the caller passes a buffer of n bytes.
    match fdtable::with(fd, |f| read_at_offset(f, unsafe { slice_mut(buf, n) })) {
        Some(done) => done,
        // SAFETY: forwarding.
        None => unsafe { real::read(fd, buf, n) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    match fdtable::get(fd) {
        Some(f) => {
            if n > buflen {
                // SAFETY: what glibc's checker does on overflow.
                unsafe { libc::abort() };
            }
            // SAFETY: the caller passes a buffer of n bytes.
            read_at_offset(&f, unsafe { slice_mut(buf, n) })
        }
        // SAFETY: forwarding.
        None => unsafe { real::read_chk(fd, buf, n, buflen) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: the caller passes a buffer of n bytes.
    match fdtable::with(fd, |f| write_at_offset(f, unsafe { slice(buf, n) })) {
        Some(done) => done,
        // SAFETY: forwarding.
        None => unsafe { real::write(fd, buf, n) },
    }
}

macro_rules! pread_fn {
    ($name:ident, $real:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: $off,
        ) -> ssize_t {
            // SAFETY: the caller passes a buffer of n bytes.
            match fdtable::with(fd, |f| {
                pread_busy(f, unsafe { slice_mut(buf, n) }, off as i64)
            }) {
                Some(done) => done,
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, buf, n, off) },
            }
        }
    };
}
pread_fn!(pread, pread, off_t);
pread_fn!(pread64, pread64, off64_t);

macro_rules! pread_chk_fn {
    ($name:ident, $real:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: $off,
            buflen: size_t,
        ) -> ssize_t {
            match fdtable::get(fd) {
                Some(f) => {
                    if n > buflen {
                        // SAFETY: what glibc's checker does on overflow.
                        unsafe { libc::abort() };
                    }
                    // SAFETY: the caller passes a buffer of n bytes.
                    pread_file(&f, unsafe { slice_mut(buf, n) }, off as i64)
                }
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, buf, n, off, buflen) },
            }
        }
    };
}
pread_chk_fn!(__pread_chk, pread_chk, off_t);
pread_chk_fn!(__pread64_chk, pread64_chk, off64_t);

macro_rules! pwrite_fn {
    ($name:ident, $real:ident, $off:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *const c_void,
            n: size_t,
            off: $off,
        ) -> ssize_t {
            // SAFETY: the caller passes a buffer of n bytes.
            match fdtable::with(fd, |f| pwrite_busy(f, unsafe { slice(buf, n) }, off as i64)) {
                Some(done) => done,
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, buf, n, off) },
            }
        }
    };
}
pwrite_fn!(pwrite, pwrite, off_t);
pwrite_fn!(pwrite64, pwrite64, off64_t);

/// Gather iovecs into one buffer (so a writev is one atomic write).
///
/// # Safety
/// `iov` must point at `n` valid iovecs.
unsafe fn gather(iov: *const libc::iovec, n: c_int) -> Option<Vec<u8>> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return None;
    }
    let mut out = Vec::new();
    for i in 0..n as usize {
        // SAFETY: i < n, per the contract.
        let v = unsafe { &*iov.add(i) };
        // SAFETY: each iovec describes a readable buffer.
        out.extend_from_slice(unsafe { slice(v.iov_base, v.iov_len) });
    }
    Some(out)
}

/// Scatter `data` into iovecs.
///
/// # Safety
/// As [`gather`], buffers writable.
unsafe fn scatter(iov: *const libc::iovec, n: c_int, data: &[u8]) {
    let mut at = 0;
    for i in 0..n.max(0) as usize {
        if at >= data.len() {
            break;
        }
        // SAFETY: i < n.
        let v = unsafe { &*iov.add(i) };
        let take = v.iov_len.min(data.len() - at);
        // SAFETY: the iovec's buffer holds iov_len >= take bytes.
        iris_store::copy_bytes(unsafe { slice_mut(v.iov_base, take) }, &data[at..at + take]);
        at += take;
    }
}

/// # Safety
/// As [`gather`].
unsafe fn iov_total(iov: *const libc::iovec, n: c_int) -> Option<usize> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return None;
    }
    // SAFETY: i < n.
    Some(
        (0..n as usize)
            .map(|i| unsafe { (*iov.add(i)).iov_len })
            .sum(),
    )
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::readv(fd, iov, n) };
    };
    // SAFETY: caller's iovecs.
    let Some(total) = (unsafe { iov_total(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    crate::bounce::with(total, |buf| {
        let r = read_at_offset(&f, buf);
        if r > 0 {
            // SAFETY: caller's iovecs.
            unsafe { scatter(iov, n, &buf[..r as usize]) };
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::writev(fd, iov, n) };
    };
    // SAFETY: caller's iovecs.
    match unsafe { gather(iov, n) } {
        Some(data) => write_at_offset(&f, &data),
        None => fail(libc::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::preadv(fd, iov, n, off) };
    };
    // SAFETY: caller's iovecs.
    let Some(total) = (unsafe { iov_total(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    crate::bounce::with(total, |buf| {
        let r = pread_file(&f, buf, off);
        if r > 0 {
            // SAFETY: caller's iovecs.
            unsafe { scatter(iov, n, &buf[..r as usize]) };
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::pwritev(fd, iov, n, off) };
    };
    // SAFETY: caller's iovecs.
    match unsafe { gather(iov, n) } {
        Some(data) => pwrite_file(&f, &data, off),
        None => fail(libc::EINVAL),
    }
}

fn seek_file(file: &OpenFile, off: i64, whence: c_int) -> i64 {
    count(Call::Seek);
    let _b = Busy::enter();
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    let size = || file_size(fs, file.ino).map(|s| s as i64);
    file.desc.with_offset(|cur| {
        let new = match whence {
            libc::SEEK_SET => Ok(off),
            libc::SEEK_CUR => Ok(*cur as i64 + off),
            libc::SEEK_END => size().map(|s| s + off),
            libc::SEEK_DATA => {
                size().and_then(|s| if off < s { Ok(off) } else { Err(Errno::ENXIO) })
            }
            libc::SEEK_HOLE => size().and_then(|s| if off < s { Ok(s) } else { Err(Errno::ENXIO) }),
            _ => Err(Errno::EINVAL),
        };
        match new {
            Ok(n) if n >= 0 => {
                *cur = n as u64;
                n
            }
            Ok(_) => fail(libc::EINVAL),
            Err(e) => fail(e.0),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    match fdtable::get(fd) {
        Some(f) => seek_file(&f, off, whence),
        // SAFETY: forwarding.
        None => unsafe { real::lseek(fd, off, whence) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match fdtable::get(fd) {
        Some(f) => seek_file(&f, off, whence),
        // SAFETY: forwarding.
        None => unsafe { real::lseek64(fd, off, whence) },
    }
}

/// Fill a `struct stat` from an inode.
///
/// # Safety
/// `st` must point at a writable `struct stat`.
unsafe fn fill_stat(st: *mut libc::stat, i: &Inode, fs: &Fs) {
    // SAFETY: per the contract; all-zero is a valid struct stat.
    let s = unsafe {
        std::ptr::write_bytes(st, 0, 1);
        &mut *st
    };
    let split = |ns: i64| (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    s.st_dev = fs.store().volume_id();
    s.st_ino = i.ino;
    s.st_mode = i.mode;
    s.st_nlink = i.nlink.into();
    s.st_uid = i.uid;
    s.st_gid = i.gid;
    s.st_rdev = i.rdev;
    s.st_size = i.size as i64;
    s.st_blksize = fs.block_size() as _;
    s.st_blocks = (i.blocks * fs.block_size() / 512) as i64;
    (s.st_atime, s.st_atime_nsec) = split(i.atime_ns);
    (s.st_mtime, s.st_mtime_nsec) = split(i.mtime_ns);
    (s.st_ctime, s.st_ctime_nsec) = split(i.ctime_ns);
}

/// stat by path; `follow` for stat, not lstat.
fn stat_path(start: u64, path: &[u8], follow: bool, st: *mut libc::stat) -> c_int {
    count(Call::Stat);
    let _b = Busy::enter();
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    match fs
        .resolve(&cred(), start, path, follow)
        .and_then(|ino| fs.getattr(ino))
        .map(|mut i| {
            if i.is_shadowed() {
                i.size = file_size(fs, i.ino).unwrap_or(i.size);
            }
            i
        }) {
        Ok(i) => {
            // SAFETY: the caller's stat buffer.
            unsafe { fill_stat(st, &i, fs) };
            0
        }
        Err(Errno::EXDEV) => match crate::route::left_for_host(start, path, follow) {
            // SAFETY: a NUL-terminated path of our own and the caller's buffer.
            Some(host) if follow => unsafe { real::stat(host.as_ptr(), st) },
            // SAFETY: as above.
            Some(host) => unsafe { real::lstat(host.as_ptr(), st) },
            None => fail(libc::EXDEV),
        },
        Err(e) => fail(e.0),
    }
}

fn stat_fd(file: &OpenFile, st: *mut libc::stat) -> c_int {
    count(Call::Stat);
    let _b = Busy::enter();
    let Ok(fs) = fs_or_eio() else {
        return fail(libc::EIO);
    };
    match fs.getattr(file.ino).map(|mut i| {
        if i.is_shadowed() {
            i.size = file_size(fs, i.ino).unwrap_or(i.size);
        }
        i
    }) {
        Ok(i) => {
            // SAFETY: the caller's stat buffer.
            unsafe { fill_stat(st, &i, fs) };
            0
        }
        Err(e) => fail(e.0),
    }
}

// On 64-bit Linux `struct stat64` is `struct stat`, so the 64 variants share the code.
const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());

macro_rules! fstat_fn {
    ($name:ident, $real:ident, $st:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, st: *mut $st) -> c_int {
            match fdtable::get(fd) {
                Some(f) => stat_fd(&f, st.cast()),
                // SAFETY: forwarding.
                None => unsafe { real::$real(fd, st) },
            }
        }
    };
}
fstat_fn!(fstat, fstat, libc::stat);
fstat_fn!(fstat64, fstat64, libc::stat64);

macro_rules! stat_fn {
    ($name:ident, $real:ident, $st:ty, $follow:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, st: *mut $st) -> c_int {
            // SAFETY: caller's path.
            match unsafe { target(path) } {
                Target::Iris { start, path } => stat_path(start, &path, $follow, st.cast()),
                // SAFETY: the caller's path.
                Target::Host => match unsafe { stat_reopened(path, $follow, st.cast()) } {
                    Some(r) => r,
                    // SAFETY: forwarding.
                    None => unsafe { real::$real(path, st) },
                },
            }
        }
    };
}
stat_fn!(stat, stat, libc::stat, true);
stat_fn!(stat64, stat64, libc::stat64, true);
stat_fn!(lstat, lstat, libc::stat, false);
stat_fn!(lstat64, lstat64, libc::stat64, false);

/// fstatat semantics on an Iris target or fd.
fn statat_iris(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> Option<c_int> {
    // SAFETY: caller's path (may be NULL/empty with AT_EMPTY_PATH).
    let empty = path.is_null() || unsafe { *path } == 0;
    if empty && flags & libc::AT_EMPTY_PATH != 0 {
        return fdtable::get(dirfd).map(|f| stat_fd(&f, st));
    }
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => Some(stat_path(
            start,
            &path,
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            st,
        )),
        // SAFETY: the caller's path (an absolute one names the same file from any dirfd).
        Target::Host => unsafe { stat_reopened(path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, st) },
    }
}

/// stat of a host path that names an Iris fd (`/dev/stdin`, `/dev/fd/N`, `/proc/self/fd/N`:
/// see `route::reopened`) when it follows symlinks: the open Iris file's, where the kernel
/// would stat the fd's placeholder (a size of 1 TiB, mode 0777). `lstat` of the fd's own link
/// is the kernel's (a symlink), as on Linux.
///
/// # Safety
/// `path` is null or a valid C string.
unsafe fn stat_reopened(path: *const c_char, follow: bool, st: *mut libc::stat) -> Option<c_int> {
    if !follow {
        // `/dev/stdin` itself is a symlink too, to `/proc/self/fd/0`.
        return None;
    }
    // SAFETY: forwarded contract.
    unsafe { crate::route::reopened(path) }.map(|f| stat_fd(&f, st))
}

macro_rules! fstatat_fn {
    ($name:ident, $real:ident, $st:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            st: *mut $st,
            flags: c_int,
        ) -> c_int {
            match statat_iris(dirfd, path, st.cast(), flags) {
                Some(r) => r,
                // SAFETY: forwarding.
                None => unsafe { real::$real(dirfd, path, st, flags) },
            }
        }
    };
}
fstatat_fn!(fstatat, fstatat, libc::stat);
fstatat_fn!(fstatat64, fstatat64, libc::stat64);

macro_rules! xstat_fn {
    ($name:ident, $real:ident, $st:ty, $follow:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, st: *mut $st) -> c_int {
            // SAFETY: caller's path.
            match unsafe { target(path) } {
                Target::Iris { start, path } => stat_path(start, &path, $follow, st.cast()),
                // SAFETY: the caller's path.
                Target::Host => match unsafe { stat_reopened(path, $follow, st.cast()) } {
                    Some(r) => r,
                    // SAFETY: forwarding.
                    None => unsafe { real::$real(ver, path, st) },
                },
            }
        }
    };
}
xstat_fn!(__xstat, xstat, libc::stat, true);
xstat_fn!(__xstat64, xstat64, libc::stat64, true);
xstat_fn!(__lxstat, lxstat, libc::stat, false);
xstat_fn!(__lxstat64, lxstat64, libc::stat64, false);

macro_rules! fxstat_fn {
    ($name:ident, $real:ident, $st:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, fd: c_int, st: *mut $st) -> c_int {
            match fdtable::get(fd) {
                Some(f) => stat_fd(&f, st.cast()),
                // SAFETY: forwarding.
                None => unsafe { real::$real(ver, fd, st) },
            }
        }
    };
}
fxstat_fn!(__fxstat, fxstat, libc::stat);
fxstat_fn!(__fxstat64, fxstat64, libc::stat64);

macro_rules! fxstatat_fn {
    ($name:ident, $real:ident, $st:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ver: c_int,
            dirfd: c_int,
            path: *const c_char,
            st: *mut $st,
            flags: c_int,
        ) -> c_int {
            match statat_iris(dirfd, path, st.cast(), flags) {
                Some(r) => r,
                // SAFETY: forwarding.
                None => unsafe { real::$real(ver, dirfd, path, st, flags) },
            }
        }
    };
}
fxstatat_fn!(__fxstatat, fxstatat, libc::stat);
fxstatat_fn!(__fxstatat64, fxstatat64, libc::stat64);

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    // SAFETY: an all-zero struct stat is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let Some(r) = statat_iris(
        dirfd,
        path,
        &mut st,
        flags & (libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW),
    ) else {
        // SAFETY: forwarding.
        return unsafe { real::statx(dirfd, path, flags, mask, stx) };
    };
    if r != 0 {
        return r;
    }
    // SAFETY: the caller's statx buffer; all-zero is valid.
    let x = unsafe {
        std::ptr::write_bytes(stx, 0, 1);
        &mut *stx
    };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = st.st_blksize as u32;
    x.stx_nlink = st.st_nlink as u32;
    x.stx_uid = st.st_uid;
    x.stx_gid = st.st_gid;
    x.stx_mode = st.st_mode as u16;
    x.stx_ino = st.st_ino;
    x.stx_size = st.st_size as u64;
    x.stx_blocks = st.st_blocks as u64;
    x.stx_atime.tv_sec = st.st_atime;
    x.stx_atime.tv_nsec = st.st_atime_nsec as u32;
    x.stx_mtime.tv_sec = st.st_mtime;
    x.stx_mtime.tv_nsec = st.st_mtime_nsec as u32;
    x.stx_ctime.tv_sec = st.st_ctime;
    x.stx_ctime.tv_nsec = st.st_ctime_nsec as u32;
    x.stx_dev_major = libc::major(st.st_dev);
    x.stx_dev_minor = libc::minor(st.st_dev);
    x.stx_rdev_major = libc::major(st.st_rdev);
    x.stx_rdev_minor = libc::minor(st.st_rdev);
    0
}

/// Run `f` on the file system for an Iris path op, translating errors to errno.
fn path_op(f: impl FnOnce(&Fs) -> Result<(), Errno>) -> c_int {
    count(Call::Path);
    let _b = Busy::enter();
    match fs_or_eio().and_then(f) {
        Ok(()) => 0,
        Err(e) => fail(e.0),
    }
}

fn access_iris(start: u64, path: &[u8], mode: c_int, flags: c_int) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    let r = path_op(|fs| {
        let ino = fs.resolve(&cred(), start, path, follow)?;
        access_ino(fs, ino, mode)
    });
    if r != 0 && crate::errno::get() == libc::EXDEV {
        if let Some(host) = crate::route::left_for_host(start, path, follow) {
            // SAFETY: a NUL-terminated path of our own; the caller's mode and flags.
            return unsafe { real::faccessat(libc::AT_FDCWD, host.as_ptr(), mode, flags) };
        }
    }
    r
}

/// The permission check of `access` (mode `R_OK | W_OK | X_OK`, or `F_OK`) on inode `ino`.
fn access_ino(fs: &Fs, ino: u64, mode: c_int) -> Result<(), Errno> {
    let i = fs.getattr(ino)?;
    let mask = (mode & 7) as u32;
    if mask == 0 {
        return Ok(());
    }
    cred().check(&i, mask)
}

/// `access` of a host path that names an Iris fd (see [`stat_reopened`]): the open Iris
/// file's mode bits decide, not its placeholder's.
///
/// # Safety
/// `path` is null or a valid C string.
unsafe fn access_reopened(path: *const c_char, mode: c_int, flags: c_int) -> Option<c_int> {
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
        return None;
    }
    // SAFETY: forwarded contract.
    let f = unsafe { crate::route::reopened(path) }?;
    Some(path_op(|fs| access_ino(fs, f.ino, mode)))
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => access_iris(start, &path, mode, 0),
        // SAFETY: the caller's path.
        Target::Host => match unsafe { access_reopened(path, mode, 0) } {
            Some(r) => r,
            // SAFETY: forwarding.
            None => unsafe { real::access(path, mode) },
        },
    }
}

/// glibc's euidaccess/eaccess call its internal access, so they are interposed too.
macro_rules! eaccess_fn {
    ($name:ident, $real:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: c_int) -> c_int {
            // SAFETY: caller's path.
            match unsafe { target(path) } {
                Target::Iris { start, path } => access_iris(start, &path, mode, 0),
                // SAFETY: the caller's path.
                Target::Host => match unsafe { access_reopened(path, mode, 0) } {
                    Some(r) => r,
                    // SAFETY: forwarding.
                    None => unsafe { real::$real(path, mode) },
                },
            }
        }
    };
}
eaccess_fn!(euidaccess, euidaccess);
eaccess_fn!(eaccess, eaccess);

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => access_iris(start, &path, mode, flags),
        // SAFETY: the caller's path (an absolute one names the same file from any dirfd).
        Target::Host => match unsafe { access_reopened(path, mode, flags) } {
            Some(r) => r,
            // SAFETY: forwarding.
            None => unsafe { real::faccessat(dirfd, path, mode, flags) },
        },
    }
}

/// unlink, removing the shadow file of an inode that loses its last name.
fn unlink_iris(fs: &Fs, start: u64, path: &[u8]) -> Result<(), Errno> {
    let c = cred();
    let victim = fs
        .resolve(&c, start, path, false)
        .and_then(|ino| fs.getattr(ino))
        .ok();
    fs.unlink(&c, start, path)?;
    if let Some(i) = victim.filter(|i| i.is_shadowed()) {
        if fs.getattr(i.ino).map_or(true, |now| now.nlink == 0) {
            crate::shadow::remove(fs, i.ino);
        }
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path: rel } => {
            let r = path_op(|fs| unlink_iris(fs, start, &rel));
            // SAFETY: the caller's path.
            unsafe { or_socket(r, path) }
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::unlink(path) },
    }
}

/// `r`, the result of unlinking Iris path `path`; if nothing was there, 0 when a socket bound
/// to that name went instead (see `sockets`).
///
/// # Safety
/// `path` is NUL-terminated.
unsafe fn or_socket(r: c_int, path: *const c_char) -> c_int {
    if r == 0 || crate::errno::get() != libc::ENOENT {
        return r;
    }
    // SAFETY: the caller's path.
    if unsafe { crate::sockets::unlink_socket(path) } {
        return 0;
    }
    fail(libc::ENOENT)
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path: rel } => {
            let r = path_op(|fs| {
                if flags & libc::AT_REMOVEDIR != 0 {
                    fs.rmdir(&cred(), start, &rel)
                } else {
                    unlink_iris(fs, start, &rel)
                }
            });
            // SAFETY: the caller's path (named from the working directory, or absolute).
            let named = dirfd == libc::AT_FDCWD || unsafe { *path } == b'/' as c_char;
            if flags & libc::AT_REMOVEDIR == 0 && named {
                // SAFETY: as above.
                return unsafe { or_socket(r, path) };
            }
            r
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::unlinkat(dirfd, path, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => path_op(|fs| {
            fs.mkdir(&cred(), start, &path, mode & !umask_now())
                .map(|_| ())
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::mkdir(path, mode) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => path_op(|fs| {
            fs.mkdir(&cred(), start, &path, mode & !umask_now())
                .map(|_| ())
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::mkdirat(dirfd, path, mode) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => path_op(|fs| fs.rmdir(&cred(), start, &path)),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::rmdir(path) },
    }
}

/// rename between two targets: both Iris, both host, or EXDEV.
///
/// # Safety
/// Valid C strings.
unsafe fn rename_any(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: caller's paths.
    let (ta, tb) = unsafe { (target_at(da, a), target_at(db, b)) };
    match (ta, tb) {
        (
            Target::Iris {
                start: sa,
                path: pa,
            },
            Target::Iris {
                start: sb,
                path: pb,
            },
        ) => path_op(|fs| {
            // A shadowed file replaced by the rename loses its shadow with its last name.
            let c = cred();
            let victim = fs
                .resolve(&c, sb, &pb, false)
                .and_then(|ino| fs.getattr(ino))
                .ok();
            fs.rename(&c, sa, &pa, sb, &pb, flags)?;
            if let Some(i) = victim.filter(|i| i.is_shadowed()) {
                if fs.getattr(i.ino).map_or(true, |now| now.nlink == 0) {
                    crate::shadow::remove(fs, i.ino);
                }
            }
            Ok(())
        }),
        (Target::Host, Target::Host) => {
            if flags == 0 {
                // SAFETY: forwarding.
                unsafe { real::renameat(da, a, db, b) }
            } else {
                // SAFETY: forwarding.
                unsafe { real::renameat2(da, a, db, b, flags) }
            }
        }
        _ => fail(libc::EXDEV),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: caller's paths.
    match unsafe { (target(a), target(b)) } {
        // SAFETY: forwarding.
        (Target::Host, Target::Host) => unsafe { real::rename(a, b) },
        // SAFETY: caller's paths.
        _ => unsafe { rename_any(libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
) -> c_int {
    // SAFETY: caller's paths.
    unsafe { rename_any(da, a, db, b, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    da: c_int,
    a: *const c_char,
    db: c_int,
    b: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: caller's paths.
    unsafe { rename_any(da, a, db, b, flags) }
}

fn truncate_file(file: &OpenFile, len: i64) -> c_int {
    if len < 0 {
        return fail(libc::EINVAL);
    }
    if !file.writable() {
        return fail(libc::EINVAL);
    }
    path_op(|fs| match shadow_of(fs, file.ino) {
        Some(fd) => {
            crate::shadow::note_changed(file.ino);
            // SAFETY: sizing the shadow file.
            match unsafe { real::ftruncate(fd, len) } {
                0 => Ok(()),
                _ => Err(Errno::EIO),
            }
        }
        None => fs.truncate(file.ino, len as u64),
    })
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => truncate_file(&f, len),
        // SAFETY: forwarding.
        None => unsafe { real::ftruncate(fd, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => truncate_file(&f, len),
        // SAFETY: forwarding.
        None => unsafe { real::ftruncate64(fd, len) },
    }
}

fn truncate_path(start: u64, path: &[u8], len: i64) -> c_int {
    if len < 0 {
        return fail(libc::EINVAL);
    }
    path_op(|fs| {
        let c = cred();
        let ino = fs.resolve(&c, start, path, true)?;
        let i = fs.getattr(ino)?;
        if i.is_dir() {
            return Err(Errno::EISDIR);
        }
        c.check(&i, iris_fs::W_OK)?;
        match shadow_of(fs, ino) {
            Some(fd) => {
                crate::shadow::note_changed(ino);
                // SAFETY: sizing the shadow file.
                match unsafe { real::ftruncate(fd, len) } {
                    0 => Ok(()),
                    _ => Err(Errno::EIO),
                }
            }
            None => fs.truncate(ino, len as u64),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => truncate_path(start, &path, len),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::truncate(path, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => truncate_path(start, &path, len),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::truncate64(path, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        count(Call::Sync);
        return path_op(|fs| {
            if shadow_of(fs, f.ino).is_some() {
                crate::shadow::write_back(fs, f.ino)?;
            }
            fs.sync_inode(f.ino)
        });
    }
    // SAFETY: forwarding.
    unsafe { real::fsync(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    if let Some(f) = fdtable::get(fd) {
        count(Call::Sync);
        return path_op(|fs| {
            if shadow_of(fs, f.ino).is_some() {
                crate::shadow::write_back(fs, f.ino)?;
            }
            fs.sync_inode(f.ino)
        });
    }
    // SAFETY: forwarding.
    unsafe { real::fdatasync(fd) }
}

/// fcntl on an Iris fd.
fn fcntl_iris(fd: c_int, file: Arc<OpenFile>, cmd: c_int, arg: usize) -> c_int {
    match cmd {
        libc::F_GETFL => file.flags(),
        libc::F_SETFL => {
            let settable = libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DIRECT
                | libc::O_NOATIME
                | libc::O_ASYNC;
            let old = file.flags();
            file.set_flags((old & !settable) | (arg as c_int & settable));
            0
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: duplicating the placeholder fd.
            let new = unsafe { real::fcntl(fd, cmd, arg) };
            if new >= 0 {
                if cmd == libc::F_DUPFD {
                    file.desc.note_inheritable();
                }
                if let Some(prev) = fdtable::install(new, file) {
                    drop(prev);
                }
            }
            new
        }
        libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW
        | libc::F_OFD_GETLK => crate::locks::fcntl_lock(&file, cmd, arg),
        libc::F_SETFD => {
            if arg as c_int & libc::FD_CLOEXEC == 0 {
                file.desc.note_inheritable();
            }
            // SAFETY: fd flags (close-on-exec) live on the placeholder.
            unsafe { real::fcntl(fd, cmd, arg) }
        }
        // What Linux answers for a file on tmpfs (the placeholder, an O_PATH fd, refuses
        // them): no owner or signal for I/O events, no lease to take, only the seal that
        // forbids seals, no write-life hint.
        libc::F_GETOWN | libc::F_SETOWN | F_GETSIG | F_SETSIG | F_SETOWN_EX => 0,
        F_GETOWN_EX => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            // SAFETY: F_GETOWN_EX passes a struct f_owner_ex (two ints) to fill.
            unsafe { (arg as *mut [c_int; 2]).write_unaligned([0, 0]) };
            0
        }
        libc::F_GETLEASE => libc::F_UNLCK,
        libc::F_SETLEASE => fail(libc::EAGAIN),
        libc::F_NOTIFY if arg == 0 => 0,
        libc::F_NOTIFY => fail(if file.is_dir {
            libc::EINVAL
        } else {
            libc::ENOTDIR
        }),
        libc::F_GET_SEALS => libc::F_SEAL_SEAL,
        libc::F_ADD_SEALS => fail(libc::EPERM),
        F_GET_RW_HINT | F_SET_RW_HINT => {
            if arg == 0 {
                return fail(libc::EFAULT);
            }
            if cmd == F_GET_RW_HINT {
                // SAFETY: F_GET_RW_HINT passes a u64 to fill.
                unsafe { (arg as *mut u64).write_unaligned(0) };
            }
            0
        }
        // SAFETY: fd flags (close-on-exec) and the rest live on the placeholder.
        _ => unsafe { real::fcntl(fd, cmd, arg) },
    }
}

/// fcntl commands for the signal and owner of I/O events (asm-generic/fcntl.h).
const F_SETSIG: c_int = 10;
const F_GETSIG: c_int = 11;
const F_SETOWN_EX: c_int = 15;
const F_GETOWN_EX: c_int = 16;
/// fcntl commands for a file's write-life hint (linux/fcntl.h).
const F_GET_RW_HINT: c_int = 1035;
const F_SET_RW_HINT: c_int = 1036;

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match fdtable::get(fd) {
        Some(f) => fcntl_iris(fd, f, cmd, arg),
        // SAFETY: forwarding (variadic argument passed in the same register).
        None => unsafe { real::fcntl(fd, cmd, arg) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match fdtable::get(fd) {
        Some(f) => fcntl_iris(fd, f, cmd, arg),
        // SAFETY: forwarding.
        None => unsafe { real::fcntl64(fd, cmd, arg) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: forwarding; for an Iris fd this duplicates the placeholder.
    let new = unsafe { real::dup(fd) };
    if new >= 0 {
        if let Some(f) = fdtable::get(fd) {
            f.desc.note_inheritable();
            fdtable::install(new, f);
        }
    }
    new
}

fn after_dup2(old: c_int, new: c_int, cloexec: bool) {
    if old == new {
        return;
    }
    crate::uring::forget(new);
    let src = fdtable::get(old);
    let prev = match src {
        Some(f) => {
            if !cloexec {
                f.desc.note_inheritable();
            }
            fdtable::install(new, f)
        }
        None => fdtable::remove(new),
    };
    if let Some(p) = prev {
        // The dup2 closed an fd of that file: the process's record locks on it go (POSIX), as
        // at any close (even when `old` is an fd of the same file).
        crate::locks::release_process_locks(p.ino);
        drop(p);
    }
}

/// Before a dup2 onto `new`: one of Iris's own fds there moves out of the program's way.
/// False when it cannot move (no number free): the dup2 then fails with EBUSY, as Linux's does
/// in a race with an open.
fn clear_own(old: c_int, new: c_int) -> bool {
    if old == new || iris_media::own_fd::relocate(new) {
        return true;
    }
    set(libc::EBUSY);
    false
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if !clear_own(old, new) {
        return -1;
    }
    crate::stdio::flush_std_stream(new);
    // SAFETY: forwarding.
    let r = unsafe { real::dup2(old, new) };
    if r >= 0 {
        after_dup2(old, new, false);
        crate::stdio::sync_std_stream(new);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if !clear_own(old, new) {
        return -1;
    }
    crate::stdio::flush_std_stream(new);
    // SAFETY: forwarding.
    let r = unsafe { real::dup3(old, new, flags) };
    if r >= 0 {
        after_dup2(old, new, flags & libc::O_CLOEXEC != 0);
        crate::stdio::sync_std_stream(new);
    }
    r
}

/// mmap of an Iris file: private and read-only mappings get a copy of the file's bytes;
/// writable shared mappings are refused with ENODEV (they would not reach the file).
fn mmap_iris(
    file: &OpenFile,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: i64,
) -> *mut c_void {
    count(Call::Mmap);
    let shared = flags & (libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE) != 0;
    if off < 0 || len == 0 {
        set(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if shared {
        // Shared mappings map the shadow file, coherent with read/write in every process.
        let _b = Busy::enter();
        let Ok(fs) = fs_or_eio() else {
            set(libc::EIO);
            return libc::MAP_FAILED;
        };
        if prot & libc::PROT_WRITE != 0 && !file.writable() {
            set(libc::EACCES);
            return libc::MAP_FAILED;
        }
        return match crate::shadow::open(fs, file.ino, true) {
            Ok(sfd) => {
                if prot & libc::PROT_WRITE != 0 || file.writable() {
                    // Writable now, or after an mprotect: its bytes may change.
                    crate::shadow::note_changed(file.ino);
                }
                // SAFETY: mapping the shadow with the caller's arguments.
                let p = unsafe { real::mmap(addr, len, prot, flags, sfd, off) };
                if p != libc::MAP_FAILED {
                    crate::mappings::replaced(p, len);
                    crate::mappings::add(p, len, file.ino);
                }
                p
            }
            Err(e) => {
                set(e.0);
                libc::MAP_FAILED
            }
        };
    }
    let mflags = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping; `addr`/MAP_FIXED semantics are the caller's.
    let p = unsafe { real::mmap(addr, len, libc::PROT_READ | libc::PROT_WRITE, mflags, -1, 0) };
    if p == libc::MAP_FAILED {
        return p;
    }
    crate::mappings::replaced(p, len);
    let _b = Busy::enter();
    if let Ok(fs) = fs_or_eio() {
        // SAFETY: the new mapping is len bytes, readable and writable.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        let _ = read_file(fs, file, off as u64, buf);
    }
    // SAFETY: the mapping we created; restoring the caller's protection.
    unsafe { libc::mprotect(p, len, prot) };
    p
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    match fdtable::get(fd) {
        Some(f) if flags & libc::MAP_ANONYMOUS == 0 => mmap_iris(&f, addr, len, prot, flags, off),
        _ => {
            // SAFETY: forwarding.
            let p = unsafe { real::mmap(addr, len, prot, flags, fd, off) };
            if p != libc::MAP_FAILED && flags & libc::MAP_FIXED != 0 {
                crate::mappings::replaced(p, len);
            }
            p
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    match fdtable::get(fd) {
        Some(f) if flags & libc::MAP_ANONYMOUS == 0 => mmap_iris(&f, addr, len, prot, flags, off),
        _ => {
            // SAFETY: forwarding.
            let p = unsafe { real::mmap64(addr, len, prot, flags, fd, off) };
            if p != libc::MAP_FAILED && flags & libc::MAP_FIXED != 0 {
                crate::mappings::replaced(p, len);
            }
            p
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    if fdtable::is_iris(fd) {
        // No page cache to advise.
        return 0;
    }
    // SAFETY: forwarding.
    unsafe { real::posix_fadvise(fd, off, len, advice) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    if fdtable::is_iris(fd) {
        return 0;
    }
    // SAFETY: forwarding.
    unsafe { real::posix_fadvise64(fd, off, len, advice) }
}

/// fallocate on an Iris file: mode 0 (with or without KEEP_SIZE) checks that the volume has
/// room for the range's holes (ENOSPC if not) and fills those inside the file with zeroed
/// blocks (see `Fs::allocate`); PUNCH_HOLE (with KEEP_SIZE) and ZERO_RANGE as Linux does them;
/// other modes EOPNOTSUPP.
fn fallocate_iris(file: &OpenFile, mode: c_int, off: i64, len: i64) -> Result<(), Errno> {
    if off < 0 || len <= 0 {
        return Err(Errno::EINVAL);
    }
    if !file.writable() {
        return Err(Errno::EBADF);
    }
    let _b = Busy::enter();
    let fs = fs_or_eio()?;
    if let Some(fd) = shadow_of(fs, file.ino) {
        // The bytes live in a shadow file (see `shadow`): the kernel's fallocate, there.
        crate::shadow::note_changed(file.ino);
        // SAFETY: the shadow's descriptor, the caller's mode and range.
        return match unsafe { real::fallocate(fd, mode, off, len) } {
            0 => Ok(()),
            _ => Err(crate::shadow::errno()),
        };
    }
    let (off, len) = (off as u64, len as u64);
    let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    match mode & !libc::FALLOC_FL_KEEP_SIZE {
        0 => fs.allocate(file.ino, off, len, keep),
        libc::FALLOC_FL_PUNCH_HOLE if keep => fs.zero_range(file.ino, off, len, true),
        libc::FALLOC_FL_PUNCH_HOLE => Err(Errno::EOPNOTSUPP),
        libc::FALLOC_FL_ZERO_RANGE => fs.zero_range(file.ino, off, len, keep),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => match fallocate_iris(&f, mode, off, len) {
            Ok(()) => 0,
            Err(e) => fail(e.0),
        },
        // SAFETY: forwarding.
        None => unsafe { real::fallocate(fd, mode, off, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => match fallocate_iris(&f, mode, off, len) {
            Ok(()) => 0,
            Err(e) => fail(e.0),
        },
        // SAFETY: forwarding.
        None => unsafe { real::fallocate64(fd, mode, off, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    match fdtable::get(fd) {
        // posix_fallocate returns the error number instead of setting errno.
        Some(f) => fallocate_iris(&f, 0, off, len).err().map_or(0, |e| e.0),
        // SAFETY: forwarding.
        None => unsafe { real::posix_fallocate(fd, off, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => fallocate_iris(&f, 0, off, len).err().map_or(0, |e| e.0),
        // SAFETY: forwarding.
        None => unsafe { real::posix_fallocate64(fd, off, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => path_op(|fs| {
            let c = cred();
            let ino = fs.resolve(&c, start, &path, true)?;
            fs.chmod(&c, ino, mode)
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::chmod(path, mode) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => path_op(|fs| fs.chmod(&cred(), f.ino, mode)),
        // SAFETY: forwarding.
        None => unsafe { real::fchmod(fd, mode) },
    }
}

fn chown_path(start: u64, path: &[u8], uid: u32, gid: u32, follow: bool) -> c_int {
    path_op(|fs| {
        let c = cred();
        let ino = fs.resolve(&c, start, path, follow)?;
        fs.chown(&c, ino, uid, gid)
    })
}

#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => chown_path(start, &path, uid, gid, true),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::chown(path, uid, gid) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => chown_path(start, &path, uid, gid, false),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::lchown(path, uid, gid) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    match fdtable::get(fd) {
        Some(f) => path_op(|fs| fs.chown(&cred(), f.ino, uid, gid)),
        // SAFETY: forwarding.
        None => unsafe { real::fchown(fd, uid, gid) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn symlink(target_path: *const c_char, link: *const c_char) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(link) } {
        Target::Iris { start, path } => {
            if target_path.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: a valid C string from the caller.
            let t = unsafe { std::ffi::CStr::from_ptr(target_path) }
                .to_bytes()
                .to_vec();
            path_op(|fs| fs.symlink(&cred(), &t, start, &path).map(|_| ()))
        }
        // SAFETY: forwarding.
        Target::Host => unsafe { real::symlink(target_path, link) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { start, path } => {
            let _b = Busy::enter();
            match fs_or_eio().and_then(|fs| fs.readlink(&cred(), start, &path)) {
                // SAFETY: the caller's buffer of `n` bytes.
                Ok(t) => unsafe { give_link(&t, buf, n) },
                Err(e) => fail(e.0),
            }
        }
        // SAFETY: the caller's path and buffer.
        Target::Host => match unsafe { readlink_fd_link(path, buf, n) } {
            Some(r) => r,
            // SAFETY: forwarding.
            None => unsafe { real::readlink(path, buf, n) },
        },
    }
}

/// What `readlink` of the kernel's link to an Iris fd (`/proc/self/fd/N`, `/dev/fd/N`: see
/// `route::fd_link`) names: the real path (symlinks followed) of the path the file was opened
/// by, while it still names the file, with " (deleted)" once the file has no name left, as
/// Linux says. `None` (the kernel answers, naming the placeholder) when that is not known: a
/// file opened relative to a directory fd of unknown path, or renamed since.
///
/// # Safety
/// `path` is null or a valid C string; `buf` holds `n` bytes.
pub(crate) unsafe fn readlink_fd_link(
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> Option<ssize_t> {
    // SAFETY: forwarded contract.
    let f = unsafe { crate::route::fd_link(path) }?;
    let text = fd_link_text(&f)?;
    // SAFETY: the caller's buffer of `n` bytes.
    Some(unsafe { give_link(&text, buf, n) })
}

/// Give link text `t` as readlink(2) does: cut to the caller's buffer of `n` bytes, not
/// terminated; EINVAL for an empty buffer, EFAULT for none.
///
/// # Safety
/// `buf` is null or holds `n` writable bytes.
pub(crate) unsafe fn give_link(t: &[u8], buf: *mut c_char, n: size_t) -> ssize_t {
    if n == 0 {
        return fail(libc::EINVAL);
    }
    if buf.is_null() {
        return fail(libc::EFAULT);
    }
    let k = t.len().min(n);
    // SAFETY: `buf` holds n >= k bytes (the caller's promise), and `t` is ours.
    unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast::<u8>(), k) };
    k as ssize_t
}

/// The path an open Iris file is known by now (see [`readlink_fd_link`]).
pub(crate) fn fd_link_text(f: &OpenFile) -> Option<Vec<u8>> {
    let opened_by = f.path.as_ref()?;
    {
        let _b = Busy::enter();
        let fs = state::fs()?;
        if fs.getattr(f.ino).ok()?.nlink == 0 {
            return Some([opened_by.as_slice(), b" (deleted)"].concat());
        }
    }
    // Linux names the file by its real path (symlinks followed), which must still name it.
    let c = std::ffi::CString::new(opened_by.clone()).ok()?;
    let mut real_path = [0 as c_char; libc::PATH_MAX as usize];
    // SAFETY: a valid C string and a PATH_MAX buffer, as realpath requires.
    let got = unsafe { crate::more::realpath(c.as_ptr(), real_path.as_mut_ptr()) };
    if got.is_null() {
        return None;
    }
    // SAFETY: realpath wrote a NUL-terminated path into the buffer.
    let canonical = unsafe { std::ffi::CStr::from_ptr(real_path.as_ptr()) };
    // SAFETY: a valid C string.
    let Target::Iris { start, path } = (unsafe { target(canonical.as_ptr()) }) else {
        return None;
    };
    let _b = Busy::enter();
    let fs = state::fs()?;
    (fs.resolve(&cred(), start, &path, false).ok()? == f.ino).then(|| canonical.to_bytes().to_vec())
}

#[no_mangle]
pub unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: caller's paths.
    match unsafe { (target(a), target(b)) } {
        (
            Target::Iris {
                start: sa,
                path: pa,
            },
            Target::Iris {
                start: sb,
                path: pb,
            },
        ) => path_op(|fs| fs.link(&cred(), sa, &pa, sb, &pb, false)),
        // SAFETY: forwarding.
        (Target::Host, Target::Host) => unsafe { real::link(a, b) },
        _ => fail(libc::EXDEV),
    }
}

/// utimensat semantics on an inode: UTIME_NOW / UTIME_OMIT handled.
///
/// # Safety
/// `times` NULL or two valid timespecs.
unsafe fn utimens_ino(fs: &Fs, ino: u64, times: *const libc::timespec) -> Result<(), Errno> {
    let now = iris_now();
    let (a, m, explicit) = if times.is_null() {
        (Some(now), Some(now), false)
    } else {
        // SAFETY: per the contract.
        let (ta, tm) = unsafe { (*times, *times.add(1)) };
        let conv = |t: libc::timespec| match t.tv_nsec {
            libc::UTIME_OMIT => None,
            libc::UTIME_NOW => Some(now),
            ns => Some(t.tv_sec * 1_000_000_000 + ns),
        };
        let explicit = [ta, tm]
            .iter()
            .any(|t| t.tv_nsec != libc::UTIME_NOW && t.tv_nsec != libc::UTIME_OMIT);
        (conv(ta), conv(tm), explicit)
    };
    fs.utimens(&cred(), ino, a, m, explicit)
}

fn iris_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() {
        if let Some(f) = fdtable::get(dirfd) {
            // SAFETY: caller's times.
            return path_op(|fs| unsafe { utimens_ino(fs, f.ino, times) });
        }
        // SAFETY: forwarding.
        return unsafe { real::utimensat(dirfd, path, times, flags) };
    }
    // SAFETY: caller's path.
    match unsafe { target_at(dirfd, path) } {
        Target::Iris { start, path } => path_op(|fs| {
            let ino = fs.resolve(
                &cred(),
                start,
                &path,
                flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            )?;
            // SAFETY: caller's times.
            unsafe { utimens_ino(fs, ino, times) }
        }),
        // SAFETY: forwarding.
        Target::Host => unsafe { real::utimensat(dirfd, path, times, flags) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    match fdtable::get(fd) {
        // SAFETY: caller's times.
        Some(f) => path_op(|fs| unsafe { utimens_ino(fs, f.ino, times) }),
        // SAFETY: forwarding.
        None => unsafe { real::futimens(fd, times) },
    }
}

/// Copy up to `n` bytes between two fds, at least one of them Iris's, through a bounce buffer.
/// `in_off`/`out_off` NULL means "use and advance the fd's offset".
///
/// # Safety
/// Offsets NULL or valid.
unsafe fn copy_between(
    fd_in: c_int,
    in_off: *mut i64,
    fd_out: c_int,
    out_off: *mut i64,
    n: size_t,
) -> ssize_t {
    // SAFETY: the caller's offsets, as this function's.
    crate::bounce::with(n.min(1 << 20), |buf| unsafe {
        copy_through(fd_in, in_off, fd_out, out_off, buf)
    })
}

/// [`copy_between`] through `buf` (its bytes are read before they are written out).
///
/// # Safety
/// Offsets NULL or valid.
unsafe fn copy_through(
    fd_in: c_int,
    in_off: *mut i64,
    fd_out: c_int,
    out_off: *mut i64,
    buf: &mut [u8],
) -> ssize_t {
    let chunk = buf.len();
    // SAFETY: reading into our own buffer through the interposed calls (Iris or kernel).
    let got = unsafe {
        if in_off.is_null() {
            read(fd_in, buf.as_mut_ptr().cast(), chunk)
        } else {
            pread64(fd_in, buf.as_mut_ptr().cast(), chunk, *in_off)
        }
    };
    if got <= 0 {
        return got;
    }
    let mut done = 0usize;
    while done < got as usize {
        // SAFETY: writing from our buffer.
        let w = unsafe {
            if out_off.is_null() {
                write(fd_out, buf[done..].as_ptr().cast(), got as usize - done)
            } else {
                pwrite64(
                    fd_out,
                    buf[done..].as_ptr().cast(),
                    got as usize - done,
                    *out_off + done as i64,
                )
            }
        };
        if w <= 0 {
            if done == 0 {
                return w;
            }
            break;
        }
        done += w as usize;
    }
    // SAFETY: caller's offsets.
    unsafe {
        if !in_off.is_null() {
            *in_off += done as i64;
        } else if done < got as usize {
            // Give back what was read but not written.
            lseek64(fd_in, done as i64 - got as i64, libc::SEEK_CUR);
        }
        if !out_off.is_null() {
            *out_off += done as i64;
        }
    }
    done as ssize_t
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if fdtable::is_iris(fd_in) || fdtable::is_iris(fd_out) {
        if flags != 0 {
            return fail(libc::EINVAL);
        }
        // SAFETY: caller's offsets.
        return unsafe { copy_between(fd_in, off_in, fd_out, off_out, n) };
    }
    // SAFETY: forwarding.
    unsafe { real::copy_file_range(fd_in, off_in, fd_out, off_out, n, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if fdtable::is_iris(inp) || fdtable::is_iris(out) {
        // SAFETY: caller's offset.
        return unsafe { copy_between(inp, off, out, std::ptr::null_mut(), n) };
    }
    // SAFETY: forwarding.
    unsafe { real::sendfile(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if fdtable::is_iris(inp) || fdtable::is_iris(out) {
        // SAFETY: caller's offset.
        return unsafe { copy_between(inp, off, out, std::ptr::null_mut(), n) };
    }
    // SAFETY: forwarding.
    unsafe { real::sendfile64(out, inp, off, n) }
}

/// `RWF_*` flags an Iris preadv2/pwritev2 honours.
const RWF_KNOWN: c_int =
    libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_NOWAIT | libc::RWF_APPEND;

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::preadv2(fd, iov, n, off, flags) };
    };
    if flags & !RWF_KNOWN != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: caller's iovecs.
    let Some(total) = (unsafe { iov_total(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    crate::bounce::with(total, |buf| {
        // Offset -1 means the file offset, as for readv.
        let r = if off == -1 {
            read_at_offset(&f, buf)
        } else {
            pread_file(&f, buf, off)
        };
        if r > 0 {
            // SAFETY: caller's iovecs.
            unsafe { scatter(iov, n, &buf[..r as usize]) };
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let Some(f) = fdtable::get(fd) else {
        // SAFETY: forwarding.
        return unsafe { real::pwritev2(fd, iov, n, off, flags) };
    };
    if flags & !RWF_KNOWN != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: caller's iovecs.
    let Some(data) = (unsafe { gather(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    let r = if off == -1 {
        write_at_offset(&f, &data)
    } else if flags & libc::RWF_APPEND != 0 {
        let _b = Busy::enter();
        match fs_or_eio().and_then(|fs| file_size(fs, f.ino)) {
            Ok(end) => pwrite_file(&f, &data, end as i64),
            Err(e) => fail(e.0),
        }
    } else {
        pwrite_file(&f, &data, off)
    };
    if r >= 0 && flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 {
        let s = path_op(|fs| fs.sync_inode(f.ino));
        if s < 0 {
            return s as ssize_t;
        }
    }
    r
}

/// sync(2): commit Iris too, then the kernel's.
#[no_mangle]
pub unsafe extern "C" fn sync() {
    if let Some(fs) = state::fs_if_open() {
        let _b = Busy::enter();
        let _ = fs.sync();
    }
    // SAFETY: forwarding.
    unsafe { real::sync() }
}
