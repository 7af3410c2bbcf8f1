//! The store's size target, measured: "on disk ≤ 25 % of the gzipped pprof bytes that went
//! in, for a stream of 1,000 consecutive CPU profiles of the same program (span ids differing
//! per request)". The stream is the real Go CPU profile `testdata/go/cpu-10s.pb.gz` with fresh
//! span and trace ids per profile (same shape: 235 spans in 159 traces, 76 of them a request
//! span and its child), ingested linked, in two scenarios: (a) each profile's spans stored
//! first, (b) no spans at all. A third store holding only the spans tells apart what the
//! profiles take from what the spans themselves take (spans are not pprof bytes).
//!
//! `cargo test -p spanprof-store --test it store_disk:: -- --nocapture` prints the ratios.
//! [`disk_bytes_against_gzipped_pprof`] asserts the 25 % target for the profiles with spans
//! stored first (reached: 21.7 %), guards what is reached without spans (37.5 %), and checks
//! that the encoding changes no answer.
//!
//! Before, every profile's 235 span ids (8 random bytes each) were stored twice, once in the
//! block of each of the profile's two sample types (`samples/count`, `cpu/nanoseconds`),
//! because a block was read on its own: 3,760 B per profile, 22.6 % of the 16,628 B of gzipped
//! pprof, and the profiles took 32.9 % (78.1 % without spans, where the trace ids of traces
//! split over two label sets were stored four times). Now a record holds one link table that
//! its blocks index into, so the ids are stored once per profile; the span ids are 11.3 %.

use std::collections::HashMap;
use std::path::Path;

use spanprof_format::link::{to_hex, IdRole};
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use spanprof_format::{pprof, Batch, LinkConfig};
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, Store, StoreConfig};
use spanprof_store::FlameTree;

/// A 10 s Go CPU profile under load: 598 samples, 235 spans of 159 traces (76 traces hold a
/// `GET /cpu-heavy` span and its `sortWork` child, the rest one span each).
const GO_CPU: &[u8] = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");

/// Profiles in the stream.
const PROFILES: u64 = 1_000;

/// Go CPU profiles of 10 s, back to back.
const STEP_NS: i64 = 10_000_000_000;

const SERVICE: &str = "goapp";

/// The target for the profiles' share of the gzipped pprof on disk.
const TARGET: f64 = 0.25;

/// Reached (measured 21.7 % and 37.5 %), with a little room for noise in the compression.
const REACHED_WITH_SPANS: f64 = 0.225;
const REACHED_NO_SPANS: f64 = 0.385;

/// One span of the template profile.
struct TemplateSpan {
    /// String-table index of its id.
    string: usize,
    /// Its trace (index into `Template::traces`).
    trace: Option<usize>,
    /// Its parent (index into `Template::spans`), inside the same trace.
    parent: Option<usize>,
    name: String,
}

/// The real profile and where its ids are, so every profile of the stream gets fresh ones.
struct Template {
    p: pprof::Profile,
    spans: Vec<TemplateSpan>,
    /// String-table index of each trace id.
    traces: Vec<usize>,
}

impl Template {
    fn new() -> Template {
        let p = pprof::decode(GO_CPU, 64 << 20).expect("testdata profile decodes");
        let links = LinkConfig::default();
        let mut spans: Vec<TemplateSpan> = Vec::new();
        let mut traces: Vec<usize> = Vec::new();
        for s in &p.sample {
            let (mut span, mut trace, mut name) = (None, None, String::new());
            for l in &s.label {
                let key = p.str(l.key).unwrap_or("");
                let value = p.str(l.str);
                match links.role(key, value) {
                    IdRole::SpanId(_) => span = Some(l.str as usize),
                    IdRole::TraceId(_) => trace = Some(l.str as usize),
                    _ if links.span_name_keys.iter().any(|k| k == key) => {
                        name = value.unwrap_or("").to_owned()
                    }
                    _ => {}
                }
            }
            let trace = trace.map(|t| match traces.iter().position(|&x| x == t) {
                Some(i) => i,
                None => {
                    traces.push(t);
                    traces.len() - 1
                }
            });
            if let Some(sp) = span.filter(|sp| !spans.iter().any(|s| s.string == *sp)) {
                spans.push(TemplateSpan {
                    string: sp,
                    trace,
                    parent: None,
                    name,
                });
            }
        }
        // The shape of the original: a trace holds one request span (`GET /…`) and at most
        // one span below it (`sortWork`). Keep it, with the child pointing at the request.
        for t in 0..traces.len() {
            let of_trace: Vec<usize> = (0..spans.len())
                .filter(|&j| spans[j].trace == Some(t))
                .collect();
            assert!(
                of_trace.len() <= 2,
                "trace {t} has {} spans",
                of_trace.len()
            );
            if let [a, b] = of_trace[..] {
                let (root, child) = if spans[a].name.starts_with("GET ") {
                    (a, b)
                } else {
                    (b, a)
                };
                spans[child].parent = Some(root);
            }
        }
        Template { p, spans, traces }
    }

