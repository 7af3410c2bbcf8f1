//! The memory that request bodies take while receivers read and decode them, bounded across
//! every receiver and listener (`server.max_inflight_size`).
//!
//! Each request's body, its decompressed copy, and what its decoder allocates are charged
//! against one budget as they arrive ([`Drawing`]); the charge is given back when the receiver
//! lets go of them (before it waits for the store). A request that would go past the budget is answered 429 / `RESOURCE_EXHAUSTED` with
//! a retry hint, so many large uploads at once slow their senders down instead of taking the
//! server's memory: without it, 100 concurrent 31 MB uploads held 2.2 GB, and enough of them
//! would end the process. Once decoded, a request is bounded by the pipeline's queue
//! (`processors.batch.queue_size`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use http_body_util::BodyExt;
use spanprof_format::budget::Pool;
use spanprof_format::FormatError;

use super::rejection::Rejection;
use crate::AppState;

/// How long a request body may stall between two pieces before the request is dropped with
/// 408, so a client that stops sending cannot hold its share of the budget for good.
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a whole request body may take to arrive before the request is dropped with 408:
/// a client that trickles a byte now and then, never stalling for [`BODY_IDLE_TIMEOUT`], does
/// not hold what it sent for good either (a 64 MiB body needs 220 KB/s).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(300);

/// Once the server is stopping, how long a request body may stall before the request is
/// answered 503 (send it again): a stalled upload held the shutdown for its whole drain
/// time, 20 s, and its client got no answer. A body still arriving goes on.
pub const STOPPING_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Once the server is stopping, how long a request body still arriving may take before the
/// request is answered 503 (send it again): one that trickled a byte a second, never
/// stalling, held the shutdown for its whole drain time, and its client got no answer. Half
/// the drain time: what arrived in time is still decoded and stored within it.
pub const STOPPING_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of request bodies held now, against a limit.
#[derive(Debug)]
pub struct Inflight {
    used: AtomicUsize,
    max: usize,
    /// Whether the server is stopping (see [`STOPPING_IDLE_TIMEOUT`]).
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Inflight {
    /// A budget of `max` bytes (0 = no limit).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Inflight {
            used: AtomicUsize::new(0),
            max,
            stopping: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The server stops: bodies that stall for [`STOPPING_IDLE_TIMEOUT`] from now on are
    /// answered 503.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// Bytes charged now.
    pub fn bytes(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The limit (0 = none).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes that can still be charged (`usize::MAX` without a limit).
    pub fn available(&self) -> usize {
        if self.max == 0 {
            return usize::MAX;
        }
        self.max.saturating_sub(self.bytes())
    }

    /// Charges `n` bytes if they fit.
    fn take(&self, n: usize) -> bool {
        if self.max == 0 {
            self.used.fetch_add(n, Ordering::AcqRel);
            return true;
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.max)
            })
            .is_ok()
    }

    /// The 429 of a request whose `n` more bytes do not fit now.
    fn no_room_for(&self, n: usize) -> Rejection {
        self.full(&format!(
            "requests being received and decoded hold {} bytes, and {n} more would pass the \
             limit",
            self.bytes()
        ))
    }

    /// The 429 of a request that does not fit now; `why` says what did not fit.
    pub(crate) fn full(&self, why: &str) -> Rejection {
        Rejection {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "the server is busy: {why} (server.max_inflight_size: {} bytes); retry later",
                self.max
            ),
            reason: crate::metrics::RejectReason::InflightFull,
        }
    }
}

/// Bytes charged to an [`Inflight`] budget for one request, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    inflight: Arc<Inflight>,
    bytes: usize,
}

impl Charge {
    /// Nothing charged yet.
    pub fn new(inflight: &Arc<Inflight>) -> Self {
        Charge {
            inflight: Arc::clone(inflight),
            bytes: 0,
        }
    }

    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The budget charged.
    pub fn inflight(&self) -> &Inflight {
        &self.inflight
    }

    /// Charges `n` more bytes, or a 429 when they do not fit.
    pub fn grow(&mut self, n: usize) -> Result<(), Rejection> {
        if !self.inflight.take(n) {
            return Err(self.inflight.no_room_for(n));
        }
        self.bytes += n;
        Ok(())
    }

