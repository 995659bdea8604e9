//! Typed jobs for the tokio runtime: [`AsyncJob`] (a serde type with a
//! kind name and an async handler), the [`AsyncContext`] its handler sees,
//! and typed enqueue on an [`AsyncJobQueue`]. What a handler answers
//! ([`JobError`]) and a kind's defaults ([`KindOptions`]) are the thread
//! runtime's.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::context::StateMap;
use super::job::{JobError, KindOptions, KIND_HEADER};
use super::registry::panic_message;
use super::rules::Ended;
use super::shutdown::StopHandle;
use crate::jobs::{AsyncJobQueue, BoxFuture, Enqueued, NewJob};
use crate::{Codec, CodecError, Error, Json, Result};

/// A typed job run by an [`AsyncWorker`](super::AsyncWorker): its
/// arguments (a serde type), a stable kind name, and an async handler.
///
/// The same kind may be run by threads ([`Job`](super::Job)) in one
/// program and by tokio tasks in another: the kind's name, body and
/// header are the same.
///
/// ```
/// use std::time::Duration;
/// use dque::runtime::{AsyncContext, AsyncJob, JobError, KindOptions};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Fetch {
///     url: String,
/// }
///
/// impl AsyncJob for Fetch {
///     const KIND: &'static str = "fetch";
///
///     async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
///         if self.url.is_empty() {
///             return Err(JobError::fail("no url: retrying will not help"));
///         }
///         tokio::time::sleep(Duration::from_millis(1)).await; // the request
///         println!("fetched {} (attempt {})", self.url, cx.attempt());
///         Ok(())
///     }
///
///     fn options() -> KindOptions {
///         KindOptions::new().max_attempts(3).timeout(Duration::from_secs(30))
///     }
/// }
/// ```
pub trait AsyncJob: Serialize + DeserializeOwned + Send + 'static {
    /// The kind's name, stable across versions of the program (see
    /// [`Job::KIND`](super::Job::KIND)).
    const KIND: &'static str;

    /// Runs the job, as a tokio task of its own. `Ok` acks it; an error
    /// says what happens next (see [`JobError`]). A panic is caught and
    /// counts as a failed attempt, with the panic's message as the reason.
    /// Past the kind's timeout, or the grace period of a stop, the task is
    /// aborted: the future is dropped at its next `.await`.
    ///
    /// # Errors
    ///
    /// As [`Job::run`](super::Job::run): [`JobError::Retry`],
    /// [`JobError::Fail`], [`JobError::Snooze`], [`JobError::Interrupted`].
    fn perform(
        self,
        cx: &AsyncContext,
    ) -> impl Future<Output = std::result::Result<(), JobError>> + Send;

    /// This kind's defaults: attempts, back-off, timeout, priority.
    fn options() -> KindOptions {
        KindOptions::new()
    }

    /// The body of the job (default: JSON).
    ///
    /// # Errors
    ///
    /// The codec's, for arguments it cannot encode.
    fn encode(&self) -> std::result::Result<Vec<u8>, CodecError> {
        let mut body = Vec::new();
        Json.encode(self, &mut body)?;
        Ok(body)
    }

    /// The job from its body (default: JSON).
    ///
    /// # Errors
    ///
    /// The codec's, for a body it cannot decode: the attempt then fails
    /// with the decode error as its reason (a dead letter).
    fn decode(body: &[u8]) -> std::result::Result<Self, CodecError> {
        Json.decode(body)
    }
}

/// The context of one attempt of an [`AsyncJob`]: the job's coordinates,
/// its queue, the application's shared state, and whether it should stop.
/// It is owned by the attempt (no borrow of the worker), so a handler may
/// hold it across any `.await`.
pub struct AsyncContext {
    pub(crate) kind: &'static str,
    pub(crate) id: String,
    pub(crate) attempt: u32,
    pub(crate) priority: i32,
    pub(crate) headers: Vec<(String, String)>,
    /// `None` for a job run inline ([`testing::Inline`](super::testing::Inline)).
    pub(crate) queue: Option<Arc<dyn AsyncJobQueue>>,
    pub(crate) state: Arc<StateMap>,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) stop: StopHandle,
}

impl std::fmt::Debug for AsyncContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncContext")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("queue", &self.queue_name())
            .finish_non_exhaustive()
    }
}

impl AsyncContext {
    /// The job's kind.
    pub fn kind(&self) -> &str {
        self.kind
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The value of header `name`, if the job has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The job's headers, in the order given.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The name of the queue the job came from (empty for a job run
    /// inline without a queue).
    pub fn queue_name(&self) -> &str {
        self.queue.as_ref().map_or("", |queue| queue.name())
    }

    /// The queue the job came from, to enqueue follow-up jobs.
    ///
    /// # Panics
    ///
    /// For a job run inline ([`testing::Inline::run_async`](super::testing::Inline::run_async))
    /// given no queue ([`testing::Inline::async_queue`](super::testing::Inline::async_queue)):
    /// use [`try_queue`](Self::try_queue) where that may be.
    pub fn queue(&self) -> &dyn AsyncJobQueue {
        self.try_queue().unwrap_or_else(|| {
            panic!("this job runs inline without a queue: give one with Inline::async_queue")
        })
    }

    /// The queue the job came from; `None` for a job run inline without one.
    pub fn try_queue(&self) -> Option<&dyn AsyncJobQueue> {
        self.queue.as_deref()
    }

    /// The shared value of type `T` given to the worker
    /// ([`AsyncWorker::state`](super::AsyncWorker::state)).
    ///
    /// # Panics
    ///
    /// If the worker has no value of type `T` (a programming error: the
    /// panic is caught and fails the attempt with this message).
    pub fn state<T: Send + Sync + 'static>(&self) -> &T {
        self.try_state().unwrap_or_else(|| {
            panic!(
                "no shared state of type {}: give it with AsyncWorker::state",
                std::any::type_name::<T>()
            )
        })
    }

