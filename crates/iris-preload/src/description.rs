//! Open file descriptions that survive fork and exec. The placeholder behind an Iris fd is a
//! memfd holding one page: the description's shared state (inode, status flags, file offset and
//! the lock that orders offset updates). Every process holding an fd to it (after fork, dup,
//! exec or SCM_RIGHTS) maps the same page, so offsets are shared exactly as POSIX shares them,
//! and a new program image finds its inherited Iris fds by scanning /proc/self/fd for these memfds.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::real;

/// Name every description memfd carries ("/memfd:iris-desc (deleted)" in /proc/self/fd).
pub(crate) const MEMFD_NAME: &std::ffi::CStr = c"iris-desc";
const DESC_MAGIC: u64 = u64::from_le_bytes(*b"IRISDESC");
const PAGE: usize = 4096;
/// Where in its memfd the description lives: far past any offset a program's own I/O reaches.
/// A kernel call the interposer does not see runs against the memfd: a write through another
/// open of it (`/dev/stdout`, `/proc/self/fd/N` opened for writing, which Iris forwards as host
/// paths) lands in the sparse space below, not in the description, whose inode number and
/// offset a stray write would otherwise change.
const DESC_OFFSET: i64 = 1 << 40;

/// The shared page.
#[repr(C)]
pub(crate) struct SharedDesc {
    magic: AtomicU64,
    pub volume_id: AtomicU64,
    pub ino: AtomicU64,
    pub flags: AtomicI32,
    pub is_dir: AtomicU32,
    pub offset: AtomicU64,
    /// Offset lock: 0 free, else the holder's pid.
    lock: AtomicU32,
    /// Bytes of `path` in use; 0 when the path is not known.
    path_len: AtomicU32,
    /// The absolute path the description was opened by (see [`Desc::path`]).
    path: [AtomicU8; PATH_BYTES],
}

/// Room for the path in the page: longer paths are not kept.
const PATH_BYTES: usize = PAGE - 48;

const _: () = assert!(std::mem::size_of::<SharedDesc>() <= PAGE);

/// A mapped description.
pub(crate) struct Desc {
    page: *mut SharedDesc,
    /// [`FORKS`] just before it was made here; `u64::MAX` when adopted (inherited at exec).
    born: u64,
    /// No fd of it has been passed on other than to the children [`FORKS`] counts, as far as
    /// this process saw (see [`Desc::note_inheritable`]).
    private: AtomicBool,
    /// Its memfd's identity, when made here (a spare is checked by it, see `desc_pool`).
    memfd: Option<crate::desc_pool::MemfdId>,
    /// The pool's ticket, when its memfd was a spare (see `desc_pool`).
    lent: Option<crate::desc_pool::Lent>,
}

/// Forks and spawns this process has made: a description made before one may have an fd in
/// the child, and is never reused (see [`Desc::retire`]). Every way a libc program makes a
/// child moves it, before the child exists and again once it does (so a description made
/// while the child is being made counts as made before): `fork` (its handlers, which glibc's
/// own forks in `daemon` and `forkpty` run too), `vfork`, `_Fork`, `clone`, `posix_spawn`,
/// `system`, `popen` and `wordexp` (glibc spawns their children with its internal
/// `posix_spawn`, which runs no handlers), and `syscall` with a fork or clone number.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// A child is about to be made, or has just been (fork, spawn): every description made so far
/// may be shared with it from now on.
pub(crate) fn note_fork() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

// SAFETY: the page is shared memory accessed only through atomics.
unsafe impl Send for Desc {}
// SAFETY: as above.
unsafe impl Sync for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `map`; no reference outlives the Desc.
        unsafe { real::munmap(self.page.cast(), PAGE) };
        if let Some(lent) = self.lent {
            crate::desc_pool::release(lent);
        }
    }
}

