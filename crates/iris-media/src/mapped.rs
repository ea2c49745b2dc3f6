//! A volume backed by a real file or device, mapped `MAP_SHARED` once for its whole size limit.
//! A growable file is extended with `ftruncate` under the same mapping, so every process that maps
//! it sees the new space without remapping.

use std::fs::{File, OpenOptions};
use std::mem::ManuallyDrop;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::{AsRawFd, FromRawFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::lock::{self, LockMode};
use crate::mapping::Mapping;
use crate::own_fd::OwnFd;
use crate::{LatencyModel, Media, MediaError};

/// What backs a mapped volume; decides how `persist` reaches stable media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaKind {
    /// A regular file (on disk or in a RAM drive): `msync(MS_SYNC)`.
    File,
    /// A block device of fixed size: `msync(MS_SYNC)`.
    BlockDevice,
    /// A DAX mapping of persistent memory: cache-line write-back and a store fence.
    Dax,
    /// A file in a RAM file system (tmpfs, e.g. /dev/shm): memory is the medium, nothing to
    /// write back; persist is a store fence (ordering only).
    Ram,
}

/// A volume mapped from a file or device.
pub struct MappedMedia {
    path: PathBuf,
    /// The volume's open file, kept out of the program's way (see `own_fd`).
    fd: OwnFd,
    map: Mapping,
    kind: MediaKind,
    latency: LatencyModel,
    /// Bytes from the start that `settle_pages` has already asked to be huge pages.
    settled: AtomicU64,
    /// The length up to which this process's growths found or made every byte backed.
    verified: AtomicU64,
    /// The length the last growth asked the file to reach ahead of need (see
    /// [`Media::grow_ahead`]); 0 when nothing is asked.
    ahead: AtomicU64,
    /// The id of the process whose thread is in [`Media::grow_ahead`] now; 0 when none is.
    ahead_running: AtomicU32,
}

/// How far past a growth's end the file is backed ahead of need: at least the store's largest
/// growth step, so that each growth finds its space ready.
const GROW_AHEAD_BYTES: u64 = 64 << 20;
/// How long a growth waits at most for this process's growth ahead to finish the space it is
/// backing (see [`MappedMedia::wait_for_grow_ahead`]): 64 MiB took ~5-15 ms here.
const GROW_AHEAD_WAIT: Duration = Duration::from_millis(250);

