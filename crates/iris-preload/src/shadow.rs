//! Shared writable mappings of Iris files. The kernel can only share pages of a file it knows,
//! so while a process maps an Iris file `MAP_SHARED`, the file's bytes live in a host "shadow"
//! file in /dev/shm (one per volume and inode) and the inode is flagged as shadowed: every
//! process then serves read, write, size and truncate of that file from the shadow, so mappings
//! and read/write stay coherent across processes. The bytes go back into the volume at fsync,
//! fdatasync and close (then a commit makes them durable); the shadow goes when the file is
//! unlinked, when the volume is rolled back or rebuilt from its superblocks, and when the volume
//! file is gone (swept by the next process that makes a shadow). A shadow lost in a reboot
//! leaves the flag behind: it is cleared on next use and the last written-back bytes serve.

use iris_fs::ForkSafeMutex as Mutex;
use std::ffi::CString;

use std::sync::atomic::{AtomicBool, Ordering};

use iris_fs::{host_files, Errno, Fs};
use iris_media::OwnFd;

use crate::real;

/// Shadow fds this process holds, by inode (kept out of the program's way, see `own_fd`), and
/// whether this process may have changed the shadow's bytes: a write or truncate through it, or
/// a shared mapping of an fd open for writing (see [`note_changed`]).
static OPEN: Mutex<Vec<(u64, OwnFd, bool)>> = Mutex::new(Vec::new());

/// Hold the table of shadows across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(OPEN.lock());
}

/// Release what [`lock_for_fork`] took (parent and child after the fork).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only called after lock_for_fork, whose guard was forgotten.
    unsafe { OPEN.force_unlock() };
}

fn path(fs: &Fs, ino: u64) -> CString {
    CString::new(host_files::shadow_path(fs.store().volume_id(), ino)).unwrap_or_default()
}

/// Whether this process recorded its volume and swept the shadows of gone volumes (see
/// [`before_first_shadow`]).
static NOTED: AtomicBool = AtomicBool::new(false);

/// Before this process makes its first shadow (or host copy of a library, see `loadable`):
/// record where the volume lives, and remove the shadows and copies of recorded volumes that
/// are gone (see `iris_fs::host_files`). Once per process: making them is rare, and each is as
/// big as its file.
pub(crate) fn before_first_shadow(fs: &Fs) {
    if NOTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let _b = crate::state::Busy::enter();
    let id = fs.store().volume_id();
    let _ = host_files::note_volume(id, &crate::state::config().volume);
    host_files::sweep_gone_volumes(id);
}

/// The error the last failed system call of this thread set.
pub(crate) fn errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

fn cached(ino: u64) -> Option<i32> {
    OPEN.lock()
        .iter()
        .find(|(i, _, _)| *i == ino)
        .map(|(_, fd, _)| fd.raw())
}

/// This process may have changed the shadow of `ino` (opened by [`open`] before): its closes
/// write it back (see [`write_back_if_changed`]).
pub(crate) fn note_changed(ino: u64) {
    if let Some(e) = OPEN.lock().iter_mut().find(|(i, _, _)| *i == ino) {
        e.2 = true;
    }
}

/// Whether this process may have changed the shadow of `ino`.
pub(crate) fn changed_here(ino: u64) -> bool {
    OPEN.lock()
        .iter()
        .any(|(i, _, changed)| *i == ino && *changed)
}

/// At exit: write back every shadow this process may have changed (a program that ends
/// without unmapping or closing leaves its changes in the shadow only).
pub(crate) fn write_back_all_changed(fs: &Fs) {
    let changed: Vec<u64> = OPEN
        .lock()
        .iter()
        .filter(|(_, _, changed)| *changed)
        .map(|(ino, _, _)| *ino)
        .collect();
    for ino in changed {
        let _ = write_back(fs, ino);
    }
}

/// [`write_back`] if this process may have changed the shadow: a process that only read the
/// file (git's mapped packs and index, a reader's close) leaves the volume alone, as a reader's
/// close does on a kernel file system; the processes that change the shadow put it back at
/// their closes, `msync`, `fsync` and last unmapping, and every process reads the shadow
/// meanwhile.
pub(crate) fn write_back_if_changed(fs: &Fs, ino: u64) -> Result<(), Errno> {
    if changed_here(ino) {
        write_back(fs, ino)
    } else {
        Ok(())
    }
}

