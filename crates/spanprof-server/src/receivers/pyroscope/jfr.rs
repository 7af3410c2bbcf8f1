//! `POST /ingest?format=jfr`: the Pyroscope Java agent's JFR, as a multipart body (a `jfr`
//! part and an optional `labels` part, each gzipped or not) or a raw body. One recording
//! becomes one profile per kind of sample (CPU, wall, allocations, locks), submitted as one
//! upload: stored or refused as a whole.
//!
//! As in Pyroscope, `sampleRate` sets what a CPU or wall sample is worth (1e9 / rate ns),
//! `from`/`until` the profiles' window, `name` and `spyName` the series; `units` and
//! `aggregationType` describe text uploads, and a recording's kinds carry their own.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use spanprof_format::jfr::{jfr_to_pprof, JfrOptions, LabelsSnapshot};
use spanprof_format::pprof;

use super::Series;
use crate::receivers::body::{gunzip_part, Rejection, Unpacked};
use crate::receivers::inflight::Charge;
use crate::AppState;

/// What decoding a recording holds at its peak, per byte of the recording: its constants and
/// events as decoded values, and the profiles being built. Measured: `spanprof inspect` of a
/// 1.8 MB JDK recording (60 s of testprograms/javaapp) peaks 7 MB above that of a 12 KB one,
/// the file itself included, about 4 bytes a byte; twice that leaves room for recordings
/// richer in constants.
const DECODED_PER_BYTE: usize = 8;

/// Where the series of an upload go: the service and its labels.
pub(super) struct Target {
    pub service: String,
    pub labels: BTreeMap<String, String>,
}

/// The upload's options, from its query parameters.
pub(super) struct Upload {
    /// Pyroscope's `sampleRate`, in Hz.
    pub sample_rate: u64,
    pub from_ns: i64,
    pub until_ns: i64,
}

/// The profiles of a recording, each with its series, and their charge to the in-flight
/// budget; empty when the recording holds no samples.
pub(super) fn jfr_series(
    app: &AppState,
    jfr: &[u8],
    labels: Option<&[u8]>,
    upload: &Upload,
    target: &Target,
) -> Result<(Vec<(pprof::Profile, Series)>, Charge), Rejection> {
    let max = app.config.server.max_decompressed_size;
    let unpack = |bytes, what: &str| {
        gunzip_part(&app.inflight, bytes, max, what).map_err(|e| match e {
            Unpacked::TooLarge => Rejection::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{what} is larger than {max} bytes once decompressed (server.max_decompressed_size)"
                ),
            ),
            Unpacked::Refused(r) => r,
        })
    };
    let snapshot = match labels {
        Some(bytes) => {
            let (raw, _charge) = unpack(bytes, "the labels part")?;
            Some(LabelsSnapshot::decode_snapshot(&raw).map_err(|e| {
                Rejection::bad(format!(
                    "the labels part is not a JFR labels snapshot (LabelsSnapshot): {e}"
                ))
            })?)
        }
        None => None,
    };
    let (raw, mut charge) = unpack(jfr, "the JFR recording")?;
    if !spanprof_format::jfr::is_jfr(&raw) {
        return Err(Rejection::bad(
            "the JFR recording does not start with FLR\\0: it is not JFR (format=jfr)",
        ));
    }
    charge.grow(raw.len().saturating_mul(DECODED_PER_BYTE))?;
    let options = JfrOptions {
        sample_rate_hz: u32::try_from(upload.sample_rate).ok().filter(|&r| r > 0),
        time_ns: Some(upload.from_ns),
        duration_ns: Some((upload.until_ns - upload.from_ns).max(0)),
    };
    let (profiles, _report) = jfr_to_pprof(&raw, snapshot.as_ref(), &options)
        .map_err(|e| Rejection::bad(format!("the JFR recording: {e}")))?;
    drop(raw);
    let mut out = Vec::with_capacity(profiles.len());
    for p in profiles {
        app.config
            .server
            .profile_limits()
            .check_pprof(&p.profile)
            .map_err(|e| Rejection::undecodable("the JFR recording", &e))?;
        out.push((
            p.profile,
            Series {
                service: target.service.clone(),
                name: Some(p.kind.metric().to_owned()),
                labels: target.labels.clone(),
            },
        ));
    }
    Ok((out, charge))
}
