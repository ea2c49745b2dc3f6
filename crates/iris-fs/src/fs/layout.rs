//! Where a file's blocks lie on the volume (`iris filefrag`): its data blocks grouped into
//! extents, runs of file blocks that follow each other on the volume too. A file laid out in
//! order lies in a few long extents; copy-on-write rewrites after a commit move each block
//! rewritten to wherever the allocator had room, and a reader of a scattered file can no longer
//! guess where a block lies from its neighbours (see `FileCache::predict`).

use iris_store::{Key, Located};

use crate::errno::{Errno, FsResult};
use crate::keys::{key, offset_of, Kind, MAX_OFFSET};

use super::{store_err, Fs};

/// A run of file blocks stored in consecutive volume blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The first file block of the run.
    pub logical: u64,
    /// The volume block holding it.
    pub physical: u64,
    /// Blocks in the run.
    pub blocks: u64,
}

/// Where a file's data lies: its extents in file order, and its blocks kept inside the tree's
/// leaves (short values: a small file's only block) rather than in blocks of their own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileLayout {
    /// The extents, ascending by file block; a hole always ends one.
    pub extents: Vec<Extent>,
    /// File blocks whose bytes live inline in a leaf.
    pub inline_blocks: u64,
}

impl FileLayout {
    /// File blocks stored in volume blocks of their own.
    pub fn blocks(&self) -> u64 {
        self.extents.iter().map(|e| e.blocks).sum()
    }

    /// Add file block `logical`, stored at volume block `physical`, after every block added
    /// so far.
    fn push(&mut self, logical: u64, physical: u64) {
        if let Some(last) = self.extents.last_mut() {
            if logical == last.logical + last.blocks && physical == last.physical + last.blocks {
                last.blocks += 1;
                return;
            }
        }
        self.extents.push(Extent {
            logical,
            physical,
            blocks: 1,
        });
    }
}

impl Fs {
    /// Where the data blocks of regular file `ino` lie, as of one moment (a concurrent writer's
    /// changes are either all in or all out of each block's answer).
    pub fn layout(&self, ino: u64) -> FsResult<FileLayout> {
        if self.getattr(ino)?.is_dir() {
            return Err(Errno::EISDIR);
        }
        let (start, end) = (key(ino, Kind::Data, 0), key(ino, Kind::Data, MAX_OFFSET));
        self.store
            .read(|v| {
                // The keys first (a scan hands out values, not where they are), then each
                // one's place, all from the same root.
                let mut keys: Vec<Key> = Vec::new();
                v.scan(start, end, |k, _| {
                    keys.push(k);
                    true
                })?;
                let mut layout = FileLayout::default();
                for k in keys {
                    match v.get_located(k)? {
                        Some(Located::Block(at)) => layout.push(offset_of(k), at.block()),
                        Some(Located::Inline(_)) => layout.inline_blocks += 1,
                        None => {}
                    }
                }
                Ok(layout)
            })
            .map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{test_fs_with_file, ROOT_INO};

    /// A file system with one file whose blocks `blocks` are written, block `b` full of
    /// `b + 1`.
    fn fs_with_file(blocks: &[u64]) -> (Fs, u64) {
        let (fs, ino) = test_fs_with_file();
        let bs = fs.block_size();
        for &b in blocks {
            fs.write(ino, b * bs, &vec![b as u8 + 1; bs as usize])
                .expect("write a block");
        }
        (fs, ino)
    }

    /// The layout of `ino`, checked to hold no two extents that could be one.
    fn layout_of(fs: &Fs, ino: u64) -> FileLayout {
        let layout = fs.layout(ino).expect("layout");
        for pair in layout.extents.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                b.logical >= a.logical + a.blocks,
                "out of order: {a:?} {b:?}"
            );
            assert!(
                b.logical != a.logical + a.blocks || b.physical != a.physical + a.blocks,
                "{a:?} and {b:?} are one run"
            );
        }
        layout
    }

    #[test]
    fn extents_cover_every_block_where_its_bytes_are_and_a_hole_ends_one() {
        let (fs, ino) = fs_with_file(&[0, 1, 2, 3, 10, 11]);
        let layout = layout_of(&fs, ino);
        assert_eq!(layout.inline_blocks, 0);
        assert_eq!(layout.blocks(), 6);
        let logical: Vec<u64> = layout
            .extents
            .iter()
            .flat_map(|e| e.logical..e.logical + e.blocks)
            .collect();
        assert_eq!(logical, vec![0, 1, 2, 3, 10, 11]);
        assert!(
            layout
                .extents
                .iter()
                .all(|e| e.logical >= 10 || e.logical + e.blocks <= 4),
            "an extent runs across the hole: {:?}",
            layout.extents
        );
        // Each extent's volume blocks hold the file's bytes.
        let bs = fs.block_size();
        for e in &layout.extents {
            for i in 0..e.blocks {
                let byte = fs
                    .store()
                    .read(|v| {
                        let at = iris_store::BlockRef::new(e.physical + i, bs as u32);
                        Ok(v.block_bytes(at)?[0])
                    })
                    .expect("read the volume block");
                assert_eq!(byte, (e.logical + i) as u8 + 1, "extent {e:?} block {i}");
            }
        }
    }

    #[test]
    fn blocks_rewritten_after_a_commit_move_and_split_their_extent() {
        let (fs, ino) = fs_with_file(&(0..8).collect::<Vec<_>>());
        fs.store().commit().expect("commit");
        let before = layout_of(&fs, ino);
        let bs = fs.block_size();
        fs.write(ino, 3 * bs, &vec![9u8; bs as usize])
            .expect("rewrite block 3");
        let after = layout_of(&fs, ino);
        assert_eq!(after.blocks(), 8);
        let place = |l: &FileLayout, b: u64| {
            l.extents
                .iter()
                .find(|e| (e.logical..e.logical + e.blocks).contains(&b))
                .map(|e| e.physical + (b - e.logical))
        };
        assert_ne!(
            place(&before, 3),
            place(&after, 3),
            "a committed block moved"
        );
        assert_eq!(place(&before, 2), place(&after, 2));
        // Neither neighbour can follow it on the volume: block 2 is followed by block 3's old
        // place, still held by the commit, and block 4 by whatever was there.
        let three = Extent {
            logical: 3,
            physical: place(&after, 3).expect("block 3 is in an extent"),
            blocks: 1,
        };
        assert!(after.extents.contains(&three), "{:?}", after.extents);
    }

    #[test]
    fn a_directory_has_no_layout() {
        let (fs, _) = fs_with_file(&[]);
        assert_eq!(fs.layout(ROOT_INO), Err(Errno::EISDIR));
    }
}
