//! POSIX operations on the store. Every operation that changes more than one record runs as one
//! store transaction, so it is atomic against other processes, a killed process and power loss
//! (a rename, a multi-block write, a truncate). A one-block write is two single-record updates,
//! data first, then the inode's size and times: a crash in between leaves the old size, so the
//! write is absent, never torn.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};

use crate::ForkSafeMutex as Mutex;

use iris_store::{
    BlockPut, BlockRef, CreateOptions, Key, Known, Located, OpenOptions, Store, ThenPatch, Tx, View,
};

use crate::cache::{Caches, FileCache};

use crate::cred::{Cred, W_OK, X_OK};
use crate::dirent::{self, DirEntry};
use crate::errno::{Errno, FsResult};
use crate::inode::{self, now_ns, Inode, INODE_BYTES};
use crate::keys::{key, name_hash, offset_of, Kind, MAX_OFFSET};
use crate::sync_hint::SyncHints;
use crate::xattr;

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
    /// Inode records seen lately, valid while their change stamp is.
    caches: Caches,
    /// Block maps of the inodes this process has open (see [`Fs::file_cache`]).
    file_caches: Mutex<HashMap<u64, Weak<FileCache>>>,
    /// Files synced since their last write (see `sync_hint`).
    sync_hints: SyncHints,
}

