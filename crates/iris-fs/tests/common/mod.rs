//! Helpers the file layer's integration tests share.

use iris_fs::{Cred, Fs, ROOT_INO};

/// Create (or open) `path` as root in `fs`; its inode number.
pub fn create(fs: &Fs, path: &[u8]) -> u64 {
    fs.open(
        &Cred::root(),
        ROOT_INO,
        path,
        libc::O_CREAT | libc::O_RDWR,
        0o644,
    )
    .expect("create")
    .ino
}
