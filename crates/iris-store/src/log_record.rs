//! Records of the intent log (written by `store::intent` for synced writes): what a synced
//! write changed since the last commit, durable without switching the root. One record names a data
//! key's new block and length, and the words the same write set in another key's value (a
//! file's size and times in its inode). Records carry a sequence number: replay after power
//! loss applies those from the superblock's log start on, in order, and skips a record whose
//! checksum fails (torn: its writer never returned) or whose number is older (a slot not yet
//! reused since an earlier commit).
//!
//! A *data record* carries a small synced write's bytes instead of a new block: the write goes
//! into the block a record of this lap already names, where it is, once its record is durable
//! (see `store::intent`), and replay copies the bytes there again. It takes several slots and
//! as many numbers: a head (the fields of a record, the bytes' place in the value, their
//! length and checksum) and after it the bytes, [`CONT_PAYLOAD`] per slot behind a marker
//! word, so that no slot of a file's bytes ever reads as a record (whatever the file holds).

use crate::key::Key;
use crate::superblock::{le32, le64};

/// Bytes of one record: two cache lines.
pub(crate) const RECORD_BYTES: usize = 128;
/// Most patch words one record carries (a size and two times, with room to spare).
pub(crate) const MAX_WORDS: usize = 5;

/// "IRISLOG1": marks a slot ever written, so a zeroed slot is not a valid record whatever its
/// checksum.
const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"IRISLOG1");
/// "IRISLOGD": the head of a data record.
const DATA_MAGIC: u64 = u64::from_le_bytes(*b"IRISLOGD");
/// "IRISLOGC": the first word of each slot after a data record's head.
const CONT_MAGIC: u64 = u64::from_le_bytes(*b"IRISLOGC");
/// Bytes of a write each slot after a data record's head carries (behind its marker word).
pub(crate) const CONT_PAYLOAD: usize = RECORD_BYTES - 8;
/// Most bytes one data record carries: a longer synced write copies its block instead.
pub(crate) const DATA_MAX: usize = 1024;
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
/// A data record's head: where its bytes go in the value (u16), how many (u16), and the
/// checksum of the slots after the head (u32).
const DATA_OFF: usize = 116;
const DATA_LEN: usize = 118;
const DATA_CRC: usize = 120;
const CHECKSUM: usize = RECORD_BYTES - 4;
const _: () = assert!(WORD_OFFSETS + 2 * MAX_WORDS <= WORD_VALUES);
const _: () = assert!(WORD_VALUES + 8 * MAX_WORDS <= DATA_OFF);
const _: () = assert!(DATA_CRC + 4 <= CHECKSUM);
const _: () = assert!(DATA_MAX <= u16::MAX as usize);

/// `words` (byte offset, value) as a record holds them, if they fit: at most [`MAX_WORDS`],
/// each offset within a u16.
pub(crate) fn packed_words(words: &[(usize, u64)]) -> Option<[(u16, u64); MAX_WORDS]> {
    if words.len() > MAX_WORDS {
        return None;
    }
    let mut word = [(0u16, 0u64); MAX_WORDS];
    for (slot, (off, value)) in word.iter_mut().zip(words) {
        *slot = (u16::try_from(*off).ok()?, *value);
    }
    Some(word)
}

/// Slots a data record of `len` bytes takes: its head and its bytes.
#[inline]
pub(crate) fn data_slots(len: usize) -> usize {
    1 + len.div_ceil(CONT_PAYLOAD)
}

/// Where a data record's bytes go: `len` bytes at byte `offset` of the value its key names
/// (which must be the record's block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataRange {
    /// First byte in the value.
    pub offset: u16,
    /// Bytes.
    pub len: u16,
}

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
    /// For a data record: where its bytes go (the record's block is already its key's value,
    /// and `len` that value's length).
    pub data: Option<DataRange>,
}

