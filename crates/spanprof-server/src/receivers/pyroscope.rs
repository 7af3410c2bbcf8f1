//! Pyroscope push: the legacy `POST /ingest` (also under `/pyroscope/ingest`) and the
//! Connect `POST /push.v1.PusherService/Push`, so Pyroscope SDKs (pyroscope-go, pyroscope-io,
//! Node, Alloy) send to spanprof unchanged.
//!
//! Both end the same way: pprof profiles with Pyroscope series labels become one linked OTLP
//! batch (`span_id` / `profile_id` / `trace_id` sample labels turn into links) handed to the
//! pipeline; the answer waits until the batch is durable.

mod attime;
mod folded;
mod ingest;
mod jfr;
mod labels;
mod multipart;
mod push;

use std::collections::BTreeMap;

use axum::http::StatusCode;
use spanprof_format::otlp::{any_value, AnyValue, KeyValue, ProfilesData, Resource};
use spanprof_format::{pprof, Batch, FormatError, LinkConfig};
use spanprof_store::store::{Storing, PROFILE_NAME_ATTRIBUTE};

use super::body::{gunzip_part, Rejection, Unpacked};
use super::inflight::{Charge, Drawing};
use crate::auth::Access;
use crate::pipeline::{Incoming, SubmitError, Work};
use crate::routes::Routes;
use crate::AppState;

pub use ingest::PREV_PROFILE_MESSAGE;

/// The Pyroscope push routes.
pub fn routes() -> Routes {
    Routes::new()
        .post("/ingest", Access::Write, ingest::ingest)
        .post("/pyroscope/ingest", Access::Write, ingest::ingest)
        .post("/push.v1.PusherService/Push", Access::Write, push::push)
}

/// Where a profile goes: what Pyroscope would make its series labels.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Series {
    /// `service_name`.
    service: String,
    /// `__name__` (`process_cpu`, `memory`, …); `None` lets the store name it from its types.
    name: Option<String>,
    /// The other labels, sanitized.
    labels: BTreeMap<String, String>,
}

impl Series {
    fn resource(&self) -> Resource {
        let kv = |key: &str, value: &str| KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            ..Default::default()
        };
        let mut attributes = vec![kv("service.name", &self.service)];
        if let Some(name) = &self.name {
            attributes.push(kv(PROFILE_NAME_ATTRIBUTE, name));
        }
        attributes.extend(self.labels.iter().map(|(k, v)| kv(k, v)));
        Resource {
            attributes,
            ..Default::default()
        }
    }
}

/// A pprof profile from a request, gzip or not, and its charge to the in-flight budget: its
/// decompressed copy while it is decoded (up to `server.max_decompressed_size` for each
/// request a worker decodes at once was otherwise outside the budget), and what the decoded
/// profile holds, until the caller lets go of the charge. `also_held`: what the request holds
/// charged elsewhere (its body, profiles decoded before), for telling a request that can never
/// fit (413) from one that must wait (429).
fn decode_pprof(
    app: &AppState,
    bytes: &[u8],
    also_held: usize,
) -> Result<(pprof::Profile, Charge), Rejection> {
    let limits = &app.config.server;
    let max = limits.max_decompressed_size;
    let (raw, charge) =
        gunzip_part(&app.inflight, bytes, max, "the profile").map_err(|e| match e {
            Unpacked::TooLarge => Rejection::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the profile is larger than {max} bytes once decompressed \
                     (server.max_decompressed_size)"
                ),
            ),
            Unpacked::Refused(r) => r,
        })?;
    let decompressed = match &raw {
        std::borrow::Cow::Owned(v) => v.len(),
        std::borrow::Cow::Borrowed(_) => 0,
    };
    let drawing = Drawing::new(charge);
    let mut profile = crate::spare::pprof_profile();
    pprof::decode_into_drawing(&raw, max, &mut profile, &drawing).map_err(|e| match e {
        FormatError::TooLarge { limit } => Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the profile is larger than {limit} bytes once decompressed"),
        ),
        other => drawing.refusal("the profile", &other, also_held),
    })?;
    drop(raw);
    drawing.release(decompressed);
    limits
        .profile_limits()
        .check_pprof(&profile)
        .map_err(|e| Rejection::undecodable("the profile", &e))?;
    // A V8 heap forwarded as scraped (Alloy) gets the type ids the Node SDK's own push has.
    spanprof_format::profile_type::name_v8_types(&mut profile);
    Ok((profile, drawing.into_charge()))
}

