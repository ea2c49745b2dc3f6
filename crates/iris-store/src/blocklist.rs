//! A short list that lives inline and spills to the heap only when long: a single-key update
//! touches a handful of blocks, so the hot path allocates nothing. The inline room is not
//! zeroed when a list is made (a transaction makes two per operation).

use smallvec::SmallVec;

/// Up to `N` items inline, more on the heap.
pub(crate) struct BlockList<T: Copy, const N: usize> {
    items: SmallVec<[T; N]>,
}

impl<T: Copy + PartialEq, const N: usize> BlockList<T, N> {
    pub fn new() -> Self {
        BlockList {
            items: SmallVec::new(),
        }
    }

    pub fn push(&mut self, v: T) {
        self.items.push(v);
    }

    pub fn contains(&self, v: &T) -> bool {
        self.items.contains(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.items.iter().copied()
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Item `i` (below [`BlockList::len`]).
    pub fn get(&self, i: usize) -> T {
        self.items[i]
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }

    pub fn take(&mut self) -> BlockList<T, N> {
        BlockList {
            items: std::mem::take(&mut self.items),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_spills() {
        let mut l: BlockList<u64, 2> = BlockList::new();
        for i in 0..5 {
            l.push(i);
        }
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        assert!(l.contains(&3) && l.contains(&0) && !l.contains(&9));
        assert_eq!((l.len(), l.get(0), l.get(4)), (5, 0, 4));
        let t = l.take();
        assert_eq!(t.iter().count(), 5);
        assert_eq!(l.iter().count(), 0);
        l.push(7);
        l.clear();
        assert_eq!(l.len(), 0);
    }
}
