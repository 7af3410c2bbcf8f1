//! Selecting samples of an OTLP [`ProfilesData`] by span, trace and profile type, and
//! resolving each selected sample to root-first function-name frames.
//!
//! Inputs are untrusted: an index that points outside its dictionary table never panics; the
//! reference is skipped and counted in [`SelectionSummary::bad_indices`].

use std::borrow::Cow;
use std::fmt;

use spanprof_format::link::LinkConfig;
use spanprof_format::otlp::{Link, Profile, ProfilesData, ProfilesDictionary, Sample, ValueType};

/// Which samples of a [`ProfilesData`] to use.
///
/// A sample matches when no span or trace filter is set (then unlinked samples match too), or
/// when its link's span id is in `span_ids` (if non-empty) and its link's trace id equals
/// `trace_id` (if given). A sample without a link is matched by the span and trace ids of its
/// attributes; one with a span id only is in the trace that the links give its span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleSelector {
    /// Span ids (8 bytes each) to keep; empty = any span.
    pub span_ids: Vec<[u8; 8]>,
    /// Trace id (16 bytes) to keep; `None` = any trace.
    pub trace_id: Option<[u8; 16]>,
    /// Profile type: `type` (`cpu`), `type:unit` (`cpu:nanoseconds`),
    /// `type:unit:period_type:period_unit`, or a Pyroscope id
    /// `name:type:unit:period_type:period_unit` (the name is ignored); `heap`, Go's heap
    /// profile by its name: its default type (the first of a scope with `inuse_space`). `None` =
    /// the first profile of each scope, which OTLP makes the default type.
    pub profile_type: Option<String>,
}

impl SampleSelector {
    /// True when the selector filters on span or trace ids.
    pub fn filters_links(&self) -> bool {
        !self.span_ids.is_empty() || self.trace_id.is_some()
    }
}

/// The type of a profile's values: sample type and unit plus period type and unit, as strings
/// from the dictionary (empty when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileType {
    /// What the values measure, e.g. `cpu`, `samples`, `alloc_space`.
    pub sample_type: String,
    /// Unit of the values, e.g. `nanoseconds`, `count`, `bytes`.
    pub sample_unit: String,
    /// What the sampling period counts, e.g. `cpu`, `space`.
    pub period_type: String,
    /// Unit of the period, e.g. `nanoseconds`, `bytes`.
    pub period_unit: String,
}

impl From<&spanprof_format::profile_type::ProfileTypeId> for ProfileType {
    /// The sample and period types of a Pyroscope profile type id (its name left out).
    fn from(id: &spanprof_format::profile_type::ProfileTypeId) -> Self {
        ProfileType {
            sample_type: id.sample_type.clone(),
            sample_unit: id.sample_unit.clone(),
            period_type: id.period_type.clone(),
            period_unit: id.period_unit.clone(),
        }
    }
}

impl fmt::Display for ProfileType {
    /// `type:unit:period_type:period_unit`, which [`SampleSelector::profile_type`] accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.sample_type, self.sample_unit, self.period_type, self.period_unit
        )
    }
}

/// Why samples could not be selected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// The profile type selector has a shape that is not one of the accepted forms.
    #[error("invalid profile type {selector:?}: expected type, type:unit, type:unit:period_type:period_unit or name:type:unit:period_type:period_unit")]
    InvalidProfileType {
        /// The selector as given.
        selector: String,
    },
    /// No profile in the data has the requested type.
    #[error("no profile of type {wanted}; available: {}", list_types(.available))]
    NoSuchProfileType {
        /// The selector as given.
        wanted: String,
        /// Every profile type present in the data, in order of first appearance.
        available: Vec<ProfileType>,
    },
}

