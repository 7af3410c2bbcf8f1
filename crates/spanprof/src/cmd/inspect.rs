//! `spanprof inspect`: what a person wants to know first about a profile file.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use spanprof_format::detect::Input;
use spanprof_format::link::to_hex;
use spanprof_format::otlp::{any_value, ProfilesData};
use spanprof_store::{span_totals, FlameTree, FunctionOrder, SampleSelector};

use crate::input::{load_linked_seeing, write_stdout, LinkArgs};
use crate::units::format_value;

/// Summarise profile files: types, samples, links, top functions and per-span totals.
///
/// Like `go tool pprof -top` and `-tags` together: for each file, the profiles with their
/// sample types, sample counts and totals, how many samples are linked to spans, the top
/// functions by self value, and the spans with the most samples (for `flame --span-id`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// pprof or OTLP files; several are merged.
    #[arg(required = true, value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Profile type for the top functions and span totals (default: the first profile's).
    #[arg(long = "type", value_name = "ID")]
    profile_type: Option<String>,
    /// How many functions and spans to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    link: LinkArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = String::new();
    let (data, report) = load_linked_seeing(&args.inputs, &args.link, |path, input| {
        let kind = match input {
            Input::Pprof(p) => format!(
                "pprof, {} samples, {} sample types",
                p.sample.len(),
                p.sample_type.len()
            ),
            Input::Otlp(_) => "OTLP Profiles".to_string(),
            Input::Jfr(profiles, report) => jfr_summary(profiles, report),
        };
        let _ = writeln!(out, "{}: {kind}", path.display());
    })?;
    // Samples are counted once, per sample type, below: the report's count is over the OTLP
    // profiles, one per pprof sample type (1196 beside a pprof's 598).
    writeln!(
        out,
        "read {} input{}: {} profiles (one per sample type), {} links, {} invalid ids, {} span ids \
         without trace id",
        report.inputs,
        if report.inputs == 1 { "" } else { "s" },
        report.profiles,
        report.links,
        report.link.invalid_ids,
        report.link.span_ids_without_trace_id
    )?;
    print_profiles(&mut out, &data)?;
    print_top(&mut out, &data, &args)?;
    write_stdout(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// What a JFR recording held: chunks, what a sample is worth, the event types, the profiles.
fn jfr_summary(
    profiles: &[spanprof_format::jfr::JfrProfile],
    report: &spanprof_format::jfr::JfrReport,
) -> String {
    let events: Vec<String> = report
        .events
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    let kinds: Vec<&str> = profiles.iter().map(|p| p.kind.metric()).collect();
    let event = report
        .event_setting
        .as_deref()
        .map(|e| format!(" (async-profiler event {e})"))
        .unwrap_or_default();
    let kinds = if kinds.is_empty() {
        "none".to_owned()
    } else {
        kinds.join(", ")
    };
    format!(
        "JFR, {} chunk(s), a CPU or wall sample worth {} ns{event}, {} skipped events; \
         event types found: {}; profiles: {kinds}",
        report.chunks,
        report.period_ns,
        report.skipped_events,
        events.join(", "),
    )
}

fn print_profiles(out: &mut String, data: &ProfilesData) -> std::fmt::Result {
    let dict = data.dictionary.clone().unwrap_or_default();
    let s = |i: i32| {
        dict.string_table
            .get(i as usize)
            .map(String::as_str)
            .unwrap_or("?")
    };
    writeln!(
        out,
        "dictionary: {} strings, {} functions, {} locations, {} stacks, {} links, {} attributes",
        dict.string_table.len(),
        dict.function_table.len().saturating_sub(1),
        dict.location_table.len().saturating_sub(1),
        dict.stack_table.len().saturating_sub(1),
        dict.link_table.len().saturating_sub(1),
        dict.attribute_table.len().saturating_sub(1),
    )?;
    // (type, unit) -> (profiles, samples, linked samples, total)
    let mut by_type: BTreeMap<(String, String), (usize, usize, usize, i64)> = BTreeMap::new();
    let mut order = Vec::new();
    for p in data
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
    {
        let t = p.sample_type.unwrap_or_default();
        let key = (s(t.type_strindex).to_owned(), s(t.unit_strindex).to_owned());
        if !by_type.contains_key(&key) {
            order.push(key.clone());
        }
        let e = by_type.entry(key).or_default();
        e.0 += 1;
        e.1 += p.samples.len();
        e.2 += p.samples.iter().filter(|x| x.link_index != 0).count();
        e.3 += p
            .samples
            .iter()
            .map(|x| {
                if x.values.is_empty() {
                    x.timestamps_unix_nano.len() as i64
                } else {
                    x.values.iter().sum()
                }
            })
            .sum::<i64>();
    }
    writeln!(out, "profile types:")?;
    for key in &order {
        let (profiles, samples, linked, total) = by_type[key];
        let pct = if samples == 0 {
            0.0
        } else {
            100.0 * linked as f64 / samples as f64
        };
        writeln!(out, "  {}/{}: {profiles} profile(s), {samples} samples, total {}, {linked} samples linked to spans ({pct:.0}%)",
            key.0,
            key.1,
            format_value(total, &key.1)
        )?;
    }
    Ok(())
}

fn print_top(out: &mut String, data: &ProfilesData, args: &Args) -> anyhow::Result<()> {
    let selector = SampleSelector {
        profile_type: args.profile_type.clone(),
        ..Default::default()
    };
    let (tree, summary) = FlameTree::from_profiles(data, &selector)?;
    let Some(used) = summary.used_types.first() else {
        return Ok(());
    };
    let unit = used.sample_unit.as_str();
    let total = tree.total().max(1) as f64;
    writeln!(out, "top functions by self ({}):", used)?;
    writeln!(
        out,
        "  {:>10} {:>6} {:>10} {:>6}  function",
        "self", "self%", "total", "total%"
    )?;
    for f in tree
        .top_functions(FunctionOrder::SelfValue)
        .iter()
        .take(args.top)
    {
        writeln!(
            out,
            "  {:>10} {:>5.1}% {:>10} {:>5.1}%  {}",
            format_value(f.self_value as i64, unit),
            100.0 * f.self_value as f64 / total,
            format_value(f.total as i64, unit),
            100.0 * f.total as f64 / total,
            f.name
        )?;
    }
    let spans = span_totals(data, args.profile_type.as_deref())?;
    if spans.spans.is_empty() {
        writeln!(out, "no samples are linked to spans")?;
        return Ok(());
    }
    let names = span_names(data, &args.link.config().span_name_keys);
    let mut sorted = spans.spans.clone();
    sorted.sort_by(|a, b| b.total.cmp(&a.total).then(a.span_id.cmp(&b.span_id)));
    // Rows, not ticks: a Go CPU row holds every 10 ms tick of one stack (the server's span
    // answers count ticks, its `samples`).
    writeln!(
        out,
        "spans by total ({} spans; unlinked: {}; rows: sample rows, each one stack with its \
         ticks):",
        sorted.len(),
        format_value(spans.unlinked_total as i64, unit)
    )?;
    writeln!(
        out,
        "  {:<32} {:<16} {:>8} {:>10}  span name",
        "trace_id", "span_id", "rows", "total"
    )?;
    for s in sorted.iter().take(args.top) {
        writeln!(
            out,
            "  {:<32} {:<16} {:>8} {:>10}  {}",
            s.trace_id.map(|t| to_hex(&t)).unwrap_or_else(|| "-".into()),
            to_hex(&s.span_id),
            s.samples,
            format_value(s.total as i64, unit),
            names.get(&s.span_id).map_or("-", String::as_str)
        )?;
    }
    Ok(())
}

/// Each linked span's name, from its samples' span name attributes (`keys`, as linking keeps
/// them): what `flame --span-id` would draw.
fn span_names(data: &ProfilesData, keys: &[String]) -> HashMap<[u8; 8], String> {
    let mut names = HashMap::new();
    let Some(dict) = &data.dictionary else {
        return names;
    };
    let string = |i: i32| dict.string_table.get(usize::try_from(i).ok()?);
    let samples = data
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
        .flat_map(|p| &p.samples);
    for sample in samples {
        let Some(link) = usize::try_from(sample.link_index)
            .ok()
            .filter(|&i| i > 0)
            .and_then(|i| dict.link_table.get(i))
        else {
            continue;
        };
        let Ok(span) = <[u8; 8]>::try_from(link.span_id.as_slice()) else {
            continue;
        };
        if names.contains_key(&span) {
            continue;
        }
        let name = sample.attribute_indices.iter().find_map(|&i| {
            let kv = dict.attribute_table.get(usize::try_from(i).ok()?)?;
            keys.iter()
                .any(|k| Some(k) == string(kv.key_strindex))
                .then_some(())?;
            match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(v) => Some(v.clone()),
                _ => None,
            }
        });
        if let Some(name) = name {
            names.insert(span, name);
        }
    }
    names
}
