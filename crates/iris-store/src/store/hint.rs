//! Remembered leaves: where this thread last found a key (leaf block and slot) and the shape
//! sequence then (see `Header::shape_seq`). A writer holding the key's partition lock, seeing
//! the same sequence, finds the key in that leaf and can overwrite it there instead of walking
//! down from the root. Per thread (no sharing, no locks), direct-mapped; entries name their
//! volume, and the sequence starts at a random value whenever a header is rebuilt, so an entry
//! of another volume or an older life of this one never matches.
//!
//! Besides exact keys, a second table remembers the leaf of each run of 32 neighbouring keys
//! (a file's consecutive blocks share a leaf), so a random overwrite of a key this thread never
//! touched still skips the descent when a neighbour of it was found: the caller searches that
//! leaf for the key. While the sequence holds, the leaf is live and is the only leaf that
//! can hold the key; only in a B+-tree (no message buffers) does a key found there carry its
//! current value, so callers use runs for B+-trees only.

use std::cell::RefCell;

use crate::key::Key;

/// Exact-key entries per thread.
const ENTRIES: usize = 1024;
/// Run entries per thread: 4096 runs of 32 keys cover a 512 MiB file of 4 KiB blocks (1024
/// covered a fourth of that, and random writes over a 128 MiB file missed often enough to
/// cost 10 % of their rate in descents from the root). About 230 KiB per writing thread.
const RUN_ENTRIES: usize = 4096;

#[derive(Clone, Copy, Default)]
struct Entry {
    volume: u64,
    key: Key,
    seq: u64,
    leaf: u64,
    slot: u16,
}

/// Neighbouring keys (same high word, same `lo >> RUN_BITS`) sharing one run entry.
const RUN_BITS: u32 = 5;

/// The leaf where a key of one run was last found, and that key's slot and low word.
#[derive(Clone, Copy, Default)]
struct Run {
    volume: u64,
    hi: u64,
    run: u64,
    seq: u64,
    leaf: u64,
    lo: u64,
    slot: u16,
}

thread_local! {
    static HINTS: RefCell<Option<Box<[Entry]>>> = const { RefCell::new(None) };
    static RUNS: RefCell<Option<Box<[Run]>>> = const { RefCell::new(None) };
}

fn run_index(hi: u64, run: u64) -> usize {
    let h = hi.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ run;
    h as usize % RUN_ENTRIES
}

/// The leaf where a key of `key`'s run of `volume` was found while the sequence read `seq`,
/// and the slot `key` would have there if the run's keys are consecutive (a file's blocks
/// usually are): a guess, which the caller checks.
#[inline]
pub(super) fn lookup_run(volume: u64, key: Key, seq: u64) -> Option<(u64, u16)> {
    let run = key.lo >> RUN_BITS;
    RUNS.try_with(|r| {
        let r = r.try_borrow().ok()?;
        let e = r.as_ref()?.get(run_index(key.hi, run))?;
        (e.volume == volume && e.hi == key.hi && e.run == run && e.seq == seq).then(|| {
            // Keys of one run differ by less than 2^RUN_BITS: the guess fits a u16.
            let guess = i64::from(e.slot) + (key.lo as i64).wrapping_sub(e.lo as i64);
            (e.leaf, guess.clamp(0, i64::from(u16::MAX)) as u16)
        })
    })
    .ok()
    .flatten()
}

fn index(key: Key) -> usize {
    let h = key.hi.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key.lo.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h >> 54) as usize % ENTRIES
}

/// The leaf and slot where `key` of `volume` was found while the shape sequence read `seq`.
#[inline]
pub(super) fn lookup(volume: u64, key: Key, seq: u64) -> Option<(u64, u16)> {
    // try_with: a thread's last writes may come while its thread-locals are being destroyed.
    HINTS
        .try_with(|h| {
            let h = h.try_borrow().ok()?;
            let e = h.as_ref()?.get(index(key))?;
            (e.volume == volume && e.key == key && e.seq == seq).then_some((e.leaf, e.slot))
        })
        .ok()
        .flatten()
}

/// Remember that `key` of `volume` is at `slot` of `leaf` while the sequence reads `seq`.
#[inline]
pub(super) fn remember(volume: u64, key: Key, seq: u64, leaf: u64, slot: u16) {
    let _ = HINTS.try_with(|h| {
        let Ok(mut h) = h.try_borrow_mut() else {
            return;
        };
        let table = h.get_or_insert_with(|| vec![Entry::default(); ENTRIES].into_boxed_slice());
        table[index(key)] = Entry {
            volume,
            key,
            seq,
            leaf,
            slot,
        };
    });
    let _ = RUNS.try_with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else {
            return;
        };
        let table = r.get_or_insert_with(|| vec![Run::default(); RUN_ENTRIES].into_boxed_slice());
        let run = key.lo >> RUN_BITS;
        table[run_index(key.hi, run)] = Run {
            volume,
            hi: key.hi,
            run,
            seq,
            leaf,
            lo: key.lo,
            slot,
        };
    });
}
