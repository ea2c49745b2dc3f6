//! The copy-on-write tree: lookups, range scans, and updates made inside a [`Txn`].
//!
//! Update rule (publish by one atomic store): a change is prepared in blocks nothing references
//! (fresh blocks of this transaction), then made visible by one aligned 8-byte store: a child
//! pointer in a node that is already private to the working tree (born in the working generation),
//! or the working-root word in the header. A batch publishes only at the root, so it is all or
//! nothing. Nodes reachable from the last commit are never written. Replaced blocks are released
//! after the publish: freed at once when no commit references them, else freed by the next commit
//! (or kept while a snapshot needs them).

use std::cell::Cell;

use iris_media::Media;

use crate::allocator::Allocator;
use crate::blocklist::BlockList;
use crate::error::{Result, StoreError};
use crate::header::{Header, StampMask};
use crate::key::Key;
use crate::layout::Layout;
use crate::message::{Message, Shadow};
use crate::node::{Node, NodeBuilder, Val, LEAF_SLOT, MAX_HEIGHT, NODE_HEADER};
use crate::region::Region;

/// A key inserted right after this many keys sharing its high word, with keys of another after
/// it in the leaf, splits the leaf there (see `Txn::put_at`): a file of this many blocks that
/// grows gets leaves of its own at its end.
const RUN_TO_SPLIT: u16 = 16;

mod buffer;

/// The handles into an open volume that every tree operation uses, kept once by the store (a
/// [`Ctx`] refers to them: a transaction carries two words instead of a 300-byte copy, which
/// every write moved several times).
pub(crate) struct Parts {
    pub region: Region,
    pub layout: Layout,
    pub header: Header,
    pub alloc: Allocator,
    /// Bytes of messages an internal node may buffer (the volume's Bε knob; 0: a B+-tree).
    pub buffer: u64,
}

/// Everything a tree operation needs, borrowed from the store. Valid under the volume lock.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    parts: &'a Parts,
    pub media: &'a dyn Media,
}

impl std::ops::Deref for Ctx<'_> {
    type Target = Parts;

    #[inline]
    fn deref(&self) -> &Parts {
        self.parts
    }
}

impl<'a> Ctx<'a> {
    /// The context of `parts` on `media`.
    pub fn new(parts: &'a Parts, media: &'a dyn Media) -> Self {
        Ctx { parts, media }
    }

    pub fn load(&self, block: u64, level: Option<u16>) -> Result<Node> {
        Node::load(
            self.region,
            &self.layout,
            self.header.backed_blocks(),
            block,
            level,
        )
    }

    /// Find `key` under `root`; the value's bytes are valid while the lock is held.
    pub fn lookup(&self, root: u64, key: Key) -> Result<Option<Val<'a>>> {
        if root == 0 {
            return Ok(None);
        }
        let mut node = self.load(root, None)?;
        while !node.is_leaf() {
            if let Some(m) = node.find_message(key)? {
                return Ok(self.shadow_value(m));
            }
            let i = node.route(key);
            node = self.load(node.child(i), Some(node.level - 1))?;
        }
        match node.search(key) {
            Ok(i) => {
                // The value borrows the mapping, not the node view.
                let v = node.value(i)?;
                Ok(Some(extend(v)))
            }
            Err(_) => Ok(None),
        }
    }

    /// The leaf block and slot holding `key` in a tree without message buffers (a B+-tree),
    /// or `None` when it is absent.
    pub fn locate_leaf(&self, root: u64, key: Key) -> Result<Option<(u64, u16)>> {
        if root == 0 {
            return Ok(None);
        }
        let mut node = self.load(root, None)?;
        while !node.is_leaf() {
            let i = node.route(key);
            node = self.load(node.child(i), Some(node.level - 1))?;
        }
        Ok(node.search(key).ok().map(|i| (node.block, i)))
    }

    /// The value a message found on the way down gives its key.
    fn shadow_value(&self, m: Shadow) -> Option<Val<'a>> {
        match m {
            Shadow::Deleted => None,
            Shadow::Inline { at, len } => {
                Some(extend(Val::Inline(self.region.bytes(at, u64::from(len)))))
            }
            Shadow::Block { block, len, gen } => Some(Val::Block { block, len, gen }),
        }
    }

    /// Visit keys in `[start, end)` ascending until `f` returns false. Returns whether the scan
    /// reached the end of the range.
    pub fn scan(
        &self,
        root: u64,
        start: Key,
        end: Key,
        f: &mut dyn FnMut(Key, &[u8]) -> bool,
    ) -> Result<bool> {
        if root == 0 || start >= end {
            return Ok(true);
        }
        let node = self.load(root, None)?;
        self.scan_node(node, start, end, &[], f)
    }

    /// Scan `node`'s subtree; `above` holds the newer messages of the nodes above for keys in
    /// this subtree and the range, in key order.
    fn scan_node(
        &self,
        node: Node,
        start: Key,
        end: Key,
        above: &[Message<'a>],
        f: &mut dyn FnMut(Key, &[u8]) -> bool,
    ) -> Result<bool> {
        if node.is_leaf() {
            return self.scan_leaf(node, start, end, above, f);
        }
        let merged;
        let above = if node.has_messages() {
            let own: Vec<Message<'a>> = node
                .messages()?
                .into_iter()
                .filter(|(k, _)| *k >= start && *k < end)
                .map(|(k, v)| (k, v.map(extend)))
                .collect();
            merged = crate::message::merge(own, above.to_vec(), |_| {});
            &merged[..]
        } else {
            above
        };
        let first = node.route(start);
        for i in first..node.count {
            if i > first && node.key(i) >= end {
                return Ok(false);
            }
            // The messages that route to child i.
            let lo = if i == first {
                0
            } else {
                above.partition_point(|(k, _)| *k < node.key(i))
            };
            let hi = if i + 1 < node.count {
                above.partition_point(|(k, _)| *k < node.key(i + 1))
            } else {
                above.len()
            };
            let child = self.load(node.child(i), Some(node.level - 1))?;
            if !self.scan_node(child, start, end, &above[lo..hi.max(lo)], f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Scan one leaf merged with the messages above it (which win, and hide deleted keys).
    fn scan_leaf(
        &self,
        node: Node,
        start: Key,
        end: Key,
        above: &[Message<'a>],
        f: &mut dyn FnMut(Key, &[u8]) -> bool,
    ) -> Result<bool> {
        let mut i = match node.search(start) {
            Ok(i) | Err(i) => i,
        };
        let mut m = 0;
        loop {
            let leaf_key = (i < node.count).then(|| node.key(i));
            let msg_key = above.get(m).map(|(k, _)| *k);
            let from_message = match (leaf_key, msg_key) {
                (None, None) => return Ok(true),
                (Some(a), Some(b)) => b <= a,
                (None, Some(_)) => true,
                (Some(_), None) => false,
            };
            let (k, v) = if from_message {
                let (b, v) = above[m];
                m += 1;
                if leaf_key == Some(b) {
                    i += 1;
                }
                (b, v)
            } else {
                let a = node.key(i);
                i += 1;
                (a, Some(extend(node.value(i - 1)?)))
            };
            if k >= end {
                return Ok(false);
            }
            if let Some(v) = v {
                if !f(k, Node::value_bytes(&self.region, &self.layout, v)) {
                    return Ok(false);
                }
            }
        }
    }
}

/// Extend a value view from the node's borrow to the mapping's: both live as long as the lock.
fn extend<'a>(v: Val<'_>) -> Val<'a> {
    match v {
        // SAFETY: the slice points into the mapping (Region::bytes), which outlives every Ctx; the
        // lifetime was only tied to the Node view, a copy of (base, offset) data.
        Val::Inline(b) => Val::Inline(unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) }),
        Val::Block { block, len, gen } => Val::Block { block, len, gen },
    }
}

