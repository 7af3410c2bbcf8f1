//! Each build of a program brings all its symbols anew. A service's symbols start a new
//! generation once they are more than twice what its profiles used recently, and a generation
//! is dropped when retention has deleted the last data that refers to it: what symbols take
//! follows the builds within retention, and answers over several generations are the same as
//! over one.

use crate::common;

use common::{sample, DictionaryBuilder, TICK_NS};
use spanprof_format::otlp::{string_kv, Mapping, ProfilesData, Resource};
use spanprof_store::store::{Selection, SeriesLimits, Store, StoreConfig};
use std::time::Duration;

const SERVICE: &str = "shop";
/// Functions per build, each with a name of about 200 bytes: some 10 KB of symbols a build.
const FUNCTIONS: usize = 40;
const SEC: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * SEC;

fn function(build: usize, i: usize) -> String {
    format!("shop/build{build}.handler{i}_{}", "x".repeat(180))
}

/// One CPU profile of build `build` at `T0 + at` seconds: `main.main` calling each of the
/// build's functions once, with `ticks` samples each; every frame in the build's binary (a
/// mapping of its own, as a new build's is).
fn profile(build: usize, at: u64, ticks: i64) -> ProfilesData {
    in_binary(build, build, at, ticks)
}

/// [`profile`] with the frames of `build` in the binary of build `binary`.
fn in_binary(build: usize, binary: usize, at: u64, ticks: i64) -> ProfilesData {
    let mut b = DictionaryBuilder::new();
    let filename_strindex = b.string("/app/shop");
    b.dict.mapping_table.push(Mapping {
        memory_start: 0x40_0000 + binary as u64 * 0x100_0000,
        memory_limit: 0x40_0000 + (binary as u64 + 1) * 0x100_0000,
        filename_strindex,
        ..Default::default()
    });
    let main = b.location(&["main.main"]);
    let mut samples = Vec::new();
    for i in 0..FUNCTIONS {
        let f = b.location(&[&function(build, i)]);
        let stack = b.stack(&[f, main]);
        samples.push(sample(stack, 0, &[ticks * TICK_NS]));
    }
    for l in &mut b.dict.location_table[1..] {
        l.mapping_index = 1;
    }
    let cpu = ("cpu", "nanoseconds");
    let mut p = b.profile(cpu, cpu, samples);
    p.time_unix_nano = T0 + at * SEC;
    p.duration_nano = 10 * SEC;
    let mut data = b.finish(vec![vec![p]]);
    data.resource_profiles[0].resource = Some(Resource {
        attributes: vec![string_kv("service.name", SERVICE)],
        ..Default::default()
    });
    data
}

/// [`profile`] of an interpreted program (Python, Ruby, Node; or folded text): frames with
/// no mapping, so nothing but the frames themselves tells one build from the next.
fn unmapped(build: usize, at: u64) -> ProfilesData {
    let mut data = profile(build, at, 1);
    let d = data.dictionary.as_mut().unwrap();
    d.mapping_table.truncate(1);
    for l in &mut d.location_table {
        l.mapping_index = 0;
    }
    data
}

fn ingest(store: &Store, data: &ProfilesData) {
    let r = store.ingest(&[data], Vec::new()).unwrap();
    assert_eq!(
        (r.profiles, r.rejected_profiles),
        (1, 0),
        "{:?}",
        r.problems
    );
}

