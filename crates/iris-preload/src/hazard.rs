//! Hazard slots for the fd table: a thread that loads an open file's pointer from the table
//! announces it here before it takes a reference, so a `close` (or `dup2` over the fd) racing
//! that lookup in another thread does not free the open file between the load and the
//! reference. Without them the lookup could raise the count of freed memory: an application
//! bug (a close racing a read of the same fd) would become a use after free in Iris, where a
//! kernel file system lets the read finish on its own reference.
//!
//! Protocol: the reader claims a slot with a compare-and-swap (a full barrier on x86 and a
//! sequentially consistent one elsewhere), then checks the table still holds the pointer; the
//! remover swaps the pointer out of the table, then waits until no slot names it. Either the
//! reader's check sees the swap (it retries) or the remover's scan sees the slot (it waits for
//! the reader, which by then holds its own reference).
//!
//! A slot is chosen from the address of the reader's stack, so threads seldom share one (each
//! slot fills a cache line of its own); a taken slot sends the reader to the next.
//!
//! The fd table's callers hold signals back (`Busy`) while a slot is theirs: a handler that
//! closed the fd meanwhile would wait in `retire` for its own thread for ever.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// Slots in the table: readers in the window at once beyond this many wait for a free one.
const SLOTS: usize = 64;

/// One slot, alone in its cache line.
#[repr(align(64))]
struct Slot(AtomicPtr<()>);

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot(AtomicPtr::new(std::ptr::null_mut()));
static HAZARDS: [Slot; SLOTS] = [FREE; SLOTS];

/// The slot this thread tries first: threads' stacks lie megabytes apart.
#[inline]
fn first_slot() -> usize {
    let here = 0u8;
    let addr = std::ptr::addr_of!(here) as usize;
    (addr >> 20) % SLOTS
}

/// Announce `p` in a free slot; returns the slot.
#[inline]
fn claim(p: *mut ()) -> &'static AtomicPtr<()> {
    let start = first_slot();
    let mut i = start;
    loop {
        let slot = &HAZARDS[i].0;
        if slot
            .compare_exchange(std::ptr::null_mut(), p, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return slot;
        }
        i = (i + 1) % SLOTS;
        if i == start {
            // Every slot taken at once: let their readers finish.
            std::thread::yield_now();
        }
    }
}

/// A claimed slot naming a pointer still in its table entry: while it lives, a `retire` of that
/// pointer waits. Clears the slot when dropped (also when unwinding).
struct Pin(&'static AtomicPtr<()>);

impl Drop for Pin {
    fn drop(&mut self) {
        self.0.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// What `entry` points at, named in a slot after being seen in `entry`; `None` if null.
#[inline]
fn pin<T>(entry: &AtomicPtr<T>) -> Option<(*mut T, Pin)> {
    loop {
        let p = entry.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        let pinned = Pin(claim(p.cast()));
        #[cfg(test)]
        tests::widen_window();
        // The claim is a full barrier: this load cannot pass it.
        if entry.load(Ordering::SeqCst) == p {
            return Some((p, pinned));
        }
    }
}

/// A reference to what `entry` points at, or `None` if it is null. `entry` holds pointers from
/// `Arc::into_raw`, each owning one strong count, and every pointer taken out of it goes
/// through [`retire`] before that count is dropped.
#[inline]
pub(crate) fn acquire<T>(entry: &AtomicPtr<T>) -> Option<Arc<T>> {
    let (p, _pinned) = pin(entry)?;
    // SAFETY: `p` came from `Arc::into_raw` and was still in the table after our slot named
    // it, so a remover that took it out since waits in `retire` until the slot is cleared: the
    // table's count keeps it alive until the caller has its own.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

/// `f` of what `entry` points at, or `None` if it is null, without a reference count: the
/// hazard slot keeps it alive while `f` runs (a `retire` of it waits for `f`), so `f` must not
/// wait for anything another thread's `retire` of it could hold. For calls that take no lock
/// they could wait on for long (reads and writes).
#[inline]
pub(crate) fn with<T, R>(entry: &AtomicPtr<T>, f: impl FnOnce(&T) -> R) -> Option<R> {
    let (p, _pinned) = pin(entry)?;
    // SAFETY: as in `acquire`: the table's count keeps it alive until the slot is cleared,
    // after `f` returns.
    Some(f(unsafe { &*p }))
}

/// Take ownership of `p`, just swapped out of a table entry (non-null, from `Arc::into_raw`),
/// once no reader is between loading it and taking its own reference.
pub(crate) fn retire<T>(p: *mut T) -> Arc<T> {
    // The swap that took `p` out was sequentially consistent; so is this scan.
    for slot in &HAZARDS {
        let mut spins = 0u32;
        while slot.0.load(Ordering::SeqCst) == p.cast() {
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
    // SAFETY: `p` owned one strong count in the table, which is now ours; no reader can still
    // raise the count of freed memory (see above).
    unsafe { Arc::from_raw(p) }
}

/// In a child after fork: slots named by the parent's other threads (mid-lookup when it
/// forked; they do not exist here) would hold up every `retire` of their files for ever.
pub(crate) fn clear_after_fork() {
    for slot in &HAZARDS {
        slot.0.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    static WIDEN: AtomicBool = AtomicBool::new(false);

    /// In tests, a reader pauses between its load and its check, so a racing remover lands
    /// there often.
    pub(super) fn widen_window() {
        if WIDEN.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
    }

    const LIVE: u64 = 0x1155_aa77;

    /// An object that says whether it was dropped.
    struct Canary(AtomicU64);
    impl Drop for Canary {
        fn drop(&mut self) {
            self.0.store(0xdead, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_lookup_racing_the_removal_of_its_entry_never_sees_it_freed() {
        WIDEN.store(true, Ordering::Relaxed);
        let entry =
            AtomicPtr::new(Arc::into_raw(Arc::new(Canary(AtomicU64::new(LIVE)))).cast_mut());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(c) = acquire(&entry) {
                            // A freed canary reads dead (or, reused, anything but LIVE).
                            assert_eq!(c.0.load(Ordering::SeqCst), LIVE, "use after free");
                            seen += 1;
                        }
                        let held = with(&entry, |c| {
                            std::thread::yield_now();
                            c.0.load(Ordering::SeqCst)
                        });
                        if let Some(v) = held {
                            assert_eq!(v, LIVE, "use after free inside with");
                        }
                    }
                    assert!(seen > 0);
                });
            }
            for _ in 0..20_000 {
                let fresh = Arc::into_raw(Arc::new(Canary(AtomicU64::new(LIVE)))).cast_mut();
                let old = entry.swap(fresh, Ordering::SeqCst);
                drop(retire(old));
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
        });
        drop(retire(entry.swap(std::ptr::null_mut(), Ordering::SeqCst)));
        WIDEN.store(false, Ordering::Relaxed);
        assert!(HAZARDS.iter().all(|s| s.0.load(Ordering::SeqCst).is_null()));
    }
}
