//! The rules on spans: the records the store keeps and the request forwarders send, kept
//! alike. Sample-label rules do not apply to spans.

use spanprof_format::trace::ExportTraceServiceRequest;
use spanprof_store::spans::SpanRecord;

use super::{push_label, set_attribute, value_text, Action};

pub(super) fn apply(
    action: &Action,
    records: &mut Vec<SpanRecord>,
    request: Option<&mut ExportTraceServiceRequest>,
) {
    match action {
        Action::SetResource {
            key,
            value,
            overwrite,
        } => {
            for r in records.iter_mut() {
                if key == "service.name" {
                    if *overwrite || r.service.is_empty() {
                        r.service = value.clone();
                    }
                    continue;
                }
                let mut resource: Vec<(String, String)> = r.resource.to_vec();
                match resource.iter_mut().find(|(k, _)| k == key) {
                    Some(_) if !overwrite => continue,
                    Some((_, v)) => *v = value.clone(),
                    None => resource.push((key.clone(), value.clone())),
                }
                r.resource = resource.into();
            }
            for rs in request.into_iter().flat_map(|q| &mut q.resource_spans) {
                let resource = rs.resource.get_or_insert_with(Default::default);
                set_attribute(&mut resource.attributes, key, value, *overwrite);
            }
        }
        Action::DropSpans(selector) => {
            records.retain(|r| {
                let mut labels = Vec::new();
                for (k, v) in r.resource.iter().chain(&r.attributes) {
                    push_label(&mut labels, k, v.clone());
                }
                labels.push(("service_name".into(), r.service.clone()));
                labels.push(("span_name".into(), r.name.clone()));
                !selector.matches(&labels)
            });
            let Some(q) = request else { return };
            for rs in &mut q.resource_spans {
                let mut base = Vec::new();
                for kv in rs.resource.iter().flat_map(|r| &r.attributes) {
                    push_label(&mut base, &kv.key, value_text(kv.value.as_ref()));
                }
                for ss in &mut rs.scope_spans {
                    ss.spans.retain(|s| {
                        let mut labels = base.clone();
                        for kv in &s.attributes {
                            push_label(&mut labels, &kv.key, value_text(kv.value.as_ref()));
                        }
                        labels.push(("span_name".into(), s.name.clone()));
                        !selector.matches(&labels)
                    });
                }
                rs.scope_spans.retain(|ss| !ss.spans.is_empty());
            }
            q.resource_spans.retain(|rs| !rs.scope_spans.is_empty());
        }
        Action::RenameLabel { .. }
        | Action::DropLabel(_)
        | Action::HashLabel(_)
        | Action::DropProfiles(_) => {}
    }
}
