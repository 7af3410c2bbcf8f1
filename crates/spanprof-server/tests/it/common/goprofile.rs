//! The real Go CPU profile in `testdata/go/cpu-10s.pb.gz` (samples labelled with span and
//! trace ids by the Go program), the answers expected of it computed straight from the
//! decoded pprof, and the spans we send for its span ids.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use spanprof_format::link::parse_id;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};
use spanprof_format::pprof;
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::trace::{
    encode_request_json, ExportTraceServiceRequest, ResourceSpans, ScopeSpans, Span,
};

use spanprof_testkit::server::TestServer;

/// The service name both the profile and the spans carry.
pub const SERVICE: &str = "goapp";
/// The CPU profile type id (the default type of a query).
pub const CPU_TYPE: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
/// The function the Go program burns most CPU in.
pub const HOT_FUNCTION: &str = "main.countPrimes";
/// Go's CPU sampling period, in ns.
pub const PERIOD_NS: i64 = 10_000_000;
/// A span with no samples, long enough to be sampled (5 periods).
pub const DB_SPAN: [u8; 8] = [0xdb; 8];
/// A span with no samples, shorter than one period.
pub const CACHE_SPAN: [u8; 8] = [0xca; 8];

/// One span we send, with what the profile says about it.
#[derive(Debug, Clone)]
pub struct SpanTruth {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// CPU of the samples labelled with this span, in ns.
    pub cpu_ns: i64,
    /// CPU of those samples with [`HOT_FUNCTION`] on the stack, in ns.
    pub hot_cum_ns: i64,
}

impl SpanTruth {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// The profile and everything expected of it.
pub struct GoData {
    pub profile: pprof::Profile,
    /// CPU of every sample, in ns.
    pub cpu_total_ns: i64,
    /// Self and total CPU of [`HOT_FUNCTION`] over the whole profile, in ns.
    pub hot_self_ns: i64,
    pub hot_cum_ns: i64,
    /// Every span sent, in trace order.
    pub spans: Vec<SpanTruth>,
}

fn label_str<'p>(p: &'p pprof::Profile, s: &pprof::Sample, keys: &[&str]) -> Option<&'p str> {
    s.label
        .iter()
        .find(|l| keys.contains(&p.str(l.key).unwrap_or("")))
        .and_then(|l| p.str(l.str))
}

/// Function names of a sample's stack, leaf (innermost inline) first.
fn frames<'p>(p: &'p pprof::Profile, s: &pprof::Sample) -> Vec<&'p str> {
    let mut out = Vec::new();
    for id in &s.location_id {
        let loc = p.location.iter().find(|l| l.id == *id).expect("location");
        for line in &loc.line {
            let f = p
                .function
                .iter()
                .find(|f| f.id == line.function_id)
                .expect("function");
            out.push(p.str(f.name).unwrap_or(""));
        }
    }
    out
}

