//! Cumulative pprof sample types made into deltas.
//!
//! Go's `/debug/pprof/heap` and `/debug/pprof/allocs` count allocations (`alloc_objects`,
//! `alloc_space`) since the program started, and its mutex and block profiles count contention
//! (`contentions`, `delay`) the same way. Stored as they come, each scrape would add every
//! allocation since start-up again: an hour's flame graph would count the first minute's
//! allocations 240 times. [`Cumulative`] keeps the last profile of one endpoint and rewrites the
//! next as what happened in between, as a Prometheus `rate` does with counters. Values that are
//! snapshots already (`inuse_space`, `inuse_objects`, goroutine counts) are left as they are.
//!
//! Samples are matched across profiles by what they mean, not by ids (Go numbers locations in
//! the order it writes them): each location's address and lines (function name, file, line),
//! then the labels. A value that went down means the program restarted: its value is all that
//! happened since, and is taken whole.

use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::HashMap;

use super::Profile;

/// Whether pprof sample type `name` counts from the program's start (Go's runtime profiles):
/// `alloc_objects` and `alloc_space` of heap and allocs, `contentions` and `delay` of mutex and
/// block.
pub fn is_cumulative(name: &str) -> bool {
    matches!(
        name,
        "alloc_objects" | "alloc_space" | "contentions" | "delay"
    )
}

/// What [`Cumulative::apply`] did to a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    /// The profile has no cumulative sample type: it is unchanged.
    NotCumulative,
    /// The first profile (or the first since its cumulative types changed): there is nothing
    /// to subtract yet, so its cumulative values are zeroed (they are kept for the next one).
    /// Samples left with no value are removed.
    Baseline,
    /// Cumulative values are now their growth since the previous profile, taken at
    /// `previous_time_nanos`. `restarted` samples had gone down (the program restarted) and
    /// keep their whole value. Samples left with no value are removed.
    Since {
        /// `time_nanos` of the previous profile.
        previous_time_nanos: i64,
        /// Samples whose count had gone down.
        restarted: usize,
    },
}

/// The last profile of one endpoint: each sample's cumulative values, by what the sample
/// means. A clone taken before [`Cumulative::apply`] puts it back when the profile could not
/// be stored (the next delta then covers both intervals).
#[derive(Clone, Default)]
pub struct Cumulative {
    hasher: hashbrown::DefaultHashBuilder,
    last: Option<Snapshot>,
}

#[derive(Clone)]
struct Snapshot {
    /// Type and unit of each cumulative sample type, in the profile's order.
    types: Vec<(String, String)>,
    time_nanos: i64,
    /// Sample key → offset of its values in `values` (one per cumulative type).
    offsets: HashMap<u64, usize>,
    values: Vec<i64>,
}

