//! Writing a file's bytes. A one-block write is two single-record updates, data first, then the
//! inode's size and times (in the same hold of the locks): a crash in between leaves the old
//! size, so the write is absent, never torn. The block is changed where it is when it was
//! written since the last commit (found from the open file's block map when it knows it), else
//! copied to a new block. At most a block across a block boundary: both pieces where they are
//! when both blocks were written since the last commit. Several blocks: rewritten under their
//! partitions' locks when all leaves were written since the last commit, else one transaction.
//! Every write that moves a block keeps the open file's map in force (see `note_put`). An
//! `O_APPEND` write inside one block is a one-block write at the size it read, made only if the
//! inode's change stamp has not moved by the time the write holds its locks (else it reads the
//! size again); across blocks, or after a few turns lost to other appenders, it reads the size
//! and writes in one transaction: either way appenders never interleave. A write takes its byte
//! range in the file's range lock (see `range_lock`) before anything the store serves under
//! more than the written blocks' partition locks, and before anything at all while the lock's
//! tree holds a range.

use std::cell::Cell;

use iris_store::{BlockPut, BlockRef, Key, Known, Piece, Store, ThenPatch, MAX_PIECES};

use crate::cache::FileCache;
use crate::errno::{Errno, FsResult};
use crate::inode::{self, now_ns, Inode};
use crate::keys::{key, Kind, MAX_OFFSET};

use super::{abort, get_inode_tx, put_inode_tx, store_err, Fs};

/// Conditional one-block appends tried before an append takes a transaction (each turn lost
/// to another appender reads the size again).
const APPEND_TURNS: u32 = 4;

/// The inode patch of a write ending at `end` at time `now`: size grown to `end`, both times set,
/// one more block if the write added its block. The patched record is left in `after`.
fn size_and_times(
    ino: u64,
    end: u64,
    now: i64,
    after: &Cell<Option<Inode>>,
) -> impl FnMut(&[u8], bool, &mut iris_store::Patch) + '_ {
    move |rec: &[u8], replaced: bool, p: &mut iris_store::Patch| {
        if let Ok(mut i) = Inode::decode(ino, rec) {
            i.size = i.size.max(end);
            i.mtime_ns = now;
            i.ctime_ns = now;
            p.set(inode::SIZE_OFF, i.size);
            p.set(inode::MTIME_OFF, now as u64);
            p.set(inode::CTIME_OFF, now as u64);
            if !replaced {
                i.blocks += 1;
                p.set(inode::BLOCKS_OFF, i.blocks);
            }
            after.set(Some(i));
        }
    }
}

/// Where `file`'s map says block `block` (key `k`) is: known at the data's change stamp now (a
/// location a write may trust, checked again under the store's lock), and where it was last seen
/// (that location, or a hint from an older epoch).
fn block_location(
    store: &Store,
    file: &FileCache,
    block: u64,
    k: Key,
) -> (Option<Known>, Option<BlockRef>) {
    let stamp = store.change_stamp(k);
    let known = file
        .epoch_now(stamp)
        .and_then(|e| file.get(block, e))
        .map(|at| Known { stamp, at });
    (known, known.map(|k| k.at).or_else(|| file.last_seen(block)))
}

/// After a one-block write of file block `block`, which the map knew as `known` before it:
/// where the block is now, into `file`'s map. A write that moved the data's change stamp (a new
/// block or length) carries the map forward to the new stamp when it was current just before
/// (every other entry stays good: see [`FileCache::carry`]); one that did not puts the block's
/// entry in the map at the stamp in force (unless it holds it already).
fn note_put(file: &FileCache, block: u64, known: Option<Known>, put: &BlockPut) {
    let Some((stamp, at)) = put.located else {
        return;
    };
    if put.moved {
        file.carry(block, stamp, at);
    } else if known != Some(Known { stamp, at }) {
        if let Some(e) = file.epoch(stamp) {
            file.put(block, e, at);
        }
    }
}

/// Blocks of a write's transaction whose new places its open file's map learns (see
/// `Store::transact_locating`): 64 KiB of 4 KiB blocks.
const LOCATED_BLOCKS: u64 = 16;

/// After a transaction that wrote file blocks `first..` (moving the data's change stamp once):
/// the map carried to the stamp by the first block's new place (see [`FileCache::carry`]), and
/// the others' places put at that stamp.
fn carry_places(file: &FileCache, first: u64, places: &[(u64, Option<BlockRef>)]) {
    let Some((i, stamp, at)) = places
        .iter()
        .enumerate()
        .find_map(|(i, (stamp, at))| at.map(|at| (i, *stamp, at)))
    else {
        return;
    };
    // Every block the transaction wrote may have moved, and the map keeps its words as it
    // moves to the new stamp: each is forgotten first, and put back below where its new place
    // is known (not for a value now inline in its leaf, nor when another fill holds the map).
    for j in 0..places.len() as u64 {
        file.forget(first + j);
    }
    file.carry(first + i as u64, stamp, at);
    if let Some(e) = file.epoch_now(stamp) {
        for (j, (s, at)) in places.iter().enumerate().skip(i + 1) {
            if let (true, Some(at)) = (*s == stamp, at) {
                file.put(first + j as u64, e, *at);
            }
        }
    }
}

impl Fs {
    /// The inode a one-block write to `ino` ending at `end` at time `now` starts from, and the
    /// change stamp under which its patch may be skipped: times move at the clock's coarse tick,
    /// as the kernel's do, so within one tick a write that does not extend the file leaves the
    /// inode as it is (no second lookup), provided nothing changed it since it was read (the
    /// store checks). `None` when the bytes live in a shadow file and `honor_shadow` is set.
    fn inode_for_write(
        &self,
        ino: u64,
        end: u64,
        now: i64,
        honor_shadow: bool,
    ) -> FsResult<Option<(Inode, Option<u64>)>> {
        let (inode, stamp) = self.inode_now(ino)?;
        if inode.is_dir() {
            // (A directory's data is its entries: bytes written there would garble them.)
            return Err(Errno::EISDIR);
        }
        if honor_shadow && inode.is_shadowed() {
            return Ok(None);
        }
        let unchanged = inode.size >= end && inode.mtime_ns == now && inode.ctime_ns == now;
        Ok(Some((inode, unchanged.then_some(stamp))))
    }

    /// The inode record of `ino` as it is now and its change stamp: from the cache first,
    /// outside a read section (entering one costs two full barriers), where a hit at the stamp
    /// read now is what a lookup would return.
    fn inode_now(&self, ino: u64) -> FsResult<(Inode, u64)> {
        let now_stamp = self.store.change_stamp(key(ino, Kind::Inode, 0));
        if let Some(i) = self.caches.inode(ino, now_stamp) {
            return Ok((i, now_stamp));
        }
        let (stamp, inode) = self
            .store
            .read(|v| {
                let stamp = v.change_stamp(key(ino, Kind::Inode, 0));
                Ok((stamp, self.inode_at(v, ino, stamp)))
            })
            .map_err(store_err)?;
        Ok((inode?, stamp))
    }