/// Map the description page of memfd `fd` (open for reading and writing).
fn map_rw(fd: i32) -> Option<*mut SharedDesc> {
    // SAFETY: mapping one shared page of a memfd we own or inherited; checked for failure.
    let p = unsafe {
        real::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            DESC_OFFSET,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    Some(p.cast())
}

/// Map the description page of placeholder `fd`: an O_PATH open (see [`Desc::make`]), so through a
/// read-write open of the same memfd, closed again.
fn map(fd: i32) -> Option<*mut SharedDesc> {
    let Some(rw) = reopen(fd, libc::O_RDWR | libc::O_CLOEXEC) else {
        // (Without /proc: the fd may be the read-write open itself.)
        return map_rw(fd);
    };
    let p = map_rw(rw);
    // SAFETY: closing the open made above.
    unsafe { real::close(rw) };
    p
}

/// Another open of the file `fd` names, with `flags` (through /proc/self/fd).
fn reopen(fd: i32, flags: i32) -> Option<i32> {
    let path = format!("/proc/self/fd/{fd}\0");
    // SAFETY: a NUL-terminated path; libc's own open.
    let r = unsafe { real::open(path.as_ptr().cast(), flags, 0) };
    (r >= 0).then_some(r)
}

impl Desc {
    /// Create a description for `ino`; returns the memfd (the fd number the caller hands out).
    pub fn create(
        volume_id: u64,
        ino: u64,
        flags: i32,
        is_dir: bool,
        cloexec: bool,
    ) -> Result<(i32, Desc), i32> {
        // Before the fd exists: a child made from here on may hold it.
        let born = FORKS.load(Ordering::SeqCst);
        let ((fd, page, memfd), lent) = match crate::desc_pool::take(cloexec) {
            Some((fd, page, id, lent)) => ((fd, page.cast::<SharedDesc>(), Some(id)), Some(lent)),
            None => match Self::make(cloexec) {
                Ok(made) => (made, None),
                Err(libc::EMFILE) => {
                    // The spares hold numbers the program needs.
                    let _ = crate::desc_pool::drain();
                    (Self::make(cloexec)?, None)
                }
                Err(e) => return Err(e),
            },
        };
        // Whether the fd is close-on-exec does not matter: only a child can keep an fd of
        // this process's after its last close here, and every child moves FORKS.
        let d = Desc {
            page,
            born,
            private: AtomicBool::new(true),
            memfd,
            lent,
        };
        let s = d.shared();
        s.volume_id.store(volume_id, Ordering::Relaxed);
        s.ino.store(ino, Ordering::Relaxed);
        s.flags.store(flags, Ordering::Relaxed);
        s.is_dir.store(u32::from(is_dir), Ordering::Relaxed);
        s.offset.store(0, Ordering::Relaxed);
        s.lock.store(0, Ordering::Relaxed);
        s.path_len.store(0, Ordering::Relaxed);
        s.magic.store(DESC_MAGIC, Ordering::Release);
        Ok((fd, d))
    }

    /// A new description memfd, its mapped page and its identity (if fstat tells it).
    #[allow(clippy::type_complexity)]
    pub(crate) fn make(
        cloexec: bool,
    ) -> Result<(i32, *mut SharedDesc, Option<crate::desc_pool::MemfdId>), i32> {
        // SAFETY: a NUL-terminated name; memfd_create has no memory side effects.
        let rw = unsafe {
            libc::memfd_create(
                MEMFD_NAME.as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if rw < 0 {
            return Err(last_errno());
        }
        let fail = |e: i32| {
            // SAFETY: closing our own fd.
            unsafe { real::close(rw) };
            Err(e)
        };
        // Sized once, sparse, and sealed against shrinking: an open of it with O_TRUNC (a
        // forwarded `/dev/stdout`) fails with EPERM instead of taking the mapped page away
        // (SIGBUS at the next access).
        // SAFETY: sizing and sealing our own new memfd.
        if unsafe { real::ftruncate(rw, DESC_OFFSET + PAGE as i64) } != 0
            || unsafe { real::fcntl(rw, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK as usize) } != 0
        {
            return fail(last_errno());
        }
        let Some(page) = map_rw(rw) else {
            return fail(last_errno());
        };
        // The program's fd is an O_PATH open of the memfd: a read or write on it that the
        // interposer does not see (io_uring, a raw system call, a child without Iris) fails
        // with EBADF, instead of vanishing into the placeholder or reading its zeros. (poll,
        // epoll and ioctl, which fail on it too, are answered by `readiness`.)
        let cloexec_flag = if cloexec { libc::O_CLOEXEC } else { 0 };
        // Onto the read-write fd's number, the lowest free one, as open(2) would give.
        let path_only = reopen(rw, libc::O_PATH | libc::O_CLOEXEC).is_some_and(|ro| {
            // SAFETY: replacing and closing our own fds; the mapping keeps the memfd.
            unsafe {
                let moved = real::dup3(ro, rw, cloexec_flag) == rw;
                real::close(ro);
                moved
            }
        });
        // (Without /proc, the read-write fd serves, inheritable if asked.)
        // SAFETY: F_SETFD on our own fd changes no memory.
        if !path_only && !cloexec && unsafe { real::fcntl(rw, libc::F_SETFD, 0) } != 0 {
            let e = last_errno();
            // SAFETY: unmapping the page mapped above, used by nothing yet.
            unsafe { real::munmap(page.cast(), PAGE) };
            return fail(e);
        }
        let fd = rw;
        Ok((fd, page, crate::desc_pool::id_of(fd)))
    }

    /// Adopt an inherited fd if it is a description of volume `volume_id`.
    pub fn adopt(fd: i32, volume_id: u64) -> Option<Desc> {
        let d = Desc {
            page: map(fd)?,
            born: u64::MAX,
            private: AtomicBool::new(false),
            memfd: None,
            lent: None,
        };
        let s = d.shared();
        (s.magic.load(Ordering::Acquire) == DESC_MAGIC
            && s.volume_id.load(Ordering::Relaxed) == volume_id)
            .then_some(d)
    }

    /// An fd of this description was made inheritable (dup, dup2, F_DUPFD, F_SETFD without
    /// FD_CLOEXEC): a child spawned from now on may hold it, so it is never reused.
    pub fn note_inheritable(&self) {
        self.private.store(false, Ordering::Relaxed);
    }

    /// Dispose of the description as its last fd in this process, `fd`, is closed (the caller
    /// closes `fd` after this): kept for reuse (see `desc_pool`: given back to its entry when
    /// lent by the pool, else moved to a high number) when it never left the process: made
    /// here, no fork or spawn since (see [`FORKS`]), and no fd of it passed on or made
    /// inheritable by a later call (every way Iris sees marks it: dup, dup2, F_DUPFD, F_SETFD,
    /// FIONCLEX, SCM_RIGHTS; a raw system call the interposer does not see is not followed);
    /// else unmapped. An fd opened without `O_CLOEXEC` is reused as well: a program that
    /// opens and closes files with `fopen(path, "r")` paid a new memfd each time (about
    /// 60 us here, against 7 us for a reused one).
    pub fn retire(self, fd: i32) {
        let Some(id) = self.memfd else { return };
        if self.private.load(Ordering::Relaxed) && self.born == FORKS.load(Ordering::SeqCst) {
            self.shared().magic.store(0, Ordering::Release);
            let back = self
                .lent
                .is_some_and(|lent| crate::desc_pool::give_back(lent, self.page.cast()));
            if back || crate::desc_pool::put(fd, self.page.cast(), id) {
                // The pool owns the mapping now (and the ticket is spent or void).
                std::mem::forget(self);
            }
        }
    }

    /// Record the absolute path the description was opened by, for the processes that
    /// inherit it (see `calls::fd_link_text`). Before its fd is handed out.
    pub fn set_path(&self, path: &[u8]) {
        let s = self.shared();
        if path.len() > PATH_BYTES {
            return;
        }
        for (to, b) in s.path.iter().zip(path) {
            to.store(*b, Ordering::Relaxed);
        }
        s.path_len.store(path.len() as u32, Ordering::Release);
    }

    /// The path recorded by [`Desc::set_path`], if any.
    pub fn path(&self) -> Option<Vec<u8>> {
        let s = self.shared();
        let n = (s.path_len.load(Ordering::Acquire) as usize).min(PATH_BYTES);
        (n > 0).then(|| {
            s.path[..n]
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect()
        })
    }

    /// The shared state.
    pub fn shared(&self) -> &SharedDesc {
        // SAFETY: `page` maps PAGE bytes for the Desc's life; SharedDesc is all atomics.
        unsafe { &*self.page }
    }

    /// Run `f` with the offset locked against every process sharing the description.
    pub fn with_offset<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        let s = self.shared();
        let me = crate::description::pid();
        let mut spins = 0u32;
        while s
            .lock
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(1024) {
                let holder = s.lock.load(Ordering::Relaxed);
                // A holder killed mid-update must not wedge the others: take the lock over.
                // SAFETY: kill with signal 0 only checks existence.
                if holder != 0 && unsafe { libc::kill(holder as i32, 0) } != 0 {
                    let _ = s
                        .lock
                        .compare_exchange(holder, 0, Ordering::AcqRel, Ordering::Relaxed);
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let mut off = s.offset.load(Ordering::Relaxed);
        let r = f(&mut off);
        s.offset.store(off, Ordering::Relaxed);
        s.lock.store(0, Ordering::Release);
        r
    }
}

/// This process's pid, cached: the offset lock is taken on every read() and write(), where a
/// system call would cost as much as the copy. Reset in a forked child.
pub(crate) fn pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    extern "C" fn forget_pid() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // Not a `Once`: see `fork::install`.
    static AT_FORK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !AT_FORK.swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain function to run in the child after fork.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid)) };
    }
    // SAFETY: getpid cannot fail.
    let p = unsafe { libc::getpid() } as u32;
    PID.store(p, Ordering::Relaxed);
    p
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
