//! The namespace: directory entries made, moved and removed (`mkdir`, `link`, `symlink`,
//! `unlink`, `rmdir`, `rename` with its flags, unnamed `O_TMPFILE` inodes linked later) and read
//! back (`readdir`, in name-hash order: its cookies are hashes, so they stay valid while entries
//! come and go). Every change of more than one record is one transaction.

use iris_store::{Key, Tx};

use crate::cred::{Cred, W_OK, X_OK};
use crate::dirent::{self, DirEntry};
use crate::errno::{Errno, FsResult};
use crate::inode::{now_ns, Inode};
use crate::keys::{key, offset_of, Kind, MAX_OFFSET};

use super::{
    abort, add_entry_tx, alloc_ino_tx, count_files_tx, get_inode_tx, lookup_tx, purge_tx,
    put_inode_tx, remove_entry_tx, store_err, Fs, TxResult, NAMED_PURGE_CHUNK, PATH_MAX,
    PURGE_CHUNK, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO,
};

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

impl Fs {
    /// Create an unnamed regular file in directory `dir` (O_TMPFILE): it lives while open and
    /// can be given a name with [`Fs::link_inode`].
    pub fn create_unnamed(&self, cred: &Cred, dir: u64, mode: u32) -> FsResult<Inode> {
        let d = self.getattr(dir)?;
        if !d.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        cred.check(&d, W_OK | X_OK)?;
        let now = now_ns();
        // Held open before its orphan record can be seen, so that a process opening the volume
        // meanwhile does not take it for one left by a dead process (see `opens`); numbers a
        // retried transaction allocated and dropped are let go after it.
        let mut held = Vec::new();
        let made = self.tx(|tx| {
            let ino = alloc_ino_tx(tx)?;
            if !held.contains(&ino) {
                self.opens.hold(ino);
                held.push(ino);
            }
            count_files_tx(tx, -1)?; // not counted until linked
            let inode = Inode {
                ino,
                mode: libc::S_IFREG | (mode & 0o7777),
                uid: cred.uid,
                gid: cred.gid(),
                nlink: 0,
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                ..Inode::default()
            };
            put_inode_tx(tx, &inode)?;
            tx.put(key(0, Kind::Orphan, ino), &[])?;
            Ok(ino)
        });
        for &other in held
            .iter()
            .filter(|&&h| made.as_ref().map_or(true, |&ino| h != ino))
        {
            self.opens.let_go(other);
        }
        self.getattr(made?)
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
            cred.gid()
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
                .read(|v| Ok(self.lookup_in(v, dir, &name)))
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
            if i.nlink == 0 && !self.is_open_anywhere(ino) {
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
                            if di.nlink == 0 && !self.is_open_anywhere(dino) {
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
                gid: cred.gid(),
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
}
