//! Metric families kept in atomics: one cell per label combination, found by index for
//! labels that are enums (no lock, no allocation per event), or in a small map for a label
//! whose values are open-ended (a scrape target, a forwarder, a listener).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// One series' value (an `f64` in its bits) and whether it was ever recorded: a series is
/// rendered from its first event on, as a map entry was before.
#[derive(Debug, Default)]
pub struct Cell {
    bits: AtomicU64,
    touched: AtomicBool,
}

impl Cell {
    fn touch(&self) {
        // A plain load first: the flag's cache line is not written on every event.
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Relaxed);
        }
    }

    /// Adds `v`.
    pub fn add(&self, v: f64) {
        self.touch();
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
    }

    /// Sets the value to `v`.
    pub fn set(&self, v: f64) {
        self.touch();
        self.bits.store(v.to_bits(), Ordering::Relaxed);
    }

    /// The value (0 when never recorded).
    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    /// The value, if it was ever recorded.
    fn recorded(&self) -> Option<f64> {
        self.touched.load(Ordering::Relaxed).then(|| self.get())
    }
}

/// A label whose values are a closed set: an enum.
pub trait Label: Copy + 'static {
    /// The label's name.
    const KEY: &'static str;
    /// Every value, in the order of [`Label::index`].
    const ALL: &'static [Self];
    /// The value as rendered.
    fn as_str(self) -> &'static str;
    /// The value's position in [`Label::ALL`].
    fn index(self) -> usize;
}

