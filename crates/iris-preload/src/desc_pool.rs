//! Spare description memfds, kept for reuse. Making one (memfd_create, ftruncate, mmap and the
//! first touch of its page) and destroying it cost about 16 µs here, more than the rest of an
//! open and a close together, and programs open and close files all the time (sqlite3 its
//! journal in every transaction). A description whose last fd this process closes, and that
//! never left the process (see `Desc::retire`), comes here instead: its memfd moved to a high fd
//! number, close-on-exec, its page still mapped. The next open takes it back to the lowest free
//! fd number, the one a new memfd would have had.
//!
//! The program may close or reuse a high number behind our back (close_range, a raw dup2): an
//! entry is checked against the memfd it names (device and inode) when taken, and dropped if it
//! no longer names it. Only atomics, no lock: a forked child empties its copy of the pool (its
//! parent reuses the memfds) and never waits on an entry another thread held at the fork.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use libc::c_void;

use crate::real;

/// Entries in the pool: enough for the files a program opens and closes in turn.
const SLOTS: usize = 8;
/// Bytes of a description's mapped page (see `description`).
const PAGE: usize = 4096;

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const FULL: u32 = 2;

/// One spare: its memfd at a high number, its mapped page and the memfd's identity.
struct Entry {
    state: AtomicU32,
    fd: AtomicI32,
    page: AtomicPtr<c_void>,
    dev: AtomicU64,
    ino: AtomicU64,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            state: AtomicU32::new(EMPTY),
            fd: AtomicI32::new(-1),
            page: AtomicPtr::new(std::ptr::null_mut()),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
        }
    }
}

static POOL: [Entry; SLOTS] = [const { Entry::new() }; SLOTS];

/// The lowest fd number spares are moved to (0: not computed yet, -1: no pooling).
static HIGH_MIN: AtomicI32 = AtomicI32::new(0);
/// The highest fd number a spare may take: above it, the program uses most of its numbers and
/// would meet EMFILE early (in calls Iris does not see) for numbers spares hold.
static HIGH_MAX: AtomicI32 = AtomicI32::new(0);

