//! Grace periods for the fd table: a call reads its open file through a plain pointer from the
//! table (no reference count to move, so no locked instruction on the hot path), and whoever
//! takes an entry out of the table waits, before the file can be freed, until every call that
//! could have loaded the pointer has returned.
//!
//! Each thread has a slot whose counter is odd while the thread is inside a [`Section`]. A
//! reader makes its counter odd, then loads the table; a remover takes the entry out, then
//! [`synchronize`] waits for every slot that is odd to move. The two sides need a full barrier
//! between their store and their load (else a reader's store could sit in its store buffer while
//! it loads the old pointer and the remover reads the slot as even). Readers get it for free:
//! the remover calls `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs a barrier on every
//! CPU running a thread of this process (a thread not running has passed a context switch,
//! which is one), so a reader needs only a compiler fence. Where the kernel refuses membarrier,
//! readers fence for themselves. Threads beyond [`SLOTS`] count themselves in one shared counter
//! with a locked instruction.
//!
//! What a section may not do: wait for another thread indefinitely (a remover waits for it). A
//! remover inside a section of its own (a signal handler that interrupted a call) cannot know
//! the interrupted call is not using the entry it removes: [`synchronize`] says so, and the
//! entry is leaked instead of freed.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Threads with a slot of their own; more than this share [`OVERFLOW`].
const SLOTS: usize = 1024;

