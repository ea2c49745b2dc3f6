//! Simulated media for crash tests. The working bytes live in memory; `persist` copies a range into
//! a separate durable image. A power loss can be scheduled at the N-th persist: that persist and all
//! later ones fail, and [`SimMedia::crash_image`] yields what stable media would hold: the durable
//! image plus a random subset of the 8-byte words written but never persisted (writes reach media
//! in any order and may tear at word granularity).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use rand::Rng;

use crate::{LatencyModel, Media, MediaError};

/// In-memory media that records persists and can lose power.
pub struct SimMedia {
    /// Working bytes, as u64 words so the base is 8-byte aligned (atomics and mutexes live here).
    words: Box<[UnsafeCell<u64>]>,
    durable: Mutex<Vec<u64>>,
    backed_len: AtomicU64,
    persist_count: AtomicU64,
    crash_at_persist: AtomicU64,
    power_lost: AtomicBool,
}

// SAFETY: the working bytes are shared mutable memory exactly like a MAP_SHARED mapping: the store
// above synchronises access with its own locks and atomics; SimMedia itself only reads them under
// `persist`, which the store calls while holding the commit lock.
unsafe impl Sync for SimMedia {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl Send for SimMedia {}

impl SimMedia {
    /// A zeroed volume of `len_bytes` (rounded up to 8), fully backed.
    pub fn new(len_bytes: u64) -> Self {
        Self::from_image(&vec![0u8; len_bytes as usize])
    }

    /// A volume whose working and durable bytes are both `image` (what stable media held at boot).
    pub fn from_image(image: &[u8]) -> Self {
        let word_count = image.len().div_ceil(8);
        let mut durable = vec![0u64; word_count];
        for (i, chunk) in image.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            durable[i] = u64::from_ne_bytes(w);
        }
        let words: Box<[UnsafeCell<u64>]> = durable.iter().map(|w| UnsafeCell::new(*w)).collect();
        SimMedia {
            words,
            durable: Mutex::new(durable),
            backed_len: AtomicU64::new(word_count as u64 * 8),
            persist_count: AtomicU64::new(0),
            crash_at_persist: AtomicU64::new(u64::MAX),
            power_lost: AtomicBool::new(false),
        }
    }

    /// Lose power at the `n`-th persist from now (0 = the next one).
    pub fn crash_at_persist(&self, n: u64) {
        let now = self.persist_count.load(Ordering::SeqCst);
        self.crash_at_persist.store(now + n, Ordering::SeqCst);
    }

    /// Lose power now: every later persist fails.
    pub fn lose_power(&self) {
        self.power_lost.store(true, Ordering::SeqCst);
    }

    /// True once power was lost.
    pub fn is_power_lost(&self) -> bool {
        self.power_lost.load(Ordering::SeqCst)
    }

    /// Persists made so far.
    pub fn persist_count(&self) -> u64 {
        self.persist_count.load(Ordering::SeqCst)
    }

    /// Shrink the backed length (to test growth); the mapping keeps its size.
    pub fn set_backed_len(&self, len_bytes: u64) {
        self.backed_len.store(len_bytes, Ordering::SeqCst);
    }

    /// What stable media would hold after a power loss now: the durable image, plus each 8-byte
    /// word that differs in the working bytes with probability `keep_probability`.
    pub fn crash_image(&self, rng: &mut impl Rng, keep_probability: f64) -> Vec<u8> {
        let durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(durable.len() * 8);
        for (i, d) in durable.iter().enumerate() {
            // SAFETY: i < words.len(); a racy read of a word is what power loss would see.
            let w = unsafe { std::ptr::read_volatile(self.words[i].get()) };
            let v = if w != *d && rng.gen_bool(keep_probability) {
                w
            } else {
                *d
            };
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out
    }

    /// The working bytes as they are now (what a process that did not crash would see).
    pub fn working_image(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.words.len() * 8);
        for cell in self.words.iter() {
            // SAFETY: the cell is in bounds; a volatile read of shared memory.
            let w = unsafe { std::ptr::read_volatile(cell.get()) };
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out
    }
}

impl Media for SimMedia {
    fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    fn mapped_len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    fn backed_len(&self) -> u64 {
        self.backed_len.load(Ordering::SeqCst)
    }

    fn grow(&self, len_bytes: u64) -> Result<(), MediaError> {
        if self.is_power_lost() {
            return Err(MediaError::PowerLost);
        }
        if len_bytes > self.mapped_len() {
            return Err(MediaError::GrowLimit {
                wanted_bytes: len_bytes,
                limit_bytes: self.mapped_len(),
            });
        }
        self.backed_len.fetch_max(len_bytes, Ordering::SeqCst);
        Ok(())
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        let n = self.persist_count.fetch_add(1, Ordering::SeqCst);
        if n >= self.crash_at_persist.load(Ordering::SeqCst) {
            self.power_lost.store(true, Ordering::SeqCst);
        }
        if self.is_power_lost() {
            return Err(MediaError::PowerLost);
        }
        let first = (offset / 8) as usize;
        let end = (offset.saturating_add(len).div_ceil(8) as usize).min(self.words.len());
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        for i in first..end {
            // SAFETY: i < words.len(); the store holds its commit lock while persisting.
            durable[i] = unsafe { std::ptr::read_volatile(self.words[i].get()) };
        }
        Ok(())
    }

    fn latency(&self) -> LatencyModel {
        LatencyModel::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn write(m: &SimMedia, off: usize, bytes: &[u8]) {
        // SAFETY: test writes stay inside the 4 KiB volume.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), m.base().add(off), bytes.len()) };
    }

    #[test]
    fn unpersisted_writes_are_lost_persisted_kept() {
        let m = SimMedia::new(4096);
        write(&m, 0, &[1u8; 16]);
        m.persist(0, 8).expect("persist");
        write(&m, 100, &[2u8; 8]);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let img = m.crash_image(&mut rng, 0.0);
        assert_eq!(&img[0..8], &[1u8; 8]);
        assert_eq!(&img[8..16], &[0u8; 8]);
        assert_eq!(&img[100..108], &[0u8; 8]);
        let img = m.crash_image(&mut rng, 1.0);
        assert_eq!(&img[100..108], &[2u8; 8]);
    }

    #[test]
    fn scheduled_power_loss_fails_that_persist_and_later() {
        let m = SimMedia::new(4096);
        m.crash_at_persist(1);
        assert!(m.persist(0, 8).is_ok());
        write(&m, 0, &[3u8; 8]);
        assert!(matches!(m.persist(0, 8), Err(MediaError::PowerLost)));
        assert!(matches!(m.persist(0, 8), Err(MediaError::PowerLost)));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        assert_eq!(&m.crash_image(&mut rng, 0.0)[0..8], &[0u8; 8]);
    }

    #[test]
    fn grow_respects_limit() {
        let m = SimMedia::new(8192);
        m.set_backed_len(4096);
        assert!(m.grow(8192).is_ok());
        assert_eq!(m.backed_len(), 8192);
        assert!(matches!(m.grow(8193), Err(MediaError::GrowLimit { .. })));
    }
}
