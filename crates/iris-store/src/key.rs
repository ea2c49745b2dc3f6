//! Fixed-width ordered keys. A key is 128 bits compared as (hi, lo); the file layer packs
//! (inode, kind, offset) into it so that one inode's records sort together.

/// A 16-byte key, ordered by `hi` then `lo`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Most significant half (the file layer puts the inode here).
    pub hi: u64,
    /// Least significant half (kind and offset).
    pub lo: u64,
}

impl Key {
    /// The smallest key.
    pub const MIN: Key = Key { hi: 0, lo: 0 };
    /// The largest key.
    pub const MAX: Key = Key {
        hi: u64::MAX,
        lo: u64::MAX,
    };

    /// A key from its two halves.
    pub const fn new(hi: u64, lo: u64) -> Self {
        Key { hi, lo }
    }

    /// The key right after this one, or `None` at [`Key::MAX`].
    pub fn successor(self) -> Option<Key> {
        match self.lo.checked_add(1) {
            Some(lo) => Some(Key { hi: self.hi, lo }),
            None => self.hi.checked_add(1).map(|hi| Key { hi, lo: 0 }),
        }
    }
}
