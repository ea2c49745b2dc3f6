//! Looking at the volume whole: counters (`stats`, no walk), the tree's shape, a full
//! verification of every reachable node and block, and garbage collection of leaked blocks.
//! Each holds every lock for its length.

use crate::commit;
use crate::error::{Result, StoreError};
use crate::recovery::{self, Marks, Walk};

use super::{Stats, Store, TreeShape, VerifyReport};

impl Store {
    /// Counters, without walking the tree.
    pub fn stats(&self) -> Result<Stats> {
        let inner = &*self.inner;
        let h = inner.header;
        let root = h.working_root();
        let _g = inner.lock()?;
        let tree_height = if root == 0 {
            0
        } else {
            u32::from(inner.cx().load(h.working_root(), None)?.level) + 1
        };
        let used = h.used_blocks();
        Ok(Stats {
            block_size: inner.layout.block_size,
            max_blocks: inner.layout.max_blocks,
            backed_blocks: h.backed_blocks(),
            used_blocks: used,
            free_blocks: inner.layout.max_blocks.saturating_sub(used),
            reserve_blocks: inner.alloc.reserve_blocks(),
            pending_free_blocks: h.pending_blocks() + inner.alloc.readers().parked(),
            snapshot_held_blocks: h.snapshot_held(),
            committed_generation: h.committed_gen(),
            commits: h.commits(),
            bytes_persisted: h.bytes_persisted(),
            last_commit_ns: h.last_commit_ns(),
            tree_height,
            dirty: h.dirty() != 0,
            log_capacity: h.log_area().map_or(0, |(_, blocks)| {
                u64::from(blocks) * inner.layout.bs() / crate::log_record::RECORD_BYTES as u64
            }),
            log_records: h
                .log_seq()
                .load(std::sync::atomic::Ordering::Acquire)
                .saturating_sub(h.log_start()),
        })
    }

    /// Walk the working tree and count its nodes and entries.
    pub fn shape(&self) -> Result<TreeShape> {
        let inner = &*self.inner;
        let _g = inner.lock()?;
        let mut marks = Marks::new(inner.layout.max_blocks);
        let s = recovery::mark_tree(
            &inner.cx(),
            inner.header.working_root(),
            &mut marks,
            Walk::Mark,
            inner.header.committed_gen(),
        )?;
        Ok(TreeShape {
            height: s.height,
            leaf_nodes: s.leaf_nodes,
            inner_nodes: s.inner_nodes,
            entries: s.entries,
            data_blocks: s.data_blocks,
            messages: s.messages,
        })
    }

    /// Check everything: superblocks, every tree (checksums of committed nodes, key order, bounds,
    /// no block used twice in one tree), and block accounting against the allocator.
    pub fn verify(&self) -> Result<VerifyReport> {
        let inner = &*self.inner;
        let _g = inner.lock()?;
        let cx = inner.cx();
        let h = inner.header;
        commit::read_superblocks(&cx)?;
        let committed = h.committed_gen();
        let mut marks = Marks::new(inner.layout.max_blocks);
        let mut roots = vec![h.working_root(), h.committed_root()];
        roots.extend(h.snapshots().iter().map(|s| s.root));
        for root in roots {
            recovery::mark_tree(&cx, root, &mut marks, Walk::Verify, committed)?;
        }
        // The intent log's blocks are in use though no tree reaches them.
        let reachable = marks.count();
        h.mark_log(&mut marks);
        let mut leaked = 0;
        let mut leaked_sample = Vec::new();
        inner.alloc.reap_dead_writers();
        // Not `reserved()`: a writer that dies after the reaper looked would have its slot
        // cleared there and its blocks counted as leaked, and lost to every later reaper.
        let reserved: std::collections::HashSet<u64> =
            inner.alloc.named_by_slots().into_iter().collect();
        for b in inner.layout.data_start..inner.layout.max_blocks {
            if reserved.contains(&b) {
                continue;
            }
            let used = inner.alloc.is_used(b);
            if marks.get(b) && !used {
                return Err(StoreError::corrupt(format!(
                    "block {b} is in use but marked free"
                )));
            }
            if !used && inner.alloc.is_pending(b) {
                // The next commit would free it again, under whoever allocates it next.
                return Err(StoreError::corrupt(format!(
                    "block {b} is free but waits to be freed at the next commit"
                )));
            }
            if used
                && !marks.get(b)
                && !inner.alloc.is_pending(b)
                && !inner.alloc.readers().is_parked(b)
            {
                leaked += 1;
                if leaked_sample.len() < 16 {
                    leaked_sample.push(b);
                }
            }
        }
        Ok(VerifyReport {
            reachable_blocks: reachable,
            leaked_blocks: leaked,
            leaked_sample,
        })
    }

    /// Reclaim blocks nothing reaches (after a crashed writer). Returns blocks freed.
    pub fn collect_garbage(&self) -> Result<u64> {
        let _g = self.inner.lock()?;
        recovery::collect(&self.inner.cx())
    }
}
