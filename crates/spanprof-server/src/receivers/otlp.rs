//! OTLP/HTTP: `POST /v1development/profiles` and `POST /v1/traces`, protobuf or JSON, gzip.
//! Answers in the request's content type: partial success as the spec says, and failures as a
//! `google.rpc.Status` with the HTTP status ([`Rejection::into_otlp_response`]).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;

use crate::metrics::RejectReason;
use spanprof_format::otlp::{
    ExportProfilesPartialSuccess, ExportProfilesServiceResponse, ProfilesData,
};
use spanprof_format::trace::{
    decode_request_drawing, decode_request_json_drawing, encode_response_json,
    ExportTraceServiceResponse,
};
use spanprof_store::spans::{spans_from_otlp, spans_from_otlp_retaining};
use spanprof_store::store::Storing;

use super::body::{otlp_answer_type, payload, Rejection, JSON};
use super::inflight::{ChargedBody, Drawing};
use crate::auth::Access;
use crate::clock::{is_unset_time, now_ns};
use crate::pipeline::{SubmitError, Work};
use crate::routes::Routes;
use crate::AppState;

/// The OTLP/HTTP routes, for the OTLP listener and the main one.
pub fn routes() -> Routes {
    Routes::new()
        .post("/v1development/profiles", Access::Write, profiles)
        .post("/v1/traces", Access::Write, traces)
}

/// The answer, in `content_type` ([`otlp_answer_type`]).
fn reply(content_type: &'static str, protobuf: Vec<u8>, json_body: String) -> Response {
    let body = if content_type == JSON {
        json_body.into_bytes()
    } else {
        protobuf
    };
    ([("content-type", content_type)], body).into_response()
}

/// A profiles export's answer in OTLP/JSON: `partialSuccess` with the count of rejected
/// profiles (an int64, so a string) and the message. Without the count a client reads the
/// message as a warning about data that was all accepted.
fn profiles_response_json(response: &ExportProfilesServiceResponse) -> String {
    match &response.partial_success {
        Some(p) => serde_json::json!({"partialSuccess": {
            "rejectedProfiles": p.rejected_profiles.to_string(),
            "errorMessage": p.error_message,
        }})
        .to_string(),
        None => "{}".to_owned(),
    }
}

/// Decodes, links and stores an OTLP profiles request (protobuf or JSON); the answer to give.
/// `raw` is let go once decoded.
pub(crate) async fn ingest_profiles(
    app: &AppState,
    raw: impl AsRef<[u8]>,
    json: bool,
    receiver: crate::metrics::Receiver,
) -> Result<ExportProfilesServiceResponse, Rejection> {
    let incoming = app.pipeline.incoming();
    // What the decoded request holds is charged to the in-flight budget until it is linked.
    let drawing = Drawing::on(&app.inflight);
    let decoded = if json {
        spanprof_format::json::decode_profiles_data_drawing(raw.as_ref(), &drawing)
    } else {
        spanprof_format::detect::decode_otlp_protobuf_drawing(raw.as_ref(), &drawing)
    };
    // A pprof profile sent here (both are protobuf) is told where it goes.
    let pprof_instead = || {
        !json
            && matches!(
                spanprof_format::detect::detect_kind(raw.as_ref()),
                Ok(spanprof_format::detect::InputKind::Pprof)
            )
    };
    let decoded = match decoded {
        Err(_) if pprof_instead() => {
            return Err(Rejection::bad(
                "invalid OTLP profiles payload: this is a pprof profile, not OTLP Profiles: \
                 push pprof to /ingest?format=pprof on the main port (or \
                 /push.v1.PusherService/Push), or convert it first (spanprof convert)",
            ))
        }
        d => d,
    };
    let held = raw.as_ref().len();
    drop(raw);
    let data = decoded
        .and_then(|data| {
            app.config
                .server
                .profile_limits()
                .check_otlp(&data)
                .map(|()| data)
        })
        .map_err(|e| drawing.refusal("invalid OTLP profiles payload", &e, held))?;
    // A profile that does not check is refused alone, and the rest is linked.
    let spanprof_format::link_in_place::Linked {
        data: mut linked,
        report,
        refused: invalid,
        refused_profiles: invalid_profiles,
    } = spanprof_format::link_in_place::link_each_in_place_with(
        data,
        &app.config.processors.link,
        Some(super::known_spans::StoredSpans::of(
            &app.store,
            &app.nesting,
        )),
    )
    .map_err(|e| Rejection::bad(format!("invalid OTLP profiles payload: {e}")))?;
    date_undated(&mut linked, now_ns());
    drop(drawing);
    app.metrics.record_received(receiver, &report);
    app.span_keys.inspect(
        &linked,
        &app.config.processors.link,
        &app.store,
        &app.metrics,
    );
    let invalid: Vec<String> = invalid
        .iter()
        .map(|e| format!("invalid profile: {e}"))
        .collect();
    if !invalid.is_empty() {
        // Refused in a partial success: the request itself is answered 200.
        app.metrics.record_refused(
            receiver,
            RejectReason::InvalidProfile,
            200,
            &invalid.join("; "),
        );
    }
    // Profiles the store refused are the request's rejected part too; the rest is stored.
    let refused = match incoming
        .submit(Work::Profiles(linked, Storing::EachAlone), receiver)
        .await
    {
        Ok(()) => Vec::new(),
        Err(SubmitError::Refused(problems)) => problems,
        Err(e) => return Err(e.into()),
    };
    let rejected = invalid_profiles as i64 + refused.len() as i64;
    // Ids that could not become links are a warning, not a rejection.
    let warning = (report.link.invalid_ids > 0).then(|| {
        format!(
            "{} id attributes were not valid hex ids and stay ordinary attributes",
            report.link.invalid_ids
        )
    });
    let messages: Vec<String> = invalid.into_iter().chain(refused).chain(warning).collect();
    Ok(ExportProfilesServiceResponse {
        partial_success: (!messages.is_empty()).then(|| ExportProfilesPartialSuccess {
            rejected_profiles: rejected,
            error_message: messages.join("; "),
        }),
    })
}

