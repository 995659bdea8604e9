//! Reviewer's reproducer for the worker runtime (feature `runtime`).

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
