//! `spanprof check` on OTLP requests written by an independent encoder (Python
//! `opentelemetry-proto`): 0 for conformant input, 1 with one `path: message` line per
//! violation, duplicates and orphans reported only when asked for.

use spanprof_testkit as support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{process_dir, run_python, spanprof, Run};

/// Python that builds a small conformant request `r` (one CPU profile, one linked sample);
/// a test appends statements that break it, then the file is written to `sys.argv[1]`.
const CONFORMANT: &str = "\
import sys
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as s
r = s.ExportProfilesServiceRequest()
d = r.dictionary
d.string_table.extend(['', 'cpu', 'nanoseconds', 'main.work', 'main.go', 'span_name'])
d.mapping_table.add()
d.function_table.add()
d.function_table.add(name_strindex=3, system_name_strindex=3, filename_strindex=4, start_line=7)
d.location_table.add()
loc = d.location_table.add(address=0x1000)
loc.lines.add(function_index=1, line=10)
d.stack_table.add()
d.stack_table.add(location_indices=[1])
d.link_table.add()
d.link_table.add(trace_id=bytes.fromhex('0af7651916cd43dd8448eb211c80319c'), span_id=bytes.fromhex('b7ad6b7169203331'))
d.attribute_table.add()
a = d.attribute_table.add(key_strindex=5)
a.value.string_value = 'GET /x'
rp = r.resource_profiles.add()
kv = rp.resource.attributes.add(key='service.name')
kv.value.string_value = 'checked'
p = rp.scope_profiles.add().profiles.add()
p.sample_type.type_strindex = 1
p.sample_type.unit_strindex = 2
p.period_type.type_strindex = 1
p.period_type.unit_strindex = 2
p.period = 10000000
p.time_unix_nano = 1700000000000000000
p.duration_nano = 3000000000
p.samples.add(stack_index=1, attribute_indices=[1], link_index=1, values=[30000000])
";

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| process_dir("check-conformance"))
}

/// Writes the conformant request changed by `breakage` (Python statements) to `name`.
fn request(name: &str, breakage: &str) -> PathBuf {
    let path = dir().join(name);
    let script =
        format!("{CONFORMANT}{breakage}\nopen(sys.argv[1], 'wb').write(r.SerializeToString())\n");
    run_python(["-c".as_ref(), script.as_ref(), path.as_os_str()]).assert_success();
    path
}

fn check(path: &Path, flags: &[&str]) -> Run {
    let mut args = vec![OsStr::new("check"), path.as_os_str()];
    args.extend(flags.iter().map(OsStr::new));
    let run = spanprof(&args);
    run.assert_no_panic();
    run
}

/// Exit 1, and a stdout line `path: message` about this file mentions `topic`.
#[track_caller]
fn assert_violation(run: &Run, path: &Path, topic: &str) {
    assert_eq!(run.code(), Some(1), "expected violations: {run}");
    assert!(
        lines_about(run, path)
            .iter()
            .any(|l| l.to_lowercase().contains(topic)),
        "no `{}: ...` line mentions {topic:?}: {run}",
        path.display()
    );
}

/// The stdout lines `path: ...`.
fn lines_about<'a>(run: &'a Run, path: &Path) -> Vec<&'a str> {
    let prefix = format!("{}: ", path.display());
    run.stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

#[test]
fn conformant_request_passes_every_check() {
    let path = request("conformant.otlp", "");
    let run = check(&path, &["--dupes", "--orphans"]);
    assert_eq!(run.code(), Some(0), "{run}");
}

#[test]
fn out_of_range_stack_index_is_a_violation() {
    let path = request("bad-stack.otlp", "p.samples.add(stack_index=9, values=[1])");
    assert_violation(&check(&path, &[]), &path, "stack");
}

#[test]
fn out_of_range_link_index_is_a_violation() {
    let path = request(
        "bad-link.otlp",
        "p.samples.add(stack_index=1, link_index=5, values=[1])",
    );
    assert_violation(&check(&path, &[]), &path, "link");
}

