//! Pull: `/debug/pprof/*` from each target. CPU windows are taken back to back — the next
//! `?seconds=N` request starts as the previous one ends — so no span falls between two
//! windows. Every profile kind of every target runs in its own task: a dead or slow target
//! slows nothing else. Failures are logged with the target and counted.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spanprof_format::otlp::{string_kv, Resource};
use spanprof_format::{pprof, Batch};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ScrapeTarget;
use crate::pipeline::Work;
use crate::AppState;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// Starts one task per (target, profile kind).
pub fn start(app: AppState, stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut tasks = Vec::new();
    for target in app.config.scrape.clone() {
        tracing::info!(service = %target.service, url = %target.url, profiles = ?target.profiles, interval = ?target.interval, "scraping");
        for kind in target.profiles.clone() {
            let (app, client, stop, target) =
                (app.clone(), client.clone(), stop.clone(), target.clone());
            tasks.push(tokio::spawn(async move {
                scrape_loop(app, client, target, kind, stop).await
            }));
        }
    }
    tasks
}

/// The path of a profile kind, and the Pyroscope name its profiles get.
fn endpoint(kind: &str, seconds: u64) -> Option<(String, &'static str)> {
    Some(match kind {
        "cpu" => (
            format!("/debug/pprof/profile?seconds={seconds}"),
            "process_cpu",
        ),
        "heap" => ("/debug/pprof/heap".into(), "memory"),
        "allocs" => ("/debug/pprof/allocs".into(), "memory"),
        "goroutine" => ("/debug/pprof/goroutine".into(), "goroutines"),
        "mutex" => ("/debug/pprof/mutex".into(), "mutex"),
        "block" => ("/debug/pprof/block".into(), "block"),
        _ => return None,
    })
}

async fn scrape_loop(
    app: AppState,
    client: HttpClient,
    target: ScrapeTarget,
    kind: String,
    mut stop: watch::Receiver<bool>,
) {
    let seconds = target.interval.as_secs().max(1);
    let Some((path, name)) = endpoint(&kind, seconds) else {
        tracing::error!(service = %target.service, kind = %kind, "unknown profile kind (use cpu, heap, allocs, goroutine, mutex, block)");
        return;
    };
    let url = format!("{}{path}", target.url);
    let labels: [(&'static str, &str); 2] = [("target", &target.service), ("profile", &kind)];
    let mut failures = 0u32;
    while !*stop.borrow() {
        let started = Instant::now();
        // A CPU request lasts the window itself; allow it that plus some slack.
        let timeout = if kind == "cpu" {
            Duration::from_secs(seconds + 10)
        } else {
            Duration::from_secs(10)
        };
        let fetched = tokio::select! {
            r = fetch(&client, &url, timeout, app.config.limits.max_body_bytes) => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        app.metrics.set(
            "spanprof_scrape_duration_seconds",
            &labels,
            started.elapsed().as_secs_f64(),
        );
        let outcome = match fetched {
            Ok(body) => ingest(&app, &target, name, &body).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                failures = 0;
                app.metrics.add("spanprof_scrapes_total", &labels, 1.0);
            }
            Err(e) => {
                failures += 1;
                app.metrics
                    .add("spanprof_scrape_errors_total", &labels, 1.0);
                tracing::warn!(service = %target.service, url = %url, error = %e, "scrape failed");
            }
        }
        // CPU windows follow each other at once; other kinds (and failing targets, with
        // backoff up to 4 intervals) wait.
        let wait = if kind == "cpu" && failures == 0 {
            Duration::ZERO
        } else {
            target.interval * failures.clamp(1, 4)
        };
        if !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
}

async fn fetch(
    client: &HttpClient,
    url: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Bytes, String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
    let request = async {
        let response = client
            .get(uri)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| format!("reading the body: {e}"))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)])
                .trim()
                .to_owned();
            return Err(format!("HTTP {status}: {text}"));
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

async fn ingest(
    app: &AppState,
    target: &ScrapeTarget,
    name: &str,
    body: &[u8],
) -> Result<(), String> {
    let profile = pprof::decode(body, app.config.limits.max_decompressed_bytes)
        .map_err(|e| format!("not a pprof profile: {e}"))?;
    app.config
        .limits
        .profile
        .check_pprof(&profile)
        .map_err(|e| e.to_string())?;
    let mut attributes = vec![
        string_kv("service.name", &target.service),
        string_kv(spanprof_store::store::PROFILE_NAME_ATTRIBUTE, name),
    ];
    attributes.extend(target.labels.iter().map(|(k, v)| string_kv(k, v)));
    let resource = Resource {
        attributes,
        ..Default::default()
    };
    let mut batch = Batch::new(Some(app.config.link.clone()));
    batch
        .add_pprof(&profile, resource)
        .map_err(|e| format!("converting: {e}"))?;
    let (data, report) = batch.finish();
    app.metrics.record_received("scrape", &report);
    app.pipeline
        .submit(Work::Profiles(data), "scrape")
        .await
        .map_err(|e| e.to_string())
}
