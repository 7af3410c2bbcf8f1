//! Linking samples to trace spans: sample attributes whose keys carry trace/span ids become
//! entries of the dictionary's `link_table` and the sample's `link_index`.
//!
//! This is the processor the standard collector lacks. It runs on every source (pprof labels
//! and OTLP sample attributes alike) through [`SampleLinker`].

use hashbrown::HashMap;

use crate::dictionary::DictionaryBuilder;

/// Which attribute keys carry trace ids, span ids and span names, and what to do with them.
/// Read as the server's config file writes it (`processors.link`, keys as the fields).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// Keys whose value is a span id (16 hex chars); a sample with several span ids gets the
    /// innermost span (see [`SampleLinker`]).
    pub span_id_keys: Vec<String>,
    /// Keys whose value is a trace id (32 hex chars); of several, the first wins.
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
    /// Samples whose trace id attributes disagreed (two different trace ids); the first wins.
    pub conflicting_ids: u64,
    /// Samples with no id of their own that took their profile's ids (the upload's `name`
    /// tags, a push series' labels, OTLP resource or profile attributes).
    pub profile_level_ids: u64,
    /// Samples with several span ids (nested spans tagged one inside the other) given the
    /// innermost: the span the known spans or the profile's samples show descending from the
    /// others.
    pub nested_span_ids: u64,
    /// Samples with several span ids none of which could be told innermost: given the first
    /// (in label order).
    pub ambiguous_span_ids: u64,
}

impl LinkReport {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &LinkReport) {
        self.linked_samples += other.linked_samples;
        self.invalid_ids += other.invalid_ids;
        self.span_ids_without_trace_id += other.span_ids_without_trace_id;
        self.trace_ids_without_span_id += other.trace_ids_without_span_id;
        self.conflicting_ids += other.conflicting_ids;
        self.profile_level_ids += other.profile_level_ids;
        self.nested_span_ids += other.nested_span_ids;
        self.ambiguous_span_ids += other.ambiguous_span_ids;
    }
}

/// The ids a whole profile carries (profile-level labels): they link every sample of the
/// profile that has no id of its own, and are never series labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfileIds {
    /// The profile's span id.
    pub span: Option<[u8; 8]>,
    /// The profile's trace id.
    pub trace: Option<[u8; 16]>,
}

impl ProfileIds {
    /// Records one profile-level attribute; returns whether it is an id (and so leaves the
    /// profile's labels). Later ids override earlier ones: a profile's own attributes are
    /// observed after its resource's.
    pub fn observe(&mut self, role: IdRole) -> bool {
        match role {
            IdRole::SpanId(id) => self.span = Some(id),
            IdRole::TraceId(id) => self.trace = Some(id),
            IdRole::Plain | IdRole::InvalidId => return false,
        }
        true
    }

    /// Whether the profile carries any id.
    pub fn is_empty(&self) -> bool {
        self.span.is_none() && self.trace.is_none()
    }
}

/// Where spans already known (stored) say who is whose parent: how a sample tagged with a
/// span and its ancestors (SDKs that keep thread tags as a set) is given the innermost span.
pub trait SpanParents: Send + Sync {
    /// The parent of `span`, when `span` is known and has one.
    fn parent(&self, span: &[u8; 8]) -> Option<[u8; 8]>;

    /// Told when a profile's own samples showed `span` nested in `ancestor` (its nearest
    /// one of a sample's ids): an implementation that keeps it across profiles tells later
    /// profiles where the two are on the same samples only (an upload window inside the
    /// nested span), which no profile alone can tell apart.
    fn learn(&self, _span: [u8; 8], _ancestor: [u8; 8]) {}
}

/// How far up a span's parents are followed when telling nested spans apart.
const MAX_ANCESTRY: usize = 64;

/// Whether `ancestor` is a (transitive) parent of `span` by `parents`.
fn descends(parents: &dyn SpanParents, span: &[u8; 8], ancestor: &[u8; 8]) -> bool {
    let mut at = *span;
    for _ in 0..MAX_ANCESTRY {
        match parents.parent(&at) {
            Some(p) if p == *ancestor => return true,
            Some(p) => at = p,
            None => return false,
        }
    }
    false
}

/// Per-sample link state: feed each attribute's role with [`SampleLinker::observe`], then call
/// [`SampleLinker::finish`] to get the link index and the attributes to add back.
///
/// A sample with several span ids gets the innermost one: first the one the known spans
/// ([`SpanParents`], with what earlier profiles showed) show descending from all the others;
/// else the one on the fewest samples of its profile (a nested span's samples are a subset
/// of its ancestors': the ancestors also ran outside it), once
/// [`SampleLinker::set_span_counts`] has given the counts; else the first, counted as
/// ambiguous.
#[derive(Default)]
pub struct SampleLinker {
    spans: Vec<[u8; 8]>,
    trace: Option<[u8; 16]>,
    conflict: bool,
    /// Whether the current sample's id attributes stay on it (observed with `keep`).
    kept: bool,
    span_attrs: HashMap<[u8; 8], i32>,
    trace_attrs: HashMap<[u8; 16], i32>,
    /// The current profile's own ids, for samples without any.
    profile: ProfileIds,
    /// How many samples of the current profile carry each span id, when asked for.
    span_counts: Option<HashMap<[u8; 8], u32>>,
    parents: Option<std::sync::Arc<dyn SpanParents>>,
    /// What linking did so far.
    pub report: LinkReport,
}

