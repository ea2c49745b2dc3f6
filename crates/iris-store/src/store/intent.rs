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
//!
//! A small synced write into a block a record of this lap already names needs no new block:
//! its bytes go into a data record, persisted first, and then into the block where it is
//! (`Store::write_in_place_logged`). Replay puts the block back under its key from the earlier
//! record, then copies each data record's bytes into it in order: the bytes a torn copy left
//! are written again. (Every change of such a block after its record goes through a data
//! record: a write without a sync copies it, see `Allocator::settle_logged`.)

use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};
use crate::header::{partition_of, StampMask};
use crate::key::Key;
use crate::log_record::{data_slots, packed_words, DataRange, Record, DATA_MAX, RECORD_BYTES};
use crate::node::Val;
use crate::tree::Txn;

use super::{BlockPut, BlockRef, InPlaceOutcome, Inner, Patch, PatchPlan, Store, ThenPatch};

impl Store {
    /// A write of part of `key`'s out-of-line value that a sync is expected after, keeping the
    /// value's length (a write inside a full block), into the intent log holding only the
    /// partitions' locks: a new block filled from the old bytes and `fill` under the key's
    /// lock (nobody else changes them meanwhile), persisted, published in the value's slot of
    /// a leaf private to the working tree, its record persisted in the same hold. `None`,
    /// `fill` untouched and nothing written, when it does not qualify (no room in the log, an
    /// unlogged change since the last commit, another length, a committed leaf): the caller
    /// takes every lock.
    pub(super) fn rewrite_logged<F: FnMut(&[u8], bool, &mut Patch)>(
        &self,
        key: Key,
        len_of: &impl Fn(Option<usize>) -> usize,
        fill: &mut Option<impl FnOnce(Option<&[u8]>, &mut [u8])>,
        then: &mut Option<ThenPatch<F>>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        let Some(patch_key) = then.as_ref().map(|t| t.key) else {
            return Ok(None);
        };
        if !inner.log_room(key, patch_key) {
            return Ok(None);
        }
        let Some((block, slot)) = Self::reserve_block(inner)? else {
            return Ok(None);
        };
        let p = partition_of(key);
        let outcome = inner.in_place(p, key, then, |held, then| {
            let mut txn = Txn::begin_in(inner.cx(), p);
            let spot = inner.locate_in_place(&txn, key)?;
            let Some(Val::Block {
                block: old_block,
                len,
                ..
            }) = txn.value_at(&spot)?
            else {
                return Ok(InPlaceOutcome::No);
            };
            if len_of(Some(len as usize)) != len as usize
                || !txn.replaceable_in_place(&spot, len)?
                || !inner.log_room(key, patch_key)
            {
                return Ok(InPlaceOutcome::No);
            }
            let Some((start, plan)) = Self::plan_then(inner, &txn, held, then, true)? else {
                return Ok(InPlaceOutcome::NeedsPatchPartition);
            };
            // Committed to this path.
            let f = fill
                .take()
                .ok_or(StoreError::Invalid("a logged rewrite filled twice".into()))?;
            let old = inner
                .region
                .bytes(inner.layout.offset(old_block), u64::from(len));
            let out = inner
                .region
                .bytes_mut(inner.layout.offset(block), u64::from(len));
            f(Some(old), out);
            inner.latency.on_write(1);
            inner.persist_logged_block(block, u64::from(len))?;
            let words = match &plan {
                PatchPlan::InPlace(at) => at.patch,
                _ => Patch::default(),
            };
            txn.set_logged();
            // (As `publish_in_place`: unreserved before the publish.)
            inner.alloc.readers().unreserve(slot);
            let _announced = inner.header.in_place(held);
            let gen = inner.header.working_gen();
            if let Err(e) = txn.put_at(&spot, key, Val::Block { block, len, gen }) {
                txn.abort();
                inner.alloc.free_now(block);
                return Err(e);
            }
            let at = BlockRef { block, len };
            let put = Self::finish_in_place(inner, &mut txn, Some((key, at)), start, &plan, true)?;
            inner.log_write(key, block, len, patch_key, words.words())?;
            Ok(InPlaceOutcome::Done(put))
        })?;
        if let InPlaceOutcome::Done(put) = outcome {
            return Ok(Some(put));
        }
        // Not taken: give the block back.
        let _g = inner.lock_partition(p)?;
        inner.alloc.readers().unreserve(slot);
        inner.alloc.free_now(block);
        Ok(None)
    }

