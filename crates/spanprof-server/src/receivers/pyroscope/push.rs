//! `POST /push.v1.PusherService/Push`: Pyroscope's push API as a Connect unary call, protobuf
//! (`application/proto`) or JSON (`application/json`), gzip by `Content-Encoding` (or
//! `Connect-Content-Encoding`). Used by pyroscope-rs ≥ 1.0 (Python pyroscope-io 1.x, Ruby),
//! Grafana Alloy and the Pyroscope docs' curl examples.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use spanprof_format::budget::{check_decoded_size_drawing, check_json_values_drawing, Cost, Shape};
use spanprof_format::pprof;

use super::labels::{self, METRIC_NAME, SERVICE_NAME};
use super::{decode_pprof, submit, Series};
use crate::clock::is_unset_time;
use crate::pipeline::Incoming;
use crate::pyroscope_proto::push::v1::{PushRequest, RawProfileSeries, RawSample};
use crate::pyroscope_proto::types::v1::LabelPair;
use crate::receivers::body::{gunzip_part, is_json, payload, Rejection, Unpacked};
use crate::receivers::inflight::{Charge, Drawing};
// Standard or URL-safe, padded or not: what protojson accepts for `bytes`.
use crate::receivers::inflight::ChargedBody;
use crate::AppState;
use spanprof_format::json::base64::decode as base64_decode;

/// What prost allocates for a `PushRequest`, for its budget ([`spanprof_format::budget`]).
static PUSH_REQUEST: Shape = Shape(&[(
    1,
    Cost::Messages(size_of::<RawProfileSeries>(), &RAW_PROFILE_SERIES),
)]);
static RAW_PROFILE_SERIES: Shape = Shape(&[
    (1, Cost::Messages(size_of::<LabelPair>(), &STRINGS)),
    (2, Cost::Messages(size_of::<RawSample>(), &STRINGS)),
]);
/// `LabelPair` and `RawSample`: two string or bytes fields.
static STRINGS: Shape = Shape(&[(1, Cost::Bytes), (2, Cost::Bytes)]);

/// What `serde_json` holds for each value of a JSON `PushRequest`: a `Value`, and for an
/// object member its key and its share of the map.
const JSON_VALUE_BYTES: usize = 2 * size_of::<serde_json::Value>();

/// A Connect error: its code, and the HTTP status the Connect protocol gives that code.
fn connect_error(code: &str, message: &str) -> Response {
    let status = match code {
        "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "unimplemented" => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    connect_error_with(status, code, message)
}

/// A Connect error with its HTTP status, and a retry hint when the status calls for one.
fn connect_error_with(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    crate::receivers::body::with_retry_hint(
        status,
        (status, [("content-type", "application/json")], body).into_response(),
    )
}

/// A [`Rejection`] as the Connect error whose HTTP status matches it best. A request too large
/// is `invalid_argument` (as Pyroscope answers a profile over its size limits) with HTTP 413
/// and no retry hint: as `resource_exhausted`, Connect's code for "retry later", clients
/// sent it again and again.
fn connect_rejection(r: Rejection) -> Response {
    if r.status == StatusCode::PAYLOAD_TOO_LARGE {
        return connect_error_with(r.status, "invalid_argument", &r.message);
    }
    let code = match r.status {
        StatusCode::BAD_REQUEST => "invalid_argument",
        StatusCode::TOO_MANY_REQUESTS => "resource_exhausted",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unimplemented",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "internal",
    };
    connect_error(code, &r.message)
}

/// Why a push request cannot be read, or one of its series taken.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The body is not JSON.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON is not an object.
    #[error("a PushRequest must be a JSON object")]
    NotAnObject,
    /// A field of the wrong JSON type.
    #[error("{field} must be {expected}, not {found}")]
    FieldType {
        /// Where it is (`series[0].labels[1].name`).
        field: String,
        /// What it must be (`an array`, `a string`).
        expected: &'static str,
        /// What it is, as JSON.
        found: serde_json::Value,
    },
    /// A raw profile that is not base64.
    #[error("{field}: {reason}")]
    Base64 {
        /// Where it is.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The body is not protobuf (of a `PushRequest`).
    #[error("invalid protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A series' labels cannot be taken.
    #[error(transparent)]
    Labels(#[from] labels::LabelError),
    /// `__name__` is not a profile name.
    #[error(
        "label __name__ {0:?} is not a profile name: letters, digits and _, not starting \
         with a digit (process_cpu, memory, goroutines, …)"
    )]
    ProfileName(String),
}

