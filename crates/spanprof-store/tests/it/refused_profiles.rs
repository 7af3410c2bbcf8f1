//! A profile that names what its dictionary does not hold is refused by name; the other
//! profiles of the same call are stored, and labels from valid attributes become series.

use crate::common;

use common::{sample, DictionaryBuilder, S1, T1};
use spanprof_format::otlp::{
    any_value, string_kv, AnyValue, KeyValueAndUnit, ProfilesData, Resource,
};
use spanprof_store::store::{Selection, SeriesLimits, Store, StoreConfig};

#[test]
fn a_sample_attribute_out_of_range_refuses_only_its_profile() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let key = b.string("region");
    // Entry 0 is the builder's default; entry 1 is the only other.
    b.dict.attribute_table.push(KeyValueAndUnit {
        key_strindex: key,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue("eu".into())),
        }),
        unit_strindex: 0,
    });
    let labelled = |attrs: Vec<i32>, value| {
        let mut s = sample(stack, link, &[value]);
        s.attribute_indices = attrs;
        s
    };
    let good = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![labelled(vec![1], 10), labelled(vec![], 5)],
    );
    let past_the_end = b.profile(
        ("alloc_space", "bytes"),
        ("space", "bytes"),
        vec![labelled(vec![1], 1), labelled(vec![2], 1)],
    );
    let negative = b.profile(
        ("inuse_space", "bytes"),
        ("space", "bytes"),
        vec![labelled(vec![-1], 1)],
    );
    let data = b.finish(vec![vec![good, past_the_end, negative]]);

    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!((report.profiles, report.rejected_profiles), (1, 2));
    assert_eq!(
        report.problems,
        [
            "resource_profiles[0].scope_profiles[0].profiles[1]: samples[1]: attribute index 2 out of range",
            "resource_profiles[0].scope_profiles[0].profiles[2]: samples[0]: attribute index -1 out of range",
        ]
    );
    // The stored profile kept its label: one series per attribute set.
    let total = |selector: Option<&str>| {
        let sel = Selection {
            profile_type: Some("cpu".into()),
            label_selector: selector.map(String::from),
            ..Default::default()
        };
        store.flame_graph(&sel).unwrap().0.total()
    };
    assert_eq!(total(None), 15);
    assert_eq!(total(Some("{region=\"eu\"}")), 10);
}

/// A profile dated past the year 2262 (times are kept as signed nanoseconds) is refused,
/// naming its times; it was stored as a negative time, acknowledged and never found.
#[test]
fn a_profile_past_the_latest_time_kept_is_refused() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let mut profiles = Vec::new();
    for (time, duration) in [
        (1 << 63, 0),
        (u64::MAX, 0),
        (i64::MAX as u64 - 5, 10),
        (1_700_000_000_000_000_000, 10_000_000_000),
    ] {
        let mut p = b.profile(
            ("cpu", "nanoseconds"),
            ("cpu", "nanoseconds"),
            vec![sample(stack, link, &[10])],
        );
        p.time_unix_nano = time;
        p.duration_nano = duration;
        profiles.push(p);
    }
    let data = b.finish(vec![profiles]);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(
        (report.profiles, report.rejected_profiles),
        (1, 3),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems[0].contains("time_unix_nano 9223372036854775808 and duration_nano 0 end past the latest time the store keeps"),
        "{}",
        report.problems[0]
    );
}

