//! Changes made in place under one partition's lock: a value's new block published in its leaf
//! slot when the leaf is private to the working tree, and the bytes of a block written since the
//! last commit changed where they are (through the partition's redo record, so a process killed
//! mid-copy leaves the write whole or absent). A patch of another key (a file's size and times)
//! can ride in the same hold. Block reservation for such writes lives here too.

use crate::error::{Result, StoreError};
use crate::header::{partition_of, PARTITIONS};
use crate::key::Key;
use crate::node::{Node, Val};
use crate::tree::Txn;

use super::{
    check_then, home_share, set_home_share, BlockPut, BlockRef, InPlaceOutcome, Inner, Known,
    Patch, PatchPlan, PatchStart, PlannedPatch, Store, ThenPatch, PREFETCH_BYTES,
};

/// Most pieces one [`Store::write_pieces_in_place`] writes: 128 KiB of 4 KiB blocks (a
/// 64 KiB write at any offset spans 17).
pub const MAX_PIECES: usize = 32;

/// One piece of a write in place (see [`Store::write_pieces_in_place`]): `data` at byte
/// `offset` of the out-of-line value of `key`, where the caller last saw it (`known`), if it
/// knows.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    /// The value's key.
    pub key: Key,
    /// Where in the value the bytes go.
    pub offset: usize,
    /// The bytes.
    pub data: &'a [u8],
    /// Where the caller last saw the value, and the key's change stamp then.
    pub known: Option<Known>,
}

impl Store {
    /// Allocate a block and reserve an in-flight slot for it, holding the lock of the partition
    /// whose share it comes from (see [`home_share`]; every lock when the volume must grow or
    /// commit to find space). `None` when every in-flight slot is busy.
    pub(super) fn reserve_block(inner: &Inner) -> Result<Option<(u64, u64)>> {
        // Any partition's share will do: this thread's own first, else the next whose lock is
        // free and whose share has a free block (writers never wait here for each other, and
        // a thread whose share filled up moves on). Failing that, holding its own partition's
        // lock (waiting for it if need be), anywhere in the bitmap; then, holding every lock,
        // anywhere after the volume grows or a commit frees space.
        let home = home_share();
        let mut fast = None;
        for q in (0..PARTITIONS).map(|i| (home + i) % PARTITIONS) {
            let Some(g) = inner.try_lock_partition(q) else {
                continue;
            };
            let g = g?;
            if g.is_all() {
                fast = Some((q, None, g));
                break;
            }
            if let Some(b) = inner.alloc.alloc_in_share(q) {
                set_home_share(q);
                fast = Some((q, Some(b), g));
                break;
            }
        }
        let (p, b, _g) = match fast {
            Some((p, Some(b), g)) => (p, b, g),
            found => {
                let (p, g) = match found {
                    Some((p, _, g)) => (p, g),
                    None => (home, inner.lock_partition(home)?),
                };
                let g = if g.is_all() {
                    g
                } else if let Some(b) = inner.alloc.alloc_in(p) {
                    // (No share had room under a free lock: the whole bitmap, under p's lock.)
                    return Self::reserve_slot(inner, p, b);
                } else {
                    drop(g);
                    inner.lock()?
                };
                let b = match inner.alloc.alloc(p, inner.media.as_ref(), false) {
                    Ok(b) => b,
                    Err(StoreError::NoSpace) if inner.header.pending_blocks() > 0 => {
                        inner.commit_locked()?;
                        inner.alloc.alloc(p, inner.media.as_ref(), false)?
                    }
                    Err(e) => return Err(e),
                };
                (p, b, g)
            }
        };
        Self::reserve_slot(inner, p, b)
    }

    /// Reserve an in-flight slot of partition `p` for block `b`, just allocated (the caller
    /// holds a lock): `None`, the block freed again, when every slot is busy.
    pub(super) fn reserve_slot(inner: &Inner, p: u64, b: u64) -> Result<Option<(u64, u64)>> {
        match inner.alloc.readers().reserve(p, b) {
            Some(slot) => Ok(Some((b, slot))),
            None => {
                inner.alloc.free_now(b);
                Ok(None)
            }
        }
    }

