//! The extent of a file's bytes: `truncate` (down frees the blocks past the end, up leaves a
//! hole), fallocate's zeroed and punched ranges, and `SEEK_DATA`/`SEEK_HOLE` over the blocks
//! present. Each change is one transaction: whole or absent after a crash, and takes the bytes
//! it may change in the file's range lock first (see `range_lock`).

use crate::errno::{Errno, FsResult};
use crate::inode::now_ns;
use crate::keys::{key, offset_of, Kind, MAX_OFFSET};

use super::{abort, get_inode_tx, put_inode_tx, store_err, Fs};

/// File blocks [`Fs::allocate`] fills per transaction (1 MiB of 4 KiB blocks): each holds
/// every lock while it zeroes them.
const ALLOCATE_BLOCKS: u64 = 256;

impl Fs {
    /// Set the size of a regular file, dropping or zero-extending data.
    pub fn truncate(&self, ino: u64, len: u64) -> FsResult<()> {
        let bs = self.block_size;
        if len / bs > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
        // Every byte from the new or the old end on may change: the whole file's range.
        let open = self.open_file_cache(ino);
        let _range = open.as_ref().map(|f| f.ranges().lock(0, u64::MAX));
        let now = now_ns();
        self.tx(|tx| {
            let mut i = get_inode_tx(tx, ino)?;
            if i.is_dir() {
                return Err(abort(Errno::EISDIR));
            }
            if len < i.size {
                tx.use_reserve();
                // Whole blocks past the new end go; the block holding the end is cut short.
                let keep_blocks = len.div_ceil(bs);
                let mut doomed = Vec::new();
                tx.scan(
                    key(ino, Kind::Data, keep_blocks),
                    key(ino, Kind::Data, MAX_OFFSET),
                    |k, _| {
                        doomed.push(k);
                        true
                    },
                )?;
                for k in &doomed {
                    tx.delete(*k)?;
                }
                i.blocks = i.blocks.saturating_sub(doomed.len() as u64);
                if !len.is_multiple_of(bs) {
                    let k = key(ino, Kind::Data, len / bs);
                    let cut = (len % bs) as usize;
                    if let Some(old_len) = tx.get_with(k, |v| v.len())? {
                        if old_len > cut {
                            tx.put_with(k, cut, |old, out| {
                                if let Some(o) = old {
                                    out.copy_from_slice(&o[..cut]);
                                }
                            })?;
                        }
                    }
                }
            }
            i.size = len;
            i.mtime_ns = now;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)
        })
    }

    /// Deallocate `[off, off + len)`: whole blocks inside go, the partial edges are zeroed; the
    /// size does not change (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE). With `keep_size` false
    /// the range reads zeros and the file grows to cover it (FALLOC_FL_ZERO_RANGE).
    pub fn zero_range(&self, ino: u64, off: u64, len: u64, keep_size: bool) -> FsResult<()> {
        let bs = self.block_size;
        let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        if end / bs > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
        // The range, and past it when the size may grow (see `range_lock`).
        let open = self.open_file_cache(ino);
        let _range = open
            .as_ref()
            .map(|f| f.ranges().lock(off, if keep_size { end } else { u64::MAX }));
        let now = now_ns();
        self.tx(|tx| {
            if keep_size {
                tx.use_reserve();
            }
            let mut i = get_inode_tx(tx, ino)?;
            if i.is_dir() {
                return Err(abort(Errno::EISDIR));
            }
            let zero_to = if keep_size { end.min(i.size) } else { end };
            if off < zero_to {
                let first_whole = off.div_ceil(bs);
                let end_whole = zero_to / bs;
                let mut doomed = Vec::new();
                if first_whole < end_whole {
                    tx.scan(
                        key(ino, Kind::Data, first_whole),
                        key(ino, Kind::Data, end_whole),
                        |k, _| {
                            doomed.push(k);
                            true
                        },
                    )?;
                }
                for k in &doomed {
                    tx.delete(*k)?;
                }
                i.blocks = i.blocks.saturating_sub(doomed.len() as u64);
                // Partial blocks at either edge: zero the covered bytes that exist.
                let mut edges = vec![off / bs];
                if zero_to % bs != 0 && (zero_to / bs) != off / bs {
                    edges.push(zero_to / bs);
                }
                for b in edges {
                    let bstart = b * bs;
                    let from = off.max(bstart) - bstart;
                    let to = zero_to.min(bstart + bs) - bstart;
                    if from == 0 && to == bs {
                        continue; // whole block, handled above
                    }
                    let k = key(ino, Kind::Data, b);
                    if let Some(old_len) = tx.get_with(k, |v| v.len())? {
                        let (from, to) = (from as usize, (to as usize).min(old_len));
                        if from < to {
                            tx.put_with(k, old_len, |old, out| {
                                if let Some(o) = old {
                                    out.copy_from_slice(&o[..old_len]);
                                }
                                out[from..to].fill(0);
                            })?;
                        }
                    }
                }
            }
            if !keep_size && end > i.size {
                i.size = end;
            }
            i.mtime_ns = now;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)
        })
    }

    /// fallocate without a flag (`keep_size` false: the file grows to cover the range) or with
    /// FALLOC_FL_KEEP_SIZE: after the room is checked (ENOSPC if there is none, see
    /// [`Fs::check_room`]), every hole of the range inside the file becomes a block of zeros
    /// reaching as far as the file does, as a kernel file system allocates them. Writes into
    /// the range then land where its blocks are (they are this generation's until the next
    /// commit) instead of each adding a block to the tree under every lock, and the space is
    /// taken now. Blocks past the end of the file are never made (the size says where data may
    /// lie), so KEEP_SIZE past the end only checks the room. One transaction per
    /// `ALLOCATE_BLOCKS` blocks, the first one growing the size: a crash between them leaves
    /// holes, which read as the zeros they would have held.
    pub fn allocate(&self, ino: u64, off: u64, len: u64, keep_size: bool) -> FsResult<()> {
        let bs = self.block_size;
        let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        if end.div_ceil(bs) > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
        self.check_room(ino, off, len)?;
        let open = self.open_file_cache(ino);
        let _range = open
            .as_ref()
            .map(|f| f.ranges().lock(off, if keep_size { end } else { u64::MAX }));
        let now = now_ns();
        let mut next = off / bs;
        loop {
            let more = self.tx(|tx| {
                let mut i = get_inode_tx(tx, ino)?;
                if i.is_dir() {
                    return Err(abort(Errno::EISDIR));
                }
                let mut changed = false;
                if !keep_size && end > i.size {
                    i.size = end;
                    i.mtime_ns = now;
                    i.ctime_ns = now;
                    changed = true;
                }
                let last = end.min(i.size).div_ceil(bs);
                let stop = last.min(next + ALLOCATE_BLOCKS);
                let mut added = 0;
                for b in next..stop {
                    let k = key(ino, Kind::Data, b);
                    if tx.get_with(k, |_| ())?.is_none() {
                        let want = (i.size - b * bs).min(bs) as usize;
                        tx.put_with(k, want, |_, out| out.fill(0))?;
                        added += 1;
                    }
                }
                if added > 0 || changed {
                    i.blocks += added;
                    put_inode_tx(tx, &i)?;
                }
                Ok((stop < last).then_some(stop))
            })?;
            match more {
                Some(b) => next = b,
                None => return Ok(()),
            }
        }
    }

    /// Whether the volume has room for the blocks that writing `[off, off + len)` of file
    /// `ino` would add (its holes there, and what lies past its end): ENOSPC if not. What
    /// `posix_fallocate` promises, as far as a copy-on-write volume can: checked now, not set
    /// aside (a later overwrite takes new blocks too, and other writers may take the room).
    pub fn check_room(&self, ino: u64, off: u64, len: u64) -> FsResult<()> {
        let end = off.saturating_add(len);
        let size = self.getattr(ino)?.size;
        let mut held = 0u64;
        let mut pos = off;
        while pos < end.min(size) {
            let data = match self.seek_data(ino, pos, true) {
                Ok(d) if d < end => d,
                Ok(_) | Err(Errno::ENXIO) => break,
                Err(e) => return Err(e),
            };
            let hole = match self.seek_data(ino, data, false) {
                Ok(h) => h,
                Err(Errno::ENXIO) => size,
                Err(e) => return Err(e),
            };
            held += hole.min(end) - data;
            pos = hole;
        }
        let need = (end - off - held.min(end - off)).div_ceil(self.block_size);
        if need > self.statfs()?.blocks_avail {
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// The first offset at or after `off` holding data (`data` true, SEEK_DATA) or a hole
    /// (SEEK_HOLE; the end of file counts as a hole). ENXIO past the end.
    pub fn seek_data(&self, ino: u64, off: u64, data: bool) -> FsResult<u64> {
        let i = self.getattr(ino)?;
        if off >= i.size {
            return Err(Errno::ENXIO);
        }
        let bs = self.block_size;
        let mut blocks = Vec::new();
        let last = (i.size - 1) / bs;
        self.store
            .scan(
                key(ino, Kind::Data, off / bs),
                key(ino, Kind::Data, last + 1),
                |k, _| {
                    blocks.push(offset_of(k));
                    // Enough to answer: data needs the first block; a hole needs a gap.
                    blocks.len() < 4096
                },
            )
            .map_err(store_err)?;
        if data {
            return match blocks.first() {
                Some(b) => Ok((b * bs).max(off)),
                None => Err(Errno::ENXIO),
            };
        }
        let mut expect = off / bs;
        for b in blocks {
            if b != expect {
                break;
            }
            expect += 1;
        }
        Ok((expect * bs).max(off).min(i.size))
    }
}