/// Dates the profiles that have no time (`time_unix_nano` 0, or before 1971: a producer
/// that left it unset): at their earliest sample timestamp, else as ending when they came
/// (`now_ns`), as Pyroscope dates an upload without one. Stored at 1970, no time range a
/// query asks for held them, and their spans read "no profile covers the span".
fn date_undated(data: &mut ProfilesData, now_ns: i64) {
    let profiles = data
        .resource_profiles
        .iter_mut()
        .flat_map(|r| &mut r.scope_profiles)
        .flat_map(|s| &mut s.profiles);
    for p in profiles {
        if !is_unset_time(i64::try_from(p.time_unix_nano).unwrap_or(i64::MAX)) {
            continue;
        }
        let earliest = p
            .samples
            .iter()
            .flat_map(|s| &s.timestamps_unix_nano)
            .copied()
            .filter(|&t| !is_unset_time(i64::try_from(t).unwrap_or(i64::MAX)))
            .min();
        p.time_unix_nano =
            earliest.unwrap_or_else(|| (now_ns as u64).saturating_sub(p.duration_nano));
    }
}

/// Decodes and stores an OTLP traces request (protobuf or JSON); the answer to give. `raw`
/// is let go once decoded.
pub(crate) async fn ingest_traces(
    app: &AppState,
    raw: impl AsRef<[u8]>,
    json: bool,
    receiver: crate::metrics::Receiver,
) -> Result<ExportTraceServiceResponse, Rejection> {
    let incoming = app.pipeline.incoming();
    // What the decoded request holds is charged to the in-flight budget while it is held.
    let drawing = Drawing::on(&app.inflight);
    let held = raw.as_ref().len();
    let request = if json {
        decode_request_json_drawing(raw.as_ref(), &drawing)
    } else {
        decode_request_drawing(raw.as_ref(), &drawing)
    }
    .map_err(|e| drawing.refusal("invalid OTLP traces payload", &e, held))?;
    drop(raw);
    // Forwarders send the request on as it came (its rejected spans taken out).
    let forwarded = app
        .config
        .exporters
        .iter()
        .any(crate::config::ForwarderConfig::sends_traces);
    let mut request = request;
    let (spans, report) = if forwarded {
        spans_from_otlp_retaining(&mut request.resource_spans)
    } else {
        spans_from_otlp(&request.resource_spans)
    };
    let request = forwarded.then_some(request);
    drop(drawing);
    app.metrics.received_spans.add(receiver, spans.len() as f64);
    if report.rejected > 0 {
        app.metrics
            .rejected_spans
            .add(receiver, report.rejected as f64);
    }
    if !spans.is_empty() {
        incoming
            .submit(Work::Spans(spans, request), receiver)
            .await?;
    }
    Ok(ExportTraceServiceResponse {
        partial_success: report.partial_success(),
    })
}

