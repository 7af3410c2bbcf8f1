//! `span_coverage`: what a span got (samples, value) against what its duration allows
//! (duration / period), for a busy span, spans without samples and one shorter than a period.

use spanprof_format::profile_type::ProfileTypeId;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Coverage, Selection, Store};

use super::fixture::*;

/// The type a span's coverage is in without `type`: the CPU type of its samples, else of its
/// service's profiles.
fn cpu_type() -> ProfileTypeId {
    ProfileTypeId::parse(CPU_TYPE).unwrap()
}

fn store_with(c: &Copy) -> (tempfile::TempDir, Store) {
    let dir = temp_dir();
    let store = open(dir.path());
    c.ingest(&store);
    (dir, store)
}

/// The `GET /cpu-heavy` span with the most CPU (lowest id among equals).
fn busiest(c: &Copy) -> &spanprof_store::spans::SpanRecord {
    c.named(HEAVY)
        .into_iter()
        .max_by_key(|s| (c.sampled(&s.span_id).cpu_ns, std::cmp::Reverse(s.span_id)))
        .unwrap()
}

/// `span`'s duration less the time its children among `spans` that have samples (`sampled`)
/// ran in it: between each two boundaries (its own and those children's), whether none of
/// them runs.
fn own_time(span: &SpanRecord, spans: &[SpanRecord], sampled: impl Fn(&[u8; 8]) -> bool) -> u64 {
    let children: Vec<&SpanRecord> = spans
        .iter()
        .filter(|c| c.parent_span_id == Some(span.span_id) && sampled(&c.span_id))
        .collect();
    let mut cuts: Vec<u64> = children
        .iter()
        .flat_map(|c| [c.start_ns, c.end_ns])
        .chain([span.start_ns, span.end_ns])
        .filter(|t| (span.start_ns..=span.end_ns).contains(t))
        .collect();
    cuts.sort_unstable();
    cuts.windows(2)
        .filter(|w| {
            !children
                .iter()
                .any(|c| c.start_ns <= w[0] && w[1] <= c.end_ns)
        })
        .map(|w| w[1] - w[0])
        .sum()
}

#[test]
fn span_coverage_of_a_busy_span() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let span = busiest(&c);
    let want = c.sampled(&span.span_id);
    assert_eq!(want.ticks, 9, "the busiest span of cpu-10s.pb.gz");
    let got = store.span_coverage(span.span_id, None).unwrap();
    let duration = span.duration_ns();
    assert_eq!(got.value, want.cpu_ns);
    assert_eq!(got.duration_ns, Some(duration));
    assert_eq!(got.period, Some(PERIOD_NS));
    // Its own time: outside its children.
    let own = own_time(span, &c.spans, |id| c.sums.by_span.contains_key(id));
    assert_eq!(got.self_ns, Some(own));
    assert_eq!(got.possible_samples, Some(own as f64 / PERIOD_NS as f64));
    // Same span under the count type: the value is the number of ticks.
    let counted = store.span_coverage(span.span_id, Some(COUNT_TYPE)).unwrap();
    assert_eq!(counted.value, want.ticks);
    assert_eq!(counted.possible_samples, got.possible_samples);
}