/// The closed labels of a family: none (`()`), one [`Label`], or two.
pub trait LabelSet: Copy + 'static {
    /// Combinations of values.
    const COUNT: usize;
    /// This combination's index, below [`LabelSet::COUNT`].
    fn index(self) -> usize;
    /// The name and value of each label of combination `i`, in order.
    fn pairs(i: usize, out: &mut Vec<(&'static str, String)>);
}

impl LabelSet for () {
    const COUNT: usize = 1;
    fn index(self) -> usize {
        0
    }
    fn pairs(_: usize, _: &mut Vec<(&'static str, String)>) {}
}

impl<L: Label> LabelSet for L {
    const COUNT: usize = L::ALL.len();
    fn index(self) -> usize {
        Label::index(self)
    }
    fn pairs(i: usize, out: &mut Vec<(&'static str, String)>) {
        out.push((L::KEY, L::ALL[i].as_str().to_owned()));
    }
}

impl<A: Label, B: Label> LabelSet for (A, B) {
    const COUNT: usize = A::ALL.len() * B::ALL.len();
    fn index(self) -> usize {
        self.0.index() * B::ALL.len() + self.1.index()
    }
    fn pairs(i: usize, out: &mut Vec<(&'static str, String)>) {
        out.push((A::KEY, A::ALL[i / B::ALL.len()].as_str().to_owned()));
        out.push((B::KEY, B::ALL[i % B::ALL.len()].as_str().to_owned()));
    }
}

/// A rendered series: family name, `# HELP` text, labels in order, value.
pub(super) type Row = (&'static str, &'static str, Vec<(&'static str, String)>, f64);

/// The cells of one combination of open-ended label values, one per [`LabelSet`] value:
/// a handle a caller may keep to record without looking the values up again.
#[derive(Debug, Clone)]
pub struct Series<L> {
    cells: Arc<[Cell]>,
    labels: PhantomData<L>,
}

impl<L: LabelSet> Series<L> {
    fn new() -> Self {
        Series {
            cells: (0..L::COUNT).map(|_| Cell::default()).collect(),
            labels: PhantomData,
        }
    }

    /// The cell of `labels`.
    pub fn at(&self, labels: L) -> &Cell {
        &self.cells[labels.index()]
    }
}

/// A family whose labels are all enums (or none): counters or gauges by label combination.
#[derive(Debug)]
pub struct Family<L> {
    name: &'static str,
    help: &'static str,
    series: Series<L>,
}

impl<L: LabelSet> Family<L> {
    pub(super) fn new(
        name: &'static str,
        help: &'static str,
        keys: &'static [&'static str],
    ) -> Self {
        debug_assert!(
            keys.is_empty(),
            "{name}: open-ended labels need an `Open` family"
        );
        Family {
            name,
            help,
            series: Series::new(),
        }
    }

    /// Adds `v` to the series of `labels`.
    pub fn add(&self, labels: L, v: f64) {
        self.series.at(labels).add(v);
    }

    /// Sets the series of `labels` to `v`.
    pub fn set(&self, labels: L, v: f64) {
        self.series.at(labels).set(v);
    }

    /// The value of the series of `labels` (0 when never recorded).
    pub fn get(&self, labels: L) -> f64 {
        self.series.at(labels).get()
    }

    pub(super) fn rows(&self, tenant: Option<&str>, out: &mut Vec<Row>) {
        rows_of(self.name, self.help, &[], &self.series, tenant, out);
    }
}

/// The recorded series of `series` as rows, open-ended `values` (of `keys`) first.
fn rows_of<L: LabelSet>(
    name: &'static str,
    help: &'static str,
    open: &[(&'static str, &str)],
    series: &Series<L>,
    tenant: Option<&str>,
    out: &mut Vec<Row>,
) {
    for (i, cell) in series.cells.iter().enumerate() {
        let Some(v) = cell.recorded() else { continue };
        let mut labels: Vec<(&'static str, String)> =
            open.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        L::pairs(i, &mut labels);
        if let Some(t) = tenant {
            labels.push((super::TENANT_LABEL, t.to_owned()));
        }
        out.push((name, help, labels, v));
    }
}

/// Open-ended label values and their series.
type Entries<L> = Vec<(Box<[String]>, Series<L>)>;

/// A family with open-ended labels first (`keys`: a target, a forwarder), then enum labels
/// `L`. The values are looked up in a small list under a read lock; a caller on a hot path
/// keeps the [`Series`] of [`Open::series`] instead.
#[derive(Debug)]
pub struct Open<L> {
    name: &'static str,
    help: &'static str,
    keys: &'static [&'static str],
    entries: RwLock<Entries<L>>,
}

impl<L: LabelSet> Open<L> {
    pub(super) fn new(
        name: &'static str,
        help: &'static str,
        keys: &'static [&'static str],
    ) -> Self {
        Open {
            name,
            help,
            keys,
            entries: RwLock::default(),
        }
    }

    /// The series of open-ended label `values` (one per key, in order).
    pub fn series(&self, values: &[&str]) -> Series<L> {
        assert_eq!(values.len(), self.keys.len(), "{}: label values", self.name);
        let same = |(v, _): &&(Box<[String]>, Series<L>)| v.iter().eq(values.iter().copied());
        if let Some((_, s)) = self.entries.read().expect("metrics lock").iter().find(same) {
            return s.clone();
        }
        let mut entries = self.entries.write().expect("metrics lock");
        if let Some((_, s)) = entries.iter().find(same) {
            return s.clone();
        }
        let s = Series::new();
        let owned = values.iter().map(|v| (*v).to_owned()).collect();
        entries.push((owned, s.clone()));
        s
    }

    /// Adds `v` to the series of `values` and `labels`.
    pub fn add(&self, values: &[&str], labels: L, v: f64) {
        self.series(values).at(labels).add(v);
    }

    /// Sets the series of `values` and `labels` to `v`.
    pub fn set(&self, values: &[&str], labels: L, v: f64) {
        self.series(values).at(labels).set(v);
    }

    /// The value of the series of `values` and `labels` (0 when never recorded).
    pub fn get(&self, values: &[&str], labels: L) -> f64 {
        self.series(values).at(labels).get()
    }

    /// The recorded series of `labels`: their open-ended values and value.
    pub fn recorded(&self, labels: L) -> Vec<(Vec<String>, f64)> {
        let entries = self.entries.read().expect("metrics lock");
        entries
            .iter()
            .filter_map(|(values, s)| Some((values.to_vec(), s.at(labels).recorded()?)))
            .collect()
    }

    pub(super) fn rows(&self, tenant: Option<&str>, out: &mut Vec<Row>) {
        for (values, s) in self.entries.read().expect("metrics lock").iter() {
            let open: Vec<(&'static str, &str)> = self
                .keys
                .iter()
                .copied()
                .zip(values.iter().map(String::as_str))
                .collect();
            rows_of(self.name, self.help, &open, s, tenant, out);
        }
    }
}

/// Observations counted into buckets, as Prometheus histograms are.
#[derive(Debug)]
pub struct Histogram {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    /// Upper bounds of the buckets, ascending.
    pub(super) bounds: &'static [f64],
    /// Per bucket (not cumulative), then the observations above every bound.
    pub(super) counts: Box<[AtomicU64]>,
    /// The sum of the observations, as `f64` bits.
    pub(super) sum: AtomicU64,
}

impl Histogram {
    pub(super) fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Histogram {
            name,
            help,
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Adds observation `v`.
    pub fn observe(&self, v: f64) {
        let bucket = self.bounds.partition_point(|&b| b < v);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
    }
}