fn list_types(types: &[ProfileType]) -> String {
    if types.is_empty() {
        return "(none)".to_owned();
    }
    let names: Vec<String> = types.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// What a selection read and what it had to skip. Counts are numbers of samples or references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectionSummary {
    /// Every profile type present in the data, in order of first appearance.
    pub available_types: Vec<ProfileType>,
    /// Types of the profiles that were read, in order of first appearance.
    pub used_types: Vec<ProfileType>,
    /// Samples passed on (matched the selector, resolvable stack, positive value).
    pub samples_selected: u64,
    /// Sum of the values passed on, in the profile type's unit (saturating).
    pub value_selected: u64,
    /// Matching samples dropped because their value (sum of `values`) was zero or negative.
    pub samples_non_positive: u64,
    /// Matching samples dropped because their `stack_index` was out of range.
    pub samples_bad_stack: u64,
    /// Out-of-range references skipped (stack, location, function, string, link indices) and
    /// links whose ids have the wrong length.
    pub bad_indices: u64,
    /// Distinct times of the profiles read (a store's answers; 0 otherwise): how many
    /// snapshots a snapshot type's total adds up.
    pub profile_times: u64,
    /// A store's answers: the type the selection resolved to, as a full id (names included:
    /// `mutex:…` and `block:…` have the same sample types); `None` otherwise.
    pub profile_type_id: Option<spanprof_format::profile_type::ProfileTypeId>,
    /// A store's answers: the full ids of the types the selection has (see
    /// [`crate::store::Store::selection_types`]); empty otherwise.
    pub type_ids: Vec<spanprof_format::profile_type::ProfileTypeId>,
}

/// A profile type selector parsed from [`SampleSelector::profile_type`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct TypeSelector {
    sample_type: String,
    sample_unit: Option<String>,
    period: Option<(String, String)>,
}

impl TypeSelector {
    fn parse(selector: &str) -> Result<Self, SelectError> {
        let parts: Vec<&str> = selector.split(':').collect();
        let owned = |i: usize| parts[i].to_owned();
        let parsed = match parts.len() {
            1 => Some((owned(0), None, None)),
            2 => Some((owned(0), Some(owned(1)), None)),
            4 => Some((owned(0), Some(owned(1)), Some((owned(2), owned(3))))),
            // Pyroscope ids may carry a sixth `:delta` part; like Pyroscope we ignore it.
            5 | 6 => Some((owned(1), Some(owned(2)), Some((owned(3), owned(4))))),
            _ => None,
        };
        match parsed {
            Some((sample_type, sample_unit, period)) if !sample_type.is_empty() => Ok(Self {
                sample_type,
                sample_unit,
                period,
            }),
            _ => Err(SelectError::InvalidProfileType {
                selector: selector.to_owned(),
            }),
        }
    }

    fn matches(&self, t: &ProfileType) -> bool {
        self.sample_type == t.sample_type
            && self
                .sample_unit
                .as_ref()
                .is_none_or(|u| *u == t.sample_unit)
            && self
                .period
                .as_ref()
                .is_none_or(|(pt, pu)| *pt == t.period_type && *pu == t.period_unit)
    }
}

/// Looks up `index` in a dictionary table; `None` when negative or past the end.
pub(crate) fn entry<T>(table: &[T], index: i32) -> Option<&T> {
    usize::try_from(index).ok().and_then(|i| table.get(i))
}

/// The profiles chosen by a type selector, with the types seen and used.
pub(crate) struct ChosenProfiles<'d> {
    pub(crate) dict: Cow<'d, ProfilesDictionary>,
    pub(crate) profiles: Vec<&'d Profile>,
    pub(crate) summary: SelectionSummary,
}

/// The name of Go's heap profile, a [`SampleSelector::profile_type`] of its own.
const HEAP: &str = "heap";

