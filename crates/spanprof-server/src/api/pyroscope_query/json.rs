//! The protojson form of the messages (what connect-go's JSON codec reads and writes):
//! fields by lowerCamelCase or proto name, 64-bit integers written as strings and read from
//! numbers or strings, enums written as names and read from names or numbers, default values
//! left out, unknown fields ignored, `null` read as the default. A known field of the wrong
//! type is an error (`invalid_argument`), as in connect-go.

use serde_json::{json, Map, Value};

use super::messages::*;

/// Reads one request object.
pub struct Obj<'a>(&'a Map<String, Value>);

impl<'a> Obj<'a> {
    /// The request root, which must be an object.
    pub fn root(v: &'a Value) -> Result<Self, String> {
        v.as_object()
            .map(Obj)
            .ok_or_else(|| "the request must be a JSON object".to_owned())
    }

    fn get(&self, names: &[&str]) -> Option<(&'a str, &'a Value)> {
        names.iter().find_map(|n| {
            self.0
                .get_key_value(*n)
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.as_str(), v))
        })
    }

    /// Whether the field is present (and not `null`).
    pub fn has(&self, names: &[&str]) -> bool {
        self.get(names).is_some()
    }

    /// A string field.
    pub fn string(&self, names: &[&str]) -> Result<String, String> {
        match self.get(names) {
            None => Ok(String::new()),
            Some((_, Value::String(s))) => Ok(s.clone()),
            Some((k, other)) => Err(format!("{k}: expected a string, got {other}")),
        }
    }

    /// A message field, if present (and not `null`).
    pub fn object(&self, names: &[&str]) -> Result<Option<Obj<'a>>, String> {
        match self.get(names) {
            None => Ok(None),
            Some((_, Value::Object(m))) => Ok(Some(Obj(m))),
            Some((k, other)) => Err(format!("{k}: expected an object, got {other}")),
        }
    }

    /// A repeated string field.
    pub fn strings(&self, names: &[&str]) -> Result<Vec<String>, String> {
        match self.get(names) {
            None => Ok(Vec::new()),
            Some((k, Value::Array(a))) => a
                .iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(format!("{k}: expected strings, got {other}")),
                })
                .collect(),
            Some((k, other)) => Err(format!("{k}: expected an array, got {other}")),
        }
    }

    /// An int64 field, from a number or a decimal string.
    pub fn int64(&self, names: &[&str]) -> Result<Option<i64>, String> {
        let Some((k, v)) = self.get(names) else {
            return Ok(None);
        };
        let bad = || format!("{k}: expected a 64-bit integer, got {v}");
        match v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                        .map(|f| f as i64)
                })
                .map(Some)
                .ok_or_else(bad),
            Value::String(s) => s.trim().parse::<i64>().map(Some).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// A double field, from a number or a string (`"NaN"`, `"Infinity"` included).
    pub fn double(&self, names: &[&str]) -> Result<f64, String> {
        let Some((k, v)) = self.get(names) else {
            return Ok(0.0);
        };
        let bad = || format!("{k}: expected a number, got {v}");
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(bad),
            Value::String(s) => match s.as_str() {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                s => s.trim().parse().map_err(|_| bad()),
            },
            _ => Err(bad()),
        }
    }

    /// An enum field, from its name (read by `from_name`, a generated `from_str_name`) or its
    /// number.
    pub fn enumeration<E: Into<i32>>(
        &self,
        names: &[&str],
        from_name: fn(&str) -> Option<E>,
    ) -> Result<Option<i32>, String> {
        let Some((k, v)) = self.get(names) else {
            return Ok(None);
        };
        match v {
            Value::String(s) => from_name(s)
                .map(|e| Some(e.into()))
                .ok_or_else(|| format!("{k}: unknown value {s:?}")),
            Value::Number(n) => n
                .as_i64()
                .and_then(|x| i32::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| format!("{k}: expected an enum number, got {n}")),
            other => Err(format!("{k}: expected an enum name or number, got {other}")),
        }
    }
}

/// Requests read from protojson.
pub trait FromJson: Sized {
    /// Reads the request.
    fn from_json(o: &Obj<'_>) -> Result<Self, String>;
}

/// Responses written as protojson.
pub trait ToJson {
    /// Writes the response.
    fn to_json(&self) -> Value;
}

/// Adds `key: value` unless `value` is the protojson default (left out).
fn put(m: &mut Map<String, Value>, key: &str, value: Value) {
    let default = match &value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    };
    if !default {
        m.insert(key.to_owned(), value);
    }
}

pub(super) fn object(fields: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        put(&mut m, k, v);
    }
    Value::Object(m)
}

/// An int64 field as protojson writes it: a decimal string, left out when 0.
pub(super) fn i64s(v: i64) -> Value {
    if v == 0 {
        Value::Null
    } else {
        Value::String(v.to_string())
    }
}

fn f64v(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("NaN")
    } else if v > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    }
}

