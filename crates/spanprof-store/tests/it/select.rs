//! Selecting samples by span, trace and profile type from hand-built OTLP data.

use crate::common;

use common::{checkout, sample, DictionaryBuilder, S1, S2, S3, S4, T1, T2, TICK_NS};
use spanprof_format::otlp::{Line, Location, ProfilesData};
use spanprof_store::{
    available_profile_types, for_each_selected_sample, span_totals, FlameTree, SampleSelector,
    SelectError, SelectionSummary, SpanTotal,
};

/// Every selected sample as (collapsed frames, value), in data order.
fn collect(
    data: &ProfilesData,
    selector: &SampleSelector,
) -> (Vec<(String, u64)>, SelectionSummary) {
    let mut out = Vec::new();
    let summary = for_each_selected_sample(data, selector, |frames, value| {
        out.push((frames.join(";"), value));
    })
    .unwrap();
    (out, summary)
}

fn cpu_of(span_ids: &[[u8; 8]], trace_id: Option<[u8; 16]>) -> u64 {
    let selector = SampleSelector {
        span_ids: span_ids.to_vec(),
        trace_id,
        profile_type: Some("cpu".into()),
    };
    FlameTree::from_profiles(&checkout(), &selector)
        .unwrap()
        .0
        .total()
}

const MS: u64 = 1_000_000;

#[test]
fn selects_by_span_trace_and_both() {
    assert_eq!(cpu_of(&[S1], None), 50 * MS);
    assert_eq!(cpu_of(&[S2], None), 25 * MS, "both scopes' cpu profiles");
    assert_eq!(cpu_of(&[S1, S3], None), 90 * MS);
    assert_eq!(cpu_of(&[], Some(T1)), 75 * MS);
    assert_eq!(cpu_of(&[], Some(T2)), 40 * MS);
    assert_eq!(cpu_of(&[S3], Some(T1)), 0, "span of another trace");
    assert_eq!(cpu_of(&[S1, S3], Some(T2)), 40 * MS);
    // No filter: every sample of the type, linked or not, bad link index included.
    assert_eq!(cpu_of(&[], None), 175 * MS);
}

#[test]
fn frames_are_root_first_with_inlined_callers_outside() {
    let selector = SampleSelector {
        span_ids: vec![S1],
        ..Default::default()
    };
    let (samples, summary) = collect(&checkout(), &selector);
    assert_eq!(
        samples,
        [
            (
                "main.main;net/http.(*conn).serve;net/http.HandlerFunc.ServeHTTP;\
                 github.com/acme/shop/cart.Checkout;github.com/acme/shop/cart.(*Cart).total"
                    .to_owned(),
                30 * MS
            ),
            (
                "main.main;net/http.(*conn).serve;net/http.HandlerFunc.ServeHTTP;\
                 encoding/json.Marshal;crypto/sha256.block"
                    .to_owned(),
                20 * MS
            ),
        ]
    );
    assert_eq!(summary.samples_selected, 2);
    assert_eq!(summary.samples_bad_stack, 1, "stack index 77");
    assert_eq!(summary.bad_indices, 2, "stack 77 and link 99");
}

#[test]
fn default_type_is_the_first_profile_of_each_scope() {
    let (samples, summary) = collect(&checkout(), &SampleSelector::default());
    let types: Vec<String> = summary.used_types.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        types,
        [
            "cpu:nanoseconds:cpu:nanoseconds",
            "alloc_space:bytes:space:bytes"
        ]
    );
    assert_eq!(samples.len(), 7, "6 good cpu samples + 1 alloc sample");
    assert_eq!(samples.last().unwrap().1, 4096);
    let available: Vec<String> = available_profile_types(&checkout())
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(
        available,
        [
            "cpu:nanoseconds:cpu:nanoseconds",
            "samples:count:cpu:nanoseconds",
            "alloc_space:bytes:space:bytes"
        ]
    );
}