    /// After a write: the inode record as it is now, into the cache, when the store says the
    /// write knows it exactly (`put.patched_stamp`, the inode's stamp right after the write).
    /// The record is what the patch last computed (`after`), or, when the patch was skipped
    /// without looking, `before`.
    fn refresh_inode_after(&self, before: &Inode, put: &BlockPut, after: Option<Inode>) {
        if let Some(stamp) = put.patched_stamp {
            self.caches
                .put_inode(after.as_ref().unwrap_or(before), stamp);
        }
    }

    /// A write over several blocks of the file that were all written since the last commit:
    /// holding only the locks of their partitions (see `Store::overwrite_blocks`), with the
    /// size and times patched in the same hold. `None` when it does not apply (blocks new,
    /// committed, shorter than the write needs, or too many): the caller takes the general way.
    fn overwrite_blocks(
        &self,
        ino: u64,
        file: Option<&FileCache>,
        off: u64,
        data: &[u8],
        now: i64,
        honor_shadow: bool,
    ) -> FsResult<Option<Option<usize>>> {
        let bs = self.block_size;
        let end = off + data.len() as u64;
        let (first, last) = (off / bs, (end - 1) / bs);
        if (last - first + 1) as usize > self.store.overwrite_max_blocks() {
            return Ok(None);
        }
        let Some((inode, skip)) = self.inode_for_write(ino, end, now, honor_shadow)? else {
            return Ok(Some(None));
        };
        let keys: Vec<Key> = (first..=last).map(|b| key(ino, Kind::Data, b)).collect();
        // The part of block `first + i` this write covers: (offset in the block, bytes of data).
        let span = |i: usize| {
            let bstart = (first + i as u64) * bs;
            let from = off.max(bstart);
            let to = end.min(bstart + bs);
            (
                (from - bstart) as usize,
                &data[(from - off) as usize..(to - off) as usize],
            )
        };
        let after = Cell::new(None);
        let mut placed = Vec::new();
        let put = self
            .store
            .overwrite_blocks(
                &keys,
                |i, len| {
                    let (at, src) = span(i);
                    at + src.len() <= len as usize
                },
                |i, old, out| {
                    let (at, src) = span(i);
                    if at == 0 && src.len() == out.len() {
                        iris_store::copy_streaming(out, src);
                    } else {
                        iris_store::copy_bytes(out, old);
                        iris_store::copy_bytes(&mut out[at..at + src.len()], src);
                    }
                },
                |i, at| placed.push((first + i as u64, at)),
                Some(ThenPatch {
                    key: key(ino, Kind::Inode, 0),
                    unless_unchanged_since: skip,
                    patch: size_and_times(ino, end, now, &after),
                    // (An overwrite holds only its partitions' locks: it cannot commit.)
                    sync_expected: false,
                    only_if_unchanged_since: None,
                }),
            )
            .map_err(store_err)?;
        let Some(put) = put else {
            return Ok(None);
        };
        if !put.found {
            return Err(Errno::ENOENT);
        }
        if let (Some(f), Some((stamp, _))) = (file, put.located) {
            // The first block carries the map to the write's stamp (see `note_put`); at that
            // stamp the others are where they went too. They are forgotten first: the move
            // keeps the map's words, and a put below may find the map busy and store nothing.
            for &(block, _) in placed.iter().skip(1) {
                f.forget(block);
            }
            note_put(f, first, None, &put);
            if let Some(e) = f.epoch_now(stamp) {
                for &(block, at) in placed.iter().skip(1) {
                    f.put(block, e, at);
                }
            }
        }
        self.refresh_inode_after(&inode, &put, after.get());
        Ok(Some(Some(data.len())))
    }

    /// A write across block boundaries (at most [`MAX_PIECES`] blocks), through the open file's
    /// map, when every block looks written since the last commit: each piece where it is, in
    /// one hold of the locks, with the size and times (see `Store::write_pieces_in_place`).
    /// `None` when it does not apply: the caller writes another way. [`Fs::overwrite_blocks`]
    /// would copy the blocks into new ones: fio's unaligned 4 KiB random writes spent 39 % of
    /// their time in that copy, and an aligned 8 KiB write took 2.3 us against 1.3.
    fn write_across_in_place(
        &self,
        ino: u64,
        file: &FileCache,
        off: u64,
        data: &[u8],
        now: i64,
        honor_shadow: bool,
    ) -> FsResult<Option<Option<usize>>> {
        let bs = self.block_size;
        let end = off + data.len() as u64;
        let first = off / bs;
        let count = ((end - 1) / bs - first + 1) as usize;
        if !(2..=MAX_PIECES).contains(&count) {
            return Ok(None);
        }
        let mut pieces = [Piece {
            key: key(ino, Kind::Data, first),
            offset: 0,
            data: &[],
            known: None,
        }; MAX_PIECES];
        for (i, piece) in pieces[..count].iter_mut().enumerate() {
            let block = first + i as u64;
            let k = key(ino, Kind::Data, block);
            let (known, seen) = block_location(&self.store, file, block, k);
            if !seen.is_some_and(|at| self.store.looks_fresh(at)) {
                return Ok(None);
            }
            let from = off.max(block * bs);
            let to = end.min((block + 1) * bs);
            *piece = Piece {
                key: k,
                offset: (from - block * bs) as usize,
                data: &data[(from - off) as usize..(to - off) as usize],
                known,
            };
        }
        let pieces = &pieces[..count];
        let Some((inode, skip)) = self.inode_for_write(ino, end, now, honor_shadow)? else {
            return Ok(Some(None));
        };
        let after = Cell::new(None);
        let mut placed = [None; MAX_PIECES];
        let put = self.store.write_pieces_in_place(
            pieces,
            |i, at| placed[i] = Some(at),
            Some(ThenPatch {
                key: key(ino, Kind::Inode, 0),
                unless_unchanged_since: skip,
                patch: size_and_times(ino, end, now, &after),
                sync_expected: false,
                only_if_unchanged_since: None,
            }),
        )?;
        let Some(put) = put else {
            return Ok(None);
        };
        if !put.found {
            return Err(Errno::ENOENT);
        }
        let last = count - 1;
        note_put(file, first + last as u64, pieces[last].known, &put);
        // The other blocks the map did not know, where the write found them.
        if let Some((stamp, _)) = put.located {
            if let Some(e) = file.epoch_now(stamp) {
                for (i, p) in pieces[..last].iter().enumerate() {
                    if let (None, Some(at)) = (p.known, placed[i]) {
                        file.put(first + i as u64, e, at);
                    }
                }
            }
        }
        self.refresh_inode_after(&inode, &put, after.get());
        Ok(Some(Some(data.len())))
    }

