//! Pyroscope's binary tree (`PROFILE_FORMAT_TREE`) read into a [`FlameTree`]: what a flame
//! graph needs, smaller to send and to read than the pprof of the same selection (no
//! locations, functions, labels to intern).
//!
//! The format, as grafana/pyroscope v2.2.1 `pkg/model/tree.go` (`UnmarshalTree`) reads it:
//! nodes in depth-first pre-order, each `uvarint(len(name)) name uvarint(self)
//! uvarint(children)`, the first a nameless virtual root; a parent's children follow it
//! (pushed on a stack, so read last first); nodes of one name under a parent merge.

use spanprof_store::FlameTree;

/// Why tree bytes are not a tree.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The bytes end inside a node.
    #[error("the tree ends inside a node at byte {0}")]
    Truncated(usize),
    /// A varint runs past 64 bits.
    #[error("a varint at byte {0} runs past 64 bits")]
    Overflow(usize),
    /// A node announces more children than the bytes left could hold.
    #[error("a node at byte {0} announces {1} children, more than the bytes left hold")]
    Children(usize, u64),
    /// A name is not UTF-8.
    #[error("a name at byte {0} is not UTF-8")]
    Name(usize),
    /// Bytes are left after the last node.
    #[error("{0} bytes follow the last node")]
    Trailing(usize),
}

fn uvarint(b: &[u8], at: &mut usize) -> Result<u64, TreeError> {
    let (mut v, mut shift, start) = (0u64, 0u32, *at);
    loop {
        let byte = *b.get(*at).ok_or(TreeError::Truncated(start))?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return Err(TreeError::Overflow(start));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(TreeError::Overflow(start));
        }
    }
}

/// The flame tree the bytes hold (empty bytes: an empty tree).
pub fn decode(b: &[u8]) -> Result<FlameTree, TreeError> {
    let mut tree = FlameTree::new();
    if b.is_empty() {
        return Ok(tree);
    }
    let mut at = 0;
    // Each entry: the depth of a parent still owed a child (the path is `path[..depth]`).
    let mut owed: Vec<usize> = vec![0];
    let mut path: Vec<String> = Vec::new();
    let mut root = true;
    while let Some(depth) = owed.pop() {
        let start = at;
        let len = usize::try_from(uvarint(b, &mut at)?).map_err(|_| TreeError::Truncated(start))?;
        let end = at.checked_add(len).filter(|&e| e <= b.len());
        let end = end.ok_or(TreeError::Truncated(start))?;
        let name = std::str::from_utf8(&b[at..end]).map_err(|_| TreeError::Name(at))?;
        at = end;
        let self_value = uvarint(b, &mut at)?;
        let children = uvarint(b, &mut at)?;
        // Each child is at least 3 bytes: a count past that is not a tree (and would grow
        // the stack without bound).
        if children > ((b.len() - at) / 3) as u64 {
            return Err(TreeError::Children(start, children));
        }
        let here = if root {
            root = false;
            0
        } else {
            path.truncate(depth);
            path.push(name.to_owned());
            if self_value > 0 {
                tree.add(&path, self_value);
            }
            depth + 1
        };
        owed.extend(std::iter::repeat_n(here, children as usize));
    }
    if at != b.len() {
        return Err(TreeError::Trailing(b.len() - at));
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_tree_bytes_read_back_as_the_tree_they_were_written_from() {
        let mut tree = FlameTree::new();
        tree.add(&["main", "a", "b"], 5);
        tree.add(&["main", "a"], 2);
        tree.add(&["main", "c"], 7);
        tree.add(&["other-root"], 1);
        let bytes = crate::api::pyroscope_query::tree_bytes::tree_bytes(&tree, 1 << 20);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.to_collapsed(), tree.to_collapsed());
        assert_eq!(back.total(), 15);
        assert_eq!(decode(&[]).unwrap().total(), 0);
        // Cut, a runaway count, trailing bytes: errors, not panics.
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(TreeError::Truncated(_))
        ));
        assert!(matches!(
            decode(&[0, 0, 0x7f]),
            Err(TreeError::Children(..))
        ));
        let mut more = bytes.clone();
        more.push(0);
        assert!(matches!(decode(&more), Err(TreeError::Trailing(1))));
    }
}
