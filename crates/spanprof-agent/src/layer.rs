//! The writer: a `tracing_subscriber::Layer` that keeps each thread's slot ([`crate::slot`]) on
//! the innermost entered span.
//!
//! Ids are computed once, at the span's first enter (not at its creation: asking
//! `tracing-opentelemetry` for them builds its span, after which `set_parent` with a propagated
//! context is refused): the OpenTelemetry trace and span ids when its layer runs under this one,
//! else the `tracing` span id with the id of the span's root as trace id. They are kept in the
//! span's extensions, and each thread caches the span's built record (see [`crate::slot`]), so
//! that an enter (a poll of an instrumented future) usually costs one atomic load, a tag compare
//! and a pointer swap, not a registry lookup under its extensions' lock. No allocation and no
//! lock on the slot write.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use opentelemetry::trace::TraceContextExt;
use tracing::span::Id;
use tracing::{Dispatch, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::slot::{self, SpanContextIds};

/// The `tracing` layer that publishes the current span of each thread for the sampler.
///
/// Install it *after* (outside) `tracing_opentelemetry`'s layer, so that layer has made the
/// OpenTelemetry span by the time this one asks for its ids:
///
/// ```no_run
/// use tracing_subscriber::prelude::*;
/// # let otel_layer = tracing_subscriber::layer::Identity::new();
/// tracing_subscriber::registry()
///     .with(otel_layer) // tracing_opentelemetry::layer().with_tracer(tracer)
///     .with(spanprof_agent::SpanSlotLayer::new())
///     .init();
/// ```
#[derive(Debug, Default)]
pub struct SpanSlotLayer {
    dispatch: OnceLock<tracing::dispatcher::WeakDispatch>,
}

impl SpanSlotLayer {
    /// A new layer.
    pub fn new() -> SpanSlotLayer {
        SpanSlotLayer::default()
    }
}

/// Ids of a span whose OpenTelemetry context is not known: the `tracing` id as span id, the
/// root's `tracing` id (in the last 8 bytes) as trace id. `tracing` reuses ids of closed spans,
/// so these are unique among live spans only.
fn tracing_ids(span: u64, root: u64, name: &'static str) -> SpanContextIds {
    let mut trace_id = [0; 16];
    trace_id[8..].copy_from_slice(&root.to_be_bytes());
    SpanContextIds {
        trace_id,
        span_id: span.to_be_bytes(),
        trace_flags: 0,
        name,
    }
}

impl SpanSlotLayer {
    fn otel_ids(&self, id: &Id, name: &'static str) -> Option<SpanContextIds> {
        let dispatch = self.dispatch.get()?.upgrade()?;
        let cx = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| SpanContextIds {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            trace_flags: sc.trace_flags().to_u8(),
            name,
        })
    }
}

/// Buckets of [`CLOSED`]; spans' ids spread over them.
const CLOSE_BUCKETS: usize = 4096;

/// Per bucket of span ids, how many spans of it have closed: `tracing` reuses a closed span's
/// id, so a cached entry is good only while its bucket's count is the one it was cached at.
static CLOSED: [AtomicU32; CLOSE_BUCKETS] = [const { AtomicU32::new(0) }; CLOSE_BUCKETS];

fn bucket(span: u64) -> &'static AtomicU32 {
    // Registry ids are slab indices (low bits) with a generation above them.
    &CLOSED[(span ^ (span >> 32)) as usize % CLOSE_BUCKETS]
}

impl SpanSlotLayer {
    /// The ids of span `id`: those computed at its first enter, or computed now.
    fn ids<S>(&self, id: &Id, ctx: &Context<'_, S>) -> Option<SpanContextIds>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let span = ctx.span(id)?;
        if let Some(ids) = span.extensions().get::<SpanContextIds>() {
            return Some(*ids);
        }
        let name = span.metadata().name();
        drop(span);
        // Asked with this span's extensions unlocked: the OpenTelemetry layer locks them.
        let ids = self.otel_ids(id, name).unwrap_or_else(|| {
            let root = ctx
                .span_scope(id)
                .and_then(|scope| scope.from_root().next().map(|s| s.id()))
                .unwrap_or_else(|| id.clone());
            tracing_ids(id.into_u64(), root.into_u64(), name)
        });
        // Replaced, not inserted: another thread entering it now may have put the same ids.
        ctx.span(id)?.extensions_mut().replace(ids);
        Some(ids)
    }
}

impl SpanSlotLayer {
    /// A thread's first enter of a span (or its first since the record was evicted): kept out
    /// of line so the hit path in `on_enter` stays a few instructions with no stack frame.
    #[cold]
    #[inline(never)]
    fn enter_uncached<S>(&self, id: &Id, ctx: &Context<'_, S>, closed: u32)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if let Some(ids) = self.ids(id, ctx) {
            slot::enter_caching(id.into_u64(), closed, &ids);
        }
    }
}

impl<S> Layer<S> for SpanSlotLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.dispatch.set(subscriber.downgrade());
        // Out-of-process readers learn from it that threads publish OTEP 4947 records. If it
        // cannot be published they do not find them; the in-process sampler does not need it.
        #[cfg(target_os = "linux")]
        let _ = crate::process_ctx::publish();
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let span = id.into_u64();
        // Read before the ids: a close (and reuse) after this read changes the count, and the
        // record cached below is then never taken.
        let closed = bucket(span).load(Ordering::Acquire);
        if !slot::enter_cached(span, closed) {
            self.enter_uncached(id, &ctx, closed);
        }
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        slot::exit(id.into_u64());
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        bucket(id.into_u64()).fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    #[test]
    fn without_opentelemetry_the_root_names_the_trace() {
        let subscriber = tracing_subscriber::registry().with(SpanSlotLayer::new());
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::info_span!("root");
            let _r = root.enter();
            let root_record = slot::current().unwrap();
            assert_eq!(root_record.span_name(), Some("root"));
            let child = tracing::info_span!("child");
            {
                let _c = child.enter();
                let r = slot::current().unwrap();
                assert_eq!(r.span_name(), Some("child"));
                assert_eq!(r.trace_id, root_record.trace_id);
                assert_ne!(r.span_id, root_record.span_id);
            }
            assert_eq!(slot::current().unwrap(), root_record);
        });
        assert_eq!(slot::current(), None);
    }
}