    /// [`Fs::write`], or `None` (nothing written) when the file's bytes live in a shadow file.
    pub fn write_unless_shadowed(
        &self,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> FsResult<Option<usize>> {
        self.write_impl(ino, off, data, true, None, None)
    }

    /// [`Fs::write_unless_shadowed`] through the block map of an open file: a one-block write
    /// over a block the map knows, written since the last commit, goes where the block is
    /// without a look at the tree (see `Store::write_in_place`).
    pub fn write_file(&self, file: &FileCache, off: u64, data: &[u8]) -> FsResult<Option<usize>> {
        self.write_impl(file.ino(), off, data, true, Some(file), None)
    }

    /// Write `data` at `off`; returns bytes written. Extends the file as needed.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> FsResult<usize> {
        Ok(self
            .write_impl(ino, off, data, false, None, None)?
            .unwrap_or(0))
    }

    /// The write; with `honor_shadow`, `None` (nothing written) when the bytes live in a shadow
    /// file. The shadow flag is read in the same read section the write needs anyway. With
    /// `cond` (a one-block write only), nothing is written and the result is `EAGAIN` unless
    /// the inode's change stamp still reads `cond` when the write holds its locks (see
    /// [`Fs::append_file`]).
    fn write_impl(
        &self,
        ino: u64,
        off: u64,
        data: &[u8],
        honor_shadow: bool,
        file: Option<&FileCache>,
        cond: Option<u64>,
    ) -> FsResult<Option<usize>> {
        if honor_shadow && data.is_empty() {
            return Ok(if self.getattr(ino)?.is_shadowed() {
                None
            } else {
                Some(0)
            });
        }
        if data.is_empty() {
            return Ok(Some(0));
        }
        let bs = self.block_size;
        // (Block sizes are powers of two: shifts, not divisions, on every write.)
        let shift = bs.trailing_zeros();
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end >> shift > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
        // The byte range in the file's range lock (see `range_lock`): without the open file's
        // map, through the map of the inode's open file here if there is one. Taken at once
        // when the tree holds anything; else only before a way the store serves under more
        // than the written blocks' partition locks (which order writes of the same blocks by
        // themselves, and which two writers of disjoint ranges rarely share).
        let open_elsewhere = if file.is_none() {
            self.open_file_cache(ino)
        } else {
            None
        };
        // (A conditional write's caller holds the file's whole range: see `append_file`.)
        let ranges = file
            .or(open_elsewhere.as_deref())
            .filter(|_| cond.is_none())
            .map(FileCache::ranges);
        let mut range = None;
        let mut hold_range = || {
            if range.is_none() {
                range = ranges.map(|r| r.lock(off, end));
            }
        };
        if ranges.is_some_and(|r| !r.is_idle()) {
            hold_range();
        }
        let first = off >> shift;
        let last = (end - 1) >> shift;
        if cond.is_some() && first != last {
            return Err(Errno::EINVAL);
        }
        // Where the block is (the file's map word, else the leaf) is needed first: let the
        // miss overlap the clock and the inode. Only one of them: with an open file's map, the
        // leaf is looked at only when the map does not know the block, and a prefetch of it
        // cost a random load of this thread's hint table on every write (perf of fio 512 B
        // random writes, one job: the write's own function 12-14 % of the samples -> 7.5 %).
        match file {
            // A small write inside one block: where the map last saw the block, its lines start
            // on their way for writing at once, beside the clock, the inode and the locks (the
            // write stores into them last, and the lock's release waits for every line the
            // stores missed). fio 512 B random writes, one job, builds alternated: 1835-1878k
            // -> 2073-2205k IOPS, and an hour later (the machine faster) 2237-2346k ->
            // 2370-2453k; with direct=1 2058-2265k -> 2378-2384k; two jobs within their swing.
            // Whole blocks go by streaming stores, which load no line.
            Some(f) if first == last && data.len() < bs as usize => match f.last_seen(first) {
                Some(at) => {
                    self.store
                        .prefetch_bytes_for_write(at, (off & (bs - 1)) as usize, data.len())
                }
                None => f.prefetch(first),
            },
            Some(f) => f.prefetch(first),
            None => self.store.prefetch_location(key(ino, Kind::Data, first)),
        }
        let now = now_ns();
        let sync_expected = self.sync_hints.take(ino);
        let data_key = key(ino, Kind::Data, first);
        if first == last {
            // Where the file's map says the block is: `known` at the data's stamp now, else
            // where it was last seen (a hint).
            let (known, seen) = match file {
                Some(f) => block_location(&self.store, f, first, data_key),
                None => (None, None),
            };
            // Bytes only (the map knows the block; the cached inode says the write leaves it as
            // it is, which the store checks under its lock): the store's leanest way, no
            // transaction, and of the inode only the words that say so.
            if let (Some(k), false, None) = (known, sync_expected, cond) {
                let inode_key = key(ino, Kind::Inode, 0);
                let stamp = self.store.change_stamp(inode_key);
                if self.caches.inode_unchanged_by_write(ino, stamp, end, now)
                    && self
                        .store
                        .overwrite_known(
                            data_key,
                            (off & (bs - 1)) as usize,
                            data,
                            k,
                            (inode_key, stamp),
                        )
                        .map_err(store_err)?
                {
                    return Ok(Some(data.len()));
                }
            }
            let Some((inode, skip)) = self.inode_for_write(ino, end, now, honor_shadow)? else {
                return Ok(None);
            };
            // After any one-block write: where the block now is, into the map.
            let remember = |put: &BlockPut| {
                if let Some(f) = file {
                    note_put(f, first, known, put);
                }
            };
            // One block: data, then size and times (see the module doc for why this order).
            let in_block = (off & (bs - 1)) as usize;
            let end_in_block = in_block + data.len();
            if in_block == 0 && data.len() == bs as usize {
                // A whole block: no old bytes to keep. Copied to a new block, the copy runs
                // outside the lock; either way the inode's size and times follow in the same
                // lock hold as the write.
                let after = Cell::new(None);
                // A block written since the last commit is overwritten where it is (where the
                // map says, or, when only a hint says it looks fresh, where the tree says):
                // no new block to fill and publish. A committed one is copied.
                if !sync_expected && seen.is_some_and(|at| self.store.looks_fresh(at)) {
                    let then = ThenPatch {
                        key: key(ino, Kind::Inode, 0),
                        unless_unchanged_since: skip,
                        patch: size_and_times(ino, end, now, &after),
                        sync_expected,
                        only_if_unchanged_since: cond,
                    };
                    if let Some(put) =
                        self.store
                            .write_in_place(data_key, 0, data, Some(then), known)?
                    {
                        remember(&put);
                        self.refresh_inode_after(&inode, &put, after.get());
                        return Ok(Some(data.len()));
                    }
                }
                hold_range();
                let put = self
                    .store
                    .put_block_then_patch(
                        key(ino, Kind::Data, first),
                        data.len(),
                        |out| iris_store::copy_streaming(out, data),
                        Some(ThenPatch {
                            key: key(ino, Kind::Inode, 0),
                            unless_unchanged_since: skip,
                            patch: size_and_times(ino, end, now, &after),
                            sync_expected,
                            only_if_unchanged_since: cond,
                        }),
                    )
                    .map_err(store_err)?;
                if !put.found {
                    return Err(Errno::ENOENT);
                }
                remember(&put);
                self.refresh_inode_after(&inode, &put, after.get());
                return Ok(Some(data.len()));
            } else {
                // A small write into a block written since the last commit lands where it is;
                // one at the end of the file, into the block's unused tail.
                let after = Cell::new(None);
                let then = || ThenPatch {
                    key: key(ino, Kind::Inode, 0),
                    unless_unchanged_since: skip,
                    patch: size_and_times(ino, end, now, &after),
                    sync_expected,
                    only_if_unchanged_since: cond,
                };
                let k = data_key;
                if first > 0 && off >= inode.size && inode.size <= first * bs {
                    // The first bytes of a new last block of a file that already fills one: out
                    // of line from the start, so that the appends that follow go into its tail
                    // in place. Only if the block is still absent (checked under the lock).
                    let fill = |out: &mut [u8]| {
                        out[..in_block].fill(0);
                        iris_store::copy_bytes(&mut out[in_block..], data);
                    };
                    hold_range();
                    let grown = self
                        .store
                        .insert_growing_then_patch(k, end_in_block, fill, then())
                        .map_err(store_err)?;
                    if let Some(put) = grown {
                        if !put.found {
                            return Err(Errno::ENOENT);
                        }
                        remember(&put);
                        self.refresh_inode_after(&inode, &put, after.get());
                        return Ok(Some(data.len()));
                    }
                }
                // (Inside the file but past the end of its block's value, as in a file extended
                // by truncate or fallocate and written in order, `write_in_place` appends too.)
                // A sync follows (see `sync_hint`): into the intent log. A block a record of
                // the log names already (the file's earlier synced writes since the last
                // commit) takes the bytes where it is, behind a data record of them; else the
                // block is likely the last commit's, and the write copies it below.
                let done = if sync_expected {
                    self.store
                        .write_in_place_logged(k, in_block, data, then())?
                } else if off >= inode.size && inode.size > first * bs {
                    self.store
                        .append_in_place(k, in_block, data, Some(then()))?
                } else {
                    self.store
                        .write_in_place(k, in_block, data, Some(then()), known)?
                };
                if let Some(put) = done {
                    remember(&put);
                    self.refresh_inode_after(&inode, &put, after.get());
                    return Ok(Some(data.len()));
                }
                // Copied (a committed block, or a new one): the size and times in the same
                // hold of the locks, skipped as for the writes above. The new value reaches as
                // far into the block as the file does (zeros past the old bytes): a hole, or a
                // block shorter than the file (extended by truncate or fallocate), written
                // once is whole, and the writes after it land in place instead of each
                // lengthening it (a copy of the value's slot and a move of the file's stamp,
                // which sends every other block's location in the map to a new epoch).
                let in_file = inode.size.max(end).saturating_sub(first * bs).min(bs) as usize;
                hold_range();
                let put = self
                    .store
                    .put_sized_then_patch(
                        k,
                        |old_len| old_len.unwrap_or(0).max(end_in_block).max(in_file),
                        |old, out| {
                            let have = old.map_or(0, |o| o.len().min(out.len()));
                            match old {
                                // The write covers all the old bytes: nothing to keep.
                                Some(_) if in_block == 0 && end_in_block >= have => {}
                                Some(o) => iris_store::copy_bytes(&mut out[..have], &o[..have]),
                                None => {}
                            }
                            if in_block > have {
                                out[have..in_block].fill(0);
                            }
                            iris_store::copy_bytes(&mut out[in_block..end_in_block], data);
                            out[have.max(end_in_block)..].fill(0);
                        },
                        Some(then()),
                    )
                    .map_err(store_err)?;
                if !put.found {
                    return Err(Errno::ENOENT);
                }
                remember(&put);
                // The inode's new record into the cache: without it, the inode's next look (the
                // sync's check for a shadow, the next write) walked the tree.
                self.refresh_inode_after(&inode, &put, after.get());
                return Ok(Some(data.len()));
            }
        }
        if let Some(f) = file.filter(|_| last > first && last - first < MAX_PIECES as u64) {
            if !sync_expected {
                if let Some(done) =
                    self.write_across_in_place(ino, f, off, data, now, honor_shadow)?
                {
                    return Ok(done);
                }
            }
        }
        if let Some(done) = self.overwrite_blocks(ino, file, off, data, now, honor_shadow)? {
            return Ok(done);
        }
        hold_range();
        // The blocks this write covers whole are copied before the transaction, outside every
        // lock: it then holds them only for its walk down the tree.
        let first_whole = off.div_ceil(bs);
        let whole = (end / bs).saturating_sub(first_whole);
        let prepared = if whole >= 2 {
            self.store
                .prepare_blocks(whole as usize, |j, out| {
                    let from = ((first_whole + j as u64) * bs - off) as usize;
                    iris_store::copy_streaming(out, &data[from..from + out.len()]);
                })
                .map_err(store_err)?
        } else {
            None
        };
        // Where the blocks went, for the open file's map (each costs a look down the tree under
        // the locks: for writes of a few blocks only; a longer one leaves the map to relearn).
        let keys: Vec<Key> = match file {
            Some(_) if last - first < LOCATED_BLOCKS => {
                (first..=last).map(|b| key(ino, Kind::Data, b)).collect()
            }
            _ => Vec::new(),
        };
        let (written, places) = self.tx_locating(
            |tx| {
                let mut i = get_inode_tx(tx, ino)?;
                if honor_shadow && i.is_shadowed() {
                    return Ok(false);
                }
                let mut added = 0u64;
                for block in first..=last {
                    let bstart = block * bs;
                    let from = off.max(bstart);
                    let to = end.min(bstart + bs);
                    let in_block = (from - bstart) as usize;
                    let src = &data[(from - off) as usize..(to - off) as usize];
                    let k = key(ino, Kind::Data, block);
                    if in_block == 0 && src.len() == bs as usize {
                        let j = (block - first_whole) as usize;
                        let put = match &prepared {
                            Some(p) if j < p.len() => tx.put_prepared(k, p, j)?,
                            _ => None,
                        };
                        let replaced = match put {
                            Some(replaced) => replaced,
                            // Not prepared (or freed by an aborted attempt): copied here.
                            None => tx.put(k, src)?,
                        };
                        if !replaced {
                            added += 1;
                        }
                    } else {
                        let old_len = tx.get_with(k, |v| v.len())?;
                        if old_len.is_none() {
                            added += 1;
                        }
                        // As far as the file reaches (see the one-block case above).
                        let in_file = (i.size.max(end) - bstart).min(bs) as usize;
                        let new_len = old_len.unwrap_or(0).max(in_block + src.len()).max(in_file);
                        let fill = |old: Option<&[u8]>, out: &mut [u8]| {
                            let have = old.map_or(0, |o| o.len().min(new_len));
                            if let Some(o) = old {
                                iris_store::copy_bytes(&mut out[..have], &o[..have]);
                            }
                            out[have..].fill(0);
                            iris_store::copy_bytes(&mut out[in_block..in_block + src.len()], src);
                        };
                        if old_len.is_none() && block > 0 && block == last && bstart >= i.size {
                            // A new last block: out of line, so the appends that follow go into
                            // its tail in place (see the one-block case above).
                            tx.put_growing_with(k, new_len, fill)?;
                        } else {
                            tx.put_with(k, new_len, fill)?;
                        }
                    }
                }
                i.size = i.size.max(end);
                i.mtime_ns = now;
                i.ctime_ns = now;
                i.blocks += added;
                put_inode_tx(tx, &i)?;
                Ok(true)
            },
            &keys,
        )?;
        if let (Some(f), true) = (file, written) {
            carry_places(f, first, &places);
        }
        Ok(written.then_some(data.len()))
    }

