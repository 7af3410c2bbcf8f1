//! Load generator for `spanprof serve`, driven by `bench/serve-load.sh`.
//!
//! ```text
//! load push --url http://ADDR [--seconds S] [--clients C] [--profiles P] [--health-seconds H] [--paced-seconds Q] [--ca FILE]
//! load targets --port-file FILE
//! load stages [--profiles P] [--repeat R] [--only STAGE]
//! ```
//!
//! `stages` times, on one thread, each stage a profile goes through in the server (decode,
//! conversion and linking on both routes, durable store ingest of each route's profiles,
//! sealing the segment that holds it): where a server's CPU per profile goes. `--only` names one stage's label to time alone (for `perf record`).
//!
//! `push` makes P distinct profiles from the real Go CPU profile `testdata/go/cpu-10s.pb.gz`
//! (598 samples; every span and trace id label rewritten to fresh ids), encodes each as
//! pyroscope-go's multipart upload for `POST /ingest` and as OTLP protobuf for
//! `POST /v1development/profiles`, then runs C closed-loop clients for S seconds (even
//! clients /ingest, odd clients OTLP). Peers measured in the same run: the same clients
//! against `GET /health` (the HTTP floor) and the in-process decode + link of the same
//! profiles on one core (the work floor). Then the same clients paced at 50 % and 80 % of the
//! measured rate for Q seconds each (latency below saturation). `targets` serves `/debug/pprof/{profile,heap,
//! goroutine}` like a Go service, for the scrape-cost phase. An `https://` URL is reached over
//! TLS (rustls, HTTP/1.1 by ALPN, kept-alive connections as over plain TCP), trusting the CA
//! of PEM file `--ca`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost::Message;
use spanprof_format::detect::decode_otlp_protobuf;
use spanprof_format::link::{to_hex, IdRole};
use spanprof_format::link_in_place::link_in_place;
use spanprof_format::merge::merge;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use spanprof_format::pprof;
use spanprof_format::to_otlp::pprof_to_otlp;
use spanprof_format::LinkConfig;
use spanprof_store::store::{Store, StoreConfig};

/// A 10 s Go CPU profile under load: 598 samples labelled with span and trace ids.
// The server runs on mimalloc; so does its load generator's in-process work.
#[global_allocator]
static ALLOC: Counting = Counting;

/// mimalloc, counting allocations (for `stages`).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// A global allocator is an unsafe trait by definition.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new) }
    }
}

const GO_CPU: &[u8] = include_bytes!("../../../testdata/go/cpu-10s.pb.gz");

/// Instances the profiles are spread over (series label / `service.instance.id`).
const INSTANCES: u64 = 32;

/// Time between two profiles of one instance, s.
const STEP_S: i64 = 10;

const BOUNDARY: &str = "spanprofloadboundary7d3f0a";

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num = |name: &str, default: u64| {
        flag(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{name} {v:?}: not a number")))
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("starting the runtime");
    match args.first().map(String::as_str) {
        Some("push") => {
            let url = flag("--url").unwrap_or_else(|| usage("push needs --url http://ADDR"));
            let opts = PushOptions {
                url,
                seconds: num("--seconds", 20),
                clients: num("--clients", 32).max(2),
                profiles: num("--profiles", 8192).max(1),
                health_seconds: num("--health-seconds", 3),
                paced_seconds: num("--paced-seconds", 10),
                summary: flag("--summary"),
                ca: flag("--ca"),
                server_pid: flag("--server-pid"),
                server_core: flag("--server-core"),
            };
            runtime.block_on(push(opts));
        }
        Some("stages") => stages(
            num("--profiles", 2048).max(32),
            flag("--only").as_deref(),
            num("--repeat", 1).max(1),
        ),
        Some("idle-cost") => idle_cost(num("--profiles", 256).max(1), num("--seconds", 3).max(1)),
        Some("targets") => {
            let port_file =
                flag("--port-file").unwrap_or_else(|| usage("targets needs --port-file FILE"));
            runtime.block_on(targets(&port_file));
        }
        _ => usage("a command is needed"),
    }
}

/// A TLS client trusting the certificates of PEM file `ca` (none: nothing, for http:// only).
fn tls_config(ca: Option<&str>) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .unwrap_or_else(|e| usage(&format!("--ca {ca}: {e:?}")))
        {
            let cert = cert.unwrap_or_else(|e| usage(&format!("--ca {ca}: {e:?}")));
            roots.add(cert).expect("a CA certificate");
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

struct PushOptions {
    /// PEM file of the CA an https:// server's certificate is checked against.
    ca: Option<String>,
    url: String,
    seconds: u64,
    clients: u64,
    profiles: u64,
    health_seconds: u64,
    /// Length of each paced phase (at 50 % and 80 % of the closed-loop rate), s.
    paced_seconds: u64,
    summary: Option<String>,
    /// The server's pid, to read its CPU time around the push phase.
    server_pid: Option<String>,
    /// The core the server is pinned to, to read how much of it the hypervisor took.
    server_core: Option<String>,
}

/// Where core `core`'s time went, in ticks (Linux `/proc/stat`): user, nice, system, idle,
/// iowait, irq, softirq, steal.
fn core_ticks(core: &str) -> Option<[u64; 8]> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split(' ').next() == Some(&format!("cpu{core}")))?;
    let mut out = [0u64; 8];
    for (o, f) in out.iter_mut().zip(line.split_whitespace().skip(1)) {
        *o = f.parse().ok()?;
    }
    Some(out)
}

