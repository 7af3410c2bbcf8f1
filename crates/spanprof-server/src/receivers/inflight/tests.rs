use super::*;

const IDLE: Duration = Duration::from_secs(5);

/// A decoder drawing past the budget is a 429 while other requests hold what it misses,
/// and a 413 when it alone needs more than the whole budget; what it drew is given back
/// with its charge.
#[test]
fn a_drawing_decoder_is_refused_as_busy_or_too_large() {
    let inflight = Inflight::new(100);
    let mut other = Charge::new(&inflight);
    other.grow(50).unwrap();
    let no_room = FormatError::NoRoom {
        what: "pprof profile",
        drawn: 30,
    };
    let drawing = Drawing::on(&inflight);
    assert!(drawing.take(30));
    assert!(!drawing.take(30));
    let busy = drawing.refusal("the profile", &no_room, 10);
    assert_eq!(
        busy.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        busy.message
    );
    assert!(
        busy.message
            .contains("decoding the pprof profile needs 30 more"),
        "{}",
        busy.message
    );
    drop(other);
    assert!(drawing.take(30));
    assert!(!drawing.take(41));
    let too_large = drawing.refusal("the profile", &no_room, 0);
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        too_large
            .message
            .contains("at least 101 bytes of memory to decode")
            && too_large
                .message
                .contains("server.max_inflight_size (100 bytes)"),
        "{}",
        too_large.message
    );
    // Other errors are the decoder's, as without a pool.
    let invalid = FormatError::Invalid("bad".into());
    assert_eq!(
        drawing.refusal("the profile", &invalid, 0).message,
        "the profile: bad"
    );
    let mut charge = drawing.into_charge();
    assert_eq!((charge.bytes(), inflight.bytes()), (60, 60));
    charge.absorb(Charge::new(&inflight));
    drop(charge);
    assert_eq!(inflight.bytes(), 0);
}

#[test]
fn charges_are_bounded_and_given_back() {
    let inflight = Inflight::new(100);
    let mut a = Charge::new(&inflight);
    a.grow(60).unwrap();
    let mut b = Charge::new(&inflight);
    let refused = b.grow(41).unwrap_err();
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        refused.message.contains("hold 60 bytes")
            && refused.message.contains("server.max_inflight_size"),
        "{}",
        refused.message
    );
    b.grow(40).unwrap();
    assert_eq!(inflight.bytes(), 100);
    assert_eq!(inflight.available(), 0);
    b.release(15);
    assert_eq!((b.bytes(), inflight.bytes()), (25, 85));
    drop(a);
    assert_eq!(inflight.bytes(), 25);
    assert_eq!(refused.reason.as_str(), "inflight_full");
    drop(b);
    assert_eq!(inflight.bytes(), 0);
}

#[test]
fn no_limit_still_counts() {
    let inflight = Inflight::new(0);
    let mut a = Charge::new(&inflight);
    a.grow(usize::MAX / 2).unwrap();
    assert_eq!(inflight.bytes(), usize::MAX / 2);
    assert_eq!(inflight.available(), usize::MAX);
    drop(a);
    assert_eq!(inflight.bytes(), 0);
}

fn request(body: &'static [u8], content_length: Option<usize>) -> Request {
    let mut b = axum::http::Request::builder().method("POST").uri("/ingest");
    if let Some(n) = content_length {
        b = b.header("content-length", n);
    }
    b.body(axum::body::Body::from(body)).unwrap()
}

#[tokio::test]
async fn a_body_is_read_and_charged_until_dropped() {
    let inflight = Inflight::new(1000);
    for announced in [None, Some(11)] {
        let body = read(request(b"hello world", announced), 100, IDLE, &inflight)
            .await
            .unwrap();
        assert_eq!(&body.bytes[..], b"hello world");
        assert_eq!(inflight.bytes(), 11);
        drop(body);
        assert_eq!(inflight.bytes(), 0);
    }
}

#[tokio::test]
async fn too_large_and_too_many_are_refused_before_reading() {
    let inflight = Inflight::new(20);
    // The status of reading "hello world" (announcing its length or not) within `limit`.
    let refused = |announced, limit| {
        let inflight = Arc::clone(&inflight);
        async move {
            read(request(b"hello world", announced), limit, IDLE, &inflight)
                .await
                .unwrap_err()
                .status
        }
    };
    assert_eq!(refused(Some(11), 10).await, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(refused(None, 10).await, StatusCode::PAYLOAD_TOO_LARGE);
    let held = read(request(b"hello world", None), 100, IDLE, &inflight)
        .await
        .unwrap();
    assert_eq!(refused(Some(11), 100).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused(None, 100).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        inflight.bytes(),
        11,
        "a refused request gives its charge back"
    );
    drop(held);
    assert_eq!(inflight.bytes(), 0);
}

/// One piece, then nothing, as from a client that stopped sending.
struct Stalls(Option<Bytes>);

impl hyper::body::Body for Stalls {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(b)))),
            None => std::task::Poll::Pending,
        }
    }
}

#[tokio::test]
async fn a_stalled_body_is_dropped_with_408_and_its_charge() {
    let inflight = Inflight::new(1000);
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/ingest")
        .body(axum::body::Body::new(Stalls(Some(Bytes::from_static(
            b"0123456789",
        )))))
        .unwrap();
    let e = read(req, 100, Duration::from_millis(50), &inflight)
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::REQUEST_TIMEOUT);
    assert!(e.message.contains("after 10 bytes"), "{}", e.message);
    assert_eq!(inflight.bytes(), 0);
}

/// A byte at every tick, forever: never stalls for the idle timeout. Counts the bytes it
/// sent.
struct Trickles(tokio::time::Interval, Arc<AtomicUsize>);

