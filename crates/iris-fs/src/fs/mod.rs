//! POSIX operations on the store. Every operation that changes more than one record runs as one
//! store transaction, so it is atomic against other processes, a killed process and power loss
//! (a rename, a multi-block write, a truncate). A one-block write is two single-record updates,
//! data first, then the inode's size and times: a crash in between leaves the old size, so the
//! write is absent, never torn.
//!
//! Files: `path.rs` (resolution, open), `read.rs` and `write.rs` (a file's bytes, the hot paths),
//! `extent.rs` (truncate, fallocate, holes), `namespace.rs` (directory entries), `attr.rs` (mode,
//! owner, times, extended attributes); here the volume, the inode records, the open-file
//! bookkeeping and sync.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};

use crate::ForkSafeMutex as Mutex;

use iris_store::{CreateOptions, Key, OpenOptions, Store, Tx, View};

use crate::cache::{Caches, FileCache};

use crate::dirent;
use crate::errno::{Errno, FsResult};
use crate::inode::{now_ns, Inode, INODE_BYTES};
use crate::keys::{key, name_hash, offset_of, Kind, MAX_OFFSET};
use crate::opens::Opens;
use crate::sync_hint::SyncHints;

mod attr;
mod extent;
mod layout;
mod namespace;
mod path;
mod read;
mod write;

pub use layout::{Extent, FileLayout};
pub use path::Resolved;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Longest name in a directory.
pub const NAME_MAX: usize = 255;
/// Longest path.
pub const PATH_MAX: usize = 4096;
/// Symlinks followed in one resolution before ELOOP.
pub const SYMLOOP_MAX: u32 = 40;
const FS_MAGIC: u64 = u64::from_le_bytes(*b"IRISFS01");

/// File-system statistics (statfs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub block_size: u64,
    /// Total blocks the volume may hold.
    pub blocks: u64,
    /// Free blocks.
    pub blocks_free: u64,
    /// Free blocks ordinary writes may take: the free ones less those held back so that a full
    /// volume can still delete (f_bavail).
    pub blocks_avail: u64,
    /// Files (inodes) in use.
    pub files: u64,
    /// Volume id (f_fsid).
    pub fsid: u64,
}

/// `renameat2` flags.
pub const RENAME_NOREPLACE: u32 = 1;
/// `renameat2` flags.
pub const RENAME_EXCHANGE: u32 = 2;

/// A file system on one store.
pub struct Fs {
    store: Store,
    block_size: u64,
    /// Absolute symlink targets under this prefix resolve inside the volume.
    mount_prefix: Vec<u8>,
    /// Open handles per inode in this process (unlinked files live until the last close).
    open_counts: Mutex<HashMap<u64, u32>>,
    /// Which inodes other processes hold open (see `opens`).
    opens: Opens,
    /// Inode records seen lately, valid while their change stamp is.
    caches: Caches,
    /// Block maps of the inodes this process has open (see [`Fs::file_cache`]).
    file_caches: Mutex<HashMap<u64, Weak<FileCache>>>,
    /// Files synced since their last write (see `sync_hint`).
    sync_hints: SyncHints,
    /// The block maps whose range locks `lock_for_fork` took (only the forking thread uses it).
    forking: Mutex<Vec<Arc<FileCache>>>,
}

fn store_err(e: iris_store::StoreError) -> Errno {
    Errno::from(e)
}

/// Wrap an errno as a store error so it can leave a transaction closure.
fn abort(e: Errno) -> iris_store::StoreError {
    iris_store::StoreError::Invalid(format!("errno {}", e.0))
}

/// Recover an errno that `abort` wrapped (or map a genuine store error).
fn unwrap_abort(e: iris_store::StoreError) -> Errno {
    if let iris_store::StoreError::Invalid(s) = &e {
        if let Some(n) = s.strip_prefix("errno ").and_then(|n| n.parse().ok()) {
            return Errno(n);
        }
    }
    store_err(e)
}

pub(crate) type TxResult<T> = iris_store::Result<T>;

pub(crate) fn get_inode_tx(tx: &Tx<'_, '_>, ino: u64) -> TxResult<Inode> {
    match tx.get_with(key(ino, Kind::Inode, 0), |b| Inode::decode(ino, b))? {
        Some(Ok(i)) => Ok(i),
        Some(Err(e)) => Err(abort(e)),
        None => Err(abort(Errno::ENOENT)),
    }
}

