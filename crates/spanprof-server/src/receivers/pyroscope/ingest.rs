//! `POST /ingest` (and `/pyroscope/ingest`): Pyroscope's legacy push. The body form follows
//! from `format` and `Content-Type` in Pyroscope's order; the series from `name`, `spyName`
//! and the profile's sample types. Success is exactly 200 with an empty body: pyroscope-go
//! takes anything else for a failure.

use std::collections::{BTreeMap, HashMap};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use spanprof_format::limits::ProfileLimits;
use spanprof_format::{pprof, profile_type, FormatError};

use super::folded::{self, TextFormat};
use super::labels::{self, LabelSet, SERVICE_NAME};
use super::multipart;
use super::{decode_pprof, submit, Series};
use crate::clock::{is_unset_time, now_ns};
use crate::pipeline::Incoming;
use crate::receivers::body::{payload, Rejection};
use crate::receivers::inflight::Charge;
use crate::receivers::inflight::ChargedBody;
use crate::AppState;

/// What pyroscope-go says when a server refuses its old cumulative uploads; kept word for
/// word so users find the known fix.
pub const PREV_PROFILE_MESSAGE: &str =
    "unsupported client version. Please update github.com/grafana/pyroscope-go to the latest version";

/// The query parameters of an upload.
#[derive(Debug, Clone)]
struct Params {
    name: LabelSet,
    from_ns: i64,
    until_ns: i64,
    /// Whether `until` was given (else it is now).
    until_given: bool,
    /// Hz; Pyroscope's default is 100. Past [`MAX_SAMPLE_RATE`] a text upload is refused
    /// (pprof carries its own period).
    sample_rate: u64,
    spy_name: String,
    format: String,
}

impl Params {
    /// Reads the parameters; a repeated one counts with its first value, as in Go.
    fn read(pairs: &[(String, String)]) -> Result<Params, Rejection> {
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        let name = LabelSet::parse(get("name").unwrap_or(""))
            .map_err(|e| Rejection::bad(format!("name: {e} (expected name=app{{key=value,…}})")))?;
        let now = now_ns();
        let time = |key| match get(key) {
            None => Ok(now),
            Some(v) => super::attime::parse(v, now).ok_or_else(|| {
                Rejection::bad(format!(
                    "{key}={v:?} is not a time: give Unix time (seconds, or 13/16/19 digits for \
                     ms/µs/ns), YYYYMMDD, or now-1h"
                ))
            }),
        };
        let (from_ns, until_ns) = (time("from")?, time("until")?);
        if from_ns > until_ns {
            return Err(Rejection::bad(format!(
                "from is after until ({from_ns} > {until_ns} ns since the epoch)"
            )));
        }
        // 100 Hz when unset, as in Pyroscope; but a rate that is no whole number is refused
        // rather than taken as 100 (every value would be off by its ratio).
        let sample_rate = match get("sampleRate") {
            None => 100,
            Some(v) => v.parse().map_err(|_| {
                Rejection::bad(format!(
                    "sampleRate={v:?} is not a whole number of samples per second (Hz; 0 keeps \
                     a text upload's counts as they are)"
                ))
            })?,
        };
        Ok(Params {
            name,
            from_ns,
            until_ns,
            until_given: get("until").is_some(),
            sample_rate,
            spy_name: get("spyName").unwrap_or("unknown").to_owned(),
            format: get("format").unwrap_or("").to_owned(),
        })
    }
}

/// Which body form an upload carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyForm {
    /// The whole body is a pprof profile (`format=pprof`), gzip or not.
    Pprof,
    /// `multipart/form-data` with a `profile` part (pyroscope-go, Node).
    Multipart,
    /// Folded or one-stack-per-line text.
    Text(TextFormat),
    /// JFR (`format=jfr`): multipart with `jfr` and `labels` parts, or a raw recording.
    Jfr,
}

