//! Reading resolved blocks' samples and what is built straight from them: flame graphs,
//! diffs, time series, profile counts.

use hashbrown::HashMap;

use super::pprof_export::{CUT_STACK_FRAME, MAX_STACK_DEPTH};
use super::resolve::type_ids;
use super::selection::Selection;
use super::{profile_times, Resolved};
use crate::block::{Block, LinkIds};
use crate::codec::Get;
use crate::flamegraph::FlameTree;
use crate::select::{ProfileType, SelectionSummary};
use crate::store::state::State;
use crate::store::{Store, StoreError};

/// Reports a record a query had to skip (once per record and process is plenty).
fn tracing_skip(path: &std::path::Path, offset: u64, reason: &str) {
    static SEEN: std::sync::Mutex<Vec<(std::path::PathBuf, u64)>> =
        std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !seen.iter().any(|(p, o)| p == path && *o == offset) {
        seen.push((path.to_owned(), offset));
        tracing::warn!(file = %path.display(), offset, reason, "skipping a damaged record; answering from the rest");
    }
}

/// Values summed per (service, stack node), and what was read.
pub(crate) struct Aggregate {
    pub by_node: HashMap<(u32, u32), i64>,
    pub samples: u64,
    pub period: Option<i64>,
    pub window: Option<(i64, i64)>,
}

