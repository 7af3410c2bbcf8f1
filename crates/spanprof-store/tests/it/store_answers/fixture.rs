//! The real Go CPU profile `testdata/go/cpu-10s.pb.gz` (10 s of `testprograms/goapp` under
//! load, samples labelled with trace/span ids) as the store's tests ingest it, and the answers
//! expected of the store, summed straight from the decoded pprof samples' labels.
//!
//! A [`Copy`] is the profile with its id labels rewritten (so every copy has its own spans and
//! traces), its time shifted and its values scaled, plus the [`SpanRecord`]s that meet its
//! samples: names from the span-name labels, `sortWork` under the `GET /cpu-heavy` span of its
//! trace, durations chosen here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use spanprof_format::link::{parse_id, to_hex};
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use spanprof_format::pprof;
use spanprof_format::{Batch, LinkConfig};
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, SpanFilter, Store, StoreConfig};

/// `service.name` of the resource, and the service of every span.
pub const SERVICE: &str = "goapp";
/// A second resource attribute: it becomes a series label.
pub const ENVIRONMENT: (&str, &str) = ("deployment.environment", "staging");
/// The Pyroscope ids of the two types a Go CPU profile carries.
pub const CPU_TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
pub const COUNT_TYPE: &str = "process_cpu:samples:count:cpu:nanoseconds";
/// Go's CPU sampling period (100 Hz), in nanoseconds.
pub const PERIOD_NS: i64 = 10_000_000;
pub const MS: i64 = 1_000_000;
pub const SEC: i64 = 1_000_000_000;

pub const HEAVY: &str = "GET /cpu-heavy";
pub const SORT: &str = "sortWork";
pub const LIGHT: &str = "GET /cpu-light";
/// Spans without samples, added under the first `GET /cpu-heavy` span of each copy.
pub const IDLE: &str = "db.query";
pub const IDLE_NS: u64 = 200 * MS as u64;
pub const SHORT_IDLE: &str = "cache.get";
pub const SHORT_IDLE_NS: u64 = 3 * MS as u64;
/// Duration given to the least-sampled `GET /cpu-light` span: shorter than one period.
pub const SHORTEST_LIGHT_NS: u64 = 4 * MS as u64;

/// Label keys as goapp writes them (OTel convention and Pyroscope's).
const SPAN_ID_KEYS: [&str; 2] = ["otel.profile.span_id", "span_id"];
const TRACE_ID_KEYS: [&str; 2] = ["otel.profile.trace_id", "trace_id"];
const SPAN_NAME_KEYS: [&str; 2] = ["otel.profile.span_name", "span_name"];

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/go/cpu-10s.pb.gz")
}

/// The gzipped profile as Go wrote it.
pub fn original_gz() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        std::fs::read(testdata()).unwrap_or_else(|e| panic!("{}: {e}", testdata().display()))
    })
}

pub fn original() -> &'static pprof::Profile {
    static PROFILE: OnceLock<pprof::Profile> = OnceLock::new();
    PROFILE.get_or_init(|| pprof::decode(original_gz(), 64 << 20).expect("decode cpu-10s.pb.gz"))
}

/// Column of sample type `ty` (`cpu`, `samples`) in the pprof samples.
pub fn column(p: &pprof::Profile, ty: &str) -> usize {
    p.sample_type
        .iter()
        .position(|t| p.str(t.r#type) == Some(ty))
        .unwrap_or_else(|| panic!("no sample type {ty}"))
}

/// The value of the first label of `s` under one of `keys`.
pub fn label<'p>(p: &'p pprof::Profile, s: &pprof::Sample, keys: &[&str]) -> Option<&'p str> {
    keys.iter().find_map(|k| {
        s.label
            .iter()
            .find(|l| p.str(l.key) == Some(*k))
            .and_then(|l| p.str(l.str))
    })
}

/// What the samples of one span add up to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanSamples {
    pub trace_id: [u8; 16],
    pub name: String,
    /// Sum of `cpu/nanoseconds`.
    pub cpu_ns: i64,
    /// Sum of `samples/count`: profiler ticks.
    pub ticks: i64,
}

/// Per span id, summed from the pprof samples' labels; also the unlinked remainder.
#[derive(Debug, Clone, Default)]
pub struct Sums {
    pub by_span: BTreeMap<[u8; 8], SpanSamples>,
    pub cpu_total: i64,
    pub ticks_total: i64,
    /// CPU of samples without a span id label.
    pub unlinked_cpu: i64,
}

