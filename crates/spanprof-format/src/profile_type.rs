//! Pyroscope-style profile type ids, `name:sample_type:sample_unit:period_type:period_unit`
//! (e.g. `process_cpu:cpu:nanoseconds:cpu:nanoseconds`), so Grafana configs carry over.

/// The parts of a profile type id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ProfileTypeId {
    /// The profile's "metric" name: `process_cpu`, `memory`, `goroutines`, `mutex`, `block`, …
    pub name: String,
    /// What the values measure, e.g. `cpu`.
    pub sample_type: String,
    /// Unit of the values, e.g. `nanoseconds`.
    pub sample_unit: String,
    /// What the sampling period counts (empty when the profile has none).
    pub period_type: String,
    /// Unit of the period (empty when the profile has none).
    pub period_unit: String,
}

impl std::fmt::Display for ProfileTypeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}:{}",
            self.name, self.sample_type, self.sample_unit, self.period_type, self.period_unit
        )
    }
}

impl ProfileTypeId {
    /// The id of a profile with these sample and period types; `name_hint` (e.g. from a scrape
    /// job's profile name or Pyroscope's `__name__`) wins over the guess from the types.
    pub fn new(sample: (&str, &str), period: (&str, &str), name_hint: Option<&str>) -> Self {
        let name = match name_hint.filter(|n| !n.is_empty()) {
            Some(n) => n.to_owned(),
            None => guess_name(sample.0, period.0).to_owned(),
        };
        ProfileTypeId {
            name,
            sample_type: sample.0.to_owned(),
            sample_unit: sample.1.to_owned(),
            period_type: period.0.to_owned(),
            period_unit: period.1.to_owned(),
        }
    }

    /// Parses a full 5-part id (a 6th `:delta` part, which Pyroscope's parser allows, is
    /// ignored).
    pub fn parse(id: &str) -> Option<Self> {
        let parts: Vec<&str> = id.split(':').collect();
        if !(5..=6).contains(&parts.len()) || parts[0].is_empty() || parts[1].is_empty() {
            return None;
        }
        Some(ProfileTypeId {
            name: parts[0].into(),
            sample_type: parts[1].into(),
            sample_unit: parts[2].into(),
            period_type: parts[3].into(),
            period_unit: parts[4].into(),
        })
    }

    /// Whether `selector` names this type: a full id, `type:unit:period_type:period_unit`,
    /// `type:unit`, `type`, or just the name (`process_cpu` matches every process_cpu type);
    /// `heap`, Go's heap profile by its name, is its default type, `inuse_space`.
    pub fn matches(&self, selector: &str) -> bool {
        let parts: Vec<&str> = selector.split(':').collect();
        match parts.as_slice() {
            ["heap"] => self.sample_type == "inuse_space",
            [one] => *one == self.sample_type || *one == self.name,
            [t, u] => *t == self.sample_type && *u == self.sample_unit,
            [t, u, pt, pu] => {
                *t == self.sample_type
                    && *u == self.sample_unit
                    && *pt == self.period_type
                    && *pu == self.period_unit
            }
            [..] => ProfileTypeId::parse(selector).as_ref() == Some(self),
        }
    }

    /// Whether each profile of this type is a snapshot (what is in use, what is running at
    /// its time), not a count over its window: see [`is_snapshot_type`].
    pub fn is_snapshot(&self) -> bool {
        is_snapshot_type(&self.sample_type)
    }

    /// Whether this is a CPU time type (the default a query falls back to).
    pub fn is_cpu(&self) -> bool {
        self.sample_type == "cpu"
            || (self.name == "process_cpu" && self.sample_unit == "nanoseconds")
    }

    /// Whether samples of this type are taken while on a CPU: CPU time, or a count of CPU
    /// samples (`samples:count` with a `cpu` period, what the OpenTelemetry eBPF profiler
    /// sends). A span with none over several periods used no CPU.
    pub fn samples_cpu(&self) -> bool {
        self.is_cpu() || (self.sample_type == "samples" && self.period_type == "cpu")
    }

    /// How this type ranks as the one a query takes when none is given, lowest first: CPU
    /// time, then CPU sample counts (a profiler that sends only those, as the OpenTelemetry
    /// eBPF profiler), then wall-clock time (what a profiler without CPU time, as the Node.js
    /// SDK's, measures a span in), then any other.
    pub fn default_rank(&self) -> u8 {
        if self.is_cpu() {
            0
        } else if self.samples_cpu() {
            1
        } else if self.sample_type == "wall" && self.sample_unit == "nanoseconds" {
            2
        } else {
            3
        }
    }

    /// Of `types`, the one a query takes when none is given (or when a name covers several
    /// of them): the first of the lowest [`ProfileTypeId::default_rank`].
    pub fn preferred<'a>(
        types: impl IntoIterator<Item = &'a ProfileTypeId>,
    ) -> Option<&'a ProfileTypeId> {
        types.into_iter().min_by_key(|t| t.default_rank())
    }
}

