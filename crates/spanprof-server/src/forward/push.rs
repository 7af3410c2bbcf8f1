//! Pyroscope's `push.v1` as a forwarder protocol: the queued OTLP profiles of one export as a
//! `PushRequest`, one series per pprof the OTLP request converts back to (per resource, scope
//! and sample-type group), its labels the resource's attributes, its samples' links as
//! `span_id` / `trace_id` labels (what Pyroscope turns into its per-sample span column).
//!
//! Series labels as Pyroscope validates them (grafana/pyroscope v2.2.1
//! `pkg/validation/validate.go`): `service_name` from `service.name`, `__name__` the profile
//! name (`spanprof.profile.name`, else what the sample types say: `process_cpu`, `memory`,
//! …), every other attribute under its name with each character outside `[A-Za-z0-9_]` made
//! `_` (`k8s.pod.name` → `k8s_pod_name`; the first of two attributes that end up with one
//! name wins). Reserved `__…` attributes are left out.

use std::collections::BTreeMap;

use prost::Message;
use spanprof_format::otlp::{any_value, ProfilesData, Resource};
use spanprof_format::profile_type::{name_from_content, ProfileTypeId};
use spanprof_format::to_pprof::{otlp_to_pprof, PprofOptions};
use spanprof_store::store::PROFILE_NAME_ATTRIBUTE;

use crate::pyroscope_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use crate::pyroscope_proto::types::v1::LabelPair;

/// The Connect route of `push.v1.PusherService/Push`, after the endpoint's base URL.
pub use crate::config::PUSH_PATH;

/// A label name Pyroscope accepts: `[A-Za-z_][A-Za-z0-9_]*`.
fn label_name(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// The series labels of a resource's profile, `name` the profile name when the resource
/// does not give one.
fn series_labels(resource: Option<&Resource>, name: &str) -> Vec<LabelPair> {
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut profile_name = None;
    for kv in resource.map_or(&[][..], |r| &r.attributes) {
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            Some(any_value::Value::DoubleValue(d)) => d.to_string(),
            _ => continue,
        };
        if value.is_empty() {
            continue;
        }
        match kv.key.as_str() {
            PROFILE_NAME_ATTRIBUTE => profile_name = Some(value),
            "service.name" => {
                labels.insert("service_name".into(), value);
            }
            key if key.starts_with("__") => {}
            key => {
                labels.entry(label_name(key)).or_insert(value);
            }
        }
    }
    labels.insert(
        "__name__".into(),
        profile_name.unwrap_or_else(|| name.into()),
    );
    labels
        .into_iter()
        .map(|(name, value)| LabelPair { name, value })
        .collect()
}

/// Why a queued OTLP request does not convert to a `PushRequest`.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// It is not OTLP Profiles (protobuf).
    #[error("invalid OTLP profiles: {0}")]
    Otlp(#[from] prost::DecodeError),
    /// It does not convert to pprof.
    #[error("{0}")]
    Pprof(#[from] spanprof_format::FormatError),
}

/// The `PushRequest` (protobuf) of an OTLP `ProfilesData` (protobuf), each profile gzipped
/// when `gzip`; an error says why the OTLP request does not convert.
pub fn push_request(otlp: &[u8], gzip: bool) -> Result<Vec<u8>, ConvertError> {
    let converted = push_request_of(&[otlp], gzip);
    match converted.failed.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(converted.request),
    }
}

/// A `PushRequest` made of several queued OTLP requests, and the ones left out.
#[derive(Debug)]
pub struct Converted {
    /// The `PushRequest` (protobuf) of the records that converted.
    pub request: Vec<u8>,
    /// Records that do not convert: their index among the input and why.
    pub failed: Vec<(usize, ConvertError)>,
}

