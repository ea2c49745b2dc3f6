//! POSIX error numbers as the file layer's error type.

use iris_store::StoreError;

/// A Linux errno value (EACCES, ENOENT, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<StoreError> for Errno {
    fn from(e: StoreError) -> Self {
        Errno(e.errno())
    }
}

/// Result of a file-layer operation.
pub type FsResult<T> = Result<T, Errno>;
