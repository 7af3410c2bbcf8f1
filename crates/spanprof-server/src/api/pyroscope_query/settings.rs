//! Pyroscope's `settings.v1.SettingsService` (Connect unary, protobuf or JSON, as the query
//! API): `Get` answers every stored setting in name order (`{}` when there are none, which
//! Grafana's Profiles Drilldown reads as "use the defaults"), `Set` stores one durably
//! ([`crate::settings`]) and answers it as stored. Without them Drilldown showed an error on
//! opening and could not keep its options.
//!
//! As Pyroscope: `Set` without a setting is `invalid_argument` ("no setting values
//! provided"), a `modifiedAt` of 0 is now, and a write older than the stored value is
//! `already_exists`. Other methods of `settings.v1` (recording rules) are `unimplemented`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::{unary, Codec, ConnectError};
use crate::auth::Access;
use crate::pyroscope_proto::settings::v1::{
    GetSettingsRequest, GetSettingsResponse, SetSettingsRequest, SetSettingsResponse, Setting,
};
use crate::routes::Routes;
use crate::settings::{self, SetError, Settings};

/// The `settings.v1` routes.
pub fn routes() -> Routes {
    const P: &str = "/settings.v1.SettingsService/";
    Routes::new()
        .post(&format!("{P}Get"), Access::Read, get)
        .post(&format!("{P}Set"), Access::Admin, set)
        .post(&format!("{P}{{method}}"), Access::Read, unknown_method)
        .post(
            "/settings.v1.RecordingRulesService/{method}",
            Access::Read,
            recording_rules,
        )
}

rpc!(get: Arc<Settings> => get_settings);
rpc!(set: Arc<Settings> => set_setting);

async fn get_settings(
    settings: Arc<Settings>,
    _: GetSettingsRequest,
    _: Codec,
) -> Result<GetSettingsResponse, ConnectError> {
    Ok(GetSettingsResponse {
        settings: settings.all().into_iter().map(to_proto).collect(),
    })
}

async fn set_setting(
    settings: Arc<Settings>,
    req: SetSettingsRequest,
    _: Codec,
) -> Result<SetSettingsResponse, ConnectError> {
    let Some(s) = req.setting else {
        return Err(ConnectError::invalid("no setting values provided"));
    };
    let setting = settings::Setting {
        name: s.name,
        value: s.value,
        modified_at_ms: s.modified_at,
    };
    let now_ms = crate::clock::now_ns() / 1_000_000;
    let store = settings;
    let stored = tokio::task::spawn_blocking(move || store.set(setting, now_ms))
        .await
        .map_err(|e| ConnectError::internal(format!("storing the setting failed: {e}")))?;
    match stored {
        Ok(s) => Ok(SetSettingsResponse {
            setting: Some(to_proto(s)),
        }),
        Err(e) => Err(ConnectError {
            code: match e {
                SetError::Invalid(_) => "invalid_argument",
                SetError::Older { .. } => "already_exists",
                SetError::TooMany(_) => "resource_exhausted",
                SetError::Write { .. } => "unavailable",
            },
            message: e.to_string(),
        }),
    }
}

fn to_proto(s: settings::Setting) -> Setting {
    Setting {
        name: s.name,
        value: s.value,
        modified_at: s.modified_at_ms,
    }
}

async fn unknown_method(Path(method): Path<String>) -> ConnectError {
    ConnectError::unimplemented(format!(
        "settings.v1.SettingsService/{method} is not served here; spanprof serves Get and Set"
    ))
}

async fn recording_rules(Path(method): Path<String>) -> ConnectError {
    ConnectError::unimplemented(format!(
        "settings.v1.RecordingRulesService/{method} is not served here: spanprof has no \
         recording rules"
    ))
}
