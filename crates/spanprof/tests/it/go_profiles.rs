//! The CLI against real Go profiles: every kind `net/http/pprof` serves, taken from
//! `testprograms/goapp` under load, converted to OTLP and back, and read by independent tools
//! (`go tool pprof` for pprof, Python `opentelemetry-proto` for OTLP).

use spanprof_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;
use support::raw::{self, RawProfile};
use support::{capture, otlp_dump, pprof_raw, spanprof, ProfileKind};

// ---------------------------------------------------------------------------------------------
// Conversion to OTLP, checked by `spanprof check` and the Python decoder.

/// A sample as both sides can name it: function names root first, and its link.
type SampleKey = (Vec<String>, Option<(String, String)>);

/// Per sample type, the value of each (stack, link) summed over samples.
///
/// Summing is what pprof and OTLP both define for samples of equal identity, so a converter may
/// merge or split them. Zero totals are dropped: a per-type OTLP profile may omit a sample
/// whose value is zero for that type (e.g. freed heap objects' inuse values), and
/// `go tool pprof` drops all-zero samples itself (`profile.Merge`). Samples without a stack
/// are left out: `go tool pprof` always drops them (`FilterSamplesByName`), so it gives no
/// ground truth for them; Go writes one for goroutines whose stack it could not record.
type Totals = BTreeMap<String, BTreeMap<SampleKey, i64>>;

fn totals_of_raw(profile: &RawProfile) -> Totals {
    let mut totals = Totals::new();
    for (i, sample_type) in profile.sample_types.iter().enumerate() {
        let by_key = totals.entry(sample_type.clone()).or_default();
        for s in &profile.samples {
            *by_key
                .entry((s.functions_root_first(), s.link()))
                .or_default() += s.values[i];
        }
        by_key.retain(|(frames, _), v| *v != 0 && !frames.is_empty());
    }
    totals
}

fn totals_of_dump(dump: &Value) -> Totals {
    let mut totals = Totals::new();
    for profile in profiles(dump) {
        let sample_type = profile["sample_type"].as_str().unwrap().to_string();
        assert!(
            !totals.contains_key(&sample_type),
            "two OTLP profiles of type {sample_type}"
        );
        let by_key = totals.entry(sample_type).or_default();
        for s in profile["samples"].as_array().unwrap() {
            let frames = s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect();
            let link = (!s["link"].is_null()).then(|| {
                (
                    s["link"]["trace_id"].as_str().unwrap().to_string(),
                    s["link"]["span_id"].as_str().unwrap().to_string(),
                )
            });
            *by_key.entry((frames, link)).or_default() += s["value"].as_i64().unwrap();
        }
        by_key.retain(|(frames, _), v| *v != 0 && !frames.is_empty());
    }
    totals
}

fn profiles(dump: &Value) -> &Vec<Value> {
    dump["profiles"].as_array().expect("profiles array")
}

/// Panics with the first few differences between two totals.
fn assert_totals_eq(actual: &Totals, expected: &Totals, what: &str) {
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: sample types differ"
    );
    for (sample_type, want) in expected {
        let got = &actual[sample_type];
        let diffs: Vec<String> = want
            .keys()
            .chain(got.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|k| got.get(*k) != want.get(*k))
            .take(5)
            .map(|k| {
                format!(
                    "  {:?} link {:?}: got {:?}, want {:?}",
                    k.0.last(),
                    k.1,
                    got.get(k),
                    want.get(k)
                )
            })
            .collect();
        assert!(
            diffs.is_empty(),
            "{what}: {sample_type} totals differ ({} vs {} stacks), e.g.\n{}",
            got.len(),
            want.len(),
            diffs.join("\n")
        );
    }
}

/// `spanprof convert IN... -o OUT ARGS...`, which must succeed; returns its stderr report.
fn convert(inputs: &[&Path], out: &Path, args: &[&str]) -> String {
    let mut cmd: Vec<&OsStr> = vec![OsStr::new("convert")];
    cmd.extend(inputs.iter().map(|p| p.as_os_str()));
    cmd.extend([OsStr::new("-o"), out.as_os_str()]);
    cmd.extend(args.iter().map(OsStr::new));
    let run = spanprof(&cmd);
    run.assert_no_panic().assert_success();
    assert!(out.exists(), "convert wrote no {}", out.display());
    run.stderr
}