/// One internal node on the way to a leaf: its block, level and the slot taken. (Block numbers,
/// not node views: the path is copied on every update, and views are cheap to load again.)
/// Packed (12 bytes, not 16): a path is moved whole with every located key.
#[derive(Clone, Copy, Default)]
#[repr(C, packed(4))]
struct Step {
    block: u64,
    level: u16,
    slot: u16,
}

/// The internal nodes on the way to a leaf.
type Path = [Step; MAX_HEIGHT];

/// The path of a spot that has none (a remembered leaf's: never followed, see `Spot::remembered`).
static NO_PATH: Path = [Step {
    block: 0,
    level: 0,
    slot: 0,
}; MAX_HEIGHT];

/// Where a key is, or would go: the path to its leaf and its slot (`Err` = insert position).
pub(crate) struct Spot {
    /// The key's leaf (`None`: the tree is empty).
    leaf: Option<Node>,
    /// The internal nodes on the way to the leaf and their count (`None` for a remembered
    /// leaf, so a spot made from a hint writes no path it does not have).
    path: Option<(Path, usize)>,
    slot: std::result::Result<u16, u16>,
    /// The newest message for the key in a buffer on the way down: it, not the leaf, says what
    /// the key holds.
    shadow: Option<Shadow>,
    /// Found from a remembered leaf, without the path: good for changes in place only.
    remembered: bool,
}

impl Spot {
    /// Whether the key holds a value (in its leaf or in a message above it).
    pub fn present(&self) -> bool {
        match self.shadow {
            Some(m) => !matches!(m, Shadow::Deleted),
            None => self.slot.is_ok(),
        }
    }

    /// A spot found from a remembered leaf and slot (see `store::hint`): `leaf` holds `key` at
    /// `slot`, and the shape has not moved since that was seen, so nothing above shadows it.
    pub fn from_leaf(leaf: Node, slot: u16) -> Spot {
        Spot {
            leaf: Some(leaf),
            path: None,
            slot: Ok(slot),
            shadow: None,
            remembered: true,
        }
    }

    /// The leaf and slot of a key found in its leaf (for remembering them).
    pub fn found_in_leaf(&self) -> Option<(u64, u16)> {
        self.leaf_slot().map(|(leaf, i)| (leaf.block, i))
    }

    /// Region offset of the key's value word in its leaf (unshadowed keys only).
    pub fn value_word_off(&self) -> Option<u64> {
        self.leaf_slot().map(|(leaf, i)| leaf.value_word_off(i))
    }

    /// Region offset of the key's inline value bytes in its leaf (unshadowed keys only; the
    /// caller knows the value is inline).
    pub fn inline_value_off(&self) -> Option<u64> {
        self.leaf_slot().map(|(leaf, i)| leaf.inline_value_off(i))
    }

    /// The key's slot in its leaf when nothing above shadows it.
    fn leaf_slot(&self) -> Option<(&Node, u16)> {
        match (&self.leaf, self.slot, self.shadow) {
            (Some(leaf), Ok(i), None) => Some((leaf, i)),
            _ => None,
        }
    }
}

/// New children that replace one child slot: none (it emptied), one, or two (it split).
type Children = ([(Key, u64); 2], usize);