/// Pyroscope's precedence: `format` first (trie, tree, lines, jfr, pprof, speedscope), then a
/// multipart content type, then folded text for everything else. `Err` says why a form
/// spanprof does not read (yet) is refused.
fn body_form(format: &str, content_type: &str) -> Result<BodyForm, &'static str> {
    if format == "trie" || content_type == "binary/octet-stream+trie" {
        return Err("the Pyroscope 0.x binary trie format (format=trie) is not supported; send pprof or folded text");
    }
    if format == "tree" || content_type == "binary/octet-stream+tree" {
        return Err("the Pyroscope 0.x binary tree format (format=tree) is not supported; send pprof or folded text");
    }
    Ok(match format {
        "lines" => BodyForm::Text(TextFormat::Lines),
        "jfr" => BodyForm::Jfr,
        "pprof" => BodyForm::Pprof,
        "speedscope" => return Err(
            "speedscope profiles (format=speedscope) are not supported; send pprof or folded text",
        ),
        _ if content_type
            .to_ascii_lowercase()
            .contains("multipart/form-data") =>
        {
            BodyForm::Multipart
        }
        _ => BodyForm::Text(TextFormat::Folded),
    })
}

/// The `sample_type_config` entries that matter here: display names by sample type.
type DisplayNames = HashMap<String, String>;

/// Pyroscope's defaults when an upload has no `sample_type_config`.
fn default_display_names() -> DisplayNames {
    [
        ("samples", "cpu"),
        ("goroutine", "goroutines"),
        ("contentions", "mutex_count"),
        ("delay", "mutex_duration"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect()
}

fn parse_sample_type_config(json: &[u8]) -> Result<DisplayNames, Rejection> {
    #[derive(serde::Deserialize)]
    struct SampleTypeConfig {
        #[serde(rename = "display-name", default)]
        display_name: Option<String>,
    }
    let config: HashMap<String, Option<SampleTypeConfig>> =
        serde_json::from_slice(json).map_err(|e| {
            Rejection::bad(format!(
                "sample_type_config is not a JSON object of sample types: {e}"
            ))
        })?;
    Ok(config
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?.display_name.filter(|d| !d.is_empty())?)))
        .collect())
}

