//! Creating and opening a volume: the geometry checked, the superblocks chosen (a torn newest
//! falls back to the older), the volume lock taken, and, after a crash, the free map rebuilt
//! from the committed trees (`recover`) before the store is assembled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iris_media::{LockMode, MappedMedia, Media, MediaError};

use crate::allocator::Allocator;
use crate::commit::{self, VolumeFacts};
use crate::error::{Result, StoreError};
use crate::header::Header;
use crate::layout::{Layout, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use crate::node::Val;
use crate::recovery::{self, Marks, Walk};
use crate::region::Region;
use crate::superblock::{LogArea, Superblock, SUPER_BYTES};
use crate::tree::{max_inline_for, Ctx, Parts, Txn};
use crate::undo::Undo;
use crate::volume_lock;

use super::{kernel_boot_id, CreateOptions, Inner, OpenOptions, Store};

/// Rebuild the working state from the newest superblock (first open after a reboot or power
/// loss). Verifies every committed node on the way. The header is stamped with the boot only
/// once the intent log is replayed too (see `Store::open_in`).
fn recover(
    media: &dyn Media,
    region: Region,
    layout: Layout,
    header: Header,
    alloc: Allocator,
    sb: &Superblock,
) -> Result<()> {
    if sb.backed_blocks > media.backed_len() / layout.bs() {
        media.grow(layout.offset(sb.backed_blocks))?;
    }
    header.clear_magic();
    region
        .bytes_mut(layout.header_off, crate::layout::HEADER_BYTES)
        .fill(0);
    volume_lock::init(&header);
    header.seed_shape_seq(shape_seed());
    header.set_backed_blocks(sb.backed_blocks);
    alloc.reset();
    let slot = {
        let a = Superblock::decode(region.bytes(0, SUPER_BYTES as u64), "A");
        u64::from(!matches!(a, Ok(ref a) if a.generation == sb.generation))
    };
    // The other slot, if it holds no valid superblock, holds pieces of one whose write was torn
    // by the power loss: a commit that never completed, newer than the one recovered. Another
    // torn write of that slot could complete those pieces into a valid superblock of it, whose
    // blocks this boot reuses (the simulated power-loss test found both a wrong state and a
    // corrupt node that way, at one point in a few thousand). Wipe the slot, durably, first.
    let other = layout.offset(1 - slot);
    if Superblock::decode(region.bytes(other, SUPER_BYTES as u64), "other").is_err() {
        region.bytes_mut(other, SUPER_BYTES as u64).fill(0);
        media.persist(other, SUPER_BYTES as u64)?;
    }
    header.set_committed_slot(slot);
    header.set_committed_gen(sb.generation);
    header.set_committed_root(sb.root);
    header.set_working_gen(sb.generation + 1);
    header.set_working_root(sb.root);
    header.set_snapshots(&sb.snapshots);
    header.set_volume_id(sb.volume_id);
    header.set_last_commit_ns(sb.commit_time_ns);
    if let Some(log) = sb.log {
        header.set_log_area(log.first, log.blocks);
        header.set_log_start(log.start);
        header
            .log_seq()
            .store(log.start, std::sync::atomic::Ordering::Release);
    }
    let parts = Parts {
        region,
        layout,
        header,
        alloc,
        buffer: u64::from(sb.buffer_bytes),
    };
    let cx = Ctx::new(&parts, media);
    let mut marks = Marks::new(layout.max_blocks);
    recovery::mark_tree(&cx, sb.root, &mut marks, Walk::MarkVerified, sb.generation)?;
    let live = marks.count();
    for s in &sb.snapshots {
        recovery::mark_tree(&cx, s.root, &mut marks, Walk::MarkVerified, sb.generation)?;
    }
    header.set_snapshot_held(marks.count() - live);
    header.mark_log(&mut marks);
    alloc.mark_used(marks.words());
    header.set_used_blocks(alloc.count_used());
    Ok(())
}

/// Decode the superblocks from a mapped region, finding B at every legal block size if A is bad.
fn read_superblocks_raw(region: &Region, backed: u64) -> Result<Superblock> {
    let read = |off: u64, which: &str| -> Result<Superblock> {
        if off + SUPER_BYTES as u64 > backed {
            return Err(StoreError::corrupt(format!(
                "superblock {which}: volume truncated"
            )));
        }
        Superblock::decode(region.bytes(off, SUPER_BYTES as u64), which)
    };
    let a = read(0, "A");
    let b_at = |bs: u32| read(u64::from(bs), "B");
    let b = match &a {
        Ok(a) => b_at(a.block_size).and_then(|b| {
            if b.block_size == a.block_size && b.max_blocks == a.max_blocks {
                Ok(b)
            } else {
                Err(StoreError::corrupt(
                    "superblock B disagrees with A on geometry",
                ))
            }
        }),
        Err(_) => {
            let mut found = Err(StoreError::corrupt("superblock B: not found"));
            let mut bs = MIN_BLOCK_SIZE;
            while bs <= MAX_BLOCK_SIZE {
                if let Ok(b) = b_at(bs) {
                    if b.block_size == bs {
                        found = Ok(b);
                        break;
                    }
                }
                bs *= 2;
            }
            found
        }
    };
    crate::superblock::choose(a, b).map(|(_, sb)| sb)
}

/// Read a volume file's geometry (block size, size limit) before mapping it.
fn peek_geometry(path: &Path) -> Result<(u32, u64)> {
    peek_superblock(path).map(|sb| (sb.block_size, sb.max_blocks))
}

/// The newest valid superblock of a volume file, read without mapping it.
fn peek_superblock(path: &Path) -> Result<Superblock> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).map_err(|source| MediaError::Io {
        op: "open",
        path: path.to_path_buf(),
        source,
    })?;
    // Read `buf.len()` bytes at `at` (fewer at the end of the file): how many.
    let read_at = |buf: &mut [u8], at: u64| -> Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match f.read_at(&mut buf[n..], at + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(MediaError::Io {
                        op: "read",
                        path: path.to_path_buf(),
                        source,
                    }
                    .into())
                }
            }
        }
        Ok(n)
    };
    // Superblock A names the block size, and so where B is: read those two pieces only (every
    // process that opens a volume comes here; zeroing and reading 128 KiB cost it 32 page
    // faults). A volume whose A does not decode is searched for B at every block size.
    let mut a = vec![0u8; SUPER_BYTES];
    let n = read_at(&mut a, 0)?;
    if let Ok(sb) = Superblock::decode(&a[..n], "A") {
        let bs = u64::from(sb.block_size);
        let mut head = vec![0u8; bs as usize + SUPER_BYTES];
        head[..n].copy_from_slice(&a[..n]);
        let got = read_at(&mut head[bs as usize..], bs)?;
        let region = Region::new(head.as_mut_ptr(), head.len() as u64);
        return read_superblocks_raw(&region, bs + got as u64);
    }
    let mut head = vec![0u8; 2 * MAX_BLOCK_SIZE as usize];
    let n = read_at(&mut head, 0)?;
    let region = Region::new(head.as_mut_ptr(), head.len() as u64);
    read_superblocks_raw(&region, n as u64)
}