/// The flame graph of everything stored, as sorted collapsed lines.
fn collapsed(store: &Store) -> Vec<String> {
    let mut lines: Vec<String> = store
        .flame_graph(&Selection::default())
        .unwrap()
        .0
        .to_collapsed()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// What the flame graph of builds `(build, ticks per function)` is.
fn expected(builds: &[(usize, i64)]) -> Vec<String> {
    let mut totals = std::collections::BTreeMap::new();
    for &(build, ticks) in builds {
        for i in 0..FUNCTIONS {
            *totals
                .entry(format!("main.main;{}", function(build, i)))
                .or_insert(0) += ticks * TICK_NS;
        }
    }
    let mut lines: Vec<String> = totals
        .into_iter()
        .map(|(stack, v)| format!("{stack} {v}"))
        .collect();
    lines.sort();
    lines
}

fn config(dir: &std::path::Path) -> StoreConfig {
    StoreConfig {
        symbol_generation_bytes: 20_000,
        // Measured at every ingest: what it and the one before used.
        symbol_use_period: Duration::ZERO,
        ..StoreConfig::new(dir)
    }
}

/// A deploy a segment, and retention keeping only the active segment: with generations the
/// symbols stay within a few builds' worth instead of growing by one build per deploy, and
/// the answers are those of the builds still stored, also after reopening.
#[test]
fn symbols_of_builds_retention_deleted_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        retention_bytes: Some(1),
        ..config(dir.path())
    };
    let (store, _) = Store::open(cfg.clone()).unwrap();
    ingest(&store, &profile(0, 0, 1));
    let one_build = store.stats().symbol_bytes;
    assert!((8_000..14_000).contains(&one_build), "{one_build}");
    let mut peak = 0;
    for build in 1..40 {
        store.rotate().unwrap();
        store.enforce_retention(0).unwrap();
        ingest(&store, &profile(build, build as u64 * 10, 1));
        peak = peak.max(store.stats().symbol_bytes);
    }
    // A generation is due once it holds more than twice the two builds in use (five), and is
    // dropped at the next retention; without generations 40 builds took 40 times one.
    assert!(
        peak < 7 * one_build,
        "{peak} bytes at most vs {one_build} a build"
    );
    let stats = store.stats();
    assert_eq!(stats.services, 1);
    assert!(
        stats.symbol_generations <= 2,
        "{}",
        stats.symbol_generations
    );
    assert_eq!(collapsed(&store), expected(&[(39, 1)]));
    assert_eq!(store.services(0, 0), [SERVICE]);
    drop(store);
    let (store, report) = Store::open(cfg).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(store.stats().symbol_bytes, stats.symbol_bytes);
    assert_eq!(store.stats().services, 1);
    assert_eq!(collapsed(&store), expected(&[(39, 1)]));
    // The current generation takes the next build, and what it already knows.
    ingest(&store, &profile(39, 400, 2));
    ingest(&store, &profile(40, 410, 1));
    assert_eq!(collapsed(&store), expected(&[(39, 3), (40, 1)]));
}

/// Frames without a mapping count by their own use, over [`UNMAPPED_USE_PERIODS`] periods
/// (the store's constant: 48): an interpreted program deployed every ten periods, each deploy
/// with new frames, keeps its symbols within a few builds' worth, where it kept every
/// build's before.
#[test]
fn symbols_of_unmapped_builds_are_dropped_too() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        retention_bytes: Some(1),
        ..config(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    ingest(&store, &unmapped(0, 0));
    let one_build = store.stats().symbol_bytes;
    let mut peak = 0;
    for build in 1..30 {
        store.rotate().unwrap();
        store.enforce_retention(0).unwrap();
        // A period per ingest (symbol_use_period 0): ten periods a build.
        for i in 0..10 {
            ingest(&store, &unmapped(build, build as u64 * 100 + i * 10));
            peak = peak.max(store.stats().symbol_bytes);
        }
    }
    // In use: the builds of the last 48 periods (five or six); a generation is due past twice
    // that, and dropped by the next retention. Without it, 30 builds took 30 times one.
    assert!(
        peak < 16 * one_build,
        "{peak} bytes at most vs {one_build} a build"
    );
    assert!(store.stats().symbol_generations <= 2);
    assert_eq!(collapsed(&store).len(), 40);
    assert!(collapsed(&store)[0].contains("build29"));
}