/// Picks the profiles of `data` that `profile_type` selects (see [`SampleSelector`]).
pub(crate) fn choose_profiles<'d>(
    data: &'d ProfilesData,
    profile_type: Option<&str>,
) -> Result<ChosenProfiles<'d>, SelectError> {
    let type_selector = profile_type.map(TypeSelector::parse).transpose()?;
    let dict = match &data.dictionary {
        Some(dict) => Cow::Borrowed(dict),
        None => Cow::Owned(ProfilesDictionary::default()),
    };
    let mut summary = SelectionSummary::default();
    let mut profiles = Vec::new();
    for scope in data
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
    {
        for (position, profile) in scope.profiles.iter().enumerate() {
            let t = profile_type_of(&dict, profile, &mut summary.bad_indices);
            let chosen = match &type_selector {
                Some(sel) => sel.matches(&t),
                None => position == 0,
            };
            if chosen {
                profiles.push(profile);
                push_unique(&mut summary.used_types, &t);
            }
            push_unique(&mut summary.available_types, &t);
        }
    }
    // `heap`, which no sample type is called: the default type of Go's heap profile, as
    // `go tool pprof` shows it (inuse_space, unless the file names another).
    if profile_type == Some(HEAP) && profiles.is_empty() {
        for scope in data
            .resource_profiles
            .iter()
            .flat_map(|r| &r.scope_profiles)
        {
            let types: Vec<ProfileType> = scope
                .profiles
                .iter()
                .map(|p| profile_type_of(&dict, p, &mut 0))
                .collect();
            if types.iter().any(|t| t.sample_type == "inuse_space") {
                profiles.push(&scope.profiles[0]);
                push_unique(&mut summary.used_types, &types[0]);
            }
        }
    }
    if let Some(wanted) = profile_type.filter(|_| profiles.is_empty()) {
        return Err(SelectError::NoSuchProfileType {
            wanted: wanted.to_owned(),
            available: summary.available_types,
        });
    }
    Ok(ChosenProfiles {
        dict,
        profiles,
        summary,
    })
}

fn push_unique(types: &mut Vec<ProfileType>, t: &ProfileType) {
    if !types.contains(t) {
        types.push(t.clone());
    }
}

/// Every profile type present in `data`, in order of first appearance.
pub fn available_profile_types(data: &ProfilesData) -> Vec<ProfileType> {
    match choose_profiles(data, None) {
        Ok(chosen) => chosen.summary.available_types,
        // Unreachable: without a type selector choosing cannot fail.
        Err(_) => Vec::new(),
    }
}

fn profile_type_of(dict: &ProfilesDictionary, profile: &Profile, bad: &mut u64) -> ProfileType {
    let pair = |vt: Option<&ValueType>, bad: &mut u64| match vt {
        Some(vt) => (
            string(dict, vt.type_strindex, bad).to_owned(),
            string(dict, vt.unit_strindex, bad).to_owned(),
        ),
        None => (String::new(), String::new()),
    };
    let (sample_type, sample_unit) = pair(profile.sample_type.as_ref(), bad);
    let (period_type, period_unit) = pair(profile.period_type.as_ref(), bad);
    ProfileType {
        sample_type,
        sample_unit,
        period_type,
        period_unit,
    }
}

/// The string at `index`, or `""` (counted as bad unless the table is empty and index is 0).
fn string<'d>(dict: &'d ProfilesDictionary, index: i32, bad: &mut u64) -> &'d str {
    match entry(&dict.string_table, index) {
        Some(s) => s,
        None => {
            if index != 0 {
                *bad += 1;
            }
            ""
        }
    }
}

/// The value of one sample: the sum of its `values` (saturating), or the number of its
/// timestamps when it has no values (each timestamp is one event).
pub(crate) fn sample_value(sample: &Sample) -> i64 {
    if sample.values.is_empty() {
        i64::try_from(sample.timestamps_unix_nano.len()).unwrap_or(i64::MAX)
    } else {
        sample
            .values
            .iter()
            .fold(0i64, |acc, v| acc.saturating_add(*v))
    }
}

/// The link of a sample: `Ok(None)` for link index 0, `Err(())` for an out-of-range index.
pub(crate) fn sample_link<'d>(
    dict: &'d ProfilesDictionary,
    sample: &Sample,
) -> Result<Option<&'d Link>, ()> {
    if sample.link_index == 0 {
        return Ok(None);
    }
    entry(&dict.link_table, sample.link_index)
        .map(Some)
        .ok_or(())
}

/// Whether `stack_index` names a stack (index 0, the empty stack, always does).
pub(crate) fn stack_exists(dict: &ProfilesDictionary, stack_index: i32) -> bool {
    stack_index == 0 || entry(&dict.stack_table, stack_index).is_some()
}