#[test]
fn profile_type_forms_select_the_same_profiles() {
    for form in [
        "samples",
        "samples:count",
        "samples:count:cpu:nanoseconds",
        "process_cpu:samples:count:cpu:nanoseconds",
    ] {
        let selector = SampleSelector {
            profile_type: Some(form.into()),
            ..Default::default()
        };
        let (samples, _) = collect(&checkout(), &selector);
        let values: Vec<u64> = samples.iter().map(|s| s.1).collect();
        // Timestamps without values count one each.
        assert_eq!(values, [3, 2, 4, 5], "{form}");
    }
}

#[test]
fn unknown_profile_type_names_the_available_ones() {
    let selector = SampleSelector {
        profile_type: Some("memory:inuse_space:bytes:space:bytes".into()),
        ..Default::default()
    };
    let err = FlameTree::from_profiles(&checkout(), &selector).unwrap_err();
    assert!(
        matches!(err, SelectError::NoSuchProfileType { ref available, .. } if available.len() == 3)
    );
    assert_eq!(
        err.to_string(),
        "no profile of type memory:inuse_space:bytes:space:bytes; available: \
         cpu:nanoseconds:cpu:nanoseconds, samples:count:cpu:nanoseconds, \
         alloc_space:bytes:space:bytes"
    );
    let selector = SampleSelector {
        profile_type: Some("a:b:c".into()),
        ..Default::default()
    };
    assert!(matches!(
        FlameTree::from_profiles(&checkout(), &selector),
        Err(SelectError::InvalidProfileType { .. })
    ));
    assert_eq!(
        span_totals(&ProfilesData::default(), Some("cpu"))
            .unwrap_err()
            .to_string(),
        "no profile of type cpu; available: (none)"
    );
}

#[test]
fn out_of_range_indices_are_skipped_and_counted() {
    let mut b = DictionaryBuilder::new();
    let main = b.location(&["main"]);
    let no_function = b.push_location(Location {
        address: 0xdead,
        lines: vec![Line {
            function_index: 500,
            ..Default::default()
        }],
        ..Default::default()
    });
    let bad_name = {
        let f = b.function("placeholder");
        b.dict.function_table[f as usize].name_strindex = 9_999;
        b.push_location(Location {
            address: 0xbeef,
            lines: vec![Line {
                function_index: f,
                ..Default::default()
            }],
            ..Default::default()
        })
    };
    let stack = b.stack(&[bad_name, 300, no_function, -1, main]);
    let cpu = ("cpu", "nanoseconds");
    let mut profile = b.profile(cpu, cpu, vec![sample(stack, 0, &[7]), sample(-5, 0, &[1])]);
    profile.sample_type.as_mut().unwrap().unit_strindex = 12_345;
    let data = b.finish(vec![vec![profile]]);
    let (samples, summary) = collect(&data, &SampleSelector::default());
    assert_eq!(samples, [("main;0xdead;0xbeef".to_owned(), 7)]);
    // unit string, location 300, location -1, function 500, name 9999, stack -5
    assert_eq!(summary.bad_indices, 6);
    assert_eq!(summary.samples_bad_stack, 1);
    assert_eq!(summary.used_types[0].sample_unit, "");

    // A link filter with an out-of-range link index neither matches nor panics.
    let selector = SampleSelector {
        span_ids: vec![S1],
        ..Default::default()
    };
    let mut data = data;
    data.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].link_index = 42;
    let (samples, summary) = collect(&data, &selector);
    assert!(samples.is_empty());
    assert_eq!(summary.bad_indices, 2, "unit string and link 42");
}

#[test]
fn data_without_dictionary_or_values_does_not_panic() {
    let mut data = checkout();
    data.dictionary = None;
    let (samples, summary) = collect(&data, &SampleSelector::default());
    // Every stack index is now out of range; the types resolve to empty strings.
    assert!(samples.is_empty());
    assert!(summary.samples_bad_stack > 0);
    let mut data = checkout();
    data.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].values = vec![-3];
    let (_, summary) = collect(&data, &SampleSelector::default());
    assert_eq!(summary.samples_non_positive, 1);
}

