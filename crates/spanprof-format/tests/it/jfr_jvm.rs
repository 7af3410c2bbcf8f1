//! JFR written by a real JVM (Debian's openjdk-17-jdk-headless, installed by `.ci/setup`):
//! testprograms/javaapp/Burn.java burns CPU on two threads, allocates, contends on a lock,
//! parks and waits in native code, under `-XX:StartFlightRecording`. Our per-stack totals of
//! its CPU and native-method samples, its allocations and its lock and park waits must equal
//! what the JDK's own `jfr print --json` reports for the same events: an independent decoder.

use crate::jfr_support;
use jfr_support::stack_text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use spanprof_format::jfr::{jfr_to_pprof, JfrOptions, JfrProfile, SampleKind};
use spanprof_format::pprof;

fn tool(name: &str) -> PathBuf {
    let found = Command::new(name).arg("--version").output().is_ok()
        || Command::new(name).arg("-version").output().is_ok();
    assert!(
        found,
        "`{name}` is not installed: this test needs a JDK with its jfr tool \
         (apt-get install openjdk-17-jdk-headless, as .ci/setup does)"
    );
    PathBuf::from(name)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs Burn for `seconds` under JFR and returns the recording's path.
fn record(dir: &Path, seconds: u32) -> PathBuf {
    let javac = tool("javac");
    let java = tool("java");
    let src = root().join("testprograms/javaapp/Burn.java");
    let out = Command::new(javac)
        .arg("-d")
        .arg(dir)
        .arg(&src)
        .output()
        .expect("javac runs");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jfr = dir.join("burn.jfr");
    let out = Command::new(java)
        .arg(format!(
            "-XX:StartFlightRecording=filename={},settings=profile,\
             jdk.ObjectAllocationInNewTLAB#enabled=true,jdk.JavaMonitorEnter#threshold=1ms,\
             jdk.ThreadPark#threshold=1ms",
            jfr.display()
        ))
        .arg("-cp")
        .arg(dir)
        .arg("Burn")
        .arg(seconds.to_string())
        .output()
        .expect("java runs");
    assert!(
        out.status.success(),
        "java: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    jfr
}

/// A stack as `Class.method:line;…`, root first, from one of our profiles' samples.
fn our_stacks(p: &pprof::Profile, value: usize) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for s in &p.sample {
        *out.entry(stack_text(p, s)).or_insert(0) += s.value[value];
    }
    out
}

/// The same, from `jfr print --json` of `events`: (stack, the event's `field` or 1).
fn jdk_stacks(jfr: &Path, event: &str, field: Option<&str>) -> BTreeMap<String, i64> {
    let out = Command::new(tool("jfr"))
        .args([
            "print",
            "--json",
            "--stack-depth",
            "4096",
            "--events",
            event,
        ])
        .arg(jfr)
        .output()
        .expect("jfr print runs");
    assert!(
        out.status.success(),
        "jfr print: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("jfr print --json is JSON");
    let mut totals = BTreeMap::new();
    for e in doc["recording"]["events"].as_array().expect("events") {
        let v = &e["values"];
        // An event without a stack (the JDK's own threads) makes no sample, here as in ours.
        let Some(frames) = v["stackTrace"]["frames"].as_array() else {
            continue;
        };
        let stack: Vec<String> = frames
            .iter()
            .rev()
            .map(|f| {
                let class = f["method"]["type"]["name"].as_str().unwrap_or("");
                let method = f["method"]["name"].as_str().unwrap_or("");
                format!(
                    "{}.{}:{}",
                    merge_lambda(class),
                    method,
                    f["lineNumber"].as_i64().unwrap()
                )
            })
            .collect();
        let n = match field {
            Some("duration") => iso_duration_ns(v["duration"].as_str().expect("a duration")),
            Some(f) => v[f]
                .as_i64()
                .unwrap_or_else(|| panic!("{event}.{f} is a number: {v}")),
            None => 1,
        };
        *totals.entry(stack.join(";")).or_insert(0) += n;
    }
    totals
}

/// `PT0.130773054S` (how `jfr print --json` writes a duration) in nanoseconds.
fn iso_duration_ns(text: &str) -> i64 {
    let mut rest = text
        .strip_prefix("PT")
        .unwrap_or_else(|| panic!("a duration: {text}"));
    let mut ns = 0i64;
    for (unit, per) in [('H', 3_600_000_000_000i64), ('M', 60_000_000_000)] {
        if let Some((n, r)) = rest.split_once(unit) {
            ns += n.parse::<i64>().unwrap() * per;
            rest = r;
        }
    }
    if let Some(secs) = rest.strip_suffix('S') {
        let (whole, frac) = secs.split_once('.').unwrap_or((secs, ""));
        ns += whole.parse::<i64>().unwrap() * 1_000_000_000;
        ns += format!("{frac:0<9}")[..9].parse::<i64>().unwrap();
    }
    ns
}

/// `Burn$$Lambda$14.0x0000000800c01200` → `Burn$$Lambda_`, as Pyroscope (and we) name it.
fn merge_lambda(class: &str) -> String {
    match class.find("$$Lambda") {
        Some(i) => format!("{}_", &class[..i + "$$Lambda".len()]),
        None => class.to_owned(),
    }
}

fn profile(profiles: &[JfrProfile], kind: SampleKind) -> &pprof::Profile {
    &profiles
        .iter()
        .find(|p| p.kind == kind)
        .unwrap_or_else(|| {
            panic!(
                "no {kind:?} profile among {:?}",
                profiles.iter().map(|p| p.kind).collect::<Vec<_>>()
            )
        })
        .profile
}

#[test]
fn a_real_jvm_recording_reads_as_the_jdk_reads_it() {
    let dir = tempfile_dir();
    let jfr = record(&dir, 3);
    let bytes = std::fs::read(&jfr).unwrap();
    let (profiles, report) = jfr_to_pprof(&bytes, None, &JfrOptions::default()).unwrap();
    // profile.jfc samples Java code every 10 ms.
    assert_eq!(report.period_ns, 10_000_000, "{report:?}");
    assert!(
        report.skipped_events > 0,
        "GC and settings events are skipped and counted"
    );

    let cpu = our_stacks(profile(&profiles, SampleKind::Cpu), 0);
    let mut cpu_counts = cpu.clone();
    cpu_counts.values_mut().for_each(|v| *v /= report.period_ns);
    let jdk_cpu = jdk_stacks(&jfr, "jdk.ExecutionSample", None);
    assert_eq!(cpu_counts, jdk_cpu);
    let total: i64 = jdk_cpu.values().sum();
    assert!(total >= 20, "too few CPU samples to compare: {total}");
    for hot in ["Burn.spinA", "Burn.spinB"] {
        assert!(
            cpu.keys().any(|s| s.contains(hot)),
            "no CPU in {hot}: {cpu:#?}"
        );
    }

    let tlab = profile(&profiles, SampleKind::AllocInNewTlab);
    assert_eq!(
        our_stacks(tlab, 0),
        jdk_stacks(&jfr, "jdk.ObjectAllocationInNewTLAB", None)
    );
    assert_eq!(
        our_stacks(tlab, 1),
        jdk_stacks(&jfr, "jdk.ObjectAllocationInNewTLAB", Some("tlabSize"))
    );
    let sampled = profile(&profiles, SampleKind::AllocSample);
    assert_eq!(
        our_stacks(sampled, 1),
        jdk_stacks(&jfr, "jdk.ObjectAllocationSample", Some("weight"))
    );
    assert!(our_stacks(sampled, 1)
        .keys()
        .any(|s| s.contains("Burn.allocate")));

    // Lock and park waits: counts, and delays in nanoseconds.
    let lock = profile(&profiles, SampleKind::Lock);
    assert_eq!(
        our_stacks(lock, 0),
        jdk_stacks(&jfr, "jdk.JavaMonitorEnter", None)
    );
    assert_eq!(
        our_stacks(lock, 1),
        jdk_stacks(&jfr, "jdk.JavaMonitorEnter", Some("duration"))
    );
    assert!(our_stacks(lock, 0)
        .keys()
        .any(|s| s.contains("Burn.contend")));
    let park = profile(&profiles, SampleKind::ThreadPark);
    assert_eq!(
        our_stacks(park, 0),
        jdk_stacks(&jfr, "jdk.ThreadPark", None)
    );
    assert_eq!(
        our_stacks(park, 1),
        jdk_stacks(&jfr, "jdk.ThreadPark", Some("duration"))
    );
    assert!(our_stacks(park, 0).keys().any(|s| s.contains("Burn.park")));

    // Wall clock from the JDK: threads sampled in native code, each worth the 20 ms that
    // profile.jfc samples them at.
    let wall = profile(&profiles, SampleKind::Wall);
    let mut wall_counts = our_stacks(wall, 0);
    wall_counts.values_mut().for_each(|v| *v /= 20_000_000);
    assert_eq!(
        wall_counts,
        jdk_stacks(&jfr, "jdk.NativeMethodSample", None)
    );
    assert!(
        wall_counts.keys().any(|s| s.contains("Burn.waitInNative")),
        "{wall_counts:#?}"
    );
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spanprof-jfr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