/// The profile's Pyroscope name from its sample types, as Pyroscope derives it: `wall` if any
/// type is `wall`, else from the first type whose display name mentions cpu, alloc_/inuse_,
/// mutex_, block_ or goroutines.
fn metric_name(profile: &pprof::Profile, display: &DisplayNames) -> Option<String> {
    let types: Vec<&str> = profile
        .sample_type
        .iter()
        .map(|t| profile.str(t.r#type).unwrap_or(""))
        .collect();
    if let Some(name) = profile_type::name_from_content(types.iter().copied()) {
        return Some(name.into());
    }
    let mut last = "";
    for t in types {
        let st = display.get(t).map_or(t, String::as_str);
        last = st;
        let name = if st.contains("cpu") {
            "process_cpu"
        } else if st.contains("alloc_") || st.contains("inuse_") || st == "space" || st == "objects"
        {
            "memory"
        } else if st.contains("mutex_") {
            "mutex"
        } else if st.contains("block_") {
            "block"
        } else if st.contains("goroutines") {
            "goroutines"
        } else {
            continue;
        };
        return Some(name.into());
    }
    (!last.is_empty()).then(|| last.to_owned())
}

/// Scripting spies (py-spy, rbspy) name functions without their file; Pyroscope shows
/// `"<file> <function>"` instead (py-spy: only for relative file names).
fn qualify_script_functions(profile: &mut pprof::Profile, spy_name: &str) {
    if !matches!(spy_name, "pyspy" | "rbspy" | "scripting") {
        return;
    }
    let mut renamed: HashMap<(i64, i64), i64> = HashMap::new();
    for i in 0..profile.function.len() {
        let (name, file) = (profile.function[i].name, profile.function[i].filename);
        let filename = profile.str(file).unwrap_or("");
        if spy_name == "pyspy" && filename.starts_with('/') {
            continue;
        }
        let new = match renamed.get(&(file, name)) {
            Some(&s) => s,
            None => {
                let text = format!("{filename} {}", profile.str(name).unwrap_or(""));
                profile.string_table.push(text);
                let s = profile.string_table.len() as i64 - 1;
                renamed.insert((file, name), s);
                s
            }
        };
        profile.function[i].name = new;
    }
}

/// Series labels of the upload: the tags Pyroscope keeps, sanitized.
fn tag_labels(name: &LabelSet) -> Result<BTreeMap<String, String>, Rejection> {
    labels::sanitize_all(
        name.tags
            .iter()
            .filter(|(k, _)| labels::allowed(k))
            .map(|(k, v)| (k.clone(), v.clone())),
    )
    .map_err(|e| Rejection::bad(format!("name: {e}")))
}

/// `POST /ingest`.
pub async fn ingest(
    State(app): State<AppState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Result<StatusCode, Rejection> {
    let body = ChargedBody::counted(body, &app, crate::metrics::Receiver::PyroscopeIngest);
    let incoming = app.pipeline.incoming();
    let answer = ingest_inner(&app, incoming, query, &headers, body).await;
    if let Err(r) = &answer {
        r.record(&app, crate::metrics::Receiver::PyroscopeIngest);
    }
    answer
}

async fn ingest_inner(
    app: &AppState,
    incoming: Incoming,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: &HeaderMap,
    body: Result<ChargedBody, Rejection>,
) -> Result<StatusCode, Rejection> {
    let Query(pairs) =
        query.map_err(|e| Rejection::bad(format!("the query string does not parse: {e}")))?;
    let params = Params::read(&pairs)?;
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let form = body_form(&params.format, content_type).map_err(|message| {
        Rejection::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message.to_owned())
    })?;
    let body = payload(headers, body?, &app.config.server)?;
    let raw = body.as_ref();
    if form == BodyForm::Jfr {
        let Some((series, charge)) = jfr_upload(app, &params, content_type, raw)? else {
            return Ok(StatusCode::OK);
        };
        // Let go of the body (and its decompressed copy) before waiting for the store.
        drop(body);
        submit(
            app,
            incoming,
            series,
            charge,
            crate::metrics::Receiver::PyroscopeIngest,
        )
        .await?;
        return Ok(StatusCode::OK);
    }
    let (series, charge) = match form {
        BodyForm::Jfr => unreachable!("answered above"),
        BodyForm::Text(format) => {
            // Charged before the parse, so the in-flight budget refuses what it cannot hold:
            // eight uploads of one 31 M-frame line each took the server to 1.97 GB.
            let bound = text_parse_bound(raw.len(), &app.config.server.profile_limits());
            let budget = app.config.server.max_inflight_size;
            if budget != 0 && bound > budget {
                return Err(Rejection::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "parsing this {} byte text upload could take {bound} bytes, more than \
                         the server holds for all requests at once (server.max_inflight_size: \
                         {budget} bytes): send it in smaller uploads",
                        raw.len()
                    ),
                ));
            }
            let mut charge = Charge::new(&app.inflight);
            charge.grow(bound)?;
            match text_series(raw, format, &params, &app.config.server.profile_limits())? {
                Some(s) => (s, charge),
                // Pyroscope drops text uploads tagged with a `profile_id` (old exemplars).
                None => return Ok(StatusCode::OK),
            }
        }
        BodyForm::Pprof => match pprof_series(app, raw, body.charged(), None, &params)? {
            Some(s) => s,
            None => return Ok(StatusCode::OK),
        },
        BodyForm::Multipart => {
            let boundary = multipart::boundary(content_type).ok_or_else(|| {
                Rejection::bad("the multipart/form-data Content-Type has no boundary")
            })?;
            let parts =
                multipart::parse(raw, &boundary).map_err(|e| Rejection::bad(e.to_string()))?;
            let part = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.body);
            if part("prev_profile").is_some() {
                return Err(Rejection::bad(PREV_PROFILE_MESSAGE));
            }
            let profile = part("profile").ok_or_else(|| {
                let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
                Rejection::bad(format!(
                    "the multipart body has no `profile` part (parts: {names:?})"
                ))
            })?;
            let display = part("sample_type_config")
                .map(parse_sample_type_config)
                .transpose()?;
            match pprof_series(app, profile, body.charged(), display, &params)? {
                Some(s) => s,
                None => return Ok(StatusCode::OK),
            }
        }
    };
    // Let go of the body (and its decompressed copy) before waiting for the store.
    drop(body);
    submit(
        app,
        incoming,
        vec![series],
        charge,
        crate::metrics::Receiver::PyroscopeIngest,
    )
    .await?;
    Ok(StatusCode::OK)
}

