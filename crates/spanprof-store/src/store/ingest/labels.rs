//! Label sets of an ingested profile: its resource's service and labels, and each sample's
//! attributes read as label values.

use spanprof_format::otlp::{any_value, AnyValue, Resource};

use super::PROFILE_NAME_ATTRIBUTE;

fn string_of(v: &AnyValue) -> Option<String> {
    Some(match v.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}

/// A sample attribute's value as a series label: strings (not empty: selectors match an empty
/// label as a missing one) and booleans. A number is a
/// measurement of the one sample (the allocation size Go's heap profiles label every sample
/// with, a thread id), not a label to split series by: one series per distinct size grew
/// without end, and a heap profile with over 1,000 sizes was refused whole. Pyroscope leaves
/// pprof's number labels out of series the same way. The store does not keep them.
pub(super) fn sample_label_of(v: &AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) if s.is_empty() => None,
        any_value::Value::StringValue(_) | any_value::Value::BoolValue(_) => string_of(v),
        _ => None,
    }
}

pub(super) fn resource_labels(
    resource: Option<&Resource>,
) -> (String, Option<String>, Vec<(String, String)>) {
    let mut service = None;
    let mut name = None;
    let mut labels = Vec::new();
    for kv in resource.map_or(&[][..], |r| &r.attributes) {
        // An empty value is no label (selectors match it as a missing one): an empty
        // `service.name` stored the service `""`, which no query could select.
        let Some(v) = kv
            .value
            .as_ref()
            .and_then(string_of)
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        match kv.key.as_str() {
            "service.name" => service = Some(v),
            PROFILE_NAME_ATTRIBUTE => name = Some(v),
            k => labels.push((k.to_owned(), v)),
        }
    }
    // As OpenTelemetry's resource conventions name a service without a name:
    // `unknown_service:<process.executable.name>`, else `unknown_service` (the eBPF profiler
    // profiles every process of a host; they were all one service).
    let service = service.unwrap_or_else(|| {
        match labels.iter().find(|(k, _)| k == "process.executable.name") {
            Some((_, exe)) => format!("unknown_service:{exe}"),
            None => "unknown_service".to_owned(),
        }
    });
    (service, name, labels)
}

/// `{k="v", …}`, each name and value cut to [`SHOWN_CHARS`].
pub(super) fn render_labels(labels: &[(String, String)]) -> String {
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}={:?}", shown(k), shown(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// At most this many characters of a label name or value in a message.
const SHOWN_CHARS: usize = 64;

/// `s`, cut to [`SHOWN_CHARS`] characters with a mark when longer.
pub(super) fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::resource_labels;
    use spanprof_format::otlp::{any_value, AnyValue, KeyValue, Resource};

    #[test]
    fn a_resource_without_a_service_name_is_its_executables_unknown_service() {
        let resource = |attrs: &[(&str, &str)]| Resource {
            attributes: attrs
                .iter()
                .map(|(k, v)| KeyValue {
                    key: (*k).into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue((*v).into())),
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let service = |attrs| resource_labels(Some(&resource(attrs))).0;
        assert_eq!(
            service(&[("process.executable.name", "nginx"), ("host.name", "h1")]),
            "unknown_service:nginx"
        );
        assert_eq!(service(&[("host.name", "h1")]), "unknown_service");
        assert_eq!(
            service(&[
                ("process.executable.name", "nginx"),
                ("service.name", "web")
            ]),
            "web"
        );
        assert_eq!(resource_labels(None).0, "unknown_service");
        // Empty is missing: no service "", no label of an empty value.
        assert_eq!(service(&[("service.name", "")]), "unknown_service");
        assert!(resource_labels(Some(&resource(&[("env", "")])))
            .2
            .is_empty());
    }
}
