//! The files Iris keeps beside a volume in /dev/shm, named by the volume's id: the tables of
//! the interposer's record locks, flock locks, lock owners and waits, and of open files
//! (`iris-<kind>-<id>`, [`TABLE_KINDS`]: state of running processes only), and the shadows of
//! files mapped shared (`iris-shadow-<id>-<ino>`: while a process maps an Iris file
//! `MAP_SHARED` its bytes live there, see the interposer's `shadow` module). A shadow outlives
//! the processes that made it, so that the next mapping finds the bytes; this module knows
//! when it must go although its file still exists:
//!
//! - after a rollback or a rebuild of the working state from the superblocks, an inode number
//!   may name another file, or the same file with other bytes: every shadow of the volume is
//!   discarded ([`discard_shadows`]); a file still flagged as shadowed finds no shadow at its
//!   next use, drops the flag and is served from the volume;
//! - copies of its shared libraries (`iris-lib-<id>/`, [`library_dir`]) go with its shadows,
//!   and the host names of sockets bound to its paths (`iris-sock-<id>-<hash>`) with the volume;
//! - when the volume file itself is gone (deleted, or made again with a new id): nothing tells
//!   Iris, so a process that makes a shadow records where its volume lives
//!   (`iris-volume-<id>`: device, inode and path of the volume file, [`note_volume`]) and
//!   removes every file of the recorded volumes whose file is gone ([`sweep_gone_volumes`]).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use iris_store::Store;

/// Where the files beside volumes live.
pub const DIR: &str = "/dev/shm";

/// The kinds of table kept beside a volume, named `iris-<kind>-<id as 16 hex digits>`.
pub const TABLE_KINDS: [&str; 5] = ["locks", "flocks", "owners", "waits", "opens"];

/// The start of the names of the shadows of volume `volume_id`.
fn shadow_prefix(volume_id: u64) -> String {
    format!("iris-shadow-{volume_id:016x}-")
}

/// The path of the shadow of inode `ino` of volume `volume_id`.
pub fn shadow_path(volume_id: u64, ino: u64) -> String {
    format!("{DIR}/{}{ino}", shadow_prefix(volume_id))
}

/// The directory of host copies of the volume's shared libraries (see the interposer's
/// `loadable` module: the loader opens them with the kernel), each at its Iris path below it.
pub fn library_dir(volume_id: u64) -> String {
    format!("{DIR}/iris-lib-{volume_id:016x}")
}

/// The path of the record of volume `volume_id` (see [`note_volume`]).
fn record_path(volume_id: u64) -> String {
    format!("{DIR}/iris-volume-{volume_id:016x}")
}

/// Remove every shadow of volume `volume_id` (and the copies of its libraries), for when its
/// inode numbers may no longer name what they named (a rollback, a rebuild from the
/// superblocks) and no process uses the volume. Returns how many shadows were removed.
pub fn discard_shadows(volume_id: u64) -> usize {
    // Copies of its libraries go too (a copy is checked by size and time only).
    let _ = std::fs::remove_dir_all(library_dir(volume_id));
    let prefix = shadow_prefix(volume_id);
    remove_where(|n| {
        n.strip_prefix(&prefix)
            .is_some_and(|ino| !ino.is_empty() && ino.bytes().all(|c| c.is_ascii_digit()))
    })
}

/// Remove the files of [`DIR`] whose names `matches`; how many went.
fn remove_where(matches: impl Fn(&str) -> bool) -> usize {
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_str().is_some_and(&matches))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// What a record says: where the volume file was when its shadows were made.
struct Record {
    dev: u64,
    ino: u64,
    path: std::path::PathBuf,
}

impl Record {
    fn encode(&self) -> String {
        format!("{} {} {}\n", self.dev, self.ino, self.path.display())
    }

    fn decode(text: &str) -> Option<Record> {
        let text = text.strip_suffix('\n')?;
        let mut parts = text.splitn(3, ' ');
        Some(Record {
            dev: parts.next()?.parse().ok()?,
            ino: parts.next()?.parse().ok()?,
            path: parts.next().filter(|p| p.starts_with('/'))?.into(),
        })
    }

    /// Whether the volume this record names may still be in use: its file is where it was with
    /// this id, or some process still holds it locked (deleted while in use). In doubt (a file
    /// that cannot be read, /proc/locks unreadable): yes.
    fn volume_alive(&self, volume_id: u64) -> bool {
        if let Ok(meta) = std::fs::metadata(&self.path) {
            if meta.dev() == self.dev && meta.ino() == self.ino {
                return Store::peek_volume_id(&self.path).map_or(true, |id| id == volume_id);
            }
        }
        iris_media::lock_holder_pids(self.dev, self.ino).is_none_or(|pids| !pids.is_empty())
    }
}

/// Record that volume `volume_id` lives in the file at `path` (replacing a record that says
/// otherwise), so that a later [`sweep_gone_volumes`] can tell when it is gone.
pub fn note_volume(volume_id: u64, path: &Path) -> std::io::Result<()> {
    let path = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&path)?;
    let text = Record {
        dev: meta.dev(),
        ino: meta.ino(),
        path,
    }
    .encode();
    let at = record_path(volume_id);
    if std::fs::read_to_string(&at).is_ok_and(|t| t == text) {
        return Ok(());
    }
    // Written aside and renamed into place: a sweep never reads half a record.
    let tmp = format!("{at}.{}", std::process::id());
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &at).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Remove the shadows, tables and record of every recorded volume but `keep` whose file is
/// gone (see [`Record::volume_alive`]: no process has it open then, so none uses its tables);
/// shadows of volumes that exist stay, whether or not anyone has them open. Returns the ids
/// of the volumes swept.
pub fn sweep_gone_volumes(keep: u64) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("iris-volume-"))
            .filter(|id| id.len() == 16)
            .and_then(|id| u64::from_str_radix(id, 16).ok())
        else {
            continue;
        };
        if id == keep {
            continue;
        }
        let Some(record) = std::fs::read_to_string(entry.path())
            .ok()
            .as_deref()
            .and_then(Record::decode)
        else {
            continue;
        };
        if !record.volume_alive(id) {
            discard_shadows(id);
            let sockets = format!("iris-sock-{id:016x}-");
            remove_where(|n| n.starts_with(&sockets));
            for kind in TABLE_KINDS {
                let _ = std::fs::remove_file(format!("{DIR}/iris-{kind}-{id:016x}"));
            }
            let _ = std::fs::remove_file(entry.path());
            swept.push(id);
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_garbage_does_not() {
        let r = Record {
            dev: 27,
            ino: 99,
            path: "/dev/shm/a volume.vol".into(),
        };
        let back = Record::decode(&r.encode()).expect("decodes");
        assert_eq!((back.dev, back.ino, back.path), (27, 99, r.path.clone()));
        for bad in ["", "27 99 /x", "27 x /x\n", "27 99 relative\n", "27\n"] {
            assert!(Record::decode(bad).is_none(), "{bad:?}");
        }
    }
}