/// The numbers of convert's one-line report:
/// `converted N input(s): P profiles, S samples, L links, I invalid ids, M span ids without trace id`.
#[derive(Debug, PartialEq)]
struct Report {
    inputs: u64,
    profiles: u64,
    samples: u64,
    links: u64,
    invalid_ids: u64,
    span_ids_without_trace_id: u64,
}

fn parse_report(stderr: &str) -> Report {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("converted "))
        .unwrap_or_else(|| panic!("no `converted ...` report in stderr:\n{stderr}"));
    let number_before = |suffix: &str| -> u64 {
        let at = line
            .find(suffix)
            .unwrap_or_else(|| panic!("report lacks {suffix:?}: {line}"));
        line[..at]
            .trim_end()
            .rsplit([' ', ':', ','])
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number before {suffix:?}: {line}"))
    };
    Report {
        inputs: number_before(" input"),
        profiles: number_before(" profiles"),
        samples: number_before(" samples"),
        links: number_before(" links"),
        invalid_ids: number_before(" invalid ids"),
        span_ids_without_trace_id: number_before(" span ids without trace id"),
    }
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("go-profiles-")
        .tempdir_in(support::scratch_dir())
        .unwrap()
}

/// Converts one kind to OTLP and checks it with every tool: `spanprof check`, the report,
/// `spanprof inspect`, and the Python decoder against `go tool pprof -raw` of the original.
fn converts_to_linked_otlp(kind: ProfileKind) {
    let cap = capture();
    let dir = temp_dir();
    let orig = cap.profile(kind);
    let otlp = dir.path().join(format!("{}.otlp", kind.name()));
    let report = parse_report(&convert(&[&orig], &otlp, &["--to", "otlp"]));

    let check = spanprof([
        "check".as_ref(),
        otlp.as_os_str(),
        "--dupes".as_ref(),
        "--orphans".as_ref(),
    ]);
    check.assert_no_panic();
    assert_eq!(check.code(), Some(0), "check found violations: {check}");

    let original = pprof_raw(&orig, &[]);
    let dump = otlp_dump(&otlp);
    assert_totals_eq(
        &totals_of_dump(&dump),
        &totals_of_raw(&original),
        &format!("{kind:?} OTLP vs original"),
    );

    // Link table: the sentinel first, then each distinct (trace, span) pair once.
    let links = dump["links"].as_array().unwrap();
    let sentinel = (links[0]["trace_id"].as_str(), links[0]["span_id"].as_str());
    assert!(
        matches!(
            sentinel,
            (Some(""), Some(""))
                | (
                    Some("00000000000000000000000000000000"),
                    Some("0000000000000000")
                )
        ),
        "link_table[0] is not the zero link: {}",
        links[0]
    );
    let pairs: BTreeSet<(String, String)> = links[1..]
        .iter()
        .map(|l| {
            let pair = (
                l["trace_id"].as_str().unwrap(),
                l["span_id"].as_str().unwrap(),
            );
            assert!(
                raw::is_hex_id(pair.0, 32) && raw::is_hex_id(pair.1, 16),
                "link {l}"
            );
            (pair.0.to_string(), pair.1.to_string())
        })
        .collect();
    assert_eq!(pairs.len(), links.len() - 1, "duplicate links");
    // (link, whether the sample has a stack) of every OTLP sample.
    let used: Vec<(Option<(String, String)>, bool)> = profiles(&dump)
        .iter()
        .flat_map(|p| p["samples"].as_array().unwrap())
        .map(|s| {
            let link = (!s["link"].is_null()).then(|| {
                (
                    s["link"]["trace_id"].as_str().unwrap().to_string(),
                    s["link"]["span_id"].as_str().unwrap().to_string(),
                )
            });
            (link, !s["frames"].as_array().unwrap().is_empty())
        })
        .collect();
    let used_links: BTreeSet<(String, String)> =
        used.iter().filter_map(|(l, _)| l.clone()).collect();
    assert_eq!(pairs, used_links, "link table vs links the samples use");
    // Samples without a stack are invisible to `go tool pprof` (see `Totals`).
    let used_with_stack: BTreeSet<(String, String)> = used
        .iter()
        .filter(|(_, has_stack)| *has_stack)
        .filter_map(|(l, _)| l.clone())
        .collect();
    let expected_pairs: BTreeSet<(String, String)> =
        original.samples.iter().filter_map(|s| s.link()).collect();
    assert_eq!(
        used_with_stack, expected_pairs,
        "links vs ids in the original labels"
    );

    let linked = used.iter().filter(|(l, _)| l.is_some()).count();
    if kind.has_labels() {
        assert!(linked > 0, "{kind:?}: no sample is linked");
    } else {
        assert_eq!(linked, 0, "{kind:?} has no labels, yet samples are linked");
    }
    // Ids live in the link only: no id attribute survives by default (DESIGN.md).
    for p in profiles(&dump) {
        for s in p["samples"].as_array().unwrap() {
            for key in raw::SPAN_ID_KEYS.iter().chain(&raw::TRACE_ID_KEYS) {
                assert!(
                    s["attributes"].get(*key).is_none(),
                    "{kind:?}: id attribute {key} kept: {s}"
                );
            }
        }
    }

    // The report describes what was written.
    let sample_count: u64 = profiles(&dump)
        .iter()
        .map(|p| p["num_samples"].as_u64().unwrap())
        .sum();
    assert_eq!(report.inputs, 1, "{report:?}");
    assert_eq!(report.profiles, profiles(&dump).len() as u64, "{report:?}");
    // "samples" may count OTLP samples (over all profiles) or the pprof samples read.
    assert!(
        report.samples == sample_count || report.samples == original.samples.len() as u64,
        "{report:?}: {sample_count} OTLP samples, {} pprof samples",
        original.samples.len()
    );
    assert_eq!(report.links, pairs.len() as u64, "{report:?}");
    assert_eq!(report.invalid_ids, 0, "{report:?}");
    assert_eq!(report.span_ids_without_trace_id, 0, "{report:?}");

    let inspect = spanprof(["inspect".as_ref(), otlp.as_os_str()]);
    inspect.assert_no_panic().assert_success();
    for sample_type in kind.sample_types() {
        let name = sample_type.split('/').next().unwrap();
        assert!(
            inspect.stdout.contains(name),
            "inspect does not mention {name}: {inspect}"
        );
    }
}