/// `membarrier` commands (linux/membarrier.h).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// One thread's counter, odd while it is inside a section, on a line of its own.
#[repr(align(64))]
struct Slot {
    seq: AtomicU64,
    taken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    seq: AtomicU64::new(0),
    taken: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// Readers inside a section without a slot of their own.
static OVERFLOW: AtomicU64 = AtomicU64::new(0);

/// Registration with membarrier: not tried yet, registered (readers fence with the compiler
/// only), or refused (readers fence for themselves).
const UNTRIED: u8 = 0;
const REGISTERED: u8 = 1;
const REFUSED: u8 = 2;
static BARRIER: AtomicU8 = AtomicU8::new(UNTRIED);

/// No slot: the thread has not entered a section yet.
const NO_SLOT: usize = usize::MAX;
/// Slots were all taken when the thread first entered: it counts itself in [`OVERFLOW`].
const OVERFLOWED: usize = usize::MAX - 1;

/// A thread's reader state (one thread-local: one lookup per enter and per exit); gives the
/// slot back when the thread exits.
struct Reader {
    /// The slot (an index into `TABLE`, or `NO_SLOT`/`OVERFLOWED`).
    slot: Cell<usize>,
    /// Sections this thread is inside (only the outermost touches the slot).
    depth: Cell<u32>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(slot) = TABLE.get(self.slot.get()) {
            slot.taken.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static READER: Reader = const {
        Reader {
            slot: Cell::new(NO_SLOT),
            depth: Cell::new(0),
        }
    };
}

/// Register this process for membarrier, once; before the first pointer is published in the
/// fd table (see `fdtable::install`), so that a remover of any entry finds the registration
/// made. Readers that saw it not yet made fence for themselves.
pub(crate) fn register() {
    if BARRIER.load(Ordering::Acquire) != UNTRIED {
        return;
    }
    let state = if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) {
        REGISTERED
    } else {
        REFUSED
    };
    BARRIER.store(state, Ordering::Release);
}

fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Claim a free slot for this thread (or none: `OVERFLOWED`).
#[cold]
fn claim(r: &Reader) -> usize {
    let got = TABLE
        .iter()
        .position(|s| {
            s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .unwrap_or(OVERFLOWED);
    r.slot.set(got);
    got
}

/// This thread's (slot, depth), without claiming one.
fn mine() -> (usize, u32) {
    READER
        .try_with(|r| (r.slot.get(), r.depth.get()))
        .unwrap_or((NO_SLOT, 0))
}

/// Inside this guard, a pointer loaded from the fd table stays valid (see the module doc).
pub(crate) struct Section {
    /// The slot entered (`TABLE`'s index, or `OVERFLOWED`), or `NO_SLOT` when nested in
    /// another section of this thread.
    slot: usize,
}

impl Section {
    /// Enter a section (nested ones cost a thread-local increment).
    #[inline]
    pub(crate) fn enter() -> Section {
        let slot = READER
            .try_with(|r| {
                let depth = r.depth.get();
                r.depth.set(depth + 1);
                if depth > 0 {
                    return NO_SLOT;
                }
                match r.slot.get() {
                    NO_SLOT => claim(r),
                    s => s,
                }
            })
            // The thread is exiting (its reader state gone): the shared counter.
            .unwrap_or(OVERFLOWED);
        match TABLE.get(slot) {
            Some(s) => {
                // Odd: inside. Only this thread writes its counter.
                s.seq
                    .store(s.seq.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                if BARRIER.load(Ordering::Relaxed) == REGISTERED {
                    compiler_fence(Ordering::SeqCst);
                } else {
                    fence(Ordering::SeqCst);
                }
            }
            None if slot == OVERFLOWED => {
                // A locked instruction: a full barrier of its own.
                OVERFLOW.fetch_add(1, Ordering::SeqCst);
            }
            None => {}
        }
        Section { slot }
    }
}

impl Drop for Section {
    #[inline]
    fn drop(&mut self) {
        match TABLE.get(self.slot) {
            Some(s) => s
                .seq
                .store(s.seq.load(Ordering::Relaxed) + 1, Ordering::Release),
            None if self.slot == OVERFLOWED => {
                OVERFLOW.fetch_sub(1, Ordering::Release);
            }
            None => {}
        }
        let _ = READER.try_with(|r| r.depth.set(r.depth.get().saturating_sub(1)));
    }
}

/// Wait until every section that was open when this was called has closed: a pointer taken out
/// of the fd table before the call is then used by no one through the table. False when that
/// cannot be known, and the caller must not free it: membarrier refused after registering, or
/// this thread is inside a section itself (a signal handler that interrupted a call: the
/// interrupted call may hold the very pointer, and waiting for it would wait for ever).
pub(crate) fn synchronize() -> bool {
    let (_, depth) = mine();
    if depth > 0 {
        return false;
    }
    if BARRIER.load(Ordering::Acquire) == REGISTERED {
        if !membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) {
            return false;
        }
    } else {
        fence(Ordering::SeqCst);
    }
    for s in TABLE.iter() {
        let seen = s.seq.load(Ordering::Acquire);
        if seen & 1 == 1 {
            wait_while(|| s.seq.load(Ordering::Acquire) == seen);
        }
    }
    wait_while(|| OVERFLOW.load(Ordering::Acquire) != 0);
    true
}

/// Spin a little, then yield, while `busy` holds (sections are a call's length).
fn wait_while(busy: impl Fn() -> bool) {
    let mut spins = 0u32;
    while busy() {
        if spins < 100 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// In a child just forked: only this thread exists, so every other slot is free and outside
/// any section; the membarrier registration belongs to the parent's address space, so it is
/// made again (if refused, readers fence for themselves: no reader is inside a section now).
pub(crate) fn after_fork_in_child() {
    let (mine, depth) = mine();
    for (i, s) in TABLE.iter().enumerate() {
        if i != mine {
            s.taken.store(false, Ordering::Relaxed);
            let v = s.seq.load(Ordering::Relaxed);
            s.seq.store(v & !1, Ordering::Relaxed);
        }
    }
    OVERFLOW.store(
        u64::from(depth > 0 && mine == OVERFLOWED),
        Ordering::Relaxed,
    );
    if BARRIER.load(Ordering::Relaxed) == REGISTERED {
        let state = if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) {
            REGISTERED
        } else {
            REFUSED
        };
        BARRIER.store(state, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicPtr;
    use std::sync::Arc;

    #[test]
    fn a_remover_waits_for_a_reader_inside_a_section() {
        register();
        let inside = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let reader = {
            let (inside, release) = (inside.clone(), release.clone());
            std::thread::spawn(move || {
                let _s = Section::enter();
                inside.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            })
        };
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let done = Arc::new(AtomicBool::new(false));
        let remover = {
            let done = done.clone();
            std::thread::spawn(move || {
                assert!(synchronize());
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "synchronize returned while a section was open"
        );
        release.store(true, Ordering::SeqCst);
        reader.join().expect("reader");
        remover.join().expect("remover");
        assert!(done.load(Ordering::SeqCst));
    }

    #[test]
    fn a_remover_inside_its_own_section_is_told_not_to_free_and_nesting_is_free() {
        register();
        let outer = Section::enter();
        let inner = Section::enter();
        // Waiting for its own section would wait for ever; freeing could free under it.
        assert!(!synchronize());
        drop(inner);
        assert!(!synchronize());
        drop(outer);
        assert_eq!(mine().1, 0);
        assert!(synchronize());
    }

    /// Readers load a pointer inside sections and read through it while a remover swaps it out,
    /// waits, and poisons the old value: no reader ever sees the poison.
    #[test]
    fn no_reader_sees_a_value_freed_after_synchronize() {
        register();
        const POISON: u64 = 0xdead;
        let first = Box::into_raw(Box::new(AtomicU64::new(1)));
        let table = Arc::new(AtomicPtr::new(first));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (table, stop) = (table.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let _s = Section::enter();
                        let p = table.load(Ordering::Acquire);
                        // SAFETY: the remover poisons (never frees) values, only after a grace
                        // period; the box outlives the test.
                        let v = unsafe { &*p }.load(Ordering::Relaxed);
                        assert_ne!(v, POISON, "read a value retired before the section");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let mut retired = Vec::new();
        for i in 2..2000u64 {
            let next = Box::into_raw(Box::new(AtomicU64::new(i)));
            let old = table.swap(next, Ordering::AcqRel);
            assert!(synchronize());
            // SAFETY: `old` came from Box::into_raw above; kept alive until the end.
            unsafe { &*old }.store(POISON, Ordering::Relaxed);
            retired.push(old);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().expect("reader") > 0);
        }
        for p in retired.into_iter().chain([table.load(Ordering::Acquire)]) {
            // SAFETY: every pointer came from Box::into_raw and no thread uses it any more.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