impl MappedMedia {
    /// Open (or, with `create`, create) the volume at `path`, lock it in `mode`, and map
    /// `map_len_bytes` of it (the volume's size limit; for a block device, its size). A regular
    /// file shorter than `min_len_bytes` is extended (sparsely) to it.
    pub fn open(
        path: &Path,
        create: bool,
        mode: LockMode,
        map_len_bytes: u64,
        min_len_bytes: u64,
    ) -> Result<Self, MediaError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(path)
            .map_err(|source| MediaError::Io {
                op: "open",
                path: path.to_path_buf(),
                source,
            })?;
        lock::lock(&file, path, mode)?;
        let meta = file.metadata().map_err(|source| MediaError::Io {
            op: "stat",
            path: path.to_path_buf(),
            source,
        })?;
        let kind = if meta.file_type().is_block_device() {
            MediaKind::BlockDevice
        } else if std::env::var_os("IRIS_DAX").is_some() {
            MediaKind::Dax
        } else if on_tmpfs(&file) {
            MediaKind::Ram
        } else {
            MediaKind::File
        };
        let map_len = if kind == MediaKind::BlockDevice {
            device_size(&file, path)?
        } else {
            map_len_bytes.max(min_len_bytes)
        };
        if map_len == 0 {
            return Err(MediaError::Invalid(format!(
                "{}: cannot map an empty volume",
                path.display()
            )));
        }
        let map_len_usize = usize::try_from(map_len)
            .map_err(|_| MediaError::Invalid(format!("volume size {map_len} too large")))?;
        let map = Mapping::new(&file, map_len_usize).map_err(|source| MediaError::Io {
            op: "mmap",
            path: path.to_path_buf(),
            source,
        })?;
        let fd = OwnFd::adopt(file.into_raw_fd()).ok_or_else(|| MediaError::Io {
            op: "fstat",
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        })?;
        let media = MappedMedia {
            path: path.to_path_buf(),
            fd,
            map,
            kind,
            latency: LatencyModel::from_env(),
            settled: AtomicU64::new(0),
            verified: AtomicU64::new(0),
            ahead: AtomicU64::new(0),
            ahead_running: AtomicU32::new(0),
        };
        let backed = media.backed_len();
        if kind != MediaKind::BlockDevice && backed < min_len_bytes {
            if kind == MediaKind::Ram {
                media.seed_huge_pages(backed, min_len_bytes);
            }
            media.grow(min_len_bytes)?;
        }
        Ok(media)
    }

    /// The volume's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What backs the volume.
    pub fn kind(&self) -> MediaKind {
        self.kind
    }

    /// Replace the latency model (benchmarks).
    pub fn set_latency(&mut self, latency: LatencyModel) {
        self.latency = latency;
    }

    /// Take the advisory lock in another mode (e.g. downgrade to shared after recovery).
    pub fn relock(&self, mode: LockMode) -> Result<(), MediaError> {
        lock::lock(&*self.file("flock")?, &self.path, mode)
    }

    /// The volume's open file, borrowed for one call (its number can move between calls, see
    /// `own_fd`); an error naming `op` if it was lost (closed behind the interposer's back).
    fn file(&self, op: &'static str) -> Result<ManuallyDrop<File>, MediaError> {
        let fd = self.fd.checked_raw();
        if fd < 0 {
            return Err(MediaError::Io {
                op,
                path: self.path.clone(),
                source: std::io::Error::from_raw_os_error(libc::EBADF),
            });
        }
        // SAFETY: `fd` names the volume's open file, which `self.fd` owns and keeps open;
        // ManuallyDrop keeps this borrowed `File` from closing it.
        Ok(ManuallyDrop::new(unsafe { File::from_raw_fd(fd) }))
    }

    /// The length of the volume's file (0 if it cannot be read).
    fn file_len(&self) -> u64 {
        self.file("fstat")
            .ok()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len())
    }

    /// Extend the file to `len` bytes with storage behind every new byte (`fallocate`), so a
    /// full file system or RAM drive answers ENOSPC here, where the store can report it, and not
    /// with SIGBUS when the new space is first touched through the mapping. File systems without
    /// `fallocate` are extended sparsely.
    fn allocate(&self, current: u64, len: u64) -> Result<(), MediaError> {
        self.allocate_with(current, len, true)
    }

    /// [`MappedMedia::allocate`]; without `sparse_fallback`, a file system without `fallocate`
    /// is an error (the caller holds no lock, and `ftruncate` to a length another growth has
    /// passed meanwhile would shrink the file).
    fn allocate_with(
        &self,
        current: u64,
        len: u64,
        sparse_fallback: bool,
    ) -> Result<(), MediaError> {
        let (Ok(from), Ok(add)) = (
            libc::off_t::try_from(current),
            libc::off_t::try_from(len - current),
        ) else {
            return Err(MediaError::Invalid(format!("volume size {len} too large")));
        };
        let err = loop {
            // SAFETY: fallocate only reads its integer arguments; the descriptor is the open
            // file.
            if unsafe { libc::fallocate(self.fd.checked_raw(), 0, from, add) } == 0 {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            // A RAM drive gives up a long allocation when a signal arrives: go on.
            if err.raw_os_error() != Some(libc::EINTR) {
                break err;
            }
        };
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) if sparse_fallback => self
                .file("ftruncate")?
                .set_len(len)
                .map_err(|source| MediaError::Io {
                    op: "ftruncate",
                    path: self.path.clone(),
                    source,
                }),
            _ => Err(MediaError::Io {
                op: "fallocate",
                path: self.path.clone(),
                source: err,
            }),
        }
    }

    /// Give the new space `[from, to)` of a RAM drive huge pages before it is allocated: one
    /// small page per 2 MiB (`fallocate`, which never shrinks the file and writes no byte
    /// another process may use), then `MADV_COLLAPSE`, which makes each such chunk a huge page
    /// by copying that one page and zeroing the rest. Collapsing space already allocated in
    /// small pages copies all 512 of them: 64 MiB took ~60 ms that way (allocate, populate,
    /// collapse), ~35 ms in small pages alone, ~4 ms this way. (A chunk with no page at all is
    /// refused.) A hint: what it leaves, the allocation that follows backs in small pages.
    /// Until that allocation is done (or if it fails for want of room), the file's length
    /// covers holes: [`Media::grow`] allocates the ones under the space it gives.
    fn seed_huge_pages(&self, from: u64, to: u64) {
        let huge = crate::mapping::HUGE_PAGE as u64;
        let start = from.div_ceil(huge) * huge;
        let end = to.min(self.mapped_len()) / huge * huge;
        if start >= end {
            return;
        }
        let fd = self.fd.checked_raw();
        let mut at = start;
        while at < end {
            // The chunk's last page: the file's length then covers the whole chunk, which
            // the collapse requires.
            let Ok(off) = libc::off_t::try_from(at + huge - 4096) else {
                return;
            };
            // SAFETY: fallocate reads only its integer arguments.
            if unsafe { libc::fallocate(fd, 0, off, 4096) } != 0 {
                return;
            }
            at += huge;
        }
        if let (Ok(s), Ok(e)) = (usize::try_from(start), usize::try_from(end)) {
            let _ = self.map.collapse(s, e);
        }
    }

    /// Wait (at most [`GROW_AHEAD_WAIT`]) while this process's thread is in
    /// [`Media::grow_ahead`]. A child forked meanwhile has no such thread: the id it reads is
    /// its parent's, not its own.
    fn wait_for_grow_ahead(&self) {
        let me = std::process::id();
        let since = Instant::now();
        while self.ahead_running.load(Ordering::Acquire) == me && since.elapsed() < GROW_AHEAD_WAIT
        {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Whether some byte under the file's length has no storage behind it on a RAM drive (a
    /// hole left by [`MappedMedia::seed_huge_pages`], see there). One fstat.
    fn has_holes(&self) -> bool {
        if self.kind != MediaKind::Ram {
            return false;
        }
        // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes the struct passed.
        if unsafe { libc::fstat(self.fd.checked_raw(), &mut st) } != 0 {
            return false;
        }
        let allocated = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
        allocated < u64::try_from(st.st_size).unwrap_or(0)
    }

    /// Map the pages of `[from, to)` into this process in one call (`MADV_POPULATE_WRITE`):
    /// touching a page of a RAM drive for the first time otherwise costs a page fault each,
    /// several microseconds on a virtual machine. Only a hint: kernels before 5.14 refuse it.
    fn populate(&self, from: u64, to: u64) {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: sysconf reads a constant of the system.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = from & !(page.max(1) - 1);
        let end = to.min(self.mapped_len());
        let (Ok(start_usize), Ok(len)) = (usize::try_from(start), usize::try_from(end - start))
        else {
            return;
        };
        // SAFETY: `[start, end)` lies inside the mapping (end <= mapped_len), and the file now
        // backs it (allocate succeeded), so populating it cannot fault past the end of the file;
        // madvise changes no byte.
        unsafe {
            libc::madvise(
                self.base().add(start_usize).cast(),
                len,
                MADV_POPULATE_WRITE,
            );
        }
    }
}

/// Whether `file` lives on tmpfs (statfs magic TMPFS_MAGIC).
fn on_tmpfs(file: &File) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // SAFETY: all-zero is a valid statfs; fstatfs fills it for a valid descriptor.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer refers to a live local.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    rc == 0 && st.f_type as i64 == TMPFS_MAGIC
}

