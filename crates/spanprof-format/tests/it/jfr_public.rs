//! Recordings by async-profiler and the Pyroscope Java agent (with their `contextId`s and
//! labels snapshots), from grafana/jfr-parser's test data (see testdata/jfr/README.md), read
//! as Pyroscope's own JFR conversion reads them: per-stack totals equal its expected output
//! for every kind of sample, and per-label-set totals its printed profiles.

use crate::jfr_support;
use jfr_support::stack_text;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use spanprof_format::jfr::{
    jfr_to_pprof, JfrOptions, JfrProfile, JfrReport, LabelsSnapshot, SampleKind,
};
use spanprof_format::pprof;

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/jfr")
        .join(name);
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(gz.as_slice())
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn read(name: &str, labels: Option<&str>) -> Vec<JfrProfile> {
    read_with_report(name, labels).0
}

fn read_with_report(name: &str, labels: Option<&str>) -> (Vec<JfrProfile>, JfrReport) {
    let labels = labels.map(|l| LabelsSnapshot::decode_snapshot(&testdata(l)).unwrap());
    // jfr-parser's tests convert at 100 Hz.
    let options = JfrOptions {
        sample_rate_hz: Some(100),
        ..Default::default()
    };
    let (profiles, report) = jfr_to_pprof(
        &testdata(&format!("{name}.jfr.gz")),
        labels.as_ref(),
        &options,
    )
    .unwrap();
    (profiles, report)
}

fn stacks(p: &pprof::Profile) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for s in &p.sample {
        let e = out
            .entry(stack_text(p, s))
            .or_insert_with(|| vec![0; s.value.len()]);
        e.iter_mut().zip(&s.value).for_each(|(a, b)| *a += b);
    }
    out
}

fn expected_stacks(file: &str) -> BTreeMap<String, Vec<i64>> {
    let text = String::from_utf8(testdata(file)).unwrap();
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (stack, values) = line.rsplit_once(" [").expect("stack [values]");
        let values: Vec<i64> = values
            .trim_end_matches(']')
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        let e = out
            .entry(stack.to_owned())
            .or_insert_with(|| vec![0; values.len()]);
        e.iter_mut().zip(&values).for_each(|(a, b)| *a += b);
    }
    out
}

fn kind(profiles: &[JfrProfile], k: SampleKind) -> &pprof::Profile {
    &profiles
        .iter()
        .find(|p| p.kind == k)
        .unwrap_or_else(|| panic!("no {k:?}"))
        .profile
}

