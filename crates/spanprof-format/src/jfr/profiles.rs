//! JFR events → pprof profiles, one per kind of sample, as Pyroscope converts them
//! (grafana/jfr-parser `pprof/`): the same sample and period types, metric names, values
//! (CPU and wall samples times the sampling period, allocation sizes in bytes, lock waits in
//! nanoseconds), frame names (`pkg/Class.method`, lines kept) and context labels.

use std::collections::BTreeMap;

use hashbrown::HashMap;

use super::chunk::{chunk_offsets, Chunk};
use super::labels::LabelsSnapshot;
use super::metadata::{Class, Kind};
use super::pool::{Value, ValueReader};
use super::stacks::{resolve_text, Stacks};
use super::JfrError;
use crate::pprof;

/// A kind of sample, each one profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SampleKind {
    /// On-CPU samples: `jdk.ExecutionSample` (JDK, async-profiler `cpu`/`itimer`).
    Cpu,
    /// Wall-clock samples: async-profiler's `profiler.WallClockSample`, `jdk.NativeMethodSample`.
    Wall,
    /// `jdk.ObjectAllocationInNewTLAB`.
    AllocInNewTlab,
    /// `jdk.ObjectAllocationOutsideTLAB`.
    AllocOutsideTlab,
    /// `jdk.ObjectAllocationSample` (the JDK's throttled allocation sampler).
    AllocSample,
    /// `jdk.JavaMonitorEnter`: waits to enter a `synchronized` block.
    Lock,
    /// `jdk.ThreadPark`: `LockSupport.park` waits.
    ThreadPark,
    /// async-profiler's `profiler.LiveObject`: objects still alive.
    LiveObject,
}

impl SampleKind {
    /// Pyroscope's `__name__` of the profile.
    pub fn metric(self) -> &'static str {
        match self {
            SampleKind::Cpu => "process_cpu",
            SampleKind::Wall => "wall",
            SampleKind::AllocInNewTlab
            | SampleKind::AllocOutsideTlab
            | SampleKind::AllocSample
            | SampleKind::LiveObject => "memory",
            SampleKind::Lock => "mutex",
            SampleKind::ThreadPark => "block",
        }
    }

    /// The (type, unit) of each value of a sample.
    pub fn sample_types(self) -> &'static [(&'static str, &'static str)] {
        match self {
            SampleKind::Cpu => &[("cpu", "nanoseconds")],
            SampleKind::Wall => &[("wall", "nanoseconds")],
            SampleKind::AllocInNewTlab => &[
                ("alloc_in_new_tlab_objects", "count"),
                ("alloc_in_new_tlab_bytes", "bytes"),
            ],
            SampleKind::AllocOutsideTlab => &[
                ("alloc_outside_tlab_objects", "count"),
                ("alloc_outside_tlab_bytes", "bytes"),
            ],
            SampleKind::AllocSample => &[
                ("alloc_sample_objects", "count"),
                ("alloc_sample_bytes", "bytes"),
            ],
            SampleKind::Lock | SampleKind::ThreadPark => {
                &[("contentions", "count"), ("delay", "nanoseconds")]
            }
            SampleKind::LiveObject => &[("live", "count")],
        }
    }

    /// The (type, unit) of the profile's period.
    pub fn period_type(self) -> (&'static str, &'static str) {
        match self {
            SampleKind::Cpu => ("cpu", "nanoseconds"),
            SampleKind::Wall => ("wall", "nanoseconds"),
            SampleKind::AllocInNewTlab | SampleKind::AllocOutsideTlab | SampleKind::AllocSample => {
                ("space", "bytes")
            }
            SampleKind::Lock => ("mutex", "count"),
            SampleKind::ThreadPark => ("block", "count"),
            SampleKind::LiveObject => ("objects", "count"),
        }
    }
}

/// What an event type becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    ExecutionSample,
    WallClockSample,
    NativeMethodSample,
    InNewTlab,
    OutsideTlab,
    AllocationSample,
    MonitorEnter,
    ThreadPark,
    LiveObject,
    ActiveSetting,
}

