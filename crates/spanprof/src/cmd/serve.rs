//! `spanprof serve`: the long-running server (receivers, store, query API, UI).

use std::path::PathBuf;
use std::process::ExitCode;

/// Run the spanprof server (not built yet in this version).
///
/// The server (scrape and push receivers, OTLP, the embedded store, the query API and UI) is
/// the next piece of work. Until it lands this command says so and exits with status 1; the
/// offline commands (`convert`, `check`, `inspect`, `flame`) work today.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory of the embedded store.
    #[arg(long, default_value = "./spanprof-data")]
    data: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    eprintln!(
        "spanprof serve: the server is not built yet (data directory would be {}).\n\
         Available now: spanprof convert | check | inspect | flame (see spanprof --help).",
        args.data.display()
    );
    Ok(ExitCode::from(1))
}
