//! `spanprof`: from a slow trace span to the code that burned CPU inside it.

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
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Serve(cmd::serve::Args),
    Convert(cmd::convert::Args),
    Check(cmd::check::Args),
    Inspect(cmd::inspect::Args),
    Flame(cmd::flame::Args),
    Import(cmd::import::Args),
}

fn main() -> ExitCode {
    ignore_file_size_signal();
    let cli = Cli::parse();
    // Logs to stderr; RUST_LOG sets the level (the server logs at info by default).
    let default = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(a) => cmd::serve::run(a),
        Command::Convert(a) => cmd::convert::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Flame(a) => cmd::flame::run(a),
        Command::Import(a) => cmd::import::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("spanprof: error: {}", cmd::error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// A write past the file size limit (`ulimit -f`, systemd's `LimitFSIZE=`) fails with EFBIG,
/// reported like a full disk, instead of SIGXFSZ killing the process with requests in flight.
fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: sets the disposition of one signal to "ignore", before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Flag conflicts and bad defaults are caught here rather than at a user's first run.
    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
