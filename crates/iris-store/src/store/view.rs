//! The read side: [`View`] (a read section: the tree as of its first lookup, blocks kept from
//! reuse while it lasts), [`KnownView`] (no section: change stamps, write marks and block bytes
//! for callers that know where a value is and check afterwards that it did not move), and the
//! write marks that tell a reader its copy overlapped a change in place.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use crate::error::{Result, StoreError};
use crate::header::{partition_mask, PARTITIONS};
use crate::key::Key;
use crate::node::{Node, Val};

use super::{BlockRef, Inner, Located};

/// The write sequences of some partitions as a reader found them (see
/// [`KnownView::in_place_marks`]), kept as their sum: a sequence never goes down while the
/// volume is open (see `Header::end_in_place`), so the sum reads the same later only if every
/// sequence does. Two words, where one per partition made a read's check loop over them all.
#[derive(Clone, Copy, Debug)]
pub struct WriteMarks {
    held: u64,
    sum: u64,
}

/// The partitions named by the bits of `held`, lowest first.
#[inline]
fn each_partition(held: u64) -> impl Iterator<Item = u64> {
    let mut rest = held & ((1 << PARTITIONS) - 1);
    std::iter::from_fn(move || {
        (rest != 0).then(|| {
            let p = u64::from(rest.trailing_zeros());
            rest &= rest - 1;
            p
        })
    })
}

impl Inner {
    /// See [`KnownView::in_place_marks`].
    #[inline]
    pub(super) fn in_place_marks(&self, keys: impl IntoIterator<Item = Key>) -> Option<WriteMarks> {
        let held = partition_mask(keys);
        if held.is_power_of_two() {
            // One partition (a read inside one block, or two of one file region): one load.
            let s = self.header.write_seq(u64::from(held.trailing_zeros()));
            return (s & 1 == 0).then_some(WriteMarks { held, sum: s });
        }
        let mut sum = 0u64;
        for p in each_partition(held) {
            let s = self.header.write_seq(p);
            if s & 1 != 0 {
                return None;
            }
            sum = sum.wrapping_add(s);
        }
        Some(WriteMarks { held, sum })
    }

    /// See [`KnownView::unchanged_since`].
    #[inline]
    pub(super) fn unchanged_since(&self, marks: &WriteMarks) -> bool {
        // The bytes read above are read before the sequences below.
        std::sync::atomic::fence(Ordering::Acquire);
        if marks.held.is_power_of_two() {
            return self
                .header
                .write_seq(u64::from(marks.held.trailing_zeros()))
                == marks.sum;
        }
        each_partition(marks.held).fold(0u64, |sum, p| sum.wrapping_add(self.header.write_seq(p)))
            == marks.sum
    }

    /// See [`KnownView::block_bytes`].
    #[inline]
    pub(super) fn block_bytes(&self, at: BlockRef) -> Result<&[u8]> {
        if at.block < self.layout.data_start
            || at.block >= self.header.backed_blocks()
            || at.len > self.layout.block_size
        {
            return Err(StoreError::corrupt(format!(
                "cached location {at:?} is outside the volume's data"
            )));
        }
        self.latency.on_read(1);
        Ok(self
            .region
            .bytes(self.layout.offset(at.block), u64::from(at.len)))
    }
}

/// Reads at locations learned before, without a read section (see [`Store::read_known`](super::Store::read_known)): no
/// tree lookup, only stamps, write marks and the bytes at a location.
pub struct KnownView<'s> {
    pub(super) inner: &'s Inner,
}

