//! The writer locks: one process-shared lock per writer partition, living in the working header,
//! so every process mapping the volume (forked or not) serialises on them. Taking every
//! partition's lock, in order, is the volume lock.
//!
//! A lock is a word naming its holder (process and thread id, see `readers::me`), 0 when free,
//! and a count of sleeping waiters. It is taken by a compare-and-swap and released by a plain
//! store: a locked instruction there (a pthread mutex's unlock) waits for every store before
//! it to reach the cache, and a write in place has just copied its bytes into lines that
//! missed it (a 512 B write in place by hand: 242-255 ns with such an unlock, 180-185 with a
//! plain store). A waiter spins, then sleeps on the word (a futex) at most [`SLEEP`] at a time:
//! the releaser's look at the waiter count may pass its store, so a waiter going to sleep just
//! then may miss its wake-up, and finds the lock free when its sleep ends. A waiter that finds
//! the holder gone (its thread exited, or its process is dead or a zombie) takes the lock over
//! and hears [`Acquired::OwnerDied`], as a robust mutex's `EOWNERDEAD`: the holder may have died
//! mid-change, and the caller repairs. Holders are named by the ids of their own pid namespace,
//! as the reader slots' owners are (see `readers`): processes sharing a volume share one.

use crate::error::Result;
use crate::header::Header;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The futex is the low half of the holder word: its thread id, which changes on every release.
const _: () = assert!(cfg!(target_endian = "little"));

/// Set every partition's lock free. Only while no other process can use them (under the
/// exclusive advisory lock during recovery, or at creation).
pub(crate) fn init(header: &Header) {
    for p in 0..crate::header::PARTITIONS {
        let (holder, waiters) = header.lock_words(p);
        holder.store(0, Ordering::Release);
        waiters.store(0, Ordering::Release);
    }
}

/// Set every partition's lock up afresh for an opener alone with the volume (it holds the
/// exclusive advisory lock, so no thread anywhere holds one of these): whether any read held
/// (its holder died mid-change, or the header was copied from a volume in use, naming a thread
/// that will never let go), in which case the caller repairs as after a dead holder.
pub(crate) fn reset_alone(header: &Header) -> bool {
    let mut held = false;
    for p in 0..crate::header::PARTITIONS {
        held |= header.lock_words(p).0.load(Ordering::Acquire) != 0;
    }
    init(header);
    held
}

/// Outcome of taking the lock.
pub(crate) enum Acquired {
    /// Taken normally.
    Clean,
    /// The previous holder died while holding it: the caller must repair shared state.
    OwnerDied,
}

/// How long a waiter spins before it sleeps. Most critical sections last about a microsecond;
/// a commit (which holds every lock) a few: both far less than a futex sleep and wake-up on a
/// virtual machine, and every waiter that sleeps also costs its waker a system call. With two
/// jobs each writing and `fdatasync`ing, spinning 200 rounds (a few microseconds) put most
/// waiters to sleep and halved throughput against one job.
const SPIN: Duration = Duration::from_micros(50);
/// Spin rounds between two looks at the clock.
const SPINS_PER_CLOCK: u32 = 64;
/// The longest a waiter sleeps before it looks at the lock again (a wake-up it missed, a holder
/// that died meanwhile).
const SLEEP: Duration = Duration::from_millis(1);

/// Take the lock of partition `p`.
pub(crate) fn lock(header: &Header, p: u64) -> Result<Acquired> {
    let (holder, waiters) = header.lock_words(p);
    let me = crate::readers::me();
    // The holder seen last, and since when.
    let mut seen: Option<(u64, Instant)> = None;
    loop {
        let cur = holder.load(Ordering::Relaxed);
        if cur == 0 {
            if holder
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Acquired::Clean);
            }
            continue;
        }
        let since = match seen {
            Some((h, t)) if h == cur => t,
            _ => {
                let t = Instant::now();
                seen = Some((cur, t));
                t
            }
        };
        // Wait for the word to change with plain loads, not read-modify-writes: they leave the
        // line shared, so the holder's release does not have to win it back from the waiter.
        let mut spins = 0u32;
        while holder.load(Ordering::Relaxed) == cur {
            std::hint::spin_loop();
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_CLOCK) && since.elapsed() > SPIN {
                break;
            }
        }
        if holder.load(Ordering::Relaxed) != cur {
            continue;
        }
        // Held by `cur` all along the spin: gone, or sleep on it.
        if !holder_alive(cur) {
            if holder
                .compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Acquired::OwnerDied);
            }
            continue;
        }
        waiters.fetch_add(1, Ordering::SeqCst);
        if holder.load(Ordering::SeqCst) == cur {
            futex_wait(holder, cur as u32, SLEEP);
        }
        waiters.fetch_sub(1, Ordering::Release);
    }
}

/// Take the lock of partition `p` if it is free now; `None` (not taken) if another holds it
/// (a dead one too: [`lock`] finds that out).
pub(crate) fn try_lock(header: &Header, p: u64) -> Option<Acquired> {
    let me = crate::readers::me();
    header
        .lock_words(p)
        .0
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
        .then_some(Acquired::Clean)
}

