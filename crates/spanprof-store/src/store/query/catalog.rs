//! What the store holds, for pickers and label APIs: services, profile types, series and
//! their label names and values.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use hashbrown::HashSet;
use spanprof_format::profile_type::ProfileTypeId;

use super::resolve::{resolved_type, type_ids, types_of_service};
use super::selection::Selection;
use super::{overlaps, starts_in};
use crate::matchers::{parse_selector, LabelMatcher};
use crate::store::segments::SealedSummary;
use crate::store::state::{SeriesKey, State};
use crate::store::{Store, StoreError};

/// One series' labels, sorted by name: `(name, value)`.
pub type SeriesLabels = Vec<(String, String)>;

/// Bytes of label text: names and values.
fn label_bytes(labels: &[(String, String)]) -> usize {
    labels.iter().map(|(k, v)| k.len() + v.len()).sum()
}

impl State {
    /// The series of every stored block (a series may appear more than once).
    pub(crate) fn stored_series(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .sealed
            .values()
            .flat_map(|s| s.series.iter().map(|&(series, _, _)| series))
            .collect();
        out.extend(
            std::iter::once(&self.active)
                .chain(self.sealing.values())
                .flat_map(|a| a.blocks.iter())
                .map(|b| b.series),
        );
        out
    }

    /// The series with a profile taken in `[from_ns, to_ns)` (0 = open end), as the profile
    /// queries count them. A sealed segment's summary says when its first and last profile of
    /// each series were taken; its index is read only when the range falls between the two.
    pub(crate) fn series_taken_in(&self, from_ns: i64, to_ns: i64) -> HashSet<u32> {
        let mut live: HashSet<u32> = HashSet::new();
        let mut unsure: Vec<(u64, &SealedSummary)> = Vec::new();
        for (&id, summary) in &self.sealed {
            for &(series, first, last) in &summary.series {
                if !overlaps(first, last - first, from_ns, to_ns) {
                    continue;
                }
                if starts_in(first, from_ns, to_ns) || starts_in(last, from_ns, to_ns) {
                    live.insert(series);
                } else if unsure.last().is_none_or(|(u, _)| *u != id) {
                    unsure.push((id, summary));
                }
            }
        }
        for (id, summary) in unsure {
            match self.cache.get(&self.index_dir, id) {
                Ok(index) => live.extend(
                    index
                        .blocks
                        .iter()
                        .filter(|m| starts_in(m.time_ns, from_ns, to_ns))
                        .map(|m| m.series),
                ),
                // An index that cannot be read: its summary's answer, wider than exact.
                Err(e) => {
                    tracing::warn!(segment = id, "listing from the segment's summary: {e}");
                    live.extend(summary.series.iter().filter_map(|&(series, first, last)| {
                        overlaps(first, last - first, from_ns, to_ns).then_some(series)
                    }));
                }
            }
        }
        live.extend(
            std::iter::once(&self.active)
                .chain(self.sealing.values())
                .flat_map(|a| a.blocks.iter())
                .filter(|m| starts_in(m.time_ns, from_ns, to_ns))
                .map(|m| m.series),
        );
        live
    }
}

impl Store {
    /// Profile types present (for one service, when given).
    pub fn profile_types(&self, service: Option<&str>) -> Vec<ProfileTypeId> {
        types_of_service(
            &self.state.read().expect("store state lock poisoned"),
            service,
        )
    }

    /// When the first and the last profile the store holds were taken (ns since the epoch),
    /// of `service` only when given; `None` when it holds none. For messages that say why a
    /// time range matched nothing.
    pub fn profiles_taken_between(&self, service: Option<&str>) -> Option<(i64, i64)> {
        let st = self.state.read().expect("store state lock poisoned");
        let wanted = |series: u32| {
            service.is_none_or(|name| {
                st.services[st.series[series as usize].service as usize].name == name
            })
        };
        let sealed = st.sealed.values().flat_map(|s| &s.series).copied();
        let live = std::iter::once(&st.active)
            .chain(st.sealing.values())
            .flat_map(|a| a.blocks.iter())
            .map(|m| (m.series, m.time_ns, m.time_ns));
        sealed
            .chain(live)
            .filter(|&(series, _, _)| wanted(series))
            .fold(None, |r, (_, first, last)| {
                Some(r.map_or((first, last), |(a, b): (i64, i64)| {
                    (a.min(first), b.max(last))
                }))
            })
    }

