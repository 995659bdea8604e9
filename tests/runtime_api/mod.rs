//! The worker runtime's checks (`dque::runtime`), run against every
//! backend through the Jobs API suite's [`Backend`]: a backend's test file
//! declares `mod jobs_api; mod runtime_api;` and calls [`runtime_suite!`].
//!
//! Real threads and real time where the runtime's behaviour is about time
//! (timeouts, heartbeats, the grace period); the queue's `ManualClock`
//! where it is about due times (snoozes, back-offs).
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dque::jobs::{AddressOptions, Enqueued, JobQueue, NewJob, UniqueStates, WaitState};
use dque::runtime::{
    testing, Context, EnqueueJob, Job, JobError, KindOptions, Outcome, StopReason, UnknownKind,
    Worker, KIND_HEADER,
};
use serde::{Deserialize, Serialize};

use super::jobs_api::{Backend, Settings};

pub mod timeouts;

/// One `#[test]` per check, each handed to `$runner: fn(fn(&dyn Backend))`.
#[macro_export]
macro_rules! runtime_suite {
    (run = $runner:path) => {
        $crate::runtime_suite!(@each $runner;
            retries_then_a_dead_letter_with_the_last_reason,
            a_panic_is_a_failed_attempt_with_its_message,
            a_timeout_fails_the_attempt_and_a_new_thread_goes_on,
            a_snooze_runs_the_job_again_once_due,
            heartbeats_keep_a_long_job_past_its_lease_time,
            unknown_kinds_are_retried_then_dead_never_lost,
            an_unknown_kind_may_be_dead_at_once,
            an_undecodable_body_is_a_dead_letter_with_the_decode_error,
            concurrency_is_reached_and_never_passed,
            a_stop_gives_running_jobs_back_uncounted,
            drain_with_a_manual_clock_runs_retries_without_sleeping,
            typed_enqueue_is_seen_by_the_test_helpers,
            a_kinds_uniqueness_applies_to_typed_enqueue_with_an_id,
        );
        $crate::runtime_timeout_checks!(run = $runner);
    };
    (@each $runner:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $runner(runtime_api::$check);
            }
        )*
    };
}

/// What the handlers saw, in order.
#[derive(Default)]
pub struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Echo {
    pub n: u32,
}

impl Job for Echo {
    const KIND: &'static str = "echo";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        cx.state::<Arc<Log>>()
            .push(format!("echo {} attempt {}", self.n, cx.attempt()));
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
pub struct AlwaysFails {}

impl Job for AlwaysFails {
    const KIND: &'static str = "always_fails";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        Err(JobError::retry(format!(
            "failing on purpose: attempt {}",
            cx.attempt()
        )))
    }
    fn options() -> KindOptions {
        KindOptions::new().max_attempts(2).no_backoff()
    }
}

#[derive(Serialize, Deserialize)]
pub struct Panics {}

impl Job for Panics {
    const KIND: &'static str = "panics";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        panic!("boom {}", cx.attempt())
    }
    fn options() -> KindOptions {
        KindOptions::new().max_attempts(1)
    }
}

/// Sleeps without looking at `should_stop`: a handler that does not stop.
#[derive(Serialize, Deserialize)]
pub struct Stubborn {
    pub ms: u64,
}

impl Job for Stubborn {
    const KIND: &'static str = "stubborn";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        cx.state::<Arc<Log>>()
            .push(format!("stubborn {} started", self.ms));
        std::thread::sleep(Duration::from_millis(self.ms));
        cx.state::<Arc<Log>>()
            .push(format!("stubborn {} ended", self.ms));
        Ok(())
    }
}

/// Waits until the worker stops, then says so.
#[derive(Serialize, Deserialize)]
pub struct Cooperative {}

