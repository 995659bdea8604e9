//! Edges of the worker runtime (feature `runtime`) found in review:
//! a panicking decode, a job leased as the grace period ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::EmbeddedJobs;
use dque::runtime::{Context, EnqueueJob, Job, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct PanicsInDecode;

impl Job for PanicsInDecode {
    const KIND: &'static str = "panics_in_decode";
    fn run(self, _cx: &Context) -> Result<(), JobError> {
        Ok(())
    }
    fn decode(_body: &[u8]) -> Result<Self, dque::CodecError> {
        panic!("a Deserialize impl that panics");
    }
}

// Review (worker panics): `Typed::run` catches a panic of the handler but
// calls `J::decode` outside `catch_unwind`. A decode that panics unwinds
// the worker thread with its job still in its cell: the thread is gone but
// counted, the watchdog touches the job's lease for ever (no one retries
// it), and `until_empty` never sees the thread idle, so `run` never ends.
#[test]
fn a_panic_in_decode_is_a_failed_attempt_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
    queue.enqueue_job(&PanicsInDecode).unwrap();
    let worker = Worker::new(queue)
        .register::<PanicsInDecode>()
        .handle_signals(false)
        .until_empty(true)
        .grace(Duration::ZERO);
    let stop = worker.stop_handle();
    let (done, ended) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let summary = worker.run();
        let _ = done.send(());
        summary
    });
    let finished = ended.recv_timeout(Duration::from_secs(5)).is_ok();
    if !finished {
        stop.stop();
    }
    let summary = runner.join().unwrap().unwrap();
    assert!(finished, "the worker never ran out of jobs: {summary:?}");
    assert_eq!(summary.panicked, 1, "{summary:?}");
}

/// Set once `Worker::run` has returned: no handler may start after it.
static RETURNED: AtomicBool = AtomicBool::new(false);
static LATE: AtomicU64 = AtomicU64::new(0);

#[derive(Serialize, Deserialize)]
struct Quick;