/// Without retention every generation stays, and answers over data of several generations
/// merge them by frame names: the same flame graph, series, services and pprof as if there
/// were one, before and after reopening.
#[test]
fn answers_span_generations() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(config(dir.path())).unwrap();
    for build in 0..5 {
        ingest(&store, &profile(build, build as u64 * 10, 1));
    }
    // Five builds, two of them in use: past 20 KB and twice the two, so the segment was
    // sealed and a new generation started.
    assert_eq!(store.stats().segments, 2);
    let series_before = store.series(&Selection::default()).unwrap();
    let r = store.ingest(&[&profile(4, 50, 2)], Vec::new()).unwrap();
    assert_eq!(r.new_series, 1, "the new generation's series");
    ingest(&store, &profile(5, 60, 1));
    let builds = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 3), (5, 1)];
    let check = |store: &Store| {
        assert_eq!(collapsed(store), expected(&builds));
        assert_eq!(store.services(0, 0), [SERVICE]);
        let stats = store.stats();
        assert_eq!((stats.services, stats.symbol_generations), (1, 2));
        assert_eq!(store.series(&Selection::default()).unwrap(), series_before);
        assert_eq!(store.profile_types(Some(SERVICE)).len(), 1);
        // One service's pprof: build 4's stacks with both generations' values.
        let p = store.pprof(&Selection::default()).unwrap();
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, 8 * FUNCTIONS as i64 * TICK_NS);
        // Only the new generation's data (profiles taken from 50 s on): build 4 at twice,
        // build 5.
        let recent = Selection {
            from_ns: (T0 + 50 * SEC) as i64,
            ..Default::default()
        };
        let recent = store.flame_graph(&recent).unwrap().0.total();
        assert_eq!(recent, 3 * FUNCTIONS as u64 * TICK_NS as u64);
    };
    check(&store);
    let bytes = store.stats().symbol_bytes;
    drop(store);
    let (store, report) = Store::open(config(dir.path())).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    check(&store);
    assert_eq!(store.stats().symbol_bytes, bytes);
    // New data goes to the current generation: no new series.
    let r = store.ingest(&[&profile(5, 70, 1)], Vec::new()).unwrap();
    assert_eq!((r.profiles, r.new_series), (1, 0));
}

/// Below the threshold, with every build in use, or before use is measured, a service keeps
/// one generation.
#[test]
fn generations_start_only_past_the_threshold_and_twice_the_use() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        symbol_generation_bytes: 1 << 20,
        ..config(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    for build in 0..8 {
        ingest(&store, &profile(build, build as u64 * 10, 1));
    }
    // Eight builds, two in use, but under 1 MiB: one generation.
    assert_eq!(store.stats().symbol_generations, 1);
    drop(store);
    // Past 20 KB, but all three builds in use.
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(config(dir.path())).unwrap();
    for at in 0..5 {
        let builds: Vec<ProfilesData> = (0..3).map(|b| profile(b, at * 10, 1)).collect();
        let r = store
            .ingest(&builds.iter().collect::<Vec<_>>(), Vec::new())
            .unwrap();
        assert_eq!(r.new_series, u64::from(at == 0), "ingest {at}");
    }
    assert_eq!(store.stats().symbol_generations, 1);
    // One binary whose profiles take other code paths each time (frames never seen again):
    // its paths taken now and then are in use while the binary is, one generation.
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(config(dir.path())).unwrap();
    for paths in 0..8 {
        ingest(&store, &in_binary(paths, 0, paths as u64 * 10, 1));
    }
    assert_eq!(store.stats().symbol_generations, 1);
    // An interpreted program that takes eight sets of code paths in turn, each again within
    // the 48 periods: all in use, one generation.
    let dir = tempfile::tempdir().unwrap();
    let (store_unmapped, _) = Store::open(config(dir.path())).unwrap();
    for at in 0..100 {
        ingest(&store_unmapped, &unmapped(at % 8, at as u64 * 10));
    }
    assert_eq!(store_unmapped.stats().symbol_generations, 1);
    drop(store_unmapped);
    // A service that stops sending is not measured as unused: another one's profiles go on,
    // and it keeps its one generation.
    let other = |build| {
        let mut p = profile(build, 100, 1);
        p.resource_profiles[0].resource = Some(Resource {
            attributes: vec![string_kv("service.name", "other")],
            ..Default::default()
        });
        p
    };
    for _ in 0..4 {
        ingest(&store, &other(9));
    }
    assert_eq!(store.stats().symbol_generations, 2, "shop's and other's");
    drop(store);
    // Use measured once an hour: not yet.
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        symbol_use_period: Duration::from_secs(3600),
        ..config(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    for build in 0..8 {
        ingest(&store, &profile(build, build as u64 * 10, 1));
    }
    assert_eq!(store.stats().symbol_generations, 1);
}

/// A generation that is due seals the segment itself: ingest alone, with no seal for any
/// other reason, starts it.
#[test]
fn a_due_generation_seals_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(config(dir.path())).unwrap();
    for build in 0..11 {
        ingest(&store, &profile(build, build as u64 * 10, 1));
    }
    let stats = store.stats();
    // Due at build 4 (five builds, two in use), and again at build 9.
    assert_eq!((stats.segments, stats.symbol_generations), (3, 3));
    let all: Vec<(usize, i64)> = (0..11).map(|b| (b, 1)).collect();
    assert_eq!(collapsed(&store), expected(&all));
}

