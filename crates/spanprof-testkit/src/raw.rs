//! Parses the output of `go tool pprof -raw` (the pprof library's `Profile.String()`) into
//! samples with resolved stacks and labels, so that two profiles can be compared as multisets.
//!
//! The format, from github.com/google/pprof/profile/profile.go:
//!
//! ```text
//! PeriodType: cpu nanoseconds          <- header lines, up to "Samples:"
//! Samples:
//! samples/count cpu/nanoseconds        <- sample types ("[dflt]" may follow one)
//!           6   60000000: 1 2 3        <- values ": " location ids, leaf first
//!                 k:[v] k2:[v2]        <- string labels, then numeric labels, sorted
//! Locations
//!      1: 0x6b75d0 M=1 main.f /p/main.go:159 s=0
//!              main.g /p/main.go:95 s=0  <- further (inlined) lines: the last is the caller
//! Mappings
//! ```

use std::collections::{BTreeMap, HashMap};

/// spanprof's default label keys for span and trace ids (DESIGN.md, "Link label keys").
pub const SPAN_ID_KEYS: [&str; 3] = ["otel.profile.span_id", "span_id", "profile_id"];
pub const TRACE_ID_KEYS: [&str; 2] = ["otel.profile.trace_id", "trace_id"];

/// One `-raw` dump.
#[derive(Debug, Clone)]
pub struct RawProfile {
    /// The lines before `Samples:` (PeriodType, Period, Time, Duration, comments).
    pub header: Vec<String>,
    /// `type/unit` per value column.
    pub sample_types: Vec<String>,
    pub samples: Vec<RawSample>,
}

#[derive(Debug, Clone)]
pub struct RawSample {
    pub values: Vec<i64>,
    /// Leaf first, as pprof stores them.
    pub locations: Vec<RawLocation>,
    /// String and numeric labels, `key -> text inside the brackets`.
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct RawLocation {
    pub address: String,
    /// Innermost first: the last line is the caller the others were inlined into.
    pub lines: Vec<RawLine>,
}

#[derive(Debug, Clone)]
pub struct RawLine {
    pub function: String,
    pub file: String,
    pub line: i64,
}

impl RawProfile {
    /// The column of sample type `type_unit` (e.g. `cpu/nanoseconds`).
    pub fn value_index(&self, type_unit: &str) -> usize {
        self.sample_types
            .iter()
            .position(|t| t == type_unit)
            .unwrap_or_else(|| panic!("no sample type {type_unit} in {:?}", self.sample_types))
    }
}

impl RawSample {
    /// Function names root first: the order of collapsed stacks and of `otlp_dump.py` frames.
    pub fn functions_root_first(&self) -> Vec<String> {
        let mut leaf_first: Vec<String> = Vec::new();
        for loc in &self.locations {
            if loc.lines.is_empty() {
                leaf_first.push(loc.address.clone());
            }
            leaf_first.extend(loc.lines.iter().map(|l| l.function.clone()));
        }
        leaf_first.reverse();
        leaf_first
    }

    /// The stack exactly, one string per location (address and every line), leaf first.
    pub fn stack_exact(&self) -> Vec<String> {
        self.locations
            .iter()
            .map(|loc| {
                let lines: Vec<String> = loc
                    .lines
                    .iter()
                    .map(|l| format!("{} {}:{}", l.function, l.file, l.line))
                    .collect();
                format!("{} [{}]", loc.address, lines.join(" | "))
            })
            .collect()
    }

    /// The (trace id, span id) this sample's labels name under the default keys, if its span id
    /// is valid hex; the trace id is `""` when absent or invalid.
    pub fn link(&self) -> Option<(String, String)> {
        link_of(&self.labels)
    }
}

/// Whether `v` is a lowercase or uppercase hex id of `len` characters, not all zeros.
pub fn is_hex_id(v: &str, len: usize) -> bool {
    v.len() == len && v.bytes().all(|b| b.is_ascii_hexdigit()) && v.bytes().any(|b| b != b'0')
}

/// The link named by `labels` under spanprof's default keys (see [`RawSample::link`]).
pub fn link_of(labels: &BTreeMap<String, String>) -> Option<(String, String)> {
    let span = SPAN_ID_KEYS
        .iter()
        .filter_map(|k| labels.get(*k))
        .find(|v| is_hex_id(v, 16))?;
    let trace = TRACE_ID_KEYS
        .iter()
        .filter_map(|k| labels.get(*k))
        .find(|v| is_hex_id(v, 32))
        .cloned()
        .unwrap_or_default();
    Some((trace.to_ascii_lowercase(), span.to_ascii_lowercase()))
}

/// `labels` as they should look after pprof → OTLP → pprof with default settings: valid id
/// labels under any default key are replaced by `trace_id`/`span_id` (rebuilt from the
/// sample's link, lowercase hex); every other label is unchanged.
pub fn canonical_link_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = labels.clone();
    if let Some((trace, span)) = link_of(labels) {
        out.retain(|k, v| {
            !(SPAN_ID_KEYS.contains(&k.as_str()) && is_hex_id(v, 16)
                || TRACE_ID_KEYS.contains(&k.as_str()) && is_hex_id(v, 32))
        });
        out.insert("span_id".into(), span);
        if !trace.is_empty() {
            out.insert("trace_id".into(), trace);
        }
    }
    out
}

