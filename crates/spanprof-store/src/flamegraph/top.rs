//! Per-function self and total values of a [`FlameTree`]: the "top" table beside a flame graph.

use std::collections::HashMap;

use super::{FlameTree, NodeId};

/// Self and total value of one function across the whole tree, in the profile's unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionTotals<'t> {
    /// Function name, borrowed from the tree.
    pub name: &'t str,
    /// Value of the samples whose leaf frame is this function.
    pub self_value: u64,
    /// Value of the samples with this function anywhere in the stack, counted once per
    /// stack even when the function recurses.
    pub total: u64,
}

/// Sort key for [`FlameTree::top_functions`]; both sort descending, ties by name ascending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionOrder {
    /// Largest self value first.
    SelfValue,
    /// Largest total value first.
    Total,
}

impl FlameTree {
    /// Self and total value of every function (the synthetic root excluded), sorted by `order`.
    pub fn top_functions(&self, order: FunctionOrder) -> Vec<FunctionTotals<'_>> {
        enum Step {
            Enter(NodeId),
            Leave(u32),
        }
        // name id -> (self, total); and how often each name is on the current path, so a
        // recursive function's inner frames do not add to its total again.
        let mut sums: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut on_path: HashMap<u32, u32> = HashMap::new();
        let mut steps: Vec<Step> = self
            .children(self.root())
            .iter()
            .map(|c| Step::Enter(*c))
            .collect();
        while let Some(step) = steps.pop() {
            match step {
                Step::Enter(node) => {
                    let n = &self.nodes[node.index()];
                    let depth = on_path.entry(n.name).or_default();
                    let sum = sums.entry(n.name).or_default();
                    sum.0 = sum.0.saturating_add(n.self_value);
                    if *depth == 0 {
                        sum.1 = sum.1.saturating_add(n.total);
                    }
                    *depth += 1;
                    steps.push(Step::Leave(n.name));
                    steps.extend(n.children.iter().map(|c| Step::Enter(*c)));
                }
                Step::Leave(name) => {
                    if let Some(depth) = on_path.get_mut(&name) {
                        *depth -= 1;
                    }
                }
            }
        }
        let mut top: Vec<FunctionTotals<'_>> = sums
            .into_iter()
            .map(|(name, (self_value, total))| FunctionTotals {
                name: &self.names[name as usize],
                self_value,
                total,
            })
            .collect();
        match order {
            FunctionOrder::SelfValue => top.sort_by(|a, b| {
                (b.self_value, b.total, a.name).cmp(&(a.self_value, a.total, b.name))
            }),
            FunctionOrder::Total => top.sort_by(|a, b| {
                (b.total, b.self_value, a.name).cmp(&(a.total, a.self_value, b.name))
            }),
        }
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursion_counts_once_per_stack() {
        let mut t = FlameTree::new();
        t.add(&["main", "walk", "walk", "walk"], 5);
        t.add(&["main", "walk", "leaf"], 2);
        t.add(&["main"], 1);
        let top = t.top_functions(FunctionOrder::Total);
        let get = |name: &str| top.iter().find(|f| f.name == name).unwrap().clone();
        assert_eq!((get("main").self_value, get("main").total), (1, 8));
        assert_eq!((get("walk").self_value, get("walk").total), (5, 7));
        assert_eq!((get("leaf").self_value, get("leaf").total), (2, 2));
        let names: Vec<&str> = top.iter().map(|f| f.name).collect();
        assert_eq!(names, ["main", "walk", "leaf"]);
        let by_self: Vec<&str> = t
            .top_functions(FunctionOrder::SelfValue)
            .iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(by_self, ["walk", "leaf", "main"]);
    }

    #[test]
    fn ties_sort_by_name() {
        let mut t = FlameTree::new();
        t.add(&["b"], 1);
        t.add(&["a"], 1);
        let names: Vec<&str> = t
            .top_functions(FunctionOrder::SelfValue)
            .iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
    }
}
