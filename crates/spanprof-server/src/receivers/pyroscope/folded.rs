//! The text bodies of `/ingest`: folded stacks (`a;b;c 12` per line, the default format) and
//! `format=lines` (one stack per line, each counting 1), turned into a pprof profile whose
//! sample type comes from the app name's legacy suffix (`myapp.cpu`, `myapp.alloc_space`, …)
//! and `sampleRate`, as Pyroscope reads them.

use spanprof_format::limits::{Measure, ProfileLimits};
use spanprof_format::{pprof, FormatError};
use std::collections::HashMap;

/// Which text format a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// `frame;frame;leaf <count>` per line (Pyroscope's "groups"; `format=folded`).
    Folded,
    /// `frame;frame;leaf` per line, each line one sample (`format=lines`).
    Lines,
}

/// What the app name's suffix says the profile is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyType {
    /// The app name without the suffix.
    pub app: String,
    /// The Pyroscope profile name (`__name__`): `process_cpu`, `memory`, …
    pub metric: &'static str,
    /// The pprof sample type.
    pub sample_type: String,
    /// The pprof sample unit.
    pub unit: &'static str,
}

/// An app name whose suffix names no profile type Pyroscope knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown profile type: {0} (the app name's last dotted part names the profile type: \
     myapp.cpu, myapp.wall, myapp.alloc_space, …)"
)]
pub struct UnknownProfileType(pub String);

/// Splits `myapp.cpu` into the app and what the suffix means (no dot: `cpu`). An unknown
/// suffix is refused, as Pyroscope does ("unknown profile type").
pub fn legacy_type(name: &str) -> Result<LegacyType, UnknownProfileType> {
    let (app, suffix) = match name.rsplit_once('.') {
        Some((app, suffix)) => (app, suffix),
        None => (name, "cpu"),
    };
    let same = || suffix.to_owned();
    let (metric, sample_type, unit) = match suffix {
        "cpu" | "itimer" => ("process_cpu", "samples".to_owned(), "count"),
        "wall" | "seconds" | "nanoseconds" | "microseconds" | "milliseconds" => {
            ("wall", "samples".to_owned(), "count")
        }
        "inuse_objects"
        | "alloc_objects"
        | "alloc_in_new_tlab_objects"
        | "alloc_outside_tlab_objects"
        | "live" => ("memory", same(), "count"),
        "inuse_space" | "alloc_space" | "alloc_in_new_tlab_bytes" | "alloc_outside_tlab_bytes" => {
            ("memory", same(), "bytes")
        }
        "bytes" => ("memory", "samples".to_owned(), "bytes"),
        "goroutines" => ("goroutine", same(), "count"),
        "mutex_count" => ("mutex", "contentions".to_owned(), "count"),
        "mutex_duration" => ("mutex", "delay".to_owned(), "nanoseconds"),
        "block_count" | "lock_count" => ("block", "contentions".to_owned(), "count"),
        "block_duration" | "lock_duration" => ("block", "delay".to_owned(), "nanoseconds"),
        "exceptions" => ("exceptions", "samples".to_owned(), "count"),
        other => return Err(UnknownProfileType(other.to_owned())),
    };
    Ok(LegacyType {
        app: app.to_owned(),
        metric,
        sample_type,
        unit,
    })
}

/// Stacks (root first) with their summed counts, in order of first appearance. Stops as soon
/// as the distinct stacks (the samples) or their frames pass `limits`.
fn parse_stacks<'a>(
    text: &'a str,
    format: TextFormat,
    limits: &ProfileLimits,
) -> Result<Vec<(Vec<&'a str>, i64)>, FormatError> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut stacks: Vec<(Vec<&str>, i64)> = Vec::new();
    let mut frames_seen = 0usize;
    // Lines with something on them, and the first of those.
    let (mut written, mut first) = (0usize, None);
    for (n, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        written += 1;
        first.get_or_insert(line);
        let (stack, count) = match format {
            TextFormat::Lines => (line, 1),
            TextFormat::Folded => {
                // Lines without a count are skipped, as Pyroscope does.
                let Some((stack, count)) = line.rsplit_once(' ') else {
                    continue;
                };
                let count: i64 = count.parse().map_err(|_| {
                    FormatError::Invalid(format!(
                        "line {}: {count:?} is not a sample count (expected `frame;frame;leaf <count>`)",
                        n + 1
                    ))
                })?;
                if count < 0 {
                    return Err(FormatError::Invalid(format!(
                        "line {}: negative sample count {count}",
                        n + 1
                    )));
                }
                (stack, count)
            }
        };
        if stack.is_empty() || count == 0 {
            continue;
        }
        match index.get(stack) {
            Some(&i) => {
                stacks[i].1 = stacks[i].1.checked_add(count).ok_or_else(|| {
                    FormatError::Invalid(format!(
                        "line {}: the sample counts of {stack:?} overflow",
                        n + 1
                    ))
                })?;
            }
            None => {
                // Counted as they are split: one line of millions of frames (a 60 KB gzipped
                // upload) took 1 GB before its frames were counted.
                let mut frames: Vec<&str> = Vec::new();
                for frame in stack.split(';').filter(|f| !f.is_empty()) {
                    limits.allow(Measure::Frames, frames_seen + frames.len() + 1)?;
                    frames.push(frame);
                }
                if frames.is_empty() {
                    continue;
                }
                frames_seen += frames.len();
                limits.allow(Measure::Samples, stacks.len() + 1)?;
                let longest = frames.iter().map(|f| f.len()).max().unwrap_or(0);
                limits.allow(Measure::StringBytes, longest)?;
                index.insert(stack, stacks.len());
                stacks.push((frames, count));
            }
        }
    }
    if stacks.is_empty() {
        if let Some(first) = first {
            // Something was sent, and none of it is a sample: not a 200 that stores nothing.
            let shown: String = first.chars().take(80).collect();
            return Err(FormatError::Invalid(format!(
                "no sample in the body: none of its {written} lines is `frame;frame;leaf <count>` \
                 with a stack and a count above 0 (the first: {shown:?})"
            )));
        }
    }
    Ok(stacks)
}

