//! `spanprof import`: put profile and span files into a store directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use spanprof_format::gzip::maybe_gunzip;
use spanprof_format::trace::{decode_request, decode_request_json, ExportTraceServiceRequest};
use spanprof_format::Batch;
use spanprof_store::spans::spans_from_otlp;

use crate::input::{add_input, decode, read, LinkArgs};

/// Import profiles and spans into a store directory (for `flame --data` and the server).
///
/// Profile files (pprof or OTLP, as `convert` reads them) are linked to spans and stored, one
/// durable write per file. Span files (`--spans`) hold OTLP traces: an
/// ExportTraceServiceRequest in protobuf (optionally gzip) or OTLP JSON, or JSON Lines with one
/// request per line (what an OTLP/HTTP JSON exporter posts, appended). Profiles and spans may
/// come in either order: a sample with only a span id gets its trace from the span whenever
/// that span is stored.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Store directory (created if missing).
    #[arg(long, value_name = "DIR", default_value = "./spanprof-data")]
    data: PathBuf,
    /// OTLP trace files; repeat for several.
    #[arg(long = "spans", value_name = "FILE")]
    span_files: Vec<PathBuf>,
    /// Profile files (pprof or OTLP).
    #[arg(value_name = "PROFILE")]
    profiles: Vec<PathBuf>,
    #[command(flatten)]
    link: LinkArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.profiles.is_empty() && args.span_files.is_empty() {
        anyhow::bail!("nothing to import: give profile files and/or --spans FILE");
    }
    let store = crate::store::open(&args.data)?;
    for path in &args.span_files {
        let requests = read_trace_file(path, args.link.max_decompressed)
            .with_context(|| format!("{}", path.display()))?;
        let (mut stored, mut rejected) = (0, 0);
        for req in &requests {
            let (spans, report) = spans_from_otlp(&req.resource_spans);
            for reason in &report.reasons {
                eprintln!("{}: {reason}", path.display());
            }
            rejected += report.rejected;
            stored += spans.len();
            store.ingest(&[], spans)?;
        }
        eprintln!(
            "{}: stored {stored} spans ({rejected} rejected)",
            path.display()
        );
    }
    let labels = args.link.labels_snapshot()?;
    for path in &args.profiles {
        let input = decode(path, args.link.max_decompressed, labels.as_ref())?;
        let mut batch = Batch::new(Some(args.link.config()));
        add_input(&mut batch, input, &args.link).with_context(|| format!("{}", path.display()))?;
        let (data, conversion) = batch.finish();
        for service in store.services_already_holding(&data) {
            eprintln!(
                "{}: warning: {} already holds profiles of {service} taken when these were: \
                 if this file was imported before, its samples now count twice",
                path.display(),
                args.data.display()
            );
        }
        let report = store.ingest(&[&data], Vec::new())?;
        for p in &report.problems {
            eprintln!("{}: {p}", path.display());
        }
        eprintln!(
            "{}: stored {} profiles, {} samples ({} linked), {} new series",
            path.display(),
            report.profiles,
            report.samples,
            conversion.linked_samples,
            report.new_series
        );
    }
    let stats = store.stats();
    eprintln!(
        "{}: {} service{}, {} series, {} samples, {} spans, {} bytes on disk",
        args.data.display(),
        stats.services,
        if stats.services == 1 { "" } else { "s" },
        stats.series,
        stats.samples,
        stats.spans,
        stats.disk_bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// The requests of an OTLP trace file: protobuf, JSON, or JSON Lines.
fn read_trace_file(
    path: &std::path::Path,
    max: usize,
) -> anyhow::Result<Vec<ExportTraceServiceRequest>> {
    let bytes = read(path, max)?;
    let raw = maybe_gunzip(&bytes, max)?;
    let text = raw.iter().find(|b| !b.is_ascii_whitespace());
    if text != Some(&b'{') {
        return Ok(vec![decode_request(&raw)?]);
    }
    // One JSON document, or one per line.
    if let Ok(one) = decode_request_json(&raw) {
        return Ok(vec![one]);
    }
    raw.split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| line.iter().any(|b| !b.is_ascii_whitespace()))
        .map(|(i, line)| decode_request_json(line).with_context(|| format!("line {}", i + 1)))
        .collect()
}
