//! How file-system records map onto store keys: `hi` is the inode number, `lo` packs a record kind
//! (top 8 bits) and an offset (low 56 bits), so one inode's records sort together and a file's
//! blocks come out of a range scan in order.

use iris_store::Key;

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// The inode record (stat), offset 0. Inode 0 offset 0 holds the file-system record.
    Inode = 0,
    /// Directory entries, offset = 56-bit hash of the name.
    Dirent = 1,
    /// File data, offset = block number.
    Data = 2,
    /// Extended attributes, offset = hash of the name.
    Xattr = 3,
    /// Symlink target, offset 0.
    Symlink = 4,
    /// Under inode 0: one record per orphan (an inode with no name left, kept while open),
    /// offset = its inode number; reclaimed after a crash.
    Orphan = 5,
}

/// Largest offset a key can carry.
pub(crate) const MAX_OFFSET: u64 = (1 << 56) - 1;

/// The key of record `kind` at `offset` of inode `ino`.
#[inline]
pub(crate) fn key(ino: u64, kind: Kind, offset: u64) -> Key {
    debug_assert!(offset <= MAX_OFFSET);
    Key::new(ino, ((kind as u64) << 56) | offset)
}

/// The offset part of a key.
#[inline]
pub(crate) fn offset_of(k: Key) -> u64 {
    k.lo & MAX_OFFSET
}

/// A 56-bit hash of a name (FNV-1a, folded), for directory entry and xattr keys.
pub(crate) fn name_hash(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 56)) & MAX_OFFSET
}
