//! The two superblocks (A in block 0, B in block 1). A commit writes the older one; at open the
//! valid one with the higher generation wins, so a superblock torn by power loss falls back to the
//! other. Each is checksummed (crc32c) over its first 508 bytes; the format fits a 512-byte block.

use crate::error::{Result, StoreError};
use crate::layout::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

/// "IRISVOL\0"
pub(crate) const SUPER_MAGIC: u64 = u64::from_le_bytes(*b"IRISVOL\0");
/// On-volume format version this code writes. Version 7 added the fresh map and undo records
/// that hold a whole 4 KiB write (a larger working header), which moved every region after the
/// header: older volumes are refused with a message that says to re-create them. (Version 6
/// checksummed only what a node holds, not its free gap.) Version 9: the intent log may hold
/// data records (a synced write's bytes, see `log_record`), which a build of version 8 would
/// skip in its replay and so lose; volumes of version 8 are still read.
pub const FORMAT_VERSION: u32 = 9;
/// The first version with an intent log (see [`LogArea`]), whose records all name blocks.
pub const LOG_VERSION: u32 = 8;
/// The version of volumes without an intent log (see [`LogArea`]): still read, and still
/// written as such, so a build that knows no log never opens a volume whose log it would not
/// replay.
pub const NO_LOG_VERSION: u32 = 7;
/// The oldest format version this code reads.
pub const OLDEST_READ_VERSION: u32 = 7;
/// Snapshot table capacity.
pub const MAX_SNAPSHOTS: usize = 8;
/// Longest snapshot name, in bytes.
pub const MAX_SNAPSHOT_NAME: usize = 24;
pub(crate) const SUPER_BYTES: usize = 512;
const CHECKSUM_OFF: usize = 508;
const SNAP_OFF: usize = 80;
pub(crate) const SNAP_ENTRY_BYTES: usize = 48;
/// The intent log's place (format 8): first block, blocks, then the sequence number replay
/// starts from.
const LOG_FIRST: usize = SNAP_OFF + MAX_SNAPSHOTS * SNAP_ENTRY_BYTES;
const LOG_BLOCKS: usize = LOG_FIRST + 8;
const LOG_START: usize = LOG_BLOCKS + 4;
const _: () = assert!(LOG_START + 8 <= CHECKSUM_OFF);

/// Where a volume's intent log lives, and where its replay starts: records numbered `start`
/// on were written after the commit of this superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogArea {
    /// Its first block.
    pub first: u64,
    /// Its length in blocks.
    pub blocks: u32,
    /// The first record number the commit does not hold.
    pub start: u64,
}

/// One entry of the snapshot table: a named, kept-alive committed root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// Its name (1 to 24 bytes, UTF-8).
    pub name: String,
    /// Root block of the tree it keeps (0 for an empty tree).
    pub root: u64,
    /// Generation of the commit it was taken from.
    pub generation: u64,
    /// When it was taken, ns since the epoch.
    pub time_ns: u64,
}

impl SnapshotEntry {
    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[..SNAP_ENTRY_BYTES].fill(0);
        let name = self.name.as_bytes();
        out[..name.len()].copy_from_slice(name);
        out[24..32].copy_from_slice(&self.root.to_le_bytes());
        out[32..40].copy_from_slice(&self.generation.to_le_bytes());
        out[40..48].copy_from_slice(&self.time_ns.to_le_bytes());
    }

    pub(crate) fn decode(raw: &[u8]) -> Result<Self> {
        let name_len = raw[..MAX_SNAPSHOT_NAME]
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(MAX_SNAPSHOT_NAME);
        let name = std::str::from_utf8(&raw[..name_len])
            .map_err(|_| StoreError::corrupt("snapshot name is not UTF-8"))?
            .to_string();
        if name.is_empty() {
            return Err(StoreError::corrupt("snapshot with an empty name"));
        }
        Ok(SnapshotEntry {
            name,
            root: le64(raw, 24),
            generation: le64(raw, 32),
            time_ns: le64(raw, 40),
        })
    }
}

/// A decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub block_size: u32,
    pub generation: u64,
    pub max_blocks: u64,
    pub backed_blocks: u64,
    pub root: u64,
    pub volume_id: u64,
    pub commit_time_ns: u64,
    pub inline_max: u32,
    /// Bytes of messages an internal node may buffer (0: a plain B+-tree).
    pub buffer_bytes: u32,
    pub snapshots: Vec<SnapshotEntry>,
    /// The intent log (format 8), or none (format 7).
    pub log: Option<LogArea>,
}