impl std::fmt::Debug for SampleLinker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleLinker")
            .field("profile", &self.profile)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl SampleLinker {
    /// Known spans to tell nested span ids apart with.
    pub fn set_span_parents(&mut self, parents: std::sync::Arc<dyn SpanParents>) {
        self.parents = Some(parents);
    }

    /// Starts a profile whose samples without ids of their own take `ids`.
    pub fn start_profile(&mut self, ids: ProfileIds) {
        self.profile = ids;
        self.span_counts = None;
    }

    /// Whether the current sample has several span ids and the known spans do not tell the
    /// innermost, so [`SampleLinker::finish`] wants the profile's span counts first.
    pub fn needs_span_counts(&self) -> bool {
        self.spans.len() > 1 && self.span_counts.is_none() && self.innermost_known().is_none()
    }

    /// Gives the number of samples of the current profile carrying each span id (each
    /// sample's distinct span ids, once).
    pub fn set_span_counts(&mut self, counts: HashMap<[u8; 8], u32>) {
        self.span_counts = Some(counts);
    }

    /// Counts one sample as received, by the roles of its attributes, into span counts (see
    /// [`SampleLinker::set_span_counts`]): its distinct span ids once each, or, with no id
    /// at all, its profile's span.
    pub fn count_sample(
        &self,
        counts: &mut HashMap<[u8; 8], u32>,
        roles: impl IntoIterator<Item = IdRole>,
    ) {
        let mut seen: Vec<[u8; 8]> = Vec::new();
        let mut any = false;
        for role in roles {
            match role {
                IdRole::SpanId(id) => {
                    any = true;
                    if !seen.contains(&id) {
                        seen.push(id);
                        *counts.entry(id).or_insert(0) += 1;
                    }
                }
                IdRole::TraceId(_) => any = true,
                IdRole::Plain | IdRole::InvalidId => {}
            }
        }
        if !any {
            if let Some(span) = self.profile.span {
                *counts.entry(span).or_insert(0) += 1;
            }
        }
    }

    /// The span id of `attribute` when it is one this linker added for a span id without a
    /// trace id.
    pub fn unlinked_span(&self, attribute: i32) -> Option<[u8; 8]> {
        self.span_attrs
            .iter()
            .find_map(|(span, &a)| (a == attribute).then_some(*span))
    }

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
                if !self.spans.contains(&id) {
                    self.spans.push(id);
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

    /// The candidate the known spans show descending from every other one.
    fn innermost_known(&self) -> Option<[u8; 8]> {
        let parents = self.parents.as_deref()?;
        self.spans.iter().copied().find(|s| {
            self.spans
                .iter()
                .all(|other| other == s || descends(parents, s, other))
        })
    }

    /// The innermost of several span ids (see the type's documentation).
    fn innermost(&mut self) -> [u8; 8] {
        if let Some(s) = self.innermost_known() {
            self.report.nested_span_ids += 1;
            return s;
        }
        if let Some(counts) = &self.span_counts {
            let count = |s: &[u8; 8]| counts.get(s).copied().unwrap_or(0);
            let fewest = self.spans.iter().map(count).min().unwrap_or(0);
            let mut at_fewest = self.spans.iter().filter(|s| count(s) == fewest);
            if let (Some(&s), None) = (at_fewest.next(), at_fewest.next()) {
                self.report.nested_span_ids += 1;
                // Its nearest ancestor: of the others, the one on the fewest samples.
                let nearest = self
                    .spans
                    .iter()
                    .filter(|&&o| o != s)
                    .min_by_key(|o| count(o));
                if let (Some(parents), Some(&ancestor)) = (&self.parents, nearest) {
                    parents.learn(s, ancestor);
                }
                return s;
            }
        }
        self.report.ambiguous_span_ids += 1;
        self.spans[0]
    }

    /// Ends the current sample: returns its link index (0 when it has none) and pushes onto
    /// `attributes` the id attributes that must stay because no link could be made.
    pub fn finish(&mut self, dict: &mut impl LinkTables, attributes: &mut Vec<i32>) -> i32 {
        let span = match self.spans.len() {
            0 => None,
            1 => Some(self.spans[0]),
            _ => Some(self.innermost()),
        };
        self.spans.clear();
        let (mut span, mut trace) = (span, self.trace.take());
        let kept = std::mem::take(&mut self.kept);
        if std::mem::take(&mut self.conflict) {
            self.report.conflicting_ids += 1;
        }
        if span.is_none() && trace.is_none() && !self.profile.is_empty() {
            self.report.profile_level_ids += 1;
            (span, trace) = (self.profile.span, self.profile.trace);
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

#[cfg(test)]
mod nesting_tests;
