//! Overwrites of several blocks that take only the locks of their partitions: a database page
//! of 16 KiB, a 64 KiB record, rewritten since the last commit, no longer stops every other
//! writer of the volume for the length of its copy. Each new block is published in its leaf
//! slot by one store; the partition's undo record lists the slots' old values first, so a
//! process killed among those stores leaves all of the write or none of it (the repair puts
//! the old values back; see `undo`).

use super::{
    partition_mask, partition_of, volume_lock, Acquired, BlockPut, BlockRef, Guard, Inner, Patch,
    PatchPlan, Result, Store, ThenPatch, Txn, Val, PARTITIONS,
};
use crate::key::Key;

impl Store {
    /// Most blocks one [`Store::overwrite_blocks`] replaces (the undo record's capacity with
    /// its overflow blocks: 850 blocks of 4 KiB).
    pub fn overwrite_max_blocks(&self) -> usize {
        crate::undo::max_slots_with_overflow(self.inner.layout.bs())
    }

    /// Replace the out-of-line values of `keys` with new blocks of the same lengths, filled by
    /// `fill(i, old bytes, new bytes)`, then make the patch `then` describes, holding only the
    /// locks of the partitions of `keys` and of the patched key. It applies when every key holds
    /// an out-of-line value in a leaf private to the working tree (written since the last
    /// commit) and `fits(i, length)` accepts its length. A process killed meanwhile leaves all
    /// the new values or none. `placed(i, at)` hears where each value went, under the locks;
    /// the result's `located` names the first key's (with the stamp right after the write,
    /// which moved it: see [`BlockPut::moved`]). `None`: nothing was done; the caller writes
    /// another way.
    pub fn overwrite_blocks(
        &self,
        keys: &[Key],
        fits: impl Fn(usize, u32) -> bool,
        mut fill: impl FnMut(usize, &[u8], &mut [u8]),
        mut placed: impl FnMut(usize, BlockRef),
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        if keys.is_empty() || keys.len() > self.overwrite_max_blocks() {
            return Ok(None);
        }
        // The patched key's partition is taken only when the patch must be written: writers of
        // disjoint blocks of one file do not all queue for its inode's partition while the
        // inode stays as they read it (the plan's stamp check needs no lock).
        let patch_bit = then.as_ref().map_or(0, |t| 1 << partition_of(t.key));
        let mut held = partition_mask(keys.iter().copied());
        let mut then = then;
        let (_guards, lowest, mut txn, olds, start, plan) = loop {
            let Some(guards) = lock_partitions(inner, held)? else {
                return Ok(None);
            };
            let lowest = u64::from(held.trailing_zeros());
            let txn = Txn::begin_in(inner.cx(), lowest);
            // (spot, old block, length, old generation, slot offset) of each key.
            let mut olds = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let spot = inner.locate_in_place(&txn, *k)?;
                let Some(Val::Block { block, len, gen }) = txn.value_at(&spot)? else {
                    return Ok(None);
                };
                let at = spot.value_word_off();
                match at {
                    Some(at) if fits(i, len) && txn.replaceable_in_place(&spot, len)? => {
                        olds.push((spot, block, len, gen, at));
                    }
                    _ => return Ok(None),
                }
            }
            match Self::plan_then(inner, &txn, held, &mut then, true)? {
                Some((start, plan)) => break (guards, lowest, txn, olds, start, plan),
                // Dropped in reverse order: the transaction (nothing written), then the locks.
                None if held & patch_bit == 0 => held |= patch_bit,
                None => return Ok(None),
            }
        };
        // New blocks, filled under the locks: a process killed before the publishes leaves
        // them to the repair's garbage collection (the next locker finds this one dead).
        // Past the undo record's own room, its entries go into more blocks.
        let overflows = crate::undo::overflow_blocks_for(keys.len(), inner.layout.bs());
        let mut fresh = Vec::with_capacity(keys.len() + overflows);
        for _ in 0..keys.len() + overflows {
            match inner.alloc.alloc_in(lowest) {
                Some(b) => fresh.push(b),
                None => {
                    for b in fresh {
                        inner.alloc.free_now(b);
                    }
                    return Ok(None);
                }
            }
        }
        let overflow = fresh.split_off(keys.len());
        for (i, (&b, (_, old, len, _, _))) in fresh.iter().zip(&olds).enumerate() {
            let len = u64::from(*len);
            let old = inner.region.bytes(inner.layout.offset(*old), len);
            let out = inner.region.bytes_mut(inner.layout.offset(b), len);
            fill(i, old, out);
        }
        inner.latency.on_write(keys.len() as u32);
        let slots: Vec<(u64, u64, u64)> = olds
            .iter()
            .map(|(_, block, _, gen, at)| (*at, *block, *gen))
            .collect();
        inner.undo.arm_slots(lowest, &slots, &overflow);
        // Readers of these partitions read again if they overlap the publishes (a write is
        // atomic to readers too); a writer killed among them leaves the sequences odd until the
        // repair.
        let _in_place = inner.header.in_place(held);
        let gen = inner.header.working_gen();
        for (n, ((spot, _, len, _, _), (&block, k))) in
            olds.iter().zip(fresh.iter().zip(keys)).enumerate()
        {
            if n == 3 {
                crate::failpoint::hit("overwrite-publish");
            }
            if n + 2 == olds.len() {
                crate::failpoint::hit("overwrite-publish-late");
            }
            let val = Val::Block {
                block,
                len: *len,
                gen,
            };
            if let Err(e) = txn.put_at(spot, *k, val) {
                // Leave the record armed: the next locker's repair puts the old values back
                // (and the sequences odd, so readers wait for it).
                inner.header.set_repair_needed(true);
                std::mem::forget(_in_place);
                return Err(e);
            }
        }
        inner.undo.disarm(lowest);
        for b in overflow {
            // Referenced by nothing, read by no reader: free at once.
            inner.alloc.free_now(b);
        }
        let at = |i: usize| BlockRef {
            block: fresh[i],
            len: olds[i].2,
        };
        for i in 0..keys.len() {
            placed(i, at(i));
        }
        let first = Some((keys[0], at(0)));
        Self::finish_in_place(inner, &mut txn, first, start, &plan, true).map(Some)
    }
}