/// One atomic update of the working tree (a single operation or a batch).
pub(crate) struct Txn<'a> {
    cx: Ctx<'a>,
    wgen: u64,
    root: u64,
    publish_at_root: bool,
    fresh: BlockList<u64, 16>,
    released: BlockList<(u64, u64), 16>,
    /// Change-stamp buckets of the keys this transaction changed.
    touched: StampMask,
    /// The writer partition whose lock this transaction holds (all of them, unless `in_place`):
    /// blocks it frees wait in that partition's limbo.
    part: u64,
    /// Holding one partition's lock only: nothing but in-place changes of existing values.
    in_place: bool,
    /// Frees space: may allocate from the blocks held back for that (see `Allocator::alloc`).
    reserve: bool,
    /// A key whose bytes changed in place (no stamp moves for that): noted as written too.
    written_in_place: Option<Key>,
    /// The change is in the intent log (see [`Txn::set_logged`]): its publish notes no
    /// generation for syncs.
    logged: bool,
    /// Writer partitions whose write sequences this transaction made odd at its publish, made
    /// even again once its change stamps moved (see [`Txn::announce`]).
    announced: u64,
    /// Committed or aborted (else its drop moves the stamps of what it touched: an error after
    /// a publish must not leave remembered locations of the old values current).
    finished: bool,
    /// Data blocks filled outside the lock that this transaction took over (see
    /// `store::prepared`): freed if it aborts, as its own fresh blocks are.
    adopted: Vec<u64>,
    /// In a batch, the last walk down the tree, reused by the next one for a key of the same
    /// leaf (a write of consecutive blocks walks once per leaf, not once per block). Cleared by
    /// every change of shape.
    finger: Cell<Option<Finger>>,
}

/// A walk from the root to a leaf, and the keys that leaf covers: `lo <= key < hi` (`hi`
/// `None`: no upper bound), as the separators on the way say.
#[derive(Clone, Copy)]
struct Finger {
    lo: Key,
    hi: Option<Key>,
    path: Path,
    depth: usize,
    leaf: u64,
}

impl<'a> Txn<'a> {
    /// Begin; `batch` defers publication to [`Txn::commit_publish`] at the root.
    pub fn begin(cx: Ctx<'a>, batch: bool) -> Self {
        Txn {
            cx,
            wgen: cx.header.working_gen(),
            root: cx.header.working_root(),
            publish_at_root: batch,
            fresh: BlockList::new(),
            released: BlockList::new(),
            touched: StampMask::default(),
            part: 0,
            in_place: false,
            reserve: false,
            written_in_place: None,
            logged: false,
            announced: 0,
            finished: false,
            adopted: Vec::new(),
            finger: Cell::new(None),
        }
    }

    /// Note that the bytes of `key`'s value changed in place (they move no stamp; the publish
    /// notes the write's generation for syncs, see `Header::note_written`).
    pub fn note_written_in_place(&mut self, key: Key) {
        self.written_in_place = Some(key);
    }

    /// This transaction's change goes into the intent log (a synced write, see `log_record`):
    /// durable once its record is, so its publish leaves the generation that syncs wait for
    /// (`Header::note_written`) alone.
    pub fn set_logged(&mut self) {
        self.logged = true;
    }

    /// Let this transaction allocate from the reserve: it frees space (a deletion), which a full
    /// volume must still allow.
    pub fn use_reserve(&mut self) {
        self.reserve = true;
    }

    /// Begin a single operation holding only partition `part`'s lock: the caller changes
    /// nothing but what [`Txn::replaceable_in_place`] and [`Txn::patchable_in_place`] allow
    /// (the tree's shape is frozen by the other partitions' writers too: every change of shape
    /// holds every lock).
    pub fn begin_in(cx: Ctx<'a>, part: u64) -> Self {
        let mut t = Txn::begin(cx, false);
        t.part = part;
        t.in_place = true;
        t
    }

    /// Whether putting an out-of-line value of `len` bytes at `spot` is a one-word publish into
    /// a leaf private to the working tree (no copy, no change of shape).
    pub fn replaceable_in_place(&self, spot: &Spot, len: u32) -> Result<bool> {
        let Some((leaf, i)) = spot.leaf_slot() else {
            return Ok(false);
        };
        Ok(
            matches!(leaf.value(i)?, Val::Block { len: old, .. } if old == len)
                && self.writable_in_place(leaf),
        )
    }

    /// For an insert of an out-of-line value holding partition locks only: the last key of the
    /// leaf `spot` found, when the new key goes past it, into a leaf private to the working tree
    /// with room for one more slot (a B+-tree's; not a spot made from a hint). Whoever appends
    /// there holds that key's partition: two appenders to one leaf take turns on it, and every
    /// other change of the leaf's shape holds every lock (see `Node::append_block_slot`).
    pub fn appendable_in_place(&self, spot: &Spot) -> Option<Key> {
        if self.cx.buffer > 0 || spot.shadow.is_some() || spot.remembered {
            return None;
        }
        let leaf = spot.leaf.as_ref()?;
        if spot.slot != Err(leaf.count) || leaf.count == 0 || !self.writable_in_place(leaf) {
            return None;
        }
        leaf.has_room_for_block_slot()
            .then(|| leaf.key(leaf.count - 1))
    }

    /// Append `key` with the out-of-line value `val` to the leaf `spot` found, where
    /// [`Txn::appendable_in_place`] said it may go (its caller holding the partitions it
    /// named). `false`: nothing done.
    pub fn append_in_place(&mut self, spot: &Spot, key: Key, val: Val<'_>) -> bool {
        let (Some(leaf), Val::Block { block, len, gen }) = (spot.leaf.as_ref(), val) else {
            return false;
        };
        self.touch(key);
        leaf.append_block_slot(key, block, gen, len).is_some()
    }

    /// Whether this transaction changed a key sharing `key`'s change stamp (so its publish moves
    /// that stamp by one).
    pub fn touches(&self, key: Key) -> bool {
        self.touched.has(key)
    }

