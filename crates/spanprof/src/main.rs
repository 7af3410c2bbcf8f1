//! `spanprof`: from a slow trace span to the code that burned CPU inside it.
// Library and binary code only: a function past clippy.toml's limit (100 lines) is split
// at its steps or carries #[allow(clippy::too_many_lines)] with its reason. Tests (unit and
// integration), examples and benches are not held to it, so it is not in [workspace.lints].
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod cmd;
mod input;
mod store;
mod units;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Allocation-heavy decoding and dictionary building run ~10% faster on mimalloc than on glibc
// malloc (instruction counts of benches/convert.rs); the benches use it too.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its `mimalloc.h`, the same in v2 and v3): how long, in
/// ms, memory freed stays mapped before it is given back to the kernel.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory mapped for a second instead of mimalloc's 10 ms, unless
/// `MIMALLOC_PURGE_DELAY` says otherwise: the server frees and reallocates about the same
/// memory every batch, and giving it back sooner cost page faults and CPU (commit ef88eb0,
/// docs/performance.md).
// mimalloc's option calls are C functions without a safe wrapper.
#[allow(unsafe_code)]
fn tune_allocator() {
    // SAFETY: sets an option's default (an integer in mimalloc's option table); any value is
    // valid for this option, and it is called before any thread is started.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 1000) };
}

/// From a slow trace span to the code that burned CPU inside it.
///
/// spanprof converts pprof profiles to OTLP Profiles with every sample linked to the trace
/// span it ran in (from pprof labels such as `otel.profile.span_id` or `span_id`), checks OTLP
/// Profiles payloads for conformance, and draws the flame graph of one span.
#[derive(Parser, Debug)]
#[command(
    name = "spanprof",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = LOGS_HELP
)]
struct Cli {
    /// Logs on stderr: `text`, or `json` lines (`spanprof --help` says more) [default: text,
    /// or serve's --config file's `server.log_format`]
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// What `--log-format` does, said once (in `spanprof --help`) rather than in the help of every
/// command the global flag shows in.
const LOGS_HELP: &str = "Logs:
  --log-format text writes one readable line an event; --log-format json one JSON object a
  line (timestamp, level, target, message and the event's fields at the top level) for log
  collectors such as Loki, Elasticsearch or Cloud Logging: with `serve`, every line on stderr
  is then an object, fatal errors included (the offline commands still print their reports
  as text). RUST_LOG sets the level (RUST_LOG=debug).";

/// See [`Cli::log_format`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    Serve(cmd::serve::Args),
    Convert(cmd::convert::Args),
    Check(cmd::check::Args),
    Inspect(cmd::inspect::Args),
    Flame(cmd::flame::Args),
    Import(cmd::import::Args),
    Tenant(cmd::tenant::Args),
}

/// A RUST_LOG directive that reads as a level but is not one (`warning`, `verbose`): it
/// parses as a log target, which turned off every line, errors included. Names with `_` or
/// `::` (crates, modules) are left as targets.
fn not_a_level(filter: &str) -> Option<String> {
    const LOOK_LIKE_LEVELS: [&str; 10] = [
        "warning",
        "verbose",
        "err",
        "fatal",
        "critical",
        "crit",
        "information",
        "notice",
        "all",
        "none",
    ];
    filter
        .split(',')
        .map(str::trim)
        .find(|d| LOOK_LIKE_LEVELS.contains(&d.to_ascii_lowercase().as_str()))
        .map(|d| {
            format!(
                "{d:?} is not a level (it would name a log target and turn off every other \
                 line); the levels are off, error, warn, info, debug, trace"
            )
        })
}

fn main() -> ExitCode {
    tune_allocator();
    ignore_file_size_signal();
    let cli = Cli::parse();
    // Logs to stderr; RUST_LOG sets the level (the server logs at info by default).
    let default = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    // A RUST_LOG that does not parse is said once logging runs, not silently replaced.
    let (filter, bad_filter) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            match not_a_level(&v).map_or_else(
                || tracing_subscriber::EnvFilter::try_new(&v).map_err(|e| e.to_string()),
                Err,
            ) {
                Ok(f) => (f, None),
                Err(e) => (tracing_subscriber::EnvFilter::new(default), Some((v, e))),
            }
        }
        _ => (tracing_subscriber::EnvFilter::new(default), None),
    };
    // A log line that cannot be written is lost, not reported on stderr: that report is an
    // eprintln!, which panics when stderr is what failed (`2>/dev/full`, a closed pipe), and
    // took the server down at its first line.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    let file_config = match &cli.command {
        Command::Serve(a) => Some(cmd::serve::file_config(a)),
        _ => None,
    };
    let json = match (cli.log_format, &file_config) {
        (Some(format), _) => format == LogFormat::Json,
        (None, Some(Ok(c))) => c.server.log_format == spanprof_server::config::LogFormat::Json,
        (None, _) => false,
    };
    if json {
        // No tracing spans are used: each line is the event alone.
        logs.json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    if let Some((value, error)) = bad_filter {
        tracing::warn!(
            rust_log = %value,
            %error,
            "RUST_LOG is not a valid filter (e.g. info, debug, spanprof_server=debug): \
             logging at {default}"
        );
    }
    if matches!(cli.command, Command::Serve(_) | Command::Import(_)) {
        owner_only_files();
    }
    let result = match cli.command {
        Command::Serve(a) => {
            cmd::serve::run(a, json, file_config.expect("read for every serve command"))
        }
        Command::Convert(a) => cmd::convert::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Flame(a) => cmd::flame::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Tenant(a) => cmd::tenant::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if json => {
            tracing::error!("{}", cmd::error_text(&e));
            ExitCode::from(2)
        }
        Err(e) => {
            // Not eprintln!: an unwritable stderr would turn this exit into a panic.
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!("spanprof: error: {}\n", cmd::error_text(&e)),
            );
            ExitCode::from(2)
        }
    }
}

/// What a store holds is source-level data (function names, file paths, span attributes,
/// exception messages): the commands that write one create its directories 0700 and files
/// 0600, whatever the caller's umask.
// umask has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn owner_only_files() {
    #[cfg(unix)]
    // SAFETY: umask only sets the process's file creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// A write past the file size limit (`ulimit -f`, systemd's `LimitFSIZE=`) fails with EFBIG,
/// reported like a full disk, instead of SIGXFSZ killing the process with requests in flight.
// signal has no safe wrapper in std or our dependencies.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: sets the disposition of one signal to "ignore", before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests {
    use super::not_a_level;
    use clap::CommandFactory;

    /// Flag conflicts and bad defaults are caught here rather than at a user's first run.
    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// A word that reads as a level but would name a target is caught; levels, targets and
    /// target=level directives pass.
    #[test]
    fn rust_log_words_that_are_not_levels_are_caught() {
        for bad in ["warning", "Verbose", "info,err", " WARNING "] {
            assert!(not_a_level(bad).is_some(), "{bad}");
        }
        for good in [
            "warn",
            "WARN",
            "debug",
            "spanprof_server=debug",
            "info,spanprof_store::store=trace",
            "h2",
        ] {
            assert_eq!(not_a_level(good), None, "{good}");
        }
    }
}
