//! Shared libraries stored in Iris (a Python extension module in a venv on Iris, a plugin a
//! build produced): the dynamic loader opens them with the kernel, which knows no Iris path, so
//! `dlopen` of an Iris path loads a host copy instead. Copies live in /dev/shm under the
//! volume's library directory (`iris_fs::host_files::library_dir`) at the file's Iris path, so
//! a copy stands beside the copies of its siblings; a copy is reused while its size and
//! modification time match the Iris file's, else made again (written aside and renamed into
//! place, so concurrent loaders never map half a copy). The libraries its search path finds in
//! Iris are copied too (`dependency_dirs`): those it names by `$ORIGIN` are then where the
//! loader looks, beside the copy; those it names by an absolute Iris path are not found (the
//! loader reads `LD_LIBRARY_PATH` only at start-up).

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;

use iris_fs::{Fs, Resolved};
use libc::{c_char, c_int, c_void};

use crate::real;
use crate::route::{self, Target};
use crate::state;

/// Bytes copied at a time.
const COPY_BYTES: usize = 1 << 20;

/// What to hand the loader for `filename`: a host copy of an Iris library, the host file a
/// symlink out of Iris names, or `None` to load `filename` as given (a host path, or a bare
/// name the loader searches for). `Err` with an errno when the Iris file cannot be copied.
///
/// # Safety
/// `filename` is NULL or a NUL-terminated string.
unsafe fn host_path(filename: *const c_char) -> Result<Option<CString>, c_int> {
    if filename.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let given = unsafe { CStr::from_ptr(filename) }.to_bytes();
    if !given.contains(&b'/') {
        return Ok(None);
    }
    // SAFETY: as above.
    let Target::Iris { start, path } = (unsafe { route::target(filename) }) else {
        return Ok(None);
    };
    let fs = state::fs().ok_or(libc::EIO)?;
    let ino = match fs
        .resolve_or_leave(&state::cred(), start, &path, true)
        .map_err(|e| e.0)?
    {
        Resolved::Host(host) => return CString::new(host).map(Some).map_err(|_| libc::ENOENT),
        Resolved::Inode(ino) => ino,
    };
    let inode = regular_file(fs, ino, iris_fs::R_OK, libc::EISDIR)?;
    let abs = crate::cwd::absolute(given).ok_or(libc::ENOENT)?;
    let Ok(copy) = host_copy(fs, ino, &abs) else {
        // No usable copy (another user's, a full /dev/shm): a memfd of its bytes.
        let bytes = read_all(fs, ino, inode.size)?;
        let fd = crate::launch::image(&bytes)?;
        // (Kept open: the loader maps it, and names the library by this path from now on.)
        return CString::new(format!("/proc/self/fd/{fd}"))
            .map(Some)
            .map_err(|_| libc::ENOENT);
    };
    // Its own libraries from Iris ($ORIGIN: next to the copy, where the loader will look).
    let origin = &abs[..abs.iter().rposition(|b| *b == b'/').unwrap_or(0)];
    if let Ok(bytes) = read_all(fs, ino, inode.size) {
        dependency_dirs(fs, &bytes, origin);
    }
    Ok(Some(copy))
}

/// The host copy of Iris file `ino`, whose absolute path (mount prefix and all) is `abs`: made
/// (or made again) unless the one there has the file's size and modification time.
pub(crate) fn host_copy(fs: &Fs, ino: u64, abs: &[u8]) -> Result<CString, c_int> {
    let inode = fs.getattr(ino).map_err(|e| e.0)?;
    let mut copy = iris_fs::host_files::library_dir(fs.store().volume_id()).into_bytes();
    copy.extend_from_slice(abs);
    let copy = CString::new(copy).map_err(|_| libc::ENOENT)?;
    // (Host calls from here on: past the interposer.)
    let _busy = state::Busy::enter();
    // SAFETY: a NUL-terminated path; libc's access.
    let readable = || unsafe { real::access(copy.as_ptr(), libc::R_OK) } == 0;
    if is_current(&copy, inode.size, inode.mtime_ns) && !readable() {
        return Err(libc::EACCES); // another user's copy
    }
    if !is_current(&copy, inode.size, inode.mtime_ns) {
        crate::shadow::before_first_shadow(fs);
        make_copy(fs, ino, &copy, inode.size, inode.mtime_ns)?;
    }
    Ok(copy)
}

/// The whole of Iris file `ino` (`size` bytes).
pub(crate) fn read_all(fs: &Fs, ino: u64, size: u64) -> Result<Vec<u8>, c_int> {
    let mut out = vec![0u8; usize::try_from(size).map_err(|_| libc::EFBIG)?];
    let mut off = 0;
    while off < out.len() {
        let n = fs.read(ino, off as u64, &mut out[off..]).map_err(|e| e.0)?;
        if n == 0 {
            out.truncate(off);
            break;
        }
        off += n;
    }
    Ok(out)
}

/// Most libraries copied for one program (its dependencies' dependencies included).
const MAX_LIBRARIES: usize = 256;