/// Parses `go tool pprof -raw` output; panics with the offending line on anything unexpected.
pub fn parse(text: &str) -> RawProfile {
    #[derive(PartialEq)]
    enum Section {
        Header,
        SampleTypes,
        Samples,
        Locations,
        Mappings,
    }
    let mut section = Section::Header;
    let mut header = Vec::new();
    let mut sample_types = Vec::new();
    // Samples as (values, location ids, labels) until the locations are known.
    type Pending = (Vec<i64>, Vec<u64>, BTreeMap<String, String>);
    let mut pending: Vec<Pending> = Vec::new();
    let mut locations: HashMap<u64, RawLocation> = HashMap::new();
    let mut current_location: Option<u64> = None;

    for line in text.lines() {
        match section {
            Section::Header if line == "Samples:" => section = Section::SampleTypes,
            Section::Header => header.push(line.trim_end().to_string()),
            Section::SampleTypes => {
                sample_types = line
                    .split_whitespace()
                    .map(|t| t.trim_end_matches("[dflt]").to_string())
                    .collect();
                section = Section::Samples;
            }
            Section::Samples if line == "Locations" => section = Section::Locations,
            Section::Samples => {
                if let Some((values, ids)) = parse_sample_line(line) {
                    pending.push((values, ids, BTreeMap::new()));
                } else {
                    let (_, _, labels) = pending
                        .last_mut()
                        .unwrap_or_else(|| panic!("label line before any sample: {line:?}"));
                    parse_labels(line, labels);
                }
            }
            Section::Locations if line == "Mappings" => section = Section::Mappings,
            Section::Locations => {
                let trimmed = line.trim_start();
                let new_location = trimmed
                    .split_once(": 0x")
                    .filter(|(id, _)| id.bytes().all(|b| b.is_ascii_digit()));
                if let Some((id, rest)) = new_location {
                    let id: u64 = id.parse().expect("location id");
                    let (address, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                    let mut rest = rest.trim_start();
                    if let Some(after) = rest.strip_prefix("M=") {
                        rest = after.split_once(' ').map_or("", |(_, r)| r);
                    }
                    rest = rest.strip_prefix("[F] ").unwrap_or(rest).trim();
                    let mut location = RawLocation {
                        address: format!("0x{address}"),
                        lines: Vec::new(),
                    };
                    if !rest.is_empty() {
                        location.lines.push(parse_line(rest));
                    }
                    locations.insert(id, location);
                    current_location = Some(id);
                } else {
                    let id = current_location
                        .unwrap_or_else(|| panic!("continuation before any location: {line:?}"));
                    let location = locations.get_mut(&id).expect("current location");
                    location.lines.push(parse_line(trimmed.trim_end()));
                }
            }
            Section::Mappings => {}
        }
    }
    assert!(
        section == Section::Mappings,
        "`go tool pprof -raw` output ended early (no Mappings section):\n{text}"
    );
    let samples = pending
        .into_iter()
        .map(|(values, ids, labels)| {
            assert_eq!(
                values.len(),
                sample_types.len(),
                "sample with {values:?} for types {sample_types:?}"
            );
            let locations = ids
                .iter()
                .map(|id| {
                    locations
                        .get(id)
                        .unwrap_or_else(|| panic!("sample names unknown location {id}"))
                        .clone()
                })
                .collect();
            RawSample {
                values,
                locations,
                labels,
            }
        })
        .collect();
    RawProfile {
        header,
        sample_types,
        samples,
    }
}

/// `   6   60000000: 1 2 3 ` → values and location ids; `None` for a label line.
fn parse_sample_line(line: &str) -> Option<(Vec<i64>, Vec<u64>)> {
    let (values, ids) = line.split_once(':')?;
    let values: Vec<i64> = values
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let ids: Vec<u64> = ids
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    (!values.is_empty()).then_some((values, ids))
}

/// `k:[v] k2:[v w]` (values may hold spaces) into `labels`.
fn parse_labels(line: &str, labels: &mut BTreeMap<String, String>) {
    let mut rest = line.trim();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once(":[")
            .unwrap_or_else(|| panic!("unparseable label line {line:?}"));
        let (value, after) = after
            .split_once(']')
            .unwrap_or_else(|| panic!("unterminated label in {line:?}"));
        labels.insert(key.trim().to_string(), value.to_string());
        rest = after.trim_start();
    }
}

/// `main.f /p/main.go:159 s=0` (or `??`) into a line.
fn parse_line(text: &str) -> RawLine {
    if text == "??" {
        return RawLine {
            function: "??".into(),
            file: String::new(),
            line: 0,
        };
    }
    let without_start = text.rsplit_once(" s=").map_or(text, |(l, _)| l);
    let (function, file_line) = without_start
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("unparseable location line {text:?}"));
    let (file, line) = file_line
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("no line number in {text:?}"));
    RawLine {
        function: function.to_string(),
        file: file.to_string(),
        line: line
            .parse()
            .unwrap_or_else(|_| panic!("bad line number in {text:?}")),
    }
}