impl GoData {
    pub fn load() -> GoData {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/go/cpu-10s.pb.gz"
        );
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let profile = pprof::decode(&bytes, 64 << 20).expect("a valid pprof");
        let cpu = profile
            .sample_type
            .iter()
            .position(|t| profile.str(t.r#type) == Some("cpu"))
            .expect("a cpu sample type");
        let mut cpu_total_ns = 0;
        let (mut hot_self_ns, mut hot_cum_ns) = (0, 0);
        // span -> (trace, name, cpu, hot cum)
        let mut labelled: BTreeMap<[u8; 8], ([u8; 16], String, i64, i64)> = BTreeMap::new();
        for s in &profile.sample {
            let v = s.value[cpu];
            cpu_total_ns += v;
            let stack = frames(&profile, s);
            let hot = stack.contains(&HOT_FUNCTION);
            if hot {
                hot_cum_ns += v;
            }
            if stack.first() == Some(&HOT_FUNCTION) {
                hot_self_ns += v;
            }
            let Some(span) = label_str(&profile, s, &["otel.profile.span_id", "span_id"]) else {
                continue;
            };
            let span = parse_id::<8>(span).expect("hex span id");
            let trace = label_str(&profile, s, &["otel.profile.trace_id", "trace_id"])
                .and_then(parse_id::<16>)
                .expect("every labelled sample has a trace id");
            let name = label_str(&profile, s, &["otel.profile.span_name", "span_name"])
                .expect("every labelled sample has a span name");
            let e = labelled
                .entry(span)
                .or_insert_with(|| (trace, name.to_owned(), 0, 0));
            assert_eq!(
                (e.0, e.1.as_str()),
                (trace, name),
                "one trace and name per span"
            );
            e.2 += v;
            if hot {
                e.3 += v;
            }
        }
        let spans = invent_spans(profile.time_nanos as u64, &labelled);
        GoData {
            profile,
            cpu_total_ns,
            hot_self_ns,
            hot_cum_ns,
            spans,
        }
    }

    pub fn span(&self, id: &[u8; 8]) -> &SpanTruth {
        self.spans
            .iter()
            .find(|s| s.span_id == *id)
            .expect("a known span")
    }

    /// `span`'s own time: its duration less the time its children with samples ran in it
    /// (between each two boundaries, its own and those children's, whether none runs).
    pub fn self_ns(&self, span: &SpanTruth) -> u64 {
        let children: Vec<&SpanTruth> = self
            .spans
            .iter()
            .filter(|c| c.parent == Some(span.span_id) && c.cpu_ns > 0)
            .collect();
        let mut cuts: Vec<u64> = children
            .iter()
            .flat_map(|c| [c.start_ns, c.end_ns])
            .chain([span.start_ns, span.end_ns])
            .filter(|t| (span.start_ns..=span.end_ns).contains(t))
            .collect();
        cuts.sort_unstable();
        cuts.windows(2)
            .filter(|w| {
                !children
                    .iter()
                    .any(|c| c.start_ns <= w[0] && w[1] <= c.end_ns)
            })
            .map(|w| w[1] - w[0])
            .sum()
    }

    /// Spans of `name`, longest first (then earliest start, then id: the server's order).
    pub fn longest_first(&self, name: &str) -> Vec<&SpanTruth> {
        let mut v: Vec<&SpanTruth> = self.spans.iter().filter(|s| s.name == name).collect();
        v.sort_by(|a, b| {
            b.duration_ns()
                .cmp(&a.duration_ns())
                .then(a.start_ns.cmp(&b.start_ns))
                .then(a.span_id.cmp(&b.span_id))
        });
        v
    }

    /// The heaviest span of each name (ties: the larger id).
    pub fn heaviest_per_name(&self) -> Vec<&SpanTruth> {
        let names: BTreeSet<&str> = self.spans.iter().map(|s| s.name.as_str()).collect();
        names
            .into_iter()
            .filter_map(|n| {
                self.spans
                    .iter()
                    .filter(|s| s.name == n && s.cpu_ns > 0)
                    .max_by_key(|s| (s.cpu_ns, s.span_id))
            })
            .collect()
    }

    /// Nearest-rank `p`th percentile of the durations of spans named `name`, in ns.
    pub fn duration_percentile(&self, name: &str, p: f64) -> u64 {
        let mut d: Vec<u64> = self
            .spans
            .iter()
            .filter(|s| s.name == name)
            .map(SpanTruth::duration_ns)
            .collect();
        d.sort_unstable();
        let rank = ((p * d.len() as f64 / 100.0).ceil() as usize).clamp(1, d.len());
        d[rank - 1]
    }

    /// CPU of the spans that `keep` keeps, in ns.
    pub fn cpu_where(&self, keep: impl Fn(&SpanTruth) -> bool) -> i64 {
        self.spans
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.cpu_ns)
            .sum()
    }

    /// The profile as OTLP protobuf (`ProfilesData`) with `service.name`, links left for the
    /// server to make.
    pub fn otlp_profiles(&self) -> Vec<u8> {
        let (data, _) =
            pprof_to_otlp(&self.profile, resource(), None).expect("pprof converts to OTLP");
        data.encode_to_vec()
    }

