//! Which files are open in any process on the volume. A file unlinked while open stays
//! readable until its last close (POSIX), and that close may come in another process than the
//! unlink: a log a program keeps open and `rm` or a rotation removes. Each process counts its
//! own opens (`Fs::retain`); across processes, each one holding a file open keeps a shared
//! (read) open-file-description lock on the byte at the file's inode number in a per-volume
//! file in /dev/shm, and asks for a write lock there (F_OFD_GETLK) to learn whether any other
//! process holds one. The kernel drops a process's locks when it ends however it ends, so a
//! file whose last holder was killed is seen as closed: the next process to open the volume
//! frees such orphans (`Fs::on_store`). Without /dev/shm every check answers "not open
//! elsewhere", as before this table.
//!
//! A forked child shares its parent's open file description, whose locks an unlock of the
//! child's would drop: the child opens its own and takes its locks again as soon as it can open
//! a file ([`Opens::renew`], when the interposer's fork handlers have released their locks), or
//! at its first use of the table. An exec that passes Iris fds on passes the description too
//! (the interposer names it in the environment): the new image takes it as its own
//! ([`Opens::adopt`]), takes its inherited files again, then lets go of the others
//! ([`Opens::settle`]), so the inherited files are never unheld. A spawned child (a new
//! process) takes its locks as it adopts its fds: a file whose only other holder closes it
//! before that may be freed by an unlink made meanwhile.

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{IntoRawFd, RawFd};

use iris_media::OwnFd;

use crate::ForkSafeMutex as Mutex;

/// Where the per-volume files live (with the lock files of the interposer).
const DIR: &str = "/dev/shm";

/// The per-volume table of open files.
pub(crate) struct Opens {
    path: String,
    file: Mutex<Table>,
}

/// This process's side of the table.
pub(crate) struct Table {
    /// The open file description holding this process's locks.
    fd: Option<OwnFd>,
    /// Whether `fd` is this process's to use: false in a forked child until it replaces its
    /// parent's description (a fork's child handler cannot open files: the interposer's locks
    /// are held). (The file is opened with the volume, not at the first use: the descriptor
    /// takes one of the program's fd numbers, and it should not take it later, in the middle of
    /// the program's run, where a program that counts its free numbers would see one vanish.)
    ready: bool,
    /// The inodes this process holds (what a forked child must lock again).
    held: std::collections::HashSet<u64>,
}

impl Table {
    /// The descriptor to lock through, replacing one inherited from the parent first.
    fn fd(&mut self, path: &str) -> Option<RawFd> {
        if !self.ready {
            self.ready = true;
            // The parent's shared flock keeps the file named meanwhile: no need to look.
            self.fd = open_file(path, false);
            if let Some(fd) = self.fd.as_ref() {
                for &ino in &self.held {
                    set_lock(fd.raw(), ino, libc::F_RDLCK);
                }
            }
        }
        self.fd.as_ref().map(OwnFd::raw)
    }
}

impl Opens {
    /// The table of volume `volume_id` (its file created if missing; none if it cannot be).
    pub(crate) fn open(volume_id: u64) -> Opens {
        let path = format!("{DIR}/iris-opens-{volume_id:016x}");
        let file = Mutex::new(Table {
            fd: open_file(&path, true),
            ready: true,
            held: std::collections::HashSet::new(),
        });
        Opens { path, file }
    }

    /// This process holds `ino` open.
    pub(crate) fn hold(&self, ino: u64) {
        let mut t = self.file.lock();
        if let Some(fd) = t.fd(&self.path) {
            set_lock(fd, ino, libc::F_RDLCK);
            t.held.insert(ino);
        }
    }

    /// This process no longer holds `ino` open.
    pub(crate) fn let_go(&self, ino: u64) {
        let mut t = self.file.lock();
        if let Some(fd) = t.fd(&self.path) {
            set_lock(fd, ino, libc::F_UNLCK);
            t.held.remove(&ino);
        }
    }

    /// Whether another process holds `ino` open.
    pub(crate) fn held_elsewhere(&self, ino: u64) -> bool {
        let Some(fd) = self.file.lock().fd(&self.path) else {
            return false;
        };
        // A write lock there would conflict with another description's read lock, and only
        // with that: this process's own do not count.
        lock_call(fd, libc::F_OFD_GETLK, libc::F_WRLCK, ino, 1)
            .is_some_and(|l| l.l_type != libc::F_UNLCK as libc::c_short)
    }

    /// In a forked child, before any other thread runs: the description is the parent's, and
    /// an unlock through it would drop the parent's locks. The next use opens the child's own
    /// and locks again what this process holds (nothing can be opened here: see [`Table`]).
    pub(crate) fn forked(&self) {
        self.file.lock().ready = false;
    }

    /// In a forked child once the interposer's own locks are free: replace the inherited
    /// description now (see [`Opens::forked`]), so that the parent's closes no longer speak for
    /// the files this child holds.
    pub(crate) fn renew(&self) {
        let _ = self.file.lock().fd(&self.path);
    }