pub fn sums(p: &pprof::Profile) -> Sums {
    let (cpu, count) = (column(p, "cpu"), column(p, "samples"));
    let mut out = Sums::default();
    for s in &p.sample {
        out.cpu_total += s.value[cpu];
        out.ticks_total += s.value[count];
        let Some(span) = label(p, s, &SPAN_ID_KEYS) else {
            out.unlinked_cpu += s.value[cpu];
            continue;
        };
        let span = parse_id::<8>(span).expect("span id label is 16 hex digits");
        let e = out.by_span.entry(span).or_default();
        e.trace_id = parse_id(label(p, s, &TRACE_ID_KEYS).expect("trace id label")).unwrap();
        e.name = label(p, s, &SPAN_NAME_KEYS)
            .expect("span name label")
            .to_owned();
        e.cpu_ns += s.value[cpu];
        e.ticks += s.value[count];
    }
    out
}

/// One copy of the real profile, converted and with its spans.
#[derive(Debug, Clone)]
pub struct Copy {
    pub pprof: pprof::Profile,
    pub data: ProfilesData,
    pub spans: Vec<SpanRecord>,
    pub sums: Sums,
    /// Profile start, ns since the Unix epoch.
    pub time_ns: i64,
}

impl Copy {
    /// Copy `n` (0 = the ids as Go wrote them), `shift_ns` later, values × `scale`.
    pub fn new(n: u16, shift_ns: i64, scale: i64) -> Copy {
        let mut p = original().clone();
        rewrite_ids(&mut p, n);
        p.time_nanos += shift_ns;
        for s in &mut p.sample {
            s.value.iter_mut().for_each(|v| *v *= scale);
        }
        let sums = sums(&p);
        let spans = spans_for(&sums, p.time_nanos, n);
        let mut batch = Batch::new(Some(LinkConfig::default()));
        batch.add_pprof(&p, resource()).expect("convert to OTLP");
        let (data, report) = batch.finish();
        assert_eq!(report.profiles, 2, "a Go CPU profile has two sample types");
        Copy {
            time_ns: p.time_nanos,
            pprof: p,
            data,
            spans,
            sums,
        }
    }

    pub fn span(&self, name: &str) -> &SpanRecord {
        self.spans.iter().find(|s| s.name == name).unwrap()
    }

    pub fn named(&self, name: &str) -> Vec<&SpanRecord> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    pub fn sampled(&self, id: &[u8; 8]) -> SpanSamples {
        self.sums.by_span.get(id).cloned().unwrap_or_default()
    }

    /// CPU ns of the samples of these spans.
    pub fn cpu_of<'a>(&self, ids: impl IntoIterator<Item = &'a [u8; 8]>) -> i64 {
        let ids: BTreeSet<&[u8; 8]> = ids.into_iter().collect();
        ids.into_iter().map(|id| self.sampled(id).cpu_ns).sum()
    }

    /// CPU ns of the samples of spans named `name`.
    pub fn cpu_named(&self, name: &str) -> i64 {
        let spans = self.named(name);
        self.cpu_of(spans.iter().map(|s| &s.span_id))
    }

    pub fn ingest(&self, store: &Store) {
        let r = store.ingest(&[&self.data], self.spans.clone()).unwrap();
        assert_eq!(
            (r.profiles, r.rejected_profiles),
            (2, 0),
            "{:?}",
            r.problems
        );
    }
}

pub fn resource() -> Resource {
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    };
    Resource {
        attributes: vec![
            kv("service.name", SERVICE),
            kv(ENVIRONMENT.0, ENVIRONMENT.1),
        ],
        ..Default::default()
    }
}

/// Gives copy `n > 0` its own ids: the first two id bytes become `n`. The rest of each id is
/// unique among the profile's ids and no original id starts with `n` (both checked), so
/// copies never share a span or trace.
fn rewrite_ids(p: &mut pprof::Profile, n: u16) {
    let id_keys: Vec<&str> = SPAN_ID_KEYS.iter().chain(&TRACE_ID_KEYS).copied().collect();
    let mut values = BTreeSet::new();
    for s in &p.sample {
        for l in &s.label {
            if id_keys.contains(&p.str(l.key).unwrap_or_default()) {
                values.insert(l.str as usize);
            }
        }
    }
    let tails: BTreeSet<&str> = values.iter().map(|&i| &p.string_table[i][4..]).collect();
    assert_eq!(
        tails.len(),
        values.len(),
        "two ids differ only in their first bytes"
    );
    if n == 0 {
        return;
    }
    let prefix = format!("{n:04x}");
    for i in values {
        let old = &p.string_table[i];
        assert!(!old.starts_with(&prefix), "copy {n} would repeat id {old}");
        p.string_table[i] = format!("{prefix}{}", &old[4..]);
    }
}