/// Values per (exact stack, labels).
type ExactTotals = BTreeMap<(Vec<String>, BTreeMap<String, String>), Vec<i64>>;

/// `-raw` samples keyed by exact stack and labels, values summed; all-zero samples dropped.
/// With `canonical_ids`, id labels are first rewritten to the `trace_id`/`span_id` labels that
/// the OTLP → pprof direction writes (the original's side only: the converted side must have
/// exactly those labels).
fn normalised(profile: &RawProfile, canonical_ids: bool) -> ExactTotals {
    let mut out: BTreeMap<_, Vec<i64>> = BTreeMap::new();
    for s in &profile.samples {
        let labels = if canonical_ids {
            raw::canonical_link_labels(&s.labels)
        } else {
            s.labels.clone()
        };
        let key = (s.stack_exact(), labels);
        let sum = out
            .entry(key)
            .or_insert_with(|| vec![0; profile.sample_types.len()]);
        for (acc, v) in sum.iter_mut().zip(&s.values) {
            *acc += v;
        }
    }
    out.retain(|_, v| v.iter().any(|x| *x != 0));
    out
}

/// pprof → OTLP → pprof keeps every sample: stacks (addresses, functions, files, lines), values,
/// non-id labels, and the ids as `trace_id`/`span_id` labels; and the profile header.
fn round_trips_through_otlp(kind: ProfileKind) {
    let cap = capture();
    let dir = temp_dir();
    let orig = cap.profile(kind);
    let otlp = dir.path().join("x.otlp");
    let back = dir.path().join("back.pb.gz");
    convert(&[&orig], &otlp, &["--to", "otlp"]);
    convert(&[&otlp], &back, &["--to", "pprof"]);

    let before = pprof_raw(&orig, &[]);
    let after = pprof_raw(&back, &[]);
    assert_eq!(after.header, before.header, "{kind:?}: profile header");
    assert_eq!(
        after.sample_types, before.sample_types,
        "{kind:?}: sample types"
    );
    let (want, got) = (normalised(&before, true), normalised(&after, false));
    let missing: Vec<_> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .take(3)
        .collect();
    let extra: Vec<_> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(v))
        .take(3)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{kind:?}: round trip changed samples ({} before, {} after)\nlost: {missing:#?}\ngained: {extra:#?}",
        want.len(),
        got.len()
    );
}

