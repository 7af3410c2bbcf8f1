//! Pull: `/debug/pprof/*` from each target. CPU windows are taken back to back: the next
//! `?seconds=N` request goes out as soon as the previous one is answered, and that one is
//! stored meanwhile. Go allows one CPU profile at a time and takes 1-100 ms (more when
//! busy) to finish one; that time between windows is counted
//! (`spanprof_scrape_unprofiled_seconds_total`), and each window's stored end is when
//! sampling stopped (`sampled_window`). Heap, allocs, mutex and block profiles count since
//! the program started: each is stored as what happened since the one before
//! ([`Cumulative`]), the first kept only to subtract from the next. Every profile kind of
//! every target runs in its own task: a dead or slow target slows nothing else. Failures are
//! counted, and logged with the target: the first of a run of failures, and again when the
//! error changes; a target that answers again says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spanprof_format::otlp::ProfilesData;
use spanprof_format::otlp::{string_kv, Resource};
use spanprof_format::pprof::delta::{is_cumulative, Cumulative, Delta};
use spanprof_format::profile_type;
use spanprof_format::{pprof, Batch};
use spanprof_store::store::Storing;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, ScrapeTarget, TlsSettings};
use crate::metrics::Receiver;
use crate::pipeline::Work;
use crate::tls::TlsError;
use crate::AppState;

type HttpClient = Client<crate::tls::Connector, Empty<Bytes>>;

/// Why scraping could not start.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// A target's settings cannot work (`receivers.scrape`).
    #[error("scrape target {service:?}: {source}")]
    Target {
        /// The target's service.
        service: String,
        /// What is wrong.
        #[source]
        source: ConfigError,
    },
    /// The targets' share of this replica cannot be worked out (`receivers.replicas`).
    #[error(transparent)]
    Replicas(ConfigError),
    /// No TLS client for `https://` targets (no trusted certificates, a wrong file).
    #[error("{}{source}", service.as_ref().map(|s| format!("scrape target {s:?}: ")).unwrap_or_default())]
    Tls {
        /// The target whose own TLS settings fail; `None`: the shared client's.
        service: Option<String>,
        /// What failed.
        #[source]
        source: TlsError,
    },
}