    /// A small synced write (at most [`DATA_MAX`] bytes, inside the value) of `data` at byte
    /// `offset` of `key`'s out-of-line value, when a record of this lap of the intent log names
    /// that value's block: a data record with the bytes, persisted, then the bytes into the
    /// block where it is and the patch `then` describes, holding only the partitions' locks.
    /// The sync that follows finds nothing to commit. `None`, nothing written, when it does not
    /// qualify (the block is the last commit's, or changed since without a record; no room in
    /// the log; a patch that needs every lock): the caller copies the block as before.
    ///
    /// A process killed between the record's persist and the copy leaves the write undone in
    /// memory and its record in the log: power loss before the next commit then replays it
    /// (a write that never returned appears, as a torn one may on a kernel file system).
    pub fn write_in_place_logged<F: FnMut(&[u8], bool, &mut Patch)>(
        &self,
        key: Key,
        offset: usize,
        data: &[u8],
        then: ThenPatch<F>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        if data.is_empty() || data.len() > DATA_MAX || offset > usize::from(u16::MAX) {
            return Ok(None);
        }
        let patch_key = then.key;
        let slots = data_slots(data.len()) as u64;
        if !inner.log_room_for(key, patch_key, slots) {
            return Ok(None);
        }
        let p = partition_of(key);
        let mut then = Some(then);
        let outcome = inner.in_place(p, key, &mut then, |held, then| {
            let mut txn = Txn::begin_in(inner.cx(), p);
            let spot = inner.locate_in_place(&txn, key)?;
            let Some(Val::Block { block, len, gen }) = txn.value_at(&spot)? else {
                return Ok(InPlaceOutcome::No);
            };
            // A block of this generation whose key has no change since the last commit outside
            // the log (`log_room`, below, under both keys' locks) was placed by a logged write:
            // a record of this lap names it. (A fresh one was written without a record.)
            if gen != inner.header.working_gen()
                || inner.alloc.is_fresh(block)
                || offset + data.len() > len as usize
            {
                return Ok(InPlaceOutcome::No);
            }
            let Some((start, plan)) = Self::plan_then(inner, &txn, held, then, true)? else {
                return Ok(InPlaceOutcome::NeedsPatchPartition);
            };
            if !inner.log_room_for(key, patch_key, slots) {
                return Ok(InPlaceOutcome::No);
            }
            let words = match &plan {
                PatchPlan::InPlace(at) => at.patch,
                _ => Patch::default(),
            };
            // The record is durable before a byte of the block changes.
            let placed = DataPlace {
                key,
                block,
                len,
                offset,
            };
            if !inner.log_data(placed, data, patch_key, words.words())? {
                return Ok(InPlaceOutcome::No);
            }
            txn.set_logged();
            // The bytes change where readers may be copying them: they read again (see `View`).
            let _in_place = inner.header.in_place(held);
            inner.undo.write(p, block, offset as u64, data);
            inner.latency.on_write(1);
            let at = BlockRef { block, len };
            Self::finish_in_place(inner, &mut txn, Some((key, at)), start, &plan, true)
                .map(InPlaceOutcome::Done)
        })?;
        Ok(match outcome {
            InPlaceOutcome::Done(put) => Some(put),
            _ => None,
        })
    }
}

impl Inner {
    /// Whether a synced write of `key` that patches `patch_key` may go into the intent log: the
    /// volume has one with room within one lap of the last commit's start, and neither key's
    /// stamp bucket changed since that commit other than through the log. Exact while the
    /// caller holds the locks of both keys' partitions (or every lock).
    pub(super) fn log_room(&self, key: Key, patch_key: Key) -> bool {
        self.log_room_for(key, patch_key, 1)
    }

    /// [`Inner::log_room`] for a record of `slots` slots.
    pub(super) fn log_room_for(&self, key: Key, patch_key: Key, slots: u64) -> bool {
        let Some((_, capacity)) = self.log_slots() else {
            return false;
        };
        let committed = self.header.committed_gen();
        if self.header.written_gen(key) > committed
            || self.header.written_gen(patch_key) > committed
        {
            return false;
        }
        let next = self.header.log_seq().load(Ordering::Acquire);
        next.saturating_sub(self.header.log_start()) + slots <= capacity
    }

    /// The log's first slot's region offset and its slots (128 bytes each), if it has one.
    fn log_slots(&self) -> Option<(u64, u64)> {
        let (first, blocks) = self.header.log_area()?;
        let capacity = u64::from(blocks) * self.layout.bs() / RECORD_BYTES as u64;
        Some((self.layout.offset(first), capacity))
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
        let word = packed_words(words);
        let seq = self.header.log_seq().fetch_add(1, Ordering::AcqRel);
        let placed = match (self.log_slots(), word) {
            (Some((first, capacity)), Some(word)) => (seq.saturating_sub(self.header.log_start())
                < capacity)
                .then(|| (first + seq % capacity * RECORD_BYTES as u64, word)),
            _ => None,
        };
        let Some((at, word)) = placed else {
            // Not in the log: the sync that follows commits it.
            let gen = self.header.working_gen();
            self.header
                .note_written(&StampMask::default(), Some(key), gen);
            self.header
                .note_written(&StampMask::default(), Some(patch_key), gen);
            return Ok(false);
        };
        let record = Record {
            seq,
            key,
            block,
            len,
            patch_key,
            word,
            words: words.len() as u8,
            data: None,
        };
        self.region.copy_in(at, &record.encode());
        self.persist_or_fail(at, RECORD_BYTES as u64)?;
        Ok(true)
    }