/// The little-endian u64 at byte `at` of `b` (an on-media field; the caller checked the length).
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The little-endian u32 at byte `at` of `b` (as [`le64`]).
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

impl Superblock {
    /// Encode into exactly [`SUPER_BYTES`] bytes, checksum last.
    pub fn encode(&self) -> [u8; SUPER_BYTES] {
        let mut b = [0u8; SUPER_BYTES];
        b[0..8].copy_from_slice(&SUPER_MAGIC.to_le_bytes());
        let version = if self.log.is_some() {
            FORMAT_VERSION
        } else {
            NO_LOG_VERSION
        };
        b[8..12].copy_from_slice(&version.to_le_bytes());
        b[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.max_blocks.to_le_bytes());
        b[32..40].copy_from_slice(&self.backed_blocks.to_le_bytes());
        b[40..48].copy_from_slice(&self.root.to_le_bytes());
        b[48..56].copy_from_slice(&self.volume_id.to_le_bytes());
        b[56..64].copy_from_slice(&self.commit_time_ns.to_le_bytes());
        b[64..68].copy_from_slice(&self.inline_max.to_le_bytes());
        b[68..72].copy_from_slice(&(self.snapshots.len() as u32).to_le_bytes());
        b[72..76].copy_from_slice(&self.buffer_bytes.to_le_bytes());
        for (i, s) in self.snapshots.iter().take(MAX_SNAPSHOTS).enumerate() {
            let at = SNAP_OFF + i * SNAP_ENTRY_BYTES;
            s.encode(&mut b[at..at + SNAP_ENTRY_BYTES]);
        }
        if let Some(log) = self.log {
            b[LOG_FIRST..LOG_FIRST + 8].copy_from_slice(&log.first.to_le_bytes());
            b[LOG_BLOCKS..LOG_BLOCKS + 4].copy_from_slice(&log.blocks.to_le_bytes());
            b[LOG_START..LOG_START + 8].copy_from_slice(&log.start.to_le_bytes());
        }
        let crc = crate::checksum::crc32c(&b[..CHECKSUM_OFF]);
        b[CHECKSUM_OFF..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and validate one superblock; `which` names it in errors ("A" or "B").
    pub fn decode(b: &[u8], which: &str) -> Result<Self> {
        let bad = |what: &str| StoreError::corrupt(format!("superblock {which}: {what}"));
        if b.len() < SUPER_BYTES {
            return Err(bad("truncated"));
        }
        if le64(b, 0) != SUPER_MAGIC {
            return Err(bad("bad magic (not an Iris volume)"));
        }
        // The checksum first: a flipped version byte is corruption, an intact superblock of
        // another version a volume of another format.
        if crate::checksum::crc32c(&b[..CHECKSUM_OFF]) != le32(b, CHECKSUM_OFF) {
            return Err(bad("checksum mismatch"));
        }
        let version = le32(b, 8);
        if !(OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(StoreError::Format {
                found: version,
                reads: FORMAT_VERSION,
            });
        }
        let block_size = le32(b, 12);
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
        {
            return Err(bad(&format!("bad block size {block_size}")));
        }
        let max_blocks = le64(b, 24);
        let backed_blocks = le64(b, 32);
        if backed_blocks > max_blocks || max_blocks == 0 {
            return Err(bad("backed size beyond size limit"));
        }
        let root = le64(b, 40);
        if root >= backed_blocks {
            return Err(bad(&format!("root {root} beyond the volume")));
        }
        let inline_max = le32(b, 64);
        if inline_max > block_size / 2 {
            return Err(bad("inline limit larger than half a block"));
        }
        let buffer_bytes = le32(b, 72);
        if !buffer_bytes.is_multiple_of(8) || buffer_bytes > block_size / 2 {
            return Err(bad(&format!("bad buffer size {buffer_bytes}")));
        }
        let count = le32(b, 68) as usize;
        if count > MAX_SNAPSHOTS {
            return Err(bad("snapshot table overflow"));
        }
        let mut snapshots = Vec::with_capacity(count);
        for i in 0..count {
            let at = SNAP_OFF + i * SNAP_ENTRY_BYTES;
            let s = SnapshotEntry::decode(&b[at..at + SNAP_ENTRY_BYTES])?;
            if s.root >= backed_blocks {
                return Err(bad(&format!(
                    "snapshot {:?} root beyond the volume",
                    s.name
                )));
            }
            snapshots.push(s);
        }
        let log = if version >= LOG_VERSION {
            let (first, blocks) = (le64(b, LOG_FIRST), le32(b, LOG_BLOCKS));
            if blocks == 0 || first < 2 || first.saturating_add(u64::from(blocks)) > backed_blocks {
                return Err(bad(&format!(
                    "intent log of {blocks} blocks at {first} outside the volume"
                )));
            }
            Some(LogArea {
                first,
                blocks,
                start: le64(b, LOG_START),
            })
        } else {
            None
        };
        Ok(Superblock {
            log,
            block_size,
            generation: le64(b, 16),
            max_blocks,
            backed_blocks,
            root,
            volume_id: le64(b, 48),
            commit_time_ns: le64(b, 56),
            inline_max,
            buffer_bytes,
            snapshots,
        })
    }
}

/// Pick the valid superblock with the higher generation; errors of both if neither is valid.
pub(crate) fn choose(a: Result<Superblock>, b: Result<Superblock>) -> Result<(usize, Superblock)> {
    match (a, b) {
        // An intact superblock of another format (a build that wrote it, perhaps upgraded one
        // slot): the volume is not this build's, whatever the other slot says (using it would
        // roll back, and recovery would wipe the other slot as torn).
        (Err(e @ StoreError::Format { .. }), _) | (_, Err(e @ StoreError::Format { .. })) => Err(e),
        (Ok(a), Ok(b)) => Ok(if b.generation > a.generation {
            (1, b)
        } else {
            (0, a)
        }),
        (Ok(a), Err(_)) => Ok((0, a)),
        (Err(_), Ok(b)) => Ok((1, b)),
        (Err(ea), Err(eb)) => Err(StoreError::corrupt(format!(
            "no valid superblock ({ea}; {eb})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            block_size: 4096,
            generation: 7,
            max_blocks: 1000,
            backed_blocks: 500,
            root: 42,
            volume_id: 99,
            commit_time_ns: 5,
            inline_max: 512,
            buffer_bytes: 1024,
            snapshots: vec![SnapshotEntry {
                name: "before-upgrade".into(),
                root: 41,
                generation: 6,
                time_ns: 4,
            }],
            log: Some(LogArea {
                first: 300,
                blocks: 16,
                start: 12345,
            }),
        }
    }

    #[test]
    fn a_volume_without_a_log_stays_format_7() {
        let s = Superblock {
            log: None,
            ..sample()
        };
        let raw = s.encode();
        assert_eq!(le32(&raw, 8), NO_LOG_VERSION);
        assert_eq!(Superblock::decode(&raw, "A").expect("decode"), s);
    }

    #[test]
    fn a_log_outside_the_volume_is_corruption() {
        for (first, blocks) in [(0, 16), (490, 16), (300, 0)] {
            let s = Superblock {
                log: Some(LogArea {
                    first,
                    blocks,
                    start: 1,
                }),
                ..sample()
            };
            let err = Superblock::decode(&s.encode(), "A").expect_err("accepted");
            assert!(err.to_string().contains("intent log"), "{err}");
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(Superblock::decode(&s.encode(), "A").expect("decode"), s);
    }

    #[test]
    fn every_single_byte_flip_is_rejected() {
        let raw = sample().encode();
        for i in 0..SUPER_BYTES {
            let mut b = raw;
            b[i] ^= 0x5a;
            assert!(Superblock::decode(&b, "A").is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn newer_valid_wins_and_torn_falls_back() {
        let mut newer = sample();
        newer.generation = 8;
        let (slot, sb) = choose(Ok(sample()), Ok(newer.clone())).expect("choose");
        assert_eq!((slot, sb.generation), (1, 8));
        let mut torn = newer.encode();
        torn[20] ^= 1;
        let (slot, sb) = choose(Ok(sample()), Superblock::decode(&torn, "B")).expect("fallback");
        assert_eq!((slot, sb.generation), (0, 7));
    }
}
