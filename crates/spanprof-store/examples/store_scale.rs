//! The store at scale: durable ingest rate, span and service flame-graph latency answered from
//! disk, disk bytes against the gzipped pprof that went in, and memory as the store grows.
//!
//! ```text
//! bench/store-scale.sh [--samples N] [--spans M] [--batch B] [--instances I] [--dir DIR] [--keep]
//! ```
//!
//! Input is the real Go CPU profile `testdata/go/cpu-10s.pb.gz` (598 samples, 235 spans),
//! replayed as a stream of distinct profiles by [`synthetic::Synthetic`]. Every measurement
//! runs in its own child process (this binary with `--phase`), so each memory figure belongs
//! to that phase alone; the parent prints the table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use spanprof_format::otlp::ProfilesData;
use spanprof_format::pprof;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, Store, StoreConfig};

use synthetic::Synthetic;

// The binary runs on mimalloc; measure the store the way it ships. (The criterion bench
// includes this file as a module and gets the same allocator from here.)
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A stream of distinct, realistic profiles made from one real Go CPU profile.
pub mod synthetic {
    use spanprof_format::link::{to_hex, IdRole};
    use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
    use spanprof_format::{pprof, Batch, LinkConfig};
    use spanprof_store::spans::SpanRecord;

    /// A 10 s Go CPU profile under load: 598 samples labelled with 235 spans of 159 traces
    /// and 3 span names.
    pub const GO_CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");

    /// `service.name` of every profile and span.
    pub const SERVICE: &str = "goapp";

    /// Time between two profiles of one instance, ns: Go CPU profiles of 10 s, back to back.
    pub const STEP_NS: i64 = 10_000_000_000;

    /// One span of the template: where its id is in the string table, its trace, its name.
    struct TemplateSpan {
        string: usize,
        trace: Option<usize>,
        name: String,
    }

    /// Profile `k` of the stream is the template with:
    /// - instance `k % instances` (`service.instance.id`, a series label) and time
    ///   `(k / instances) * STEP_NS` after the template's, so one hour holds
    ///   `360 * instances` profiles;
    /// - fresh span and trace ids: the profiles of one instance are cut into runs of
    ///   consecutive profiles ("groups"), each with its own ids for all template spans, as if
    ///   those spans lasted the run's length. The run length is chosen so the stream holds the
    ///   asked number of distinct spans.
    pub struct Synthetic {
        template: pprof::Profile,
        spans: Vec<TemplateSpan>,
        /// String-table index of each template trace id.
        traces: Vec<usize>,
        resources: Vec<Resource>,
        /// Profiles in the stream.
        pub profiles: u64,
        /// Instances of the service, profiled in turn.
        pub instances: u64,
        /// Most groups one instance's profiles are cut into.
        groups_per_instance: u64,
    }

    impl Synthetic {
        /// A stream of at least `samples` pprof samples (whole profiles) whose profiles carry
        /// about `spans` distinct spans, from `instances` instances.
        pub fn new(samples: u64, spans: u64, instances: u64) -> Synthetic {
            let template = pprof::decode(GO_CPU, 64 << 20).expect("testdata profile decodes");
            let links = LinkConfig::default();
            let mut spans_of: Vec<TemplateSpan> = Vec::new();
            let mut traces: Vec<usize> = Vec::new();
            for s in &template.sample {
                let (mut span, mut trace, mut name) = (None, None, String::new());
                for l in &s.label {
                    let key = template.str(l.key).unwrap_or("");
                    let value = template.str(l.str);
                    match links.role(key, value) {
                        IdRole::SpanId(_) => span = Some(l.str as usize),
                        IdRole::TraceId(_) => trace = Some(l.str as usize),
                        _ if links.span_name_keys.iter().any(|k| k == key) => {
                            name = value.unwrap_or("").to_owned()
                        }
                        _ => {}
                    }
                }
                let trace = trace.map(|t| {
                    traces.iter().position(|&x| x == t).unwrap_or_else(|| {
                        traces.push(t);
                        traces.len() - 1
                    })
                });
                if let Some(string) = span.filter(|&sp| spans_of.iter().all(|x| x.string != sp)) {
                    spans_of.push(TemplateSpan {
                        string,
                        trace,
                        name,
                    });
                }
            }
            let per_profile = template.sample.len().max(1) as u64;
            let profiles = samples.div_ceil(per_profile).max(1);
            let instances = instances.clamp(1, profiles);
            let groups = spans.div_ceil(spans_of.len().max(1) as u64).max(1);
            let resources = (0..instances)
                .map(|i| Resource {
                    attributes: vec![
                        string_attribute("service.name", SERVICE),
                        string_attribute("service.instance.id", &format!("{SERVICE}-{i}")),
                    ],
                    ..Default::default()
                })
                .collect();
            Synthetic {
                groups_per_instance: groups.div_ceil(instances).min(profiles.div_ceil(instances)),
                template,
                spans: spans_of,
                traces,
                resources,
                profiles,
                instances,
            }
        }

