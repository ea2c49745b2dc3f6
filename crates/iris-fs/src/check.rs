//! The file-system half of fsck: every directory entry names a live inode of the type it says,
//! link counts equal the names (and subdirectories) that reference each inode, every directory's
//! `..` is the directory that names it, every inode is reachable from the root or is a recorded
//! orphan, data blocks lie within their file. The store's own check (trees, checksums, block
//! accounting) is `Store::verify`.
//!
//! Repair, as e2fsck does it: entries that name nothing (or live in no directory) are removed,
//! wrong entry types and link counts and `..` are set to what the tree says, a second name of a
//! directory is removed, inodes that nothing names are given a name `#INO` in `/lost+found`,
//! stale orphan records and data records outside any file are deleted, and an unreadable inode
//! record is deleted (its names and blocks then go in the next pass). Passes repeat until the
//! check is clean; each pass is one transaction.

use std::collections::{BTreeMap, BTreeSet};

use iris_store::Key;

use crate::cred::Cred;
use crate::dirent;
use crate::errno::{Errno, FsResult};
use crate::fs::{
    add_entry_tx, get_inode_tx, put_inode_tx, remove_entry_tx, Fs, TxResult, ROOT_INO,
};
use crate::inode::Inode;
use crate::keys::{key, offset_of, Kind, MAX_OFFSET};

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

/// What a repair did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The problems repaired, one line each.
    pub fixed: Vec<String>,
    /// The problems the check still finds afterwards (empty: the file system is clean).
    pub left: Vec<String>,
}

/// One change that removes one problem.
#[derive(Debug, Clone)]
enum Fix {
    DropEntry {
        dir: u64,
        name: Vec<u8>,
    },
    SetEntryType {
        dir: u64,
        name: Vec<u8>,
        ino: u64,
        t: u8,
    },
    SetNlink {
        ino: u64,
        nlink: u32,
    },
    SetParent {
        ino: u64,
        parent: u64,
    },
    Adopt {
        ino: u64,
        t: u8,
        dir: bool,
    },
    DropRecord(Key),
}

/// Where nameless inodes are given a name.
const LOST_FOUND: &[u8] = b"lost+found";

impl Fs {
    /// Walk every record and check the invariants above. Read-only.
    pub fn check(&self) -> FsResult<FsReport> {
        Ok(self.analyze()?.0)
    }

    /// Repair what [`Fs::check`] finds (see the module's doc), as root; commit afterwards to
    /// keep it.
    pub fn repair(&self) -> FsResult<RepairReport> {
        let mut fixed = Vec::new();
        for _ in 0..4 {
            let (report, fixes) = self.analyze()?;
            if report.problems.is_empty() || fixes.is_empty() {
                break;
            }
            let lost_found = if fixes.iter().any(|(_, f)| matches!(f, Fix::Adopt { .. })) {
                Some(self.lost_found()?)
            } else {
                None
            };
            self.tx(|tx| {
                for (_, f) in &fixes {
                    apply(tx, f, lost_found)?;
                }
                Ok(())
            })?;
            fixed.extend(fixes.into_iter().map(|(line, _)| line));
        }
        Ok(RepairReport {
            fixed,
            left: self.check()?.problems,
        })
    }

    /// The inode of /lost+found, made if missing.
    fn lost_found(&self) -> FsResult<u64> {
        let root = Cred::root();
        match self.resolve(&root, ROOT_INO, LOST_FOUND, false) {
            Ok(ino) => Ok(ino),
            Err(Errno::ENOENT) => self.mkdir(&root, ROOT_INO, LOST_FOUND, 0o700),
            Err(e) => Err(e),
        }
    }