/// A profile whose samples split into more series than the limit is refused before any
/// series past it is made, and the report says which request of the call it came from; the
/// other requests of the call are stored. Span ids are links, not labels: a span per sample
/// makes no series.
#[test]
fn a_profile_past_the_series_limit_is_refused_naming_its_request() {
    let request = |regions: usize| {
        let mut b = DictionaryBuilder::new();
        let main = b.location(&["main.main"]);
        let stack = b.stack(&[main]);
        let key = b.string("region");
        let samples = (0..regions)
            .map(|r| {
                b.dict.attribute_table.push(KeyValueAndUnit {
                    key_strindex: key,
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(format!("r{r}"))),
                    }),
                    unit_strindex: 0,
                });
                let span = [r as u8 + 1; 8];
                let link = b.link(&T1, &span);
                let mut s = sample(stack, link, &[1]);
                s.attribute_indices = vec![b.dict.attribute_table.len() as i32 - 1];
                s
            })
            .collect();
        let p = b.profile(("cpu", "nanoseconds"), ("cpu", "nanoseconds"), samples);
        b.finish(vec![vec![p]])
    };
    let (within, past) = (request(3), request(4));
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        max_profile_series: 3,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    let report = store.ingest(&[&within, &past], Vec::new()).unwrap();
    assert_eq!((report.profiles, report.rejected_profiles), (1, 1));
    assert_eq!(
        report.problems,
        ["resource_profiles[0].scope_profiles[0].profiles[0]: the profile has 4 series (distinct sample label sets), more than the limit of 3 (server.max_profile_series)"]
    );
    assert_eq!(report.problem_sources, [1]);
    // The refused request's first three label sets are the stored one's, and it made none
    // past the limit.
    assert_eq!(store.stats().series, 3);
}

/// A one-sample profile of `sample_type` whose resource carries `labels`.
fn labelled(labels: &[(&str, &str)], sample_type: &str) -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let p = b.profile(
        (sample_type, "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(stack, link, &[10])],
    );
    let mut data = b.finish(vec![vec![p]]);
    data.resource_profiles[0].resource = Some(Resource {
        attributes: labels.iter().map(|(k, v)| string_kv(k, v)).collect(),
        ..Default::default()
    });
    data
}

/// A series' labels past a limit refuse the profile, as over a limit, naming the label and
/// the setting; nothing of it is stored, and no series is made for it.
#[test]
fn series_label_limits_refuse_the_profile_naming_the_label() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        series: SeriesLimits {
            max_series: 0,
            max_labels: 3,
            max_name_bytes: 12,
            max_value_bytes: 48,
        },
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    let within = labelled(&[("env", "prod"), ("zone", "a")], "cpu");
    let report = store.ingest(&[&within], Vec::new()).unwrap();
    assert_eq!(
        (report.profiles, report.rejected_profiles),
        (1, 0),
        "{:?}",
        report.problems
    );
    let long_value = "v".repeat(49);
    let long_type = "t".repeat(48);
    let cases: [(ProfilesData, &str); 4] = [
        (
            labelled(&[("env", "prod"), ("zone", "a"), ("rack", "r1")], "cpu"),
            "a series of the profile has 4 labels, more than the limit of 3 \
             (server.max_label_names_per_series): env, rack, service_name, zone",
        ),
        (
            labelled(&[("hostname_long", "h")], "cpu"),
            "label name \"hostname_long\" is 13 bytes, more than the limit of 12 \
             (server.max_label_name_length)",
        ),
        (
            labelled(&[("env", &long_value)], "cpu"),
            "the value of label \"env\" is 49 bytes, more than the limit of 48 \
             (server.max_label_value_length)",
        ),
        (
            labelled(&[], &long_type),
            "bytes, more than the limit of 48 (server.max_label_value_length)",
        ),
    ];
    for (data, want) in &cases {
        let report = store.ingest(&[data], Vec::new()).unwrap();
        assert_eq!(
            (
                report.profiles,
                report.rejected_profiles,
                report.limited_profiles
            ),
            (0, 1, 1),
            "{want}"
        );
        assert!(report.problems[0].contains(want), "{:?}", report.problems);
    }
    let problems = store.ingest(&[&cases[3].0], Vec::new()).unwrap().problems;
    assert!(
        problems[0].contains("the profile type is 88 bytes"),
        "{problems:?}"
    );
    assert_eq!(store.stats().series, 1);
}

