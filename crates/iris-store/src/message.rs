//! Bε-tree message buffers: the puts and deletes an internal node holds for its subtree, not yet
//! applied below. They lie in key order in the node's heap, from the heap start to the end of the
//! block (an internal node without messages has its heap start at the block's end). A message
//! is newer than anything below it for the same key, so a lookup stops at the first it meets on
//! the way down.
//!
//! One message: key (16 bytes), tag (4), length (4), then for a put of an out-of-line value its
//! data block and generation (16), for an inline put its bytes padded to 8, for a delete nothing.

use crate::error::{Result, StoreError};
use crate::key::Key;
use crate::node::{Node, NodeBuilder, Val};

/// Bytes of a message before its value.
const MSG_HEADER: u64 = 24;
const TAG_DELETE: u32 = 0;
const TAG_INLINE: u32 = 1;
const TAG_BLOCK: u32 = 2;

/// One buffered message: a key and its new value (`None` deletes the key).
pub(crate) type Message<'a> = (Key, Option<Val<'a>>);

/// A message found on the way down, without a borrow of the node: what the key holds now.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Shadow {
    /// Deleted since what lies below.
    Deleted,
    /// An inline value: `len` bytes at region offset `at`.
    Inline { at: u64, len: u32 },
    /// An out-of-line value.
    Block { block: u64, len: u32, gen: u64 },
}

/// Bytes one message takes in a buffer.
pub(crate) fn message_bytes(m: &Message<'_>) -> u64 {
    MSG_HEADER
        + match m.1 {
            None => 0,
            Some(Val::Inline(b)) => (b.len() as u64).div_ceil(8) * 8,
            Some(Val::Block { .. }) => 16,
        }
}

/// Bytes a run of messages takes in a buffer.
pub(crate) fn messages_bytes(ms: &[Message<'_>]) -> u64 {
    ms.iter().map(message_bytes).sum()
}

/// Merge `newer` into `older` (both sorted by key, keys unique): a key in both keeps the newer
/// message, and `dropped` is told of each older value so replaced.
pub(crate) fn merge<'v>(
    older: Vec<Message<'v>>,
    newer: Vec<Message<'v>>,
    mut dropped: impl FnMut(Val<'v>),
) -> Vec<Message<'v>> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let mut o = older.into_iter().peekable();
    let mut n = newer.into_iter().peekable();
    loop {
        match (o.peek(), n.peek()) {
            (Some(a), Some(b)) => match a.0.cmp(&b.0) {
                std::cmp::Ordering::Less => out.extend(o.next()),
                std::cmp::Ordering::Greater => out.extend(n.next()),
                std::cmp::Ordering::Equal => {
                    if let Some((_, Some(v))) = o.next() {
                        dropped(v);
                    }
                    out.extend(n.next());
                }
            },
            (Some(_), None) => out.extend(o.next()),
            (None, Some(_)) => out.extend(n.next()),
            (None, None) => return out,
        }
    }
}

/// Where message at byte `pos` of a node starts and what it holds; `None` past the last one.
struct Raw {
    key: Key,
    tag: u32,
    len: u32,
    /// Region offset of the value part.
    at: u64,
    /// Node-relative offset of the next message.
    next: u64,
}

impl Node {
    /// Whether this internal node buffers messages.
    #[inline]
    pub fn has_messages(&self) -> bool {
        !self.is_leaf() && self.heap() < self.bs()
    }

    /// Decode the message at node-relative `pos`, checked against the block.
    fn raw_message(&self, pos: u64) -> Result<Raw> {
        let bad = |what: &str| StoreError::corrupt(format!("node {}: {what}", self.block));
        let bs = self.bs();
        if pos + MSG_HEADER > bs {
            return Err(bad("message runs past the block"));
        }
        let at = self.offset() + pos;
        let region = self.region();
        let key = Key::new(region.read_u64(at), region.read_u64(at + 8));
        let tag = region.read_u32(at + 16);
        let len = region.read_u32(at + 20);
        let body = match tag {
            TAG_DELETE => 0,
            TAG_INLINE => {
                if u64::from(len) > bs / 4 {
                    return Err(bad("inline message longer than a quarter block"));
                }
                u64::from(len).div_ceil(8) * 8
            }
            TAG_BLOCK => {
                if u64::from(len) > bs {
                    return Err(bad("message value longer than a block"));
                }
                16
            }
            _ => return Err(bad("unknown message tag")),
        };
        let next = pos + MSG_HEADER + body;
        if next > bs {
            return Err(bad("message runs past the block"));
        }
        Ok(Raw {
            key,
            tag,
            len,
            at: at + MSG_HEADER,
            next,
        })
    }