/// Why one scrape gave nothing stored: logged (once per run of the same failure) and counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeFailure {
    /// The target's URL does not make a request.
    #[error("bad URL {url}: {reason}")]
    BadUrl {
        /// The URL asked.
        url: String,
        /// Why it is not one.
        reason: String,
    },
    /// `bearer_token_file` could not be read.
    #[error("reading bearer_token_file {}: {reason}", file.display())]
    BearerRead {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// `bearer_token_file` holds what cannot be a header value.
    #[error("bearer_token_file {}: not a header value: {reason}", file.display())]
    BearerValue {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// No connection (the causes, as hyper gives them).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The request failed once connected.
    #[error("request failed: {0}")]
    Request(String),
    /// The answer's body could not be read (cut, or past the size limit).
    #[error("reading the body: {0}")]
    Body(String),
    /// The target answered with an error status.
    #[error("HTTP {status}{hint}: {excerpt}")]
    Status {
        /// Its status.
        status: hyper::StatusCode,
        /// What it likely means, for 404 and 401/403 (empty otherwise).
        hint: &'static str,
        /// What its body says, on one line.
        excerpt: String,
    },
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The answer is not a pprof profile.
    #[error("not a pprof profile: {0}")]
    NotPprof(String),
    /// The profile is past a limit of one profile.
    #[error("{0}")]
    Limits(String),
    /// The profile could not be converted to OTLP.
    #[error("converting: {0}")]
    Converting(String),
    /// The pipeline refused it (full, or a failing sink).
    #[error("{0}")]
    Refused(String),
}

/// Starts one task per (target, profile kind); fails when an `https://` target's
/// certificates cannot be checked (none are trusted).
pub fn start(
    app: AppState,
    stop: watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ScrapeError> {
    let client = |https: bool, tls: &TlsSettings| -> Result<HttpClient, TlsError> {
        Ok(Client::builder(TokioExecutor::new()).build(crate::tls::connector(https, false, tls)?))
    };
    // One client for the targets with the default TLS settings, one each for the others.
    let https = app
        .config
        .receivers
        .scrape
        .iter()
        .filter(|t| t.tenant == app.tenant)
        .any(|t| t.url.starts_with("https://") && t.tls.is_default());
    let shared = client(https, &TlsSettings::default()).map_err(|source| ScrapeError::Tls {
        service: None,
        source,
    })?;
    let mut tasks = Vec::new();
    let mine = app
        .config
        .receivers
        .scrape
        .iter()
        .filter(|t| t.tenant == app.tenant);
    for target in mine.cloned().collect::<Vec<_>>() {
        target.check().map_err(|source| ScrapeError::Target {
            service: target.service.clone(),
            source,
        })?;
        let client = if target.tls.is_default() {
            shared.clone()
        } else {
            client(target.url.starts_with("https://"), &target.tls).map_err(|source| {
                ScrapeError::Tls {
                    service: Some(target.service.clone()),
                    source,
                }
            })?
        };
        if target.tls.insecure_skip_verify {
            tracing::warn!(service = %target.service, url = %target.url, "TLS certificates are not checked (tls.insecure_skip_verify): anyone on the path can pose as the target");
        }
        tracing::info!(service = %target.service, url = %target.url, profiles = ?target.profiles, interval = ?target.interval, "scraping");
        for kind in target.profiles.clone() {
            let (app, client, stop, target) =
                (app.clone(), client.clone(), stop.clone(), target.clone());
            tasks.push(tokio::spawn(async move {
                scrape_loop(app, client, target, kind, stop).await
            }));
        }
    }
    Ok(tasks)
}

/// The path of a profile kind, and the Pyroscope name its profiles get.
fn endpoint(kind: &str, seconds: u64) -> Option<(String, &'static str)> {
    let path = match kind {
        "cpu" => format!("/debug/pprof/profile?seconds={seconds}"),
        "heap" | "allocs" | "goroutine" | "mutex" | "block" => format!("/debug/pprof/{kind}"),
        _ => return None,
    };
    Some((path, profile_name(kind)?))
}

/// The Pyroscope name (`__name__`) of a Go profile kind's profiles (`cpu` → `process_cpu`,
/// as Alloy's Go scrape config names them).
pub(crate) fn profile_name(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "cpu" => "process_cpu",
        "heap" | "allocs" => "memory",
        "goroutine" => "goroutines",
        "mutex" => "mutex",
        "block" => "block",
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
    let cpu = kind == "cpu";
    // The window a CPU profile is asked for.
    let window = cpu.then(|| Duration::from_secs(seconds));
    let url = format!("{}{path}", target.url);
    let headers = request_headers(&target);
    // Replicas of one service are targets of one name: `instance` tells them apart, as in
    // Prometheus.
    let labels: [(&'static str, &str); 3] = [
        ("target", &target.service),
        ("instance", instance_of(&target.url)),
        ("profile", &kind),
    ];
    // Counted from 0 (an alert's `increase()` sees the first failure).
    let values = labels.map(|(_, v)| v);
    app.metrics.scrapes.add(&values, (), 0.0);
    app.metrics.scrape_errors.add(&values, (), 0.0);
    let mut outcomes = Outcomes::new(&app, &target, &url, labels);
    // Heap, allocs, mutex and block count since the program started: each profile is
    // stored as what happened since the one before.
    let mut cumulative = Cumulative::new();
    // A CPU window's body, stored while the next window runs: the next request goes out as
    // soon as a window's answer is in, not after it is decoded and durably written (which
    // under load takes as long as the ingest queue is deep), so the target profiles nearly
    // all the time.
    let mut unstored: Option<Bytes> = None;
    while !*stop.borrow() {
        let started = Instant::now();
        // A CPU request lasts the window itself, then the timeout.
        let timeout = if cpu {
            Duration::from_secs(seconds) + target.timeout
        } else {
            target.timeout
        };
        let fetch = async {
            tokio::select! {
                r = fetch(&client, &url, &headers, target.bearer_token_file.as_deref(), timeout, app.config.server.max_body_size) => Some(r),
                _ = stop.wait_for(|s| *s) => None,
            }
        };
        let store_previous = async {
            if let Some(body) = unstored.take() {
                let stored = ingest(&app, &target, name, window, &body, &mut cumulative).await;
                outcomes.note(stored);
            }
        };
        let (fetched, ()) = tokio::join!(fetch, store_previous);
        let Some(fetched) = fetched else { break };
        let duration = &app.metrics.scrape_duration_seconds;
        duration.set(&values, (), started.elapsed().as_secs_f64());
        let answered = fetched.is_ok();
        match fetched {
            Ok(body) if cpu => unstored = Some(body),
            Ok(body) => {
                outcomes.note(ingest(&app, &target, name, window, &body, &mut cumulative).await)
            }
            Err(e) => outcomes.note(Err(e)),
        }
        // CPU windows follow each other at once while the target answers, whatever became
        // of storing the last one (a target that answers before its window is over, ignoring
        // `seconds`, waits out the rest: else it would be asked again and again); other
        // kinds wait an interval; failing targets are retried with backoff.
        let wait = match outcomes.failures {
            _ if cpu && answered => Duration::from_secs(seconds).saturating_sub(started.elapsed()),
            0 => target.interval,
            n => retry_delay(n, target.interval),
        };
        if !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
    // The last window taken is stored before the server stops.
    if let Some(body) = unstored {
        outcomes.note(ingest(&app, &target, name, window, &body, &mut cumulative).await);
    }
}

/// What a target's scrapes came to: counted, and logged at the first failure of a run, when
/// the error changes, and when the target answers again. CPU windows' target times also
/// give the time between one window's end and the next one's start, when nothing was
/// profiled (`spanprof_scrape_unprofiled_seconds_total`).
struct Outcomes<'a> {
    app: &'a AppState,
    target: &'a ScrapeTarget,
    url: &'a str,
    labels: [(&'static str, &'a str); 3],
    /// Failures in a row.
    failures: u32,
    /// The error last logged for this run of failures.
    logged: Option<String>,
    /// When the last stored CPU window ended, in the target's clock (ns since the epoch).
    window_end: Option<i64>,
}

impl<'a> Outcomes<'a> {
    fn new(
        app: &'a AppState,
        target: &'a ScrapeTarget,
        url: &'a str,
        labels: [(&'static str, &'a str); 3],
    ) -> Self {
        Outcomes {
            app,
            target,
            url,
            labels,
            failures: 0,
            logged: None,
            window_end: None,
        }
    }

    fn note(&mut self, outcome: Result<Window, ScrapeFailure>) {
        let (app, target, url) = (self.app, self.target, self.url);
        let labels = &self.labels;
        let values = labels.map(|(_, v)| v);
        let up = if outcome.is_ok() { 1.0 } else { 0.0 };
        app.metrics.scrape_up.set(&values, (), up);
        match outcome {
            Ok(window) => {
                if self.failures > 0 {
                    tracing::info!(service = %target.service, url = %url, failures = self.failures, "scrape succeeded again");
                }
                self.failures = 0;
                self.logged = None;
                app.metrics.scrapes.add(&values, (), 1.0);
                if labels[2].1 == "cpu" {
                    self.cpu_window(window);
                }
            }
            Err(e) => {
                self.failures += 1;
                app.metrics.scrape_errors.add(&values, (), 1.0);
                // A dead target fails at every try: said once, and again if the error
                // changes (spanprof_scrape_up and the error count follow every try).
                let e = e.to_string();
                if self.logged.as_deref() == Some(e.as_str()) {
                    tracing::debug!(service = %target.service, url = %url, error = %e, failures = self.failures, "scrape failed again");
                } else {
                    tracing::warn!(service = %target.service, url = %url, error = %e, "scrape failed (logged again when the error changes; retried with backoff)");
                    self.logged = Some(e);
                }
            }
        }
    }

    /// Counts the time the target was not profiled since the last window: between two
    /// back-to-back windows, the target finishing its profile (Go: up to 100 ms, more when
    /// busy), the answer's transfer and the next request; a failed or refused window, a
    /// restart or a clock step, all of it. A window a target
    /// dates before the previous one's end (a clock step back) counts nothing.
    fn cpu_window(&mut self, window: Window) {
        let Window { start_ns, end_ns } = window;
        if start_ns <= 0 || end_ns < start_ns {
            return; // The target does not date its profiles.
        }
        if let Some(previous) = self.window_end.replace(end_ns) {
            let gap = start_ns.saturating_sub(previous).max(0);
            tracing::debug!(service = %self.target.service, gap_ms = gap as f64 / 1e6, "CPU window stored");
            let values = [self.labels[0].1, self.labels[1].1];
            let unprofiled = &self.app.metrics.scrape_unprofiled_seconds;
            unprofiled.add(&values, (), gap as f64 / 1e9);
        }
    }
}

/// A target's `instance` label: its URL's `host:port`, and its path when it has one (two
/// services behind one proxy, `http://proxy/a` and `http://proxy/b`, are two instances).
/// Credentials are out of the URL by now (a basic authorization header).
fn instance_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest[..rest.find(['?', '#']).unwrap_or(rest.len())].trim_end_matches('/')
}

/// The time a scraped profile covers, in the target's clock (ns since the epoch; 0 when the
/// profile has no time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    start_ns: i64,
    end_ns: i64,
}

/// The wait after the `failures`-th failure in a row: 1 s, doubling, up to an interval (as
/// Prometheus retries a dead target at every interval). A service back from a short restart
/// is scraped again within a second or two, so its next CPU window starts then (a wait of
/// up to 4 intervals left its first minute of spans unprofiled).
fn retry_delay(failures: u32, interval: Duration) -> Duration {
    let doubled = Duration::from_secs(1u64 << failures.saturating_sub(1).min(20));
    doubled.min(interval)
}

/// The target's own headers ([`start`] has checked them: [`ScrapeTarget::check`]).
fn request_headers(target: &ScrapeTarget) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in &target.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            headers.append(k, v);
        }
    }
    headers
}

