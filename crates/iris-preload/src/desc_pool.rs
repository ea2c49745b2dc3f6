//! Spare description memfds, kept for reuse. Making one (memfd_create, ftruncate, mmap and the
//! first touch of its page) and destroying it cost about 16 µs here, more than the rest of an
//! open and a close together, and programs open and close files all the time (sqlite3 its
//! journal in every transaction). A description whose last fd this process closes, and that
//! never left the process (see `Desc::retire`), comes here instead: its memfd moved to a high fd
//! number, close-on-exec, its page still mapped. The next open takes it back to the lowest free
//! fd number, the one a new memfd would have had.
//!
//! A spare taken is *lent*: its entry keeps the high number open while the description is in
//! use, so an open costs one duplicate (and the check of it) and the description's return at
//! its last close costs no system call at all, where moving the number down and back up again
//! cost two more (`fcntl` and `close`; sqlite3 opens and closes its journal and its directory
//! in every transaction). The description holds the entry's [`Lent`] ticket; an entry a put
//! needs while every entry is spare or lent is taken back from a lent description, whose
//! return then finds its ticket void and is put like any other.
//!
//! The program may close or reuse a high number behind our back (close_range, a raw dup2): an
//! entry is checked against the memfd it names (device and inode) when taken, and before its
//! number is closed, and dropped if it no longer names it. Only atomics, no lock: a forked
//! child empties its copy of the pool (its parent reuses the memfds) and never waits on an
//! entry another thread held at the fork.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};

use libc::c_void;

use crate::real;

/// Entries in the pool: enough for the files a program opens and closes in turn, beside the
/// ones lent to its files open for long.
const SLOTS: usize = 16;
/// Bytes of a description's mapped page (see `description`).
const PAGE: usize = 4096;

const EMPTY: u64 = 0;
const BUSY: u64 = 1;
const FULL: u64 = 2;
/// Its memfd is in use by a description (which owns the page), its high number still open: the
/// state word is `lent(ticket)`, so one compare-exchange both finds the entry lent and checks
/// whose lending it is (no ticket repeats, so no other lending can look like it).
const LENT: u64 = 3;
/// The bits of a state word that say which state it is (the rest: a lending's ticket).
const STATE_BITS: u64 = 3;

/// The state word of an entry lent with `ticket`.
const fn lent(ticket: u64) -> u64 {
    (ticket << 2) | LENT
}

/// One spare: its memfd at a high number, its mapped page and the memfd's identity.
struct Entry {
    /// EMPTY, BUSY, FULL, or `lent(ticket)`.
    state: AtomicU64,
    fd: AtomicI32,
    page: AtomicPtr<c_void>,
    dev: AtomicU64,
    ino: AtomicU64,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            state: AtomicU64::new(EMPTY),
            fd: AtomicI32::new(-1),
            page: AtomicPtr::new(std::ptr::null_mut()),
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
        }
    }
}

/// What a description taken from the pool holds: its entry and the ticket of that lending. A
/// ticket is void once the entry was taken back (see the module doc) or emptied in a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lent {
    slot: usize,
    ticket: u64,
}

/// The last ticket handed out (tickets start at 1 and never repeat).
static TICKETS: AtomicU64 = AtomicU64::new(0);

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

/// A spare duplicated to the lowest free fd number (close-on-exec when `cloexec`), its mapped
/// page (the caller writes the description anew), its memfd's identity and the ticket of the
/// lending (see [`give_back`]); `None` when there is none.
pub(crate) fn take(cloexec: bool) -> Option<(i32, *mut c_void, MemfdId, Lent)> {
    for (slot, e) in POOL.iter().enumerate() {
        if e.state.load(Ordering::Relaxed) != FULL
            || e.state
                .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        let (high, page) = (e.fd.load(Ordering::Relaxed), e.page.load(Ordering::Relaxed));
        let (dev, ino) = (e.dev.load(Ordering::Relaxed), e.ino.load(Ordering::Relaxed));
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
            e.state.store(EMPTY, Ordering::Release);
            continue;
        }
        if !names(low, dev, ino) {
            // The high number names one of the program's files now: leave it be.
            // SAFETY: closing the duplicate just made.
            unsafe { real::close(low) };
            unmap(page);
            e.state.store(EMPTY, Ordering::Release);
            continue;
        }
        let ticket = TICKETS.fetch_add(1, Ordering::Relaxed) + 1;
        e.state.store(lent(ticket), Ordering::Release);
        return Some((low, page, (dev, ino), Lent { slot, ticket }));
    }
    None
}