    /// Takes over what `other` charged (to the same budget).
    pub fn absorb(&mut self, mut other: Charge) {
        debug_assert!(Arc::ptr_eq(&self.inflight, &other.inflight));
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Gives back `n` of the bytes charged (what the request no longer holds).
    pub fn release(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.inflight.used.fetch_sub(n, Ordering::AcqRel);
        self.bytes -= n;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

/// A request's [`Charge`] as the [`Pool`] its decoder draws from: the memory of the decoded
/// message is charged to the in-flight budget as the decoder allocates it, and stays charged
/// until the receiver lets go of the message. Each decoder's own budget bounds one message
/// (16 times its size); this bounds all of them at once: eight 61 KB uploads of empty
/// strings, each within its own budget, took the server to 2.6 GB.
#[derive(Debug)]
pub struct Drawing {
    charge: std::cell::RefCell<Charge>,
    /// Bytes the last refused draw asked for.
    refused: std::cell::Cell<usize>,
}

impl Drawing {
    /// Draws on `charge` (which may already hold the request's body).
    pub fn new(charge: Charge) -> Self {
        Drawing {
            charge: std::cell::RefCell::new(charge),
            refused: std::cell::Cell::new(0),
        }
    }

    /// Draws on a new charge to `inflight`.
    pub fn on(inflight: &Arc<Inflight>) -> Self {
        Drawing::new(Charge::new(inflight))
    }

    /// The charge, with what the decoder drew.
    pub fn into_charge(self) -> Charge {
        self.charge.into_inner()
    }

    /// Bytes charged now (the decoder's draws, and what the charge held before).
    pub fn bytes(&self) -> usize {
        self.charge.borrow().bytes()
    }

    /// Gives back `n` bytes of the charge (the body, once decoded).
    pub fn release(&self, n: usize) {
        self.charge.borrow_mut().release(n);
    }

    /// The answer to a request whose decoder stopped with `e` (`context: e` for a message
    /// that is not valid). `also_held`: bytes of the request charged elsewhere (its body).
    /// Out of room in the budget: 429 when other requests hold what was missing, 413 when
    /// the request alone needs more than the whole budget.
    pub fn refusal(&self, context: &str, e: &FormatError, also_held: usize) -> Rejection {
        let FormatError::NoRoom { what, .. } = e else {
            return Rejection::undecodable(context, e);
        };
        let charge = self.charge.borrow();
        let inflight = charge.inflight();
        let needed = charge
            .bytes()
            .saturating_add(also_held)
            .saturating_add(self.refused.get());
        if needed > inflight.max() {
            return Rejection::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the {what} needs at least {} bytes of memory to decode, more than \
                     server.max_inflight_size ({} bytes) allows for all requests being \
                     received and decoded at once",
                    needed,
                    inflight.max()
                ),
            );
        }
        inflight.full(&format!(
            "requests being received and decoded hold {} bytes, and decoding the {what} \
             needs {} more",
            inflight.bytes(),
            self.refused.get()
        ))
    }
}

impl Pool for Drawing {
    fn take(&self, bytes: usize) -> bool {
        let taken = self.charge.borrow_mut().grow(bytes).is_ok();
        if !taken {
            self.refused.set(bytes);
        }
        taken
    }
}

/// The answer to a body that could not be read after `got` bytes: reason `aborted` when the
/// connection ended or broke before the body did (the client went away or gave up: nobody
/// reads the answer, and nothing that arrived was wrong), `invalid` (400) otherwise, such as
/// a malformed chunked encoding. Both name the cause, with what caused it.
fn unreadable(e: axum::Error, got: usize) -> Rejection {
    let inner = e.into_inner();
    let (mut aborted, mut text) = (false, inner.to_string());
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*inner);
    while let Some(err) = cause {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            aborted |= h.is_incomplete_message() || h.is_canceled() || h.is_closed();
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            aborted |= matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            );
        }
        cause = err.source();
        if let Some(c) = cause {
            let c = c.to_string();
            if !text.ends_with(&c) {
                text = format!("{text}: {c}");
            }
        }
    }
    if aborted {
        return Rejection {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the connection ended after {got} bytes of the request body, before the body \
                 did (the client went away?): {text}"
            ),
            reason: crate::metrics::RejectReason::Aborted,
        };
    }
    Rejection::bad(format!(
        "the request body could not be read after {got} bytes: {text}"
    ))
}

