//! Extended attributes: records under (ino, Xattr, hash(name)) listing `[len u8][name][len u32]
//! [value]` for every name with that hash. Namespaces as Linux checks them: `user.` needs the
//! file's read (get) or write (set) permission and a regular file or directory; `trusted.` is
//! root's; `security.` may be read by anyone, written by root; `system.` (ACLs) is not supported.

use crate::cred::{Cred, R_OK, W_OK};
use crate::errno::{Errno, FsResult};
use crate::inode::Inode;

pub(crate) fn decode(v: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < v.len() {
        let nl = v[at] as usize;
        if at + 1 + nl + 4 > v.len() {
            break;
        }
        let name = v[at + 1..at + 1 + nl].to_vec();
        let mut w = [0u8; 4];
        w.copy_from_slice(&v[at + 1 + nl..at + 5 + nl]);
        let vl = u32::from_le_bytes(w) as usize;
        let start = at + 5 + nl;
        if start + vl > v.len() {
            break;
        }
        out.push((name, v[start..start + vl].to_vec()));
        at = start + vl;
    }
    out
}

pub(crate) fn encode(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in list {
        out.push(n.len() as u8);
        out.extend_from_slice(n);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

pub(crate) fn check_access(cred: &Cred, inode: &Inode, name: &[u8], write: bool) -> FsResult<()> {
    if name.starts_with(b"user.") {
        if !(inode.is_file() || inode.is_dir()) {
            return Err(if write { Errno::EPERM } else { Errno::ENODATA });
        }
        cred.check(inode, if write { W_OK } else { R_OK })
    } else if name.starts_with(b"trusted.") {
        if cred.uid == 0 {
            Ok(())
        } else {
            Err(if write { Errno::EPERM } else { Errno::ENODATA })
        }
    } else if name.starts_with(b"security.") {
        if write && cred.uid != 0 {
            Err(Errno::EPERM)
        } else {
            Ok(())
        }
    } else if name.starts_with(b"system.") {
        if write {
            Err(Errno::EOPNOTSUPP)
        } else {
            Err(Errno::ENODATA)
        }
    } else {
        Err(Errno::EOPNOTSUPP)
    }
}
