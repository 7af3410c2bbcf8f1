//! `spanprof convert`: pprof ⇄ OTLP Profiles, merging several inputs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use prost::Message;
use spanprof_format::merge::split_by_resource;
use spanprof_format::to_pprof::{otlp_to_merged_pprof, otlp_to_pprof, service_name, PprofOptions};
use spanprof_format::{json, pprof};

use crate::input::{load_linked, write_file, write_stdout, LinkArgs};

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
    /// Output format; by default from OUT's extension: .otlp → otlp, .json → otlp-json,
    /// .pb.gz/.pprof and any other .gz → pprof, anything else → otlp (binary protobuf
    /// ExportProfilesServiceRequest). OTLP output to a name ending in .gz (out.otlp.gz,
    /// out.json.gz) is gzip-compressed; pprof output always is.
    #[arg(long, value_enum)]
    to: Option<Format>,
    /// With pprof output: label key for the span id of linked samples (unless they kept
    /// their id labels: see --keep-link-attributes).
    #[arg(long, default_value = "span_id", value_name = "KEY")]
    span_id_label: String,
    /// With pprof output: label key for the trace id of linked samples.
    #[arg(long, default_value = "trace_id", value_name = "KEY")]
    trace_id_label: String,
    /// Write one file per part instead of merging: with pprof output one profile per
    /// (resource, scope, sample-type group), with OTLP output one request per resource.
    /// Files are named OUT with `-N` before the extension (`out.pb.gz` → `out-0.pb.gz`, …).
    #[arg(long)]
    split: bool,
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
    let (stem, gz) = match name.strip_suffix(".gz") {
        Some(stem) => (stem, true),
        None => (name.as_str(), false),
    };
    if stem.ends_with(".otlp") {
        Format::Otlp
    } else if stem.ends_with(".json") {
        Format::OtlpJson
    } else if gz || stem.ends_with(".pprof") {
        // `.pb.gz`, any other `.gz`, `.pprof`: what pprof files are called.
        Format::Pprof
    } else {
        Format::Otlp
    }
}

/// Whether OUT's name asks for gzip (`.gz`): pprof always is; OTLP output then is too.
fn gzipped_name(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().ends_with(".gz"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let format = args.to.unwrap_or_else(|| format_from_path(&args.output));
    if args.output == Path::new("-")
        && format != Format::OtlpJson
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
    {
        anyhow::bail!(
            "not writing binary {} to a terminal: redirect standard output, or give -o a file",
            if format == Format::Pprof {
                "pprof"
            } else {
                "OTLP protobuf"
            }
        );
    }
    let (data, report) = load_linked(&args.inputs, &args.link)?;
    let opts = PprofOptions {
        span_id_label: args.span_id_label.clone(),
        trace_id_label: args.trace_id_label.clone(),
    };
    eprintln!("converted {report}");
    if !args.split {
        let bytes = match format {
            Format::Pprof => {
                pprof::encode_gzip(&otlp_to_merged_pprof(&data, &opts).map_err(|e| {
                    let hint = if e.to_string().contains("cannot merge profiles") {
                        " (--split writes one pprof for each)"
                    } else {
                        ""
                    };
                    anyhow::anyhow!("converting to pprof: {e}{hint}")
                })?)
            }
            Format::Otlp => data.encode_to_vec(),
            Format::OtlpJson => json::encode_profiles_data(&data).into_bytes(),
        };
        return write(&args.output, &bytes, format).map(|()| ExitCode::SUCCESS);
    }
    if args.output == Path::new("-") {
        anyhow::bail!("--split writes several files; give -o a file name, not -");
    }
    match format {
        Format::Pprof => {
            for (i, part) in otlp_to_pprof(&data, &opts)
                .context("converting to pprof")?
                .iter()
                .enumerate()
            {
                let resource = data.resource_profiles[part.resource_index]
                    .resource
                    .as_ref();
                let service = resource.and_then(service_name).unwrap_or("unknown service");
                let path = numbered(&args.output, i);
                eprintln!(
                    "  part {i}: {service}, resource {} scope {}",
                    part.resource_index, part.scope_index
                );
                write(&path, &pprof::encode_gzip(&part.profile), format)?;
            }
        }
        Format::Otlp | Format::OtlpJson => {
            for (i, part) in split_by_resource(&data)
                .context("splitting by resource")?
                .iter()
                .enumerate()
            {
                let bytes = match format {
                    Format::OtlpJson => json::encode_profiles_data(part).into_bytes(),
                    _ => part.encode_to_vec(),
                };
                write(&numbered(&args.output, i), &bytes, format)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write(path: &Path, bytes: &[u8], format: Format) -> anyhow::Result<()> {
    let gzipped;
    let bytes = if format != Format::Pprof && gzipped_name(path) {
        gzipped = spanprof_format::gzip::gzip(bytes);
        &gzipped[..]
    } else {
        bytes
    };
    if path == Path::new("-") {
        write_stdout(bytes)?;
    } else {
        write_file(path, bytes)?;
    }
    let name = clap::ValueEnum::to_possible_value(&format)
        .map(|v| v.get_name().to_owned())
        .unwrap_or_default();
    eprintln!(
        "wrote {} bytes of {name} to {}",
        bytes.len(),
        path.display()
    );
    Ok(())
}

/// `out.pb.gz` → `out-3.pb.gz`, `out.otlp` → `out-3.otlp`, `out` → `out-3`.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let split = if name.to_ascii_lowercase().ends_with(".pb.gz") {
        name.len() - 6
    } else {
        name.rfind('.').filter(|&i| i > 0).unwrap_or(name.len())
    };
    path.with_file_name(format!("{}-{n}{}", &name[..split], &name[split..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_format_follows_the_name() {
        for (name, format) in [
            ("out.pb.gz", Format::Pprof),
            ("out.pprof", Format::Pprof),
            ("cpu.gz", Format::Pprof),
            ("out.otlp", Format::Otlp),
            ("out.otlp.gz", Format::Otlp),
            ("OUT.JSON", Format::OtlpJson),
            ("out.json.gz", Format::OtlpJson),
            ("out.bin", Format::Otlp),
            ("-", Format::Otlp),
        ] {
            assert_eq!(format_from_path(Path::new(name)), format, "{name}");
        }
        assert!(gzipped_name(Path::new("d/out.otlp.GZ")));
        assert!(!gzipped_name(Path::new("out.otlp")));
    }

    #[test]
    fn split_names_keep_the_extension() {
        assert_eq!(
            numbered(Path::new("d/out.pb.gz"), 3),
            PathBuf::from("d/out-3.pb.gz")
        );
        assert_eq!(
            numbered(Path::new("out.otlp"), 0),
            PathBuf::from("out-0.otlp")
        );
        assert_eq!(numbered(Path::new("out"), 1), PathBuf::from("out-1"));
        assert_eq!(
            numbered(Path::new(".hidden"), 1),
            PathBuf::from(".hidden-1")
        );
    }
}