/// A receiver's request body, read whole within `server.max_body_size` and charged to the
/// server's in-flight budget until dropped. As an extractor it answers 413 past the size
/// limit, 429 past the budget, 408 when the body stalls and 400 when it cannot be read.
#[derive(Debug)]
pub struct ChargedBody {
    /// The body as sent.
    pub bytes: Bytes,
    /// Its charge.
    pub charge: Charge,
}

impl ChargedBody {
    /// `body`, its bytes counted under `spanprof_received_bytes_total{receiver}` once it was
    /// read whole (the extractor runs before the handler knows its receiver's name).
    pub fn counted(
        body: Result<Self, Rejection>,
        app: &AppState,
        receiver: crate::metrics::Receiver,
    ) -> Result<Self, Rejection> {
        if let Ok(b) = &body {
            app.metrics
                .received_bytes
                .add(receiver, b.bytes.len() as f64);
        }
        body
    }
}

impl FromRequest<AppState> for ChargedBody {
    type Rejection = Rejection;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, Rejection> {
        let body = read(
            req,
            app.config.server.max_body_size,
            BODY_IDLE_TIMEOUT,
            &app.inflight,
        )
        .await?;
        if !app.ingest_rate.take(body.bytes.len()) {
            return Err(Rejection::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "over this tenant's ingest rate of {} bytes/s (server.max_ingest_rate, \
                     server.max_ingest_burst): retry later",
                    app.config.server.max_ingest_rate
                ),
            ));
        }
        Ok(body)
    }
}

/// Bytes of a body that must have arrived before room for all it announced is taken.
const TRUST_ANNOUNCED: usize = 1 << 20;

/// The 413 of a body past the size limit, `limit` bytes.
fn too_large(limit: usize) -> Rejection {
    Rejection::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the request body is larger than the server's limit of {limit} bytes \
             (server.max_body_size)"
        ),
    )
}

