//! Total value per linked (trace, span) for one profile type: which spans burned the most.

use std::collections::HashMap;

use crate::select::{
    attribute_ids, choose_profiles, sample_link, sample_value, stack_exists, SelectError,
    SelectionSummary,
};

use spanprof_format::otlp::ProfilesData;

/// The summed value of the samples linked to one span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanTotal {
    /// Trace id (16 bytes); `None` when the link carries no (or a malformed) trace id.
    pub trace_id: Option<[u8; 16]>,
    /// Span id (8 bytes).
    pub span_id: [u8; 8],
    /// Sum of the samples' values, in the profile type's unit (saturating).
    pub total: u64,
    /// Number of samples linked to this span.
    pub samples: u64,
}

/// Per-span totals of a profile type, plus what was not linked to any span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanTotals {
    /// One entry per distinct (trace id, span id), largest `total` first, ties by ids.
    pub spans: Vec<SpanTotal>,
    /// Sum of the values of samples without a (valid) link, in the profile type's unit.
    pub unlinked_total: u64,
    /// Number of samples without a (valid) link.
    pub unlinked_samples: u64,
    /// Profile types seen and used, samples read, and references skipped.
    pub summary: SelectionSummary,
}

type LinkKey = (Option<[u8; 16]>, [u8; 8]);

/// Sums sample values per (trace id, span id) link over the profiles of `profile_type`
/// (same forms as [`crate::SampleSelector::profile_type`]; `None` = first profile of each
/// scope). Samples with a zero or negative value or an out-of-range stack are skipped, as in
/// the flame graph; a link whose span id is not 8 bytes counts as unlinked and as a bad index.
/// A sample without a link counts for the span its attributes name (as in
/// [`crate::SampleSelector`]), in the trace they name or the profile's links give the span.
pub fn span_totals(
    data: &ProfilesData,
    profile_type: Option<&str>,
) -> Result<SpanTotals, SelectError> {
    let chosen = choose_profiles(data, profile_type)?;
    let mut summary = chosen.summary;
    // (trace id, span id) -> (total, samples)
    let mut by_link: HashMap<LinkKey, (u64, u64)> = HashMap::new();
    let (mut unlinked_total, mut unlinked_samples) = (0u64, 0u64);
    let keys = spanprof_format::link::LinkConfig::default();
    let traces: HashMap<[u8; 8], [u8; 16]> = chosen
        .dict
        .link_table
        .iter()
        .filter_map(|l| {
            Some((
                <[u8; 8]>::try_from(l.span_id.as_slice()).ok()?,
                <[u8; 16]>::try_from(l.trace_id.as_slice()).ok()?,
            ))
        })
        .collect();
    for sample in chosen.profiles.iter().flat_map(|p| &p.samples) {
        let value = match u64::try_from(sample_value(sample)) {
            Ok(v) if v > 0 => v,
            _ => {
                summary.samples_non_positive += 1;
                continue;
            }
        };
        if !stack_exists(&chosen.dict, sample.stack_index) {
            summary.bad_indices += 1;
            summary.samples_bad_stack += 1;
            continue;
        }
        summary.samples_selected += 1;
        summary.value_selected = summary.value_selected.saturating_add(value);
        let link = match sample_link(&chosen.dict, sample) {
            Ok(link) => link,
            Err(()) => {
                summary.bad_indices += 1;
                None
            }
        };
        let key = match link {
            Some(link) => {
                let span_id = <[u8; 8]>::try_from(link.span_id.as_slice()).ok();
                if span_id.is_none() {
                    summary.bad_indices += 1;
                }
                let trace_id = <[u8; 16]>::try_from(link.trace_id.as_slice()).ok();
                span_id.map(|span_id| (trace_id, span_id))
            }
            // A span id without its trace, kept as an attribute: in the trace the profile's
            // links give that span, if any.
            None => match attribute_ids(&chosen.dict, sample, &keys) {
                (Some(span), trace) => Some((trace.or_else(|| traces.get(&span).copied()), span)),
                (None, _) => None,
            },
        };
        match key {
            Some(key) => {
                let (total, samples) = by_link.entry(key).or_default();
                *total = total.saturating_add(value);
                *samples += 1;
            }
            None => {
                unlinked_total = unlinked_total.saturating_add(value);
                unlinked_samples += 1;
            }
        }
    }
    let mut spans: Vec<SpanTotal> = by_link
        .into_iter()
        .map(|((trace_id, span_id), (total, samples))| SpanTotal {
            trace_id,
            span_id,
            total,
            samples,
        })
        .collect();
    spans.sort_by(|a, b| (b.total, a.trace_id, a.span_id).cmp(&(a.total, b.trace_id, b.span_id)));
    Ok(SpanTotals {
        spans,
        unlinked_total,
        unlinked_samples,
        summary,
    })
}
