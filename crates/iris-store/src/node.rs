//! Tree nodes: one block each. A node starts with a 32-byte header (magic, level, count, birth
//! generation, checksum, heap start). Leaves hold sorted 40-byte slots (key, word, generation,
//! length, flags) and, growing down from the end of the block, the bytes of small values; a slot
//! with `FLAG_BLOCK` points at a data block instead. Internal nodes hold sorted 24-byte slots (key,
//! child); slot 0's key is the subtree's lower bound but routing treats it as minus infinity.
//!
//! Nothing read from a node is trusted: [`Node::load`] checks magic, level, count and heap bounds,
//! and value/child accessors check what they return, so corrupt bytes give an error, never a panic.

use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::layout::Layout;
use crate::region::Region;

pub(crate) const LEAF_MAGIC: u32 = u32::from_le_bytes(*b"IRL2");
pub(crate) const INNER_MAGIC: u32 = u32::from_le_bytes(*b"IRI2");
pub(crate) const NODE_HEADER: u64 = 32;
pub(crate) const LEAF_SLOT: u64 = 40;

/// Offset of slot `i` inside a leaf block.
#[inline]
pub(crate) const fn leaf_slot_offset(i: u16) -> u64 {
    NODE_HEADER + i as u64 * LEAF_SLOT
}
pub(crate) const INNER_SLOT: u64 = 24;
/// Deepest tree accepted (bounds every descent and recursion).
pub(crate) const MAX_HEIGHT: usize = 16;
/// Slot flag: the value lives out of line in the data block named by `word`.
pub(crate) const FLAG_BLOCK: u32 = 1;

const H_MAGIC: u64 = 0;
const H_LEVEL: u64 = 4;
const H_COUNT: u64 = 6;
const H_BIRTH: u64 = 8;
const H_CRC: u64 = 16;
const H_HEAP: u64 = 20;
/// Dirty-slot mask: bit `i % 64` set when slot `i` may hold a child or a data block born in the
/// node's own generation, so a commit visits only those (see `commit::seal`). Readers ignore it.
const H_DIRTY: u64 = 24;

/// Where a value lives.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Val<'a> {
    /// Small value, bytes in a node (or the caller's buffer).
    Inline(&'a [u8]),
    /// Out-of-line value: `len` bytes at the start of data block `block`, born in `gen`.
    Block { block: u64, len: u32, gen: u64 },
}

impl Val<'_> {
    /// Bytes the value takes in a leaf's heap.
    pub fn heap_bytes(&self) -> u64 {
        match self {
            Val::Inline(b) => b.len() as u64,
            Val::Block { .. } => 0,
        }
    }
}

/// A validated view of one node.
#[derive(Clone, Copy)]
pub(crate) struct Node {
    region: Region,
    /// Block number.
    pub block: u64,
    off: u64,
    bs: u64,
    pub level: u16,
    pub count: u16,
    pub birth: u64,
    /// Node-relative start of the heap: leaf values, or an internal node's message buffer.
    heap: u64,
    /// First data block and first block past the backed volume: bounds for value pointers.
    data_start: u64,
    backed_blocks: u64,
    block_shift: u32,
}

fn bad(block: u64, what: &str) -> StoreError {
    StoreError::corrupt(format!("node {block}: {what}"))
}