    /// Write and persist the data record of a small synced write about to go into its block
    /// where it is (see [`Store::write_in_place_logged`]), holding the locks
    /// [`Inner::log_room_for`] asked for: `data` at byte `at.offset` of the value of `at.key`
    /// (`at.len` bytes in `at.block`), and `words` set in `patch_key`'s value. Returns false,
    /// nothing written and the write to be made another way, when the record does not fit (no
    /// room left, more words than a record holds, slots that would wrap around the log's end:
    /// their numbers then stay unused, as a torn record's do).
    fn log_data(
        &self,
        at: DataPlace,
        data: &[u8],
        patch_key: Key,
        words: &[(usize, u64)],
    ) -> Result<bool> {
        let (Ok(offset), Ok(n)) = (u16::try_from(at.offset), u16::try_from(data.len())) else {
            return Ok(false);
        };
        let (Some(word), Some((first, capacity))) = (packed_words(words), self.log_slots()) else {
            return Ok(false);
        };
        let slots = data_slots(data.len()) as u64;
        let seq = self.header.log_seq().fetch_add(slots, Ordering::AcqRel);
        if seq.saturating_sub(self.header.log_start()) + slots > capacity
            || seq % capacity + slots > capacity
        {
            return Ok(false);
        }
        let record = Record {
            seq,
            key: at.key,
            block: at.block,
            len: at.len,
            patch_key,
            word,
            words: words.len() as u8,
            data: Some(DataRange { offset, len: n }),
        };
        let off = first + seq % capacity * RECORD_BYTES as u64;
        let bytes = slots * RECORD_BYTES as u64;
        record.write_data(data, self.region.bytes_mut(off, bytes));
        self.persist_or_fail(off, bytes)?;
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

/// Where a data record's bytes go: byte `offset` of `key`'s value, `len` bytes in `block`.
#[derive(Clone, Copy)]
struct DataPlace {
    key: Key,
    block: u64,
    len: u32,
    offset: usize,
}

#[cfg(test)]
mod tests {
    use crate::key::Key;
    use crate::store::{test_store, BlockPut, Patch, Store, ThenPatch};

    const INODE: Key = Key { hi: 7, lo: 0 };

    fn data(n: u64) -> Key {
        Key { hi: 7, lo: 1 + n }
    }

    /// A write of `key` (a block of `byte`) that expects a sync, patching word 0 of `INODE`.
    fn synced_put(s: &Store, key: Key, byte: u8) -> BlockPut {
        let then = ThenPatch {
            key: INODE,
            unless_unchanged_since: None,
            patch: |_: &[u8], _: bool, p: &mut Patch| p.set(0, u64::from(byte)),
            sync_expected: true,
            only_if_unchanged_since: None,
        };
        s.put_block_then_patch(key, 4096, |out| out.fill(byte), Some(then))
            .expect("synced put")
    }

    fn commits(s: &Store) -> u64 {
        s.stats().expect("stats").commits
    }

    #[test]
    fn a_logged_write_commits_nothing_and_its_block_is_freed_only_by_the_commit() {
        let s = test_store();
        s.put(INODE, &[0u8; 64]).expect("inode");
        s.put_block(data(0), 4096, |out| out.fill(1))
            .expect("block");
        s.commit().expect("commit");
        let before = commits(&s);
        let put = synced_put(&s, data(0), 2);
        let logged = put.located.expect("out of line").1.block;
        assert_eq!(commits(&s), before, "a logged write committed");
        let stats = s.stats().expect("stats");
        assert!(stats.log_capacity > 0);
        assert_eq!(stats.log_records, 1, "records since the commit");
        let inner = &*s.inner;
        assert!(
            inner.header.written_gen(data(0)) <= inner.header.committed_gen()
                && inner.header.written_gen(INODE) <= inner.header.committed_gen(),
            "a logged write left its sync something to commit"
        );
        assert!(
            !inner.alloc.is_fresh(logged),
            "a logged block is writable in place"
        );
        // Its record: the key, its block, the patch's word.
        let (first, blocks) = inner.header.log_area().expect("a log");
        let area = inner
            .region
            .bytes(inner.layout.offset(first), u64::from(blocks) * 4096);
        let records = crate::log_record::replayable(area, inner.header.log_start(), 4096);
        assert_eq!(records.len(), 1);
        let r = records[0].record;
        assert_eq!(
            (r.key, r.block, r.len, r.patch_key),
            (data(0), logged, 4096, INODE)
        );
        assert_eq!(&r.word[..usize::from(r.words)], &[(0, 2)]);
        // Rewritten without a sync: the logged block waits for the commit (replay would name
        // it), then it is free.
        s.put_block(data(0), 4096, |out| out.fill(3))
            .expect("rewrite");
        assert!(inner.alloc.is_used(logged) && inner.alloc.is_pending(logged));
        s.commit().expect("commit");
        assert!(!inner.alloc.is_used(logged), "the logged block leaked");
        // A commit holds the write, so the log starts after its record.
        let records = crate::log_record::replayable(area, inner.header.log_start(), 4096);
        assert!(records.is_empty());
        assert_eq!(s.stats().expect("stats").log_records, 0);
    }

    #[test]
    fn a_write_after_an_unlogged_change_of_its_file_commits_instead() {
        let s = test_store();
        s.put(INODE, &[0u8; 64]).expect("inode");
        s.commit().expect("commit");
        // A change of the file that is not in the log: replay must not apply a record to the
        // commit without it, so the synced write commits as before the log.
        s.patch_with(INODE, |_, p| p.set(8, 9)).expect("patch");
        let before = commits(&s);
        synced_put(&s, data(0), 2);
        assert_eq!(
            commits(&s),
            before + 1,
            "a write after an unlogged change went into the log"
        );
        // The commit made the file clean: the next one is logged.
        synced_put(&s, data(1), 3);
        assert_eq!(commits(&s), before + 1, "a write of a clean file committed");
    }

    /// A synced write's patch of `INODE`: word 0 set to `v`.
    fn synced_then(v: u64) -> ThenPatch<impl FnMut(&[u8], bool, &mut Patch)> {
        ThenPatch {
            key: INODE,
            unless_unchanged_since: None,
            patch: move |_: &[u8], _: bool, p: &mut Patch| p.set(0, v),
            sync_expected: true,
            only_if_unchanged_since: None,
        }
    }

    fn value(s: &Store, key: crate::key::Key) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = s.get(key, &mut buf).expect("get").expect("present");
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_small_synced_write_into_a_logged_block_goes_into_a_data_record_where_the_block_is() {
        let s = test_store();
        s.put(INODE, &[0u8; 64]).expect("inode");
        s.put_block(data(0), 4096, |out| out.fill(1))
            .expect("block");
        s.put_block(data(1), 4096, |out| out.fill(5))
            .expect("block");
        s.commit().expect("commit");
        let before = commits(&s);
        // The last commit's block does not take one: nothing written.
        let refused = s
            .write_in_place_logged(data(0), 100, &[9u8; 300], synced_then(1))
            .expect("write");
        assert!(refused.is_none(), "a committed block was written in place");
        assert!(value(&s, data(0)).iter().all(|&b| b == 1));
        // Its first synced write since the commit copies it; a record names the copy.
        let logged = synced_put(&s, data(0), 2)
            .located
            .expect("out of line")
            .1
            .block;
        let slots = s.stats().expect("stats").log_records;
        let put = s
            .write_in_place_logged(data(0), 100, &[9u8; 300], synced_then(77))
            .expect("write")
            .expect("a data record");
        assert_eq!(put.located.expect("out of line").1.block, logged, "moved");
        assert_eq!(commits(&s), before, "a data record committed");
        assert_eq!(
            s.stats().expect("stats").log_records,
            slots + crate::log_record::data_slots(300) as u64
        );
        let v = value(&s, data(0));
        assert!(v[..100].iter().all(|&b| b == 2) && v[400..].iter().all(|&b| b == 2));
        assert!(v[100..400].iter().all(|&b| b == 9));
        assert_eq!(value(&s, INODE)[..8], 77u64.to_le_bytes());
        // Past the value's end, or more than a record carries: refused.
        for (off, len) in [(4000, 200), (0, crate::log_record::DATA_MAX + 1)] {
            let r = s
                .write_in_place_logged(data(0), off, &vec![3u8; len], synced_then(3))
                .expect("write");
            assert!(r.is_none(), "{off}+{len}");
        }
        // A block written since the commit without a record (no sync expected): the key has a
        // change outside the log, so its synced writes are not logged at all.
        s.put_block(data(1), 4096, |out| out.fill(6))
            .expect("unsynced");
        let r = s
            .write_in_place_logged(data(1), 0, &[7u8; 10], synced_then(4))
            .expect("write");
        assert!(r.is_none(), "a block without a record took a data record");
        assert!(value(&s, data(1)).iter().all(|&b| b == 6));
    }
}
