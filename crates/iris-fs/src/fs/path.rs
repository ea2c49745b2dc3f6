//! Path resolution and `open`: names walked from a directory inode through `.`, `..` and
//! symlinks (ELOOP after `SYMLOOP_MAX`), with the search permission of each directory checked;
//! `open` with its flags (O_CREAT, O_EXCL, O_TRUNC, O_DIRECTORY, O_NOFOLLOW, O_TMPFILE).

use iris_store::View;

use crate::cred::{Cred, W_OK, X_OK};
use crate::dirent;
use crate::errno::{Errno, FsResult};
use crate::inode::{now_ns, Inode};
use crate::keys::{key, name_hash, Kind};

use super::{
    abort, add_entry_tx, alloc_ino_tx, get_inode_tx, lookup_tx, put_inode_tx, store_err, Fs,
    NAME_MAX, PATH_MAX, ROOT_INO, SYMLOOP_MAX,
};

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

/// Where a path leads (see [`Fs::resolve_or_leave`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// An inode of this file system.
    Inode(u64),
    /// Out of it, through a symlink to an absolute host path: that path.
    Host(Vec<u8>),
}

impl Fs {
    /// Resolve `path` from directory `start` (absolute paths start at the root). With
    /// `follow_last`, a final symlink is followed.
    pub fn resolve(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
        follow_last: bool,
    ) -> FsResult<u64> {
        match self.resolve_or_leave(cred, start, path, follow_last)? {
            Resolved::Inode(ino) => Ok(ino),
            Resolved::Host(_) => Err(Errno::EXDEV),
        }
    }

    /// [`Fs::resolve`], telling where a symlink to an absolute path outside the mount prefix
    /// leads (the host path, with the components after the symlink appended) instead of EXDEV.
    pub fn resolve_or_leave(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
        follow_last: bool,
    ) -> FsResult<Resolved> {
        self.store
            .read(|view| Ok(self.resolve_in(view, cred, start, path, follow_last)))
            .map_err(store_err)?
    }

    /// What `name` in directory `dir` names, from the cache when the change stamp of its
    /// entry key allows (read before the lookup, as for inodes).
    pub(super) fn lookup_in(
        &self,
        view: &View<'_>,
        dir: u64,
        name: &[u8],
    ) -> FsResult<Option<u64>> {
        let hash = name_hash(name);
        let k = key(dir, Kind::Dirent, hash);
        let stamp = view.change_stamp(k);
        if let Some(found) = self.caches.dentry(dir, name, hash, stamp) {
            return Ok(found);
        }
        let found = view
            .get_with(k, |v| dirent::find(v, name))
            .map_err(store_err)?
            .flatten();
        self.caches.put_dentry(dir, name, hash, stamp, found);
        Ok(found)
    }

    fn resolve_in(
        &self,
        view: &View<'_>,
        cred: &Cred,
        start: u64,
        path: &[u8],
        follow_last: bool,
    ) -> FsResult<Resolved> {
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
                self.lookup_in(view, cur, &name)?.ok_or(Errno::ENOENT)?
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
                        let mut host = target;
                        while let Some(c) = pending.pop() {
                            host.push(b'/');
                            host.extend_from_slice(&c);
                        }
                        if trailing_slash {
                            host.push(b'/');
                        }
                        return Ok(Resolved::Host(host));
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
        Ok(Resolved::Inode(cur))
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
    pub(super) fn new_name(
        &self,
        cred: &Cred,
        start: u64,
        path: &[u8],
    ) -> FsResult<(u64, Vec<u8>, Inode)> {
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
                .read(|v| Ok(self.lookup_in(v, dir, &name)))
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
                        cred.gid()
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
        self.open_inode(cred, ino, flags)
    }

    /// Open inode `ino`, already found, per `flags` (access mode, O_DIRECTORY, O_TRUNC): the
    /// checks of [`Fs::open`] after its path is resolved. (A reopen of an open file, as Linux
    /// makes through /proc/self/fd/N or /dev/stdout, even when unlinked.)
    pub fn open_inode(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Inode> {
        let acc = flags & libc::O_ACCMODE;
        let want_write = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let inode = self.getattr(ino)?;
        if inode.is_symlink() {
            // O_NOFOLLOW on a symlink (O_PATH is not served).
            return Err(Errno::ELOOP);
        }
        if flags & libc::O_DIRECTORY != 0 && !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        // O_TRUNC asks for write permission whatever the access mode, and truncates even a
        // read-only open (as Linux does; POSIX leaves O_RDONLY | O_TRUNC unspecified).
        let trunc = flags & libc::O_TRUNC != 0;
        if inode.is_dir() && (want_write || trunc) {
            return Err(Errno::EISDIR);
        }
        let mut mask = 0;
        if acc == libc::O_RDONLY || acc == libc::O_RDWR {
            mask |= crate::cred::R_OK;
        }
        if want_write || trunc {
            mask |= W_OK;
        }
        cred.check(&inode, mask)?;
        if trunc && inode.is_file() && inode.size > 0 {
            self.truncate(ino, 0)?;
            return self.getattr(ino);
        }
        Ok(inode)
    }
}