impl KnownView<'_> {
    /// The change stamp of `key` (see [`Store::change_stamp`](super::Store::change_stamp)). Read it before a lookup whose
    /// result is cached, and tag the result with it.
    #[inline]
    pub fn change_stamp(&self, key: Key) -> u64 {
        self.inner.header.change_stamp(key)
    }

    /// The write sequences of the partitions of `keys`, for a read that must not see part of a
    /// change made in place (bytes of a block, or the several slots of one write): check them
    /// with [`KnownView::unchanged_since`] after reading, and read again if they moved. `None`
    /// while a writer of one of them is mid-change: leave the view, then try again (after a
    /// while, through [`Store::wait_for_writers`](super::Store::wait_for_writers)).
    #[inline]
    pub fn in_place_marks(&self, keys: impl IntoIterator<Item = Key>) -> Option<WriteMarks> {
        self.inner.in_place_marks(keys)
    }

    /// Whether no change in place began in the partitions of `marks` since they were taken:
    /// then what was read between the two is one state, not part of a change (its fence also
    /// orders the bytes read before it before the stamps read after it).
    #[inline]
    pub fn unchanged_since(&self, marks: &WriteMarks) -> bool {
        self.inner.unchanged_since(marks)
    }

    /// The bytes of an out-of-line value found by [`View::get_located`], returned by
    /// [`Store::put_block_then_patch`](super::Store::put_block_then_patch) or cached, while the change stamp of its key reads what
    /// it read then (outside a read section, see [`Store::read_known`](super::Store::read_known) for what they are worth).
    /// A location outside the volume's data is an error.
    #[inline]
    pub fn block_bytes(&self, at: BlockRef) -> Result<&[u8]> {
        self.inner.block_bytes(at)
    }
}

/// A consistent read-only view of the working tree (see [`Store::read`](super::Store::read)), inside a read
/// section: lock-free, or holding the writer locks when the reader table is full. It does what
/// a [`KnownView`] does too (stamps, write marks, bytes at a location), through `Deref`.
pub struct View<'s> {
    /// What a view without a read section can do, which a view can do too (see `Deref`).
    pub(super) known: KnownView<'s>,
    pub(super) inner: &'s Inner,
    /// The working root, read at the view's first lookup: after the change stamps its caller
    /// read before it. A change publishes its root before it moves its keys' stamps, so a
    /// lookup made after reading stamp `s` finds a value at least as new as `s` says: a
    /// location cached under `s` is never older than `s` (read first, the root could be older
    /// than a stamp read after it, and the location a freed block's).
    pub(super) root: Cell<Option<u64>>,
}

impl<'s> std::ops::Deref for View<'s> {
    type Target = KnownView<'s>;

    fn deref(&self) -> &KnownView<'s> {
        &self.known
    }
}

impl View<'_> {
    /// The root of this view's lookups (see `root`).
    #[inline]
    pub(super) fn root(&self) -> u64 {
        match self.root.get() {
            Some(r) => r,
            None => {
                let r = self.inner.header.working_root();
                self.root.set(Some(r));
                r
            }
        }
    }

    /// Call `f` with the value of `key` in place.
    pub fn get_with<R>(&self, key: Key, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let inner = self.inner;
        match inner.cx().lookup(self.root(), key)? {
            None => Ok(None),
            Some(v) => {
                if let Val::Block { .. } = v {
                    inner.latency.on_read(1);
                }
                Ok(Some(f(Node::value_bytes(&inner.region, &inner.layout, v))))
            }
        }
    }

    /// Where the value of `key` lives: its bytes if inline, its data block if out of line.
    pub fn get_located(&self, key: Key) -> Result<Option<Located<'_>>> {
        Ok(match self.inner.cx().lookup(self.root(), key)? {
            None => None,
            Some(Val::Inline(b)) => Some(Located::Inline(b)),
            Some(Val::Block { block, len, .. }) => Some(Located::Block(BlockRef { block, len })),
        })
    }

    /// Visit `[start, end)` ascending until `f` returns false.
    pub fn scan(&self, start: Key, end: Key, mut f: impl FnMut(Key, &[u8]) -> bool) -> Result<()> {
        self.inner
            .cx()
            .scan(self.root(), start, end, &mut f)
            .map(|_| ())
    }
}
