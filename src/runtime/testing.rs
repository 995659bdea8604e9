//! Helpers for tests of the programs that use the runtime, as Oban's and
//! River's: run one job inline, drain a queue on the test's thread (with a
//! manual clock, so retries and delays need no sleeping), and check what
//! was enqueued.

use std::fmt::Debug;
use std::sync::atomic::AtomicBool;

use super::context::{Context, StateMap};
use super::job::{Job, JobError, KIND_HEADER};
use super::worker::{Summary, Worker};
use crate::jobs::{JobQueue, ManualClock};
use crate::{Error, Result};

/// Runs jobs by value on the caller's thread: no queue, no encoding; the
/// handler's answer is returned as it is (a panic is not caught).
///
/// ```
/// use dque::runtime::{testing::Inline, Context, Job, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Divide(u32, u32);
///
/// impl Job for Divide {
///     const KIND: &'static str = "divide";
///     fn run(self, _: &Context) -> Result<(), JobError> {
///         match self.1 {
///             0 => Err(JobError::fail("division by zero")),
///             _ => Ok(()),
///         }
///     }
/// }
///
/// let inline = Inline::new();
/// assert_eq!(inline.run(Divide(4, 2)), Ok(()));
/// assert_eq!(inline.run(Divide(4, 0)), Err(JobError::fail("division by zero")));
/// ```
#[derive(Debug, Default)]
pub struct Inline {
    state: StateMap,
    attempt: u32,
    headers: Vec<(String, String)>,
    stopping: AtomicBool,
}

impl Inline {
    /// Runs as attempt 1 of a job with id `inline`, no state.
    pub fn new() -> Self {
        Inline {
            attempt: 1,
            ..Inline::default()
        }
    }

    /// Shares `value` with the handlers, as [`Worker::state`] does.
    #[must_use]
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// The attempt the handlers see (default 1).
    #[must_use]
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Adds a header the handlers see.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The shared value of type `T`.
    ///
    /// # Panics
    ///
    /// If none was given.
    pub fn state_ref<T: Send + Sync + 'static>(&self) -> &T {
        self.state.get::<T>().unwrap_or_else(|| {
            panic!(
                "no shared state of type {}: give it with Inline::state",
                std::any::type_name::<T>()
            )
        })
    }

    fn context(&self, kind: &'static str) -> Context<'_> {
        Context {
            kind,
            id: "inline",
            attempt: self.attempt,
            priority: 0,
            headers: &self.headers,
            queue: None,
            queue_name: "",
            state: &self.state,
            stop: &self.stopping,
            worker_stop: &self.stopping,
        }
    }

    /// Runs `job`'s handler once.
    ///
    /// # Errors
    ///
    /// The handler's.
    pub fn run<J: Job>(&self, job: J) -> std::result::Result<(), JobError> {
        job.run(&self.context(J::KIND))
    }
}

/// Runs every job of `worker`'s queues on the caller's thread until none
/// is ready: the same handlers, decoding, retries, dead letters and hooks
/// as [`Worker::run`], without threads (so kinds' timeouts are not
/// enforced, and nothing touches leases). With `clock` (the queue's
/// [`ManualClock`], given to it with `JobOptions::clock`), each time no
/// job is ready the clock moves to the next scheduled job's due time, so
/// back-offs, delays and snoozes run at once; without it, scheduled jobs
/// are left.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, UNIX_EPOCH};
/// use dque::jobs::{JobOptions, ManualClock};
/// use dque::runtime::{testing, Context, EnqueueJob, Job, JobError, Worker};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Flaky;
///
/// impl Job for Flaky {
///     const KIND: &'static str = "flaky";
///     fn run(self, cx: &Context) -> Result<(), JobError> {
///         match cx.attempt() {
///             1 => Err(JobError::retry_after("not yet", Duration::from_secs(3600))),
///             _ => Ok(()),
///         }
///     }
/// }
///
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000));
/// let queue = Arc::new(JobOptions::new().clock(Arc::new(clock.clone())).create(dir.path().join("q"))?);
/// queue.enqueue_job(&Flaky)?;
/// let summary = testing::drain(Worker::new(queue).register::<Flaky>(), Some(&clock))?;
/// assert_eq!((summary.retried, summary.succeeded), (1, 1));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// An error of the queue (the worker's [`run`](Worker::run) would stop on
/// it); `InvalidOption` after 100 000 attempts with jobs still due (a job
/// that retries forever).
pub fn drain(worker: Worker, clock: Option<&ManualClock>) -> Result<Summary> {
    worker.drain(clock)
}

/// The arguments of every waiting job of kind `J` in `queue` (ready,
/// leased or scheduled), in the order they will run.
///
/// # Errors
///
/// The queue's (it reads up to 100 000 waiting jobs); `Decode` for a job
/// of kind `J` whose body does not decode (`InvalidJob`).
pub fn enqueued<J: Job>(queue: &dyn JobQueue) -> Result<Vec<J>> {
    queue
        .waiting(100_000)?
        .into_iter()
        .filter(|waiting| waiting.job.header(KIND_HEADER) == Some(J::KIND))
        .map(|waiting| {
            J::decode(&waiting.job.body).map_err(|e| Error::InvalidJob {
                reason: format!(
                    "job {}: its body does not decode as a {:?} job: {e}",
                    waiting.job.id,
                    J::KIND
                ),
            })
        })
        .collect()
}

/// Panics unless a job of kind `J` with arguments equal to `expected`
/// waits in `queue`, listing the ones that do.
///
/// ```
/// use dque::jobs::EmbeddedJobs;
/// use dque::runtime::{testing, Context, EnqueueJob, Job, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Greet { name: String }
/// impl Job for Greet {
///     const KIND: &'static str = "greet";
///     fn run(self, _: &Context) -> Result<(), JobError> { Ok(()) }
/// }
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.enqueue_job(&Greet { name: "ada".into() })?;
/// testing::assert_enqueued(&queue, &Greet { name: "ada".into() });
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// If no such job waits, or the queue cannot be read.
#[track_caller]
pub fn assert_enqueued<J: Job + PartialEq + Debug>(queue: &dyn JobQueue, expected: &J) {
    let found = enqueued::<J>(queue).unwrap_or_else(|e| panic!("cannot read the queue: {e}"));
    assert!(
        found.contains(expected),
        "no {:?} job {expected:?} waits in queue {:?}; the {} that do: {found:?}",
        J::KIND,
        queue.name(),
        found.len()
    );
}