        /// pprof samples in one profile.
        pub fn samples_per_profile(&self) -> u64 {
            self.template.sample.len() as u64
        }

        /// Distinct spans in one profile.
        pub fn spans_per_profile(&self) -> u64 {
            self.spans.len() as u64
        }

        /// Distinct spans over the whole stream.
        pub fn distinct_spans(&self) -> u64 {
            (0..self.instances).map(|i| self.groups_of(i)).sum::<u64>() * self.spans_per_profile()
        }

        /// Start of profile `k`, ns since the Unix epoch.
        pub fn time_ns(&self, k: u64) -> i64 {
            self.template.time_nanos + (k / self.instances) as i64 * STEP_NS
        }

        /// Start of the first profile and end of the last, ns since the Unix epoch.
        pub fn time_range_ns(&self) -> (i64, i64) {
            (self.time_ns(0), self.time_ns(self.profiles - 1) + STEP_NS)
        }

        /// Profile `k` as pprof, ready to encode (what an agent would send).
        pub fn pprof(&self, k: u64) -> pprof::Profile {
            let g = self.group(k);
            let mut p = self.template.clone();
            for (j, s) in self.spans.iter().enumerate() {
                p.string_table[s.string] = to_hex(&self.span_id(g, j as u64));
            }
            for (t, &string) in self.traces.iter().enumerate() {
                p.string_table[string] = to_hex(&self.trace_id(g, t as u64));
            }
            p.time_nanos = self.time_ns(k);
            p
        }

        /// Profile `k` converted and linked as the receiver does (one request per profile).
        pub fn otlp(&self, k: u64, p: &pprof::Profile) -> ProfilesData {
            let mut batch = Batch::new(Some(LinkConfig::default()));
            let resource = self.resources[(k % self.instances) as usize].clone();
            batch
                .add_pprof(p, resource)
                .expect("testdata profile converts");
            batch.finish().0
        }

        /// The spans first seen in profile `k` (all spans of its group when it opens one),
        /// as the trace pipeline would store them.
        pub fn new_spans(&self, k: u64) -> Vec<SpanRecord> {
            let (i, s) = (k % self.instances, k / self.instances);
            let (g, h) = (self.group(k), self.group_in_instance(i, s));
            if s != self.first_of(i, h) {
                return Vec::new();
            }
            let start_ns = self.time_ns(k) as u64;
            let end_ns = start_ns + (self.first_of(i, h + 1) - s) * STEP_NS as u64;
            let traceless = self.traces.len() as u64;
            self.spans
                .iter()
                .enumerate()
                .map(|(j, t)| SpanRecord {
                    trace_id: self.trace_id(g, t.trace.map_or(traceless + j as u64, |x| x as u64)),
                    span_id: self.span_id(g, j as u64),
                    name: t.name.clone(),
                    service: SERVICE.to_owned(),
                    start_ns,
                    end_ns,
                    // Server for the HTTP routes, internal for the work inside them.
                    kind: if t.name.starts_with("GET ") { 2 } else { 1 },
                    ..Default::default()
                })
                .collect()
        }

        /// A span of the stream (it has samples), chosen by `random`.
        pub fn span(&self, random: u64) -> [u8; 8] {
            let i = random % self.instances;
            let rest = random / self.instances;
            let h = rest % self.groups_of(i);
            let j = (rest / self.groups_of(i)) % self.spans_per_profile();
            self.span_id(i * self.groups_per_instance + h, j)
        }

        /// Profiles of instance `i`.
        fn profiles_of(&self, i: u64) -> u64 {
            (self.profiles + self.instances - 1 - i) / self.instances
        }