impl Node {
    /// Read and check node `block`; `expected_level` is the level its parent implies.
    pub fn load(
        region: Region,
        layout: &Layout,
        backed_blocks: u64,
        block: u64,
        expected_level: Option<u16>,
    ) -> Result<Node> {
        if block < layout.data_start || block >= backed_blocks {
            return Err(bad(block, "pointer outside the volume's data area"));
        }
        let off = layout.offset(block);
        let bs = layout.bs();
        let magic = region.read_u32(off + H_MAGIC);
        let level = region.read_u16(off + H_LEVEL);
        let count = region.read_u16(off + H_COUNT);
        let birth = region.read_u64(off + H_BIRTH);
        match (magic, level) {
            (LEAF_MAGIC, 0) | (INNER_MAGIC, 1..) => {}
            (LEAF_MAGIC | INNER_MAGIC, _) => return Err(bad(block, "magic does not match level")),
            _ => return Err(bad(block, "bad magic")),
        }
        if usize::from(level) >= MAX_HEIGHT {
            return Err(bad(block, "level too high"));
        }
        if let Some(want) = expected_level {
            if level != want {
                return Err(bad(block, &format!("level {level}, parent implies {want}")));
            }
        }
        let slot = if level == 0 { LEAF_SLOT } else { INNER_SLOT };
        let slots_end = NODE_HEADER + u64::from(count) * slot;
        if slots_end > bs {
            return Err(bad(block, "slot count overflows the block"));
        }
        let heap = u64::from(region.read_u32(off + H_HEAP));
        if heap < slots_end || heap > bs {
            return Err(bad(block, "heap overlaps slots"));
        }
        if level > 0 && count == 0 {
            return Err(bad(block, "empty internal node"));
        }
        Ok(Node {
            region,
            block,
            off,
            bs,
            level,
            count,
            birth,
            heap,
            data_start: layout.data_start,
            backed_blocks,
            block_shift: layout.block_shift,
        })
    }

    #[inline]
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// Node-relative start of the heap.
    #[inline]
    pub(crate) fn heap(&self) -> u64 {
        self.heap
    }

    /// Block size.
    #[inline]
    pub(crate) fn bs(&self) -> u64 {
        self.bs
    }