    /// [`Fs::append`] through the open file's block map, without a transaction when it can: an
    /// append inside one block is a one-block write at the size the inode says now, made on the
    /// condition that the inode's change stamp has not moved when the write holds its locks
    /// (every change of the size moves it, in any process: then nothing is written, and the
    /// size is read again). After a few such turns, or for an append across blocks, the
    /// transaction of [`Fs::append`]. Returns the offset written at; `None` (nothing written)
    /// when the file's bytes live in a shadow file.
    pub fn append_file(&self, file: &FileCache, data: &[u8]) -> FsResult<Option<u64>> {
        let ino = file.ino();
        let bs = self.block_size;
        {
            // Appenders of this process take turns on the whole file (where a write lands is
            // known only once the size is read).
            let _range = file.ranges().lock(0, u64::MAX);
            for _ in 0..APPEND_TURNS {
                let (inode, stamp) = self.inode_now(ino)?;
                if inode.is_dir() {
                    return Err(Errno::EISDIR);
                }
                if inode.is_shadowed() {
                    return Ok(None);
                }
                let off = inode.size;
                if data.is_empty() {
                    return Ok(Some(off));
                }
                let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
                if off / bs != (end - 1) / bs {
                    break;
                }
                match self.write_impl(ino, off, data, true, Some(file), Some(stamp)) {
                    Ok(Some(_)) => return Ok(Some(off)),
                    Ok(None) => return Ok(None),
                    Err(Errno(libc::EAGAIN)) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        if self.getattr(ino)?.is_shadowed() {
            return Ok(None);
        }
        self.append(ino, data).map(Some)
    }

    /// Append `data` atomically at the end of file: returns the offset written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> FsResult<u64> {
        // The size read and the write must not interleave with another appender: one transaction.
        let bs = self.block_size;
        // A write the sync hints count, as every other (else a file appended and synced record
        // by record loses its hint at each record that crosses a block, and the record after it
        // goes unlogged: a second commit).
        self.sync_hints.take(ino);
        // Where it lands is known only inside: the whole file's range (see `range_lock`).
        let open = self.open_file_cache(ino);
        let _range = open.as_ref().map(|f| f.ranges().lock(0, u64::MAX));
        let now = now_ns();
        self.tx(|tx| {
            let mut i = get_inode_tx(tx, ino)?;
            if i.is_dir() {
                return Err(abort(Errno::EISDIR));
            }
            let off = i.size;
            let end = off + data.len() as u64;
            if data.is_empty() {
                return Ok(off);
            }
            let last = (end - 1) / bs;
            for block in off / bs..=last {
                let bstart = block * bs;
                let from = off.max(bstart);
                let to = end.min(bstart + bs);
                let in_block = (from - bstart) as usize;
                let src = &data[(from - off) as usize..(to - off) as usize];
                let k = key(ino, Kind::Data, block);
                let old_len = tx.get_with(k, |v| v.len())?;
                if old_len.is_none() {
                    i.blocks += 1;
                }
                let new_len = old_len.unwrap_or(0).max(in_block + src.len());
                let fill = |old: Option<&[u8]>, out: &mut [u8]| {
                    let have = old.map_or(0, |o| o.len().min(new_len));
                    if let Some(o) = old {
                        iris_store::copy_bytes(&mut out[..have], &o[..have]);
                    }
                    out[have..].fill(0);
                    iris_store::copy_bytes(&mut out[in_block..in_block + src.len()], src);
                };
                if old_len.is_none() && block > 0 && block == last && bstart >= i.size {
                    // A new last block: out of line, so the appends that follow go into its
                    // tail in place (see `write_impl`). Inline, each of them rewrote the leaf
                    // under every lock until the block outgrew the inline limit.
                    tx.put_growing_with(k, new_len, fill)?;
                } else {
                    tx.put_with(k, new_len, fill)?;
                }
            }
            i.size = end;
            i.mtime_ns = now;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)?;
            Ok(off)
        })
    }
}

#[cfg(test)]
mod tests {

