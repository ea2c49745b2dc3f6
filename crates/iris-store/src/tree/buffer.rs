//! Bε updates: a change that is not a same-shaped replacement in a leaf becomes a message in the
//! root's buffer. A buffer over the volume's knob is flushed: the messages bound for the child
//! that has the most are moved into it (merged into a leaf, or into an internal child's buffer,
//! which may flush in turn), and whatever the flush built replaces that child. Everything
//! changed is written to fresh blocks and published with the new root, as any other update.

use super::{extend, Txn};
use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::message::{merge, message_bytes, messages_bytes, Message};
use crate::node::{Node, NodeBuilder, Val, INNER_SLOT, LEAF_SLOT, NODE_HEADER};

/// Children of an internal node: (lower-bound key, block), in key order.
type Slots = Vec<(Key, u64)>;

impl<'a> Txn<'a> {
    /// Add a message for `key` (`None`: delete) to the root's buffer, flushing as needed. The
    /// root is internal.
    pub(super) fn put_message(&mut self, key: Key, val: Option<Val<'_>>) -> Result<()> {
        self.finger.set(None);
        let root = self.cx.load(self.root, None)?;
        if root.is_leaf() {
            return Err(StoreError::Invalid("a message for a leaf root".into()));
        }
        let own = owned_messages(&root)?;
        let msgs = self.merge_releasing(own, vec![(key, val)]);
        let slots = slots_of(&root);
        self.release(root.block, root.birth);
        let nodes = self.rebuild_inner(root.level, slots, msgs)?;
        self.grow_root(root.level, nodes)
    }

