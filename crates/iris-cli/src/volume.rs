//! Opening a volume for a verb, who the verb acts as, and naming paths inside a volume
//! ("/dir/file", bytes, resolved from the root).

use std::path::Path;

use iris_fs::{Cred, DirEntry, Errno, Fs, FsResult, ROOT_INO};
use iris_store::{CreateOptions, OpenOptions, Store, StoreError};

use crate::failure::{errno_text, host_failure};

/// Entries asked of the file system per `readdir` call.
const READDIR_BATCH: usize = 256;

/// Open `volume` as a store (for stat, df, fsck and snapshots).
pub fn open_store(volume: &Path) -> Result<Store, String> {
    // Say "No such file" plainly rather than through the store's open error.
    std::fs::metadata(volume).map_err(|e| host_failure(volume, &e))?;
    Store::open(volume, &OpenOptions::default()).map_err(|e| store_failure(volume, &e))
}

/// Create a volume with an empty file system at `volume`. Its root directory belongs to the
/// caller, as mke2fs gives it to the user who runs it: otherwise only root could write to it.
pub fn create_volume(volume: &Path, opts: &CreateOptions) -> Result<Fs, String> {
    // Store::create rather than Fs::create_volume: its errors say what is wrong with the options.
    let store = Store::create(volume, opts).map_err(|e| store_failure(volume, &e))?;
    let fs = Fs::on_store(store).map_err(|e| format!("{}: {}", volume.display(), errno_text(e)))?;
    let me = Cred::current();
    if me.uid != 0 {
        fs.chown(&Cred::root(), ROOT_INO, me.uid, me.gid())
            .map_err(|e| format!("{}: {}", volume.display(), errno_text(e)))?;
        commit(&fs, volume)?;
    }
    // Huge pages for the new volume's space now, once (on a RAM drive), rather than in the
    // background of the first programs to use it.
    fs.store().settle_pages();
    Ok(fs)
}

/// Open the file system on `volume` (for ls, cat, put, get, rm, mkdir).
pub fn open_fs(volume: &Path) -> Result<Fs, String> {
    let store = open_store(volume)?;
    Fs::on_store(store).map_err(|e| {
        format!(
            "{}: not an Iris file system ({})",
            volume.display(),
            errno_text(e)
        )
    })
}

/// One line for a store error on `volume` (media errors name the path themselves).
pub fn store_failure(volume: &Path, e: &StoreError) -> String {
    match e {
        StoreError::Media(_) => e.to_string(),
        _ => format!("{}: {e}", volume.display()),
    }
}

/// Whom file-system permission checks see: root when running as root (all access, owners kept on
/// import), else the calling user and groups.
pub fn caller() -> Cred {
    let cred = Cred::current();
    if cred.uid == 0 {
        Cred::root()
    } else {
        cred
    }
}

/// How a volume path appears in messages: "VOLUME:/path", as scp and rsync name a remote side.
pub fn label(volume: &Path, path: &[u8]) -> String {
    format!("{}:{}", volume.display(), String::from_utf8_lossy(path))
}

/// One line for a failed operation on a volume path: "VOLUME:/path: No such file or directory".
pub fn path_failure(volume: &Path, path: &[u8], e: Errno) -> String {
    format!("{}: {}", label(volume, path), errno_text(e))
}

/// Commit what a verb changed, so it is durable when the verb exits.
pub fn commit(fs: &Fs, volume: &Path) -> Result<(), String> {
    fs.sync()
        .map_err(|e| format!("{}: commit failed: {}", volume.display(), errno_text(e)))
}

/// `dir` joined with `name` by one slash.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len() + 1 + name.len());
    out.extend_from_slice(dir);
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

/// The name a volume path gives its file: its last component, or `None` when it names no entry
/// of its own ("/", "", "a/..").
pub fn last_name(path: &[u8]) -> Option<&[u8]> {
    path.split(|b| *b == b'/')
        .rfind(|c| !c.is_empty() && *c != b".")
        .filter(|c| *c != b"..")
}

/// Every entry of directory `ino` but "." and "..", sorted by name.
pub fn dir_entries(fs: &Fs, ino: u64) -> FsResult<Vec<DirEntry>> {
    let mut entries = Vec::new();
    let mut cookie = 0u64;
    loop {
        let batch = fs.readdir(ino, cookie, READDIR_BATCH)?;
        let Some(last) = batch.last() else { break };
        // Cookies only grow (a name hash + 2 past the two dot entries); a repeat would loop forever.
        if last.next <= cookie {
            debug_assert!(false, "readdir cookie went from {cookie} to {}", last.next);
            break;
        }
        cookie = last.next;
        entries.extend(
            batch
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_puts_one_slash_between() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/d", b"a"), b"/d/a");
        assert_eq!(join(b"/d/", b"a"), b"/d/a");
    }

    #[test]
    fn last_name_skips_slashes_and_dots() {
        assert_eq!(last_name(b"/a/b"), Some(&b"b"[..]));
        assert_eq!(last_name(b"/a/b/"), Some(&b"b"[..]));
        assert_eq!(last_name(b"a/./"), Some(&b"a"[..]));
        assert_eq!(last_name(b"/"), None);
        assert_eq!(last_name(b"/a/.."), None);
        assert_eq!(last_name(b""), None);
    }
}
