//! Linking samples to trace spans: sample attributes whose keys carry trace/span ids become
//! entries of the dictionary's `link_table` and the sample's `link_index`.
//!
//! This is the processor the standard collector lacks. It runs on every source (pprof labels
//! and OTLP sample attributes alike) through [`SampleLinker`].

use hashbrown::HashMap;

use crate::dictionary::DictionaryBuilder;

/// Which attribute keys carry trace ids, span ids and span names, and what to do with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// Keys whose value is a span id (16 hex chars), first match wins.
    pub span_id_keys: Vec<String>,
    /// Keys whose value is a trace id (32 hex chars), first match wins.
    pub trace_id_keys: Vec<String>,
    /// Keys whose value names the span; kept as ordinary attributes (bounded cardinality).
    pub span_name_keys: Vec<String>,
    /// Keep the id attributes on the sample after linking (off by default: the link carries
    /// them, and keeping them multiplies cardinality).
    pub keep_link_attributes: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            span_id_keys: vec![
                "otel.profile.span_id".into(),
                "span_id".into(),
                "profile_id".into(),
            ],
            trace_id_keys: vec!["otel.profile.trace_id".into(), "trace_id".into()],
            span_name_keys: vec!["otel.profile.span_name".into(), "span_name".into()],
            keep_link_attributes: false,
        }
    }
}

/// The attribute key a span id is kept under when it cannot be linked (no trace id): the key
/// Pyroscope reads, so a downstream Pyroscope still sees the span.
pub const UNLINKED_SPAN_ID_KEY: &str = "span_id";

/// What one attribute means for linking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRole {
    /// Not an id key.
    Plain,
    /// A valid span id.
    SpanId([u8; 8]),
    /// A valid trace id.
    TraceId([u8; 16]),
    /// An id key whose value is not a valid id; it stays an ordinary attribute.
    InvalidId,
}

impl LinkConfig {
    /// Classifies the attribute `key = value` (a string value; pass `None` for other types).
    pub fn role(&self, key: &str, value: Option<&str>) -> IdRole {
        let is_span = self.span_id_keys.iter().any(|k| k == key);
        let is_trace = !is_span && self.trace_id_keys.iter().any(|k| k == key);
        if !is_span && !is_trace {
            return IdRole::Plain;
        }
        let Some(value) = value else {
            return IdRole::InvalidId;
        };
        if is_span {
            parse_id::<8>(value).map_or(IdRole::InvalidId, IdRole::SpanId)
        } else {
            parse_id::<16>(value).map_or(IdRole::InvalidId, IdRole::TraceId)
        }
    }
}

/// Parses exactly `2 * N` hex digits (either case) into an id; all-zero ids are invalid (W3C).
pub fn parse_id<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    // A table lookup per digit and one check at the end: ids are parsed for every distinct
    // label of every profile.
    let mut out = [0u8; N];
    let mut seen = 0u8;
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let (hi, lo) = (HEX[usize::from(pair[0])], HEX[usize::from(pair[1])]);
        seen |= hi | lo;
        out[i] = (hi << 4) | (lo & 0xf);
    }
    (seen < 16 && out != [0u8; N]).then_some(out)
}

/// Each byte's value as a hex digit (either case); `0xff` for any other byte.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        t[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Where [`SampleLinker::finish`] puts the links and attributes it makes: a dictionary being
/// built, or the dictionary of OTLP input linked where it lies (`link_in_place`).
pub trait LinkTables {
    /// The index of the link to (`trace_id`, `span_id`).
    fn link(&mut self, trace_id: [u8; 16], span_id: [u8; 8]) -> i32;
    /// The index of a string attribute `key = value`.
    fn string_attribute(&mut self, key: &str, value: &str) -> i32;
}

impl LinkTables for DictionaryBuilder {
    fn link(&mut self, trace_id: [u8; 16], span_id: [u8; 8]) -> i32 {
        DictionaryBuilder::link(self, trace_id, span_id)
    }

    fn string_attribute(&mut self, key: &str, value: &str) -> i32 {
        DictionaryBuilder::string_attribute(self, key, value)
    }
}

/// Counts of what linking did, for the conversion report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkReport {
    /// Samples that got a link.
    pub linked_samples: u64,
    /// Id attributes whose values were not valid hex ids of the right length.
    pub invalid_ids: u64,
    /// Samples with a span id but no trace id (kept as a `span_id` attribute).
    pub span_ids_without_trace_id: u64,
    /// Samples with a trace id but no span id (kept as an attribute).
    pub trace_ids_without_span_id: u64,
    /// Samples whose id attributes disagreed (two different span ids); the first key wins.
    pub conflicting_ids: u64,
}

impl LinkReport {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &LinkReport) {
        self.linked_samples += other.linked_samples;
        self.invalid_ids += other.invalid_ids;
        self.span_ids_without_trace_id += other.span_ids_without_trace_id;
        self.trace_ids_without_span_id += other.trace_ids_without_span_id;
        self.conflicting_ids += other.conflicting_ids;
    }
}