    /// Our spans as an OTLP/JSON trace export.
    pub fn otlp_traces_json(&self) -> Vec<u8> {
        let spans = self
            .spans
            .iter()
            .map(|s| Span {
                trace_id: s.trace_id.to_vec(),
                span_id: s.span_id.to_vec(),
                parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
                name: s.name.clone(),
                kind: if s.parent.is_none() { 2 } else { 1 },
                start_time_unix_nano: s.start_ns,
                end_time_unix_nano: s.end_ns,
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource()),
                scope_spans: vec![ScopeSpans {
                    scope: None,
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        encode_request_json(&request).into_bytes()
    }

    /// Sends the profile and the spans to the server's OTLP/HTTP endpoints; both are durable
    /// when answered.
    pub fn ingest(&self, server: &TestServer) {
        server
            .post(
                "/v1development/profiles",
                "application/x-protobuf",
                self.otlp_profiles(),
            )
            .ok();
        let r = server
            .post("/v1/traces", "application/json", self.otlp_traces_json())
            .ok();
        assert_eq!(r.json(), serde_json::json!({}), "every span accepted");
    }
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

/// Spans for the labelled span ids: per trace (in id order, 50 ms apart inside the profile's
/// window) the `GET …` span is the root and the others its children. Durations grow with
/// CPU and are all distinct. The heaviest `GET /cpu-heavy` trace also gets [`DB_SPAN`] and
/// [`CACHE_SPAN`], which have no samples.
fn invent_spans(
    t0_ns: u64,
    labelled: &BTreeMap<[u8; 8], ([u8; 16], String, i64, i64)>,
) -> Vec<SpanTruth> {
    let mut traces: BTreeMap<[u8; 16], Vec<[u8; 8]>> = BTreeMap::new();
    for (span, (trace, ..)) in labelled {
        traces.entry(*trace).or_default().push(*span);
    }
    let heaviest = labelled
        .iter()
        .filter(|(_, (_, name, ..))| name == "GET /cpu-heavy")
        .max_by_key(|(id, (_, _, cpu, _))| (*cpu, **id))
        .map(|(id, _)| *id)
        .expect("GET /cpu-heavy spans");
    let mut out = Vec::new();
    for (i, (trace, ids)) in traces.iter().enumerate() {
        let i = i as u64;
        let start = t0_ns + i * 50_000_000;
        let trace_cpu: i64 = ids.iter().map(|id| labelled[id].2).sum();
        let roots: BTreeSet<[u8; 8]> = ids
            .iter()
            .filter(|id| labelled[*id].1.starts_with("GET "))
            .copied()
            .collect();
        assert!(roots.len() <= 1, "one request span per trace");
        let root = roots.first().copied();
        for id in ids {
            let (_, name, cpu, hot) = &labelled[id];
            let (parent, start_ns, duration) = if Some(*id) == root {
                (None, start, 60_000_000 + 2 * trace_cpu as u64 + i * 1_000)
            } else {
                (root, start + 1_000_000, *cpu as u64 + 5_000_000 + i)
            };
            out.push(SpanTruth {
                trace_id: *trace,
                span_id: *id,
                parent,
                name: name.clone(),
                start_ns,
                end_ns: start_ns + duration,
                cpu_ns: *cpu,
                hot_cum_ns: *hot,
            });
        }
        if root == Some(heaviest) {
            for (id, name, offset, duration) in [
                (DB_SPAN, "SELECT orders", 2_000_000, 5 * PERIOD_NS as u64),
                (CACHE_SPAN, "cache get", 3_000_000, 2_000_000),
            ] {
                out.push(SpanTruth {
                    trace_id: *trace,
                    span_id: id,
                    parent: root,
                    name: name.into(),
                    start_ns: start + offset,
                    end_ns: start + offset + duration,
                    cpu_ns: 0,
                    hot_cum_ns: 0,
                });
            }
        }
    }
    out
}

/// A server holding the Go data, what most API tests read: shared by a test file's tests
/// through a `OnceLock`.
pub struct GoServer {
    pub server: TestServer,
    pub data: GoData,
}

impl GoServer {
    /// A server on a fresh store in `CARGO_TARGET_TMPDIR/<store>` (a static is never
    /// dropped, so a temporary directory would be left behind), with settings changed by
    /// `configure`, holding the Go data.
    pub fn start(
        store: &str,
        configure: impl FnOnce(&mut spanprof_server::ServerConfig),
    ) -> GoServer {
        let server = TestServer::in_fresh_dir(store, configure);
        let data = GoData::load();
        data.ingest(&server);
        GoServer { server, data }
    }
}
