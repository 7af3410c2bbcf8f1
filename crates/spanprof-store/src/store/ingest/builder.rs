//! The blocks of one profile built in one pass over its samples ([`BlockBuilder`]), and the
//! checks and helpers every profile's blocks share.

use hashbrown::HashMap;
use spanprof_format::limits::{Measure, ProfileLimits};
use spanprof_format::link::{IdRole, LinkConfig};
use spanprof_format::otlp::{Profile, ProfilesDictionary, Sample};
use spanprof_format::profile_type::ProfileTypeId;

use super::invalid::{Invalid, MAX_PROFILE_TOTAL};
use super::labels::{sample_label_of, shown};
use super::limits::{check_labels, check_profile_type, new_series, Refusal};
use super::SERVICE_LABEL;
use crate::block::{Block, LinkIds};
use crate::store::state::{SeriesKey, State};
use crate::store::StoreConfig;
use crate::symbols::Remap;

/// What a profile's blocks are built in: its dictionary, its service and the settings. Shared
/// by every profile of one request.
pub(super) struct Context<'a> {
    /// The request's dictionary.
    pub d: &'a ProfilesDictionary,
    /// The service's id in the store.
    pub service: u32,
    /// The resource's labels, on every series of the service's profiles.
    pub base_labels: &'a [(String, String)],
    /// The profile name the resource gives (`pyroscope.profile.name`), if any.
    pub name_hint: Option<&'a str>,
    /// Which attribute keys carry span and trace ids.
    pub link_keys: &'a LinkConfig,
    /// The store's settings (series and profile limits).
    pub cfg: &'a StoreConfig,
}

/// The span and trace ids a sample's attributes give (the first of each).
type SampleIds = (Option<[u8; 8]>, Option<[u8; 16]>);

/// An attribute table entry once classified: its label (key, value) and role, or `None` when
/// it is no label (a number: see `sample_label_of`).
type AttrRole = Option<(String, String, IdRole)>;

/// The blocks of one profile under construction: one per distinct set of label attributes
/// (a series), each sample added to its set's block with its stack node, value and link.
pub(super) struct BlockBuilder<'a> {
    cx: &'a Context<'a>,
    p: &'a Profile,
    profile_type: ProfileTypeId,
    /// Sample attribute set → block.
    groups: HashMap<Vec<i32>, usize>,
    /// Sets of at most one attribute (most profiles': a span name, or nothing) found by
    /// index, not hashed and compared: `single[0]` for none, `single[a + 1]` for attribute `a`.
    single: Vec<Option<usize>>,
    /// Each block, with its links' positions in its link table.
    blocks: Vec<(Block, HashMap<LinkIds, u32>)>,
    /// Per attribute table entry, once classified (`None`: not yet).
    attr_roles: Vec<Option<AttrRole>>,
    /// The label attributes of the sample being added (reused between samples).
    label_attrs: Vec<i32>,
    layout: Layout,
    /// The sum of the values added so far.
    total: i64,
}

impl<'a> BlockBuilder<'a> {
    /// A builder for `p`'s blocks; refused (before anything is interned) when its window or
    /// type cannot be stored.
    pub(super) fn new(cx: &'a Context<'a>, p: &'a Profile) -> Result<Self, Refusal> {
        window(p)?;
        let profile_type = profile_type_of(cx.d, p, cx.name_hint)?;
        check_profile_type(&profile_type, &cx.cfg.series)?;
        Ok(BlockBuilder {
            cx,
            p,
            profile_type,
            groups: HashMap::new(),
            single: vec![None; cx.d.attribute_table.len() + 1],
            blocks: Vec::new(),
            attr_roles: vec![None; cx.d.attribute_table.len()],
            label_attrs: Vec::new(),
            layout: Layout {
                labels: Vec::new(),
                members: Vec::new(),
            },
            total: 0,
        })
    }

