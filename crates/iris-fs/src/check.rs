//! The file-system half of fsck: every directory entry names a live inode of the type it says,
//! link counts equal the names (and subdirectories) that reference each inode, every directory's
//! `..` is the directory that names it, every inode is reachable from the root or is a recorded
//! orphan, data blocks lie within their file. The store's own check (trees, checksums, block
//! accounting) is `Store::verify`.

use std::collections::{BTreeMap, BTreeSet};

use iris_store::Key;

use crate::dirent;
use crate::errno::FsResult;
use crate::fs::{Fs, ROOT_INO};
use crate::inode::Inode;
use crate::keys::{offset_of, Kind, MAX_OFFSET};

/// What the check found; `problems` empty means clean.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FsReport {
    /// Inodes found.
    pub inodes: u64,
    /// Directory entries found.
    pub entries: u64,
    /// One line per inconsistency.
    pub problems: Vec<String>,
}

impl Fs {
    /// Walk every record and check the invariants above. Read-only.
    pub fn check(&self) -> FsResult<FsReport> {
        let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
        let mut entries: Vec<(u64, Vec<u8>, u64, u8)> = Vec::new();
        let mut orphans: BTreeSet<u64> = BTreeSet::new();
        let mut data: Vec<(u64, u64, usize)> = Vec::new();
        let mut problems = Vec::new();
        self.store()
            .scan(Key::MIN, Key::MAX, |k, v| {
                let kind = (k.lo >> 56) as u8;
                let off = offset_of(k);
                match kind {
                    x if x == Kind::Inode as u8 && k.hi != 0 => match Inode::decode(k.hi, v) {
                        Ok(i) => {
                            inodes.insert(k.hi, i);
                        }
                        Err(_) => problems.push(format!("inode {}: record unreadable", k.hi)),
                    },
                    x if x == Kind::Dirent as u8 => {
                        for (name, ino, t) in dirent::decode(v) {
                            entries.push((k.hi, name, ino, t));
                        }
                    }
                    x if x == Kind::Data as u8 => data.push((k.hi, off, v.len())),
                    x if x == Kind::Orphan as u8 && k.hi == 0 => {
                        orphans.insert(off);
                    }
                    _ => {}
                }
                true
            })
            .map_err(crate::errno::Errno::from)?;
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut named_by: BTreeMap<u64, u64> = BTreeMap::new();
        for (dir, name, ino, t) in &entries {
            let shown = String::from_utf8_lossy(name);
            match (inodes.get(dir), inodes.get(ino)) {
                (None, _) => {
                    problems.push(format!("entry {shown:?} lives in missing directory {dir}"))
                }
                (Some(d), _) if !d.is_dir() => {
                    problems.push(format!("entry {shown:?} lives in non-directory {dir}"))
                }
                (_, None) => problems.push(format!(
                    "entry {shown:?} in {dir} names missing inode {ino}"
                )),
                (_, Some(i)) => {
                    if dirent::dtype(i.mode) != *t {
                        problems.push(format!(
                            "entry {shown:?} in {dir}: type {t} but inode {ino} is {}",
                            dirent::dtype(i.mode)
                        ));
                    }
                    *refs.entry(*ino).or_insert(0) += 1;
                    if i.is_dir() {
                        *subdirs.entry(*dir).or_insert(0) += 1;
                        if named_by.insert(*ino, *dir).is_some() {
                            problems.push(format!("directory {ino} has more than one name"));
                        }
                    }
                }
            }
        }
        for (ino, i) in &inodes {
            let names = refs.get(ino).copied().unwrap_or(0);
            if i.is_dir() {
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if i.nlink != want {
                    problems.push(format!(
                        "directory {ino}: link count {} but {want} expected",
                        i.nlink
                    ));
                }
                let parent = if *ino == ROOT_INO {
                    ROOT_INO
                } else {
                    named_by.get(ino).copied().unwrap_or(0)
                };
                if *ino != ROOT_INO && parent == 0 {
                    problems.push(format!("directory {ino} is not reachable"));
                } else if i.parent != parent {
                    problems.push(format!(
                        "directory {ino}: '..' is {} but it lives in {parent}",
                        i.parent
                    ));
                }
            } else if names == 0 {
                if i.nlink != 0 || !orphans.contains(ino) {
                    problems.push(format!(
                        "inode {ino} has no name and is not an orphan (link count {})",
                        i.nlink
                    ));
                }
            } else if i.nlink != names {
                problems.push(format!(
                    "inode {ino}: link count {} but {names} names",
                    i.nlink
                ));
            }
        }
        for o in &orphans {
            match inodes.get(o) {
                Some(i) if i.nlink == 0 => {}
                Some(_) => problems.push(format!(
                    "orphan record for inode {o}, which still has names"
                )),
                None => problems.push(format!("orphan record for missing inode {o}")),
            }
        }
        let bs = self.block_size();
        for (ino, block, _len) in &data {
            match inodes.get(ino) {
                None => problems.push(format!("data block {block} of missing inode {ino}")),
                Some(i) if !i.is_file() => {
                    problems.push(format!("data block {block} on non-file {ino}"))
                }
                Some(i) if *block > MAX_OFFSET || block * bs >= i.size => problems.push(format!(
                    "inode {ino}: data block {block} beyond its size {}",
                    i.size
                )),
                _ => {}
            }
        }
        Ok(FsReport {
            inodes: inodes.len() as u64,
            entries: entries.len() as u64,
            problems,
        })
    }
}
