//! Blocks filled outside every lock for a transaction to publish: a multi-block write of whole
//! blocks that must change the tree's shape (new blocks, or blocks the last commit holds) takes
//! every writer lock, but only for its walk down the tree, not for copying its data; two such
//! writers copy at once. The blocks are allocated under one partition's lock and reserved in one
//! in-flight slot through a list block, so a writer killed while filling them leaves them to the
//! next locker's reaper, not leaked.

use std::cell::Cell;

use super::{home_share, set_home_share, Inner, Result, Store, Tx, Val, PARTITIONS};
use crate::allocator::list_capacity;
use crate::key::Key;
use crate::readers::INFLIGHT_LIST;

/// Whole blocks allocated and filled outside every lock (see [`Store::prepare_blocks`]), for
/// [`Tx::put_prepared`]. A transaction that puts one takes them all over: it publishes them or,
/// if it aborts, frees them. Dropped before any transaction took them, they are freed under a
/// partition lock: drop them outside [`Store::transact`].
pub struct Prepared<'s> {
    inner: &'s Inner,
    /// The partition whose share of the bitmap they came from.
    part: u64,
    /// The list block naming them in the in-flight slot; freed with the reservation.
    list: u64,
    /// The in-flight slot.
    slot: u64,
    blocks: Vec<u64>,
    /// The transaction attempt that took them over; 0 while none has.
    adopted_by: Cell<u64>,
}

impl Store {
    /// Allocate up to `count` whole blocks and fill block `i` with `fill(i, bytes)`, holding no
    /// lock while filling. Fewer than `count` when the list holds fewer or the partition's share
    /// of free blocks runs out (see [`Prepared::len`]); `None` when none could be prepared at
    /// once (every partition lock busy, or no free block without growing the volume): the
    /// caller then writes another way.
    pub fn prepare_blocks(
        &self,
        count: usize,
        mut fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<Option<Prepared<'_>>> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let count = count.min(list_capacity(inner.layout.bs()));
        if count == 0 {
            return Ok(None);
        }
        // Any partition's share of the bitmap will do: this thread's own (see `home_share`),
        // else the next whose lock is free and whose share has room.
        let home = home_share();
        let mut held = None;
        for p in (0..PARTITIONS).map(|i| (home + i) % PARTITIONS) {
            let Some(g) = inner.try_lock_partition(p) else {
                continue;
            };
            let g = g?;
            if g.is_all() {
                return Ok(None);
            }
            if let Some(list) = inner.alloc.alloc_in_share(p) {
                held = Some((p, g, list));
                break;
            }
        }
        let held = match held {
            Some(found) => Some(found),
            // No share had room under a free lock: the whole bitmap, under the first free one.
            None => (0..PARTITIONS)
                .map(|i| (home + i) % PARTITIONS)
                .find_map(|p| inner.try_lock_partition(p).map(|g| (p, g)))
                .map(|(p, g)| g.map(|g| (p, g)))
                .transpose()?
                .filter(|(_, g)| !g.is_all())
                .and_then(|(p, g)| inner.alloc.alloc_in(p).map(|list| (p, g, list))),
        };
        let Some((p, g, list)) = held else {
            return Ok(None);
        };
        set_home_share(p);
        inner.alloc.list_start(list);
        let Some(slot) = inner.alloc.readers().reserve(p, list | INFLIGHT_LIST) else {
            inner.alloc.free_now(list);
            return Ok(None);
        };
        let mut blocks = Vec::with_capacity(count);
        while blocks.len() < count {
            let Some(b) = inner.alloc.alloc_in(p) else {
                break;
            };
            // Listed before anything is written into it: a writer killed from here on leaves
            // the block to the reaper.
            inner.alloc.list_push(list, blocks.len() as u64, b);
            blocks.push(b);
        }
        drop(g);
        let prepared = Prepared {
            inner,
            part: p,
            list,
            slot,
            blocks,
            adopted_by: Cell::new(0),
        };
        if prepared.blocks.is_empty() {
            return Ok(None);
        }
        // Referenced by nothing but this writer's slot: only this thread touches them.
        let bs = inner.layout.bs();
        for (i, &b) in prepared.blocks.iter().enumerate() {
            fill(i, inner.region.bytes_mut(inner.layout.offset(b), bs));
        }
        inner.latency.on_write(prepared.blocks.len() as u32);
        crate::failpoint::hit("prepared-filled");
        Ok(Some(prepared))
    }
}

impl Prepared<'_> {
    /// Blocks prepared: the first `len()` of those asked for.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether none was prepared (never so for one [`Store::prepare_blocks`] returned).
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if self.adopted_by.get() != 0 {
            // A transaction published them, or freed them when it aborted.
            return;
        }
        // Never taken over: nothing references them. Released under a partition lock, so that
        // no garbage collection or reaper (each holds every lock) runs meanwhile: off the list
        // first (a writer killed after freeing a block must not leave it to the reaper, which
        // would free it under its next owner; one killed before holds the lock, and the repair
        // collects them), then freed, then the reservation ends. No lock: leaked until the next
        // collection, never freed twice.
        let Ok(_g) = self.inner.lock_partition(self.part) else {
            return;
        };
        self.inner.alloc.list_start(self.list);
        for &b in &self.blocks {
            self.inner.alloc.free_now(b);
        }
        self.inner.alloc.readers().unreserve(self.slot);
        self.inner.alloc.free_now(self.list);
    }
}

impl Tx<'_, '_> {
    /// Insert or replace `key` with block `i` of `prepared` (filled by
    /// [`Store::prepare_blocks`]); returns whether a value was replaced. The first put takes
    /// every block of `prepared` over: put them all in this transaction. `None` (nothing done)
    /// when an earlier attempt of this transaction took them and aborted (it freed them): write
    /// the value another way.
    pub fn put_prepared(
        &mut self,
        key: Key,
        prepared: &Prepared<'_>,
        i: usize,
    ) -> Result<Option<bool>> {
        match prepared.adopted_by.get() {
            0 => {
                // Every lock is held: the reservation ends before the publish (a writer killed
                // from here on holds the locks, and the repair collects what it did not
                // publish; the reaper never frees a block the tree references).
                self.inner.alloc.readers().unreserve(prepared.slot);
                // Never referenced by the tree, never read by a reader.
                self.inner.alloc.free_now(prepared.list);
                self.txn.adopt(&prepared.blocks);
                prepared.adopted_by.set(self.attempt);
            }
            a if a == self.attempt => {}
            _ => return Ok(None),
        }
        let block = prepared.blocks[i];
        let gen = self.txn.working_gen();
        self.txn
            .put(
                key,
                Val::Block {
                    block,
                    len: self.inner.layout.block_size,
                    gen,
                },
            )
            .map(Some)
    }
}
