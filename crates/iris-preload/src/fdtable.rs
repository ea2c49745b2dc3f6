//! The fd table: which file descriptors are Iris files. Every Iris fd is a real kernel fd (the
//! memfd carrying its description, see `description`) so numbers never collide with the
//! kernel's, and close, dup2, close-on-exec and inheritance keep working. The table maps the
//! number to this process's view of the open file description.
//!
//! Lookup is an atomic load and a hazard slot (see `hazard`): no lock, no system call on the
//! hot path, and a close racing a lookup of the same fd never frees what the lookup returns.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crate::description::Desc;

/// Highest fd number Iris can serve (higher ones get EMFILE at open).
pub(crate) const MAX_FDS: usize = 1 << 16;

/// An open file description, as this process sees it (the state lives in shared memory).
pub(crate) struct OpenFile {
    pub ino: u64,
    /// This process's block map of the inode (reads skip the tree for blocks seen before).
    pub cache: Arc<iris_fs::FileCache>,
    pub is_dir: bool,
    pub desc: Desc,
    /// Absolute path it was opened by (with the mount prefix), for fchdir and `readlink` of
    /// `/proc/self/fd/N` (kept in the description for processes that inherit it); unknown
    /// when opened relative to a directory fd whose own path is unknown.
    pub path: Option<Vec<u8>>,
    /// This description's open of the flock file (see `locks`), made at the first flock.
    pub flock_fd: crate::locks::LockFd,
    /// This description's open of the record-lock file for OFD locks (see `locks`), made at
    /// the first one: OFD locks belong to the description, not the process.
    pub ofd_fd: crate::locks::LockFd,
    /// Its inode's open count, released with it.
    pub _count: OpenCount,
}

/// An open file's hold on its inode's open count, given back when the open file's last
/// reference drops: whichever thread drops it, also a call that was still in flight when the
/// last fd closed (before, such a race skipped the release, and an unlinked file kept its
/// space until the process ended). (The lock-file fds close as their own fields drop.)
pub(crate) struct OpenCount(pub u64);

impl Drop for OpenCount {
    fn drop(&mut self) {
        if let Some(fs) = crate::state::fs_if_open() {
            let _b = crate::state::Busy::enter();
            let _ = fs.release(self.0);
        }
    }
}

impl OpenFile {
    pub fn flags(&self) -> i32 {
        self.desc.shared().flags.load(Ordering::Relaxed)
    }
    pub fn set_flags(&self, flags: i32) {
        self.desc.shared().flags.store(flags, Ordering::Relaxed)
    }
    pub fn readable(&self) -> bool {
        let acc = self.flags() & libc::O_ACCMODE;
        acc == libc::O_RDONLY || acc == libc::O_RDWR
    }
    pub fn writable(&self) -> bool {
        let acc = self.flags() & libc::O_ACCMODE;
        acc == libc::O_WRONLY || acc == libc::O_RDWR
    }
    pub fn append(&self) -> bool {
        self.flags() & libc::O_APPEND != 0
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<OpenFile> = AtomicPtr::new(std::ptr::null_mut());
static TABLE: [AtomicPtr<OpenFile>; MAX_FDS] = [EMPTY; MAX_FDS];

fn slot(fd: i32) -> Option<&'static AtomicPtr<OpenFile>> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// The open file behind `fd`, if it is an Iris fd.
#[inline]
pub(crate) fn get(fd: i32) -> Option<Arc<OpenFile>> {
    let entry = slot(fd)?;
    if entry.load(Ordering::Relaxed).is_null() {
        return None;
    }
    // Signals held back while the file is named in a slot (see `with`). Entries come from
    // `Arc::into_raw` in `install` and leave through `retire`.
    let _b = crate::state::Busy::enter();
    crate::hazard::acquire(entry)
}

/// `f` of the open file behind `fd`, if it is an Iris fd, without taking a reference (see
/// `hazard::with`: a close of `fd` in another thread waits until `f` returns). For reads and
/// writes; the thread is inside Iris (signals held back) from before the file is pinned, so no
/// handler of this thread can close it meanwhile and wait for itself.
#[inline]
pub(crate) fn with<R>(fd: i32, f: impl FnOnce(&OpenFile) -> R) -> Option<R> {
    let entry = slot(fd)?;
    if entry.load(Ordering::Relaxed).is_null() {
        return None;
    }
    let _b = crate::state::Busy::enter();
    crate::hazard::with(entry, f)
}

/// Whether `fd` is an Iris fd (cheap).
#[inline]
pub(crate) fn is_iris(fd: i32) -> bool {
    slot(fd).is_some_and(|s| !s.load(Ordering::Acquire).is_null())
}

/// One past the highest fd ever installed: where [`each`] stops looking.
static TOP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Call `f` with every Iris fd and its open file (an fd installed or removed meanwhile by
/// another thread may be seen or not).
pub(crate) fn each(mut f: impl FnMut(i32, &Arc<OpenFile>)) {
    let top = TOP.load(Ordering::Acquire).min(MAX_FDS);
    for fd in 0..top as i32 {
        if is_iris(fd) {
            if let Some(file) = get(fd) {
                f(fd, &file);
            }
        }
    }
}

/// Make `fd` refer to `file`. Returns the description it replaced, if any.
pub(crate) fn install(fd: i32, file: Arc<OpenFile>) -> Option<Arc<OpenFile>> {
    let s = slot(fd)?;
    TOP.fetch_max(fd as usize + 1, Ordering::AcqRel);
    let old = s.swap(Arc::into_raw(file) as *mut OpenFile, Ordering::SeqCst);
    (!old.is_null()).then(|| crate::hazard::retire(old))
}

/// Forget `fd`; returns its description (the caller releases it).
pub(crate) fn remove(fd: i32) -> Option<Arc<OpenFile>> {
    let s = slot(fd)?;
    let old = s.swap(std::ptr::null_mut(), Ordering::SeqCst);
    (!old.is_null()).then(|| crate::hazard::retire(old))
}
