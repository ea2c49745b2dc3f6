//! Records of the intent log (written by `store::intent` for synced writes): what a synced
//! write changed since the last commit, durable without switching the root. One record names a data
//! key's new block and length, and the words the same write set in another key's value (a
//! file's size and times in its inode). Records carry a sequence number: replay after power
//! loss applies those from the superblock's log start on, in order, and skips a record whose
//! checksum fails (torn: its writer never returned) or whose number is older (a slot not yet
//! reused since an earlier commit).

use crate::key::Key;
use crate::superblock::{le32, le64};

/// Bytes of one record: two cache lines.
pub(crate) const RECORD_BYTES: usize = 128;
/// Most patch words one record carries (a size and two times, with room to spare).
pub(crate) const MAX_WORDS: usize = 5;

/// "IRISLOG1": marks a slot ever written, so a zeroed slot is not a valid record whatever its
/// checksum.
const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"IRISLOG1");
/// Offsets inside a record.
const MAGIC: usize = 0;
const SEQ: usize = 8;
const KEY: usize = 16;
const BLOCK: usize = 32;
const LEN: usize = 40;
const WORD_COUNT: usize = 44;
const PATCH_KEY: usize = 48;
/// Word offsets (u16 each) then values (u64 each).
const WORD_OFFSETS: usize = 64;
const WORD_VALUES: usize = 76;
const CHECKSUM: usize = RECORD_BYTES - 4;
const _: () = assert!(WORD_OFFSETS + 2 * MAX_WORDS <= WORD_VALUES);
const _: () = assert!(WORD_VALUES + 8 * MAX_WORDS <= CHECKSUM);