    /// Adds sample `i`, `s`, to the block of its label set (opened if new): its stack interned
    /// through `remap`, its link checked (once per link table entry, in `link_memo`) or made
    /// from its span attribute.
    pub(super) fn add(
        &mut self,
        st: &mut State,
        remap: &mut Remap,
        link_memo: &mut [Option<LinkIds>],
        span_traces: &mut SpanTraces,
        i: usize,
        s: &Sample,
    ) -> Result<(), Refusal> {
        let d = self.cx.d;
        let node = st.services[self.cx.service as usize]
            .symbols
            .stack_of(d, remap, s.stack_index)
            .map_err(|e| format!("samples[{i}]: {e}"))?;
        let mut link = sample_link(st, d, link_memo, i, s)?;
        let (span, trace) = self.classify_attributes(i, s)?;
        if link.is_none() {
            // Only a span id: the trace the profile's links give that span, or bound to its
            // trace later, from the stored span.
            if let Some(sp) = span {
                let trace = trace.or_else(|| span_traces.get(d, &sp));
                link = Some(elide_known_trace(st, (trace.unwrap_or([0; 16]), sp)));
            }
        }
        let g = self.block_of_labels(st)?;
        let (block, links) = &mut self.blocks[g];
        let value = sample_value(s, i, &mut self.total)?;
        self.layout.members[g].push(i as u32);
        let link_ix = match link {
            None => 0,
            Some(ids) => *links.entry(ids).or_insert_with(|| {
                block.link_table.push(ids);
                block.link_table.len() as u32
            }),
        };
        block.nodes.push(node);
        block.values.push(value);
        block.links.push(link_ix);
        Ok(())
    }

    /// Sorts sample `s`'s attributes: its span and trace ids (the first of each), and its
    /// label attributes into `label_attrs` (sorted, once each).
    fn classify_attributes(&mut self, i: usize, s: &Sample) -> Result<SampleIds, Refusal> {
        let (d, link_keys) = (self.cx.d, self.cx.link_keys);
        self.label_attrs.clear();
        let (mut span, mut trace) = (None, None);
        for &a in &s.attribute_indices {
            // Classified once per attribute index; samples only look the class up.
            let x = usize::try_from(a)
                .ok()
                .filter(|&x| x < d.attribute_table.len())
                .ok_or_else(|| format!("samples[{i}]: attribute index {a} out of range"))?;
            if self.attr_roles[x].is_none() {
                let kv = &d.attribute_table[x];
                let key = dict_str(d, kv.key_strindex)?.to_owned();
                let r = kv.value.as_ref().and_then(sample_label_of).map(|v| {
                    let role = link_keys.role(&key, Some(&v));
                    (key, v, role)
                });
                self.attr_roles[x] = Some(r);
            }
            match self.attr_roles[x].as_ref().expect("classified just above") {
                Some((_, _, IdRole::SpanId(id))) => span = span.or(Some(*id)),
                Some((_, _, IdRole::TraceId(id))) => trace = trace.or(Some(*id)),
                // Id keys never become series labels, valid or not (cardinality).
                Some((k, _, IdRole::InvalidId))
                    if link_keys.span_id_keys.contains(k)
                        || link_keys.trace_id_keys.contains(k) => {}
                Some(_) => self.label_attrs.push(a),
                None => {}
            }
        }
        self.label_attrs.sort_unstable();
        self.label_attrs.dedup();
        Ok((span, trace))
    }