/// Past `storage.max_series`, a profile that would make a new series is refused naming the
/// setting and the series; profiles of series already there are stored. The count is the
/// store's, so it holds after reopening too.
#[test]
fn past_the_series_limit_only_known_series_are_stored_also_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        series: SeriesLimits {
            max_series: 2,
            ..SeriesLimits::default()
        },
        ..StoreConfig::new(dir.path())
    };
    let env = |e: &str| labelled(&[("env", e)], "cpu");
    let stored = |store: &Store, e: &str| {
        let r = store.ingest(&[&env(e)], Vec::new()).unwrap();
        assert_eq!(r.rejected_profiles, r.limited_profiles);
        (r.profiles, r.problems)
    };
    let refused = |e: &str| {
        (
            0,
            vec![format!(
                "resource_profiles[0].scope_profiles[0].profiles[0]: the store holds 2 series, \
                 its limit (storage.max_series), and the profile would make another: \
                 {{env={e:?}, service_name=\"unknown_service\"}}"
            )],
        )
    };
    {
        let (store, _) = Store::open(cfg()).unwrap();
        assert_eq!(stored(&store, "a"), (1, vec![]));
        assert_eq!(stored(&store, "b"), (1, vec![]));
        assert_eq!(stored(&store, "c"), refused("c"));
        assert_eq!(stored(&store, "a"), (1, vec![]));
    }
    let (store, _) = Store::open(cfg()).unwrap();
    assert_eq!(stored(&store, "d"), refused("d"));
    assert_eq!(stored(&store, "b"), (1, vec![]));
    assert_eq!(store.stats().series, 2);
    let sel = Selection {
        profile_type: Some("cpu".into()),
        label_selector: Some(r#"{env="a"}"#.into()),
        ..Default::default()
    };
    assert_eq!(store.flame_graph(&sel).unwrap().0.total(), 20);
}

/// Series whose data retention deleted are forgotten: they no longer count against
/// `storage.max_series`, nor list as profile types, and a profile with their labels makes a
/// new series. That holds after reopening, from a snapshot written after they were forgotten
/// (they keep their ids in it, without labels) and from one written before.
#[test]
fn series_whose_data_retention_deleted_are_forgotten_and_free_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        // Every sealed segment goes: only the active one's data is kept.
        retention_bytes: Some(1),
        series: SeriesLimits {
            max_series: 2,
            ..SeriesLimits::default()
        },
        ..StoreConfig::new(dir.path())
    };
    let ingest = |store: &Store, env: &str, sample_type: &str| {
        let r = store
            .ingest(&[&labelled(&[("env", env)], sample_type)], Vec::new())
            .unwrap();
        (r.profiles, r.new_series)
    };
    let types = |store: &Store| -> Vec<String> {
        store
            .profile_types(None)
            .iter()
            .map(|t| t.sample_type.clone())
            .collect()
    };
    {
        let (store, _) = Store::open(cfg()).unwrap();
        assert_eq!(ingest(&store, "a", "old_type"), (1, 1));
        store.rotate().unwrap();
        assert_eq!(ingest(&store, "b", "cpu"), (1, 1));
        assert_eq!(ingest(&store, "c", "cpu"), (0, 0), "the limit is reached");
        assert_eq!(types(&store), ["cpu", "old_type"]);
        // Deletes the sealed segment, and with it every block of series a.
        assert_eq!(store.enforce_retention(0).unwrap(), 1);
        assert_eq!(store.stats().series, 1);
        assert_eq!(types(&store), ["cpu"]);
        assert_eq!(ingest(&store, "c", "cpu"), (1, 1), "room again");
        // The same labels as a forgotten series: a new one (and the store is full now).
        assert_eq!(ingest(&store, "a", "old_type"), (0, 0));
        assert_eq!(
            ingest(&store, "b", "cpu"),
            (1, 0),
            "b and c are still known"
        );
        // The next segment's snapshot holds series a without its labels.
        store.rotate().unwrap();
        assert_eq!(ingest(&store, "b", "cpu"), (1, 0));
    }
    let (store, _) = Store::open(cfg()).unwrap();
    assert_eq!(store.stats().series, 2);
    assert_eq!(types(&store), ["cpu"]);
    assert_eq!(
        ingest(&store, "a", "old_type"),
        (0, 0),
        "still full: b and c"
    );
    // A new segment (its snapshot has b and c), only c in it; then retention deletes the
    // segment of b's last block. Reopened from that snapshot, written before b was
    // forgotten, b is forgotten on opening.
    store.rotate().unwrap();
    assert_eq!(ingest(&store, "c", "cpu"), (1, 0));
    assert!(store.enforce_retention(0).unwrap() >= 1);
    assert_eq!(store.stats().series, 1);
    drop(store);
    let (store, _) = Store::open(cfg()).unwrap();
    let sel = |env: &str| Selection {
        label_selector: Some(format!("{{env=\"{env}\"}}")),
        ..Default::default()
    };
    assert_eq!(store.flame_graph(&sel("c")).unwrap().0.total(), 10);
    assert_eq!(store.flame_graph(&sel("b")).unwrap().0.total(), 0);
    assert_eq!(store.stats().series, 1, "only c has data");
    assert_eq!(ingest(&store, "a", "old_type"), (1, 1));
}

