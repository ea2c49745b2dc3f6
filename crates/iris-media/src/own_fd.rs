//! Descriptors Iris holds for itself (the volume, the lock files, shadows) inside a program that
//! never opened them. Under the interposer they share the program's fd table, and a program ends
//! descriptors it does not know of: `close_range(3, ~0U)`, a close() of every number up to the
//! limit, a `dup2` onto a number it believes free (a shell's `exec 3>file`). When the volume's fd
//! was replaced that way, the next growth of the volume truncated the program's file instead.
//!
//! So each such descriptor is adopted here: moved to a high number (close-on-exec) and recorded
//! in a slot. Its owner keeps the slot's [`OwnFd`] and asks it for the current number at each
//! use. The interposer asks [`is_own`] before a close (a program's close of an own number is
//! EBADF, as the program never opened it), skips own numbers in range closes, and calls
//! [`relocate`] before a `dup2` onto one, which moves the descriptor to another number and
//! updates its slot. A slot also records the file's device and inode: a descriptor closed behind
//! the interposer's back (a raw system call) leaves a stale record, which the next check finds
//! and forgets, so its number is the program's again.

use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Descriptor numbers the fast lookup covers (as the interposer's table of Iris fds).
const MAX_FDS: usize = 1 << 16;
/// Own descriptors a process can hold at once.
const SLOTS: usize = 1 << 14;

/// One own descriptor: whether an [`OwnFd`] holds the slot, its number (-1 when its descriptor
/// was lost) and the identity of its file.
struct Slot {
    used: AtomicBool,
    fd: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
}

static SLOT: [Slot; SLOTS] = [const {
    Slot {
        used: AtomicBool::new(false),
        fd: AtomicI32::new(-1),
        dev: AtomicU64::new(0),
        ino: AtomicU64::new(0),
    }
}; SLOTS];
/// By descriptor number: its slot + 1, or 0 when the number is not an own descriptor.
static BY_FD: [AtomicU32; MAX_FDS] = [const { AtomicU32::new(0) }; MAX_FDS];
/// One past the highest slot ever used (the end of the scan in [`within`]).
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Serialises adoption, release and relocation (reads of a slot's number take no lock).
static TABLE: spin::mutex::Mutex<(), spin::relax::Yield> = spin::mutex::Mutex::new(());

/// A descriptor Iris holds for itself; closed when dropped. Ask [`OwnFd::raw`] for its number at
/// each use: the number can change (see the module's documentation).
#[derive(Debug)]
pub struct OwnFd(Held);

/// How an own descriptor is held.
#[derive(Debug)]
enum Held {
    /// Recorded in this slot.
    Slot(usize),
    /// Not recorded (every slot was taken): high and close-on-exec, but unprotected.
    Bare(RawFd),
}

impl OwnFd {
    /// Take `fd` (opened by Iris, owned by the caller until now) as an own descriptor: it moves
    /// to a high number, close-on-exec. Where no slot or number is left, it stays where it is,
    /// unrecorded (and so unprotected); it is still the caller's through the result.
    pub fn adopt(fd: RawFd) -> Option<OwnFd> {
        if fd < 0 {
            return None;
        }
        let id = identity(fd)?;
        let fd = place_high(fd);
        let _g = TABLE.lock();
        // A slot that still names this number lost its descriptor unseen (a raw close): the
        // number is this one's now.
        if let Some(b) = by_fd(fd) {
            if let Some(old) = (b.load(Ordering::Acquire) as usize).checked_sub(1) {
                if let Some(s) = SLOT.get(old) {
                    let _ =
                        s.fd.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
                }
                b.store(0, Ordering::Release);
            }
        }
        let free = SLOT.iter().position(|s| !s.used.load(Ordering::Relaxed));
        let Some(i) = free else {
            return Some(OwnFd(Held::Bare(fd)));
        };
        let s = &SLOT[i];
        s.used.store(true, Ordering::Relaxed);
        HIGH.fetch_max(i + 1, Ordering::Relaxed);
        s.dev.store(id.0, Ordering::Relaxed);
        s.ino.store(id.1, Ordering::Relaxed);
        s.fd.store(fd, Ordering::Release);
        if let Some(b) = by_fd(fd) {
            b.store(i as u32 + 1, Ordering::Release);
        }
        Some(OwnFd(Held::Slot(i)))
    }

    /// [`OwnFd::raw`], checked first (one fstat) that the number still names the file it was
    /// adopted for: before a call that changes the file (the volume's growth), so a number
    /// lost unseen (a raw `close_range`, then reused by the program) is -1 here, not the
    /// program's file.
    pub fn checked_raw(&self) -> RawFd {
        match self.0 {
            Held::Slot(i) => {
                let _g = TABLE.lock();
                let s = &SLOT[i];
                let fd = s.fd.load(Ordering::Acquire);
                if fd < 0 {
                    return -1;
                }
                if identity(fd)
                    == Some((s.dev.load(Ordering::Relaxed), s.ino.load(Ordering::Relaxed)))
                {
                    return fd;
                }
                s.fd.store(-1, Ordering::Release);
                if let Some(b) = by_fd(fd) {
                    let _ =
                        b.compare_exchange(i as u32 + 1, 0, Ordering::AcqRel, Ordering::Acquire);
                }
                -1
            }
            Held::Bare(fd) => fd,
        }
    }

    /// The descriptor's current number (-1 once it was lost: its operations then fail with
    /// EBADF instead of reaching a file of the program's).
    pub fn raw(&self) -> RawFd {
        match self.0 {
            Held::Slot(i) => SLOT[i].fd.load(Ordering::Acquire),
            Held::Bare(fd) => fd,
        }
    }
}

impl Drop for OwnFd {
    fn drop(&mut self) {
        let s = match self.0 {
            Held::Slot(i) => &SLOT[i],
            Held::Bare(fd) => {
                // (An unrecorded own descriptor, which this value owns.)
                close(fd);
                return;
            }
        };
        let _g = TABLE.lock();
        let fd = s.fd.swap(-1, Ordering::AcqRel);
        s.used.store(false, Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        if let Some(b) = by_fd(fd) {
            b.store(0, Ordering::Release);
        }
        // Only if the number still names our file: lost behind our back, it may be the
        // program's now.
        if identity(fd) == Some((s.dev.load(Ordering::Relaxed), s.ino.load(Ordering::Relaxed))) {
            close(fd);
        }
    }
}

/// Whether `fd` is an own descriptor that the program must not close or replace. A record that
/// went stale (the descriptor was closed unseen, and the number may be the program's now) is
/// forgotten here and answers false.
pub fn is_own(fd: RawFd) -> bool {
    let Some(b) = by_fd(fd) else { return false };
    if b.load(Ordering::Acquire) == 0 {
        return false;
    }
    let _g = TABLE.lock();
    live_slot(fd).is_some()
}

/// Move own descriptor `fd` to another number before the program takes `fd` over (a `dup2` onto
/// it). Returns false when it could not move (no number free): the caller should then refuse
/// (EBUSY) rather than end it. Returns true when `fd` is no (longer an) own descriptor.
pub fn relocate(fd: RawFd) -> bool {
    let Some(b) = by_fd(fd) else { return true };
    if b.load(Ordering::Acquire) == 0 {
        return true;
    }
    let _g = TABLE.lock();
    let Some(i) = live_slot(fd) else { return true };
    let to = place_high_keep(fd, floor());
    if to < 0 {
        return false;
    }
    SLOT[i].fd.store(to, Ordering::Release);
    if let Some(nb) = by_fd(to) {
        nb.store(i as u32 + 1, Ordering::Release);
    }
    b.store(0, Ordering::Release);
    // (`fd` names our file, checked by `live_slot`, which `to` now names too.)
    close(fd);
    true
}

/// The own descriptors numbered `first..=last`, ascending (for a range close to step over).
pub fn within(first: RawFd, last: RawFd) -> Vec<RawFd> {
    let _g = TABLE.lock();
    let top = HIGH.load(Ordering::Relaxed);
    let mut v: Vec<RawFd> = SLOT[..top]
        .iter()
        .filter(|s| s.used.load(Ordering::Relaxed))
        .map(|s| s.fd.load(Ordering::Acquire))
        .filter(|fd| (first..=last).contains(fd))
        .filter(|&fd| live_slot(fd).is_some())
        .collect();
    v.sort_unstable();
    v
}

/// Hold the table across a fork, so that no thread of the parent holds it in the child.
pub fn lock_for_fork() {
    std::mem::forget(TABLE.lock());
}

/// Release what [`lock_for_fork`] took (in the parent and in the child after the fork).
pub fn unlock_after_fork() {
    // SAFETY: only called after lock_for_fork, whose guard was forgotten.
    unsafe { TABLE.force_unlock() };
}

/// The slot of own descriptor `fd` if the number still names its file; a stale record is
/// forgotten (the slot's number becomes -1). Called with the table held.
fn live_slot(fd: RawFd) -> Option<usize> {
    let b = by_fd(fd)?;
    let i = (b.load(Ordering::Acquire) as usize).checked_sub(1)?;
    let s = SLOT.get(i)?;
    if s.fd.load(Ordering::Acquire) != fd {
        b.store(0, Ordering::Release);
        return None;
    }
    if identity(fd) == Some((s.dev.load(Ordering::Relaxed), s.ino.load(Ordering::Relaxed))) {
        return Some(i);
    }
    s.fd.store(-1, Ordering::Release);
    b.store(0, Ordering::Release);
    None
}

fn by_fd(fd: RawFd) -> Option<&'static AtomicU32> {
    usize::try_from(fd).ok().and_then(|i| BY_FD.get(i))
}

/// The device and inode numbers of the file `fd` names.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the struct passed (the kernel's struct stat is libc's on Linux).
    (unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) } == 0)
        .then_some((st.st_dev, st.st_ino))
}