/// Size of a block device in bytes (BLKGETSIZE64).
fn device_size(file: &File, path: &Path) -> Result<u64, MediaError> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at a live local.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(MediaError::last_os("BLKGETSIZE64", path));
    }
    Ok(size)
}

impl Media for MappedMedia {
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    fn mapped_len(&self) -> u64 {
        self.map.len() as u64
    }

    fn backed_len(&self) -> u64 {
        match self.kind {
            MediaKind::BlockDevice => self.mapped_len(),
            _ => self.file_len().min(self.mapped_len()),
        }
    }

    fn grow(&self, len_bytes: u64) -> Result<(), MediaError> {
        if len_bytes > self.mapped_len() {
            return Err(MediaError::GrowLimit {
                wanted_bytes: len_bytes,
                limit_bytes: self.mapped_len(),
            });
        }
        if self.kind == MediaKind::BlockDevice {
            return Ok(());
        }
        // Holes under the length (see `seed_huge_pages`) can only lie above what this process
        // saw backed before: they are allocated from there below, where a lack of room can be
        // reported. If this process's growth ahead is backing them now, let it finish first:
        // allocating beside it backs the space in small pages (its collapse fails with
        // EAGAIN), which the commit timer later copies into huge pages (~15 % of a 512 B
        // write benchmark's samples here).
        if self.kind == MediaKind::Ram && self.has_holes() {
            self.wait_for_grow_ahead();
        }
        // Several processes may grow at once: only ever extend, never shrink.
        let current = self.file_len();
        // The next growth's space, ready before it is needed (see `Media::grow_ahead`).
        let ahead = len_bytes
            .saturating_add(GROW_AHEAD_BYTES)
            .min(self.mapped_len());
        if ahead > current.max(len_bytes) {
            self.ahead.fetch_max(ahead, Ordering::AcqRel);
        }
        let from = if self.has_holes() {
            self.verified.load(Ordering::Acquire).min(current)
        } else {
            current
        };
        if from < len_bytes {
            self.allocate(from, len_bytes)?;
        }
        if current < len_bytes && self.kind == MediaKind::Ram {
            self.populate(current, len_bytes);
        }
        self.verified.fetch_max(len_bytes, Ordering::AcqRel);
        Ok(())
    }