/// Of core `core`'s time between `before` and now, the shares idle and stolen by the
/// hypervisor (a virtual machine's noisy neighbours), %: the server's figures are for what
/// it was given, not for a whole core. NaN when unknown.
fn core_shares(core: Option<&str>, before: Option<[u64; 8]>) -> (f64, f64) {
    let shares = || {
        let (before, after) = (before?, core_ticks(core?)?);
        let d: Vec<f64> = after
            .iter()
            .zip(before)
            .map(|(a, b)| a.saturating_sub(b) as f64)
            .collect();
        let total: f64 = d.iter().sum();
        (total > 0.0).then(|| ((d[3] + d[4]) * 100.0 / total, d[7] * 100.0 / total))
    };
    shares().unwrap_or((f64::NAN, f64::NAN))
}

/// The server's CPU seconds since `before` (from [`cpu_seconds`]); NaN when unknown.
fn cpu_since(pid: Option<&str>, before: Option<f64>) -> f64 {
    match (before, pid.and_then(cpu_seconds)) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    }
}

/// utime + stime of process `pid`, s (Linux `/proc/PID/stat`; 100 ticks a second).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The template profile and where its ids are, to make distinct copies of it.
struct Template {
    profile: pprof::Profile,
    /// String-table indices of span id values.
    span_strings: Vec<usize>,
    /// String-table indices of trace id values.
    trace_strings: Vec<usize>,
}

impl Template {
    fn new() -> Template {
        let profile = pprof::decode(GO_CPU, 64 << 20).expect("testdata profile decodes");
        let links = LinkConfig::default();
        let (mut span_strings, mut trace_strings) = (Vec::new(), Vec::new());
        for s in &profile.sample {
            for l in &s.label {
                let key = profile.str(l.key).unwrap_or("");
                let list = match links.role(key, profile.str(l.str)) {
                    IdRole::SpanId(_) => &mut span_strings,
                    IdRole::TraceId(_) => &mut trace_strings,
                    _ => continue,
                };
                if !list.contains(&(l.str as usize)) {
                    list.push(l.str as usize);
                }
            }
        }
        Template {
            profile,
            span_strings,
            trace_strings,
        }
    }

    fn samples(&self) -> u64 {
        self.profile.sample.len() as u64
    }

    /// Profile `k`: fresh span and trace ids, instance `k % INSTANCES`, its time slot.
    fn copy(&self, k: u64) -> pprof::Profile {
        let mut p = self.profile.clone();
        for (j, &s) in self.span_strings.iter().enumerate() {
            let id = mix(0x5350_414e ^ (k << 16 | j as u64)).max(1);
            p.string_table[s] = to_hex(&id.to_be_bytes());
        }
        for (j, &s) in self.trace_strings.iter().enumerate() {
            let n = k << 16 | j as u64;
            let id = (u128::from(mix(0x7472_6163 ^ n)) << 64) | u128::from(mix(!n).max(1));
            p.string_table[s] = to_hex(&id.to_be_bytes());
        }
        p.time_nanos = self.profile.time_nanos + slot_s(k) * 1_000_000_000;
        p
    }
}

/// Seconds after the template's start of profile `k`: instances send back-to-back windows.
fn slot_s(k: u64) -> i64 {
    (k / INSTANCES) as i64 * STEP_S
}

/// splitmix64.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