        fn groups_of(&self, i: u64) -> u64 {
            self.groups_per_instance.min(self.profiles_of(i)).max(1)
        }

        /// The group of step `s` of instance `i`, counted within the instance.
        fn group_in_instance(&self, i: u64, s: u64) -> u64 {
            s * self.groups_of(i) / self.profiles_of(i)
        }

        /// The first step of group `h` of instance `i`.
        fn first_of(&self, i: u64, h: u64) -> u64 {
            (h * self.profiles_of(i)).div_ceil(self.groups_of(i))
        }

        fn group(&self, k: u64) -> u64 {
            let i = k % self.instances;
            i * self.groups_per_instance + self.group_in_instance(i, k / self.instances)
        }

        fn span_id(&self, group: u64, j: u64) -> [u8; 8] {
            nonzero(mix(0x5350_414e ^ (group * self.spans_per_profile() + j))).to_be_bytes()
        }

        fn trace_id(&self, group: u64, t: u64) -> [u8; 16] {
            let n = group * (self.traces.len() + self.spans.len()) as u64 + t;
            let (hi, lo) = (mix(0x7472_6163 ^ n), nonzero(mix(!n)));
            ((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes()
        }
    }

    fn string_attribute(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            ..Default::default()
        }
    }

    /// splitmix64: distinct inputs give well-spread, practically distinct ids.
    pub fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn nonzero(x: u64) -> u64 {
        x.max(1)
    }
}

/// What to run, from the command line.
#[derive(Debug, Clone)]
struct Params {
    /// pprof samples to ingest (whole profiles of 598).
    samples: u64,
    /// Distinct spans over the stream.
    spans: u64,
    /// Profiles per ingest call.
    batch: u64,
    /// Instances of the service (profiles per 10 s).
    instances: u64,
    /// Random spans queried.
    span_queries: u64,
    /// Runs of the service-hour query.
    service_runs: u64,
    /// Profiles of the disk-size stream.
    disk_profiles: u64,
    /// Where the stores go; a temporary directory when not given.
    dir: Option<PathBuf>,
    /// Keep the stores afterwards.
    keep: bool,
    /// Which phase this process runs (children only).
    phase: Option<String>,
}

const USAGE: &str = "usage: store_scale [--samples N] [--spans M] [--batch B] [--instances I] \
[--span-queries Q] [--service-runs R] [--disk-profiles D] [--dir DIR] [--keep]
  N, M, ... accept k and M suffixes (10M = 10000000)";

impl Params {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Params, String> {
        let mut p = Params {
            samples: 10_000_000,
            spans: 1_000_000,
            batch: 20,
            instances: 6,
            span_queries: 200,
            service_runs: 10,
            disk_profiles: 1000,
            dir: None,
            keep: false,
            phase: None,
        };
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or(format!("{a} needs a value"));
            match a.as_str() {
                "--samples" => p.samples = count(&value()?)?,
                "--spans" => p.spans = count(&value()?)?,
                "--batch" => p.batch = count(&value()?)?.max(1),
                "--instances" => p.instances = count(&value()?)?.max(1),
                "--span-queries" => p.span_queries = count(&value()?)?.max(1),
                "--service-runs" => p.service_runs = count(&value()?)?.max(1),
                "--disk-profiles" => p.disk_profiles = count(&value()?)?.max(1),
                "--dir" => p.dir = Some(value()?.into()),
                "--keep" => p.keep = true,
                "--phase" => p.phase = Some(value()?),
                "-h" | "--help" => return Err(USAGE.into()),
                _ => return Err(format!("unknown argument {a}\n{USAGE}")),
            }
        }
        Ok(p)
    }

    /// The arguments a child process gets.
    fn child_args(&self, phase: &str, dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = [
            ("--samples", self.samples),
            ("--spans", self.spans),
            ("--batch", self.batch),
            ("--instances", self.instances),
            ("--span-queries", self.span_queries),
            ("--service-runs", self.service_runs),
            ("--disk-profiles", self.disk_profiles),
        ]
        .iter()
        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
        .collect();
        v.extend(["--phase".into(), phase.into(), "--dir".into()]);
        v.push(dir.display().to_string());
        v
    }

    fn synthetic(&self) -> Synthetic {
        Synthetic::new(self.samples, self.spans, self.instances)
    }
}