/// A start for a rebuilt header's shape sequence that no earlier life of it used.
fn shape_seed() -> u64 {
    commit::now_ns().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (u64::from(std::process::id()) << 40)
}

/// Who opens a volume, as [`Store::open_in`] needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Opener {
    /// Holding the volume's exclusive lock: alone with it (see [`Store::open_alone_on`]).
    Alone,
    /// May rebuild a working header it does not trust (others may share a trusted one).
    MayRecover,
    /// Beside other processes that have the volume open: never rebuilds their header.
    Joining,
}

impl Store {
    /// Create a volume file (or format a block device) at `path`. Refuses a non-empty regular
    /// file: the caller decides whether overwriting is allowed and removes or truncates it first.
    pub fn create(path: &Path, opts: &CreateOptions) -> Result<Store> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.is_file() && meta.len() > 0 {
                return Err(StoreError::Invalid(format!(
                    "{} exists and is not empty",
                    path.display()
                )));
            }
        }
        let existed = path.exists();
        let made = MappedMedia::open(
            path,
            true,
            LockMode::Exclusive,
            opts.size_limit_bytes,
            opts.initial_bytes.min(opts.size_limit_bytes),
        )
        .map_err(StoreError::from)
        .and_then(|media| Store::create_on(Box::new(media), opts, &OpenOptions::default()))
        .and_then(|store| {
            store
                .inner
                .media
                .share()
                .map(|()| store)
                .map_err(Into::into)
        });
        if made.is_err() {
            // A refused creation leaves no half-made volume: remove the file it made, or give
            // back the empty file it was.
            let _ = if existed {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_len(0))
            } else {
                std::fs::remove_file(path)
            };
        }
        made
    }

    /// Open the volume at `path`. The first opener after a reboot rebuilds the working state from
    /// the newest valid superblock; later openers join the running state.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let (block_size, max_blocks) = peek_geometry(path)?;
        let map_len = max_blocks * u64::from(block_size);
        // Others have it open (shared), or someone is recovering it: join as shared, waiting a
        // little for a recovering opener to finish. A shared lock on a header this opener does
        // not trust may be a process that is going away (a child forked beside the last
        // closer holds its lock until it execs): the exclusive lock is tried again meanwhile.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match MappedMedia::open(path, false, LockMode::ExclusiveIfFree, map_len, 0) {
                Ok(media) => {
                    let store = Store::open_alone_on(Box::new(media), opts)?;
                    store.inner.media.share()?;
                    return Ok(store);
                }
                Err(MediaError::InUse { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let last = Instant::now() >= deadline;
            match MappedMedia::open(path, false, LockMode::Shared, map_len, 0) {
                Ok(media) => match Store::open_in(Box::new(media), opts, Opener::Joining) {
                    Err(StoreError::Busy) if !last => {}
                    r => return r,
                },
                Err(MediaError::InUse { .. }) if !last => {}
                Err(e) => return Err(e.into()),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Open the volume at `path` for this opener only, as offline work needs it (a rollback
    /// under running programs would pull their files from under them): `InUse`, naming the
    /// processes that have it open, if any does. Held so until the store is dropped.
    pub fn open_alone(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let (block_size, max_blocks) = peek_geometry(path)?;
        let map_len = max_blocks * u64::from(block_size);
        let media = MappedMedia::open(path, false, LockMode::Exclusive, map_len, 0)?;
        Store::open_alone_on(Box::new(media), opts)
    }

    /// The id of the volume file at `path` (see [`Store::volume_id`]), from its newest valid
    /// superblock, without opening the volume.
    pub fn peek_volume_id(path: &Path) -> Result<u64> {
        peek_superblock(path).map(|sb| sb.volume_id)
    }

    /// Format `media` as an empty volume.
    pub fn create_on(
        media: Box<dyn Media>,
        opts: &CreateOptions,
        open: &OpenOptions,
    ) -> Result<Store> {
        let bs = opts.block_size;
        let max_blocks = media.mapped_len() / u64::from(bs.max(1));
        let layout = Layout::new(bs, max_blocks)?;
        let inline_max = opts.inline_max.unwrap_or(bs / 4);
        if u64::from(inline_max) > max_inline_for(u64::from(bs)) {
            return Err(StoreError::Invalid(format!(
                "inline limit {inline_max} exceeds a quarter block"
            )));
        }
        let buffer_bytes = opts.buffer_bytes;
        if !buffer_bytes.is_multiple_of(8) || buffer_bytes > bs / 2 {
            return Err(StoreError::Invalid(format!(
                "buffer of {buffer_bytes} bytes: must be a multiple of 8, at most half a block"
            )));
        }
        let log_blocks = log_blocks_for(u64::from(bs), max_blocks - layout.data_start);
        let backed_blocks = (opts.initial_bytes / u64::from(bs))
            .max(layout.data_start + u64::from(log_blocks) + 64)
            .min(max_blocks);
        media.grow(layout.offset(backed_blocks))?;
        let region = Region::new(media.base(), media.mapped_len());
        let header = Header::new(region, &layout);
        let alloc = Allocator::new(region, layout, header);
        region
            .bytes_mut(layout.header_off, crate::layout::HEADER_BYTES)
            .fill(0);
        volume_lock::init(&header);
        header.seed_shape_seq(shape_seed());
        header.set_backed_blocks(backed_blocks);
        alloc.reset();
        // The intent log: the first data blocks, in use from the start.
        let log_first = layout.data_start;
        for b in log_first..log_first + u64::from(log_blocks) {
            alloc.set_used(b);
        }
        header.set_used_blocks(alloc.count_used());
        header.set_log_area(log_first, log_blocks);
        let volume_id = commit::now_ns() ^ (u64::from(std::process::id()) << 32);
        header.set_volume_id(volume_id);
        header.set_committed_gen(1);
        header.set_working_gen(2);
        header.set_committed_slot(0);
        for (slot, generation) in [(1u64, 0u64), (0, 1)] {
            let sb = Superblock {
                block_size: bs,
                generation,
                max_blocks,
                backed_blocks,
                root: 0,
                volume_id,
                commit_time_ns: commit::now_ns(),
                inline_max,
                buffer_bytes,
                snapshots: Vec::new(),
                log: Some(LogArea {
                    first: log_first,
                    blocks: log_blocks,
                    start: 0,
                }),
            };
            region.copy_in(layout.offset(slot), &sb.encode());
            media.persist(layout.offset(slot), SUPER_BYTES as u64)?;
        }
        header.stamp(open.boot_id.unwrap_or_else(kernel_boot_id));
        Ok(Store::assemble(
            false,
            media,
            layout,
            header,
            alloc,
            VolumeFacts {
                volume_id,
                inline_max,
                buffer_bytes,
            },
            open,
        ))
    }

    /// Open a volume on `media`, recovering from the superblocks if the working header is not
    /// from this boot.
    pub fn open_on(media: Box<dyn Media>, opts: &OpenOptions) -> Result<Store> {
        Store::open_in(media, opts, Opener::MayRecover)
    }

    /// [`Store::open_on`] for an opener the caller knows to be alone with the volume (it holds
    /// its exclusive lock): no thread of any other process holds one of its locks, so one that
    /// reads held in a header of this boot is stale (its holder died mid-change, or the
    /// volume's file was copied while in use) and is set up afresh, the repair run as after a
    /// dead holder, instead of waited for.
    pub fn open_alone_on(media: Box<dyn Media>, opts: &OpenOptions) -> Result<Store> {
        Store::open_in(media, opts, Opener::Alone)
    }

    /// [`Store::open_on`] as `opener` (see [`Opener`]).
    pub(super) fn open_in(
        media: Box<dyn Media>,
        opts: &OpenOptions,
        opener: Opener,
    ) -> Result<Store> {
        let may_recover = opener != Opener::Joining;
        let region = Region::new(media.base(), media.mapped_len());
        let backed = media.backed_len();
        let sb = read_superblocks_raw(&region, backed)?;
        let layout = Layout::new(sb.block_size, sb.max_blocks)?;
        if media.mapped_len() < layout.offset(sb.max_blocks) {
            return Err(StoreError::corrupt(format!(
                "volume is {} bytes but its superblock says {}",
                media.mapped_len(),
                layout.offset(sb.max_blocks)
            )));
        }
        if backed < layout.offset(layout.data_start) {
            return Err(StoreError::corrupt(
                "volume is truncated (metadata missing)",
            ));
        }
        let header = Header::new(region, &layout);
        let alloc = Allocator::new(region, layout, header);
        let boot_id = opts.boot_id.unwrap_or_else(kernel_boot_id);
        // A header from this boot is the live state of every process that has the volume open:
        // never rebuilt under them. One behind the superblocks means a commit between its
        // superblock write and its publish (running now, or its process died there): the lock
        // settles that below.
        let trusted = header.is_valid_for_boot(boot_id)
            && header.volume_id() == sb.volume_id
            && header.backed_blocks() <= layout.max_blocks;
        let behind = trusted && header.committed_gen() < sb.generation;
        if trusted {
            if header.backed_blocks() > backed / layout.bs() {
                media.grow(layout.offset(header.backed_blocks()))?;
            }
            if opener == Opener::Alone && volume_lock::reset_alone(&header) {
                header.set_repair_needed(true);
            }
        } else if may_recover {
            recover(media.as_ref(), region, layout, header, alloc, &sb)?;
        } else {
            // Live processes share this header: rebuilding it would pull their state from
            // under them. Theirs is a layout this build does not know (another Iris build).
            return Err(StoreError::Busy);
        }
        let store = Store::assemble(
            !trusted,
            media,
            layout,
            header,
            alloc,
            VolumeFacts {
                volume_id: sb.volume_id,
                inline_max: sb.inline_max,
                buffer_bytes: sb.buffer_bytes,
            },
            opts,
        );
        if !trusted {
            if let Some(log) = sb.log {
                store.replay_log(log)?;
            }
            // Only now is the rebuilt state whole: an opener of this boot that finds the
            // header stamped joins it as live, and one killed before this point (in the
            // replay, say) leaves it unstamped, so the next opener recovers again (the replay
            // commits nothing until its end, and then a superblock that holds it all).
            store.inner.header.stamp(boot_id);
        }
        if trusted {
            // Joining a live volume: take the locks once, so that whatever a process killed
            // while holding one left half done (a multi-block overwrite, an in-place write) is
            // repaired before this opener reads a byte.
            let inner = &*store.inner;
            let _g = inner.lock()?;
            if behind {
                commit::reconcile(&inner.cx())?;
            }
        }
        Ok(store)
    }

    /// After power loss (a header rebuilt from the superblock): apply the intent log's records
    /// that the last commit does not hold, in order (each record's block claimed, its key put,
    /// its patch words set), then commit, which moves the log start past them. A record whose
    /// block is not a free data block of the volume is skipped: no write that returned left
    /// one (see `log_record`). Returns the records applied.
    pub(super) fn replay_log(&self, log: LogArea) -> Result<usize> {
        let inner = &*self.inner;
        let bs = inner.layout.bs();
        let area = inner
            .region
            .bytes(inner.layout.offset(log.first), u64::from(log.blocks) * bs);
        let records = crate::log_record::replayable(area, log.start, inner.layout.block_size);
        // (Past the last record's slots: a data record takes several numbers.)
        let Some(next) = records
            .iter()
            .map(|r| {
                let slots = r.record.data.map_or(1, |d| {
                    crate::log_record::data_slots(usize::from(d.len)) as u64
                });
                r.record.seq + slots
            })
            .max()
        else {
            return Ok(0);
        };
        let _g = inner.lock()?;
        let in_log = |b: u64| (log.first..log.first + u64::from(log.blocks)).contains(&b);
        // Every record's block first: the puts below copy nodes into free blocks, which must
        // not be blocks that later records name. (A data record's block is an earlier
        // record's.)
        let claimed: Vec<bool> = records
            .iter()
            .map(|r| {
                let r = &r.record;
                r.data.is_none() && !in_log(r.block) && inner.alloc.claim(r.block)
            })
            .collect();
        let mut applied = 0;
        for (found, claimed) in records.iter().zip(claimed) {
            let r = &found.record;
            if let Some(d) = r.data {
                if Self::replay_data(inner, r, d, &found.bytes)? {
                    applied += 1;
                    crate::failpoint::hit("replay-applied");
                }
                continue;
            }
            if !claimed {
                continue;
            }
            // Only a file the last commit holds is ever logged (see `intent`); a record naming
            // another is not applied.
            let present = {
                let txn = Txn::begin(inner.cx(), false);
                let spot = txn.locate(r.patch_key)?;
                txn.value_at(&spot)?.is_some()
            };
            if !present {
                inner.alloc.free_now(r.block);
                continue;
            }
            let mut txn = Txn::begin(inner.cx(), false);
            let gen = inner.header.working_gen();
            let val = Val::Block {
                block: r.block,
                len: r.len,
                gen,
            };
            if let Err(e) = txn.put(r.key, val) {
                txn.abort();
                inner.alloc.free_now(r.block);
                return Err(e);
            }
            txn.commit_publish();
            Self::replay_words(inner, r)?;
            applied += 1;
            crate::failpoint::hit("replay-applied");
        }
        inner.header.log_seq().store(next, Ordering::Release);
        inner.header.mark_dirty();
        inner.commit_locked()?;
        crate::failpoint::hit("replay-committed");
        Ok(applied)
    }

    /// Replay data record `r` (holding every lock): its bytes into its block where its key
    /// names that block with the record's length (an earlier record of the replay put it
    /// there), and its patch's words. False, nothing changed, when the key names anything else
    /// (only a torn or foreign log could say so).
    fn replay_data(
        inner: &Inner,
        r: &crate::log_record::Record,
        d: crate::log_record::DataRange,
        bytes: &[u8],
    ) -> Result<bool> {
        let named = {
            let txn = Txn::begin(inner.cx(), false);
            let spot = txn.locate(r.key)?;
            txn.value_at(&spot)?
        };
        let end = usize::from(d.offset) + bytes.len();
        match named {
            Some(Val::Block { block, len, .. })
                if block == r.block && len == r.len && end <= len as usize => {}
            _ => return Ok(false),
        }
        let at = inner.layout.offset(r.block) + u64::from(d.offset);
        inner.region.copy_in(at, bytes);
        inner.latency.on_write(1);
        Self::replay_words(inner, r)?;
        Ok(true)
    }

    /// Set the words record `r` carries in its patched key's value (holding every lock).
    fn replay_words(inner: &Inner, r: &crate::log_record::Record) -> Result<()> {
        let words = &r.word[..usize::from(r.words)];
        if words.is_empty() {
            return Ok(());
        }
        Self::patch_locked(
            inner,
            r.patch_key,
            |_, p| {
                for (off, val) in words {
                    p.set(usize::from(*off), *val);
                }
            },
            true,
        )
        .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        recovered: bool,
        media: Box<dyn Media>,
        layout: Layout,
        header: Header,
        alloc: Allocator,
        facts: VolumeFacts,
        opts: &OpenOptions,
    ) -> Store {
        let latency = media.latency();
        let region = Region::new(media.base(), media.mapped_len());
        let buffer = u64::from(facts.buffer_bytes);
        let inner = Arc::new_cyclic(|me| Inner {
            media,
            region,
            layout,
            header,
            alloc,
            facts,
            latency,
            undo: Undo::new(region, layout),
            failed: AtomicBool::new(false),
            parts: Parts {
                region,
                layout,
                header,
                alloc,
                buffer,
            },
            recovered,
            locations: super::locations::Locations::for_volume(
                layout.max_blocks,
                layout.block_size,
            ),
            me: me.clone(),
            growing: AtomicU64::new(0),
            grow_thread: std::sync::Mutex::new(None),
            closing: AtomicBool::new(false),
        });
        let mut store = Store {
            inner,
            timer_stop: Arc::new(AtomicBool::new(false)),
            timer: None,
        };
        if let Some(every) = opts.commit_interval {
            store.start_commit_timer(every);
        }
        store
    }
}

/// Bytes of a new volume's intent log (see `log_record`): 262,144 records. Once it is full the
/// next sync commits, so its size sets how often writers synced after each write commit: fio
/// 4 KiB random writes with `fdatasync=1`, two jobs, alternated builds: a 1 MiB log 313-361k
/// IOPS, 8 MiB 424-557k, 32 MiB 526-560k (one job 202-277k, 247-328k, 285-353k).
const LOG_BYTES: u64 = 32 << 20;

/// Blocks of a new volume's intent log: [`LOG_BYTES`], but at most a 64th of `data_blocks`
/// (a small volume keeps its space) and at least one.
fn log_blocks_for(bs: u64, data_blocks: u64) -> u32 {
    (LOG_BYTES / bs).min(data_blocks / 64).max(1) as u32
}

impl CreateOptions {
    /// Bytes of data blocks that synced writes may take between two commits on a volume made
    /// with these options (on a file, whose size limit sets the log's size): each record of the
    /// intent log names a block of its own, which no one reuses before the commit that empties
    /// the log. A volume written with a sync after each write needs this much room beyond its
    /// data, or it grows (and backs new pages) while it is written. 0 for a size no layout fits.
    pub fn log_working_bytes(&self) -> u64 {
        let bs = u64::from(self.block_size.max(1));
        let Ok(layout) = Layout::new(self.block_size, self.size_limit_bytes / bs) else {
            return 0;
        };
        let log_blocks = log_blocks_for(bs, layout.max_blocks - layout.data_start);
        u64::from(log_blocks) * bs / crate::log_record::RECORD_BYTES as u64 * bs
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iris_media::SimMedia;

    use super::*;
    use crate::key::Key;

    fn boot(id: u128) -> OpenOptions {
        OpenOptions {
            boot_id: Some(id),
            commit_interval: None,
        }
    }

    /// Every value block of keys `(1, 0..n)` lies outside `log` (first, blocks).
    fn assert_values_outside(s: &Store, n: u64, (first, blocks): (u64, u32)) {
        for i in 0..n {
            let at = s
                .read(|v| {
                    Ok(match v.get_located(Key::new(1, i))? {
                        Some(crate::store::Located::Block(at)) => at.block(),
                        other => panic!("key {i}: {other:?}"),
                    })
                })
                .expect("read");
            assert!(
                !(first..first + u64::from(blocks)).contains(&at),
                "key {i} in the log's block {at}"
            );
        }
    }

    #[test]
    fn the_log_working_bytes_are_a_block_per_record_of_the_log_a_volume_gets() {
        for (bs, limit) in [(4096u32, 256u64 << 20), (4096, 16 << 20), (512, 64 << 20)] {
            let opts = CreateOptions {
                block_size: bs,
                size_limit_bytes: limit,
                initial_bytes: limit,
                ..CreateOptions::default()
            };
            let s = Store::create_on(Box::new(Arc::new(SimMedia::new(limit))), &opts, &boot(1))
                .expect("create");
            let records = s.stats().expect("stats").log_capacity;
            assert!(records > 0);
            assert_eq!(
                opts.log_working_bytes(),
                records * u64::from(bs),
                "{bs} {limit}"
            );
        }
        // The default log (32 MiB of 128-byte records) of a big volume: a gigabyte of blocks.
        let big = CreateOptions {
            size_limit_bytes: 64 << 30,
            ..CreateOptions::default()
        };
        assert_eq!(big.log_working_bytes(), 1 << 30);
    }

    #[test]
    fn a_new_volumes_intent_log_stays_in_use_through_commits_collection_and_power_loss() {
        let (sim, s) = crate::store::test_store_on_sim();
        let layout = s.inner.layout;
        let log = s.inner.header.log_area().expect("a new volume has a log");
        assert_eq!(log.0, layout.data_start);
        assert_eq!(
            log.1,
            log_blocks_for(4096, layout.max_blocks - layout.data_start)
        );
        for i in 0..500u64 {
            s.put_block(Key::new(1, i), 4096, |out| out.fill(i as u8))
                .expect("put");
        }
        s.commit().expect("commit");
        assert_values_outside(&s, 500, log);
        assert_eq!(s.collect_garbage().expect("collect"), 0);
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
        let (_, sb) = commit::read_superblocks(&s.inner.cx()).expect("superblocks");
        assert_eq!(
            sb.log,
            Some(LogArea {
                first: log.0,
                blocks: log.1,
                start: s.inner.header.log_start(),
            })
        );
        drop(s);

        // Another boot: the header is rebuilt from the superblock, the log with it.
        let again = SimMedia::from_image(&sim.working_image());
        let s = Store::open_on(Box::new(again), &boot(2)).expect("reopen");
        assert_eq!(s.inner.header.log_area(), Some(log));
        for b in log.0..log.0 + u64::from(log.1) {
            assert!(
                s.inner.alloc.is_used(b),
                "log block {b} free after recovery"
            );
        }
        for i in 500..1000u64 {
            s.put_block(Key::new(1, i), 4096, |out| out.fill(i as u8))
                .expect("put");
        }
        assert_values_outside(&s, 1000, log);
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
    }

    /// Stand for a synced write the way the write path will make one: fill a new block with
    /// `fill`, persist it, then write and persist the record naming it for `key` (with `words`
    /// set in `patch_key`'s value); the working tree is not changed (power loss follows).
    /// Returns the block.
    fn log_write(
        s: &Store,
        key: Key,
        fill: u8,
        patch_key: Key,
        words: &[(u16, u64)],
        tear: bool,
    ) -> u64 {
        use crate::log_record::{Record, MAX_WORDS, RECORD_BYTES};
        let inner = &*s.inner;
        let _g = inner.lock().expect("lock");
        let block = inner
            .alloc
            .alloc(0, inner.media.as_ref(), false)
            .expect("a block");
        let at = inner.layout.offset(block);
        inner.region.bytes_mut(at, inner.layout.bs()).fill(fill);
        inner.media.persist(at, inner.layout.bs()).expect("persist");
        let (first, blocks) = inner.header.log_area().expect("a log");
        let seq = inner.header.log_seq().fetch_add(1, Ordering::AcqRel);
        let mut word = [(0u16, 0u64); MAX_WORDS];
        word[..words.len()].copy_from_slice(words);
        let r = Record {
            seq,
            key,
            block,
            len: inner.layout.block_size,
            patch_key,
            word,
            words: words.len() as u8,
            data: None,
        };
        let mut bytes = r.encode();
        if tear {
            bytes[100] ^= 1;
        }
        let slot = seq % (u64::from(blocks) * inner.layout.bs() / RECORD_BYTES as u64);
        let off = inner.layout.offset(first) + slot * RECORD_BYTES as u64;
        inner.region.copy_in(off, &bytes);
        inner
            .media
            .persist(off, RECORD_BYTES as u64)
            .expect("persist");
        block
    }

    fn value(s: &Store, key: Key) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = s.get(key, &mut buf).expect("get").expect("present");
        buf.truncate(n);
        buf
    }

    #[test]
    fn power_loss_replays_the_logged_writes_the_last_commit_lacks_once() {
        let (sim, s) = crate::store::test_store_on_sim();
        let inode = Key::new(1, u64::MAX);
        s.put(inode, &[0u8; 32]).expect("inode");
        for i in 0..8u64 {
            s.put_block(Key::new(1, i), 4096, |out| out.fill(1))
                .expect("put");
        }
        s.commit().expect("commit");
        // Three synced writes after the commit; the third's record is torn (its writer never
        // returned); block 3 twice, the later one wins.
        log_write(&s, Key::new(1, 3), 2, inode, &[(8, 4096 * 8)], false);
        log_write(&s, Key::new(1, 5), 3, inode, &[], false);
        log_write(&s, Key::new(1, 6), 4, inode, &[(8, 1)], true);
        log_write(&s, Key::new(1, 3), 5, inode, &[(16, 77)], false);
        // Power loss: only what was persisted is left, on another boot.
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
        let image = sim.crash_image(&mut rng, 0.0);
        drop(s);
        let sim = Arc::new(SimMedia::from_image(&image));
        let s = Store::open_on(Box::new(sim.clone()), &boot(2)).expect("recover");
        let want = |i: u64| match i {
            3 => 5u8,
            5 => 3,
            _ => 1,
        };
        for i in 0..8u64 {
            assert!(
                value(&s, Key::new(1, i)).iter().all(|&b| b == want(i)),
                "block {i}"
            );
        }
        let ino = value(&s, inode);
        assert_eq!(
            u64::from_le_bytes(ino[8..16].try_into().expect("8 bytes")),
            4096 * 8
        );
        assert_eq!(
            u64::from_le_bytes(ino[16..24].try_into().expect("8 bytes")),
            77
        );
        let report = s.verify().expect("verify");
        assert_eq!(report.leaked_blocks, 0);
        // Its commit holds records 0..4 (the torn one's number included): replay starts at 4.
        assert_eq!(s.inner.header.log_start(), 4);
        drop(s);
        // Another power loss right away: the replay's commit moved the log start, so nothing
        // is applied twice, and the state holds.
        let image = sim.crash_image(&mut rng, 0.0);
        let s = Store::open_on(Box::new(SimMedia::from_image(&image)), &boot(3)).expect("again");
        for i in 0..8u64 {
            assert!(
                value(&s, Key::new(1, i)).iter().all(|&b| b == want(i)),
                "block {i}"
            );
        }
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
        assert_eq!(s.inner.header.log_start(), 4);
    }

    /// A volume whose allocator holds free a node its tree reaches (as a corrupt image can):
    /// the writer that replaces the node does not free it again (it could be handed out twice
    /// while the last commit reaches it); the volume refuses writes and commits, and reopened
    /// it holds the last commit.
    #[test]
    fn a_tree_naming_a_free_block_makes_writes_refused_not_the_block_freed_twice() {
        let (sim, s) = crate::store::test_store_on_sim();
        for i in 0..40u64 {
            s.put(Key::new(1, i), &i.to_le_bytes()).expect("put");
        }
        s.commit().expect("commit");
        let inner = &*s.inner;
        let root = inner.region.read_u64(inner.header.working_root_off());
        inner.alloc.free_now(root);
        // This put copies the root and releases the old one: the allocator holds it free.
        s.put(Key::new(1, 100), b"x")
            .expect("the put that found it lands");
        let refused = |r: Result<()>| matches!(r, Err(StoreError::Corrupt { .. }));
        assert!(refused(s.put(Key::new(1, 101), b"y").map(|_| ())));
        assert!(refused(s.delete(Key::new(1, 3)).map(|_| ())));
        assert!(refused(s.commit().map(|_| ())));
        assert!(!inner.alloc.is_used(root), "freed once, by the test");
        assert!(!inner.alloc.is_pending(root), "not freed a second time");
        drop(s);
        let s = Store::open_on(
            Box::new(SimMedia::from_image(&sim.working_image())),
            &boot(2),
        )
        .expect("reopen");
        for i in 0..40u64 {
            assert_eq!(
                s.get_with(Key::new(1, i), |v| v.to_vec()).expect("get"),
                Some(i.to_le_bytes().to_vec())
            );
        }
        assert_eq!(
            s.get_with(Key::new(1, 100), |v| v.to_vec()).expect("get"),
            None
        );
        s.put(Key::new(1, 101), b"y")
            .expect("writes again after the reopen");
    }

    /// A volume file copied while a writer held one of its locks (`cp` of a volume in use):
    /// its header is of this boot and names a holder that will never let go of the copy. An
    /// opener alone with the copy sets the locks up afresh and repairs, instead of waiting
    /// forever; the copy then reads and writes.
    #[test]
    fn a_copy_made_while_a_lock_was_held_opens_alone_without_waiting_for_it() {
        let dir = std::env::temp_dir();
        let name = |what: &str| dir.join(format!("iris-copy-{}-{what}.vol", std::process::id()));
        let (orig, copy) = (name("orig"), name("copy"));
        let _ = std::fs::remove_file(&orig);
        let _ = std::fs::remove_file(&copy);
        let opts = CreateOptions {
            size_limit_bytes: 64 << 20,
            initial_bytes: 4 << 20,
            ..CreateOptions::default()
        };
        let s = Store::create(&orig, &opts).expect("create");
        for i in 0..20u64 {
            s.put(Key::new(1, i), &i.to_le_bytes()).expect("put");
        }
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let s = &s;
            scope.spawn(move || {
                let _g = s.inner.lock().expect("lock");
                held_tx.send(()).expect("send");
                let _ = done_rx.recv();
            });
            held_rx.recv().expect("held");
            std::fs::copy(&orig, &copy).expect("copy");
            let (tx, rx) = std::sync::mpsc::channel();
            let copy_path = copy.clone();
            std::thread::spawn(move || {
                let r = Store::open(&copy_path, &OpenOptions::default()).map(|c| {
                    let put = c.put(Key::new(1, 100), b"x");
                    let got = c.get_with(Key::new(1, 7), |v| v.to_vec());
                    (put.is_ok(), got.ok().flatten())
                });
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
            let r = rx.recv_timeout(Duration::from_secs(20));
            done_tx.send(()).expect("release");
            let (put_ok, got) = r
                .expect("the copy opened within 20 s")
                .expect("the copy opened");
            assert!(put_ok);
            assert_eq!(got, Some(7u64.to_le_bytes().to_vec()));
        });
        drop(s);
        let _ = std::fs::remove_file(&orig);
        let _ = std::fs::remove_file(&copy);
    }

    /// Freeing a block that is not in use (already free, or metadata), as a forged or garbled
    /// working state may ask, frees nothing and makes the volume refuse writes.
    #[test]
    fn a_free_of_a_block_not_in_use_is_refused_and_frees_nothing() {
        for target in ["free", "metadata"] {
            let s = crate::store::test_store();
            s.put(Key::new(1, 1), b"v").expect("put");
            let inner = &*s.inner;
            let b = match target {
                "free" => (inner.layout.data_start..inner.layout.max_blocks)
                    .find(|b| !inner.alloc.is_used(*b))
                    .expect("a free block"),
                _ => 0,
            };
            let used = inner.header.used_blocks();
            inner.alloc.free_now(b);
            inner.alloc.defer_free(b);
            assert_eq!(inner.header.used_blocks(), used, "{target}");
            assert!(!inner.alloc.is_pending(b), "{target}");
            assert!(
                matches!(s.put(Key::new(1, 2), b"w"), Err(StoreError::Corrupt { .. })),
                "{target}"
            );
        }
    }
}