    /// The common cases of [`Store::put_block_then_patch`], holding the locks of the partitions
    /// in `held` (`p`, the key's, and perhaps the patched key's and a leaf's last key's): the
    /// key exists with a value of the same length in a leaf private to the working tree, or it
    /// goes past the last key of such a leaf (appended there), and the patch is skipped or
    /// lands in place. Otherwise nothing is written (the patch closure may have been called)
    /// and the outcome says which partitions would do or that every lock is needed. With
    /// `logged`, the write goes into the intent log (see `intent`): its publish notes nothing
    /// for syncs, and the words its patch sets are left there for the record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn publish_in_place<F: FnMut(&[u8], bool, &mut Patch)>(
        inner: &Inner,
        p: u64,
        held: u64,
        key: Key,
        block: u64,
        len: usize,
        slot: u64,
        then: &mut Option<ThenPatch<F>>,
        logged: Option<&mut Patch>,
    ) -> Result<InPlaceOutcome> {
        let mut txn = Txn::begin_in(inner.cx(), p);
        let spot = inner.locate_in_place(&txn, key)?;
        // A replacement in its leaf; or a new key past the last one of its leaf (a file growing
        // at its end), holding that last key's partition too.
        let replacing = txn.replaceable_in_place(&spot, len as u32)?;
        if !replacing {
            let Some(last) = txn.appendable_in_place(&spot) else {
                return Ok(InPlaceOutcome::No);
            };
            let need = 1 << partition_of(last);
            if held & need == 0 {
                return Ok(InPlaceOutcome::NeedsPartitions(need));
            }
        }
        let Some((start, plan)) = Self::plan_then(inner, &txn, held, then, replacing)? else {
            return Ok(InPlaceOutcome::NeedsPatchPartition);
        };
        // Committed to this path: the data block first, then the patch, one publish each.
        if let Some(out) = logged {
            // Into the intent log: the words the patch sets go into the record.
            txn.set_logged();
            *out = match &plan {
                PatchPlan::InPlace(at) => at.patch,
                _ => Patch::default(),
            };
        }
        let gen = inner.header.working_gen();
        let val = Val::Block {
            block,
            len: len as u32,
            gen,
        };
        // Unreserved before the publish: a writer killed in between leaves a leaked block (found
        // by the repair, as it holds a lock), never a published block in a dead writer's slot,
        // which the reaper would free while the tree still points at it.
        inner.alloc.readers().unreserve(slot);
        // From the publish until the stamps have moved, the partitions' write sequences are
        // odd: a reader at a remembered location does not take the old block for current.
        let _announced = inner.header.in_place(held);
        if replacing {
            if let Err(e) = txn.put_at(&spot, key, val) {
                txn.abort();
                inner.alloc.free_now(block);
                return Err(e);
            }
        } else if !txn.append_in_place(&spot, key, val) {
            // Room and place were checked under these locks, so this is not reached; the slot
            // is unreserved, so falling back (which would unreserve it again and publish the
            // block) is no option either.
            debug_assert!(false, "an append checked under its locks did not fit");
            txn.abort();
            inner.alloc.free_now(block);
            return Err(StoreError::Invalid(
                "an append checked under its locks did not fit".into(),
            ));
        }
        let at = BlockRef {
            block,
            len: len as u32,
        };
        Self::finish_in_place(inner, &mut txn, Some((key, at)), start, &plan, replacing)
            .map(InPlaceOutcome::Done)
    }

    /// Apply the plan's patch, publish, and say what the caller may cache. `patch` is the
    /// patched key and its change stamp read before the plan.
    pub(super) fn finish_in_place(
        inner: &Inner,
        txn: &mut Txn<'_>,
        located: Option<(Key, BlockRef)>,
        patch: Option<(Key, u64)>,
        plan: &PatchPlan,
        replaced: bool,
    ) -> Result<BlockPut> {
        let patched = match plan {
            PatchPlan::InPlace(at) => {
                txn.patch_inline_at(at.key, at.value_off, at.patch.words());
                true
            }
            _ => false,
        };
        let ours = patch.map(|(k, _)| u64::from(txn.touches(k)));
        // A new block or length moves the key's stamp; bytes written where they were do not.
        let moved = located.is_some_and(|(k, _)| txn.touches(k));
        txn.commit_publish();
        let patched_stamp = patch.and_then(|(k, s0)| {
            let s1 = inner.header.change_stamp(k);
            // Patched, this writer holds the patched key's partition: nobody else changed it.
            // Else nobody may have moved its stamp between the looks at it.
            (patched || Some(s1) == ours.map(|o| s0 + o)).then_some(s1)
        });
        Ok(BlockPut {
            found: true,
            replaced,
            patched,
            located: located.map(|(key, at)| (inner.header.change_stamp(key), at)),
            moved,
            patched_stamp,
        })
    }

    /// [`Store::plan_patch`] with the patched key and its change stamp before the change (for
    /// `finish_in_place`); `None` when the patch needs every lock.
    pub(super) fn plan_then<F: FnMut(&[u8], bool, &mut Patch)>(
        inner: &Inner,
        txn: &Txn<'_>,
        held: u64,
        then: &mut Option<ThenPatch<F>>,
        replaced: bool,
    ) -> Result<Option<(PatchStart, PatchPlan)>> {
        let start = then
            .as_ref()
            .map(|t| (t.key, inner.header.change_stamp(t.key)));
        Ok(match Self::plan_patch(inner, txn, held, then, replaced)? {
            PatchPlan::Escalate => None,
            plan => Some((start, plan)),
        })
    }

    /// Where the patch of `then` goes in a transaction holding only the locks of the partitions
    /// in the bit mask `held` (the put it follows replaced a value). The patch is skipped when
    /// its key's change stamp still reads what the caller saw, and not written when every word
    /// already holds its value.
    pub(super) fn plan_patch<F: FnMut(&[u8], bool, &mut Patch)>(
        inner: &Inner,
        txn: &Txn<'_>,
        held: u64,
        then: &mut Option<ThenPatch<F>>,
        replaced: bool,
    ) -> Result<PatchPlan> {
        let Some(t) = then.as_mut() else {
            return Ok(PatchPlan::Nothing);
        };
        if t.only_if_unchanged_since.is_some() {
            // Checked under the patched key's partition lock, which every patch of it holds.
            if held & (1 << partition_of(t.key)) == 0 {
                return Ok(PatchPlan::Escalate);
            }
            check_then(inner, Some(&*t))?;
        }
        // (A new key changes what the patch writes, a file's block count: never skipped.)
        if replaced && t.unless_unchanged_since == Some(inner.header.change_stamp(t.key)) {
            return Ok(PatchPlan::Nothing);
        }
        // (From this thread's hint when it holds: a file's appends patch its inode each time,
        // and a walk from the root was a fifth of an append's time.)
        let spot = inner.locate_in_place(txn, t.key)?;
        let Some(old) = txn.value_at(&spot)? else {
            return Ok(PatchPlan::Escalate);
        };
        let old_bytes = Node::value_bytes(&inner.region, &inner.layout, old);
        let patch = Patch::chosen(old_bytes, |old, p| (t.patch)(old, replaced, p))?;
        if patch.holds_in(old_bytes) {
            return Ok(PatchPlan::Nothing);
        }
        if held & (1 << partition_of(t.key)) == 0 || !txn.patchable_in_place(&spot)? {
            return Ok(PatchPlan::Escalate);
        }
        let Some(value_off) = spot.inline_value_off() else {
            return Ok(PatchPlan::Escalate);
        };
        Ok(PatchPlan::InPlace(PlannedPatch {
            key: t.key,
            value_off,
            patch,
        }))
    }

    /// Write `data` at byte `offset` of the out-of-line value of `key` where it lies, then make
    /// the patch `then` describes, holding only the key's partition lock (and the patched
    /// key's): for writes of at most 4 KiB inside the value, into a data block written since the
    /// last commit; one at or past the value's end goes to [`Store::append_in_place`]. A
    /// process killed during the copy leaves it whole (see `undo`). `None` (nothing done) when
    /// the write does not qualify; the caller then copies the block.
    ///
    /// `known`: where the caller last saw the value and the key's change stamp then (a file's
    /// block map). If the stamp still reads that under the lock, the value is there, and if
    /// that block was allocated since the last commit (the allocator's fresh map says so) the
    /// write goes there without a look at the tree. Otherwise the tree says where the value
    /// is, as without it.
    pub fn write_in_place(
        &self,
        key: Key,
        offset: usize,
        data: &[u8],
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
        known: Option<Known>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        if data.len() as u64 > crate::undo::UNDO_MAX_BYTES {
            return Ok(None);
        }
        if let Some(k) = known {
            // Its lines, on their way while the locks are taken and the stamps checked.
            inner.alloc.prefetch_fresh(k.at.block);
            if k.at.block >= inner.layout.data_start && k.at.block < inner.layout.max_blocks {
                let at = inner.layout.offset(k.at.block) + offset as u64;
                // Every line an ordinary copy stores into: the lock's release after the copy
                // waits for each line the copy missed (512 B writes by hand: 1.28-1.39M ->
                // 1.48-1.57M IOPS). A streamed copy loads none: its first line only, as before
                // (all of them cost 4 KiB writes 10 %).
                let bytes = if crate::undo::streams(data.len()) {
                    1
                } else {
                    data.len().min(PREFETCH_BYTES)
                };
                inner.region.prefetch_range(at, at + bytes as u64, true);
            }
        }
        let p = partition_of(key);
        let mut then = then;
        match inner.in_place(p, key, &mut then, |held, then| {
            Self::write_in_place_held(inner, p, held, key, offset, data, then, known)
        })? {
            InPlaceOutcome::Done(done) => Ok(Some(done)),
            // Past the value's end (a file extended, then written in order): an append into the
            // block's tail, which takes its own locks.
            InPlaceOutcome::PastEnd => self.append_in_place(key, offset, data, then),
            InPlaceOutcome::NeedsPatchPartition
            | InPlaceOutcome::NeedsPartitions(_)
            | InPlaceOutcome::No => Ok(None),
        }
    }

    /// The leanest write in place: `data` at byte `offset` of the out-of-line value of `key`,
    /// in the block where the caller knows it is (`known`), when the write changes nothing but
    /// those bytes: `then_unchanged` names a key and the change stamp at which the caller saw
    /// that the write leaves it as it is (a file's inode, its size and times within the
    /// clock's tick). Under the key's partition lock alone, as [`Store::write_in_place`] with
    /// a patch it skips, without the transaction it would begin and publish. `false` (nothing
    /// written) when any of that does not hold; the caller then writes another way.
    pub fn overwrite_known(
        &self,
        key: Key,
        offset: usize,
        data: &[u8],
        known: Known,
        then_unchanged: (Key, u64),
    ) -> Result<bool> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let at = known.at;
        if data.len() as u64 > crate::undo::UNDO_MAX_BYTES
            || offset
                .checked_add(data.len())
                .is_none_or(|e| e > at.len as usize)
        {
            return Ok(false);
        }
        inner.alloc.prefetch_fresh(at.block);
        let p = partition_of(key);
        let Some(_lock) = inner.lock_in_place(p, key, 1 << p)? else {
            return Ok(false);
        };
        // The stamp has not moved since the caller saw the value there (no one can move it
        // while this lock is held), the block is not the last commit's, and the other key is
        // still as the caller saw it.
        if inner.header.change_stamp(key) != known.stamp
            || !inner.alloc.is_fresh(at.block)
            || inner.header.change_stamp(then_unchanged.0) != then_unchanged.1
        {
            return Ok(false);
        }
        // The bytes change where readers may be copying them: they read again (see `View`).
        let in_place = inner.header.in_place(1 << p);
        inner.undo.write(p, at.block, offset as u64, data);
        inner.latency.on_write(1);
        // What a transaction's publish would note: the volume changed, and a sync of the key
        // waits for this generation's commit.
        inner.header.mark_dirty();
        inner
            .header
            .note_written_key(key, inner.header.working_gen());
        drop(in_place);
        Ok(true)
    }

    /// The two pieces of a write across a block boundary, each where it lies: `first.2` at
    /// byte `first.1` of the out-of-line value of key `first.0`, `second.2` at byte 0 of
    /// `second.0`'s: [`Store::write_pieces_in_place`] of those two pieces.
    pub fn write_pair_in_place(
        &self,
        first: (Key, usize, &[u8], Option<Known>),
        second: (Key, &[u8], Option<Known>),
        placed: impl FnMut(usize, BlockRef),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<Option<BlockPut>> {
        let pieces = [
            Piece {
                key: first.0,
                offset: first.1,
                data: first.2,
                known: first.3,
            },
            Piece {
                key: second.0,
                offset: 0,
                data: second.1,
                known: second.2,
            },
        ];
        self.write_pieces_in_place(&pieces, placed, then)
    }

    /// The pieces of a write across block boundaries, each where it lies (at most
    /// [`MAX_PIECES`]; keys sharing a change stamp, as one file's blocks do; each piece at most
    /// 4 KiB, inside its value, in a data block written since the last commit; a [`Known`]
    /// location, if given, spares the look at the tree), in one hold of the keys' partition
    /// locks, then the patch `then` describes. Readers see all the pieces or none: the
    /// partitions' write marks stay odd across every copy. A process killed among them leaves
    /// the pieces before it written, as the kernel's copy page by page does, and never part of a
    /// piece (see `undo`). `placed(i, at)` hears where piece `i`'s value is, under the locks
    /// (the result's `located` names the last one's). `None`: nothing written; the caller
    /// writes another way.
    pub fn write_pieces_in_place(
        &self,
        pieces: &[Piece<'_>],
        mut placed: impl FnMut(usize, BlockRef),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
            return Ok(None);
        };
        let bucket = crate::header::stamp_bucket(first.key);
        if pieces.len() > MAX_PIECES
            || pieces.iter().any(|p| {
                crate::header::stamp_bucket(p.key) != bucket
                    || p.data.len() as u64 > crate::undo::UNDO_MAX_BYTES
            })
        {
            return Ok(None);
        }
        let (mut held, patch_bit) = super::in_place_partitions(first.key, &then);
        for p in pieces {
            held |= 1 << partition_of(p.key);
        }
        let mut then = then;
        loop {
            let Some(_guards) = super::overwrite::lock_partitions(inner, held)? else {
                return Ok(None);
            };
            let mut txn = Txn::begin_in(inner.cx(), u64::from(held.trailing_zeros()));
            let mut at = [BlockRef { block: 0, len: 0 }; MAX_PIECES];
            for (i, p) in pieces.iter().enumerate() {
                at[i] = match p.known {
                    Some(k)
                        if inner.header.change_stamp(p.key) == k.stamp
                            && inner.alloc.is_fresh(k.at.block) =>
                    {
                        k.at
                    }
                    _ => {
                        let spot = inner.locate_in_place(&txn, p.key)?;
                        match txn.value_at(&spot)? {
                            Some(Val::Block { block, len, gen })
                                if gen == inner.header.working_gen()
                                    && inner.alloc.is_fresh(block) =>
                            {
                                BlockRef { block, len }
                            }
                            _ => return Ok(None),
                        }
                    }
                };
                if p.offset + p.data.len() > at[i].len as usize {
                    return Ok(None);
                }
            }
            let Some((start, plan)) = Self::plan_then(inner, &txn, held, &mut then, true)? else {
                if held & patch_bit == 0 {
                    held |= patch_bit;
                    continue;
                }
                return Ok(None);
            };
            // The bytes change where readers may be copying them: they read again (see `View`).
            let _in_place = inner.header.in_place(held);
            for (i, p) in pieces.iter().enumerate() {
                inner
                    .undo
                    .write(partition_of(p.key), at[i].block, p.offset as u64, p.data);
            }
            inner.latency.on_write(pieces.len() as u32);
            for (i, a) in at[..pieces.len()].iter().enumerate() {
                placed(i, *a);
            }
            // (The keys share a stamp: one names the write's generation for all.)
            txn.note_written_in_place(last.key);
            let located = Some((last.key, at[pieces.len() - 1]));
            return Self::finish_in_place(inner, &mut txn, located, start, &plan, true).map(Some);
        }
    }

    /// [`Store::write_in_place`] holding the locks of the partitions in `held` (`p`, the key's,
    /// among them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_in_place_held<F: FnMut(&[u8], bool, &mut Patch)>(
        inner: &Inner,
        p: u64,
        held: u64,
        key: Key,
        offset: usize,
        data: &[u8],
        then: &mut Option<ThenPatch<F>>,
        known: Option<Known>,
    ) -> Result<InPlaceOutcome> {
        // (Declared mutable here: moved later, its 800 bytes were copied on every write.)
        let mut txn = Txn::begin_in(inner.cx(), p);
        let (block, len) = match known {
            // The stamp has not moved since the caller saw the value there (and no one can move
            // it while this lock is held), and the block is not the last commit's.
            Some(k)
                if inner.header.change_stamp(key) == k.stamp
                    && inner.alloc.is_fresh(k.at.block) =>
            {
                (k.at.block, k.at.len)
            }
            _ => {
                let spot = inner.locate_in_place(&txn, key)?;
                let Some(Val::Block { block, len, gen }) = txn.value_at(&spot)? else {
                    return Ok(InPlaceOutcome::No);
                };
                // (A block an intent-log record names is of this generation, not fresh.)
                if gen != inner.header.working_gen() || !inner.alloc.is_fresh(block) {
                    return Ok(InPlaceOutcome::No);
                }
                (block, len)
            }
        };
        if offset < len as usize && data.len() <= PREFETCH_BYTES && known.is_none() {
            // The lines this write stores into, on their way while the patch is planned and
            // the undo record armed.
            let at = inner.layout.offset(block) + offset as u64;
            let end = at + data.len().min(len as usize - offset) as u64;
            inner.region.prefetch_range(at, end, true);
        }
        if offset >= len as usize {
            return Ok(InPlaceOutcome::PastEnd);
        }
        if offset
            .checked_add(data.len())
            .is_none_or(|e| e > len as usize)
        {
            return Ok(InPlaceOutcome::No);
        }
        let Some((start, plan)) = Self::plan_then(inner, &txn, held, then, true)? else {
            return Ok(InPlaceOutcome::NeedsPatchPartition);
        };
        // The bytes change where readers may be copying them: they read again (see `View`).
        let _in_place = inner.header.in_place(held);
        inner.undo.write(p, block, offset as u64, data);
        inner.latency.on_write(1);
        // The location holds, so the stamp does too: cached locations stay good (readers that
        // overlap the bytes changing see the write sequence move instead).
        let at = BlockRef { block, len };
        txn.note_written_in_place(key);
        Self::finish_in_place(inner, &mut txn, Some((key, at)), start, &plan, true)
            .map(InPlaceOutcome::Done)
    }
}