    /// The block of the current `label_attrs`, opened (its series made) when it is the first
    /// sample with them.
    fn block_of_labels(&mut self, st: &mut State) -> Result<usize, Refusal> {
        // Attribute indices were checked against the table by `classify_attributes`.
        let slot = match self.label_attrs[..] {
            [] => Some(0),
            [a] => Some(a as usize + 1),
            _ => None,
        };
        let found = match slot {
            Some(k) => self.single[k],
            None => self.groups.get(&self.label_attrs).copied(),
        };
        if let Some(g) = found {
            return Ok(g);
        }
        let cfg = self.cx.cfg;
        // Checked before the series is made: a profile over the limit adds none past it.
        ProfileLimits {
            max_series: cfg.max_profile_series,
            ..ProfileLimits::NONE
        }
        .allow(Measure::Series, self.blocks.len() + 1)
        .map_err(|e| Refusal::limit(e.to_string()))?;
        let roles = &self.attr_roles;
        let attrs = self.label_attrs.iter().filter_map(|a| {
            let (k, v, _) = roles[*a as usize].as_ref()?.as_ref()?;
            Some((k.clone(), v.clone()))
        });
        let (block, labels) = self.open_block(st, attrs)?;
        // A block's distinct links are at most the profile's (no rehash as it fills).
        let links = HashMap::with_capacity(self.cx.d.link_table.len().min(self.p.samples.len()));
        let g = self.push_block(block, labels, links);
        match slot {
            Some(k) => self.single[k] = Some(g),
            None => {
                self.groups.insert(self.label_attrs.clone(), g);
            }
        }
        Ok(g)
    }

    /// A new block of the profile's window, in the series of its service with the base labels
    /// and `attrs` (made if new), without samples yet; and the series' labels.
    fn open_block(
        &self,
        st: &mut State,
        attrs: impl Iterator<Item = (String, String)>,
    ) -> Result<(Block, Vec<(String, String)>), Refusal> {
        let cx = self.cx;
        let (time_ns, duration_ns) = window(self.p)?;
        let mut labels = cx.base_labels.to_vec();
        labels.push((
            SERVICE_LABEL.to_owned(),
            st.services[cx.service as usize].name.clone(),
        ));
        labels.extend(attrs);
        labels.sort();
        labels.dedup_by(|a, b| a.0 == b.0);
        check_labels(&labels, &cx.cfg.series)?;
        let key = SeriesKey {
            service: cx.service,
            profile_type: self.profile_type.clone(),
            labels: labels.clone(),
        };
        let series = new_series(st, key, cx.cfg.series.max_series)?;
        let block = Block {
            series,
            time_ns,
            duration_ns,
            period: self.p.period,
            ..Default::default()
        };
        Ok((block, labels))
    }

    /// Adds `block` (of series `labels`) with no members yet; its index.
    fn push_block(
        &mut self,
        block: Block,
        labels: Vec<(String, String)>,
        links: HashMap<LinkIds, u32>,
    ) -> usize {
        self.layout.labels.push(labels);
        self.layout.members.push(Vec::new());
        self.blocks.push((block, links));
        self.blocks.len() - 1
    }

    /// The blocks, each with its samples ordered ([`order_samples`]), and their layout.
    pub(super) fn finish(mut self, st: &mut State) -> Result<(Vec<Block>, Layout), Refusal> {
        if self.p.samples.is_empty() {
            // A window without samples (a CPU profile of an idle process) is kept as an empty
            // block: it tells a span that used no CPU in it from one no profile covers.
            let (block, labels) = self.open_block(st, std::iter::empty())?;
            self.push_block(block, labels, HashMap::new());
        }
        let mut layout = self.layout;
        let blocks = self
            .blocks
            .into_iter()
            .zip(&mut layout.members)
            .map(|((mut b, _), members)| {
                let order = order_samples(&mut b);
                *members = order.iter().map(|&i| members[i as usize]).collect();
                b
            })
            .collect();
        Ok((blocks, layout))
    }
}

