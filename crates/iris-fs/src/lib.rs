//! iris-fs: POSIX files and directories on the Iris store. Inodes, directory entries, file
//! blocks, symlink targets and extended attributes are records of one tree, keyed by
//! (inode, kind, offset) (see `keys`). The interposer and the `iris` command call this crate;
//! nothing above it touches the tree.

mod cache;
mod check;
mod cred;
mod dirent;
mod errno;
mod fs;
pub mod host_files;
mod inode;
mod interval;
mod keys;
mod opens;
mod range_lock;
mod sync_hint;
mod xattr;

pub use cache::FileCache;
pub use check::{FsReport, RepairReport};
pub use cred::{Cred, R_OK, W_OK, X_OK};
pub use dirent::DirEntry;
pub use errno::{Errno, FsResult};
pub use fs::{
    Extent, FileLayout, Fs, Resolved, StatFs, NAME_MAX, PATH_MAX, RENAME_EXCHANGE,
    RENAME_NOREPLACE, ROOT_INO, SYMLOOP_MAX,
};
pub use inode::Inode;
pub use range_lock::{RangeGuard, RangeLock};

/// The lock for this process's own tables (not the volume's): it spins and yields, never parks,
/// so a child forked while the lock is held by a thread it lacks can simply force it open (a
/// parking lock would hand it to a waiter that does not exist there). Held for a few table
/// operations at a time.
pub type ForkSafeMutex<T> = spin::mutex::Mutex<T, spin::relax::Yield>;