/// A parent is measured by its own time: the time its children with samples of their own
/// (labelled ones) ran is theirs (a parent waiting for them is not sampled), and counting it
/// made a parent with 2 ms of its own read "no CPU used" against many possible samples. A
/// child without samples (an auto-instrumented client span sets no labels) stays the
/// parent's time.
#[test]
fn span_coverage_counts_a_parents_own_time_only() {
    let mut c = Copy::new(0, 0, 1);
    // A sorting child, sampled, gets a new parent without samples: 1 ms before it to 1 ms
    // after it, with an unlabelled client span in the first half millisecond.
    let child = c.span(SORT).clone();
    assert!(c.sums.by_span.contains_key(&child.span_id));
    let span = |tag: u8, parent: Option<[u8; 8]>, start_ns: u64, end_ns: u64| SpanRecord {
        span_id: [tag, 0x0f, 0x5e, 0, 0, 0, 0, 1],
        parent_span_id: parent,
        start_ns,
        end_ns,
        ..child.clone()
    };
    let parent = span(
        0xa0,
        None,
        child.start_ns - MS as u64,
        child.end_ns + MS as u64,
    );
    let client = span(
        0xa1,
        Some(parent.span_id),
        parent.start_ns,
        parent.start_ns + MS as u64 / 2,
    );
    for s in &mut c.spans {
        if s.span_id == child.span_id {
            s.parent_span_id = Some(parent.span_id);
        }
    }
    c.spans.extend([parent.clone(), client.clone()]);
    let (_dir, store) = store_with(&c);
    assert_eq!(
        own_time(&parent, &c.spans, |id| c.sums.by_span.contains_key(id)),
        2 * MS as u64
    );
    let got = store.span_coverage(parent.span_id, None).unwrap();
    assert_eq!(
        got,
        Coverage {
            samples: 0,
            value: 0,
            duration_ns: Some(child.duration_ns() + 2 * MS as u64),
            self_ns: Some(2 * MS as u64),
            period: Some(PERIOD_NS),
            possible_samples: Some(0.2),
            covered_ns: Some(2 * MS as u64),
            between_windows: false,
            after_last_window: false,
            profile_type: Some(cpu_type()),
        }
    );
    // Many at once read the trace once and agree with one at a time.
    let family = [parent.clone(), client.clone(), child.clone()];
    let all = store.span_coverages(&family, None).unwrap();
    assert_eq!(all[0], got);
    for (s, c) in family.iter().zip(&all).skip(1) {
        assert_eq!(c, &store.span_coverage(s.span_id, None).unwrap());
        assert_eq!(c.self_ns, Some(s.duration_ns()), "no children");
    }
}

/// Many spans' coverages with the type named in full (as the trace view asks them) read
/// the spans' samples in one pass over the blocks they share: each span gets its own, as
/// when asked alone, and as without a type (read span by span, CPU being the default).
#[test]
fn span_coverages_read_at_once_agree_with_each_alone() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let spans = &c.spans;
    let sampled = spans
        .iter()
        .filter(|s| c.sums.by_span.contains_key(&s.span_id))
        .count();
    assert!(
        sampled >= 20 && sampled < spans.len(),
        "{sampled} of {} spans have samples",
        spans.len()
    );
    let at_once = store.span_coverages(spans, Some(CPU_TYPE)).unwrap();
    assert_eq!(at_once, store.span_coverages(spans, None).unwrap());
    for (s, got) in spans.iter().zip(&at_once) {
        let cpu = c.sums.by_span.get(&s.span_id).map_or(0, |x| x.cpu_ns);
        assert_eq!(got.value, cpu, "span {:x?}", s.span_id);
    }
    for (s, got) in spans.iter().zip(&at_once).step_by(7) {
        assert_eq!(
            got,
            &store.span_coverage(s.span_id, Some(CPU_TYPE)).unwrap()
        );
    }
}

/// `samples` is what `possible_samples` (duration / period, in ticks of one busy thread) is
/// compared with, so it must count profiler ticks, not how many distinct stacks Go's pprof
/// writer happened to aggregate the ticks into.
#[test]
fn span_coverage_counts_ticks_not_stack_rows() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    for span in [busiest(&c), c.span(SORT)] {
        let want = c.sampled(&span.span_id);
        let got = store.span_coverage(span.span_id, None).unwrap();
        assert_eq!(
            (got.samples, got.value),
            (want.ticks as u64, want.ticks * PERIOD_NS),
            "{} {}: {got:?}",
            span.name,
            hex(&span.span_id)
        );
    }
}

#[test]
fn span_coverage_of_a_span_shorter_than_the_period() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let short = c
        .named(LIGHT)
        .into_iter()
        .find(|s| s.duration_ns() == SHORTEST_LIGHT_NS)
        .unwrap();
    let want = c.sampled(&short.span_id);
    assert_eq!(
        (want.ticks, want.cpu_ns),
        (1, PERIOD_NS),
        "sampled once by luck"
    );
    let got = store.span_coverage(short.span_id, None).unwrap();
    assert_eq!(
        got,
        Coverage {
            samples: 1,
            value: PERIOD_NS,
            duration_ns: Some(SHORTEST_LIGHT_NS),
            self_ns: Some(SHORTEST_LIGHT_NS),
            period: Some(PERIOD_NS),
            possible_samples: Some(0.4),
            covered_ns: None,
            between_windows: false,
            after_last_window: false,
            profile_type: Some(cpu_type()),
        }
    );
}