/// A one-sample profile whose only frame is function `name`.
fn profile_in(name: &str) -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let f = b.location(&[name]);
    let stack = b.stack(&[f]);
    let link = b.link(&T1, &S1);
    let p = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(stack, link, &[10])],
    );
    b.finish(vec![vec![p]])
}

/// Past `storage.max_symbols_size`, a profile that would add symbols is refused as over a
/// limit, and nothing it interned stays; profiles of known symbols are still stored. The
/// count is rebuilt on opening.
#[test]
fn past_the_symbols_limit_profiles_adding_symbols_are_refused_and_leave_none() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        max_symbol_bytes: 20_000,
        ..StoreConfig::new(dir.path())
    };
    let name = |i: usize| format!("pkg.f{i}_{}", "x".repeat(1_000));
    let (store, _) = Store::open(cfg()).unwrap();
    let mut stored = 0;
    let refused = loop {
        let r = store
            .ingest(&[&profile_in(&name(stored))], Vec::new())
            .unwrap();
        if r.rejected_profiles > 0 {
            assert_eq!(r.limited_profiles, 1);
            break r.problems;
        }
        stored += 1;
    };
    // About 1 KB each: the twentieth or so is past 20 KB.
    assert!((15..20).contains(&stored), "{stored}");
    assert!(
        refused[0].contains("more than the limit of 20000 (storage.max_symbols_size)"),
        "{refused:?}"
    );
    let symbols = store.stats().symbols;
    let bytes = store.stats().symbol_bytes;
    assert!((19_000..=20_000).contains(&bytes), "{bytes}");
    // Nothing of it stayed, and the next one is refused the same way.
    assert_eq!(
        store
            .ingest(&[&profile_in(&name(stored + 1))], Vec::new())
            .unwrap()
            .limited_profiles,
        1
    );
    assert_eq!(store.stats().symbols, symbols);
    // Known symbols: stored.
    let r = store.ingest(&[&profile_in(&name(0))], Vec::new()).unwrap();
    assert_eq!((r.profiles, r.rejected_profiles), (1, 0));
    drop(store);
    let (store, _) = Store::open(cfg()).unwrap();
    assert_eq!(store.stats().symbols, symbols);
    assert_eq!(store.stats().symbol_bytes, bytes);
    let r = store
        .ingest(&[&profile_in(&name(stored))], Vec::new())
        .unwrap();
    assert_eq!(r.limited_profiles, 1, "{:?}", r.problems);
    let sel = Selection {
        profile_type: Some("cpu".into()),
        ..Default::default()
    };
    assert_eq!(
        store.flame_graph(&sel).unwrap().0.total(),
        10 * (stored as u64 + 1)
    );
}