impl Job for Cooperative {
    const KIND: &'static str = "cooperative";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        cx.state::<Arc<Log>>().push("cooperative started".into());
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if cx.should_stop() {
                return Err(JobError::Interrupted);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// Snoozes its first two runs, then succeeds; one attempt only, so a
/// counted snooze would make it a dead letter.
#[derive(Serialize, Deserialize)]
pub struct Snoozes {}

impl Job for Snoozes {
    const KIND: &'static str = "snoozes";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        let log = cx.state::<Arc<Log>>();
        let runs = log
            .lines()
            .iter()
            .filter(|line| line.starts_with("snoozes"))
            .count();
        log.push(format!("snoozes attempt {}", cx.attempt()));
        match runs {
            0 | 1 => Err(JobError::snooze(Duration::from_secs(60))),
            _ => Ok(()),
        }
    }
    fn options() -> KindOptions {
        KindOptions::new().max_attempts(1)
    }
}

/// Counts how many run at once; waits (up to 5 s) until 4 do.
#[derive(Serialize, Deserialize)]
pub struct Gate {}

#[derive(Default)]
pub struct Running {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Job for Gate {
    const KIND: &'static str = "gate";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        let running = cx.state::<Arc<Running>>();
        let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
        running.most.fetch_max(now, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(5);
        while running.most.load(Ordering::SeqCst) < 4 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        running.now.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

fn new_queue(backend: &dyn Backend, name: &str) -> (Arc<dyn JobQueue>, Settings) {
    let settings = Settings::default();
    (backend.make(name, &settings), settings)
}

/// A worker for the tests: no signals, stops when nothing is ready.
fn worker(queue: &Arc<dyn JobQueue>, log: &Arc<Log>) -> Worker {
    Worker::new(Arc::clone(queue))
        .handle_signals(false)
        .until_empty(true)
        .state(Arc::clone(log))
}

/// The dead letters' (body, reason).
fn dead(queue: &dyn JobQueue) -> Vec<(String, String)> {
    queue
        .dead(100)
        .expect("dead")
        .into_iter()
        .map(|d| (String::from_utf8(d.job.body).unwrap(), d.reason))
        .collect()
}

pub fn retries_then_a_dead_letter_with_the_last_reason(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-retries");
    queue.enqueue_job(&AlwaysFails {}).unwrap();
    let hooks = Arc::new(Log::default());
    let (on_failure, on_dead) = (Arc::clone(&hooks), Arc::clone(&hooks));
    let summary = worker(&queue, &Arc::default())
        .register::<AlwaysFails>()
        .on_failure(move |f| on_failure.push(format!("failure {} {}", f.attempt, f.outcome.word())))
        .on_dead(move |f| on_dead.push(format!("dead {} {:?}", f.attempt, f.outcome.reason())))
        .run()
        .expect("run");
    // The kind's 2 attempts, not the queue's 3.
    assert_eq!((summary.retried, summary.dead), (1, 1), "{summary:?}");
    assert_eq!(
        hooks.lines(),
        [
            "failure 1 retry".to_owned(),
            "dead 2 Some(\"failing on purpose: attempt 2\")".to_owned()
        ]
    );
    let dead = dead(queue.as_ref());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].1.contains("failing on purpose: attempt 2"),
        "the last attempt's reason: {dead:?}"
    );
    assert_eq!(queue.counts().unwrap().ready, 0);
}

pub fn a_panic_is_a_failed_attempt_with_its_message(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-panics");
    queue.enqueue_job(&Panics {}).unwrap();
    queue.enqueue_job(&Echo { n: 1 }).unwrap();
    let log = Arc::new(Log::default());
    let summary = worker(&queue, &log)
        .register::<Panics>()
        .register::<Echo>()
        .run()
        .expect("run");
    assert_eq!(
        (summary.panicked, summary.dead, summary.succeeded),
        (1, 1, 1),
        "{summary:?}"
    );
    assert_eq!(dead(queue.as_ref())[0].1, "boom 1");
    // The thread that caught the panic went on.
    assert_eq!(log.lines(), ["echo 1 attempt 1"]);
}

pub fn a_timeout_fails_the_attempt_and_a_new_thread_goes_on(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-timeout");
    queue.enqueue_job(&Stubborn { ms: 1_500 }).unwrap();
    queue.enqueue_job(&Echo { n: 2 }).unwrap();
    let log = Arc::new(Log::default());
    let summary = worker(&queue, &log)
        .register_with::<Stubborn>(
            KindOptions::new()
                .max_attempts(1)
                .timeout(Duration::from_millis(200)),
        )
        .register::<Echo>()
        .concurrency(1)
        .run()
        .expect("run");
    assert_eq!(
        (
            summary.timed_out,
            summary.dead,
            summary.abandoned,
            summary.succeeded
        ),
        (1, 1, 1, 1),
        "{summary:?}"
    );
    assert_eq!(dead(queue.as_ref())[0].1, "timed out");
    // With one thread, the echo ran on the thread that replaced the
    // stubborn one, before the stubborn handler ended.
    let lines = log.lines();
    assert_eq!(
        lines[..2],
        ["stubborn 1500 started", "echo 2 attempt 1"],
        "{lines:?}"
    );
    // What the abandoned handler returns later settles nothing.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(dead(queue.as_ref()).len(), 1);
    assert_eq!(queue.counts().unwrap().ready, 0);
}

/// Pins the counted snooze: a snooze was a nack with its delay (the
/// attempt counted, the kind's attempts used up by snoozing: this kind's
/// one attempt made it a dead letter at its first snooze). A snoozed job
/// must wait scheduled, its attempts as before, and run again uncounted.
pub fn a_snooze_runs_the_job_again_once_due(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rt-snooze");
    queue.enqueue_job(&Snoozes {}).unwrap();
    let log = Arc::new(Log::default());
    let failures = Arc::new(Log::default());
    for run in 1..=3 {
        let seen = Arc::clone(&failures);
        let summary = worker(&queue, &log)
            .register::<Snoozes>()
            .on_failure(move |f| seen.push(f.outcome.word().to_owned()))
            .run()
            .expect("run");
        let snoozed = u64::from(run < 3);
        assert_eq!(
            (
                summary.snoozed,
                summary.succeeded,
                summary.retried,
                summary.dead
            ),
            (snoozed, 1 - snoozed, 0, 0),
            "run {run}: {summary:?}"
        );
        let waiting = queue.waiting(10).unwrap();
        if run < 3 {
            assert_eq!(waiting.len(), 1);
            assert!(
                matches!(waiting[0].state, WaitState::Scheduled(_)),
                "snoozed: scheduled, {:?}",
                waiting[0].state
            );
            assert_eq!(waiting[0].job.attempt, 0, "uncounted: {:?}", waiting[0]);
            settings.clock.advance(Duration::from_secs(61));
        } else {
            assert!(waiting.is_empty(), "{waiting:?}");
        }
    }
    assert_eq!(log.lines(), ["snoozes attempt 1"; 3]);
    assert!(failures.lines().is_empty(), "a snooze is no failure");
    assert!(dead(queue.as_ref()).is_empty());
}

pub fn heartbeats_keep_a_long_job_past_its_lease_time(backend: &dyn Backend) {
    let settings = Settings {
        lease_time: Duration::from_millis(600),
        ..Settings::default()
    };
    let queue = backend.make("rt-heartbeat", &settings);
    queue.enqueue_job(&Stubborn { ms: 2_000 }).unwrap();
    let log = Arc::new(Log::default());
    // A second thread leases all along: an ended lease would give it the job.
    let summary = worker(&queue, &log)
        .register::<Stubborn>()
        .lease_time(settings.lease_time)
        .concurrency(2)
        .run()
        .expect("run");
    assert_eq!((summary.succeeded, summary.lost), (1, 0), "{summary:?}");
    assert_eq!(
        log.lines(),
        ["stubborn 2000 started", "stubborn 2000 ended"]
    );
}

pub fn unknown_kinds_are_retried_then_dead_never_lost(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rt-unknown");
    queue
        .enqueue(NewJob::new("{}").header(KIND_HEADER, "nobody"))
        .unwrap();
    queue.enqueue(NewJob::new("{}")).unwrap();
    let summary = testing::drain(
        worker(&queue, &Arc::default()).register::<Echo>(),
        Some(&settings.clock),
    )
    .expect("drain");
    // The queue's 3 attempts each, its back-off between them.
    assert_eq!((summary.retried, summary.dead), (4, 2), "{summary:?}");
    let reasons: Vec<String> = dead(queue.as_ref()).into_iter().map(|(_, r)| r).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("unknown kind \"nobody\"")),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r.contains("no kind")), "{reasons:?}");
}