#[test]
fn nonzero_first_string_is_a_violation() {
    let path = request("bad-string0.otlp", "d.string_table[0] = 'oops'");
    assert_violation(&check(&path, &[]), &path, "string");
}

#[test]
fn wrong_length_link_ids_are_a_violation() {
    let path = request(
        "bad-link-ids.otlp",
        "d.link_table[1].span_id = bytes(range(1, 5))",
    );
    assert_violation(&check(&path, &[]), &path, "span");
}

/// In OTLP JSON too: a link id of the wrong length (hex of 4 bytes) is a violation at its
/// path, not a file that cannot be read.
#[test]
fn wrong_length_link_ids_in_json_are_a_violation() {
    let good = request("link-ids-for-json.otlp", "");
    let json = dir().join("bad-link-ids.json");
    let run = spanprof([
        "convert".as_ref(),
        good.as_os_str(),
        "-o".as_ref(),
        json.as_os_str(),
    ]);
    run.assert_no_panic().assert_success();
    let text = std::fs::read_to_string(&json).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let link = &mut doc["dictionary"]["linkTable"][1];
    assert_eq!(link["spanId"], "b7ad6b7169203331", "{link}");
    link["spanId"] = "b7ad6b71".into();
    std::fs::write(&json, doc.to_string()).unwrap();
    let run = check(&json, &[]);
    assert_violation(&run, &json, "span");
    assert!(
        lines_about(&run, &json)
            .iter()
            .any(|l| l.contains("link_table[1]")),
        "{run}"
    );
}

#[test]
fn duplicates_are_reported_only_with_dupes() {
    // A second `Function` equal to entry 1, referenced so that it is not also an orphan.
    let path = request(
        "dupes.otlp",
        "d.function_table.add(name_strindex=3, system_name_strindex=3, filename_strindex=4, start_line=7)\n\
         d.location_table.add(address=0x2000).lines.add(function_index=2, line=11)\n\
         d.stack_table.add(location_indices=[2, 1])\n\
         p.samples.add(stack_index=2, values=[1])",
    );
    let plain = check(&path, &[]);
    assert_eq!(
        plain.code(),
        Some(0),
        "duplicates reported without --dupes: {plain}"
    );
    assert_violation(&check(&path, &["--dupes"]), &path, "dup");
}

#[test]
fn orphans_are_reported_only_with_orphans() {
    // A function no location uses.
    let path = request(
        "orphans.otlp",
        "d.function_table.add(name_strindex=5, filename_strindex=4)",
    );
    let plain = check(&path, &[]);
    assert_eq!(
        plain.code(),
        Some(0),
        "orphans reported without --orphans: {plain}"
    );
    assert_violation(&check(&path, &["--orphans"]), &path, "orphan");
}

#[test]
fn every_file_is_checked() {
    let good = request("good-of-two.otlp", "");
    let bad = request(
        "bad-of-two.otlp",
        "p.samples.add(stack_index=9, values=[1])",
    );
    let run = check(&good, &[&bad.to_string_lossy()]);
    assert_violation(&run, &bad, "stack");
    assert!(
        !lines_about(&run, &good).iter().any(|l| l.contains("stack")),
        "the violation is blamed on the conformant file: {run}"
    );
}

/// `convert` to a name ending in `.gz` writes gzip-compressed OTLP when the name says OTLP
/// (`.otlp.gz`, `.json.gz`), and `check` reads it back as conformant.
#[test]
fn gzipped_otlp_from_convert_passes_check() {
    let cpu = support::go_cpu_pprof();
    for name in ["cpu.otlp.gz", "cpu.json.gz"] {
        let out = dir().join(name);
        let run = spanprof([
            "convert".as_ref(),
            cpu.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        run.assert_no_panic().assert_success();
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "{name} is not gzip");
        let run = check(&out, &[]);
        assert_eq!(run.code(), Some(0), "{run}");
        assert!(
            !run.stdout.contains("pprof"),
            "{name} was written as pprof: {run}"
        );
    }
}