/// A refused profile leaves no series and, when its service is new, no service: both are
/// kept for good (series until retention), and refused profiles must not grow the store.
#[test]
fn a_refused_profile_makes_no_series_and_no_service() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || StoreConfig {
        max_symbol_bytes: 5_000,
        ..StoreConfig::new(dir.path())
    };
    let in_service = |service: &str, function: &str| {
        let mut data = profile_in(function);
        data.resource_profiles[0].resource = Some(Resource {
            attributes: vec![string_kv("service.name", service)],
            ..Default::default()
        });
        data
    };
    let (store, _) = Store::open(cfg()).unwrap();
    let r = store
        .ingest(&[&in_service("known", "main.main")], Vec::new())
        .unwrap();
    assert_eq!((r.profiles, r.rejected_profiles), (1, 0));
    let before = store.stats();
    assert_eq!((before.services, before.series), (1, 1));
    // Its series is made before the symbols are counted against the limit.
    let big = format!("pkg.{}", "x".repeat(6_000));
    for service in ["known", "new"] {
        let r = store
            .ingest(&[&in_service(service, &big)], Vec::new())
            .unwrap();
        assert_eq!(r.limited_profiles, 1, "{service}: {:?}", r.problems);
        let after = store.stats();
        assert_eq!(
            (after.services, after.series, after.symbols),
            (before.services, before.series, before.symbols),
            "{service}"
        );
    }
    drop(store);
    let (store, _) = Store::open(cfg()).unwrap();
    let after = store.stats();
    assert_eq!((after.services, after.series), (1, 1));
    // The service can come later, its series too.
    let r = store
        .ingest(&[&in_service("new", "main.main")], Vec::new())
        .unwrap();
    assert_eq!((r.profiles, r.rejected_profiles), (1, 0));
    assert_eq!(store.services(0, 0), ["known", "new"]);
}

/// A link whose ids have the right lengths but name no span (all zero) is refused saying
/// so, not that its ids have the wrong lengths.
#[test]
fn a_link_to_the_all_zero_span_is_refused_naming_it() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &[0; 8]);
    let p = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(stack, link, &[10])],
    );
    let data = b.finish(vec![vec![p]]);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(
        report.problems,
        [
            "resource_profiles[0].scope_profiles[0].profiles[0]: samples[0]: link 1 has an \
          all-zero span id (a sample without a span has link_index 0)"
        ]
    );
}

/// A profile whose values add up past 2^53 (one sample of `i64::MAX` made its service's totals
/// saturate, and the real values beside it vanished from view), or with a negative value, is
/// refused naming the sample; the profiles beside it are stored, and the totals are theirs.
#[test]
fn profiles_with_values_past_any_real_one_or_negative_are_refused() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let link = b.link(&T1, &S1);
    let cpu = ("cpu", "nanoseconds");
    let good = b.profile(
        cpu,
        cpu,
        vec![sample(stack, link, &[7]), sample(stack, 0, &[5])],
    );
    let huge = b.profile(
        cpu,
        cpu,
        vec![sample(stack, 0, &[5]), sample(stack, link, &[i64::MAX])],
    );
    let past = b.profile(
        cpu,
        cpu,
        vec![
            sample(stack, link, &[1 << 52]),
            sample(stack, link, &[(1 << 52) + 1]),
        ],
    );
    let negative = b.profile(cpu, cpu, vec![sample(stack, link, &[-3])]);
    let at_most = b.profile(
        cpu,
        cpu,
        vec![sample(stack, 0, &[1 << 52]), sample(stack, 0, &[1 << 52])],
    );
    let data = b.finish(vec![vec![good, huge, past, negative, at_most]]);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(
        (report.profiles, report.rejected_profiles),
        (2, 3),
        "{report:?}"
    );
    let at = |i: usize| format!("resource_profiles[0].scope_profiles[0].profiles[{i}]: ");
    assert_eq!(
        report.problems,
        [
            format!(
                "{}samples[1]: the profile's values add up to more than 9007199254740992 \
                 (2^53), more than any real profile holds",
                at(1)
            ),
            format!(
                "{}samples[1]: the profile's values add up to more than 9007199254740992 \
                 (2^53), more than any real profile holds",
                at(2)
            ),
            format!(
                "{}samples[0].values: -3 is negative (a profile's values count or measure what \
                 happened)",
                at(3)
            ),
        ]
    );
    let sel = Selection {
        profile_type: Some("cpu".into()),
        ..Default::default()
    };
    let (tree, _) = store.flame_graph(&sel).unwrap();
    assert_eq!(tree.total(), 12 + (1 << 53));
}