impl hyper::body::Body for Trickles {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        // The first tick is at once.
        std::task::ready!(self.0.poll_tick(cx));
        self.1.fetch_add(1, Ordering::Relaxed);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(b"x")))))
    }
}

/// A request announcing `announced` bytes that sends one `every`, and the count of
/// bytes it sent.
fn trickling(announced: usize, every: Duration) -> (Request, Arc<AtomicUsize>) {
    let sent = Arc::new(AtomicUsize::new(0));
    let body = Trickles(tokio::time::interval(every), Arc::clone(&sent));
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/ingest")
        .header("content-length", announced)
        .body(axum::body::Body::new(body))
        .unwrap();
    (req, sent)
}

/// Advances (paused) time until `done`, within `within`.
async fn until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !done() {
        assert!(start.elapsed() <= within, "no {what} within {within:?}");
        tokio::time::advance(Duration::from_millis(100)).await;
    }
}

/// A client that announces a large body and sends it a byte at a time holds what it sent,
/// not what it announced (16 of them held the whole budget: every upload got 429), and
/// for [`BODY_TIMEOUT`] at most.
#[tokio::test(start_paused = true)]
async fn a_trickling_body_holds_what_it_sent_and_is_dropped_in_time() {
    let inflight = Inflight::new(1000);
    let slow = tokio::spawn({
        let inflight = Arc::clone(&inflight);
        async move {
            read(
                trickling(995, Duration::from_secs(20)).0,
                1000,
                Duration::from_secs(30),
                &inflight,
            )
            .await
        }
    });
    // Four bytes (at 0, 20, 40 and 60 s) in at most a minute of (paused) time.
    until("4 bytes held", Duration::from_secs(61), || {
        inflight.bytes() >= 4
    })
    .await;
    assert_eq!(inflight.bytes(), 4);
    let other = read(request(b"hello world", Some(11)), 1000, IDLE, &inflight)
        .await
        .unwrap();
    drop(other);
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.status, StatusCode::REQUEST_TIMEOUT);
    assert!(
        e.message.contains("took too long") && e.message.contains("bytes in 300 s"),
        "{}",
        e.message
    );
    assert_eq!(inflight.bytes(), 0);
}

/// Once the server stops, a body still trickling in (never stalling) is answered 503
/// within [`STOPPING_BODY_TIMEOUT`], not held for the whole drain.
#[tokio::test(start_paused = true)]
async fn a_trickling_body_is_answered_503_soon_after_the_server_stops() {
    let inflight = Inflight::new(1000);
    let (e, took) = stopped_while_trickling(&inflight, 995).await;
    assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        e.message.contains("still arriving after 10 s")
            && e.message.contains("send the request again"),
        "{}",
        e.message
    );
    assert!(
        took >= STOPPING_BODY_TIMEOUT && took < STOPPING_BODY_TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    assert_eq!(inflight.bytes(), 0);
}

/// What reading a body announcing `announced` bytes, sent a byte each half second, comes
/// to when the server stops once 6 have been sent, and how long after the stop.
async fn stopped_while_trickling(
    inflight: &Arc<Inflight>,
    announced: usize,
) -> (Rejection, Duration) {
    let (req, sent) = trickling(announced, Duration::from_millis(500));
    let slow = tokio::spawn({
        let inflight = Arc::clone(inflight);
        async move { read(req, 1000, Duration::from_secs(30), &inflight).await }
    });
    until("6 bytes sent", Duration::from_secs(5), || {
        sent.load(Ordering::Relaxed) >= 6
    })
    .await;
    assert!(!slow.is_finished());
    inflight.stop();
    let stopped = tokio::time::Instant::now();
    let e = slow.await.unwrap().unwrap_err();
    (e, stopped.elapsed())
}

/// A body refused as busy is read to its end before the answer, but not for longer than
/// one taken would be: once the server stops, within [`STOPPING_BODY_TIMEOUT`].
#[tokio::test(start_paused = true)]
async fn a_refused_trickling_body_is_let_go_soon_after_the_server_stops() {
    let inflight = Inflight::new(100);
    let (e, took) = stopped_while_trickling(&inflight, 500).await;
    assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS, "{}", e.message);
    assert!(
        took >= STOPPING_BODY_TIMEOUT && took < STOPPING_BODY_TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
}

/// The body's own deadline is a 408 "took too long" even while the server is stopping.
#[tokio::test(start_paused = true)]
async fn the_body_deadline_is_told_apart_from_the_stop() {
    let inflight = Inflight::new(1000);
    let (req, sent) = trickling(995, Duration::from_millis(500));
    let slow = tokio::spawn({
        let inflight = Arc::clone(&inflight);
        async move { read(req, 1000, Duration::from_secs(30), &inflight).await }
    });
    // Stopped 3 s before the body's deadline (its 595th byte goes at 297 s): the stop
    // would give it 10 s more.
    until("595 bytes sent", BODY_TIMEOUT, || {
        sent.load(Ordering::Relaxed) >= 595
    })
    .await;
    assert!(!slow.is_finished());
    inflight.stop();
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.status, StatusCode::REQUEST_TIMEOUT, "{}", e.message);
    assert!(e.message.contains("took too long"), "{}", e.message);
}

#[tokio::test]
async fn a_client_waiting_for_100_continue_is_refused_unread() {
    let inflight = Inflight::new(10);
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/ingest")
        .header("content-length", 100)
        .header("expect", "100-continue")
        // Read, it would stall for the whole idle timeout.
        .body(axum::body::Body::new(Stalls(None)))
        .unwrap();
    let start = std::time::Instant::now();
    let e = read(req, 1000, Duration::from_secs(30), &inflight)
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(start.elapsed() < Duration::from_secs(5));
}