/// Release partition `p`'s lock (the caller holds it: guards pair every lock with one
/// unlock). Every store before this one is seen before it (x86 keeps stores in order; the
/// release ordering says so elsewhere).
pub(crate) fn unlock(header: &Header, p: u64) {
    let (holder, waiters) = header.lock_words(p);
    holder.store(0, Ordering::Release);
    if waiters.load(Ordering::Relaxed) != 0 {
        futex_wake(holder);
    }
}

/// Whether the thread named by the holder word `owner` (pid << 32 | tid) still runs.
fn holder_alive(owner: u64) -> bool {
    crate::liveness::thread_runs((owner >> 32) as libc::pid_t, owner as u32 as libc::pid_t)
}

/// The address of the futex word in the holder word: its low half.
fn futex_addr(holder: &AtomicU64) -> *const u32 {
    holder.as_ptr() as *const u32
}

/// Sleep until woken, or `timeout`, while the low half of `holder` reads `expected`.
fn futex_wait(holder: &AtomicU64, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the address is the low half of an aligned 8-byte word of the mapping, which
    // outlives this call; FUTEX_WAIT (shared: the mapping spans processes) only reads it and
    // the timespec. Any error (EAGAIN: the word changed; EINTR; ETIMEDOUT) sends the caller
    // back to look at the lock.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(holder),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake one waiter sleeping on `holder`'s futex word.
fn futex_wake(holder: &AtomicU64) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE touches no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(holder),
            libc::FUTEX_WAKE,
            1u32,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, HEADER_BYTES};
    use crate::region::Region;

    /// A header over memory of its own (zeroed: every lock free), and that memory.
    fn header() -> (Header, Vec<u64>) {
        let layout = Layout::new(4096, 256).expect("layout");
        let mut words = vec![0u64; ((layout.header_off + HEADER_BYTES) / 8) as usize];
        let region = Region::new(words.as_mut_ptr() as *mut u8, words.len() as u64 * 8);
        (Header::new(region, &layout), words)
    }

    #[test]
    fn one_holder_at_a_time_across_threads() {
        let (h, _mem) = header();
        // Increments by a plain load and store: any two holders at once lose some.
        let count = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..100_000 {
                        assert!(matches!(lock(&h, 3), Ok(Acquired::Clean)));
                        let v = count.load(Ordering::Relaxed);
                        count.store(v + 1, Ordering::Relaxed);
                        unlock(&h, 3);
                    }
                });
            }
        });
        assert_eq!(count.load(Ordering::Relaxed), 200_000);
    }

    #[test]
    fn a_held_lock_is_refused_to_try_lock_and_free_again_after_unlock() {
        let (h, _mem) = header();
        assert!(matches!(try_lock(&h, 0), Some(Acquired::Clean)));
        std::thread::scope(|s| {
            s.spawn(|| assert!(try_lock(&h, 0).is_none(), "taken twice"));
            // Another partition's lock is another lock.
            s.spawn(|| {
                assert!(matches!(try_lock(&h, 1), Some(Acquired::Clean)));
                unlock(&h, 1);
            });
        });
        unlock(&h, 0);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(matches!(try_lock(&h, 0), Some(Acquired::Clean)));
                unlock(&h, 0);
            });
        });
    }

    #[test]
    fn a_sleeping_waiter_takes_the_lock_once_it_is_released() {
        let (h, _mem) = header();
        assert!(matches!(lock(&h, 5), Ok(Acquired::Clean)));
        let hold = Duration::from_millis(30);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let start = Instant::now();
                let got = lock(&h, 5);
                let waited = start.elapsed();
                unlock(&h, 5);
                (matches!(got, Ok(Acquired::Clean)), waited)
            });
            // Far past the spin: the waiter sleeps on the futex.
            std::thread::sleep(hold);
            unlock(&h, 5);
            let (clean, waited) = waiter.join().expect("waiter");
            assert!(clean, "the waiter did not get the lock cleanly");
            assert!(waited >= hold - Duration::from_millis(5), "{waited:?}");
        });
        assert_eq!(h.lock_words(5).1.load(Ordering::Relaxed), 0, "waiters left");
    }

    #[test]
    fn a_lock_whose_holder_thread_ended_is_taken_over_as_owner_died() {
        let (h, _mem) = header();
        std::thread::scope(|s| {
            s.spawn(|| assert!(matches!(try_lock(&h, 2), Some(Acquired::Clean))));
        });
        // The holder is gone without a release: the next locker hears so, and holds it.
        assert!(matches!(lock(&h, 2), Ok(Acquired::OwnerDied)));
        std::thread::scope(|s| {
            s.spawn(|| assert!(try_lock(&h, 2).is_none(), "taken over twice"));
        });
        unlock(&h, 2);
        assert!(matches!(lock(&h, 2), Ok(Acquired::Clean)));
        unlock(&h, 2);
    }
}
