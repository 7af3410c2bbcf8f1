//! Diff flame graphs: two [`FlameTree`]s (a baseline "left" and a comparison "right")
//! merged by stack path, as Pyroscope's `FlameGraphDiff` layout and as nested JSON.
//!
//! Layout rules (`pyroscope-compat.md` §4.3, confirmed against Pyroscope's
//! `NewFlamegraphDiff`): nodes are the union of both trees' paths, siblings in byte order of
//! their names; each node is a 7-tuple `[x_offset_left, total_left, self_left,
//! x_offset_right, total_right, self_right, name_index]`, a path missing on one side having
//! zeros there. Each side is laid out on its own axis exactly like the single layout (self
//! width first, then children) and delta-encoded per level; `total` is the sum of both
//! sides' totals.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::flamegraph::pyroscope::flamebearer_json;
use crate::flamegraph::{FlameTree, NodeId, OTHER_NAME, ROOT_NAME};
use crate::select::ProfileType;

/// A diff flame graph in Pyroscope's `FlameGraphDiff` level layout. All values are in the
/// profiles' unit (nanoseconds, bytes, count), which both trees must share.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameGraphDiffLayout {
    /// Distinct frame names; `names[0]` is `"total"`.
    pub names: Vec<String>,
    /// One entry per depth (0 = root): flattened 7-tuples `[x_offset_left, total_left,
    /// self_left, x_offset_right, total_right, self_right, name_index]`, x offsets
    /// delta-encoded per side against the end of the previous node of the level.
    pub levels: Vec<Vec<i64>>,
    /// `left_ticks + right_ticks`, as Pyroscope reports it.
    pub total: i64,
    /// Largest self value of any node on either side (including `"other"` nodes).
    pub max_self: i64,
    /// Total of the left (baseline) tree.
    pub left_ticks: i64,
    /// Total of the right (comparison) tree.
    pub right_ticks: i64,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The same stack path in the left and right trees, present in at least one.
#[derive(Clone, Copy, Debug)]
struct Pair {
    left: Option<NodeId>,
    right: Option<NodeId>,
}

/// Both trees, read through merged paths.
struct Sides<'t> {
    left: &'t FlameTree,
    right: &'t FlameTree,
}

impl<'t> Sides<'t> {
    fn root(&self) -> Pair {
        Pair {
            left: Some(self.left.root()),
            right: Some(self.right.root()),
        }
    }

    fn name(&self, pair: Pair) -> &'t str {
        match (pair.left, pair.right) {
            (Some(l), _) => self.left.node_name(l),
            (None, Some(r)) => self.right.node_name(r),
            (None, None) => "",
        }
    }

    /// `(left, right)` totals; a missing side is 0.
    fn totals(&self, pair: Pair) -> (u64, u64) {
        (
            pair.left.map_or(0, |n| self.left.node_total(n)),
            pair.right.map_or(0, |n| self.right.node_total(n)),
        )
    }

    /// `(left, right)` self values; a missing side is 0.
    fn selfs(&self, pair: Pair) -> (u64, u64) {
        (
            pair.left.map_or(0, |n| self.left.node_self(n)),
            pair.right.map_or(0, |n| self.right.node_self(n)),
        )
    }

    /// Children of both sides merged by name, in name order (both lists are sorted).
    fn children(&self, pair: Pair) -> Vec<Pair> {
        let l = pair.left.map_or(&[][..], |n| self.left.children(n));
        let r = pair.right.map_or(&[][..], |n| self.right.children(n));
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::with_capacity(l.len().max(r.len()));
        while i < l.len() || j < r.len() {
            let order = match (l.get(i), r.get(j)) {
                (Some(&a), Some(&b)) => self.left.node_name(a).cmp(self.right.node_name(b)),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            let (left, right) = match order {
                std::cmp::Ordering::Less => (l.get(i).copied(), None),
                std::cmp::Ordering::Greater => (None, r.get(j).copied()),
                std::cmp::Ordering::Equal => (l.get(i).copied(), r.get(j).copied()),
            };
            i += usize::from(left.is_some());
            j += usize::from(right.is_some());
            out.push(Pair { left, right });
        }
        out
    }

    /// The smallest `max(left, right)` total a non-root merged node needs to be kept: the
    /// `max_nodes`-th largest, or 0 (keep all) within the limit or when the limit is 0.
    fn min_total_to_keep(&self, max_nodes: usize) -> u64 {
        if max_nodes == 0 {
            return 0;
        }
        let mut totals = Vec::new();
        let mut stack = self.children(self.root());
        while let Some(pair) = stack.pop() {
            let (l, r) = self.totals(pair);
            totals.push(l.max(r));
            stack.extend(self.children(pair));
        }
        if totals.len() <= max_nodes {
            return 0;
        }
        let (_, nth, _) = totals.select_nth_unstable_by(max_nodes - 1, |a, b| b.cmp(a));
        *nth
    }
}

