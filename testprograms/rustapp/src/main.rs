//! A tokio service in miniature for spanprof-agent's tests and benches: many concurrent
//! "requests", each a `tracing` span exported over OTLP by the real OpenTelemetry SDK, burning
//! CPU in a function of its own (`burn_alpha`, `burn_beta`, `burn_gamma` and, in a child span,
//! `burn_gamma_child`) in chunks separated by `.await`s, so tasks migrate between workers.
//!
//! Environment: `SPANPROF_URL` (`http://host:port`, receives `/v1/traces` and
//! `/v1development/profiles`), `RUSTAPP_PROFILER` (`agent` | `none` | `pyroscope`, the last
//! with the feature of that name, sending to `RUSTAPP_PYROSCOPE_URL`), `RUSTAPP_REQUESTS` (48),
//! `RUSTAPP_CONCURRENCY` (12), `RUSTAPP_CHUNKS` (40), `RUSTAPP_CHUNK_US` (2500) or
//! `RUSTAPP_CHUNK_ROUNDS` (a fixed amount of work per chunk instead, for throughput),
//! `RUSTAPP_HZ` (100), `RUSTAPP_WORKERS` (4), `RUSTAPP_EXPORT_MS` (1000).
//!
//! Stdout: one JSON line per request (`kind`, `trace_id`, `span_id`, `child_span_id`,
//! `threads`), then `{"elapsed_ms": …, "requests_per_s": …, "agent": {…}}`.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use tokio::sync::Semaphore;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::prelude::*;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a whole number")),
        Err(_) => default,
    }
}

/// CPU in a loop of plain arithmetic: `rounds` rounds when given (a fixed amount of work, for
/// throughput), else for `us` µs of wall time; the clock is read rarely so that nearly every
/// sample's leaf is this loop. One per kind, so a flame graph names its span.
macro_rules! burner {
    ($name:ident) => {
        #[inline(never)]
        fn $name(us: u64, rounds: u64) -> u64 {
            let start = Instant::now();
            let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
            let mut done = 0;
            while if rounds > 0 {
                done < rounds
            } else {
                start.elapsed() < Duration::from_micros(us)
            } {
                let mut i = 0;
                while i < 20_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    i += 1;
                }
                done += 1;
            }
            black_box(x)
        }
    };
}
burner!(burn_alpha);
burner!(burn_beta);
burner!(burn_gamma);
burner!(burn_gamma_child);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Alpha,
    Beta,
    Gamma,
}

fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The context of a caller in another process, as a propagator extracts it: trace ids
/// `5eed…` followed by the request number, so the test knows them.
fn remote_parent(request: u64) -> opentelemetry::Context {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let trace = TraceId::from_bytes((0x5eed_u128 << 112 | u128::from(request) + 1).to_be_bytes());
    let caller = SpanId::from_bytes((0xca11_u64 << 48 | request + 1).to_be_bytes());
    let sc = SpanContext::new(
        trace,
        caller,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    opentelemetry::Context::new().with_remote_span_context(sc)
}

fn ids(span: &tracing::Span) -> (String, String) {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    (
        hex(&sc.trace_id().to_bytes()),
        hex(&sc.span_id().to_bytes()),
    )
}

/// pyroscope-rs' thread tagging, as its README shows it: tag the current OS thread when the
/// request starts, untag (the then current thread) when it ends.
#[cfg(feature = "pyroscope")]
mod thread_tags {
    use std::sync::OnceLock;

    type TagFn = Box<dyn Fn(String, String) + Send + Sync>;
    pub static TAGS: OnceLock<(TagFn, TagFn)> = OnceLock::new();

    pub fn add(key: &str, value: &str) {
        if let Some((add, _)) = TAGS.get() {
            add(key.into(), value.into());
        }
    }

    pub fn remove(key: &str, value: &str) {
        if let Some((_, remove)) = TAGS.get() {
            remove(key.into(), value.into());
        }
    }
}

async fn request(kind: Kind, chunks: u64, chunk_us: u64, rounds: u64) -> String {
    let span = tracing::Span::current();
    let (trace_id, span_id) = ids(&span);
    #[cfg(feature = "pyroscope")]
    {
        thread_tags::add("span_id", &span_id);
        thread_tags::add("trace_id", &trace_id);
    }
    let mut threads = BTreeSet::new();
    let mut child_span_id = None;
    for _ in 0..chunks {
        threads.insert(gettid());
        match kind {
            Kind::Alpha => {
                burn_alpha(chunk_us, rounds);
            }
            Kind::Beta => {
                burn_beta(chunk_us, rounds);
            }
            Kind::Gamma => {
                burn_gamma(chunk_us, rounds);
                tokio::task::yield_now().await;
                // The child span lives across its own .await: entered on every poll, wherever.
                let child = child_span_id
                    .get_or_insert_with(|| tracing::info_span!(parent: &span, "gamma.child"))
                    .clone();
                async {
                    tokio::task::yield_now().await;
                    threads.insert(gettid());
                    burn_gamma_child(chunk_us, rounds);
                }
                .instrument(child)
                .await;
            }
        }
        tokio::task::yield_now().await;
    }
    #[cfg(feature = "pyroscope")]
    {
        thread_tags::remove("span_id", &span_id);
        thread_tags::remove("trace_id", &trace_id);
    }
    let child = child_span_id.map(|c| format!("\"{}\"", ids(&c).1));
    format!(
        "{{\"kind\":\"{kind:?}\",\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",\"child_span_id\":{},\"threads\":{}}}",
        child.unwrap_or_else(|| "null".into()),
        threads.len()
    )
}

fn main() {
    let url = std::env::var("SPANPROF_URL").unwrap_or_else(|_| "http://127.0.0.1:4318".into());
    let profiler = std::env::var("RUSTAPP_PROFILER").unwrap_or_else(|_| "agent".into());
    let requests = env_u64("RUSTAPP_REQUESTS", 48);
    let concurrency = env_u64("RUSTAPP_CONCURRENCY", 12) as usize;
    let chunks = env_u64("RUSTAPP_CHUNKS", 40);
    let chunk_us = env_u64("RUSTAPP_CHUNK_US", 2500);
    let rounds = env_u64("RUSTAPP_CHUNK_ROUNDS", 0);
    let hz = env_u64("RUSTAPP_HZ", 100) as u32;
    let workers = env_u64("RUSTAPP_WORKERS", 4) as usize;
    let export_ms = env_u64("RUSTAPP_EXPORT_MS", 1000);

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{url}/v1/traces"))
        .build()
        .expect("OTLP span exporter");
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("rustapp")
                .build(),
        )
        .build();
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("rustapp")))
        .with(spanprof_agent::SpanSlotLayer::new())
        .init();

    let agent = match profiler.as_str() {
        "agent" => Some(
            spanprof_agent::Agent::start(spanprof_agent::AgentConfig {
                endpoint: format!("{url}/v1development/profiles"),
                service_name: "rustapp".into(),
                frequency_hz: hz,
                export_interval: Duration::from_millis(export_ms),
                ..Default::default()
            })
            .expect("spanprof agent"),
        ),
        "none" => None,
        #[cfg(feature = "pyroscope")]
        "pyroscope" => None,
        other => panic!("RUSTAPP_PROFILER={other:?}: expected agent or none"),
    };
    #[cfg(feature = "pyroscope")]
    let pyroscope = (profiler == "pyroscope").then(|| {
        use pyroscope::backend::{pprof_backend, BackendConfig, PprofConfig};
        // Pyroscope's push API is on spanprof's main port (RUSTAPP_PYROSCOPE_URL).
        let url = std::env::var("RUSTAPP_PYROSCOPE_URL").expect("RUSTAPP_PYROSCOPE_URL");
        let backend = pprof_backend(PprofConfig { sample_rate: hz }, BackendConfig::default());
        let agent = pyroscope::pyroscope::PyroscopeAgentBuilder::new(
            url,
            "rustapp-pyroscope",
            hz,
            "pyroscope-rs",
            "2.1",
            backend,
        )
        .build()
        .expect("pyroscope agent")
        .start()
        .expect("pyroscope start");
        let (add, remove) = agent.tag_wrapper();
        let _ = thread_tags::TAGS.set((
            Box::new(move |k, v| {
                let _ = add(k, v);
            }),
            Box::new(move |k, v| {
                let _ = remove(k, v);
            }),
        ));
        agent
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let start = Instant::now();
    let lines = runtime.block_on(async {
        let limit = Arc::new(Semaphore::new(concurrency));
        let mut tasks = Vec::new();
        for i in 0..requests {
            let permit = limit.clone().acquire_owned().await.expect("semaphore");
            let kind = [Kind::Alpha, Kind::Beta, Kind::Gamma][i as usize % 3];
            let span = match kind {
                Kind::Alpha => tracing::info_span!(parent: None, "alpha"),
                Kind::Beta => tracing::info_span!(parent: None, "beta"),
                Kind::Gamma => tracing::info_span!(parent: None, "gamma"),
            };
            if let Kind::Beta = kind {
                // As a server continues its caller's trace (a W3C traceparent it received):
                // the span is made first, its parent set after.
                span.set_parent(remote_parent(i))
                    .expect("set_parent after the span was made");
            }
            tasks.push(tokio::spawn(
                async move {
                    let line = request(kind, chunks, chunk_us, rounds).await;
                    drop(permit);
                    line
                }
                .instrument(span),
            ));
        }
        let mut lines = Vec::new();
        for t in tasks {
            lines.push(t.await.expect("request task"));
        }
        lines
    });
    let elapsed = start.elapsed();
    drop(runtime);
    for line in lines {
        println!("{line}");
    }
    let stats = agent.map_or_else(
        || "null".into(),
        |a| {
            let s = a.shutdown();
            format!(
                "{{\"samples\":{},\"samples_in_spans\":{},\"samples_exported\":{},\"dropped_ring_full\":{},\"dropped\":{},\"export_errors\":{},\"exports\":{},\"max_queued_samples\":{}}}",
                s.samples,
                s.samples_in_spans,
                s.samples_exported,
                s.dropped_ring_full,
                s.dropped_ring_full
                    + s.dropped_window_full
                    + s.dropped_queue_full
                    + s.dropped_export_failed,
                s.export_errors,
                s.exports,
                s.max_queued_samples
            )
        },
    );
    #[cfg(feature = "pyroscope")]
    if let Some(agent) = pyroscope {
        agent.stop().expect("pyroscope stop").shutdown();
    }
    provider.shutdown().expect("flush spans");
    println!(
        "{{\"elapsed_ms\":{},\"requests_per_s\":{:.3},\"agent\":{stats}}}",
        elapsed.as_millis(),
        requests as f64 / elapsed.as_secs_f64(),
    );
}