    /// Region offset of the node.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.off
    }

    /// The mapping the node lives in.
    #[inline]
    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    /// Check that `block` may hold an out-of-line value (inside the volume's data area).
    pub(crate) fn check_value_block(&self, block: u64) -> Result<()> {
        if block < self.data_start || block >= self.backed_blocks {
            return Err(bad(self.block, "value block outside the volume"));
        }
        Ok(())
    }

    #[inline]
    fn slot_off(&self, i: u16) -> u64 {
        let size = if self.is_leaf() {
            LEAF_SLOT
        } else {
            INNER_SLOT
        };
        self.off + NODE_HEADER + u64::from(i) * size
    }

    /// Key of slot `i`.
    #[inline]
    pub fn key(&self, i: u16) -> Key {
        let at = self.slot_off(i);
        Key::new(self.region.read_u64(at), self.region.read_u64(at + 8))
    }

    /// Leaf: [`Node::search`], trying slot `guess` first (one line when it is right).
    #[inline]
    pub fn search_from(&self, key: Key, guess: u16) -> std::result::Result<u16, u16> {
        if guess < self.count && self.key(guess) == key {
            return Ok(guess);
        }
        self.search(key)
    }

    /// Leaf: index of `key`, or where it would go.
    #[inline]
    pub fn search(&self, key: Key) -> std::result::Result<u16, u16> {
        let i = self.first_not(0, self.count, key, |k| k < key);
        if i < self.count && self.key(i) == key {
            Ok(i)
        } else {
            Err(i)
        }
    }

    /// Internal: the slot whose subtree may hold `key` (last slot with key <= `key`, else 0).
    #[inline]
    pub fn route(&self, key: Key) -> u16 {
        self.first_not(1, self.count, key, |k| k <= key)
            .saturating_sub(1)
    }

    /// The first slot in `[lo, hi)` whose key fails `before` (which holds for a prefix of the
    /// slots), or `hi`. Keys of one inode's blocks are nearly evenly spaced, so the first probe
    /// goes where interpolation between the range's end keys puts `key`, and the search gallops
    /// out from there: a couple of cache lines of a 4 KiB node instead of a binary search's
    /// seven or so. Any keys give the right answer, only in more probes.
    #[inline]
    fn first_not(&self, lo: u16, hi: u16, key: Key, before: impl Fn(Key) -> bool) -> u16 {
        let (mut lo, mut hi) = (lo, hi);
        if hi > lo + 8 {
            let (first, last) = (self.key(lo), self.key(hi - 1));
            if first.hi == key.hi && last.hi == key.hi && first.lo < last.lo {
                // In floating point: a 128-bit division costs tens of cycles a level, and the
                // guess need not be exact (at <= span, so the fraction is at most 1 and the
                // guess at most hi - 1).
                let span = (last.lo - first.lo) as f64;
                let at = (key.lo.clamp(first.lo, last.lo) - first.lo) as f64;
                let g = lo + ((at / span) * f64::from(hi - 1 - lo)) as u16;
                (lo, hi) = self.gallop(lo, hi, g.min(hi - 1), &before);
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(self.key(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Narrow `[lo, hi]` (the answer's bounds) by probing at `g` and then at doubling distances
    /// away from it.
    #[inline]
    fn gallop(&self, lo: u16, hi: u16, g: u16, before: &impl Fn(Key) -> bool) -> (u16, u16) {
        let mut b = g;
        let mut step = 1u16;
        if before(self.key(g)) {
            // The answer is in (g, hi].
            loop {
                let n = b.saturating_add(step);
                if n >= hi {
                    return (b + 1, hi);
                }
                if !before(self.key(n)) {
                    return (b + 1, n);
                }
                b = n;
                step = step.saturating_mul(2);
            }
        } else {
            // The answer is in [lo, g].
            loop {
                if b < lo + step {
                    return (lo, b);
                }
                let n = b - step;
                if before(self.key(n)) {
                    return (n + 1, b);
                }
                b = n;
                step = step.saturating_mul(2);
            }
        }
    }

    /// Internal: child block of slot `i` (validated by the `load` of the child).
    #[inline]
    pub fn child(&self, i: u16) -> u64 {
        self.region.read_u64(self.slot_off(i) + 16)
    }

    /// Internal: byte offset of slot `i`'s child pointer (the publish point for that subtree).
    pub fn child_word_off(&self, i: u16) -> u64 {
        self.slot_off(i) + 16
    }

    /// Leaf: byte offset of slot `i`'s word and generation fields.
    pub fn value_word_off(&self, i: u16) -> u64 {
        self.slot_off(i) + 16
    }

    /// Leaf: where the value of slot `i` lives, checked against the node and the volume.
    pub fn value(&self, i: u16) -> Result<Val<'_>> {
        let at = self.slot_off(i);
        let word = self.region.read_u64(at + 16);
        let gen = self.region.read_u64(at + 24);
        let len = self.region.read_u32(at + 32);
        let flags = self.region.read_u32(at + 36);
        if flags & FLAG_BLOCK != 0 {
            if u64::from(len) > self.bs {
                return Err(bad(self.block, "value longer than a block"));
            }
            self.check_value_block(word)?;
            Ok(Val::Block {
                block: word,
                len,
                gen,
            })
        } else {
            let slots_end = NODE_HEADER + u64::from(self.count) * LEAF_SLOT;
            let end = word.checked_add(u64::from(len));
            if word < slots_end || end.is_none_or(|e| e > self.bs) {
                return Err(bad(self.block, "inline value outside the heap"));
            }
            Ok(Val::Inline(
                self.region.bytes(self.off + word, u64::from(len)),
            ))
        }
    }

    /// Heap bytes slot `i` claims (for sizing a rebuild; validated when the slot is copied).
    #[inline]
    pub fn raw_heap_bytes(&self, i: u16) -> u64 {
        let at = self.slot_off(i);
        if self.region.read_u32(at + 36) & FLAG_BLOCK != 0 {
            0
        } else {
            u64::from(self.region.read_u32(at + 32))
        }
    }

    /// Byte offset in the volume of slot `i`'s inline value (checked by `value` first).
    pub fn inline_value_off(&self, i: u16) -> u64 {
        self.off + self.region.read_u64(self.slot_off(i) + 16)
    }

    /// Bytes of the value `v` (inline bytes or the data block's prefix).
    pub fn value_bytes<'a>(region: &'a Region, layout: &Layout, v: Val<'a>) -> &'a [u8] {
        match v {
            Val::Inline(b) => b,
            Val::Block { block, len, .. } => region.bytes(layout.offset(block), u64::from(len)),
        }
    }

    /// Copy this node into the fresh block `dst`, born in `birth`, checksum cleared: the start of a
    /// copy-on-write that changes a few words instead of rebuilding the node slot by slot.
    pub fn copy_to(&self, dst: u64, birth: u64) -> Node {
        let dst_off = dst << self.block_shift;
        // The header and slots, then the heap; the free gap between them means nothing (the
        // copy's gap keeps the new block's old bytes; the checksum covers whatever is there).
        let slot = if self.is_leaf() {
            LEAF_SLOT
        } else {
            INNER_SLOT
        };
        let slots_end = NODE_HEADER + u64::from(self.count) * slot;
        self.region.copy_within(self.off, dst_off, slots_end);
        self.region.copy_within(
            self.off + self.heap,
            dst_off + self.heap,
            self.bs - self.heap,
        );
        self.region.write_u32(
            dst_off + H_MAGIC,
            if self.is_leaf() {
                LEAF_MAGIC
            } else {
                INNER_MAGIC
            },
        );
        self.region.write_u64(dst_off + H_BIRTH, birth);
        self.region.write_u32(dst_off + H_CRC, 0);
        if self.birth != birth {
            // An older node's slots hold nothing of the new generation (yet).
            self.region.write_u64(dst_off + H_DIRTY, 0);
        }
        Node {
            block: dst,
            off: dst_off,
            birth,
            ..*self
        }
    }

    /// Internal, unpublished node only: point slot `i` at `child`.
    pub fn set_child(&self, i: u16, child: u64) {
        self.region.write_u64(self.child_word_off(i), child);
        self.mark_dirty(i);
    }

    /// Note that slot `i` may now hold something born in this node's generation (atomic: writers
    /// of different partitions may change slots of one leaf at once).
    #[inline]
    pub fn mark_dirty(&self, i: u16) {
        self.region
            .atomic_u64(self.off + H_DIRTY)
            .fetch_or(1 << (i % 64), std::sync::atomic::Ordering::AcqRel);
    }

    /// The slots that may hold something born in this node's generation, ascending: slot `i`
    /// when bit `i % 64` of the mask is set. Visits the set bits of each run of 64 slots, not
    /// every slot (a commit seals leaves of a hundred slots and more with one or two marked).
    pub fn dirty_slots(&self) -> impl Iterator<Item = u16> + '_ {
        let mask = self
            .region
            .atomic_u64(self.off + H_DIRTY)
            .load(std::sync::atomic::Ordering::Acquire);
        let count = self.count;
        (0..count.div_ceil(64)).flat_map(move |run| {
            let base = run * 64;
            let left = count - base;
            let mut bits = if left >= 64 {
                mask
            } else {
                mask & ((1u64 << left) - 1)
            };
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as u16;
                    bits &= bits - 1;
                    base + b
                })
            })
        })
    }

    /// Leaf, unpublished only: make slot `i` an out-of-line value.
    pub fn set_block_value(&self, i: u16, block: u64, gen: u64, len: u32) {
        let at = self.slot_off(i);
        self.region.write_u64(at + 16, block);
        self.region.write_u64(at + 24, gen);
        self.region.write_u32(at + 32, len);
        self.region.write_u32(at + 36, FLAG_BLOCK);
        self.mark_dirty(i);
    }

    /// Leaf, unpublished only: make `bytes` the inline value of slot `i`, placed anew in the
    /// heap (the old bytes stay behind unused until the leaf is next rebuilt). `false` (nothing
    /// changed) when the heap has no room for them.
    pub fn set_inline(&self, i: u16, bytes: &[u8]) -> bool {
        let heap = u64::from(self.region.read_u32(self.off + H_HEAP));
        let slots_end = NODE_HEADER + u64::from(self.count) * LEAF_SLOT;
        let len = bytes.len() as u64;
        if slots_end + len > heap {
            return false;
        }
        let new_heap = heap - len;
        self.region.copy_in(self.off + new_heap, bytes);
        let at = self.slot_off(i);
        self.region.write_u64(at + 16, new_heap);
        self.region.write_u64(at + 24, 0);
        self.region.write_u32(at + 32, bytes.len() as u32);
        self.region.write_u32(at + 36, 0);
        self.region.write_u32(self.off + H_HEAP, new_heap as u32);
        self.mark_dirty(i);
        true
    }

    /// Leaf: set the length of the out-of-line value of slot `i` with one release store of its
    /// (length, flags) word, so a reader sees the old length or the new one, and the bytes the
    /// block holds up to the new length (written before) with it.
    pub fn publish_block_len(&self, i: u16, len: u32) {
        let at = self.slot_off(i) + 32;
        self.region
            .publish_u64(at, u64::from(len) | (u64::from(FLAG_BLOCK) << 32));
        self.mark_dirty(i);
    }

    /// Leaf, unpublished only: overwrite the inline value of slot `i` with `bytes` of the same
    /// length. Returns false if the slot is not an inline value of that length.
    pub fn set_inline_same_len(&self, i: u16, bytes: &[u8]) -> bool {
        let at = self.slot_off(i);
        let len = self.region.read_u32(at + 32) as usize;
        let flags = self.region.read_u32(at + 36);
        if flags & FLAG_BLOCK != 0 || len != bytes.len() {
            return false;
        }
        let word = self.region.read_u64(at + 16);
        if word + len as u64 > self.bs {
            return false;
        }
        self.region.copy_in(self.off + word, bytes);
        true
    }

    /// Leaf, unpublished only: insert `key`/`val` as slot `pos` if it fits, shifting later slots.
    /// Returns the updated view, or `None` when the leaf is full (the caller splits).
    pub fn insert_slot(&self, pos: u16, key: Key, val: Val<'_>) -> Option<Node> {
        debug_assert!(self.is_leaf() && pos <= self.count);
        let heap = u64::from(self.region.read_u32(self.off + H_HEAP));
        let slots_end = NODE_HEADER + u64::from(self.count) * LEAF_SLOT;
        let need_heap = val.heap_bytes();
        if slots_end + LEAF_SLOT + need_heap > heap {
            return None;
        }
        let at = self.slot_off(pos);
        let tail = u64::from(self.count - pos) * LEAF_SLOT;
        self.region.copy_within(at, at + LEAF_SLOT, tail);
        self.region.write_u64(at, key.hi);
        self.region.write_u64(at + 8, key.lo);
        let mut new_heap = heap;
        match val {
            Val::Inline(bytes) => {
                new_heap -= bytes.len() as u64;
                self.region.copy_in(self.off + new_heap, bytes);
                self.region.write_u64(at + 16, new_heap);
                self.region.write_u64(at + 24, 0);
                self.region.write_u32(at + 32, bytes.len() as u32);
                self.region.write_u32(at + 36, 0);
            }
            Val::Block { block, len, gen } => {
                self.region.write_u64(at + 16, block);
                self.region.write_u64(at + 24, gen);
                self.region.write_u32(at + 32, len);
                self.region.write_u32(at + 36, FLAG_BLOCK);
            }
        }
        let count = self.count + 1;
        self.region.write_u16(self.off + H_COUNT, count);
        self.region.write_u32(self.off + H_HEAP, new_heap as u32);
        // Slots shifted: every one may now be dirty.
        self.region.write_u64(self.off + H_DIRTY, u64::MAX);
        Some(Node {
            count,
            heap: new_heap,
            ..*self
        })
    }

    /// Leaf: whether one more slot of an out-of-line value fits.
    pub fn has_room_for_block_slot(&self) -> bool {
        let heap = u64::from(self.region.read_u32(self.off + H_HEAP));
        NODE_HEADER + (u64::from(self.count) + 1) * LEAF_SLOT <= heap && self.count < u16::MAX
    }

    /// Leaf private to the working tree (published or not): add `key` with the out-of-line
    /// value `val` as a new last slot, if it fits. Nothing a reader can see moves: the slot is
    /// written past the end, then the count grows by one store, so a reader (or a process killed
    /// between the two) sees the leaf without the key or with it whole. The caller holds every
    /// writer lock, or the partition lock of the leaf's last key (one appender per leaf at a
    /// time, see `Txn::appendable_in_place`), and `key` sorts after every key of the leaf.
    pub fn append_block_slot(&self, key: Key, block: u64, gen: u64, len: u32) -> Option<Node> {
        debug_assert!(self.is_leaf());
        debug_assert!(self.count == 0 || self.key(self.count - 1) < key);
        let heap = u64::from(self.region.read_u32(self.off + H_HEAP));
        let slots_end = NODE_HEADER + u64::from(self.count) * LEAF_SLOT;
        if slots_end + LEAF_SLOT > heap || self.count == u16::MAX {
            return None;
        }
        let at = self.slot_off(self.count);
        self.region.write_u64(at, key.hi);
        self.region.write_u64(at + 8, key.lo);
        self.region.write_u64(at + 16, block);
        self.region.write_u64(at + 24, gen);
        self.region.write_u32(at + 32, len);
        self.region.write_u32(at + 36, FLAG_BLOCK);
        self.mark_dirty(self.count);
        let count = self.count + 1;
        // The slot's bytes before the count that makes them visible.
        self.region.publish_u16(self.off + H_COUNT, count);
        Some(Node { count, ..*self })
    }

    /// Leaf, unpublished only: remove slot `pos`, shifting later slots down. An inline value's
    /// heap bytes stay behind unused until the leaf is next rebuilt.
    pub fn remove_slot(&self, pos: u16) -> Node {
        debug_assert!(self.is_leaf() && pos < self.count);
        let at = self.slot_off(pos);
        let tail = u64::from(self.count - pos - 1) * LEAF_SLOT;
        self.region.copy_within(at + LEAF_SLOT, at, tail);
        let count = self.count - 1;
        self.region.write_u16(self.off + H_COUNT, count);
        // Slots shifted: every one may now be dirty.
        self.region.write_u64(self.off + H_DIRTY, u64::MAX);
        Node { count, ..*self }
    }

    /// crc32c of what the node holds, its checksum field read as zero: the header and slots,
    /// then the heap; not the free gap between them, which nothing reads.
    pub fn compute_checksum(&self) -> u32 {
        let b = self.region.bytes(self.off, self.bs);
        let mut crc = crate::checksum::Pieces::new();
        crc.add(&b[..H_CRC as usize]).add(&[0u8; 4]);
        let slot = if self.is_leaf() {
            LEAF_SLOT
        } else {
            INNER_SLOT
        };
        // `load` checked both bounds: slots end at or before the heap, the heap in the block.
        let slots_end = (NODE_HEADER + u64::from(self.count) * slot) as usize;
        crc.add(&b[(H_CRC + 4) as usize..slots_end])
            .add(&b[self.heap as usize..])
            .value()
    }

    /// The stored checksum.
    pub fn stored_checksum(&self) -> u32 {
        self.region.read_u32(self.off + H_CRC)
    }

    /// Seal the node for commit.
    pub fn write_checksum(&self) {
        let crc = self.compute_checksum();
        self.region.write_u32(self.off + H_CRC, crc);
    }
}

