//! The tokio worker runtime's checks (`dque::runtime::AsyncWorker`), run
//! against every backend's async handle (`AsyncJobQueue`): a backend's
//! test file declares `mod jobs_api; mod runtime_async_api;`, implements
//! [`AsyncBackend`] and calls [`runtime_async_suite!`]. The same behaviours
//! as the thread runtime's suite (`tests/runtime_api/`), where an async
//! handler differs (a timeout aborts it) the check says so.
//!
//! Real time where the behaviour is about time (timeouts, heartbeats, the
//! grace period); the queue's `ManualClock` for due times (snoozes).
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dque::jobs::{AsyncJobQueue, NewJob, WaitState};
use dque::runtime::{
    AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError, KindOptions, StopReason,
    UnknownKind, KIND_HEADER,
};
use serde::{Deserialize, Serialize};

use super::jobs_api::Settings;

mod sets;
pub use sets::*;

/// A backend's async handle under test.
pub trait AsyncBackend {
    /// A new, empty queue named `name` with `settings` (connected on
    /// [`runtime`], outside any task).
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn AsyncJobQueue>;
}

/// The runtime every check runs on, and the server backends connect on
/// (their connections' drivers live there): two workers, as CI's cores.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// One `#[test]` per check, each handed to `$runner: fn(fn(&dyn AsyncBackend))`.
#[macro_export]
macro_rules! runtime_async_suite {
    (run = $runner:path) => {
        $crate::runtime_async_suite!(@each $runner;
            retries_then_a_dead_letter_with_the_last_reason,
            a_panic_is_a_failed_attempt_with_its_message,
            a_timeout_aborts_the_handler_and_the_worker_goes_on,
            a_jobs_own_timeout_takes_precedence_over_its_kinds,
            heartbeats_keep_a_long_job_past_its_lease_time,
            concurrency_is_reached_and_never_passed,
            a_stop_lets_running_jobs_finish_in_the_grace_then_gives_the_rest_back,
            unknown_kinds_and_undecodable_bodies_are_never_lost,
            a_snooze_runs_the_job_again_uncounted,
            a_dropped_run_future_leaves_no_handler_running,
            a_kinds_uniqueness_applies_to_typed_enqueue_with_an_id,
            a_worker_over_two_queues_runs_both_and_settles_each_in_its_own,
            a_queue_set_leases_in_order_and_settles_each_lease_at_home,
            the_async_testing_helpers_drain_and_tell_what_was_enqueued,
        );
    };
    (@each $runner:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $runner(runtime_async_api::$check);
            }
        )*
    };
}

/// What the handlers saw, in order.
#[derive(Default)]
pub struct Log(Mutex<Vec<String>>);