pub fn an_unknown_kind_may_be_dead_at_once(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-unknown-dead");
    queue
        .enqueue(NewJob::new("{}").header(KIND_HEADER, "nobody"))
        .unwrap();
    let summary = worker(&queue, &Arc::default())
        .register::<Echo>()
        .unknown_kind(UnknownKind::DeadLetter)
        .run()
        .expect("run");
    assert_eq!((summary.retried, summary.dead), (0, 1), "{summary:?}");
    assert_eq!(dead(queue.as_ref())[0].0, "{}", "the body is kept");
}

pub fn an_undecodable_body_is_a_dead_letter_with_the_decode_error(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-undecodable");
    queue
        .enqueue(NewJob::new("not json").header(KIND_HEADER, Echo::KIND))
        .unwrap();
    queue
        .enqueue(NewJob::new(r#"{"n":"x"}"#).header(KIND_HEADER, Echo::KIND))
        .unwrap();
    let summary = worker(&queue, &Arc::default())
        .register::<Echo>()
        .run()
        .expect("run");
    assert_eq!(summary.dead, 2, "{summary:?}");
    let dead = dead(queue.as_ref());
    for (body, reason) in &dead {
        assert!(
            reason.starts_with("cannot decode the body of a \"echo\" job: "),
            "{body}: {reason}"
        );
    }
    assert!(
        dead[1].1.contains("invalid type"),
        "serde's words: {dead:?}"
    );
}

pub fn concurrency_is_reached_and_never_passed(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-concurrency");
    for _ in 0..8 {
        queue.enqueue_job(&Gate {}).unwrap();
    }
    let running = Arc::new(Running::default());
    let summary = worker(&queue, &Arc::default())
        .state(Arc::clone(&running))
        .register::<Gate>()
        .concurrency(4)
        .run()
        .expect("run");
    assert_eq!(summary.succeeded, 8, "{summary:?}");
    assert_eq!(running.most.load(Ordering::SeqCst), 4);
}

pub fn a_stop_gives_running_jobs_back_uncounted(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-stop");
    queue.enqueue_job(&Stubborn { ms: 3_000 }).unwrap();
    queue.enqueue_job(&Cooperative {}).unwrap();
    queue.enqueue_job(&Echo { n: 9 }).unwrap();
    let log = Arc::new(Log::default());
    let worker = Worker::new(Arc::clone(&queue))
        .handle_signals(false)
        .state(Arc::clone(&log))
        .register::<Stubborn>()
        .register::<Cooperative>()
        .register::<Echo>()
        .concurrency(2)
        .grace(Duration::from_millis(300));
    let stop = worker.stop_handle();
    let stopper = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(10);
            while log.lines().len() < 2 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.stop();
        })
    };
    let summary = worker.run().expect("run");
    stopper.join().unwrap();
    assert_eq!(summary.stopped, Some(StopReason::Handle));
    // The cooperative job said it was interrupted; the stubborn one was
    // still running when the grace period ended: both given back.
    assert_eq!((summary.released, summary.abandoned), (2, 1), "{summary:?}");
    assert_eq!(summary.succeeded + summary.retried + summary.dead, 0);
    let waiting = queue.waiting(10).unwrap();
    assert_eq!(waiting.len(), 3, "{waiting:?}");
    for job in &waiting {
        assert_eq!(job.state, WaitState::Ready, "{job:?}");
        assert_eq!(job.job.attempt, 0, "given back uncounted: {job:?}");
    }
}