impl Store {
    /// Write `data` at byte `offset` of the out-of-line value of `key` where `offset` is at or
    /// past the value's end and the result fits its block (an append into a file's last block):
    /// the bytes go into the block's unused tail (zeros between the old end and `offset`), one
    /// store of the slot's length makes them part of the value, then the patch `then` describes
    /// is made; holding only the locks of the partitions of `key` and of the patched key. For a
    /// value written since the last commit, in a leaf private to the working tree. No old byte
    /// of the value changes; the length and the patch are noted in the partition's undo record
    /// first, so a process killed among their stores leaves the old value and the old record
    /// (the repair puts them back). `None`: nothing was done; the caller writes another way.
    pub fn append_in_place(
        &self,
        key: Key,
        offset: usize,
        data: &[u8],
        then: Option<ThenPatch<impl FnMut(&[u8], bool, &mut Patch)>>,
    ) -> Result<Option<BlockPut>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let Some(end) = offset.checked_add(data.len()) else {
            return Ok(None);
        };
        if end > inner.layout.block_size as usize {
            return Ok(None);
        }
        let held = partition_mask(std::iter::once(key).chain(then.as_ref().map(|t| t.key)));
        let Some(_guards) = lock_partitions(inner, held)? else {
            return Ok(None);
        };
        let lowest = u64::from(held.trailing_zeros());
        let mut txn = Txn::begin_in(inner.cx(), lowest);
        let spot = inner.locate_in_place(&txn, key)?;
        let Some(Val::Block { block, len, gen }) = txn.value_at(&spot)? else {
            return Ok(None);
        };
        // (Of this generation and fresh: a block an intent-log record names is not.)
        if gen != inner.header.working_gen()
            || !inner.alloc.is_fresh(block)
            || offset < len as usize
            || !txn.replaceable_in_place(&spot, len)?
        {
            return Ok(None);
        }
        let mut then = then;
        let Some((start, plan)) = Self::plan_then(inner, &txn, held, &mut then, true)? else {
            return Ok(None);
        };
        // Past the value's end: bytes no reader looks at until the length moves.
        let tail = inner.region.bytes_mut(
            inner.layout.offset(block) + u64::from(len),
            (end - len as usize) as u64,
        );
        let gap = offset - len as usize;
        tail[..gap].fill(0);
        crate::copy::copy_bytes(&mut tail[gap..], data);
        inner.latency.on_write(1);
        // The length and the patch's words change by several stores: a process killed among
        // them leaves the old ones for the repair to put back.
        let Some(len_word) = spot.value_word_off().map(|at| at + 16) else {
            return Ok(None);
        };
        // The length word and at most eight patched words: no allocation on this path.
        let mut words = [(0u64, 0u64); 9];
        words[0] = (len_word, inner.region.read_u64(len_word));
        let mut n = 1;
        if let PatchPlan::InPlace(planned) = &plan {
            for (off, _) in planned.patch.words() {
                let w = planned.value_off + *off as u64;
                words[n] = (w, inner.region.read_u64(w));
                n += 1;
            }
        }
        inner.undo.arm_words(lowest, &words[..n]);
        // Readers that looked up the old length read again (the change stamp moves at the end).
        let _in_place = inner.header.in_place(held);
        if !txn.resize_in_place(&spot, end as u32)? {
            inner.undo.disarm(lowest);
            return Ok(None);
        }
        crate::failpoint::hit("append-resized");
        let at = BlockRef {
            block,
            len: end as u32,
        };
        let put = Self::finish_in_place(inner, &mut txn, Some((key, at)), start, &plan, true);
        inner.undo.disarm(lowest);
        put.map(Some)
    }
}

/// Take the locks of the partitions in the bit mask `held`, in ascending order as every locker
/// does; released when the result drops (a fixed array: no allocation on the append path).
/// `None` (none held) when a repair is due: the caller goes the way that takes every lock.
pub(super) fn lock_partitions(inner: &Inner, held: u64) -> Result<Option<[Option<Guard<'_>>; 8]>> {
    const _: () = assert!(PARTITIONS == 8);
    let mut guards: [Option<Guard<'_>>; 8] = Default::default();
    for p in (0..PARTITIONS).filter(|p| held & (1 << p) != 0) {
        match volume_lock::lock(&inner.header, p)? {
            Acquired::Clean if !inner.header.repair_needed() => {
                guards[p as usize] = Some(Guard {
                    inner,
                    only: Some(p),
                })
            }
            Acquired::Clean => {
                volume_lock::unlock(&inner.header, p);
                return Ok(None);
            }
            Acquired::OwnerDied => {
                inner.header.set_repair_needed(true);
                volume_lock::unlock(&inner.header, p);
                return Ok(None);
            }
        }
    }
    Ok(Some(guards))
}