/// The shadow fd of `ino`, creating the shadow from the file's bytes if `create`. Without
/// `create`, a missing shadow clears a stale flag and reports ENOENT (serve from the volume).
pub(crate) fn open(fs: &Fs, ino: u64, create: bool) -> Result<i32, Errno> {
    if let Some(fd) = cached(ino) {
        return Ok(fd);
    }
    let p = path(fs, ino);
    // SAFETY: a valid C string; libc's own open.
    let mut fd = unsafe { real::open(p.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        if !create {
            let _ = fs.set_shadowed(ino, false);
            return Err(Errno::ENOENT);
        }
        before_first_shadow(fs);
        // SAFETY: as above, creating exclusively so one process fills it.
        fd = unsafe {
            real::open(
                p.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 {
            if let Err(e) = fill(fs, ino, fd) {
                // SAFETY: undoing our own creation.
                unsafe {
                    real::close(fd);
                    libc::unlink(p.as_ptr());
                }
                return Err(e);
            }
            fs.set_shadowed(ino, true)?;
        } else {
            // Another process created it meanwhile.
            // SAFETY: as above.
            fd = unsafe { real::open(p.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
            if fd < 0 {
                return Err(errno());
            }
        }
    }
    let own = OwnFd::adopt(fd).ok_or_else(errno)?;
    let fd = own.raw();
    OPEN.lock().push((ino, own, false));
    Ok(fd)
}

/// Copy the file's bytes from the volume into a new shadow.
fn fill(fs: &Fs, ino: u64, fd: i32) -> Result<(), Errno> {
    let size = fs.getattr(ino)?.size;
    // SAFETY: sizing our own new file.
    if unsafe { real::ftruncate(fd, size as i64) } != 0 {
        return Err(errno());
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let n = fs.read(ino, off, &mut buf)?;
        if n == 0 {
            break;
        }
        // SAFETY: writing from our buffer to our own file.
        if unsafe { real::pwrite(fd, buf.as_ptr().cast(), n, off as i64) } != n as isize {
            return Err(errno());
        }
        off += n as u64;
    }
    Ok(())
}

/// Size of the shadow of `ino`.
pub(crate) fn size(fd: i32) -> Result<u64, Errno> {
    // SAFETY: all-zero is a valid stat; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and buffer; libc's own fstat.
    if unsafe { real::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st.st_size as u64)
}

/// Bytes compared, and written when they differ, as one piece by [`write_back`].
const PIECE: usize = 4096;

/// Copy the shadow's bytes back into the volume (before fsync's commit, and at close): only
/// the pieces that differ from the volume's, and the size only if it differs. A mapping that
/// was only read, or a write-back with nothing new since the last, changes nothing, and so
/// leaves the file's modification and change times alone (git mmaps every file it hashes:
/// each close moved both, and every `git status` after found every file changed and hashed it
/// again).
pub(crate) fn write_back(fs: &Fs, ino: u64) -> Result<(), Errno> {
    let fd = match open(fs, ino, false) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let size = size(fd)?;
    if fs.getattr(ino)?.size != size {
        fs.truncate(ino, size)?;
    }
    let mut shadow = vec![0u8; 1 << 20];
    let mut volume = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < size {
        let want = shadow.len().min((size - off) as usize);
        // SAFETY: reading our own shadow into our buffer.
        let n = unsafe { real::pread(fd, shadow.as_mut_ptr().cast(), want, off as i64) };
        if n <= 0 {
            break;
        }
        let n = n as usize;
        let got = fs.read(ino, off, &mut volume[..n])?;
        // Runs of differing pieces, each written as one.
        let mut run: Option<usize> = None;
        for at in (0..n).step_by(PIECE).chain(std::iter::once(n)) {
            let end = (at + PIECE).min(n);
            let differs = at < n && (end > got || shadow[at..end] != volume[at..end]);
            match (run, differs) {
                (None, true) => run = Some(at),
                (Some(from), false) => {
                    fs.write(ino, off + from as u64, &shadow[from..at])?;
                    run = None;
                }
                _ => {}
            }
        }
        off += n as u64;
    }
    Ok(())
}

/// The file is gone: remove its shadow (mappings keep their pages).
pub(crate) fn remove(fs: &Fs, ino: u64) {
    {
        let mut v = OPEN.lock();
        if let Some(at) = v.iter().position(|(i, _, _)| *i == ino) {
            // Closes our shadow fd.
            drop(v.remove(at));
        }
    }
    let p = path(fs, ino);
    // SAFETY: a valid C string.
    unsafe { libc::unlink(p.as_ptr()) };
}