    use crate::keys::{key, Kind};
    use crate::Fs;

    #[test]
    fn a_copy_of_a_committed_block_leaves_the_rest_of_the_files_map_in_force() {
        let (fs, ino, map) = committed_file(4);
        // The map learns every block again through reads.
        let mut buf = vec![0u8; 4096];
        for b in 0..4u64 {
            assert_eq!(
                fs.read_file(&map, b * 4096, &mut buf).expect("read"),
                Some(4096)
            );
        }
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let e = map.epoch_now(stamp()).expect("in force after the reads");
        assert!(map.get(1, e).is_some());
        // Block 0 is the last commit's: the write copies it, which moves the data's stamp.
        let before = stamp();
        assert_eq!(
            fs.write_file(&map, 0, &[9u8; 4096]).expect("copy"),
            Some(4096)
        );
        assert_ne!(stamp(), before, "the copy moved the stamp");
        let e = map.epoch_now(stamp()).expect("the map is still in force");
        assert!(map.get(1, e).is_some(), "the other blocks stay known");
        assert!(
            map.get(0, e).is_some(),
            "the copied block is known where it went"
        );
        for (b, byte) in [(0u64, 9u8), (1, 2), (2, 3), (3, 4)] {
            assert_eq!(
                fs.read_file(&map, b * 4096, &mut buf).expect("read"),
                Some(4096)
            );
            assert!(buf.iter().all(|&x| x == byte), "block {b}");
        }
        // A partial write into a committed block copies it too, and carries the map the same.
        fs.sync().expect("commit");
        assert_eq!(
            fs.write_file(&map, 4096 + 100, &[7u8; 50]).expect("copy"),
            Some(50)
        );
        let e = map.epoch_now(stamp()).expect("still in force");
        assert!(map.get(1, e).is_some() && map.get(2, e).is_some());
        assert_eq!(
            fs.read_file(&map, 4096, &mut buf).expect("read"),
            Some(4096)
        );
        assert!(buf[..100].iter().all(|&x| x == 2) && buf[100..150].iter().all(|&x| x == 7));
        assert!(buf[150..].iter().all(|&x| x == 2));
    }