pub fn drain_with_a_manual_clock_runs_retries_without_sleeping(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rt-drain");
    queue.enqueue_job(&Snoozes {}).unwrap();
    queue
        .enqueue_job_with(&Echo { n: 3 }, |job| job.delay(Duration::from_secs(3600)))
        .unwrap();
    let log = Arc::new(Log::default());
    let outcomes = Arc::new(Log::default());
    let seen = Arc::clone(&outcomes);
    let summary = testing::drain(
        worker(&queue, &log)
            .register::<Snoozes>()
            .register::<Echo>()
            .on_finished(move |f| {
                if let Outcome::Succeeded = f.outcome {
                    seen.push(f.kind.to_owned());
                }
            }),
        Some(&settings.clock),
    )
    .expect("drain");
    assert_eq!(
        (summary.snoozed, summary.retried, summary.succeeded),
        (2, 0, 2),
        "{summary:?}"
    );
    assert_eq!(
        log.lines(),
        [
            "snoozes attempt 1",
            "snoozes attempt 1",
            "snoozes attempt 1",
            "echo 3 attempt 1"
        ]
    );
    assert_eq!(outcomes.lines(), ["snoozes", "echo"]);
    assert_eq!(queue.counts().unwrap().scheduled, 0);
}

pub fn typed_enqueue_is_seen_by_the_test_helpers(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-typed");
    queue.enqueue_job(&Echo { n: 1 }).unwrap();
    queue
        .enqueue_job_with(&Echo { n: 2 }, |job| {
            job.priority(-1).header("owner", "ops")
        })
        .unwrap();
    queue.enqueue(NewJob::new("other")).unwrap();
    assert_eq!(
        testing::enqueued::<Echo>(queue.as_ref()).unwrap(),
        [Echo { n: 2 }, Echo { n: 1 }]
    );
    testing::assert_enqueued(queue.as_ref(), &Echo { n: 1 });
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        testing::assert_enqueued(queue.as_ref(), &Echo { n: 3 })
    }));
    assert!(missing.is_err(), "no echo 3 was enqueued");
    let lease = queue.lease().unwrap().expect("a job");
    assert_eq!(lease.header(KIND_HEADER), Some("echo"));
    assert_eq!(lease.header("owner"), Some("ops"));
    assert_eq!(lease.body, br#"{"n":2}"#);
}