/// Whether profiles of sample type `sample_type` are snapshots (what is in use or running at
/// the profile's time), not counts over its window. Over a time range such profiles are
/// averaged, not added up (Pyroscope's sample type mapping marks `inuse_*` "average"): the
/// heap of eight scrapes is not eight heaps. Decided by the family of the name, so every
/// profiler's spelling counts: Go's and .NET's `inuse_space`/`inuse-objects`, Node's V8 heap
/// once named as its SDK pushes it (see [`name_v8_types`]), Python's `heap-space`,
/// Ruby's `heap-live-size`/`heap-live-samples`, JFR's live objects (`live`), goroutines.
pub fn is_snapshot_type(sample_type: &str) -> bool {
    let t = sample_type.to_ascii_lowercase().replace('-', "_");
    let word = |w: &str| t == w || t.strip_prefix(w).is_some_and(|rest| rest.starts_with('_'));
    word("inuse")
        || word("live")
        || word("heap_live")
        || t == "heap_space"
        || t == "goroutine"
        || t == "goroutines"
}

/// Names a V8 profile's types as the Node.js SDK does when it pushes one: the heap's
/// `objects` and `space` become `inuse_objects` and `inuse_space`, and so does its period type
/// `space` (one object in the SDK: pushed, the heap is `memory:inuse_space:bytes:inuse_space:
/// bytes`); the wall profile's `sample` (period type `wall`) becomes `samples`. The SDK's pull
/// handlers (`/debug/pprof/heap`, `/debug/pprof/profile`) serve them unrenamed, so a scraped
/// Node service had other type ids than a pushed one, and its heap was summed over a range
/// instead of averaged. Returns whether it renamed.
pub fn name_v8_types(p: &mut crate::pprof::Profile) -> bool {
    let is_heap = match p.period_type.and_then(|t| p.str(t.r#type)) {
        Some("space") => true,
        Some("wall") => false,
        _ => return false,
    };
    let renames: &[(&str, &str)] = if is_heap {
        &[("objects", "inuse_objects"), ("space", "inuse_space")]
    } else {
        &[("sample", "samples")]
    };
    let mut renamed = false;
    for column in 0..p.sample_type.len() {
        let name = p.str(p.sample_type[column].r#type);
        if let Some(&(_, new)) = renames.iter().find(|(old, _)| Some(*old) == name) {
            // A new string: the old one may name the period type or a frame too.
            p.sample_type[column].r#type = push_string(p, new);
            renamed = true;
        }
    }
    if is_heap && renamed {
        let index = push_string(p, "inuse_space");
        if let Some(t) = p.period_type.as_mut() {
            t.r#type = index;
        }
    }
    renamed
}

fn push_string(p: &mut crate::pprof::Profile, s: &str) -> i64 {
    p.string_table.push(s.to_owned());
    p.string_table.len() as i64 - 1
}

/// The Pyroscope name a profile's content decides, whatever the endpoint or upload that
/// brought it: `wall` for a wall-clock profile (any sample type `wall`: Node's and .NET's
/// wall profilers put their CPU time beside it), as Pyroscope names an upload. A scraped and a
/// pushed profile of one program then have one set of type ids.
pub fn name_from_content<'a>(
    sample_types: impl IntoIterator<Item = &'a str>,
) -> Option<&'static str> {
    sample_types
        .into_iter()
        .any(|t| t == "wall")
        .then_some("wall")
}

