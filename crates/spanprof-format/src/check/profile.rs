//! Rules on the message tree: resource → scope → profile → sample.

use std::fmt::{self, Display};

use super::attributes::{walk_key_values, RangeCheck};
use super::{CheckOptions, Checker, Elem, Field, Index, Table};
use crate::otlp::{Profile, ProfilesData, Sample, ValueType};

/// Bytes in a `profile_id`.
const PROFILE_ID_LEN: usize = 16;

pub(super) fn check(c: &mut Checker<'_>, data: &ProfilesData, opts: &CheckOptions) {
    if data.resource_profiles.is_empty() {
        c.push(
            "resource_profiles",
            "empty (at least one ResourceProfiles is required)",
        );
    }
    for (r, rp) in data.resource_profiles.iter().enumerate() {
        let rpath = Index("resource_profiles", r);
        if let Some(resource) = &rp.resource {
            let owner = Field(&rpath, "resource");
            walk_key_values(
                &mut RangeCheck(c),
                &owner,
                "attributes",
                &resource.attributes,
            );
        }
        if rp.scope_profiles.is_empty() {
            c.push(
                Field(&rpath, "scope_profiles"),
                "empty (at least one ScopeProfiles is required)",
            );
        }
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            let spath = Elem(&rpath, "scope_profiles", s);
            if let Some(scope) = &sp.scope {
                let owner = Field(&spath, "scope");
                walk_key_values(&mut RangeCheck(c), &owner, "attributes", &scope.attributes);
            }
            if sp.profiles.is_empty() {
                c.push(
                    Field(&spath, "profiles"),
                    "empty (at least one Profile is required)",
                );
            }
            for (p, profile) in sp.profiles.iter().enumerate() {
                check_profile(c, &Elem(&spath, "profiles", p), profile, opts);
            }
        }
    }
}

fn check_profile(c: &mut Checker<'_>, path: &dyn Display, p: &Profile, opts: &CheckOptions) {
    c.attribute_list(path, &p.attribute_indices);
    value_type(c, &Field(path, "sample_type"), p.sample_type.as_ref());
    value_type(c, &Field(path, "period_type"), p.period_type.as_ref());

    if !p.profile_id.is_empty() {
        let id_path = Field(path, "profile_id");
        if p.profile_id.len() != PROFILE_ID_LEN {
            c.push(
                id_path,
                format!("{} bytes (must be {PROFILE_ID_LEN})", p.profile_id.len()),
            );
        } else if p.profile_id.iter().all(|&b| b == 0) {
            c.push(id_path, "all zero (leave it empty when there is no id)");
        }
    }
    match (
        p.original_payload_format.is_empty(),
        p.original_payload.is_empty(),
    ) {
        (false, true) => c.push(
            Field(path, "original_payload_format"),
            "set without original_payload (set both or neither)",
        ),
        (true, false) => c.push(
            Field(path, "original_payload"),
            "set without original_payload_format (set both or neither)",
        ),
        _ => {}
    }

    // The end may pass u64::MAX; u128 keeps the half-open window exact.
    let window = (
        u128::from(p.time_unix_nano),
        u128::from(p.time_unix_nano) + u128::from(p.duration_nano),
    );
    let mut reference: Option<(usize, Shape)> = None;
    for (i, sample) in p.samples.iter().enumerate() {
        let spath = Elem(path, "samples", i);
        check_sample(c, &spath, sample, window);
        let Some(shape) = Shape::of(sample) else {
            continue;
        };
        if !opts.sample_shapes {
            continue;
        }
        if shape == Shape::ValuesOnly && sample.values.len() != 1 {
            c.push(
                Field(&spath, "values"),
                format!(
                    "{} values without timestamps (exactly one is required)",
                    sample.values.len()
                ),
            );
        }
        match reference {
            None => reference = Some((i, shape)),
            Some((first, expected)) if expected != shape => c.push(
                &spath,
                format!("shape is {shape} but samples[{first}] is {expected} (all must match)"),
            ),
            Some(_) => {}
        }
    }
}

fn value_type(c: &mut Checker<'_>, path: &dyn Display, vt: Option<&ValueType>) {
    // A missing ValueType reads as indices 0, which are always valid.
    if let Some(vt) = vt {
        c.index(
            &Field(path, "type_strindex"),
            vt.type_strindex,
            Table::String,
        );
        c.index(
            &Field(path, "unit_strindex"),
            vt.unit_strindex,
            Table::String,
        );
    }
}

