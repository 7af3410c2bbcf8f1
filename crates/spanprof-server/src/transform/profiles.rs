//! The rules on OTLP profiles: resource attributes, sample labels (the dictionary's
//! attribute table, shared by every profile of the request), and dropping by selector.

use spanprof_format::otlp::{any_value, AnyValue, ProfilesData};

use super::{hash_value, push_label, set_attribute, value_text, Action};

// One arm per rule kind, each short: split, they would each repeat the walk over the profiles.
#[allow(clippy::too_many_lines)]
pub(super) fn apply(action: &Action, data: &mut ProfilesData) {
    match action {
        Action::SetResource {
            key,
            value,
            overwrite,
        } => {
            for r in &mut data.resource_profiles {
                let resource = r.resource.get_or_insert_with(Default::default);
                set_attribute(&mut resource.attributes, key, value, *overwrite);
            }
        }
        Action::RenameLabel { from, to } => {
            let Some(d) = data.dictionary.as_mut() else {
                return;
            };
            let from_ix = d.string_table.iter().position(|s| s == from);
            let Some(from_ix) = from_ix else { return };
            let to_ix = match d.string_table.iter().position(|s| s == to) {
                Some(i) => i,
                None => {
                    d.string_table.push(to.clone());
                    d.string_table.len() - 1
                }
            };
            for a in &mut d.attribute_table {
                if a.key_strindex as usize == from_ix {
                    a.key_strindex = to_ix as i32;
                }
            }
        }
        Action::DropLabel(label) => {
            let Some(d) = data.dictionary.as_ref() else {
                return;
            };
            let gone: Vec<bool> = d
                .attribute_table
                .iter()
                .map(|a| d.string_table.get(a.key_strindex as usize) == Some(label))
                .collect();
            if !gone.contains(&true) {
                return;
            }
            let keep = |i: &i32| !gone.get(*i as usize).copied().unwrap_or(false);
            for p in data
                .resource_profiles
                .iter_mut()
                .flat_map(|r| &mut r.scope_profiles)
                .flat_map(|s| &mut s.profiles)
            {
                p.attribute_indices.retain(keep);
                for s in &mut p.samples {
                    s.attribute_indices.retain(keep);
                }
            }
        }
        Action::HashLabel(label) => {
            let Some(d) = data.dictionary.as_mut() else {
                return;
            };
            let Some(key_ix) = d.string_table.iter().position(|s| s == label) else {
                return;
            };
            for a in &mut d.attribute_table {
                if a.key_strindex as usize == key_ix {
                    let hashed = hash_value(&value_text(a.value.as_ref()));
                    a.value = Some(AnyValue {
                        value: Some(any_value::Value::StringValue(hashed)),
                    });
                }
            }
        }
        Action::DropProfiles(selector) => {
            let d = data.dictionary.clone().unwrap_or_default();
            for r in &mut data.resource_profiles {
                let mut base = Vec::new();
                for kv in r.resource.iter().flat_map(|r| &r.attributes) {
                    push_label(&mut base, &kv.key, value_text(kv.value.as_ref()));
                }
                for s in &mut r.scope_profiles {
                    s.profiles.retain(|p| {
                        let mut labels = base.clone();
                        for &i in &p.attribute_indices {
                            let Some(a) = d.attribute_table.get(i as usize) else {
                                continue;
                            };
                            let key = d
                                .string_table
                                .get(a.key_strindex as usize)
                                .cloned()
                                .unwrap_or_default();
                            push_label(&mut labels, &key, value_text(a.value.as_ref()));
                        }
                        !selector.matches(&labels)
                    });
                }
                r.scope_profiles.retain(|s| !s.profiles.is_empty());
            }
            data.resource_profiles
                .retain(|r| !r.scope_profiles.is_empty());
        }
        Action::DropSpans(_) => {}
    }
}
