//! `/api/v1/timeseries` over the remote: Pyroscope's `SelectSeries` of the selection (span
//! exemplars asked when the caller wants exemplars), in the embedded answer's shape.

use spanprof_format::link::parse_id;
use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::series::{Aggregation, Exemplar, SeriesPoint};
use spanprof_store::store::Selection;

use super::profiles::{label_selector, range_ms};
use super::Remote;
use crate::answer::ApiError;
use crate::pyroscope_proto::querier::v1 as q;
use crate::pyroscope_proto::types::v1 as t;

/// Series one answer may hold: a `group_by` label with more values is not asked of a
/// Pyroscope by this frontend (the embedded answer has no cap; this bounds the memory).
const MAX_SERIES: usize = 10_000;

/// What the caller asked: the bucket width, grouping, aggregation and exemplars per point.
pub struct SeriesAsk {
    /// Bucket width, ns (Pyroscope takes seconds: sent as `step_ns / 1e9`).
    pub step_ns: i64,
    /// The label each series is of.
    pub group_by: Option<String>,
    /// `None`: average for snapshot types, else sum, as the embedded answer.
    pub aggregation: Option<Aggregation>,
    /// Most exemplar spans per point (0: none asked).
    pub exemplars: usize,
}

/// The resolved type, the aggregation used, and the series as `(group value, points)`.
pub struct RemoteSeries {
    /// The type the selection resolved to (`None`: Pyroscope has no profiles in the range).
    pub profile_type: Option<ProfileTypeId>,
    /// The aggregation used.
    pub aggregation: Aggregation,
    /// Each series: its `group_by` value ("" when the label is absent) and its points.
    pub series: Vec<(String, Vec<SeriesPoint>)>,
}

/// The `SelectSeries` request of a selection.
pub fn series_request(
    sel: &Selection,
    profile_type: &ProfileTypeId,
    ask: &SeriesAsk,
    aggregation: Aggregation,
) -> q::SelectSeriesRequest {
    let (start, end) = range_ms(sel);
    q::SelectSeriesRequest {
        profile_type_id: profile_type.to_string(),
        label_selector: label_selector(sel, false),
        start,
        end,
        group_by: ask.group_by.iter().cloned().collect(),
        step: ask.step_ns as f64 / 1e9,
        aggregation: Some(match aggregation {
            Aggregation::Sum => t::TimeSeriesAggregationType::Sum as i32,
            Aggregation::Average => t::TimeSeriesAggregationType::Average as i32,
        }),
        stack_trace_selector: None,
        limit: None,
        exemplar_type: if ask.exemplars > 0 {
            t::ExemplarType::Span as i32
        } else {
            t::ExemplarType::None as i32
        },
    }
}

impl Remote {
    /// The selection's series: its type resolved against Pyroscope's, then `SelectSeries`;
    /// of spans or a trace, totals per step (`span_series.rs`: `SelectSeries` has no span
    /// selector).
    pub async fn time_series(
        self: &std::sync::Arc<Self>,
        sel: &Selection,
        ask: &SeriesAsk,
    ) -> Result<RemoteSeries, ApiError> {
        if !sel.span_ids.is_empty() || sel.trace_id.is_some() || sel.span_filter.is_some() {
            return self.span_series(sel, ask).await;
        }
        let types = self.profile_types(sel).await?;
        let profile_type = Self::resolve_type(&types, sel.profile_type.as_deref())
            .map_err(ApiError::bad_request)?;
        let aggregation = ask.aggregation.unwrap_or(match &profile_type {
            Some(t) if t.is_snapshot() => Aggregation::Average,
            _ => Aggregation::Sum,
        });
        let Some(pt) = &profile_type else {
            return Ok(RemoteSeries {
                profile_type,
                aggregation,
                series: Vec::new(),
            });
        };
        let req = series_request(sel, pt, ask, aggregation);
        let path = "SelectSeries";
        let answer: q::SelectSeriesResponse = self.querier(path, &req, sel).await?;
        if answer.series.len() > MAX_SERIES {
            let e = super::RemoteError::too_many(
                super::client::Peer::Pyroscope,
                path,
                MAX_SERIES,
                "series",
            );
            return Err(e.into());
        }
        let mut series: Vec<(String, Vec<SeriesPoint>)> = answer
            .series
            .into_iter()
            .map(|s| {
                let key = match &ask.group_by {
                    Some(name) => s
                        .labels
                        .iter()
                        .find(|l| &l.name == name)
                        .map(|l| l.value.clone())
                        .unwrap_or_default(),
                    None => String::new(),
                };
                let points = s.points.iter().map(|p| point(p, ask.exemplars)).collect();
                (key, points)
            })
            .collect();
        // The embedded answer lists groups by value.
        series.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(RemoteSeries {
            profile_type,
            aggregation,
            series,
        })
    }
}

/// A point as the embedded store gives it, its first `exemplars` exemplars kept (Pyroscope
/// lists them largest first, as the embedded store does); an exemplar whose ids are not hex
/// of the right length is dropped.
fn point(p: &t::Point, exemplars: usize) -> SeriesPoint {
    SeriesPoint {
        timestamp_ms: p.timestamp,
        value: p.value,
        exemplars: p
            .exemplars
            .iter()
            .filter_map(|e| {
                Some(Exemplar {
                    timestamp_ms: e.timestamp,
                    value: e.value,
                    trace_id: if e.trace_id.is_empty() {
                        [0; 16]
                    } else {
                        parse_id::<16>(&e.trace_id)?
                    },
                    span_id: parse_id::<8>(&e.span_id)?,
                })
            })
            .take(exemplars)
            .collect(),
    }
}
