//! `querier.v1.QuerierService/SelectHeatmap` (Pyroscope 2.2) against the real server with the
//! real Go CPU profile and its spans: the answer is checked against the heatmap computed here
//! from the profile's truth with upstream's definition (grafana/pyroscope v2.2.1,
//! `pkg/model/heatmap/range.go`: 20 value buckets between the extremes, columns
//! `(t - step, t]` ending at `start`, the largest point of a cell as its exemplar), in both
//! encodings. The messages are declared again from upstream's field numbers.

use serde_json::{json, Value};

use crate::common::goprofile::{SpanTruth, CPU_TYPE, SERVICE};
use crate::querier::{error, fixture, hex, json_call, profile_range, proto, Exemplar, SELECTOR};

#[derive(Clone, PartialEq, prost::Message)]
struct SelectHeatmapRequest {
    #[prost(string, tag = "1")]
    profile_type_id: String,
    #[prost(string, tag = "2")]
    label_selector: String,
    #[prost(int64, tag = "3")]
    start: i64,
    #[prost(int64, tag = "4")]
    end: i64,
    #[prost(double, tag = "5")]
    step: f64,
    #[prost(string, repeated, tag = "6")]
    group_by: Vec<String>,
    #[prost(int32, tag = "7")]
    query_type: i32,
    #[prost(int32, tag = "8")]
    exemplar_type: i32,
    #[prost(int64, optional, tag = "9")]
    limit: Option<i64>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct SelectHeatmapResponse {
    #[prost(message, repeated, tag = "1")]
    series: Vec<HeatmapSeries>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct HeatmapSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<crate::querier::LabelPair>,
    #[prost(message, repeated, tag = "2")]
    slots: Vec<HeatmapSlot>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct HeatmapSlot {
    #[prost(int64, tag = "1")]
    timestamp: i64,
    #[prost(double, repeated, tag = "2")]
    y_min: Vec<f64>,
    #[prost(int32, repeated, tag = "3")]
    counts: Vec<i32>,
    #[prost(message, repeated, tag = "4")]
    exemplars: Vec<Exemplar>,
}

const QUERY_TYPE_INDIVIDUAL: i32 = 1;
const QUERY_TYPE_SPAN: i32 = 2;
const EXEMPLAR_NONE: i32 = 1;
const EXEMPLAR_INDIVIDUAL: i32 = 2;
const EXEMPLAR_SPAN: i32 = 3;
const STEP_S: f64 = 15.0;

fn request() -> SelectHeatmapRequest {
    let (start, end) = profile_range(&fixture().data);
    SelectHeatmapRequest {
        profile_type_id: CPU_TYPE.into(),
        label_selector: SELECTOR.into(),
        start,
        end,
        step: STEP_S,
        group_by: vec![],
        query_type: QUERY_TYPE_SPAN,
        exemplar_type: EXEMPLAR_SPAN,
        limit: None,
    }
}

/// The one slot expected of the Go profile (all its samples at one time): upstream's
/// buckets over the spans' CPU, each bucket's exemplar its largest span.
fn expected_slot() -> HeatmapSlot {
    let data = &fixture().data;
    let (start, _) = profile_range(data);
    let spans: Vec<&SpanTruth> = data.spans.iter().filter(|s| s.cpu_ns > 0).collect();
    assert!(spans.len() > 20, "the fixture has spans with samples");
    let min = spans.iter().map(|s| s.cpu_ns).min().unwrap();
    let max = spans.iter().map(|s| s.cpu_ns).max().unwrap();
    assert!(min < max, "the spans' CPU differs");
    let size = (max - min) as f64 / 20.0;
    let bounds: Vec<(i64, i64)> = (0..20)
        .map(|i| {
            let hi = if i == 19 {
                max
            } else {
                min + ((i + 1) as f64 * size) as i64
            };
            (min + (i as f64 * size) as i64, hi)
        })
        .collect();
    let bucket = |v: i64| {
        bounds
            .iter()
            .position(|&(lo, hi)| v >= lo && v < hi)
            .unwrap_or(19)
    };
    let mut counts = vec![0; 20];
    let mut best: Vec<Option<&SpanTruth>> = vec![None; 20];
    for s in &spans {
        let b = bucket(s.cpu_ns);
        counts[b] += 1;
        let better = match best[b] {
            None => true,
            Some(o) => {
                (s.cpu_ns, std::cmp::Reverse(s.span_id)) > (o.cpu_ns, std::cmp::Reverse(o.span_id))
            }
        };
        if better {
            best[b] = Some(s);
        }
    }
    let t0 = data.profile.time_nanos / 1_000_000;
    let step = (STEP_S * 1000.0) as i64;
    // The right edge of the column holding t0: start + k·step, the first at or after t0.
    let column = start + (t0 - start + step - 1).div_euclid(step) * step;
    HeatmapSlot {
        timestamp: column,
        y_min: bounds.iter().map(|b| b.0 as f64).collect(),
        counts,
        exemplars: best
            .into_iter()
            .flatten()
            .map(|s| Exemplar {
                timestamp: t0,
                profile_id: String::new(),
                span_id: hex(&s.span_id),
                value: s.cpu_ns,
                trace_id: hex(&s.trace_id),
            })
            .collect(),
    }
}

/// A protojson answer as the protobuf one, checking the JSON forms of its numbers.
fn from_json(v: &Value) -> SelectHeatmapResponse {
    let int64 = |x: &Value| -> i64 {
        x.as_str()
            .unwrap_or_else(|| panic!("int64 as a string, got {x}"))
            .parse()
            .unwrap()
    };
    let series = v["series"].as_array().cloned().unwrap_or_default();
    SelectHeatmapResponse {
        series: series
            .iter()
            .map(|s| HeatmapSeries {
                labels: s["labels"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|l| crate::querier::LabelPair {
                        name: l["name"].as_str().unwrap().into(),
                        value: l["value"].as_str().unwrap().into(),
                    })
                    .collect(),
                slots: s["slots"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|slot| HeatmapSlot {
                        timestamp: int64(&slot["timestamp"]),
                        y_min: slot["yMin"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|y| y.as_f64().expect("a double as a number"))
                            .collect(),
                        counts: slot["counts"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|c| c.as_i64().expect("an int32 as a number") as i32)
                            .collect(),
                        exemplars: slot["exemplars"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .iter()
                            .map(|e| Exemplar {
                                timestamp: int64(&e["timestamp"]),
                                profile_id: String::new(),
                                span_id: e["spanId"].as_str().unwrap().into(),
                                value: int64(&e["value"]),
                                trace_id: e["traceId"].as_str().unwrap().into(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[test]
fn span_heatmap_spreads_the_spans_cpu_with_their_ids_in_both_encodings() {
    let want = expected_slot();
    let r: SelectHeatmapResponse = proto("SelectHeatmap", &request());
    assert_eq!(r.series.len(), 1, "{r:?}");
    assert!(r.series[0].labels.is_empty());
    assert_eq!(r.series[0].slots, vec![want.clone()]);

    // Protojson as the Drilldown app sends it: enums by name, int64s as strings.
    let req = request();
    let v = json_call(
        "SelectHeatmap",
        json!({"profileTypeID": CPU_TYPE, "labelSelector": SELECTOR,
               "start": req.start.to_string(), "end": req.end, "step": STEP_S,
               "groupBy": ["service_name"], "queryType": "HEATMAP_QUERY_TYPE_SPAN",
               "exemplarType": "EXEMPLAR_TYPE_SPAN", "limit": "5"}),
    );
    let j = from_json(&v);
    assert_eq!(j.series.len(), 1, "{v}");
    assert_eq!(
        v["series"][0]["labels"],
        json!([{"name": "service_name", "value": SERVICE}])
    );
    assert_eq!(j.series[0].slots, vec![want.clone()]);

    // Without exemplars: the same counts.
    let r: SelectHeatmapResponse = proto(
        "SelectHeatmap",
        &SelectHeatmapRequest {
            exemplar_type: EXEMPLAR_NONE,
            ..request()
        },
    );
    let slot = &r.series[0].slots[0];
    assert!(slot.exemplars.is_empty());
    assert_eq!(slot.counts, want.counts);

    // A selector matching nothing: no series.
    let r: SelectHeatmapResponse = proto(
        "SelectHeatmap",
        &SelectHeatmapRequest {
            label_selector: "{service_name=\"nothing\"}".into(),
            ..request()
        },
    );
    assert!(r.series.is_empty());
}

/// The profile one step before `start` still counts, in the first column (upstream reads
/// `start - step`); past `end`, nothing.
#[test]
fn heatmap_columns_follow_start_and_step() {
    let t0 = fixture().data.profile.time_nanos / 1_000_000;
    let r: SelectHeatmapResponse = proto(
        "SelectHeatmap",
        &SelectHeatmapRequest {
            start: t0 + 1_000,
            end: t0 + 60_000,
            step: 2.0,
            exemplar_type: EXEMPLAR_NONE,
            ..request()
        },
    );
    let slots = &r.series[0].slots;
    assert_eq!(slots.len(), 1);
    assert_eq!(
        slots[0].timestamp,
        t0 + 1_000,
        "the first column ends at start"
    );
    assert_eq!(slots[0].counts, expected_slot().counts);
    let r: SelectHeatmapResponse = proto(
        "SelectHeatmap",
        &SelectHeatmapRequest {
            start: t0 + 3_000,
            end: t0 + 60_000,
            step: 2.0,
            ..request()
        },
    );
    assert!(r.series.is_empty(), "{r:?}");
}

#[test]
fn heatmap_requests_are_checked_as_upstream_does() {
    let bad = |req: SelectHeatmapRequest, status: u16, code: &str, words: &str| {
        use prost::Message;
        let (s, v) = error("SelectHeatmap", "application/proto", &req.encode_to_vec());
        assert_eq!((s, v["code"].as_str().unwrap()), (status, code), "{v}");
        assert!(v["message"].as_str().unwrap().contains(words), "{v}");
    };
    let req = request();
    bad(
        SelectHeatmapRequest {
            step: 0.0005,
            ..req.clone()
        },
        400,
        "invalid_argument",
        "step must be >= 1ms",
    );
    bad(
        SelectHeatmapRequest {
            end: req.start,
            ..req.clone()
        },
        400,
        "invalid_argument",
        "start time must be before end time",
    );
    bad(
        SelectHeatmapRequest {
            limit: Some(-1),
            ..req.clone()
        },
        400,
        "invalid_argument",
        "limit must be non-negative",
    );
    bad(
        SelectHeatmapRequest {
            query_type: 0,
            ..req.clone()
        },
        400,
        "invalid_argument",
        "valid heatmap query type must be specified",
    );
    bad(
        SelectHeatmapRequest {
            exemplar_type: EXEMPLAR_INDIVIDUAL,
            ..req.clone()
        },
        400,
        "invalid_argument",
        "individual exemplars only available",
    );
    bad(
        SelectHeatmapRequest {
            query_type: QUERY_TYPE_INDIVIDUAL,
            exemplar_type: EXEMPLAR_NONE,
            ..req.clone()
        },
        501,
        "unimplemented",
        "keeps no profile ids",
    );
    bad(
        SelectHeatmapRequest {
            profile_type_id: "cpu".into(),
            ..req.clone()
        },
        400,
        "invalid_argument",
        "profile-type selection",
    );
    let (s, v) = error(
        "SelectHeatmap",
        "application/json",
        br#"{"queryType": "HEATMAP_QUERY_TYPE_NOPE"}"#,
    );
    assert_eq!(s, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("queryType"), "{v}");
}
