//! Lock-free readers and safe reuse of freed blocks (epoch-based reclamation across processes).
//!
//! Readers never take the volume lock. Instead a reader claims a slot in the shared reader table
//! (in the working header), publishes the current epoch in it, reads, and clears it. A writer
//! that frees a block which a reader may still be reading (anything published before) does not
//! free it at once: it parks the block in the limbo list; when the list fills, or space runs out,
//! or at commit, the writer advances the epoch and waits until no slot holds an older epoch (a
//! grace period, usually no wait at all since reads take a microsecond), then frees every parked
//! block. A slot whose owner process died is cleared by the waiter.
//!
//! Invariant: a block reachable from a root that some reader loaded is not reused before that
//! reader's slot is cleared.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::header::{limbo_count_off, LIMBO_LISTS, PARTITIONS};
use crate::region::Region;

/// An in-flight slot's owner while it is being claimed.
const CLAIMING: u64 = 1;
/// In an in-flight slot's block word: the block is a list of blocks being filled (see
/// `Store::prepare_blocks`), not one.
pub(crate) const INFLIGHT_LIST: u64 = 1 << 63;

/// Offset of entry `i` of partition `p`'s limbo list inside the header.
const fn limbo_entry_off(p: u64, i: u64) -> u64 {
    LIMBO_LISTS + (p * LIMBO_CAPACITY + i) * 8
}

/// Reader slots in the table (readers beyond this many at once take the volume lock instead).
pub(crate) const READER_SLOTS: u64 = 32;
/// Bytes per slot: one cache line, so readers do not share lines.
const SLOT_BYTES: u64 = 64;
/// Blocks parked before a grace period frees them all.
pub(crate) const LIMBO_CAPACITY: u64 = 64;

/// Offsets of the reader machinery inside the working header.
pub(crate) const EPOCH_OFF: u64 = 656;
/// Start of the area below the in-flight slots (the single limbo list before format 3).
pub(crate) const LIMBO_OFF: u64 = 1024;
pub(crate) const INFLIGHT_OFF: u64 = 1536;
/// Blocks being filled outside the lock at once (see `Store::put_block`).
pub(crate) const INFLIGHT_SLOTS: u64 = 32;
pub(crate) const SLOTS_OFF: u64 = 2048;
const _: () = assert!(INFLIGHT_OFF + INFLIGHT_SLOTS * 16 <= SLOTS_OFF);
/// Header bytes this module needs.
pub(crate) const END_OFF: u64 = SLOTS_OFF + READER_SLOTS * SLOT_BYTES;

/// Shared reader table and limbo of one volume.
#[derive(Clone, Copy)]
pub(crate) struct Readers {
    region: Region,
    header_off: u64,
}

thread_local! {
    /// This thread's (pid << 32 | tid), cached: two system calls per read would cost more than
    /// the read. Cleared in a forked child, whose pid and tid differ.
    static ME: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

extern "C" fn forget_me_after_fork() {
    ME.with(|m| m.set(0));
}

pub(crate) fn me() -> u64 {
    ME.with(|m| {
        let cached = m.get();
        if cached != 0 {
            return cached;
        }
        // Not a `Once`: `pthread_atfork` waits while another thread forks, and a child forked
        // then would inherit a `Once` marked running that nothing finishes.
        static AT_FORK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !AT_FORK.swap(true, Ordering::AcqRel) {
            // SAFETY: registering a plain function to run in the child after fork.
            unsafe { libc::pthread_atfork(None, None, Some(forget_me_after_fork)) };
        }
        // SAFETY: getpid and gettid cannot fail.
        let (pid, tid) = unsafe { (libc::getpid() as u64, libc::gettid() as u64) };
        let v = (pid << 32) | (tid & 0xffff_ffff);
        m.set(v);
        v
    })
}

/// Whether the process of a slot's owner (see [`me`]) exists.
fn alive(owner: u64) -> bool {
    crate::liveness::process_exists((owner >> 32) as libc::pid_t)
}

/// A claimed reader slot; clears itself on drop.
pub(crate) struct ReadGuard {
    owner: *const AtomicU64,
    epoch: *const AtomicU64,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        // SAFETY: the slot words live in the mapping, which outlives every guard (guards are
        // dropped before the store that created them).
        unsafe {
            (*self.epoch).store(0, Ordering::Release);
            (*self.owner).store(0, Ordering::Release);
        }
    }
}