macro_rules! per_kind {
    ($($module:ident => $kind:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[test]
            fn converts_to_linked_otlp() {
                super::converts_to_linked_otlp($kind);
            }

            #[test]
            fn round_trips_through_otlp() {
                super::round_trips_through_otlp($kind);
            }
        }
    )*};
}

per_kind! {
    cpu => ProfileKind::Cpu,
    heap => ProfileKind::Heap,
    allocs => ProfileKind::Allocs,
    goroutine => ProfileKind::Goroutine,
    mutex => ProfileKind::Mutex,
    block => ProfileKind::Block,
}

// ---------------------------------------------------------------------------------------------
// Flame graphs of one span or trace against `go tool pprof -tagfocus`.

/// Collapsed lines `root;...;leaf VALUE`, summed per stack.
fn parse_collapsed(text: &str) -> BTreeMap<String, i64> {
    let mut stacks = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (stack, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("collapsed line without value: {line:?}"));
        let value: i64 = value
            .parse()
            .unwrap_or_else(|_| panic!("collapsed value not an integer: {line:?}"));
        *stacks.entry(stack.to_string()).or_default() += value;
    }
    stacks
}

/// The CPU nanoseconds per stack of the samples whose label `key` is exactly `id`, as
/// `go tool pprof` selects them.
///
/// `-tagfocus=KEY=^ID$` filters samples by label; `-raw` then prints the remaining samples
/// with exact integer values, which we sum per stack. (`-top` would round and print units.)
/// The anchors also stop pprof from reading an id such as `123abc` as a numeric range.
fn go_pprof_span_stacks(profile: &Path, key: &str, id: &str) -> BTreeMap<String, i64> {
    let focused = pprof_raw(profile, &[&format!("-tagfocus={key}=^{id}$")]);
    let cpu = focused.value_index("cpu/nanoseconds");
    let mut stacks = BTreeMap::new();
    for s in &focused.samples {
        assert_eq!(
            s.labels.get(key).map(String::as_str),
            Some(id),
            "tagfocus let {s:?} through"
        );
        *stacks
            .entry(s.functions_root_first().join(";"))
            .or_default() += s.values[cpu];
    }
    stacks.retain(|_, v| *v != 0);
    stacks
}

fn flame_stacks(file: &Path, selector: &str, id: &str) -> BTreeMap<String, i64> {
    let run = spanprof([
        "flame".as_ref(),
        file.as_os_str(),
        selector.as_ref(),
        id.as_ref(),
        "--type".as_ref(),
        "cpu".as_ref(),
        "--format".as_ref(),
        "collapsed".as_ref(),
    ]);
    run.assert_no_panic().assert_success();
    let mut stacks = parse_collapsed(&run.stdout);
    stacks.retain(|_, v| *v != 0);
    stacks
}

/// The ids under `key` with the most CPU samples whose label `name_key` is `name`, most first.
fn busiest(profile: &RawProfile, key: &str, name_key: &str, name: &str, n: usize) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &profile.samples {
        if s.labels.get(name_key).map(String::as_str) == Some(name) {
            if let Some(id) = s.labels.get(key) {
                *counts.entry(id).or_default() += 1;
            }
        }
    }
    let mut ids: Vec<(&str, usize)> = counts.into_iter().collect();
    ids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    assert!(
        ids.len() >= n,
        "fewer than {n} ids under {key} for {name_key}={name}: {ids:?}"
    );
    ids.into_iter()
        .take(n)
        .map(|(id, _)| id.to_string())
        .collect()
}

