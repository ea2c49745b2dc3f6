//! iris-store: a crash-safe copy-on-write tree key-value store over a memory-mapped volume.
//!
//! Where to look: the commit protocol is `commit.rs`, the allocator `allocator.rs`, the tree and
//! its publish rule `tree.rs`, node format `node.rs`, on-volume layout `layout.rs`, superblocks
//! `superblock.rs`, the working header shared by processes `header.rs`, recovery and garbage
//! collection `recovery.rs`, the process-shared lock `volume_lock.rs`, and the public API
//! `store.rs`. Raw pointer access to the mapping is confined to `region.rs`.

mod allocator;
mod blocklist;
mod checksum;
mod commit;
mod copy;
mod error;
mod failpoint;
mod header;
mod key;
mod layout;
mod liveness;
// The intent log's records: a proposal of session 24, tested but not wired yet.
mod log_record;
mod message;
mod node;
mod readers;
mod recovery;
mod region;
mod store;
mod stream;
mod superblock;
mod tree;
mod undo;
mod volume_lock;

pub use copy::copy_bytes;
pub use error::{Result, StoreError};
pub use key::Key;
pub use layout::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
pub use store::{
    kernel_boot_id, BlockPut, BlockRef, CreateOptions, Known, KnownView, Located, NoPatch, Op,
    OpenOptions, Patch, Piece, Places, Prepared, SnapshotView, Stats, Store, ThenPatch, TreeShape,
    Tx, VerifyReport, View, WriteMarks, MAX_PIECES,
};
pub use stream::copy_streaming;
pub use superblock::{
    SnapshotEntry, FORMAT_VERSION, LOG_VERSION, MAX_SNAPSHOTS, MAX_SNAPSHOT_NAME, NO_LOG_VERSION,
    OLDEST_READ_VERSION,
};
