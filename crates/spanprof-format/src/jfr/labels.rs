//! The `LabelsSnapshot` the Pyroscope Java agent uploads beside its JFR: the labels of each
//! `contextId` that async-profiler writes on its events (from grafana/jfr-parser's
//! `pprof/jfr_labels.proto`, written here from its message definitions).

use std::collections::HashMap;

use prost::Message;

use crate::FormatError;

/// A context's labels: label name id → value id, both keys of [`LabelsSnapshot::strings`].
#[derive(Clone, PartialEq, Message)]
pub struct Context {
    /// Name id → value id.
    #[prost(map = "int64, int64", tag = "1")]
    pub labels: HashMap<i64, i64>,
}

/// Labels of every context of an upload.
#[derive(Clone, PartialEq, Message)]
pub struct LabelsSnapshot {
    /// Context id → its labels; context 0 is "no labels".
    #[prost(map = "int64, message", tag = "1")]
    pub contexts: HashMap<i64, Context>,
    /// String id → string.
    #[prost(map = "int64, string", tag = "2")]
    pub strings: HashMap<i64, String>,
}

impl LabelsSnapshot {
    /// Decodes a snapshot (already decompressed).
    pub fn decode_snapshot(bytes: &[u8]) -> Result<LabelsSnapshot, FormatError> {
        let s = LabelsSnapshot::decode(bytes).map_err(|source| FormatError::Protobuf {
            what: "JFR labels snapshot (LabelsSnapshot)",
            source,
        })?;
        // A label that names a string the snapshot lacks would come out as an empty name.
        for (id, ctx) in &s.contexts {
            for (k, v) in &ctx.labels {
                for s_id in [k, v] {
                    if !s.strings.contains_key(s_id) {
                        return Err(FormatError::Invalid(format!(
                            "JFR labels snapshot: context {id} names string {s_id}, which its strings lack"
                        )));
                    }
                }
            }
        }
        Ok(s)
    }

    /// The labels of context `id` as (name, value) text, in name order.
    pub fn labels_of(&self, id: i64) -> Vec<(&str, &str)> {
        let Some(ctx) = self.contexts.get(&id) else {
            return Vec::new();
        };
        let text = |i: &i64| self.strings.get(i).map_or("", String::as_str);
        let mut out: Vec<(&str, &str)> =
            ctx.labels.iter().map(|(k, v)| (text(k), text(v))).collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_round_trips_and_names_its_labels() {
        let s = LabelsSnapshot {
            contexts: [(
                7,
                Context {
                    labels: [(1, 2), (3, 4)].into(),
                },
            )]
            .into(),
            strings: [
                (1, "profile_id".into()),
                (2, "00000000000000ab".into()),
                (3, "span_name".into()),
                (4, "GET /".into()),
            ]
            .into(),
        };
        let back = LabelsSnapshot::decode_snapshot(&s.encode_to_vec()).unwrap();
        assert_eq!(
            back.labels_of(7),
            vec![("profile_id", "00000000000000ab"), ("span_name", "GET /")]
        );
        assert!(back.labels_of(8).is_empty());
    }

    #[test]
    fn what_is_not_a_snapshot_is_refused_by_name() {
        let e = LabelsSnapshot::decode_snapshot(b"\x0a\xff\xff\xff\xff\x0f garbage").unwrap_err();
        assert!(
            e.to_string().contains("not a valid JFR labels snapshot"),
            "{e}"
        );
        let dangling = LabelsSnapshot {
            contexts: [(
                1,
                Context {
                    labels: [(5, 6)].into(),
                },
            )]
            .into(),
            strings: HashMap::new(),
        };
        let e = LabelsSnapshot::decode_snapshot(&dangling.encode_to_vec()).unwrap_err();
        assert!(e.to_string().contains("names string"), "{e}");
    }
}
