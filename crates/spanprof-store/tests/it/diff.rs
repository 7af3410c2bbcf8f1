//! Properties of the diff layout on pseudo-random tree pairs: decoded the way a consumer
//! reads it (per-level intervals on each side), every node must carry exactly the totals
//! its path has in the single trees.

use std::collections::HashSet;

use proptest::prelude::*;
use spanprof_store::diff::{diff_layout, diff_tree_json, FlameGraphDiffLayout};
use spanprof_store::{FlameTree, NodeId, OTHER_NAME};

/// Up to 120 stacks of depth 0..6 over `alphabet` names; values are at least 1, so every
/// merged node is wider than zero on some side.
fn stacks(alphabet: u8) -> impl Strategy<Value = Vec<(Vec<u8>, u64)>> {
    prop::collection::vec(
        (prop::collection::vec(0..alphabet, 0..6), 1u64..100),
        0..120,
    )
}

fn build(stacks: &[(Vec<u8>, u64)]) -> FlameTree {
    let mut t = FlameTree::new();
    for (frames, value) in stacks {
        let names: Vec<String> = frames.iter().map(|f| format!("f{f}")).collect();
        t.add(&names, *value);
    }
    t
}

#[derive(Clone, Debug)]
struct Decoded {
    path: Vec<String>,
    left: (i64, i64, i64),
    right: (i64, i64, i64),
}

/// Undoes the delta encoding and rebuilds parentage: level d+1 is the concatenation of the
/// children of level d's nodes, each parent's children filling its width after its self on
/// both sides at once.
fn decode(layout: &FlameGraphDiffLayout) -> Vec<Vec<Decoded>> {
    let mut out: Vec<Vec<Decoded>> = Vec::new();
    for (depth, level) in layout.levels.iter().enumerate() {
        assert_eq!(level.len() % 7, 0);
        let (mut l_end, mut r_end) = (0, 0);
        let mut nodes = Vec::new();
        for t in level.chunks(7) {
            let (l_start, r_start) = (l_end + t[0], r_end + t[3]);
            assert!(t[0] >= 0 && t[3] >= 0, "nodes of a level do not overlap");
            assert!(t[2] <= t[1] && t[5] <= t[4], "self within total");
            l_end = l_start + t[1];
            r_end = r_start + t[4];
            nodes.push(Decoded {
                path: vec![layout.names[t[6] as usize].clone()],
                left: (l_start, t[1], t[2]),
                right: (r_start, t[4], t[5]),
            });
        }
        if depth > 0 {
            let parents = &out[depth - 1];
            let mut next = 0;
            for parent in parents {
                let mut l_cursor = parent.left.0 + parent.left.2;
                let mut r_cursor = parent.right.0 + parent.right.2;
                let (l_end, r_end) = (
                    parent.left.0 + parent.left.1,
                    parent.right.0 + parent.right.1,
                );
                while l_cursor < l_end || r_cursor < r_end {
                    let child = &mut nodes[next];
                    assert_eq!((child.left.0, child.right.0), (l_cursor, r_cursor));
                    l_cursor += child.left.1;
                    r_cursor += child.right.1;
                    let mut path = parent.path.clone();
                    path.push(child.path.pop().unwrap());
                    child.path = path;
                    next += 1;
                }
                assert_eq!(
                    (l_cursor, r_cursor),
                    (l_end, r_end),
                    "children fill parents"
                );
            }
            assert_eq!(next, nodes.len(), "every node has a parent");
        }
        out.push(nodes);
    }
    out
}

/// `(total, self)` of the node at `path` (below the root) in `tree`, 0s if absent.
fn totals_at(tree: &FlameTree, path: &[String]) -> (i64, i64) {
    let mut node = tree.root();
    for name in &path[1..] {
        match tree
            .children(node)
            .iter()
            .find(|c| tree.node_name(**c) == name)
        {
            Some(c) => node = *c,
            None => return (0, 0),
        }
    }
    (tree.node_total(node) as i64, tree.node_self(node) as i64)
}

fn all_paths(tree: &FlameTree) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut stack: Vec<(NodeId, Vec<String>)> = vec![(tree.root(), vec!["total".into()])];
    while let Some((node, path)) = stack.pop() {
        for &c in tree.children(node) {
            let mut p = path.clone();
            p.push(tree.node_name(c).to_owned());
            stack.push((c, p));
        }
        out.push(path);
    }
    out
}

