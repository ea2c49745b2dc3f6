//! The commit protocol, in the order its flushes happen:
//!
//! 1. Seal and persist every block written since the last commit: walk the working tree, entering
//!    only nodes born in the working generation (copy-on-write guarantees an older node has no
//!    younger child); checksum each such node and persist it and the data blocks it points to that
//!    were born in this generation.
//! 2. Write the older superblock slot with the working root and generation, and persist it.
//!    Power loss before this persist completes leaves the previous superblock newest: the state of
//!    the last commit. The torn slot fails its checksum.
//! 3. Only then publish in the header: committed root/generation/slot, working generation + 1 (every
//!    node so far is now immutable), and apply pending frees: blocks the new commit no longer
//!    references become reusable.
//!
//! A process killed between 2 and 3 leaves the header behind the superblocks; `reconcile` (run by
//! the next locker, which hears `OwnerDied`, see `volume_lock`) redoes step 3 from the superblock.

use crate::error::Result;
use crate::node::{Node, Val};
use crate::superblock::{self, LogArea, Superblock, SUPER_BYTES};
use crate::tree::Ctx;

/// Contiguous block runs to persist, merged as they are added.
#[derive(Default)]
struct Runs {
    runs: Vec<(u64, u64)>,
}

impl Runs {
    fn add(&mut self, block: u64) {
        if let Some(last) = self.runs.last_mut() {
            if last.0 + last.1 == block {
                last.1 += 1;
                return;
            }
        }
        self.runs.push((block, 1));
    }
}

/// Runs closer than this are persisted as one range: one system call instead of two, at the cost
/// of flushing a few blocks that no commit references (harmless: nothing reads them as committed).
const MERGE_GAP_BLOCKS: u64 = 32;

impl Runs {
    fn merge_gaps(&mut self, gap: u64) {
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.runs.len());
        for &(start, count) in &self.runs {
            if let Some(last) = merged.last_mut() {
                let end = last.0 + last.1;
                if start <= end + gap {
                    last.1 = last.1.max(start + count - last.0);
                    continue;
                }
            }
            merged.push((start, count));
        }
        self.runs = merged;
    }
}

/// Static facts of the volume written into each superblock.
pub(crate) struct VolumeFacts {
    pub volume_id: u64,
    pub inline_max: u32,
    pub buffer_bytes: u32,
}

/// Commit the working tree. Caller holds the volume lock. Returns the committed generation.
pub(crate) fn commit(cx: &Ctx<'_>, facts: &VolumeFacts) -> Result<u64> {
    let h = cx.header;
    if let Some(e) = h.refusal() {
        return Err(e);
    }
    if h.dirty() == 0 {
        return Ok(h.committed_gen());
    }
    let wgen = h.working_gen();
    let root = h.working_root();

    // Step 1: seal and persist what this generation wrote.
    let mut runs = Runs::default();
    if root != 0 {
        let node = cx.load(root, None)?;
        seal(cx, node, wgen, &mut runs)?;
    }
    runs.runs.sort_unstable();
    runs.merge_gaps(MERGE_GAP_BLOCKS);
    let bs = cx.layout.bs();
    let mut persisted = 0u64;
    for (start, count) in &runs.runs {
        persist(cx, cx.layout.offset(*start), count * bs)?;
        persisted += count * bs;
    }

    // Step 2: the older superblock slot gets the new root; persist it.
    let slot = 1 - (h.committed_slot() & 1);
    let sb = Superblock {
        block_size: cx.layout.block_size,
        generation: wgen,
        max_blocks: cx.layout.max_blocks,
        backed_blocks: h.backed_blocks(),
        root,
        volume_id: facts.volume_id,
        commit_time_ns: now_ns(),
        inline_max: facts.inline_max,
        buffer_bytes: facts.buffer_bytes,
        snapshots: h.snapshots(),
        // Records numbered from here on are newer than this commit (see `log_record`).
        log: h.log_area().map(|(first, blocks)| LogArea {
            first,
            blocks,
            start: h.log_seq().load(std::sync::atomic::Ordering::Acquire),
        }),
    };
    let at = cx.layout.offset(slot);
    cx.region.copy_in(at, &sb.encode());
    persist(cx, at, SUPER_BYTES as u64)?;
    persisted += SUPER_BYTES as u64;

    // Step 3: publish the commit in the working header.
    h.set_committed_root(root);
    if let Some(log) = sb.log {
        h.set_log_start(log.start);
    }
    h.set_committed_slot(slot);
    h.set_committed_gen(wgen);
    h.set_working_gen(wgen + 1);
    h.set_dirty(0);
    h.set_last_commit_ns(sb.commit_time_ns);
    h.set_commits(h.commits() + 1);
    h.set_bytes_persisted(h.bytes_persisted() + persisted);
    cx.alloc.apply_pending();
    Ok(wgen)
}

fn persist(cx: &Ctx<'_>, offset: u64, len: u64) -> Result<()> {
    if let Err(e) = cx.media.persist(offset, len) {
        // Never report a commit that was not made; refuse writes until reopened.
        cx.header.set_failed(1);
        return Err(e.into());
    }
    Ok(())
}

/// Checksum and schedule for persisting every node born in `wgen` under `node`, and their
/// data blocks born in `wgen`.
fn seal(cx: &Ctx<'_>, node: Node, wgen: u64, runs: &mut Runs) -> Result<()> {
    if node.birth != wgen {
        return Ok(());
    }
    // Only the slots marked dirty can hold what this generation wrote (see `Node::dirty_slots`).
    if node.is_leaf() {
        for i in node.dirty_slots() {
            if let Val::Block { block, gen, .. } = node.value(i)? {
                if gen == wgen {
                    runs.add(block);
                }
            }
        }
    } else {
        for i in node.dirty_slots() {
            let child = cx.load(node.child(i), Some(node.level - 1))?;
            seal(cx, child, wgen, runs)?;
        }
        // A buffer is written whole with its node: every message may be new.
        for (_, v) in node.messages()? {
            if let Some(Val::Block { block, gen, .. }) = v {
                if gen == wgen {
                    runs.add(block);
                }
            }
        }
    }
    node.write_checksum();
    runs.add(node.block);
    Ok(())
}

/// Read both superblocks from the mapping and pick the newest valid one.
pub(crate) fn read_superblocks(cx: &Ctx<'_>) -> Result<(usize, Superblock)> {
    let a = Superblock::decode(cx.region.bytes(0, SUPER_BYTES as u64), "A");
    let b = Superblock::decode(
        cx.region.bytes(cx.layout.offset(1), SUPER_BYTES as u64),
        "B",
    );
    superblock::choose(a, b)
}

/// Bring the header up to date after a holder of the lock died: if the superblocks show a commit
/// the header does not, finish its step 3.
pub(crate) fn reconcile(cx: &Ctx<'_>) -> Result<()> {
    let h = cx.header;
    let (slot, sb) = read_superblocks(cx)?;
    if sb.generation >= h.working_gen() {
        h.set_committed_root(sb.root);
        h.set_committed_slot(slot as u64);
        h.set_committed_gen(sb.generation);
        h.set_working_gen(sb.generation + 1);
        h.set_dirty(u64::from(h.working_root() != sb.root));
        h.set_last_commit_ns(sb.commit_time_ns);
        if let Some(log) = sb.log {
            h.set_log_start(log.start);
        }
        cx.alloc.apply_pending();
    }
    Ok(())
}

/// Wall-clock time in ns since the epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