/// One profile, encoded for both routes.
struct Encoded {
    /// Gzipped pprof, as the Go runtime writes it.
    pprof_gz: Bytes,
    /// pyroscope-go's `multipart/form-data` body around `pprof_gz`.
    multipart: Bytes,
    /// OTLP `ProfilesData` protobuf, ids left as labels for the server to link.
    otlp: Bytes,
}

fn encode(template: &Template, k: u64) -> Encoded {
    let p = template.copy(k);
    let pprof_gz = pprof::encode_gzip(&p);
    // What Go's multipart.Writer writes for pyroscope-go's CreateFormFile("profile", ...).
    let mut multipart = Vec::with_capacity(pprof_gz.len() + 256);
    multipart.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    multipart.extend_from_slice(&pprof_gz);
    multipart.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let resource = Resource {
        attributes: vec![
            string_attribute("service.name", "loadtest-otlp"),
            string_attribute("service.instance.id", &format!("i{}", k % INSTANCES)),
        ],
        ..Default::default()
    };
    let (data, _) = pprof_to_otlp(&p, resource, None).expect("testdata profile converts");
    Encoded {
        pprof_gz: pprof_gz.into(),
        multipart: multipart.into(),
        otlp: data.encode_to_vec().into(),
    }
}

/// Encodes profiles `0..n` on all cores.
fn encode_pool(template: &Template, n: u64) -> Vec<Encoded> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut parts: Vec<Vec<Encoded>> = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t * n / threads..(t + 1) * n / threads)
                        .map(|k| encode(template, k))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts = handles.into_iter().map(|h| h.join().unwrap()).collect();
    });
    parts.into_iter().flatten().collect()
}

/// What one phase of closed-loop clients saw.
#[derive(Default)]
struct Outcome {
    /// Latency of every answered request, µs.
    latencies_us: Vec<u32>,
    /// Answers by status code.
    statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer (connection errors).
    transport_errors: u64,
    /// 2xx answers.
    ok: u64,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.latencies_us.extend(other.latencies_us);
        for (s, n) in other.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        self.transport_errors += other.transport_errors;
        self.ok += other.ok;
    }

    /// Percentile `q` (0..=1) of the latencies of 2xx and non-2xx answers alike, ms.
    fn percentile_ms(&mut self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        self.latencies_us.sort_unstable();
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        f64::from(self.latencies_us[i]) / 1000.0
    }

    fn errors(&self) -> String {
        let mut parts: Vec<String> = self
            .statuses
            .iter()
            .filter(|(s, _)| !(200..300).contains(*s))
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        if self.transport_errors > 0 {
            parts.push(format!("transport: {}", self.transport_errors));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// What a client sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Health,
    Ingest,
    Otlp,
}

/// Bearer tokens the pushes carry (`SPANPROF_LOAD_TOKENS`, comma-separated): profile `k`
/// carries token `k % n`, so tokens of several tenants share the load evenly.
static TOKENS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    std::env::var("SPANPROF_LOAD_TOKENS")
        .unwrap_or_default()
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"))
        .collect()
});

/// The request client `c` sends for global profile number `k`.
fn request(base: &str, route: Route, pool: &[Encoded], k: u64) -> hyper::Request<Full<Bytes>> {
    let mut builder = hyper::Request::builder();
    if route != Route::Health && !TOKENS.is_empty() {
        builder = builder.header("authorization", &TOKENS[(k % TOKENS.len() as u64) as usize]);
    }
    let e = &pool[(k % pool.len() as u64) as usize];
    match route {
        Route::Health => builder
            .method("GET")
            .uri(format!("{base}/health"))
            .body(Full::new(Bytes::new())),
        Route::Ingest => {
            // Past the pool, the same ids come again in later windows.
            let from = 1_700_000_000 + slot_s(k);
            builder
                .method("POST")
                .uri(format!(
                    "{base}/ingest?name=loadtest%7Binstance%3Di{}%7D&from={from}&until={}&spyName=gospy&sampleRate=100",
                    k % INSTANCES,
                    from + STEP_S
                ))
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={BOUNDARY}"),
                )
                .body(Full::new(e.multipart.clone()))
        }
        Route::Otlp => builder
            .method("POST")
            .uri(format!("{base}/v1development/profiles"))
            .header("content-type", "application/x-protobuf")
            .body(Full::new(e.otlp.clone())),
    }
    .expect("valid request")
}