/// The JSON form of a `PushRequest` (protojson: camelCase or proto field names, unknown fields
/// ignored, `null` as the default).
fn decode_json(raw: &[u8]) -> Result<PushRequest, PushError> {
    use serde_json::Value;
    let root: Value = serde_json::from_slice(raw)?;
    let field = |v: &'_ Value, names: &[&str]| -> Option<Value> {
        names
            .iter()
            .find_map(|n| v.get(*n))
            .filter(|x| !x.is_null())
            .cloned()
    };
    let array = |v: Option<Value>, what: &str| -> Result<Vec<Value>, PushError> {
        match v {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a),
            Some(found) => Err(PushError::FieldType {
                field: what.to_owned(),
                expected: "an array",
                found,
            }),
        }
    };
    let string = |v: Option<Value>, what: &str| -> Result<String, PushError> {
        match v {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s),
            Some(found) => Err(PushError::FieldType {
                field: what.to_owned(),
                expected: "a string",
                found,
            }),
        }
    };
    if !root.is_object() {
        return Err(PushError::NotAnObject);
    }
    let mut request = PushRequest::default();
    for (si, s) in array(field(&root, &["series"]), "series")?
        .into_iter()
        .enumerate()
    {
        let mut series = RawProfileSeries::default();
        for (li, l) in array(field(&s, &["labels"]), "labels")?.iter().enumerate() {
            series.labels.push(LabelPair {
                name: string(
                    field(l, &["name"]),
                    &format!("series[{si}].labels[{li}].name"),
                )?,
                value: string(
                    field(l, &["value"]),
                    &format!("series[{si}].labels[{li}].value"),
                )?,
            });
        }
        for (pi, p) in array(field(&s, &["samples"]), "samples")?
            .iter()
            .enumerate()
        {
            let what = format!("series[{si}].samples[{pi}].rawProfile");
            let b64 = string(field(p, &["rawProfile", "raw_profile"]), &what)?;
            series.samples.push(RawSample {
                raw_profile: base64_decode(&b64).map_err(|reason| PushError::Base64 {
                    field: what,
                    reason,
                })?,
                id: string(field(p, &["ID", "id"]), "ID")?,
            });
        }
        request.series.push(series);
    }
    Ok(request)
}

/// A series' labels as Pyroscope takes them: names sanitized (`.` → `_`), `service_name`
/// required (`unknown_service` when absent), `__name__` names the profile, other reserved
/// labels dropped.
fn series_of(pairs: &[LabelPair]) -> Result<Series, PushError> {
    let mut labels = labels::sanitize_all(pairs.iter().map(|l| (l.name.clone(), l.value.clone())))?;
    let name = labels.remove(METRIC_NAME).filter(|n| !n.is_empty());
    if let Some(n) = &name {
        check_profile_name(n)?;
    }
    let service = labels
        .remove(SERVICE_NAME)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown_service".into());
    labels.retain(|k, _| labels::allowed(k));
    Ok(Series {
        service,
        name,
        labels,
    })
}

/// A profile name (`__name__`) as Pyroscope's validation takes one, a metric name, without
/// `:`: it is the first part of the profile type id (`name:sample_type:sample_unit:…`), and
/// `a:b:c` made a type id that named another type (and that its own queries could not name).
fn check_profile_name(name: &str) -> Result<(), PushError> {
    let mut chars = name.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(());
    }
    Err(PushError::ProfileName(name.to_owned()))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// `POST /push.v1.PusherService/Push`.
pub async fn push(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Response {
    let body = ChargedBody::counted(body, &app, crate::metrics::Receiver::PyroscopePush);
    let incoming = app.pipeline.incoming();
    let json = is_json(&headers);
    let ct = content_type(&headers);
    if !json && ct != "application/proto" && ct != "application/x-protobuf" {
        let r = Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {ct:?} is not supported: send application/proto or application/json"
            ),
        );
        r.record(&app, crate::metrics::Receiver::PyroscopePush);
        // Connect: an unknown content type is a plain HTTP 415.
        return (
            r.status,
            [("accept-post", "application/proto, application/json")],
            r.message + "\n",
        )
            .into_response();
    }
    match push_inner(&app, incoming, &headers, body, json).await {
        Ok(()) if json => ([("content-type", "application/json")], "{}").into_response(),
        Ok(()) => ([("content-type", "application/proto")], Vec::<u8>::new()).into_response(),
        Err(r) => {
            r.record(&app, crate::metrics::Receiver::PyroscopePush);
            connect_rejection(r)
        }
    }
}