#[test]
fn span_totals_rank_spans_and_keep_unlinked_apart() {
    let totals = span_totals(&checkout(), Some("cpu:nanoseconds")).unwrap();
    let ns = |ticks: i64| (ticks * TICK_NS) as u64;
    let span = |trace_id: [u8; 16], span_id: [u8; 8], total: u64, samples: u64| SpanTotal {
        trace_id: Some(trace_id),
        span_id,
        total,
        samples,
    };
    assert_eq!(
        totals.spans,
        [
            span(T1, S1, ns(5), 2),
            span(T2, S3, ns(4), 1),
            span(T1, S2, ns(2) + ns(1) / 2, 2),
        ]
    );
    assert_eq!(totals.unlinked_total, ns(6), "GC sample + bad link index");
    assert_eq!(totals.unlinked_samples, 2);
    assert_eq!(totals.summary.samples_bad_stack, 1);
    assert_eq!(totals.summary.bad_indices, 2);

    let counts = span_totals(&checkout(), Some("samples")).unwrap();
    assert_eq!(counts.spans[0].span_id, S1);
    assert_eq!(counts.spans[0].total, 5);
    let s4 = counts.spans.iter().find(|s| s.span_id == S4).unwrap();
    assert_eq!((s4.trace_id, s4.total), (None, 4));
}

/// A stack deeper than the store's answers show keeps its leaf-most frames under one root
/// frame that says so, in the flame graph and in the pprof export; the values are whole.
#[test]
fn stacks_past_the_depth_limit_are_cut_at_the_root_visibly() {
    use spanprof_store::store::{Selection, Store, StoreConfig, CUT_STACK_FRAME, MAX_STACK_DEPTH};
    let mut b = DictionaryBuilder::new();
    let depth = MAX_STACK_DEPTH + 10;
    // Leaf first: f0 is the leaf, f{depth-1} the root.
    let names: Vec<String> = (0..depth).map(|i| format!("f{i}")).collect();
    let locations: Vec<i32> = names.iter().map(|n| b.location(&[n])).collect();
    let deep = b.stack(&locations);
    let shallow = b.stack(&locations[..2]);
    let link = b.link(&T1, &S1);
    let p = b.profile(
        ("cpu", "nanoseconds"),
        ("cpu", "nanoseconds"),
        vec![sample(deep, link, &[30]), sample(shallow, link, &[5])],
    );
    let data = b.finish(vec![vec![p]]);
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreConfig::new(dir.path())).unwrap();
    let r = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(r.profiles, 1, "{:?}", r.problems);
    let sel = Selection::default();
    let collapsed = store.flame_graph(&sel).unwrap().0.to_collapsed();
    let kept: Vec<&str> = names[..MAX_STACK_DEPTH]
        .iter()
        .rev()
        .map(String::as_str)
        .collect();
    let want_deep = format!("{CUT_STACK_FRAME};{} 30", kept.join(";"));
    let lines: Vec<&str> = collapsed.lines().collect();
    assert_eq!(lines.len(), 2, "{}", &collapsed[..200.min(collapsed.len())]);
    assert!(lines.contains(&want_deep.as_str()), "the cut stack");
    assert!(
        lines.contains(&"f1;f0 5"),
        "a stack within the limit is whole"
    );
    let pprof = store.pprof(&sel).unwrap();
    let deep_sample = pprof
        .sample
        .iter()
        .find(|s| s.value == [30])
        .expect("the deep sample");
    assert_eq!(deep_sample.location_id.len(), MAX_STACK_DEPTH + 1);
    let root = deep_sample.location_id.last().unwrap();
    let location = &pprof.location[*root as usize - 1];
    let function = &pprof.function[location.line[0].function_id as usize - 1];
    assert_eq!(pprof.string_table[function.name as usize], CUT_STACK_FRAME);
}
