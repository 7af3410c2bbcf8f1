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

/// Whether profiles of sample type `sample_type` are snapshots: Go's `inuse_space` and
/// `inuse_objects` (the heap in use at the profile's time) and goroutine counts. Over a time
/// range such profiles are averaged, not added up (Pyroscope's sample type mapping marks
/// `inuse_*` "average"): the heap of eight scrapes is not eight heaps.
pub fn is_snapshot_type(sample_type: &str) -> bool {
    matches!(
        sample_type,
        "inuse_space" | "inuse_objects" | "goroutine" | "goroutines"
    )
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
}