fn store_err(e: iris_store::StoreError) -> Errno {
    Errno::from(e)
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

fn dir_is_empty_tx(tx: &Tx<'_, '_>, dir: u64) -> TxResult<bool> {
    let mut empty = true;
    tx.scan(
        key(dir, Kind::Dirent, 0),
        key(dir, Kind::Dirent, MAX_OFFSET)
            .successor()
            .unwrap_or(Key::MAX),
        |_, _| {
            empty = false;
            false
        },
    )?;
    Ok(empty)
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

/// Split a path into components, rejecting over-long names.
fn components(path: &[u8]) -> FsResult<Vec<&[u8]>> {
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut out = Vec::new();
    for c in path.split(|b| *b == b'/') {
        if c.is_empty() || c == b"." {
            continue;
        }
        if c.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        out.push(c);
    }
    Ok(out)
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
            // After a crash no process holds the orphans open any more: reclaim them.
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
                purge_rest(&store, ino)?;
            }
        }
        Ok(Fs {
            store,
            block_size,
            mount_prefix: b"/iris".to_vec(),
            open_counts: Mutex::new(HashMap::new()),
            caches: Caches::new(),
            file_caches: Mutex::new(HashMap::new()),
            sync_hints: SyncHints::new(),
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

    /// Resolve `path` from directory `start` (absolute paths start at the root). With
    /// `follow_last`, a final symlink is followed.
    pub fn resolve(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
        follow_last: bool,
    ) -> FsResult<u64> {
        self.store
            .read(|view| Ok(self.resolve_in(view, cred, start, path, follow_last)))
            .map_err(store_err)?
    }

    fn lookup_in(view: &View<'_>, dir: u64, name: &[u8]) -> FsResult<Option<u64>> {
        let entries = view
            .get_with(key(dir, Kind::Dirent, name_hash(name)), dirent::decode)
            .map_err(store_err)?
            .unwrap_or_default();
        Ok(entries
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, i, _)| i))
    }

    fn resolve_in(
        &self,
        view: &View<'_>,
        cred: &Cred,
        start: u64,
        path: &[u8],
        follow_last: bool,
    ) -> FsResult<u64> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let mut pending: Vec<Vec<u8>> =
            components(path)?.iter().rev().map(|c| c.to_vec()).collect();
        let mut cur = if path[0] == b'/' { ROOT_INO } else { start };
        let trailing_slash = path.ends_with(b"/");
        let mut links = 0u32;
        let mut cur_inode = self.inode_in(view, cur)?;
        while let Some(name) = pending.pop() {
            if !cur_inode.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            cred.check(&cur_inode, X_OK)?;
            let next = if name == b".." {
                cur_inode.parent.max(ROOT_INO)
            } else {
                Self::lookup_in(view, cur, &name)?.ok_or(Errno::ENOENT)?
            };
            let next_inode = self.inode_in(view, next)?;
            let last = pending.is_empty();
            if next_inode.is_symlink() && (!last || follow_last || trailing_slash) {
                links += 1;
                if links > SYMLOOP_MAX {
                    return Err(Errno::ELOOP);
                }
                let target = view
                    .get_with(key(next, Kind::Symlink, 0), |b| b.to_vec())
                    .map_err(store_err)?
                    .ok_or(Errno::EIO)?;
                let rel: &[u8] = if target.first() == Some(&b'/') {
                    let p = &self.mount_prefix;
                    if target.starts_with(p) && (target.len() == p.len() || target[p.len()] == b'/')
                    {
                        cur = ROOT_INO;
                        &target[p.len()..]
                    } else {
                        return Err(Errno::EXDEV);
                    }
                } else {
                    &target
                };
                for c in components(rel)?.iter().rev() {
                    pending.push(c.to_vec());
                }
                cur_inode = self.inode_in(view, cur)?;
                continue;
            }
            cur = next;
            cur_inode = next_inode;
        }
        if trailing_slash && !cur_inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(cur)
    }

    /// Resolve all but the last component: (parent directory, last name). The last name may be
    /// "." or ".." only where the caller accepts it.
    pub fn resolve_parent(&self, cred: &Cred, start: u64, path: &[u8]) -> FsResult<(u64, Vec<u8>)> {
        components(path)?; // length checks
        let comps: Vec<&[u8]> = path
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        let Some((last, dirs)) = comps.split_last() else {
            // "/" or "." : the directory itself has no parent entry to change.
            return Err(Errno::EBUSY);
        };
        let mut dir_path = Vec::new();
        if path.first() == Some(&b'/') {
            dir_path.push(b'/');
        }
        for d in dirs {
            dir_path.extend_from_slice(d);
            dir_path.push(b'/');
        }
        let dir = if dir_path.is_empty() {
            start
        } else {
            self.resolve(cred, start, &dir_path, true)?
        };
        let di = self.getattr(dir)?;
        if !di.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok((dir, last.to_vec()))
    }

    /// Where a new name `path` goes: (directory, name, directory inode). EEXIST for "/", "." and
    /// "..", EACCES without write and search permission on the directory.
    fn new_name(&self, cred: &Cred, start: u64, path: &[u8]) -> FsResult<(u64, Vec<u8>, Inode)> {
        let (dir, name) = match self.resolve_parent(cred, start, path) {
            Err(Errno::EBUSY) => return Err(Errno::EEXIST),
            r => r?,
        };
        if name == b"." || name == b".." {
            return Err(Errno::EEXIST);
        }
        let d = self.getattr(dir)?;
        cred.check(&d, W_OK | X_OK)?;
        Ok((dir, name, d))
    }

    /// Open or create `path` per `flags` (O_CREAT, O_EXCL, O_TRUNC, O_DIRECTORY, O_NOFOLLOW, access
    /// mode); `mode` (umask already applied) for a new file. Returns the inode.
    pub fn open(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
        flags: i32,
        mode: u32,
    ) -> FsResult<Inode> {
        self.open_at_depth(cred, start, path, flags, mode, 0)
    }

    fn open_at_depth(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
        flags: i32,
        mode: u32,
        depth: u32,
    ) -> FsResult<Inode> {
        let acc = flags & libc::O_ACCMODE;
        let want_write = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let follow = flags & libc::O_NOFOLLOW == 0;
        let ino = if flags & libc::O_CREAT != 0 {
            if path.ends_with(b"/") {
                return Err(Errno::EISDIR);
            }
            // An existing directory named by "/", "." or "..": O_EXCL reports it exists first.
            let exists_err = if flags & libc::O_EXCL != 0 {
                Errno::EEXIST
            } else {
                Errno::EISDIR
            };
            let (dir, name) = match self.resolve_parent(cred, start, path) {
                Ok(p) => p,
                Err(Errno::EBUSY) => return Err(exists_err),
                Err(e) => return Err(e),
            };
            if name == b"." || name == b".." {
                return Err(exists_err);
            }
            let existing = self
                .store
                .read(|v| Ok(Self::lookup_in(v, dir, &name)))
                .map_err(store_err)??;
            match existing {
                Some(ino) => {
                    if flags & libc::O_EXCL != 0 {
                        return Err(Errno::EEXIST);
                    }
                    let i = self.getattr(ino)?;
                    if i.is_symlink() {
                        if !follow || depth >= SYMLOOP_MAX {
                            return Err(Errno::ELOOP);
                        }
                        // O_CREAT through a symlink creates its target, even a dangling one.
                        let target = self.readlink(cred, dir, &name)?;
                        if target.first() == Some(&b'/') {
                            let p = &self.mount_prefix;
                            if !target.starts_with(p) {
                                return Err(Errno::EXDEV);
                            }
                            let rel = target[p.len()..].to_vec();
                            return self.open_at_depth(
                                cred,
                                ROOT_INO,
                                &rel,
                                flags,
                                mode,
                                depth + 1,
                            );
                        }
                        return self.open_at_depth(cred, dir, &target, flags, mode, depth + 1);
                    } else {
                        ino
                    }
                }
                None => {
                    let d = self.getattr(dir)?;
                    cred.check(&d, W_OK | X_OK)?;
                    let now = now_ns();
                    let gid = if d.mode & libc::S_ISGID != 0 {
                        d.gid
                    } else {
                        cred.gid
                    };
                    let created = self.tx(|tx| {
                        if let Some((ino, _)) = lookup_tx(tx, dir, &name)? {
                            // Lost a race with another creator: open theirs unless O_EXCL.
                            if flags & libc::O_EXCL != 0 {
                                return Err(abort(Errno::EEXIST));
                            }
                            return Ok(ino);
                        }
                        let ino = alloc_ino_tx(tx)?;
                        let inode = Inode {
                            ino,
                            mode: libc::S_IFREG | (mode & 0o7777),
                            uid: cred.uid,
                            gid,
                            nlink: 1,
                            atime_ns: now,
                            mtime_ns: now,
                            ctime_ns: now,
                            ..Inode::default()
                        };
                        put_inode_tx(tx, &inode)?;
                        add_entry_tx(tx, dir, &name, ino, libc::DT_REG)?;
                        let mut d = get_inode_tx(tx, dir)?;
                        d.mtime_ns = now;
                        d.ctime_ns = now;
                        put_inode_tx(tx, &d)?;
                        Ok(ino)
                    })?;
                    return self.getattr(created);
                }
            }
        } else {
            self.resolve(cred, start, path, follow)?
        };
        let inode = self.getattr(ino)?;
        if inode.is_symlink() {
            // O_NOFOLLOW on a symlink (O_PATH is not served).
            return Err(Errno::ELOOP);
        }
        if flags & libc::O_DIRECTORY != 0 && !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if inode.is_dir() && want_write {
            return Err(Errno::EISDIR);
        }
        let mut mask = 0;
        if acc == libc::O_RDONLY || acc == libc::O_RDWR {
            mask |= crate::cred::R_OK;
        }
        if want_write {
            mask |= W_OK;
        }
        cred.check(&inode, mask)?;
        if flags & libc::O_TRUNC != 0 && want_write && inode.is_file() && inode.size > 0 {
            self.truncate(ino, 0)?;
            return self.getattr(ino);
        }
        Ok(inode)
    }

    /// Note an open handle on `ino` (the file outlives unlink until the last `release`).
    pub fn retain(&self, ino: u64) {
        *self.open_counts.lock().entry(ino).or_insert(0) += 1;
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
                    true
                }
                None => false,
            }
        };
        if last && self.getattr(ino).is_ok_and(|i| i.nlink == 0) {
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

    fn is_open(&self, ino: u64) -> bool {
        self.open_counts.lock().contains_key(&ino)
    }

    /// Read up to `buf.len()` bytes at `off`; holes read as zeros; returns bytes read (0 at EOF).
    /// While the file is shadowed this reads the bytes last written back from the shadow.
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> FsResult<usize> {
        Ok(self.read_impl(ino, off, buf, false, None)?.unwrap_or(0))
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

    /// Hold this process's own locks of the file system (the table of open counts and of block
    /// maps) across a `fork()`, so the child does not inherit one held by a thread it lacks.
    /// Call from a `pthread_atfork` prepare handler; [`Fs::unlock_after_fork`] follows in both
    /// the parent and the child.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.open_counts.lock());
        std::mem::forget(self.file_caches.lock());
    }

    /// Release what [`Fs::lock_for_fork`] took.
    ///
    /// # Safety
    /// Only after `lock_for_fork` on this `Fs`, in the thread that called it (parent) or the
    /// child it forked.
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: per the contract, lock_for_fork left both locked with their guards forgotten.
        unsafe {
            self.file_caches.force_unlock();
            self.open_counts.force_unlock();
        }
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

    /// A read inside one block that the file's map knows, with the inode's record in the cache,
    /// made without a read section (see `Store::read_known`): the copy counts only if the
    /// inode's and the data's stamps and the block's write marks read afterwards what they
    /// read before. `None` when something is not known or moved: the caller reads the usual
    /// way.
    fn read_known(&self, file: &FileCache, off: u64, buf: &mut [u8]) -> Option<usize> {
        let bs = self.block_size;
        let block = off >> bs.trailing_zeros();
        let in_block = (off & (bs - 1)) as usize;
        if buf.is_empty() || in_block + buf.len() > bs as usize {
            return None;
        }
        let ino = file.ino();
        let (ikey, dkey) = (key(ino, Kind::Inode, 0), key(ino, Kind::Data, block));
        self.store.read_known(|v| {
            let stamp = v.change_stamp(ikey);
            let data_stamp = v.change_stamp(dkey);
            let inode = self.caches.inode(ino, stamp)?;
            if inode.is_dir() || inode.is_shadowed() || off >= inode.size {
                return None;
            }
            let n = (buf.len() as u64).min(inode.size - off) as usize;
            let at = file.get(block, file.epoch_now(data_stamp)?)?;
            let marks = v.in_place_marks(std::iter::once(dkey))?;
            let bytes = v.block_bytes(at).ok()?;
            let have = bytes.len().saturating_sub(in_block).min(n);
            if have > 0 {
                buf[..have].copy_from_slice(&bytes[in_block..in_block + have]);
            }
            if have < n {
                buf[have..n].fill(0);
            }
            (v.unchanged_since(&marks)
                && v.change_stamp(dkey) == data_stamp
                && v.change_stamp(ikey) == stamp)
                .then_some(n)
        })
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
                        out[..have].copy_from_slice(&v[in_block..in_block + have]);
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
                finish(Ok(Some(n)))
            })
            .map_err(store_err)
    }

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
        // The cache first, outside a read section (entering one costs two full barriers): a
        // hit at the stamp read now is what a lookup would return.
        let now_stamp = self.store.change_stamp(key(ino, Kind::Inode, 0));
        let (stamp, inode) = match self.caches.inode(ino, now_stamp) {
            Some(i) => (now_stamp, i),
            None => {
                let (stamp, inode) = self
                    .store
                    .read(|v| {
                        let stamp = v.change_stamp(key(ino, Kind::Inode, 0));
                        Ok((stamp, self.inode_at(v, ino, stamp)))
                    })
                    .map_err(store_err)?;
                (stamp, inode?)
            }
        };
        if honor_shadow && inode.is_shadowed() {
            return Ok(None);
        }
        let unchanged = inode.size >= end && inode.mtime_ns == now && inode.ctime_ns == now;
        Ok(Some((inode, unchanged.then_some(stamp))))
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
                        out.copy_from_slice(old);
                        out[at..at + src.len()].copy_from_slice(src);
                    }
                },
                Some(ThenPatch {
                    key: key(ino, Kind::Inode, 0),
                    unless_unchanged_since: skip,
                    patch: size_and_times(ino, end, now, &after),
                    // (An overwrite holds only its partitions' locks: it cannot commit.)
                    sync_expected: false,
                }),
            )
            .map_err(store_err)?;
        let Some(put) = put else {
            return Ok(None);
        };
        if !put.found {
            return Err(Errno::ENOENT);
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
        self.write_impl(ino, off, data, true, None)
    }

    /// [`Fs::write_unless_shadowed`] through the block map of an open file: a one-block write
    /// over a block the map knows, written since the last commit, goes where the block is
    /// without a look at the tree (see `Store::write_in_place`).
    pub fn write_file(&self, file: &FileCache, off: u64, data: &[u8]) -> FsResult<Option<usize>> {
        self.write_impl(file.ino(), off, data, true, Some(file))
    }

    /// Write `data` at `off`; returns bytes written. Extends the file as needed.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> FsResult<usize> {
        Ok(self.write_impl(ino, off, data, false, None)?.unwrap_or(0))
    }

    /// The write; with `honor_shadow`, `None` (nothing written) when the bytes live in a shadow
    /// file. The shadow flag is read in the same read section the write needs anyway.
    fn write_impl(
        &self,
        ino: u64,
        off: u64,
        data: &[u8],
        honor_shadow: bool,
        file: Option<&FileCache>,
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
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end / bs > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
        let first = off / bs;
        let last = (end - 1) / bs;
        // Where the block is (the file's map word, else the leaf) is needed first: let the
        // misses overlap the clock and the inode.
        if let Some(f) = file {
            f.prefetch(first);
        }
        self.store.prefetch_location(key(ino, Kind::Data, first));
        let now = now_ns();
        let sync_expected = self.sync_hints.take(ino);
        let data_key = key(ino, Kind::Data, first);
        if first == last {
            let Some((inode, skip)) = self.inode_for_write(ino, end, now, honor_shadow)? else {
                return Ok(None);
            };
            // Where the file's map says the block is: `known` at the data's stamp now, else
            // where it was last seen (a hint).
            let (known, seen) = match file {
                Some(f) => block_location(&self.store, f, first, data_key),
                None => (None, None),
            };
            // After a write in place: the block's location into the map (unless it holds it).
            let remember = |put: &BlockPut| {
                if let (Some(f), Some((stamp, at))) = (file, put.located) {
                    if known != Some(Known { stamp, at }) {
                        if let Some(e) = f.epoch(stamp) {
                            f.put(first, e, at);
                        }
                    }
                }
            };
            // One block: data, then size and times (see the module doc for why this order).
            let in_block = (off % bs) as usize;
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
                        }),
                    )
                    .map_err(store_err)?;
                if !put.found {
                    return Err(Errno::ENOENT);
                }
                if let (Some(f), Some((_, at))) = (file, put.located) {
                    f.hint(first, at);
                }
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
                };
                let k = data_key;
                if first > 0 && off >= inode.size && inode.size <= first * bs {
                    // The first bytes of a new last block of a file that already fills one: out
                    // of line from the start, so that the appends that follow go into its tail
                    // in place. Only if the block is still absent (checked under the lock).
                    let fill = |out: &mut [u8]| {
                        out[..in_block].fill(0);
                        out[in_block..].copy_from_slice(data);
                    };
                    let grown = self
                        .store
                        .insert_growing_then_patch(k, end_in_block, fill, then())
                        .map_err(store_err)?;
                    if let Some(put) = grown {
                        if !put.found {
                            return Err(Errno::ENOENT);
                        }
                        self.refresh_inode_after(&inode, &put, after.get());
                        return Ok(Some(data.len()));
                    }
                }
                // (Inside the file but past the end of its block's value, as in a file extended
                // by truncate or fallocate and written in order, `write_in_place` appends too.)
                // A sync follows (see `sync_hint`): the last commit is likely recent and the
                // block committed, so the write copies it under every lock; no attempt first.
                let done = if sync_expected {
                    None
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
                // hold of the locks, skipped as for the writes above.
                let put = self
                    .store
                    .put_sized_then_patch(
                        k,
                        |old_len| old_len.unwrap_or(0).max(end_in_block),
                        |old, out| {
                            let have = old.map_or(0, |o| o.len().min(out.len()));
                            match old {
                                // The write covers all the old bytes: nothing to keep.
                                Some(_) if in_block == 0 && end_in_block >= have => {}
                                Some(o) => out[..have].copy_from_slice(&o[..have]),
                                None => {}
                            }
                            if in_block > have {
                                out[have..in_block].fill(0);
                            }
                            out[in_block..end_in_block].copy_from_slice(data);
                        },
                        Some(then()),
                    )
                    .map_err(store_err)?;
                if !put.found {
                    return Err(Errno::ENOENT);
                }
                return Ok(Some(data.len()));
            }
        }
        if let Some(done) = self.overwrite_blocks(ino, off, data, now, honor_shadow)? {
            return Ok(done);
        }
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
        let written = self.tx(|tx| {
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
                    let new_len = old_len.unwrap_or(0).max(in_block + src.len());
                    let fill = |old: Option<&[u8]>, out: &mut [u8]| {
                        let have = old.map_or(0, |o| o.len().min(new_len));
                        if let Some(o) = old {
                            out[..have].copy_from_slice(&o[..have]);
                        }
                        out[have..].fill(0);
                        out[in_block..in_block + src.len()].copy_from_slice(src);
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
        })?;
        Ok(written.then_some(data.len()))
    }

    /// Append `data` atomically at the end of file: returns the offset written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> FsResult<u64> {
        // The size read and the write must not interleave with another appender: one transaction.
        let bs = self.block_size;
        let now = now_ns();
        self.tx(|tx| {
            let mut i = get_inode_tx(tx, ino)?;
            let off = i.size;
            let end = off + data.len() as u64;
            if data.is_empty() {
                return Ok(off);
            }
            for block in off / bs..=(end - 1) / bs {
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
                tx.put_with(k, new_len, |old, out| {
                    let have = old.map_or(0, |o| o.len().min(new_len));
                    if let Some(o) = old {
                        out[..have].copy_from_slice(&o[..have]);
                    }
                    out[have..].fill(0);
                    out[in_block..in_block + src.len()].copy_from_slice(src);
                })?;
            }
            i.size = end;
            i.mtime_ns = now;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)?;
            Ok(off)
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

    /// Set the size of a regular file, dropping or zero-extending data.
    pub fn truncate(&self, ino: u64, len: u64) -> FsResult<()> {
        let bs = self.block_size;
        if len / bs > MAX_OFFSET {
            return Err(Errno::EFBIG);
        }
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

    /// Create an unnamed regular file in directory `dir` (O_TMPFILE): it lives while open and
    /// can be given a name with [`Fs::link_inode`].
    pub fn create_unnamed(&self, cred: &Cred, dir: u64, mode: u32) -> FsResult<Inode> {
        let d = self.getattr(dir)?;
        if !d.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        cred.check(&d, W_OK | X_OK)?;
        let now = now_ns();
        let ino = self.tx(|tx| {
            let ino = alloc_ino_tx(tx)?;
            count_files_tx(tx, -1)?; // not counted until linked
            let inode = Inode {
                ino,
                mode: libc::S_IFREG | (mode & 0o7777),
                uid: cred.uid,
                gid: cred.gid,
                nlink: 0,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                ..Inode::default()
            };
            put_inode_tx(tx, &inode)?;
            tx.put(key(0, Kind::Orphan, ino), &[])?;
            Ok(ino)
        })?;
        self.getattr(ino)
    }

    /// Give inode `ino` a (further) name `path` (linkat with AT_EMPTY_PATH; also names an
    /// O_TMPFILE file).
    pub fn link_inode(&self, cred: &Cred, ino: u64, start: u64, path: &[u8]) -> FsResult<()> {
        let i = self.getattr(ino)?;
        if i.is_dir() {
            return Err(Errno::EPERM);
        }
        let (dir, name, _) = self.new_name(cred, start, path)?;
        let now = now_ns();
        self.tx(|tx| {
            if lookup_tx(tx, dir, &name)?.is_some() {
                return Err(abort(Errno::EEXIST));
            }
            let mut i = get_inode_tx(tx, ino)?;
            if i.nlink == 0 {
                count_files_tx(tx, 1)?;
                tx.delete(key(0, Kind::Orphan, ino))?;
            }
            i.nlink += 1;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)?;
            add_entry_tx(tx, dir, &name, ino, dirent::dtype(i.mode))?;
            let mut d = get_inode_tx(tx, dir)?;
            d.mtime_ns = now;
            d.ctime_ns = now;
            put_inode_tx(tx, &d)
        })
    }

    /// Create a directory.
    pub fn mkdir(&self, cred: &Cred, start: u64, path: &[u8], mode: u32) -> FsResult<u64> {
        let (dir, name, d) = self.new_name(cred, start, path)?;
        let now = now_ns();
        let gid = if d.mode & libc::S_ISGID != 0 {
            d.gid
        } else {
            cred.gid
        };
        let setgid = d.mode & libc::S_ISGID;
        self.tx(|tx| {
            if lookup_tx(tx, dir, &name)?.is_some() {
                return Err(abort(Errno::EEXIST));
            }
            let mut parent = get_inode_tx(tx, dir)?;
            if parent.nlink == 0 {
                return Err(abort(Errno::ENOENT));
            }
            let ino = alloc_ino_tx(tx)?;
            let inode = Inode {
                ino,
                mode: libc::S_IFDIR | (mode & 0o7777) | setgid,
                uid: cred.uid,
                gid,
                nlink: 2,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                parent: dir,
                ..Inode::default()
            };
            put_inode_tx(tx, &inode)?;
            add_entry_tx(tx, dir, &name, ino, libc::DT_DIR)?;
            parent.nlink += 1;
            parent.mtime_ns = now;
            parent.ctime_ns = now;
            put_inode_tx(tx, &parent)?;
            Ok(ino)
        })
    }

    /// Sticky-directory rule: in a +t directory only the owner of the entry or of the directory
    /// (or root) may remove or rename it.
    fn sticky_ok(cred: &Cred, dir: &Inode, victim: &Inode) -> bool {
        dir.mode & libc::S_ISVTX == 0
            || cred.uid == 0
            || cred.uid == dir.uid
            || cred.uid == victim.uid
    }

    /// Remove a directory entry that is not a directory.
    pub fn unlink(&self, cred: &Cred, start: u64, path: &[u8]) -> FsResult<()> {
        let (dir, name) = match self.resolve_parent(cred, start, path) {
            Err(Errno::EBUSY) => return Err(Errno::EISDIR),
            r => r?,
        };
        if name == b"." || name == b".." {
            return Err(Errno::EISDIR);
        }
        if path.ends_with(b"/") {
            // The last component itself, symlinks not followed: a directory is EISDIR, anything
            // else with a trailing slash ENOTDIR.
            let found = self
                .store
                .read(|v| Ok(Self::lookup_in(v, dir, &name)))
                .map_err(store_err)??;
            let ino = found.ok_or(Errno::ENOENT)?;
            return Err(if self.getattr(ino)?.is_dir() {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            });
        }
        let d = self.getattr(dir)?;
        cred.check(&d, W_OK | X_OK)?;
        let now = now_ns();
        let rest = self.tx(|tx| {
            tx.use_reserve();
            let (ino, _) = lookup_tx(tx, dir, &name)?.ok_or_else(|| abort(Errno::ENOENT))?;
            let mut i = get_inode_tx(tx, ino)?;
            if i.is_dir() {
                return Err(abort(Errno::EISDIR));
            }
            let d = get_inode_tx(tx, dir)?;
            if !Self::sticky_ok(cred, &d, &i) {
                return Err(abort(Errno::EPERM));
            }
            remove_entry_tx(tx, dir, &name)?;
            let mut d = d;
            d.mtime_ns = now;
            d.ctime_ns = now;
            put_inode_tx(tx, &d)?;
            i.nlink = i.nlink.saturating_sub(1);
            i.ctime_ns = now;
            if i.nlink == 0 && !self.is_open(ino) {
                count_files_tx(tx, -1)?;
                return Ok((!purge_tx(tx, ino, &i, NAMED_PURGE_CHUNK)?).then_some(ino));
            }
            if i.nlink == 0 {
                count_files_tx(tx, -1)?;
                tx.put(key(0, Kind::Orphan, ino), &[])?;
            }
            put_inode_tx(tx, &i)?;
            Ok(None)
        })?;
        if let Some(ino) = rest {
            self.finish_purge(ino);
        }
        Ok(())
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, cred: &Cred, start: u64, path: &[u8]) -> FsResult<()> {
        let (dir, name) = match self.resolve_parent(cred, start, path) {
            Err(Errno::EBUSY) => return Err(Errno::EBUSY),
            r => r?,
        };
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        let d = self.getattr(dir)?;
        cred.check(&d, W_OK | X_OK)?;
        let now = now_ns();
        self.tx(|tx| {
            let (ino, _) = lookup_tx(tx, dir, &name)?.ok_or_else(|| abort(Errno::ENOENT))?;
            let i = get_inode_tx(tx, ino)?;
            if !i.is_dir() {
                return Err(abort(Errno::ENOTDIR));
            }
            if ino == ROOT_INO {
                return Err(abort(Errno::EBUSY));
            }
            let mut d = get_inode_tx(tx, dir)?;
            if !Self::sticky_ok(cred, &d, &i) {
                return Err(abort(Errno::EPERM));
            }
            if !dir_is_empty_tx(tx, ino)? {
                return Err(abort(Errno::ENOTEMPTY));
            }
            remove_entry_tx(tx, dir, &name)?;
            // An empty directory is a few records: one purge takes them all.
            if !purge_tx(tx, ino, &i, PURGE_CHUNK)? {
                return Err(abort(Errno::EIO));
            }
            count_files_tx(tx, -1)?;
            d.nlink = d.nlink.saturating_sub(1);
            d.mtime_ns = now;
            d.ctime_ns = now;
            put_inode_tx(tx, &d)
        })
    }

    /// Rename `from` to `to` (atomically replacing `to`), with `renameat2` flags.
    pub fn rename(
        &self,
        cred: &Cred,
        from_start: u64,
        from: &[u8],
        to_start: u64,
        to: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        let (sdir, sname) = self.resolve_parent(cred, from_start, from)?;
        let (ddir, dname) = self.resolve_parent(cred, to_start, to)?;
        for n in [&sname, &dname] {
            if n.as_slice() == b"." || n.as_slice() == b".." {
                return Err(Errno::EBUSY);
            }
        }
        let sd = self.getattr(sdir)?;
        let dd = self.getattr(ddir)?;
        cred.check(&sd, W_OK | X_OK)?;
        cred.check(&dd, W_OK | X_OK)?;
        let now = now_ns();
        // A replaced file too big to delete in the rename's transaction (see `purge_tx`).
        let mut rest = None;
        self.tx(|tx| {
            tx.use_reserve();
            rest = None;
            let (sino, stype) = lookup_tx(tx, sdir, &sname)?.ok_or_else(|| abort(Errno::ENOENT))?;
            let mut si = get_inode_tx(tx, sino)?;
            let target = lookup_tx(tx, ddir, &dname)?;
            if (from.ends_with(b"/") || to.ends_with(b"/")) && !si.is_dir() {
                return Err(abort(Errno::ENOTDIR));
            }
            if let Some((dino, _)) = target {
                if dino == sino {
                    return Ok(()); // same file: nothing to do
                }
            }
            if flags & RENAME_NOREPLACE != 0 && target.is_some() {
                return Err(abort(Errno::EEXIST));
            }
            if flags & RENAME_EXCHANGE != 0 && target.is_none() {
                return Err(abort(Errno::ENOENT));
            }
            let sd = get_inode_tx(tx, sdir)?;
            if !Self::sticky_ok(cred, &sd, &si) {
                return Err(abort(Errno::EPERM));
            }
            // A directory may not move below itself.
            if si.is_dir() && sdir != ddir {
                let mut up = ddir;
                loop {
                    if up == sino {
                        return Err(abort(Errno::EINVAL));
                    }
                    if up == ROOT_INO {
                        break;
                    }
                    up = get_inode_tx(tx, up)?.parent;
                }
            }
            if flags & RENAME_EXCHANGE != 0 {
                let (dino, dtype) = target.ok_or_else(|| abort(Errno::ENOENT))?;
                let mut di = get_inode_tx(tx, dino)?;
                if di.is_dir() && ddir != sdir {
                    let mut up = sdir;
                    loop {
                        if up == dino {
                            return Err(abort(Errno::EINVAL));
                        }
                        if up == ROOT_INO {
                            break;
                        }
                        up = get_inode_tx(tx, up)?.parent;
                    }
                }
                add_entry_tx(tx, sdir, &sname, dino, dtype)?;
                add_entry_tx(tx, ddir, &dname, sino, stype)?;
                if si.is_dir() != di.is_dir() && sdir != ddir {
                    let mut a = get_inode_tx(tx, sdir)?;
                    let mut b = get_inode_tx(tx, ddir)?;
                    if si.is_dir() {
                        a.nlink -= 1;
                        b.nlink += 1;
                    } else {
                        a.nlink += 1;
                        b.nlink -= 1;
                    }
                    put_inode_tx(tx, &a)?;
                    put_inode_tx(tx, &b)?;
                }
                if si.is_dir() {
                    si.parent = ddir;
                }
                if di.is_dir() {
                    di.parent = sdir;
                }
                si.ctime_ns = now;
                di.ctime_ns = now;
                put_inode_tx(tx, &si)?;
                put_inode_tx(tx, &di)?;
            } else {
                if let Some((dino, _)) = target {
                    let mut di = get_inode_tx(tx, dino)?;
                    let dd = get_inode_tx(tx, ddir)?;
                    if !Self::sticky_ok(cred, &dd, &di) {
                        return Err(abort(Errno::EPERM));
                    }
                    match (si.is_dir(), di.is_dir()) {
                        (true, false) => return Err(abort(Errno::ENOTDIR)),
                        (false, true) => return Err(abort(Errno::EISDIR)),
                        (true, true) => {
                            if !dir_is_empty_tx(tx, dino)? {
                                return Err(abort(Errno::ENOTEMPTY));
                            }
                            if !purge_tx(tx, dino, &di, PURGE_CHUNK)? {
                                return Err(abort(Errno::EIO));
                            }
                            count_files_tx(tx, -1)?;
                            let mut dd = get_inode_tx(tx, ddir)?;
                            dd.nlink -= 1;
                            put_inode_tx(tx, &dd)?;
                        }
                        (false, false) => {
                            di.nlink = di.nlink.saturating_sub(1);
                            di.ctime_ns = now;
                            if di.nlink == 0 && !self.is_open(dino) {
                                if !purge_tx(tx, dino, &di, NAMED_PURGE_CHUNK)? {
                                    rest = Some(dino);
                                }
                                count_files_tx(tx, -1)?;
                            } else {
                                if di.nlink == 0 {
                                    count_files_tx(tx, -1)?;
                                    tx.put(key(0, Kind::Orphan, dino), &[])?;
                                }
                                put_inode_tx(tx, &di)?;
                            }
                        }
                    }
                }
                remove_entry_tx(tx, sdir, &sname)?;
                add_entry_tx(tx, ddir, &dname, sino, stype)?;
                if si.is_dir() && sdir != ddir {
                    si.parent = ddir;
                    let mut a = get_inode_tx(tx, sdir)?;
                    a.nlink -= 1;
                    put_inode_tx(tx, &a)?;
                    let mut b = get_inode_tx(tx, ddir)?;
                    b.nlink += 1;
                    put_inode_tx(tx, &b)?;
                }
                si.ctime_ns = now;
                put_inode_tx(tx, &si)?;
            }
            for d in [sdir, ddir] {
                let mut di = get_inode_tx(tx, d)?;
                di.mtime_ns = now;
                di.ctime_ns = now;
                put_inode_tx(tx, &di)?;
            }
            Ok(())
        })?;
        if let Some(ino) = rest {
            self.finish_purge(ino);
        }
        Ok(())
    }

    /// Make a hard link `to` naming the inode at `from`.
    pub fn link(
        &self,
        cred: &Cred,
        from_start: u64,
        from: &[u8],
        to_start: u64,
        to: &[u8],
        follow: bool,
    ) -> FsResult<()> {
        let ino = self.resolve(cred, from_start, from, follow)?;
        if self.getattr(ino)?.is_dir() {
            return Err(Errno::EPERM);
        }
        let (dir, name) = match self.resolve_parent(cred, to_start, to) {
            Err(Errno::EBUSY) => return Err(Errno::EEXIST),
            r => r?,
        };
        if name == b"." || name == b".." {
            return Err(Errno::EEXIST);
        }
        if to.ends_with(b"/") {
            return Err(Errno::ENOENT);
        }
        let d = self.getattr(dir)?;
        cred.check(&d, W_OK | X_OK)?;
        let now = now_ns();
        self.tx(|tx| {
            if lookup_tx(tx, dir, &name)?.is_some() {
                return Err(abort(Errno::EEXIST));
            }
            let mut i = get_inode_tx(tx, ino)?;
            if i.nlink == 0 {
                return Err(abort(Errno::ENOENT));
            }
            if i.nlink >= 65_000 {
                return Err(abort(Errno::EMLINK));
            }
            i.nlink += 1;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)?;
            add_entry_tx(tx, dir, &name, ino, dirent::dtype(i.mode))?;
            let mut d = get_inode_tx(tx, dir)?;
            d.mtime_ns = now;
            d.ctime_ns = now;
            put_inode_tx(tx, &d)
        })
    }

    /// Create a symlink at `path` pointing to `target`.
    pub fn symlink(&self, cred: &Cred, target: &[u8], start: u64, path: &[u8]) -> FsResult<u64> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= PATH_MAX || target.len() > self.block_size as usize {
            return Err(Errno::ENAMETOOLONG);
        }
        let (dir, name, _) = self.new_name(cred, start, path)?;
        let now = now_ns();
        self.tx(|tx| {
            if lookup_tx(tx, dir, &name)?.is_some() {
                return Err(abort(Errno::EEXIST));
            }
            let ino = alloc_ino_tx(tx)?;
            let inode = Inode {
                ino,
                mode: libc::S_IFLNK | 0o777,
                uid: cred.uid,
                gid: cred.gid,
                nlink: 1,
                size: target.len() as u64,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                ..Inode::default()
            };
            put_inode_tx(tx, &inode)?;
            tx.put(key(ino, Kind::Symlink, 0), target)?;
            add_entry_tx(tx, dir, &name, ino, libc::DT_LNK)?;
            let mut d = get_inode_tx(tx, dir)?;
            d.mtime_ns = now;
            d.ctime_ns = now;
            put_inode_tx(tx, &d)?;
            Ok(ino)
        })
    }

    /// The target of the symlink at `path`.
    pub fn readlink(&self, cred: &Cred, start: u64, path: &[u8]) -> FsResult<Vec<u8>> {
        let ino = self.resolve(cred, start, path, false)?;
        if !self.getattr(ino)?.is_symlink() {
            return Err(Errno::EINVAL);
        }
        self.store
            .get_with(key(ino, Kind::Symlink, 0), |b| b.to_vec())
            .map_err(store_err)?
            .ok_or(Errno::EIO)
    }

    /// Entries of directory `ino` from cookie `pos` (0 = start; "." and ".." come first), at most
    /// `max` of them. Each entry's `next` is the cookie to continue after it.
    pub fn readdir(&self, ino: u64, pos: u64, max: usize) -> FsResult<Vec<DirEntry>> {
        let inode = self.getattr(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let mut out = Vec::new();
        if pos == 0 && max > out.len() {
            out.push(DirEntry {
                name: b".".to_vec(),
                ino,
                kind: libc::DT_DIR,
                next: 1,
            });
        }
        if pos <= 1 && max > out.len() {
            out.push(DirEntry {
                name: b"..".to_vec(),
                ino: inode.parent.max(ROOT_INO),
                kind: libc::DT_DIR,
                next: 2,
            });
        }
        if out.len() >= max {
            return Ok(out);
        }
        // Cookies past 1 are name hash + 2, so they survive entries being added and removed.
        let from = pos.max(2) - 2;
        self.store
            .scan(
                key(ino, Kind::Dirent, from),
                key(ino, Kind::Dirent, MAX_OFFSET)
                    .successor()
                    .unwrap_or(Key::MAX),
                |k, v| {
                    let h = offset_of(k);
                    for (name, child, kind) in dirent::decode(v) {
                        out.push(DirEntry {
                            name,
                            ino: child,
                            kind,
                            next: h + 3,
                        });
                    }
                    out.len() < max
                },
            )
            .map_err(store_err)?;
        Ok(out)
    }

    /// chmod.
    pub fn chmod(&self, cred: &Cred, ino: u64, mode: u32) -> FsResult<()> {
        let i = self.getattr(ino)?;
        if !cred.owns(&i) {
            return Err(Errno::EPERM);
        }
        let mut mode = mode & 0o7777;
        if cred.uid != 0 && !cred.in_group(i.gid) {
            mode &= !libc::S_ISGID;
        }
        let now = now_ns();
        self.update_inode(ino, |i| {
            i.mode = (i.mode & libc::S_IFMT) | mode;
            i.ctime_ns = now;
        })
    }

    /// chown (`u32::MAX` leaves a field unchanged).
    pub fn chown(&self, cred: &Cred, ino: u64, uid: u32, gid: u32) -> FsResult<()> {
        let i = self.getattr(ino)?;
        if cred.uid != 0 {
            let uid_ok = uid == u32::MAX || uid == i.uid;
            let gid_ok = gid == u32::MAX || (cred.uid == i.uid && cred.in_group(gid));
            if !uid_ok || !gid_ok || cred.uid != i.uid {
                return Err(Errno::EPERM);
            }
        }
        let now = now_ns();
        self.update_inode(ino, |i| {
            if uid != u32::MAX {
                i.uid = uid;
            }
            if gid != u32::MAX {
                i.gid = gid;
            }
            if !i.is_dir() && (uid != u32::MAX || gid != u32::MAX) {
                i.mode &= !(libc::S_ISUID | libc::S_ISGID);
            }
            i.ctime_ns = now;
        })
    }

    /// Set access and modification times (`None` leaves one unchanged). Setting both to "now"
    /// needs write access; explicit times need ownership.
    pub fn utimens(
        &self,
        cred: &Cred,
        ino: u64,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        explicit: bool,
    ) -> FsResult<()> {
        let i = self.getattr(ino)?;
        if explicit {
            if !cred.owns(&i) {
                return Err(Errno::EPERM);
            }
        } else if !cred.owns(&i) {
            cred.check(&i, W_OK)?;
        }
        let now = now_ns();
        self.update_inode(ino, |i| {
            if let Some(a) = atime_ns {
                i.atime_ns = a;
            }
            if let Some(m) = mtime_ns {
                i.mtime_ns = m;
            }
            i.ctime_ns = now;
        })
    }

    /// Value of extended attribute `name` of `ino`.
    pub fn getxattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        let i = self.getattr(ino)?;
        xattr::check_access(cred, &i, name, false)?;
        let list = self
            .store
            .get_with(key(ino, Kind::Xattr, name_hash(name)), xattr::decode)
            .map_err(store_err)?
            .unwrap_or_default();
        list.into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or(Errno::ENODATA)
    }

    /// Set extended attribute `name` (`XATTR_CREATE` / `XATTR_REPLACE` in `flags`).
    pub fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> FsResult<()> {
        let i = self.getattr(ino)?;
        xattr::check_access(cred, &i, name, true)?;
        if name.is_empty() || name.len() > 255 {
            return Err(Errno::ERANGE);
        }
        if value.len() + name.len() + 8 > self.block_size as usize {
            return Err(Errno::ENOSPC);
        }
        let now = now_ns();
        self.tx(|tx| {
            let k = key(ino, Kind::Xattr, name_hash(name));
            let mut list = tx.get_with(k, xattr::decode)?.unwrap_or_default();
            let exists = list.iter().any(|(n, _)| n == name);
            if exists && flags & libc::XATTR_CREATE != 0 {
                return Err(abort(Errno::EEXIST));
            }
            if !exists && flags & libc::XATTR_REPLACE != 0 {
                return Err(abort(Errno::ENODATA));
            }
            list.retain(|(n, _)| n != name);
            list.push((name.to_vec(), value.to_vec()));
            let v = xattr::encode(&list);
            if v.len() > self.block_size as usize {
                return Err(abort(Errno::ENOSPC));
            }
            tx.put(k, &v)?;
            let mut i = get_inode_tx(tx, ino)?;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)
        })
    }

    /// Names of the extended attributes of `ino` the caller may see.
    pub fn listxattr(&self, cred: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.getattr(ino)?;
        let mut names = Vec::new();
        self.store
            .scan(
                key(ino, Kind::Xattr, 0),
                key(ino, Kind::Xattr, MAX_OFFSET)
                    .successor()
                    .unwrap_or(Key::MAX),
                |_, v| {
                    for (n, _) in xattr::decode(v) {
                        if cred.uid == 0 || !n.starts_with(b"trusted.") {
                            names.push(n);
                        }
                    }
                    true
                },
            )
            .map_err(store_err)?;
        Ok(names)
    }

    /// Remove extended attribute `name`.
    pub fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        let i = self.getattr(ino)?;
        xattr::check_access(cred, &i, name, true)?;
        let now = now_ns();
        self.tx(|tx| {
            let k = key(ino, Kind::Xattr, name_hash(name));
            let mut list = tx.get_with(k, xattr::decode)?.unwrap_or_default();
            let before = list.len();
            list.retain(|(n, _)| n != name);
            if list.len() == before {
                return Err(abort(Errno::ENODATA));
            }
            if list.is_empty() {
                tx.delete(k)?;
            } else {
                tx.put(k, &xattr::encode(&list))?;
            }
            let mut i = get_inode_tx(tx, ino)?;
            i.ctime_ns = now;
            put_inode_tx(tx, &i)
        })
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
