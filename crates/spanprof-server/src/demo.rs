//! `spanprof serve --demo`: a recording of a real Go service, loaded at start-up and
//! re-stamped to the present, so a newcomer sees traces and flame graphs at once.
//!
//! The recording (`crates/spanprof-server/demo/goapp/`, made by
//! `testprograms/record-demo.sh`) is the Go test program (`testprograms/goapp`) under its own
//! load: its CPU profile in back-to-back windows and a heap profile exactly as
//! `/debug/pprof` served them, and every span it exported as OTLP JSON (one request per
//! line). Loading goes through the same path as a scrape and an OTLP/HTTP trace export
//! (decode, link, pipeline, store), after every timestamp is shifted by one offset so the
//! recording ends now: span and window boundaries keep their relative positions, so spans
//! still fall inside the CPU windows that sampled them. The spans get the attributes,
//! resource, status and events an OpenTelemetry SDK sends (`otel`), which the recording lacks.

mod otel;

use spanprof_format::gzip::maybe_gunzip;
use spanprof_format::otlp::{string_kv, ProfilesData, Resource};
use spanprof_format::trace::decode_request_json;
use spanprof_format::{pprof, Batch, LinkConfig};
use spanprof_store::spans::{spans_from_otlp, SpanRecord};
use spanprof_store::store::PROFILE_NAME_ATTRIBUTE;

/// The service the recording comes from (the spans' `service.name` too).
pub const SERVICE: &str = "goapp";

/// The recorded profiles: (profile kind, gzip pprof as `/debug/pprof` served it). They are
/// named as the scraper names its profiles of that kind.
const PROFILES: &[(&str, &[u8])] = &[
    ("cpu", include_bytes!("../demo/goapp/cpu-1.pb.gz")),
    ("cpu", include_bytes!("../demo/goapp/cpu-2.pb.gz")),
    ("cpu", include_bytes!("../demo/goapp/cpu-3.pb.gz")),
    ("heap", include_bytes!("../demo/goapp/heap.pb.gz")),
];

/// The window each recorded CPU profile was asked for (`record-demo.sh`'s `?seconds=10`).
const CPU_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// The recorded spans: gzip JSON Lines, one OTLP/HTTP JSON trace export per line.
const SPANS: &[u8] = include_bytes!("../demo/goapp/spans.jsonl.gz");

/// The recording's spans limit: far above what it holds, far below anything harmful.
const MAX_DECOMPRESSED: usize = 64 << 20;

/// The recording, decoded, linked and re-stamped.
#[derive(Debug)]
pub struct Demo {
    /// One linked `ProfilesData` per recorded profile.
    pub profiles: Vec<ProfilesData>,
    /// Every recorded span.
    pub spans: Vec<SpanRecord>,
    /// Samples in the profiles.
    pub samples: usize,
    /// How far every timestamp was moved, in ns.
    pub shift_ns: i64,
}

/// A part of the built-in recording that does not load (a build made from a bad recording).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A part that does not decode or convert: which (`recorded spans, line 3`) and why.
    #[error("{part}: {reason}")]
    Part {
        /// The part.
        part: String,
        /// Why.
        reason: String,
    },
    /// Nothing in it.
    #[error("the recording is empty")]
    Empty,
}

fn part(part: String, reason: impl std::fmt::Display) -> DemoError {
    DemoError::Part {
        part,
        reason: reason.to_string(),
    }
}