    use super::super::test_fs_with_file as fs_with_file;

    #[test]
    fn small_writes_that_grow_blocks_keep_the_rest_of_the_files_map() {
        // A file filled by small writes at random (a sparse file, a database's pages) gives
        // its blocks new places and lengths; each such write moves the data's stamp once, and
        // the map must follow it, not start again (random 512 B writes into a new fio file
        // walked the tree for almost every write).
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        // The first bytes of blocks 1 to 4: a new block each time (out of line: block 0's
        // first 100 bytes would be kept in the tree's leaf).
        for b in 1..5u64 {
            let w = fs.write_file(&map, b * 4096, &[b as u8 + 1; 100]);
            assert_eq!(w.expect("write"), Some(100));
        }
        let e = map.epoch_now(stamp()).expect("the map follows new blocks");
        for b in 1..5u64 {
            assert!(map.get(b, e).is_some(), "block {b} known after the fills");
        }
        // Past a block's bytes: its value grows where it is (a new length).
        let before = stamp();
        let w = fs.write_file(&map, 2 * 4096 + 300, &[9u8; 100]);
        assert_eq!(w.expect("grow"), Some(100));
        assert_ne!(stamp(), before, "the growth moved the stamp");
        let e = map.epoch_now(stamp()).expect("the map follows a growth");
        for b in [1u64, 3, 4] {
            assert!(map.get(b, e).is_some(), "block {b} still known");
        }
        let grown = map.get(2, e).expect("the grown block known");
        assert_eq!(grown.len(), 400);
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            fs.read_file(&map, 2 * 4096, &mut buf).expect("read"),
            Some(4096)
        );
        assert!(buf[..100].iter().all(|&x| x == 3));
        assert!(buf[100..300].iter().all(|&x| x == 0));
        assert!(buf[300..400].iter().all(|&x| x == 9));
        assert!(buf[400..].iter().all(|&x| x == 0));
    }