/// `10000`, `10k`, `10M`.
fn count(s: &str) -> Result<u64, String> {
    let s = s.replace('_', "");
    let (digits, scale) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000),
        Some('M' | 'm') => (&s[..s.len() - 1], 1_000_000),
        _ => (&s[..], 1),
    };
    digits
        .parse::<u64>()
        .map(|n| n * scale)
        .map_err(|_| format!("not a count: {s}"))
}

/// Figures a child reports, one `key=value` line each on stdout.
type Figures = BTreeMap<String, f64>;

fn emit(key: &str, value: impl Into<f64>) {
    println!("{key}={}", value.into());
}

/// `VmRSS` and `VmHWM` (peak RSS; reset by nothing in this process) in bytes.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib * 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

// mimalloc's C API, declared here: foreign functions are unsafe to declare and call.
#[allow(unsafe_code)]
extern "C" {
    /// mimalloc's: frees the pages it holds for reuse, so RSS shows live data only.
    fn mi_collect(force: bool);
}

/// RSS once the allocator has returned what it keeps for reuse.
#[allow(unsafe_code)]
fn emit_live_memory(prefix: &str) {
    // SAFETY: mimalloc is the global allocator and mi_collect only releases free memory.
    unsafe { mi_collect(true) };
    emit(&format!("{prefix}_live_rss_bytes"), memory().0);
}

fn emit_memory(prefix: &str) {
    let (rss, hwm) = memory();
    emit(&format!("{prefix}_rss_bytes"), rss);
    emit(&format!("{prefix}_hwm_bytes"), hwm);
}

/// The `q`-th percentile (0–100) of sorted `v`, nearest rank.
fn percentile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn open(dir: &Path) -> Store {
    Store::open(StoreConfig::new(dir)).expect("store opens").0
}

/// One ingest call's worth of converted profiles.
struct Converted {
    data: Vec<ProfilesData>,
    spans: Vec<SpanRecord>,
    /// Time spent making and converting these profiles (the receiver's stage, not the store's).
    convert: Duration,
    pprof_samples: u64,
    /// Gzipped and raw pprof bytes of these profiles (0 unless asked for).
    gz_bytes: u64,
    raw_bytes: u64,
}

/// Makes and converts profiles `0..n` in batches on another thread, so the receiver's work is
/// not timed as ingest; at most a few batches ahead.
fn produce(
    syn: Arc<Synthetic>,
    n: u64,
    batch: u64,
    sizes: bool,
    with_spans: bool,
) -> mpsc::Receiver<Converted> {
    let (tx, rx) = mpsc::sync_channel(4);
    std::thread::spawn(move || {
        for first in (0..n).step_by(batch as usize) {
            let t = Instant::now();
            let mut b = Converted {
                data: Vec::new(),
                spans: Vec::new(),
                convert: Duration::ZERO,
                pprof_samples: 0,
                gz_bytes: 0,
                raw_bytes: 0,
            };
            for k in first..(first + batch).min(n) {
                let p = syn.pprof(k);
                if sizes {
                    b.gz_bytes += pprof::encode_gzip(&p).len() as u64;
                    b.raw_bytes += pprof::encode(&p).len() as u64;
                }
                b.pprof_samples += p.sample.len() as u64;
                b.data.push(syn.otlp(k, &p));
                if with_spans {
                    b.spans.extend(syn.new_spans(k));
                }
            }
            b.convert = t.elapsed();
            if tx.send(b).is_err() {
                return;
            }
        }
    });
    rx
}

/// What ingesting a stream measured.
#[derive(Default)]
struct Ingested {
    pprof_profiles: u64,
    pprof_samples: u64,
    stored_samples: u64,
    gz_bytes: u64,
    raw_bytes: u64,
    /// Time inside `Store::ingest`, per call.
    calls: Vec<Duration>,
    convert: Duration,
}

/// Ingests profiles `0..n` of the stream durably into `store`, calling `at(profiles done)`
/// between calls.
fn ingest(
    store: &Store,
    syn: &Arc<Synthetic>,
    n: u64,
    p: &Params,
    sizes: bool,
    with_spans: bool,
    mut at: impl FnMut(u64),
) -> Ingested {
    let mut out = Ingested::default();
    for b in produce(Arc::clone(syn), n, p.batch, sizes, with_spans) {
        let refs: Vec<&ProfilesData> = b.data.iter().collect();
        let t = Instant::now();
        let r = store.ingest(&refs, b.spans).expect("ingest");
        out.calls.push(t.elapsed());
        assert_eq!(r.rejected_profiles, 0, "{:?}", r.problems);
        out.pprof_profiles += b.data.len() as u64;
        out.pprof_samples += b.pprof_samples;
        out.stored_samples += r.samples;
        out.gz_bytes += b.gz_bytes;
        out.raw_bytes += b.raw_bytes;
        out.convert += b.convert;
        at(out.pprof_profiles);
    }
    out
}