fn check_sample(c: &mut Checker<'_>, path: &dyn Display, s: &Sample, window: (u128, u128)) {
    c.index(&Field(path, "stack_index"), s.stack_index, Table::Stack);
    c.attribute_list(path, &s.attribute_indices);
    c.index(&Field(path, "link_index"), s.link_index, Table::Link);

    // Proto MUSTs, checked whatever `sample_shapes` says.
    let (values, timestamps) = (s.values.len(), s.timestamps_unix_nano.len());
    if values == 0 && timestamps == 0 {
        c.push(
            path,
            "no values and no timestamps (at least one is required)",
        );
    } else if values != 0 && timestamps != 0 && values != timestamps {
        c.push(
            path,
            format!("{values} values but {timestamps} timestamps (must be equal)"),
        );
    }

    let (start, end) = window;
    let mut outside = s
        .timestamps_unix_nano
        .iter()
        .enumerate()
        .filter(|(_, &ts)| !(start..end).contains(&u128::from(ts)));
    if let Some((j, ts)) = outside.next() {
        let more = outside.count();
        let tail = if more > 0 {
            format!(" ({more} more in this sample)")
        } else {
            String::new()
        };
        c.push(
            Elem(path, "timestamps_unix_nano", j),
            format!("{ts} outside the profile window [{start}, {end}){tail}"),
        );
    }
}

/// The three sample shapes of the proto's `Sample` comment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    ValuesOnly,
    TimestampsOnly,
    Both,
}

impl Shape {
    fn of(s: &Sample) -> Option<Shape> {
        match (s.values.is_empty(), s.timestamps_unix_nano.is_empty()) {
            (false, true) => Some(Shape::ValuesOnly),
            (true, false) => Some(Shape::TimestampsOnly),
            (false, false) => Some(Shape::Both),
            (true, true) => None,
        }
    }
}