/// A `:` inside a part of the profile type (it separates the parts of a type id) is refused:
/// `a:b:c` as a name made an id that named another type, and that no query could name.
#[test]
fn a_profile_type_part_with_a_colon_is_refused() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main.main"]);
    let stack = b.stack(&[main]);
    let cpu = ("cpu", "nanoseconds");
    let good = b.profile(cpu, cpu, vec![sample(stack, 0, &[7])]);
    let colon = b.profile(("cpu:x", "nanoseconds"), cpu, vec![sample(stack, 0, &[5])]);
    let data = b.finish(vec![vec![good, colon]]);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!((report.profiles, report.rejected_profiles), (1, 1));
    assert!(
        report.problems[0].contains("\"cpu:x\", a part of the profile type, has a ':' in it"),
        "{:?}",
        report.problems
    );
    assert_eq!(store.profile_types(None).len(), 1);
}

/// A request stored all or none (a Pyroscope upload, answered 200 or an error) leaves nothing
/// of itself when one of its profiles is refused: a pprof whose cpu type was refused left its
/// sample count type stored beside a 400. The requests beside it are stored as they are.
#[test]
fn a_request_stored_all_or_none_leaves_nothing_when_one_profile_is_refused() {
    use spanprof_store::store::{Request, Storing};
    let request = |service: &str, function: &str, cpu: i64| {
        let mut b = DictionaryBuilder::new();
        let main = b.location(&[function]);
        let stack = b.stack(&[main]);
        let count = b.profile(
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            vec![sample(stack, 0, &[1])],
        );
        let time = b.profile(
            ("cpu", "nanoseconds"),
            ("cpu", "nanoseconds"),
            vec![sample(stack, 0, &[cpu])],
        );
        let mut data = b.finish(vec![vec![count, time]]);
        data.resource_profiles[0].resource = Some(Resource {
            attributes: vec![string_kv("service.name", service)],
            ..Default::default()
        });
        data
    };
    let (bad, good, partial) = (
        request("bad", "main.main", -5),
        request("good", "main.main", 7),
        request("partial", "main.main", -5),
    );
    // Refused for a service already there: the symbols it brought go too.
    let bad_good = request("good", "main.refused", -5);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let report = store
        .ingest_requests(
            &[
                Request {
                    data: &good,
                    storing: Storing::AllOrNone,
                },
                Request {
                    data: &bad,
                    storing: Storing::AllOrNone,
                },
                Request {
                    data: &partial,
                    storing: Storing::EachAlone,
                },
                Request {
                    data: &bad_good,
                    storing: Storing::AllOrNone,
                },
            ],
            Vec::new(),
        )
        .unwrap();
    assert_eq!(
        (report.profiles, report.rejected_profiles),
        (3, 5),
        "{report:?}"
    );
    assert_eq!(report.problem_sources, [1, 2, 3]);
    assert_eq!(store.services(0, 0), ["good", "partial"]);
    let of = |service: &str| Selection {
        service: Some(service.into()),
        ..Default::default()
    };
    assert!(store.series(&of("bad")).unwrap().is_empty());
    assert_eq!(store.series(&of("partial")).unwrap().len(), 1);
    assert_eq!(store.series(&of("good")).unwrap().len(), 2);
    // The symbols are those of the requests stored.
    let alone = tempfile::tempdir().unwrap();
    let (reference, _) = Store::open(StoreConfig::new(alone.path())).unwrap();
    reference.ingest(&[&good, &partial], Vec::new()).unwrap();
    assert_eq!(store.stats().symbols, reference.stats().symbols);
    // And after reopening: nothing of it was written.
    drop(store);
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    assert_eq!(store.services(0, 0), ["good", "partial"]);
    assert_eq!(store.stats().symbols, reference.stats().symbols);
}