    /// Whether the inline value at `spot` can be patched word by word where it is.
    pub fn patchable_in_place(&self, spot: &Spot) -> Result<bool> {
        let Some((leaf, i)) = spot.leaf_slot() else {
            return Ok(false);
        };
        Ok(matches!(leaf.value(i)?, Val::Inline(_)) && self.writable_in_place(leaf))
    }

    /// Root of the tree as this transaction sees it (its own changes included).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The context this transaction runs in.
    pub fn cx(&self) -> &Ctx<'a> {
        &self.cx
    }

    fn is_fresh(&self, b: u64) -> bool {
        self.fresh.contains(&b)
    }

    /// A node may be changed in place by an 8-byte store if nothing committed reaches it and, in a
    /// batch, nothing published does.
    fn writable_in_place(&self, node: &Node) -> bool {
        self.is_fresh(node.block) || (!self.publish_at_root && node.birth == self.wgen)
    }

    /// A fresh copy of `node` (see `Node::copy_to`).
    fn cow(&mut self, node: &Node) -> Result<Node> {
        let b = self.alloc()?;
        Ok(node.copy_to(b, self.wgen))
    }

    /// Give back a fresh block this transaction no longer needs.
    fn unalloc(&mut self, b: u64) {
        self.released.push((b, self.wgen));
    }

    fn alloc(&mut self) -> Result<u64> {
        debug_assert!(
            !self.in_place,
            "allocation while holding one partition's lock"
        );
        let b = self
            .cx
            .alloc
            .alloc(self.part, self.cx.media, self.reserve)?;
        self.fresh.push(b);
        Ok(b)
    }

    /// Allocate a data block for an out-of-line value; the caller fills it before `put`.
    pub fn alloc_data(&mut self) -> Result<(u64, u64)> {
        let b = self.alloc()?;
        Ok((b, self.wgen))
    }

    fn release(&mut self, block: u64, birth: u64) {
        self.released.push((block, birth));
    }

    fn release_value(&mut self, v: Val<'_>) {
        if let Val::Block { block, gen, .. } = v {
            self.release(block, gen);
        }
    }

    /// Find where `key` is (or would go), once, for a lookup followed by an update.
    pub fn locate(&self, key: Key) -> Result<Spot> {
        if self.root == 0 {
            return Ok(Spot {
                leaf: None,
                path: None,
                slot: Err(0),
                shadow: None,
                remembered: false,
            });
        }
        let (path, depth, leaf, shadow) = self.descend(key)?;
        let slot = leaf.search(key);
        Ok(Spot {
            leaf: Some(leaf),
            path: Some((path, depth)),
            slot,
            shadow,
            remembered: false,
        })
    }

    /// The value at a located key, if present.
    pub fn value_at(&self, spot: &Spot) -> Result<Option<Val<'a>>> {
        if let Some(m) = spot.shadow {
            return Ok(self.cx.shadow_value(m));
        }
        match (&spot.leaf, spot.slot) {
            (Some(leaf), Ok(i)) => Ok(Some(extend(leaf.value(i)?))),
            _ => Ok(None),
        }
    }

    /// Insert or replace `key`; returns whether it replaced a value.
    pub fn put(&mut self, key: Key, val: Val<'_>) -> Result<bool> {
        let spot = self.locate(key)?;
        self.put_at(&spot, key, val)?;
        // In a Bε-tree a message above the leaf (a delete, a newer value) decides.
        Ok(spot.present())
    }

    /// Insert or replace `key` at the spot `locate` found (nothing changed the tree since; the
    /// allocator may have).
    pub fn put_at(&mut self, spot: &Spot, key: Key, val: Val<'_>) -> Result<()> {
        self.touch(key);
        let Some(leaf) = spot.leaf.as_ref() else {
            let b = self.alloc()?;
            let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, 0, self.wgen);
            nb.push_leaf(key, val);
            nb.finish();
            return self.set_root(([(key, b), (Key::MIN, 0)], 1));
        };
        let leaf = *leaf;
        let (path, depth) = match &spot.path {
            Some((path, depth)) => (path, *depth),
            None => (&NO_PATH, 0),
        };
        // Bε: what is not a same-shaped replacement in the leaf becomes a message at the root.
        let buffered = self.cx.buffer > 0 && depth > 0;
        if spot.shadow.is_some() || (buffered && spot.slot.is_err()) {
            if spot.remembered {
                return Err(remembered_misused());
            }
            return self.put_message(key, Some(val));
        }
        match spot.slot {
            Ok(i) => {
                let old = extend(leaf.value(i)?);
                if let (Val::Block { len: old_len, .. }, Val::Block { block, len, gen }) =
                    (old, val)
                {
                    if old_len == len && self.writable_in_place(&leaf) {
                        // Publish the new data block with one store; the generation word
                        // follows (a stale one only delays the old block's reuse).
                        let at = leaf.value_word_off(i);
                        self.cx.region.publish_u64(at, block);
                        self.cx.region.write_u64(at + 8, gen);
                        leaf.mark_dirty(i);
                        self.release_value(old);
                        return Ok(());
                    }
                }
                if spot.remembered {
                    return Err(remembered_misused());
                }
                // Same-shaped replacement in a leaf we may not write: copy it and change the
                // slot in the copy (a block copy, not a rebuild). An out-of-line value of another
                // length is the same shape too (the slot holds the length); in a leaf this
                // transaction made, no reader can see the slot change.
                match (old, val) {
                    (Val::Block { .. }, Val::Block { block, len, gen })
                        if self.is_fresh(leaf.block) =>
                    {
                        leaf.set_block_value(i, block, gen, len);
                        self.release_value(old);
                        return Ok(());
                    }
                    (Val::Block { .. }, Val::Block { block, len, gen }) => {
                        let c = self.cow(&leaf)?;
                        c.set_block_value(i, block, gen, len);
                        self.release_value(old);
                        self.release(leaf.block, leaf.birth);
                        return self.propagate(path, depth, ([(key, c.block), (Key::MIN, 0)], 1));
                    }
                    // An inline value: rewritten where it is if the length holds, else placed
                    // anew in the leaf's heap; in the leaf if this transaction made it, else in
                    // a copy.
                    (Val::Inline(o), Val::Inline(n)) => {
                        let set = |node: &Node| {
                            if o.len() == n.len() {
                                node.set_inline_same_len(i, n)
                            } else {
                                node.set_inline(i, n)
                            }
                        };
                        if self.is_fresh(leaf.block) {
                            if set(&leaf) {
                                return Ok(());
                            }
                        } else {
                            let c = self.cow(&leaf)?;
                            if set(&c) {
                                self.release(leaf.block, leaf.birth);
                                return self.propagate(
                                    path,
                                    depth,
                                    ([(key, c.block), (Key::MIN, 0)], 1),
                                );
                            }
                            // No room in the copy's heap (or not the shape it claimed): drop
                            // the copy and rebuild.
                            self.unalloc(c.block);
                        }
                    }
                    _ => {}
                }
                if buffered {
                    return self.put_message(key, Some(val));
                }
                let n = leaf.count;
                let children = self.build_leaves(
                    n,
                    |j| {
                        if j == i {
                            val.heap_bytes()
                        } else {
                            leaf.raw_heap_bytes(j)
                        }
                    },
                    |j| {
                        if j == i {
                            Ok((key, val))
                        } else {
                            Ok((leaf.key(j), leaf.value(j)?))
                        }
                    },
                )?;
                self.release_value(old);
                self.release(leaf.block, leaf.birth);
                self.propagate(path, depth, children)
            }
            Err(_) if spot.remembered => Err(remembered_misused()),
            Err(pos) => {
                // Past the last key of a leaf private to the working tree (a file growing at
                // its end), holding every lock: appended where it is, visible by one store
                // (see `Node::append_block_slot`), no copy of the leaf.
                if let Val::Block { block, len, gen } = val {
                    if pos == leaf.count
                        && !self.in_place
                        && self.writable_in_place(&leaf)
                        && leaf.append_block_slot(key, block, gen, len).is_some()
                    {
                        return Ok(());
                    }
                }
                // The end of a long run of keys sharing a high word (a growing file) with other
                // keys after it in the leaf: the leaf splits right after the new key (below), so
                // that the run's next keys go past the last key of a leaf of their own (appended
                // in place, see `Txn::appendable_in_place`), not into the middle of a shared one.
                let run_end = pos >= RUN_TO_SPLIT
                    && pos < leaf.count
                    && leaf.key(pos).hi != key.hi
                    && leaf.key(pos - RUN_TO_SPLIT).hi == key.hi;
                // Room in the leaf: insert into a copy (or into the leaf itself if this
                // transaction made it) instead of rebuilding.
                if !run_end && self.is_fresh(leaf.block) {
                    if leaf.insert_slot(pos, key, val).is_some() {
                        return Ok(());
                    }
                } else if !run_end {
                    let c = self.cow(&leaf)?;
                    if c.insert_slot(pos, key, val).is_some() {
                        self.release(leaf.block, leaf.birth);
                        return self.propagate(path, depth, ([(key, c.block), (Key::MIN, 0)], 1));
                    }
                    self.unalloc(c.block);
                }
                // Rebuilt: split after a run's end; full, a key past the last one (a run
                // growing at its end) starts a leaf of its own and leaves this one full, rather
                // than two half-full ones; else wherever the bytes halve.
                let n = leaf.count + 1;
                let want = if run_end {
                    pos + 1
                } else if pos == leaf.count {
                    pos
                } else {
                    n
                };
                let children = self.build_leaves_split_at(
                    n,
                    want,
                    |j| match j.cmp(&pos) {
                        std::cmp::Ordering::Less => leaf.raw_heap_bytes(j),
                        std::cmp::Ordering::Equal => val.heap_bytes(),
                        std::cmp::Ordering::Greater => leaf.raw_heap_bytes(j - 1),
                    },
                    |j| match j.cmp(&pos) {
                        std::cmp::Ordering::Less => Ok((leaf.key(j), leaf.value(j)?)),
                        std::cmp::Ordering::Equal => Ok((key, val)),
                        std::cmp::Ordering::Greater => Ok((leaf.key(j - 1), leaf.value(j - 1)?)),
                    },
                )?;
                self.release(leaf.block, leaf.birth);
                self.propagate(path, depth, children)
            }
        }
    }

    /// Overwrite 8-byte words of the inline value of `key` in place, when its leaf is private to
    /// the working tree: each word is one store, so a killed process leaves every word either old
    /// or new. Returns `None` if the key is absent, `Some(false)` if the caller must rewrite the
    /// value instead (committed leaf, out-of-line value, or a word past its end).
    pub fn patch_at(&mut self, spot: &Spot, words: &[(usize, u64)]) -> Result<Option<bool>> {
        if spot.shadow.is_some() {
            return Ok(spot.present().then_some(false));
        }
        let (Some(leaf), Ok(i)) = (&spot.leaf, spot.slot) else {
            return Ok(None);
        };
        let leaf = *leaf;
        let Val::Inline(bytes) = leaf.value(i)? else {
            return Ok(Some(false));
        };
        if !self.writable_in_place(&leaf) || words.iter().any(|(off, _)| off + 8 > bytes.len()) {
            return Ok(Some(false));
        }
        self.patch_inline_at(leaf.key(i), leaf.inline_value_off(i), words);
        Ok(Some(true))
    }

    /// Write `words` (offsets inside the value, checked by the caller) into the inline value of
    /// `key` at region offset `value_off`, in a leaf private to the working tree that the
    /// caller found and checked ([`Txn::patchable_in_place`]) under locks it still holds.
    pub fn patch_inline_at(&mut self, key: Key, value_off: u64, words: &[(usize, u64)]) {
        self.touch(key);
        for (off, w) in words {
            self.cx.region.write_u64(value_off + *off as u64, w.to_le());
        }
    }

    /// Give the out-of-line value at `spot` the length `len`, its block's bytes up to `len`
    /// written already, in a leaf private to the working tree (see `Node::publish_block_len`).
    /// `false` (nothing done) when the value is not out of line or the leaf is committed.
    pub fn resize_in_place(&mut self, spot: &Spot, len: u32) -> Result<bool> {
        let Some((leaf, i)) = spot.leaf_slot() else {
            return Ok(false);
        };
        if !matches!(leaf.value(i)?, Val::Block { .. }) || !self.writable_in_place(leaf) {
            return Ok(false);
        }
        self.touch(leaf.key(i));
        leaf.publish_block_len(i, len);
        Ok(true)
    }

    /// Remove `key`; returns whether it was there.
    pub fn delete(&mut self, key: Key) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let (path, depth, leaf, shadow) = self.descend(key)?;
        let found = leaf.search(key);
        if shadow.is_some() || (self.cx.buffer > 0 && depth > 0) {
            let present = match shadow {
                Some(m) => !matches!(m, Shadow::Deleted),
                None => found.is_ok(),
            };
            if present {
                self.touch(key);
                self.put_message(key, None)?;
            }
            return Ok(present);
        }
        let Ok(i) = found else {
            return Ok(false);
        };
        let old = extend(leaf.value(i)?);
        self.touch(key);
        if leaf.count > 1 {
            // Remove the slot from the leaf itself if this transaction made it, else from a
            // copy: one block per leaf a batch of deletes touches, not one per delete.
            if self.is_fresh(leaf.block) {
                leaf.remove_slot(i);
                self.release_value(old);
                return Ok(true);
            }
            let c = self.cow(&leaf)?;
            c.remove_slot(i);
            self.release_value(old);
            self.release(leaf.block, leaf.birth);
            self.propagate(&path, depth, ([(key, c.block), (Key::MIN, 0)], 1))?;
            return Ok(true);
        }
        // The leaf's last key: the leaf goes.
        self.release_value(old);
        self.release(leaf.block, leaf.birth);
        self.propagate(&path, depth, ([(Key::MIN, 0); 2], 0))?;
        Ok(true)
    }

    /// Walk from the root to the leaf for `key`, recording (node, slot) on the way, and the
    /// first (newest) message for `key` met in a buffer.
    fn descend(&self, key: Key) -> Result<(Path, usize, Node, Option<Shadow>)> {
        // Only transactions of several operations walk again (a single one would only copy
        // the walk for nothing); buffered trees keep messages on the way down: walk them every
        // time.
        let fingered = self.publish_at_root && self.cx.buffer == 0;
        if let Some(f) = self.finger.get().filter(|_| fingered) {
            if f.lo <= key && f.hi.is_none_or(|hi| key < hi) {
                return Ok((f.path, f.depth, self.cx.load(f.leaf, Some(0))?, None));
            }
        }
        let mut node = self.cx.load(self.root, None)?;
        let mut path = [Step::default(); MAX_HEIGHT];
        let mut depth = 0;
        let mut shadow = None;
        let (mut lo, mut hi) = (Key::MIN, None);
        while !node.is_leaf() {
            if shadow.is_none() {
                shadow = node.find_message(key)?;
            }
            let i = node.route(key);
            // Child `i` holds the keys from its separator (the first child: from the parent's
            // lower bound) to the next separator.
            if i > 0 {
                lo = node.key(i);
            }
            if i + 1 < node.count {
                hi = Some(node.key(i + 1));
            }
            path[depth] = Step {
                block: node.block,
                level: node.level,
                slot: i,
            };
            depth += 1;
            node = self.cx.load(node.child(i), Some(node.level - 1))?;
        }
        if fingered {
            self.finger.set(Some(Finger {
                lo,
                hi,
                path,
                depth,
                leaf: node.block,
            }));
        }
        Ok((path, depth, node, shadow))
    }

    /// Write `n` leaf entries into one new leaf, or two if they do not fit in one. `heap(j)` is
    /// entry j's inline size (cheap, unvalidated); `entry(j)` reads and validates it.
    fn build_leaves<'v>(
        &mut self,
        n: u16,
        heap: impl Fn(u16) -> u64,
        entry: impl Fn(u16) -> Result<(Key, Val<'v>)>,
    ) -> Result<Children> {
        self.build_leaves_split_at(n, n, heap, entry)
    }

    /// [`Txn::build_leaves`], split after the first `want` entries (`n`: wherever it must) when
    /// each side fits in a block.
    fn build_leaves_split_at<'v>(
        &mut self,
        n: u16,
        want: u16,
        heap: impl Fn(u16) -> u64,
        entry: impl Fn(u16) -> Result<(Key, Val<'v>)>,
    ) -> Result<Children> {
        let bs = self.cx.layout.bs();
        let total: u64 = NODE_HEADER + (0..n).map(|j| LEAF_SLOT + heap(j)).sum::<u64>();
        let fits = |r: std::ops::Range<u16>| {
            NODE_HEADER + r.map(|j| LEAF_SLOT + heap(j)).sum::<u64>() <= bs
        };
        let split = if want > 0 && want < n && fits(0..want) && fits(want..n) {
            want
        } else if total <= bs {
            n
        } else {
            // Smallest prefix holding at least half the bytes; both halves then fit because a
            // single entry is at most a quarter block.
            let mut acc = NODE_HEADER;
            let mut at = 0;
            while at < n && acc < total / 2 {
                acc += LEAF_SLOT + heap(at);
                at += 1;
            }
            at.clamp(1, n - 1)
        };
        let mut out: Children = ([(Key::MIN, 0); 2], 0);
        for range in [0..split, split..n] {
            if range.is_empty() {
                continue;
            }
            let half: u64 = NODE_HEADER + range.clone().map(|j| LEAF_SLOT + heap(j)).sum::<u64>();
            if half > bs {
                return Err(StoreError::corrupt("leaf entries larger than a block"));
            }
            let b = self.alloc()?;
            let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, 0, self.wgen);
            let mut first = Key::MIN;
            for j in range.clone() {
                let (k, v) = entry(j)?;
                if j == range.start {
                    first = k;
                }
                nb.push_leaf(k, v);
            }
            nb.finish();
            out.0[out.1] = (first, b);
            out.1 += 1;
        }
        Ok(out)
    }

    /// Write `n` internal entries into one or two new nodes of `level`.
    fn build_inners(
        &mut self,
        level: u16,
        n: u16,
        entry: impl Fn(u16) -> (Key, u64),
    ) -> Result<Children> {
        let cap = buffer::inner_capacity(self.cx.layout.bs(), self.cx.buffer) as u16;
        let split = if n <= cap { n } else { n / 2 };
        let mut out: Children = ([(Key::MIN, 0); 2], 0);
        for range in [0..split, split..n] {
            if range.is_empty() {
                continue;
            }
            let b = self.alloc()?;
            let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, level, self.wgen);
            let first = entry(range.start).0;
            for j in range {
                let (k, c) = entry(j);
                nb.push_child(k, c);
            }
            nb.finish();
            out.0[out.1] = (first, b);
            out.1 += 1;
        }
        Ok(out)
    }

    /// Replace the child at each level of `path` bottom-up until one store publishes the change.
    fn propagate(&mut self, path: &Path, depth: usize, mut children: Children) -> Result<()> {
        self.finger.set(None);
        for d in (0..depth).rev() {
            let step = path[d];
            let (parent, idx) = (self.cx.load(step.block, Some(step.level))?, step.slot);
            if children.1 == 1 && self.writable_in_place(&parent) {
                self.cx
                    .region
                    .publish_u64(parent.child_word_off(idx), children.0[0].1);
                parent.mark_dirty(idx);
                return Ok(());
            }
            if children.1 == 1 {
                let c = self.cow(&parent)?;
                c.set_child(idx, children.0[0].1);
                self.release(parent.block, parent.birth);
                children = ([(parent.key(0), c.block), (Key::MIN, 0)], 1);
                continue;
            }
            if parent.has_messages() {
                // Buffered volumes change shape only through `put_message`.
                return Err(StoreError::Invalid(format!(
                    "node {}: split under a node with buffered messages",
                    parent.block
                )));
            }
            let (kids, k) = children;
            let n = parent.count - 1 + k as u16;
            if n == 0 {
                children = ([(Key::MIN, 0); 2], 0);
            } else {
                children = self.build_inners(parent.level, n, |j| {
                    if j < idx {
                        (parent.key(j), parent.child(j))
                    } else if j < idx + k as u16 {
                        let r = (j - idx) as usize;
                        // The first replacement keeps the old separator (a valid lower bound).
                        let key = if r == 0 { parent.key(idx) } else { kids[r].0 };
                        (key, kids[r].1)
                    } else {
                        let s = j + 1 - k as u16;
                        (parent.key(s), parent.child(s))
                    }
                })?;
            }
            self.release(parent.block, parent.birth);
        }
        self.set_root(children)
    }

    /// Install new top-level children as the root (growing or shrinking the tree).
    fn set_root(&mut self, children: Children) -> Result<()> {
        let root = match children.1 {
            0 => 0,
            1 => children.0[0].1,
            _ => {
                let level = self.cx.load(children.0[0].1, None)?.level + 1;
                let b = self.alloc()?;
                let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, level, self.wgen);
                nb.push_child(children.0[0].0, children.0[0].1);
                nb.push_child(children.0[1].0, children.0[1].1);
                nb.finish();
                b
            }
        };
        self.install_root(root)
    }

    /// Make `root` the transaction's root (published now unless a batch).
    fn install_root(&mut self, mut root: u64) -> Result<()> {
        self.finger.set(None);
        // An internal root with one child and no messages is replaced by the child.
        while root != 0 {
            let node = self.cx.load(root, None)?;
            if node.is_leaf() || node.count > 1 || node.has_messages() {
                break;
            }
            self.release(node.block, node.birth);
            root = node.child(0);
        }
        self.root = root;
        if !self.publish_at_root {
            self.announce();
            self.cx
                .region
                .publish_u64(self.cx.header.working_root_off(), root);
        }
        Ok(())
    }

    /// Note a change to `key` (its stamp moves at the publish); a single operation holding
    /// every lock announces it before its first store (see [`Txn::announce`]).
    fn touch(&mut self, key: Key) {
        self.touched.touch(key);
        if !self.publish_at_root {
            self.announce();
        }
    }

    /// Before a transaction holding every lock makes a change visible (a new root, a copied
    /// node stored in a parent, a block stored in a leaf, all written since the last commit):
    /// make the write sequences of the partitions of the keys it changed odd until
    /// [`Txn::commit_publish`] has moved their change stamps. A reader that validates a remembered location by the stamp and the write
    /// marks (see `KnownView`) then never takes the old location for current in the window
    /// between the publish and the stamps' move, nor after a writer killed in it (the next
    /// locker's repair moves every stamp and settles the sequences).
    fn announce(&mut self) {
        if self.in_place {
            return; // its caller holds the partitions' in-place guard around the change
        }
        let more = self.touched.partitions() & !self.announced;
        if more != 0 {
            self.cx.header.begin_in_place(more);
            self.announced |= more;
        }
    }

    /// Publish a batch's root (no-op for single operations, already published), then release.
    pub fn commit_publish(&mut self) {
        if !self.in_place {
            // It held every lock and may have moved keys between nodes.
            self.cx.header.bump_shape_seq();
        }
        if self.publish_at_root {
            self.announce();
            self.cx
                .region
                .publish_u64(self.cx.header.working_root_off(), self.root);
        }
        self.cx.header.mark_dirty();
        if !self.logged {
            self.cx
                .header
                .note_written(&self.touched, self.written_in_place, self.wgen);
        }
        // Before any released block can be reused: a cached location of an old value must be
        // seen stale by then (see Header::change_stamp).
        #[cfg(test)]
        test_pause::before_stamps();
        self.cx.header.bump_change_stamps(&self.touched);
        self.settle_announced();
        self.finished = true;
        // (Read only when a block was released: most in-place writes release none, and the
        // snapshot count shares its line with the count of blocks waiting for the commit, which
        // every other writer's copy of a committed block adds to.)
        let newest_snapshot = if self.released.len() > 0 {
            self.cx.header.newest_snapshot_generation()
        } else {
            None
        };
        for i in 0..self.released.len() {
            let (block, birth) = self.released.get(i);
            if !self.cx.alloc.holds(block) {
                // The tree named a block the allocator holds free: a corrupt volume (a valid
                // one never does). Freed again, it could be handed out twice while the last
                // commit still reaches it; so it is left alone and the volume refuses writes
                // and commits until reopened.
                self.cx.header.refuse_inconsistent();
                continue;
            }
            if self.is_fresh(block) {
                // Never published: no reader can have seen it.
                self.cx.alloc.free_now(block);
            } else if birth == self.wgen && self.cx.alloc.is_fresh(block) {
                self.cx.alloc.release(self.part, block);
            } else if birth == self.wgen {
                // Of this generation but not fresh: an intent-log record may name it (see
                // `Allocator::settle_logged`), so it must not be reused before the commit.
                self.cx.alloc.defer_free(block);
            } else if newest_snapshot.is_some_and(|s| s >= birth) {
                // A snapshot still reaches it; deleting the snapshot reclaims it.
                self.cx.header.add_snapshot_held(1);
            } else {
                crate::failpoint::hit("defer-free");
                self.cx.alloc.defer_free(block);
            }
        }
        self.released.clear();
        self.fresh.clear();
    }

    /// End what [`Txn::announce`] began (the stamps have moved, or nothing was published).
    fn settle_announced(&mut self) {
        if self.announced != 0 {
            self.cx.header.end_in_place(self.announced);
            self.announced = 0;
        }
    }

    /// Undo an unpublished transaction: free what it allocated. Only valid when nothing was
    /// published (batches, or a single operation that failed before its publish).
    pub fn abort(&mut self) {
        self.cx.header.bump_change_stamps(&self.touched);
        self.finished = true;
        for b in self.fresh.take().iter() {
            self.cx.alloc.free_now(b);
        }
        for b in std::mem::take(&mut self.adopted) {
            self.cx.alloc.free_now(b);
        }
    }

    /// Take over `blocks`, filled outside the lock and referenced by nothing yet: this
    /// transaction publishes them, or frees them if it aborts.
    pub fn adopt(&mut self, blocks: &[u64]) {
        self.adopted.extend_from_slice(blocks);
    }

    /// The working generation this transaction writes in (a new out-of-line value's birth).
    pub fn working_gen(&self) -> u64 {
        self.wgen
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // An error (or a panic) after a publish: the stamps move before the sequences turn
            // even, as in `commit_publish` (a spare move where nothing was published).
            self.cx.header.bump_change_stamps(&self.touched);
        }
        self.settle_announced();
    }
}