/// Fills a freshly allocated block as a node. The block is unreachable until published.
pub(crate) struct NodeBuilder {
    region: Region,
    off: u64,
    level: u16,
    count: u16,
    heap: u64,
}

impl NodeBuilder {
    /// Start a node of `level` in `block`, born in generation `birth`.
    pub fn new(region: Region, layout: &Layout, block: u64, level: u16, birth: u64) -> Self {
        let off = layout.offset(block);
        let bs = layout.bs();
        region.write_u32(
            off + H_MAGIC,
            if level == 0 { LEAF_MAGIC } else { INNER_MAGIC },
        );
        region.write_u16(off + H_LEVEL, level);
        region.write_u16(off + H_COUNT, 0);
        region.write_u64(off + H_BIRTH, birth);
        region.write_u32(off + H_CRC, 0);
        region.write_u32(off + H_HEAP, bs as u32);
        // A new node's children and values may all be new.
        region.write_u64(off + H_DIRTY, u64::MAX);
        NodeBuilder {
            region,
            off,
            level,
            count: 0,
            heap: bs,
        }
    }

    /// Append a leaf slot (keys must arrive in ascending order).
    pub fn push_leaf(&mut self, key: Key, val: Val<'_>) {
        debug_assert_eq!(self.level, 0);
        let at = self.off + NODE_HEADER + u64::from(self.count) * LEAF_SLOT;
        self.region.write_u64(at, key.hi);
        self.region.write_u64(at + 8, key.lo);
        match val {
            Val::Inline(bytes) => {
                self.heap -= bytes.len() as u64;
                debug_assert!(self.heap >= at + LEAF_SLOT - self.off, "leaf overflow");
                self.region.copy_in(self.off + self.heap, bytes);
                self.region.write_u64(at + 16, self.heap);
                self.region.write_u64(at + 24, 0);
                self.region.write_u32(at + 32, bytes.len() as u32);
                self.region.write_u32(at + 36, 0);
            }
            Val::Block { block, len, gen } => {
                self.region.write_u64(at + 16, block);
                self.region.write_u64(at + 24, gen);
                self.region.write_u32(at + 32, len);
                self.region.write_u32(at + 36, FLAG_BLOCK);
            }
        }
        self.count += 1;
    }