fn link_matches(
    dict: &ProfilesDictionary,
    sample: &Sample,
    selector: &SampleSelector,
    unlinked: &Unlinked,
    bad: &mut u64,
) -> bool {
    if !selector.filters_links() {
        return true;
    }
    let (span, trace) = match sample_link(dict, sample) {
        Ok(Some(link)) => (
            <[u8; 8]>::try_from(link.span_id.as_slice()).ok(),
            <[u8; 16]>::try_from(link.trace_id.as_slice()).ok(),
        ),
        Ok(None) => attribute_ids(dict, sample, &unlinked.keys),
        Err(()) => {
            *bad += 1;
            return false;
        }
    };
    let span_ok =
        selector.span_ids.is_empty() || span.is_some_and(|span| selector.span_ids.contains(&span));
    let trace_ok = match (selector.trace_id, trace, span) {
        (None, ..) => true,
        (Some(want), Some(trace), _) => trace == want,
        // A span without its trace is in the trace the profile's links give that span.
        (Some(_), None, Some(span)) => unlinked.spans_of_trace.contains(&span),
        (Some(_), None, None) => false,
    };
    span_ok && trace_ok
}

/// The span and trace ids a sample without a link carries as attributes, under the usual
/// keys (`span_id`, `otel.profile.span_id`, …). A link needs both ids, so a converter keeps a
/// span id without its trace (pyroscope-otel labels only span ids) as an attribute, and the
/// store links such samples to their span all the same.
pub(crate) fn attribute_ids(
    dict: &ProfilesDictionary,
    sample: &Sample,
    keys: &LinkConfig,
) -> (Option<[u8; 8]>, Option<[u8; 16]>) {
    use spanprof_format::link::IdRole;
    use spanprof_format::otlp::any_value::Value;
    let (mut span, mut trace) = (None, None);
    for &a in &sample.attribute_indices {
        let Some(kv) = entry(&dict.attribute_table, a) else {
            continue;
        };
        let Some(key) = entry(&dict.string_table, kv.key_strindex) else {
            continue;
        };
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(v)) => Some(v.as_str()),
            _ => None,
        };
        match keys.role(key, value) {
            IdRole::SpanId(id) => span = span.or(Some(id)),
            IdRole::TraceId(id) => trace = trace.or(Some(id)),
            _ => {}
        }
    }
    (span, trace)
}

/// What selecting samples without a link takes: the keys of id attributes, and the spans
/// the links of the dictionary put in the selected trace.
struct Unlinked {
    keys: LinkConfig,
    spans_of_trace: hashbrown::HashSet<[u8; 8]>,
}

impl Unlinked {
    fn new(dict: &ProfilesDictionary, selector: &SampleSelector) -> Self {
        let spans_of_trace = match selector.trace_id {
            None => Default::default(),
            Some(trace) => dict
                .link_table
                .iter()
                .filter(|l| l.trace_id.as_slice() == trace.as_slice())
                .filter_map(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
                .collect(),
        };
        Unlinked {
            keys: LinkConfig::default(),
            spans_of_trace,
        }
    }
}

/// Resolves a stack to frames, root first, into `out`. Returns false when the stack index is
/// out of range (then `out` is empty).
fn resolve_stack<'d>(
    dict: &'d ProfilesDictionary,
    stack_index: i32,
    out: &mut Vec<Cow<'d, str>>,
    bad: &mut u64,
) -> bool {
    out.clear();
    let Some(stack) = entry(&dict.stack_table, stack_index) else {
        // Index 0 is the empty stack even when the producer left the table empty.
        if stack_index == 0 {
            return true;
        }
        *bad += 1;
        return false;
    };
    // Stacks are stored leaf first; within a location the last line is the outermost caller.
    for &location_index in stack.location_indices.iter().rev() {
        let Some(location) = entry(&dict.location_table, location_index) else {
            *bad += 1;
            continue;
        };
        if location.lines.is_empty() {
            out.push(Cow::Owned(format!("0x{:x}", location.address)));
            continue;
        }
        for line in location.lines.iter().rev() {
            match function_name(dict, line.function_index, bad) {
                Some(name) => out.push(Cow::Borrowed(name)),
                None => out.push(Cow::Owned(format!("0x{:x}", location.address))),
            }
        }
    }
    true
}