/// Reads `req`'s body, at most `limit` bytes, charging it to `inflight` as it arrives (a
/// request whose `Content-Length` cannot fit now is refused before it is read, but nothing is
/// charged for bytes not yet sent: a client announcing a large body and sending it a byte at a
/// time held the budget of every upload); 408 when nothing arrives for `idle`, or the whole
/// body not within [`BODY_TIMEOUT`].
pub async fn read(
    req: Request,
    limit: usize,
    idle: Duration,
    inflight: &Arc<Inflight>,
) -> Result<ChargedBody, Rejection> {
    let mut charge = Charge::new(inflight);
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if let Some(n) = announced {
        if n > limit {
            return Err(too_large(limit));
        }
        if n > inflight.available() {
            let busy = inflight.no_room_for(n);
            // A client that waits for `100 Continue` before sending gets the answer instead,
            // and sends nothing.
            let waits = req
                .headers()
                .get(axum::http::header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
            if waits {
                return Err(busy);
            }
            let patience = Patience::new(inflight, idle);
            return Err(refuse_read(busy, req.into_body(), limit, patience).await);
        }
    }
    let mut body = req.into_body();
    // Memory for what has arrived, not for what is announced: grown as the bytes come, and
    // charged as it is taken (what had arrived alone was charged, and the doubling buffers
    // held up to twice that, and as much again freed on the way: 60 uploads of 31 MB took
    // the server to 1.4 GB within a budget of 512 MiB). Doubling up to
    // [`TRUST_ANNOUNCED`], then the announced length at once: a client that has sent that
    // much is sending its body.
    let mut buf: Vec<u8> = Vec::new();
    let mut patience = Patience::new(inflight, idle);
    loop {
        let frame = match patience.next(&mut body).await {
            Err(expired) => return Err(expired.rejection(buf.len())),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(unreadable(e, buf.len())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = buf.len() + data.len();
        if total > limit {
            return Err(too_large(limit));
        }
        if total > buf.capacity() {
            let old = buf.capacity();
            let new = match announced {
                Some(n) if old >= TRUST_ANNOUNCED => n,
                Some(n) => old.saturating_mul(2).min(n),
                None => old.saturating_mul(2).min(limit),
            }
            .max(total);
            if let Err(busy) = charge.grow(new - old) {
                drop((buf, charge));
                return Err(refuse_read(busy, body, limit - total, patience).await);
            }
            buf.reserve_exact(new - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    Ok(ChargedBody {
        bytes: Bytes::from(buf),
        charge,
    })
}

/// How long the next piece of a request body is waited for: the idle timeout, within
/// [`BODY_TIMEOUT`] for the whole body; once the server stops, [`STOPPING_IDLE_TIMEOUT`]
/// and [`STOPPING_BODY_TIMEOUT`] from then.
struct Patience {
    idle: Duration,
    deadline: tokio::time::Instant,
    stop_deadline: Option<tokio::time::Instant>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Why a body's next piece was not waited for any longer.
enum Expired {
    /// [`BODY_TIMEOUT`] is over.
    Deadline,
    /// The server stopped [`STOPPING_BODY_TIMEOUT`] ago.
    StillArriving,
    /// Nothing arrived for the idle timeout given (the server is stopping, when `stopping`).
    Stalled { idle: Duration, stopping: bool },
}

impl Patience {
    fn new(inflight: &Inflight, idle: Duration) -> Self {
        Patience {
            idle,
            deadline: tokio::time::Instant::now() + BODY_TIMEOUT,
            stop_deadline: None,
            stopping: inflight.stopping.subscribe(),
        }
    }

    /// The body's next frame, unless it takes longer than allowed.
    async fn next(
        &mut self,
        body: &mut axum::body::Body,
    ) -> Result<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>, Expired> {
        loop {
            let stopped = *self.stopping.borrow_and_update();
            let now = tokio::time::Instant::now();
            let idle = match stopped {
                true => self.idle.min(STOPPING_IDLE_TIMEOUT),
                false => self.idle,
            };
            if stopped {
                self.stop_deadline
                    .get_or_insert(now + STOPPING_BODY_TIMEOUT);
            }
            let until = self
                .stop_deadline
                .map_or(self.deadline, |d| d.min(self.deadline));
            let wait = idle.min(until.saturating_duration_since(now));
            tokio::select! {
                next = tokio::time::timeout(wait, body.frame()) => {
                    let now = tokio::time::Instant::now();
                    return next.map_err(|_| match () {
                        () if now >= self.deadline => Expired::Deadline,
                        () if self.stop_deadline.is_some_and(|d| now >= d) => Expired::StillArriving,
                        () => Expired::Stalled { idle, stopping: stopped },
                    });
                }
                // The server is stopping: wait for the next piece as long as it allows.
                Ok(()) = self.stopping.changed(), if !stopped => continue,
            }
        }
    }
}

impl Expired {
    /// The answer, `got` bytes having arrived.
    fn rejection(self, got: usize) -> Rejection {
        let (status, message) = match self {
            Expired::Deadline => (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body took too long: {got} bytes in {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            ),
            Expired::StillArriving => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is stopping and the request body was still arriving after \
                     {} s ({got} bytes): send the request again",
                    STOPPING_BODY_TIMEOUT.as_secs()
                ),
            ),
            Expired::Stalled { stopping: true, .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is stopping and the request body stalled after {got} bytes: \
                     send the request again"
                ),
            ),
            Expired::Stalled { idle, .. } => (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body stalled: nothing arrived for {} s after {got} bytes",
                    idle.as_secs_f64()
                ),
            ),
        };
        Rejection::new(status, message)
    }
}

/// `busy`, once the rest of `body` (at most `limit` more bytes) has been read and let go: a
/// client still sending when the server answers and closes gets a reset instead of the answer,
/// and would not know to retry later.
async fn refuse_read(
    busy: Rejection,
    mut body: axum::body::Body,
    mut limit: usize,
    mut patience: Patience,
) -> Rejection {
    while let Ok(Some(Ok(frame))) = patience.next(&mut body).await {
        if let Ok(data) = frame.into_data() {
            if data.len() > limit {
                break;
            }
            limit -= data.len();
        }
    }
    busy
}

#[cfg(test)]
mod tests;
