//! `spanprof flame`: the flame graph of selected samples, offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use spanprof_format::link::parse_id;
use spanprof_store::store::Selection;
use spanprof_store::time::parse_time;
use spanprof_store::{render_svg, FlameTree, SampleSelector, SelectionSummary, SvgOptions};

use crate::input::{load_linked, write_file, write_stdout, LinkArgs};

/// Draw the flame graph of one span, one trace, or a whole profile.
///
/// Reads pprof or OTLP files (merged when several), a store directory (`--data`), or the
/// Pyroscope and Tempo a config file's `storage.backend: remote` names (`--config`), keeps the
/// samples of the selected spans/trace, profile type, service, time range and labels, and
/// prints their merged stacks.
/// `collapsed` prints `root;…;leaf VALUE` lines (function names, root first), one per
/// distinct stack with values summed, for `flamegraph.pl`/`inferno` or a quick `sort -k2`.
/// Exits 1 when no sample matched (as grep does), 2 on an error.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input files (pprof or OTLP, `-` for standard input).
    #[arg(required_unless_present_any = ["data", "config"], value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Answer from a store directory (as written by `spanprof serve` or `spanprof import`)
    /// instead of files.
    #[arg(long, value_name = "DIR", conflicts_with = "inputs")]
    data: Option<PathBuf>,
    /// Answer from the remote backend of this config file (`storage.backend: remote`: its
    /// Pyroscope's querier.v1, its Tempo for --include-child-spans), as `spanprof serve
    /// --config FILE` would; the store flags (--service, --from, …) apply as with --data.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["inputs", "data"])]
    config: Option<PathBuf>,
    /// With --data: only this service.
    #[arg(long)]
    service: Option<String>,
    /// With --data: start of the time range (RFC 3339, unix s/ms, or now-1h).
    #[arg(long)]
    from: Option<String>,
    /// With --data: end of the time range (RFC 3339, unix s/ms, or now).
    #[arg(long)]
    to: Option<String>,
    /// With --data: label selector, e.g. '{span_name="GET /cart"}' (the labels as the
    /// profiles carry them).
    #[arg(long)]
    query: Option<String>,
    /// With --data: add the samples of every descendant of the selected spans.
    #[arg(long)]
    include_child_spans: bool,
    /// Keep only samples of this span (16 hex chars); repeat for several spans.
    #[arg(long = "span-id", value_name = "HEX")]
    span_ids: Vec<String>,
    /// Keep only samples of this trace (32 hex chars).
    #[arg(long, value_name = "HEX")]
    trace_id: Option<String>,
    /// Profile type: `cpu`, `cpu:nanoseconds`, `heap` (the heap profile's default type,
    /// inuse_space), or a Pyroscope id such as `process_cpu:cpu:nanoseconds:cpu:nanoseconds`.
    /// Default: each input's default type.
    #[arg(long = "type", value_name = "ID")]
    profile_type: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "collapsed")]
    format: Format,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    link: LinkArgs,
}

/// Output formats of `flame`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `root;…;leaf VALUE` lines.
    Collapsed,
    /// A nested JSON tree: name, total, self, children.
    Json,
    /// A standalone SVG flame graph.
    Svg,
}