impl Job for Quick {
    const KIND: &'static str = "quick";
    fn run(self, _cx: &Context) -> Result<(), JobError> {
        if RETURNED.load(Ordering::SeqCst) {
            LATE.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

// Review (A3): a worker thread that leased a job just before the grace
// period ended (after its last look at the stop) installed and ran it
// after `run` had given back what ran and returned: a job run unwatched,
// missing from the summary. Stops land at random points of busy workers;
// no handler may start once `run` returned, and nothing is lost.
#[test]
fn no_job_starts_after_the_worker_returned() {
    let rounds: u64 = std::env::var("DQUE_RUNTIME_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    for round in 0..rounds {
        RETURNED.store(false, Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        let queue = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
        for _ in 0..2_000 {
            queue.enqueue_job(&Quick).unwrap();
        }
        let worker = Worker::new(Arc::clone(&queue) as Arc<dyn dque::jobs::JobQueue>)
            .register::<Quick>()
            .concurrency(4)
            .handle_signals(false)
            .grace(Duration::ZERO);
        let stop = worker.stop_handle();
        let runner = std::thread::spawn(move || {
            let summary = worker.run();
            RETURNED.store(true, Ordering::SeqCst);
            summary
        });
        std::thread::sleep(Duration::from_micros(200 * (round % 10)));
        stop.stop();
        let summary = runner.join().unwrap().unwrap();
        // At once: a thread still in a lease call when the grace period
        // ended gave back what it leased only later (seen: 3 leases held
        // after `run` returned, under load).
        let counts = dque::jobs::JobQueue::counts(&*queue).unwrap();
        assert_eq!(counts.leased, 0, "round {round}: a job left leased");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(LATE.load(Ordering::SeqCst), 0, "round {round}: {summary:?}");
    }
}

/// A kind unique for an hour, and while queued, running or dead.
#[derive(Serialize, Deserialize)]
struct Receipt {
    order: u32,
}

fn receipt_kind() -> dque::runtime::KindOptions {
    dque::runtime::KindOptions::new()
        .unique_for(Duration::from_secs(3600))
        .unique_states(dque::jobs::UniqueStates::WAITING)
}

impl Job for Receipt {
    const KIND: &'static str = "receipt";
    fn run(self, _cx: &Context) -> Result<(), JobError> {
        Ok(())
    }
    fn options() -> dque::runtime::KindOptions {
        receipt_kind()
    }
}

/// A call's own options, as `enqueue_job_with` takes them.
type Call = fn(dque::jobs::NewJob) -> dque::jobs::NewJob;

/// The calls that must add a second job of `receipt`'s kind once the
/// first ran: `unique_for(ZERO)` says "not unique" (with an id or
/// without), and a job without an id holds nothing.
fn not_unique_calls() -> Vec<(&'static str, Call)> {
    vec![
        ("zero period, an id", |job| {
            job.id("receipt-zero").unique_for(Duration::ZERO)
        }),
        ("zero period, no id", |job| job.unique_for(Duration::ZERO)),
        ("no id", |job| job),
    ]
}

/// Enqueues with `call` twice around a run of the job, through `enqueue`;
/// both must be added.
fn both_added(
    queue: &EmbeddedJobs,
    name: &str,
    mut enqueue: impl FnMut() -> dque::Result<dque::jobs::Enqueued>,
) {
    use dque::jobs::JobQueue;
    for time in ["first", "second"] {
        let added = enqueue().unwrap_or_else(|e| panic!("{name}, {time}: refused: {e}"));
        assert!(added.is_added(), "{name}, {time}: {added:?}");
        let lease = queue.lease().unwrap().expect("the receipt");
        queue.ack(lease).unwrap();
    }
}

#[test]
fn a_call_without_a_period_overrides_a_kinds_unique_states_in_typed_enqueue() {
    // Review of the kinds' uniqueness: a kind with `unique_states` kept
    // its states on a job whose call said `unique_for(Duration::ZERO)`
    // (not unique) or had no id, so the queue refused it ("unique states
    // apply for a period", "give the job an id").
    for (name, call) in not_unique_calls() {
        let dir = tempfile::tempdir().unwrap();
        let queue = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
        both_added(&queue, name, || {
            queue.enqueue_job_with(&Receipt { order: 1 }, call)
        });
        let set = dque::jobs::QueueSet::new(
            vec![Arc::clone(&queue) as Arc<dyn dque::jobs::JobQueue>],
            dque::jobs::Order::InOrder,
        )
        .unwrap();
        both_added(&queue, &format!("{name} (a queue set)"), || {
            set.enqueue_job_with(&Receipt { order: 2 }, call)
        });
    }
}

#[cfg(feature = "tokio")]
#[derive(Serialize, Deserialize)]
struct AsyncReceipt {
    order: u32,
}

#[cfg(feature = "tokio")]
impl dque::runtime::AsyncJob for AsyncReceipt {
    const KIND: &'static str = "receipt";
    async fn perform(self, _: &dque::runtime::AsyncContext) -> Result<(), JobError> {
        Ok(())
    }
    fn options() -> dque::runtime::KindOptions {
        receipt_kind()
    }
}

#[cfg(feature = "tokio")]
#[test]
fn a_call_without_a_period_overrides_a_kinds_unique_states_in_async_typed_enqueue() {
    // As above, through the async typed enqueue.
    use dque::jobs::AsyncEmbeddedJobs;
    use dque::runtime::EnqueueAsyncJob;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (name, call) in not_unique_calls() {
        let dir = tempfile::tempdir().unwrap();
        let queue = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
        let handle = AsyncEmbeddedJobs::from_arc(Arc::clone(&queue));
        both_added(&queue, name, || {
            runtime.block_on(handle.enqueue_job_with(&AsyncReceipt { order: 1 }, call))
        });
    }
}
