//! The inode record: a full `struct stat`'s worth of metadata, stored inline in the tree under
//! (ino, Inode, 0). Times are nanoseconds since the epoch.

use crate::errno::{Errno, FsResult};

/// Byte offsets of the fields the write path patches in place (see `encode`).
pub(crate) const SIZE_OFF: usize = 16;
pub(crate) const MTIME_OFF: usize = 32;
pub(crate) const CTIME_OFF: usize = 40;
pub(crate) const BLOCKS_OFF: usize = 56;
pub(crate) const FLAGS_OFF: usize = 72;

/// Bytes of an encoded inode record.
pub(crate) const INODE_BYTES: usize = 88;

/// Metadata of one file, directory or symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Inode {
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits (`S_IFREG | 0o644`, ...).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// Last access, ns since the epoch.
    pub atime_ns: i64,
    /// Last modification of contents.
    pub mtime_ns: i64,
    /// Last change of metadata.
    pub ctime_ns: i64,
    /// Device number for device files.
    pub rdev: u64,
    /// Data blocks allocated to the file.
    pub blocks: u64,
    /// For a directory: its parent's inode (what `..` names).
    pub parent: u64,
    /// Flag bits ([`Inode::SHADOWED`]).
    pub flags: u64,
}

impl Inode {
    /// The file's bytes live in a host shadow file while a writable shared mapping exists (the
    /// interposer serves reads and writes from it; see iris-preload `shadow`).
    pub const SHADOWED: u64 = 1;

    /// Whether the file's bytes currently live in a shadow file.
    pub fn is_shadowed(&self) -> bool {
        self.flags & Self::SHADOWED != 0
    }

    /// File type bits.
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == libc::S_IFDIR
    }

    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == libc::S_IFREG
    }

    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.file_type() == libc::S_IFLNK
    }

    pub(crate) fn encode(&self) -> [u8; INODE_BYTES] {
        let mut b = [0u8; INODE_BYTES];
        b[0..4].copy_from_slice(&self.mode.to_le_bytes());
        b[4..8].copy_from_slice(&self.uid.to_le_bytes());
        b[8..12].copy_from_slice(&self.gid.to_le_bytes());
        b[12..16].copy_from_slice(&self.nlink.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..32].copy_from_slice(&self.atime_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.mtime_ns.to_le_bytes());
        b[40..48].copy_from_slice(&self.ctime_ns.to_le_bytes());
        b[48..56].copy_from_slice(&self.rdev.to_le_bytes());
        b[56..64].copy_from_slice(&self.blocks.to_le_bytes());
        b[64..72].copy_from_slice(&self.parent.to_le_bytes());
        b[FLAGS_OFF..FLAGS_OFF + 8].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    pub(crate) fn decode(ino: u64, b: &[u8]) -> FsResult<Inode> {
        if b.len() < INODE_BYTES {
            return Err(Errno::EIO);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Inode {
            ino,
            mode: u32_at(0),
            uid: u32_at(4),
            gid: u32_at(8),
            nlink: u32_at(12),
            size: u64_at(16),
            atime_ns: u64_at(24) as i64,
            mtime_ns: u64_at(32) as i64,
            ctime_ns: u64_at(40) as i64,
            rdev: u64_at(48),
            blocks: u64_at(56),
            parent: u64_at(64),
            flags: u64_at(FLAGS_OFF),
        })
    }
}

/// Now, in ns since the epoch, at the coarse clock's tick (as the kernel stamps file times):
/// cheap to read, and writes within one tick leave the times alone.
pub(crate) fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_REALTIME_COARSE exists on
    // every Linux this runs on (2.6.32+).
    let r = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
