//! The pipeline's tests: batching, answers, health, and writes to real stores and queues.

/// Profiles without an id get one of their own, 16 bytes, each different; an id given
/// by the producer stays.
#[test]
fn forwarded_profiles_are_named_where_they_have_no_id() {
    use spanprof_format::otlp::{Profile, ResourceProfiles, ScopeProfiles};
    let own = vec![5; 16];
    let profiles = vec![
        Profile::default(),
        Profile {
            profile_id: vec![0; 16],
            ..Default::default()
        },
        Profile {
            profile_id: own.clone(),
            ..Default::default()
        },
    ];
    let mut data = spanprof_format::otlp::ProfilesData {
        resource_profiles: vec![ResourceProfiles {
            scope_profiles: vec![ScopeProfiles {
                profiles,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut again = data.clone();
    super::name_profiles(&mut data);
    super::name_profiles(&mut again);
    let ids = |d: &spanprof_format::otlp::ProfilesData| -> Vec<Vec<u8>> {
        let p = &d.resource_profiles[0].scope_profiles[0].profiles;
        p.iter().map(|p| p.profile_id.clone()).collect()
    };
    let (a, b) = (ids(&data), ids(&again));
    assert_eq!((a[2].clone(), b[2].clone()), (own.clone(), own));
    let named = [&a[0], &a[1], &b[0], &b[1]];
    assert!(named
        .iter()
        .all(|id| id.len() == 16 && id.iter().any(|&x| x != 0)));
    let distinct: std::collections::HashSet<_> = named.iter().collect();
    assert_eq!(distinct.len(), 4);
}

#[test]
fn health_says_stalled_only_while_a_batch_takes_too_long() {
    let health = super::Health::default();
    let now = std::time::Instant::now();
    assert_eq!(health.stalled(now + super::STALL_AFTER), None, "idle");
    health.batch(true);
    let later = now + 2 * super::STALL_AFTER;
    assert!(health
        .stalled(later)
        .is_some_and(|d| d >= super::STALL_AFTER));
    assert_eq!(
        health.stalled(std::time::Instant::now()),
        None,
        "just started"
    );
    health.batch(false);
    assert_eq!(health.stalled(later), None, "done");
}

use std::time::{Duration, Instant};

use prost::Message;
use spanprof_format::otlp::string_kv;
use spanprof_format::otlp::ProfilesData;
use spanprof_store::spans::SpanRecord;
use spanprof_store::store::{Store, StoreConfig, Storing};

use super::*;
use crate::config::{BatchConfig, ForwardProtocol, ForwarderConfig};
use crate::forward::queue::{DiskQueue, Signal};
use crate::forward::Forwarders;
use crate::metrics::Receiver;

fn span(n: u8) -> SpanRecord {
    SpanRecord {
        trace_id: [n; 16],
        span_id: [n; 8],
        name: format!("span {n}"),
        service: "svc".into(),
        start_ns: 1_000,
        end_ns: 2_000,
        ..Default::default()
    }
}

/// A pipeline on a real store in a temporary directory, with no forwarders.
fn pipeline(dir: &std::path::Path, batch_age: Duration) -> (Pipeline, Arc<Metrics>) {
    pipeline_on(StoreConfig::new(dir.join("store")), dir, batch_age)
}

fn pipeline_on(
    store: StoreConfig,
    dir: &std::path::Path,
    batch_age: Duration,
) -> (Pipeline, Arc<Metrics>) {
    let (p, metrics, _task) = pipeline_with(store, &[], dir, batch_age, 0);
    (p, metrics)
}

/// A pipeline on a real store and forwarders (never started: what is queued for them
/// stays in their queues under `dir`), and its batcher's task.
fn pipeline_with(
    store: StoreConfig,
    forward: &[ForwarderConfig],
    dir: &std::path::Path,
    batch_age: Duration,
    max_bytes: usize,
) -> (Pipeline, Arc<Metrics>, tokio::task::JoinHandle<()>) {
    let metrics = Arc::new(Metrics::default());
    let (store, _) = Store::open(store).unwrap();
    let forward = Forwarders::open(forward, dir, Arc::clone(&metrics), None).unwrap();
    let sinks = Sinks {
        store: Some(Arc::new(store)),
        forward: Arc::new(forward),
        write_failed: Arc::new(Notify::new()),
        over_limit: Arc::new(Notify::new()),
    };
    let cfg = ProcessorsConfig {
        batch: BatchConfig {
            queue_capacity: 16,
            queue_size: (max_bytes as u64).into(),
            max_items: 256,
            max_age: batch_age.into(),
        },
        ..Default::default()
    };
    let (p, task) = Pipeline::start(sinks, cfg, Arc::clone(&metrics));
    (p, metrics, task)
}

fn batches(m: &Metrics) -> (f64, f64) {
    (m.pipeline_batches.get(()), m.pipeline_batch_items.get(()))
}

/// Yields (the test runtime has one thread) until the batcher holds the one item just
/// submitted: it was queued (depth 1) and the queue is empty again.
async fn until_the_batcher_holds_it(p: &Pipeline, metrics: &Metrics) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(metrics.queue_depth.get(()) == 1.0
        && p.batcher.tx.capacity() == p.batcher.tx.max_capacity())
    {
        assert!(
            Instant::now() < deadline,
            "the item never reached the batcher"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_batch_waits_for_announced_requests_and_no_longer() {
    let dir = tempfile::tempdir().unwrap();
    let (p, metrics) = pipeline(dir.path(), Duration::from_secs(30));
    // Alone, an item is written at once: nothing else was announced.
    let t = Instant::now();
    p.submit(Work::Spans(vec![span(1)], None), Receiver::OtlpGrpc)
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(batches(&metrics), (1.0, 1.0));

    // An announced request holds the batch until it is queued: one write for both.
    let announced = p.incoming();
    let first = tokio::spawn({
        let p = p.clone();
        async move {
            p.submit(Work::Spans(vec![span(2)], None), Receiver::OtlpGrpc)
                .await
        }
    });
    until_the_batcher_holds_it(&p, &metrics).await;
    // It took the item and decided nothing: a batch is counted when it is decided.
    assert_eq!(
        batches(&metrics),
        (1.0, 1.0),
        "written while a request was announced"
    );
    assert!(!first.is_finished());
    announced
        .submit(Work::Spans(vec![span(3)], None), Receiver::OtlpGrpc)
        .await
        .unwrap();
    first.await.unwrap().unwrap();
    assert_eq!(batches(&metrics), (2.0, 3.0));

    // A request refused before it was queued releases the batch at once.
    let refused = p.incoming();
    let t = Instant::now();
    let waiting = tokio::spawn({
        let p = p.clone();
        async move {
            p.submit(Work::Spans(vec![span(4)], None), Receiver::OtlpGrpc)
                .await
        }
    });
    until_the_batcher_holds_it(&p, &metrics).await;
    assert_eq!(
        batches(&metrics),
        (2.0, 3.0),
        "written while a request was announced"
    );
    assert!(!waiting.is_finished());
    drop(refused);
    waiting.await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(batches(&metrics), (3.0, 4.0));
    // Every batch's write was timed.
    let text = metrics.render();
    assert!(
        text.lines()
            .any(|l| l == "spanprof_pipeline_write_seconds_count 3"),
        "{text}"
    );
}

/// Two tenants' pipelines on one batcher: requests of both in flight together make one
/// batch (one sync wait for both), each written to its own tenant's store and counted in
/// its own metrics; a tenant's queue limit is its own.
#[tokio::test]
async fn tenants_share_a_batch_and_keep_their_data_apart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ProcessorsConfig {
        batch: BatchConfig {
            queue_capacity: 2,
            queue_size: 0.into(),
            max_items: 256,
            max_age: Duration::from_secs(30).into(),
        },
        ..Default::default()
    };
    let (batcher, task) = Batcher::start(cfg, 2);
    let tenant = |name: &str| {
        let metrics = Arc::new(Metrics::default());
        let (store, _) = Store::open(StoreConfig::new(dir.path().join(name))).unwrap();
        let store = Arc::new(store);
        let sinks = Sinks {
            store: Some(Arc::clone(&store)),
            forward: Arc::new(
                Forwarders::open(&[], dir.path(), Arc::clone(&metrics), None).unwrap(),
            ),
            write_failed: Arc::new(Notify::new()),
            over_limit: Arc::new(Notify::new()),
        };
        let pipeline = Pipeline::on(&batcher, sinks, 0, Arc::clone(&metrics));
        (pipeline, metrics, store)
    };
    let (a, a_metrics, a_store) = tenant("a");
    let (b, b_metrics, b_store) = tenant("b");
    // b's request is announced before a's is queued: the batch waits for it.
    let b_coming = b.incoming();
    let a_sent = tokio::spawn({
        let a = a.clone();
        async move {
            a.submit(Work::Spans(vec![span(1)], None), Receiver::OtlpGrpc)
                .await
        }
    });
    until_the_batcher_holds_it(&a, &a_metrics).await;
    assert!(
        !a_sent.is_finished(),
        "written while b's request was announced"
    );
    b_coming
        .submit(Work::Spans(vec![span(2)], None), Receiver::OtlpGrpc)
        .await
        .unwrap();
    a_sent.await.unwrap().unwrap();
    assert_eq!(batches(&a_metrics), (1.0, 1.0));
    assert_eq!(batches(&b_metrics), (1.0, 1.0));
    assert!(a_store.span(&[1; 8]).unwrap().is_some());
    assert!(
        a_store.span(&[2; 8]).unwrap().is_none(),
        "b's span in a's store"
    );
    assert!(b_store.span(&[2; 8]).unwrap().is_some());
    assert!(
        b_store.span(&[1; 8]).unwrap().is_none(),
        "a's span in b's store"
    );

    // A tenant holding its whole capacity is refused; the other tenant is not.
    let held = [a.incoming(), a.incoming()];
    let waiting: Vec<_> = (3..5)
        .map(|n| {
            let a = a.clone();
            tokio::spawn(async move {
                a.submit(Work::Spans(vec![span(n)], None), Receiver::OtlpGrpc)
                    .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a_metrics.queue_depth.get(()) < 2.0 {
        assert!(Instant::now() < deadline, "a's requests never queued");
        tokio::task::yield_now().await;
    }
    let refused = a
        .submit(Work::Spans(vec![span(5)], None), Receiver::OtlpGrpc)
        .await;
    assert!(matches!(refused, Err(SubmitError::Full)), "{refused:?}");
    drop(held);
    b.submit(Work::Spans(vec![span(6)], None), Receiver::OtlpGrpc)
        .await
        .unwrap();
    for w in waiting {
        w.await.unwrap().unwrap();
    }
    drop((a, b, batcher));
    task.await.unwrap();
}

/// Past `max_bytes` of queued work, a submission is refused as a full queue (429) while
/// others wait, and taken again once they are written; one item alone is always taken.
#[tokio::test]
async fn a_queue_full_of_bytes_refuses_more_until_written() {
    let dir = tempfile::tempdir().unwrap();
    let spans = |n: u8| Work::Spans((0..50).map(|i| span(n.wrapping_add(i))).collect(), None);
    let each = spans(1).approx_bytes();
    assert!(each > 50 * std::mem::size_of::<SpanRecord>(), "{each}");
    let (p, metrics, _task) = pipeline_with(
        StoreConfig::new(dir.path().join("store")),
        &[],
        dir.path(),
        Duration::from_secs(30),
        each + each / 2,
    );
    // Alone, even past the limit: taken.
    let (big, _, _) = pipeline_with(
        StoreConfig::new(dir.path().join("store2")),
        &[],
        &dir.path().join("d2"),
        Duration::from_secs(30),
        1,
    );
    big.submit(spans(1), Receiver::OtlpGrpc).await.unwrap();
    // One item held in a batch (a request announced): a second does not fit beside it.
    let announced = p.incoming();
    let first = tokio::spawn({
        let p = p.clone();
        async move { p.submit(spans(1), Receiver::OtlpGrpc).await }
    });
    until_the_batcher_holds_it(&p, &metrics).await;
    assert_eq!(metrics.queue_bytes.get(()), each as f64);
    match p.submit(spans(100), Receiver::OtlpGrpc).await {
        Err(SubmitError::Full) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        metrics
            .rejected
            .get((Receiver::OtlpGrpc, crate::metrics::RejectReason::QueueFull)),
        1.0
    );
    drop(announced);
    first.await.unwrap().unwrap();
    assert_eq!(metrics.queue_bytes.get(()), 0.0);
    p.submit(spans(100), Receiver::OtlpGrpc).await.unwrap();
}

/// In one batch, the profiles the store refuses are answered to the item they came in,
/// and only to it.
#[tokio::test]
async fn refused_profiles_are_answered_to_their_own_item() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        max_profile_series: 1,
        ..StoreConfig::new(dir.path().join("store"))
    };
    let (p, metrics) = pipeline_on(cfg, dir.path(), Duration::from_secs(30));
    let cpu = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");
    let labelled = spanprof_format::pprof::decode(cpu, 64 << 20).unwrap();
    let mut plain = labelled.clone();
    plain.sample.iter_mut().for_each(|s| s.label.clear());
    let otlp = |p: &spanprof_format::pprof::Profile| {
        spanprof_format::to_otlp::pprof_to_otlp(p, Default::default(), None)
            .unwrap()
            .0
    };
    let announced = p.incoming();
    let first = tokio::spawn({
        let (p, data) = (p.clone(), otlp(&labelled));
        async move {
            p.submit(Work::Profiles(data, Storing::EachAlone), Receiver::OtlpGrpc)
                .await
        }
    });
    until_the_batcher_holds_it(&p, &metrics).await;
    announced
        .submit(
            Work::Profiles(otlp(&plain), Storing::EachAlone),
            Receiver::OtlpGrpc,
        )
        .await
        .unwrap();
    match first.await.unwrap() {
        Err(SubmitError::Refused(problems)) => {
            assert_eq!(problems.len(), 2, "{problems:?}");
            assert!(
                problems[0].contains("server.max_profile_series"),
                "{problems:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(batches(&metrics), (1.0, 2.0));
}

/// The real Go profile in one request of two resources, each with its two sample types;
/// the second resource's first profile names a stack its dictionary does not hold.
fn request() -> ProfilesData {
    let cpu = include_bytes!("../../../../testdata/go/cpu-10s.pb.gz");
    let p = spanprof_format::pprof::decode(cpu, 64 << 20).unwrap();
    let mut data = spanprof_format::to_otlp::pprof_to_otlp(&p, Default::default(), None)
        .unwrap()
        .0;
    let mut bad = data.resource_profiles[0].clone();
    bad.resource.get_or_insert_default().attributes = vec![string_kv("service.name", "bad")];
    bad.scope_profiles[0].profiles[0].samples[0].stack_index = 1 << 30;
    data.resource_profiles.push(bad);
    data
}

/// What the store refuses is not forwarded either: the forwarder's queue holds the request
/// without that profile.
#[tokio::test]
async fn forwarders_get_what_the_store_took() {
    let dir = tempfile::tempdir().unwrap();
    let down = ForwarderConfig::new("down", ForwardProtocol::Grpc, "http://127.0.0.1:9");
    let (p, _, task) = pipeline_with(
        StoreConfig::new(dir.path().join("store")),
        &[down],
        dir.path(),
        Duration::from_secs(1),
        0,
    );
    let sent = request();
    match p
        .submit(
            Work::Profiles(sent.clone(), Storing::EachAlone),
            Receiver::OtlpGrpc,
        )
        .await
    {
        Err(SubmitError::Refused(problems)) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0].starts_with("resource_profiles[1].scope_profiles[0].profiles[0]"),
                "{problems:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    drop(p);
    task.await.unwrap();

    let (queue, _) = DiskQueue::open(&dir.path().join("forward").join("down"), 1 << 30).unwrap();
    let pending = queue.peek(10, 64 << 20);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].signal, Signal::Profiles);
    let mut forwarded = ProfilesData::decode(&queue.read(&pending[0]).unwrap()[..]).unwrap();
    let mut want = sent;
    want.resource_profiles[1].scope_profiles[0]
        .profiles
        .remove(0);
    // Each named on the way (see `name_profiles`), as the sent ones were not.
    for rp in &mut forwarded.resource_profiles {
        for p in rp.scope_profiles.iter_mut().flat_map(|s| &mut s.profiles) {
            assert_eq!(p.profile_id.len(), 16);
            p.profile_id.clear();
        }
    }
    assert!(forwarded == want, "the request without the refused profile");
}