/// Spans for every span id of the samples, and two without samples.
///
/// Durations: `GET /cpu-heavy` 2 × its CPU + 40 ms, `sortWork` 2 × its CPU + 5 ms,
/// `GET /cpu-light` its CPU + 2 ms (the least sampled one: [`SHORTEST_LIGHT_NS`]); `+ i µs`
/// (`i` its rank by id) keeps every duration distinct.
fn spans_for(sums: &Sums, time_ns: i64, n: u16) -> Vec<SpanRecord> {
    let heavy_of_trace: BTreeMap<[u8; 16], [u8; 8]> = sums
        .by_span
        .iter()
        .filter(|(_, s)| s.name == HEAVY)
        .map(|(id, s)| (s.trace_id, *id))
        .collect();
    let least_light = sums
        .by_span
        .iter()
        .filter(|(_, s)| s.name == LIGHT)
        .min_by_key(|(id, s)| (s.cpu_ns, **id))
        .map(|(id, _)| *id);
    let start0 = time_ns as u64 + 100 * MS as u64;
    let mut spans: Vec<SpanRecord> = sums
        .by_span
        .iter()
        .enumerate()
        .map(|(i, (id, s))| {
            let cpu = s.cpu_ns as u64;
            let tie = i as u64 * 1_000;
            let duration = match s.name.as_str() {
                HEAVY => 2 * cpu + 40 * MS as u64 + tie,
                SORT => 2 * cpu + 5 * MS as u64 + tie,
                _ if Some(*id) == least_light => SHORTEST_LIGHT_NS,
                _ => cpu + 2 * MS as u64 + tie,
            };
            let start = start0 + (i as u64 * 45 * MS as u64) % (8 * SEC as u64);
            SpanRecord {
                trace_id: s.trace_id,
                span_id: *id,
                parent_span_id: (s.name == SORT)
                    .then(|| heavy_of_trace.get(&s.trace_id).copied())
                    .flatten(),
                name: s.name.clone(),
                service: SERVICE.into(),
                start_ns: start,
                end_ns: start + duration,
                kind: if s.name == SORT { 1 } else { 2 },
                ..Default::default()
            }
        })
        .collect();
    let parent = spans.iter().find(|s| s.name == HEAVY).unwrap().clone();
    for (tag, name, duration) in [(0xd0, IDLE, IDLE_NS), (0xc0, SHORT_IDLE, SHORT_IDLE_NS)] {
        let [hi, lo] = n.to_be_bytes();
        spans.push(SpanRecord {
            span_id: [tag, 0x1d, 0x1e, 0, 0, 0, hi, lo],
            parent_span_id: Some(parent.span_id),
            name: name.into(),
            start_ns: parent.start_ns + MS as u64,
            end_ns: parent.start_ns + MS as u64 + duration,
            kind: 3,
            ..parent.clone()
        });
    }
    spans
}

/// A store in `dir` with default settings.
pub fn open(dir: &Path) -> Store {
    open_with(StoreConfig::new(dir)).0
}

pub fn open_with(cfg: StoreConfig) -> (Store, spanprof_store::store::OpenReport) {
    Store::open(cfg).expect("open store")
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("store-answers-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// Total of the selection's CPU flame graph, in ns.
pub fn cpu(store: &Store, sel: &Selection) -> i64 {
    let (tree, _) = store
        .flame_graph(sel)
        .unwrap_or_else(|e| panic!("flame graph of {sel:?}: {e}"));
    tree.total() as i64
}

pub fn of_spans<'a>(ids: impl IntoIterator<Item = &'a [u8; 8]>) -> Selection {
    Selection {
        span_ids: ids.into_iter().copied().collect(),
        ..Default::default()
    }
}

pub fn of_filter(f: SpanFilter) -> Selection {
    Selection {
        span_filter: Some(f),
        ..Default::default()
    }
}

pub fn hex(id: &[u8]) -> String {
    to_hex(id)
}

/// The stored span with this id.
pub fn stored_span(store: &Store, id: &[u8; 8]) -> Option<SpanRecord> {
    store.span(id).expect("span lookup")
}

/// The stored spans of a trace, in start order.
pub fn stored_trace(store: &Store, id: &[u8; 16]) -> Vec<SpanRecord> {
    store.trace(id).expect("trace lookup")
}

/// Whether any stored sample is linked to this span.
pub fn has_samples(store: &Store, id: &[u8; 8]) -> bool {
    store.has_samples(id).expect("has_samples")
}
