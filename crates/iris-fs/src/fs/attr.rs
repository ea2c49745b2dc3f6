//! A file's attributes: mode, owner and times (`chmod`, `chown`, `utimens`) and its extended
//! attributes, each with the permission checks Linux makes. Each change is one transaction on
//! the inode's records.

use iris_store::Key;

use crate::cred::{Cred, W_OK};
use crate::errno::{Errno, FsResult};
use crate::inode::now_ns;
use crate::keys::{key, name_hash, Kind, MAX_OFFSET};
use crate::xattr;

use super::{abort, get_inode_tx, put_inode_tx, store_err, Fs};

impl Fs {
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
}