/// A spot from a remembered leaf has no path: changing the tree's shape from it would replace the
/// root with the leaf. Callers check `replaceable_in_place` first; this is the guard if not.
fn remembered_misused() -> StoreError {
    StoreError::Invalid("a remembered leaf serves changes in place only".into())
}

/// Whether an inline value of `len` bytes fits the leaf format (callers pick out-of-line above).
pub(crate) fn max_inline_for(block_size: u64) -> u64 {
    block_size / 4
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        std::io::Error::from_raw_os_error(e.errno())
    }
}

/// A pause between a publish and the move of its change stamps, for tests that look into that
/// window (armed per thread; compiled into test builds only).
#[cfg(test)]
pub(crate) mod test_pause {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    thread_local! {
        static ARMED: Cell<Option<Duration>> = const { Cell::new(None) };
    }
    /// Set while an armed thread sits in the window.
    pub(crate) static IN_WINDOW: AtomicBool = AtomicBool::new(false);

    /// Make this thread's next publish pause for `d` before its stamps move.
    pub(crate) fn arm(d: Duration) {
        ARMED.with(|a| a.set(Some(d)));
    }

    pub(super) fn before_stamps() {
        if let Some(d) = ARMED.with(|a| a.take()) {
            IN_WINDOW.store(true, Ordering::SeqCst);
            std::thread::sleep(d);
            IN_WINDOW.store(false, Ordering::SeqCst);
        }
    }
}