/// `authorization: Bearer …` from the token file, read now (a rotated token is used at once;
/// a few bytes of a local file, read in place).
fn bearer(file: &Path) -> Result<HeaderValue, ScrapeFailure> {
    let token = std::fs::read_to_string(file).map_err(|e| ScrapeFailure::BearerRead {
        file: file.to_owned(),
        reason: e.to_string(),
    })?;
    HeaderValue::try_from(format!("Bearer {}", token.trim())).map_err(|e| {
        ScrapeFailure::BearerValue {
            file: file.to_owned(),
            reason: e.to_string(),
        }
    })
}

async fn fetch(
    client: &HttpClient,
    url: &str,
    headers: &HeaderMap,
    bearer_token_file: Option<&Path>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Bytes, ScrapeFailure> {
    let bad_url = |reason: String| ScrapeFailure::BadUrl {
        url: url.to_owned(),
        reason,
    };
    let uri: hyper::Uri = url.parse().map_err(|e| bad_url(format!("{e}")))?;
    let mut request = hyper::Request::get(uri)
        .body(Empty::new())
        .map_err(|e| bad_url(e.to_string()))?;
    request.headers_mut().extend(headers.clone());
    if let Some(file) = bearer_token_file {
        request
            .headers_mut()
            .insert(hyper::header::AUTHORIZATION, bearer(file)?);
    }
    let request = async {
        let response = client.request(request).await.map_err(|e| {
            // hyper's own text ("client error (Connect)") says little; the causes say why.
            let causes = crate::error_causes(&e);
            if e.is_connect() {
                ScrapeFailure::Connect(causes)
            } else {
                ScrapeFailure::Request(causes)
            }
        })?;
        let status = response.status();
        let html = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| ScrapeFailure::Body(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let hint = match status {
                hyper::StatusCode::NOT_FOUND => {
                    " (no pprof endpoint at this base URL: a Go service serves one once it \
                     imports net/http/pprof on its default mux)"
                }
                hyper::StatusCode::UNAUTHORIZED | hyper::StatusCode::FORBIDDEN => {
                    " (the target wants credentials: give its receivers.scrape entry in the \
                     config file headers or bearer_token_file, or user:password@ in its url)"
                }
                _ => "",
            };
            return Err(ScrapeFailure::Status {
                status,
                hint,
                excerpt: excerpt(&body, html),
            });
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| ScrapeFailure::Timeout(timeout))?
}

/// What an error answer's body says, on one line (log lines stay lines): an HTML page's
/// title, else its first 200 bytes with each run of white space made one space.
fn excerpt(body: &[u8], html: bool) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    let text = if html || text.trim_start().starts_with('<') {
        let lower = text.to_ascii_lowercase();
        match (lower.find("<title>"), lower.find("</title>")) {
            (Some(a), Some(b)) if a + 7 <= b => {
                format!("an HTML page, {:?}", text[a + 7..b].trim())
            }
            _ => "an HTML page".to_owned(),
        }
    } else {
        text.into_owned()
    };
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

async fn ingest(
    app: &AppState,
    target: &ScrapeTarget,
    name: &str,
    cpu_window: Option<Duration>,
    body: &[u8],
    cumulative: &mut Cumulative,
) -> Result<Window, ScrapeFailure> {
    let mut profile = pprof::decode(body, app.config.server.max_decompressed_size)
        .map_err(|e| ScrapeFailure::NotPprof(e.to_string()))?;
    if let Some(asked) = cpu_window {
        sampled_window(&mut profile, asked);
    }
    // Named by what the profile is, as a pushed one is: a Node target's `cpu` endpoint
    // answers a wall-clock profile, and its heap unnamed V8 types.
    profile_type::name_v8_types(&mut profile);
    let content_name = profile_type::name_from_content(
        profile
            .sample_type
            .iter()
            .map(|t| profile.str(t.r#type).unwrap_or("")),
    );
    let name = content_name.unwrap_or(name);
    let window = Window {
        start_ns: profile.time_nanos,
        end_ns: profile.time_nanos.saturating_add(profile.duration_nanos),
    };
    app.config
        .server
        .profile_limits()
        .check_pprof(&profile)
        .map_err(|e| ScrapeFailure::Limits(e.to_string()))?;
    // Put back if the profile is not stored: the next delta then covers this interval too.
    let before = cumulative.clone();
    let delta = cumulative.apply(&mut profile);
    match delta {
        Delta::NotCumulative => {}
        Delta::Baseline => {
            tracing::debug!(service = %target.service, profile = name, samples = profile.sample.len(), "first profile of counts since the program started: kept to subtract from the next (only its snapshot values are stored)");
        }
        Delta::Since { restarted, .. } if restarted > 0 => {
            tracing::info!(service = %target.service, profile = name, restarted, "counts went down since the last scrape (the program restarted?): those samples are stored whole");
        }
        Delta::Since { .. } => {}
    }
    if delta != Delta::NotCumulative && profile.sample.is_empty() {
        // Nothing happened since the last scrape (or this is the first).
        return Ok(window);
    }
    let mut attributes = vec![
        string_kv("service.name", &target.service),
        string_kv(spanprof_store::store::PROFILE_NAME_ATTRIBUTE, name),
    ];
    attributes.extend(target.labels.iter().map(|(k, v)| string_kv(k, v)));
    let resource = Resource {
        attributes,
        ..Default::default()
    };
    let stored = async {
        let mut batch = Batch::new(Some(app.config.processors.link.clone()));
        batch.set_span_parents(super::known_spans::StoredSpans::of(
            &app.store,
            &app.nesting,
        ));
        batch
            .add_pprof(&profile, resource)
            .map_err(|e| ScrapeFailure::Converting(e.to_string()))?;
        let (mut data, report) = batch.finish();
        if let Delta::Since {
            previous_time_nanos,
            ..
        } = delta
        {
            stamp_deltas(&mut data, previous_time_nanos);
        }
        app.metrics.record_received(Receiver::Scrape, &report);
        app.span_keys
            .inspect(&data, &app.config.processors.link, &app.store, &app.metrics);
        app.pipeline
            .submit(Work::Profiles(data, Storing::EachAlone), Receiver::Scrape)
            .await
            .map_err(|e| ScrapeFailure::Refused(e.to_string()))
    }
    .await;
    if stored.is_err() {
        *cumulative = before;
    }
    stored.map(|()| window)
}

/// Ends a CPU profile's window when sampling stopped. Go stops sampling when the window asked
/// for is over, but dates the profile's end when it has built it: after its profile writer's
/// next read of the samples (it reads every 100 ms), up to 100 ms later on an idle machine
/// and more on a busy one. Spans in that time were not profiled; a window that claimed them
/// reported them as using no CPU rather than as fallen between two windows. A profile
/// shorter than asked (a target that ignores `seconds`) keeps its own length.
pub(crate) fn sampled_window(profile: &mut pprof::Profile, asked: Duration) {
    let asked = i64::try_from(asked.as_nanos()).unwrap_or(i64::MAX);
    if profile.time_nanos > 0 && profile.duration_nanos > asked {
        profile.duration_nanos = asked;
    }
}

/// Stamps the delta sample types of `data` (one OTLP profile each) with the interval they
/// count, from the previous scrape at `since_ns` to this one, as CPU windows are stamped
/// (start and duration): both then fall in the same bucket of a timeline. The snapshot types
/// beside them (`inuse_*`) keep the scrape's time.
fn stamp_deltas(data: &mut ProfilesData, since_ns: i64) {
    let Some(dict) = data.dictionary.as_ref() else {
        return;
    };
    let since = u64::try_from(since_ns).unwrap_or(0);
    for p in data
        .resource_profiles
        .iter_mut()
        .flat_map(|r| &mut r.scope_profiles)
        .flat_map(|s| &mut s.profiles)
    {
        let name = p
            .sample_type
            .as_ref()
            .and_then(|t| usize::try_from(t.type_strindex).ok())
            .and_then(|i| dict.string_table.get(i))
            .map_or("", String::as_str);
        if is_cumulative(name) && since > 0 && since < p.time_unix_nano {
            p.duration_nano = p.time_unix_nano - since;
            p.time_unix_nano = since;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{excerpt, instance_of, retry_delay, sampled_window, stamp_deltas};
    use spanprof_format::pprof::{Function, Line, Location, Profile, Sample, ValueType};
    use spanprof_format::Batch;

    #[test]
    fn an_instance_is_a_targets_address_and_path() {
        for (url, instance) in [
            ("http://10.0.0.7:6060", "10.0.0.7:6060"),
            ("https://api.internal", "api.internal"),
            ("http://proxy:8080/a/", "proxy:8080/a"),
            ("http://[::1]:6060/svc?x=1", "[::1]:6060/svc"),
        ] {
            assert_eq!(instance_of(url), instance, "{url}");
        }
    }

    #[test]
    fn a_cpu_window_ends_when_the_window_asked_for_does() {
        let asked = Duration::from_secs(15);
        for (time, duration, stored) in [
            // Go: built 80 ms after sampling stopped.
            (1_000, 15_080_000_000, 15_000_000_000),
            // A target that ignores `seconds` and answers early keeps its own length.
            (1_000, 2_000_000_000, 2_000_000_000),
            // An undated profile is left alone.
            (0, 15_080_000_000, 15_080_000_000),
        ] {
            let mut p = Profile {
                time_nanos: time,
                duration_nanos: duration,
                ..Default::default()
            };
            sampled_window(&mut p, asked);
            assert_eq!((p.time_nanos, p.duration_nanos), (time, stored));
        }
    }

    #[test]
    fn delta_types_are_stamped_with_their_interval_and_snapshots_with_the_scrape() {
        let mut p = Profile {
            string_table: ["", "alloc_space", "inuse_space", "bytes", "main.f"]
                .map(String::from)
                .to_vec(),
            time_nanos: 25_000,
            ..Default::default()
        };
        p.sample_type = vec![
            ValueType { r#type: 1, unit: 3 },
            ValueType { r#type: 2, unit: 3 },
        ];
        p.function.push(Function {
            id: 1,
            name: 4,
            ..Default::default()
        });
        p.location.push(Location {
            id: 1,
            line: vec![Line {
                function_id: 1,
                line: 1,
                column: 0,
            }],
            ..Default::default()
        });
        p.sample.push(Sample {
            location_id: vec![1],
            value: vec![10, 20],
            label: Vec::new(),
        });
        let mut batch = Batch::new(None);
        batch.add_pprof(&p, Default::default()).unwrap();
        let (mut data, _) = batch.finish();
        stamp_deltas(&mut data, 10_000);
        let times: Vec<(u64, u64)> = data.resource_profiles[0].scope_profiles[0]
            .profiles
            .iter()
            .map(|p| (p.time_unix_nano, p.duration_nano))
            .collect();
        // pprof's default type (the last, inuse_space) comes first.
        assert_eq!(times, [(25_000, 0), (10_000, 15_000)]);
    }

    #[test]
    fn failing_targets_are_retried_from_a_second_up_to_an_interval() {
        let waits: Vec<u64> = (1..=7)
            .map(|n| retry_delay(n, Duration::from_secs(60)).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60]);
        assert_eq!(retry_delay(u32::MAX, Duration::from_secs(15)).as_secs(), 15);
        assert_eq!(
            retry_delay(1, Duration::from_millis(200)),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn error_bodies_are_excerpted_on_one_line() {
        let page = b"<!DOCTYPE HTML>\n<html>\n<head><TITLE>Error response</TITLE></head>\n<body>404</body>";
        assert_eq!(excerpt(page, false), "an HTML page, \"Error response\"");
        assert_eq!(excerpt(b"<html><body>no title", true), "an HTML page");
        assert_eq!(
            excerpt(b"404 page not found\n", false),
            "404 page not found"
        );
        assert_eq!(
            excerpt(b"line one\n\n  line\ttwo ", false),
            "line one line two"
        );
        let long = "x ".repeat(300);
        let cut = excerpt(long.as_bytes(), false);
        assert_eq!(cut.chars().count(), 201, "{cut}");
        assert!(cut.ends_with('…'));
    }
}