const START: &[&str] = &["start"];
const END: &[&str] = &["end"];
const MATCHERS: &[&str] = &["matchers"];
const PROFILE_TYPE_ID: &[&str] = &["profileTypeID", "profile_typeID", "profileTypeId"];
const LABEL_SELECTOR: &[&str] = &["labelSelector", "label_selector"];
const MAX_NODES: &[&str] = &["maxNodes", "max_nodes"];
const FORMAT: &[&str] = &["format"];
const SPAN_SELECTOR: &[&str] = &["spanSelector", "span_selector"];
const TRACE_ID_SELECTOR: &[&str] = &["traceIdSelector", "trace_id_selector"];
const PROFILE_ID_SELECTOR: &[&str] = &["profileIdSelector", "profile_id_selector"];
const STACK_TRACE_SELECTOR: &[&str] = &["stackTraceSelector", "stack_trace_selector"];

/// A message field spanprof only refuses: whether it is there (its content is not read).
fn presence<M: Default>(o: &Obj<'_>, names: &[&str]) -> Option<M> {
    o.has(names).then(M::default)
}

impl FromJson for ProfileTypesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(ProfileTypesRequest {
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
        })
    }
}

impl FromJson for LabelNamesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(LabelNamesRequest {
            matchers: o.strings(MATCHERS)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
        })
    }
}

impl FromJson for LabelValuesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(LabelValuesRequest {
            name: o.string(&["name"])?,
            matchers: o.strings(MATCHERS)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
        })
    }
}

impl FromJson for SeriesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(SeriesRequest {
            matchers: o.strings(MATCHERS)?,
            label_names: o.strings(&["labelNames", "label_names"])?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
        })
    }
}

impl FromJson for SelectMergeSpanProfileRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(SelectMergeSpanProfileRequest {
            profile_type_id: o.string(PROFILE_TYPE_ID)?,
            label_selector: o.string(LABEL_SELECTOR)?,
            span_selector: o.strings(SPAN_SELECTOR)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
            max_nodes: o.int64(MAX_NODES)?,
            format: o
                .enumeration(FORMAT, ProfileFormat::from_str_name)?
                .unwrap_or(0),
        })
    }
}

impl FromJson for SelectMergeStacktracesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(SelectMergeStacktracesRequest {
            profile_type_id: o.string(PROFILE_TYPE_ID)?,
            label_selector: o.string(LABEL_SELECTOR)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
            max_nodes: o.int64(MAX_NODES)?,
            format: o
                .enumeration(FORMAT, ProfileFormat::from_str_name)?
                .unwrap_or(0),
            stack_trace_selector: presence(o, STACK_TRACE_SELECTOR),
            profile_id_selector: o.strings(PROFILE_ID_SELECTOR)?,
            r#async: presence(o, &["async"]),
            trace_id_selector: o.strings(TRACE_ID_SELECTOR)?,
            span_selector: o.strings(SPAN_SELECTOR)?,
        })
    }
}

impl FromJson for DiffRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        let side = |name: &str| -> Result<Option<SelectMergeStacktracesRequest>, String> {
            o.object(&[name])?
                .map(|side| {
                    SelectMergeStacktracesRequest::from_json(&side)
                        .map_err(|e| format!("{name}.{e}"))
                })
                .transpose()
        };
        Ok(DiffRequest {
            left: side("left")?,
            right: side("right")?,
        })
    }
}

impl FromJson for GetProfileStatsRequest {
    fn from_json(_: &Obj<'_>) -> Result<Self, String> {
        Ok(GetProfileStatsRequest {})
    }
}

impl FromJson for SelectMergeProfileRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(SelectMergeProfileRequest {
            profile_type_id: o.string(PROFILE_TYPE_ID)?,
            label_selector: o.string(LABEL_SELECTOR)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
            max_nodes: o.int64(MAX_NODES)?,
            stack_trace_selector: presence(o, STACK_TRACE_SELECTOR),
            profile_id_selector: o.strings(PROFILE_ID_SELECTOR)?,
            trace_id_selector: o.strings(TRACE_ID_SELECTOR)?,
        })
    }
}

impl FromJson for SelectSeriesRequest {
    fn from_json(o: &Obj<'_>) -> Result<Self, String> {
        Ok(SelectSeriesRequest {
            profile_type_id: o.string(PROFILE_TYPE_ID)?,
            label_selector: o.string(LABEL_SELECTOR)?,
            start: o.int64(START)?.unwrap_or(0),
            end: o.int64(END)?.unwrap_or(0),
            group_by: o.strings(&["groupBy", "group_by"])?,
            step: o.double(&["step"])?,
            aggregation: o
                .enumeration(&["aggregation"], TimeSeriesAggregationType::from_str_name)?,
            stack_trace_selector: presence(o, STACK_TRACE_SELECTOR),
            limit: o.int64(&["limit"])?,
            exemplar_type: o
                .enumeration(
                    &["exemplarType", "exemplar_type"],
                    ExemplarType::from_str_name,
                )?
                .unwrap_or(0),
        })
    }
}

