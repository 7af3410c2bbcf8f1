//! `spanprof check`: OTLP Profiles conformance.

use std::path::PathBuf;
use std::process::ExitCode;

use spanprof_format::check::{check, CheckOptions};
use spanprof_format::detect::Input;
use spanprof_format::FormatError;

use std::fmt::Write as _;

use crate::input::{decode_bytes, read, write_stdout};

/// Check OTLP Profiles payloads for conformance.
///
/// Applies every rule of the profiling SIG's profcheck (index bounds in every table, zero
/// entries at index 0, unique attribute keys, mapping ranges, link id lengths, sample shapes
/// and timestamps) plus the proto's own MUSTs that profcheck skips, and recognises payloads
/// written with the older v1.9 Sample numbering. Each violation is printed as `FILE: PATH:
/// MESSAGE`. Exit status: 0 conformant, 1 violations found, 2 an input could not be read.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// OTLP files: binary ExportProfilesServiceRequest/ProfilesData (optionally gzip) or JSON.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Also report duplicate entries in dictionary tables.
    #[arg(long)]
    dupes: bool,
    /// Also report dictionary entries nothing refers to.
    #[arg(long)]
    orphans: bool,
    /// Skip the rule that all samples of a profile share one shape.
    #[arg(long)]
    no_sample_shapes: bool,
    /// Largest decompressed input accepted, e.g. 64MiB (at least 1 byte).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = crate::input::parse_max_decompressed)]
    max_decompressed: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = CheckOptions {
        dupes: args.dupes,
        orphans: args.orphans,
        sample_shapes: !args.no_sample_shapes,
    };
    let (mut violations, mut unreadable) = (0usize, 0usize);
    for path in &args.files {
        let mut out = String::new();
        let shown = path.display();
        let decoded = read(path, args.max_decompressed)
            .and_then(|bytes| decode_bytes(&bytes, args.max_decompressed));
        match decoded {
            Ok(Input::Otlp(data)) => {
                let found = check(&data, &opts);
                if found.is_empty() {
                    let profiles: usize = data
                        .resource_profiles
                        .iter()
                        .flat_map(|r| &r.scope_profiles)
                        .map(|s| s.profiles.len())
                        .sum();
                    writeln!(out, "{shown}: conformant ({profiles} profiles)")?;
                }
                for v in &found {
                    writeln!(out, "{shown}: {v}")?;
                }
                violations += found.len();
            }
            Ok(Input::Jfr(..)) => {
                eprintln!("{shown}: this is a JFR recording, not OTLP Profiles; convert it first (spanprof convert {shown} -o out.otlp)");
                unreadable += 1;
            }
            Ok(Input::Pprof(_)) => {
                eprintln!("{shown}: this is a pprof profile, not OTLP Profiles; convert it first (spanprof convert {shown} -o out.otlp)");
                unreadable += 1;
            }
            Err(e) => match e.downcast_ref::<FormatError>() {
                // A v1.9 payload is readable, it just breaks the current wire rules.
                Some(FormatError::Invalid(msg)) if msg.contains("v1.9") => {
                    writeln!(out, "{shown}: {msg}")?;
                    violations += 1;
                }
                // The file itself could not be read: the error names it.
                _ if e.downcast_ref::<std::io::Error>().is_some() => {
                    eprintln!("{}", super::error_text(&e));
                    unreadable += 1;
                }
                _ => {
                    eprintln!("{shown}: cannot read: {}", super::error_text(&e));
                    unreadable += 1;
                }
            },
        }
        write_stdout(out.as_bytes())?;
    }
    if unreadable > 0 {
        return Ok(ExitCode::from(2));
    }
    if violations > 0 {
        eprintln!(
            "{violations} violation{} found",
            if violations == 1 { "" } else { "s" }
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
