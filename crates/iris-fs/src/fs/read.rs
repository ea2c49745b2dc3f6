//! Reading a file's bytes. The hot path (`Fs::read_file`): a read inside one block that the
//! open file's block map knows copies it without a read section or a tree lookup, and counts
//! only if the inode's and the data's change stamps and the block's write marks read the same
//! afterwards. Else a read section walks the tree; holes read as zeros, and a read that finds a
//! writer mid-change reads again (after `WAITS_BEFORE_LOCK` attempts, under the writer's lock).

use iris_store::{Key, Located};

use crate::cache::FileCache;
use crate::errno::{Errno, FsResult};
use crate::keys::{key, Kind};

use super::{store_err, Fs};

/// Attempts of a read that found a writer mid-change before it takes that writer's locks (which
/// also repairs a writer killed mid-change).
const WAITS_BEFORE_LOCK: u32 = 1000;

/// The outcome of one attempt of a read (see `Fs::read_impl`).
enum ReadOnce {
    /// Read (or failed) for good.
    Done(FsResult<Option<usize>>),
    /// A change in place overlapped the copy: read again.
    Again,
    /// A writer is in the middle of a change in place: wait, then read.
    WriterBusy,
}

impl Fs {
    /// Read up to `buf.len()` bytes at `off`; holes read as zeros; returns bytes read (0 at EOF).
    /// While the file is shadowed this reads the bytes last written back from the shadow.
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> FsResult<usize> {
        Ok(self.read_impl(ino, off, buf, false, None)?.unwrap_or(0))
    }

    /// [`Fs::read_unless_shadowed`] through the block map of an open file.
    pub fn read_file(&self, file: &FileCache, off: u64, buf: &mut [u8]) -> FsResult<Option<usize>> {
        let block = off >> self.block_size.trailing_zeros();
        let in_block = (off & (self.block_size - 1)) as usize;
        // Where the block probably is (its run of the file, see `FileCache::predict`): its
        // bytes start on their way from memory at once, beside the map word's own miss; then
        // where the map word says it was last seen, if elsewhere. The stamps and marks are
        // checked meanwhile (the map says where, after them).
        let predicted = file.predict(block, self.block_size as u32);
        if let Some(p) = predicted {
            self.store.prefetch_bytes(p, in_block, buf.len());
        }
        match file.peek(block) {
            Some(at) if predicted.is_some_and(|p| p.block() == at.block()) => {}
            Some(at) => self.store.prefetch_bytes(at, in_block, buf.len()),
            None => file.prefetch(block),
        }
        if let Some(n) = self.read_known(file, off, buf) {
            return Ok(Some(n));
        }
        self.read_impl(file.ino(), off, buf, true, Some(file))
    }

    /// A read inside one block, or across one block boundary, that the file's map knows, with
    /// the inode's record in the cache, made without a read section (see `Store::read_known`):
    /// the copy counts only if the inode's and the data's stamps and the blocks' write marks
    /// read afterwards what they read before. `None` when something is not known or moved: the
    /// caller reads the usual way. (Reads across a boundary are common: a SQLite WAL's frames
    /// are 24 bytes longer than a page, so every page read from the log crosses one.)
    fn read_known(&self, file: &FileCache, off: u64, buf: &mut [u8]) -> Option<usize> {
        let bs = self.block_size;
        let block = off >> bs.trailing_zeros();
        let in_block = (off & (bs - 1)) as usize;
        if buf.is_empty() || in_block + buf.len() > 2 * bs as usize {
            return None;
        }
        let ino = file.ino();
        let (ikey, dkey) = (key(ino, Kind::Inode, 0), key(ino, Kind::Data, block));
        let next = key(ino, Kind::Data, block + 1);
        self.store.read_known(|v| {
            let stamp = v.change_stamp(ikey);
            let data_stamp = v.change_stamp(dkey);
            let inode = self.caches.inode(ino, stamp)?;
            if inode.is_dir() || inode.is_shadowed() || off >= inode.size {
                return None;
            }
            let n = (buf.len() as u64).min(inode.size - off) as usize;
            let e = file.epoch_now(data_stamp)?;
            // The part in the first block, and what follows in the next one.
            let head = n.min(bs as usize - in_block);
            let at = file.get(block, e)?;
            let second = if n > head {
                Some(file.get(block + 1, e)?)
            } else {
                None
            };
            let keys = [dkey, next];
            let marks = v.in_place_marks(keys.into_iter().take(1 + usize::from(n > head)))?;
            let (first_out, rest_out) = buf[..n].split_at_mut(head);
            copy_piece(v.block_bytes(at).ok()?, in_block, first_out);
            if let Some(at) = second {
                copy_piece(v.block_bytes(at).ok()?, 0, rest_out);
            }
            (v.unchanged_since(&marks)
                && v.change_stamp(dkey) == data_stamp
                && v.change_stamp(ikey) == stamp)
                .then_some(n)
        })
    }