/// One `PushRequest` of the queued OTLP `ProfilesData` requests `records` (protobuf each),
/// each converted to pprof on its own: no merge, no re-encode and decode of a merged request
/// (that round trip was over half the export's CPU). Equal label sets share a series, one
/// `RawSample` per converted pprof (Pyroscope ingests a series' samples one by one).
pub fn push_request_of<B: AsRef<[u8]>>(records: &[B], gzip: bool) -> Converted {
    let opts = PprofOptions::default();
    let mut request = PushRequest::default();
    let mut failed = Vec::new();
    for (i, record) in records.iter().enumerate() {
        if let Err(e) = add_record(&mut request, record.as_ref(), gzip, &opts) {
            failed.push((i, e));
        }
    }
    Converted {
        request: request.encode_to_vec(),
        failed,
    }
}

/// Adds the pprofs of one OTLP request to `request`; on an error, adds nothing.
fn add_record(
    request: &mut PushRequest,
    otlp: &[u8],
    gzip: bool,
    opts: &PprofOptions,
) -> Result<(), ConvertError> {
    let data = ProfilesData::decode(otlp)?;
    let converted = otlp_to_pprof(&data, opts)?;
    for out in converted {
        let p = &out.profile;
        let text = |i: i64| p.str(i).unwrap_or("");
        let Some(first) = p.sample_type.first() else {
            continue;
        };
        let period = p
            .period_type
            .as_ref()
            .map_or(("", ""), |t| (text(t.r#type), text(t.unit)));
        let hint = name_from_content(p.sample_type.iter().map(|t| text(t.r#type)));
        let name = ProfileTypeId::new((text(first.r#type), text(first.unit)), period, hint).name;
        let resource = data
            .resource_profiles
            .get(out.resource_index)
            .and_then(|r| r.resource.as_ref());
        let raw_profile = if gzip {
            spanprof_format::pprof::encode_gzip(p)
        } else {
            spanprof_format::pprof::encode(p)
        };
        let sample = RawSample {
            raw_profile,
            id: String::new(),
        };
        let labels = series_labels(resource, &name);
        // A handful of series per export (instances × profile types): a scan is enough.
        match request.series.iter_mut().find(|s| s.labels == labels) {
            Some(series) => series.samples.push(sample),
            None => request.series.push(RawProfileSeries {
                labels,
                samples: vec![sample],
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use spanprof_format::otlp::{AnyValue, KeyValue};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    #[test]
    fn resource_attributes_become_pyroscope_labels() {
        use any_value::Value::*;
        let resource = Resource {
            attributes: vec![
                kv("service.name", StringValue("shop".into())),
                kv("k8s.pod.name", StringValue("shop-7d9f".into())),
                kv("k8s_pod_name", StringValue("second".into())),
                kv("9lives", IntValue(9)),
                kv("__reserved", StringValue("x".into())),
                kv("empty", StringValue(String::new())),
                kv("flag", BoolValue(true)),
            ],
            ..Default::default()
        };
        let labels: Vec<(String, String)> = series_labels(Some(&resource), "process_cpu")
            .into_iter()
            .map(|l| (l.name, l.value))
            .collect();
        let want: Vec<(String, String)> = [
            ("_9lives", "9"),
            ("__name__", "process_cpu"),
            ("flag", "true"),
            ("k8s_pod_name", "shop-7d9f"),
            ("service_name", "shop"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, want);
        // The receiver's profile name wins over the guess.
        let named = Resource {
            attributes: vec![kv(PROFILE_NAME_ATTRIBUTE, StringValue("block".into()))],
            ..Default::default()
        };
        assert_eq!(
            series_labels(Some(&named), "mutex")[0],
            LabelPair {
                name: "__name__".into(),
                value: "block".into()
            }
        );
    }

    #[test]
    fn a_request_that_is_not_otlp_is_an_error() {
        assert!(push_request(b"\xff\xff", false)
            .unwrap_err()
            .to_string()
            .contains("invalid OTLP profiles"));
        assert!(PushRequest::decode(&push_request(b"", false).unwrap()[..])
            .unwrap()
            .series
            .is_empty());
    }
}
