//! Synced writes through the intent log: a write that expects a sync (see
//! [`super::ThenPatch::sync_expected`]) and names its block out of line persists the block,
//! publishes it as any write does, and persists one record (see `log_record`) before it lets go
//! of its locks, instead of committing. The sync that follows finds nothing to commit: the
//! publish noted no generation for it (see `Txn::set_logged`). After power loss, replay puts
//! the records since the last commit's log start back (see `Store::replay_log`).
//!
//! A write is logged only when neither its key nor its patched key has a change since the last
//! commit that is not in the log (a truncation, a write of another shape): replay applies
//! records to the last commit, and a record must not land on a file without the change it was
//! made after.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::header::StampMask;
use crate::key::Key;
use crate::log_record::{Record, MAX_WORDS, RECORD_BYTES};

use super::Inner;

impl Inner {
    /// Whether a synced write of `key` that patches `patch_key` may go into the intent log: the
    /// volume has one with room within one lap of the last commit's start, and neither key's
    /// stamp bucket changed since that commit other than through the log. Exact while the
    /// caller holds the locks of both keys' partitions (or every lock).
    pub(super) fn log_room(&self, key: Key, patch_key: Key) -> bool {
        let Some((_, blocks)) = self.header.log_area() else {
            return false;
        };
        let committed = self.header.committed_gen();
        if self.header.written_gen(key) > committed || self.header.written_gen(patch_key) > committed
        {
            return false;
        }
        let capacity = u64::from(blocks) * self.layout.bs() / RECORD_BYTES as u64;
        let next = self.header.log_seq().load(Ordering::Acquire);
        next.saturating_sub(self.header.log_start()) < capacity
    }

    /// Persist block `block`'s first `len` bytes (a logged write's value, before its publish:
    /// a record must never name bytes that are not durable).
    pub(super) fn persist_logged_block(&self, block: u64, len: u64) -> Result<()> {
        self.persist_or_fail(self.layout.offset(block), len)
    }

    /// Write and persist the record of a synced write just published holding the locks
    /// [`Inner::log_room`] asked for: `key` now names `len` bytes in `block`, and `words` were
    /// set in `patch_key`'s value. The block is settled (never written in place, its free
    /// waits for the commit). Returns false, the write noted for the next sync instead, when
    /// the record cannot be written (no room left, more words than a record holds): the write
    /// stays published either way.
    pub(super) fn log_write(
        &self,
        key: Key,
        block: u64,
        len: u32,
        patch_key: Key,
        words: &[(usize, u64)],
    ) -> Result<bool> {
        self.alloc.settle_logged(block);
        let fits = words.len() <= MAX_WORDS && words.iter().all(|(o, _)| *o <= usize::from(u16::MAX));
        let seq = self.header.log_seq().fetch_add(1, Ordering::AcqRel);
        let placed = match self.header.log_area() {
            Some((first, blocks)) if fits => {
                let capacity = u64::from(blocks) * self.layout.bs() / RECORD_BYTES as u64;
                (seq.saturating_sub(self.header.log_start()) < capacity)
                    .then(|| self.layout.offset(first) + seq % capacity * RECORD_BYTES as u64)
            }
            _ => None,
        };
        let Some(at) = placed else {
            // Not in the log: the sync that follows commits it.
            let gen = self.header.working_gen();
            self.header.note_written(&StampMask::default(), Some(key), gen);
            self.header
                .note_written(&StampMask::default(), Some(patch_key), gen);
            return Ok(false);
        };
        let mut word = [(0u16, 0u64); MAX_WORDS];
        for (slot, (off, value)) in word.iter_mut().zip(words) {
            *slot = (*off as u16, *value);
        }
        let record = Record {
            seq,
            key,
            block,
            len,
            patch_key,
            word,
            words: words.len() as u8,
        };
        self.region.copy_in(at, &record.encode());
        self.persist_or_fail(at, RECORD_BYTES as u64)?;
        Ok(true)
    }

    /// `media.persist`, a failure of which makes the volume refuse writes until reopened (a
    /// synced write must never return as durable when it is not).
    fn persist_or_fail(&self, offset: u64, len: u64) -> Result<()> {
        if let Err(e) = self.media.persist(offset, len) {
            self.header.set_failed(1);
            self.failed.store(true, Ordering::Relaxed);
            return Err(e.into());
        }
        Ok(())
    }
}