pub(super) fn label_pairs(labels: &[LabelPair]) -> Value {
    Value::Array(
        labels
            .iter()
            .map(|l| object(vec![("name", json!(l.name)), ("value", json!(l.value))]))
            .collect(),
    )
}

impl ToJson for ProfileTypesResponse {
    fn to_json(&self) -> Value {
        let types = self
            .profile_types
            .iter()
            .map(|t| {
                object(vec![
                    ("ID", json!(t.id)),
                    ("name", json!(t.name)),
                    ("sampleType", json!(t.sample_type)),
                    ("sampleUnit", json!(t.sample_unit)),
                    ("periodType", json!(t.period_type)),
                    ("periodUnit", json!(t.period_unit)),
                ])
            })
            .collect();
        object(vec![("profileTypes", Value::Array(types))])
    }
}

impl ToJson for LabelNamesResponse {
    fn to_json(&self) -> Value {
        object(vec![("names", json!(self.names))])
    }
}

impl ToJson for LabelValuesResponse {
    fn to_json(&self) -> Value {
        object(vec![("names", json!(self.names))])
    }
}

impl ToJson for SeriesResponse {
    fn to_json(&self) -> Value {
        let sets = self
            .labels_set
            .iter()
            .map(|l| object(vec![("labels", label_pairs(&l.labels))]))
            .collect();
        object(vec![("labelsSet", Value::Array(sets))])
    }
}

/// Flame graph levels, each `{"values": ["0", "100", …]}`.
fn levels_json(levels: &[Level]) -> Value {
    levels
        .iter()
        .map(|l| {
            object(vec![(
                "values",
                l.values.iter().map(|v| json!(v.to_string())).collect(),
            )])
        })
        .collect()
}

impl ToJson for FlameGraph {
    fn to_json(&self) -> Value {
        object(vec![
            ("names", json!(self.names)),
            ("levels", levels_json(&self.levels)),
            ("total", i64s(self.total)),
            ("maxSelf", i64s(self.max_self)),
        ])
    }
}

impl ToJson for DiffResponse {
    fn to_json(&self) -> Value {
        let flamegraph = self.flamegraph.as_ref().map_or(Value::Null, |f| {
            object(vec![
                ("names", json!(f.names)),
                ("levels", levels_json(&f.levels)),
                ("total", i64s(f.total)),
                ("maxSelf", i64s(f.max_self)),
                ("leftTicks", i64s(f.left_ticks)),
                ("rightTicks", i64s(f.right_ticks)),
            ])
        });
        object(vec![("flamegraph", flamegraph)])
    }
}

impl ToJson for GetProfileStatsResponse {
    fn to_json(&self) -> Value {
        object(vec![
            ("dataIngested", self.data_ingested.then_some(true).into()),
            ("oldestProfileTime", i64s(self.oldest_profile_time)),
            ("newestProfileTime", i64s(self.newest_profile_time)),
        ])
    }
}

/// A bytes field as protojson writes it: padded standard base64, left out when empty.
fn bytes_json(b: &[u8]) -> Value {
    let mut out = String::new();
    spanprof_format::json::base64::encode_into(b, &mut out);
    Value::String(out)
}

impl ToJson for SelectMergeSpanProfileResponse {
    fn to_json(&self) -> Value {
        object(vec![
            (
                "flamegraph",
                self.flamegraph
                    .as_ref()
                    .map_or(Value::Null, |f| f.to_json()),
            ),
            ("tree", bytes_json(&self.tree)),
        ])
    }
}

impl ToJson for SelectMergeStacktracesResponse {
    fn to_json(&self) -> Value {
        // The pprof form has no JSON writer here: the handler refuses it for JSON clients.
        object(vec![
            (
                "flamegraph",
                self.flamegraph
                    .as_ref()
                    .map_or(Value::Null, |f| f.to_json()),
            ),
            ("tree", bytes_json(&self.tree)),
        ])
    }
}

/// A `types.v1.Exemplar` as protojson.
pub(super) fn exemplar_json(e: &Exemplar) -> Value {
    object(vec![
        ("timestamp", i64s(e.timestamp)),
        ("profileId", json!(e.profile_id)),
        ("spanId", json!(e.span_id)),
        ("value", i64s(e.value)),
        ("labels", label_pairs(&e.labels)),
        ("traceId", json!(e.trace_id)),
    ])
}

impl ToJson for SelectSeriesResponse {
    fn to_json(&self) -> Value {
        let series = self
            .series
            .iter()
            .map(|s| {
                let points = s
                    .points
                    .iter()
                    .map(|p| {
                        let exemplars = p.exemplars.iter().map(exemplar_json).collect();
                        object(vec![
                            ("value", f64v(p.value)),
                            ("timestamp", i64s(p.timestamp)),
                            ("exemplars", Value::Array(exemplars)),
                        ])
                    })
                    .collect();
                object(vec![
                    ("labels", label_pairs(&s.labels)),
                    ("points", Value::Array(points)),
                ])
            })
            .collect();
        object(vec![("series", Value::Array(series))])
    }
}
