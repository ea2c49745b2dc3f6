//! A short list that lives inline and spills to the heap only when long: a single-key update
//! touches a handful of blocks, so the hot path allocates nothing.

/// Up to `N` items inline, more in a heap vector.
pub(crate) struct BlockList<T: Copy + Default, const N: usize> {
    inline: [T; N],
    len: usize,
    spill: Vec<T>,
}

impl<T: Copy + Default + PartialEq, const N: usize> BlockList<T, N> {
    pub fn new() -> Self {
        BlockList {
            inline: [T::default(); N],
            len: 0,
            spill: Vec::new(),
        }
    }

    pub fn push(&mut self, v: T) {
        if self.len < N {
            self.inline[self.len] = v;
            self.len += 1;
        } else {
            self.spill.push(v);
        }
    }

    pub fn contains(&self, v: &T) -> bool {
        self.inline[..self.len].contains(v) || self.spill.contains(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.inline[..self.len]
            .iter()
            .copied()
            .chain(self.spill.iter().copied())
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
    }

    pub fn take(&mut self) -> BlockList<T, N> {
        std::mem::replace(self, BlockList::new())
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
        let t = l.take();
        assert_eq!(t.iter().count(), 5);
        assert_eq!(l.iter().count(), 0);
    }
}