    /// The number of this process's open of the table's file, to pass to the image an exec
    /// starts (see [`Opens::adopt`]).
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        let mut t = self.file.lock();
        t.fd(&self.path)
    }

    /// At the start of an image an exec started: take `fd`, the previous image's open of the
    /// table's file (checked to be this volume's), as this process's, so that the locks it
    /// held for the files the new image inherits were never let go. Then the new image takes
    /// its files again and [`Opens::settle`] lets go of the rest.
    pub(crate) fn adopt(&self, fd: RawFd) -> bool {
        // SAFETY: all-zero is a valid struct stat, which fstat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of a number the previous image named, into a live struct.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
        let named = std::fs::metadata(&self.path).ok();
        let same = ok
            && named.is_some_and(|n| {
                std::os::unix::fs::MetadataExt::ino(&n) == st.st_ino
                    && std::os::unix::fs::MetadataExt::dev(&n) == st.st_dev
            });
        if !same {
            return false;
        }
        let Some(own) = OwnFd::adopt(fd) else {
            return false;
        };
        let mut t = self.file.lock();
        t.fd = Some(own);
        t.ready = true;
        t.held.clear();
        true
    }

    /// After [`Opens::adopt`] and the new image's own opens (`keep`): let go of every other
    /// inode the previous image held (the files it had that this image did not inherit).
    pub(crate) fn settle(&self, keep: impl IntoIterator<Item = u64>) {
        let mut keep: Vec<u64> = keep.into_iter().collect();
        keep.sort_unstable();
        let mut t = self.file.lock();
        let Some(fd) = t.fd(&self.path) else {
            return;
        };
        let mut from = 0u64;
        for &k in &keep {
            if k > from {
                unlock_range(fd, from, k - from);
            }
            from = k + 1;
        }
        unlock_range(fd, from, 0);
        t.held = keep.into_iter().collect();
    }

    /// The lock of this table, across a fork (see `Fs::lock_for_fork`).
    pub(crate) fn file_lock(&self) -> &Mutex<Table> {
        &self.file
    }
}

impl Drop for Opens {
    /// The last user of the table's file removes it (no process holds a shared `flock` on it
    /// any more), so volumes' files do not pile up in /dev/shm.
    fn drop(&mut self) {
        let mut t = self.file.lock();
        if !t.ready {
            return; // the parent's description: its flock is the parent's mark
        }
        if let Some(fd) = t.fd.take() {
            // SAFETY: flock on a descriptor this table owns; LOCK_NB never waits.
            if unsafe { libc::flock(fd.raw(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Open the table's file at `path` (created if missing), as an own descriptor holding a shared
/// `flock` for as long as it lives (the mark of a user: see `Drop`). If the last user removed
/// the file between the open and the `flock`, a fresh one is opened under the same name
/// (looked at only when `check_named`).
fn open_file(path: &str, check_named: bool) -> Option<OwnFd> {
    for _ in 0..8 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o666)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .or_else(|_| std::fs::File::open(path))
            .ok()?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&file), libc::LOCK_SH) } != 0
        {
            return None;
        }
        if !check_named {
            return OwnFd::adopt(file.into_raw_fd());
        }
        let ours = file.metadata().ok()?;
        let named = std::fs::metadata(path).ok();
        if named.is_some_and(|n| {
            std::os::unix::fs::MetadataExt::ino(&n) == std::os::unix::fs::MetadataExt::ino(&ours)
                && std::os::unix::fs::MetadataExt::dev(&n)
                    == std::os::unix::fs::MetadataExt::dev(&ours)
        }) {
            return OwnFd::adopt(file.into_raw_fd());
        }
    }
    None
}

/// Clear this description's locks on `len` bytes from `start` (0: to the end).
fn unlock_range(fd: RawFd, start: u64, len: u64) {
    let _ = lock_call(fd, libc::F_OFD_SETLK, libc::F_UNLCK, start, len);
}

/// Set (or clear, with F_UNLCK) this description's lock on the byte at `ino`. A read lock
/// never waits for another read lock, and nothing here takes write locks, so F_OFD_SETLK does
/// not fail for a conflict.
fn set_lock(fd: RawFd, ino: u64, kind: libc::c_int) {
    let _ = lock_call(fd, libc::F_OFD_SETLK, kind, ino, 1);
}

/// `fcntl(fd, cmd, ...)` with a lock of `kind` on `len` bytes from `start` (0: to the end);
/// the lock as the kernel left it, or `None` if the call failed or the range does not fit.
fn lock_call(
    fd: RawFd,
    cmd: libc::c_int,
    kind: libc::c_int,
    start: u64,
    len: u64,
) -> Option<libc::flock> {
    let (Ok(start), Ok(len)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) else {
        return None;
    };
    // SAFETY: all-zero is a valid flock, filled below.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = start;
    l.l_len = len;
    // SAFETY: a valid descriptor and a live flock for the kernel to read and (GETLK) fill;
    // the OFD commands used here never wait.
    (unsafe { libc::fcntl(fd, cmd, &mut l) } == 0).then_some(l)
}