#[cfg(test)]
mod tests {
    use crate::header::partition_of;
    use crate::key::Key;
    use crate::tree::Txn;

    /// Where the next key of a run would go: the last key of its leaf when it may be appended
    /// under partition locks there.
    fn append_spot(s: &super::Store, key: Key) -> Option<Key> {
        let inner = &*s.inner;
        let _g = inner.lock().expect("lock");
        let txn = Txn::begin_in(inner.cx(), partition_of(key));
        let spot = txn.locate(key).expect("locate");
        txn.appendable_in_place(&spot)
    }

    #[test]
    fn a_growing_run_of_keys_gets_a_leaf_end_of_its_own() {
        let s = super::super::test_store();
        let fill = |k: Key| {
            s.put_block(k, 4096, |out| out.fill(k.lo as u8))
                .expect("put")
        };
        // Another high word's keys after the run, in the same leaf.
        for i in 0..3 {
            fill(Key::new(9, i));
        }
        for i in 0..40 {
            fill(Key::new(8, i));
        }
        // Past the run's end: its leaf ends with the run, written since the last commit.
        assert_eq!(append_spot(&s, Key::new(8, 40)), Some(Key::new(8, 39)));
        // The other keys' leaf, too, at their end.
        assert_eq!(append_spot(&s, Key::new(9, 3)), Some(Key::new(9, 2)));
        // A short run does not split its leaf: its next key goes into the middle.
        for i in 0..3 {
            fill(Key::new(7, i));
        }
        assert_eq!(append_spot(&s, Key::new(7, 3)), None);
        // After a commit the leaf is the last commit's: copied, not appended to.
        s.commit().expect("commit");
        assert_eq!(append_spot(&s, Key::new(8, 40)), None);
        fill(Key::new(8, 40));
        assert_eq!(append_spot(&s, Key::new(8, 41)), Some(Key::new(8, 40)));
        let mut buf = vec![0u8; 4096];
        for (hi, n) in [(7u64, 3u64), (8, 41), (9, 3)] {
            for i in 0..n {
                assert_eq!(s.get(Key::new(hi, i), &mut buf).expect("get"), Some(4096));
                assert!(buf.iter().all(|&b| b == i as u8), "{hi}/{i}");
            }
        }
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
    }

