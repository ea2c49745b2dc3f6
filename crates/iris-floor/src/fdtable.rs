//! The fd table: for each fd the shim serves, the mapping of its backing file, its size, its
//! offset for `read`/`write`, and how it was opened. A fixed array of atomics indexed by fd: the
//! hot path is one acquire load, nothing is allocated, nothing is locked.
//!
//! Invariant: an entry is live exactly when `base` is non-null; its other fields are written
//! before `base` is published (release) and read after `base` is seen (acquire).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use libc::c_int;

/// Fds at or above this are not served (they stay plain kernel fds on the backing file).
pub(crate) const MAX_FDS: usize = 4096;

/// Opened for reading.
pub(crate) const ACCESS_READ: u32 = 1;
/// Opened for writing.
pub(crate) const ACCESS_WRITE: u32 = 2;
/// Opened with O_APPEND: every write goes to the end.
pub(crate) const ACCESS_APPEND: u32 = 4;

/// One served fd.
pub(crate) struct OpenFile {
    /// Start of the mapping of the backing file ([`crate::MAX_FILE_BYTES`] reserved); null when
    /// the fd is not served.
    base: AtomicPtr<u8>,
    /// The backing file's size as this fd last saw or made it.
    pub(crate) size_bytes: AtomicU64,
    /// The file offset `read`, `write` and `lseek` use.
    pub(crate) offset_bytes: AtomicU64,
    /// ACCESS_* bits.
    access: AtomicU32,
    /// Held while the file is grown or truncated, so two writers cannot shrink each other's
    /// extension.
    resize_lock: AtomicBool,
}

impl OpenFile {
    /// An entry serving nothing.
    const fn empty() -> OpenFile {
        OpenFile {
            base: AtomicPtr::new(std::ptr::null_mut()),
            size_bytes: AtomicU64::new(0),
            offset_bytes: AtomicU64::new(0),
            access: AtomicU32::new(0),
            resize_lock: AtomicBool::new(false),
        }
    }

    /// The start of the mapping.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.load(Ordering::Acquire)
    }

    /// Whether the fd was opened with all of `bits`.
    pub(crate) fn allows(&self, bits: u32) -> bool {
        self.access.load(Ordering::Relaxed) & bits == bits
    }

    /// Run `f` holding the resize lock (held only across one ftruncate or fallocate).
    pub(crate) fn resizing<T>(&self, f: impl FnOnce() -> T) -> T {
        while self
            .resize_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        let out = f();
        self.resize_lock.store(false, Ordering::Release);
        out
    }
}

static TABLE: [OpenFile; MAX_FDS] = [const { OpenFile::empty() }; MAX_FDS];

/// The served file behind `fd`, if any.
#[inline]
pub(crate) fn get(fd: c_int) -> Option<&'static OpenFile> {
    let file = TABLE.get(usize::try_from(fd).ok()?)?;
    (!file.base().is_null()).then_some(file)
}

/// Serve `fd` from the mapping at `base`. False if `fd` is out of the table's range.
pub(crate) fn install(fd: c_int, base: *mut u8, size_bytes: u64, access: u32) -> bool {
    debug_assert!(!base.is_null());
    let Some(file) = usize::try_from(fd).ok().and_then(|i| TABLE.get(i)) else {
        return false;
    };
    debug_assert!(file.base().is_null(), "fd {fd} installed twice");
    file.size_bytes.store(size_bytes, Ordering::Relaxed);
    file.offset_bytes.store(0, Ordering::Relaxed);
    file.access.store(access, Ordering::Relaxed);
    file.base.store(base, Ordering::Release);
    true
}

/// Stop serving `fd`; returns its mapping for the caller to unmap.
pub(crate) fn remove(fd: c_int) -> Option<*mut u8> {
    let file = TABLE.get(usize::try_from(fd).ok()?)?;
    let base = file.base.swap(std::ptr::null_mut(), Ordering::AcqRel);
    (!base.is_null()).then_some(base)
}