// Long: the command's steps (check arguments, read, select, render) over one set of arguments.
#[allow(clippy::too_many_lines)]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // clap's `requires` above does not hold beside the positional inputs: checked here.
    if args.data.is_none() && args.config.is_none() {
        let store_only = [
            ("--service", args.service.is_some()),
            ("--from", args.from.is_some()),
            ("--to", args.to.is_some()),
            ("--query", args.query.is_some()),
            ("--include-child-spans", args.include_child_spans),
        ];
        let given: Vec<&str> = store_only
            .iter()
            .filter(|(_, set)| *set)
            .map(|(flag, _)| *flag)
            .collect();
        if !given.is_empty() {
            bail!(
                "{} select{} from a store: give --data DIR (a store written by `spanprof serve` \
                 or `spanprof import`) or --config FILE (a remote backend) instead of input \
                 files",
                given.join(", "),
                if given.len() == 1 { "s" } else { "" }
            );
        }
    }
    let mut selector = SampleSelector {
        profile_type: args.profile_type.clone(),
        ..Default::default()
    };
    for s in &args.span_ids {
        match parse_id::<8>(s) {
            Some(id) => selector.span_ids.push(id),
            None => {
                bail!("--span-id {s:?} is not a span id: expected 16 hex characters, not all zero")
            }
        }
    }
    if let Some(t) = &args.trace_id {
        selector.trace_id = Some(parse_id::<16>(t).with_context(|| {
            format!("--trace-id {t:?} is not a trace id: expected 32 hex characters, not all zero")
        })?);
    }
    let (tree, summary, note) = match (&args.data, &args.config) {
        (Some(dir), _) => from_store(dir, &args, selector.clone())?,
        (None, Some(file)) => from_remote(file, &args, selector.clone())?,
        (None, None) => {
            let (data, _) = load_linked(&args.inputs, &args.link)?;
            let (tree, summary) = FlameTree::from_profiles(&data, &selector)?;
            (tree, summary, None)
        }
    };
    if summary.samples_selected == 0 {
        eprintln!(
            "spanprof flame: no samples matched{} (profile types present: {})",
            if selector.filters_links() {
                " the selected span/trace"
            } else {
                ""
            },
            summary
                .available_types
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(note) = note {
            eprintln!("spanprof flame: {note}");
        }
    }
    if summary.bad_indices > 0 {
        eprintln!(
            "spanprof flame: skipped {} out-of-range references in the input",
            summary.bad_indices
        );
    }
    let out = match args.format {
        Format::Collapsed => tree.to_collapsed(),
        Format::Json => tree.to_nested_json(),
        Format::Svg => {
            let used = summary.used_types.first().cloned().unwrap_or_default();
            // The heading names what was selected, as the server's /api/v1/svg does.
            let shown = Selection {
                service: args.service.clone(),
                span_ids: selector.span_ids.clone(),
                trace_id: selector.trace_id,
                include_child_spans: args.include_child_spans,
                ..Default::default()
            };
            render_svg(
                &tree,
                &SvgOptions {
                    unit: used.sample_unit.clone(),
                    profile_type: shown.describe(&used.to_string()),
                    ..Default::default()
                },
            )
        }
    };
    match &args.output {
        // Nothing drawn: a file given keeps what it held.
        Some(path) if path != Path::new("-") && summary.samples_selected == 0 => {
            eprintln!("spanprof flame: {} left as it was", path.display());
        }
        Some(path) if path != Path::new("-") => write_file(path, out.as_bytes())?,
        _ => write_stdout(out.as_bytes())?,
    }
    // Nothing matched: said above, and told to scripts as grep does.
    Ok(if summary.samples_selected == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The selection of `args` as the embedded store and the remote backend take it.
fn selection(args: &Args, selector: SampleSelector) -> anyhow::Result<Selection> {
    let now = crate::store::now_ns();
    let time = |s: &Option<String>| {
        s.as_deref()
            .map(|t| parse_time(t, now))
            .transpose()
            .map_err(anyhow::Error::msg)
    };
    Ok(Selection {
        service: args.service.clone(),
        profile_type: selector.profile_type,
        from_ns: time(&args.from)?.unwrap_or(0),
        to_ns: time(&args.to)?.unwrap_or(0),
        label_selector: args.query.clone(),
        span_ids: selector.span_ids,
        trace_id: selector.trace_id,
        include_child_spans: args.include_child_spans,
        overlapping: false,
        span_filter: None,
    })
}

/// The flame graph from the Pyroscope (and Tempo) of `file`'s `storage.backend: remote`.
fn from_remote(
    file: &Path,
    args: &Args,
    selector: SampleSelector,
) -> anyhow::Result<(FlameTree, SelectionSummary, Option<String>)> {
    let config = spanprof_server::config_file::load(file, Default::default())
        .map_err(|e| anyhow::anyhow!("--config {}: {e}", file.display()))?;
    let Some(remote) = config.remote else {
        bail!(
            "--config {}: its storage.backend is not remote (spanprof flame reads a remote \
             backend from a config file; a store directory is --data DIR)",
            file.display()
        );
    };
    let remote = spanprof_server::remote::Remote::new(remote)
        .map_err(|e| anyhow::anyhow!("--config {}: {e}", file.display()))?;
    let sel = selection(args, selector)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let flame = runtime
        .block_on(remote.flame(&sel, false))
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let types: Vec<_> = flame.types.iter().map(Into::into).collect();
    let summary = SelectionSummary {
        available_types: types,
        used_types: flame.profile_type.iter().map(Into::into).collect(),
        // Pyroscope answers merged stacks, not the samples merged: one stands for them,
        // for the "nothing matched" exit.
        samples_selected: u64::from(flame.tree.total() > 0),
        value_selected: flame.tree.total(),
        profile_type_id: flame.profile_type.clone(),
        ..Default::default()
    };
    Ok((flame.tree, summary, None))
}

fn from_store(
    dir: &Path,
    args: &Args,
    selector: SampleSelector,
) -> anyhow::Result<(FlameTree, SelectionSummary, Option<String>)> {
    let store = crate::store::open_existing(dir)?;
    if let Some(service) = args.service.as_deref() {
        let known = store.services(0, 0);
        // With spans selected, `service` is the spans' (a tracer's name need not be a
        // profile's): only a plain selection is checked.
        if !known.iter().any(|s| s == service) && selector.span_ids.is_empty() {
            bail!(
                "the store {} has no profiles of service {service:?}; it has: {}",
                dir.display(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let sel = selection(args, selector)?;
    let (tree, summary) = store.flame_graph(&sel)?;
    let mut note = None;
    if let (0, Some(query)) = (summary.samples_selected, &args.query) {
        // A matcher on a label the profiles do not have (`span_name` for
        // `otel.profile.span_name`): name the keys they have.
        let unfiltered = Selection {
            label_selector: None,
            ..sel.clone()
        };
        let mut keys = store.label_names(&unfiltered)?;
        keys.retain(|k| !k.starts_with("__"));
        note = Some(format!(
            "--query {query} matches no profile; the label keys of the profiles selected \
             without it: {}",
            if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            }
        ));
    }
    if summary.samples_selected == 0 && note.is_none() && (sel.from_ns != 0 || sel.to_ns != 0) {
        // Nothing in the range asked for: say when the profiles there are were taken.
        let what = args.service.as_deref().unwrap_or("any service");
        note = Some(
            match store.profiles_taken_between(args.service.as_deref()) {
                Some((first, last)) => format!(
                    "the store's profiles of {what} were taken from {} to {}",
                    spanprof_store::time::format_rfc3339(first),
                    spanprof_store::time::format_rfc3339(last)
                ),
                None => format!("the store holds no profiles of {what}"),
            },
        );
    }
    Ok((tree, summary, note))
}