/// A kind whose jobs are unique for an hour (as Oban's `unique: [period:
/// 3600]`).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Invoice {
    pub order: u32,
}

impl Job for Invoice {
    const KIND: &'static str = "invoice";
    fn run(self, _: &Context) -> Result<(), JobError> {
        Ok(())
    }
    fn options() -> KindOptions {
        KindOptions::new().unique_for(Duration::from_secs(3600))
    }
}

/// Leases and acks the one ready job, `id`.
fn run_one(queue: &dyn JobQueue, id: &str) {
    let lease = queue.lease().unwrap().expect("a job");
    assert_eq!(lease.job.id, id);
    queue.ack(lease).unwrap();
}

pub fn a_kinds_uniqueness_applies_to_typed_enqueue_with_an_id(backend: &dyn Backend) {
    // Issue 27 left-over: a kind could not say its jobs are unique for a
    // period; typed enqueue held an id only while its job was queued, so
    // the same id was added again once its job had run.
    let (queue, _) = new_queue(backend, "rt-unique-kind");
    let q = queue.as_ref();
    let id = "rt-unique-order-7";
    let first = q.enqueue_job_with(&Invoice { order: 7 }, |job| job.id(id));
    assert!(first.unwrap().is_added());
    run_one(q, id);
    // Ran, still within the kind's period: nothing is added, and the
    // answer names the job it matched.
    match q
        .enqueue_job_with(&Invoice { order: 7 }, |job| job.id(id))
        .unwrap()
    {
        Enqueued::Duplicate(duplicate) => assert_eq!(duplicate.id, id),
        other => panic!("a duplicate within the period was answered {other:?}"),
    }
    assert_eq!(q.counts().unwrap().ready, 0, "nothing added");

    // The call's own options win: no period, or fewer states held.
    for (n, call) in [
        (
            1,
            (|job: NewJob| job.unique_for(Duration::ZERO)) as fn(NewJob) -> NewJob,
        ),
        (2, |job: NewJob| job.unique_states(UniqueStates::WAITING)),
    ] {
        let id = format!("rt-unique-call-{n}");
        let added = q.enqueue_job_with(&Invoice { order: n }, |job| call(job.id(&id)));
        assert!(added.unwrap().is_added());
        run_one(q, &id);
        let again = q.enqueue_job_with(&Invoice { order: n }, |job| call(job.id(&id)));
        assert!(
            again.unwrap().is_added(),
            "call {n}: its id is free once run"
        );
        run_one(q, &id);
    }

    // Without an id the kind's period holds nothing (a made-up id is new
    // each time), and the enqueue is not refused for want of one.
    for order in [8, 8] {
        assert!(q.enqueue_job(&Invoice { order }).unwrap().is_added());
    }
    assert_eq!(q.counts().unwrap().ready, 2);
}

