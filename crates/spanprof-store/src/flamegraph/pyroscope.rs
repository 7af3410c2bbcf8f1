//! Pyroscope's `FlameGraph` layout (querier.v1) and the legacy flamebearer JSON of
//! `/pyroscope/render`, built from a [`FlameTree`].
//!
//! Layout rules (see `pyroscope-compat.md` §4.3): `names[0]` is `"total"`, names are
//! de-duplicated; `levels[d]` lists the nodes at depth d left to right as 4-tuples
//! `[x_offset, total, self, name_index]` where `x_offset` is the node's start minus the end of
//! the previous node of the same level; a node's self width comes first, then its children
//! in name order. Nodes below the `max_nodes`-th largest total merge into one `"other"` child
//! per parent.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{FlameTree, NodeId, ROOT_NAME};
use crate::select::ProfileType;

/// Pyroscope's default node limit (`querier.max-flamegraph-nodes-default`), in nodes.
pub const DEFAULT_MAX_NODES: usize = 8192;

/// Name of the synthetic node that holds the children cut by the node limit.
pub const OTHER_NAME: &str = "other";

/// A flame graph in Pyroscope's level layout. All values are in the profile's unit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameGraphLayout {
    /// Distinct frame names; `names[0]` is `"total"`.
    pub names: Vec<String>,
    /// One entry per depth (0 = root): flattened `[x_offset, total, self, name_index]` tuples.
    pub levels: Vec<Vec<i64>>,
    /// Value of the whole graph (the root's total).
    pub total: i64,
    /// Largest self value of any node.
    pub max_self: i64,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

enum Item {
    Node(NodeId),
    /// Children merged by the node limit, with their summed total.
    Other(u64),
}

impl FlameTree {
    /// Lays the tree out as Pyroscope's `FlameGraph`. `max_nodes` caps the non-root nodes
    /// kept (ties at the threshold are kept, plus one `"other"` per truncated parent);
    /// 0 means no limit (a Pyroscope API passes [`DEFAULT_MAX_NODES`] for an absent limit).
    pub fn to_pyroscope_layout(&self, max_nodes: usize) -> FlameGraphLayout {
        let threshold = self.min_total_to_keep(max_nodes);
        let mut names = vec![ROOT_NAME.to_owned()];
        let mut name_index: HashMap<&str, i64> = HashMap::from([(ROOT_NAME, 0)]);
        let mut levels: Vec<Vec<i64>> = Vec::new();
        // Absolute end of the last node written to each level, for delta-encoding x offsets.
        let mut level_end: Vec<u64> = Vec::new();
        let mut max_self = 0u64;
        let mut stack = vec![(Item::Node(self.root()), 0usize, 0u64)];
        while let Some((item, depth, start)) = stack.pop() {
            let (name, total, self_value) = match item {
                Item::Node(node) => (
                    self.node_name(node),
                    self.node_total(node),
                    self.node_self(node),
                ),
                Item::Other(total) => (OTHER_NAME, total, total),
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
                level_end.push(0);
            }
            let x_offset = start.saturating_sub(level_end[depth]);
            levels[depth].extend([to_i64(x_offset), to_i64(total), to_i64(self_value), index]);
            level_end[depth] = start.saturating_add(total);
            max_self = max_self.max(self_value);
            if let Item::Node(node) = item {
                let mut cursor = start.saturating_add(self_value);
                let mut placed = Vec::new();
                let mut other = 0u64;
                for &child in self.children(node) {
                    let child_total = self.node_total(child);
                    if child_total >= threshold {
                        placed.push((Item::Node(child), depth + 1, cursor));
                        cursor = cursor.saturating_add(child_total);
                    } else {
                        other = other.saturating_add(child_total);
                    }
                }
                if other > 0 {
                    placed.push((Item::Other(other), depth + 1, cursor));
                }
                stack.extend(placed.into_iter().rev());
            }
        }
        FlameGraphLayout {
            names,
            levels,
            total: to_i64(self.total()),
            max_self: to_i64(max_self),
        }
    }

    /// The smallest total a non-root node needs to be kept: the `max_nodes`-th largest total,
    /// or 0 (keep all) when the tree is within the limit or the limit is 0.
    pub fn min_total_to_keep(&self, max_nodes: usize) -> u64 {
        let non_root = self.node_count() - 1;
        if max_nodes == 0 || non_root <= max_nodes {
            return 0;
        }
        let mut totals: Vec<u64> = self.nodes[1..].iter().map(|n| n.total).collect();
        let (_, nth, _) = totals.select_nth_unstable_by(max_nodes - 1, |a, b| b.cmp(a));
        *nth
    }
}