impl Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::ValuesOnly => "values only",
            Shape::TimestampsOnly => "timestamps only",
            Shape::Both => "values and timestamps",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{assert_only, assert_only_with, profile, valid, P};
    use super::super::{check, CheckOptions};
    use crate::otlp::{Sample, ValueType};

    fn sample(values: Vec<i64>, timestamps: Vec<u64>) -> Sample {
        Sample {
            stack_index: 1,
            values,
            timestamps_unix_nano: timestamps,
            ..Sample::default()
        }
    }

    #[test]
    fn profile_attribute_index_out_of_range() {
        let mut data = valid();
        profile(&mut data).attribute_indices = vec![1, 7];
        assert_only(
            &data,
            &format!("{P}.attribute_indices[1]"),
            "7 out of range (attribute_table has 2 entries)",
        );
    }

    #[test]
    fn profile_attribute_keys_unique() {
        let mut data = valid();
        profile(&mut data).attribute_indices = vec![1, 1];
        assert_only(
            &data,
            &format!("{P}.attribute_indices[1]"),
            "duplicate key \"thread.id\" (also at attribute_indices[0])",
        );
    }

    #[test]
    fn sample_attribute_keys_unique() {
        let mut data = valid();
        let d = super::super::fixture::dict(&mut data);
        let mut other = d.attribute_table[1].clone();
        other.value = None;
        d.attribute_table.push(other);
        profile(&mut data).samples[0].attribute_indices = vec![1, 2];
        assert_only_with(
            &data,
            &CheckOptions::default(),
            &format!("{P}.samples[0].attribute_indices[1]"),
            "duplicate key \"thread.id\"",
        );
    }

    #[test]
    fn sample_type_strindex_out_of_range() {
        let mut data = valid();
        profile(&mut data).sample_type = Some(ValueType {
            type_strindex: 1,
            unit_strindex: 40,
        });
        assert_only(
            &data,
            &format!("{P}.sample_type.unit_strindex"),
            "40 out of range (string_table has",
        );
    }

    #[test]
    fn period_type_strindex_out_of_range() {
        let mut data = valid();
        profile(&mut data).period_type = Some(ValueType {
            type_strindex: -2,
            unit_strindex: 2,
        });
        assert_only(
            &data,
            &format!("{P}.period_type.type_strindex"),
            "-2 out of range",
        );
    }

    #[test]
    fn stack_index_out_of_range() {
        let mut data = valid();
        profile(&mut data).samples[0].stack_index = 2;
        assert_only(
            &data,
            &format!("{P}.samples[0].stack_index"),
            "2 out of range (stack_table has 2 entries)",
        );
    }

    #[test]
    fn link_index_out_of_range() {
        let mut data = valid();
        profile(&mut data).samples[0].link_index = 9;
        assert_only(
            &data,
            &format!("{P}.samples[0].link_index"),
            "9 out of range (link_table has 2 entries)",
        );
    }

    #[test]
    fn sample_attribute_index_out_of_range() {
        let mut data = valid();
        profile(&mut data).samples[0].attribute_indices = vec![-1];
        assert_only(
            &data,
            &format!("{P}.samples[0].attribute_indices[0]"),
            "-1 out of range",
        );
    }

    #[test]
    fn timestamp_outside_window() {
        let mut data = valid();
        let p = profile(&mut data);
        p.samples = vec![sample(vec![1, 1, 1], vec![1000, 2000, 2500])];
        assert_only(
            &data,
            &format!("{P}.samples[0].timestamps_unix_nano[1]"),
            "2000 outside the profile window [1000, 2000) (1 more in this sample)",
        );
    }

    #[test]
    fn timestamps_fail_when_profile_has_no_window() {
        let mut data = valid();
        let p = profile(&mut data);
        p.time_unix_nano = 0;
        p.duration_nano = 0;
        p.samples = vec![sample(vec![], vec![5])];
        assert_only(
            &data,
            &format!("{P}.samples[0].timestamps_unix_nano[0]"),
            "5 outside the profile window [0, 0)",
        );
    }

    #[test]
    fn window_end_past_u64_max() {
        let mut data = valid();
        let p = profile(&mut data);
        p.time_unix_nano = u64::MAX - 1;
        p.duration_nano = u64::MAX;
        p.samples = vec![sample(vec![], vec![u64::MAX])];
        assert_eq!(check(&data, &CheckOptions::default()), Vec::new());
    }

    #[test]
    fn sample_without_values_or_timestamps() {
        let mut data = valid();
        profile(&mut data).samples.push(sample(vec![], vec![]));
        // A proto MUST, so reported even with shape checks off.
        let opts = CheckOptions {
            sample_shapes: false,
            ..CheckOptions::default()
        };
        assert_only_with(
            &data,
            &opts,
            &format!("{P}.samples[1]"),
            "no values and no timestamps (at least one is required)",
        );
    }

    #[test]
    fn values_and_timestamps_lengths_differ() {
        let mut data = valid();
        profile(&mut data).samples = vec![sample(vec![1, 2], vec![1000])];
        assert_only(
            &data,
            &format!("{P}.samples[0]"),
            "2 values but 1 timestamps (must be equal)",
        );
    }

    #[test]
    fn values_only_needs_exactly_one_value() {
        let mut data = valid();
        profile(&mut data).samples[0].values = vec![1, 2];
        assert_only(
            &data,
            &format!("{P}.samples[0].values"),
            "2 values without timestamps (exactly one is required)",
        );
        let opts = CheckOptions {
            sample_shapes: false,
            ..CheckOptions::default()
        };
        assert_eq!(check(&data, &opts), Vec::new());
    }

    #[test]
    fn samples_share_the_first_shape() {
        let mut data = valid();
        let p = profile(&mut data);
        p.samples.push(sample(vec![], vec![1500]));
        p.samples.push(sample(vec![3], vec![1600]));
        let found = check(&data, &CheckOptions::default());
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                format!("{P}.samples[1]: shape is timestamps only but samples[0] is values only (all must match)"),
                format!("{P}.samples[2]: shape is values and timestamps but samples[0] is values only (all must match)"),
            ]
        );
        let opts = CheckOptions {
            sample_shapes: false,
            ..CheckOptions::default()
        };
        assert_eq!(check(&data, &opts), Vec::new());
    }

    #[test]
    fn profile_id_length() {
        let mut data = valid();
        profile(&mut data).profile_id = vec![1; 8];
        assert_only(&data, &format!("{P}.profile_id"), "8 bytes (must be 16)");
    }

    #[test]
    fn profile_id_all_zero() {
        let mut data = valid();
        profile(&mut data).profile_id = vec![0; 16];
        assert_only(&data, &format!("{P}.profile_id"), "all zero");
    }

    #[test]
    fn original_payload_pairing() {
        let mut data = valid();
        profile(&mut data).original_payload_format = "pprof".into();
        assert_only(
            &data,
            &format!("{P}.original_payload_format"),
            "set without original_payload",
        );
        let p = profile(&mut data);
        p.original_payload_format.clear();
        p.original_payload = vec![1, 2, 3];
        assert_only(
            &data,
            &format!("{P}.original_payload"),
            "set without original_payload_format",
        );
        profile(&mut data).original_payload_format = "pprof".into();
        assert_eq!(check(&data, &CheckOptions::default()), Vec::new());
    }
}
