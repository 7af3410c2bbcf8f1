//! Export of a selection as a pprof profile, each service's symbols interned once into the
//! profile's tables.

use hashbrown::HashMap;
use spanprof_format::pprof;

use super::selection::Selection;
use super::SPAN_TIME_LOOKUPS;
use crate::store::{Store, StoreError};

impl Store {
    /// The selection as one pprof profile (for `go tool pprof`): one sample per stack and
    /// span, with `span_id` / `trace_id` labels (trace ids bound from stored spans).
    // Long: interns every stack's locations, functions and mappings into one pprof in one pass over the blocks.
    #[allow(clippy::too_many_lines)]
    pub fn pprof(&self, sel: &Selection) -> Result<pprof::Profile, StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        let mut b = PprofWriter::default();
        let t = &r.profile_type;
        let (ty, unit, pty, punit) = (
            b.s(&t.sample_type),
            b.s(&t.sample_unit),
            b.s(&t.period_type),
            b.s(&t.period_unit),
        );
        b.p.sample_type = vec![pprof::ValueType { r#type: ty, unit }];
        b.p.period_type = Some(pprof::ValueType {
            r#type: pty,
            unit: punit,
        });
        // Per series (whose labels the samples carry), stack and link.
        let mut samples: HashMap<(u32, u32, [u8; 16], [u8; 8]), i64> = HashMap::new();
        let mut window: Option<(i64, i64)> = None;
        drop(st);
        self.for_each_sample(&r, |block, i| {
            let link = match block.links[i] {
                0 => ([0; 16], [0; 8]),
                l => block.link_table[l as usize - 1],
            };
            let v = samples
                .entry((block.series, block.nodes[i], link.0, link.1))
                .or_default();
            *v = v.saturating_add(block.values[i]);
            b.p.period = block.period;
            let (s, e) = (
                block.time_ns,
                block.time_ns.saturating_add(block.duration_ns),
            );
            window = Some(window.map_or((s, e), |(a, z)| (a.min(s), z.max(e))));
        })?;
        let mut keys: Vec<_> = samples.keys().copied().collect();
        keys.sort_unstable();
        let elided = keys
            .iter()
            .filter(|(_, _, trace, span)| *trace == [0; 16] && *span != [0; 8])
            .map(|k| k.3)
            .collect();
        let traces = self.traces_of(elided)?;
        // The spans' own times, when there are few (see below).
        let mut of_spans: Option<(i64, i64)> = None;
        if let Some(spans) = r.spans.as_ref().filter(|s| s.len() <= SPAN_TIME_LOOKUPS) {
            for id in spans {
                if let Some(span) = self.span(id)? {
                    let (s, e) = (span.start_ns as i64, span.end_ns as i64);
                    of_spans = Some(of_spans.map_or((s, e), |(a, z)| (a.min(s), z.max(e))));
                }
            }
        }
        // Each series' service and labels and each stack's locations with the state locked
        // again (see `flame_graph`): there are far fewer of them than samples, which are made
        // unlocked (all of them, locked, stalled ingest for seconds).
        let mut of_series: HashMap<u32, Option<(u32, Vec<pprof::Label>)>> = HashMap::new();
        let mut stacks: HashMap<(u32, u32), Option<Vec<u64>>> = HashMap::new();
        {
            let st = self.state.read().expect("store state lock poisoned");
            for &(series, node, _, _) in &keys {
                let known = of_series.entry(series).or_insert_with(|| {
                    let sk = st.series.get(series as usize)?;
                    // The series' labels (span_name, the SDK's tags, service_name) but the
                    // internal ones (`__name__`, …), for go tool pprof's -tags and -tagfocus.
                    let labels = sk.labels.iter().filter(|(k, _)| !k.starts_with("__"));
                    let labels = labels.map(|(k, v)| pprof::Label {
                        key: b.s(k),
                        str: b.s(v),
                        ..Default::default()
                    });
                    Some((sk.service, labels.collect()))
                });
                let Some((service, _)) = *known else {
                    continue;
                };
                if stacks.contains_key(&(service, node)) {
                    continue;
                }
                let stack = st.services.get(service as usize).map(|s| {
                    let symbols = &s.symbols;
                    let mut location_id = Vec::new();
                    let mut n = node;
                    while n != 0 && location_id.len() < MAX_STACK_DEPTH {
                        let Some(x) = symbols.node(n) else { break };
                        location_id.push(b.location(service, symbols, x.location));
                        n = x.parent;
                    }
                    if n != 0 {
                        location_id.push(b.cut_location());
                    }
                    location_id
                });
                stacks.insert((service, node), stack);
            }
        }
        let (mut span_key, mut trace_key) = (None, None);
        for key @ (series, node, trace, span) in keys {
            let Some(Some((service, labels))) = of_series.get(&series) else {
                continue;
            };
            let Some(Some(location_id)) = stacks.get(&(*service, node)) else {
                continue;
            };
            let mut label = labels.clone();
            if span != [0; 8] {
                let trace = if trace == [0; 16] {
                    traces.get(&span).copied().unwrap_or(trace)
                } else {
                    trace
                };
                label.push(pprof::Label {
                    key: *span_key.get_or_insert_with(|| b.s("span_id")),
                    str: b.s(&spanprof_format::link::to_hex(&span)),
                    ..Default::default()
                });
                if trace != [0; 16] {
                    label.push(pprof::Label {
                        key: *trace_key.get_or_insert_with(|| b.s("trace_id")),
                        str: b.s(&spanprof_format::link::to_hex(&trace)),
                        ..Default::default()
                    });
                }
            }
            b.p.sample.push(pprof::Sample {
                location_id: location_id.clone(),
                value: vec![samples[&key]],
                label,
            });
        }
        // The profile's time: the selected spans' own (go tool pprof then says what share of
        // a span's duration was on CPU, not of the scrape window's), else the windows of the
        // profiles read.
        if let Some((s, e)) = of_spans.or(window) {
            b.p.time_nanos = s;
            b.p.duration_nanos = e - s;
        }
        Ok(b.p)
    }
}

/// Most frames (locations) of one stack an answer shows: a deeper stack keeps its leaf-most
/// ones, below one root frame named [`CUT_STACK_FRAME`] so that the cut shows.
pub const MAX_STACK_DEPTH: usize = 4096;

/// The root frame of a stack cut at [`MAX_STACK_DEPTH`] frames.
pub const CUT_STACK_FRAME: &str = "[stack cut: deeper than 4096 frames]";

/// Builds a pprof profile from symbol tables, one service's ids remapped at a time.
#[derive(Default)]
struct PprofWriter {
    p: pprof::Profile,
    strings: HashMap<String, i64>,
    locations: HashMap<(u32, u32), u64>,
    functions: HashMap<(u32, u32), u64>,
    mappings: HashMap<(u32, u32), u64>,
    /// The location of [`CUT_STACK_FRAME`], once made.
    cut: Option<u64>,
}

impl PprofWriter {
    /// The location standing for the frames of a stack past [`MAX_STACK_DEPTH`].
    fn cut_location(&mut self) -> u64 {
        if let Some(id) = self.cut {
            return id;
        }
        let function_id = self.p.function.len() as u64 + 1;
        let name = self.s(CUT_STACK_FRAME);
        self.p.function.push(pprof::Function {
            id: function_id,
            name,
            system_name: name,
            ..Default::default()
        });
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(pprof::Location {
            id,
            line: vec![pprof::Line {
                function_id,
                ..Default::default()
            }],
            ..Default::default()
        });
        self.cut = Some(id);
        id
    }