/// Ingests the whole stream into `ROOT/store`, copying the store at 25 % and 50 % of it.
fn phase_ingest(p: &Params, root: &Path) {
    let syn = Arc::new(p.synthetic());
    let dir = root.join("store");
    let store = open(&dir);
    let total = syn.profiles;
    let mut copied = Duration::ZERO;
    let mut next = [25u64, 50].into_iter().peekable();
    let mut shown = 0;
    let wall = Instant::now();
    let r = ingest(&store, &syn, total, p, false, true, |done| {
        while let Some(&pct) = next.peek().filter(|&&pct| done * 100 >= pct * total) {
            let t = Instant::now();
            copy_dir(&dir, &root.join(format!("store-{pct}")));
            copied += t.elapsed();
            next.next();
        }
        if done * 10 / total > shown {
            shown = done * 10 / total;
            eprintln!(
                "store_scale: ingested {done}/{total} profiles ({:.0} s)",
                wall.elapsed().as_secs_f64()
            );
        }
    });
    let wall = wall.elapsed() - copied;
    let ingest_s: f64 = r.calls.iter().map(Duration::as_secs_f64).sum();
    let mut calls = r.calls.clone();
    calls.sort_unstable();
    let stats = store.stats();
    emit("profiles", r.pprof_profiles as f64);
    emit("pprof_samples", r.pprof_samples as f64);
    emit("stored_samples", r.stored_samples as f64);
    emit("ingest_calls", r.calls.len() as f64);
    emit("ingest_s", ingest_s);
    emit("wall_s", wall.as_secs_f64());
    emit("convert_s", r.convert.as_secs_f64());
    emit("call_p50_ms", percentile(&calls, 50.0).as_secs_f64() * 1e3);
    emit("call_p99_ms", percentile(&calls, 99.0).as_secs_f64() * 1e3);
    emit("call_max_ms", percentile(&calls, 100.0).as_secs_f64() * 1e3);
    let slow: f64 = calls
        .iter()
        .filter(|c| c.as_secs_f64() > 0.1)
        .map(Duration::as_secs_f64)
        .sum();
    emit("calls_over_100ms_s", slow);
    emit("disk_bytes", stats.disk_bytes as f64);
    emit(
        "segments_dir_bytes",
        dir_bytes(&dir.join("segments")) as f64,
    );
    emit("index_dir_bytes", dir_bytes(&dir.join("index")) as f64);
    emit("segments", stats.segments as f64);
    emit("series", stats.series as f64);
    emit("blocks", stats.blocks as f64);
    emit("spans", stats.spans as f64);
    emit("stack_nodes", stats.stack_nodes as f64);
    emit_memory("ingest");
}

/// Opens `ROOT/store-PCT` (or `ROOT/store` for 100) and reports time and memory.
fn phase_open(root: &Path, pct: &str) {
    let dir = match pct {
        "100" => root.join("store"),
        _ => root.join(format!("store-{pct}")),
    };
    emit_memory("base");
    emit_live_memory("base");
    let t = Instant::now();
    let store = open(&dir);
    emit("open_s", t.elapsed().as_secs_f64());
    emit_memory("open");
    emit_live_memory("open");
    let stats = store.stats();
    emit("stored_samples", stats.samples as f64);
    emit("spans", stats.spans as f64);
    emit("blocks", stats.blocks as f64);
    emit("disk_bytes", stats.disk_bytes as f64);
}

