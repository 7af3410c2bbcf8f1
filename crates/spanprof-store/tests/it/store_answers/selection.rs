//! Choosing spans by name and duration: span filters and the slow-against-fast diff select
//! exactly the samples of the spans a plain reading of the span list picks.

use std::collections::BTreeSet;

use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Selection, SpanFilter};

use super::fixture::*;

/// Durations of the spans named `name`, ascending.
fn durations(c: &Copy, name: &str) -> Vec<u64> {
    let mut d: Vec<u64> = c.named(name).iter().map(|s| s.duration_ns()).collect();
    d.sort_unstable();
    d
}

/// The nearest-rank percentile: the smallest duration that at least p% of spans do not exceed.
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ids<'a>(spans: impl IntoIterator<Item = &'a SpanRecord>) -> BTreeSet<[u8; 8]> {
    spans.into_iter().map(|s| s.span_id).collect()
}

fn with_children(c: &Copy, parents: &BTreeSet<[u8; 8]>) -> BTreeSet<[u8; 8]> {
    let children = c
        .spans
        .iter()
        .filter(|s| s.parent_span_id.is_some_and(|p| parents.contains(&p)));
    parents.iter().copied().chain(ids(children)).collect()
}

#[test]
fn diff_of_slow_and_fast_cpu_heavy_spans() {
    let dir = temp_dir();
    let store = open(dir.path());
    let c = Copy::new(0, 0, 1);
    c.ingest(&store);
    let sorted = durations(&c, HEAVY);
    assert_eq!(sorted.len(), 81);
    let (p90, p50) = (nearest_rank(&sorted, 90.0), nearest_rank(&sorted, 50.0));
    let heavy = c.named(HEAVY);
    let slow = ids(heavy.iter().copied().filter(|s| s.duration_ns() >= p90));
    let fast = ids(heavy.iter().copied().filter(|s| s.duration_ns() <= p50));
    // Rank ⌈72.9⌉ = 73 of 81: the 9 longest; rank ⌈40.5⌉ = 41: the 41 shortest.
    assert_eq!((slow.len(), fast.len()), (9, 41));
    let filter = |above: Option<f64>, below: Option<f64>| {
        of_filter(SpanFilter {
            name: Some(HEAVY.into()),
            above_percentile: above,
            below_percentile: below,
            ..Default::default()
        })
    };
    let (left, right) = (filter(Some(90.0), None), filter(None, Some(50.0)));
    let (slow_cpu, fast_cpu) = (c.cpu_of(&slow), c.cpu_of(&fast));
    assert_eq!(cpu(&store, &left), slow_cpu);
    assert_eq!(cpu(&store, &right), fast_cpu);
    let diff = store.diff(&left, &right, 1024).unwrap();
    assert_eq!((diff.left_ticks, diff.right_ticks), (slow_cpu, fast_cpu));
    assert_eq!(diff.total, slow_cpu + fast_cpu);
    assert!(
        diff.names.iter().any(|n| n == "main.countPrimes"),
        "{:?}",
        diff.names
    );
    // Slow spans burned more CPU each: that is how their durations were chosen.
    assert!(
        slow_cpu / 9 > fast_cpu / 41,
        "{slow_cpu} / 9 vs {fast_cpu} / 41"
    );

    // Between two percentiles, and with the slow spans' children (their sortWork).
    let middle = filter(Some(50.0), Some(90.0));
    let mid = ids(heavy
        .iter()
        .copied()
        .filter(|s| (p50..=p90).contains(&s.duration_ns())));
    assert_eq!(cpu(&store, &middle), c.cpu_of(&mid));
    let family = Selection {
        include_child_spans: true,
        ..left
    };
    let slow_family = with_children(&c, &slow);
    assert!(
        slow_family.len() > slow.len(),
        "slow spans have sortWork children"
    );
    assert_eq!(cpu(&store, &family), c.cpu_of(&slow_family));
}