/// The state word of `lent`'s entry while that lending is in force.
fn lent_word(lent: Lent) -> u64 {
    self::lent(lent.ticket)
}

/// Claim the entry of `lent` (lent -> BUSY) if its ticket is still in force.
fn claim(lent: Lent) -> Option<&'static Entry> {
    let e = POOL.get(lent.slot)?;
    e.state
        .compare_exchange(lent_word(lent), BUSY, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| e)
}

/// The lent description's memfd (its last fd, which the caller closes next) comes back as a
/// spare with its mapped `page`, without a system call: its entry kept the high number.
/// `false` (nothing done) when the ticket is void; the caller then tries [`put`].
pub(crate) fn give_back(lent: Lent, page: *mut c_void) -> bool {
    let Some(e) = claim(lent) else {
        return false;
    };
    e.page.store(page, Ordering::Relaxed);
    e.state.store(FULL, Ordering::Release);
    true
}

/// The lent description is not coming back (it left the process, or is dropped): its entry
/// closes the high number (if it still names the memfd) and is empty again. Nothing when the
/// ticket is void.
pub(crate) fn release(lent: Lent) {
    if let Some(e) = claim(lent) {
        close_high(e);
        e.state.store(EMPTY, Ordering::Release);
    }
}

/// Close the high number of claimed entry `e` if it still names the entry's memfd.
fn close_high(e: &Entry) {
    let high = e.fd.load(Ordering::Relaxed);
    if names(
        high,
        e.dev.load(Ordering::Relaxed),
        e.ino.load(Ordering::Relaxed),
    ) {
        // SAFETY: `high` names our memfd: closing our own fd.
        unsafe { real::close(high) };
    }
}

/// Claim `e` (lent -> BUSY) if it is lent, whoever holds the ticket (which is void from then).
fn claim_lent(e: &Entry) -> bool {
    let st = e.state.load(Ordering::Relaxed);
    st & STATE_BITS == LENT
        && e.state
            .compare_exchange(st, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
}

/// An entry for a put: an empty one, else one taken back from a lent description (its high
/// number closed; the description's ticket is void from here on). Claimed (BUSY).
fn entry_for_put() -> Option<&'static Entry> {
    let empty = POOL.iter().find(|e| {
        e.state.load(Ordering::Relaxed) == EMPTY
            && e.state
                .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    });
    empty.or_else(|| {
        let e = POOL.iter().find(|e| claim_lent(e))?;
        close_high(e);
        Some(e)
    })
}

/// Keep the memfd `fd` (identity `id`, whose last close the caller makes next) and its mapped
/// `page` for reuse; `false` (nothing kept, `fd` and `page` untouched) when the pool is full or
/// the memfd cannot move to a high number.
pub(crate) fn put(fd: i32, page: *mut c_void, id: MemfdId) -> bool {
    let min = high_min();
    if min < 0 {
        return false;
    }
    let Some(e) = entry_for_put() else {
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
        // The child's copies of the high numbers, closed only if they still name the memfds:
        // the program may have put a file of its own on one meanwhile, all the more while a
        // spare is lent, for as long as its file is open (fstat is async-signal-safe).
        match e.state.load(Ordering::Relaxed) & STATE_BITS {
            FULL => {
                close_high(e);
                unmap(e.page.load(Ordering::Relaxed));
            }
            // A lent one's page is its description's.
            LENT => close_high(e),
            _ => {}
        }
        e.state.store(EMPTY, Ordering::Relaxed);
    }
}

