//! Transactions: [`Store::transact`] runs a closure over a [`Tx`] holding every writer lock; its
//! puts and deletes publish together (one root store) or not at all, and a closure that fails is
//! undone.

use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::layout::MAX_BLOCK_SIZE;
use crate::node::{Node, Val};
use crate::tree::Txn;

use super::{BlockRef, Inner, Store};

/// An open transaction (see [`Store::transact`]). Holds the volume lock.
pub struct Tx<'s, 'c> {
    pub(super) inner: &'s Inner,
    pub(super) txn: Txn<'c>,
    /// This attempt's number, unique in the process (see `prepared`).
    pub(super) attempt: u64,
}

/// Where each key a [`Store::transact_locating`] asked about lives after the publish: its
/// change stamp, and its block when its value is out of line.
pub type Places = Vec<(u64, Option<BlockRef>)>;

/// Numbers for transaction attempts.
static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Tx<'_, '_> {
    /// Mark this transaction as one that frees space (deleting files or ranges): it may use the
    /// blocks a volume holds back so that it can be emptied once full.
    pub fn use_reserve(&mut self) {
        self.txn.use_reserve();
    }

    /// Call `f` with the value of `key` as this transaction sees it.
    pub fn get_with<R>(&self, key: Key, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let cx = self.txn.cx();
        Ok(cx
            .lookup(self.txn.root(), key)?
            .map(|v| f(Node::value_bytes(&self.inner.region, &self.inner.layout, v))))
    }

    /// Copy of the value of `key`.
    pub fn get(&self, key: Key) -> Result<Option<Vec<u8>>> {
        self.get_with(key, |v| v.to_vec())
    }

    /// Insert or replace; returns whether a value was replaced. The old value is not looked
    /// up first (one walk down the tree, not two).
    pub fn put(&mut self, key: Key, value: &[u8]) -> Result<bool> {
        let inner = self.inner;
        let len = value.len();
        if len > inner.layout.block_size as usize {
            return Err(StoreError::Invalid(format!(
                "value of {len} bytes exceeds the block size"
            )));
        }
        if len <= inner.facts.inline_max as usize {
            return self.txn.put(key, Val::Inline(value));
        }
        let (block, gen) = self.txn.alloc_data()?;
        inner
            .region
            .bytes_mut(inner.layout.offset(block), len as u64)
            .copy_from_slice(value);
        inner.latency.on_write(1);
        self.txn.put(
            key,
            Val::Block {
                block,
                len: len as u32,
                gen,
            },
        )
    }

    /// Insert or replace with a value of `len` bytes written by `fill`, given the old value.
    pub fn put_with(
        &mut self,
        key: Key,
        len: usize,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
    ) -> Result<()> {
        self.put_placed_with(key, len, false, fill)
    }

    /// [`Tx::put_with`] with the value out of line even when it is short enough to live in its
    /// leaf: for a block that appends will lengthen (the last block of a growing file), so
    /// that they land in its unused tail in place (see `Store::append_in_place`).
    pub fn put_growing_with(
        &mut self,
        key: Key,
        len: usize,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
    ) -> Result<()> {
        self.put_placed_with(key, len, true, fill)
    }

    pub(super) fn put_placed_with(
        &mut self,
        key: Key,
        len: usize,
        out_of_line: bool,
        fill: impl FnOnce(Option<&[u8]>, &mut [u8]),
    ) -> Result<()> {
        let inner = self.inner;
        if len > inner.layout.block_size as usize {
            return Err(StoreError::Invalid(format!(
                "value of {len} bytes exceeds the block size"
            )));
        }
        let cx = *self.txn.cx();
        let old = cx.lookup(self.txn.root(), key)?;
        let old_bytes = old.map(|v| Node::value_bytes(&inner.region, &inner.layout, v));
        if len <= inner.facts.inline_max as usize && !(out_of_line && len > 0) {
            let mut tmp = [0u8; MAX_BLOCK_SIZE as usize / 4];
            fill(old_bytes, &mut tmp[..len]);
            self.txn.put(key, Val::Inline(&tmp[..len])).map(|_| ())
        } else {
            let (block, gen) = self.txn.alloc_data()?;
            fill(
                old_bytes,
                inner
                    .region
                    .bytes_mut(inner.layout.offset(block), len as u64),
            );
            inner.latency.on_write(1);
            self.txn
                .put(
                    key,
                    Val::Block {
                        block,
                        len: len as u32,
                        gen,
                    },
                )
                .map(|_| ())
        }
    }

    /// Remove; returns whether it existed.
    pub fn delete(&mut self, key: Key) -> Result<bool> {
        self.txn.delete(key)
    }

    /// Visit `[start, end)` ascending as this transaction sees it, until `f` returns false.
    pub fn scan(&self, start: Key, end: Key, mut f: impl FnMut(Key, &[u8]) -> bool) -> Result<()> {
        self.txn
            .cx()
            .scan(self.txn.root(), start, end, &mut f)
            .map(|_| ())
    }
}

impl Store {
    /// Run `f` as one atomic transaction: its reads see its own writes, other processes see all
    /// of its writes or none, and so does the volume after any crash. `f` may run twice: once more
    /// after a commit frees space, if the first run ran out of it.
    pub fn transact<R>(&self, f: impl FnMut(&mut Tx<'_, '_>) -> Result<R>) -> Result<R> {
        self.transact_locating(f, &[]).map(|(r, _)| r)
    }

    /// [`Store::transact`], then, still holding every lock after the publish, where each of
    /// `keys` lives now: its change stamp and, for an out-of-line value, its block. A caller
    /// that keeps a map of locations (a file's blocks) learns the places a transaction gave
    /// them, at the stamp the transaction moved them to, instead of relearning them one by one.
    pub fn transact_locating<R>(
        &self,
        mut f: impl FnMut(&mut Tx<'_, '_>) -> Result<R>,
        keys: &[Key],
    ) -> Result<(R, Places)> {
        let inner = &*self.inner;
        inner.check_writable()?;
        for attempt in 0..2 {
            let g = inner.lock()?;
            let mut tx = Tx {
                inner,
                txn: Txn::begin(inner.cx(), true),
                attempt: ATTEMPTS.fetch_add(1, Ordering::Relaxed),
            };
            match f(&mut tx) {
                Ok(r) => {
                    tx.txn.commit_publish();
                    let cx = inner.cx();
                    let root = inner.header.working_root();
                    let mut places = Vec::with_capacity(keys.len());
                    for &k in keys {
                        // (Published already: a failed look only leaves the place unknown.)
                        let at = match cx.lookup(root, k) {
                            Ok(Some(Val::Block { block, len, .. })) => {
                                Some(BlockRef { block, len })
                            }
                            _ => None,
                        };
                        places.push((inner.header.change_stamp(k), at));
                    }
                    return Ok((r, places));
                }
                Err(StoreError::NoSpace) if attempt == 0 && inner.header.pending_blocks() > 0 => {
                    tx.txn.abort();
                    inner.commit_locked()?;
                    drop(g);
                }
                Err(e) => {
                    tx.txn.abort();
                    return Err(e);
                }
            }
        }
        Err(StoreError::NoSpace)
    }
}
