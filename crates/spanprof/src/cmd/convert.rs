//! `spanprof convert`: pprof ⇄ OTLP Profiles, merging several inputs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use prost::Message;
use spanprof_format::to_pprof::{otlp_to_merged_pprof, PprofOptions};
use spanprof_format::{json, pprof};

use crate::input::{load_linked, write_stdout, LinkArgs};

/// Convert pprof ⇄ OTLP Profiles, linking samples to spans.
///
/// Inputs may be pprof (gzip or raw), OTLP protobuf (ExportProfilesServiceRequest or
/// ProfilesData, optionally gzip) or OTLP JSON; the kind is detected. Several inputs are
/// merged: into one request with one dictionary for OTLP output, or summed into one profile
/// for pprof output (like `go tool pprof -proto a b`). Samples whose labels carry a valid
/// trace and span id get a link; the report on stderr counts links and invalid ids.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input files (`-` for standard input).
    #[arg(required = true, value_name = "IN")]
    inputs: Vec<PathBuf>,
    /// Output file (`-` for standard output).
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
    /// Output format; by default from OUT's extension: .pb.gz/.pprof/.gz → pprof, .json →
    /// otlp-json, anything else → otlp (binary protobuf ExportProfilesServiceRequest).
    #[arg(long, value_enum)]
    to: Option<Format>,
    /// With pprof output: label key for the span id of linked samples.
    #[arg(long, default_value = "span_id", value_name = "KEY")]
    span_id_label: String,
    /// With pprof output: label key for the trace id of linked samples.
    #[arg(long, default_value = "trace_id", value_name = "KEY")]
    trace_id_label: String,
    #[command(flatten)]
    link: LinkArgs,
}

/// Output formats of `convert`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// gzip-compressed pprof, readable by `go tool pprof`.
    Pprof,
    /// OTLP ExportProfilesServiceRequest, binary protobuf.
    Otlp,
    /// OTLP JSON (hex ids, 64-bit integers as strings).
    OtlpJson,
}

fn format_from_path(path: &Path) -> Format {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".pb.gz") || name.ends_with(".pprof") || name.ends_with(".gz") {
        Format::Pprof
    } else if name.ends_with(".json") {
        Format::OtlpJson
    } else {
        Format::Otlp
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (data, report) = load_linked(&args.inputs, &args.link)?;
    let format = args.to.unwrap_or_else(|| format_from_path(&args.output));
    let bytes = match format {
        Format::Pprof => {
            let opts = PprofOptions {
                span_id_label: args.span_id_label,
                trace_id_label: args.trace_id_label,
            };
            let merged = otlp_to_merged_pprof(&data, &opts).context("converting to pprof")?;
            pprof::encode_gzip(&merged)
        }
        Format::Otlp => data.encode_to_vec(),
        Format::OtlpJson => json::encode_profiles_data(&data).into_bytes(),
    };
    if args.output == Path::new("-") {
        write_stdout(&bytes)?;
    } else {
        std::fs::write(&args.output, &bytes)
            .with_context(|| format!("cannot write {}", args.output.display()))?;
    }
    let name = clap::ValueEnum::to_possible_value(&format)
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default();
    eprintln!(
        "converted {report}; wrote {} bytes of {name} to {}",
        bytes.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
