//! `spanprof serve`: the long-running server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use spanprof_server::config::{ScrapeTarget, ServerConfig};

/// Run spanprof: receive profiles and spans, link and store them, serve the query API.
///
/// With no flags: the UI, API, Pyroscope ingest and OTLP/HTTP on :4040, OTLP/HTTP on :4318,
/// OTLP gRPC on :4317, data in ./spanprof-data. Profiles come in pushed (OTLP/HTTP `POST /v1development/profiles`)
/// or pulled from Go `/debug/pprof` endpoints (`--scrape`); spans come in as OTLP traces
/// (`POST /v1/traces`). Samples are linked to their spans from pprof labels such as
/// `otel.profile.span_id` or `span_id`. Logs go to stderr; set the level with RUST_LOG
/// (e.g. RUST_LOG=debug). SIGTERM or Ctrl-C finishes requests in flight, flushes and exits.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Data directory of the embedded store.
    #[arg(long, default_value = "./spanprof-data", value_name = "DIR")]
    data: PathBuf,
    /// Address of the main listener (UI, API, Pyroscope ingest, OTLP/HTTP).
    #[arg(long, default_value = "0.0.0.0:4040", value_name = "ADDR")]
    http_addr: SocketAddr,
    /// Address of the OTLP/HTTP listener, or "off".
    #[arg(long, default_value = "0.0.0.0:4318", value_name = "ADDR")]
    otlp_http_addr: String,
    /// Address of the OTLP gRPC listener, or "off".
    #[arg(long, default_value = "0.0.0.0:4317", value_name = "ADDR")]
    otlp_grpc_addr: String,
    /// Pull profiles from a Go service: NAME=URL (the base URL, /debug/pprof/... is
    /// appended). Repeat for several services.
    #[arg(long = "scrape", value_name = "NAME=URL")]
    scrape: Vec<String>,
    /// Profiles to pull from every --scrape target (cpu, heap, allocs, goroutine, mutex, block).
    #[arg(
        long,
        default_value = "cpu,heap,goroutine",
        value_delimiter = ',',
        value_name = "KINDS"
    )]
    scrape_profiles: Vec<String>,
    /// Time between scrapes, and the length of each CPU window (e.g. 15s, 10s).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = parse_duration)]
    scrape_interval: Duration,
}

fn optional_addr(s: &str, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    match s {
        "off" | "none" | "" => Ok(None),
        a => Ok(Some(a.parse().with_context(|| {
            format!("{flag} {a:?} is not an address like 0.0.0.0:4317 (or off)")
        })?)),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    spanprof_store::time::parse_duration(s).map(Duration::from_nanos)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut config = ServerConfig {
        data_dir: args.data,
        http_addr: args.http_addr,
        ..Default::default()
    };
    config.otlp_http_addr = optional_addr(&args.otlp_http_addr, "--otlp-http-addr")?;
    config.otlp_grpc_addr = optional_addr(&args.otlp_grpc_addr, "--otlp-grpc-addr")?;
    for spec in &args.scrape {
        let (name, url) = spec.split_once('=').with_context(|| {
            format!("--scrape {spec:?}: expected NAME=URL, e.g. checkout=http://127.0.0.1:6060")
        })?;
        if !url.starts_with("http://") {
            anyhow::bail!("--scrape {spec:?}: the URL must start with http://");
        }
        let mut target = ScrapeTarget::new(name, url);
        target.profiles = args.scrape_profiles.clone();
        target.interval = args.scrape_interval;
        config.scrape.push(target);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        spanprof_server::serve(config, shutdown_signal(), |bound| {
            // One line a script can wait for.
            eprintln!("spanprof serving on http://{}", bound.http);
        })
        .await
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
