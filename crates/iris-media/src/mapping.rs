//! A `MAP_SHARED` mapping of a file or device placed at a 2 MiB-aligned address, so that the
//! kernel can map a RAM drive's huge pages with one page-table entry each (file offset 0 must sit
//! on a huge-page boundary for that). memmap2 lets the kernel choose the address, and tmpfs
//! mounted `huge=never` does not align it.

use std::fs::File;
use std::os::unix::io::AsRawFd;

/// Size and alignment of an x86-64 (and arm64 4 KiB-granule) huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// A shared mapping of `len` bytes of a file from offset 0, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; the pointer is never freed
// before drop, and all access to the bytes goes through raw pointers whose users synchronize.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out the base pointer and runs msync/madvise.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `file` read-write and shared, at a 2 MiB-aligned address.
    pub fn new(file: &File, len: usize) -> std::io::Result<Mapping> {
        let ptr = map_aligned(file.as_raw_fd(), len, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        Ok(Mapping { ptr, len })
    }

    /// Start of the mapping.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `new` refuses a zero length).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `msync(MS_SYNC)` of `[offset, offset + len)` (offset page-aligned, range inside).
    pub(crate) fn flush_range(&self, offset: usize, len: usize) -> std::io::Result<()> {
        debug_assert!(offset.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: the range lies inside the live mapping; msync changes no byte.
        let rc = unsafe { libc::msync(self.ptr.add(offset).cast(), len, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Ask the kernel to back the whole huge pages inside `[from, to)` with huge pages
    /// (`MADV_COLLAPSE`, Linux 6.1; tmpfs does it whatever its `huge=` mount option, unless
    /// huge pages are denied system-wide). Fewer TLB misses on random access; the bytes stay the
    /// same, also under concurrent writers. Only a hint, which callers may ignore: older kernels
    /// and other file systems refuse it (EINVAL), and it fails when no huge page can be had
    /// (EAGAIN, ENOMEM). The range must be backed by the file.
    pub fn collapse(&self, from: usize, to: usize) -> std::io::Result<()> {
        const MADV_COLLAPSE: libc::c_int = 25;
        let start = from.saturating_add(HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
        let end = to.min(self.len) & !(HUGE_PAGE - 1);
        if start >= end {
            return Ok(());
        }
        // SAFETY: `[start, end)` lies inside the live mapping and is backed by the file (the
        // caller's promise), so collapsing it cannot fault; the bytes do not change.
        let rc = unsafe { libc::madvise(self.ptr.add(start).cast(), end - start, MADV_COLLAPSE) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Map `len` bytes of the file open as `fd` from offset 0, `MAP_SHARED` with `prot` and the
/// extra `flags` (e.g. `MAP_NORESERVE`), at a 2 MiB-aligned address; the caller owns the
/// mapping and unmaps it with `munmap(ptr, len)`.
pub fn map_aligned(
    fd: libc::c_int,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
) -> std::io::Result<*mut u8> {
    let span = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
    // Reserve address space with room to align, then map the file over its aligned part.
    // SAFETY: an anonymous PROT_NONE reservation touches no existing mapping.
    let reserved = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if reserved == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let start = reserved as usize;
    let aligned = (start + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
    // SAFETY: `[aligned, aligned + len)` lies inside the reservation made above, which this
    // function owns, so MAP_FIXED replaces nothing but it.
    let ptr = unsafe {
        libc::mmap(
            aligned as *mut libc::c_void,
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED | flags,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        let err = std::io::Error::last_os_error();
        // SAFETY: the whole reservation is still ours.
        unsafe { libc::munmap(reserved, span) };
        return Err(err);
    }
    // Hand back the unused head and tail of the reservation.
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: both ranges are parts of the reservation outside the file mapping.
    unsafe {
        if head > 0 {
            libc::munmap(reserved, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    Ok(ptr.cast())
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing uses it after drop.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A file in /dev/shm of `len` bytes, every byte allocated, removed on drop.
    struct ShmFile {
        path: PathBuf,
        file: File,
    }

    impl ShmFile {
        fn new(name: &str, len: u64) -> ShmFile {
            let path = PathBuf::from(format!(
                "/dev/shm/iris-mapping-test-{}-{name}",
                std::process::id()
            ));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .expect("create a file in /dev/shm");
            file.set_len(len).expect("size it");
            ShmFile { path, file }
        }
    }

    impl Drop for ShmFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Kilobytes of the mapping at `addr` mapped by huge page-table entries (smaps).
    fn pmd_mapped_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read smaps");
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("ShmemPmdMapped:") {
                    let kib = v.trim().trim_end_matches("kB").trim();
                    return kib.parse().expect("a number of kB");
                }
            }
        }
        0
    }

    /// Whether this kernel may refuse huge pages for tmpfs: denied system-wide, or no
    /// transparent huge pages at all.
    fn huge_pages_denied() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            .map_or(true, |s| s.contains("[deny]"))
    }

    fn bytes_mut(m: &mut Mapping) -> &mut [u8] {
        // SAFETY: the test's own mapping of a file only it uses, fully backed (set_len on
        // tmpfs), live while `m` is, and borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr(), m.len()) }
    }

    fn bytes(m: &Mapping) -> &[u8] {
        // SAFETY: as above; nothing writes to it while the shared borrow lasts.
        unsafe { std::slice::from_raw_parts(m.as_mut_ptr(), m.len()) }
    }

    #[test]
    fn a_mapping_starts_on_a_huge_page_boundary_and_maps_the_file_from_its_start() {
        let f = ShmFile::new("align", 3 << 20);
        std::fs::write(&f.path, b"the first bytes").expect("write through the file");
        for _ in 0..8 {
            let m = Mapping::new(&f.file, 3 << 20).expect("map");
            assert_eq!(m.as_mut_ptr() as usize % HUGE_PAGE, 0);
            assert_eq!(&bytes(&m)[..15], b"the first bytes");
        }
    }

    #[test]
    fn collapsing_keeps_every_byte_and_maps_huge_pages_where_the_kernel_allows() {
        let len = 8 << 20;
        let f = ShmFile::new("collapse", len as u64);
        let mut m = Mapping::new(&f.file, len).expect("map");
        for (i, x) in bytes_mut(&mut m).iter_mut().enumerate() {
            *x = (i * 7 + i / 4096) as u8;
        }
        match m.collapse(0, len) {
            Ok(()) => assert_eq!(pmd_mapped_kib(m.as_mut_ptr() as usize), 8 << 10),
            Err(e) => {
                let raw = e.raw_os_error();
                assert!(
                    matches!(raw, Some(libc::EAGAIN) | Some(libc::ENOMEM))
                        || (raw == Some(libc::EINVAL) && huge_pages_denied()),
                    "collapse refused: {e}"
                );
            }
        }
        assert!(bytes(&m)
            .iter()
            .enumerate()
            .all(|(i, x)| *x == (i * 7 + i / 4096) as u8));
        // A second mapping of the same file sees the same bytes (the page cache is shared).
        let m2 = Mapping::new(&f.file, len).expect("map again");
        assert!(bytes(&m2) == bytes(&m));
    }

    #[test]
    fn collapsing_under_a_writer_loses_none_of_its_stores() {
        let len = 4 << 20;
        let f = ShmFile::new("race", len as u64);
        let m = Mapping::new(&f.file, len).expect("map");
        let words = len / 8;
        let stop = AtomicBool::new(false);
        let rounds = AtomicU64::new(0);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let base = m.as_mut_ptr().cast::<AtomicU64>();
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) || round < 2 {
                    round += 1;
                    for w in (0..words).step_by(509) {
                        // SAFETY: `w` < words: inside the mapping, 8-aligned (the mapping is).
                        unsafe { (*base.add(w)).store(round << 32 | w as u64, Ordering::Relaxed) };
                    }
                }
                rounds.store(round, Ordering::Relaxed);
            });
            for _ in 0..3 {
                let _ = m.collapse(0, len);
            }
            stop.store(true, Ordering::Relaxed);
            writer.join().expect("writer");
        });
        let last = rounds.load(Ordering::Relaxed);
        let base = m.as_mut_ptr().cast::<AtomicU64>();
        for w in (0..words).step_by(509) {
            // SAFETY: as in the writer; it has finished.
            let v = unsafe { (*base.add(w)).load(Ordering::Relaxed) };
            assert_eq!(v, last << 32 | w as u64, "word {w}");
        }
    }
}