/// The lowest number own descriptors are placed at: half the soft limit of open files, at most
/// 512, far above the numbers programs use (0 when the limit is too small to leave room).
pub fn floor() -> RawFd {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur < 64 {
        return 0;
    }
    RawFd::try_from((lim.rlim_cur / 2).min(512)).unwrap_or(512)
}

// The system calls themselves, not libc's `fcntl` and `close`: under the interposer those are
// its own, which look this table up (and may take other locks) again. (The interposer's
// `syscall` passes these numbers straight to libc's.)

/// A close-on-exec duplicate of `fd` at or above `floor` (-1 if none), `fd` left open.
fn place_high_keep(fd: RawFd, floor: RawFd) -> RawFd {
    // SAFETY: duplicating a descriptor changes no memory.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, floor) as RawFd }
}

/// Set close-on-exec on `fd`.
fn set_cloexec(fd: RawFd) {
    // SAFETY: setting a descriptor's flags changes no memory.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

/// Close `fd` (the caller's own).
fn close(fd: RawFd) {
    // SAFETY: the caller owns `fd`.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// `fd` moved to a high number (see [`place_high_keep`]); `fd` itself if it is high already
/// (one an exec passed on) or cannot move.
fn place_high(fd: RawFd) -> RawFd {
    let floor = floor();
    if floor > 0 && fd >= floor {
        set_cloexec(fd);
        return fd;
    }
    let to = place_high_keep(fd, floor);
    if to < 0 {
        set_cloexec(fd);
        return fd;
    }
    // (`to` duplicates `fd`, which the caller handed over.)
    close(fd);
    to
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::IntoRawFd;

    fn temp_fd(name: &str) -> RawFd {
        let path = std::env::temp_dir().join(format!("iris-own-fd-{name}-{}", std::process::id()));
        let f = std::fs::File::create(&path).expect("create");
        let _ = std::fs::remove_file(&path);
        f.into_raw_fd()
    }

    #[test]
    fn an_own_descriptor_sits_high_and_close_on_exec_and_is_closed_when_dropped() {
        let own = OwnFd::adopt(temp_fd("high")).expect("adopt");
        let (fd, id) = (own.raw(), identity(own.raw()));
        assert!(fd >= floor(), "placed at {fd}, floor {}", floor());
        assert!(is_own(fd));
        // SAFETY: F_GETFD reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        drop(own);
        // (Other tests' descriptors may take the number at once: compare files, not numbers.)
        assert_ne!(identity(fd), id, "fd {fd} still open after the drop");
    }

    #[test]
    fn relocation_moves_the_descriptor_and_its_owner_follows() {
        let own = OwnFd::adopt(temp_fd("moved")).expect("adopt");
        let (before, id) = (own.raw(), identity(own.raw()));
        assert!(relocate(before));
        let after = own.raw();
        assert_ne!(after, before);
        assert_eq!(
            identity(after),
            id,
            "the owner's number names the same file"
        );
        assert!(is_own(after));
        assert_ne!(identity(before), id, "the old number was given up");
    }

    #[test]
    fn a_descriptor_replaced_behind_our_back_is_forgotten_not_closed() {
        let own = OwnFd::adopt(temp_fd("stale")).expect("adopt");
        let fd = own.raw();
        let theirs = temp_fd("theirs");
        // The program's file lands on our number unseen (as a raw dup2 system call would).
        // SAFETY: replacing a descriptor this test owns.
        assert_eq!(unsafe { libc::dup2(theirs, fd) }, fd);
        let id = identity(fd);
        assert!(!is_own(fd), "a stale record must free the number");
        assert_eq!(own.raw(), -1, "the owner must not reach the program's file");
        drop(own);
        assert_eq!(identity(fd), id, "the program's file must stay open");
        // SAFETY: closing this test's descriptors.
        unsafe {
            libc::close(fd);
            libc::close(theirs);
        }
    }
}
