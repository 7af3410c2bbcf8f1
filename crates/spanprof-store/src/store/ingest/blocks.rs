//! An OTLP profile turned into sample blocks: one block per series and sample type, each
//! sample linked to its span, repeated profiles reusing their blocks.

use spanprof_format::link::LinkConfig;
use spanprof_format::otlp::{Profile, ProfilesData, ProfilesDictionary};

use super::builder::{
    profile_type_of, sample_value, window, BlockBuilder, Context, Layout, SpanTraces,
};
use super::invalid::Invalid;
use super::labels::resource_labels;
use super::limits::{check_profile_type, new_series, within_symbol_limit, Refusal};
use super::Pending;
use crate::block::{Block, LinkIds};
use crate::store::state::{SeriesKey, State};
use crate::store::{SeriesLimits, StoreConfig};
use crate::symbols::Remap;

/// Splits every profile of `data` into blocks per series (sample attribute sets become labels;
/// ids become links) and interns their symbols. A profile that cannot be stored is named in
/// the report's problems, as coming from `source`.
pub(super) fn add_profiles(
    st: &mut State,
    data: &ProfilesData,
    source: usize,
    cfg: &StoreConfig,
    pending: &mut Pending,
) {
    let empty = ProfilesDictionary::default();
    let d = data.dictionary.as_ref().unwrap_or(&empty);
    let link_keys = LinkConfig::default();
    // Each link's ids, checked and with the trace elided, once per link table entry (the
    // profiles of one pprof share it; a span index lookup per sample misses the cache).
    let mut links: Vec<Option<LinkIds>> = vec![None; d.link_table.len()];
    let mut span_traces = SpanTraces::default();
    for (ri, rp) in data.resource_profiles.iter().enumerate() {
        let (service_name, name_hint, base_labels) = resource_labels(rp.resource.as_ref());
        let services_before = st.services.len();
        let service = st.service_id(&service_name);
        let stored_before = pending.report.profiles;
        let mut remap = Remap::new(d);
        let cx = Context {
            d,
            service,
            base_labels: &base_labels,
            name_hint: name_hint.as_deref(),
            link_keys: &link_keys,
            cfg,
        };
        for (si, sp) in rp.scope_profiles.iter().enumerate() {
            // The profile before, when stored: where its blocks start in `pending.blocks`, and
            // how they were laid out.
            let mut prev: Option<(&spanprof_format::otlp::Profile, usize, Layout)> = None;
            for (pi, p) in sp.profiles.iter().enumerate() {
                let key = st.recent.key(service, d, p);
                if let Some(k) = key {
                    if st.recent.contains(k) || pending.stored_keys.contains(&k) {
                        pending.report.repeated_profiles += 1;
                        prev = None;
                        continue;
                    }
                }
                let path = format!("resource_profiles[{ri}].scope_profiles[{si}].profiles[{pi}]");
                let first = pending.blocks.len();
                let sizes_before = st.services[service as usize].symbols.sizes();
                let series_before = st.series.len();
                // Where the blocks this profile's repeat begin, when it repeats some.
                let mut repeats = None;
                let stored = match prev.take() {
                    // The next sample type of the same pprof: only the values differ.
                    Some((before, at, layout)) if same_samples(before, p) => {
                        repeats = Some(at);
                        let before_blocks = &pending.blocks[at..at + layout.members.len()];
                        reuse_blocks(
                            st,
                            d,
                            service,
                            name_hint.as_deref(),
                            &cfg.series,
                            p,
                            &layout,
                            before_blocks,
                        )
                        .map(|blocks| (blocks, layout))
                    }
                    _ => profile_blocks(st, &cx, &mut remap, &mut links, &mut span_traces, p),
                };
                let stored = stored
                    .and_then(|x| within_symbol_limit(st, service, sizes_before, cfg).map(|()| x));
                if stored.is_err() {
                    // Nothing of a refused profile stays: what it interned goes (the remap
                    // may name it), and so do the series it made.
                    st.services[service as usize].symbols.truncate(sizes_before);
                    st.truncate_series(series_before);
                    remap = Remap::new(d);
                }
                match stored {
                    Ok((blocks, layout)) => {
                        pending.report.profiles += 1;
                        pending.stored_keys.extend(key);
                        pending.report.samples +=
                            blocks.iter().map(|b| b.nodes.len() as u64).sum::<u64>();
                        for j in 0..blocks.len() {
                            let root =
                                repeats.map_or((first + j) as u32, |at| pending.roots[at + j]);
                            pending.roots.push(root);
                        }
                        pending.blocks.extend(blocks);
                        prev = Some((p, first, layout));
                    }
                    Err(e) => {
                        pending.report.rejected_profiles += 1;
                        pending.report.limited_profiles += u64::from(e.limit);
                        pending
                            .report
                            .problems
                            .push(format!("{path}: {}", e.message));
                        pending.report.problem_sources.push(source);
                        pending.report.problem_places.push([ri, si, pi]);
                    }
                }
            }
        }
        // A service that only refused profiles named is not made: the names of services are
        // kept for good, and refused profiles must not grow the store.
        if st.services.len() > services_before && pending.report.profiles == stored_before {
            st.forget_new_service(service);
        }
    }
}