async fn profiles(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Response {
    let body = ChargedBody::counted(body, &app, crate::metrics::Receiver::OtlpProfiles);
    let answer_type = otlp_answer_type(&headers);
    if let Err(r) = check_content_type(&headers) {
        r.record(&app, crate::metrics::Receiver::OtlpProfiles);
        // Neither protobuf nor JSON: the message as text, not in a format the client
        // did not send.
        return r.into_response();
    }
    let answer = async {
        let raw = payload(&headers, body?, &app.config.server)?;
        let response = ingest_profiles(
            &app,
            raw,
            answer_type == JSON,
            crate::metrics::Receiver::OtlpProfiles,
        )
        .await?;
        Ok::<_, Rejection>(reply(
            answer_type,
            response.encode_to_vec(),
            profiles_response_json(&response),
        ))
    };
    answer.await.unwrap_or_else(|r| {
        r.record(&app, crate::metrics::Receiver::OtlpProfiles);
        r.into_otlp_response(answer_type)
    })
}

async fn traces(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Response {
    let body = ChargedBody::counted(body, &app, crate::metrics::Receiver::OtlpTraces);
    let answer_type = otlp_answer_type(&headers);
    if let Err(r) = check_content_type(&headers) {
        r.record(&app, crate::metrics::Receiver::OtlpTraces);
        // Neither protobuf nor JSON: the message as text, not in a format the client
        // did not send.
        return r.into_response();
    }
    let answer = async {
        let raw = payload(&headers, body?, &app.config.server)?;
        let response = ingest_traces(
            &app,
            raw,
            answer_type == JSON,
            crate::metrics::Receiver::OtlpTraces,
        )
        .await?;
        Ok::<_, Rejection>(reply(
            answer_type,
            response.encode_to_vec(),
            encode_response_json(&response),
        ))
    };
    answer.await.unwrap_or_else(|r| {
        r.record(&app, crate::metrics::Receiver::OtlpTraces);
        r.into_otlp_response(answer_type)
    })
}

/// OTLP/HTTP bodies are protobuf (`application/x-protobuf`, or no type) or JSON
/// (`application/json`); anything else is a 415, as the specification says (a text body
/// read as protobuf decoded to an empty request and a 200).
fn check_content_type(headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(value) = headers.get("content-type") else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or("").to_ascii_lowercase();
    let media = text.split(';').next().unwrap_or("").trim();
    match media {
        "application/x-protobuf" | "application/protobuf" | "application/json" => Ok(()),
        _ => Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {:?} is not supported: OTLP/HTTP takes application/x-protobuf \
                 or application/json",
                String::from_utf8_lossy(value.as_bytes())
            ),
        )),
    }
}

/// 404 for anything else, naming what exists.
pub async fn not_found() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        "not found: OTLP/HTTP accepts POST /v1/traces and POST /v1development/profiles\n",
    )
}

#[cfg(test)]
mod tests {
    use spanprof_format::otlp::{Profile, ResourceProfiles, Sample, ScopeProfiles};

    use super::{date_undated, ProfilesData};

    #[test]
    fn an_undated_profile_is_dated_by_its_samples_or_its_arrival() {
        const NOW: i64 = 1_800_000_000_000_000_000;
        const SEC: u64 = 1_000_000_000;
        let profile = |time: u64, stamps: &[u64]| Profile {
            time_unix_nano: time,
            duration_nano: 10 * SEC,
            samples: vec![Sample {
                timestamps_unix_nano: stamps.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let stamped = NOW as u64 - 7 * SEC;
        let mut data = ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![
                        profile(0, &[]),
                        profile(0, &[stamped + SEC, stamped, 0]),
                        // Microseconds where nanoseconds belong: 1970 too.
                        profile(1_700_000_000_000_000, &[]),
                        profile(NOW as u64 - 60 * SEC, &[]),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        date_undated(&mut data, NOW);
        let times: Vec<u64> = data.resource_profiles[0].scope_profiles[0]
            .profiles
            .iter()
            .map(|p| p.time_unix_nano)
            .collect();
        assert_eq!(
            times,
            [
                NOW as u64 - 10 * SEC,
                stamped,
                NOW as u64 - 10 * SEC,
                NOW as u64 - 60 * SEC
            ]
        );
    }
}
