//! Deadlock detection for classic record locks (F_SETLKW fails with EDEADLK, as Linux's does
//! for POSIX locks). Iris keeps classic locks as OFD locks (see `locks`), for which the kernel
//! detects nothing, so a thread about to wait notes whom its process waits for, the holder of
//! the lock its request conflicts with, in a per-volume table beside the lock files (a record
//! per thread id, naming its process), and follows the chain of noted waits from that holder
//! (the waits of each of its threads): if it comes back to the process itself, waiting would
//! never end. (Record locks belong to processes: any thread of the holder may be the one
//! waiting.) As on Linux, only the first conflicting lock of each wait
//! is followed, and the chain at most [`MAX_DEPTH`] steps. Two processes that start waiting for
//! each other at the same instant may both be told EDEADLK (Linux tells the second).

use std::sync::atomic::{AtomicPtr, Ordering};

use iris_media::OwnFd;
use libc::{c_int, flock as Flock, pid_t};

use crate::real;

/// Steps of the chain followed (Linux: 10).
const MAX_DEPTH: usize = 10;
/// Bytes per pid in the table.
const RECORD: i64 = 32;
/// Marks a record in use.
const NOTED: u32 = 0x5741_4954;

/// A noted wait: a thread of process `pid` waits for process `blocker`, which holds
/// `[start, start + len)` (`len` 0: to the end) of the record-lock file.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Wait {
    blocker: pid_t,
    mark: u32,
    start: i64,
    len: i64,
    pid: i64,
}

const _: () = assert!(std::mem::size_of::<Wait>() == RECORD as usize);

/// This process's open of the table, kept for its life.
static TABLE: AtomicPtr<OwnFd> = AtomicPtr::new(std::ptr::null_mut());

/// The table's fd, opened by `open` on first use.
fn table(open: impl FnOnce() -> Option<c_int>) -> Option<c_int> {
    let p = TABLE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a non-null TABLE points at an OwnFd boxed below, never freed.
        return Some(unsafe { &*p }.raw());
    }
    let own = open().and_then(OwnFd::adopt)?;
    let fd = own.raw();
    let boxed = Box::into_raw(Box::new(own));
    match TABLE.compare_exchange(
        std::ptr::null_mut(),
        boxed,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Some(fd),
        Err(kept) => {
            // SAFETY: `boxed` was never shared; `kept` as above.
            unsafe {
                drop(Box::from_raw(boxed));
                Some((*kept).raw())
            }
        }
    }
}

fn read(fd: c_int, tid: pid_t) -> Option<Wait> {
    let mut w = Wait::default();
    // SAFETY: reading RECORD bytes into a live struct of that size.
    let n = unsafe {
        real::pread(
            fd,
            std::ptr::from_mut(&mut w).cast(),
            RECORD as usize,
            i64::from(tid) * RECORD,
        )
    };
    (n == RECORD as isize && w.mark == NOTED).then_some(w)
}

fn write(fd: c_int, tid: pid_t, w: &Wait) {
    // SAFETY: writing RECORD bytes of a live struct.
    unsafe {
        real::pwrite(
            fd,
            std::ptr::from_ref(w).cast(),
            RECORD as usize,
            i64::from(tid) * RECORD,
        )
    };
}

fn me() -> pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

fn my_tid() -> pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The waits noted by the threads of process `pid`.
fn waits_of(fd: c_int, pid: pid_t) -> Vec<Wait> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<pid_t>().ok())
        .filter_map(|tid| read(fd, tid))
        .filter(|w| w.pid == i64::from(pid))
        .collect()
}

/// Forget any wait noted under this thread's id (by an earlier thread that had it and died
/// waiting, or by this thread before an exec).
pub(crate) fn clear_stale(open: impl FnOnce() -> Option<c_int>) {
    if let Some(fd) = table(open) {
        write(fd, my_tid(), &Wait::default());
    }
}

/// The request `k` on record-lock fd `record` (of lock file `ino`) conflicts with a lock:
/// note whom this process waits for, and whether waiting would deadlock (then the note is
/// taken back). `open` opens the table.
pub(crate) fn before_wait(
    record: c_int,
    ino: u64,
    k: &Flock,
    open: impl FnOnce() -> Option<c_int>,
) -> bool {
    let mut q = *k;
    // SAFETY: F_OFD_GETLK on our own fd with a live struct flock.
    if unsafe {
        real::fcntl(
            record,
            libc::F_OFD_GETLK,
            std::ptr::from_mut(&mut q) as usize,
        )
    } != 0
        || q.l_type == libc::F_UNLCK as i16
    {
        return false;
    }
    let Some(blocker) = crate::lock_owners::holder(ino, q.l_start, q.l_len) else {
        return false; // an OFD lock, or an owner not listed: nothing to follow
    };
    let Some(fd) = table(open) else { return false };
    let me = me();
    write(
        fd,
        my_tid(),
        &Wait {
            blocker,
            mark: NOTED,
            start: q.l_start,
            len: q.l_len,
            pid: i64::from(me),
        },
    );
    // Breadth first over the processes waited for, at most MAX_DEPTH steps from this one.
    let mut frontier = vec![blocker];
    let mut seen = vec![me];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for at in frontier {
            if seen.contains(&at) {
                continue;
            }
            seen.push(at);
            for w in waits_of(fd, at) {
                // A note outlives its wait only when its thread died waiting: the lock it
                // names must still be its blocker's.
                if !crate::lock_owners::holds_lock(w.blocker, ino, w.start, w.len) {
                    continue;
                }
                if w.blocker == me {
                    write(fd, my_tid(), &Wait::default());
                    return true;
                }
                next.push(w.blocker);
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    false
}

/// The wait is over (the lock taken, or the wait interrupted).
pub(crate) fn after_wait() {
    let p = TABLE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as in `table`.
        write(unsafe { &*p }.raw(), my_tid(), &Wait::default());
    }
}