/// A function's name, else its system name; `None` when both are empty or unresolvable.
fn function_name<'d>(
    dict: &'d ProfilesDictionary,
    function_index: i32,
    bad: &mut u64,
) -> Option<&'d str> {
    let Some(function) = entry(&dict.function_table, function_index) else {
        *bad += 1;
        return None;
    };
    [function.name_strindex, function.system_name_strindex]
        .into_iter()
        .map(|i| string(dict, i, bad))
        .find(|name| !name.is_empty())
}

/// Calls `visit(frames, value)` for every sample of `data` that `selector` selects.
///
/// `frames` are function names, root (outermost caller) first; a location without line
/// information appears as its address in hex (`0x4a3f10`). `value` is the sample's value in
/// the profile type's unit (e.g. nanoseconds, bytes, count); samples whose value is zero or
/// negative are skipped. Errors only on a malformed or absent profile type; bad indices in
/// the data are skipped and counted in the returned summary.
pub fn for_each_selected_sample<F>(
    data: &ProfilesData,
    selector: &SampleSelector,
    mut visit: F,
) -> Result<SelectionSummary, SelectError>
where
    F: FnMut(&[Cow<'_, str>], u64),
{
    let chosen = choose_profiles(data, selector.profile_type.as_deref())?;
    let dict: &ProfilesDictionary = &chosen.dict;
    let mut summary = chosen.summary;
    let mut frames = Vec::new();
    let unlinked = Unlinked::new(dict, selector);
    for sample in chosen.profiles.iter().flat_map(|p| &p.samples) {
        if !link_matches(dict, sample, selector, &unlinked, &mut summary.bad_indices) {
            continue;
        }
        let Ok(value) = u64::try_from(sample_value(sample)) else {
            summary.samples_non_positive += 1;
            continue;
        };
        if value == 0 {
            summary.samples_non_positive += 1;
            continue;
        }
        if !resolve_stack(
            dict,
            sample.stack_index,
            &mut frames,
            &mut summary.bad_indices,
        ) {
            summary.samples_bad_stack += 1;
            continue;
        }
        summary.samples_selected += 1;
        summary.value_selected = summary.value_selected.saturating_add(value);
        visit(&frames, value);
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> ProfileType {
        ProfileType {
            sample_type: "cpu".into(),
            sample_unit: "nanoseconds".into(),
            period_type: "cpu".into(),
            period_unit: "nanoseconds".into(),
        }
    }

    #[test]
    fn type_selector_forms() {
        let t = cpu();
        for ok in [
            "cpu",
            "cpu:nanoseconds",
            "cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            "anything:cpu:nanoseconds:cpu:nanoseconds:delta",
        ] {
            assert!(TypeSelector::parse(ok).unwrap().matches(&t), "{ok}");
        }
        for no in [
            "samples",
            "cpu:count",
            "process_cpu:cpu:nanoseconds:space:bytes",
        ] {
            assert!(!TypeSelector::parse(no).unwrap().matches(&t), "{no}");
        }
        for bad in ["", "a:b:c", ":cpu", "a:b:c:d:e:f:g"] {
            assert!(TypeSelector::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn profile_type_displays_as_accepted_selector() {
        let shown = cpu().to_string();
        assert_eq!(shown, "cpu:nanoseconds:cpu:nanoseconds");
        assert!(TypeSelector::parse(&shown).unwrap().matches(&cpu()));
    }

    #[test]
    fn sample_value_sums_values_or_counts_timestamps() {
        let mut s = Sample {
            values: vec![2, 3, i64::MAX],
            ..Default::default()
        };
        assert_eq!(sample_value(&s), i64::MAX);
        s.values = vec![2, 3];
        assert_eq!(sample_value(&s), 5);
        s.values.clear();
        s.timestamps_unix_nano = vec![10, 20, 30];
        assert_eq!(sample_value(&s), 3);
    }

    #[test]
    fn entry_rejects_negative_and_past_end() {
        let t = [1, 2];
        assert_eq!(entry(&t, -1), None);
        assert_eq!(entry(&t, 2), None);
        assert_eq!(entry(&t, 1), Some(&2));
    }
}