/// The most memory parsing `len` bytes of folded text takes, about: a 16-byte slice per frame
/// (a frame and its `;` take at least 2 bytes; at most `max_frames` are kept), and a profile
/// whose strings are at most the text.
fn text_parse_bound(len: usize, limits: &spanprof_format::limits::ProfileLimits) -> usize {
    let frames = match limits.max_frames {
        0 => len / 2,
        max => (len / 2).min(max),
    };
    frames.saturating_mul(16).saturating_add(len)
}

/// A JFR upload's profiles, every kind of sample of the recording one, with their series
/// and charge; `None` when there is nothing to store.
fn jfr_upload(
    app: &AppState,
    params: &Params,
    content_type: &str,
    raw: &[u8],
) -> Result<Option<DecodedMany>, Rejection> {
    let (jfr, labels) = match multipart::boundary(content_type) {
        Some(boundary) => {
            let parts =
                multipart::parse(raw, &boundary).map_err(|e| Rejection::bad(e.to_string()))?;
            let part = |name: &str| parts.iter().find(|p| p.name == name).map(|p| p.body);
            let jfr = part("jfr").ok_or_else(|| {
                let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
                Rejection::bad(format!(
                    "the multipart body has no `jfr` part (parts: {names:?})"
                ))
            })?;
            (jfr, part("labels"))
        }
        None => (raw, None),
    };
    if jfr.is_empty() {
        return Ok(None);
    }
    let mut labels_of_series = tag_labels(&params.name)?;
    let service = labels_of_series
        .remove(SERVICE_NAME)
        .unwrap_or_else(|| params.name.app.clone());
    labels_of_series.insert("pyroscope_spy".into(), params.spy_name.clone());
    let (series, charge) = super::jfr::jfr_series(
        app,
        jfr,
        labels,
        &super::jfr::Upload {
            sample_rate: params.sample_rate,
            from_ns: params.from_ns,
            until_ns: params.until_ns,
        },
        &super::jfr::Target {
            service,
            labels: labels_of_series,
        },
    )?;
    Ok((!series.is_empty()).then_some((series, charge)))
}

/// A decoded profile, its series, and its charge to the in-flight budget.
type Decoded = ((pprof::Profile, Series), Charge);

/// Decoded profiles of one upload, their series, and their charge.
type DecodedMany = (Vec<(pprof::Profile, Series)>, Charge);

/// A pprof upload's series, and the charge of the decoded profile; `None` for an empty
/// profile (nothing to store, as in Pyroscope).
fn pprof_series(
    app: &AppState,
    bytes: &[u8],
    also_held: usize,
    display: Option<DisplayNames>,
    params: &Params,
) -> Result<Option<Decoded>, Rejection> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let (mut profile, charge) = decode_pprof(app, bytes, also_held)?;
    // Old py-spy/rbspy/pyroscope-rs leave the time unset (or in µs): the upload's `from` wins.
    if is_unset_time(profile.time_nanos) {
        profile.time_nanos = params.from_ns;
    }
    if profile.duration_nanos <= 0 {
        profile.duration_nanos = (params.until_ns - params.from_ns).max(0);
    }
    // pprof's time is when the profile starts, but some profilers stamp it when they write
    // it, at its end (the Node.js SDK's wall profiles: @datadog/pprof sets Date.now()).
    // Taken as the start, the window sat one upload interval late, and spans in it read "no
    // profile covers the span". The upload's `from`/`until` tell: a time nearer `until` than
    // `from` is the end of the window.
    if params.until_given
        && profile.duration_nanos > 0
        && profile.time_nanos.abs_diff(params.until_ns)
            < profile.time_nanos.abs_diff(params.from_ns)
    {
        profile.time_nanos -= profile.duration_nanos;
    }
    qualify_script_functions(&mut profile, &params.spy_name);
    let display = display.unwrap_or_else(default_display_names);
    let mut labels = tag_labels(&params.name)?;
    let service = labels
        .remove(SERVICE_NAME)
        .unwrap_or_else(|| params.name.app.clone());
    labels.insert("pyroscope_spy".into(), params.spy_name.clone());
    let series = Series {
        service,
        name: metric_name(&profile, &display),
        labels,
    };
    Ok(Some(((profile, series), charge)))
}

/// A text upload's series; `None` when Pyroscope drops it (a `profile_id` tag).
/// Highest `sampleRate` of a text upload: past 1 GHz a sample would be less than the
/// nanosecond CPU time is counted in, and every value would be stored as 0.
const MAX_SAMPLE_RATE: u64 = 1_000_000_000;

