//! What a query asks for: a [`Selection`] of samples and the [`SpanFilter`] narrowing it to
//! spans; plain data, so callers build one without the store.

use spanprof_format::link::to_hex;

/// Which samples a query is about.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Service name (`service_name` label); `None` = every service.
    pub service: Option<String>,
    /// Profile type: a Pyroscope id, `type:unit`, `type` or a name; `None` = the CPU type when
    /// there is one, else the first type present.
    pub profile_type: Option<String>,
    /// Start of the time range, in nanoseconds since the Unix epoch.
    pub from_ns: i64,
    /// End of the time range (exclusive), in nanoseconds since the Unix epoch; 0 = no end.
    pub to_ns: i64,
    /// Label selector, e.g. `{region="eu", span_name=~"GET .*"}`.
    pub label_selector: Option<String>,
    /// Only samples of these spans.
    pub span_ids: Vec<[u8; 8]>,
    /// Only samples of this trace (its spans known from traces, or links naming it).
    pub trace_id: Option<[u8; 16]>,
    /// Add the samples of every descendant of the selected spans.
    pub include_child_spans: bool,
    /// Only samples of spans passing this filter.
    pub span_filter: Option<SpanFilter>,
    /// Count every profile whose window overlaps the time range, not only those taken in it
    /// (what covered a span's time). Selections of spans or a trace always do.
    pub overlapping: bool,
}

impl Selection {
    /// What the selection shows, for an image's heading: service, spans or trace, span
    /// name, then the type (`goapp · span 79141fc6e5920f9a and its children ·
    /// process_cpu:cpu:…`).
    pub fn describe(&self, profile_type: &str) -> String {
        let sel = self;
        let mut parts: Vec<String> = Vec::new();
        parts.extend(sel.service.clone());
        let children = if sel.include_child_spans {
            " and their children"
        } else {
            ""
        };
        match sel.span_ids.as_slice() {
            [] => {}
            [one] => parts.push(format!(
                "span {}{}",
                to_hex(one),
                if sel.include_child_spans {
                    " and its children"
                } else {
                    ""
                }
            )),
            many => parts.push(format!("{} spans{children}", many.len())),
        }
        if let Some(t) = &sel.trace_id {
            parts.push(format!("trace {}", to_hex(t)));
        }
        if let Some(name) = sel.span_filter.as_ref().and_then(|f| f.name.as_ref()) {
            parts.push(format!("{name:?} spans{children}"));
        }
        parts.push(profile_type.to_owned());
        parts.join(" · ")
    }
}

/// Spans chosen by name and duration rather than by id.
#[derive(Debug, Clone, Default)]
pub struct SpanFilter {
    /// Span name (exact).
    pub name: Option<String>,
    /// Only spans at least this long, in nanoseconds.
    pub min_duration_ns: Option<u64>,
    /// Only spans at most this long, in nanoseconds.
    pub max_duration_ns: Option<u64>,
    /// Only spans at or above this percentile (0–100) of the durations of spans of that name.
    pub above_percentile: Option<f64>,
    /// Only spans at or below this percentile (0–100) of the durations of spans of that name.
    pub below_percentile: Option<f64>,
}
