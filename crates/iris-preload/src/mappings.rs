//! Where this process maps Iris files `MAP_SHARED` (the shadow files of `shadow`), so that
//! `msync` of such a range puts the bytes back into the volume, as `fsync` does (and commits
//! for `MS_SYNC`), and `munmap`/`mremap` keep the table true. Other mappings pass through.

use std::sync::atomic::{AtomicBool, Ordering};

use iris_fs::ForkSafeMutex as Mutex;
use libc::{c_int, c_void, size_t};

use crate::real;
use crate::state::Busy;

/// (start address, length, inode) of each shared mapping of an Iris file.
static MAPS: Mutex<Vec<(usize, usize, u64)>> = Mutex::new(Vec::new());

/// Hold the table of mappings across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(MAPS.lock());
}

/// Release what [`lock_for_fork`] took (parent and child after the fork).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only called after lock_for_fork, whose guard was forgotten.
    unsafe { MAPS.force_unlock() };
}

/// Whether the table was ever used: until then munmap, msync and mremap of other memory (malloc
/// unmaps chunks all the time) pass through without touching its lock.
static USED: AtomicBool = AtomicBool::new(false);

#[inline]
fn used() -> bool {
    USED.load(Ordering::Acquire)
}

/// Note a new shared mapping of inode `ino`.
pub(crate) fn add(addr: *mut c_void, len: size_t, ino: u64) {
    MAPS.lock().push((addr as usize, len, ino));
    USED.store(true, Ordering::Release);
}

/// A new mapping at `addr` (MAP_FIXED) replaced whatever was there.
pub(crate) fn replaced(addr: *mut c_void, len: size_t) {
    if used() && !MAPS.lock().is_empty() {
        forget(addr as usize, len);
    }
}

/// The inodes mapped somewhere in `[addr, addr + len)`.
fn inodes_in(addr: usize, len: usize) -> Vec<u64> {
    if !used() {
        return Vec::new();
    }
    let end = addr.saturating_add(len);
    let mut out: Vec<u64> = MAPS
        .lock()
        .iter()
        .filter(|(a, l, _)| *a < end && addr < a + l)
        .map(|(_, _, ino)| *ino)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Forget the part of every mapping inside `[addr, addr + len)` (what munmap removes).
fn forget(addr: usize, len: usize) {
    if !used() {
        return;
    }
    let end = addr.saturating_add(len);
    let mut maps = MAPS.lock();
    let mut kept = Vec::with_capacity(maps.len());
    for &(a, l, ino) in maps.iter() {
        let e = a + l;
        if e <= addr || end <= a {
            kept.push((a, l, ino));
            continue;
        }
        if a < addr {
            kept.push((a, addr - a, ino));
        }
        if end < e {
            kept.push((end, e - end, ino));
        }
    }
    *maps = kept;
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let inodes = inodes_in(addr as usize, len);
    if !inodes.is_empty() && flags & libc::MS_INVALIDATE == 0 {
        let _b = Busy::enter();
        if let Some(fs) = crate::state::fs_if_open() {
            for ino in inodes {
                if let Err(e) = crate::shadow::write_back(fs, ino) {
                    return crate::errno::fail(e.0);
                }
            }
            if flags & libc::MS_SYNC != 0 {
                if let Err(e) = fs.sync() {
                    return crate::errno::fail(e.0);
                }
            }
        }
    }
    // SAFETY: forwarding (the shadow file's own pages).
    unsafe { real::msync(addr, len, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let inodes = inodes_in(addr as usize, len);
    // SAFETY: forwarding.
    let r = unsafe { real::munmap(addr, len) };
    if r == 0 {
        forget(addr as usize, len);
        // The last mapping of a file in this process gone: what it changed goes back into
        // the volume, as a close would put it (a program may unmap after its last close).
        let gone: Vec<u64> = {
            let maps = MAPS.lock();
            inodes
                .into_iter()
                .filter(|ino| !maps.iter().any(|(_, _, i)| i == ino))
                .collect()
        };
        if !gone.is_empty() {
            let _b = Busy::enter();
            if let Some(fs) = crate::state::fs_if_open() {
                for ino in gone {
                    let _ = crate::shadow::write_back_if_changed(fs, ino);
                }
            }
        }
    }
    r
}

/// `mremap` is variadic in C (the new address comes only with MREMAP_FIXED); on x86-64 that
/// fifth argument travels in a register either way, so a five-argument definition reads it.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarding.
    let p = unsafe { real::mremap(old, old_len, new_len, flags, new_addr) };
    if p != libc::MAP_FAILED {
        let moved: Vec<u64> = inodes_in(old as usize, old_len.max(1));
        // With MREMAP_DONTUNMAP the old range stays, as anonymous memory: nothing of Iris.
        forget(old as usize, old_len);
        if let Some(ino) = moved.first() {
            add(p, new_len, *ino);
        }
    }
    p
}