/// A store whose one generation holds many builds (written without generations, as before
/// they existed): once reopened, what its profiles use is measured from then on, so the
/// builds no longer sent are dropped once a new generation starts and retention deletes the
/// data of the old one.
#[test]
fn builds_accumulated_before_a_restart_are_dropped_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |generations: u64| StoreConfig {
        symbol_generation_bytes: generations,
        retention_bytes: Some(1),
        ..config(dir.path())
    };
    {
        let (store, _) = Store::open(cfg(0)).unwrap();
        for build in 0..10 {
            ingest(&store, &profile(build, build as u64 * 10, 1));
            store.rotate().unwrap();
        }
    }
    let (store, _) = Store::open(cfg(20_000)).unwrap();
    let accumulated = store.stats().symbol_bytes;
    // The last build goes on sending: its first profile makes a new generation due, and
    // retention deletes the data of the old one.
    for at in 0..3 {
        ingest(&store, &profile(9, 100 + at * 10, 1));
        store.enforce_retention(0).unwrap();
    }
    let now = store.stats().symbol_bytes;
    assert!(
        now * 5 < accumulated,
        "{now} bytes after vs {accumulated} before"
    );
    // The first profile went with the old generation's segment.
    assert_eq!(collapsed(&store), expected(&[(9, 2)]));
}

/// A new generation's series repeat the old one's: at the series limit they are still made,
/// while a series with new labels is refused.
#[test]
fn a_new_generation_is_not_refused_at_the_series_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        series: SeriesLimits {
            max_series: 1,
            ..SeriesLimits::default()
        },
        ..config(dir.path())
    };
    let (store, _) = Store::open(cfg).unwrap();
    for build in 0..5 {
        ingest(&store, &profile(build, build as u64 * 10, 1));
    }
    assert_eq!(store.stats().symbol_generations, 2);
    let r = store.ingest(&[&profile(5, 50, 1)], Vec::new()).unwrap();
    assert_eq!((r.profiles, r.new_series), (1, 1), "{:?}", r.problems);
    let mut other = profile(5, 60, 1);
    other.resource_profiles[0]
        .resource
        .as_mut()
        .unwrap()
        .attributes
        .push(string_kv("env", "prod"));
    let r = store.ingest(&[&other], Vec::new()).unwrap();
    assert_eq!(r.limited_profiles, 1, "{:?}", r.problems);
}
