//! The flame-graph tree: stacks of function names merged by prefix, with the total and self
//! value of every node, and its plain exports (collapsed stacks, nested JSON).
//!
//! Values are in the unit of the profile type they came from (nanoseconds, bytes, count).
//! Every traversal is iterative, so hostile stack depths cannot overflow the call stack.

pub(crate) mod pyroscope;
mod top;

pub use pyroscope::{FlameGraphLayout, DEFAULT_MAX_NODES, OTHER_NAME};
pub use top::{FunctionOrder, FunctionTotals};

use spanprof_format::otlp::ProfilesData;

use crate::select::{for_each_selected_sample, SampleSelector, SelectError, SelectionSummary};

/// Name of the synthetic root node, as Pyroscope names it (`names[0]`).
pub const ROOT_NAME: &str = "total";

/// A node of a [`FlameTree`]; valid only for the tree that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct NodeId(u32);

impl NodeId {
    fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Clone, Debug)]
struct Node {
    name: u32,
    total: u64,
    self_value: u64,
    /// Sorted by name, so lookups binary-search and every export is deterministic.
    children: Vec<NodeId>,
}

/// A tree of function names: each root-to-node path is a stack prefix; `total` is the value
/// of all samples whose stack starts with that prefix, `self` of those that end there.
///
/// Node 0 is the synthetic root ([`ROOT_NAME`]); its self value holds samples without frames.
/// Children are kept sorted by name. Values saturate at `u64::MAX`.
#[derive(Clone, Debug)]
pub struct FlameTree {
    /// Distinct names; node names index it. Names are interned only when a node is created.
    names: Vec<String>,
    name_ids: std::collections::HashMap<String, u32>,
    nodes: Vec<Node>,
}

impl Default for FlameTree {
    fn default() -> Self {
        Self::new()
    }
}

impl FlameTree {
    /// An empty tree: just the root, with total 0.
    pub fn new() -> Self {
        let mut tree = Self {
            names: Vec::new(),
            name_ids: std::collections::HashMap::new(),
            nodes: Vec::new(),
        };
        let root_name = tree.intern(ROOT_NAME);
        tree.nodes.push(Node {
            name: root_name,
            total: 0,
            self_value: 0,
            children: Vec::new(),
        });
        tree
    }

    /// Builds the tree of the samples of `data` that `selector` selects.
    ///
    /// Returns the tree and the selection summary (profile types seen and used, counts of
    /// samples read and references skipped).
    pub fn from_profiles(
        data: &ProfilesData,
        selector: &SampleSelector,
    ) -> Result<(Self, SelectionSummary), SelectError> {
        let mut tree = Self::new();
        let summary = for_each_selected_sample(data, selector, |frames, value| {
            tree.add(frames, value);
        })?;
        Ok((tree, summary))
    }

    /// Adds one stack, root (outermost caller) first, with its value in the profile's unit.
    pub fn add<S: AsRef<str>>(&mut self, frames: &[S], value: u64) {
        let mut node = self.root();
        self.bump_total(node, value);
        for frame in frames {
            let Some(child) = self.child_or_insert(node, frame.as_ref()) else {
                break;
            };
            node = child;
            self.bump_total(node, value);
        }
        let n = &mut self.nodes[node.index()];
        n.self_value = n.self_value.saturating_add(value);
    }

    fn bump_total(&mut self, node: NodeId, value: u64) {
        let n = &mut self.nodes[node.index()];
        n.total = n.total.saturating_add(value);
    }