impl Rule {
    fn of(name: &str) -> Option<Rule> {
        Some(match name {
            "jdk.ExecutionSample" => Rule::ExecutionSample,
            "profiler.WallClockSample" => Rule::WallClockSample,
            "jdk.NativeMethodSample" => Rule::NativeMethodSample,
            "jdk.ObjectAllocationInNewTLAB" => Rule::InNewTlab,
            "jdk.ObjectAllocationOutsideTLAB" => Rule::OutsideTlab,
            "jdk.ObjectAllocationSample" => Rule::AllocationSample,
            "jdk.JavaMonitorEnter" => Rule::MonitorEnter,
            "jdk.ThreadPark" => Rule::ThreadPark,
            "profiler.LiveObject" => Rule::LiveObject,
            "jdk.ActiveSetting" => Rule::ActiveSetting,
            _ => return None,
        })
    }

    /// The field whose value is the sample's second value (or the sample count).
    fn value_field(self) -> Option<&'static str> {
        match self {
            Rule::WallClockSample => Some("samples"),
            Rule::InNewTlab => Some("tlabSize"),
            Rule::OutsideTlab => Some("allocationSize"),
            Rule::AllocationSample => Some("weight"),
            Rule::MonitorEnter | Rule::ThreadPark => Some("duration"),
            _ => None,
        }
    }
}

/// How a recording is read.
#[derive(Debug, Clone, Default)]
pub struct JfrOptions {
    /// Samples per second of CPU and wall-clock sampling (Pyroscope's `sampleRate`): each
    /// sample is worth 1e9 / rate nanoseconds. `None`: from the recording's settings
    /// (`jdk.ExecutionSample#period`, async-profiler's `interval`), else 100.
    pub sample_rate_hz: Option<u32>,
    /// When the profiles start, in nanoseconds since the Unix epoch (`None`: the first chunk's
    /// start).
    pub time_ns: Option<i64>,
    /// How long they cover, in nanoseconds (`None`: from the first chunk's start to the last
    /// one's end).
    pub duration_ns: Option<i64>,
}

/// One profile of a recording.
#[derive(Debug, Clone)]
pub struct JfrProfile {
    /// Its kind of sample.
    pub kind: SampleKind,
    /// The profile.
    pub profile: pprof::Profile,
}

/// What reading a recording found besides its profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JfrReport {
    /// Chunks read.
    pub chunks: usize,
    /// Events of every type, by type name.
    pub events: BTreeMap<String, u64>,
    /// Events of types that make no samples (GC, settings, …), skipped.
    pub skipped_events: u64,
    /// Sample events without a stack trace (key 0), skipped.
    pub without_stack: u64,
    /// CPU samples of sleeping threads, which Pyroscope does not count as CPU.
    pub sleeping: u64,
    /// The period each CPU or wall sample is worth, in nanoseconds.
    pub period_ns: i64,
    /// Ticks per second of the first chunk's time stamps and durations (lock waits are
    /// converted from ticks to nanoseconds with it).
    pub ticks_per_second: i64,
    /// The `event` setting of async-profiler (`cpu`, `itimer`, `wall`, …), if any.
    pub event_setting: Option<String>,
}