/// A span the profiles cover in time but whose thread never got a sample: 0 of 20 possible
/// (no CPU used), or 0 of 0.3 (too short to tell). Telling those apart is what
/// `possible_samples` is for, and the profile covering the span says what the period is.
#[test]
fn span_coverage_of_spans_without_samples() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    for (name, duration, possible) in [(IDLE, IDLE_NS, 20.0), (SHORT_IDLE, SHORT_IDLE_NS, 0.3)] {
        let span = c.span(name);
        assert!(
            span.start_ns as i64 >= c.time_ns,
            "inside the profile's window"
        );
        assert!(!has_samples(&store, &span.span_id));
        let got = store.span_coverage(span.span_id, None).unwrap();
        assert_eq!(
            got,
            Coverage {
                samples: 0,
                value: 0,
                duration_ns: Some(duration),
                self_ns: Some(duration),
                period: Some(PERIOD_NS),
                possible_samples: Some(possible),
                covered_ns: Some(duration),
                between_windows: false,
                after_last_window: false,
                profile_type: Some(cpu_type()),
            },
            "{name}"
        );
    }
}

#[test]
fn span_coverage_of_an_unknown_span() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let got = store.span_coverage([0x5e; 8], None).unwrap();
    assert_eq!((got.samples, got.value, got.duration_ns), (0, 0, None));
    assert_eq!(got.possible_samples, None);
}

/// A span that started before the profile's window: only the part the window covers could
/// have been sampled, so that part (not its whole duration) makes `possible_samples`. A pull
/// profiler leaves gaps between windows; a span mostly in one was not watched, not idle.
#[test]
fn span_coverage_counts_only_the_part_a_profile_window_covers() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let start = c.time_ns as u64;
    let parent = c.span(IDLE);
    let edge = |tag: u8, before: u64, inside: u64| spanprof_store::spans::SpanRecord {
        span_id: [tag, 0xed, 0x9e, 0, 0, 0, 0, 1],
        start_ns: start - before,
        end_ns: start + inside,
        ..parent.clone()
    };
    let mostly_outside = edge(0xe1, 195 * MS as u64, 5 * MS as u64);
    let half_inside = edge(0xe2, 150 * MS as u64, 150 * MS as u64);
    let outside = edge(0xe3, 300 * MS as u64, 0);
    store
        .ingest(
            &[],
            vec![mostly_outside.clone(), half_inside.clone(), outside.clone()],
        )
        .unwrap();
    for (span, covered_ms) in [(&mostly_outside, 5), (&half_inside, 150), (&outside, 0)] {
        let got = store.span_coverage(span.span_id, None).unwrap();
        let covered = covered_ms * MS as u64;
        assert_eq!(got.samples, 0);
        assert_eq!(got.duration_ns, Some(span.duration_ns()));
        assert_eq!(got.covered_ns, Some(covered), "{:?}", span.span_id);
        // No profile at all around the outside one: no period to count possible samples in.
        let possible = (covered > 0).then(|| covered as f64 / PERIOD_NS as f64);
        assert_eq!(got.possible_samples, possible, "{:?}", span.span_id);
    }
}