fn union_of_paths(left: &FlameTree, right: &FlameTree) -> HashSet<Vec<String>> {
    all_paths(left)
        .into_iter()
        .chain(all_paths(right))
        .collect()
}

fn check_full_layout(left: &FlameTree, right: &FlameTree) {
    let layout = diff_layout(left, right, 0);
    assert_eq!(layout.left_ticks, left.total() as i64);
    assert_eq!(layout.right_ticks, right.total() as i64);
    assert_eq!(layout.total, layout.left_ticks + layout.right_ticks);
    let names: HashSet<&String> = layout.names.iter().collect();
    assert_eq!(names.len(), layout.names.len(), "names are distinct");
    let mut seen = HashSet::new();
    let mut max_self = 0;
    for node in decode(&layout).iter().flatten() {
        let (lt, ls) = totals_at(left, &node.path);
        let (rt, rs) = totals_at(right, &node.path);
        assert_eq!((node.left.1, node.left.2), (lt, ls), "{:?}", node.path);
        assert_eq!((node.right.1, node.right.2), (rt, rs), "{:?}", node.path);
        max_self = max_self.max(ls).max(rs);
        assert!(seen.insert(node.path.clone()), "each path once");
    }
    assert_eq!(layout.max_self, max_self);
    assert_eq!(
        seen,
        union_of_paths(left, right),
        "every path of either tree"
    );
}

fn check_truncated_layout(left: &FlameTree, right: &FlameTree, max_nodes: usize) {
    let layout = diff_layout(left, right, max_nodes);
    // `decode` checks that every parent is exactly filled by its children.
    let levels = decode(&layout);
    assert_eq!(levels[0][0].left.1, left.total() as i64);
    assert_eq!(levels[0][0].right.1, right.total() as i64);
    let mut kept = HashSet::new();
    for node in levels.iter().flatten().skip(1) {
        if node.path.last().map(String::as_str) == Some(OTHER_NAME) {
            assert_eq!(node.left.1, node.left.2, "other is a leaf");
            assert_eq!(node.right.1, node.right.2, "other is a leaf");
            continue;
        }
        assert_eq!((node.left.1, node.left.2), totals_at(left, &node.path));
        assert_eq!((node.right.1, node.right.2), totals_at(right, &node.path));
        kept.insert(node.path.clone());
    }
    // Ranked by the larger side: everything kept outranks everything cut, and at least
    // `max_nodes` survive (more on ties at the threshold).
    let rank = |path: &Vec<String>| totals_at(left, path).0.max(totals_at(right, path).0);
    let mut union = union_of_paths(left, right);
    union.retain(|p| p.len() > 1);
    assert!(kept.len() >= max_nodes.min(union.len()));
    if let Some(min_kept) = kept.iter().map(rank).min() {
        let max_cut = union.difference(&kept).map(rank).max().unwrap_or(-1);
        assert!(max_cut < min_kept, "{max_cut} cut, {min_kept} kept");
    }
}

fn check_nested_json(left: &FlameTree, right: &FlameTree) {
    let v: serde_json::Value = serde_json::from_str(&diff_tree_json(left, right)).unwrap();
    let mut stack = vec![(&v, vec!["total".to_string()])];
    let mut seen = HashSet::new();
    while let Some((node, path)) = stack.pop() {
        let (lt, ls) = totals_at(left, &path);
        let (rt, rs) = totals_at(right, &path);
        assert_eq!(node["left"]["total"].as_i64(), Some(lt));
        assert_eq!(node["left"]["self"].as_i64(), Some(ls));
        assert_eq!(node["right"]["total"].as_i64(), Some(rt));
        assert_eq!(node["right"]["self"].as_i64(), Some(rs));
        for child in node["children"].as_array().unwrap() {
            let mut p = path.clone();
            p.push(child["name"].as_str().unwrap().to_owned());
            stack.push((child, p));
        }
        assert!(seen.insert(path));
    }
    assert_eq!(seen, union_of_paths(left, right));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_node_carries_the_single_trees_totals(l in stacks(5), r in stacks(7)) {
        check_full_layout(&build(&l), &build(&r));
    }

    #[test]
    fn truncation_keeps_totals_and_folds_only_the_smallest(
        l in stacks(6),
        r in stacks(6),
        max_nodes in 1usize..40,
    ) {
        check_truncated_layout(&build(&l), &build(&r), max_nodes);
    }

    #[test]
    fn nested_json_holds_every_path_with_its_totals(l in stacks(5), r in stacks(5)) {
        check_nested_json(&build(&l), &build(&r));
    }
}