    /// The check, and for each problem it can repair the fix.
    fn analyze(&self) -> FsResult<(FsReport, Vec<(String, Fix)>)> {
        let mut fixes: Vec<(String, Fix)> = Vec::new();
        let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
        let mut entries: Vec<(u64, Vec<u8>, u64, u8)> = Vec::new();
        let mut orphans: BTreeSet<u64> = BTreeSet::new();
        let mut data: Vec<(u64, u64, usize)> = Vec::new();
        let mut problems = Vec::new();
        let mut bad: Vec<(String, Key)> = Vec::new();
        self.store()
            .scan(Key::MIN, Key::MAX, |k, v| {
                let kind = (k.lo >> 56) as u8;
                let off = offset_of(k);
                match kind {
                    x if x == Kind::Inode as u8 && k.hi != 0 => match Inode::decode(k.hi, v) {
                        Ok(i) => {
                            inodes.insert(k.hi, i);
                        }
                        Err(_) => bad.push((format!("inode {}: record unreadable", k.hi), k)),
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
        for (line, k) in bad {
            fixes.push((line, Fix::DropRecord(k)));
        }
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut named_by: BTreeMap<u64, u64> = BTreeMap::new();
        for (dir, name, ino, t) in &entries {
            let shown = String::from_utf8_lossy(name);
            let drop = Fix::DropEntry {
                dir: *dir,
                name: name.clone(),
            };
            match (inodes.get(dir), inodes.get(ino)) {
                (None, _) => fixes.push((
                    format!("entry {shown:?} lives in missing directory {dir}"),
                    drop,
                )),
                (Some(d), _) if !d.is_dir() => fixes.push((
                    format!("entry {shown:?} lives in non-directory {dir}"),
                    drop,
                )),
                (_, None) => fixes.push((
                    format!("entry {shown:?} in {dir} names missing inode {ino}"),
                    drop,
                )),
                (_, Some(i)) if i.is_dir() && named_by.contains_key(ino) => fixes.push((
                    format!("directory {ino} has more than one name ({shown:?} in {dir})"),
                    drop,
                )),
                (_, Some(i)) => {
                    let want = dirent::dtype(i.mode);
                    if want != *t {
                        fixes.push((
                            format!("entry {shown:?} in {dir}: type {t} but inode {ino} is {want}"),
                            Fix::SetEntryType {
                                dir: *dir,
                                name: name.clone(),
                                ino: *ino,
                                t: want,
                            },
                        ));
                    }
                    *refs.entry(*ino).or_insert(0) += 1;
                    if i.is_dir() {
                        *subdirs.entry(*dir).or_insert(0) += 1;
                        named_by.insert(*ino, *dir);
                    }
                }
            }
        }
        for (ino, i) in &inodes {
            let names = refs.get(ino).copied().unwrap_or(0);
            if i.is_dir() {
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if i.nlink != want {
                    fixes.push((
                        format!(
                            "directory {ino}: link count {} but {want} expected",
                            i.nlink
                        ),
                        Fix::SetNlink {
                            ino: *ino,
                            nlink: want,
                        },
                    ));
                }
                let parent = if *ino == ROOT_INO {
                    ROOT_INO
                } else {
                    named_by.get(ino).copied().unwrap_or(0)
                };
                if *ino != ROOT_INO && parent == 0 {
                    fixes.push((
                        format!("directory {ino} is not reachable"),
                        Fix::Adopt {
                            ino: *ino,
                            t: libc::DT_DIR,
                            dir: true,
                        },
                    ));
                } else if i.parent != parent {
                    fixes.push((
                        format!(
                            "directory {ino}: '..' is {} but it lives in {parent}",
                            i.parent
                        ),
                        Fix::SetParent { ino: *ino, parent },
                    ));
                }
            } else if names == 0 {
                if i.nlink != 0 || !orphans.contains(ino) {
                    // Never thrown away: it may hold data. It gets a name.
                    fixes.push((
                        format!(
                            "inode {ino} has no name and is not an orphan (link count {})",
                            i.nlink
                        ),
                        Fix::Adopt {
                            ino: *ino,
                            t: dirent::dtype(i.mode),
                            dir: false,
                        },
                    ));
                }
            } else if i.nlink != names {
                fixes.push((
                    format!("inode {ino}: link count {} but {names} names", i.nlink),
                    Fix::SetNlink {
                        ino: *ino,
                        nlink: names,
                    },
                ));
            }
        }
        for o in &orphans {
            match inodes.get(o) {
                Some(i) if i.nlink == 0 => {}
                Some(_) => fixes.push((
                    format!("orphan record for inode {o}, which still has names"),
                    Fix::DropRecord(key(0, Kind::Orphan, *o)),
                )),
                None => fixes.push((
                    format!("orphan record for missing inode {o}"),
                    Fix::DropRecord(key(0, Kind::Orphan, *o)),
                )),
            }
        }
        let bs = self.block_size();
        for (ino, block, _len) in &data {
            let drop = Fix::DropRecord(key(*ino, Kind::Data, *block));
            match inodes.get(ino) {
                None => fixes.push((format!("data block {block} of missing inode {ino}"), drop)),
                Some(i) if !i.is_file() => {
                    fixes.push((format!("data block {block} on non-file {ino}"), drop))
                }
                Some(i) if *block > MAX_OFFSET || block * bs >= i.size => fixes.push((
                    format!("inode {ino}: data block {block} beyond its size {}", i.size),
                    drop,
                )),
                _ => {}
            }
        }
        problems.extend(fixes.iter().map(|(line, _)| line.clone()));
        Ok((
            FsReport {
                inodes: inodes.len() as u64,
                entries: entries.len() as u64,
                problems,
            },
            fixes,
        ))
    }
}

/// Make one fix inside a repair's transaction.
fn apply(tx: &mut iris_store::Tx<'_, '_>, fix: &Fix, lost_found: Option<u64>) -> TxResult<()> {
    match fix {
        Fix::DropEntry { dir, name } => remove_entry_tx(tx, *dir, name),
        Fix::SetEntryType { dir, name, ino, t } => add_entry_tx(tx, *dir, name, *ino, *t),
        Fix::SetNlink { ino, nlink } => {
            let mut i = get_inode_tx(tx, *ino)?;
            i.nlink = *nlink;
            put_inode_tx(tx, &i)
        }
        Fix::SetParent { ino, parent } => {
            let mut i = get_inode_tx(tx, *ino)?;
            i.parent = *parent;
            put_inode_tx(tx, &i)
        }
        Fix::Adopt { ino, t, dir } => {
            let Some(lf) = lost_found else {
                return Ok(());
            };
            add_entry_tx(tx, lf, format!("#{ino}").as_bytes(), *ino, *t)?;
            if *dir {
                let mut i = get_inode_tx(tx, *ino)?;
                i.parent = lf;
                put_inode_tx(tx, &i)?;
            }
            Ok(())
        }
        Fix::DropRecord(k) => tx.delete(*k).map(|_| ()),
    }
}