    /// The child of `parent` named `name`, created if needed; `None` only when the tree has
    /// run out of node ids.
    fn child_or_insert(&mut self, parent: NodeId, name: &str) -> Option<NodeId> {
        let found = self.nodes[parent.index()]
            .children
            .binary_search_by(|c| self.node_name(*c).cmp(name));
        match found {
            Ok(i) => Some(self.nodes[parent.index()].children[i]),
            Err(i) => {
                // Past u32::MAX nodes (far beyond a readable flame graph) new stacks end at
                // their deepest existing prefix instead of growing the tree.
                let raw = u32::try_from(self.nodes.len()).ok()?;
                let id = NodeId(raw);
                let name_id = self.intern(name);
                self.nodes.push(Node {
                    name: name_id,
                    total: 0,
                    self_value: 0,
                    children: Vec::new(),
                });
                self.nodes[parent.index()].children.insert(i, id);
                Some(id)
            }
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.name_ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(name.to_owned());
        self.name_ids.insert(name.to_owned(), id);
        id
    }

    /// This tree with every value divided by `n` and rounded down (a node's children then
    /// never add up to more than it), nodes that come to 0 left out: the average of `n`
    /// snapshots that were added up.
    pub fn divided(&self, n: u64) -> FlameTree {
        if n <= 1 {
            return self.clone();
        }
        let mut out = FlameTree::new();
        out.nodes[0].total = self.total() / n;
        let mut pending = vec![(self.root(), out.root())];
        while let Some((from, to)) = pending.pop() {
            let mut below = 0u64;
            // Children stay sorted by name: they are taken in their order.
            for &child in self.children(from) {
                let total = self.node_total(child) / n;
                if total == 0 {
                    continue;
                }
                let id = NodeId(out.nodes.len() as u32);
                let name = out.intern(self.node_name(child));
                out.nodes.push(Node {
                    name,
                    total,
                    self_value: 0,
                    children: Vec::new(),
                });
                out.nodes[to.index()].children.push(id);
                below += total;
                pending.push((child, id));
            }
            let node = &mut out.nodes[to.index()];
            node.self_value = node.total - below;
        }
        out
    }

    /// The synthetic root node.
    pub fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// Total value of the tree (the root's total), in the profile's unit.
    pub fn total(&self) -> u64 {
        self.nodes[0].total
    }

    /// Number of nodes, including the root.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Function name of a node ([`ROOT_NAME`] for the root).
    pub fn node_name(&self, node: NodeId) -> &str {
        &self.names[self.nodes[node.index()].name as usize]
    }

    /// Value of all samples passing through `node`, in the profile's unit.
    pub fn node_total(&self, node: NodeId) -> u64 {
        self.nodes[node.index()].total
    }

    /// Value of the samples whose stack ends at `node`, in the profile's unit.
    pub fn node_self(&self, node: NodeId) -> u64 {
        self.nodes[node.index()].self_value
    }

    /// Children of `node`, sorted by name.
    pub fn children(&self, node: NodeId) -> &[NodeId] {
        &self.nodes[node.index()].children
    }

    /// Collapsed ("folded") stacks as read by inferno and Brendan Gregg's `flamegraph.pl`:
    /// one line `frame;frame;frame VALUE\n` per distinct stack with a non-zero self value,
    /// root first, sorted lexicographically; VALUE in the profile's unit.
    ///
    /// The format cannot carry some characters, so in names `;` and control characters
    /// become `_` (lines whose names then coincide are summed). Samples without frames (the
    /// root's self value) have no line.
    pub fn to_collapsed(&self) -> String {
        let mut lines: Vec<(String, u64)> = Vec::new();
        // (node, length of the parent's path prefix in `path`)
        let mut stack: Vec<(NodeId, usize)> = self
            .children(self.root())
            .iter()
            .rev()
            .map(|c| (*c, 0))
            .collect();
        let mut path = String::new();
        while let Some((node, prefix_len)) = stack.pop() {
            path.truncate(prefix_len);
            if prefix_len > 0 {
                path.push(';');
            }
            push_folded_name(&mut path, self.node_name(node));
            if self.node_self(node) > 0 {
                lines.push((path.clone(), self.node_self(node)));
            }
            let len = path.len();
            stack.extend(self.children(node).iter().rev().map(|c| (*c, len)));
        }
        lines.sort_unstable();
        let mut out = String::new();
        let mut i = 0;
        while i < lines.len() {
            let (stack, mut value) = (&lines[i].0, lines[i].1);
            let mut j = i + 1;
            while j < lines.len() && lines[j].0 == *stack {
                value = value.saturating_add(lines[j].1);
                j += 1;
            }
            out.push_str(stack);
            out.push(' ');
            out.push_str(&value.to_string());
            out.push('\n');
            i = j;
        }
        out
    }

    /// The tree as compact nested JSON for a UI: every node is
    /// `{"name":…,"total":…,"self":…,"children":[…]}` (values in the profile's unit,
    /// children sorted by name), starting at the root named [`ROOT_NAME`].
    ///
    /// Written without recursion; a reader's recursion limit may still refuse very deep trees.
    pub fn to_nested_json(&self) -> String {
        self.to_nested_json_within(0)
    }

    /// [`FlameTree::to_nested_json`] with at most about `max_nodes` nodes (0 = all): the
    /// largest, as the flame graph layout keeps them, each parent's others merged into one
    /// child named `other` (last). A whole tree of millions of nodes was a gigabyte of JSON.
    pub fn to_nested_json_within(&self, max_nodes: usize) -> String {
        enum Step {
            Open(NodeId),
            Other(u64),
            Comma,
            Close,
        }
        let threshold = self.min_total_to_keep(max_nodes);
        let mut out = String::new();
        let mut steps = vec![Step::Open(self.root())];
        let node = |out: &mut String, name: &str, total: u64, self_value: u64| {
            out.push_str("{\"name\":");
            out.push_str(&serde_json::Value::from(name).to_string());
            out.push_str(",\"total\":");
            out.push_str(&total.to_string());
            out.push_str(",\"self\":");
            out.push_str(&self_value.to_string());
            out.push_str(",\"children\":[");
        };
        while let Some(step) = steps.pop() {
            match step {
                Step::Open(n) => {
                    node(
                        &mut out,
                        self.node_name(n),
                        self.node_total(n),
                        self.node_self(n),
                    );
                    steps.push(Step::Close);
                    let kept: Vec<NodeId> = self
                        .children(n)
                        .iter()
                        .copied()
                        .filter(|&c| self.node_total(c) >= threshold)
                        .collect();
                    let others: u64 = self
                        .children(n)
                        .iter()
                        .map(|&c| self.node_total(c))
                        .filter(|&t| t < threshold)
                        .sum();
                    if others > 0 {
                        steps.push(Step::Other(others));
                        if !kept.is_empty() {
                            steps.push(Step::Comma);
                        }
                    }
                    for (i, child) in kept.into_iter().enumerate().rev() {
                        steps.push(Step::Open(child));
                        if i > 0 {
                            steps.push(Step::Comma);
                        }
                    }
                }
                Step::Other(total) => {
                    node(&mut out, OTHER_NAME, total, total);
                    out.push_str("]}");
                }
                Step::Comma => out.push(','),
                Step::Close => out.push_str("]}"),
            }
        }
        out
    }
}

fn push_folded_name(out: &mut String, name: &str) {
    out.extend(
        name.chars()
            .map(|c| if c == ';' || c.is_control() { '_' } else { c }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divided_tree_rounds_down_and_keeps_children_within_their_parent() {
        let mut t = FlameTree::new();
        // Eight snapshots: main;a 8 times 5, main;b 3 times 1, main 8 times 1 of its own.
        t.add(&["main", "a"], 40);
        t.add(&["main", "b"], 3);
        t.add(&["main"], 8);
        let avg = t.divided(8);
        assert_eq!(avg.total(), 51 / 8);
        let main = avg.children(avg.root())[0];
        assert_eq!((avg.node_name(main), avg.node_total(main)), ("main", 6));
        // b averages 0.375: left out; main keeps what its children do not account for.
        let kids: Vec<(&str, u64)> = avg
            .children(main)
            .iter()
            .map(|&c| (avg.node_name(c), avg.node_total(c)))
            .collect();
        assert_eq!(kids, [("a", 5)]);
        assert_eq!(avg.node_self(main), 1);
        assert_eq!(avg.to_collapsed(), "main 1\nmain;a 5\n");
        assert_eq!(t.divided(1).to_collapsed(), t.to_collapsed());
    }

    #[test]
    fn the_nested_json_keeps_the_largest_nodes_and_merges_the_rest_into_other() {
        let t = tree(&[("a;b", 10), ("a;c", 1), ("a;d", 1), ("e", 5)]);
        let shape = |v: &serde_json::Value| -> Vec<(String, u64)> {
            v["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_owned(),
                        c["total"].as_u64().unwrap(),
                    )
                })
                .collect()
        };
        let v: serde_json::Value = serde_json::from_str(&t.to_nested_json_within(2)).unwrap();
        assert_eq!(v["total"], 17);
        assert_eq!(shape(&v), [("a".to_owned(), 12), ("other".to_owned(), 5)]);
        assert_eq!(
            shape(&v["children"][0]),
            [("b".to_owned(), 10), ("other".to_owned(), 2)]
        );
        assert_eq!(v["children"][1]["self"], 5);
        // 0 and a limit above the node count: the whole tree.
        assert_eq!(t.to_nested_json_within(0), t.to_nested_json());
        assert_eq!(t.to_nested_json_within(5), t.to_nested_json());
    }

    fn tree(stacks: &[(&str, u64)]) -> FlameTree {
        let mut t = FlameTree::new();
        for (stack, value) in stacks {
            let frames: Vec<&str> = stack.split(';').filter(|f| !f.is_empty()).collect();
            t.add(&frames, *value);
        }
        t
    }

    #[test]
    fn totals_and_self_add_up() {
        let t = tree(&[("a;b", 3), ("a;c", 2), ("a", 1), ("d", 4), ("", 5)]);
        assert_eq!(t.total(), 15);
        assert_eq!(t.node_self(t.root()), 5);
        let a = t.children(t.root())[0];
        assert_eq!(
            (t.node_name(a), t.node_total(a), t.node_self(a)),
            ("a", 6, 1)
        );
        let names: Vec<&str> = t.children(a).iter().map(|c| t.node_name(*c)).collect();
        assert_eq!(names, ["b", "c"]);
    }

    #[test]
    fn children_sorted_whatever_the_insertion_order() {
        let t = tree(&[("z", 1), ("m", 1), ("a", 1), ("m;y", 1), ("m;b", 1)]);
        let names: Vec<&str> = t
            .children(t.root())
            .iter()
            .map(|c| t.node_name(*c))
            .collect();
        assert_eq!(names, ["a", "m", "z"]);
    }

    #[test]
    fn collapsed_sums_and_sorts_and_sanitizes() {
        let t = tree(&[("b;x", 1), ("a;y", 2), ("b;x", 3), ("a", 4)]);
        assert_eq!(t.to_collapsed(), "a 4\na;y 2\nb;x 4\n");
        let mut t = FlameTree::new();
        t.add(&["f;g", "h\ni"], 1);
        t.add(&["f_g", "h_i"], 2);
        assert_eq!(t.to_collapsed(), "f_g;h_i 3\n");
    }

    #[test]
    fn nested_json_parses_and_escapes() {
        let t = tree(&[("a;\"q\"", 2), ("b", 1)]);
        let v: serde_json::Value = serde_json::from_str(&t.to_nested_json()).unwrap();
        assert_eq!(v["name"], "total");
        assert_eq!(v["total"], 3);
        assert_eq!(v["children"][0]["children"][0]["name"], "\"q\"");
        assert_eq!(v["children"][1]["self"], 1);
    }

    #[test]
    fn deep_stacks_do_not_overflow() {
        let frames: Vec<String> = (0..200_000).map(|i| format!("f{}", i % 7)).collect();
        let mut t = FlameTree::new();
        t.add(&frames, 1);
        assert_eq!(t.to_collapsed().lines().count(), 1);
        assert!(t.to_nested_json().ends_with("]}"));
        assert_eq!(t.top_functions(FunctionOrder::Total)[0].total, 1);
    }

    #[test]
    fn values_saturate() {
        let t = tree(&[("a", u64::MAX), ("a", 5)]);
        assert_eq!(t.total(), u64::MAX);
    }
}