/// One synced write: `key` now holds `len` bytes in `block`, and the value of `patch_key` has
/// each word `(offset, value)` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Position in the log: slot `seq % capacity`; replay order.
    pub seq: u64,
    /// The data key written.
    pub key: Key,
    /// Its new block.
    pub block: u64,
    /// Bytes of its value.
    pub len: u32,
    /// The key whose value the write patched (the file's inode), with its words.
    pub patch_key: Key,
    /// Patch words: byte offset in the value, new value; the first `words` count.
    pub word: [(u16, u64); MAX_WORDS],
    /// How many of `word` are in use.
    pub words: u8,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl Record {
    /// The record's bytes, checksum last.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[MAGIC..MAGIC + 8].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        b[SEQ..SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        b[KEY..KEY + 8].copy_from_slice(&self.key.hi.to_le_bytes());
        b[KEY + 8..KEY + 16].copy_from_slice(&self.key.lo.to_le_bytes());
        b[BLOCK..BLOCK + 8].copy_from_slice(&self.block.to_le_bytes());
        b[LEN..LEN + 4].copy_from_slice(&self.len.to_le_bytes());
        b[WORD_COUNT] = self.words;
        b[PATCH_KEY..PATCH_KEY + 8].copy_from_slice(&self.patch_key.hi.to_le_bytes());
        b[PATCH_KEY + 8..PATCH_KEY + 16].copy_from_slice(&self.patch_key.lo.to_le_bytes());
        for (i, (off, val)) in self.word.iter().take(usize::from(self.words)).enumerate() {
            b[WORD_OFFSETS + 2 * i..WORD_OFFSETS + 2 * i + 2].copy_from_slice(&off.to_le_bytes());
            b[WORD_VALUES + 8 * i..WORD_VALUES + 8 * i + 8].copy_from_slice(&val.to_le_bytes());
        }
        let crc = crate::checksum::crc32c(&b[..CHECKSUM]);
        b[CHECKSUM..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The record in `b`, if it is one: magic and checksum hold, at most [`MAX_WORDS`] words,
    /// a length of at most `block_size`. `None` for a never-written or torn slot.
    pub fn decode(b: &[u8], block_size: u32) -> Option<Record> {
        if b.len() < RECORD_BYTES
            || le64(b, MAGIC) != RECORD_MAGIC
            || crate::checksum::crc32c(&b[..CHECKSUM]) != le32(b, CHECKSUM)
        {
            return None;
        }
        let words = b[WORD_COUNT];
        let len = le32(b, LEN);
        if usize::from(words) > MAX_WORDS || len == 0 || len > block_size {
            return None;
        }
        let mut word = [(0u16, 0u64); MAX_WORDS];
        for (i, w) in word.iter_mut().take(usize::from(words)).enumerate() {
            *w = (le16(b, WORD_OFFSETS + 2 * i), le64(b, WORD_VALUES + 8 * i));
        }
        Some(Record {
            seq: le64(b, SEQ),
            key: Key::new(le64(b, KEY), le64(b, KEY + 8)),
            block: le64(b, BLOCK),
            len,
            patch_key: Key::new(le64(b, PATCH_KEY), le64(b, PATCH_KEY + 8)),
            word,
            words,
        })
    }
}

/// The records of `area` (the log's bytes) that replay applies after a commit whose log start
/// was `start`: valid, numbered `start` on and within one lap of it (`capacity` slots), in
/// sequence order. A number missing in between is a write whose sync never returned.
pub(crate) fn replayable(area: &[u8], start: u64, block_size: u32) -> Vec<Record> {
    let capacity = (area.len() / RECORD_BYTES) as u64;
    let mut found: Vec<Record> = area
        .chunks_exact(RECORD_BYTES)
        .enumerate()
        .filter_map(|(slot, b)| {
            let r = Record::decode(b, block_size)?;
            let in_lap = r.seq >= start && r.seq - start < capacity;
            (in_lap && r.seq % capacity == slot as u64).then_some(r)
        })
        .collect();
    found.sort_by_key(|r| r.seq);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> Record {
        let mut word = [(0u16, 0u64); MAX_WORDS];
        word[0] = (8, 4096 * seq);
        word[1] = (40, 1_700_000_000_000_000_000 + seq);
        Record {
            seq,
            key: Key::new(7, seq),
            block: 1000 + seq,
            len: 4096,
            patch_key: Key::new(7, 0),
            word,
            words: 2,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = record(3);
        assert_eq!(Record::decode(&r.encode(), 4096), Some(r));
    }

    #[test]
    fn any_flipped_bit_or_torn_line_spoils_a_record() {
        let good = record(9).encode();
        for byte in 0..RECORD_BYTES {
            for bit in 0..8 {
                let mut b = good;
                b[byte] ^= 1 << bit;
                assert_eq!(Record::decode(&b, 4096), None, "byte {byte} bit {bit}");
            }
        }
        // Power loss with only the first line persisted.
        let mut torn = good;
        torn[64..].fill(0);
        assert_eq!(Record::decode(&torn, 4096), None);
        assert_eq!(Record::decode(&[0u8; RECORD_BYTES], 4096), None);
    }

    #[test]
    fn a_length_beyond_the_block_or_too_many_words_is_not_a_record() {
        let mut long = record(1);
        long.len = 8192;
        assert_eq!(Record::decode(&long.encode(), 4096), None);
        let mut many = record(1);
        many.words = MAX_WORDS as u8 + 1;
        assert_eq!(Record::decode(&many.encode(), 4096), None);
    }

    #[test]
    fn replay_takes_one_lap_from_the_start_in_order_and_skips_the_rest() {
        let capacity = 8usize;
        let mut area = vec![0u8; capacity * RECORD_BYTES];
        let put = |area: &mut Vec<u8>, r: Record| {
            let slot = (r.seq % capacity as u64) as usize * RECORD_BYTES;
            area[slot..slot + RECORD_BYTES].copy_from_slice(&r.encode());
        };
        // An older lap (seq 3..8), then this one from 10: 10, 11, 13 (12 torn), 16 wrapped.
        for seq in 3..8 {
            put(&mut area, record(seq));
        }
        for seq in [10, 11, 12, 13, 16] {
            put(&mut area, record(seq));
        }
        let slot12 = (12 % capacity) * RECORD_BYTES;
        area[slot12 + 100] ^= 1;
        // A record in the wrong slot (copied there) is not trusted either: 14 belongs in
        // slot 6, and slot 1 was never written.
        let misplaced = record(14).encode();
        area[RECORD_BYTES..2 * RECORD_BYTES].copy_from_slice(&misplaced);
        // Slots now: 0:16 1:14(misplaced) 2:10 3:11 4:12(torn) 5:13 6:6 7:7.
        let seqs: Vec<u64> = replayable(&area, 10, 4096).iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![10, 11, 13, 16]);
        // From 4, one lap is 4..12: the older lap's survivors and this one's first two.
        let older: Vec<u64> = replayable(&area, 4, 4096).iter().map(|r| r.seq).collect();
        assert_eq!(older, vec![6, 7, 10, 11]);
    }
}