/// A pull profiler's back-to-back windows leave a gap between them (Go builds and sends a
/// profile, the next request comes): a span inside one was not watched, although the
/// profiler ran. It is told from a span no profiler watched by the windows ending just
/// before it and beginning just after it, and it gets their period.
#[test]
fn span_coverage_of_a_span_between_two_windows() {
    let first = Copy::new(0, 0, 1);
    let window = first.pprof.duration_nanos;
    let second = Copy::new(1, window + 200 * MS, 1);
    let dir = temp_dir();
    let store = open(dir.path());
    first.ingest(&store);
    second.ingest(&store);
    let end = (first.time_ns + window) as u64;
    let parent = first.span(IDLE);
    let span = |tag: u8, from_end: u64, duration: u64| spanprof_store::spans::SpanRecord {
        span_id: [tag, 0x9a, 0x95, 0, 0, 0, 0, 1],
        start_ns: end + from_end,
        end_ns: end + from_end + duration,
        ..parent.clone()
    };
    let between = span(0xb1, 50 * MS as u64, 100 * MS as u64);
    // After the second window, with none after it: the profiler stopped.
    let after = span(0xb2, (window + 400 * MS) as u64, 100 * MS as u64);
    store
        .ingest(&[], vec![between.clone(), after.clone()])
        .unwrap();
    let got = store.span_coverage(between.span_id, None).unwrap();
    assert_eq!(
        got,
        Coverage {
            samples: 0,
            value: 0,
            duration_ns: Some(100 * MS as u64),
            self_ns: Some(100 * MS as u64),
            period: Some(PERIOD_NS),
            possible_samples: Some(0.0),
            covered_ns: Some(0),
            between_windows: true,
            after_last_window: false,
            profile_type: Some(cpu_type()),
        }
    );
    let got = store.span_coverage(after.span_id, None).unwrap();
    assert_eq!(
        (got.covered_ns, got.between_windows, got.possible_samples),
        (Some(0), false, None)
    );
    // No window reaches its time (yet): the next one would hold its samples.
    assert!(got.after_last_window, "{got:?}");
    // A span before the first window is not waiting for one.
    let before = span(0xb3, 0, 100 * MS as u64);
    let before = SpanRecord {
        start_ns: first.time_ns as u64 - 300 * MS as u64,
        end_ns: first.time_ns as u64 - 200 * MS as u64,
        ..before
    };
    store.ingest(&[], vec![before.clone()]).unwrap();
    let got = store.span_coverage(before.span_id, None).unwrap();
    assert_eq!((got.covered_ns, got.after_last_window), (Some(0), false));
    // A span of a service no profile stands for yet (profiled under another name, whose
    // samples of the trace are still to come) is waiting while a profiled service has a
    // window still to come; not when every one has windows past it.
    let elsewhere = |tag: u8, from_end: u64| SpanRecord {
        service: "named-otherwise".into(),
        ..span(tag, from_end, 100 * MS as u64)
    };
    let (waiting, passed) = (
        elsewhere(0xb4, (window + 400 * MS) as u64),
        elsewhere(0xb5, 0),
    );
    let passed = SpanRecord {
        start_ns: before.start_ns,
        end_ns: before.end_ns,
        ..passed
    };
    store
        .ingest(&[], vec![waiting.clone(), passed.clone()])
        .unwrap();
    let got = store.span_coverage(waiting.span_id, None).unwrap();
    assert_eq!((got.covered_ns, got.after_last_window), (Some(0), true));
    let got = store.span_coverage(passed.span_id, None).unwrap();
    assert_eq!((got.covered_ns, got.after_last_window), (Some(0), false));
}

/// A span whose only samples are of a type other than its service's CPU type (a goroutine
/// profile counted it while its CPU window was still open) is measured in CPU time, the
/// default of its service: 0 so far, not "sampled" with a total of 1 goroutine beside spans
/// with their CPU time.
#[test]
fn span_coverage_defaults_to_its_services_cpu_type() {
    let c = Copy::new(0, 0, 1);
    let (_dir, store) = store_with(&c);
    let idle = c.span(IDLE).clone();
    assert!(!has_samples(&store, &idle.span_id));
    // One goroutine, labelled with the idle span, as Go's goroutine profile writes it.
    let mut g = c.pprof.clone();
    let string = |g: &mut spanprof_format::pprof::Profile, s: &str| {
        g.string_table.push(s.into());
        g.string_table.len() as i64 - 1
    };
    let goroutine = string(&mut g, "goroutine");
    let count = string(&mut g, "count");
    let key = string(&mut g, "span_id");
    let value = string(&mut g, &hex(&idle.span_id));
    let mut sample = g.sample[0].clone();
    sample.value = vec![1];
    sample.label = vec![spanprof_format::pprof::Label {
        key,
        str: value,
        ..Default::default()
    }];
    g.sample = vec![sample];
    g.sample_type = vec![spanprof_format::pprof::ValueType {
        r#type: goroutine,
        unit: count,
    }];
    g.period_type = Some(spanprof_format::pprof::ValueType {
        r#type: goroutine,
        unit: count,
    });
    g.period = 1;
    g.time_nanos = idle.start_ns as i64;
    g.duration_nanos = 0;
    let (data, _) = spanprof_format::to_otlp::pprof_to_otlp(
        &g,
        resource(),
        Some(spanprof_format::LinkConfig::default()),
    )
    .unwrap();
    store.ingest(&[&data], Vec::new()).unwrap();
    assert!(has_samples(&store, &idle.span_id));
    let got = store.span_coverage(idle.span_id, None).unwrap();
    assert_eq!(got.profile_type, Some(cpu_type()), "{got:?}");
    assert_eq!(got.value, 0);
    // Asked for, the goroutine is there.
    let counted = store
        .span_coverage(idle.span_id, Some("goroutines"))
        .unwrap();
    assert_eq!(counted.value, 1, "{counted:?}");
}

