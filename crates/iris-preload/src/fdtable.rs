//! The fd table: which file descriptors are Iris files. Every Iris fd is a real kernel fd (the
//! memfd carrying its description, see `description`) so numbers never collide with the
//! kernel's, and close, dup2, close-on-exec and inheritance keep working. The table maps the
//! number to this process's view of the open file description.
//!
//! Lookup is one atomic load: no lock, no system call on the hot path. The hot calls borrow the
//! open file for their length ([`borrow`]: no reference count moves); an entry taken out of the
//! table is released only after a grace period (see `grace`), so no call still reading through
//! the table can find it freed.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use crate::description::Desc;
use crate::grace::{self, Section};

/// Highest fd number Iris can serve (higher ones get EMFILE at open).
pub(crate) const MAX_FDS: usize = 1 << 16;

/// An open file description, as this process sees it (the state lives in shared memory).
pub(crate) struct OpenFile {
    pub ino: u64,
    /// This process's block map of the inode (reads skip the tree for blocks seen before).
    pub cache: Arc<iris_fs::FileCache>,
    pub is_dir: bool,
    pub desc: Desc,
    /// Absolute path it was opened by (with the mount prefix), for fchdir; unknown if inherited.
    pub path: Option<Vec<u8>>,
    /// This description's open of the flock file (see `locks`), -1 until first flock.
    pub flock_fd: std::sync::atomic::AtomicI32,
    /// This description's open of the record-lock file for OFD locks (see `locks`), -1 until
    /// the first one: OFD locks belong to the description, not the process.
    pub ofd_fd: std::sync::atomic::AtomicI32,
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
    pub fn flock_fd(&self) -> Option<i32> {
        let fd = self.flock_fd.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }
    /// Keep `fd` as the flock fd unless another thread set one first; returns the one kept.
    pub fn set_flock_fd(&self, fd: i32) -> i32 {
        Self::keep_fd(&self.flock_fd, fd)
    }
    pub fn ofd_fd(&self) -> Option<i32> {
        let fd = self.ofd_fd.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }
    /// Keep `fd` as the OFD-lock fd unless another thread set one first; returns the one kept.
    pub fn set_ofd_fd(&self, fd: i32) -> i32 {
        Self::keep_fd(&self.ofd_fd, fd)
    }
    fn keep_fd(slot: &std::sync::atomic::AtomicI32, fd: i32) -> i32 {
        match slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fd,
            Err(existing) => {
                // SAFETY: closing the fd we opened and lost the race with.
                unsafe { crate::real::close(fd) };
                existing
            }
        }
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<OpenFile> = AtomicPtr::new(std::ptr::null_mut());
static TABLE: [AtomicPtr<OpenFile>; MAX_FDS] = [EMPTY; MAX_FDS];

fn slot(fd: i32) -> Option<&'static AtomicPtr<OpenFile>> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// The open file behind `fd`, if it is an Iris fd, to keep beyond the call or across a wait
/// (a lock wait must not hold a [`FileRef`]: a thread closing another fd would wait for it).
#[inline]
pub(crate) fn get(fd: i32) -> Option<Arc<OpenFile>> {
    let s = slot(fd)?;
    if s.load(Ordering::Relaxed).is_null() {
        return None;
    }
    let _section = Section::enter();
    let p = s.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null entries come from Arc::into_raw in `install` and keep one strong count
    // until `remove` or `install` takes them out and a grace period has passed; inside the
    // section that cannot have happened to `p` yet, so the count added here is on a live Arc.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

/// The open file behind an Iris fd, borrowed for one call: valid until dropped, which must be
/// before the call returns or waits for another thread (see `grace`; a signal handler that
/// closes the fd meanwhile leaks the description rather than free it under the call).
pub(crate) struct FileRef {
    file: NonNull<OpenFile>,
    _section: Section,
}

impl std::ops::Deref for FileRef {
    type Target = OpenFile;

    #[inline]
    fn deref(&self) -> &OpenFile {
        // SAFETY: loaded from the table inside `_section`: the Arc it came from is released
        // only after a grace period that waits for this section to end.
        unsafe { self.file.as_ref() }
    }
}

/// The open file behind `fd`, if it is an Iris fd, borrowed for the length of one call (the hot
/// path: no reference count moves).
#[inline]
pub(crate) fn borrow(fd: i32) -> Option<FileRef> {
    let s = slot(fd)?;
    if s.load(Ordering::Relaxed).is_null() {
        return None;
    }
    let section = Section::enter();
    let file = NonNull::new(s.load(Ordering::Acquire))?;
    Some(FileRef {
        file,
        _section: section,
    })
}

/// Whether `fd` is an Iris fd (cheap).
#[inline]
pub(crate) fn is_iris(fd: i32) -> bool {
    slot(fd).is_some_and(|s| !s.load(Ordering::Acquire).is_null())
}

/// Make `fd` refer to `file`. Returns the description it replaced, if any, once no call can
/// still be reading it through the table.
pub(crate) fn install(fd: i32, file: Arc<OpenFile>) -> Option<Arc<OpenFile>> {
    let s = slot(fd)?;
    // Before the first entry is published: a remover of any entry finds it made.
    grace::register();
    let old = s.swap(Arc::into_raw(file) as *mut OpenFile, Ordering::AcqRel);
    retire(old)
}

/// Before an Iris fd is closed: point its number at an `O_PATH` file (one `dup3`), so that a
/// read or write racing the close, which finds the table entry gone and goes to the kernel,
/// gets EBADF instead of reaching the description's memfd (the grace period in [`remove`] makes
/// that window microseconds long). The number stays taken until the caller closes it.
pub(crate) fn blank_placeholder(fd: i32) {
    use std::sync::atomic::AtomicI32;
    static BLANK: AtomicI32 = AtomicI32::new(-1);
    let mut blank = BLANK.load(Ordering::Acquire);
    if blank < 0 {
        // SAFETY: a NUL-terminated path; an O_PATH open touches no memory of ours.
        let fresh = unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        } as i32;
        if fresh < 0 {
            return;
        }
        blank = match BLANK.compare_exchange(-1, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(other) => {
                // SAFETY: closing the fd just opened, which lost the race to be kept.
                unsafe { crate::real::close(fresh) };
                other
            }
        };
    }
    // SAFETY: dup3 onto the caller's own fd, which it is closing.
    unsafe { libc::syscall(libc::SYS_dup3, blank, fd, libc::O_CLOEXEC) };
}

/// Forget `fd`; returns its description (the caller releases it), once no call can still be
/// reading it through the table.
pub(crate) fn remove(fd: i32) -> Option<Arc<OpenFile>> {
    let s = slot(fd)?;
    let old = s.swap(std::ptr::null_mut(), Ordering::AcqRel);
    retire(old)
}

/// The Arc behind an entry just taken out of the table, after a grace period; `None` for an
/// empty entry, or (never expected) when the grace period cannot be known to have passed: then
/// the description is leaked rather than freed under a reader.
fn retire(old: *mut OpenFile) -> Option<Arc<OpenFile>> {
    if old.is_null() || !grace::synchronize() {
        return None;
    }
    // SAFETY: a non-null entry carries the strong count `install` gave it, now ours; the grace
    // period has passed, so no borrow made through the table outlives it.
    Some(unsafe { Arc::from_raw(old) })
}