/// Runs `clients` closed-loop clients for `seconds`; client `c` uses `routes(c)`.
///
/// Closed loop when `rate` is `None`; otherwise each client sends on a fixed schedule so that
/// all of them together offer `rate` requests/s, and a latency counts from when the request
/// was due (a stalled server is not hidden by clients that wait for it).
#[allow(clippy::too_many_arguments)]
async fn run_clients(
    client: &HttpClient,
    base: &str,
    pool: &Arc<Vec<Encoded>>,
    next: &Arc<AtomicU64>,
    clients: u64,
    seconds: u64,
    rate: Option<f64>,
    routes: fn(u64) -> Route,
) -> (BTreeMap<&'static str, Outcome>, Duration) {
    let interval = rate.map(|r| Duration::from_secs_f64(clients as f64 / r));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, base, pool, next) = (
                client.clone(),
                base.to_owned(),
                Arc::clone(pool),
                Arc::clone(next),
            );
            let route = routes(c);
            // Paced clients start spread over one interval.
            let mut due =
                start + interval.map_or(Duration::ZERO, |i| i.mul_f64(c as f64 / clients as f64));
            tokio::spawn(async move {
                let mut out = Outcome::default();
                while Instant::now() < deadline && due < deadline {
                    let sent = match interval {
                        Some(i) => {
                            tokio::time::sleep_until(due.into()).await;
                            let at = due;
                            due += i;
                            at
                        }
                        None => Instant::now(),
                    };
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let req = request(&base, route, &pool, k);
                    let answer = match client.request(req).await {
                        Ok(resp) => {
                            let status = resp.status().as_u16();
                            resp.into_body().collect().await.ok().map(|_| status)
                        }
                        Err(_) => None,
                    };
                    let took = sent.elapsed();
                    match answer {
                        Some(status) => {
                            out.latencies_us
                                .push(took.as_micros().min(u32::MAX as u128) as u32);
                            *out.statuses.entry(status).or_default() += 1;
                            if (200..300).contains(&status) {
                                out.ok += 1;
                            } else if status == 429 {
                                // Backpressure: an agent drops the profile and comes back later.
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                        None => {
                            out.transport_errors += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                (route, out)
            })
        })
        .collect();
    let mut by_route: BTreeMap<&'static str, Outcome> = BTreeMap::new();
    for t in tasks {
        let (route, out) = t.await.expect("client task");
        let name = match route {
            Route::Health => "GET /health",
            Route::Ingest => "POST /ingest",
            Route::Otlp => "POST /v1development/profiles",
        };
        by_route.entry(name).or_default().merge(out);
    }
    (by_route, start.elapsed())
}

/// Where a server's CPU per profile goes, stage by stage, on this one thread: the /ingest
/// path (gunzip + pprof decode, then conversion and linking), the OTLP path (protobuf decode,
/// then merging and linking), and durable store ingest of the linked batches, 32 profiles a
/// call as the pipeline batches them.
fn stages(n: u64, only: Option<&str>, repeat: u64) {
    let template = Template::new();
    let pool = encode_pool(&template, n);
    let timed = |name: &str| only.is_none_or(|o| o == name);
    let mut rows: Vec<(&str, f64, f64)> = Vec::new();
    let mut time = |name: &'static str, mut f: Box<dyn FnMut() + '_>| {
        if timed(name) {
            let allocations = ALLOCATIONS.load(Ordering::Relaxed);
            let t = Instant::now();
            for _ in 0..repeat {
                f();
            }
            let per = (n * repeat) as f64;
            rows.push((
                name,
                t.elapsed().as_secs_f64() * 1e6 / per,
                (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / per,
            ));
        }
    };
    time(
        "/ingest: gunzip + pprof decode",
        Box::new(|| {
            for e in &pool {
                std::hint::black_box(pprof::decode(&e.pprof_gz, 64 << 20).expect("decodes"));
            }
        }),
    );
    let decoded: Vec<pprof::Profile> = pool
        .iter()
        .map(|e| pprof::decode(&e.pprof_gz, 64 << 20).expect("decodes"))
        .collect();
    let link = || Some(LinkConfig::default());
    time(
        "/ingest: convert + link",
        Box::new(|| {
            for p in &decoded {
                std::hint::black_box(
                    pprof_to_otlp(p, Resource::default(), link()).expect("converts"),
                );
            }
        }),
    );
    let linked: Vec<ProfilesData> = decoded
        .iter()
        .map(|p| {
            pprof_to_otlp(p, Resource::default(), link())
                .expect("converts")
                .0
        })
        .collect();
    drop(decoded);
    time(
        "OTLP: protobuf decode",
        Box::new(|| {
            for e in &pool {
                std::hint::black_box(decode_otlp_protobuf(&e.otlp[..]).expect("decodes"));
            }
        }),
    );
    time(
        "OTLP: prost decode (reference)",
        Box::new(|| {
            for e in &pool {
                std::hint::black_box(ProfilesData::decode(&e.otlp[..]).expect("decodes"));
            }
        }),
    );
    time(
        "OTLP: decode + link in place",
        Box::new(|| {
            for e in &pool {
                let data = decode_otlp_protobuf(&e.otlp[..]).expect("decodes");
                std::hint::black_box(link_in_place(data, &LinkConfig::default()).expect("links"));
            }
        }),
    );
    if timed("OTLP: merge + link") {
        let otlp: Vec<ProfilesData> = pool
            .iter()
            .map(|e| ProfilesData::decode(&e.otlp[..]).expect("decodes"))
            .collect();
        time(
            "OTLP: merge + link",
            Box::new(|| {
                for d in &otlp {
                    std::hint::black_box(merge([d], link()).expect("merges"));
                }
            }),
        );
    }
    // The OTLP route's profiles as the store gets them: decoded and linked in place.
    let otlp_linked = || -> Vec<ProfilesData> {
        pool.iter()
            .map(|e| {
                let data = decode_otlp_protobuf(&e.otlp[..]).expect("decodes");
                link_in_place(data, &LinkConfig::default())
                    .expect("links")
                    .0
            })
            .collect()
    };
    for (label, per_call, sync, otlp) in [
        ("store: durable ingest, 1 a call", 1, true, false),
        ("store: durable ingest, 8 a call", 8, true, false),
        ("store: durable ingest, 32 a call", 32, true, false),
        // The CPU alone, without the disk's noise: what a change to ingest's code shows in.
        ("store: ingest without fsync, 1 a call", 1, false, false),
        ("store: ingest without fsync, 8 a call", 8, false, false),
        ("store: ingest without fsync, 32 a call", 32, false, false),
        (
            "store: OTLP linked in place, no fsync, 8 a call",
            8,
            false,
            true,
        ),
    ] {
        if !timed(label) {
            continue;
        }
        let decoded;
        let linked = if otlp {
            decoded = otlp_linked();
            &decoded
        } else {
            &linked
        };
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut cfg = StoreConfig::new(dir.path());
        cfg.sync = sync;
        let (store, _) = Store::open(cfg).expect("store opens");
        time(
            label,
            Box::new(|| {
                for chunk in linked.chunks(per_call) {
                    let refs: Vec<&ProfilesData> = chunk.iter().collect();
                    store.ingest(&refs, Vec::new()).expect("ingests");
                }
            }),
        );
    }
    if timed("store: seal the segment") {
        // The sealing thread's work (index file with sorted span and trace maps, Bloom
        // filters), per profile the segment holds: the profiles in one segment, sealed once.
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut cfg = StoreConfig::new(dir.path());
        cfg.segment_max_bytes = u64::MAX;
        let (store, _) = Store::open(cfg).expect("store opens");
        for chunk in linked.chunks(32) {
            let refs: Vec<&ProfilesData> = chunk.iter().collect();
            store.ingest(&refs, Vec::new()).expect("ingests");
        }
        let allocations = ALLOCATIONS.load(Ordering::Relaxed);
        let t = Instant::now();
        store.rotate().expect("seals");
        rows.push((
            "store: seal the segment",
            t.elapsed().as_secs_f64() * 1e6 / n as f64,
            (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / n as f64,
        ));
    }
    println!(
        "stage (µs per profile of {} samples; {n} profiles, {repeat} times)",
        template.samples()
    );
    println!("  {:<36} {:>8} {:>12}", "", "µs", "allocations");
    for (name, us, allocations) in rows {
        println!("  {name:<36} {us:8.1} {allocations:12.0}");
    }
}

/// What idling costs this machine: this thread's CPU time per in-process decode + link of a
/// profile (the /ingest receiver's work), back to back for `seconds`, then with the thread
/// asleep 1 ms after each profile (the core idle most of the time, as a server below
/// capacity is between requests). On a virtual machine the same work can cost much more
/// after an idle gap (caches and predictors taken by other guests, a slower clock), which is
/// what a server's CPU per profile shows when paced: bench/serve-load.sh prints it beside.
fn idle_cost(n: u64, seconds: u64) {
    let template = Template::new();
    let pool = encode_pool(&template, n);
    let budget = Duration::from_secs(seconds);
    let pid = std::process::id().to_string();
    let per_profile_ms = |gap: Option<Duration>| {
        let (start, cpu0) = (Instant::now(), cpu_seconds(&pid));
        let mut k = 0u64;
        while start.elapsed() < budget {
            let e = &pool[k as usize % pool.len()];
            let p = pprof::decode(&e.pprof_gz, 64 << 20).expect("decodes");
            let (data, _) = pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default()))
                .expect("converts");
            std::hint::black_box(data);
            k += 1;
            if let Some(gap) = gap {
                std::thread::sleep(gap);
            }
        }
        cpu_since(Some(&pid), cpu0) * 1e3 / k as f64
    };
    let busy = per_profile_ms(None);
    let idle = per_profile_ms(Some(Duration::from_millis(1)));
    println!(
        "idle cost: in-process decode + link, CPU ms per profile: back to back {busy:.3}, \
         idle 1 ms after each {idle:.3} ({:+.0} %)",
        (idle / busy - 1.0) * 100.0
    );
    println!("idle_busy_ms={busy:.4}\nidle_gapped_ms={idle:.4}");
}

/// The in-process floor: decode and link the same gzipped profiles on this one thread, as the
/// /ingest receiver does before the store, for about `budget`; profiles/s.
fn conversion_rate(pool: &[Encoded], budget: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        let e = &pool[n as usize % pool.len()];
        let p = pprof::decode(&e.pprof_gz, 64 << 20).expect("decodes");
        let (data, _) =
            pprof_to_otlp(&p, Resource::default(), Some(LinkConfig::default())).expect("converts");
        std::hint::black_box(data);
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn push(opts: PushOptions) {
    let base = opts.url.trim_end_matches('/').to_owned();
    let template = Template::new();
    let samples = template.samples();
    let started = Instant::now();
    let pool = Arc::new(encode_pool(&template, opts.profiles));
    let sizes = |f: fn(&Encoded) -> usize| pool.iter().map(f).sum::<usize>() / pool.len();
    eprintln!(
        "load: {} distinct profiles ({} samples, {} spans, {} traces each; multipart {} B, OTLP {} B) encoded in {:.1} s",
        pool.len(),
        samples,
        template.span_strings.len(),
        template.trace_strings.len(),
        sizes(|e| e.multipart.len()),
        sizes(|e| e.otlp.len()),
        started.elapsed().as_secs_f64()
    );

    let convert = tokio::task::block_in_place(|| conversion_rate(&pool, Duration::from_secs(2)));
    eprintln!("load: in-process decode + link: {convert:.0} profiles/s on one core");

    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(opts.ca.as_deref()))
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(opts.clients as usize)
        .build(connector);

    let next = Arc::new(AtomicU64::new(0));
    let (mut health, health_took) = run_clients(
        &client,
        &base,
        &pool,
        &next,
        opts.clients,
        opts.health_seconds,
        None,
        |_| Route::Health,
    )
    .await;
    let mut health = health.remove("GET /health").unwrap_or_default();
    let health_rate = health.ok as f64 / health_took.as_secs_f64();
    eprintln!(
        "load: GET /health floor: {health_rate:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
        health.percentile_ms(0.5),
        health.percentile_ms(0.99)
    );

    eprintln!(
        "load: pushing for {} s with {} clients ...",
        opts.seconds, opts.clients
    );
    let cpu_before = opts.server_pid.as_deref().and_then(cpu_seconds);
    let core = opts.server_core.as_deref();
    let core_before = core.and_then(core_ticks);
    let both_routes = |c: u64| {
        if c.is_multiple_of(2) {
            Route::Ingest
        } else {
            Route::Otlp
        }
    };
    next.store(0, Ordering::Relaxed);
    let (by_route, took) = run_clients(
        &client,
        &base,
        &pool,
        &next,
        opts.clients,
        opts.seconds,
        None,
        both_routes,
    )
    .await;
    let secs = took.as_secs_f64();
    let server_cpu_s = cpu_since(opts.server_pid.as_deref(), cpu_before);
    let (core_idle, core_stolen) = core_shares(core, core_before);
    let mut all = Outcome::default();
    println!(
        "{:<34} {:>10} {:>12} {:>8} {:>8} {:>8}  errors by status",
        "route (load phase)", "profiles/s", "samples/s", "p50 ms", "p99 ms", "max ms"
    );
    for (name, mut out) in by_route {
        println!(
            "{:<34} {:>10.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2}  {}",
            name,
            out.ok as f64 / secs,
            (out.ok * samples) as f64 / secs,
            out.percentile_ms(0.5),
            out.percentile_ms(0.99),
            out.percentile_ms(1.0),
            out.errors()
        );
        all.merge(out);
    }
    let rate = all.ok as f64 / secs;
    let (p50, p99, max) = (
        all.percentile_ms(0.5),
        all.percentile_ms(0.99),
        all.percentile_ms(1.0),
    );
    println!(
        "{:<34} {:>10.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2}  {}",
        "both",
        rate,
        rate * samples as f64,
        p50,
        p99,
        max,
        all.errors()
    );
    let shape: Vec<String> = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999]
        .iter()
        .map(|&q| format!("p{} {:.1}", q * 100.0, all.percentile_ms(q)))
        .collect();
    println!("latency shape (both), ms: {}", shape.join(", "));
    println!(
        "{:<34} {:>10.0} {:>12} {:>8.2} {:>8.2} {:>8.2}  {}",
        "peer: GET /health (req/s)",
        health_rate,
        "",
        health.percentile_ms(0.5),
        health.percentile_ms(0.99),
        health.percentile_ms(1.0),
        health.errors()
    );
    println!(
        "{:<34} {:>10.0} {:>12.0}",
        "peer: in-process decode+link",
        convert,
        convert * samples as f64
    );
    let sent = all.latencies_us.len() as u64 + all.transport_errors;
    println!(
        "ratios: ingest/health {:.3}; ingest/in-process {:.3}; p99 ingest/health {:.1}x; requests sent {} over {} distinct profiles{}",
        rate / health_rate,
        rate / convert,
        p99 / health.percentile_ms(0.99),
        sent,
        pool.len(),
        if sent > pool.len() as u64 {
            " (pool wrapped: OTLP repeats ids and times; /ingest repeats ids in later windows)"
        } else {
            ""
        }
    );
    // Below saturation: the same clients on a schedule at fractions of the rate just measured.
    let mut paced = String::new();
    // Server CPU per accepted profile, phase by phase: below saturation batches are smaller,
    // so what each write costs whatever its size weighs more.
    let per_profile_ms = |cpu_s: f64, ok: u64| cpu_s * 1e3 / ok.max(1) as f64;
    let mut cpu_line = format!(
        "server CPU per profile, ms (core idle / stolen by the hypervisor, %): load {:.3} ({core_idle:.0} / {core_stolen:.0})",
        per_profile_ms(server_cpu_s, all.ok)
    );
    // No paced phases with --paced-seconds 0.
    let shares: &[f64] = if opts.paced_seconds == 0 {
        &[]
    } else {
        &[0.5, 0.8]
    };
    for &share in shares {
        let offered = rate * share;
        let cpu_before = opts.server_pid.as_deref().and_then(cpu_seconds);
        let core_before = core.and_then(core_ticks);
        let (by_route, took) = run_clients(
            &client,
            &base,
            &pool,
            &next,
            opts.clients,
            opts.paced_seconds,
            Some(offered),
            both_routes,
        )
        .await;
        let mut out = Outcome::default();
        by_route.into_values().for_each(|o| out.merge(o));
        let done = out.ok as f64 / took.as_secs_f64();
        let cpu_s = cpu_since(opts.server_pid.as_deref(), cpu_before);
        let (idle, stolen) = core_shares(core, core_before);
        cpu_line.push_str(&format!(
            ", paced {:.0} % {:.3} ({idle:.0} / {stolen:.0})",
            share * 100.0,
            per_profile_ms(cpu_s, out.ok)
        ));
        let (p50, p99, max) = (
            out.percentile_ms(0.5),
            out.percentile_ms(0.99),
            out.percentile_ms(1.0),
        );
        println!(
            "{:<34} {:>10.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2}  {}",
            format!("paced at {:.0} % ({offered:.0}/s)", share * 100.0),
            done,
            done * samples as f64,
            p50,
            p99,
            max,
            out.errors()
        );
        paced.push_str(&format!(
            "paced{:.0}_offered_per_s={offered:.1}\npaced{:.0}_per_s={done:.1}\npaced{:.0}_p99_ms={p99:.3}\npaced{:.0}_server_cpu_s={cpu_s:.2}\n",
            share * 100.0,
            share * 100.0,
            share * 100.0,
            share * 100.0
        ));
    }
    if opts.server_pid.is_some() {
        println!("{cpu_line}");
    }
    let rejected = all.statuses.get(&429).copied().unwrap_or(0);
    if let Some(path) = opts.summary {
        let text = format!(
            "profiles_per_s={rate:.1}\nsamples_per_profile={samples}\nok={}\nelapsed_s={secs:.3}\nserver_cpu_s={server_cpu_s:.2}\np50_ms={p50:.3}\np99_ms={p99:.3}\nmax_ms={max:.3}\nrejected_429={rejected}\nhealth_per_s={health_rate:.1}\nconvert_per_s={convert:.1}\ncore_idle_pct={core_idle:.1}\ncore_stolen_pct={core_stolen:.1}\n",
            all.ok
        ) + &paced;
        std::fs::write(&path, text).expect("writing the summary");
    }
}

/// Fake Go services for the scrape phase: `/debug/pprof/profile?seconds=N` answers after N
/// seconds, `heap` and `goroutine` at once; every target may share this one listener.
async fn targets(port_file: &str) {
    use axum::extract::Query;
    use axum::routing::get;
    use std::collections::HashMap;

    let template = Template::new();
    let cpu: Arc<Vec<Bytes>> = Arc::new(
        (0..16)
            .map(|k| pprof::encode_gzip(&template.copy(k)).into())
            .collect(),
    );
    let heap: Bytes = pprof::encode_gzip(&reshaped(
        &template.profile,
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        |v| vec![v, v * 4096, v / 2, v * 2048],
    ))
    .into();
    let goroutine: Bytes = pprof::encode_gzip(&reshaped(
        &template.profile,
        &[("goroutine", "count")],
        |_| vec![1],
    ))
    .into();
    let served = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new()
        .route(
            "/debug/pprof/profile",
            get(move |Query(q): Query<HashMap<String, String>>| {
                let (cpu, served) = (Arc::clone(&cpu), Arc::clone(&served));
                async move {
                    let secs: u64 = q.get("seconds").and_then(|s| s.parse().ok()).unwrap_or(30);
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    let n = served.fetch_add(1, Ordering::Relaxed);
                    cpu[n as usize % cpu.len()].clone()
                }
            }),
        )
        .route("/debug/pprof/heap", get(move || async move { heap }))
        .route(
            "/debug/pprof/goroutine",
            get(move || async move { goroutine }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the targets listener");
    let port = listener.local_addr().expect("local address").port();
    std::fs::write(port_file, format!("{port}\n")).expect("writing the port file");
    axum::serve(listener, app)
        .await
        .expect("serving the targets");
}

/// `p` with new sample types, values from each sample's first value, and no labels: the shape
/// of a heap or goroutine profile over the same stacks.
fn reshaped(
    p: &pprof::Profile,
    types: &[(&str, &str)],
    values: fn(i64) -> Vec<i64>,
) -> pprof::Profile {
    let mut out = p.clone();
    let mut intern = |s: &str| {
        out.string_table.push(s.to_owned());
        (out.string_table.len() - 1) as i64
    };
    let sample_type: Vec<pprof::ValueType> = types
        .iter()
        .map(|(t, u)| pprof::ValueType {
            r#type: intern(t),
            unit: intern(u),
        })
        .collect();
    out.sample_type = sample_type;
    out.period_type = None;
    out.period = 0;
    out.duration_nanos = 0;
    for s in &mut out.sample {
        s.value = values(s.value.first().copied().unwrap_or(1).max(1));
        s.label.clear();
    }
    out
}

/// Says what is wrong and how to call this, and exits with status 2.
fn usage(problem: &str) -> ! {
    eprintln!(
        "load: {problem}\n\
         usage: load push --url http://ADDR [--seconds S] [--clients C] [--profiles P] \
         [--health-seconds H] [--paced-seconds Q] [--summary FILE] [--ca FILE] [--server-pid PID] [--server-core N]\n       \
         load targets --port-file FILE\n       \
         load stages [--profiles P] [--repeat R] [--only STAGE]\n       \
         load idle-cost [--profiles P] [--seconds S]\n\
         (bench/serve-load.sh runs these; see its header)"
    );
    std::process::exit(2);
}
