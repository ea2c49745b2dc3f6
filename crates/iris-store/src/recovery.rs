//! Rebuilding and checking space accounting by walking trees.
//!
//! - `rebuild`: after power loss (a header from another boot), W is rebuilt from the committed
//!   root and the snapshots, verifying every node's checksum on the way: opening never trusts the
//!   bytes.
//! - `collect`: garbage collection (mark from working root, committed root and snapshots, then
//!   sweep), run after a snapshot is deleted or rolled back to, and after a lock holder died.
//! - `verify`: the strict walk behind fsck: checksums, key order, bounds, no block used twice.

use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::node::{Node, Val};
use crate::tree::Ctx;

/// A bitmap in process memory, one bit per block.
pub(crate) struct Marks {
    words: Vec<u64>,
}

impl Marks {
    pub fn new(blocks: u64) -> Self {
        Marks {
            words: vec![0; blocks.div_ceil(64) as usize],
        }
    }

    /// Set bit `b`; returns whether it was already set.
    pub fn set(&mut self, b: u64) -> bool {
        let w = &mut self.words[(b / 64) as usize];
        let was = *w & (1 << (b % 64)) != 0;
        *w |= 1 << (b % 64);
        was
    }

    pub fn get(&self, b: u64) -> bool {
        self.words
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    pub fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words
    }

    pub fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

/// How strictly a walk checks what it reaches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Skip subtrees already marked (shared with an earlier root); no checksums.
    Mark,
    /// Skip shared subtrees; verify checksums of committed nodes.
    MarkVerified,
    /// Strict: checksums, key order and bounds; a block reached twice in one tree is corruption.
    Verify,
}

/// Counts gathered by a walk.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub height: u32,
    pub leaf_nodes: u64,
    pub inner_nodes: u64,
    pub entries: u64,
    pub data_blocks: u64,
    pub messages: u64,
}

/// Mark every block reachable from `root`.
pub(crate) fn mark_tree(
    cx: &Ctx<'_>,
    root: u64,
    marks: &mut Marks,
    walk: Walk,
    committed_gen: u64,
) -> Result<Shape> {
    let mut shape = Shape::default();
    if root == 0 {
        return Ok(shape);
    }
    let mut seen = if walk == Walk::Verify {
        Some(Marks::new(cx.layout.max_blocks))
    } else {
        None
    };
    let node = cx.load(root, None)?;
    shape.height = u32::from(node.level) + 1;
    mark_node(
        cx,
        node,
        marks,
        &mut seen,
        walk,
        committed_gen,
        (Key::MIN, None),
        &mut shape,
    )?;
    Ok(shape)
}

