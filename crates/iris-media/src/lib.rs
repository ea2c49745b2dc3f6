//! iris-media: the bottom layer of Iris. It maps a volume (a regular file, a file in a RAM drive such
//! as `/dev/shm`, or a block/DAX device) into the address space once, `MAP_SHARED`, and offers
//! `persist(range)`, the only way bytes become durable. It knows nothing of what the bytes mean.
//!
//! Implementations: [`MappedMedia`] for real volumes and [`SimMedia`] for tests, which records what
//! was persisted and can "lose power", keeping only persisted bytes and a random subset of the rest.

mod error;
mod latency;
mod lock;
mod mapped;
mod mapping;
pub mod own_fd;
mod sim;

pub use error::MediaError;
pub use latency::LatencyModel;
pub use lock::{lock_holder_pids, lock_holders, LockMode};
pub use mapped::{MappedMedia, MediaKind};
pub use mapping::{map_aligned, Mapping, HUGE_PAGE};
pub use own_fd::OwnFd;
pub use sim::SimMedia;

/// A volume mapped into memory. All access to the bytes goes through [`Media::base`]; the media
/// itself only maps, grows and persists.
pub trait Media: Send + Sync {
    /// Start of the mapping. Valid for [`Media::mapped_len`] bytes for the life of `self`; only the
    /// first [`Media::backed_len`] bytes may be touched.
    fn base(&self) -> *mut u8;
    /// Bytes of address space reserved by the mapping (the volume's size limit).
    fn mapped_len(&self) -> u64;
    /// Bytes currently backed by the file or device (touching beyond this faults).
    fn backed_len(&self) -> u64;
    /// Grow the backing to at least `len_bytes` (never beyond [`Media::mapped_len`]). Idempotent and
    /// safe to call from several processes.
    fn grow(&self, len_bytes: u64) -> Result<(), MediaError>;
    /// Make `[offset, offset + len)` durable. Returns only once the range is on stable media.
    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError>;
    /// The latency model the store should apply per block read or written.
    fn latency(&self) -> LatencyModel;
    /// Downgrade exclusive access (held while recovering) to shared access for cooperating
    /// processes. Media without an advisory lock do nothing.
    fn share(&self) -> Result<(), MediaError> {
        Ok(())
    }
    /// Give the backed bytes the best page size the medium has (huge pages on a RAM drive), a
    /// hint that can take milliseconds per 2 MiB the first time: call it off the I/O path. The
    /// bytes do not change. Media without such pages do nothing.
    fn settle_pages(&self) {}
    /// Whether a growth asked for backing ahead of need (see [`Media::grow_ahead`]).
    fn wants_grow_ahead(&self) -> bool {
        false
    }
    /// Back the bytes that the last growth asked to have ready ahead of need (allocated, and on
    /// a RAM drive mapped), so that the next growth finds them and costs nothing: call it off
    /// the I/O path, holding no lock. A hint: a failure here leaves the growth to do it (and to
    /// report it). Media that grow no further do nothing.
    fn grow_ahead(&self) {}
}

impl<M: Media + ?Sized> Media for std::sync::Arc<M> {
    fn base(&self) -> *mut u8 {
        (**self).base()
    }
    fn mapped_len(&self) -> u64 {
        (**self).mapped_len()
    }
    fn backed_len(&self) -> u64 {
        (**self).backed_len()
    }
    fn grow(&self, len_bytes: u64) -> Result<(), MediaError> {
        (**self).grow(len_bytes)
    }
    fn persist(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        (**self).persist(offset, len)
    }
    fn latency(&self) -> LatencyModel {
        (**self).latency()
    }
    fn share(&self) -> Result<(), MediaError> {
        (**self).share()
    }
    fn settle_pages(&self) {
        (**self).settle_pages()
    }
    fn wants_grow_ahead(&self) -> bool {
        (**self).wants_grow_ahead()
    }
    fn grow_ahead(&self) {
        (**self).grow_ahead()
    }
}