pub(crate) fn put_inode_tx(tx: &mut Tx<'_, '_>, inode: &Inode) -> TxResult<()> {
    tx.put(key(inode.ino, Kind::Inode, 0), &inode.encode())
        .map(|_| ())
}

/// Find `name` in directory `dir`: (ino, dtype).
fn lookup_tx(tx: &Tx<'_, '_>, dir: u64, name: &[u8]) -> TxResult<Option<(u64, u8)>> {
    let entries = tx
        .get_with(key(dir, Kind::Dirent, name_hash(name)), dirent::decode)?
        .unwrap_or_default();
    Ok(entries
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, ino, t)| (ino, t)))
}

pub(crate) fn add_entry_tx(
    tx: &mut Tx<'_, '_>,
    dir: u64,
    name: &[u8],
    ino: u64,
    kind: u8,
) -> TxResult<()> {
    let k = key(dir, Kind::Dirent, name_hash(name));
    let mut entries = tx.get_with(k, dirent::decode)?.unwrap_or_default();
    entries.retain(|(n, _, _)| n != name);
    entries.push((name.to_vec(), ino, kind));
    let v = dirent::encode(&entries);
    if v.len() > 4096 {
        return Err(abort(Errno::ENOSPC));
    }
    tx.put(k, &v).map(|_| ())
}

pub(crate) fn remove_entry_tx(tx: &mut Tx<'_, '_>, dir: u64, name: &[u8]) -> TxResult<()> {
    let k = key(dir, Kind::Dirent, name_hash(name));
    let mut entries = tx.get_with(k, dirent::decode)?.unwrap_or_default();
    entries.retain(|(n, _, _)| n != name);
    if entries.is_empty() {
        tx.delete(k)?;
    } else {
        tx.put(k, &dirent::encode(&entries))?;
    }
    Ok(())
}

/// Records of an inode a purge transaction deletes at first (halved while the volume is too
/// full for it): a purge copies the leaves it changes before the next commit frees anything, so
/// on a full volume it must fit in the space held back for deletions (see `Tx::use_reserve`).
const PURGE_CHUNK: usize = 1024;
/// Records the transaction that removes a file's last name deletes with it: a file this small
/// goes at once; a bigger one stays an orphan that [`purge_rest`] deletes in steps.
const NAMED_PURGE_CHUNK: usize = 64;

/// Delete the records of inode `ino` (its last link and last open handle are gone), using the
/// space held back for deletions, at most `chunk` of them: `true` when it deleted the last of
/// them (the inode record and orphan mark go last); `false` when records remain, the inode then
/// stays an orphan (with no link) that [`purge_rest`] or, after a crash, the next open
/// finishes. `inode` is its record as the transaction leaves it otherwise.
fn purge_tx(tx: &mut Tx<'_, '_>, ino: u64, inode: &Inode, chunk: usize) -> TxResult<bool> {
    tx.use_reserve();
    let record = key(ino, Kind::Inode, 0);
    let mut keys = Vec::new();
    tx.scan(Key::new(ino, 0), Key::new(ino + 1, 0), |k, _| {
        if k != record {
            keys.push(k);
        }
        keys.len() <= chunk
    })?;
    let last = keys.len() <= chunk;
    for k in keys.iter().take(chunk) {
        tx.delete(*k)?;
    }
    if last {
        tx.delete(record)?;
        tx.delete(key(0, Kind::Orphan, ino))?;
    } else {
        let mut orphan = *inode;
        orphan.nlink = 0;
        put_inode_tx(tx, &orphan)?;
        tx.put(key(0, Kind::Orphan, ino), &[])?;
    }
    Ok(last)
}

/// Delete what is left of inode `ino` if it has no link (an orphan no one holds open), one
/// [`purge_tx`] after another, halving the step while the volume is too full for it. An orphan
/// mark without an inode is dropped. Fails only if one record at a time does not fit either.
fn purge_rest(store: &Store, ino: u64) -> FsResult<()> {
    let mut chunk = PURGE_CHUNK;
    loop {
        let step = store.transact(|tx| match get_inode_tx(tx, ino) {
            Ok(i) if i.nlink == 0 => purge_tx(tx, ino, &i, chunk),
            Ok(_) => Ok(true),
            Err(_) => tx.delete(key(0, Kind::Orphan, ino)).map(|_| true),
        });
        match step.map_err(unwrap_abort) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(Errno::ENOSPC) if chunk > 1 => chunk /= 2,
            Err(e) => return Err(e),
        }
    }
}