enum Item {
    Pair(Pair),
    /// Children cut by the node limit, with their summed `(left, right)` totals.
    Other(u64, u64),
}

/// Lays out the diff of `left` (baseline) against `right` as Pyroscope's `FlameGraphDiff`.
///
/// `max_nodes` caps the non-root merged nodes kept, ranked by the larger of their two totals
/// (ties at the threshold are kept, plus one `"other"` per truncated parent holding the cut
/// children's totals on both sides); 0 means no limit. Pyroscope counts its synthetic root
/// in this limit, so it keeps one node fewer for the same number; the limit here means the
/// same as in [`FlameTree::to_pyroscope_layout`].
pub fn diff_layout(left: &FlameTree, right: &FlameTree, max_nodes: usize) -> FlameGraphDiffLayout {
    let sides = Sides { left, right };
    let threshold = sides.min_total_to_keep(max_nodes);
    let mut names = vec![ROOT_NAME.to_owned()];
    let mut name_index: HashMap<&str, i64> = HashMap::from([(ROOT_NAME, 0)]);
    let mut levels: Vec<Vec<i64>> = Vec::new();
    // Absolute end of the last node written to each level, per side, for delta encoding.
    let mut level_end: Vec<(u64, u64)> = Vec::new();
    let mut max_self = 0u64;
    let mut stack = vec![(Item::Pair(sides.root()), 0usize, 0u64, 0u64)];
    while let Some((item, depth, l_start, r_start)) = stack.pop() {
        let (name, (l_total, r_total), (l_self, r_self)) = match item {
            Item::Pair(pair) => (sides.name(pair), sides.totals(pair), sides.selfs(pair)),
            Item::Other(l, r) => (OTHER_NAME, (l, r), (l, r)),
        };
        let index = if depth == 0 {
            0
        } else {
            *name_index.entry(name).or_insert_with(|| {
                names.push(name.to_owned());
                to_i64(names.len() as u64 - 1)
            })
        };
        if levels.len() <= depth {
            levels.push(Vec::new());
            level_end.push((0, 0));
        }
        let (l_end, r_end) = level_end[depth];
        levels[depth].extend([
            to_i64(l_start.saturating_sub(l_end)),
            to_i64(l_total),
            to_i64(l_self),
            to_i64(r_start.saturating_sub(r_end)),
            to_i64(r_total),
            to_i64(r_self),
            index,
        ]);
        level_end[depth] = (
            l_start.saturating_add(l_total),
            r_start.saturating_add(r_total),
        );
        max_self = max_self.max(l_self).max(r_self);
        let Item::Pair(pair) = item else { continue };
        let mut l_cursor = l_start.saturating_add(l_self);
        let mut r_cursor = r_start.saturating_add(r_self);
        let (mut l_other, mut r_other) = (0u64, 0u64);
        let mut placed = Vec::new();
        for child in sides.children(pair) {
            let (l, r) = sides.totals(child);
            if l.max(r) >= threshold {
                placed.push((Item::Pair(child), depth + 1, l_cursor, r_cursor));
                l_cursor = l_cursor.saturating_add(l);
                r_cursor = r_cursor.saturating_add(r);
            } else {
                l_other = l_other.saturating_add(l);
                r_other = r_other.saturating_add(r);
            }
        }
        if l_other > 0 || r_other > 0 {
            placed.push((Item::Other(l_other, r_other), depth + 1, l_cursor, r_cursor));
        }
        stack.extend(placed.into_iter().rev());
    }
    let (left_ticks, right_ticks) = (to_i64(left.total()), to_i64(right.total()));
    FlameGraphDiffLayout {
        names,
        levels,
        total: left_ticks.saturating_add(right_ticks),
        max_self: to_i64(max_self),
        left_ticks,
        right_ticks,
    }
}