#[test]
fn every_kind_of_sample_totals_as_pyroscope_converts_it() {
    type Case<'a> = (&'a str, Option<&'a str>, &'a [(SampleKind, &'a str)]);
    let cases: &[Case] = &[
        (
            "dump1",
            Some("dump1.labels.pb.gz"),
            &[(SampleKind::Cpu, "cpu")],
        ),
        (
            "dump2",
            Some("dump2.labels.pb.gz"),
            &[
                (SampleKind::Cpu, "cpu"),
                (SampleKind::Wall, "wall"),
                (SampleKind::AllocInNewTlab, "alloc_in_new_tlab"),
                (SampleKind::LiveObject, "live"),
            ],
        ),
        (
            "wall",
            None,
            &[(SampleKind::Cpu, "cpu"), (SampleKind::Wall, "wall")],
        ),
        (
            "example",
            None,
            &[
                (SampleKind::Cpu, "cpu"),
                (SampleKind::AllocInNewTlab, "alloc_in_new_tlab"),
                (SampleKind::AllocOutsideTlab, "alloc_outside_tlab"),
                (SampleKind::Lock, "mutex"),
            ],
        ),
        (
            "new_spancontext",
            Some("new_spancontext.labels.gz"),
            &[(SampleKind::Cpu, "cpu")],
        ),
    ];
    for (name, labels, kinds) in cases {
        let (profiles, report) = read_with_report(name, *labels);
        assert_eq!(report.without_stack, 0, "{name}: {report:?}");
        assert_eq!(
            profiles.iter().map(|p| p.kind).collect::<Vec<_>>(),
            kinds.iter().map(|k| k.0).collect::<Vec<_>>(),
            "{name}: the kinds of profile"
        );
        for (k, file) in kinds.iter() {
            let ours = stacks(kind(&profiles, *k));
            let mut theirs = expected_stacks(&format!("{name}.{file}.collapsed.gz"));
            assert_eq!(ours.len(), theirs.len(), "{name} {k:?}: distinct stacks");
            if matches!(k, SampleKind::Lock | SampleKind::ThreadPark) {
                // Pyroscope keeps lock waits in ticks (here async-profiler's TSC, not 1 GHz);
                // we convert each to nanoseconds: equal to within a nanosecond an event.
                let tps = i128::from(report.ticks_per_second);
                assert_ne!(
                    tps, 1_000_000_000,
                    "{name}: the test means to convert ticks"
                );
                for (stack, v) in theirs.iter_mut() {
                    let want = (i128::from(v[1]) * 1_000_000_000 / tps) as i64;
                    let got = ours[stack][1];
                    assert!(
                        (got - want).abs() <= v[0],
                        "{name} {stack}: {got} ns, want {want}"
                    );
                    v[1] = got;
                }
            }
            assert_eq!(ours, theirs, "{name} {k:?}");
        }
    }
}

/// dd-trace-java's recording writes constant keys as full 64-bit varints (9 bytes): read as
/// Pyroscope reads them, but for two things Pyroscope does on purpose differently: "no line"
/// (-1) it prints as 4294967295, and the JDK's hidden lambda classes it leaves unmerged.
#[test]
fn uint64_constant_keys_read_as_pyroscope_reads_them() {
    let normalise = |theirs: BTreeMap<String, Vec<i64>>| -> BTreeMap<String, Vec<i64>> {
        let mut out = BTreeMap::new();
        for (stack, v) in theirs {
            let frames: Vec<String> = stack
                .replace(":4294967295", ":-1")
                .split(';')
                .map(|f| match (f.find("$$Lambda"), f.find("+0x")) {
                    (Some(i), Some(j)) if j > i => {
                        let method = &f[j..][f[j..].find('.').unwrap()..];
                        format!("{}_{method}", &f[..i + "$$Lambda".len()])
                    }
                    _ => f.to_owned(),
                })
                .collect();
            out.insert(frames.join(";"), v);
        }
        out
    };
    let name = "cpool-uint64-constant-index";
    let profiles = read(name, None);
    for (k, file) in [
        (SampleKind::Cpu, "cpu"),
        (SampleKind::AllocInNewTlab, "alloc_in_new_tlab"),
        (SampleKind::AllocSample, "alloc_sample"),
    ] {
        let theirs = normalise(expected_stacks(&format!("{name}.{file}.collapsed.gz")));
        assert_eq!(stacks(kind(&profiles, k)), theirs, "{name} {k:?}");
    }
}

/// Per label set, the total value of a printed pprof (`go tool pprof -raw`-like text).
fn expected_label_totals(file: &str) -> BTreeMap<String, i64> {
    let text = String::from_utf8(testdata(file)).unwrap();
    let samples = text
        .split("Samples:")
        .nth(1)
        .unwrap()
        .split("Locations")
        .next()
        .unwrap();
    let mut out = BTreeMap::new();
    let mut pending: Option<i64> = None;
    for line in samples.lines().skip(2) {
        let t = line.trim();
        if let Some((v, _)) = t
            .split_once(':')
            .filter(|(v, _)| v.chars().all(|c| c.is_ascii_digit()) && !v.is_empty())
        {
            if let Some(p) = pending.take() {
                *out.entry(String::new()).or_insert(0) += p;
            }
            pending = Some(v.parse().unwrap());
        } else if !t.is_empty() {
            *out.entry(t.to_owned()).or_insert(0) +=
                pending.take().expect("labels follow a sample");
        }
    }
    if let Some(p) = pending {
        *out.entry(String::new()).or_insert(0) += p;
    }
    out
}

fn label_totals(p: &pprof::Profile) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for s in &p.sample {
        let mut labels: Vec<String> = s
            .label
            .iter()
            .map(|l| {
                format!(
                    "{}:[{}]",
                    p.string_table[l.key as usize], p.string_table[l.str as usize]
                )
            })
            .collect();
        labels.sort();
        *out.entry(labels.join(" ")).or_insert(0) += s.value[0];
    }
    out
}

#[test]
fn context_labels_and_span_ids_are_the_agents() {
    for (name, labels) in [
        ("dump1", "dump1.labels.pb.gz"),
        ("new_spancontext", "new_spancontext.labels.gz"),
    ] {
        let profiles = read(name, Some(labels));
        let ours = label_totals(kind(&profiles, SampleKind::Cpu));
        assert_eq!(
            ours,
            expected_label_totals(&format!("{name}.cpu.pprof.txt.gz")),
            "{name}"
        );
    }
    // The span's samples carry its id and name, as pyroscope-otel sets them.
    let profiles = read("new_spancontext", Some("new_spancontext.labels.gz"));
    let ours = label_totals(kind(&profiles, SampleKind::Cpu));
    assert!(
        ours.keys()
            .any(|k| k.contains("profile_id:[00000000000000ef]")
                && k.contains("span_name:[Fibonachi]")),
        "{ours:?}"
    );
}
