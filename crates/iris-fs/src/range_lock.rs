//! Byte ranges in flight on one file, ordered the way CrossFS orders them: a per-inode interval
//! tree of the ranges that changes of the file hold or wait for. A request waits only for the
//! earlier requests in the tree whose ranges overlap its own, each of them, however partially
//! (a range spanning parts of two requests in flight waits for both; one beside them does not
//! wait at all), and conflicting requests are served in the order they arrived: a later request
//! overlapping a waiting one queues behind it even where no holder covers it, so a long range
//! is never starved by a stream of short ones. No lock is held while a request runs, only the
//! tree's own for its insertion and removal.
//!
//! Who enters the tree (see `Fs::write_impl`): truncates, appends, zeroed and punched ranges,
//! and writes before any store path that holds more than the written blocks' partition locks,
//! always; a write the store serves under those locks alone (an overwrite in place) only when
//! the tree holds a range as it starts (entering on every write cost two threads writing one
//! file 15-25 %: the tree's line bounced between them at each write). Such a write and a request
//! that enters the tree just after its look are ordered by the store's partition locks, not by
//! arrival; each is still whole. Between processes, the store's writer partitions (shared by
//! every process in the volume's header) order the same requests: the range lock is the
//! in-process queue in front of them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::interval::IntervalTree;
use crate::ForkSafeMutex;

/// Spins on the flag before sleeping on it: the requests waited for are short.
const SPINS_BEFORE_SLEEP: u32 = 200;

/// What the tree keeps beside each range.
#[derive(Default)]
struct Wait {
    /// Earlier overlapping requests still in the tree.
    blocked: u32,
    /// The flag its thread sleeps on while `blocked` is not zero (0: wait, 1: go).
    flag: Option<Arc<AtomicU32>>,
}

struct State {
    tree: IntervalTree<Wait>,
    next_ticket: u64,
    /// Moves when a forked child clears the tree: guards taken before it release nothing.
    generation: u64,
}

/// The ranges in flight on one file in this process (see the module doc).
pub struct RangeLock {
    state: ForkSafeMutex<State>,
    /// Ranges in the tree (held or waiting), kept under `state`'s lock: read without it by
    /// the writes that consult the tree only when it holds something.
    busy: AtomicU32,
}

/// A range held in a [`RangeLock`]; released when dropped.
#[must_use = "the range is released when the guard is dropped"]
pub struct RangeGuard<'a> {
    lock: &'a RangeLock,
    id: u32,
    generation: u64,
}

impl Default for RangeLock {
    fn default() -> Self {
        RangeLock {
            state: ForkSafeMutex::new(State {
                tree: IntervalTree::default(),
                next_ticket: 0,
                generation: 0,
            }),
            busy: AtomicU32::new(0),
        }
    }
}

/// Sleep while `flag` reads 0.
fn sleep_while_zero(flag: &AtomicU32) {
    for _ in 0..SPINS_BEFORE_SLEEP {
        if flag.load(Ordering::Acquire) != 0 {
            return;
        }
        std::hint::spin_loop();
    }
    while flag.load(Ordering::Acquire) == 0 {
        // SAFETY: FUTEX_WAIT on a live atomic word (the caller holds an `Arc` of it), with no
        // timeout; it returns at once if the word no longer reads 0.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                flag.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                0u32,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }
}

/// Set `flag` to 1 and wake its sleeper.
fn wake(flag: &AtomicU32) {
    flag.store(1, Ordering::Release);
    // SAFETY: FUTEX_WAKE on a live atomic word (the caller holds an `Arc` of it).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            flag.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1i32,
        );
    }
}