    /// Merge newer messages into older ones, releasing the values the newer ones replace.
    fn merge_releasing<'v>(
        &mut self,
        older: Vec<Message<'v>>,
        newer: Vec<Message<'v>>,
    ) -> Vec<Message<'v>> {
        let mut dropped = Vec::new();
        let out = merge(older, newer, |v| {
            if let Val::Block { block, gen, .. } = v {
                dropped.push((block, gen));
            }
        });
        for (block, gen) in dropped {
            self.release(block, gen);
        }
        out
    }

    /// Internal nodes of `level` holding `slots` and `msgs`: flush until the messages fit the
    /// knob, then as many nodes as the slots need.
    fn rebuild_inner<'v>(
        &mut self,
        level: u16,
        mut slots: Slots,
        mut msgs: Vec<Message<'v>>,
    ) -> Result<Slots> {
        while !msgs.is_empty() && messages_bytes(&msgs) > self.cx.buffer {
            // The child the most message bytes are bound for.
            let mut best = (0usize, 0u64, 0usize, 0usize);
            let mut at = 0;
            for c in 0..slots.len() {
                let end = if c + 1 < slots.len() {
                    at + msgs[at..].partition_point(|(k, _)| *k < slots[c + 1].0)
                } else {
                    msgs.len()
                };
                let bytes: u64 = msgs[at..end].iter().map(message_bytes).sum();
                if bytes > best.1 {
                    best = (c, bytes, at, end);
                }
                at = end;
            }
            let (c, bytes, from, to) = best;
            if bytes == 0 {
                return Err(StoreError::corrupt("buffered messages route to no child"));
            }
            let group: Vec<Message<'v>> = msgs.drain(from..to).collect();
            let kids = self.flush_into(slots[c].1, level - 1, group)?;
            let separator = slots[c].0;
            let kids = kids
                .into_iter()
                .enumerate()
                .map(|(j, (k, b))| (if j == 0 { separator } else { k }, b));
            slots.splice(c..c + 1, kids);
        }
        if slots.is_empty() {
            if msgs.iter().any(|(_, v)| v.is_some()) {
                return Err(StoreError::corrupt("buffered values without a subtree"));
            }
            return Ok(Vec::new());
        }
        self.build_inner_nodes(level, &slots, &msgs)
    }

    /// Apply `group` (messages for the subtree at `block`, of `level`) to it; returns what
    /// replaces it (none if it emptied).
    fn flush_into<'v>(&mut self, block: u64, level: u16, group: Vec<Message<'v>>) -> Result<Slots>
    where
        'a: 'v,
    {
        let node = self.cx.load(block, Some(level))?;
        self.release(node.block, node.birth);
        if node.is_leaf() {
            let mut entries: Vec<(Key, Val<'v>)> = Vec::with_capacity(node.count as usize);
            for i in 0..node.count {
                entries.push((node.key(i), extend(node.value(i)?)));
            }
            let as_msgs = entries.into_iter().map(|(k, v)| (k, Some(v))).collect();
            let merged = self.merge_releasing(as_msgs, group);
            let live: Vec<(Key, Val<'v>)> = merged
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            return self.build_leaf_nodes(&live);
        }
        let own = owned_messages(&node)?;
        let msgs = self.merge_releasing(own, group);
        self.rebuild_inner(level, slots_of(&node), msgs)
    }

    /// Leaves holding `entries` (sorted), each about equally full.
    fn build_leaf_nodes(&mut self, entries: &[(Key, Val<'_>)]) -> Result<Slots> {
        let bs = self.cx.layout.bs();
        let size = |e: &(Key, Val<'_>)| LEAF_SLOT + e.1.heap_bytes();
        let total: u64 = entries.iter().map(size).sum();
        let room = bs - NODE_HEADER;
        let target = total.div_ceil(total.div_ceil(room).max(1));
        let mut out = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let b = self.alloc()?;
            let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, 0, self.wgen);
            let mut used = 0;
            let first = entries[i].0;
            while i < entries.len() && used + size(&entries[i]) <= room && used < target {
                used += size(&entries[i]);
                nb.push_leaf(entries[i].0, entries[i].1);
                i += 1;
            }
            if nb.finish() == 0 {
                return Err(StoreError::corrupt("leaf entry larger than a block"));
            }
            out.push((first, b));
        }
        Ok(out)
    }

    /// Internal nodes of `level` holding `slots`, each with the messages that route to it
    /// (`msgs` fit the knob, so each node's share fits beside its slots).
    fn build_inner_nodes(
        &mut self,
        level: u16,
        slots: &[(Key, u64)],
        msgs: &[Message<'_>],
    ) -> Result<Slots> {
        let cap = inner_capacity(self.cx.layout.bs(), self.cx.buffer) as usize;
        let parts = slots.len().div_ceil(cap);
        let per = slots.len().div_ceil(parts);
        let mut out = Vec::with_capacity(parts);
        for (p, chunk) in slots.chunks(per).enumerate() {
            let from = if p == 0 {
                0
            } else {
                msgs.partition_point(|(k, _)| *k < chunk[0].0)
            };
            let to = if (p + 1) * per < slots.len() {
                msgs.partition_point(|(k, _)| *k < slots[(p + 1) * per].0)
            } else {
                msgs.len()
            };
            let b = self.alloc()?;
            let mut nb = NodeBuilder::new(self.cx.region, &self.cx.layout, b, level, self.wgen);
            for (k, c) in chunk {
                nb.push_child(*k, *c);
            }
            if !nb.put_messages(&msgs[from..to.max(from)]) {
                return Err(StoreError::Invalid(
                    "buffered messages do not fit their node".into(),
                ));
            }
            nb.finish();
            out.push((chunk[0].0, b));
        }
        Ok(out)
    }

    /// Make `nodes` (of `level`) the tree: one is the root; more get parents, level by level.
    fn grow_root(&mut self, mut level: u16, mut nodes: Slots) -> Result<()> {
        while nodes.len() > 1 {
            level += 1;
            nodes = self.build_inner_nodes(level, &nodes, &[])?;
        }
        let root = nodes.first().map_or(0, |n| n.1);
        self.install_root(root)
    }
}

/// Slots an internal node has room for beside a full buffer of `buffer` bytes.
pub(crate) fn inner_capacity(bs: u64, buffer: u64) -> u64 {
    (bs - NODE_HEADER - buffer) / INNER_SLOT
}

/// The children of an internal node.
fn slots_of(node: &Node) -> Slots {
    (0..node.count)
        .map(|i| (node.key(i), node.child(i)))
        .collect()
}

/// The messages of a node, borrowing the mapping rather than the node view.
fn owned_messages<'v>(node: &Node) -> Result<Vec<Message<'v>>> {
    Ok(node
        .messages()?
        .into_iter()
        .map(|(k, v)| (k, v.map(extend)))
        .collect())
}