    fn wants_grow_ahead(&self) -> bool {
        self.ahead.load(Ordering::Relaxed) != 0
    }

    fn grow_ahead(&self) {
        let to = self.ahead.swap(0, Ordering::AcqRel);
        if to == 0 || self.kind == MediaKind::BlockDevice {
            return;
        }
        let current = self.file_len();
        if current >= to {
            return;
        }
        self.ahead_running
            .store(std::process::id(), Ordering::Release);
        // (A failure, such as no room, is the growth's to meet and report. Only `fallocate`,
        // which never shrinks: this runs under no lock.)
        if self.kind == MediaKind::Ram {
            // Huge pages too, in this thread (no lock held), so that the processes that use
            // the space do not each start on it in their commit timers.
            self.seed_huge_pages(current, to);
        }
        if self.allocate_with(current, to, false).is_ok() && self.kind == MediaKind::Ram {
            self.populate(current, to);
        }
        self.ahead_running.store(0, Ordering::Release);
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        if len == 0 {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(self.mapped_len());
        match self.kind {
            MediaKind::Ram => {
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            MediaKind::Dax => {
                crate::mapped::flush_cache_lines(self.base(), offset, end);
                Ok(())
            }
            MediaKind::File | MediaKind::BlockDevice => {
                let page = 4096u64;
                let start = offset / page * page;
                let (Ok(start_usize), Ok(len_usize)) =
                    (usize::try_from(start), usize::try_from(end - start))
                else {
                    return Err(MediaError::Invalid("persist range too large".into()));
                };
                self.map
                    .flush_range(start_usize, len_usize)
                    .map_err(|source| MediaError::Io {
                        op: "msync",
                        path: self.path.clone(),
                        source,
                    })
            }
        }
    }

    fn latency(&self) -> LatencyModel {
        self.latency
    }

    fn share(&self) -> Result<(), MediaError> {
        self.relock(LockMode::Shared)
    }

    /// A RAM drive's backed bytes become huge pages (`Mapping::collapse`), from where the last
    /// call stopped: random access then misses the TLB far less (fio 512 B random writes on a
    /// 128 MiB file: 665-769k -> 750-965k IOPS). The page cache is shared, so the first
    /// process to do it does it for all; later calls find the pages huge and return quickly.
    fn settle_pages(&self) {
        if self.kind != MediaKind::Ram {
            return;
        }
        let huge = crate::mapping::HUGE_PAGE as u64;
        let from = self.settled.load(Ordering::Relaxed);
        let to = self.backed_len() / huge * huge;
        if to <= from {
            return;
        }
        let (Ok(from_usize), Ok(to_usize)) = (usize::try_from(from), usize::try_from(to)) else {
            return;
        };
        // A hint: a refusal leaves the small pages. No huge page free now (EAGAIN, ENOMEM):
        // the next call tries again; refused for good (an old kernel, huge pages denied): not.
        let transient = matches!(
            self.map.collapse(from_usize, to_usize),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM))
        );
        if !transient {
            self.settled.fetch_max(to, Ordering::Relaxed);
        }
    }
}