/// Whether `b` has the samples of `a` (same stacks, links and attributes, in the same order),
/// whatever their values.
fn same_samples(a: &spanprof_format::otlp::Profile, b: &spanprof_format::otlp::Profile) -> bool {
    a.samples.len() == b.samples.len()
        && a.samples.iter().zip(&b.samples).all(|(x, y)| {
            x.stack_index == y.stack_index
                && x.link_index == y.link_index
                && x.attribute_indices == y.attribute_indices
        })
}

/// The blocks of `p`, whose samples are those of the profile stored just before as `before`
/// (laid out as `layout`): the same stacks, links and order, with `p`'s values.
#[allow(clippy::too_many_arguments)]
fn reuse_blocks(
    st: &mut State,
    d: &ProfilesDictionary,
    service: u32,
    name_hint: Option<&str>,
    series_limits: &SeriesLimits,
    p: &spanprof_format::otlp::Profile,
    layout: &Layout,
    before: &[Block],
) -> Result<Vec<Block>, Refusal> {
    let (time_ns, duration_ns) = window(p)?;
    let profile_type = profile_type_of(d, p, name_hint)?;
    check_profile_type(&profile_type, series_limits)?;
    let mut blocks = Vec::with_capacity(before.len());
    let mut total = 0i64;
    // Read in the samples' order, then taken in the blocks' (by stack node): each sample's
    // values are behind a pointer of their own, and read in block order nearly every one
    // missed the cache (perf, OTLP requests linked in place: `sample_value` took 30 % of
    // `stack_of`'s time that way, 11 % in order).
    let all = p
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| sample_value(s, i, &mut total))
        .collect::<Result<Vec<i64>, Invalid>>()?;
    for (b, (labels, members)) in before.iter().zip(layout.labels.iter().zip(&layout.members)) {
        let values = members.iter().map(|&i| all[i as usize]).collect();
        let key = SeriesKey {
            service,
            profile_type: profile_type.clone(),
            labels: labels.clone(),
        };
        blocks.push(Block {
            series: new_series(st, key, series_limits.max_series)?,
            time_ns,
            duration_ns,
            period: p.period,
            nodes: b.nodes.clone(),
            values,
            links: b.links.clone(),
            link_table: b.link_table.clone(),
        });
    }
    Ok(blocks)
}

/// The blocks of `p`, split by series in one pass over its samples.
fn profile_blocks(
    st: &mut State,
    cx: &Context<'_>,
    remap: &mut Remap,
    link_memo: &mut [Option<LinkIds>],
    span_traces: &mut SpanTraces,
    p: &Profile,
) -> Result<(Vec<Block>, Layout), Refusal> {
    let mut builder = BlockBuilder::new(cx, p)?;
    for (i, s) in p.samples.iter().enumerate() {
        builder.add(st, remap, link_memo, span_traces, i, s)?;
    }
    builder.finish(st)
}