/// Reopens `ROOT/store` and times flame graphs of random spans and of one service-hour.
fn phase_query(p: &Params, root: &Path) {
    let syn = p.synthetic();
    emit_memory("base");
    let t = Instant::now();
    let (store, report) = Store::open(StoreConfig::new(root.join("store"))).expect("store opens");
    emit("open_s", t.elapsed().as_secs_f64());
    emit("open_segments", report.segments as f64);
    emit("open_records_replayed", report.records as f64);
    emit_memory("open");

    let (mut times, mut empty, mut selected) = (Vec::new(), 0u64, 0u64);
    for q in 0..p.span_queries {
        let sel = Selection {
            span_ids: vec![syn.span(synthetic::mix(q ^ 0x5eed))],
            ..Default::default()
        };
        let t = Instant::now();
        let (_tree, summary) = store.flame_graph(&sel).expect("span flame graph");
        times.push(t.elapsed());
        empty += u64::from(summary.samples_selected == 0);
        selected += summary.samples_selected;
    }
    times.sort_unstable();
    emit("span_p50_ms", percentile(&times, 50.0).as_secs_f64() * 1e3);
    emit("span_p99_ms", percentile(&times, 99.0).as_secs_f64() * 1e3);
    emit("span_max_ms", percentile(&times, 100.0).as_secs_f64() * 1e3);
    let slow = times.iter().filter(|t| t.as_secs_f64() > 0.010).count();
    emit("span_over_10ms", slow as f64);
    emit("span_empty", empty as f64);
    emit("span_queries", p.span_queries as f64);
    emit("span_mean_samples", selected as f64 / p.span_queries as f64);

    // The hour in the middle of the data (all of it when there is less).
    const HOUR_NS: i64 = 3_600_000_000_000;
    let (first, last) = syn.time_range_ns();
    let from_ns = (first + (last - first) / 2 - HOUR_NS / 2).max(first);
    let to_ns = (from_ns + HOUR_NS).min(last);
    let sel = Selection {
        service: Some(synthetic::SERVICE.to_owned()),
        from_ns,
        to_ns,
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut samples = 0;
    for _ in 0..p.service_runs {
        let t = Instant::now();
        let (_tree, summary) = store.flame_graph(&sel).expect("service flame graph");
        times.push(t.elapsed());
        samples = summary.samples_selected;
    }
    times.sort_unstable();
    emit(
        "service_p50_ms",
        percentile(&times, 50.0).as_secs_f64() * 1e3,
    );
    emit(
        "service_max_ms",
        percentile(&times, 100.0).as_secs_f64() * 1e3,
    );
    emit("service_samples", samples as f64);
    emit("service_window_s", (to_ns - from_ns) as f64 / 1e9);
    emit_memory("queries");
}

/// Disk bytes of stores holding the first profiles of the stream, against their gzipped pprof.
fn phase_disk(p: &Params, root: &Path) {
    let syn = Arc::new(p.synthetic());
    let n = p.disk_profiles.min(syn.profiles);
    for (name, with_spans) in [("spans", true), ("profiles", false)] {
        let store = open(&root.join(format!("disk-{name}")));
        let r = ingest(&store, &syn, n, p, true, with_spans, |_| {});
        emit(
            &format!("{name}_disk_bytes"),
            store.stats().disk_bytes as f64,
        );
        emit("gz_bytes", r.gz_bytes as f64);
        emit("raw_bytes", r.raw_bytes as f64);
        emit("profiles", r.pprof_profiles as f64);
    }
}

/// Bytes of the files under `dir` (0 when it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy directory");
    for entry in std::fs::read_dir(from).expect("read store directory") {
        let entry = entry.expect("read store directory");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy store file");
        }
    }
}

