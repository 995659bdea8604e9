//! Helpers for tests of the programs that use the runtime, as Oban's and
//! River's: run one job inline, drain a queue on the test's thread (with a
//! manual clock, so retries and delays need no sleeping), and check what
//! was enqueued. With feature `tokio`, the same for [`AsyncJob`](super::AsyncJob)
//! kinds and an [`AsyncWorker`](super::AsyncWorker): [`Inline::run_async`],
//! [`drain_async`], [`enqueued_async`], [`assert_enqueued_async`].

use std::fmt::Debug;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use super::context::{Context, StateMap};
use super::job::{Job, JobError, KIND_HEADER};
use super::worker::{Summary, Worker};
use crate::jobs::{JobQueue, ManualClock, WaitState, Waiting};
use crate::{CodecError, Error, Result};

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
    #[cfg(feature = "tokio")]
    async_queue: Option<std::sync::Arc<dyn crate::jobs::AsyncJobQueue>>,
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

    /// The queue async handlers see ([`AsyncContext::queue`](super::AsyncContext::queue)),
    /// to enqueue follow-up jobs into (default none: `queue()` panics,
    /// `try_queue()` is `None`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, EmbeddedJobs};
    /// use dque::runtime::{testing::Inline, AsyncContext, AsyncJob, EnqueueAsyncJob, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize)]
    /// struct Ping;
    ///
    /// impl AsyncJob for Ping {
    ///     const KIND: &'static str = "ping";
    ///     async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
    ///         match cx.try_queue() {
    ///             Some(queue) => { queue.enqueue_job(&Ping).await?; }
    ///             None => return Err(JobError::fail("no queue")),
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue: Arc<dyn AsyncJobQueue> =
    ///     Arc::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join("q"))?));
    /// assert_eq!(Inline::new().run_async(Ping).await, Err(JobError::fail("no queue")));
    /// Inline::new().async_queue(queue.clone()).run_async(Ping).await.unwrap();
    /// assert_eq!(queue.counts().await?.ready, 1);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tokio")]
    #[must_use]
    pub fn async_queue(mut self, queue: std::sync::Arc<dyn crate::jobs::AsyncJobQueue>) -> Self {
        self.async_queue = Some(queue);
        self
    }

    /// Runs async `job`'s handler once, on the caller's task (feature
    /// `tokio`): no encoding, no timeout, no queue but the one given with
    /// [`async_queue`](Self::async_queue); the handler's answer is
    /// returned as it is (a panic is not caught).
    ///
    /// ```
    /// use dque::runtime::{testing::Inline, AsyncContext, AsyncJob, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Serialize, Deserialize)]
    /// struct Divide(u32, u32);
    ///
    /// impl AsyncJob for Divide {
    ///     const KIND: &'static str = "divide";
    ///     async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
    ///         match self.1 {
    ///             0 => Err(JobError::fail(format!("division by zero (attempt {})", cx.attempt()))),
    ///             _ => Ok(()),
    ///         }
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let inline = Inline::new().attempt(2);
    /// assert_eq!(inline.run_async(Divide(4, 2)).await, Ok(()));
    /// assert_eq!(
    ///     inline.run_async(Divide(4, 0)).await,
    ///     Err(JobError::fail("division by zero (attempt 2)"))
    /// );
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The handler's.
    #[cfg(feature = "tokio")]
    pub async fn run_async<J: super::AsyncJob>(&self, job: J) -> std::result::Result<(), JobError> {
        use std::sync::Arc;
        let cx = super::AsyncContext {
            kind: J::KIND,
            id: "inline".to_owned(),
            attempt: self.attempt,
            priority: 0,
            headers: self.headers.clone(),
            queue: self.async_queue.clone(),
            // The same values (each an `Arc`): what a handler changes
            // through them, `state_ref` sees.
            state: Arc::new(self.state.clone()),
            cancel: Arc::new(AtomicBool::new(false)),
            // Never stopped: `should_stop` is false, as in `run`.
            stop: super::StopHandle::new(),
        };
        job.perform(&cx).await
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

/// Runs every job of `worker`'s queues, one at a time, until none is
/// ready: [`drain`] for an [`AsyncWorker`](super::AsyncWorker) (feature
/// `tokio`). The same handlers, decoding, retries, dead letters, hooks
/// and timeouts as its [`run`](super::AsyncWorker::run), and the same
/// `clock` rule as [`drain`]: each time no job is ready the clock moves to
/// the next scheduled job's due time.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, UNIX_EPOCH};
/// use dque::jobs::{AsyncEmbeddedJobs, JobOptions, ManualClock};
/// use dque::runtime::{testing, AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// struct Flaky;
///
/// impl AsyncJob for Flaky {
///     const KIND: &'static str = "flaky";
///     async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
///         match cx.attempt() {
///             1 => Err(JobError::retry_after("not yet", Duration::from_secs(3600))),
///             _ => Ok(()),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000));
/// let jobs = JobOptions::new().clock(Arc::new(clock.clone())).create(dir.path().join("q"))?;
/// let queue = Arc::new(AsyncEmbeddedJobs::new(jobs));
/// queue.enqueue_job(&Flaky).await?;
/// let worker = AsyncWorker::new(queue).register::<Flaky>();
/// let summary = testing::drain_async(worker, Some(&clock)).await?;
/// assert_eq!((summary.retried, summary.succeeded), (1, 1));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`drain`].
#[cfg(feature = "tokio")]
pub async fn drain_async(
    worker: super::AsyncWorker,
    clock: Option<&ManualClock>,
) -> Result<Summary> {
    worker.drain(clock).await
}

/// How many waiting jobs a drain looks at for the next due time.
pub(crate) const DUE_LOOKAHEAD: usize = 10_000;

/// The most attempts a drain runs: a job that retries or snoozes forever
/// ends the drain with an error rather than a test that never ends.
const DRAIN_LIMIT: u64 = 100_000;

/// The attempts a drain ([`drain`], [`drain_async`]) has run.
pub(crate) struct DrainBudget {
    call: &'static str,
    attempts: u64,
}

impl DrainBudget {
    pub(crate) fn new(call: &'static str) -> Self {
        DrainBudget { call, attempts: 0 }
    }

    /// Counts one more attempt; `InvalidOption` past [`DRAIN_LIMIT`].
    pub(crate) fn spend(&mut self) -> Result<()> {
        self.attempts += 1;
        match self.attempts > DRAIN_LIMIT {
            true => Err(Error::InvalidOption {
                name: self.call,
                reason: format!(
                    "{DRAIN_LIMIT} attempts and jobs are still due: a job that snoozes or \
                     retries forever?"
                ),
            }),
            false => Ok(()),
        }
    }
}

/// The earliest due time among the scheduled jobs a drain looked at.
#[derive(Default)]
pub(crate) struct NextDue(Option<SystemTime>);

impl NextDue {
    pub(crate) fn look(&mut self, waiting: Vec<Waiting>) {
        for job in waiting {
            if let WaitState::Scheduled(at) = job.state {
                self.0 = Some(self.0.map_or(at, |earliest| earliest.min(at)));
            }
        }
    }

    pub(crate) fn earliest(&self) -> Option<SystemTime> {
        self.0
    }
}

/// The arguments of every waiting job of kind `J` in `queue` (ready,
/// leased or scheduled), in the order they will run.
///
/// # Errors
///
/// The queue's (it reads up to 100 000 waiting jobs); `Decode` for a job
/// of kind `J` whose body does not decode (`InvalidJob`).
pub fn enqueued<J: Job>(queue: &dyn JobQueue) -> Result<Vec<J>> {
    of_kind(queue.waiting(ENQUEUED_LOOKAHEAD)?, J::KIND, J::decode)
}

/// How many waiting jobs [`enqueued`] and [`enqueued_async`] read.
const ENQUEUED_LOOKAHEAD: usize = 100_000;

/// The arguments of the jobs of kind `kind` in `waiting`, decoded.
fn of_kind<J>(
    waiting: Vec<Waiting>,
    kind: &str,
    decode: fn(&[u8]) -> std::result::Result<J, CodecError>,
) -> Result<Vec<J>> {
    waiting
        .into_iter()
        .filter(|waiting| waiting.job.header(KIND_HEADER) == Some(kind))
        .map(|waiting| {
            decode(&waiting.job.body).map_err(|e| Error::InvalidJob {
                reason: format!(
                    "job {}: its body does not decode as a {kind:?} job: {e}",
                    waiting.job.id,
                ),
            })
        })
        .collect()
}

/// The arguments of every waiting job of async kind `J` in `queue`
/// (ready, leased or scheduled), in the order they will run: [`enqueued`]
/// for an [`AsyncJob`](super::AsyncJob) and an
/// [`AsyncJobQueue`](crate::jobs::AsyncJobQueue) (feature `tokio`).
///
/// # Errors
///
/// As [`enqueued`].
#[cfg(feature = "tokio")]
pub async fn enqueued_async<J: super::AsyncJob>(
    queue: &dyn crate::jobs::AsyncJobQueue,
) -> Result<Vec<J>> {
    of_kind(queue.waiting(ENQUEUED_LOOKAHEAD).await?, J::KIND, J::decode)
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
    assert_found(enqueued::<J>(queue), J::KIND, queue.name(), expected);
}

/// Panics unless a job of async kind `J` with arguments equal to
/// `expected` waits in `queue`, listing the ones that do:
/// [`assert_enqueued`] for an [`AsyncJob`](super::AsyncJob) (feature `tokio`).
///
/// ```
/// use dque::jobs::{AsyncEmbeddedJobs, EmbeddedJobs};
/// use dque::runtime::{testing, AsyncContext, AsyncJob, EnqueueAsyncJob, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Greet { name: String }
/// impl AsyncJob for Greet {
///     const KIND: &'static str = "greet";
///     async fn perform(self, _: &AsyncContext) -> Result<(), JobError> { Ok(()) }
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join("q"))?);
/// queue.enqueue_job(&Greet { name: "ada".into() }).await?;
/// testing::assert_enqueued_async(&queue, &Greet { name: "ada".into() }).await;
/// # Ok(()) }
/// ```
///
/// # Panics
///
/// If no such job waits, or the queue cannot be read.
#[cfg(feature = "tokio")]
pub async fn assert_enqueued_async<J: super::AsyncJob + PartialEq + Debug>(
    queue: &dyn crate::jobs::AsyncJobQueue,
    expected: &J,
) {
    assert_found(
        enqueued_async::<J>(queue).await,
        J::KIND,
        queue.name(),
        expected,
    );
}

/// Panics unless `found` holds `expected`, naming what it holds.
#[track_caller]
fn assert_found<J: PartialEq + Debug>(
    found: Result<Vec<J>>,
    kind: &str,
    queue: &str,
    expected: &J,
) {
    let found = found.unwrap_or_else(|e| panic!("cannot read the queue: {e}"));
    assert!(
        found.contains(expected),
        "no {kind:?} job {expected:?} waits in queue {queue:?}; the {} that do: {found:?}",
        found.len()
    );
}
