//! Errors of the media layer.

use std::io;
use std::path::PathBuf;

/// What can go wrong mapping or persisting a volume.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The operating system refused an operation on the volume.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation that failed (open, map, msync, ...).
        op: &'static str,
        /// The volume's path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Another, unrelated opener holds the volume.
    #[error("volume {path} is in use by {holders} (advisory lock)")]
    InUse {
        /// The volume's path.
        path: PathBuf,
        /// Who holds it, e.g. "pid 1234".
        holders: String,
    },
    /// The volume cannot grow past the size fixed at creation (or a block device's size).
    #[error("volume cannot grow to {wanted_bytes} bytes: limit is {limit_bytes}")]
    GrowLimit {
        /// Requested backed length.
        wanted_bytes: u64,
        /// The mapping's limit.
        limit_bytes: u64,
    },
    /// A simulated power loss happened (tests only): nothing after it reaches the media.
    #[error("simulated power loss")]
    PowerLost,
    /// Bad arguments to create or open.
    #[error("{0}")]
    Invalid(String),
}

impl MediaError {
    /// Build an [`MediaError::Io`] from the last OS error.
    pub(crate) fn last_os(op: &'static str, path: &std::path::Path) -> Self {
        MediaError::Io {
            op,
            path: path.to_path_buf(),
            source: io::Error::last_os_error(),
        }
    }

    /// The raw errno behind this error, where there is one (EIO, ENOSPC, ...).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            MediaError::Io { source, .. } => source.raw_os_error(),
            MediaError::PowerLost => Some(libc::EIO),
            _ => None,
        }
    }
}
