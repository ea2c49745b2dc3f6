//! Advisory locking of a volume file: cooperating Iris processes hold a shared lock while they map
//! it; offline work (mkfs over it, fsck --repair, rollback) needs it exclusively. A refused opener
//! is told who holds the lock, read from `/proc/locks`.

use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::MediaError;

/// How a volume is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Several cooperating processes may map it at once.
    Shared,
    /// Only this opener.
    Exclusive,
    /// Only this opener if nobody holds it now; else `InUse` without naming the holders (the
    /// caller joins them: reading `/proc/locks` for a message nobody reads cost every process
    /// that opened a shared volume a read of every lock in the system).
    ExclusiveIfFree,
}

/// Take the advisory lock on `file` without waiting.
pub(crate) fn lock(file: &std::fs::File, path: &Path, mode: LockMode) -> Result<(), MediaError> {
    let op = match mode {
        LockMode::Shared => libc::LOCK_SH,
        LockMode::Exclusive | LockMode::ExclusiveIfFree => libc::LOCK_EX,
    } | libc::LOCK_NB;
    // SAFETY: flock on a valid, owned descriptor; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        let holders = match mode {
            LockMode::ExclusiveIfFree => None,
            _ => lock_holders(file),
        }
        .unwrap_or_else(|| "another process".to_string());
        return Err(MediaError::InUse {
            path: path.to_path_buf(),
            holders,
        });
    }
    Err(MediaError::Io {
        op: "flock",
        path: path.to_path_buf(),
        source: err,
    })
}

/// Names the processes holding a lock on `file`, as "pid 12, pid 40", from `/proc/locks`.
pub fn lock_holders(file: &std::fs::File) -> Option<String> {
    let meta = file.metadata().ok()?;
    let pids = lock_holder_pids(meta.dev(), meta.ino())?;
    if pids.is_empty() {
        None
    } else {
        Some(
            pids.iter()
                .map(|p| format!("pid {p}"))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

/// The processes other than this one holding a lock on the file with device `dev` and inode
/// `ino` (also after its last name is gone), from `/proc/locks`; `None` if that cannot be read.
pub fn lock_holder_pids(dev: u64, ino: u64) -> Option<Vec<u32>> {
    // /proc/locks prints MAJOR:MINOR:INODE with major and minor in hex.
    let major = libc::major(dev);
    let minor = libc::minor(dev);
    let wanted = format!("{major:02x}:{minor:02x}:{ino}");
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    let me = std::process::id();
    Some(
        text.lines()
            .filter(|l| !l.contains("->"))
            .filter(|l| l.split_whitespace().nth(5) == Some(wanted.as_str()))
            .filter_map(|l| l.split_whitespace().nth(4)?.parse().ok())
            .filter(|p| *p != me)
            .collect(),
    )
}
