//! The protojson form of the query API's messages (what connect-go's JSON codec reads and
//! writes), through the serde impls pbjson-build generates from our `.proto` files
//! (`build.rs`): fields by lowerCamelCase or proto name, 64-bit integers written as strings
//! and read from numbers or strings, enums written as names and read from names or numbers,
//! default values left out, unknown fields ignored. Added here to match connect-go: `null`
//! read as the field's default (pbjson refuses it for plain fields), and a wrong-typed
//! field's error naming the field (`left.start: …`), answered `invalid_argument`.

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde_json::Value;

use super::messages::*;
use crate::pyroscope_proto::settings::v1::{GetSettingsResponse, SetSettingsResponse};

/// Why a protojson request cannot be read (answered `invalid_argument`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all.
    #[error("invalid JSON request: {0}")]
    Syntax(String),
    /// The root is not an object.
    #[error("the request must be a JSON object")]
    NotObject,
    /// A field's value is not what the message declares (wrong type, unknown enum name).
    #[error("{path}: {message}")]
    Field {
        /// Where, from the root (`left.start`).
        path: String,
        /// What is wrong there, as the generated reader says it.
        message: String,
    },
    /// The request as a whole is refused (e.g. a field given twice).
    #[error("{0}")]
    Request(String),
}

/// Reads one request from its protojson text.
pub fn read<T: DeserializeOwned>(text: &[u8]) -> Result<T, JsonError> {
    let mut root: Value =
        serde_json::from_slice(text).map_err(|e| JsonError::Syntax(e.to_string()))?;
    if !root.is_object() {
        return Err(JsonError::NotObject);
    }
    drop_nulls(&mut root);
    serde_path_to_error::deserialize(root).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // An empty path prints as ".": the error is the root object's own.
        if path == "." {
            JsonError::Request(message)
        } else {
            JsonError::Field { path, message }
        }
    })
}

/// Removes `null` members of every object, which protojson reads as the field's default
/// (pbjson's readers take it only for optional and message fields). Depth is bounded by
/// serde_json's recursion limit on the parse before.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Responses written as protojson.
pub trait ToJson {
    /// Writes the response.
    fn to_json(&self) -> Result<Vec<u8>, serde_json::Error>;
}

// Listed rather than blanket over Serialize: google.v1.Profile (SelectMergeProfile's answer)
// is spanprof-format's type, which has no serde impls.
macro_rules! to_json {
    ($($t:ty),* $(,)?) => {$(
        impl ToJson for $t {
            fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
                serde_json::to_vec(self)
            }
        }
    )*};
}

to_json!(
    ProfileTypesResponse,
    LabelNamesResponse,
    LabelValuesResponse,
    SeriesResponse,
    SelectMergeSpanProfileResponse,
    SelectMergeStacktracesResponse,
    SelectSeriesResponse,
    DiffResponse,
    GetProfileStatsResponse,
    SelectHeatmapResponse,
    GetSettingsResponse,
    SetSettingsResponse,
);

impl ToJson for spanprof_format::pprof::Profile {
    fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        Err(<serde_json::Error as serde::ser::Error>::custom(
            NO_PPROF_JSON,
        ))
    }
}

const NO_PPROF_JSON: &str = "the pprof form has no JSON form here: ask for application/proto";

// PprofProfile holds a google.v1.Profile, which has no serde impls (pbjson-build excludes
// it); the handlers refuse the pprof form to JSON clients before one is built.
impl serde::Serialize for PprofProfile {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(S::Error::custom(NO_PPROF_JSON))
    }
}

impl<'de> serde::Deserialize<'de> for PprofProfile {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(D::Error::custom(NO_PPROF_JSON))
    }
}
