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