/// Spares live at or above half the soft limit of open files, at most 512: far above the
/// numbers programs use, within the limit (fd tables grow to the highest number in use).
fn high_min() -> i32 {
    let v = HIGH_MIN.load(Ordering::Relaxed);
    if v != 0 {
        return v;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    let v = if !ok || lim.rlim_cur < 64 {
        -1
    } else {
        i32::try_from((lim.rlim_cur / 2).min(512)).unwrap_or(512)
    };
    let max = i32::try_from(lim.rlim_cur / 4 * 3).unwrap_or(i32::MAX);
    HIGH_MAX.store(max, Ordering::Relaxed);
    HIGH_MIN.store(v, Ordering::Relaxed);
    v
}

/// Whether `fd` is the memfd (`dev`, `ino`).
fn names(fd: i32, dev: u64, ino: u64) -> bool {
    id_of(fd) == Some((dev, ino))
}

fn unmap(page: *mut c_void) {
    // libc's munmap, not ours: ours takes the table of mappings, which a forked child's
    // handlers (`empty_in_child`) find still held by the fork.
    // SAFETY: `page` is a description page mapped by `description` and owned by the entry
    // just emptied: nothing else refers to it.
    unsafe { real::munmap(page, PAGE) };
}

/// The identity of a memfd (device and inode numbers), by which a spare is checked.
pub(crate) type MemfdId = (u64, u64);

/// The identity of the memfd `fd`, if fstat succeeds.
pub(crate) fn id_of(fd: i32) -> Option<MemfdId> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the struct we pass.
    (unsafe { real::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// A spare moved to the lowest free fd number (close-on-exec when `cloexec`), its mapped page
/// (the caller writes the description anew) and its memfd's identity; `None` when there is
/// none.
pub(crate) fn take(cloexec: bool) -> Option<(i32, *mut c_void, MemfdId)> {
    for e in POOL.iter() {
        if e.state.load(Ordering::Relaxed) != FULL
            || e.state
                .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        let (high, page) = (e.fd.load(Ordering::Relaxed), e.page.load(Ordering::Relaxed));
        let (dev, ino) = (e.dev.load(Ordering::Relaxed), e.ino.load(Ordering::Relaxed));
        e.state.store(EMPTY, Ordering::Release);
        let cmd = if cloexec {
            libc::F_DUPFD_CLOEXEC
        } else {
            libc::F_DUPFD
        };
        // SAFETY: duplicating a number to the lowest free one changes no memory.
        let low = unsafe { real::fcntl(high, cmd, 0) };
        if low < 0 {
            // Closed behind our back (EBADF), or no number free (EMFILE): drop the spare.
            if names(high, dev, ino) {
                // SAFETY: `high` still names our memfd: closing our own fd.
                unsafe { real::close(high) };
            }
            unmap(page);
            continue;
        }
        if !names(low, dev, ino) {
            // The high number names one of the program's files now: leave it be.
            // SAFETY: closing the duplicate just made.
            unsafe { real::close(low) };
            unmap(page);
            continue;
        }
        // SAFETY: `high` names our memfd (its duplicate `low` does): closing our own fd.
        unsafe { real::close(high) };
        return Some((low, page, (dev, ino)));
    }
    None
}

/// Keep the memfd `fd` (identity `id`, whose last close the caller makes next) and its mapped
/// `page` for reuse; `false` (nothing kept, `fd` and `page` untouched) when the pool is full or
/// the memfd cannot move to a high number.
pub(crate) fn put(fd: i32, page: *mut c_void, id: MemfdId) -> bool {
    let min = high_min();
    if min < 0 {
        return false;
    }
    let Some(e) = POOL.iter().find(|e| {
        e.state.load(Ordering::Relaxed) == EMPTY
            && e.state
                .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }) else {
        return false;
    };
    // SAFETY: duplicating the caller's fd to a free number at or above `min`.
    let high = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, min as usize) };
    if high < 0 || high > HIGH_MAX.load(Ordering::Relaxed) {
        if high >= 0 {
            // SAFETY: closing the duplicate just made.
            unsafe { real::close(high) };
        }
        e.state.store(EMPTY, Ordering::Release);
        return false;
    }
    e.fd.store(high, Ordering::Relaxed);
    e.page.store(page, Ordering::Relaxed);
    e.dev.store(id.0, Ordering::Relaxed);
    e.ino.store(id.1, Ordering::Relaxed);
    e.state.store(FULL, Ordering::Release);
    true
}

/// In a forked child: close and unmap every spare (the parent goes on reusing its memfds). An
/// entry another thread of the parent held at the fork is only forgotten.
pub(crate) fn empty_in_child() {
    for e in POOL.iter() {
        if e.state.load(Ordering::Relaxed) == FULL {
            // SAFETY: the child's copy of the parent's spare: its own fd now.
            unsafe { real::close(e.fd.load(Ordering::Relaxed)) };
            unmap(e.page.load(Ordering::Relaxed));
        }
        e.state.store(EMPTY, Ordering::Relaxed);
    }
}

/// Give every spare's fd number back (the program is out of numbers: EMFILE); how many.
pub(crate) fn drain() -> usize {
    let mut given = 0;
    for e in POOL.iter() {
        if e.state
            .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        let high = e.fd.load(Ordering::Relaxed);
        if names(
            high,
            e.dev.load(Ordering::Relaxed),
            e.ino.load(Ordering::Relaxed),
        ) {
            // SAFETY: `high` names our memfd: closing our own fd.
            unsafe { real::close(high) };
        }
        unmap(e.page.load(Ordering::Relaxed));
        e.state.store(EMPTY, Ordering::Release);
        given += 1;
    }
    given
}

/// How many spares the pool holds (for tests).
#[cfg(test)]
pub(crate) fn spares() -> usize {
    POOL.iter()
        .filter(|e| e.state.load(Ordering::Relaxed) == FULL)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_comes_back_at_the_lowest_free_number_unless_its_number_was_taken() {
        // One test: the pool is the process's.
        let (fd, page, id) = crate::description::Desc::make(true).expect("a description memfd");
        let (page, id) = (page.cast::<c_void>(), id.expect("its identity"));
        assert!(put(fd, page, id));
        assert_eq!(spares(), 1);
        // SAFETY: the caller of `put` closes its fd next, as close() does.
        unsafe { libc::close(fd) };
        let (low, back, back_id) = take(true).expect("the spare");
        assert_eq!(
            (id_of(low), back, back_id),
            (Some(id), page, id),
            "the same memfd and page"
        );
        // (The lowest free number: `fd` here, unless another test took or freed one meanwhile.)
        assert!(low < high_min(), "moved back down from its high number");
        assert_eq!(spares(), 0);

        // The program closes the spare's high number and opens a file of its own there.
        assert!(put(low, back, id));
        // SAFETY: closing the low number, as close() does after `put`.
        unsafe { libc::close(low) };
        let high = POOL
            .iter()
            .find(|e| e.state.load(Ordering::Relaxed) == FULL)
            .map(|e| e.fd.load(Ordering::Relaxed))
            .expect("a full entry");
        // SAFETY: replacing the spare's number with /dev/null, as a program's dup2 would.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(null >= 0);
        assert_eq!(unsafe { libc::dup2(null, high) }, high);
        assert_eq!(
            take(true),
            None,
            "a spare whose number names another file is dropped"
        );
        assert_eq!(spares(), 0);
        // The program's file is left open.
        // SAFETY: F_GETFD only reads flags.
        assert!(unsafe { libc::fcntl(high, libc::F_GETFD) } >= 0);
        // SAFETY: closing this test's own fds.
        unsafe {
            libc::close(high);
            libc::close(null);
        }
    }
}