    /// A small write into a hole of a file (extended by truncate, as fio's `fallocate` leaves
    /// its files here) fills the block as far as the file reaches, so the writes after it land
    /// where it is instead of each lengthening it and moving the data's stamp.
    #[test]
    fn a_small_write_into_a_hole_fills_the_block_as_far_as_the_file_reaches() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        // Blocks full of other bytes, given back: the new blocks may be these.
        for b in 0..64u64 {
            let w = fs.write_file(&map, b * 4096, &[0xee; 4096]);
            assert_eq!(w.expect("fill"), Some(4096));
        }
        fs.sync().expect("commit");
        fs.truncate(ino, 0).expect("empty");
        fs.sync().expect("commit the frees");
        let size = 7 * 4096 + 3000;
        fs.truncate(ino, size).expect("extend");
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let w = fs.write_file(&map, 3 * 4096 + 1024, &[5u8; 512]);
        assert_eq!(w.expect("into a hole"), Some(512));
        let e = map
            .epoch_now(stamp())
            .expect("the map follows the new block");
        assert_eq!(map.get(3, e).expect("known").len(), 4096, "a whole block");
        // Before and after the first write's bytes: in place, the stamp left alone.
        let before = stamp();
        for off in [3 * 4096 + 3072, 3 * 4096] {
            let w = fs.write_file(&map, off, &[6u8; 512]);
            assert_eq!(w.expect("in the filled block"), Some(512));
        }
        assert_eq!(stamp(), before, "no growth: written where the block is");
        let mut buf = vec![1u8; 4096];
        assert_eq!(
            fs.read_file(&map, 3 * 4096, &mut buf).expect("read"),
            Some(4096)
        );
        assert!(buf[..512].iter().all(|&x| x == 6));
        assert!(buf[512..1024].iter().all(|&x| x == 0));
        assert!(buf[1024..1536].iter().all(|&x| x == 5));
        assert!(buf[1536..3072].iter().all(|&x| x == 0));
        assert!(buf[3072..3584].iter().all(|&x| x == 6));
        assert!(buf[3584..].iter().all(|&x| x == 0));
        // The last block reaches only to the file's end, which stays where it was (3,000
        // bytes: out of line, as a value past the inline limit is).
        let w = fs.write_file(&map, 7 * 4096 + 100, &[7u8; 10]);
        assert_eq!(w.expect("into the last block"), Some(10));
        let e = map.epoch_now(stamp()).expect("in force");
        assert_eq!(map.get(7, e).expect("known").len(), 3000);
        assert_eq!(fs.getattr(ino).expect("stat").size, size);
        assert_eq!(
            fs.read_file(&map, 7 * 4096, &mut buf)
                .expect("read the tail"),
            Some(3000)
        );
        assert!(buf[..100].iter().all(|&x| x == 0));
        assert!(buf[100..110].iter().all(|&x| x == 7));
        assert!(buf[110..3000].iter().all(|&x| x == 0));
    }

    /// The same for a write across two blocks (a transaction): each piece's block reaches as
    /// far as the file does.
    #[test]
    fn a_small_write_across_two_holes_fills_both_blocks() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        fs.truncate(ino, 4 * 4096).expect("extend");
        let w = fs.write_file(&map, 4096 + 3000, &[4u8; 2000]);
        assert_eq!(w.expect("across blocks 1 and 2"), Some(2000));
        for b in [1u64, 2] {
            let len = fs
                .store()
                .get_with(key(ino, Kind::Data, b), |v| v.len())
                .expect("get");
            assert_eq!(len, Some(4096), "block {b}");
        }
        let mut buf = vec![1u8; 3 * 4096];
        assert_eq!(
            fs.read_file(&map, 4096, &mut buf).expect("read"),
            Some(3 * 4096)
        );
        assert!(buf[..3000].iter().all(|&x| x == 0));
        assert!(buf[3000..5000].iter().all(|&x| x == 4));
        assert!(buf[5000..].iter().all(|&x| x == 0));
    }

    /// A file appended and synced record by record, as Redis's log with `appendfsync always`:
    /// a record that crosses a block boundary commits at its sync (a transaction), and the
    /// record after it goes into the intent log like the others, committing nothing.
    #[test]
    fn the_record_after_an_append_across_a_block_boundary_is_logged_at_its_sync() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        let commits = || fs.store().stats().expect("stats").commits;
        let record = [7u8; 1000];
        let mut committed = Vec::new();
        for _ in 0..10 {
            let before = commits();
            let off = fs.append_file(&map, &record).expect("append");
            assert!(off.is_some(), "not shadowed");
            fs.sync_inode(ino).expect("sync");
            committed.push(commits() - before);
        }
        // Records 4 (bytes 4000..5000) and 8 (8000..9000) cross a block boundary (at most one
        // commit each); the first two sync before the file's pattern is known.
        for (i, &c) in committed.iter().enumerate().skip(2) {
            let most = u64::from(i == 4 || i == 8);
            assert!(c <= most, "commits at record {i}'s sync: {committed:?}");
        }
        let mut buf = vec![0u8; 10_000];
        assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 10_000);
        assert!(buf.iter().all(|&b| b == 7));
    }

    /// An append across a block boundary (the transaction of `Fs::append`, as `O_APPEND`
    /// writes take) leaves its new last block out of line however few bytes it holds, so the
    /// appends after it go into the block's tail where it is instead of rewriting the leaf.
    #[test]
    fn an_append_across_a_block_boundary_leaves_the_new_block_out_of_line() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        let located = |b: u64| {
            fs.store()
                .read(|v| {
                    Ok(match v.get_located(key(ino, Kind::Data, b))? {
                        Some(iris_store::Located::Block(at)) => Some(at),
                        _ => None,
                    })
                })
                .expect("read")
        };
        // 4000 bytes, then 110 across the boundary: 14 of them in block 1 (far below the
        // inline limit).
        assert_eq!(fs.append_file(&map, &[1u8; 4000]).expect("append"), Some(0));
        assert_eq!(
            fs.append_file(&map, &[2u8; 110]).expect("append"),
            Some(4000)
        );
        let at = located(1).expect("block 1 out of line");
        assert_eq!(at.len(), 14);
        // The next appends land in that block's tail.
        for i in 0..3u64 {
            let off = fs.append_file(&map, &[3u8; 110]).expect("append");
            assert_eq!(off, Some(4110 + i * 110));
        }
        let after = located(1).expect("still out of line");
        assert_eq!((after.block(), after.len()), (at.block(), 14 + 330));
        let mut buf = vec![0u8; 4440];
        assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 4440);
        assert!(buf[..4000].iter().all(|&b| b == 1));
        assert!(buf[4000..4110].iter().all(|&b| b == 2));
        assert!(buf[4110..].iter().all(|&b| b == 3));
    }

    /// A small write that a sync is expected to follow (copied under every lock, into the
    /// intent log) leaves the inode's new record in the cache at its stamp, so the sync's look
    /// at the inode (and the next write's) does not walk the tree.
    #[test]
    fn a_write_expecting_a_sync_leaves_the_inode_in_the_cache() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        let inode_key = key(ino, Kind::Inode, 0);
        let mut end = 0;
        for i in 0..6u64 {
            let w = fs
                .write_file(&map, end, &[i as u8 + 1; 300])
                .expect("write");
            assert_eq!(w, Some(300));
            end += 300;
            let cached = fs.caches.inode(ino, fs.store().change_stamp(inode_key));
            // The first writes come before the file's pattern is known (see `sync_hint`).
            if i >= 2 {
                assert_eq!(cached.map(|c| c.size), Some(end), "write {i}");
            }
            fs.sync_inode(ino).expect("sync");
        }
        assert_eq!(fs.getattr(ino).expect("getattr").size, end);
    }

    /// A file whose blocks 0..`n` [`fill_blocks`] filled through its map, all committed.
    fn committed_file(n: u64) -> (Fs, u64, std::sync::Arc<crate::cache::FileCache>) {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        fill_blocks(&fs, &map, n);
        fs.sync().expect("commit");
        (fs, ino, map)
    }

    /// Fill blocks `0..n` of the map's file, block `b` with bytes `b + 1`, then read each
    /// through the map (which then knows them all).
    fn fill_blocks(fs: &Fs, map: &crate::cache::FileCache, n: u64) {
        for b in 0..n {
            let w = fs.write_file(map, b * 4096, &[b as u8 + 1; 4096]);
            assert_eq!(w.expect("write"), Some(4096));
        }
        let mut buf = vec![0u8; 4096];
        for b in 0..n {
            assert_eq!(
                fs.read_file(map, b * 4096, &mut buf).expect("read"),
                Some(4096)
            );
        }
    }

    /// Small writes inside blocks the map knows, within the file (most within one tick of
    /// the clock, so the inode stays as it is: the store's leanest way), land where the blocks
    /// are: no stamp of the data moves, the size stays, and every byte reads back.
    #[test]
    fn small_overwrites_of_known_blocks_land_where_the_blocks_are() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        fill_blocks(&fs, &map, 4);
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let before = stamp();
        let mut want: Vec<u8> = (0..4 * 4096).map(|i| (i / 4096) as u8 + 1).collect();
        for i in 0..200usize {
            let off = (i * 7 % 32) * 512 + i % 3;
            let data = [(i + 10) as u8; 509];
            let w = fs.write_file(&map, off as u64, &data).expect("write");
            assert_eq!(w, Some(data.len()));
            want[off..off + data.len()].copy_from_slice(&data);
        }
        assert_eq!(stamp(), before, "a block moved");
        assert_eq!(fs.getattr(ino).expect("stat").size, 4 * 4096);
        let mut buf = vec![0u8; 4 * 4096];
        assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 4 * 4096);
        assert!(buf == want, "the bytes read back");
    }

    #[test]
    fn a_small_write_across_two_blocks_of_this_generation_changes_them_where_they_are() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        fill_blocks(&fs, &map, 4);
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let e = map.epoch_now(stamp()).expect("in force");
        let (b1, b2) = (map.get(1, e).expect("1"), map.get(2, e).expect("2"));
        let before = stamp();
        // 4 KiB from 512 bytes before the end of block 1.
        let w = fs.write_file(&map, 2 * 4096 - 512, &[0xAB; 4096]);
        assert_eq!(w.expect("write"), Some(4096));
        assert_eq!(stamp(), before, "no block moved");
        let e = map.epoch_now(stamp()).expect("still in force");
        assert_eq!(map.get(1, e), Some(b1), "block 1 where it was");
        assert_eq!(map.get(2, e), Some(b2), "block 2 where it was");
        let mut buf = vec![0u8; 4 * 4096];
        assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 4 * 4096);
        let want = |i: usize| match i {
            i if i < 2 * 4096 - 512 => (i / 4096) as u8 + 1,
            i if i < 3 * 4096 - 512 => 0xAB,
            i => (i / 4096) as u8 + 1,
        };
        assert!((0..buf.len()).all(|i| buf[i] == want(i)));
    }

    /// Writes over several blocks written since the last commit (an aligned 8 KiB page, 10 KiB
    /// across three blocks, a block the map does not know among them) change every block
    /// where it is: no block moves, and the map knows them all afterwards.
    #[test]
    fn writes_across_several_blocks_of_this_generation_change_them_where_they_are() {
        let (fs, ino) = fs_with_file();
        let map = fs.file_cache(ino);
        fill_blocks(&fs, &map, 6);
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let e = map.epoch_now(stamp()).expect("in force");
        let places: Vec<_> = (0..6).map(|b| map.get(b, e).expect("known")).collect();
        let before = stamp();
        let mut want: Vec<u8> = (0..6 * 4096).map(|i| (i / 4096) as u8 + 1).collect();
        let mut write = |off: usize, data: &[u8]| {
            let w = fs.write_file(&map, off as u64, data).expect("write");
            assert_eq!(w, Some(data.len()));
            want[off..off + data.len()].copy_from_slice(data);
        };
        write(2 * 4096, &[0xA1; 8192]);
        write(4096 + 100, &[0xB2; 10_000]);
        // A map that knows block 4 only as a hint (where it was last seen, of no epoch).
        map.hint(4, places[4]);
        assert_eq!(map.get(4, map.epoch_now(stamp()).expect("in force")), None);
        write(3 * 4096 + 7, &[0xC3; 2 * 4096]);
        assert_eq!(stamp(), before, "no block moved");
        let e = map.epoch_now(stamp()).expect("still in force");
        for (b, at) in places.iter().enumerate() {
            assert_eq!(map.get(b as u64, e), Some(*at), "block {b} where it was");
        }
        let mut buf = vec![0u8; 6 * 4096];
        assert_eq!(fs.read(ino, 0, &mut buf).expect("read"), 6 * 4096);
        assert!(buf == want, "the bytes read back");
    }

    #[test]
    fn an_overwrite_of_several_blocks_keeps_the_rest_of_the_files_map() {
        let (fs, ino, map) = committed_file(6);
        // A copy of block 5 makes the leaf this generation's; blocks 1 and 2 stay the last
        // commit's, so a write across them copies both (`Store::overwrite_blocks`).
        assert_eq!(
            fs.write_file(&map, 5 * 4096, &[9u8; 4096]).expect("copy"),
            Some(4096)
        );
        assert_the_map_follows_a_write_across_blocks_1_and_2(&fs, ino, &map);
    }

    #[test]
    fn a_transaction_over_committed_blocks_keeps_the_rest_of_the_files_map() {
        // Right after a commit, leaves and blocks are the commit's: a write across two blocks
        // is a transaction, which moves the data's stamp once; the map follows it.
        let (fs, ino, map) = committed_file(6);
        assert_the_map_follows_a_write_across_blocks_1_and_2(&fs, ino, &map);
    }

    /// Write 4 KiB from byte 100 of block 1 of `ino` through `map` (blocks 0-5 filled by
    /// [`fill_blocks`], blocks 1 and 2 the last commit's): one move of the data's stamp, after
    /// which the map is in force, still knows the other blocks and knows 1 and 2 where they
    /// went; the bytes read back.
    fn assert_the_map_follows_a_write_across_blocks_1_and_2(
        fs: &Fs,
        ino: u64,
        map: &crate::cache::FileCache,
    ) {
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let e = map.epoch_now(stamp()).expect("in force before the write");
        let (b0, b1) = (map.get(0, e).expect("0"), map.get(1, e).expect("1"));
        let before = stamp();
        let w = fs.write_file(map, 4096 + 100, &[0xCD; 4096]);
        assert_eq!(w.expect("write"), Some(4096));
        assert_eq!(stamp(), before + 1, "one move for the write");
        let e = map.epoch_now(stamp()).expect("the map follows the write");
        assert_eq!(map.get(0, e), Some(b0), "untouched blocks stay known");
        for b in [3u64, 4, 5] {
            assert!(map.get(b, e).is_some(), "block {b} stays known");
        }
        assert_ne!(map.get(1, e).expect("1 known"), b1, "block 1 was copied");
        assert!(map.get(2, e).is_some(), "block 2 known where it went");
        let mut buf = vec![0u8; 2 * 4096];
        for (half, b) in buf.chunks_mut(4096).zip(1u64..) {
            assert_eq!(fs.read_file(map, b * 4096, half).expect("read"), Some(4096));
        }
        assert!(buf[..100].iter().all(|&x| x == 2));
        assert!(buf[100..4196].iter().all(|&x| x == 0xCD));
        assert!(buf[4196..].iter().all(|&x| x == 3));
    }

    #[test]
    fn a_write_in_place_never_carries_the_map_over_another_writers_move() {
        // The map may keep its entries across a stamp move only when the move was the
        // writer's own. Here another writer (no map) copies block 1 away, then a write in
        // place through the map (which moves nothing) sees the stamp one past the map's:
        // the map must start again, or it would send reads of block 1 to its old place.
        let (fs, ino, map) = committed_file(4);
        // Block 2 copied through the map (it follows), then block 1 by the other writer.
        assert_eq!(
            fs.write_file(&map, 2 * 4096, &[7u8; 4096]).expect("copy"),
            Some(4096)
        );
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            fs.read_file(&map, 4096, &mut buf).expect("read"),
            Some(4096)
        );
        assert_eq!(fs.write(ino, 4096, &[8u8; 4096]).expect("other"), 4096);
        // In place (block 2 is this generation's): nothing moves.
        let stamp = || fs.store().change_stamp(key(ino, Kind::Data, 0));
        let before = stamp();
        assert_eq!(
            fs.write_file(&map, 2 * 4096 + 10, &[6u8; 10])
                .expect("in place"),
            Some(10)
        );
        assert_eq!(stamp(), before, "a write in place moves no stamp");
        assert_eq!(
            fs.read_file(&map, 4096, &mut buf).expect("read"),
            Some(4096)
        );
        assert!(
            buf.iter().all(|&x| x == 8),
            "block 1 as the other writer left it"
        );
    }
}