impl Store {
    /// Reads the blocks of a resolved selection and calls `f(block, sample index)` for every
    /// selected sample. Needs no lock on the store's state: callers read with it unlocked
    /// (held, a flame graph or pprof of a large selection stalled every ingest for as long as
    /// it read, 18 s for a pprof of 20 million samples). The blocks of a segment deleted
    /// meanwhile (retention, compaction) are skipped.
    pub(crate) fn for_each_sample(
        &self,
        r: &Resolved,
        mut f: impl FnMut(&Block, usize),
    ) -> Result<(), StoreError> {
        // The record last read, and its link table (decoded once for all its blocks).
        let mut record: Option<(crate::log::RecordPos, Vec<u8>, Vec<LinkIds>)> = None;
        for (index, b) in &r.blocks {
            crate::query_limit::check()?;
            let meta = &index.blocks[*b as usize];
            if record.as_ref().is_none_or(|(p, _, _)| *p != meta.pos) {
                match self.log.read(meta.pos) {
                    Ok(bytes) => {
                        let links = crate::store::record_links(&bytes)?;
                        record = Some((meta.pos, bytes, links));
                    }
                    // Damage found after the index was written: answer from the rest.
                    Err(crate::log::LogError::Corrupt {
                        path,
                        offset,
                        reason,
                    }) => {
                        tracing_skip(&path, offset, &reason);
                        record = None;
                        continue;
                    }
                    Err(crate::log::LogError::UnknownSegment { .. }) => {
                        record = None;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let (_, bytes, links) = record.as_ref().expect("just read");
            let slice = bytes
                .get(meta.start as usize..(meta.start + meta.len) as usize)
                .ok_or_else(|| StoreError::Invalid(format!("block {b} lies outside its record")))?;
            let block = Block::decode(&mut Get::new(slice), links)?;
            // Which of the block's links are selected.
            let filtering = r.spans.is_some() || r.trace.is_some();
            let wanted: Option<Vec<bool>> = filtering.then(|| {
                std::iter::once(false)
                    .chain(block.link_table.iter().map(|(trace, span)| {
                        r.spans.as_ref().is_none_or(|set| set.contains(span))
                            && r.trace
                                .as_ref()
                                .is_none_or(|(t, of_trace)| t == trace || of_trace.contains(span))
                    }))
                    .collect()
            });
            for i in 0..block.nodes.len() {
                if wanted.as_ref().is_none_or(|w| w[block.links[i] as usize]) {
                    f(&block, i);
                }
            }
        }
        Ok(())
    }

    /// The selection's samples summed per (service, stack node), read unlocked; `services`
    /// is the service of each series ([`series_services`]).
    pub(crate) fn aggregate(
        &self,
        r: &Resolved,
        services: &HashMap<u32, u32>,
    ) -> Result<Aggregate, StoreError> {
        let mut agg = Aggregate {
            by_node: HashMap::new(),
            samples: 0,
            period: None,
            window: None,
        };
        self.for_each_sample(r, |block, i| {
            let service = services[&block.series];
            let v = agg.by_node.entry((service, block.nodes[i])).or_default();
            *v = v.saturating_add(block.values[i]);
            agg.samples += 1;
            agg.period.get_or_insert(block.period);
            let (s, e) = (
                block.time_ns,
                block.time_ns.saturating_add(block.duration_ns),
            );
            agg.window = Some(agg.window.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        })?;
        Ok(agg)
    }

    /// The merged flame graph of the selection, and what it was built from.
    pub fn flame_graph(
        &self,
        sel: &Selection,
    ) -> Result<(FlameTree, SelectionSummary), StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        let services = series_services(&st, &r);
        let (profile_type_id, type_ids) = type_ids(&st, sel, &r);
        drop(st);
        let agg = self.aggregate(&r, &services)?;
        // The stacks' frames, with the state locked again: symbol tables only grow while a
        // service has data (one emptied meanwhile, its data deleted, leaves cut stacks).
        let st = self.state.read().expect("store state lock poisoned");
        let mut tree = FlameTree::new();
        let mut frames = Vec::new();
        let mut locations = Vec::new();
        let mut summary = SelectionSummary {
            available_types: r.available.iter().map(ProfileType::from).collect(),
            used_types: vec![ProfileType::from(&r.profile_type)],
            samples_selected: agg.samples,
            profile_times: profile_times(&r),
            profile_type_id,
            type_ids,
            ..Default::default()
        };
        for (&(service, node), &value) in &agg.by_node {
            let Ok(v) = u64::try_from(value) else {
                summary.samples_non_positive += 1;
                continue;
            };
            if v == 0 {
                continue;
            }
            let Some(symbols) = st.services.get(service as usize).map(|s| &s.symbols) else {
                continue;
            };
            locations.clear();
            let mut n = node;
            while n != 0 && locations.len() < MAX_STACK_DEPTH {
                let Some(x) = symbols.node(n) else { break };
                locations.push(x.location);
                n = x.parent;
            }
            frames.clear();
            if n != 0 {
                frames.push(CUT_STACK_FRAME.to_owned());
            }
            for &l in locations.iter().rev() {
                symbols.frame_names(l, &mut frames);
            }
            tree.add(&frames, v);
            summary.value_selected = summary.value_selected.saturating_add(v);
        }
        Ok((tree, summary))
    }

    /// How many profiles (distinct profile times) the selection reads: what a snapshot
    /// type's sums are averaged over.
    pub fn profile_times(&self, sel: &Selection) -> Result<u64, StoreError> {
        let r = self.resolved(sel)?;
        Ok(profile_times(&r))
    }

    /// Totals of the selection over time: (block start ns, value, top span of the block) for
    /// every block, with the series' value of label `group_by` when given.
    pub fn points(
        &self,
        sel: &Selection,
        group_by: Option<&str>,
    ) -> Result<Vec<(Option<String>, crate::series::Point)>, StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        drop(st);
        // Per block: the value of each span, and of samples without one. One point each, so
        // bucket totals are exact and exemplars carry their own span's value.
        let mut per_block: HashMap<(i64, u32), BlockTotals> = HashMap::new();
        self.for_each_sample(&r, |block, i| {
            let e = per_block.entry((block.time_ns, block.series)).or_default();
            let v = match block.links[i] {
                0 => &mut e.0,
                l => e.1.entry(block.link_table[l as usize - 1]).or_default(),
            };
            *v = v.saturating_add(block.values[i]);
        })?;
        let elided = per_block
            .values()
            .flat_map(|(_, spans)| spans.keys())
            .filter(|(trace, _)| *trace == [0; 16])
            .map(|&(_, span)| span)
            .collect();
        // Exemplars without their trace when it cannot be read.
        let traces = self.traces_of(elided).unwrap_or_default();
        // Each series' value of `group_by`, with the state locked again; the points (one per
        // block and span: millions for a large selection) are made unlocked.
        let mut groups: HashMap<u32, String> = HashMap::new();
        if let Some(g) = group_by {
            let st = self.state.read().expect("store state lock poisoned");
            for &(_, series) in per_block.keys() {
                groups.entry(series).or_insert_with(|| {
                    let label = st.series.get(series as usize).and_then(|s| s.label(g));
                    label.unwrap_or("").to_owned()
                });
            }
        }
        let mut out = Vec::new();
        for ((time_ns, series), (unlinked, spans)) in per_block {
            let group = group_by.map(|_| groups[&series].clone());
            if unlinked != 0 {
                out.push((
                    group.clone(),
                    crate::series::Point {
                        time_ns,
                        value: unlinked,
                        span: None,
                    },
                ));
            }
            for ((t, s), value) in spans {
                let t = if t == [0; 16] {
                    traces.get(&s).copied().unwrap_or(t)
                } else {
                    t
                };
                out.push((
                    group.clone(),
                    crate::series::Point {
                        time_ns,
                        value,
                        span: Some((t, s)),
                    },
                ));
            }
        }
        out.sort_by_key(|(g, p)| (g.clone(), p.time_ns, p.span));
        Ok(out)
    }
}

/// The type `r` (resolved from `sel`) is in, and the types the selection has, as
/// [`Store::selection_types`] gives them.
/// The service of each series of `r`'s blocks.
fn series_services(st: &State, r: &Resolved) -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    for (index, b) in &r.blocks {
        let series = index.blocks[*b as usize].series;
        out.entry(series)
            .or_insert_with(|| st.series[series as usize].service);
    }
    out
}

/// A block's value without a span, and its value per link (trace id, span id).
type BlockTotals = (i64, HashMap<crate::block::LinkIds, i64>);

impl Store {
    /// Two selections as one diff flame graph (Pyroscope's layout): e.g. slow spans against
    /// fast spans of one endpoint, or one span against its endpoint's baseline.
    pub fn diff(
        &self,
        left: &Selection,
        right: &Selection,
        max_nodes: usize,
    ) -> Result<crate::diff::FlameGraphDiffLayout, StoreError> {
        let (l, _) = self.flame_graph(left)?;
        let (r, _) = self.flame_graph(right)?;
        Ok(crate::diff::diff_layout(&l, &r, max_nodes))
    }

    /// Totals of the selection per `step_ns`, optionally one series per value of label
    /// `group_by`, with up to `exemplars` spans per point.
    pub fn time_series(
        &self,
        sel: &Selection,
        step_ns: i64,
        group_by: Option<&str>,
        aggregation: crate::series::Aggregation,
        exemplars: usize,
    ) -> Result<Vec<(String, Vec<crate::series::SeriesPoint>)>, StoreError> {
        let points = self.points(sel, group_by)?;
        let to_ns = if sel.to_ns == 0 {
            points
                .iter()
                .map(|(_, p)| p.time_ns + 1)
                .max()
                .unwrap_or(sel.from_ns)
        } else {
            sel.to_ns
        };
        let grouped = points.into_iter().map(|(g, p)| (g.unwrap_or_default(), p));
        crate::series::bucket_grouped(grouped, sel.from_ns, to_ns, step_ns, aggregation, exemplars)
            .map_err(|e| StoreError::Invalid(e.to_string()))
    }
}