impl FlameGraphLayout {
    /// The layout as protojson of `querier.v1` `FlameGraph`, the way Connect JSON clients
    /// (Pyroscope UI, Profiles Drilldown) read it: int64 values as strings,
    /// `{"names":[…],"levels":[{"values":["0","100",…]}],"total":"…","maxSelf":"…"}`.
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
        })
    }

    /// The legacy `/pyroscope/render?format=json` body for this layout (numbers as JSON
    /// numbers; `metadata.units` and `sampleRate` derived from `profile_type` as Pyroscope
    /// does). `timeline`, `groups` and `heatmap` are null: series are the caller's to add.
    pub fn to_flamebearer_json(&self, profile_type: &ProfileType) -> Value {
        flamebearer_json(
            (&self.names, &self.levels, self.total, self.max_self),
            "single",
            profile_type,
        )
    }
}

/// Flamebearer JSON of a layout's (names, levels, total, max self), in `format` (`single`,
/// or `double` for a diff's 7-tuples), without a timeline.
pub(crate) fn flamebearer_json(
    (names, levels, total, max_self): (&[String], &[Vec<i64>], i64, i64),
    format: &str,
    profile_type: &ProfileType,
) -> Value {
    let (units, sample_rate) = flamebearer_units(profile_type);
    json!({
        "version": 1,
        "flamebearer": {
            "names": names,
            "levels": levels,
            "numTicks": total,
            "maxSelf": max_self,
        },
        "metadata": {
            "format": format,
            "spyName": "",
            "sampleRate": sample_rate,
            "units": units,
            "name": profile_type.sample_type,
        },
        "timeline": null,
        "groups": null,
        "heatmap": null,
    })
}