fn alloc_ino_tx(tx: &mut Tx<'_, '_>) -> TxResult<u64> {
    let rec = tx
        .get(key(0, Kind::Inode, 0))?
        .ok_or_else(|| abort(Errno::EIO))?;
    if rec.len() < 24 {
        return Err(abort(Errno::EIO));
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&rec[8..16]);
    let next = u64::from_le_bytes(w);
    w.copy_from_slice(&rec[16..24]);
    let files = u64::from_le_bytes(w);
    let mut out = rec.clone();
    out[8..16].copy_from_slice(&(next + 1).to_le_bytes());
    out[16..24].copy_from_slice(&(files + 1).to_le_bytes());
    tx.put(key(0, Kind::Inode, 0), &out)?;
    Ok(next)
}

fn count_files_tx(tx: &mut Tx<'_, '_>, delta: i64) -> TxResult<()> {
    let mut rec = tx
        .get(key(0, Kind::Inode, 0))?
        .ok_or_else(|| abort(Errno::EIO))?;
    if rec.len() < 24 {
        return Err(abort(Errno::EIO));
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&rec[16..24]);
    let files = (u64::from_le_bytes(w) as i64 + delta).max(0) as u64;
    rec[16..24].copy_from_slice(&files.to_le_bytes());
    tx.put(key(0, Kind::Inode, 0), &rec).map(|_| ())
}

impl Fs {
    /// Create a volume file and an empty file system on it.
    pub fn create_volume(path: &Path, opts: &CreateOptions) -> FsResult<Fs> {
        let store = Store::create(path, opts).map_err(store_err)?;
        Fs::on_store(store)
    }

    /// Open the file system on a volume file (formatting the root directory if it has none).
    pub fn open_volume(path: &Path, opts: &OpenOptions) -> FsResult<Fs> {
        let store = Store::open(path, opts).map_err(store_err)?;
        Fs::on_store(store)
    }

    /// The file system on an open store; an empty store gets a root directory.
    pub fn on_store(store: Store) -> FsResult<Fs> {
        let block_size = u64::from(store.block_size());
        let exists = store
            .get_with(key(0, Kind::Inode, 0), |b| {
                b.len() >= 8 && b[..8] == FS_MAGIC.to_le_bytes()
            })
            .map_err(store_err)?;
        match exists {
            Some(true) => {}
            Some(false) => return Err(Errno::EIO),
            None => {
                let now = now_ns();
                store
                    .transact(|tx| {
                        let mut rec = Vec::with_capacity(24);
                        rec.extend_from_slice(&FS_MAGIC.to_le_bytes());
                        rec.extend_from_slice(&(ROOT_INO + 1).to_le_bytes());
                        rec.extend_from_slice(&1u64.to_le_bytes());
                        tx.put(key(0, Kind::Inode, 0), &rec)?;
                        let root = Inode {
                            ino: ROOT_INO,
                            mode: libc::S_IFDIR | 0o755,
                            nlink: 2,
                            atime_ns: now,
                            mtime_ns: now,
                            ctime_ns: now,
                            parent: ROOT_INO,
                            ..Inode::default()
                        };
                        put_inode_tx(tx, &root)
                    })
                    .map_err(store_err)?;
                store.commit().map_err(store_err)?;
            }
        }
        if store.recovered() {
            // Rebuilt from the last commit: a shadow left from before may hold bytes newer
            // than it, or name by its inode number another file now.
            crate::host_files::discard_shadows(store.volume_id());
        }
        let opens = Opens::open(store.volume_id());
        // After a crash no process holds the orphans open any more; else an orphan whose
        // holders all ended without closing it (killed, or exited with it open) is held by
        // no process: reclaim them.
        {
            let mut orphans = Vec::new();
            store
                .scan(
                    key(0, Kind::Orphan, 0),
                    key(0, Kind::Orphan, MAX_OFFSET),
                    |k, _| {
                        orphans.push(offset_of(k));
                        true
                    },
                )
                .map_err(store_err)?;
            for ino in orphans {
                if store.recovered() {
                    purge_rest(&store, ino)?;
                } else if !opens.held_elsewhere(ino) {
                    // Best effort: a volume that takes no writes (failed) still opens, and the
                    // orphan waits for the next opener.
                    let _ = purge_rest(&store, ino);
                }
            }
        }
        Ok(Fs {
            store,
            block_size,
            mount_prefix: b"/iris".to_vec(),
            open_counts: Mutex::new(HashMap::new()),
            opens,
            caches: Caches::new(),
            file_caches: Mutex::new(HashMap::new()),
            sync_hints: SyncHints::new(),
            forking: Mutex::new(Vec::new()),
        })
    }