/// A worker opened from an ADDRESS (`Worker::open`) runs the jobs another
/// handle enqueued there: the one parser and opener of the library (and of
/// the `dque` command) reaches this backend.
pub fn a_worker_runs_from_an_address(address: &str) {
    let producer = AddressOptions::new()
        .create(true)
        .open_str(address)
        .expect("open the address");
    for n in 1..=3 {
        producer.enqueue_job(&Echo { n }).unwrap();
    }
    let log = Arc::new(Log::default());
    let summary = Worker::open(address)
        .expect("a worker from the address")
        .handle_signals(false)
        .until_empty(true)
        .state(Arc::clone(&log))
        .register::<Echo>()
        .run()
        .expect("run");
    assert_eq!(summary.succeeded, 3, "{summary:?}");
    assert_eq!(
        log.lines(),
        ["echo 1 attempt 1", "echo 2 attempt 1", "echo 3 attempt 1"]
    );
    assert_eq!(producer.counts().unwrap(), Default::default());
    producer.close().unwrap();
}

/// Sleeps `ms` and says so on stdout (a worker process's log): `start N
/// attempt K`, then `done N` if it ran to its end.
#[derive(Serialize, Deserialize)]
pub struct Slow {
    pub n: u32,
    pub ms: u64,
}

impl Job for Slow {
    const KIND: &'static str = "slow";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        println!("start {} attempt {}", self.n, cx.attempt());
        std::thread::sleep(Duration::from_millis(self.ms));
        println!("done {}", self.n);
        Ok(())
    }
}

/// The same kind, run to completion at once (by the test, after the
/// worker process ended), to see which jobs are left.
#[derive(Serialize, Deserialize)]
struct SlowLeft {
    n: u32,
}

impl Job for SlowLeft {
    const KIND: &'static str = "slow";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        cx.state::<Arc<Log>>()
            .push(format!("{} attempt {}", self.n, cx.attempt()));
        Ok(())
    }
}

/// Where a SIGTERM check's worker process finds its queue.
pub const SIGTERM_ADDRESS: &str = "DQUE_TEST_SIGTERM_ADDRESS";