impl FlameGraphDiffLayout {
    /// The layout as Pyroscope's legacy `/pyroscope/render-diff` answers it (flamebearer JSON,
    /// `"format": "double"`, `leftTicks` and `rightTicks` beside the flame graph), in the units
    /// of `profile_type`.
    pub fn to_flamebearer_json(&self, profile_type: &ProfileType) -> Value {
        let mut out = flamebearer_json(
            (&self.names, &self.levels, self.total, self.max_self),
            "double",
            profile_type,
        );
        out["leftTicks"] = self.left_ticks.into();
        out["rightTicks"] = self.right_ticks.into();
        out
    }

    /// The layout as protojson of `querier.v1` `FlameGraphDiff`: int64 values as strings,
    /// `{"names":[…],"levels":[{"values":["0","100",…]}],"total":"…","maxSelf":"…",
    /// "leftTicks":"…","rightTicks":"…"}`.
    pub fn to_protojson(&self) -> Value {
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|level| {
                let values: Vec<String> = level.iter().map(i64::to_string).collect();
                json!({ "values": values })
            })
            .collect();
        json!({
            "names": self.names,
            "levels": levels,
            "total": self.total.to_string(),
            "maxSelf": self.max_self.to_string(),
            "leftTicks": self.left_ticks.to_string(),
            "rightTicks": self.right_ticks.to_string(),
        })
    }
}

/// Both trees merged by path as compact nested JSON for our UI, without truncation: every
/// node is `{"name":…,"left":{"total":…,"self":…},"right":{"total":…,"self":…},
/// "children":[…]}` (values in the profiles' unit, 0 on a side lacking the path, children
/// in name order), starting at the root named `"total"`.
///
/// Returned as text, built without recursion like [`FlameTree::to_nested_json`]: a
/// `serde_json::Value` of a hostile stack depth would overflow the call stack when dropped.
pub fn diff_tree_json(left: &FlameTree, right: &FlameTree) -> String {
    diff_tree_json_within(left, right, 0)
}