    pub(super) fn s(&mut self, v: &str) -> i64 {
        if self.p.string_table.is_empty() {
            self.p.string_table.push(String::new());
            self.strings.insert(String::new(), 0);
        }
        if let Some(&i) = self.strings.get(v) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(v.to_owned());
        self.strings.insert(v.to_owned(), i);
        i
    }

    pub(super) fn location(
        &mut self,
        service: u32,
        sym: &crate::symbols::SymbolTable,
        l: u32,
    ) -> u64 {
        if let Some(&id) = self.locations.get(&(service, l)) {
            return id;
        }
        let loc = sym.location(l).cloned().unwrap_or_default();
        let mapping_id = if loc.mapping == 0 {
            0
        } else {
            self.mapping(service, sym, loc.mapping)
        };
        let line = loc
            .lines
            .iter()
            .map(|&(f, line, column)| pprof::Line {
                function_id: self.function(service, sym, f),
                line,
                column,
            })
            .collect();
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(pprof::Location {
            id,
            mapping_id,
            address: loc.address,
            line,
            is_folded: false,
        });
        self.locations.insert((service, l), id);
        id
    }

    fn function(&mut self, service: u32, sym: &crate::symbols::SymbolTable, f: u32) -> u64 {
        if let Some(&id) = self.functions.get(&(service, f)) {
            return id;
        }
        let x = sym.function(f).copied().unwrap_or_default();
        let id = self.p.function.len() as u64 + 1;
        let (name, system_name, filename) = (
            self.s(sym.string(x.name)),
            self.s(sym.string(x.system_name)),
            self.s(sym.string(x.filename)),
        );
        self.p.function.push(pprof::Function {
            id,
            name,
            system_name,
            filename,
            start_line: x.start_line,
        });
        self.functions.insert((service, f), id);
        id
    }

    fn mapping(&mut self, service: u32, sym: &crate::symbols::SymbolTable, m: u32) -> u64 {
        if let Some(&id) = self.mappings.get(&(service, m)) {
            return id;
        }
        let x = sym.mapping(m).cloned().unwrap_or_default();
        let id = self.p.mapping.len() as u64 + 1;
        let (filename, build_id) = (
            self.s(sym.string(x.filename)),
            self.s(sym.string(x.build_id)),
        );
        self.p.mapping.push(pprof::Mapping {
            id,
            memory_start: x.memory_start,
            memory_limit: x.memory_limit,
            file_offset: x.file_offset,
            filename,
            build_id,
            has_functions: true,
            ..Default::default()
        });
        self.mappings.insert((service, m), id);
        id
    }
}