impl Readers {
    pub fn new(region: Region, header_off: u64) -> Self {
        Readers { region, header_off }
    }

    fn word(&self, off: u64) -> &AtomicU64 {
        self.region.atomic_u64(self.header_off + off)
    }

    fn slot(&self, i: u64) -> (&AtomicU64, &AtomicU64) {
        let at = SLOTS_OFF + i * SLOT_BYTES;
        (self.word(at), self.word(at + 8))
    }

    /// Clear the table and limbo (creation and recovery, when no process reads).
    pub fn reset(&self) {
        self.word(EPOCH_OFF).store(1, Ordering::Relaxed);
        for p in 0..PARTITIONS {
            self.word(limbo_count_off(p)).store(0, Ordering::Relaxed);
        }
        for i in 0..INFLIGHT_SLOTS {
            self.word(INFLIGHT_OFF + i * 16).store(0, Ordering::Relaxed);
        }
        for i in 0..READER_SLOTS {
            let (o, e) = self.slot(i);
            o.store(0, Ordering::Relaxed);
            e.store(0, Ordering::Relaxed);
        }
    }

    /// Enter a read section, or `None` if every slot is taken (then read under the lock).
    pub fn enter(&self) -> Option<ReadGuard> {
        let who = me();
        let start = (who.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) % READER_SLOTS;
        for k in 0..READER_SLOTS {
            let (owner, epoch) = self.slot((start + k) % READER_SLOTS);
            if owner
                .compare_exchange(0, who, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let global = self.word(EPOCH_OFF);
            loop {
                let e = global.load(Ordering::SeqCst);
                // SeqCst store then SeqCst load: the load is not ordered before the store (on
                // x86 the store is an xchg, a full barrier), which with the SeqCst loads of the
                // slots in `grace_period` keeps a reader and a reclaimer from missing each other.
                epoch.store(e, Ordering::SeqCst);
                if global.load(Ordering::SeqCst) == e {
                    break;
                }
            }
            return Some(ReadGuard { owner, epoch });
        }
        None
    }

    /// Wait until every reader that might hold a pointer published before now has left.
    pub fn grace_period(&self) {
        fence(Ordering::SeqCst);
        let target = self.word(EPOCH_OFF).fetch_add(1, Ordering::SeqCst) + 1;
        let who = me();
        for i in 0..READER_SLOTS {
            let (owner, epoch) = self.slot(i);
            let mut spins = 0u32;
            loop {
                let o = owner.load(Ordering::SeqCst);
                let e = epoch.load(Ordering::SeqCst);
                if o == 0 || e == 0 || e >= target || o == who {
                    break;
                }
                spins += 1;
                if spins.is_multiple_of(4096) {
                    if !alive(o) {
                        // A reader killed mid-read: its slot will never clear itself.
                        let _ = owner.compare_exchange(o, 0, Ordering::AcqRel, Ordering::Relaxed);
                        epoch.store(0, Ordering::Release);
                        break;
                    }
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Park a block freed by the working tree in partition `p`'s limbo; returns true when that
    /// limbo is full and must be drained (caller holds partition `p`'s lock).
    pub fn park(&self, p: u64, block: u64) -> bool {
        let count = self.word(limbo_count_off(p));
        let n = count.load(Ordering::Relaxed).min(LIMBO_CAPACITY - 1);
        self.word(limbo_entry_off(p, n))
            .store(block, Ordering::Relaxed);
        // Count after the entry: a killed writer leaves at worst an unlisted (leaked) block.
        count.store(n + 1, Ordering::Release);
        n + 1 >= LIMBO_CAPACITY
    }

    /// After a grace period: partition `p`'s parked blocks, emptying its limbo (caller holds its
    /// lock).
    pub fn take_parked(&self, p: u64, out: &mut Vec<u64>) {
        let count = self.word(limbo_count_off(p));
        let n = count.load(Ordering::Acquire).min(LIMBO_CAPACITY);
        for i in 0..n {
            out.push(self.word(limbo_entry_off(p, i)).load(Ordering::Relaxed));
        }
        count.store(0, Ordering::Release);
    }

    /// Reserve an in-flight slot for `block`, allocated by partition `p`'s writer and filled
    /// outside the lock before it is published (caller holds that partition's lock; writers of
    /// other partitions reserve concurrently). Garbage collection keeps reserved blocks. `None`
    /// if every slot is taken.
    pub fn reserve(&self, p: u64, block: u64) -> Option<u64> {
        let who = me();
        // Writers of different partitions start in different cache lines (four slots a line).
        let start = (p * 4) % INFLIGHT_SLOTS;
        for k in 0..INFLIGHT_SLOTS {
            let i = (start + k) % INFLIGHT_SLOTS;
            let owner = self.word(INFLIGHT_OFF + i * 16);
            // Claim the slot with a marker first, so the block word is never read half-set by
            // a collector: it reads an owner of 1 (no such process) as dead and the block as 0.
            if owner
                .compare_exchange(0, CLAIMING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.word(INFLIGHT_OFF + i * 16 + 8)
                    .store(block, Ordering::Release);
                owner.store(who, Ordering::Release);
                return Some(i);
            }
        }
        None
    }

    /// Release an in-flight slot (caller holds the lock).
    pub fn unreserve(&self, slot: u64) {
        self.word(INFLIGHT_OFF + slot * 16)
            .store(0, Ordering::Release);
    }

    /// Clear the slots of writers that died while filling a block; returns those blocks' words
    /// (a block, or a list of them marked [`INFLIGHT_LIST`]), which nothing references (caller
    /// holds every lock, so no slot is being claimed: one still marked as claiming belongs to a
    /// writer killed in `reserve`, and names no block yet).
    pub fn reap_dead(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for i in 0..INFLIGHT_SLOTS {
            let owner = self.word(INFLIGHT_OFF + i * 16);
            let o = owner.load(Ordering::Acquire);
            if o == CLAIMING {
                owner.store(0, Ordering::Release);
            } else if o != 0 && !alive(o) {
                out.push(self.word(INFLIGHT_OFF + i * 16 + 8).load(Ordering::Relaxed));
                owner.store(0, Ordering::Release);
            }
        }
        out
    }

    /// The words (see `reap_dead`) of blocks reserved by live writers; slots of dead processes
    /// are cleared (their blocks become garbage). Caller holds every lock (see `reap_dead`).
    pub fn reserved(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for i in 0..INFLIGHT_SLOTS {
            let owner = self.word(INFLIGHT_OFF + i * 16);
            let o = owner.load(Ordering::Acquire);
            if o == 0 {
                continue;
            }
            if o == CLAIMING {
                owner.store(0, Ordering::Release);
                continue;
            }
            if alive(o) {
                out.push(self.word(INFLIGHT_OFF + i * 16 + 8).load(Ordering::Relaxed));
            } else {
                owner.store(0, Ordering::Release);
            }
        }
        out
    }

    /// The words of every occupied in-flight slot, live or dead, changing nothing (for
    /// verification: a block a dead writer's slot names is the next reaper's to free, not a
    /// leak; [`Readers::reserved`] would clear such a slot and leave its blocks to no one).
    pub fn named(&self) -> Vec<u64> {
        (0..INFLIGHT_SLOTS)
            .filter(|i| {
                let o = self.word(INFLIGHT_OFF + i * 16).load(Ordering::Acquire);
                o != 0 && o != CLAIMING
            })
            .map(|i| self.word(INFLIGHT_OFF + i * 16 + 8).load(Ordering::Relaxed))
            .collect()
    }

    /// Make `owner` the owner of in-flight slot `slot` (tests: a writer that died).
    #[cfg(test)]
    pub fn set_owner(&self, slot: u64, owner: u64) {
        self.word(INFLIGHT_OFF + slot * 16)
            .store(owner, Ordering::Release);
    }

    /// Blocks parked now in partition `p`'s limbo.
    pub fn parked_in(&self, p: u64) -> u64 {
        self.word(limbo_count_off(p))
            .load(Ordering::Acquire)
            .min(LIMBO_CAPACITY)
    }

    /// Blocks parked now in every limbo.
    pub fn parked(&self) -> u64 {
        (0..PARTITIONS).map(|p| self.parked_in(p)).sum()
    }

    /// Whether block `b` is parked (verification: parked blocks are neither leaked nor free).
    pub fn is_parked(&self, b: u64) -> bool {
        (0..PARTITIONS).any(|p| {
            (0..self.parked_in(p))
                .any(|i| self.word(limbo_entry_off(p, i)).load(Ordering::Relaxed) == b)
        })
    }
}