#[test]
fn flame_of_one_span_matches_go_tool_pprof() {
    let cap = capture();
    let dir = temp_dir();
    let orig = cap.profile(ProfileKind::Cpu);
    let otlp = dir.path().join("cpu.otlp");
    convert(&[&orig], &otlp, &["--to", "otlp"]);
    let profile = pprof_raw(&orig, &[]);

    // (selector flag, label key in the original, id): OTel and Pyroscope conventions, the
    // nested child span, and whole traces (a /cpu-heavy trace spans parent and child).
    let mut cases: Vec<(&str, &str, String)> = Vec::new();
    let otel = ("otel.profile.span_id", "otel.profile.span_name");
    for id in busiest(&profile, otel.0, otel.1, "GET /cpu-heavy", 2) {
        cases.push(("--span-id", otel.0, id));
    }
    for id in busiest(&profile, otel.0, otel.1, "sortWork", 1) {
        cases.push(("--span-id", otel.0, id));
    }
    for id in busiest(&profile, "span_id", "span_name", "GET /cpu-light", 2) {
        cases.push(("--span-id", "span_id", id));
    }
    for id in busiest(&profile, "otel.profile.trace_id", otel.1, "sortWork", 1) {
        cases.push(("--trace-id", "otel.profile.trace_id", id));
    }
    for id in busiest(&profile, "trace_id", "span_name", "GET /cpu-light", 1) {
        cases.push(("--trace-id", "trace_id", id));
    }

    for (selector, key, id) in &cases {
        let want = go_pprof_span_stacks(&orig, key, id);
        assert!(
            !want.is_empty(),
            "go tool pprof finds no CPU for {key}={id}"
        );
        let want_total: i64 = want.values().sum();
        for input in [&otlp, &orig] {
            let got = flame_stacks(input, selector, id);
            let got_total: i64 = got.values().sum();
            assert_eq!(
                got_total,
                want_total,
                "{selector} {id} on {}: total CPU ns",
                input.display()
            );
            assert_eq!(got, want, "{selector} {id} on {}: stacks", input.display());
        }
    }
    // The SVG's heading names the selection, as the server's /api/v1/svg does.
    let (selector, _, id) = &cases[0];
    let run = spanprof([
        "flame".as_ref(),
        orig.as_os_str(),
        selector.as_ref(),
        id.as_ref(),
        "--format".as_ref(),
        "svg".as_ref(),
    ]);
    run.assert_no_panic().assert_success();
    assert!(
        run.stdout.contains(&format!("span {id} · ")),
        "{}",
        &run.stdout[..run.stdout.len().min(600)]
    );
}

// ---------------------------------------------------------------------------------------------
// Conversion options.

fn linked_samples(dump: &Value) -> Vec<&Value> {
    profiles(dump)
        .iter()
        .flat_map(|p| p["samples"].as_array().unwrap())
        .filter(|s| !s["link"].is_null())
        .collect()
}

#[test]
fn keep_link_attributes_keeps_the_id_labels() {
    let cap = capture();
    let dir = temp_dir();
    let otlp = dir.path().join("kept.otlp");
    convert(
        &[&cap.profile(ProfileKind::Cpu)],
        &otlp,
        &["--to", "otlp", "--keep-link-attributes"],
    );
    let dump = otlp_dump(&otlp);
    let linked = linked_samples(&dump);
    assert!(!linked.is_empty(), "no linked samples");
    for s in linked {
        let attrs: BTreeMap<String, String> = s["attributes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let link = (
            s["link"]["trace_id"].as_str().unwrap().to_string(),
            s["link"]["span_id"].as_str().unwrap().to_string(),
        );
        assert_eq!(
            raw::link_of(&attrs),
            Some(link),
            "kept attributes vs link: {s}"
        );
    }
}