impl Cumulative {
    /// An endpoint not seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rewrites the cumulative sample types of `p` as their growth since the profile last given
    /// (see [`Delta`]), and keeps `p`'s own values for the next call.
    pub fn apply(&mut self, p: &mut Profile) -> Delta {
        let columns: Vec<usize> = (0..p.sample_type.len())
            .filter(|&i| is_cumulative(p.str(p.sample_type[i].r#type).unwrap_or("")))
            .collect();
        if columns.is_empty() {
            self.last = None;
            return Delta::NotCumulative;
        }
        let types: Vec<(String, String)> = columns
            .iter()
            .map(|&i| {
                let t = &p.sample_type[i];
                let s = |x| p.str(x).unwrap_or("").to_owned();
                (s(t.r#type), s(t.unit))
            })
            .collect();
        let previous = self.last.take().filter(|s| s.types == types);
        let keys = self.sample_keys(p);

        // This profile's totals per key (a key may come twice: the first sample of it carries
        // the key's delta, the others none).
        let width = columns.len();
        let mut offsets: HashMap<u64, usize> = HashMap::with_capacity(p.sample.len());
        let mut values: Vec<i64> = Vec::with_capacity(p.sample.len() * width);
        let mut first = vec![false; p.sample.len()];
        for (i, (s, &key)) in p.sample.iter().zip(&keys).enumerate() {
            let at = *offsets.entry(key).or_insert_with(|| {
                first[i] = true;
                values.resize(values.len() + width, 0);
                values.len() - width
            });
            for (c, &col) in columns.iter().enumerate() {
                let v = s.value.get(col).copied().unwrap_or(0);
                values[at + c] = values[at + c].saturating_add(v);
            }
        }

        let mut restarted = 0;
        for (i, (s, key)) in p.sample.iter_mut().zip(&keys).enumerate() {
            let at = offsets[key];
            let before = previous
                .as_ref()
                .and_then(|prev| prev.offsets.get(key).map(|&o| &prev.values[o..o + width]));
            let mut went_down = false;
            for (c, &col) in columns.iter().enumerate() {
                let Some(v) = s.value.get_mut(col) else {
                    continue;
                };
                let now = values[at + c];
                *v = match (first[i], &previous, before) {
                    (false, _, _) | (true, None, _) => 0,
                    (true, Some(_), None) => now,
                    (true, Some(_), Some(b)) if now >= b[c] => now - b[c],
                    (true, Some(_), Some(_)) => {
                        went_down = true;
                        now
                    }
                };
            }
            restarted += usize::from(went_down);
        }
        p.sample.retain(|s| s.value.iter().any(|&v| v != 0));

        let delta = match &previous {
            None => Delta::Baseline,
            Some(prev) => Delta::Since {
                previous_time_nanos: prev.time_nanos,
                restarted,
            },
        };
        self.last = Some(Snapshot {
            types,
            time_nanos: p.time_nanos,
            offsets,
            values,
        });
        delta
    }

    /// Each sample's key: its locations by address and lines, then its labels, by content.
    fn sample_keys(&self, p: &Profile) -> Vec<u64> {
        let s = |i: i64| p.str(i).unwrap_or("");
        let functions: HashMap<u64, usize> = p
            .function
            .iter()
            .enumerate()
            .map(|(i, f)| (f.id, i))
            .collect();
        let locations: HashMap<u64, u64> = p
            .location
            .iter()
            .map(|l| {
                let mut h = self.hasher.build_hasher();
                l.address.hash(&mut h);
                for line in &l.line {
                    match functions.get(&line.function_id).map(|&i| &p.function[i]) {
                        Some(f) => (s(f.name), s(f.filename)).hash(&mut h),
                        None => ("", "").hash(&mut h),
                    }
                    (line.line, line.column).hash(&mut h);
                }
                (l.id, h.finish())
            })
            .collect();
        p.sample
            .iter()
            .map(|sample| {
                let mut h = self.hasher.build_hasher();
                sample.location_id.len().hash(&mut h);
                for id in &sample.location_id {
                    locations.get(id).copied().unwrap_or(0).hash(&mut h);
                }
                for l in &sample.label {
                    (s(l.key), s(l.str), l.num, s(l.num_unit)).hash(&mut h);
                }
                h.finish()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Cumulative, Delta};
    use crate::pprof::{Function, Label, Line, Location, Profile, Sample, ValueType};

    /// A heap-like profile: `alloc_space` (cumulative) and `inuse_space` (a snapshot), one
    /// sample per `(function, alloc, inuse)`, location ids numbered from `first_id` (Go numbers
    /// them as it writes them, differently each time).
    fn heap(time: i64, first_id: u64, samples: &[(&str, i64, i64)]) -> Profile {
        let mut p = Profile {
            string_table: vec![
                String::new(),
                "alloc_space".into(),
                "inuse_space".into(),
                "bytes".into(),
                "main.go".into(),
            ],
            time_nanos: time,
            ..Default::default()
        };
        p.sample_type = vec![
            ValueType { r#type: 1, unit: 3 },
            ValueType { r#type: 2, unit: 3 },
        ];
        for (i, &(name, alloc, inuse)) in samples.iter().enumerate() {
            let id = first_id + i as u64;
            p.string_table.push(name.into());
            p.function.push(Function {
                id,
                name: p.string_table.len() as i64 - 1,
                filename: 4,
                ..Default::default()
            });
            p.location.push(Location {
                id,
                address: 0x1000 + 16 * name.len() as u64,
                line: vec![Line {
                    function_id: id,
                    line: 7,
                    column: 0,
                }],
                ..Default::default()
            });
            p.sample.push(Sample {
                location_id: vec![id],
                value: vec![alloc, inuse],
                label: Vec::new(),
            });
        }
        p
    }

    /// `(function, alloc, inuse)` of each sample left.
    fn values(p: &Profile) -> Vec<(String, i64, i64)> {
        p.sample
            .iter()
            .map(|s| {
                let l = p
                    .location
                    .iter()
                    .find(|l| l.id == s.location_id[0])
                    .unwrap();
                let f = p
                    .function
                    .iter()
                    .find(|f| f.id == l.line[0].function_id)
                    .unwrap();
                (
                    p.string_table[f.name as usize].clone(),
                    s.value[0],
                    s.value[1],
                )
            })
            .collect()
    }

    fn row(f: &str, alloc: i64, inuse: i64) -> (String, i64, i64) {
        (f.to_owned(), alloc, inuse)
    }

    #[test]
    fn the_first_profile_is_a_baseline_and_the_next_ones_count_what_happened_since() {
        let mut c = Cumulative::new();
        let mut first = heap(10, 1, &[("a", 100, 10), ("bb", 50, 0)]);
        assert_eq!(c.apply(&mut first), Delta::Baseline);
        // Snapshots stay; counts since start-up are not stored; a sample with nothing left goes.
        assert_eq!(values(&first), [row("a", 0, 10)]);

        // Other ids, other order, a new function.
        let mut second = heap(20, 40, &[("ccc", 5, 5), ("bb", 80, 0), ("a", 100, 12)]);
        assert_eq!(
            c.apply(&mut second),
            Delta::Since {
                previous_time_nanos: 10,
                restarted: 0
            }
        );
        assert_eq!(
            values(&second),
            [row("ccc", 5, 5), row("bb", 30, 0), row("a", 0, 12)]
        );

        // Deltas are taken from the last profile as it came, not as it was rewritten.
        let mut third = heap(30, 7, &[("a", 130, 0), ("bb", 80, 0), ("ccc", 5, 0)]);
        c.apply(&mut third);
        assert_eq!(values(&third), [row("a", 30, 0)]);
    }

    #[test]
    fn a_count_that_went_down_is_a_restart_and_is_taken_whole() {
        let mut c = Cumulative::new();
        c.apply(&mut heap(10, 1, &[("a", 1000, 0), ("bb", 500, 0)]));
        let mut after_restart = heap(20, 1, &[("a", 40, 0), ("bb", 600, 0)]);
        assert_eq!(
            c.apply(&mut after_restart),
            Delta::Since {
                previous_time_nanos: 10,
                restarted: 1
            }
        );
        assert_eq!(values(&after_restart), [row("a", 40, 0), row("bb", 100, 0)]);
    }

    #[test]
    fn samples_are_told_apart_by_labels_and_the_same_key_twice_counts_once() {
        let mut c = Cumulative::new();
        let with_labels = |time, a: i64, b: i64| {
            let mut p = heap(time, 1, &[("a", a, 0), ("a", b, 0)]);
            // Both samples on the first location; told apart by a numeric label, as Go's heap
            // profile tells allocation sizes apart.
            p.string_table.push("bytes".into());
            let key = p.string_table.len() as i64 - 1;
            p.sample[1].location_id = vec![1];
            for (s, size) in p.sample.iter_mut().zip([64, 128]) {
                s.label.push(Label {
                    key,
                    num: size,
                    ..Default::default()
                });
            }
            p
        };
        c.apply(&mut with_labels(1, 100, 200));
        let mut next = with_labels(2, 110, 260);
        c.apply(&mut next);
        assert_eq!(
            next.sample.iter().map(|s| s.value[0]).collect::<Vec<_>>(),
            [10, 60]
        );

        // The same stack and labels twice in one profile: their sum is one count.
        let mut c = Cumulative::new();
        c.apply(&mut heap(1, 1, &[("a", 100, 0), ("a", 50, 0)]));
        let mut twice = heap(2, 1, &[("a", 120, 0), ("a", 60, 0)]);
        c.apply(&mut twice);
        assert_eq!(values(&twice), [row("a", 30, 0)]);
    }

    #[test]
    fn profiles_without_cumulative_types_pass_unchanged_and_a_change_of_types_starts_again() {
        let mut c = Cumulative::new();
        let mut cpu = heap(1, 1, &[("a", 5, 6)]);
        cpu.string_table[1] = "samples".into();
        cpu.string_table[2] = "cpu".into();
        let before = cpu.clone();
        assert_eq!(c.apply(&mut cpu), Delta::NotCumulative);
        assert_eq!(cpu, before);

        c.apply(&mut heap(1, 1, &[("a", 100, 0)]));
        let mut objects = heap(2, 1, &[("a", 150, 0)]);
        objects.string_table[3] = "count".into();
        assert_eq!(c.apply(&mut objects), Delta::Baseline, "other units");
    }
}