fn text_series(
    raw: &[u8],
    format: TextFormat,
    params: &Params,
    limits: &ProfileLimits,
) -> Result<Option<(pprof::Profile, Series)>, Rejection> {
    let sample_rate = u32::try_from(params.sample_rate)
        .ok()
        .filter(|&r| u64::from(r) <= MAX_SAMPLE_RATE)
        .ok_or_else(|| {
            Rejection::bad(format!(
                "sampleRate={} is above {MAX_SAMPLE_RATE} Hz: each sample would be less than a \
                 nanosecond of CPU time",
                params.sample_rate
            ))
        })?;
    if params
        .name
        .tags
        .get("profile_id")
        .is_some_and(|v| !v.is_empty())
    {
        return Ok(None);
    }
    let text = std::str::from_utf8(raw).map_err(|e| {
        let at = e.valid_up_to();
        let named = matches!(params.format.as_str(), "folded" | "lines");
        // Folded text with one bad byte (a frame name in another encoding) is told by its
        // line; what is not text at all (a raw pprof body starts with a newline byte too),
        // by the formats it could be.
        let folded_before = std::str::from_utf8(&raw[..at])
            .ok()
            .and_then(|t| t.split_once('\n'))
            .and_then(|(first, _)| first.trim_end().rsplit_once(' '))
            .is_some_and(|(_, count)| {
                !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit())
            });
        if named || folded_before {
            let line = raw[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            // Counted from the line's start (1 for its first byte), not the body's.
            let column = at - raw[..at].iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1) + 1;
            return Rejection::bad(format!(
                "folded text line {line}: its byte {column} is not UTF-8 (frame names are UTF-8 text)"
            ));
        }
        // A format this does not know reads as folded text, as in Pyroscope: name it, for a
        // misspelt `format=pprof`.
        let (unknown, read_as) = match params.format.as_str() {
            "" => (String::new(), "folded text (the default format)"),
            other => (
                format!(
                    "format={other:?} is not a format /ingest knows (pprof, folded, lines), so "
                ),
                "folded text",
            ),
        };
        Rejection::bad(format!(
            "{unknown}the body is read as {read_as}, and it is not text; send format=pprof \
             for a raw pprof body or multipart/form-data with a `profile` part"
        ))
    })?;
    let t = folded::to_pprof(
        text,
        format,
        &params.name.app,
        sample_rate,
        params.from_ns,
        params.until_ns - params.from_ns,
        limits,
    )
    .map_err(|e| match e {
        FormatError::Invalid(message) => Rejection::bad(message),
        e => Rejection::undecodable("the folded text", &e),
    })?;
    let mut labels = tag_labels(&params.name)?;
    let service = match labels.remove(SERVICE_NAME) {
        Some(s) => {
            labels
                .entry("app_name".into())
                .or_insert_with(|| t.kind.app.clone());
            s
        }
        None => t.kind.app.clone(),
    };
    labels.insert("pyroscope_spy".into(), params.spy_name.clone());
    let series = Series {
        service,
        name: Some(t.kind.metric.to_owned()),
        labels,
    };
    Ok(Some((t.profile, series)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile_with_types(types: &[&str]) -> pprof::Profile {
        let mut p = pprof::Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
        for t in types {
            p.string_table.push((*t).to_owned());
            p.sample_type.push(pprof::ValueType {
                r#type: p.string_table.len() as i64 - 1,
                unit: 0,
            });
        }
        p
    }

    #[test]
    fn forms_follow_pyroscope_precedence() {
        let mp = "multipart/form-data; boundary=x";
        assert_eq!(body_form("", mp), Ok(BodyForm::Multipart));
        assert_eq!(body_form("pprof", mp), Ok(BodyForm::Pprof));
        assert_eq!(
            body_form("lines", mp),
            Ok(BodyForm::Text(TextFormat::Lines))
        );
        assert_eq!(body_form("folded", mp), Ok(BodyForm::Multipart));
        assert_eq!(body_form("", ""), Ok(BodyForm::Text(TextFormat::Folded)));
        assert_eq!(body_form("jfr", mp), Ok(BodyForm::Jfr));
        assert_eq!(body_form("jfr", ""), Ok(BodyForm::Jfr));
        assert!(body_form("", "binary/octet-stream+trie").is_err());
    }

    #[test]
    fn metric_names_like_pyroscope() {
        let d = default_display_names();
        let name = |types: &[&str], d: &DisplayNames| metric_name(&profile_with_types(types), d);
        assert_eq!(
            name(&["samples", "cpu"], &d).as_deref(),
            Some("process_cpu")
        );
        assert_eq!(
            name(&["alloc_objects", "alloc_space"], &d).as_deref(),
            Some("memory")
        );
        assert_eq!(name(&["goroutine"], &d).as_deref(), Some("goroutines"));
        assert_eq!(
            name(&["contentions", "delay"], &d).as_deref(),
            Some("mutex")
        );
        assert_eq!(name(&["cpu", "wall"], &d).as_deref(), Some("wall"));
        let block = parse_sample_type_config(
            br#"{"contentions":{"display-name":"block_count","units":"lock_samples","cumulative":true},"delay":{"display-name":"block_duration"}}"#,
        )
        .unwrap();
        assert_eq!(
            name(&["contentions", "delay"], &block).as_deref(),
            Some("block")
        );
        assert_eq!(name(&[], &d), None);
        assert!(parse_sample_type_config(b"[1]").is_err());
    }

    #[test]
    fn script_spies_qualify_function_names() {
        let mut p = pprof::Profile {
            string_table: vec![
                "".into(),
                "handler".into(),
                "app/views.py".into(),
                "/usr/lib/x.py".into(),
            ],
            function: vec![
                pprof::Function {
                    id: 1,
                    name: 1,
                    filename: 2,
                    ..Default::default()
                },
                pprof::Function {
                    id: 2,
                    name: 1,
                    filename: 3,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        qualify_script_functions(&mut p, "pyspy");
        assert_eq!(p.str(p.function[0].name), Some("app/views.py handler"));
        assert_eq!(p.str(p.function[1].name), Some("handler"));
    }

    #[test]
    fn params_defaults_and_units() {
        let pairs = |q: &[(&str, &str)]| -> Vec<(String, String)> {
            q.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
        };
        let p = Params::read(&pairs(&[
            ("name", "app{a=1}"),
            ("from", "1700000000"),
            ("until", "1700000010000"),
        ]))
        .unwrap();
        assert_eq!(p.from_ns, 1_700_000_000_000_000_000);
        assert_eq!(p.until_ns, 1_700_000_010_000_000_000);
        assert_eq!(p.sample_rate, 100);
        assert_eq!(p.spy_name, "unknown");
        // What means nothing is refused naming the parameter, not taken as now or 100 Hz.
        for (key, value, says) in [
            (
                "sampleRate",
                "oops",
                "sampleRate=\"oops\" is not a whole number",
            ),
            ("sampleRate", "-1", "sampleRate=\"-1\""),
            ("sampleRate", "1.5", "sampleRate=\"1.5\""),
            ("from", "1e30", "from=\"1e30\" is not a time"),
            ("until", "abc", "until=\"abc\" is not a time"),
            ("until", "99999999999999999999", "until="),
            ("from", "now+1h", "from is after until"),
        ] {
            let e = Params::read(&pairs(&[("name", "app"), (key, value)])).unwrap_err();
            assert!(
                e.status == 400 && e.message.contains(says),
                "{key}={value}: {e:?}"
            );
        }
        let p = Params::read(&pairs(&[("name", "app"), ("sampleRate", "4294967296")])).unwrap();
        assert_eq!(p.sample_rate, 4_294_967_296);
        let e = text_series(
            b"main;work 1\n",
            TextFormat::Folded,
            &p,
            &ProfileLimits::default(),
        )
        .unwrap_err();
        assert!(
            e.status == 400 && e.message.contains("above 1000000000 Hz"),
            "{e:?}"
        );
        let p = Params::read(&pairs(&[("name", "app"), ("sampleRate", "1000000000")])).unwrap();
        assert!(text_series(
            b"main;work 1\n",
            TextFormat::Folded,
            &p,
            &ProfileLimits::default()
        )
        .is_ok());
        let e = Params::read(&pairs(&[("from", "1")])).unwrap_err();
        assert!(
            e.message.contains("service name is required"),
            "{}",
            e.message
        );
    }
}
