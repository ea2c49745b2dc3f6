//! Snapshots: named copies of the last commit's root kept in the superblocks' table, listed,
//! deleted (their blocks reclaimed once nothing else reaches them), rolled back to, and read
//! through a [`SnapshotView`].

use crate::commit;
use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::node::Node;
use crate::recovery;
use crate::superblock::{SnapshotEntry, MAX_SNAPSHOTS, MAX_SNAPSHOT_NAME};

use super::Store;

/// A read-only view of a snapshot; each call checks the snapshot still exists.
pub struct SnapshotView<'a> {
    store: &'a Store,
    name: String,
}

impl SnapshotView<'_> {
    pub(super) fn root(&self) -> Result<u64> {
        self.store
            .inner
            .header
            .snapshots()
            .into_iter()
            .find(|s| s.name == self.name)
            .map(|s| s.root)
            .ok_or_else(|| StoreError::NoSnapshot(self.name.clone()))
    }

    /// Copy the value of `key` as it was in the snapshot.
    pub fn get(&self, key: Key) -> Result<Option<Vec<u8>>> {
        let inner = &*self.store.inner;
        let _g = inner.lock()?;
        let root = self.root()?;
        Ok(inner
            .cx()
            .lookup(root, key)?
            .map(|v| Node::value_bytes(&inner.region, &inner.layout, v).to_vec()))
    }

    /// Up to `limit` entries of `[start, end)` as they were in the snapshot.
    pub fn range(&self, start: Key, end: Key, limit: usize) -> Result<Vec<(Key, Vec<u8>)>> {
        let inner = &*self.store.inner;
        let _g = inner.lock()?;
        let root = self.root()?;
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        inner.cx().scan(root, start, end, &mut |k, v| {
            out.push((k, v.to_vec()));
            out.len() < limit
        })?;
        Ok(out)
    }
}

impl Store {
    /// Snapshot the state after committing everything done so far.
    pub fn snapshot_create(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > MAX_SNAPSHOT_NAME || name.contains('\0') {
            return Err(StoreError::Invalid(format!(
                "snapshot name must be 1 to {MAX_SNAPSHOT_NAME} bytes without NUL"
            )));
        }
        let inner = &*self.inner;
        inner.check_writable()?;
        let _g = inner.lock()?;
        let mut table = inner.header.snapshots();
        if table.iter().any(|s| s.name == name) {
            return Err(StoreError::SnapshotTable(name.into(), "exists already"));
        }
        if table.len() >= MAX_SNAPSHOTS {
            return Err(StoreError::SnapshotTable(
                name.into(),
                "snapshot table is full",
            ));
        }
        inner.commit_locked()?;
        table.push(SnapshotEntry {
            name: name.to_string(),
            root: inner.header.committed_root(),
            generation: inner.header.committed_gen(),
            time_ns: commit::now_ns(),
        });
        inner.header.set_snapshots(&table);
        inner.header.set_dirty(1);
        inner.commit_locked()?;
        Ok(())
    }

    /// The snapshot table.
    pub fn snapshot_list(&self) -> Result<Vec<SnapshotEntry>> {
        let _g = self.inner.lock()?;
        Ok(self.inner.header.snapshots())
    }

    /// Delete a snapshot and reclaim the space only it held.
    pub fn snapshot_delete(&self, name: &str) -> Result<()> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let _g = inner.lock()?;
        let mut table = inner.header.snapshots();
        let before = table.len();
        table.retain(|s| s.name != name);
        if table.len() == before {
            return Err(StoreError::NoSnapshot(name.into()));
        }
        inner.header.set_snapshots(&table);
        inner.header.set_dirty(1);
        inner.commit_locked()?;
        recovery::collect(&inner.cx())?;
        Ok(())
    }

    /// Roll the volume back to a snapshot: its state becomes the working and committed state.
    pub fn snapshot_rollback(&self, name: &str) -> Result<()> {
        let inner = &*self.inner;
        inner.check_writable()?;
        let _g = inner.lock()?;
        let snap = inner
            .header
            .snapshots()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| StoreError::NoSnapshot(name.into()))?;
        inner
            .region
            .publish_u64(inner.header.working_root_off(), snap.root);
        inner.header.bump_all_change_stamps();
        inner.header.set_dirty(1);
        inner.commit_locked()?;
        recovery::collect(&inner.cx())?;
        Ok(())
    }

    /// A read-only view of a snapshot.
    pub fn snapshot(&self, name: &str) -> Result<SnapshotView<'_>> {
        let _g = self.inner.lock()?;
        if !self.inner.header.snapshots().iter().any(|s| s.name == name) {
            return Err(StoreError::NoSnapshot(name.into()));
        }
        Ok(SnapshotView {
            store: self,
            name: name.to_string(),
        })
    }
}