/// A record replay applies, with the bytes of a data record (empty for others).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// The record.
    pub record: Record,
    /// A data record's bytes.
    pub bytes: Vec<u8>,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl Record {
    /// The record's bytes, checksum last.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        self.encode_with(0)
    }

    /// The record's bytes, with `data_crc` (the checksum of a data record's slots after the
    /// head) in a data record's head.
    fn encode_with(&self, data_crc: u32) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        let magic = if self.data.is_some() {
            DATA_MAGIC
        } else {
            RECORD_MAGIC
        };
        b[MAGIC..MAGIC + 8].copy_from_slice(&magic.to_le_bytes());
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
        if let Some(d) = self.data {
            b[DATA_OFF..DATA_OFF + 2].copy_from_slice(&d.offset.to_le_bytes());
            b[DATA_LEN..DATA_LEN + 2].copy_from_slice(&d.len.to_le_bytes());
            b[DATA_CRC..DATA_CRC + 4].copy_from_slice(&data_crc.to_le_bytes());
        }
        let crc = crate::checksum::crc32c(&b[..CHECKSUM]);
        b[CHECKSUM..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The record in `b`, if it is one: magic and checksum hold, at most [`MAX_WORDS`] words,
    /// a length of at most `block_size`. `None` for a never-written or torn slot.
    pub fn decode(b: &[u8], block_size: u32) -> Option<Record> {
        let magic = if b.len() < RECORD_BYTES {
            0
        } else {
            le64(b, MAGIC)
        };
        if (magic != RECORD_MAGIC && magic != DATA_MAGIC)
            || crate::checksum::crc32c(&b[..CHECKSUM]) != le32(b, CHECKSUM)
        {
            return None;
        }
        let data = (magic == DATA_MAGIC).then(|| DataRange {
            offset: le16(b, DATA_OFF),
            len: le16(b, DATA_LEN),
        });
        if let Some(d) = data {
            let end = usize::from(d.offset) + usize::from(d.len);
            if d.len == 0 || usize::from(d.len) > DATA_MAX || end > le32(b, LEN) as usize {
                return None;
            }
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
            data,
        })
    }

    /// Write this data record and its `bytes` into `out` (its [`data_slots`] slots, in the
    /// log): the slots after the head first, then the head with their checksum. Nothing is
    /// durable until the caller persists `out`.
    pub fn write_data(&self, bytes: &[u8], out: &mut [u8]) {
        debug_assert!(self.data.is_some_and(|d| usize::from(d.len) == bytes.len()));
        debug_assert_eq!(out.len(), data_slots(bytes.len()) * RECORD_BYTES);
        let (head, rest) = out.split_at_mut(RECORD_BYTES);
        for (slot, chunk) in rest
            .chunks_exact_mut(RECORD_BYTES)
            .zip(bytes.chunks(CONT_PAYLOAD))
        {
            slot[..8].copy_from_slice(&CONT_MAGIC.to_le_bytes());
            slot[8..8 + chunk.len()].copy_from_slice(chunk);
            slot[8 + chunk.len()..].fill(0);
        }
        let crc = crate::checksum::crc32c(rest);
        head.copy_from_slice(&self.encode_with(crc));
    }

    /// The bytes of the data record whose head this is, from `rest` (the slots after the head,
    /// at least as many as it takes), if they are whole: their markers and checksum hold.
    fn data_bytes(&self, head: &[u8], rest: &[u8]) -> Option<Vec<u8>> {
        let d = self.data?;
        let len = usize::from(d.len);
        let slots = rest.get(..(data_slots(len) - 1) * RECORD_BYTES)?;
        if crate::checksum::crc32c(slots) != le32(head, DATA_CRC) {
            return None;
        }
        let mut bytes = Vec::with_capacity(len);
        for slot in slots.chunks_exact(RECORD_BYTES) {
            if le64(slot, 0) != CONT_MAGIC {
                return None;
            }
            let take = (len - bytes.len()).min(CONT_PAYLOAD);
            bytes.extend_from_slice(&slot[8..8 + take]);
        }
        Some(bytes)
    }
}

