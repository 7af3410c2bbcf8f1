//! The profile windows around one span: which of the windows that watched its time are
//! stored, for a span view that says "2 of 3 windows in" and waits for the rest.

use std::collections::BTreeSet;

use spanprof_format::profile_type::ProfileTypeId;

use super::query::Selection;
use super::{Store, StoreError};
use crate::spans::SpanRecord;

/// The stored profile windows of one span's process, of one type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanWindows {
    /// The services whose profiles were looked at: the span's own service when it has
    /// profiles of the type under that name, else those holding the span's samples.
    pub services: Vec<String>,
    /// The distinct windows that overlap the span, as `(start_ns, duration_ns)` (ns since
    /// the epoch, ns), in start order.
    pub windows: Vec<(i64, i64)>,
    /// The end of the newest window of those services from the span's start on, ns since the
    /// epoch; `None` when they have none.
    pub newest_end_ns: Option<i64>,
    /// The longest window among those from the span's start on, in ns (a scrape's 15 s);
    /// 0 when unknown.
    pub window_ns: i64,
    /// The profile type looked at; `None` when the store has none.
    pub profile_type: Option<ProfileTypeId>,
}

impl Store {
    /// The windows of `span`'s process of `profile_type` (default: the CPU type) from the
    /// span's start on; see [`SpanWindows`].
    pub fn span_windows(
        &self,
        span: &SpanRecord,
        profile_type: Option<&str>,
    ) -> Result<SpanWindows, StoreError> {
        let st = self.state.read().expect("store state lock poisoned");
        let mut services: Vec<String> = vec![span.service.clone()];
        let own = Selection {
            span_ids: vec![span.span_id],
            profile_type: profile_type.map(str::to_owned),
            ..Default::default()
        };
        let own = st.resolve(&own)?;
        let named = st.series.iter().any(|k| {
            st.services[k.service as usize].name == span.service
                && (own.profile_type == ProfileTypeId::default()
                    || k.profile_type == own.profile_type)
        });
        if !named {
            // Profiled under another name (a scrape target named otherwise): the services
            // that hold the span's samples stand for it.
            let held: BTreeSet<String> = own
                .blocks
                .iter()
                .map(|(index, b)| {
                    let series = index.blocks[*b as usize].series as usize;
                    st.services[st.series[series].service as usize].name.clone()
                })
                .collect();
            services = held.into_iter().collect();
        }
        let wanted_type = (own.profile_type != ProfileTypeId::default())
            .then(|| own.profile_type.to_string())
            .or_else(|| profile_type.map(str::to_owned));
        let mut out = SpanWindows {
            services: services.clone(),
            ..Default::default()
        };
        let mut seen = BTreeSet::new();
        for service in services {
            let since = Selection {
                service: Some(service),
                profile_type: wanted_type.clone(),
                from_ns: i64::try_from(span.start_ns).unwrap_or(i64::MAX),
                overlapping: true,
                ..Default::default()
            };
            let r = st.resolve(&since)?;
            if r.profile_type != ProfileTypeId::default() {
                out.profile_type.get_or_insert(r.profile_type.clone());
            }
            for (index, b) in &r.blocks {
                let m = &index.blocks[*b as usize];
                let end = m.time_ns.saturating_add(m.duration_ns.max(0));
                out.newest_end_ns = Some(out.newest_end_ns.map_or(end, |e: i64| e.max(end)));
                out.window_ns = out.window_ns.max(m.duration_ns);
                let overlaps = (m.time_ns as i128) < span.end_ns.max(span.start_ns + 1) as i128
                    && end as i128 > span.start_ns as i128;
                if overlaps {
                    seen.insert((m.time_ns, m.duration_ns));
                }
            }
        }
        out.windows = seen.into_iter().collect();
        Ok(out)
    }
}