/// Sample `i`'s link from the link table: checked and elided (`elide_known_trace`) once per
/// entry, in `link_memo`; `None` for `link_index` 0.
fn sample_link(
    st: &State,
    d: &ProfilesDictionary,
    link_memo: &mut [Option<LinkIds>],
    i: usize,
    s: &Sample,
) -> Result<Option<LinkIds>, Refusal> {
    if s.link_index == 0 {
        return Ok(None);
    }
    let x = usize::try_from(s.link_index)
        .ok()
        .filter(|&x| x < d.link_table.len())
        .ok_or_else(|| {
            format!(
                "samples[{i}].link_index {} out of range ({} links)",
                s.link_index,
                d.link_table.len()
            )
        })?;
    if link_memo[x].is_none() {
        let l = &d.link_table[x];
        match (
            <[u8; 16]>::try_from(l.trace_id.as_slice()),
            <[u8; 8]>::try_from(l.span_id.as_slice()),
        ) {
            (Ok(t), Ok(sp)) if sp != [0; 8] => {
                link_memo[x] = Some(elide_known_trace(st, (t, sp)));
            }
            (Ok(_), Ok(_)) => {
                return Err(format!(
                    "samples[{i}]: link {} has an all-zero span id (a sample without \
                     a span has link_index 0)",
                    s.link_index
                )
                .into())
            }
            _ => {
                return Err(format!(
                    "samples[{i}]: link {} has ids of {} and {} bytes (need 16 and 8)",
                    s.link_index,
                    l.trace_id.len(),
                    l.span_id.len()
                )
                .into())
            }
        }
    }
    Ok(link_memo[x])
}

fn dict_str(d: &ProfilesDictionary, i: i32) -> Result<&str, Invalid> {
    usize::try_from(i)
        .ok()
        .and_then(|i| d.string_table.get(i))
        .map(String::as_str)
        .ok_or(Invalid::StringOutOfRange {
            index: i,
            len: d.string_table.len(),
        })
}

/// The link as a block stores it: without its trace id when the span, stored in the active
/// segment, names the same trace. Queries bind such a link to the stored span's trace (late
/// binding), so nothing is lost, and 16 of the link's 24 random bytes are not written.
///
/// Only the active segment's spans count: the block is written to that segment too, so the
/// span lives exactly as long as the block (retention and compaction act on whole segments,
/// blocks and spans together). A span in an older segment could be deleted by retention
/// while the block lives on, taking the trace id with it; such links keep their trace id.
fn elide_known_trace(st: &State, (trace, span): LinkIds) -> LinkIds {
    match st.active.spans().get(&span) {
        Some(s) if trace != [0; 16] && s.trace_id == trace => ([0; 16], span),
        _ => (trace, span),
    }
}

/// The trace of each span that a dictionary's links name with one, gathered on first need.
///
/// A sample that names its span but not its trace belongs to the trace the same profile
/// gives that span elsewhere: a span has one trace. SDKs that set a thread's span and trace
/// labels one call at a time (pyroscope-otel's span processor) leave such samples when the
/// profiler samples the thread between the calls; with this, trace queries find them even
/// when no span record arrives to bind them to their trace.
#[derive(Default)]
pub(super) struct SpanTraces(Option<HashMap<[u8; 8], [u8; 16]>>);

impl SpanTraces {
    pub(super) fn get(&mut self, d: &ProfilesDictionary, span: &[u8; 8]) -> Option<[u8; 16]> {
        let traces = self.0.get_or_insert_with(|| {
            d.link_table
                .iter()
                .filter_map(|l| {
                    let span = <[u8; 8]>::try_from(l.span_id.as_slice()).ok()?;
                    let trace = <[u8; 16]>::try_from(l.trace_id.as_slice()).ok()?;
                    (trace != [0; 16]).then_some((span, trace))
                })
                .collect()
        });
        traces.get(span).copied()
    }
}

/// How a profile's samples were split into blocks, for a profile with the same samples and
/// other values (the next sample type of one pprof) to reuse: each block's series labels, and
/// the indices of its samples in the profile, in block order.
pub(super) struct Layout {
    /// Each block's series labels.
    pub labels: Vec<Vec<(String, String)>>,
    /// Each block's samples, as indices into the profile.
    pub members: Vec<Vec<u32>>,
}

