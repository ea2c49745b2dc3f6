//! Errors of the store: each variant is something a caller can act on.

use iris_media::MediaError;

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The media failed (open, map, grow, persist).
    #[error(transparent)]
    Media(#[from] MediaError),
    /// The volume's bytes are not a valid Iris structure; `what` names the part and the fault.
    #[error("corrupt volume: {what}")]
    Corrupt {
        /// What is wrong, e.g. "node 812: bad magic".
        what: String,
    },
    /// No free block is left and the volume cannot grow.
    #[error("no space left on volume")]
    NoSpace,
    /// A persist failed earlier: this handle refuses writes until the volume is reopened.
    #[error("volume failed a persist (I/O error) and refuses writes until reopened")]
    Failed,
    /// Other processes have the volume open with shared state this build does not trust
    /// (another Iris build's layout): it is not rebuilt under them.
    #[error(
        "volume is open by processes whose shared state this build cannot read (another Iris \
         build?); close them, or run the same build"
    )]
    Busy,
    /// A value larger than one block, or an invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// No snapshot of that name.
    #[error("no snapshot named {0:?}")]
    NoSnapshot(String),
    /// A snapshot of that name exists already, or the table is full.
    #[error("snapshot {0:?}: {1}")]
    SnapshotTable(String, &'static str),
    /// The volume is read-only (a snapshot view).
    #[error("read-only")]
    ReadOnly,
    /// A write made on a condition ([`crate::ThenPatch::only_if_unchanged_since`]) found the
    /// patched key changed since: nothing was written.
    #[error("changed since it was read: nothing written")]
    Changed,
    /// The volume is of a format version this build does not read (its superblock is intact).
    #[error(
        "volume format version {found}: this build reads format version {reads} only; \
         copy the files out with the build that wrote it, then re-create the volume \
         (`iris mkfs --force`)"
    )]
    Format {
        /// The volume's version.
        found: u32,
        /// The version this build reads.
        reads: u32,
    },
}

impl StoreError {
    /// Shorthand for a [`StoreError::Corrupt`].
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        StoreError::Corrupt { what: what.into() }
    }

    /// The errno a POSIX layer above should report for this error.
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::Media(e) => e.raw_os_error().unwrap_or(libc::EIO),
            StoreError::Corrupt { .. } => libc::EUCLEAN,
            StoreError::NoSpace => libc::ENOSPC,
            StoreError::Failed => libc::EIO,
            StoreError::Busy => libc::EBUSY,
            StoreError::Invalid(_) => libc::EINVAL,
            StoreError::NoSnapshot(_) => libc::ENOENT,
            StoreError::SnapshotTable(..) => libc::EEXIST,
            StoreError::ReadOnly => libc::EROFS,
            StoreError::Changed => libc::EAGAIN,
            StoreError::Format { .. } => libc::EPROTONOSUPPORT,
        }
    }
}

/// Result of a store operation.
pub type Result<T> = std::result::Result<T, StoreError>;
