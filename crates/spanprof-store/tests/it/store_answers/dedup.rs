//! Symbols are stored once per service: the same real profile ingested 100 times (each copy
//! with its own span and trace ids) costs its symbols once and then only its samples.
//!
//! The bounds are computed from the profile, not measured from the store:
//! - *symbol floor*: the fewest bytes the profile's symbols take in any varint encoding (each
//!   string's bytes plus a length byte, at least one byte per number). A copy that stored its
//!   symbols again would add at least this on top of its samples.
//! - *sample ceiling*: what a further copy carries that the store has not seen — its span and
//!   trace ids, 8 and 16 bytes each, once — plus its sample columns as varints (stack node,
//!   link, value per sample) and a generous 32 bytes per block and 64 per record of framing.

use std::collections::BTreeSet;

use spanprof_format::pprof;
use spanprof_store::store::{Selection, Store, StoreConfig};

use super::fixture::*;

const COPIES: u16 = 100;
/// Blocks per copy: 5 label sets × 2 sample types.
const BLOCKS: u64 = 10;

fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// See the module docs; `stack_nodes` as the store counts them.
fn symbol_floor(p: &pprof::Profile, stack_nodes: u64) -> u64 {
    let strings: BTreeSet<&str> = p
        .function
        .iter()
        .flat_map(|f| [f.name, f.system_name, f.filename])
        .filter_map(|i| p.str(i))
        .filter(|s| !s.is_empty())
        .collect();
    let strings: u64 = strings.iter().map(|s| s.len() as u64 + 1).sum();
    let functions = 4 * p.function.len() as u64;
    let locations: u64 = p.location.iter().map(|l| 3 + 3 * l.line.len() as u64).sum();
    strings + functions + locations + 2 * stack_nodes
}

/// See the module docs.
fn sample_ceiling(c: &Copy, stack_nodes: u64) -> u64 {
    let traces: BTreeSet<[u8; 16]> = c.sums.by_span.values().map(|s| s.trace_id).collect();
    let ids = 8 * c.sums.by_span.len() as u64 + 16 * traces.len() as u64;
    // No block has 128 links (the most spans of one name is 81), so a link is one byte.
    let per_sample = varint_len(stack_nodes) + 1;
    let columns: u64 = c.data.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter()
        .flat_map(|p| &p.samples)
        .map(|s| per_sample + varint_len(zigzag(s.values.iter().sum())))
        .sum();
    ids + columns + 32 * BLOCKS + 64
}

fn ingest_profile(store: &Store, c: &Copy) -> u64 {
    let before = store.stats().disk_bytes;
    let r = store.ingest(&[&c.data], Vec::new()).unwrap();
    assert_eq!(
        (r.profiles, r.rejected_profiles),
        (2, 0),
        "{:?}",
        r.problems
    );
    store.stats().disk_bytes - before
}

#[test]
fn symbols_are_stored_once_across_100_ingests_of_the_same_profile() {
    let dir = temp_dir();
    // fsync is not what this test measures.
    let cfg = StoreConfig {
        sync: false,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg.clone());
    let copies: Vec<Copy> = (0..COPIES)
        .map(|n| Copy::new(n, i64::from(n) * 15 * SEC, 1))
        .collect();
    let first = ingest_profile(&store, &copies[0]);
    let nodes = store.stats().stack_nodes;
    assert!(nodes > 283, "{nodes} stack nodes for 283 distinct stacks");
    let floor = symbol_floor(&copies[0].pprof, nodes as u64);
    let mut further = Vec::new();
    for c in &copies[1..] {
        further.push(ingest_profile(&store, c));
        assert_eq!(
            store.stats().stack_nodes,
            nodes,
            "copy at {} added stack nodes",
            c.time_ns
        );
    }
    let (least, most) = (
        *further.iter().min().unwrap(),
        *further.iter().max().unwrap(),
    );
    let total = first + further.iter().sum::<u64>();
    eprintln!(
        "first ingest {first} B (symbol floor {floor} B), further {least}..={most} B, \
         {COPIES} copies {total} B, gzipped pprof {} B",
        original_gz().len()
    );
    // Every further copy costs the same (times and ids differ, their sizes hardly) ...
    assert!(
        most - least <= 2 * BLOCKS,
        "further copies cost {least}..={most} B"
    );
    // ... and writes none of the symbols again.
    assert!(
        most + floor <= first,
        "a further copy added {most} B, the first {first} B: less than the {floor} B of symbols apart"
    );
    assert!(total + 99 * floor <= 100 * first);
    let stats = store.stats();
    assert_eq!(stats.series, 10, "the same 10 series for every copy");

    // Every copy is still answered exactly, after a reopen too.
    drop(store);
    let (store, report) = open_with(cfg);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(store.stats().stack_nodes, nodes);
    let all: i64 = copies.iter().map(|c| c.sums.cpu_total).sum();
    assert_eq!(cpu(&store, &Selection::default()), all);
    for c in [&copies[1], &copies[57], &copies[99]] {
        let sorts = c.named(SORT);
        let ids = sorts.iter().map(|s| &s.span_id);
        assert_eq!(cpu(&store, &of_spans(ids)), c.cpu_named(SORT));
    }
}

/// DESIGN.md: "keep disk bytes per sample far below the gzipped pprof it came from". Once the
/// symbols are known, a copy adds only new ids and sample columns; see the module docs.
#[test]
fn a_further_copy_costs_no_more_than_its_new_ids_and_sample_columns() {
    let dir = temp_dir();
    let cfg = StoreConfig {
        sync: false,
        ..StoreConfig::new(dir.path())
    };
    let (store, _) = open_with(cfg);
    let first = ingest_profile(&store, &Copy::new(0, 0, 1));
    let nodes = store.stats().stack_nodes as u64;
    let second = Copy::new(1, 15 * SEC, 1);
    let further = ingest_profile(&store, &second);
    // The store writes each profile's span and trace ids once: the blocks of its sample types
    // (Go CPU has two: samples/count and cpu/nanoseconds) and label sets index into the link
    // table of their record.
    let ceiling = sample_ceiling(&second, nodes);
    assert!(
        further <= ceiling,
        "a further copy added {further} B ({}% of the first's {first} B, {}% of the {} B \
         gzipped pprof); its new ids (once) and sample columns need at most {ceiling} B",
        further * 100 / first,
        further * 100 / original_gz().len() as u64,
        original_gz().len()
    );
}