    /// Pieces of one write over several values written since the last commit land where the
    /// values are (no block moves, no stamp moves); too many pieces, keys of two stamp buckets,
    /// or a piece over a committed value are refused with nothing written.
    #[test]
    fn pieces_in_place_land_where_their_values_are_or_not_at_all() {
        use super::super::NoPatch;
        use super::{Piece, MAX_PIECES};
        let s = super::super::test_store();
        // Keys of one stamp bucket: one "file"'s blocks.
        let k = |b: u64| Key::new(7 << 32, b);
        let old: Vec<Vec<u8>> = (0..5u8).map(|b| vec![b + 1; 4096]).collect();
        for (b, v) in old.iter().enumerate() {
            s.put(k(b as u64), v).expect("put");
        }
        let places = |s: &super::Store| -> Vec<u64> {
            (0..5)
                .map(|b| {
                    s.read(|v| match v.get_located(k(b))? {
                        Some(crate::store::Located::Block(at)) => Ok(at.block()),
                        _ => panic!("block {b} out of line"),
                    })
                    .expect("read")
                })
                .collect()
        };
        let before = (places(&s), s.change_stamp(k(0)));
        let piece = |b: u64, offset: usize, data: &'static [u8]| Piece {
            key: k(b),
            offset,
            data,
            known: None,
        };
        static A: [u8; 4096] = [0xA1; 4096];
        let pieces = [
            piece(1, 4000, &A[..96]),
            piece(2, 0, &A),
            piece(3, 0, &A[..10]),
        ];
        let mut seen = Vec::new();
        let put = s
            .write_pieces_in_place(&pieces, |i, at| seen.push((i, at.block())), None::<NoPatch>)
            .expect("write");
        assert!(put.is_some(), "written in place");
        assert_eq!((places(&s), s.change_stamp(k(0))), before, "nothing moved");
        assert_eq!(
            seen,
            vec![(0, before.0[1]), (1, before.0[2]), (2, before.0[3])]
        );
        let got = |b: u64| {
            s.get_with(k(b), |v| v.to_vec())
                .expect("get")
                .expect("there")
        };
        assert!(
            got(1)[..4000].iter().all(|&x| x == 2) && got(1)[4000..].iter().all(|&x| x == 0xA1)
        );
        assert!(got(2).iter().all(|&x| x == 0xA1));
        assert!(got(3)[..10].iter().all(|&x| x == 0xA1) && got(3)[10..].iter().all(|&x| x == 4));
        // Refused, nothing written: too many pieces, another stamp bucket, a committed value.
        static B: [u8; 8] = [0xB2; 8];
        let many = [piece(0, 0, &B); MAX_PIECES + 1];
        let none = |pieces: &[Piece<'_>]| {
            s.write_pieces_in_place(pieces, |_, _| {}, None::<NoPatch>)
                .expect("write")
                .is_none()
        };
        assert!(none(&many));
        let other = Piece {
            key: (0..64)
                .map(|hi| Key::new(hi, 0))
                .find(|o| crate::header::stamp_bucket(*o) != crate::header::stamp_bucket(k(0)))
                .expect("a key of another bucket"),
            ..piece(0, 0, &B)
        };
        s.put(other.key, &[9u8; 4096]).expect("put other");
        assert!(none(&[piece(0, 0, &B), other]));
        s.commit().expect("commit");
        assert!(none(&[piece(0, 0, &B), piece(1, 0, &B)]));
        assert_eq!(got(0), old[0], "refused writes wrote nothing");
        assert_eq!(got(1)[..8], [2u8; 8]);
    }
}