/// Runs this binary as `--phase PHASE` and collects its figures.
fn child(p: &Params, phase: &str, root: &Path) -> Result<Figures, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(p.child_args(phase, root))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("phase {phase}: {e}"))?;
    if !out.status.success() {
        return Err(format!("phase {phase} failed: {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect())
}

fn main() -> ExitCode {
    let p = match Params::parse(std::env::args().skip(1)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let Some(phase) = p.phase.clone() else {
        return match drive(&p) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("store_scale: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let root = p.dir.clone().expect("children get --dir");
    match phase.as_str() {
        "ingest" => phase_ingest(&p, &root),
        "query" => phase_query(&p, &root),
        "disk" => phase_disk(&p, &root),
        pct @ ("25" | "50" | "100") => phase_open(&root, pct),
        other => panic!("unknown phase {other}"),
    }
    ExitCode::SUCCESS
}

/// Runs every phase in its own process and prints the table.
fn drive(p: &Params) -> Result<(), String> {
    let syn = p.synthetic();
    let root = match &p.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("spanprof-store-scale-{}", std::process::id())),
    };
    if root.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!("{} is not empty", root.display()));
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let hour_profiles = 360 * syn.instances;
    println!(
        "scale: {} profiles x {} samples = {} pprof samples; {} distinct spans ({} per profile); \
         {} instances of one service, a profile per instance every 10 s ({} profiles = {} samples \
         per hour); {} profiles per durable ingest call; store in {}",
        group(syn.profiles as f64),
        syn.samples_per_profile(),
        group((syn.profiles * syn.samples_per_profile()) as f64),
        group(syn.distinct_spans() as f64),
        syn.spans_per_profile(),
        syn.instances,
        group(hour_profiles as f64),
        group((hour_profiles * syn.samples_per_profile()) as f64),
        p.batch,
        root.display(),
    );
    let ingest = child(p, "ingest", &root)?;
    let mut opened = Vec::new();
    for pct in ["25", "50", "100"] {
        opened.push(child(p, pct, &root)?);
    }
    let query = child(p, "query", &root)?;
    let disk = child(p, "disk", &root)?;
    if !p.keep {
        let _ = std::fs::remove_dir_all(&root);
    }
    print_table(&ingest, &opened, &query, &disk);
    Ok(())
}

fn print_table(ingest: &Figures, opened: &[Figures], query: &Figures, disk: &Figures) {
    let f = |m: &Figures, k: &str| m.get(k).copied().unwrap_or(f64::NAN);
    let mib = |b: f64| match b / (1 << 20) as f64 {
        m if m.abs() < 100.0 => format!("{m:.1} MiB"),
        m => format!("{m:.0} MiB"),
    };
    let ms = |x: f64| format!("{x:.2} ms");
    let verdict = |ok: bool| if ok { "meets" } else { "MISSES" };
    let rows: &mut Vec<[String; 4]> = &mut Vec::new();
    let mut row = |what: &str, figure: String, target: &str, ok: Option<bool>| {
        rows.push([
            what.to_owned(),
            figure,
            target.to_owned(),
            ok.map_or(String::new(), |ok| verdict(ok).to_owned()),
        ])
    };

    let ingest_s = f(ingest, "ingest_s");
    let samples = f(ingest, "pprof_samples");
    let rate = samples / ingest_s;
    let convert_rate = samples / f(ingest, "convert_s");
    row(
        "(a) ingest, durable, 1 thread",
        format!("{} samples/s", group(rate)),
        ">= 1,000,000 samples/s per core",
        Some(rate >= 1e6),
    );
    row(
        "    profiles/s",
        format!("{} profiles/s", group(f(ingest, "profiles") / ingest_s)),
        "",
        None,
    );
    row(
        "    ingest call p50 / p99 / max",
        format!(
            "{} / {} / {} ({} calls; {:.2} s in calls over 100 ms)",
            ms(f(ingest, "call_p50_ms")),
            ms(f(ingest, "call_p99_ms")),
            ms(f(ingest, "call_max_ms")),
            f(ingest, "ingest_calls"),
            f(ingest, "calls_over_100ms_s")
        ),
        "",
        None,
    );
    row(
        "    peer: pprof -> linked OTLP, same run",
        format!(
            "{} samples/s (ingest takes {:.2}x its time)",
            group(convert_rate),
            convert_rate / rate
        ),
        "",
        None,
    );
    row(
        "    wall clock (conversion overlapped)",
        format!("{:.1} s", f(ingest, "wall_s")),
        "",
        None,
    );
    row(
        "(b) reopen, 100 % of the data",
        format!(
            "{:.2} s ({} segments, {} records replayed)",
            f(query, "open_s"),
            f(query, "open_segments"),
            f(query, "open_records_replayed")
        ),
        "",
        None,
    );
    row(
        "    span flame p50 / p99",
        format!(
            "{} / {} (max {}, {} of {} over 10 ms; {:.0} samples per span, {} spans empty)",
            ms(f(query, "span_p50_ms")),
            ms(f(query, "span_p99_ms")),
            ms(f(query, "span_max_ms")),
            f(query, "span_over_10ms"),
            f(query, "span_queries"),
            f(query, "span_mean_samples"),
            f(query, "span_empty"),
        ),
        "<= 10 ms",
        Some(f(query, "span_p99_ms") <= 10.0),
    );
    let service = f(query, "service_p50_ms");
    row(
        "(c) service flame, 1 hour, p50",
        format!(
            "{} ({} samples over {:.0} s; {} samples/s)",
            ms(service),
            group(f(query, "service_samples")),
            f(query, "service_window_s"),
            group(f(query, "service_samples") / service * 1e3),
        ),
        "<= 100 ms",
        Some(service <= 100.0),
    );
    let gz = f(disk, "gz_bytes");
    for (name, key) in [
        ("profiles only", "profiles_disk_bytes"),
        ("with spans", "spans_disk_bytes"),
    ] {
        let bytes = f(disk, key);
        row(
            &format!("(d) disk / gz pprof, {name}"),
            format!(
                "{:.1} % ({} of {} gz, {} raw pprof; {:.0} profiles)",
                100.0 * bytes / gz,
                mib(bytes),
                mib(gz),
                mib(f(disk, "raw_bytes")),
                f(disk, "profiles"),
            ),
            "<= 25 %",
            Some(bytes <= 0.25 * gz),
        );
    }
    let per_profile_gz = gz / f(disk, "profiles");
    row(
        "    whole store / est. gz pprof",
        format!(
            "{:.1} % ({}: segments {}, indexes {})",
            100.0 * f(ingest, "disk_bytes") / (per_profile_gz * f(ingest, "profiles")),
            mib(f(ingest, "disk_bytes")),
            mib(f(ingest, "segments_dir_bytes")),
            mib(f(ingest, "index_dir_bytes")),
        ),
        "",
        None,
    );
    row(
        "(e) peak RSS after ingest",
        mib(f(ingest, "ingest_hwm_bytes")),
        "",
        None,
    );
    row(
        "    peak RSS after reopen / queries",
        format!(
            "{} / {}",
            mib(f(query, "open_hwm_bytes")),
            mib(f(query, "queries_hwm_bytes"))
        ),
        "",
        None,
    );
    let held = |key: &str| -> Vec<f64> {
        opened
            .iter()
            .map(|o| f(o, &format!("open_{key}")) - f(o, &format!("base_{key}")))
            .collect()
    };
    let (live, raw) = (held("live_rss_bytes"), held("rss_bytes"));
    let stored = |i: usize| f(&opened[i], "stored_samples");
    let spans = |i: usize| f(&opened[i], "spans");
    row(
        "    RSS held after reopen 25/50/100 %",
        format!(
            "{} / {} / {} live ({} / {} / {} before allocator cleanup)",
            mib(live[0]),
            mib(live[1]),
            mib(live[2]),
            mib(raw[0]),
            mib(raw[1]),
            mib(raw[2]),
        ),
        "not growing with data",
        Some(live[2] <= 1.25 * live[0]),
    );
    row(
        "    growth 25 -> 100 %",
        format!(
            "{}{} for +{} stored samples and +{} spans (= {:.1} B per sample or {:.0} B per span)",
            if live[2] >= live[0] { "+" } else { "" },
            mib(live[2] - live[0]),
            group(stored(2) - stored(0)),
            group(spans(2) - spans(0)),
            (live[2] - live[0]) / (stored(2) - stored(0)),
            (live[2] - live[0]) / (spans(2) - spans(0)),
        ),
        "",
        None,
    );
    row(
        "    peak RSS while reopening 25/50/100 %",
        format!(
            "{} / {} / {}",
            mib(f(&opened[0], "open_hwm_bytes")),
            mib(f(&opened[1], "open_hwm_bytes")),
            mib(f(&opened[2], "open_hwm_bytes"))
        ),
        "",
        None,
    );
    row(
        "    reopen time 25/50/100 %",
        format!(
            "{:.2} / {:.2} / {:.2} s",
            f(&opened[0], "open_s"),
            f(&opened[1], "open_s"),
            f(&opened[2], "open_s")
        ),
        "",
        None,
    );

    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    println!();
    for r in rows.iter() {
        println!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    println!(
        "store: {} stored samples (both sample types), {} blocks, {} series, {} spans, {} stack nodes, {} segments",
        group(f(ingest, "stored_samples")),
        group(f(ingest, "blocks")),
        f(ingest, "series"),
        group(f(ingest, "spans")),
        group(f(ingest, "stack_nodes")),
        f(ingest, "segments"),
    );
}

/// `1234567.8` → `1,234,568`.
fn group(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}