    /// Absolute symlink targets under `prefix` resolve inside this file system.
    pub fn set_mount_prefix(&mut self, prefix: &[u8]) {
        self.mount_prefix = prefix.to_vec();
    }

    /// Commit every `interval` from a background thread (no-op if one runs already).
    pub fn start_commit_timer(&mut self, interval: std::time::Duration) {
        self.store.start_commit_timer(interval);
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Data block size.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    pub(crate) fn tx<R>(&self, mut f: impl FnMut(&mut Tx<'_, '_>) -> TxResult<R>) -> FsResult<R> {
        self.store.transact(|tx| f(tx)).map_err(unwrap_abort)
    }

    /// [`Fs::tx`], then where each of `keys` lives once it is published (see
    /// `Store::transact_locating`).
    pub(crate) fn tx_locating<R>(
        &self,
        mut f: impl FnMut(&mut Tx<'_, '_>) -> TxResult<R>,
        keys: &[Key],
    ) -> FsResult<(R, iris_store::Places)> {
        self.store
            .transact_locating(|tx| f(tx), keys)
            .map_err(unwrap_abort)
    }

    /// Metadata of `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Inode> {
        self.store
            .read(|view| Ok(self.inode_in(view, ino)))
            .map_err(store_err)?
    }

    /// The inode record of `ino` as `view` sees it, from the cache when its change stamp allows.
    #[inline]
    fn inode_in(&self, view: &View<'_>, ino: u64) -> FsResult<Inode> {
        let stamp = view.change_stamp(key(ino, Kind::Inode, 0));
        self.inode_at(view, ino, stamp)
    }

    /// [`Fs::inode_in`] with the change stamp already read (before any lookup).
    #[inline]
    fn inode_at(&self, view: &View<'_>, ino: u64, stamp: u64) -> FsResult<Inode> {
        if let Some(i) = self.caches.inode(ino, stamp) {
            return Ok(i);
        }
        let inode = view
            .get_with(key(ino, Kind::Inode, 0), |b| Inode::decode(ino, b))
            .map_err(store_err)?
            .unwrap_or(Err(Errno::ENOENT))?;
        self.caches.put_inode(&inode, stamp);
        Ok(inode)
    }

    /// Note an open handle on `ino` (the file outlives unlink until the last `release`).
    pub fn retain(&self, ino: u64) {
        let mut m = self.open_counts.lock();
        let c = m.entry(ino).or_insert(0);
        *c += 1;
        if *c == 1 {
            // Under the table's lock: a release of the last handle cannot come in between.
            self.opens.hold(ino);
        }
    }

    /// Drop an open handle; the last one of an unlinked file frees it.
    pub fn release(&self, ino: u64) -> FsResult<()> {
        let last = {
            let mut m = self.open_counts.lock();
            match m.get_mut(&ino) {
                Some(c) if *c > 1 => {
                    *c -= 1;
                    false
                }
                Some(_) => {
                    m.remove(&ino);
                    self.opens.let_go(ino);
                    true
                }
                None => false,
            }
        };
        if last && self.getattr(ino).is_ok_and(|i| i.nlink == 0) && !self.is_open_anywhere(ino) {
            self.finish_purge(ino);
        }
        Ok(())
    }

    /// Delete what is left of inode `ino`, which has no link and no open handle left (see
    /// [`purge_rest`]). Its name is gone already, so a failure (no space even for one record, a
    /// failed volume) is not the caller's: the orphan stays, for the next open after a crash.
    fn finish_purge(&self, ino: u64) {
        let _ = purge_rest(&self.store, ino);
    }

    /// At the process's exit: let go of every file it still holds open, as the kernel closes a
    /// process's files when it ends, so that the unlinked ones no other process holds are
    /// freed now rather than by the next process to open the volume. (Later uses of open files
    /// by this process still work: writes and reads need no count.)
    pub fn release_at_exit(&self) {
        let held: Vec<u64> = self
            .open_counts
            .lock()
            .drain()
            .map(|(ino, _)| ino)
            .collect();
        // (No unlock: the kernel drops this process's locks as it ends, and its own do not
        // count in the check below.)
        for ino in held {
            if self.getattr(ino).is_ok_and(|i| i.nlink == 0) && !self.is_open_anywhere(ino) {
                self.finish_purge(ino);
            }
        }
    }

