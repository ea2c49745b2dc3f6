//! Caller identity and permission checks, as Linux makes them from mode bits.

use std::cell::Cell;

use crate::errno::{Errno, FsResult};
use crate::inode::Inode;

/// Who is asking: the identity the kernel would check (fsuid/fsgid and groups).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    /// Effective (file-system) user id.
    pub uid: u32,
    /// Effective (file-system) group id; `None` until first asked for (see [`Cred::current`]).
    gid: Cell<Option<u32>>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// Read permission.
pub const R_OK: u32 = 4;
/// Write permission.
pub const W_OK: u32 = 2;
/// Execute / search permission.
pub const X_OK: u32 = 1;

impl Cred {
    /// The identity of user `uid` in group `gid` with supplementary `groups`.
    pub fn new(uid: u32, gid: u32, groups: Vec<u32>) -> Self {
        Cred {
            uid,
            gid: Cell::new(Some(gid)),
            groups,
        }
    }

    /// Root.
    pub fn root() -> Self {
        Cred::new(0, 0, Vec::new())
    }

    /// Effective (file-system) group id: new files' group. Read from the process the first
    /// time for root's identity from [`Cred::current`].
    pub fn gid(&self) -> u32 {
        if let Some(g) = self.gid.get() {
            return g;
        }
        // SAFETY: getegid takes no arguments and cannot fail.
        let g = unsafe { libc::getegid() };
        self.gid.set(Some(g));
        g
    }

    /// The calling process's identity. Root's supplementary groups are left out, and its group
    /// is read only when asked for ([`Cred::gid`]: a new file's group): no check consults
    /// them (root passes every mode check, and every ownership rule that looks at groups looks
    /// only for other users), and reading them cost two system calls and an allocation per
    /// request.
    pub fn current() -> Self {
        // SAFETY: geteuid takes no arguments and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid == 0 {
            return Cred {
                uid,
                gid: Cell::new(None),
                groups: Vec::new(),
            };
        }
        // SAFETY: getegid takes no arguments and cannot fail.
        let gid = unsafe { libc::getegid() };
        let mut groups = vec![0 as libc::gid_t; 64];
        // SAFETY: the buffer holds 64 gids, and we pass that size.
        let n = unsafe { libc::getgroups(64, groups.as_mut_ptr()) };
        groups.truncate(usize::try_from(n).unwrap_or(0));
        Cred::new(uid, gid, groups)
    }

    /// Whether this identity is in group `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid() == gid || self.groups.contains(&gid)
    }

    /// Check `mask` (R_OK|W_OK|X_OK) against `inode`'s mode bits: EACCES if denied.
    pub fn check(&self, inode: &Inode, mask: u32) -> FsResult<()> {
        if self.uid == 0 {
            // Root may read and write anything; it may execute only if some x bit is set
            // (directories are always searchable).
            if mask & X_OK != 0 && !inode.is_dir() && inode.mode & 0o111 == 0 {
                return Err(Errno::EACCES);
            }
            return Ok(());
        }
        let bits = if self.uid == inode.uid {
            (inode.mode >> 6) & 7
        } else if self.in_group(inode.gid) {
            (inode.mode >> 3) & 7
        } else {
            inode.mode & 7
        };
        if bits & mask == mask {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Whether this identity owns `inode` (or is root): needed for chmod, utimes with times, ...
    pub fn owns(&self, inode: &Inode) -> bool {
        self.uid == 0 || self.uid == inode.uid
    }
}