#[allow(clippy::too_many_arguments)]
fn mark_node(
    cx: &Ctx<'_>,
    node: Node,
    marks: &mut Marks,
    seen: &mut Option<Marks>,
    walk: Walk,
    committed_gen: u64,
    bounds: (Key, Option<Key>),
    shape: &mut Shape,
) -> Result<()> {
    if let Some(seen) = seen.as_mut() {
        if seen.set(node.block) {
            return Err(StoreError::corrupt(format!(
                "node {} is referenced twice (cycle or shared subtree)",
                node.block
            )));
        }
    }
    let already = marks.set(node.block);
    if already && walk != Walk::Verify {
        return Ok(());
    }
    if walk != Walk::Mark
        && node.birth <= committed_gen
        && node.compute_checksum() != node.stored_checksum()
    {
        return Err(StoreError::corrupt(format!(
            "node {}: checksum mismatch",
            node.block
        )));
    }
    if node.birth > committed_gen + 1 {
        return Err(StoreError::corrupt(format!(
            "node {}: born in generation {} after the working one",
            node.block, node.birth
        )));
    }
    let (lo, hi) = bounds;
    let mut prev: Option<Key> = None;
    for i in 0..node.count {
        // Slot 0 of an internal node routes as minus infinity; its stored key is only a hint.
        if i == 0 && !node.is_leaf() {
            continue;
        }
        let k = node.key(i);
        if walk == Walk::Verify {
            let ordered = prev.is_none_or(|p| p < k);
            let in_bounds = k >= lo && hi.is_none_or(|h| k < h);
            if !ordered || !in_bounds {
                return Err(StoreError::corrupt(format!(
                    "node {}: keys out of order",
                    node.block
                )));
            }
        }
        prev = Some(k);
    }
    let mut mark_value = |v: Val<'_>, marks: &mut Marks| -> Result<()> {
        if let Val::Block { block, gen, .. } = v {
            if gen > committed_gen + 1 {
                return Err(StoreError::corrupt(format!(
                    "node {}: value block {block} from a future generation",
                    node.block
                )));
            }
            shape.data_blocks += 1;
            if let Some(seen) = seen.as_mut() {
                if seen.set(block) {
                    return Err(StoreError::corrupt(format!(
                        "data block {block} is referenced twice"
                    )));
                }
            }
            marks.set(block);
        }
        Ok(())
    };
    if node.is_leaf() {
        for i in 0..node.count {
            mark_value(node.value(i)?, marks)?;
        }
        shape.leaf_nodes += 1;
        shape.entries += u64::from(node.count);
        return Ok(());
    }
    let msgs = node.messages()?;
    for (k, v) in &msgs {
        let in_bounds = *k >= lo && hi.is_none_or(|h| *k < h);
        if walk == Walk::Verify && !in_bounds {
            return Err(StoreError::corrupt(format!(
                "node {}: buffered message outside the node's keys",
                node.block
            )));
        }
        if let Some(v) = v {
            mark_value(*v, marks)?;
        }
    }
    shape.messages += msgs.len() as u64;
    shape.inner_nodes += 1;
    for i in 0..node.count {
        let child = cx.load(node.child(i), Some(node.level - 1))?;
        let lo_i = if i == 0 { lo } else { node.key(i) };
        let hi_i = if i + 1 < node.count {
            Some(node.key(i + 1))
        } else {
            hi
        };
        mark_node(
            cx,
            child,
            marks,
            seen,
            walk,
            committed_gen,
            (lo_i, hi_i),
            shape,
        )?;
    }
    Ok(())
}

/// Garbage collection: free every block in W that neither the working tree, the last commit nor a
/// snapshot reaches. Caller holds the lock. Returns blocks freed.
pub(crate) fn collect(cx: &Ctx<'_>) -> Result<u64> {
    let h = cx.header;
    let committed = h.committed_gen();
    let mut live = Marks::new(cx.layout.max_blocks);
    mark_tree(cx, h.working_root(), &mut live, Walk::Mark, committed)?;
    let working = live.words().to_vec();
    // The walk skips what the working tree shares, so what it marks is what only the last
    // commit still references.
    mark_tree(cx, h.committed_root(), &mut live, Walk::Mark, committed)?;
    let live_count = live.count();
    let mut snapshots = Marks::new(cx.layout.max_blocks);
    for s in h.snapshots() {
        mark_tree(cx, s.root, &mut snapshots, Walk::Mark, committed)?;
    }
    // Those blocks go when the next commit is durable. A writer notes that right after it
    // publishes their replacements; one killed in between did not, and nothing else would.
    for (i, ((&now, &before), &snap)) in live
        .words()
        .iter()
        .zip(&working)
        .zip(snapshots.words())
        .enumerate()
    {
        let mut bits = now & !before & !snap;
        while bits != 0 {
            cx.alloc
                .defer_free(i as u64 * 64 + u64::from(bits.trailing_zeros()));
            bits &= bits - 1;
        }
    }
    let mut all = live;
    for (w, &snap) in all.words_mut().iter_mut().zip(snapshots.words()) {
        *w |= snap;
    }
    h.set_snapshot_held(all.count() - live_count);
    // The intent log is in use though no tree reaches it.
    h.mark_log(&mut all);
    // Blocks being filled outside the lock by live writers are not garbage yet.
    for b in cx.alloc.reserved() {
        all.set(b);
    }
    Ok(cx.alloc.sweep(all.words()))
}