/// A CPU window without samples (an idle process's) is stored as a window: a span in it used
/// no CPU, it was not unwatched. (Such a profile stored nothing, so the span read as one no
/// profile covers.)
#[test]
fn span_coverage_in_a_window_without_samples() {
    let mut idle = Copy::new(0, 0, 1);
    for p in idle
        .data
        .resource_profiles
        .iter_mut()
        .flat_map(|r| &mut r.scope_profiles)
        .flat_map(|s| &mut s.profiles)
    {
        p.samples.clear();
    }
    let dir = temp_dir();
    let store = open(dir.path());
    let report = store.ingest(&[&idle.data], Vec::new()).unwrap();
    assert_eq!((report.profiles, report.samples), (2, 0));
    let span = spanprof_store::spans::SpanRecord {
        span_id: [0x1d, 0x1e, 0, 0, 0, 0, 0, 1],
        start_ns: idle.time_ns as u64 + SEC as u64,
        end_ns: idle.time_ns as u64 + SEC as u64 + IDLE_NS,
        ..idle.span(IDLE).clone()
    };
    store.ingest(&[], vec![span.clone()]).unwrap();
    let got = store.span_coverage(span.span_id, None).unwrap();
    assert_eq!(
        (got.samples, got.covered_ns, got.period, got.between_windows),
        (0, Some(IDLE_NS), Some(PERIOD_NS), false)
    );
    assert_eq!(
        got.possible_samples,
        Some(IDLE_NS as f64 / PERIOD_NS as f64)
    );
    // Nothing to draw, and the service and its types are listed.
    assert_eq!(cpu(&store, &Selection::default()), 0);
    assert!(store.services(0, 0).contains(&SERVICE.to_owned()));
}

/// Profiles scraped under another name than the tracer gives the service: a span without
/// samples is measured against the windows of the services that hold the samples of the
/// other spans of its service in its trace (they were "no profile covers the span"), the
/// same whether it is asked about alone or with others (the answer depended on what else
/// was asked: a span search of one span and the trace view disagreed).
#[test]
fn span_coverage_of_a_service_profiled_under_another_name() {
    let mut c = Copy::new(0, 0, 1);
    for s in &mut c.spans {
        s.service = "checkout".into();
    }
    let idle = c.span(IDLE).clone();
    // A span of the same service, without samples, alone in a trace of its own.
    let mut lone = idle.clone();
    lone.trace_id = [0x7e; 16];
    lone.span_id = [0x7e; 8];
    lone.parent_span_id = None;
    c.spans.push(lone.clone());
    let (_dir, store) = store_with(&c);
    let busy = busiest(&c).clone();
    let measured = (
        Some(IDLE_NS),
        Some(PERIOD_NS),
        Some(IDLE_NS as f64 / PERIOD_NS as f64),
    );
    let alone = store.span_coverage(idle.span_id, None).unwrap();
    assert_eq!(
        (alone.covered_ns, alone.period, alone.possible_samples),
        measured
    );
    let both = store
        .span_coverages(&[busy, idle.clone(), lone.clone()], None)
        .unwrap();
    assert!(both[0].value > 0);
    assert_eq!(
        (both[1].covered_ns, both[1].period, both[1].possible_samples),
        measured
    );
    // No span of its trace has samples: nothing stands for its service.
    assert_eq!(
        (both[2].covered_ns, both[2].period, both[2].possible_samples),
        (Some(0), None, None),
        "nothing is profiled as checkout in its trace"
    );
    assert_eq!(
        store.span_coverage(lone.span_id, None).unwrap().covered_ns,
        Some(0)
    );
}
