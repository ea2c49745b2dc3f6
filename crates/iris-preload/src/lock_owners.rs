//! Who holds a classic record lock, for F_GETLK's `l_pid`. Iris keeps classic locks as OFD
//! locks on each process's own open of the volume's record-lock file (see `locks`), and the
//! kernel names no owner for those (-1), which a program may pass to `kill` unchecked. So each
//! process that takes classic locks notes "PID FD" (its open of the record-lock file) in a
//! per-volume list beside the lock files, and an F_GETLK that finds a conflict asks the
//! `/proc/PID/fdinfo/FD` of the processes listed which one holds that very lock. Nothing is
//! added to a lock or an unlock: the cost falls on the F_GETLK that finds a conflict.

use std::sync::atomic::{AtomicPtr, Ordering};

use iris_media::OwnFd;
use libc::c_int;

use crate::real;

/// The list grows by a line per process that locks; past this many bytes a new process empties
/// it first (the owners it forgets are reported as -1, as before the list).
const MAX_LIST_BYTES: i64 = 256 << 10;

/// This process's open of the list (append-only), kept for the process's life (a forked child
/// keeps using it): the shared `flock` it holds keeps the file from the sweep of unused ones.
static LIST: AtomicPtr<OwnFd> = AtomicPtr::new(std::ptr::null_mut());

fn list_fd() -> Option<c_int> {
    let p = LIST.load(Ordering::Acquire);
    // SAFETY: a non-null LIST points at the OwnFd boxed in `note`, never freed.
    (!p.is_null()).then(|| unsafe { &*p }.raw())
}

/// Note that this process holds its classic locks through `record_fd`, in the list opened by
/// `open` (once per process; caller holds the record-lock file's first-open lock).
pub(crate) fn note(record_fd: c_int, open: impl FnOnce() -> Option<c_int>) {
    let fd = match list_fd() {
        Some(fd) => fd,
        None => {
            let Some(own) = open().and_then(OwnFd::adopt) else {
                return;
            };
            let fd = own.raw();
            // SAFETY: F_SETFL on our own fd: every write appends, whole, between processes.
            unsafe { real::fcntl(fd, libc::F_SETFL, libc::O_APPEND as usize) };
            LIST.store(Box::into_raw(Box::new(own)), Ordering::Release);
            fd
        }
    };
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat and ftruncate on our own fd.
    if unsafe { real::fstat(fd, &mut st) } == 0 && st.st_size > MAX_LIST_BYTES {
        // SAFETY: as above.
        unsafe { real::ftruncate(fd, 0) };
    }
    // SAFETY: getpid has no preconditions.
    let line = format!("{} {record_fd}\n", unsafe { libc::getpid() });
    // SAFETY: writing our own bytes to our own fd.
    unsafe { real::write(fd, line.as_ptr().cast(), line.len()) };
}

/// The process holding, through its noted open, the lock `[start, start + len)` (`len` 0: to
/// the end) of the record-lock file `ino` (as F_OFD_GETLK reported it), if one is listed.
pub(crate) fn holder(ino: u64, start: i64, len: i64) -> Option<libc::pid_t> {
    let bytes = read_all(list_fd()?);
    let end = if len == 0 {
        "EOF".to_string()
    } else {
        (start + len - 1).to_string()
    };
    let start = start.to_string();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut seen: Vec<(libc::pid_t, c_int)> = Vec::new();
    // Newest first: a process noted twice (a reused number) is asked about its last open.
    for line in String::from_utf8_lossy(&bytes).lines().rev() {
        let mut f = line.split_ascii_whitespace();
        let (Some(Ok(pid)), Some(Ok(lfd))) = (
            f.next().map(str::parse::<libc::pid_t>),
            f.next().map(str::parse::<c_int>),
        ) else {
            continue;
        };
        if pid == me || seen.iter().any(|(p, _)| *p == pid) {
            continue;
        }
        seen.push((pid, lfd));
        if holds(pid, lfd, ino, &start, &end) {
            return Some(pid);
        }
    }
    None
}

/// The whole list.
fn read_all(fd: c_int) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: reading into our own buffer from our own fd.
        let n = unsafe {
            real::pread(
                fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                bytes.len() as libc::off_t,
            )
        };
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    bytes
}

/// Whether `/proc/PID/fdinfo/FD` lists a lock of file `ino` from `start` to `end` (as the
/// kernel prints them: inclusive, or EOF).
fn holds(pid: libc::pid_t, fd: c_int, ino: u64, start: &str, end: &str) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
        return false;
    };
    // "lock:\t1: OFDLCK ADVISORY  WRITE -1 00:1b:387412 10 14"
    info.lines()
        .filter_map(|l| l.strip_prefix("lock:"))
        .any(|l| {
            let f: Vec<&str> = l.split_ascii_whitespace().collect();
            f.len() >= 8
                && f[f.len() - 3]
                    .rsplit(':')
                    .next()
                    .and_then(|i| i.parse::<u64>().ok())
                    == Some(ino)
                && f[f.len() - 2] == start
                && f[f.len() - 1] == end
        })
}

/// Whether listed process `pid` holds, through its noted open, the lock `[start, start + len)`
/// (`len` 0: to the end) of the record-lock file `ino`.
pub(crate) fn holds_lock(pid: libc::pid_t, ino: u64, start: i64, len: i64) -> bool {
    let Some(fd) = list_fd() else { return false };
    let bytes = read_all(fd);
    let end = if len == 0 {
        "EOF".to_string()
    } else {
        (start + len - 1).to_string()
    };
    let start = start.to_string();
    String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            Some((
                f.next()?.parse::<libc::pid_t>().ok()?,
                f.next()?.parse::<c_int>().ok()?,
            ))
        })
        .find(|&(p, _)| p == pid)
        .is_some_and(|(p, lfd)| holds(p, lfd, ino, &start, &end))
}