/// The records of `area` (the log's bytes) that replay applies after a commit whose log start
/// was `start`: valid, numbered `start` on and within one lap of it (`capacity` slots), in
/// sequence order. A number missing in between is a write whose sync never returned.
///
/// A data record counts only whole: its slots inside the area (a writer never wraps one) and
/// within the lap, their markers and checksum holding.
pub(crate) fn replayable(area: &[u8], start: u64, block_size: u32) -> Vec<Replayed> {
    let capacity = (area.len() / RECORD_BYTES) as u64;
    let mut found: Vec<Replayed> = area
        .chunks_exact(RECORD_BYTES)
        .enumerate()
        .filter_map(|(slot, b)| {
            let r = Record::decode(b, block_size)?;
            let in_lap = r.seq >= start && r.seq - start < capacity;
            if !in_lap || r.seq % capacity != slot as u64 {
                return None;
            }
            let bytes = match r.data {
                None => Vec::new(),
                Some(d) => {
                    let slots = data_slots(usize::from(d.len)) as u64;
                    if r.seq - start + slots > capacity {
                        return None;
                    }
                    r.data_bytes(b, &area[(slot + 1) * RECORD_BYTES..])?
                }
            };
            Some(Replayed { record: r, bytes })
        })
        .collect();
    found.sort_by_key(|r| r.record.seq);
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
            data: None,
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

    /// Write record `r` into `area` (a log's slots) at its slot.
    fn put(area: &mut [u8], r: Record) {
        let capacity = (area.len() / RECORD_BYTES) as u64;
        let slot = (r.seq % capacity) as usize * RECORD_BYTES;
        area[slot..slot + RECORD_BYTES].copy_from_slice(&r.encode());
    }

    #[test]
    fn replay_takes_one_lap_from_the_start_in_order_and_skips_the_rest() {
        let capacity = 8usize;
        let mut area = vec![0u8; capacity * RECORD_BYTES];
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
        let seqs: Vec<u64> = replayable(&area, 10, 4096)
            .iter()
            .map(|r| r.record.seq)
            .collect();
        assert_eq!(seqs, vec![10, 11, 13, 16]);
        // From 4, one lap is 4..12: the older lap's survivors and this one's first two.
        let older: Vec<u64> = replayable(&area, 4, 4096)
            .iter()
            .map(|r| r.record.seq)
            .collect();
        assert_eq!(older, vec![6, 7, 10, 11]);
    }

    /// A data record of `len` bytes (byte i is `i * 7 + seq`) at byte 100 of a 4 KiB value.
    fn data_record(seq: u64, len: usize) -> (Record, Vec<u8>) {
        let mut r = record(seq);
        r.data = Some(DataRange {
            offset: 100,
            len: len as u16,
        });
        let bytes = (0..len).map(|i| (i * 7) as u8 ^ seq as u8).collect();
        (r, bytes)
    }

    /// Write data record `r` with `bytes` into `area` at its slot.
    fn put_data(area: &mut [u8], r: &Record, bytes: &[u8]) {
        let capacity = (area.len() / RECORD_BYTES) as u64;
        let slot = (r.seq % capacity) as usize * RECORD_BYTES;
        let n = data_slots(bytes.len()) * RECORD_BYTES;
        r.write_data(bytes, &mut area[slot..slot + n]);
    }

    #[test]
    fn a_data_record_replays_with_its_bytes_in_order_among_the_others() {
        let mut area = vec![0u8; 32 * RECORD_BYTES];
        put(&mut area, record(5));
        // 512 bytes: a head and five slots of bytes (120 each), numbers 6..=11.
        let (d, bytes) = data_record(6, 512);
        assert_eq!(data_slots(512), 6);
        put_data(&mut area, &d, &bytes);
        put(&mut area, record(12));
        let found = replayable(&area, 5, 4096);
        let seqs: Vec<u64> = found.iter().map(|r| r.record.seq).collect();
        assert_eq!(seqs, vec![5, 6, 12]);
        assert_eq!(found[1].record, d);
        assert_eq!(found[1].bytes, bytes);
        assert!(found[0].bytes.is_empty() && found[2].bytes.is_empty());
    }

    #[test]
    fn a_data_record_with_any_byte_of_its_slots_torn_is_not_replayed() {
        let capacity = 16usize;
        let (d, bytes) = data_record(2, 300);
        let mut good = vec![0u8; capacity * RECORD_BYTES];
        put_data(&mut good, &d, &bytes);
        assert_eq!(replayable(&good, 0, 4096).len(), 1);
        let span = 2 * RECORD_BYTES..(2 + data_slots(300)) * RECORD_BYTES;
        for byte in span.clone().step_by(7) {
            let mut area = good.clone();
            area[byte] ^= 0x40;
            assert!(replayable(&area, 0, 4096).is_empty(), "byte {byte}");
        }
        // Power loss with the head persisted and its last slot not.
        let mut area = good.clone();
        area[span.end - RECORD_BYTES..span.end].fill(0);
        assert!(replayable(&area, 0, 4096).is_empty());
        // One past the lap (from 12, a capacity of 16: numbers up to 27; this one's four slots
        // are numbers 25 to 28).
        let (late, late_bytes) = data_record(25, 300);
        let mut area = vec![0u8; capacity * RECORD_BYTES];
        put_data(&mut area, &late, &late_bytes);
        assert!(replayable(&area, 12, 4096).is_empty());
        assert_eq!(replayable(&area, 13, 4096).len(), 1);
    }

    #[test]
    fn bytes_that_hold_a_record_never_read_as_one_from_a_data_records_slots() {
        // A file's bytes holding, at every slot boundary, a valid record numbered for the slot
        // they would land in: written through a data record, none of them counts.
        let capacity = 16usize;
        let (mut d, _) = data_record(3, 4 * CONT_PAYLOAD);
        let mut bytes = Vec::new();
        for i in 0..4u64 {
            // A slot's bytes start 8 bytes in: each forged record is cut by the marker.
            bytes.extend_from_slice(&record(4 + i).encode()[..CONT_PAYLOAD]);
        }
        d.data = Some(DataRange {
            offset: 0,
            len: bytes.len() as u16,
        });
        let mut area = vec![0u8; capacity * RECORD_BYTES];
        put_data(&mut area, &d, &bytes);
        let found = replayable(&area, 0, 4096);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].record.seq, 3);
        for slot in 4..8 {
            let b = &area[slot * RECORD_BYTES..(slot + 1) * RECORD_BYTES];
            assert_eq!(Record::decode(b, 4096), None, "slot {slot}");
        }
    }

    #[test]
    fn words_pack_only_when_a_record_holds_them() {
        let five: Vec<(usize, u64)> = (0..MAX_WORDS).map(|i| (i * 8, i as u64)).collect();
        let packed = packed_words(&five).expect("five words");
        assert_eq!(packed[4], (32, 4));
        let mut six = five.clone();
        six.push((40, 5));
        assert_eq!(packed_words(&six), None);
        assert_eq!(packed_words(&[(70_000, 1)]), None);
        assert_eq!(packed_words(&[]), Some([(0, 0); MAX_WORDS]));
    }

    #[test]
    fn a_data_record_past_its_value_or_empty_is_not_a_record() {
        for (offset, len) in [(4000u16, 200u16), (0, 0)] {
            let mut r = record(1);
            r.data = Some(DataRange { offset, len });
            assert_eq!(Record::decode(&r.encode(), 4096), None, "{offset}+{len}");
        }
    }
}