/// Decodes the recording and shifts it so that its last moment (the end of the last profile
/// window or span) is `now_ns`.
pub fn load(now_ns: i64, link: &LinkConfig) -> Result<Demo, DemoError> {
    let mut profiles = Vec::with_capacity(PROFILES.len());
    for (i, (name, bytes)) in PROFILES.iter().enumerate() {
        let mut p = pprof::decode(bytes, MAX_DECOMPRESSED)
            .map_err(|e| part(format!("recorded profile {} ({name})", i + 1), e))?;
        if *name == "cpu" {
            // Ended when sampling stopped, as a scrape ends its windows: Go dates them up to
            // 200 ms later, and a /cpu-heavy span in that time read "no CPU used".
            crate::receivers::scrape::sampled_window(&mut p, CPU_WINDOW);
        }
        profiles.push((*name, p));
    }
    let raw =
        maybe_gunzip(SPANS, MAX_DECOMPRESSED).map_err(|e| part("recorded spans".into(), e))?;
    let mut spans = Vec::new();
    for (i, line) in raw.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut request = decode_request_json(line)
            .map_err(|e| part(format!("recorded spans, line {}", i + 1), e))?;
        request
            .resource_spans
            .iter_mut()
            .for_each(otel::as_sdk_sends);
        let (mut batch, report) = spans_from_otlp(&request.resource_spans);
        if report.rejected > 0 {
            return Err(part(
                format!("recorded spans, line {}", i + 1),
                format!("{:?}", report.reasons),
            ));
        }
        spans.append(&mut batch);
    }

    let end = profiles
        .iter()
        .map(|(_, p)| p.time_nanos.saturating_add(p.duration_nanos))
        .chain(spans.iter().map(|s| s.end_ns as i64))
        .max()
        .ok_or(DemoError::Empty)?;
    let shift_ns = now_ns - end;
    let shift = |t: u64| (t as i64).saturating_add(shift_ns).max(0) as u64;
    for s in &mut spans {
        s.start_ns = shift(s.start_ns);
        s.end_ns = shift(s.end_ns);
        for e in &mut s.events {
            e.time_ns = shift(e.time_ns);
        }
    }

    let mut out = Vec::with_capacity(profiles.len());
    let mut samples = 0;
    for (name, mut p) in profiles {
        p.time_nanos = p.time_nanos.saturating_add(shift_ns);
        samples += p.sample.len();
        let resource = Resource {
            attributes: vec![
                string_kv("service.name", SERVICE),
                string_kv(
                    PROFILE_NAME_ATTRIBUTE,
                    crate::receivers::scrape::profile_name(name).unwrap_or(name),
                ),
            ],
            ..Default::default()
        };
        let mut batch = Batch::new(Some(link.clone()));
        batch
            .add_pprof(&p, resource)
            .map_err(|e| part(format!("recorded {name} profile"), e))?;
        out.push(batch.finish().0);
    }
    Ok(Demo {
        profiles: out,
        spans,
        samples,
        shift_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recording_loads_linked_and_ends_now() {
        let now = 1_900_000_000_000_000_000;
        let demo = load(now, &LinkConfig::default()).unwrap();
        assert_eq!(demo.profiles.len(), PROFILES.len());
        assert!(demo.samples > 1000, "{} samples", demo.samples);
        let heavy: Vec<_> = demo
            .spans
            .iter()
            .filter(|s| s.name == "GET /cpu-heavy")
            .collect();
        assert!(heavy.len() >= 20, "{} /cpu-heavy spans", heavy.len());
        assert!(demo.spans.iter().all(|s| s.service == SERVICE));
        // As an OpenTelemetry SDK sends them: a resource, attributes by kind, failed
        // requests with status and an exception event inside the span.
        let resource_has = |s: &SpanRecord, key: &str| s.resource.iter().any(|(k, _)| k == key);
        assert!(demo.spans.iter().all(|s| {
            [
                "telemetry.sdk.language",
                "service.version",
                "host.name",
                "process.pid",
            ]
            .iter()
            .all(|k| resource_has(s, k))
        }));
        for s in &demo.spans {
            let wanted = if s.kind == 2 {
                [
                    "http.request.method",
                    "url.path",
                    "http.response.status_code",
                ]
            } else {
                ["code.function", "code.namespace", "code.filepath"]
            };
            for key in wanted {
                assert!(s.attribute(key).is_some(), "{} has no {key}", s.name);
            }
        }
        let failed: Vec<_> = demo.spans.iter().filter(|s| s.status_code == 2).collect();
        assert!(failed.len() >= 10, "{} failed spans", failed.len());
        for s in failed {
            assert_eq!(s.attribute("http.response.status_code"), Some("500"));
            let e = &s.events[0];
            assert_eq!(e.name, "exception");
            assert!(s.start_ns <= e.time_ns && e.time_ns <= s.end_ns);
            assert!(e
                .attributes
                .iter()
                .any(|(k, _)| k == "exception.stacktrace"));
        }
        // Re-stamped: the recording ends now, and its spans lie in the last minutes.
        let last = demo.spans.iter().map(|s| s.end_ns).max().unwrap() as i64;
        assert!(last <= now && now - last < 5_000_000_000, "{last} vs {now}");
        let first = demo.spans.iter().map(|s| s.start_ns).min().unwrap() as i64;
        assert!(now - first < 120_000_000_000, "{first} vs {now}");
        // Samples are linked to the recorded spans (the CPU windows covered them).
        let links: usize = demo
            .profiles
            .iter()
            .filter_map(|d| d.dictionary.as_ref())
            .map(|d| d.link_table.len().saturating_sub(1))
            .sum();
        assert!(links > 20, "{links} links");
        // CPU windows end when sampling stopped (Go's own end is up to 200 ms later).
        let cpu_windows: Vec<u64> = demo
            .profiles
            .iter()
            .flat_map(|d| &d.resource_profiles)
            .flat_map(|r| &r.scope_profiles)
            .flat_map(|s| &s.profiles)
            .filter(|p| p.period > 0 && p.duration_nano > 1_000_000_000)
            .map(|p| p.duration_nano)
            .collect();
        assert!(!cpu_windows.is_empty());
        assert!(
            cpu_windows.iter().all(|&d| d == 10_000_000_000),
            "{cpu_windows:?}"
        );
        // Named as scraped profiles are (Grafana's datasource asks for process_cpu).
        let names: Vec<&str> = demo
            .profiles
            .iter()
            .flat_map(|d| &d.resource_profiles)
            .flat_map(|r| &r.resource.as_ref().unwrap().attributes)
            .filter(|kv| kv.key == PROFILE_NAME_ATTRIBUTE)
            .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                spanprof_format::otlp::any_value::Value::StringValue(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            names,
            ["process_cpu", "process_cpu", "process_cpu", "memory"]
        );
    }
}