/// Give every spare's fd number back, and the high numbers of the lent ones (the program is
/// out of numbers: EMFILE); how many.
pub(crate) fn drain() -> usize {
    let mut given = 0;
    for e in POOL.iter() {
        if e.state
            .compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            close_high(e);
            unmap(e.page.load(Ordering::Relaxed));
        } else if claim_lent(e) {
            close_high(e);
        } else {
            continue;
        }
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

    /// The number of the entry in state `state`, if one is.
    fn number_in(state: u64) -> Option<i32> {
        POOL.iter()
            .find(|e| e.state.load(Ordering::Relaxed) & STATE_BITS == state)
            .map(|e| e.fd.load(Ordering::Relaxed))
    }

    /// Whether `fd` is open.
    fn is_open(fd: i32) -> bool {
        // SAFETY: F_GETFD only reads flags.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    #[test]
    fn a_spare_is_lent_given_back_taken_back_and_dropped_when_its_number_was_taken() {
        // One test: the pool is the process's.
        let (fd, page, id) = crate::description::Desc::make(true).expect("a description memfd");
        let (page, id) = (page.cast::<c_void>(), id.expect("its identity"));
        assert!(put(fd, page, id));
        assert_eq!(spares(), 1);
        let high = number_in(FULL).expect("the spare's high number");
        // SAFETY: the caller of `put` closes its fd next, as close() does.
        unsafe { libc::close(fd) };
        let (low, back, back_id, lent) = take(true).expect("the spare");
        assert_eq!(
            (id_of(low), back, back_id),
            (Some(id), page, id),
            "the same memfd and page"
        );
        // (The lowest free number: `fd` here, unless another test took or freed one meanwhile.)
        assert!(low < high_min(), "duplicated down from its high number");
        assert_eq!(spares(), 0);
        assert_eq!(
            number_in(LENT),
            Some(high),
            "lent, its high number kept open"
        );
        assert_eq!(id_of(high), Some(id));

        // Its last close gives it back as it is: a spare again at the same high number.
        assert!(give_back(lent, back));
        assert!(!give_back(lent, back), "a ticket is spent once");
        // SAFETY: closing the low number, as close() does after `give_back`.
        unsafe { libc::close(low) };
        assert_eq!((spares(), number_in(FULL)), (1, Some(high)));

        // Lent again, then taken back for a put while every other entry is in use: the lent
        // description's ticket is void, and its return goes through `put` instead.
        let (low, back, _, lent) = take(true).expect("the spare again");
        let mut others = Vec::new();
        for _ in 1..SLOTS {
            let (fd, page, id) = crate::description::Desc::make(true).expect("a memfd");
            assert!(put(fd, page.cast(), id.expect("identity")));
            // SAFETY: as above.
            unsafe { libc::close(fd) };
            others.push(take(true).expect("taken"));
        }
        assert_eq!(number_in(EMPTY), None, "every entry lent");
        let (fd, extra_page, extra_id) = crate::description::Desc::make(true).expect("a memfd");
        assert!(
            put(fd, extra_page.cast(), extra_id.expect("identity")),
            "an entry taken back"
        );
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        assert_eq!(spares(), 1);
        assert!(!give_back(lent, back), "its ticket went with the entry");
        // Lent to another description: the old ticket still gives nothing back.
        let (extra_low, _, _, extra) = take(true).expect("the new spare");
        assert_eq!(extra.slot, lent.slot);
        assert!(!give_back(lent, back), "a void ticket, its entry lent anew");
        assert!(give_back(extra, extra_page.cast()));
        // SAFETY: as above.
        unsafe { libc::close(extra_low) };
        assert_ne!(
            id_of(high),
            Some(id),
            "the taken-back entry's high number closed (or reused for the new spare)"
        );
        // The descriptions still lent are released (as when they are dropped unused).
        for (low, page, _, lent) in others {
            let number = POOL[lent.slot].fd.load(Ordering::Relaxed);
            release(lent);
            assert!(!is_open(number), "a released entry's high number closed");
            // SAFETY: this test's own fd and mapping.
            unsafe {
                libc::close(low);
                libc::munmap(page, PAGE);
            }
        }
        assert_eq!(spares(), 1);
        // SAFETY: as above.
        unsafe {
            libc::close(low);
            libc::munmap(back, PAGE);
        }

        // The program closes the spare's high number and opens a file of its own there.
        let high = number_in(FULL).expect("a full entry");
        // SAFETY: replacing the spare's number with /dev/null, as a program's dup2 would.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(null >= 0);
        assert_eq!(unsafe { libc::dup2(null, high) }, high);
        assert!(
            take(true).is_none(),
            "a spare whose number names another file is dropped"
        );
        assert_eq!(spares(), 0);
        assert!(is_open(high), "the program's file is left open");
        // SAFETY: closing this test's own fds.
        unsafe {
            libc::close(high);
            libc::close(null);
        }
    }
}
