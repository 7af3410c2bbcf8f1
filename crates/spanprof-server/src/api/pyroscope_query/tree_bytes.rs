//! Pyroscope's binary tree (`PROFILE_FORMAT_TREE`, the `tree` bytes of
//! `SelectMergeStacktracesResponse`), as grafana/pyroscope v2.2.1 `pkg/model/tree.go`
//! (`MarshalTruncate`, `FunctionNameI.marshalNode`) writes it.
//!
//! Nodes in depth-first pre-order, each `uvarint(len(name)) name uvarint(self)
//! uvarint(children)`; the first is a nameless virtual root (self 0) whose children are the
//! top frames. The children of a node follow it last first (they are pushed on a stack in
//! name order and popped). Children whose total is below the `max_nodes`-th largest total
//! are merged into one child `other` per parent, placed in name order (added to a child
//! already named so). An empty tree is no bytes.

use spanprof_store::{FlameTree, NodeId};

/// Name of the child that holds a parent's cut children (upstream's `truncatedNodeName`).
const OTHER: &str = "other";

fn uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A node to write: a tree node (`None` is the virtual root) with value added to its self
/// by truncation, or a new `other` holding that value.
#[derive(Clone, Copy)]
enum Item {
    Node(Option<NodeId>, u64),
    Other(u64),
}

/// `tree` as Pyroscope's tree bytes, at most `max_nodes` nodes kept besides the `other`
/// ones (0: all).
pub fn tree_bytes(tree: &FlameTree, max_nodes: usize) -> Vec<u8> {
    let mut out = Vec::new();
    if tree.children(tree.root()).is_empty() {
        return out;
    }
    let threshold = tree.min_total_to_keep(max_nodes);
    let mut stack = vec![Item::Node(None, 0)];
    while let Some(item) = stack.pop() {
        let (name, self_value, node) = match item {
            Item::Node(None, _) => ("", 0, Some(tree.root())),
            Item::Node(Some(n), extra) => (
                tree.node_name(n),
                tree.node_self(n).saturating_add(extra),
                Some(n),
            ),
            Item::Other(v) => (OTHER, v, None),
        };
        uvarint(&mut out, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        uvarint(&mut out, self_value);
        let Some(node) = node else {
            uvarint(&mut out, 0);
            continue;
        };
        let mut kept: Vec<Item> = Vec::new();
        let mut cut = 0u64;
        for &child in tree.children(node) {
            if tree.node_total(child) >= threshold || tree.node_name(child) == OTHER {
                kept.push(Item::Node(Some(child), 0));
            } else {
                cut = cut.saturating_add(tree.node_total(child));
            }
        }
        if cut > 0 {
            let name_of = |i: &Item| match i {
                Item::Node(Some(n), _) => tree.node_name(*n),
                _ => OTHER,
            };
            match kept.binary_search_by(|i| name_of(i).cmp(OTHER)) {
                Ok(at) => {
                    if let Item::Node(n, extra) = kept[at] {
                        kept[at] = Item::Node(n, extra.saturating_add(cut));
                    }
                }
                Err(at) => kept.insert(at, Item::Other(cut)),
            }
        }
        uvarint(&mut out, kept.len() as u64);
        stack.extend(kept);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_written_depth_first_last_child_first() {
        let mut t = FlameTree::new();
        t.add(&["a", "b"], 3);
        t.add(&["a", "c"], 1);
        t.add(&["d"], 2);
        let bytes = tree_bytes(&t, 0);
        let mut want = Vec::new();
        // (name, self, children) in the order upstream writes them.
        for (name, self_value, children) in [
            ("", 0u8, 2u8),
            ("d", 2, 0),
            ("a", 0, 2),
            ("c", 1, 0),
            ("b", 3, 0),
        ] {
            want.push(name.len() as u8);
            want.extend_from_slice(name.as_bytes());
            want.extend([self_value, children]);
        }
        assert_eq!(bytes, want);
        assert!(tree_bytes(&FlameTree::new(), 0).is_empty());
    }

    #[test]
    fn small_children_become_other_in_name_order() {
        let mut t = FlameTree::new();
        t.add(&["a"], 10);
        t.add(&["p"], 9);
        t.add(&["b"], 1);
        t.add(&["c"], 1);
        // Keep 2 nodes: a and p; b and c (2) become "other", between a and p by name.
        let bytes = tree_bytes(&t, 2);
        let mut want = vec![0, 0, 3];
        for (name, v) in [("p", 9u8), ("other", 2), ("a", 10)] {
            want.push(name.len() as u8);
            want.extend_from_slice(name.as_bytes());
            want.extend([v, 0]);
        }
        assert_eq!(bytes, want);
        let mut v = Vec::new();
        uvarint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
    }
}