/// The host directories holding copies of the libraries the ELF object `elf` (whose Iris
/// directory is `origin`, absolute) needs from Iris: those its search path (`DT_RPATH`,
/// `DT_RUNPATH`, `$ORIGIN` replaced) finds in Iris directories, and theirs in turn. A program
/// stored in Iris runs with them first in `LD_LIBRARY_PATH`: the loader cannot look in Iris.
pub(crate) fn dependency_dirs(fs: &Fs, elf: &[u8], origin: &[u8]) -> Vec<Vec<u8>> {
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![(crate::elf_deps::dynamic(elf), origin.to_vec())];
    while let Some((dynamic, origin)) = todo.pop() {
        let Some(d) = dynamic else { continue };
        let search: Vec<Vec<u8>> = d
            .search
            .iter()
            .map(|s| crate::cwd::normalize(&crate::elf_deps::with_origin(s, &origin)))
            .filter(|s| route::strip_prefix(s).is_some())
            .collect();
        for name in d.needed.iter().filter(|n| !n.contains(&b'/')) {
            for dir in &search {
                let mut path = dir.clone();
                path.push(b'/');
                path.extend_from_slice(name);
                let Some(rel) = route::strip_prefix(&path) else {
                    continue;
                };
                let Ok(ino) = fs.resolve(&state::cred(), iris_fs::ROOT_INO, &rel, true) else {
                    continue;
                };
                if !seen.insert(ino) || seen.len() > MAX_LIBRARIES {
                    break;
                }
                let Ok(copy) = host_copy(fs, ino, &path) else {
                    break;
                };
                let copy = copy.as_bytes();
                let parent = copy[..copy.iter().rposition(|b| *b == b'/').unwrap_or(0)].to_vec();
                if !dirs.contains(&parent) {
                    dirs.push(parent);
                }
                let size = fs.getattr(ino).map_or(0, |i| i.size);
                if let Ok(bytes) = read_all(fs, ino, size) {
                    todo.push((crate::elf_deps::dynamic(&bytes), dir.clone()));
                }
                break;
            }
        }
    }
    dirs
}

/// Inode `ino` if it is a regular file the caller may use as `mask` says (`R_OK`, `X_OK`, as
/// the kernel checks them); `not_file` (the errno for anything else) or the check's errno.
pub(crate) fn regular_file(
    fs: &Fs,
    ino: u64,
    mask: u32,
    not_file: c_int,
) -> Result<iris_fs::Inode, c_int> {
    let inode = fs.getattr(ino).map_err(|e| e.0)?;
    if !inode.is_file() {
        return Err(not_file);
    }
    state::cred().check(&inode, mask).map_err(|e| e.0)?;
    Ok(inode)
}

/// Whether the host file `copy` has `size` bytes and modification time `mtime_ns`.
fn is_current(copy: &CStr, size: u64, mtime_ns: i64) -> bool {
    // SAFETY: all-zero is a valid stat; libc's stat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and our buffer.
    let found = unsafe { real::stat(copy.as_ptr(), &mut st) } == 0;
    found && st.st_size as u64 == size && st.st_mtime * 1_000_000_000 + st.st_mtime_nsec == mtime_ns
}

/// Copy Iris file `ino` (`size` bytes, modified at `mtime_ns`) to the host path `copy`.
fn make_copy(fs: &Fs, ino: u64, copy: &CStr, size: u64, mtime_ns: i64) -> Result<(), c_int> {
    let path = copy.to_bytes();
    let dir = &path[..path.iter().rposition(|b| *b == b'/').unwrap_or(0)];
    std::fs::create_dir_all(std::ffi::OsStr::from_bytes(dir))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let mut tmp = path.to_vec();
    tmp.extend_from_slice(format!(".{}.tmp", std::process::id()).as_bytes());
    let tmp = CString::new(tmp).map_err(|_| libc::ENOENT)?;
    // SAFETY: a NUL-terminated path of our own; libc's open.
    let fd = unsafe {
        real::open(
            tmp.as_ptr(),
            libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC,
            // The caller's alone: the Iris file's own mode may keep others from reading it.
            0o700,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    let filled = fill(fs, ino, fd, size).and_then(|()| {
        let times = [libc::timespec {
            tv_sec: mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
        }; 2];
        // SAFETY: our own fd and a live array of two times.
        if unsafe { libc::futimens(fd, times.as_ptr()) } != 0 {
            return Err(last_errno());
        }
        Ok(())
    });
    // SAFETY: closing our own fd.
    unsafe { real::close(fd) };
    // SAFETY: NUL-terminated paths of our own.
    let placed = filled.and_then(|()| {
        if unsafe { libc::rename(tmp.as_ptr(), copy.as_ptr()) } != 0 {
            return Err(last_errno());
        }
        Ok(())
    });
    if placed.is_err() {
        // SAFETY: as above.
        unsafe { libc::unlink(tmp.as_ptr()) };
    }
    placed
}

/// Write the `size` bytes of Iris file `ino` into host fd `fd`.
fn fill(fs: &Fs, ino: u64, fd: c_int, size: u64) -> Result<(), c_int> {
    let mut buf = vec![0u8; COPY_BYTES.min(size as usize).max(1)];
    let mut off = 0u64;
    while off < size {
        let n = fs.read(ino, off, &mut buf).map_err(|e| e.0)?;
        if n == 0 {
            break;
        }
        write_all(fd, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// Write all of `bytes` to host fd `fd` (libc's write, short writes continued).
pub(crate) fn write_all(fd: c_int, bytes: &[u8]) -> Result<(), c_int> {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writing from the caller's bytes to a host fd.
        let w = unsafe { real::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if w < 0 {
            return Err(last_errno());
        }
        done += w as usize;
    }
    Ok(())
}

/// The errno of the libc call that just failed.
pub(crate) fn last_errno() -> c_int {
    crate::errno::get()
}

#[no_mangle]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    // SAFETY: the caller's file name.
    match unsafe { host_path(filename) } {
        // SAFETY: forwarding the caller's arguments.
        Ok(None) => unsafe { real::dlopen(filename, flags) },
        // SAFETY: a NUL-terminated path of our own.
        Ok(Some(host)) => unsafe { real::dlopen(host.as_ptr(), flags) },
        Err(e) => {
            // dlerror reports what the loader last failed at: make it fail the same way on
            // the path as given, which it cannot open either.
            crate::errno::set(e);
            // SAFETY: as above (the loader's own message names the path).
            unsafe { real::dlopen(filename, flags) }
        }
    }
}
