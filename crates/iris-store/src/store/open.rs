//! Creating and opening a volume: the geometry checked, the superblocks chosen (a torn newest
//! falls back to the older), the volume lock taken, and, after a crash, the free map rebuilt
//! from the committed trees (`recover`) before the store is assembled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iris_media::{LockMode, MappedMedia, Media, MediaError};

use crate::allocator::Allocator;
use crate::commit::{self, VolumeFacts};
use crate::error::{Result, StoreError};
use crate::header::Header;
use crate::layout::{Layout, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use crate::recovery::{self, Marks, Walk};
use crate::region::Region;
use crate::superblock::{LogArea, Superblock, SUPER_BYTES};
use crate::tree::{max_inline_for, Ctx, Parts};
use crate::undo::Undo;
use crate::volume_lock;

use super::{kernel_boot_id, CreateOptions, Inner, OpenOptions, Store};

/// Rebuild the working state from the newest superblock (first open after a reboot or power
/// loss). Verifies every committed node on the way.
fn recover(
    media: &dyn Media,
    region: Region,
    layout: Layout,
    header: Header,
    alloc: Allocator,
    sb: &Superblock,
    boot_id: u128,
) -> Result<()> {
    if sb.backed_blocks > media.backed_len() / layout.bs() {
        media.grow(layout.offset(sb.backed_blocks))?;
    }
    header.clear_magic();
    region
        .bytes_mut(layout.header_off, crate::layout::HEADER_BYTES)
        .fill(0);
    volume_lock::init(&header)?;
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
    header.stamp(boot_id);
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
        match MappedMedia::open(path, false, LockMode::ExclusiveIfFree, map_len, 0) {
            Ok(media) => {
                let store = Store::open_on(Box::new(media), opts)?;
                store.inner.media.share()?;
                Ok(store)
            }
            Err(MediaError::InUse { .. }) => {
                // Others have it open (shared), or someone is recovering it: join as shared,
                // waiting a little for a recovering opener to finish.
                let deadline = Instant::now() + Duration::from_secs(3);
                loop {
                    match MappedMedia::open(path, false, LockMode::Shared, map_len, 0) {
                        Ok(media) => return Store::open_in(Box::new(media), opts, false),
                        Err(MediaError::InUse { .. }) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Open the volume at `path` for this opener only, as offline work needs it (a rollback
    /// under running programs would pull their files from under them): `InUse`, naming the
    /// processes that have it open, if any does. Held so until the store is dropped.
    pub fn open_alone(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let (block_size, max_blocks) = peek_geometry(path)?;
        let map_len = max_blocks * u64::from(block_size);
        let media = MappedMedia::open(path, false, LockMode::Exclusive, map_len, 0)?;
        Store::open_on(Box::new(media), opts)
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
        volume_lock::init(&header)?;
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
        Store::open_in(media, opts, true)
    }

    /// [`Store::open_on`]; without `may_recover` (other processes have the volume open), a
    /// working header this opener does not trust is an error, never rebuilt under them.
    pub(super) fn open_in(
        media: Box<dyn Media>,
        opts: &OpenOptions,
        may_recover: bool,
    ) -> Result<Store> {
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
        } else if may_recover {
            recover(media.as_ref(), region, layout, header, alloc, &sb, boot_id)?;
        } else {
            // Live processes share this header: rebuilding it would pull their state from
            // under them. Theirs is a layout this build does not know (another Iris build).
            return Err(StoreError::Invalid(
                "volume is open by processes whose shared state this build cannot read \
                 (another Iris build?); close them, or run the same build"
                    .into(),
            ));
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
            locations: super::locations::Locations::for_volume(layout.max_blocks),
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

/// Bytes of a new volume's intent log (see `log_record`): 8192 records.
const LOG_BYTES: u64 = 1 << 20;

/// Blocks of a new volume's intent log: [`LOG_BYTES`], but at most a 64th of `data_blocks`
/// (a small volume keeps its space) and at least one.
fn log_blocks_for(bs: u64, data_blocks: u64) -> u32 {
    (LOG_BYTES / bs).min(data_blocks / 64).max(1) as u32
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
    fn a_new_volumes_intent_log_stays_in_use_through_commits_collection_and_power_loss() {
        let sim = Arc::new(SimMedia::new(16 << 20));
        let opts = CreateOptions {
            block_size: 4096,
            size_limit_bytes: 16 << 20,
            initial_bytes: 16 << 20,
            inline_max: None,
            buffer_bytes: 0,
        };
        let s = Store::create_on(Box::new(sim.clone()), &opts, &boot(1)).expect("create");
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
}