    /// [`Fs::read`], or `None` (nothing read) when the file's bytes live in a shadow file.
    pub fn read_unless_shadowed(
        &self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> FsResult<Option<usize>> {
        self.read_impl(ino, off, buf, true, None)
    }

    fn read_impl(
        &self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
        honor_shadow: bool,
        file: Option<&FileCache>,
    ) -> FsResult<Option<usize>> {
        let mut waits = 0u32;
        loop {
            match self.read_once(ino, off, buf, honor_shadow, file)? {
                ReadOnce::Done(r) => return r,
                ReadOnce::Again => {}
                ReadOnce::WriterBusy => {
                    waits += 1;
                    if waits < WAITS_BEFORE_LOCK {
                        std::hint::spin_loop();
                    } else {
                        self.store
                            .wait_for_writers(self.data_keys(ino, off, buf.len() as u64))
                            .map_err(store_err)?;
                        waits = 0;
                    }
                }
            }
        }
    }

    /// The keys of the data blocks `len` bytes at `off` of `ino` live in: a read of them must not
    /// see part of a write that changes some of them in place (see `KnownView::in_place_marks`).
    fn data_keys(&self, ino: u64, off: u64, len: u64) -> impl Iterator<Item = Key> {
        let shift = self.block_size.trailing_zeros();
        let (first, last) = (off >> shift, off.saturating_add(len.max(1) - 1) >> shift);
        (first..=last).map(move |b| key(ino, Kind::Data, b))
    }

    /// One attempt of `read_impl` in one read section.
    fn read_once(
        &self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
        honor_shadow: bool,
        file: Option<&FileCache>,
    ) -> FsResult<ReadOnce> {
        let bs = self.block_size;
        let finish = |r: FsResult<Option<usize>>| Ok(ReadOnce::Done(r));
        self.store
            .read(|view| {
                let stamp = view.change_stamp(key(ino, Kind::Inode, 0));
                // The block map follows the data's stamp, which inode changes do not move.
                let data_stamp = file.map(|_| view.change_stamp(key(ino, Kind::Data, 0)));
                let inode = match self.inode_at(view, ino, stamp) {
                    Ok(i) => i,
                    Err(e) => return finish(Err(e)),
                };
                if inode.is_dir() {
                    return finish(Err(Errno::EISDIR));
                }
                if honor_shadow && inode.is_shadowed() {
                    return finish(Ok(None));
                }
                if off >= inode.size {
                    return finish(Ok(Some(0)));
                }
                let n = (buf.len() as u64).min(inode.size - off) as usize;
                let Some(marks) = view.in_place_marks(self.data_keys(ino, off, n as u64)) else {
                    return Ok(ReadOnce::WriterBusy);
                };
                let map = file
                    .zip(data_stamp)
                    .and_then(|(f, s)| Some((f, f.epoch(s)?)));
                let mut done = 0usize;
                while done < n {
                    let pos = off + done as u64;
                    // Block sizes are powers of two: shifts, not divisions, on the hot path.
                    let block = pos >> bs.trailing_zeros();
                    let in_block = (pos & (bs - 1)) as usize;
                    let chunk = (bs as usize - in_block).min(n - done);
                    let out = &mut buf[done..done + chunk];
                    let at = match map.and_then(|(f, e)| f.get(block, e)) {
                        Some(at) => Some(Located::Block(at)),
                        None => {
                            let found = view.get_located(key(ino, Kind::Data, block))?;
                            if let (Some((f, e)), Some(Located::Block(at))) = (map, found) {
                                f.put(block, e, at);
                            }
                            found
                        }
                    };
                    let v = match at {
                        Some(Located::Block(at)) => view.block_bytes(at)?,
                        Some(Located::Inline(v)) => v,
                        None => &[],
                    };
                    let have = v.len().saturating_sub(in_block).min(chunk);
                    // (Nothing when the read starts past the value's end, as in a file
                    // extended by truncate: zeros below.)
                    if have > 0 {
                        iris_store::copy_bytes(&mut out[..have], &v[in_block..in_block + have]);
                    }
                    // Only past the value's end: glibc's memset of zero bytes at the end of a
                    // page-aligned buffer is an AVX-512 masked store into the next page, which
                    // cost a third of a 4 KiB O_DIRECT read here (fio's buffers are
                    // page-aligned with direct=1).
                    if have < chunk {
                        out[have..].fill(0);
                    }
                    done += chunk;
                }
                if !view.unchanged_since(&marks) {
                    return Ok(ReadOnce::Again);
                }
                // A change published between the data stamp read above and the marks (which
                // then do not see it): the map gave blocks from before it, the tree (whose
                // root the view read at its first lookup) may have given blocks from after it.
                // The data stamp has moved then; `read_known` checks it too. (Caught as a
                // torn three-block read, 1 in 312 runs of the posix tests under load.)
                if map.is_some()
                    && data_stamp.is_some_and(|s| view.change_stamp(key(ino, Kind::Data, 0)) != s)
                {
                    return Ok(ReadOnce::Again);
                }
                finish(Ok(Some(n)))
            })
            .map_err(store_err)
    }
}

/// Copy `out.len()` bytes of a block's value from byte `from` into `out`: zeros past the
/// value's end (a file extended by truncate, a block's unwritten tail).
fn copy_piece(value: &[u8], from: usize, out: &mut [u8]) {
    let have = value.len().saturating_sub(from).min(out.len());
    if have > 0 {
        iris_store::copy_bytes(&mut out[..have], &value[from..from + have]);
    }
    if have < out.len() {
        out[have..].fill(0);
    }
}