/// Sample label keys as Pyroscope stores them (they become series labels there): `.` → `_`
/// (`thread.name` → `thread_name`). Keys that carry span links are left alone.
fn sanitize_sample_label_keys(profile: &mut pprof::Profile, link: &LinkConfig) {
    // Looked up for every label of every sample: hashbrown's hasher, not std's SipHash.
    let mut renamed: hashbrown::HashMap<i64, i64> = hashbrown::HashMap::new();
    for s in 0..profile.sample.len() {
        for l in 0..profile.sample[s].label.len() {
            let key = profile.sample[s].label[l].key;
            let new = match renamed.get(&key) {
                Some(&k) => k,
                None => {
                    let text = profile.str(key).unwrap_or("");
                    let is_link_key = link
                        .span_id_keys
                        .iter()
                        .chain(&link.trace_id_keys)
                        .chain(&link.span_name_keys)
                        .any(|k| k == text);
                    let k = match labels::sanitize(text) {
                        Some(clean) if clean != text && !is_link_key => {
                            profile.string_table.push(clean);
                            profile.string_table.len() as i64 - 1
                        }
                        _ => key,
                    };
                    renamed.insert(key, k);
                    k
                }
            };
            profile.sample[s].label[l].key = new;
        }
    }
}

/// Converts and links `profiles`, lets go of their `charge` (see [`decode_pprof`]), hands
/// them to the pipeline as one batch, and returns once they are durable.
async fn submit(
    app: &AppState,
    incoming: Incoming,
    profiles: Vec<(pprof::Profile, Series)>,
    charge: Charge,
    receiver: crate::metrics::Receiver,
) -> Result<(), Rejection> {
    let mut batch = Batch::new(Some(app.config.processors.link.clone()));
    batch.set_span_parents(super::known_spans::StoredSpans::of(
        &app.store,
        &app.nesting,
    ));
    for (i, (mut profile, series)) in profiles.into_iter().enumerate() {
        sanitize_sample_label_keys(&mut profile, &app.config.processors.link);
        batch
            .add_pprof(&profile, series.resource())
            .map_err(|e| Rejection::bad(format!("profile {i}: invalid pprof profile: {e}")))?;
        crate::spare::keep_pprof(profile);
    }
    let (data, report) = batch.finish();
    drop(charge);
    app.metrics.record_received(receiver, &report);
    app.span_keys
        .inspect(&data, &app.config.processors.link, &app.store, &app.metrics);
    let places = places(&data);
    match incoming
        .submit(Work::Profiles(data, Storing::AllOrNone), receiver)
        .await
    {
        Err(SubmitError::Refused(problems)) => {
            let mut refused: Rejection = SubmitError::Refused(
                problems
                    .iter()
                    .map(|p| in_pprof_terms(p, &places))
                    .collect(),
            )
            .into();
            refused
                .message
                .push_str(" (nothing of the upload was stored: send it again corrected)");
            Err(refused)
        }
        other => Ok(other?),
    }
}

/// Each converted profile's place in the OTLP request (as the store's refusals name it), and
/// what it is to a client that sent pprof: `the cpu/nanoseconds samples of checkout`.
fn places(data: &ProfilesData) -> Vec<(String, String)> {
    let d = data.dictionary.as_ref();
    let text = |i: i32| {
        d.and_then(|d| d.string_table.get(usize::try_from(i).ok()?))
            .map_or("", String::as_str)
    };
    let mut out = Vec::new();
    for (r, rp) in data.resource_profiles.iter().enumerate() {
        let service = rp
            .resource
            .iter()
            .flat_map(|res| &res.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.as_str()),
                _ => None,
            })
            .unwrap_or("");
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            for (i, p) in sp.profiles.iter().enumerate() {
                let t = p.sample_type.unwrap_or_default();
                out.push((
                    format!("resource_profiles[{r}].scope_profiles[{s}].profiles[{i}]: "),
                    format!(
                        "the {}/{} samples of {service}: ",
                        text(t.type_strindex),
                        text(t.unit_strindex)
                    ),
                ));
            }
        }
    }
    out
}

/// A refusal of the store, which names the OTLP profile, named as the pprof's sample type:
/// a pprof upload refused for "resource_profiles[0].scope_profiles[0].profiles[1]" named
/// nothing its client sent.
fn in_pprof_terms(problem: &str, places: &[(String, String)]) -> String {
    places
        .iter()
        .find_map(|(otlp, pprof)| {
            problem
                .strip_prefix(otlp.as_str())
                .map(|rest| format!("{pprof}{rest}"))
        })
        .unwrap_or_else(|| problem.to_owned())
}
