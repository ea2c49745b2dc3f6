//! An interval tree of half-open byte ranges `[start, end)`: a treap ordered by (start, ticket)
//! whose nodes also hold the largest `end` below them, so that the ranges overlapping a query
//! are found in O(log n + k) without looking at the others. Nodes live in one vector and are
//! named by their index, which stays valid until the node is removed (freed slots are reused).
//! The range lock (`range_lock`) keeps the ranges in flight on one file here.

use std::cmp::Ordering;

/// No node.
const NIL: u32 = u32::MAX;

/// One range in the tree, with what the range lock keeps beside it.
pub(crate) struct Node<T> {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Order of arrival: unique in one tree.
    pub ticket: u64,
    /// The caller's data.
    pub data: T,
    /// The largest `end` in this node's subtree.
    max_end: u64,
    /// Heap priority of the treap (from the ticket).
    prio: u64,
    left: u32,
    right: u32,
}

/// An interval tree (see the module doc).
pub(crate) struct IntervalTree<T> {
    nodes: Vec<Option<Node<T>>>,
    free: Vec<u32>,
    root: u32,
    len: usize,
}

/// A well-mixed priority from a ticket (splitmix64's finalizer), so that tickets given in order
/// still build a balanced treap.
fn priority(ticket: u64) -> u64 {
    let mut z = ticket.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<T> Default for IntervalTree<T> {
    fn default() -> Self {
        IntervalTree {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            len: 0,
        }
    }
}

impl<T> IntervalTree<T> {
    /// Ranges in the tree.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The node named `id`, if it is in the tree.
    pub fn get(&self, id: u32) -> Option<&Node<T>> {
        self.nodes.get(id as usize).and_then(Option::as_ref)
    }

    fn node(&self, id: u32) -> &Node<T> {
        self.nodes[id as usize]
            .as_ref()
            .expect("a linked node is present")
    }

    fn node_mut(&mut self, id: u32) -> &mut Node<T> {
        self.nodes[id as usize]
            .as_mut()
            .expect("a linked node is present")
    }

    fn max_end(&self, id: u32) -> u64 {
        if id == NIL {
            0
        } else {
            self.node(id).max_end
        }
    }

    /// Recompute `id`'s `max_end` from its own end and its children's.
    fn fix(&mut self, id: u32) {
        let (l, r) = (self.node(id).left, self.node(id).right);
        let m = self.node(id).end.max(self.max_end(l)).max(self.max_end(r));
        self.node_mut(id).max_end = m;
    }

    /// Rotate `id`'s left child up; returns the subtree's new top.
    fn rotate_right(&mut self, id: u32) -> u32 {
        let l = self.node(id).left;
        self.node_mut(id).left = self.node(l).right;
        self.node_mut(l).right = id;
        self.fix(id);
        self.fix(l);
        l
    }

    /// Rotate `id`'s right child up; returns the subtree's new top.
    fn rotate_left(&mut self, id: u32) -> u32 {
        let r = self.node(id).right;
        self.node_mut(id).right = self.node(r).left;
        self.node_mut(r).left = id;
        self.fix(id);
        self.fix(r);
        r
    }

    fn order(a: (u64, u64), n: &Node<T>) -> Ordering {
        a.cmp(&(n.start, n.ticket))
    }

    /// Add `[start, end)` with `ticket` (unique in the tree) and `data`; returns its name.
    pub fn insert(&mut self, start: u64, end: u64, ticket: u64, data: T) -> u32 {
        let node = Node {
            start,
            end,
            ticket,
            data,
            max_end: end,
            prio: priority(ticket),
            left: NIL,
            right: NIL,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as u32
            }
        };
        self.root = self.insert_at(self.root, id);
        self.len += 1;
        id
    }

    fn insert_at(&mut self, at: u32, id: u32) -> u32 {
        if at == NIL {
            return id;
        }
        let key = (self.node(id).start, self.node(id).ticket);
        if Self::order(key, self.node(at)) == Ordering::Less {
            let l = self.insert_at(self.node(at).left, id);
            self.node_mut(at).left = l;
            self.fix(at);
            if self.node(l).prio > self.node(at).prio {
                return self.rotate_right(at);
            }
        } else {
            let r = self.insert_at(self.node(at).right, id);
            self.node_mut(at).right = r;
            self.fix(at);
            if self.node(r).prio > self.node(at).prio {
                return self.rotate_left(at);
            }
        }
        at
    }

    /// Take node `id` out of the tree; returns it (`None` if it was not there).
    pub fn remove(&mut self, id: u32) -> Option<Node<T>> {
        let key = {
            let n = self.get(id)?;
            (n.start, n.ticket)
        };
        self.root = self.remove_at(self.root, key);
        self.len -= 1;
        self.free.push(id);
        self.nodes[id as usize].take()
    }

    fn remove_at(&mut self, at: u32, key: (u64, u64)) -> u32 {
        debug_assert!(at != NIL, "the node to remove is in the tree");
        match Self::order(key, self.node(at)) {
            Ordering::Less => {
                let l = self.remove_at(self.node(at).left, key);
                self.node_mut(at).left = l;
            }
            Ordering::Greater => {
                let r = self.remove_at(self.node(at).right, key);
                self.node_mut(at).right = r;
            }
            Ordering::Equal => {
                let (l, r) = (self.node(at).left, self.node(at).right);
                if l == NIL {
                    return r;
                }
                if r == NIL {
                    return l;
                }
                // Rotate the child of higher priority up, then remove below it.
                let top = if self.node(l).prio > self.node(r).prio {
                    let top = self.rotate_right(at);
                    let below = self.remove_at(self.node(top).right, key);
                    self.node_mut(top).right = below;
                    top
                } else {
                    let top = self.rotate_left(at);
                    let below = self.remove_at(self.node(top).left, key);
                    self.node_mut(top).left = below;
                    top
                };
                self.fix(top);
                return top;
            }
        }
        self.fix(at);
        at
    }

    /// Call `f` on every node whose range overlaps `[start, end)`, in key order.
    pub fn for_each_overlap(&mut self, start: u64, end: u64, mut f: impl FnMut(&mut Node<T>)) {
        self.overlap_at(self.root, start, end, &mut f);
    }

    fn overlap_at(&mut self, at: u32, start: u64, end: u64, f: &mut impl FnMut(&mut Node<T>)) {
        if at == NIL || self.node(at).max_end <= start {
            return;
        }
        self.overlap_at(self.node(at).left, start, end, f);
        let n = self.node_mut(at);
        if n.start >= end {
            // Everything to the right starts here or later.
            return;
        }
        if n.end > start {
            f(n);
        }
        self.overlap_at(self.node(at).right, start, end, f);
    }

    /// Drop every node.
    pub fn clear(&mut self) {
        *self = IntervalTree::default();
    }

    /// Check the tree's invariants (order, heap, `max_end`, count); test use.
    #[cfg(test)]
    fn check(&self) {
        fn walk<T>(
            t: &IntervalTree<T>,
            at: u32,
            lo: Option<(u64, u64)>,
            hi: Option<(u64, u64)>,
        ) -> (usize, u64) {
            if at == NIL {
                return (0, 0);
            }
            let n = t.node(at);
            let key = (n.start, n.ticket);
            assert!(lo.is_none_or(|lo| key > lo), "order");
            assert!(hi.is_none_or(|hi| key < hi), "order");
            for c in [n.left, n.right] {
                if c != NIL {
                    assert!(t.node(c).prio <= n.prio, "heap");
                }
            }
            let (cl, ml) = walk(t, n.left, lo, Some(key));
            let (cr, mr) = walk(t, n.right, Some(key), hi);
            assert_eq!(n.max_end, n.end.max(ml).max(mr), "max_end");
            (cl + cr + 1, n.max_end)
        }
        assert_eq!(walk(self, self.root, None, None).0, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn overlaps_match_a_scan_of_every_range() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut tree = IntervalTree::default();
        // The model: (id, start, end, ticket) of every range in the tree.
        let mut model: Vec<(u32, u64, u64, u64)> = Vec::new();
        for ticket in 0..4000u64 {
            if model.is_empty() || rng.gen_bool(0.55) {
                let start = rng.gen_range(0..1000);
                let end = start + rng.gen_range(1..100);
                let id = tree.insert(start, end, ticket, ticket);
                model.push((id, start, end, ticket));
            } else {
                let (id, start, end, ticket) = model.swap_remove(rng.gen_range(0..model.len()));
                let n = tree.remove(id).expect("present");
                assert_eq!(
                    (n.start, n.end, n.ticket, n.data),
                    (start, end, ticket, ticket)
                );
            }
            tree.check();
            let qs = rng.gen_range(0..1100);
            let qe = qs + rng.gen_range(1..150);
            let mut got = Vec::new();
            tree.for_each_overlap(qs, qe, |n| got.push(n.ticket));
            let mut want: Vec<u64> = model
                .iter()
                .filter(|(_, s, e, _)| *s < qe && *e > qs)
                .map(|m| m.3)
                .collect();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            want.sort_unstable();
            assert_eq!(sorted, want, "overlaps of [{qs}, {qe})");
            assert_eq!(tree.len(), model.len());
        }
    }

    #[test]
    fn a_removed_name_is_gone_and_reused() {
        let mut tree = IntervalTree::default();
        let a = tree.insert(0, 10, 1, ());
        assert!(tree.remove(a).is_some());
        assert!(tree.remove(a).is_none(), "a second removal finds nothing");
        assert!(tree.get(a).is_none());
        let b = tree.insert(5, 6, 2, ());
        assert_eq!(a, b, "the freed slot is reused");
        let mut seen = 0;
        tree.for_each_overlap(0, 100, |_| seen += 1);
        assert_eq!(seen, 1);
    }
}