    /// Whether `ino` is open in this process or in another one.
    fn is_open_anywhere(&self, ino: u64) -> bool {
        self.open_counts.lock().contains_key(&ino) || self.opens.held_elsewhere(ino)
    }

    /// The block map of `ino` for this process, shared by every open of it here: reads through
    /// it ([`Fs::read_file`]) skip the tree lookup of blocks read before, while the file is
    /// unchanged. Take it at open and keep it with the open file.
    pub fn file_cache(&self, ino: u64) -> Arc<FileCache> {
        let mut map = self.file_caches.lock();
        if let Some(c) = map.get(&ino).and_then(Weak::upgrade) {
            return c;
        }
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let c = Arc::new(FileCache::new(ino));
        map.insert(ino, Arc::downgrade(&c));
        c
    }

    /// The range lock of `ino` in this process (in its block map), if a file of it is open here:
    /// changes made without the open file's map take their ranges through this.
    pub(crate) fn open_file_cache(&self, ino: u64) -> Option<Arc<FileCache>> {
        self.file_caches.lock().get(&ino).and_then(Weak::upgrade)
    }

    /// Hold this process's own locks of the file system (the table of open counts, of block
    /// maps, and the range lock of every open file's map) across a `fork()`, so the child does
    /// not inherit one held by a thread it lacks. Call from a `pthread_atfork` prepare handler;
    /// [`Fs::unlock_after_fork`] follows in the parent, [`Fs::unlock_in_child`] in the child.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.open_counts.lock());
        std::mem::forget(self.opens.file_lock().lock());
        let map = self.file_caches.lock();
        let open: Vec<Arc<FileCache>> = map.values().filter_map(Weak::upgrade).collect();
        for c in &open {
            c.ranges().lock_for_fork();
        }
        *self.forking.lock() = open;
        std::mem::forget(map);
    }

    /// Release what [`Fs::lock_for_fork`] took, in the parent.
    ///
    /// # Safety
    /// Only after `lock_for_fork` on this `Fs`, in the thread that called it.
    pub unsafe fn unlock_after_fork(&self) {
        for c in std::mem::take(&mut *self.forking.lock()) {
            // SAFETY: lock_for_fork took it in this thread and forgot the guard.
            unsafe { c.ranges().unlock_after_fork() };
        }
        // SAFETY: per the contract, lock_for_fork left both locked with their guards forgotten.
        unsafe {
            self.file_caches.force_unlock();
            self.opens.file_lock().force_unlock();
            self.open_counts.force_unlock();
        }
    }

    /// Release what [`Fs::lock_for_fork`] took, in the child: the ranges in flight belonged
    /// to the parent's threads, none of which the child has, and are forgotten.
    ///
    /// # Safety
    /// Only in the child of a fork that `lock_for_fork` on this `Fs` preceded.
    pub unsafe fn unlock_in_child(&self) {
        for c in std::mem::take(&mut *self.forking.lock()) {
            // SAFETY: lock_for_fork took it before the fork; this is the child's only thread.
            unsafe { c.ranges().clear_in_child() };
        }
        // SAFETY: per the contract, lock_for_fork left both locked with their guards forgotten.
        unsafe {
            self.file_caches.force_unlock();
            self.opens.file_lock().force_unlock();
            self.open_counts.force_unlock();
        }
        // The child takes locks of its own on the files open here at its first use of them.
        self.opens.forked();
    }

    /// This process's open of the volume's table of open files (see `opens`), for an exec to
    /// pass to the new image.
    pub fn opens_fd(&self) -> Option<std::os::unix::io::RawFd> {
        self.opens.raw_fd()
    }

    /// At the start of an image an exec started: take the previous image's open of the table
    /// of open files, `fd` (false if it is not this volume's); call
    /// [`Fs::settle_opens_after_exec`] once the inherited files are open again.
    pub fn adopt_opens_fd(&self, fd: std::os::unix::io::RawFd) -> bool {
        self.opens.adopt(fd)
    }

    /// After [`Fs::adopt_opens_fd`] and the new image's taking of its inherited files: let go
    /// of the files the previous image held that this one does not.
    pub fn settle_opens_after_exec(&self) {
        let keep: Vec<u64> = self.open_counts.lock().keys().copied().collect();
        self.opens.settle(keep);
    }

    /// In a forked child, once it may open files again (after [`Fs::unlock_in_child`] and the
    /// caller's own locks): take this process's own locks on the files open in it, which it
    /// shared with its parent until now (see `opens`).
    pub fn after_fork_in_child(&self) {
        self.opens.renew();
    }

    /// Mark or unmark `ino` as living in a shadow file (see [`Inode::SHADOWED`]).
    pub fn set_shadowed(&self, ino: u64, on: bool) -> FsResult<()> {
        self.update_inode(ino, |i| {
            if on {
                i.flags |= Inode::SHADOWED;
            } else {
                i.flags &= !Inode::SHADOWED;
            }
        })
    }

    fn update_inode(&self, ino: u64, f: impl FnOnce(&mut Inode)) -> FsResult<()> {
        let mut f = Some(f);
        let missing = Cell::new(false);
        self.store
            .put_with(key(ino, Kind::Inode, 0), INODE_BYTES, |old, out| match old
                .map(|b| Inode::decode(ino, b))
            {
                Some(Ok(mut i)) => {
                    if let Some(f) = f.take() {
                        f(&mut i);
                    }
                    out.copy_from_slice(&i.encode());
                }
                _ => {
                    missing.set(true);
                    out.copy_from_slice(
                        &Inode {
                            ino,
                            ..Inode::default()
                        }
                        .encode(),
                    );
                }
            })
            .map_err(store_err)?;
        if missing.get() {
            // The file vanished (purged) between our check and update: undo the stray record.
            let _ = self.store.delete(key(ino, Kind::Inode, 0));
            return Err(Errno::ENOENT);
        }
        Ok(())
    }

    /// Make everything durable (a group commit).
    pub fn sync(&self) -> FsResult<()> {
        self.store.commit().map(|_| ()).map_err(store_err)
    }

    /// Make every change to inode `ino` durable (fsync, fdatasync, a synchronous write): a
    /// commit, unless the last one already holds every change to the inode's records, and so
    /// everything done before them (a commit is of the whole tree). Then nothing is left to do,
    /// however much other files have changed since.
    pub fn sync_inode(&self, ino: u64) -> FsResult<()> {
        let gen = [
            Kind::Inode,
            Kind::Dirent,
            Kind::Data,
            Kind::Xattr,
            Kind::Symlink,
        ]
        .into_iter()
        .map(|kind| self.store.written_gen(key(ino, kind, 0)))
        .max()
        .unwrap_or(0);
        self.store.commit_through(gen).map_err(store_err)?;
        self.sync_hints.synced(ino);
        Ok(())
    }

    /// File-system statistics.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let st = self.store.stats().map_err(store_err)?;
        let files = self
            .store
            .get_with(key(0, Kind::Inode, 0), |rec| {
                if rec.len() >= 24 {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&rec[16..24]);
                    u64::from_le_bytes(w)
                } else {
                    0
                }
            })
            .map_err(store_err)?
            .unwrap_or(0);
        Ok(StatFs {
            block_size: u64::from(st.block_size),
            blocks: st.max_blocks,
            blocks_free: st.free_blocks,
            blocks_avail: st.free_blocks.saturating_sub(st.reserve_blocks),
            files,
            fsid: self.store.volume_id(),
        })
    }
}

#[cfg(test)]
/// A file system on a small simulated volume with one empty file; its inode number.
pub(crate) fn test_fs_with_file() -> (Fs, u64) {
    let sim = std::sync::Arc::new(iris_media::SimMedia::new(16 << 20));
    let opts = iris_store::CreateOptions {
        size_limit_bytes: 16 << 20,
        initial_bytes: 16 << 20,
        ..iris_store::CreateOptions::default()
    };
    let boot = iris_store::OpenOptions {
        boot_id: Some(1),
        commit_interval: None,
    };
    let store = iris_store::Store::create_on(Box::new(sim), &opts, &boot).expect("store");
    let fs = Fs::on_store(store).expect("fs");
    let ino = fs
        .open(
            &crate::Cred::root(),
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_RDWR,
            0o644,
        )
        .expect("create")
        .ino;
    (fs, ino)
}