/// What a text upload becomes.
#[derive(Debug, Clone)]
pub struct TextProfile {
    /// The profile, one sample per distinct stack.
    pub profile: pprof::Profile,
    /// Its type, from the app name.
    pub kind: LegacyType,
}

/// Builds the pprof profile of a text upload. `sample_rate` (Hz) turns CPU and wall counts
/// into nanoseconds (count × 1e9/rate) with a `cpu/nanoseconds` period, as Pyroscope does;
/// 0 keeps plain counts. A text over `limits` is refused as soon as that shows.
pub fn to_pprof(
    text: &str,
    format: TextFormat,
    app_name: &str,
    sample_rate: u32,
    time_ns: i64,
    duration_ns: i64,
    limits: &ProfileLimits,
) -> Result<TextProfile, FormatError> {
    let mut kind = legacy_type(app_name).map_err(|e| FormatError::Invalid(e.to_string()))?;
    let stacks = parse_stacks(text, format, limits)?;
    let mut strings: Vec<String> = vec![String::new()];
    let mut string_ix: HashMap<String, i64> = HashMap::new();
    let mut intern = |s: &str, strings: &mut Vec<String>| -> i64 {
        if let Some(&i) = string_ix.get(s) {
            return i;
        }
        strings.push(s.to_owned());
        let i = strings.len() as i64 - 1;
        string_ix.insert(s.to_owned(), i);
        i
    };
    let mut scale = 1i64;
    let mut profile = pprof::Profile::default();
    if sample_rate != 0 && matches!(kind.metric, "process_cpu" | "wall") {
        let period = 1_000_000_000 / i64::from(sample_rate);
        scale = period;
        kind.sample_type = if kind.metric == "wall" { "wall" } else { "cpu" }.to_owned();
        kind.unit = "nanoseconds";
        profile.period = period;
        profile.period_type = Some(pprof::ValueType {
            r#type: intern("cpu", &mut strings),
            unit: intern("nanoseconds", &mut strings),
        });
    }
    profile.sample_type = vec![pprof::ValueType {
        r#type: intern(&kind.sample_type, &mut strings),
        unit: intern(kind.unit, &mut strings),
    }];
    let mut location_of: HashMap<&str, u64> = HashMap::new();
    for (frames, count) in &stacks {
        let value = count.checked_mul(scale).ok_or_else(|| {
            FormatError::Invalid(format!(
                "the sample count {count} overflows once scaled to ns"
            ))
        })?;
        let mut location_id = Vec::with_capacity(frames.len());
        // pprof lists the leaf first.
        for &frame in frames.iter().rev() {
            let id = match location_of.get(frame) {
                Some(&id) => id,
                None => {
                    let id = profile.location.len() as u64 + 1;
                    let name = intern(frame, &mut strings);
                    profile.function.push(pprof::Function {
                        id,
                        name,
                        system_name: name,
                        ..Default::default()
                    });
                    profile.location.push(pprof::Location {
                        id,
                        line: vec![pprof::Line {
                            function_id: id,
                            ..Default::default()
                        }],
                        ..Default::default()
                    });
                    location_of.insert(frame, id);
                    limits.allow(Measure::Locations, profile.location.len())?;
                    id
                }
            };
            location_id.push(id);
        }
        profile.sample.push(pprof::Sample {
            location_id,
            value: vec![value],
            label: Vec::new(),
        });
    }
    profile.string_table = strings;
    profile.time_nanos = time_ns;
    profile.duration_nanos = duration_ns.max(0);
    Ok(TextProfile { profile, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_cpu_becomes_nanoseconds() {
        let t = to_pprof(
            "main;work;hash 3\nmain;idle 1\n\nmain;work;hash 2\nno-count-line\n",
            TextFormat::Folded,
            "shop.cpu",
            100,
            7,
            0,
            &ProfileLimits::default(),
        )
        .unwrap();
        assert_eq!(t.kind.app, "shop");
        assert_eq!(t.kind.metric, "process_cpu");
        let p = &t.profile;
        let st = p.sample_type[0];
        assert_eq!(
            (p.str(st.r#type), p.str(st.unit)),
            (Some("cpu"), Some("nanoseconds"))
        );
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, vec![50_000_000]);
        let leaf = p.sample[0].location_id[0];
        assert_eq!(p.str(p.function[leaf as usize - 1].name), Some("hash"));
        assert_eq!(p.time_nanos, 7);
    }

    /// A body with something in it and no sample is refused; an empty one stores nothing.
    #[test]
    fn a_text_body_without_a_sample_is_refused_unless_empty() {
        let parse = |text| {
            to_pprof(
                text,
                TextFormat::Folded,
                "shop.cpu",
                100,
                0,
                0,
                &ProfileLimits::default(),
            )
        };
        for text in ["foo;bar\n", ";;; 5\n", "{\"a\":1}", "main 0\n"] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("no sample in the body"), "{text:?}: {e}");
        }
        for text in ["", "\n  \n", " "] {
            assert!(parse(text).unwrap().profile.sample.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn lines_count_one_each_and_memory_keeps_counts() {
        let t = to_pprof(
            "a;b\na;b\r\na\n",
            TextFormat::Lines,
            "x.alloc_space",
            100,
            0,
            0,
            &ProfileLimits::default(),
        )
        .unwrap();
        assert_eq!(t.kind.metric, "memory");
        assert_eq!(t.profile.period, 0);
        let values: Vec<i64> = t.profile.sample.iter().map(|s| s.value[0]).collect();
        assert_eq!(values, vec![2, 1]);
        let t = to_pprof(
            "a 4",
            TextFormat::Folded,
            "x",
            0,
            0,
            0,
            &ProfileLimits::NONE,
        )
        .unwrap();
        assert_eq!(t.profile.sample[0].value, vec![4]);
        assert_eq!(t.kind.sample_type, "samples");
    }

    #[test]
    fn refuses_unknown_suffix_and_bad_counts() {
        assert!(legacy_type("my.app")
            .unwrap_err()
            .to_string()
            .contains("unknown profile type: app"));
        let e = to_pprof(
            "a;b x",
            TextFormat::Folded,
            "x",
            100,
            0,
            0,
            &ProfileLimits::NONE,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 1") && e.contains("not a sample count"),
            "{e}"
        );
        assert!(to_pprof(
            "a -1",
            TextFormat::Folded,
            "x",
            100,
            0,
            0,
            &ProfileLimits::NONE
        )
        .is_err());
    }

    /// Samples (distinct stacks), frames and locations each stop the parse at their limit,
    /// and the error says which.
    #[test]
    fn one_line_of_too_many_frames_is_refused_before_they_are_all_held() {
        let limits = ProfileLimits {
            max_frames: 1000,
            ..ProfileLimits::default()
        };
        // 10 M frames on one line: refused at frame 1001, not after splitting them all.
        let line = format!("{}a 1\n", "a;".repeat(10_000_000));
        let e = to_pprof(&line, TextFormat::Folded, "x", 0, 0, 0, &limits).unwrap_err();
        assert!(e.to_string().contains("frames"), "{e}");
    }

    #[test]
    fn a_text_over_a_limit_is_refused_naming_it() {
        let limits = ProfileLimits {
            max_samples: 3,
            max_locations: 4,
            max_frames: 7,
            max_series: 0,
            max_string_bytes: 0,
        };
        let parse = |text: &str| {
            to_pprof(text, TextFormat::Folded, "x", 0, 0, 0, &limits).map_err(|e| e.to_string())
        };
        // Repeats merge: 3 distinct stacks, 6 frames, 4 functions.
        assert!(parse("a;b 1\na;c 1\na;b 5\nd;b 1\n").is_ok());
        let samples = parse("a 1\nb 1\nc 1\na 1\nd 1\n").unwrap_err();
        assert!(
            samples.contains("4 samples") && samples.contains("max_profile_samples"),
            "{samples}"
        );
        let frames = parse("a;a;a;a 1\na;a;a;b 1\n").unwrap_err();
        assert!(
            frames.contains("8 stack frames") && frames.contains("max_profile_frames"),
            "{frames}"
        );
        let locations = parse("a;b 1\nc;d;e 1\n").unwrap_err();
        assert!(
            locations.contains("5 locations") && locations.contains("max_profile_locations"),
            "{locations}"
        );
    }
}