    /// Span `j` of profile `k`: random-looking, never zero.
    fn span_id(&self, k: u64, j: usize) -> [u8; 8] {
        (mix(0x5350_414e ^ (k << 20 | j as u64)) | 1).to_be_bytes()
    }

    /// Trace `t` of profile `k`.
    fn trace_id(&self, k: u64, t: usize) -> [u8; 16] {
        let n = k << 20 | t as u64;
        let (hi, lo) = (mix(0x7472_6163 ^ n), mix(!n) | 1);
        ((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes()
    }

    /// Profile `k` of the stream: the template with fresh ids, 10 s after profile `k - 1`.
    fn pprof(&self, k: u64) -> pprof::Profile {
        let mut p = self.p.clone();
        for (j, s) in self.spans.iter().enumerate() {
            p.string_table[s.string] = to_hex(&self.span_id(k, j));
        }
        for (t, &string) in self.traces.iter().enumerate() {
            p.string_table[string] = to_hex(&self.trace_id(k, t));
        }
        p.time_nanos = self.p.time_nanos + k as i64 * STEP_NS;
        p
    }

    /// The spans of profile `k`, as the trace pipeline stores them.
    fn span_records(&self, k: u64) -> Vec<SpanRecord> {
        let start_ns = (self.p.time_nanos + k as i64 * STEP_NS) as u64;
        self.spans
            .iter()
            .enumerate()
            .map(|(j, s)| SpanRecord {
                trace_id: s.trace.map_or_else(
                    // A span id without a trace id in the profile: its trace is only known
                    // from the span.
                    || self.trace_id(k, self.traces.len() + j),
                    |t| self.trace_id(k, t),
                ),
                span_id: self.span_id(k, j),
                parent_span_id: s.parent.map(|p| self.span_id(k, p)),
                name: s.name.clone(),
                service: SERVICE.to_owned(),
                start_ns: start_ns + j as u64 * 1_000_000,
                end_ns: start_ns + j as u64 * 1_000_000 + 40_000_000,
                kind: if s.parent.is_some() { 1 } else { 2 },
                ..Default::default()
            })
            .collect()
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn resource() -> Resource {
    Resource {
        attributes: vec![KeyValue {
            key: "service.name".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(SERVICE.into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Profile `k` converted and linked as the receiver does.
fn otlp(p: &pprof::Profile) -> ProfilesData {
    let mut batch = Batch::new(Some(LinkConfig::default()));
    batch.add_pprof(p, resource()).expect("profile converts");
    batch.finish().0
}

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.sync = false;
    c
}

/// What goes into a store.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// Each profile's spans, then the profile.
    SpansFirst,
    /// Profiles only.
    NoSpans,
    /// Spans only (what the spans themselves take, to tell apart from the profiles).
    SpansOnly,
}

/// Fills a store in `dir`; returns its bytes on disk.
fn fill(t: &Template, profiles: &[pprof::Profile], dir: &Path, scenario: Scenario) -> u64 {
    let (store, _) = Store::open(config(dir)).unwrap();
    for (k, p) in profiles.iter().enumerate() {
        if scenario != Scenario::NoSpans {
            store.ingest(&[], t.span_records(k as u64)).unwrap();
        }
        if scenario != Scenario::SpansOnly {
            let r = store.ingest(&[&otlp(p)], Vec::new()).unwrap();
            assert_eq!(r.rejected_profiles, 0, "{:?}", r.problems);
        }
    }
    store.stats().disk_bytes
}

/// Frame names of a pprof location, caller first (as the store names them).
fn frames_of(p: &pprof::Profile, location: u64, out: &mut Vec<String>) {
    let l = p.location.iter().find(|l| l.id == location).unwrap();
    if l.line.is_empty() {
        out.push(format!("0x{:x}", l.address));
        return;
    }
    for line in l.line.iter().rev() {
        let f = p
            .function
            .iter()
            .find(|f| f.id == line.function_id)
            .unwrap();
        let name = if f.name != 0 { f.name } else { f.system_name };
        out.push(p.str(name).unwrap().to_owned());
    }
}

/// The CPU flame graph of the samples of `p` labelled with any of `spans`, summed straight
/// from the pprof.
fn pprof_flame(p: &pprof::Profile, spans: &[String]) -> FlameTree {
    let cpu = p
        .sample_type
        .iter()
        .position(|v| p.str(v.r#type) == Some("cpu"))
        .unwrap();
    let mut tree = FlameTree::new();
    let mut frames = Vec::new();
    for s in &p.sample {
        let labelled =
            |l: &pprof::Label| p.str(l.str).is_some_and(|v| spans.iter().any(|x| x == v));
        if !s.label.iter().any(labelled) {
            continue;
        }
        frames.clear();
        for &l in s.location_id.iter().rev() {
            frames_of(p, l, &mut frames);
        }
        tree.add(&frames, s.value[cpu] as u64);
    }
    tree
}

/// Bytes of the stream and of the stores.
struct Measured {
    /// Gzipped pprof of all profiles.
    gzipped: u64,
    /// Store (a): each profile's spans, then the profile.
    spans_first: u64,
    /// Store (b): profiles only.
    no_spans: u64,
    /// A store of the spans only.
    spans_only: u64,
}

impl Measured {
    fn share(&self, bytes: u64) -> f64 {
        bytes as f64 / self.gzipped as f64
    }

    /// What the profiles take in store (a): its bytes less the spans' own.
    fn profiles_with_spans(&self) -> f64 {
        self.share(self.spans_first - self.spans_only)
    }
}

/// The size of `p` gzipped by zlib's default level (6): the yardstick the ratios are against,
/// fixed here rather than taken from `pprof::encode_gzip`, whose encoder is ours to change
/// (libdeflate's level 6 writes 8 % less, which moved every ratio up with no byte more on
/// disk). Go's runtime writes at `BestSpeed`, larger still: 19,020 B for the template
/// against 16,628 B here, so the ratios are conservative.
fn gzipped_len(p: &pprof::Profile) -> usize {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&pprof::encode(p)).unwrap();
    enc.finish().unwrap().len()
}

/// Fills the stores, prints the ratios, and checks that answers survived the encoding.
fn measure() -> Measured {
    let t = Template::new();
    assert_eq!(t.p.sample.len(), 598);
    let two_span_traces = (0..t.traces.len())
        .filter(|&x| t.spans.iter().filter(|s| s.trace == Some(x)).count() == 2)
        .count();
    assert_eq!(
        (t.spans.len(), t.traces.len(), two_span_traces),
        (235, 159, 76)
    );
    let profiles: Vec<pprof::Profile> = (0..PROFILES).map(|k| t.pprof(k)).collect();
    let gzipped: u64 = profiles.iter().map(|p| gzipped_len(p) as u64).sum();

    let dirs: HashMap<&str, tempfile::TempDir> = ["a", "b", "spans"]
        .into_iter()
        .map(|n| (n, tempfile::tempdir().unwrap()))
        .collect();
    // The three stores fill at once (each in its own directory): the test took 16 s of one
    // core alone, the longest of its binary by far.
    let m = std::thread::scope(|scope| {
        let fill_in = |dir: &'static str, scenario| {
            let (t, profiles, path) = (&t, &profiles, dirs[dir].path());
            scope.spawn(move || fill(t, profiles, path, scenario))
        };
        let (a, b, spans) = (
            fill_in("a", Scenario::SpansFirst),
            fill_in("b", Scenario::NoSpans),
            fill_in("spans", Scenario::SpansOnly),
        );
        Measured {
            gzipped,
            spans_first: a.join().unwrap(),
            no_spans: b.join().unwrap(),
            spans_only: spans.join().unwrap(),
        }
    });
    println!(
        "{PROFILES} profiles of {} samples, {} spans in {} traces ({two_span_traces} of 2 spans); \
         gzipped pprof {gzipped} B ({} B each)",
        t.p.sample.len(),
        t.spans.len(),
        t.traces.len(),
        gzipped / PROFILES,
    );
    println!(
        "(a) spans first: {} B on disk = {:.1} % of the gzipped pprof; the profiles' part \
         (less the spans' own {} B = {:.1} %): {} B = {:.1} %",
        m.spans_first,
        100.0 * m.share(m.spans_first),
        m.spans_only,
        100.0 * m.share(m.spans_only),
        m.spans_first - m.spans_only,
        100.0 * m.profiles_with_spans(),
    );
    println!(
        "(b) no spans:    {} B on disk = {:.1} % of the gzipped pprof",
        m.no_spans,
        100.0 * m.share(m.no_spans),
    );

    // The answers survive the encoding: after reopening, a span's flame graph equals the one
    // summed from the pprof samples carrying its id, and so does its trace's.
    let k = PROFILES / 2;
    let j = t
        .spans
        .iter()
        .position(|s| {
            s.name.starts_with("GET ")
                && t.spans
                    .iter()
                    .any(|c| c.parent.is_some() && c.trace == s.trace)
        })
        .unwrap();
    let span = t.span_id(k, j);
    let trace = t.trace_id(k, t.spans[j].trace.unwrap());
    let of_trace: Vec<String> = (0..t.spans.len())
        .filter(|&x| t.spans[x].trace == t.spans[j].trace)
        .map(|x| to_hex(&t.span_id(k, x)))
        .collect();
    assert_eq!(of_trace.len(), 2);
    let p = &profiles[k as usize];
    let want_span = pprof_flame(p, &[to_hex(&span)]).to_collapsed();
    let want_trace = pprof_flame(p, &of_trace).to_collapsed();
    assert!(!want_span.is_empty() && want_trace.len() > want_span.len());
    for dir in ["a", "b"] {
        let (store, report) = Store::open(config(dirs[dir].path())).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let by_span = Selection {
            span_ids: vec![span],
            profile_type: Some("cpu".into()),
            ..Default::default()
        };
        let got = store.flame_graph(&by_span).unwrap().0.to_collapsed();
        assert_eq!(got, want_span, "span flame graph, scenario {dir}");
        let by_trace = Selection {
            trace_id: Some(trace),
            profile_type: Some("cpu".into()),
            ..Default::default()
        };
        let got = store.flame_graph(&by_trace).unwrap().0.to_collapsed();
        assert_eq!(got, want_trace, "trace flame graph, scenario {dir}");
        // The export names the trace, whether the link kept it (b) or it is bound from the
        // stored span (a).
        let exported = store.pprof(&by_span).unwrap();
        let trace_hex = to_hex(&trace);
        assert!(
            exported.sample.iter().all(|s| s
                .label
                .iter()
                .any(|l| exported.str(l.key) == Some("trace_id")
                    && exported.str(l.str) == Some(trace_hex.as_str()))),
            "exported samples of the span name its trace, scenario {dir}"
        );
    }
    m
}

/// The target for scenario (a), and what is reached now, so that a change making the store
/// larger fails here.
#[test]
fn disk_bytes_against_gzipped_pprof() {
    let m = measure();
    assert!(
        m.profiles_with_spans() <= TARGET,
        "(a) the profiles take {:.1} % of the gzipped pprof on disk, more than the {:.0} % target",
        100.0 * m.profiles_with_spans(),
        100.0 * TARGET
    );
    assert!(
        m.profiles_with_spans() <= REACHED_WITH_SPANS,
        "(a) the profiles take {:.1} % of the gzipped pprof on disk, more than the {:.1} % reached",
        100.0 * m.profiles_with_spans(),
        100.0 * REACHED_WITH_SPANS
    );
    assert!(
        m.share(m.no_spans) <= REACHED_NO_SPANS,
        "(b) the profiles take {:.1} % of the gzipped pprof on disk, more than the {:.1} % reached",
        100.0 * m.share(m.no_spans),
        100.0 * REACHED_NO_SPANS
    );
}