    /// The value a decoded message carries.
    fn message_value(&self, m: &Raw) -> Result<Option<Val<'_>>> {
        let region = self.region();
        Ok(match m.tag {
            TAG_INLINE => Some(Val::Inline(region.bytes(m.at, u64::from(m.len)))),
            TAG_BLOCK => {
                let block = region.read_u64(m.at);
                self.check_value_block(block)?;
                Some(Val::Block {
                    block,
                    len: m.len,
                    gen: region.read_u64(m.at + 8),
                })
            }
            _ => None,
        })
    }

    /// Every buffered message, in key order (checked: in bounds and strictly ascending).
    pub fn messages(&self) -> Result<Vec<Message<'_>>> {
        let mut out = Vec::new();
        if !self.has_messages() {
            return Ok(out);
        }
        let mut pos = self.heap();
        while pos < self.bs() {
            let m = self.raw_message(pos)?;
            if out.last().is_some_and(|(k, _): &Message<'_>| *k >= m.key) {
                return Err(StoreError::corrupt(format!(
                    "node {}: messages out of order",
                    self.block
                )));
            }
            out.push((m.key, self.message_value(&m)?));
            pos = m.next;
        }
        Ok(out)
    }

    /// The message for `key` in this node's buffer, if any.
    #[inline]
    pub fn find_message(&self, key: Key) -> Result<Option<Shadow>> {
        if !self.has_messages() {
            return Ok(None);
        }
        let mut pos = self.heap();
        while pos < self.bs() {
            let m = self.raw_message(pos)?;
            if m.key > key {
                return Ok(None);
            }
            if m.key == key {
                return Ok(Some(match self.message_value(&m)? {
                    None => Shadow::Deleted,
                    Some(Val::Inline(b)) => Shadow::Inline {
                        at: m.at,
                        len: b.len() as u32,
                    },
                    Some(Val::Block { block, len, gen }) => Shadow::Block { block, len, gen },
                }));
            }
            pos = m.next;
        }
        Ok(None)
    }
}

impl NodeBuilder {
    /// Internal node: store `msgs` (sorted, unique keys) as its buffer, after its slots. Returns
    /// false, writing nothing, if they do not fit.
    pub fn put_messages(&mut self, msgs: &[Message<'_>]) -> bool {
        let total = messages_bytes(msgs);
        let Some(start) = self.heap_start().checked_sub(total) else {
            return false;
        };
        if start < self.slots_end() {
            return false;
        }
        let region = self.region();
        let mut at = self.offset() + start;
        for (key, val) in msgs {
            region.write_u64(at, key.hi);
            region.write_u64(at + 8, key.lo);
            let (tag, len) = match val {
                None => (TAG_DELETE, 0),
                Some(Val::Inline(b)) => (TAG_INLINE, b.len() as u32),
                Some(Val::Block { len, .. }) => (TAG_BLOCK, *len),
            };
            region.write_u32(at + 16, tag);
            region.write_u32(at + 20, len);
            at += MSG_HEADER;
            match val {
                None => {}
                Some(Val::Inline(b)) => {
                    let padded = (b.len() as u64).div_ceil(8) * 8;
                    region.bytes_mut(at, padded).fill(0);
                    region.copy_in(at, b);
                    at += padded;
                }
                Some(Val::Block { block, gen, .. }) => {
                    region.write_u64(at, *block);
                    region.write_u64(at + 8, *gen);
                    at += 16;
                }
            }
        }
        self.set_heap_start(start);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;
    use crate::region::Region;

    #[test]
    fn messages_round_trip_and_are_found() {
        let layout = Layout::new(4096, 64).expect("layout");
        let mut buf = vec![0u64; ((layout.data_start + 2) * 4096 / 8) as usize];
        let region = Region::new(buf.as_mut_ptr().cast(), (buf.len() * 8) as u64);
        let b = layout.data_start;
        let mut nb = NodeBuilder::new(region, &layout, b, 1, 1);
        nb.push_child(Key::new(0, 0), b + 1);
        nb.push_child(Key::new(0, 50), b + 1);
        let msgs: Vec<Message<'_>> = vec![
            (Key::new(0, 3), None),
            (Key::new(0, 7), Some(Val::Inline(b"hello"))),
            (
                Key::new(0, 60),
                Some(Val::Block {
                    block: b + 1,
                    len: 4096,
                    gen: 1,
                }),
            ),
        ];
        assert!(nb.put_messages(&msgs));
        nb.finish();
        let node = Node::load(region, &layout, layout.data_start + 2, b, Some(1)).expect("load");
        assert!(node.has_messages());
        let back = node.messages().expect("messages");
        assert_eq!(back.len(), 3);
        assert!(
            matches!(back[1], (k, Some(Val::Inline(v))) if k == Key::new(0, 7) && v == b"hello")
        );
        assert!(matches!(
            node.find_message(Key::new(0, 3)),
            Ok(Some(Shadow::Deleted))
        ));
        assert!(matches!(node.find_message(Key::new(0, 4)), Ok(None)));
        assert!(matches!(
            node.find_message(Key::new(0, 60)),
            Ok(Some(Shadow::Block { len: 4096, .. }))
        ));
        assert_eq!(messages_bytes(&msgs), 24 + 24 + 8 + 24 + 16);
        // A buffer that would reach into the slots is refused.
        let mut nb = NodeBuilder::new(region, &layout, b, 1, 1);
        for i in 0..166 {
            nb.push_child(Key::new(0, i), b + 1);
        }
        assert!(!nb.put_messages(&msgs));
    }

    #[test]
    fn merge_keeps_the_newer_message() {
        let mut dropped = Vec::new();
        let older: Vec<Message<'_>> = vec![
            (Key::new(0, 1), Some(Val::Inline(b"a"))),
            (Key::new(0, 2), None),
        ];
        let newer: Vec<Message<'_>> = vec![
            (Key::new(0, 1), None),
            (Key::new(0, 3), Some(Val::Inline(b"c"))),
        ];
        let m = merge(older, newer, |v| dropped.push(v.heap_bytes()));
        let keys: Vec<u64> = m.iter().map(|(k, _)| k.lo).collect();
        assert_eq!(keys, [1, 2, 3]);
        assert!(m[0].1.is_none());
        assert_eq!(dropped, [1]);
    }
}