/// Reads a (decompressed) recording into one pprof profile per kind of sample it holds, in
/// [`SampleKind`] order; `labels` gives each `contextId` its labels.
pub fn jfr_to_pprof(
    bytes: &[u8],
    labels: Option<&LabelsSnapshot>,
    options: &JfrOptions,
) -> Result<(Vec<JfrProfile>, JfrReport), JfrError> {
    let offsets = chunk_offsets(bytes)?;
    let mut b = Builder::new(labels);
    let mut report = JfrReport::default();
    let (mut first_ns, mut last_ns) = (i64::MAX, i64::MIN);
    let mut chunks = Vec::with_capacity(offsets.len());
    for &at in &offsets {
        let chunk = Chunk::read(bytes, at, |c: &Class| Rule::of(&c.name).is_some())?;
        first_ns = first_ns.min(chunk.header.start_ns);
        last_ns = last_ns.max(
            chunk
                .header
                .start_ns
                .saturating_add(chunk.header.duration_ns),
        );
        for (id, n) in &chunk.counts {
            let name = chunk
                .metadata
                .classes
                .get(id)
                .map_or_else(|| format!("unknown type {id}"), |c| c.name.clone());
            *report.events.entry(name.clone()).or_default() += n;
            if Rule::of(&name).is_none() {
                report.skipped_events += n;
            }
        }
        chunks.push(chunk);
    }
    report.chunks = chunks.len();
    report.ticks_per_second = chunks.first().map_or(0, |c| c.header.ticks_per_second);
    // Settings first (they decide what ExecutionSample is worth), from every chunk.
    let mut settings = Settings::default();
    for chunk in &chunks {
        settings.read(chunk)?;
    }
    report.event_setting = settings.event.clone();
    let rate = options.sample_rate_hz.filter(|&r| r > 0);
    let period_ns = match rate {
        Some(r) => 1_000_000_000 / i64::from(r),
        None => settings.sample_period_ns().unwrap_or(10_000_000),
    };
    report.period_ns = period_ns;
    // A native-method sample is worth the JDK's own period for them, unless the upload said
    // what a sample is worth.
    b.native_period_ns = match rate {
        Some(_) => period_ns,
        None => settings
            .native_period_ns
            .filter(|&p| p > 0)
            .unwrap_or(period_ns),
    };
    let wall_mode = settings.event.as_deref() == Some("wall");
    for (n, chunk) in chunks.iter().enumerate() {
        b.chunk(chunk, n as u32, period_ns, wall_mode, &mut report)?;
    }
    let time_ns = options.time_ns.unwrap_or(first_ns);
    let duration_ns = options
        .duration_ns
        .unwrap_or_else(|| last_ns.saturating_sub(first_ns).max(0));
    Ok((b.finish(time_ns, duration_ns, period_ns), report))
}

/// Recording settings that change what samples mean.
#[derive(Debug, Default)]
struct Settings {
    /// async-profiler's `event` (`cpu`, `itimer`, `wall`, …).
    event: Option<String>,
    /// The sampling period of CPU samples, in nanoseconds.
    period_ns: Option<i64>,
    /// The JDK's sampling period of threads in native code (`jdk.NativeMethodSample`), in
    /// nanoseconds: 20 ms where CPU is sampled every 10 or 20.
    native_period_ns: Option<i64>,
    /// async-profiler's `interval`: nanoseconds for its time-based events, but bytes or
    /// event counts for others (alloc, perf counters), so only used with the former.
    interval: Option<i64>,
}

impl Settings {
    fn read(&mut self, chunk: &Chunk<'_>) -> Result<(), JfrError> {
        let Some(class) = chunk.metadata.by_name("jdk.ActiveSetting") else {
            return Ok(());
        };
        let (Some(id), Some(name), Some(value)) =
            (class.field("id"), class.field("name"), class.field("value"))
        else {
            return Ok(());
        };
        let sample_type = chunk.metadata.by_name("jdk.ExecutionSample").map(|c| c.id);
        let native_type = chunk
            .metadata
            .by_name("jdk.NativeMethodSample")
            .map(|c| c.id);
        let strings = chunk.metadata.string_type();
        let mut values =
            ValueReader::new(&chunk.metadata, chunk.header.size.saturating_mul(2) + 1024);
        let mut fields = Vec::new();
        for &(pos, end, t) in chunk.events.iter().filter(|e| e.2 == class.id) {
            let mut c = chunk.cursor(pos, end)?;
            fields.clear();
            values.fields(
                &mut c,
                chunk.metadata.classes.get(&t).expect("kept by type"),
                &mut fields,
                0,
            )?;
            let text = |i: usize| chunk.pools.text(&fields[i], strings).unwrap_or("");
            match text(name) {
                "event" => self.event = Some(text(value).to_owned()),
                "period" if fields[id].as_i64() == sample_type && sample_type.is_some() => {
                    if let Some(p) = parse_period_ns(text(value)) {
                        self.period_ns = Some(p);
                    }
                }
                "period" if fields[id].as_i64() == native_type && native_type.is_some() => {
                    if let Some(p) = parse_period_ns(text(value)) {
                        self.native_period_ns = Some(p);
                    }
                }
                "interval" => self.interval = text(value).parse::<i64>().ok(),
                _ => {}
            }
        }
        Ok(())
    }