/// Flamebearer `units` and `sampleRate` (ticks per unit) for a profile type.
fn flamebearer_units(profile_type: &ProfileType) -> (&str, u64) {
    match profile_type.sample_type.as_str() {
        // CPU nanoseconds are shown as "samples" at 1e9 ticks per second.
        "cpu" => ("samples", 1_000_000_000),
        "inuse_objects" | "alloc_objects" | "goroutine" | "samples" => ("objects", 100),
        _ => (profile_type.sample_unit.as_str(), 100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Absolute `(start, total, self, name)` per level, undoing the delta encoding.
    fn absolute(layout: &FlameGraphLayout) -> Vec<Vec<(i64, i64, i64, &str)>> {
        layout
            .levels
            .iter()
            .map(|level| {
                let mut end = 0;
                level
                    .chunks(4)
                    .map(|t| {
                        let start = end + t[0];
                        end = start + t[1];
                        (start, t[1], t[2], layout.names[t[3] as usize].as_str())
                    })
                    .collect()
            })
            .collect()
    }

    fn tree(stacks: &[(&[&str], u64)]) -> FlameTree {
        let mut t = FlameTree::new();
        for (frames, value) in stacks {
            t.add(frames, *value);
        }
        t
    }

    /// A deterministic pseudo-random tree (xorshift), so the rules hold beyond hand cases.
    fn random_tree(seed: u64, samples: usize) -> FlameTree {
        let mut x = seed;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut t = FlameTree::new();
        for _ in 0..samples {
            let depth = (next() % 6) as usize;
            let frames: Vec<String> = (0..depth).map(|_| format!("f{}", next() % 5)).collect();
            t.add(&frames, 1 + next() % 100);
        }
        t
    }

    #[test]
    fn root_and_offsets_follow_the_reference_layout() {
        let t = tree(&[(&["a", "b"], 3), (&["a"], 2), (&["c"], 4), (&[], 1)]);
        let layout = t.to_pyroscope_layout(0);
        assert_eq!(layout.names, ["total", "a", "b", "c"]);
        assert_eq!(layout.total, 10);
        assert_eq!(layout.max_self, 4);
        // Root self (1) first, then a at 1..6 (self 2, so b starts at 3), then c at 6..10.
        assert_eq!(
            layout.levels,
            vec![
                vec![0, 10, 1, 0],
                vec![1, 5, 2, 1, 0, 4, 4, 3],
                vec![3, 3, 3, 2]
            ]
        );
    }

    #[test]
    fn totals_sum_and_children_lie_inside_their_parent() {
        for seed in 1..20u64 {
            let t = random_tree(seed * 7919, 300);
            let layout = t.to_pyroscope_layout(0);
            let levels = absolute(&layout);
            assert_eq!(levels[0].len(), 1);
            let (_, root_total, root_self, root_name) = levels[0][0];
            assert_eq!((root_total, root_name), (layout.total, "total"));
            let children: i64 = levels[1].iter().map(|n| n.1).sum();
            assert_eq!(root_total, root_self + children, "seed {seed}");
            for d in 1..levels.len() {
                for &(start, total, self_value, _) in &levels[d] {
                    assert!(self_value <= total);
                    let parent = levels[d - 1]
                        .iter()
                        .find(|p| p.0 <= start && start + total <= p.0 + p.1);
                    let parent = parent.unwrap_or_else(|| panic!("seed {seed}: orphan"));
                    // Children start after their parent's self width.
                    assert!(start >= parent.0 + parent.2, "seed {seed}");
                }
                for pair in levels[d].windows(2) {
                    assert!(pair[0].0 + pair[0].1 <= pair[1].0, "seed {seed}: overlap");
                }
            }
            // Each parent's total is its self plus its children's totals.
            for d in 0..levels.len() - 1 {
                for &(start, total, self_value, _) in &levels[d] {
                    let inside: i64 = levels[d + 1]
                        .iter()
                        .filter(|c| start <= c.0 && c.0 < start + total)
                        .map(|c| c.1)
                        .sum();
                    assert_eq!(total, self_value + inside, "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn x_offsets_are_deltas_within_a_level() {
        let t = tree(&[(&["a", "x"], 5), (&["b", "y"], 7), (&["c"], 1)]);
        let layout = t.to_pyroscope_layout(0);
        // a at 0..5 and b at 5..12: x under a starts 0 (delta 0), y under b starts at 5,
        // which is 0 after x's end (5).
        assert_eq!(layout.levels[1], vec![0, 5, 0, 1, 0, 7, 0, 3, 0, 1, 1, 5]);
        assert_eq!(layout.levels[2], vec![0, 5, 5, 2, 0, 7, 7, 4]);
        let t = tree(&[(&["a"], 5), (&["b", "y"], 7)]);
        // Level 2 has only y, which starts at 5: its delta is 5 from the level's start.
        assert_eq!(t.to_pyroscope_layout(0).levels[2], vec![5, 7, 7, 3]);
    }

    #[test]
    fn max_nodes_merges_small_children_into_other() {
        let t = tree(&[
            (&["main", "big"], 50),
            (&["main", "mid"], 30),
            (&["main", "s1"], 2),
            (&["main", "s2"], 1),
            (&["main", "s2", "deep"], 1),
        ]);
        // Non-root totals: main 84, big 50, mid 30, s1 2, s2 2, deep 1; keep top 3.
        let layout = t.to_pyroscope_layout(3);
        let levels = absolute(&layout);
        let level1: Vec<_> = levels[1].iter().map(|n| (n.1, n.3)).collect();
        assert_eq!(level1, [(84, "main")]);
        let level2: Vec<_> = levels[2].iter().map(|n| (n.1, n.2, n.3)).collect();
        assert_eq!(level2, [(50, 50, "big"), (30, 30, "mid"), (4, 4, "other")]);
        assert_eq!(levels.len(), 3, "the cut subtrees are gone");
        assert_eq!(layout.total, 84);
        // Within the limit nothing changes.
        assert_eq!(t.to_pyroscope_layout(6), t.to_pyroscope_layout(0));
    }

    #[test]
    fn protojson_and_flamebearer_shapes() {
        let t = tree(&[(&["a"], 3)]);
        let layout = t.to_pyroscope_layout(DEFAULT_MAX_NODES);
        let pj = layout.to_protojson();
        assert_eq!(pj["total"], "3");
        assert_eq!(pj["levels"][1]["values"][1], "3");
        let cpu = ProfileType {
            sample_type: "cpu".into(),
            sample_unit: "nanoseconds".into(),
            ..Default::default()
        };
        let fb = layout.to_flamebearer_json(&cpu);
        assert_eq!(fb["flamebearer"]["numTicks"], 3);
        assert_eq!(fb["metadata"]["units"], "samples");
        assert_eq!(fb["metadata"]["sampleRate"], 1_000_000_000u64);
    }
}