async fn push_inner(
    app: &AppState,
    incoming: Incoming,
    headers: &HeaderMap,
    body: Result<ChargedBody, Rejection>,
    json: bool,
) -> Result<(), Rejection> {
    let mut raw = payload(headers, body?, &app.config.server)?;
    // Connect's streaming header; some clients set it on unary calls too.
    if let Some(enc) = headers
        .get("connect-content-encoding")
        .and_then(|v| v.to_str().ok())
    {
        match enc.trim().to_ascii_lowercase().as_str() {
            "gzip" => {
                if spanprof_format::gzip::is_gzip(raw.as_ref()) {
                    raw = raw.gunzip(app.config.server.max_decompressed_size, "the body")?;
                }
            }
            "" | "identity" => {}
            other => {
                return Err(Rejection::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!(
                        "Connect-Content-Encoding {other:?} is not supported (use gzip or identity)"
                    ),
                ))
            }
        }
    }
    let raw_bytes = raw.as_ref();
    let body_bytes = raw.charged();
    // What the decoded request holds, while it is held.
    let decoded = Drawing::on(&app.inflight);
    if json {
        check_json_values_drawing(raw_bytes, JSON_VALUE_BYTES, "push.v1.PushRequest", &decoded)
    } else {
        check_decoded_size_drawing(raw_bytes, &PUSH_REQUEST, "push.v1.PushRequest", &decoded)
    }
    .map_err(|e| decoded.refusal("not a push.v1.PushRequest", &e, raw_bytes.len()))?;
    let request = if json {
        decode_json(raw_bytes)
    } else {
        PushRequest::decode(raw_bytes).map_err(PushError::from)
    }
    .map_err(|e| Rejection::bad(format!("not a push.v1.PushRequest: {e}")))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let mut profiles: Vec<(pprof::Profile, Series)> = Vec::new();
    // What the decoded profiles hold, until they are converted.
    let mut charge = Charge::new(&app.inflight);
    // The decompression limit is the request's, not each profile's: a push of many small
    // gzip bombs (60 MB each from 60 KB) took the server to 4 GB, and a 32 MiB push of them
    // would have taken 34 GB.
    let max = app.config.server.max_decompressed_size;
    let mut decompressed = 0usize;
    for (si, s) in request.series.iter().enumerate() {
        let series =
            series_of(&s.labels).map_err(|e| Rejection::bad(format!("series[{si}]: {e}")))?;
        for (pi, sample) in s.samples.iter().enumerate() {
            if sample.raw_profile.is_empty() {
                continue;
            }
            let what = format!("series[{si}].samples[{pi}]: the profile");
            // Charged to the in-flight budget while it is decoded.
            let (raw, unpacked) = gunzip_part(
                &app.inflight,
                &sample.raw_profile,
                max - decompressed,
                &what,
            )
            .map_err(|e| match e {
                Unpacked::TooLarge => Rejection::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "series[{si}].samples[{pi}]: the request's profiles are larger \
                                 than {max} bytes once decompressed, together \
                                 (server.max_decompressed_size)"
                    ),
                ),
                Unpacked::Refused(r) => r,
            })?;
            decompressed += raw.len();
            // What the request holds besides: its body, the decoded request, the profiles
            // decoded before, this one decompressed.
            let held = body_bytes + decoded.bytes() + charge.bytes() + unpacked.bytes();
            let (mut profile, profile_charge) =
                decode_pprof(app, &raw, held).map_err(|r| Rejection {
                    message: format!("series[{si}].samples[{pi}]: {}", r.message),
                    ..r
                })?;
            drop(unpacked);
            charge.absorb(profile_charge);
            if is_unset_time(profile.time_nanos) {
                profile.time_nanos = now;
            }
            profiles.push((profile, series.clone()));
        }
    }
    // Let go of the request before waiting for the store.
    drop(request);
    drop(decoded);
    drop(raw);
    if !profiles.is_empty() {
        submit(
            app,
            incoming,
            profiles,
            charge,
            crate::metrics::Receiver::PyroscopePush,
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_forms() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(base64_decode("+/8=").unwrap(), vec![0xfb, 0xff]);
        assert!(base64_decode("a").is_err());
        assert!(base64_decode("a*b=").is_err());
    }

    #[test]
    fn json_request() {
        let r = decode_json(
            br#"{"series":[{"labels":[{"name":"__name__","value":"process_cpu"},{"name":"service_name","value":"api"}],
                 "samples":[{"rawProfile":"aGVsbG8=","ID":"u-1"}], "annotations":[]}], "extra": 1}"#,
        )
        .unwrap();
        assert_eq!(r.series[0].labels.len(), 2);
        assert_eq!(r.series[0].samples[0].raw_profile, b"hello");
        assert_eq!(r.series[0].samples[0].id, "u-1");
        assert!(decode_json(br#"{"series":{}}"#)
            .unwrap_err()
            .to_string()
            .contains("array"));
        assert!(decode_json(b"[]").is_err());
    }

    #[test]
    fn series_labels_like_pyroscope() {
        let pair = |n: &str, v: &str| LabelPair {
            name: n.into(),
            value: v.into(),
        };
        let s = series_of(&[
            pair("__name__", "process_cpu"),
            pair("service.name", "api"),
            pair("__delta__", "false"),
            pair("otel.scope.name", "pyroscope-rs"),
        ])
        .unwrap();
        assert_eq!(s.service, "api");
        assert_eq!(s.name.as_deref(), Some("process_cpu"));
        assert_eq!(
            s.labels.into_iter().collect::<Vec<_>>(),
            vec![("otel_scope_name".to_owned(), "pyroscope-rs".to_owned())]
        );
        assert_eq!(series_of(&[]).unwrap().service, "unknown_service");
        for bad in ["a:b:c", "bad name!", "1cpu", "mémoire"] {
            let e = series_of(&[pair("__name__", bad)]).err().unwrap();
            assert!(
                e.to_string().contains("is not a profile name"),
                "{bad}: {e}"
            );
        }
        assert!(series_of(&[pair("__name__", "_alloc_in_new_tlab2")]).is_ok());
    }
}