    /// Services with profiles taken in the time range (0 = open end), as the profile queries
    /// count them: a window that began before the range is not in it.
    pub fn services(&self, from_ns: i64, to_ns: i64) -> Vec<String> {
        let st = self.state.read().expect("store state lock poisoned");
        let set: BTreeSet<&str> = st
            .series_taken_in(from_ns, to_ns)
            .into_iter()
            .map(|series| {
                st.services[st.series[series as usize].service as usize]
                    .name
                    .as_str()
            })
            .collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// Series with profiles taken in the selection's time range, as their labels (with `__profile_type__`
    /// and `__name__`). Span filters are ignored; the selection's profile type is optional
    /// here (`None` = every type).
    pub fn series(&self, sel: &Selection) -> Result<Vec<SeriesLabels>, StoreError> {
        Ok(self.series_limited(sel, usize::MAX)?.0)
    }

    /// [`Store::series`] holding at most about `max_bytes` of label text, and whether series
    /// were left out for it (then which ones is arbitrary): an answer over every series of a
    /// store with long label values took gigabytes to build.
    pub fn series_limited(
        &self,
        sel: &Selection,
        max_bytes: usize,
    ) -> Result<(Vec<SeriesLabels>, bool), StoreError> {
        let mut out: Vec<SeriesLabels> = Vec::new();
        let mut bytes = 0usize;
        let truncated = self.each_selected_series(sel, |k| {
            let size = label_bytes(&k.labels) + k.profile_type.to_string().len();
            if bytes.saturating_add(size) > max_bytes {
                return ControlFlow::Break(());
            }
            bytes += size;
            let mut labels = k.labels.clone();
            labels.push(("__profile_type__".into(), k.profile_type.to_string()));
            labels.push(("__name__".into(), k.profile_type.name.clone()));
            labels.sort();
            out.push(labels);
            ControlFlow::Continue(())
        })?;
        out.sort();
        out.dedup();
        Ok((out, truncated))
    }

    /// Calls `each` with every series the selection takes (its service, type, time and label
    /// matchers) until it breaks; returns whether it broke.
    fn each_selected_series(
        &self,
        sel: &Selection,
        mut each: impl FnMut(&SeriesKey) -> ControlFlow<()>,
    ) -> Result<bool, StoreError> {
        let matchers: Vec<LabelMatcher> = match &sel.label_selector {
            Some(s) if !s.trim().is_empty() => parse_selector(s)?.matchers,
            _ => Vec::new(),
        };
        let live = self
            .state
            .read()
            .expect("store state lock poisoned")
            .series_taken_in(sel.from_ns, sel.to_ns);
        let mut next = 0;
        while let Some(chunk) = self.series_chunk(&mut next, |st, i, k| {
            live.contains(&(i as u32))
                && sel
                    .service
                    .as_deref()
                    .is_none_or(|s| st.services[k.service as usize].name == s)
                && sel
                    .profile_type
                    .as_deref()
                    .is_none_or(|t| k.profile_type.matches(t))
        })? {
            for found in Store::matching(&chunk, &matchers) {
                if each(&found?.1).is_break() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Label names of the selected series, sorted.
    pub fn label_names(&self, sel: &Selection) -> Result<Vec<String>, StoreError> {
        let mut set: BTreeSet<String> = BTreeSet::new();
        let mut any = false;
        self.each_selected_series(sel, |k| {
            any = true;
            for (name, _) in &k.labels {
                if !set.contains(name) {
                    set.insert(name.clone());
                }
            }
            ControlFlow::Continue(())
        })?;
        if any {
            set.extend(["__name__".to_owned(), "__profile_type__".to_owned()]);
        }
        Ok(set.into_iter().collect())
    }

    /// Values of label `name` over the selected series, sorted.
    pub fn label_values(&self, sel: &Selection, name: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.label_values_limited(sel, name, usize::MAX)?.0)
    }

    /// [`Store::label_values`] holding at most about `max_bytes` of values, and whether values
    /// were left out for it. Only the values are copied, not the series' other labels.
    pub fn label_values_limited(
        &self,
        sel: &Selection,
        name: &str,
        max_bytes: usize,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let mut set: BTreeSet<String> = BTreeSet::new();
        let mut bytes = 0usize;
        let truncated = self.each_selected_series(sel, |k| {
            let value = match name {
                "__profile_type__" => std::borrow::Cow::Owned(k.profile_type.to_string()),
                "__name__" => std::borrow::Cow::Borrowed(k.profile_type.name.as_str()),
                _ => match k.labels.iter().find(|(n, _)| n == name) {
                    Some((_, v)) => std::borrow::Cow::Borrowed(v.as_str()),
                    None => return ControlFlow::Continue(()),
                },
            };
            if set.contains(value.as_ref()) {
                return ControlFlow::Continue(());
            }
            if bytes.saturating_add(value.len()) > max_bytes {
                return ControlFlow::Break(());
            }
            bytes += value.len();
            set.insert(value.into_owned());
            ControlFlow::Continue(())
        })?;
        Ok((set.into_iter().collect(), truncated))
    }

    /// The type the selection resolves to (`None` when it resolves to none), and the types
    /// it has: its service's, or with spans or a trace selected those of their samples (none
    /// for spans without samples). Full ids, names included (`mutex:…` and `block:…` have
    /// the same sample types).
    pub fn selection_types(
        &self,
        sel: &Selection,
    ) -> Result<(Option<ProfileTypeId>, Vec<ProfileTypeId>), StoreError> {
        let (st, r) = self.read_resolved(sel)?;
        Ok(type_ids(&st, sel, &r))
    }

    /// What a time series of the selection needs before it is read, from one resolve: the
    /// type it resolves to (`type`, else the CPU type of what it selects, else as
    /// [`ProfileTypeId::preferred`] picks; `None` when it selects no type), and the longest
    /// window one of its profiles covers, in ns (0 without any), what one point stands for
    /// (a step shorter than it shows each window's total in one step and none after).
    pub fn type_and_longest_window(
        &self,
        sel: &Selection,
    ) -> Result<(Option<ProfileTypeId>, i64), StoreError> {
        let r = self.resolved(sel)?;
        let longest = r
            .blocks
            .iter()
            .map(|(index, b)| index.blocks[*b as usize].duration_ns)
            .max()
            .unwrap_or(0)
            .max(0);
        Ok((resolved_type(&r.profile_type), longest))
    }
}