    /// The period a CPU or wall sample is worth, in nanoseconds, if the settings tell.
    fn sample_period_ns(&self) -> Option<i64> {
        let timed = matches!(
            self.event.as_deref(),
            Some("cpu" | "itimer" | "ctimer" | "wall" | "cpu-clock")
        );
        self.period_ns
            .or(self.interval.filter(|_| timed))
            .filter(|&p| p > 0)
    }
}

/// A JDK period setting (`20 ms`, `1 s`, `10000 us`, `500000 ns`) in nanoseconds.
fn parse_period_ns(text: &str) -> Option<i64> {
    let (n, unit) = text.trim().split_once(' ')?;
    let n: i64 = n.parse().ok()?;
    let per = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(per)
}

/// Where the fields an event rule needs are in its type.
struct EventPlan<'m> {
    rule: Rule,
    class: &'m Class,
    stack: Option<usize>,
    state: Option<(usize, Kind)>,
    context: Option<usize>,
    span_id: Option<usize>,
    span_name: Option<usize>,
    value: Option<usize>,
}

/// (chunk, stack trace key, context id, span id, span name id): samples with the same key
/// are one pprof sample.
type SampleKey = (u32, i64, i64, i64, i64);

/// The samples of one kind.
struct KindSamples {
    samples: Vec<pprof::Sample>,
    index: HashMap<SampleKey, usize>,
}

/// Builds the profiles: symbols shared by every kind, samples per kind.
pub(super) struct Builder<'l> {
    labels: Option<&'l LabelsSnapshot>,
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<pprof::Function>,
    function_ids: HashMap<i64, u64>,
    locations: Vec<pprof::Location>,
    location_ids: HashMap<(u64, i64), u64>,
    kinds: BTreeMap<SampleKind, KindSamples>,
    /// What a `jdk.NativeMethodSample` is worth, in nanoseconds.
    native_period_ns: i64,
    sample_labels: HashMap<(i64, i64, i64), Vec<pprof::Label>>,
}