/// The Pyroscope name for a Go/pprof sample type.
fn guess_name(sample_type: &str, period_type: &str) -> &'static str {
    match sample_type {
        "cpu" | "samples" if period_type == "cpu" || period_type.is_empty() => "process_cpu",
        "cpu" => "process_cpu",
        "wall" => "wall",
        "alloc_objects" | "alloc_space" | "inuse_objects" | "inuse_space" => "memory",
        "goroutine" | "goroutines" => "goroutines",
        "contentions" | "delay" => "mutex",
        "events" => "off_cpu",
        _ => "process_cpu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_types_get_pyroscope_names() {
        let cpu = ProfileTypeId::new(("cpu", "nanoseconds"), ("cpu", "nanoseconds"), None);
        assert_eq!(
            cpu.to_string(),
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
        );
        assert!(cpu.is_cpu());
        let heap = ProfileTypeId::new(("inuse_space", "bytes"), ("space", "bytes"), None);
        assert_eq!(heap.to_string(), "memory:inuse_space:bytes:space:bytes");
        // `heap` is the heap profile's default type, not every memory type.
        assert!(heap.matches("heap"));
        let allocs = ProfileTypeId::new(("alloc_space", "bytes"), ("space", "bytes"), None);
        assert!(!allocs.matches("heap") && allocs.matches("memory"));
        let block = ProfileTypeId::new(
            ("delay", "nanoseconds"),
            ("contentions", "count"),
            Some("block"),
        );
        assert_eq!(
            block.to_string(),
            "block:delay:nanoseconds:contentions:count"
        );
        let g = ProfileTypeId::new(("goroutine", "count"), ("goroutine", "count"), None);
        assert_eq!(g.to_string(), "goroutines:goroutine:count:goroutine:count");
    }

    #[test]
    fn selectors_match() {
        let cpu = ProfileTypeId::new(("cpu", "nanoseconds"), ("cpu", "nanoseconds"), None);
        for s in [
            "cpu",
            "process_cpu",
            "cpu:nanoseconds",
            "cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
        ] {
            assert!(cpu.matches(s), "{s}");
        }
        for s in [
            "samples",
            "memory",
            "cpu:count",
            "x:cpu:nanoseconds:cpu:nanoseconds",
            "a:b:c",
        ] {
            assert!(!cpu.matches(s), "{s}");
        }
        assert_eq!(
            ProfileTypeId::parse("memory:alloc_in_new_tlab_bytes:bytes::")
                .unwrap()
                .period_type,
            ""
        );
        assert!(ProfileTypeId::parse("nope").is_none());
    }

    #[test]
    fn the_default_type_is_cpu_time_then_cpu_counts_then_wall_time_then_the_first() {
        let id = |s: &str| ProfileTypeId::parse(s).unwrap();
        // The Node.js SDK's types: sorted, the heap's come first.
        let node = [
            id("memory:inuse_objects:count:space:bytes"),
            id("memory:inuse_space:bytes:space:bytes"),
            id("wall:samples:count:wall:nanoseconds"),
            id("wall:wall:nanoseconds:wall:nanoseconds"),
        ];
        assert_eq!(ProfileTypeId::preferred(&node), Some(&node[3]));
        let with_cpu = [node[3].clone(), id("wall:cpu:nanoseconds:wall:nanoseconds")];
        assert_eq!(ProfileTypeId::preferred(&with_cpu), Some(&with_cpu[1]));
        assert_eq!(ProfileTypeId::preferred(&node[..2]), Some(&node[0]));
        // The OpenTelemetry eBPF profiler's CPU sample counts, beside other types; a Go CPU
        // profile's count type is second to its CPU time.
        let ebpf = id("process_cpu:samples:count:cpu:nanoseconds");
        let with_counts = [node[0].clone(), node[3].clone(), ebpf.clone()];
        assert_eq!(ProfileTypeId::preferred(&with_counts), Some(&ebpf));
        let go = [ebpf, id("process_cpu:cpu:nanoseconds:cpu:nanoseconds")];
        assert_eq!(ProfileTypeId::preferred(&go), Some(&go[1]));
        assert_eq!(ProfileTypeId::preferred(&[]), None);
    }

    #[test]
    fn snapshots_are_told_by_the_family_of_their_name() {
        for t in [
            "inuse_space",
            "inuse_objects",
            "inuse-space",
            "INUSE_OBJECTS",
            "heap-space",
            "heap-live-size",
            "heap-live-samples",
            "live",
            "goroutine",
            "goroutines",
        ] {
            assert!(is_snapshot_type(t), "{t}");
        }
        for t in [
            "alloc_space",
            "alloc-samples",
            "alloc_in_new_tlab_bytes",
            "cpu",
            "wall",
            "samples",
            "space",
            "objects",
            "inuser",
            "lively",
            "heap",
            "delay",
            "contentions",
        ] {
            assert!(!is_snapshot_type(t), "{t}");
        }
    }

    #[test]
    fn v8_profiles_are_named_as_the_node_sdk_pushes_them() {
        use crate::pprof::{Profile, ValueType};
        let v8 = |period: &str| Profile {
            // V8's heap: one string for the period type and the second sample type.
            string_table: vec![
                "".into(),
                "objects".into(),
                "count".into(),
                period.into(),
                "bytes".into(),
            ],
            sample_type: vec![
                ValueType { r#type: 1, unit: 2 },
                ValueType { r#type: 3, unit: 4 },
            ],
            period_type: Some(ValueType { r#type: 3, unit: 4 }),
            ..Default::default()
        };
        let mut heap = v8("space");
        assert!(name_v8_types(&mut heap));
        let types: Vec<_> = heap
            .sample_type
            .iter()
            .map(|t| heap.str(t.r#type).unwrap())
            .collect();
        assert_eq!(types, ["inuse_objects", "inuse_space"]);
        assert_eq!(
            heap.str(heap.period_type.unwrap().r#type),
            Some("inuse_space")
        );
        // Not a heap profile: left alone.
        let mut other = v8("samples");
        assert!(!name_v8_types(&mut other));
        assert_eq!(other.str(other.sample_type[0].r#type), Some("objects"));
        // The wall profile: `sample` (V8's name for the count) under period type `wall`.
        let mut wall = v8("wall");
        wall.string_table[1] = "sample".into();
        assert!(name_v8_types(&mut wall));
        assert_eq!(wall.str(wall.sample_type[0].r#type), Some("samples"));
        assert_eq!(wall.str(wall.sample_type[1].r#type), Some("wall"));
    }

    #[test]
    fn a_wall_clock_profile_is_named_wall_however_it_came() {
        assert_eq!(name_from_content(["samples", "wall", "cpu"]), Some("wall"));
        assert_eq!(name_from_content(["samples", "cpu"]), None);
    }
}