#[test]
fn span_filters_by_name_and_duration_select_exactly_those_spans() {
    let dir = temp_dir();
    let store = open(dir.path());
    let c = Copy::new(0, 0, 1);
    c.ingest(&store);
    let check = |f: SpanFilter, want: BTreeSet<[u8; 8]>| {
        assert!(
            !want.is_empty() || f.name.as_deref() == Some("nothing"),
            "{f:?} picks none"
        );
        assert_eq!(cpu(&store, &of_filter(f.clone())), c.cpu_of(&want), "{f:?}");
    };
    let named = |n: &str| Some(n.to_owned());
    for name in [HEAVY, SORT, LIGHT] {
        let f = SpanFilter {
            name: named(name),
            ..Default::default()
        };
        assert_eq!(c.cpu_of(&ids(c.named(name))), c.cpu_named(name));
        check(f, ids(c.named(name)));
    }
    // Both bounds inclusive, on sortWork's 11th and 41st shortest durations.
    let sort = durations(&c, SORT);
    let (min, max) = (sort[10], sort[40]);
    let picked = ids(c
        .named(SORT)
        .into_iter()
        .filter(|s| (min..=max).contains(&s.duration_ns())));
    assert_eq!(picked.len(), 31);
    check(
        SpanFilter {
            name: named(SORT),
            min_duration_ns: Some(min),
            max_duration_ns: Some(max),
            ..Default::default()
        },
        picked,
    );
    // Durations alone, across names.
    let (min, max) = (60 * MS as u64, 120 * MS as u64);
    let picked = ids(c
        .spans
        .iter()
        .filter(|s| (min..=max).contains(&s.duration_ns())));
    let names: BTreeSet<&str> = c
        .spans
        .iter()
        .filter(|s| picked.contains(&s.span_id))
        .map(|s| s.name.as_str())
        .collect();
    assert!(names.len() >= 2, "{names:?}");
    check(
        SpanFilter {
            min_duration_ns: Some(min),
            max_duration_ns: Some(max),
            ..Default::default()
        },
        picked,
    );
    // Only a maximum: the one GET /cpu-light span shorter than a period.
    let shortest = ids(c
        .named(LIGHT)
        .into_iter()
        .filter(|s| s.duration_ns() <= 5 * MS as u64));
    assert_eq!(shortest.len(), 1);
    check(
        SpanFilter {
            name: named(LIGHT),
            max_duration_ns: Some(5 * MS as u64),
            ..Default::default()
        },
        shortest,
    );
    check(
        SpanFilter {
            name: named("nothing"),
            ..Default::default()
        },
        BTreeSet::new(),
    );
    // A filter narrows explicit span ids too.
    let two_heavy: Vec<[u8; 8]> = c.named(HEAVY).iter().take(2).map(|s| s.span_id).collect();
    let sel = Selection {
        span_ids: vec![two_heavy[0], c.span(SORT).span_id],
        span_filter: Some(SpanFilter {
            name: named(HEAVY),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(cpu(&store, &sel), c.sampled(&two_heavy[0]).cpu_ns);
}

#[test]
fn selections_by_trace_and_label_match_the_label_sums() {
    let dir = temp_dir();
    let store = open(dir.path());
    let c = Copy::new(0, 0, 1);
    c.ingest(&store);
    let heavy = c.span(HEAVY);
    let of_trace = ids(c.spans.iter().filter(|s| s.trace_id == heavy.trace_id));
    assert!(of_trace.len() >= 2, "a heavy span and its sortWork");
    let sel = Selection {
        trace_id: Some(heavy.trace_id),
        ..Default::default()
    };
    assert_eq!(cpu(&store, &sel), c.cpu_of(&of_trace));
    // The parent alone, then with its children.
    let one = of_spans([&heavy.span_id]);
    assert_eq!(cpu(&store, &one), c.sampled(&heavy.span_id).cpu_ns);
    let family = Selection {
        include_child_spans: true,
        ..one
    };
    let want = with_children(&c, &BTreeSet::from([heavy.span_id]));
    assert_eq!(cpu(&store, &family), c.cpu_of(&want));
    // Series labels from sample labels.
    let by_label = |selector: &str| Selection {
        label_selector: Some(selector.into()),
        ..Default::default()
    };
    assert_eq!(
        cpu(&store, &by_label(r#"{worker="contention-0"}"#)),
        10 * MS
    );
    assert_eq!(
        cpu(&store, &by_label(r#"{otel.profile.span_name="sortWork"}"#)),
        c.cpu_named(SORT)
    );
    assert_eq!(
        cpu(&store, &by_label(r#"{span_name=~"GET .*"}"#)),
        c.cpu_named(LIGHT)
    );
    let sum = c.cpu_named(HEAVY) + c.cpu_named(SORT) + c.cpu_named(LIGHT) + c.sums.unlinked_cpu;
    assert_eq!(sum, c.sums.cpu_total);
    assert_eq!(cpu(&store, &Selection::default()), c.sums.cpu_total);
    let count = Selection {
        profile_type: Some(COUNT_TYPE.into()),
        ..Default::default()
    };
    assert_eq!(cpu(&store, &count), c.sums.ticks_total);
}

/// A sample that names its span but not its trace (an SDK sampled between setting the two
/// labels) belongs to the trace its profile gives that span elsewhere, with no span record
/// stored to tell.
#[test]
fn a_sample_without_its_trace_label_is_in_its_spans_trace() {
    let c = Copy::new(0, 0, 1);
    let heavy = c.span(HEAVY);
    let mut p = c.pprof.clone();
    let is_trace_key = |k: i64| {
        matches!(
            p.string_table[k as usize].as_str(),
            "otel.profile.trace_id" | "trace_id"
        )
    };
    let span_hex = spanprof_format::link::to_hex(&heavy.span_id);
    let of_heavy = p
        .sample
        .iter()
        .position(|s| {
            s.label
                .iter()
                .any(|l| p.string_table[l.str as usize] == span_hex)
        })
        .expect("a sample of the heavy span");
    let trace_keys: Vec<bool> = p.sample[of_heavy]
        .label
        .iter()
        .map(|l| is_trace_key(l.key))
        .collect();
    assert!(trace_keys.contains(&true), "the sample names its trace");
    let mut keep = trace_keys.iter().map(|t| !t);
    p.sample[of_heavy].label.retain(|_| keep.next().unwrap());
    let mut batch = spanprof_format::Batch::new(Some(spanprof_format::LinkConfig::default()));
    batch.add_pprof(&p, resource()).unwrap();
    let (data, _) = batch.finish();

    let dir = temp_dir();
    let store = open(dir.path());
    // No spans: nothing but the profile itself tells the sample's trace.
    let r = store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(r.rejected_profiles, 0, "{:?}", r.problems);
    let of_trace = ids(c.spans.iter().filter(|s| s.trace_id == heavy.trace_id));
    let sel = Selection {
        trace_id: Some(heavy.trace_id),
        ..Default::default()
    };
    assert_eq!(cpu(&store, &sel), c.cpu_of(&of_trace));
    assert_eq!(
        cpu(&store, &of_spans([&heavy.span_id])),
        c.sampled(&heavy.span_id).cpu_ns
    );
}

/// A tracer that names its service otherwise than the profiles do (a scrape target called
/// `checkout`, spans sent as `goapp`): asked with the span's service, as the UI does, a span's
/// flame graph has its samples, of the CPU type, and so do a span filter's spans and a trace,
/// while the service alone (no spans) selects the profiles of that name: none.
#[test]
fn spans_of_a_service_named_otherwise_than_its_profiles_keep_their_samples() {
    let dir = temp_dir();
    let store = open(dir.path());
    let mut c = Copy::new(0, 0, 1);
    for s in &mut c.spans {
        s.service = "tracer-name".into();
    }
    c.ingest(&store);
    let heavy = c.named(HEAVY);
    let one = heavy
        .iter()
        .find(|s| c.sampled(&s.span_id).cpu_ns > 0)
        .unwrap();
    let by_span = Selection {
        service: Some("tracer-name".into()),
        ..of_spans([&one.span_id])
    };
    // CPU nanoseconds, not sample counts: the type defaults to CPU time.
    assert_eq!(cpu(&store, &by_span), c.sampled(&one.span_id).cpu_ns);
    let by_name = Selection {
        service: Some("tracer-name".into()),
        ..of_filter(SpanFilter {
            name: Some(HEAVY.into()),
            ..Default::default()
        })
    };
    assert_eq!(cpu(&store, &by_name), c.cpu_named(HEAVY));
    let trace = one.trace_id;
    let of_trace: Vec<[u8; 8]> = c
        .spans
        .iter()
        .filter(|s| s.trace_id == trace)
        .map(|s| s.span_id)
        .collect();
    let by_trace = Selection {
        service: Some("tracer-name".into()),
        trace_id: Some(trace),
        ..Default::default()
    };
    assert!(c.cpu_of(&of_trace) > 0);
    assert_eq!(cpu(&store, &by_trace), c.cpu_of(&of_trace));
    let profiles_only = Selection {
        service: Some("tracer-name".into()),
        ..Default::default()
    };
    assert_eq!(cpu(&store, &profiles_only), 0);
    assert_eq!(
        cpu(
            &store,
            &Selection {
                service: Some(SERVICE.into()),
                ..Default::default()
            }
        ),
        c.sums.cpu_total
    );
}

/// A time range holds the profiles taken in it (as the series buckets them, and as Pyroscope
/// selects): two back-to-back 10 s windows and a range from the middle of the first to the
/// middle of the second hold the second only. Counting every window that overlapped made
/// 36 s of CPU in a 30 s range. Selected spans are found in every window that overlaps it,
/// and `overlapping` asks for those windows without spans. The listings agree.
#[test]
fn a_time_range_holds_the_profiles_taken_in_it() {
    let dir = temp_dir();
    let store = open(dir.path());
    let first = Copy::new(0, 0, 1);
    let second = Copy::new(1, 10 * SEC, 1);
    first.ingest(&store);
    second.ingest(&store);
    let t = first.time_ns;
    let total = |c: &Copy| c.sums.cpu_total;
    let range = |from: i64, to: i64| Selection {
        from_ns: t + from,
        to_ns: t + to,
        ..Default::default()
    };
    assert_eq!(cpu(&store, &range(5 * SEC, 15 * SEC)), total(&second));
    assert_eq!(
        cpu(&store, &range(0, 20 * SEC)),
        total(&first) + total(&second)
    );
    assert_eq!(cpu(&store, &range(SEC, 9 * SEC)), 0);
    let overlapping = |from, to| Selection {
        overlapping: true,
        ..range(from, to)
    };
    assert_eq!(
        cpu(&store, &overlapping(5 * SEC, 15 * SEC)),
        total(&first) + total(&second)
    );
    assert_eq!(cpu(&store, &overlapping(SEC, 9 * SEC)), total(&first));
    // The first window's spans, in a range that begins after the window did.
    let heavy: Vec<[u8; 8]> = first.named(HEAVY).iter().map(|s| s.span_id).collect();
    let spans = Selection {
        span_ids: heavy.clone(),
        ..range(5 * SEC, 15 * SEC)
    };
    assert_eq!(cpu(&store, &spans), first.cpu_of(&heavy));
    // The listings (services, series, label names) hold what the profile queries count,
    // whether the segment is active or sealed.
    for sealed in [false, true] {
        if sealed {
            store.rotate().unwrap();
        }
        assert_eq!(store.services(t + SEC, t + 9 * SEC), Vec::<String>::new());
        assert!(store.series(&range(SEC, 9 * SEC)).unwrap().is_empty());
        assert_eq!(store.services(t + 5 * SEC, t + 15 * SEC), [SERVICE]);
        assert!(!store.series(&range(5 * SEC, 15 * SEC)).unwrap().is_empty());
    }
}

/// `c`'s profile with the trace id labels of every sample dropped, but of those `keep`
/// picks (called in sample order), converted to OTLP and linked.
fn without_trace_ids(
    c: &Copy,
    mut keep: impl FnMut(&spanprof_format::pprof::Sample) -> bool,
) -> spanprof_format::otlp::ProfilesData {
    let mut p = c.pprof.clone();
    let trace_keys: Vec<i64> = p
        .string_table
        .iter()
        .enumerate()
        .filter(|(_, s)| ["otel.profile.trace_id", "trace_id"].contains(&s.as_str()))
        .map(|(i, _)| i as i64)
        .collect();
    for s in &mut p.sample {
        if !keep(s) {
            s.label.retain(|l| !trace_keys.contains(&l.key));
        }
    }
    let mut batch = spanprof_format::Batch::new(Some(spanprof_format::LinkConfig::default()));
    batch.add_pprof(&p, resource()).unwrap();
    batch.finish().0
}

/// pyroscope-otel labels samples with span ids only. A link needs both ids, so converted to
/// OTLP such samples keep their span id as an attribute; selecting the span in the converted
/// profile (`spanprof flame FILE --span-id`) finds them as the store does, and selecting the
/// trace finds those whose span the profile's links put in it. (Only linked samples were
/// found: a span-only profile had no samples for any span.)
#[test]
fn samples_with_a_span_id_and_no_trace_id_are_selected_offline_as_in_the_store() {
    use spanprof_store::{FlameTree, SampleSelector};
    let c = Copy::new(0, 0, 1);
    let heavy = c.named(HEAVY)[0].clone();
    // Trace ids dropped from every sample, but every other one of `heavy`.
    let mut kept = 0;
    let data = without_trace_ids(&c, |s| {
        let of_heavy = label(&c.pprof, s, &["otel.profile.span_id", "span_id"])
            .is_some_and(|v| v == hex(&heavy.span_id));
        kept += usize::from(of_heavy);
        of_heavy && kept % 2 == 1
    });
    assert!(kept >= 2, "{kept} samples of the span");
    let offline = |span_ids: Vec<[u8; 8]>, trace_id: Option<[u8; 16]>| {
        let selector = SampleSelector {
            span_ids,
            trace_id,
            profile_type: Some("cpu".into()),
        };
        FlameTree::from_profiles(&data, &selector)
            .unwrap()
            .0
            .total() as i64
    };
    let want = c.sampled(&heavy.span_id).cpu_ns;
    assert!(want > 0);
    assert_eq!(offline(vec![heavy.span_id], None), want);
    assert_eq!(offline(vec![heavy.span_id], Some(heavy.trace_id)), want);
    assert_eq!(
        offline(Vec::new(), Some(heavy.trace_id)),
        want,
        "one span in its trace"
    );
    // The store reads the same profile the same way.
    let dir = temp_dir();
    let store = open(dir.path());
    store.ingest(&[&data], Vec::new()).unwrap();
    assert_eq!(cpu(&store, &of_spans([&heavy.span_id])), want);
}

/// `spanprof inspect` lists the spans of a profile whose samples name spans by id only, with
/// the trace the profile's links give each span.
#[test]
fn span_totals_count_samples_with_a_span_id_and_no_trace_id() {
    let c = Copy::new(0, 0, 1);
    let data = without_trace_ids(&c, |_| false);
    let totals = spanprof_store::span_totals(&data, Some("cpu")).unwrap();
    for span in c.named(HEAVY) {
        let got = totals.spans.iter().find(|t| t.span_id == span.span_id);
        let want = c.sampled(&span.span_id).cpu_ns as u64;
        assert_eq!(
            got.map(|t| (t.total, t.trace_id)),
            (want > 0).then_some((want, None))
        );
    }
    assert_eq!(totals.unlinked_total as i64, c.sums.unlinked_cpu);
}