    /// The shared value of type `T`, if the worker has one.
    pub fn try_state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.state.get()
    }

    /// Whether the handler should stop early: the worker is stopping
    /// (return [`JobError::Interrupted`] to give the job back uncounted),
    /// or this attempt is over (its timeout passed: its result no longer
    /// counts). A handler that awaits is stopped at its next `.await`
    /// anyway once the attempt is over; one that computes long between
    /// awaits looks at this now and then.
    pub fn should_stop(&self) -> bool {
        self.cancel.load(Ordering::SeqCst) || self.stop.is_stopping()
    }

    /// Whether the worker is stopping (a signal or a stop handle).
    pub fn worker_stopping(&self) -> bool {
        self.stop.is_stopping()
    }
}

/// A handler's future, ready to be spawned.
pub(crate) type Handler = BoxFuture<'static, std::result::Result<(), JobError>>;

/// One registered async kind, its job type erased.
pub(crate) trait AsyncKind: Send + Sync {
    fn options(&self) -> &KindOptions;
    /// Decodes `body` (a panic caught) into the handler's future, which
    /// owns `cx`; or how the attempt ended without running.
    fn start(&self, body: &[u8], cx: AsyncContext) -> std::result::Result<Handler, Ended>;
}

pub(crate) struct TypedAsync<J> {
    pub(crate) options: KindOptions,
    pub(crate) job: PhantomData<fn() -> J>,
}

impl<J: AsyncJob> AsyncKind for TypedAsync<J> {
    fn options(&self) -> &KindOptions {
        &self.options
    }

    fn start(&self, body: &[u8], cx: AsyncContext) -> std::result::Result<Handler, Ended> {
        let job = match catch_unwind(|| J::decode(body)) {
            Ok(Ok(job)) => job,
            Ok(Err(e)) => {
                return Err(Ended::Undecodable(format!(
                    "cannot decode the body of a {:?} job: {e}",
                    J::KIND
                )))
            }
            Err(payload) => return Err(Ended::Panicked(panic_message(payload.as_ref()))),
        };
        Ok(Box::pin(async move { job.perform(&cx).await }))
    }
}

/// The [`NewJob`] for async job `job`: its body encoded, its kind in
/// header [`KIND_HEADER`], its kind's priority (as
/// [`new_job`](super::new_job) for a [`Job`](super::Job)).
///
/// # Errors
///
/// `Encode` if the job's arguments do not encode.
pub fn new_async_job<J: AsyncJob>(job: &J) -> Result<NewJob> {
    let body = job.encode().map_err(Error::Encode)?;
    Ok(NewJob::new(body)
        .priority(J::options().priority)
        .header(KIND_HEADER, J::KIND))
}

/// Typed enqueue on an async job queue: `queue.enqueue_job(&Fetch { .. }).await`.
///
/// ```
/// use std::sync::Arc;
/// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, EmbeddedJobs};
/// use dque::runtime::{AsyncContext, AsyncJob, EnqueueAsyncJob, JobError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct Greet { name: String }
/// # impl AsyncJob for Greet {
/// #     const KIND: &'static str = "greet";
/// #     async fn perform(self, _: &AsyncContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join("jobs"))?);
/// queue.enqueue_job(&Greet { name: "ada".into() }).await?;
/// queue.enqueue_job_with(&Greet { name: "bob".into() }, |job| job.priority(-1)).await?;
/// assert_eq!(queue.counts().await?.ready, 2);
/// # Ok(()) }
/// ```
pub trait EnqueueAsyncJob {
    /// Enqueues `job` with its kind's defaults.
    ///
    /// # Errors
    ///
    /// `Encode` if it does not encode (nothing added); the queue's
    /// enqueue errors.
    fn enqueue_job<J: AsyncJob>(&self, job: &J) -> BoxFuture<'_, Result<Enqueued>> {
        self.enqueue_job_with(job, |new| new)
    }

    /// Enqueues `job`, with `options` applied to its [`NewJob`] (priority,
    /// delay, time, id, headers).
    ///
    /// # Errors
    ///
    /// As [`enqueue_job`](Self::enqueue_job).
    fn enqueue_job_with<J: AsyncJob>(
        &self,
        job: &J,
        options: impl FnOnce(NewJob) -> NewJob,
    ) -> BoxFuture<'_, Result<Enqueued>>;
}

impl<Q: AsyncJobQueue + ?Sized> EnqueueAsyncJob for Q {
    fn enqueue_job_with<J: AsyncJob>(
        &self,
        job: &J,
        options: impl FnOnce(NewJob) -> NewJob,
    ) -> BoxFuture<'_, Result<Enqueued>> {
        // Encoded before the future: the job is not borrowed by it.
        let kind = J::options();
        match (new_async_job(job), kind.queue_name()) {
            (Ok(new), None) => self.enqueue(kind.typed(new, options)),
            // A set routes by the name (`AsyncQueueSet`); a queue ignores it.
            (Ok(new), Some(queue)) => {
                let (new, queue) = (kind.typed(new, options), queue.to_owned());
                Box::pin(async move { self.enqueue_into(&queue, new).await })
            }
            (Err(e), _) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