/// The worker process of [`sigterm_mid_job_finishes_or_gives_back`]: a
/// thread worker from the address, signals handled (the default),
/// concurrency 2, grace 3 s; prints its summary last.
pub fn sigterm_worker_process() {
    let address = std::env::var(SIGTERM_ADDRESS).expect("the queue's address");
    let summary = Worker::open(&address)
        .expect("open the address")
        .register::<Slow>()
        .concurrency(2)
        .grace(Duration::from_secs(3))
        .run()
        .expect("run");
    println!(
        "summary succeeded {} released {} abandoned {} stopped {:?}",
        summary.succeeded, summary.released, summary.abandoned, summary.stopped
    );
}

/// A worker process (`test`, the calling test, run again as a child by
/// `tests/child`, whose body is [`sigterm_worker_process`]) on the queue
/// at `address` gets SIGTERM while it runs two jobs: the one that ends
/// within the grace period is acked, the one still running then is given
/// back uncounted, and the two never leased stay as they were; run again
/// here, each job left runs once, so every job ran to its end exactly
/// once across both (none lost, none run twice).
pub fn sigterm_mid_job_finishes_or_gives_back(test: &str, address: &str) {
    use std::io::BufRead;
    {
        // Closed before the worker opens it (an embedded queue has one
        // process unless shared).
        let queue = AddressOptions::new()
            .create(true)
            .open_str(address)
            .expect("open the address");
        for (n, ms) in [(1, 400), (2, 60_000), (3, 0), (4, 0)] {
            queue.enqueue_job(&Slow { n, ms }).unwrap();
        }
        queue.close().unwrap();
    }
    let mut process = super::child::command(test)
        .env(SIGTERM_ADDRESS, address)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("a worker process");
    let mut lines = std::io::BufReader::new(process.stdout.take().unwrap()).lines();
    let mut started = Vec::new();
    while started.len() < 2 {
        let line = lines.next().expect("the worker starts two jobs").unwrap();
        // libtest may print its "test NAME ... " before it on the line.
        if let Some(at) = line.find("start ") {
            started.push(line[at..].to_owned());
        }
    }
    started.sort();
    assert_eq!(started, ["start 1 attempt 1", "start 2 attempt 1"]);
    let pid = rustix::process::Pid::from_child(&process);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(process.wait().unwrap().success(), "{rest:?}");
    let said = |text: &str| rest.iter().filter(|line| line.contains(text)).count();
    assert_eq!(said("done 1"), 1, "job 1 ended within the grace: {rest:?}");
    assert_eq!(said("done 2"), 0, "job 2 was still running: {rest:?}");
    assert_eq!(
        said("start "),
        0,
        "no job started after the signal: {rest:?}"
    );
    assert_eq!(
        said(&format!(
            "summary succeeded 1 released 1 abandoned 1 stopped {:?}",
            Some(StopReason::Signal)
        )),
        1,
        "{rest:?}"
    );
    let queue = AddressOptions::new()
        .open_str(address)
        .expect("open the address again");
    // Jobs 2 (given back), 3 and 4 wait, ready, no attempt counted.
    let waiting = queue.waiting(10).unwrap();
    assert_eq!(waiting.len(), 3, "{waiting:?}");
    for job in &waiting {
        assert_eq!(
            (job.state, job.job.attempt),
            (WaitState::Ready, 0),
            "{job:?}"
        );
    }
    let log = Arc::new(Log::default());
    let shared: Arc<dyn JobQueue> = Arc::from(queue);
    let summary = worker(&shared, &log)
        .register::<SlowLeft>()
        .run()
        .expect("run the rest");
    assert_eq!(summary.succeeded, 3, "{summary:?}");
    assert_eq!(
        log.lines(),
        ["2 attempt 1", "3 attempt 1", "4 attempt 1"],
        "each job left ran once, its first counted attempt"
    );
    assert_eq!(shared.counts().unwrap(), Default::default());
    shared.close().unwrap();
}