    /// Append an internal slot.
    pub fn push_child(&mut self, key: Key, child: u64) {
        debug_assert!(self.level > 0);
        let at = self.off + NODE_HEADER + u64::from(self.count) * INNER_SLOT;
        self.region.write_u64(at, key.hi);
        self.region.write_u64(at + 8, key.lo);
        self.region.write_u64(at + 16, child);
        self.count += 1;
    }

    /// Node-relative offset where the slots pushed so far end.
    pub(crate) fn slots_end(&self) -> u64 {
        let slot = if self.level == 0 {
            LEAF_SLOT
        } else {
            INNER_SLOT
        };
        NODE_HEADER + u64::from(self.count) * slot
    }

    /// Node-relative start of the heap so far.
    pub(crate) fn heap_start(&self) -> u64 {
        self.heap
    }

    /// Move the heap start (the caller wrote the bytes from there on).
    pub(crate) fn set_heap_start(&mut self, heap: u64) {
        self.heap = heap;
    }

    /// The mapping the node is built in.
    pub(crate) fn region(&self) -> Region {
        self.region
    }

    /// Region offset of the node.
    pub(crate) fn offset(&self) -> u64 {
        self.off
    }

    /// Write count and heap start.
    pub fn finish(self) -> u16 {
        self.region.write_u16(self.off + H_COUNT, self.count);
        self.region.write_u32(self.off + H_HEAP, self.heap as u32);
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf and an internal node holding `keys`, in a buffer of two blocks.
    fn nodes(buf: &mut [u64], keys: &[Key]) -> (Node, Node) {
        let layout = Layout::new(4096, 64).expect("layout");
        let region = Region::new(buf.as_mut_ptr().cast(), (buf.len() * 8) as u64);
        let (leaf_b, inner_b) = (layout.data_start, layout.data_start + 1);
        let mut nb = NodeBuilder::new(region, &layout, leaf_b, 0, 1);
        for k in keys {
            nb.push_leaf(
                *k,
                Val::Block {
                    block: layout.data_start,
                    len: 0,
                    gen: 1,
                },
            );
        }
        nb.finish();
        let mut nb = NodeBuilder::new(region, &layout, inner_b, 1, 1);
        for k in keys {
            nb.push_child(*k, layout.data_start);
        }
        nb.finish();
        let backed = layout.data_start + 2;
        (
            Node::load(region, &layout, backed, leaf_b, Some(0)).expect("leaf"),
            Node::load(region, &layout, backed, inner_b, Some(1)).expect("inner"),
        )
    }

    #[test]
    fn dirty_slots_are_every_slot_whose_bit_modulo_64_is_set_in_order() {
        let layout = Layout::new(4096, 64).expect("layout");
        for n in [1u64, 5, 63, 64, 65, 100, 127, 128, 129, 150] {
            let mut buf = vec![0u64; ((layout.data_start + 2) * 4096 / 8) as usize];
            let keys: Vec<Key> = (0..n).map(|i| Key::new(7, i)).collect();
            // (A leaf holds up to 101 slots: past that, an internal node alone.)
            let both = if n <= 100 {
                let (leaf, inner) = nodes(&mut buf, &keys);
                vec![leaf, inner]
            } else {
                let region = Region::new(buf.as_mut_ptr().cast(), (buf.len() * 8) as u64);
                let mut nb = NodeBuilder::new(region, &layout, layout.data_start, 1, 1);
                for k in &keys {
                    nb.push_child(*k, layout.data_start);
                }
                nb.finish();
                let backed = layout.data_start + 2;
                vec![
                    Node::load(region, &layout, backed, layout.data_start, Some(1)).expect("inner"),
                ]
            };
            for node in both {
                assert_eq!(u64::from(node.count), n);
                for mask in [
                    0u64,
                    1,
                    1 << 63,
                    0x8000_0000_0000_0001,
                    0x0f0f,
                    u64::MAX,
                    1 << 36,
                ] {
                    node.region
                        .atomic_u64(node.off + H_DIRTY)
                        .store(mask, std::sync::atomic::Ordering::Release);
                    let want: Vec<u16> = (0..node.count)
                        .filter(|i| mask & (1 << (i % 64)) != 0)
                        .collect();
                    let got: Vec<u16> = node.dirty_slots().collect();
                    assert_eq!(got, want, "{n} slots, mask {mask:#x}");
                }
            }
        }
    }

    #[test]
    fn a_slot_appended_in_place_shows_whole_only_with_the_count_that_names_it() {
        let layout = Layout::new(4096, 64).expect("layout");
        let mut buf = vec![0u64; ((layout.data_start + 2) * 4096 / 8) as usize];
        let keys: Vec<Key> = (0..10).map(|i| Key::new(7, i * 2)).collect();
        let (leaf, _) = nodes(&mut buf, &keys);
        let backed = layout.data_start + 2;
        let reload =
            || Node::load(leaf.region, &layout, backed, leaf.block, Some(0)).expect("leaf");
        let mut n = leaf;
        for i in 0..200u64 {
            let key = Key::new(8, i);
            let at = layout.data_start + i % 2;
            match n.append_block_slot(key, at, 3, 4096) {
                Some(next) => {
                    // The leaf as a reader loads it now: the new key last, whole, the others
                    // where they were.
                    let r = reload();
                    assert_eq!(r.count, next.count);
                    assert_eq!(r.search(key), Ok(r.count - 1));
                    assert!(matches!(
                        r.value(r.count - 1).expect("value"),
                        Val::Block { block, len: 4096, gen: 3 } if block == at
                    ));
                    for (j, k) in keys.iter().enumerate() {
                        assert_eq!(r.search(*k), Ok(j as u16));
                    }
                    assert!(r.dirty_slots().any(|d| d == r.count - 1));
                    n = next;
                }
                None => {
                    // Full: nothing written that a reader could see.
                    let r = reload();
                    assert_eq!(r.count, n.count);
                    assert!(i > 50, "a 4 KiB leaf holds more than {} slots", n.count);
                    assert!(NODE_HEADER + (u64::from(r.count) + 1) * LEAF_SLOT > r.heap);
                    return;
                }
            }
        }
        panic!("a 4 KiB leaf never filled");
    }

    #[test]
    fn guided_search_agrees_with_binary_search() {
        let layout = Layout::new(4096, 64).expect("layout");
        let mut buf = vec![0u64; ((layout.data_start + 2) * 4096 / 8) as usize];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..400 {
            let n = 1 + next() % 95;
            // Mixes of dense runs, gaps and a second high word.
            let mut keys: Vec<Key> = (0..n)
                .map(|i| match round % 4 {
                    0 => Key::new(7, 1000 + i),
                    1 => Key::new(7, next() % 5000),
                    2 => Key::new(6 + next() % 2, next() % 300),
                    _ => Key::new(7, i * i * 37 + (next() % 3)),
                })
                .collect();
            keys.sort();
            keys.dedup();
            let (leaf, inner) = nodes(&mut buf, &keys);
            for _ in 0..200 {
                let probe = Key::new(5 + next() % 4, next() % 6000);
                let probe = if next() % 2 == 0 {
                    keys[(next() % keys.len() as u64) as usize]
                } else {
                    probe
                };
                let want = keys
                    .binary_search(&probe)
                    .map(|i| i as u16)
                    .map_err(|i| i as u16);
                assert_eq!(leaf.search(probe), want, "leaf {keys:?} {probe:?}");
                // A guess, right, wrong or past the end, changes no answer.
                let guess = (next() % (keys.len() as u64 + 2)) as u16;
                assert_eq!(
                    leaf.search_from(probe, guess),
                    want,
                    "guess {guess} {probe:?}"
                );
                let route = keys[1..].partition_point(|k| *k <= probe) as u16;
                assert_eq!(inner.route(probe), route, "inner {keys:?} {probe:?}");
            }
        }
    }
}