/// Per-sample link state: feed each attribute's role with [`SampleLinker::observe`], then call
/// [`SampleLinker::finish`] to get the link index and the attributes to add back.
#[derive(Debug, Default)]
pub struct SampleLinker {
    span: Option<[u8; 8]>,
    trace: Option<[u8; 16]>,
    conflict: bool,
    /// Whether the current sample's id attributes stay on it (observed with `keep`).
    kept: bool,
    span_attrs: HashMap<[u8; 8], i32>,
    trace_attrs: HashMap<[u8; 16], i32>,
    /// What linking did so far.
    pub report: LinkReport,
}

impl SampleLinker {
    /// Records one attribute of the current sample. Returns whether the attribute stays on
    /// the sample (plain attributes, invalid ids, and ids when `keep` is set).
    pub fn observe(&mut self, role: IdRole, keep: bool) -> bool {
        match role {
            IdRole::Plain => true,
            IdRole::InvalidId => {
                self.report.invalid_ids += 1;
                true
            }
            IdRole::SpanId(id) => {
                match self.span {
                    Some(prev) if prev != id => self.conflict = true,
                    Some(_) => {}
                    None => self.span = Some(id),
                }
                self.kept |= keep;
                keep
            }
            IdRole::TraceId(id) => {
                match self.trace {
                    Some(prev) if prev != id => self.conflict = true,
                    Some(_) => {}
                    None => self.trace = Some(id),
                }
                self.kept |= keep;
                keep
            }
        }
    }

    /// Records one attribute of an OTLP sample that may already carry a link from its source
    /// (`linked`): then its ids are not collected (the link stands, and
    /// [`SampleLinker::finish`] is not called) and stay only when `keep` is set. Returns
    /// whether the attribute stays on the sample.
    pub fn observe_beside(&mut self, role: IdRole, keep: bool, linked: bool) -> bool {
        if linked {
            !matches!(role, IdRole::SpanId(_) | IdRole::TraceId(_)) || keep
        } else {
            self.observe(role, keep)
        }
    }

    /// Ends the current sample: returns its link index (0 when it has none) and pushes onto
    /// `attributes` the id attributes that must stay because no link could be made.
    pub fn finish(&mut self, dict: &mut impl LinkTables, attributes: &mut Vec<i32>) -> i32 {
        let (span, trace) = (self.span.take(), self.trace.take());
        let kept = std::mem::take(&mut self.kept);
        if std::mem::take(&mut self.conflict) {
            self.report.conflicting_ids += 1;
        }
        match (span, trace) {
            (Some(span), Some(trace)) => {
                self.report.linked_samples += 1;
                dict.link(trace, span)
            }
            (Some(span), None) => {
                self.report.span_ids_without_trace_id += 1;
                let attr = *self
                    .span_attrs
                    .entry(span)
                    .or_insert_with(|| dict.string_attribute(UNLINKED_SPAN_ID_KEY, &to_hex(&span)));
                if !attributes.contains(&attr) {
                    attributes.push(attr);
                }
                0
            }
            (None, Some(trace)) => {
                self.report.trace_ids_without_span_id += 1;
                if !kept {
                    let attr = *self
                        .trace_attrs
                        .entry(trace)
                        .or_insert_with(|| dict.string_attribute("trace_id", &to_hex(&trace)));
                    if !attributes.contains(&attr) {
                        attributes.push(attr);
                    }
                }
                0
            }
            (None, None) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_must_be_hex_of_the_right_length() {
        assert_eq!(
            parse_id::<8>("00f067aa0ba902b7"),
            Some([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert_eq!(
            parse_id::<8>("00F067AA0BA902B7"),
            parse_id::<8>("00f067aa0ba902b7")
        );
        assert_eq!(parse_id::<8>("00f067aa0ba902b"), None);
        assert_eq!(parse_id::<8>("00f067aa0ba902b7a"), None);
        assert_eq!(parse_id::<8>("00f067aa0ba902bg"), None);
        assert_eq!(parse_id::<8>("0000000000000000"), None);
        // Every byte that is not a hex digit, in either digit of a pair.
        for c in 0..=255u8 {
            let hex = c.is_ascii_hexdigit();
            for at in [0, 1, 15] {
                let mut s = *b"00f067aa0ba902b7";
                s[at] = c;
                if let Ok(s) = std::str::from_utf8(&s) {
                    assert_eq!(parse_id::<8>(s).is_some(), hex, "{s:?}");
                }
            }
        }
        assert_eq!(
            parse_id::<16>("4bf92f3577b34da6a3ce929d0e0e4736").map(|x| x[0]),
            Some(0x4b)
        );
    }

    #[test]
    fn roles_follow_the_configured_keys() {
        let cfg = LinkConfig::default();
        assert_eq!(
            cfg.role("span_id", Some("00f067aa0ba902b7")),
            IdRole::SpanId([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        assert_eq!(cfg.role("span_id", Some("xyz")), IdRole::InvalidId);
        assert_eq!(cfg.role("span_id", None), IdRole::InvalidId);
        assert_eq!(cfg.role("span_name", Some("GET /")), IdRole::Plain);
        assert_eq!(cfg.role("region", Some("00f067aa0ba902b7")), IdRole::Plain);
        assert!(matches!(
            cfg.role(
                "otel.profile.trace_id",
                Some("4bf92f3577b34da6a3ce929d0e0e4736")
            ),
            IdRole::TraceId(_)
        ));
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(to_hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