/// Write back every cache line of `[offset, end)` and fence, for DAX persistent memory.
fn flush_cache_lines(base: *mut u8, offset: u64, end: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let line = 64u64;
        let mut at = offset / line * line;
        while at < end {
            // SAFETY: `at` < end <= mapped_len, so the address lies inside the live mapping;
            // clflush only writes the line back, it does not change memory contents.
            unsafe { core::arch::x86_64::_mm_clflush(base.add(at as usize)) };
            at += line;
        }
        // SAFETY: a store fence has no memory operands.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (base, offset, end);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume file in /dev/shm (a RAM drive), removed when dropped.
    struct Scratch(PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    const MIB: u64 = 1 << 20;

    /// A new volume `name` in /dev/shm (a RAM drive) of `initial` bytes, mapped up to 256 MiB;
    /// the file goes when the guard does.
    fn ram_media(name: &str, initial: u64) -> (Scratch, MappedMedia) {
        let path = Scratch(PathBuf::from(format!(
            "/dev/shm/iris-media-{name}-{}",
            std::process::id()
        )));
        let m = MappedMedia::open(&path.0, true, LockMode::Exclusive, 256 * MIB, initial)
            .expect("open");
        (path, m)
    }

    /// Lengthen `m`'s file to `len` without backing it, as a growth ahead leaves it midway.
    fn extend_sparsely(m: &MappedMedia, len: u64) {
        m.file("ftruncate")
            .expect("file")
            .set_len(len)
            .expect("extend sparsely");
    }

    #[test]
    fn a_growth_has_the_next_ones_space_backed_ahead_of_need() {
        let (_path, m) = ram_media("ahead", 4 * MIB);
        // Opening grew the file to its first 4 MiB and asked for the next space ahead.
        assert!(m.wants_grow_ahead());
        m.grow_ahead();
        assert!(!m.wants_grow_ahead(), "done");
        assert_eq!(m.backed_len(), 4 * MIB + GROW_AHEAD_BYTES);
        // A growth inside that space finds it backed, and asks for more ahead.
        m.grow(20 * MIB).expect("grow");
        assert_eq!(m.backed_len(), 4 * MIB + GROW_AHEAD_BYTES, "nothing to add");
        assert!(m.wants_grow_ahead());
        m.grow_ahead();
        assert_eq!(m.backed_len(), 20 * MIB + GROW_AHEAD_BYTES);
        // Never past the mapping: the last growth asks for nothing it cannot hold.
        m.grow(250 * MIB).expect("grow");
        assert_eq!(m.backed_len(), 250 * MIB);
        m.grow_ahead();
        assert_eq!(m.backed_len(), 256 * MIB);
        m.grow(256 * MIB).expect("grow to the limit");
        assert!(!m.wants_grow_ahead());
        // The bytes ahead are the file's own: written through the mapping, read back.
        // SAFETY (test): inside the mapping and backed (checked above).
        unsafe { *m.base().add((255 * MIB) as usize) = 7 };
        let mut b = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(
            &*m.file("pread").expect("file"),
            &mut b,
            255 * MIB,
        )
        .expect("read");
        assert_eq!(b[0], 7);
    }

    /// Bytes with storage behind them in the file, and its length.
    fn allocated_and_len(m: &MappedMedia) -> (u64, u64) {
        let meta = m.file("fstat").expect("file").metadata().expect("fstat");
        (
            std::os::unix::fs::MetadataExt::blocks(&meta) * 512,
            meta.len(),
        )
    }

    #[test]
    fn space_backed_ahead_with_huge_pages_has_no_holes_and_reads_zero() {
        // A start off the 2 MiB grid, so the growth ahead has a partial first chunk.
        let (_path, m) = ram_media("seed", 3 * MIB);
        m.grow_ahead();
        let (allocated, len) = allocated_and_len(&m);
        assert_eq!(len, 3 * MIB + GROW_AHEAD_BYTES);
        assert!(
            allocated >= len,
            "holes: {allocated} of {len} bytes allocated"
        );
        // SAFETY (test): the whole backed length lies inside the mapping.
        let bytes = unsafe { std::slice::from_raw_parts(m.base(), len as usize) };
        assert!(bytes.iter().all(|&b| b == 0), "new space must read zero");
    }

    #[test]
    fn a_growth_fills_holes_left_under_the_files_length() {
        let (_path, m) = ram_media("hole", 4 * MIB);
        // What a growth ahead leaves when its allocation fails for want of room: the length
        // extended over space with nothing behind it.
        extend_sparsely(&m, 40 * MIB);
        assert!(m.has_holes());
        m.grow(24 * MIB).expect("grow");
        let (allocated, _) = allocated_and_len(&m);
        assert!(
            (24 * MIB..40 * MIB).contains(&allocated),
            "{allocated} bytes allocated: the growth's space, not yet the rest"
        );
        m.grow(40 * MIB).expect("grow");
        assert!(!m.has_holes());
        let (allocated, len) = allocated_and_len(&m);
        assert!(allocated >= len, "{allocated} of {len}");
    }

    #[test]
    fn a_growth_waits_for_this_processs_growth_ahead_instead_of_allocating_beside_it() {
        let (_path, m) = ram_media("wait", 4 * MIB);
        // A growth ahead of [4, 40) MiB in progress in this process: the length is extended,
        // the space not yet allocated.
        extend_sparsely(&m, 40 * MIB);
        m.ahead_running.store(std::process::id(), Ordering::Release);
        let started = Instant::now();
        let finished = std::thread::scope(|s| {
            let ahead = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                m.allocate_with(4 * MIB, 40 * MIB, false)
                    .expect("allocate ahead");
                m.ahead_running.store(0, Ordering::Release);
                started.elapsed()
            });
            m.grow(24 * MIB).expect("grow");
            let waited = started.elapsed();
            let done = ahead.join().expect("the growth ahead");
            assert!(
                waited >= done,
                "the growth returned after {waited:?}, before the growth ahead ended at {done:?}"
            );
            done
        });
        assert!(finished < GROW_AHEAD_WAIT);
        assert!(!m.has_holes());
        // Another process's growth ahead (the id of a parent, seen by a forked child) is not
        // waited for.
        extend_sparsely(&m, 60 * MIB);
        m.ahead_running
            .store(std::process::id() + 1, Ordering::Release);
        let started = Instant::now();
        m.grow(48 * MIB).expect("grow");
        assert!(started.elapsed() < Duration::from_millis(200));
    }
}