/// Ids under keys the linker does not know stay attributes; naming the keys links them.
#[test]
fn custom_id_keys_link_only_when_named() {
    let cap = capture();
    let dir = temp_dir();
    let orig = cap.profile(ProfileKind::Cpu);
    let custom_samples = |dump: &Value| -> Vec<Value> {
        profiles(dump)
            .iter()
            .flat_map(|p| p["samples"].as_array().unwrap())
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f == "main.hashLoop")
            })
            .filter(|s| s["attributes"].get("custom.span_name").is_some())
            .cloned()
            .collect()
    };

    let plain = dir.path().join("plain.otlp");
    convert(&[&orig], &plain, &["--to", "otlp"]);
    let samples = custom_samples(&otlp_dump(&plain));
    assert!(!samples.is_empty(), "no custom-labelled hashLoop samples");
    for s in &samples {
        assert!(s["link"].is_null(), "linked under unknown keys: {s}");
        for key in ["custom.span_id", "custom.trace_id"] {
            assert!(s["attributes"][key].is_string(), "{key} dropped: {s}");
        }
    }

    let named = dir.path().join("named.otlp");
    convert(
        &[&orig],
        &named,
        &[
            "--to",
            "otlp",
            "--span-id-key",
            "custom.span_id",
            "--trace-id-key",
            "custom.trace_id",
        ],
    );
    let dump = otlp_dump(&named);
    // Pair each custom sample (by stack and span name) with its ids from the plain conversion.
    let ids: BTreeSet<(String, String)> = samples
        .iter()
        .map(|s| {
            (
                s["attributes"]["custom.trace_id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                s["attributes"]["custom.span_id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let linked: BTreeSet<(String, String)> = custom_samples(&dump)
        .iter()
        .map(|s| {
            assert!(!s["link"].is_null(), "not linked under the named keys: {s}");
            (
                s["link"]["trace_id"].as_str().unwrap().to_string(),
                s["link"]["span_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(linked, ids, "links under the named keys");
}

#[test]
fn several_inputs_make_one_request() {
    let cap = capture();
    let dir = temp_dir();
    let out = dir.path().join("both.otlp");
    let (cpu, heap) = (
        cap.profile(ProfileKind::Cpu),
        cap.profile(ProfileKind::Heap),
    );
    let report = parse_report(&convert(&[&cpu, &heap], &out, &["--to", "otlp"]));
    let check = spanprof([
        "check".as_ref(),
        out.as_os_str(),
        "--dupes".as_ref(),
        "--orphans".as_ref(),
    ]);
    assert_eq!(check.code(), Some(0), "{check}");

    let dump = otlp_dump(&out);
    let types: Vec<&str> = profiles(&dump)
        .iter()
        .map(|p| p["sample_type"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = ProfileKind::Cpu.sample_types().to_vec();
    want.extend(ProfileKind::Heap.sample_types());
    assert_eq!(
        types.iter().copied().collect::<BTreeSet<_>>(),
        want.iter().copied().collect::<BTreeSet<_>>()
    );
    assert_eq!(types.len(), want.len(), "{types:?}");
    assert_eq!((report.inputs, report.profiles), (2, want.len() as u64));

    // Each input's samples are all there, in one request with one dictionary.
    let mut expected = totals_of_raw(&pprof_raw(&cpu, &[]));
    expected.extend(totals_of_raw(&pprof_raw(&heap, &[])));
    assert_totals_eq(&totals_of_dump(&dump), &expected, "cpu+heap");
}

/// OTLP JSON output uses the OTLP JSON rules (camelCase, hex ids) and reads back to the same
/// profiles as the binary output.
#[test]
fn otlp_json_round_trips() {
    let cap = capture();
    let dir = temp_dir();
    let orig = cap.profile(ProfileKind::Cpu);
    let json_path = dir.path().join("cpu.json");
    let binary = dir.path().join("cpu.otlp");
    let from_json = dir.path().join("from-json.otlp");
    convert(&[&orig], &json_path, &["--to", "otlp-json"]);
    convert(&[&orig], &binary, &["--to", "otlp"]);
    convert(&[&json_path], &from_json, &["--to", "otlp"]);

    let json: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap())
        .expect("otlp-json output is JSON");
    assert!(json["resourceProfiles"].is_array(), "no resourceProfiles");
    let links = json["dictionary"]["linkTable"]
        .as_array()
        .expect("dictionary.linkTable");
    assert!(links.len() > 1, "no links in JSON");
    for link in &links[1..] {
        let trace = link["traceId"].as_str().unwrap_or_default();
        let span = link["spanId"].as_str().unwrap_or_default();
        assert!(
            raw::is_hex_id(trace, 32) && raw::is_hex_id(span, 16),
            "JSON link ids must be hex: {link}"
        );
    }
    assert_totals_eq(
        &totals_of_dump(&otlp_dump(&from_json)),
        &totals_of_dump(&otlp_dump(&binary)),
        "JSON vs binary",
    );
}

/// Two services merged into one request split back into one pprof each, with every sample of
/// each original (ids as `span_id`/`trace_id` labels) and the default sample type restored.
#[test]
fn split_gives_one_pprof_per_service() {
    let cap = capture();
    let dir = temp_dir();
    let (cpu, heap) = (
        cap.profile(ProfileKind::Cpu),
        cap.profile(ProfileKind::Heap),
    );
    let (a, b, both) = (
        dir.path().join("a.otlp"),
        dir.path().join("b.otlp"),
        dir.path().join("both.otlp"),
    );
    convert(&[&cpu], &a, &["--service-name", "checkout"]);
    convert(&[&heap], &b, &["--service-name", "cart"]);
    convert(&[&a, &b], &both, &[]);
    let parts = dir.path().join("part.pb.gz");
    let run = spanprof([
        "convert".as_ref(),
        both.as_os_str(),
        "--split".as_ref(),
        "-o".as_ref(),
        parts.as_os_str(),
    ]);
    run.assert_no_panic().assert_success();
    let stderr = run.stderr;
    assert!(stderr.contains("part 0: checkout"), "{stderr}");
    assert!(stderr.contains("part 1: cart"), "{stderr}");
    assert!(!dir.path().join("part-2.pb.gz").exists(), "only two parts");
    for (orig, part) in [(&cpu, "part-0.pb.gz"), (&heap, "part-1.pb.gz")] {
        let before = pprof_raw(orig, &[]);
        let after = pprof_raw(&dir.path().join(part), &[]);
        assert_eq!(after.sample_types, before.sample_types, "{part}");
        assert_eq!(
            normalised(&after, false),
            normalised(&before, true),
            "{part}"
        );
    }
    let top =
        support::go_tool_pprof(["-top".as_ref(), dir.path().join("part-1.pb.gz").as_os_str()]);
    assert!(
        top.contains("Type: inuse_space"),
        "heap's default type comes back:\n{top}"
    );
}

/// Go labels every heap sample with its allocation size (`bytes`, a number label). A number is
/// a measurement of its sample, not a label to split series by: stored, a heap profile is one
/// series per sample type whatever its sizes (it was a series per size, and a profile of over
/// 1,000 sizes was refused whole), and `bytes` is no label name.
#[test]
fn stored_heap_sizes_are_no_series_labels() {
    use spanprof_store::store::{Selection, Store, StoreConfig};
    let heap = capture().profile(ProfileKind::Heap);
    let raw = pprof_raw(&heap, &[]);
    let sizes: BTreeSet<&String> = raw
        .samples
        .iter()
        .filter_map(|s| s.labels.get("bytes"))
        .collect();
    assert!(sizes.len() > 1, "the heap profile has sizes: {sizes:?}");
    let dir = temp_dir();
    let data = dir.path().join("data");
    let run = spanprof([
        "import".as_ref(),
        "--data".as_ref(),
        data.as_os_str(),
        heap.as_os_str(),
        "--service-name".as_ref(),
        "goapp".as_ref(),
    ]);
    run.assert_no_panic().assert_success();
    let (store, _) = Store::open(StoreConfig::new(&data)).unwrap();
    let all = Selection {
        service: Some("goapp".into()),
        ..Default::default()
    };
    let series = store.series(&all).unwrap();
    assert_eq!(series.len(), raw.sample_types.len(), "{series:?}");
    assert!(
        !store
            .label_names(&all)
            .unwrap()
            .contains(&"bytes".to_owned()),
        "{series:?}"
    );
}