/// [`diff_tree_json`] with about `max_nodes` nodes of each side at most (0 = all): a path
/// is kept when it is among the largest of either side (as the flame graph layouts keep
/// them); each parent's others are merged into one child named `other` (last).
pub fn diff_tree_json_within(left: &FlameTree, right: &FlameTree, max_nodes: usize) -> String {
    enum Step {
        Open(Pair),
        Other((u64, u64), (u64, u64)),
        Comma,
        Close,
    }
    let sides = Sides { left, right };
    let (keep_left, keep_right) = (
        left.min_total_to_keep(max_nodes),
        right.min_total_to_keep(max_nodes),
    );
    let kept = |(l, r): (u64, u64)| {
        max_nodes == 0 || (l > 0 && l >= keep_left) || (r > 0 && r >= keep_right)
    };
    let node = |out: &mut String,
                name: &str,
                (l_total, r_total): (u64, u64),
                (l_self, r_self): (u64, u64)| {
        out.push_str("{\"name\":");
        out.push_str(&Value::from(name).to_string());
        out.push_str(&format!(
            ",\"left\":{{\"total\":{l_total},\"self\":{l_self}}}\
             ,\"right\":{{\"total\":{r_total},\"self\":{r_self}}},\"children\":["
        ));
    };
    let mut out = String::new();
    let mut steps = vec![Step::Open(sides.root())];
    while let Some(step) = steps.pop() {
        match step {
            Step::Open(pair) => {
                node(
                    &mut out,
                    sides.name(pair),
                    sides.totals(pair),
                    sides.selfs(pair),
                );
                steps.push(Step::Close);
                let (mut children, mut others) = (Vec::new(), (0u64, 0u64));
                for child in sides.children(pair) {
                    let totals = sides.totals(child);
                    if kept(totals) {
                        children.push(child);
                    } else {
                        others = (others.0 + totals.0, others.1 + totals.1);
                    }
                }
                if others != (0, 0) {
                    steps.push(Step::Other(others, others));
                    if !children.is_empty() {
                        steps.push(Step::Comma);
                    }
                }
                for (i, child) in children.into_iter().enumerate().rev() {
                    steps.push(Step::Open(child));
                    if i > 0 {
                        steps.push(Step::Comma);
                    }
                }
            }
            Step::Other(totals, selfs) => {
                node(&mut out, crate::flamegraph::OTHER_NAME, totals, selfs);
                out.push_str("]}");
            }
            Step::Comma => out.push(','),
            Step::Close => out.push_str("]}"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of a nested JSON node's children, in order.
    fn child_names(v: &Value) -> Vec<&str> {
        v["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_diff_tree_keeps_paths_large_on_either_side_and_merges_the_rest() {
        let left = tree(&[(&["a", "b"], 10), (&["c"], 1), (&["d"], 1)]);
        let right = tree(&[(&["a"], 1), (&["c"], 9), (&["d"], 1)]);
        // One node a side: a (left 10) and c (right 9); d is small on both.
        let v: Value = serde_json::from_str(&diff_tree_json_within(&left, &right, 1)).unwrap();
        assert_eq!(child_names(&v), ["a", "c", "other"]);
        assert_eq!(v["children"][2]["left"]["total"], 1);
        assert_eq!(v["children"][2]["right"]["total"], 1);
        assert_eq!(
            diff_tree_json_within(&left, &right, 0),
            diff_tree_json(&left, &right)
        );
    }

    fn tree(stacks: &[(&[&str], u64)]) -> FlameTree {
        let mut t = FlameTree::new();
        for (frames, value) in stacks {
            t.add(frames, *value);
        }
        t
    }

    #[test]
    fn small_pair_matches_the_reference_layout() {
        let left = tree(&[(&["a", "b"], 3), (&["a"], 2), (&["c"], 4)]);
        let right = tree(&[(&["a", "b"], 1), (&["a", "d"], 5), (&["e"], 2)]);
        let diff = diff_layout(&left, &right, 0);
        assert_eq!(diff.names, ["total", "a", "b", "d", "c", "e"]);
        assert_eq!(
            (diff.total, diff.max_self, diff.left_ticks, diff.right_ticks),
            (17, 5, 9, 8)
        );
        #[rustfmt::skip]
        let expected = vec![
            vec![0, 9, 0, 0, 8, 0, 0],
            // a: left 0..5 (self 2), right 0..6; c only left; e only right.
            vec![0, 5, 2, 0, 6, 0, 1,  0, 4, 4, 0, 0, 0, 4,  0, 0, 0, 0, 2, 2, 5],
            // b: left starts after a's self (2); d only right, after b (1).
            vec![2, 3, 3, 0, 1, 1, 2,  0, 0, 0, 0, 5, 5, 3],
        ];
        assert_eq!(diff.levels, expected);
    }

    #[test]
    fn identical_trees_mirror_the_single_layout() {
        let t = tree(&[(&["a", "x"], 5), (&["b", "y"], 7), (&["c"], 1), (&[], 2)]);
        let single = t.to_pyroscope_layout(0);
        let diff = diff_layout(&t, &t, 0);
        assert_eq!(diff.names, single.names);
        assert_eq!(diff.max_self, single.max_self);
        for (d, s) in diff.levels.iter().zip(&single.levels) {
            let halves: Vec<i64> = d
                .chunks(7)
                .flat_map(|n| {
                    assert_eq!(n[0..3], n[3..6]);
                    [n[0], n[1], n[2], n[6]]
                })
                .collect();
            assert_eq!(&halves, s);
        }
    }

    #[test]
    fn one_empty_side() {
        let t = tree(&[(&["a"], 3)]);
        let diff = diff_layout(&FlameTree::new(), &t, 0);
        assert_eq!(
            diff.levels,
            vec![vec![0, 0, 0, 0, 3, 0, 0], vec![0, 0, 0, 0, 3, 3, 1]]
        );
        let empty = diff_layout(&FlameTree::new(), &FlameTree::new(), 0);
        assert_eq!(empty.levels, vec![vec![0; 7]]);
        assert_eq!((empty.total, empty.names.len()), (0, 1));
    }

    #[test]
    fn truncation_ranks_by_the_larger_side() {
        let left = tree(&[
            (&["m", "big"], 50),
            (&["m", "s1"], 2),
            (&["m", "only_l"], 1),
        ]);
        let right = tree(&[(&["m", "s1"], 40), (&["m", "s2"], 3), (&["m", "s3"], 1)]);
        // Non-root max totals: m 53, big 50, s1 40, s2 3, only_l 1, s3 1; keep 3.
        let diff = diff_layout(&left, &right, 3);
        let level2: Vec<(&str, i64, i64)> = diff.levels[2]
            .chunks(7)
            .map(|n| (diff.names[n[6] as usize].as_str(), n[1], n[4]))
            .collect();
        assert_eq!(level2, [("big", 50, 0), ("s1", 2, 40), ("other", 1, 4)]);
        // "other" is a leaf on both sides: self = total.
        assert_eq!(diff.levels[2][14..21], [0, 1, 1, 0, 4, 4, 4]);
        assert_eq!(diff.levels.len(), 3);
        assert_eq!(diff_layout(&left, &right, 6), diff_layout(&left, &right, 0));
    }

    #[test]
    fn protojson_shape() {
        let diff = diff_layout(&tree(&[(&["a"], 3)]), &tree(&[(&["a"], 4)]), 0);
        let pj = diff.to_protojson();
        assert_eq!(pj["total"], "7");
        assert_eq!(pj["maxSelf"], "4");
        assert_eq!(
            (pj["leftTicks"].as_str(), pj["rightTicks"].as_str()),
            (Some("3"), Some("4"))
        );
        assert_eq!(pj["levels"][1]["values"].as_array().unwrap().len(), 7);
        assert_eq!(pj["levels"][1]["values"][4], "4");
    }

    #[test]
    fn nested_json_merges_children_by_name() {
        let left = tree(&[(&["a", "b"], 3), (&["c"], 1)]);
        let right = tree(&[(&["a"], 2), (&["\"q\""], 5)]);
        let v: Value = serde_json::from_str(&diff_tree_json(&left, &right)).unwrap();
        assert_eq!(v["name"], "total");
        assert_eq!(
            (v["left"]["total"].as_u64(), v["right"]["total"].as_u64()),
            (Some(4), Some(7))
        );
        assert_eq!(child_names(&v), ["\"q\"", "a", "c"]);
        let a = &v["children"][1];
        assert_eq!(a["left"], json!({"total": 3, "self": 0}));
        assert_eq!(a["right"], json!({"total": 2, "self": 2}));
        assert_eq!(a["children"][0]["right"], json!({"total": 0, "self": 0}));
    }

    #[test]
    fn deep_stacks_do_not_overflow() {
        let frames: Vec<String> = (0..200_000).map(|i| format!("f{}", i % 7)).collect();
        let mut t = FlameTree::new();
        t.add(&frames, 1);
        assert_eq!(diff_layout(&t, &FlameTree::new(), 0).levels.len(), 200_001);
        assert!(diff_tree_json(&FlameTree::new(), &t).ends_with("]}"));
    }
}