impl<'l> Builder<'l> {
    fn new(labels: Option<&'l LabelsSnapshot>) -> Self {
        let mut b = Builder {
            labels,
            strings: Vec::new(),
            string_ids: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            kinds: BTreeMap::new(),
            native_period_ns: 0,
            sample_labels: HashMap::new(),
        };
        b.string("");
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), i);
        i
    }

    /// The location of `name` at `line`.
    pub(super) fn location(&mut self, name: &str, line: i64) -> u64 {
        let name = self.string(name);
        let next_fn = self.functions.len() as u64 + 1;
        let function = *self.function_ids.entry(name).or_insert(next_fn);
        if function == next_fn {
            self.functions.push(pprof::Function {
                id: function,
                name,
                ..Default::default()
            });
        }
        let next = self.locations.len() as u64 + 1;
        let id = *self.location_ids.entry((function, line)).or_insert(next);
        if id == next {
            self.locations.push(pprof::Location {
                id,
                mapping_id: 1,
                line: vec![pprof::Line {
                    function_id: function,
                    line,
                    column: 0,
                }],
                ..Default::default()
            });
        }
        id
    }

    fn labels_for(&mut self, context: i64, span_id: i64, span_name: i64) -> Vec<pprof::Label> {
        if let Some(l) = self.sample_labels.get(&(context, span_id, span_name)) {
            return l.clone();
        }
        let mut pairs: Vec<(String, String)> = Vec::new();
        if let Some(snapshot) = self.labels {
            pairs.extend(
                snapshot
                    .labels_of(context)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
            );
            if span_name != 0 {
                if let Some(name) = snapshot.strings.get(&span_name).filter(|n| !n.is_empty()) {
                    pairs.push(("span_name".into(), name.clone()));
                }
            }
        }
        if span_id != 0 {
            pairs.push(("profile_id".into(), format!("{:016x}", span_id as u64)));
        }
        let labels: Vec<pprof::Label> = pairs
            .iter()
            .map(|(k, v)| pprof::Label {
                key: self.string(k),
                str: self.string(v),
                ..Default::default()
            })
            .collect();
        self.sample_labels
            .insert((context, span_id, span_name), labels.clone());
        labels
    }

    // Long: plans each event class, then reads the chunk's events with those plans, which borrow the chunk.
    #[allow(clippy::too_many_lines)]
    fn chunk(
        &mut self,
        chunk: &Chunk<'_>,
        chunk_no: u32,
        period_ns: i64,
        wall_mode: bool,
        report: &mut JfrReport,
    ) -> Result<(), JfrError> {
        let m = &chunk.metadata;
        let mut plans: HashMap<i64, EventPlan<'_>> = HashMap::new();
        for class in m.classes.values() {
            let Some(rule) = Rule::of(&class.name).filter(|r| *r != Rule::ActiveSetting) else {
                continue;
            };
            let pos = |name: &str| class.field(name);
            plans.insert(
                class.id,
                EventPlan {
                    rule,
                    class,
                    stack: pos("stackTrace"),
                    state: pos("state").map(|i| (i, class.fields[i].kind)),
                    context: pos("contextId"),
                    span_id: pos("spanId"),
                    span_name: pos("spanName"),
                    value: rule.value_field().and_then(pos),
                },
            );
        }
        let mut stacks = Stacks::new(chunk)?;
        let mut values = ValueReader::new(m, chunk.header.size.saturating_mul(2) + 1024);
        let mut fields: Vec<Value<'_>> = Vec::new();
        let strings = m.string_type();
        for &(pos, end, t) in &chunk.events {
            let Some(plan) = plans.get(&t) else { continue };
            let mut c = chunk.cursor(pos, end)?;
            fields.clear();
            values.fields(&mut c, plan.class, &mut fields, 0)?;
            let int = |i: Option<usize>| i.and_then(|i| fields[i].as_i64()).unwrap_or(0);
            let stack_key = int(plan.stack);
            if stack_key == 0 {
                report.without_stack += 1;
                continue;
            }
            let state = match plan.state {
                Some((i, kind)) => {
                    let text =
                        resolve_text(&chunk.pools, &fields[i], kind, strings).map_err(|e| {
                            JfrError::at(
                                chunk.at + pos,
                                format!("{} event: its thread state {e}", plan.class.name),
                            )
                        })?;
                    Some(text.unwrap_or(""))
                }
                None => None,
            };
            let runnable = state.is_none_or(|s| s == "STATE_RUNNABLE");
            let value = int(plan.value);
            let (kind, values_of): (SampleKind, [i64; 2]) = match plan.rule {
                Rule::ExecutionSample => {
                    if wall_mode {
                        self.add(
                            chunk,
                            &mut stacks,
                            chunk_no,
                            SampleKind::Wall,
                            plan,
                            &fields,
                            pos,
                            &[period_ns],
                        )?;
                    }
                    if state == Some("STATE_SLEEPING") {
                        report.sleeping += 1;
                        continue;
                    }
                    (SampleKind::Cpu, [period_ns, 0])
                }
                Rule::WallClockSample => {
                    let v = value.max(1).saturating_mul(period_ns);
                    if runnable && wall_mode {
                        self.add(
                            chunk,
                            &mut stacks,
                            chunk_no,
                            SampleKind::Cpu,
                            plan,
                            &fields,
                            pos,
                            &[v],
                        )?;
                    }
                    (SampleKind::Wall, [v, 0])
                }
                Rule::NativeMethodSample => (SampleKind::Wall, [self.native_period_ns, 0]),
                Rule::InNewTlab => (SampleKind::AllocInNewTlab, [1, value]),
                Rule::OutsideTlab => (SampleKind::AllocOutsideTlab, [1, value]),
                Rule::AllocationSample => (SampleKind::AllocSample, [1, value]),
                Rule::MonitorEnter => (SampleKind::Lock, [1, chunk.ticks_to_ns(value)]),
                Rule::ThreadPark => (SampleKind::ThreadPark, [1, chunk.ticks_to_ns(value)]),
                Rule::LiveObject => (SampleKind::LiveObject, [1, 0]),
                Rule::ActiveSetting => continue,
            };
            let width = kind.sample_types().len();
            self.add(
                chunk,
                &mut stacks,
                chunk_no,
                kind,
                plan,
                &fields,
                pos,
                &values_of[..width],
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        chunk: &Chunk<'_>,
        stacks: &mut Stacks,
        chunk_no: u32,
        kind: SampleKind,
        plan: &EventPlan<'_>,
        fields: &[Value<'_>],
        pos: usize,
        values: &[i64],
    ) -> Result<(), JfrError> {
        let int = |i: Option<usize>| i.and_then(|i| fields[i].as_i64()).unwrap_or(0);
        let key: SampleKey = (
            chunk_no,
            int(plan.stack),
            int(plan.context),
            int(plan.span_id),
            int(plan.span_name),
        );
        let samples = self.kinds.entry(kind).or_insert_with(|| KindSamples {
            samples: Vec::new(),
            index: HashMap::new(),
        });
        if let Some(&i) = samples.index.get(&key) {
            for (a, b) in samples.samples[i].value.iter_mut().zip(values) {
                *a = a.saturating_add(*b);
            }
            return Ok(());
        }
        let location_id = stacks
            .resolve(chunk, key.1, |name, line| self.location(name, line))
            .map_err(|e| JfrError::at(chunk.at + pos, format!("{} event: {e}", plan.class.name)))?;
        let label = self.labels_for(key.2, key.3, key.4);
        let samples = self.kinds.get_mut(&kind).expect("inserted above");
        samples.index.insert(key, samples.samples.len());
        samples.samples.push(pprof::Sample {
            location_id,
            value: values.to_vec(),
            label,
        });
        Ok(())
    }

    fn finish(mut self, time_ns: i64, duration_ns: i64, period_ns: i64) -> Vec<JfrProfile> {
        let kinds: Vec<(SampleKind, Vec<pprof::Sample>)> = std::mem::take(&mut self.kinds)
            .into_iter()
            .map(|(k, s)| (k, s.samples))
            .collect();
        // Every kind's type names go in the shared string table before it is copied.
        let typed: Vec<_> = kinds
            .iter()
            .map(|(k, _)| {
                let types: Vec<pprof::ValueType> = k
                    .sample_types()
                    .iter()
                    .map(|(t, u)| pprof::ValueType {
                        r#type: self.string(t),
                        unit: self.string(u),
                    })
                    .collect();
                let (pt, pu) = k.period_type();
                let period_type = pprof::ValueType {
                    r#type: self.string(pt),
                    unit: self.string(pu),
                };
                (types, period_type)
            })
            .collect();
        let n = kinds.len();
        let mut out = Vec::with_capacity(n);
        let mut symbols = Some((self.strings, self.functions, self.locations));
        for (i, ((kind, samples), (sample_type, period_type))) in
            kinds.into_iter().zip(typed).enumerate()
        {
            // The last profile takes the symbols; the others copy them.
            let (string_table, function, location) = if i + 1 == n {
                symbols.take().expect("taken once")
            } else {
                symbols.clone().expect("still there")
            };
            let period = match kind {
                SampleKind::Cpu | SampleKind::Wall => period_ns,
                _ => 0,
            };
            out.push(JfrProfile {
                kind,
                profile: pprof::Profile {
                    sample_type,
                    sample: samples,
                    mapping: vec![pprof::Mapping {
                        id: 1,
                        has_functions: true,
                        ..Default::default()
                    }],
                    location,
                    function,
                    string_table,
                    time_nanos: time_ns,
                    duration_nanos: duration_ns,
                    period_type: Some(period_type),
                    period,
                    ..Default::default()
                },
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdk_periods_in_nanoseconds() {
        assert_eq!(parse_period_ns("20 ms"), Some(20_000_000));
        assert_eq!(parse_period_ns("1 s"), Some(1_000_000_000));
        assert_eq!(parse_period_ns("everyChunk"), None);
    }
}