impl RangeLock {
    /// Take bytes `[start, end)` (an empty range counts as its first byte): returns once every
    /// earlier request overlapping it has been released.
    pub fn lock(&self, start: u64, end: u64) -> RangeGuard<'_> {
        let end = end.max(start.saturating_add(1));
        let (id, generation, flag) = {
            let mut s = self.state.lock();
            let ticket = s.next_ticket;
            s.next_ticket += 1;
            let mut blocked = 0u32;
            s.tree.for_each_overlap(start, end, |_| blocked += 1);
            let flag = (blocked > 0).then(|| Arc::new(AtomicU32::new(0)));
            let wait = Wait {
                blocked,
                flag: flag.clone(),
            };
            let id = s.tree.insert(start, end, ticket, wait);
            self.busy.store(s.tree.len() as u32, Ordering::Release);
            (id, s.generation, flag)
        };
        if let Some(flag) = flag {
            sleep_while_zero(&flag);
        }
        RangeGuard {
            lock: self,
            id,
            generation,
        }
    }

    /// Ranges held or waiting.
    pub fn in_flight(&self) -> usize {
        self.state.lock().tree.len()
    }

    /// Whether no range is held or waiting, read without the tree's lock (a glance: a range
    /// may arrive right after).
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }

    /// Hold the tree's lock across a `fork()` (see `Fs::lock_for_fork`).
    pub(crate) fn lock_for_fork(&self) {
        std::mem::forget(self.state.lock());
    }

    /// Release what [`RangeLock::lock_for_fork`] took, in the parent.
    ///
    /// # Safety
    /// Only after `lock_for_fork`, in the thread that called it.
    pub(crate) unsafe fn unlock_after_fork(&self) {
        // SAFETY: per the contract, lock_for_fork left the lock held with its guard forgotten.
        unsafe { self.state.force_unlock() };
    }

    /// In a forked child, after [`RangeLock::lock_for_fork`]: forget every range (they belong
    /// to threads the child does not have), let anything waiting go, and release the lock.
    ///
    /// # Safety
    /// Only in the child of the fork that `lock_for_fork` preceded.
    pub(crate) unsafe fn clear_in_child(&self) {
        // SAFETY: per the contract, the lock is held with its guard forgotten, by the thread
        // that is now the child's only one.
        unsafe { self.state.force_unlock() };
        let mut s = self.state.lock();
        // (Only a signal handler that forked while its thread waited here would find one.)
        s.tree.for_each_overlap(0, u64::MAX, |n| {
            if let Some(f) = n.data.flag.take() {
                f.store(1, Ordering::Release);
            }
        });
        s.tree.clear();
        s.generation += 1;
        self.busy.store(0, Ordering::Release);
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut go = Vec::new();
        {
            let mut s = self.lock.state.lock();
            if s.generation != self.generation {
                return;
            }
            let Some(n) = s.tree.remove(self.id) else {
                return;
            };
            self.lock.busy.store(s.tree.len() as u32, Ordering::Release);
            s.tree.for_each_overlap(n.start, n.end, |m| {
                if m.ticket > n.ticket && m.data.blocked > 0 {
                    m.data.blocked -= 1;
                    if m.data.blocked == 0 {
                        go.extend(m.data.flag.take());
                    }
                }
            });
        }
        for f in go {
            wake(&f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// Take `[s, e)` in another thread, which reports when it holds it and releases it when
    /// told. Returns (held, release).
    fn take_elsewhere(
        lock: &Arc<RangeLock>,
        s: u64,
        e: u64,
    ) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let lock = Arc::clone(lock);
        thread::spawn(move || {
            let _g = lock.lock(s, e);
            let _ = held_tx.send(());
            let _ = release_rx.recv();
        });
        (held, release)
    }

    /// Wait until `n` ranges are in the tree (a request has arrived, held or waiting).
    fn until_in_flight(lock: &RangeLock, n: usize) {
        let t = Instant::now();
        while lock.in_flight() != n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "never reached {n} in flight"
            );
            thread::yield_now();
        }
    }

    const LONG: Duration = Duration::from_secs(10);
    const SHORT: Duration = Duration::from_millis(50);

    #[test]
    fn partial_overlaps_wait_for_each_earlier_range_and_in_order() {
        let lock = Arc::new(RangeLock::default());
        let (a_held, a_go) = take_elsewhere(&lock, 0, 10);
        a_held
            .recv_timeout(LONG)
            .expect("an empty file's first range is granted");
        // Overlaps the tail of A: waits.
        let (b_held, b_go) = take_elsewhere(&lock, 5, 15);
        until_in_flight(&lock, 2);
        // Beside A: granted at once, while B waits.
        let (c_held, c_go) = take_elsewhere(&lock, 20, 30);
        c_held
            .recv_timeout(LONG)
            .expect("a disjoint range does not wait");
        // Overlaps waiting B (where A does not reach) and held C: waits for both.
        let (d_held, d_go) = take_elsewhere(&lock, 12, 22);
        until_in_flight(&lock, 4);
        assert!(b_held.recv_timeout(SHORT).is_err(), "B overlaps A");
        assert!(d_held.recv_timeout(SHORT).is_err(), "D overlaps B and C");
        a_go.send(()).unwrap();
        b_held.recv_timeout(LONG).expect("B goes once A is gone");
        c_go.send(()).unwrap();
        until_in_flight(&lock, 2); // (C gone: B holds, D waits)
        assert!(
            d_held.recv_timeout(SHORT).is_err(),
            "D still waits for B, which arrived first"
        );
        b_go.send(()).unwrap();
        d_held
            .recv_timeout(LONG)
            .expect("D goes once B and C are gone");
        d_go.send(()).unwrap();
        until_in_flight(&lock, 0);
    }

    #[test]
    fn touching_ranges_do_not_conflict_and_open_ended_ones_do() {
        let lock = Arc::new(RangeLock::default());
        let a = lock.lock(0, 4096);
        assert!(!lock.is_idle());
        // The range right after it, taken elsewhere: granted (a conflict would time out here,
        // not hang the test).
        let (b_held, b_go) = take_elsewhere(&lock, 4096, 8192);
        b_held
            .recv_timeout(LONG)
            .expect("[4096, 8192) does not overlap [0, 4096)");
        let c = lock.lock(1 << 40, u64::MAX);
        assert_eq!(lock.in_flight(), 3);
        drop(a);
        assert_eq!(lock.in_flight(), 2);
        let (held, go) = take_elsewhere(&lock, u64::MAX - 1, u64::MAX);
        until_in_flight(&lock, 3);
        assert!(
            held.recv_timeout(SHORT).is_err(),
            "inside the open-ended range"
        );
        drop(c);
        held.recv_timeout(LONG)
            .expect("granted once the open-ended range is gone");
        drop((b_go, go));
        until_in_flight(&lock, 0);
        assert!(lock.is_idle());
    }

    #[test]
    fn holders_of_overlapping_ranges_never_overlap_in_time() {
        // Each thread takes random ranges over 256 units and, while it holds one, marks the
        // units as its own and checks no other thread marked any of them.
        const UNITS: u64 = 256;
        let lock = Arc::new(RangeLock::default());
        let owner: Arc<Vec<AtomicU32>> = Arc::new((0..UNITS).map(|_| AtomicU32::new(0)).collect());
        let threads: Vec<_> = (1..=4u32)
            .map(|me| {
                let (lock, owner) = (Arc::clone(&lock), Arc::clone(&owner));
                thread::spawn(move || {
                    let mut x = u64::from(me) * 0x9e37_79b9;
                    for _ in 0..3000 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let s = (x >> 33) % UNITS;
                        let e = (s + 1 + (x >> 20) % 32).min(UNITS);
                        let _g = lock.lock(s, e);
                        for u in s..e {
                            let was = owner[u as usize].swap(me, Ordering::SeqCst);
                            assert_eq!(was, 0, "unit {u} held by {was} and {me}");
                        }
                        thread::yield_now();
                        for u in s..e {
                            owner[u as usize].store(0, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no overlap seen");
        }
        assert_eq!(lock.in_flight(), 0);
    }

    #[test]
    fn a_child_clears_the_ranges_of_threads_it_lacks() {
        let lock = Arc::new(RangeLock::default());
        let (held, _go) = take_elsewhere(&lock, 0, 100);
        held.recv_timeout(LONG).unwrap();
        let kept = lock.lock(200, 300);
        lock.lock_for_fork();
        // SAFETY (test): stands for the child side of a fork; no other thread takes this lock
        // meanwhile (the holder above is parked on its channel).
        unsafe { lock.clear_in_child() };
        assert_eq!(lock.in_flight(), 0);
        // The range the other thread held is free, and the guard from before releases nothing.
        let g = lock.lock(0, 1000);
        drop(kept);
        assert_eq!(lock.in_flight(), 1);
        drop(g);
        assert_eq!(lock.in_flight(), 0);
    }
}