impl Log {
    pub fn push(&self, line: String) {
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

impl AsyncJob for Echo {
    const KIND: &'static str = "echo";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        tokio::task::yield_now().await;
        cx.state::<Arc<Log>>()
            .push(format!("echo {} attempt {}", self.n, cx.attempt()));
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
pub struct AlwaysFails {}

impl AsyncJob for AlwaysFails {
    const KIND: &'static str = "always_fails";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        tokio::task::yield_now().await;
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

impl AsyncJob for Panics {
    const KIND: &'static str = "panics";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        tokio::task::yield_now().await;
        panic!("boom {}", cx.attempt())
    }
    fn options() -> KindOptions {
        KindOptions::new().max_attempts(1)
    }
}

/// Sleeps (awaiting) without looking at `should_stop`.
#[derive(Serialize, Deserialize)]
pub struct Sleeper {
    pub ms: u64,
}

impl AsyncJob for Sleeper {
    const KIND: &'static str = "sleeper";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        let log = cx.state::<Arc<Log>>();
        log.push(format!("sleeper {} started", self.ms));
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        log.push(format!("sleeper {} ended", self.ms));
        Ok(())
    }
}

/// Waits until the worker stops, then says it was interrupted.
#[derive(Serialize, Deserialize)]
pub struct Cooperative {}

impl AsyncJob for Cooperative {
    const KIND: &'static str = "cooperative";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        cx.state::<Arc<Log>>().push("cooperative started".into());
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if cx.should_stop() {
                return Err(JobError::Interrupted);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

/// Snoozes its first run, then succeeds; one attempt only, so a counted
/// snooze would make it a dead letter.
#[derive(Serialize, Deserialize)]
pub struct Snoozes {}

impl AsyncJob for Snoozes {
    const KIND: &'static str = "snoozes";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        let log = cx.state::<Arc<Log>>();
        let runs = log.lines().len();
        log.push(format!("snoozes attempt {}", cx.attempt()));
        match runs {
            0 => Err(JobError::snooze(Duration::from_secs(60))),
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

impl AsyncJob for Gate {
    const KIND: &'static str = "gate";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        let running = cx.state::<Arc<Running>>();
        let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
        running.most.fetch_max(now, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(5);
        while running.most.load(Ordering::SeqCst) < 4 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        running.now.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A worker for the tests: no signals, stops when nothing is ready.
fn worker(queue: &Arc<dyn AsyncJobQueue>, log: &Arc<Log>) -> AsyncWorker {
    AsyncWorker::new(Arc::clone(queue))
        .handle_signals(false)
        .until_empty(true)
        .state(Arc::clone(log))
}

/// The dead letters' (body, reason).
async fn dead(queue: &dyn AsyncJobQueue) -> Vec<(String, String)> {
    queue
        .dead(100)
        .await
        .expect("dead")
        .into_iter()
        .map(|d| (String::from_utf8(d.job.body).unwrap(), d.reason))
        .collect()
}

fn new_queue(backend: &dyn AsyncBackend, name: &str) -> (Arc<dyn AsyncJobQueue>, Settings) {
    let settings = Settings::default();
    (backend.make(name, &settings), settings)
}

/// An async kind whose jobs are unique for an hour.
#[derive(Serialize, Deserialize)]
pub struct Invoice {
    pub order: u32,
}

impl AsyncJob for Invoice {
    const KIND: &'static str = "invoice";
    async fn perform(self, _: &AsyncContext) -> Result<(), JobError> {
        Ok(())
    }
    fn options() -> KindOptions {
        KindOptions::new().unique_for(Duration::from_secs(3600))
    }
}

pub fn a_kinds_uniqueness_applies_to_typed_enqueue_with_an_id(backend: &dyn AsyncBackend) {
    // Issue 27 left-over: a kind could not say its jobs are unique for a
    // period; the async typed enqueue added an id again once its job ran.
    let (queue, _) = new_queue(backend, "rta-unique-kind");
    runtime().block_on(async {
        let id = "rta-unique-order-7";
        let invoice = || Invoice { order: 7 };
        let first = queue.enqueue_job_with(&invoice(), |job| job.id(id)).await;
        assert!(first.unwrap().is_added());
        let lease = queue.lease().await.unwrap().expect("the invoice");
        queue.ack(lease).await.unwrap();
        let again = queue.enqueue_job_with(&invoice(), |job| job.id(id)).await;
        let again = again.unwrap();
        assert!(
            matches!(&again, dque::jobs::Enqueued::Duplicate(d) if d.id == id),
            "{again:?}"
        );
        // The call's own options win; without an id nothing is held.
        let own = queue
            .enqueue_job_with(&invoice(), |job| {
                job.id("rta-unique-own").unique_for(Duration::ZERO)
            })
            .await;
        assert!(own.unwrap().is_added());
        assert!(queue.enqueue_job(&invoice()).await.unwrap().is_added());
        assert!(queue.enqueue_job(&invoice()).await.unwrap().is_added());
        assert_eq!(queue.counts().await.unwrap().ready, 3);
    });
}

pub fn retries_then_a_dead_letter_with_the_last_reason(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-retries");
    runtime().block_on(async {
        queue.enqueue_job(&AlwaysFails {}).await.unwrap();
        let hooks = Arc::new(Log::default());
        let (on_failure, on_dead) = (Arc::clone(&hooks), Arc::clone(&hooks));
        let summary = worker(&queue, &Arc::default())
            .register::<AlwaysFails>()
            .on_failure(move |f| {
                on_failure.push(format!("failure {} {}", f.attempt, f.outcome.word()))
            })
            .on_dead(move |f| on_dead.push(format!("dead {} {:?}", f.attempt, f.outcome.reason())))
            .run()
            .await
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
        let dead = dead(queue.as_ref()).await;
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert!(
            dead[0].1.contains("failing on purpose: attempt 2"),
            "{dead:?}"
        );
        assert_eq!(queue.counts().await.unwrap().ready, 0);
    });
}

pub fn a_panic_is_a_failed_attempt_with_its_message(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-panics");
    runtime().block_on(async {
        queue.enqueue_job(&Panics {}).await.unwrap();
        queue.enqueue_job(&Echo { n: 1 }).await.unwrap();
        let log = Arc::new(Log::default());
        let summary = worker(&queue, &log)
            .register::<Panics>()
            .register::<Echo>()
            .run()
            .await
            .expect("run");
        assert_eq!(
            (summary.panicked, summary.dead, summary.succeeded),
            (1, 1, 1),
            "{summary:?}"
        );
        assert_eq!(dead(queue.as_ref()).await[0].1, "boom 1");
        assert_eq!(log.lines(), ["echo 1 attempt 1"]);
    });
}

/// Unlike a thread, an async handler past its timeout is stopped: its
/// task is aborted at its next `.await`, so its end never comes.
pub fn a_timeout_aborts_the_handler_and_the_worker_goes_on(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-timeout");
    runtime().block_on(async {
        queue.enqueue_job(&Sleeper { ms: 1_500 }).await.unwrap();
        queue.enqueue_job(&Echo { n: 2 }).await.unwrap();
        let log = Arc::new(Log::default());
        let summary = worker(&queue, &log)
            .register_with::<Sleeper>(
                KindOptions::new()
                    .max_attempts(1)
                    .timeout(Duration::from_millis(200)),
            )
            .register::<Echo>()
            .concurrency(1)
            .run()
            .await
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
        assert_eq!(dead(queue.as_ref()).await[0].1, "timed out");
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(
            log.lines(),
            ["sleeper 1500 started", "echo 2 attempt 1"],
            "the timed-out handler never ended"
        );
        assert_eq!(dead(queue.as_ref()).await.len(), 1);
        assert_eq!(queue.counts().await.unwrap().ready, 0);
    });
}

/// A job's own timeout (`NewJob::timeout`, issue 27) takes precedence
/// over its kind's, both ways. The tokio worker once read the kind's
/// only: a job's own shorter timeout ran on to the kind's, and its own
/// longer one was cut at the kind's.
pub fn a_jobs_own_timeout_takes_precedence_over_its_kinds(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-own-timeout");
    runtime().block_on(async {
        // Its own 200 ms is shorter than its kind's 300 ms: it times out.
        let short = dque::runtime::new_async_job(&Sleeper { ms: 1_500 })
            .unwrap()
            .timeout(Duration::from_millis(200));
        // Its own 30 s is longer than its kind's 300 ms: it runs to its end.
        let long = dque::runtime::new_async_job(&Sleeper { ms: 600 })
            .unwrap()
            .timeout(Duration::from_secs(30));
        queue.enqueue(short).await.unwrap();
        queue.enqueue(long).await.unwrap();
        let log = Arc::new(Log::default());
        let summary = worker(&queue, &log)
            .register_with::<Sleeper>(
                KindOptions::new()
                    .max_attempts(1)
                    .timeout(Duration::from_millis(300)),
            )
            .concurrency(2)
            .run()
            .await
            .expect("run");
        assert_eq!(
            (summary.timed_out, summary.dead, summary.succeeded),
            (1, 1, 1),
            "{summary:?}"
        );
        assert_eq!(dead(queue.as_ref()).await[0].1, "timed out");
        assert!(
            log.lines().contains(&"sleeper 600 ended".to_owned()),
            "{:?}",
            log.lines()
        );
    });
}

pub fn heartbeats_keep_a_long_job_past_its_lease_time(backend: &dyn AsyncBackend) {
    let settings = Settings {
        lease_time: Duration::from_millis(600),
        ..Settings::default()
    };
    let queue = backend.make("rta-heartbeat", &settings);
    runtime().block_on(async {
        queue.enqueue_job(&Sleeper { ms: 2_000 }).await.unwrap();
        let log = Arc::new(Log::default());
        // A second slot leases all along: an ended lease would give it the job.
        let summary = worker(&queue, &log)
            .register::<Sleeper>()
            .lease_time(settings.lease_time)
            .concurrency(2)
            .run()
            .await
            .expect("run");
        assert_eq!((summary.succeeded, summary.lost), (1, 0), "{summary:?}");
        assert_eq!(log.lines(), ["sleeper 2000 started", "sleeper 2000 ended"]);
    });
}

pub fn concurrency_is_reached_and_never_passed(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-concurrency");
    runtime().block_on(async {
        let jobs = (0..8)
            .map(|_| dque::runtime::new_async_job(&Gate {}).unwrap())
            .collect();
        queue.enqueue_batch(jobs).await.unwrap();
        let running = Arc::new(Running::default());
        let summary = worker(&queue, &Arc::default())
            .state(Arc::clone(&running))
            .register::<Gate>()
            .concurrency(4)
            .run()
            .await
            .expect("run");
        assert_eq!(summary.succeeded, 8, "{summary:?}");
        assert_eq!(running.most.load(Ordering::SeqCst), 4);
    });
}

/// On a stop no job is leased; a job that ends within the grace period
/// is acked, one that says it was interrupted and one still running at
/// the end are given back uncounted; the one never leased stays ready.
pub fn a_stop_lets_running_jobs_finish_in_the_grace_then_gives_the_rest_back(
    backend: &dyn AsyncBackend,
) {
    let (queue, _) = new_queue(backend, "rta-stop");
    runtime().block_on(async {
        queue.enqueue_job(&Sleeper { ms: 5_000 }).await.unwrap();
        queue.enqueue_job(&Cooperative {}).await.unwrap();
        queue.enqueue_job(&Sleeper { ms: 300 }).await.unwrap();
        queue.enqueue_job(&Echo { n: 9 }).await.unwrap();
        let log = Arc::new(Log::default());
        let worker = AsyncWorker::new(Arc::clone(&queue))
            .handle_signals(false)
            .state(Arc::clone(&log))
            .register::<Sleeper>()
            .register::<Cooperative>()
            .register::<Echo>()
            .concurrency(3)
            .grace(Duration::from_millis(1_500));
        let stop = worker.stop_handle();
        let stopper = {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let until = Instant::now() + Duration::from_secs(10);
                while log.lines().len() < 3 && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                stop.stop();
            })
        };
        let summary = worker.run().await.expect("run");
        stopper.await.unwrap();
        assert_eq!(summary.stopped, Some(StopReason::Handle));
        assert_eq!(
            (summary.succeeded, summary.released, summary.abandoned),
            (1, 2, 1),
            "{summary:?} {:?}",
            log.lines()
        );
        assert_eq!(summary.retried + summary.dead, 0, "{summary:?}");
        let mut lines = log.lines();
        lines.sort();
        assert_eq!(
            lines,
            [
                "cooperative started",
                "sleeper 300 ended",
                "sleeper 300 started",
                "sleeper 5000 started"
            ]
        );
        let waiting = queue.waiting(10).await.unwrap();
        assert_eq!(waiting.len(), 3, "{waiting:?}");
        for job in &waiting {
            assert_eq!(job.state, WaitState::Ready, "{job:?}");
            assert_eq!(job.job.attempt, 0, "given back uncounted: {job:?}");
        }
    });
}

/// Never lost: an unknown kind is a failed attempt (then waits for its
/// back-off) or, if asked, a dead letter; an undecodable body is a dead
/// letter with the decode error.
pub fn unknown_kinds_and_undecodable_bodies_are_never_lost(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-unknown");
    let (other, _) = new_queue(backend, "rta-unknown-dead");
    runtime().block_on(async {
        queue
            .enqueue(NewJob::new("{}").header(KIND_HEADER, "nobody"))
            .await
            .unwrap();
        queue
            .enqueue(NewJob::new(r#"{"n":"x"}"#).header(KIND_HEADER, Echo::KIND))
            .await
            .unwrap();
        let summary = worker(&queue, &Arc::default())
            .register::<Echo>()
            .run()
            .await
            .expect("run");
        assert_eq!((summary.retried, summary.dead), (1, 1), "{summary:?}");
        let dead = dead(queue.as_ref()).await;
        assert!(
            dead[0]
                .1
                .starts_with("cannot decode the body of a \"echo\" job: "),
            "{dead:?}"
        );
        let waiting = queue.waiting(10).await.unwrap();
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert!(
            matches!(waiting[0].state, WaitState::Scheduled(_)),
            "{waiting:?}"
        );
        assert_eq!(waiting[0].job.attempt, 1, "{waiting:?}");

        other
            .enqueue(NewJob::new("{}").header(KIND_HEADER, "nobody"))
            .await
            .unwrap();
        let summary = worker(&other, &Arc::default())
            .register::<Echo>()
            .unknown_kind(UnknownKind::DeadLetter)
            .run()
            .await
            .expect("run");
        assert_eq!((summary.retried, summary.dead), (0, 1), "{summary:?}");
        let dead = self::dead(other.as_ref()).await;
        assert!(dead[0].1.contains("unknown kind \"nobody\""), "{dead:?}");
        assert_eq!(dead[0].0, "{}", "the body is kept");
    });
}

/// A snooze gives the job back scheduled, its attempt not counted (this
/// kind has one attempt: counted, it would be a dead letter).
pub fn a_snooze_runs_the_job_again_uncounted(backend: &dyn AsyncBackend) {
    let (queue, settings) = new_queue(backend, "rta-snooze");
    runtime().block_on(async {
        queue.enqueue_job(&Snoozes {}).await.unwrap();
        let log = Arc::new(Log::default());
        let first = worker(&queue, &log)
            .register::<Snoozes>()
            .run()
            .await
            .expect("run");
        assert_eq!((first.snoozed, first.dead), (1, 0), "{first:?}");
        let waiting = queue.waiting(10).await.unwrap();
        assert!(
            matches!(waiting[0].state, WaitState::Scheduled(_)),
            "{waiting:?}"
        );
        assert_eq!(waiting[0].job.attempt, 0, "uncounted: {waiting:?}");
        settings.clock.advance(Duration::from_secs(61));
        let second = worker(&queue, &log)
            .register::<Snoozes>()
            .run()
            .await
            .expect("run");
        assert_eq!((second.succeeded, second.dead), (1, 0), "{second:?}");
        assert_eq!(log.lines(), ["snoozes attempt 1"; 2]);
    });
}

/// Sleeps `ms` (awaiting) and says so on stdout (a worker process's log):
/// `start N attempt K`, then `done N` if it ran to its end.
#[derive(Serialize, Deserialize)]
pub struct Slow {
    pub n: u32,
    pub ms: u64,
}

impl AsyncJob for Slow {
    const KIND: &'static str = "slow";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        println!("start {} attempt {}", self.n, cx.attempt());
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        println!("done {}", self.n);
        Ok(())
    }
}

/// The same kind, run to completion at once, to see which jobs are left.
#[derive(Serialize, Deserialize)]
struct SlowLeft {
    n: u32,
}

impl AsyncJob for SlowLeft {
    const KIND: &'static str = "slow";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        cx.state::<Arc<Log>>()
            .push(format!("{} attempt {}", self.n, cx.attempt()));
        Ok(())
    }
}

/// Where a SIGTERM check's worker process finds its queue: a spec that
/// the backend's `open` reads.
pub const SIGTERM_QUEUE: &str = "DQUE_TEST_ASYNC_SIGTERM_QUEUE";

/// Opens the queue a spec names (the backend's own format).
pub type OpenSpec = fn(&str) -> Arc<dyn AsyncJobQueue>;

/// The worker process of [`sigterm_mid_job_finishes_or_gives_back`]: a
/// tokio worker, signals handled (the default), concurrency 2, grace 3 s;
/// prints its summary last.
pub fn sigterm_worker_process(open: OpenSpec) {
    let queue = open(&std::env::var(SIGTERM_QUEUE).expect("the queue's spec"));
    let summary = runtime().block_on(async {
        let summary = AsyncWorker::new(Arc::clone(&queue))
            .register::<Slow>()
            .concurrency(2)
            .grace(Duration::from_secs(3))
            .run()
            .await
            .expect("run");
        queue.close().await.unwrap();
        summary
    });
    println!(
        "summary succeeded {} released {} abandoned {} stopped {:?}",
        summary.succeeded, summary.released, summary.abandoned, summary.stopped
    );
}

/// A tokio worker process (`test`, the calling test, run again as a
/// child, whose body is [`sigterm_worker_process`]) gets SIGTERM while it
/// runs two jobs: the one that ends within the grace period is acked, the
/// one still running then is aborted and given back uncounted, the two
/// never leased stay; run again here, each job left runs once, so every
/// job ran to its end exactly once across both.
pub fn sigterm_mid_job_finishes_or_gives_back(test: &str, open: OpenSpec, spec: &str) {
    use std::io::BufRead;
    {
        // Closed before the worker opens it (an embedded queue has one
        // process unless shared).
        let queue = open(spec);
        runtime().block_on(async {
            for (n, ms) in [(1, 400), (2, 60_000), (3, 0), (4, 0)] {
                queue.enqueue_job(&Slow { n, ms }).await.unwrap();
            }
            queue.close().await.unwrap();
        });
    }
    let mut process = super::child::command(test)
        .env(SIGTERM_QUEUE, spec)
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
    assert_eq!(said("done 2"), 0, "job 2 was aborted: {rest:?}");
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
    let queue = open(spec);
    runtime().block_on(async {
        let waiting = queue.waiting(10).await.unwrap();
        assert_eq!(waiting.len(), 3, "{waiting:?}");
        for job in &waiting {
            assert_eq!(
                (job.state, job.job.attempt),
                (WaitState::Ready, 0),
                "{job:?}"
            );
        }
        let log = Arc::new(Log::default());
        let summary = worker(&queue, &log)
            .register::<SlowLeft>()
            .run()
            .await
            .expect("run the rest");
        assert_eq!(summary.succeeded, 3, "{summary:?}");
        assert_eq!(
            log.lines(),
            ["2 attempt 1", "3 attempt 1", "4 attempt 1"],
            "each job left ran once, its first counted attempt"
        );
        assert_eq!(queue.counts().await.unwrap(), Default::default());
        queue.close().await.unwrap();
    });
}

/// Dropping `run`'s future (a cancel, not a stop) aborts the handlers it
/// started: none runs on unwatched, its lease untouched (it would run twice
/// once the lease ends). The job is left leased, to its lease time.
pub fn a_dropped_run_future_leaves_no_handler_running(backend: &dyn AsyncBackend) {
    let (queue, _) = new_queue(backend, "rta-dropped");
    runtime().block_on(async {
        queue.enqueue_job(&Sleeper { ms: 800 }).await.unwrap();
        let log = Arc::new(Log::default());
        let run = worker(&queue, &log).register::<Sleeper>().run();
        let cut = tokio::time::timeout(Duration::from_millis(300), run).await;
        assert!(cut.is_err(), "the future was dropped while the job ran");
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(
            log.lines(),
            ["sleeper 800 started"],
            "the handler was aborted"
        );
        assert_eq!(queue.counts().await.unwrap().leased, 1);
    });
}