/// Sample `i`'s value: the sum of its values, or its number of timestamps when it has none;
/// added to `total`, the profile's so far. A negative value (profiles count or measure what
/// happened) and a total past [`MAX_PROFILE_TOTAL`] are refused.
pub(super) fn sample_value(
    s: &spanprof_format::otlp::Sample,
    i: usize,
    total: &mut i64,
) -> Result<i64, Invalid> {
    let value = if s.values.is_empty() {
        s.timestamps_unix_nano.len() as i64
    } else {
        let mut sum = 0i64;
        for &v in &s.values {
            if v < 0 {
                return Err(Invalid::NegativeValue {
                    sample: i,
                    value: v,
                });
            }
            sum = sum.saturating_add(v);
        }
        sum
    };
    *total = total.saturating_add(value);
    if *total > MAX_PROFILE_TOTAL {
        return Err(Invalid::TotalTooLarge { sample: i });
    }
    Ok(value)
}

/// `p`'s time and duration as the store keeps them: signed nanoseconds, up to the year 2262
/// (a later time was stored as a negative one, acknowledged and never found).
pub(super) fn window(p: &spanprof_format::otlp::Profile) -> Result<(i64, i64), Invalid> {
    match (
        i64::try_from(p.time_unix_nano),
        i64::try_from(p.duration_nano),
    ) {
        (Ok(time), Ok(duration)) if time.checked_add(duration).is_some() => Ok((time, duration)),
        _ => Err(Invalid::PastLatestTime {
            time: p.time_unix_nano,
            duration: p.duration_nano,
        }),
    }
}

/// The profile type of `p`, checked.
pub(super) fn profile_type_of(
    d: &ProfilesDictionary,
    p: &spanprof_format::otlp::Profile,
    name_hint: Option<&str>,
) -> Result<ProfileTypeId, Invalid> {
    let st_type = p.sample_type.unwrap_or_default();
    let pt = p.period_type.unwrap_or_default();
    let profile_type = ProfileTypeId::new(
        (
            dict_str(d, st_type.type_strindex)?,
            dict_str(d, st_type.unit_strindex)?,
        ),
        (
            dict_str(d, pt.type_strindex)?,
            dict_str(d, pt.unit_strindex)?,
        ),
        name_hint,
    );
    if profile_type.sample_type.is_empty() {
        return Err(Invalid::NoSampleType);
    }
    // `:` separates the parts of a type id: one inside a part made an id that named another
    // type, and that no query could name.
    for part in [
        &profile_type.name,
        &profile_type.sample_type,
        &profile_type.sample_unit,
        &profile_type.period_type,
        &profile_type.period_unit,
    ] {
        if part.contains(':') {
            return Err(Invalid::ColonInType { part: shown(part) });
        }
    }
    Ok(profile_type)
}

/// Orders a block's samples by stack node, then link. Their order means nothing (every answer
/// sums them), and in this order the block encodes node differences that are mostly tiny:
/// measured on 1,000 Go CPU profiles (`tests/store_disk.rs`), 36.1 % → 32.9 % of the gzipped
/// pprof on disk (before record link tables).
///
/// Returns the new order: for each position, the sample's position before.
fn order_samples(b: &mut Block) -> Vec<u32> {
    // (node, link) packed in one integer: one compare per step, and equal keys may go in any
    // order.
    let mut order: Vec<(u64, u32)> = (0..b.nodes.len())
        .map(|i| {
            (
                (u64::from(b.nodes[i]) << 32) | u64::from(b.links[i]),
                i as u32,
            )
        })
        .collect();
    order.sort_unstable_by_key(|&(key, _)| key);
    b.nodes = order.iter().map(|&(key, _)| (key >> 32) as u32).collect();
    b.links = order.iter().map(|&(key, _)| key as u32).collect();
    b.values = order.iter().map(|&(_, i)| b.values[i as usize]).collect();
    order.into_iter().map(|(_, i)| i).collect()
}
