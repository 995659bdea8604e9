//! What a typed job is: a serde type with a kind name and a handler
//! ([`Job`]), what its handler answers ([`JobError`]), its kind's defaults
//! ([`KindOptions`]), and how one becomes a [`NewJob`] to enqueue.

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::context::Context;
use crate::jobs::{Backoff, Enqueued, JobQueue, NewJob, UniqueStates};
use crate::{Codec, CodecError, Error, Json, Result};

/// The header a job's kind travels in, on every backend. It is qless's
/// own name for a job's class: on Redis the header is the job's `klass`
/// field (see `KLASS_HEADER` with feature `redis`), so a Python qless
/// worker sees the kind as the class name, and a job a qless client put
/// with class `greet` runs here as kind `greet`. `dque push --kind K` sets it.
pub const KIND_HEADER: &str = "klass";

/// A typed job: its arguments (a serde type), a stable kind name, and the
/// handler that runs it.
///
/// The body of a job is its arguments in JSON by default (readable from the
/// shell, the dashboard and qless clients); override
/// [`encode`](Job::encode) and [`decode`](Job::decode) together for another
/// format (any [`Codec`], such as [`Bincode`](crate::Bincode)).
///
/// ```
/// use std::time::Duration;
/// use dque::runtime::{Context, Job, JobError, KindOptions};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail {
///     to: String,
/// }
///
/// impl Job for SendEmail {
///     const KIND: &'static str = "send_email";
///
///     fn run(self, cx: &Context) -> Result<(), JobError> {
///         if self.to.is_empty() {
///             return Err(JobError::fail("no address: retrying will not help"));
///         }
///         println!("mail to {} (attempt {})", self.to, cx.attempt());
///         Ok(())
///     }
///
///     fn options() -> KindOptions {
///         KindOptions::new().max_attempts(3).timeout(Duration::from_secs(30))
///     }
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + 'static {
    /// The kind's name, stable across versions of the program: it is
    /// stored with every job (in header [`KIND_HEADER`]) and picks the
    /// handler. Names are for people as well: `send_email`, `Billing::Charge`.
    const KIND: &'static str;

    /// Runs the job. `Ok` acks it; an error says what happens next (see
    /// [`JobError`]). A panic is caught and counts as a failed attempt,
    /// with the panic's message as the reason.
    ///
    /// # Errors
    ///
    /// [`JobError::Retry`] to run it again (after a back-off or a given
    /// delay) until its attempts are used up; [`JobError::Fail`] to make it
    /// a dead letter now; [`JobError::Snooze`] to run it later, uncounted;
    /// [`JobError::Interrupted`] when it stops early because the worker stops.
    fn run(self, cx: &Context) -> std::result::Result<(), JobError>;

    /// This kind's defaults: attempts, back-off, timeout, priority, queue.
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
    /// with the decode error as its reason.
    fn decode(body: &[u8]) -> std::result::Result<Self, CodecError> {
        Json.decode(body)
    }
}

/// What a handler answers when a job did not succeed.
///
/// Any error converts into a retry (`?` works on any `std::error::Error`),
/// with its display text as the reason.
///
/// ```
/// use std::time::Duration;
/// use dque::runtime::JobError;
///
/// fn parse(text: &str) -> Result<u32, JobError> {
///     Ok(text.parse::<u32>()?) // a failure here is a retry
/// }
/// assert!(matches!(parse("x"), Err(JobError::Retry { after: None, .. })));
/// let later = JobError::retry_after("rate limited", Duration::from_secs(60));
/// assert_eq!(later.to_string(), "rate limited");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobError {
    /// This attempt failed: run the job again, after `after` (or the
    /// kind's back-off), until its attempts are used up; then it is a
    /// dead letter with `reason`.
    Retry {
        /// Why: kept as the dead letter's reason if it was the last attempt.
        reason: String,
        /// When to run again; `None`: the kind's back-off (or the queue's).
        after: Option<Duration>,
    },
    /// The job cannot succeed: a dead letter now, with this reason.
    Fail(String),
    /// Run the job again after this delay, **without counting the
    /// attempt** (a job waiting on a rate limit or on other work, not
    /// failing): the worker gives it back with
    /// [`JobQueue::release_after`](crate::jobs::JobQueue::release_after),
    /// on every backend. Its next run sees the same [`Context::attempt`],
    /// and snoozing never makes it a dead letter: a handler that may snooze
    /// forever should bound it itself (by a time in its arguments, say).
    Snooze(Duration),
    /// The handler stopped early because the worker is stopping
    /// ([`Context::should_stop`]): the job is given back without counting
    /// the attempt. Returned when the worker is not stopping, it is a
    /// failed attempt with reason `interrupted`.
    Interrupted,
}

impl JobError {
    /// A retry after the kind's back-off, with `reason`.
    pub fn retry(reason: impl fmt::Display) -> Self {
        JobError::Retry {
            reason: reason.to_string(),
            after: None,
        }
    }

    /// A retry after `delay`, with `reason`.
    pub fn retry_after(reason: impl fmt::Display, delay: Duration) -> Self {
        JobError::Retry {
            reason: reason.to_string(),
            after: Some(delay),
        }
    }

    /// A dead letter now, with `reason`.
    pub fn fail(reason: impl fmt::Display) -> Self {
        JobError::Fail(reason.to_string())
    }

    /// Run again after `delay`, the attempt not counted (see [`JobError::Snooze`]).
    pub fn snooze(delay: Duration) -> Self {
        JobError::Snooze(delay)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry { reason, .. } | JobError::Fail(reason) => f.write_str(reason),
            JobError::Snooze(delay) => write!(f, "snoozed for {delay:?}"),
            JobError::Interrupted => f.write_str("interrupted"),
        }
    }
}

// Not `std::error::Error` itself, so that every error converts (as
// anyhow's error does).
impl<E: std::error::Error> From<E> for JobError {
    fn from(error: E) -> Self {
        JobError::retry(error)
    }
}

/// A kind's defaults: how its jobs are enqueued and run.
///
/// ```
/// use std::time::Duration;
/// use dque::runtime::KindOptions;
///
/// let options = KindOptions::new()
///     .max_attempts(2)
///     .no_backoff()
///     .timeout(Duration::from_secs(10))
///     .priority(-1);
/// assert_eq!(options.attempts(), Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindOptions {
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) priority: i32,
    pub(crate) queue: Option<String>,
    pub(crate) unique_for: Option<Duration>,
    pub(crate) unique_states: Option<UniqueStates>,
}

impl KindOptions {
    /// The defaults: the queue's attempts and back-off, no timeout,
    /// priority 0, the worker's (or enqueuer's) queue.
    pub fn new() -> Self {
        KindOptions::default()
    }

    /// Attempts a job of this kind gets (at least 1; default: the queue's,
    /// `Options::max_attempts`). The runtime makes the job a dead letter
    /// after this many; a queue whose own limit is lower stops it sooner.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// The wait before a retry (default: the queue's back-off).
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Retries at once (a back-off of zero).
    #[must_use]
    pub fn no_backoff(self) -> Self {
        self.backoff(Backoff::new(Duration::ZERO, 1.0, Duration::ZERO).jitter(0.0))
    }

    /// The longest an attempt may run (default: no limit). A handler still
    /// running then fails the attempt with reason `timed out`; see
    /// [`Worker`](super::Worker) for what happens to its thread. A job's
    /// own timeout ([`NewJob::timeout`](crate::jobs::NewJob::timeout))
    /// takes precedence.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The priority a job of this kind is enqueued with (default 0; a
    /// call's own [`NewJob::priority`] wins).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The queue a job of this kind goes to when enqueued through a
    /// [`QueueSet`](crate::jobs::QueueSet) (default: the set's first).
    #[must_use]
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = Some(name.into());
        self
    }

    /// Jobs of this kind are unique for `period` after their enqueue (as
    /// Oban's `unique: [period: ...]`, Sidekiq's `unique_for`): typed
    /// enqueue ([`EnqueueJob`], and `EnqueueAsyncJob` with feature `tokio`)
    /// of a job given an id ([`NewJob::id`]) enqueues it with
    /// [`NewJob::unique_for`]`(period)`, so the same id within the period
    /// adds nothing, even after the first job ran ([`Enqueued::Duplicate`]).
    /// A job without an id holds nothing (its made-up id is new each
    /// time). The call's own [`NewJob::unique_for`] and
    /// [`NewJob::unique_states`] win; `unique_for(Duration::ZERO)` in the
    /// call makes that job not unique. Zero here: not unique (the default).
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{EmbeddedJobs, Enqueued, JobQueue};
    /// use dque::runtime::{Context, EnqueueJob, Job, JobError, KindOptions};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Invoice {
    ///     order: u32,
    /// }
    ///
    /// impl Job for Invoice {
    ///     const KIND: &'static str = "invoice";
    ///     fn run(self, _: &Context) -> Result<(), JobError> {
    ///         Ok(())
    ///     }
    ///     fn options() -> KindOptions {
    ///         // One invoice per order and hour, whatever became of the first.
    ///         KindOptions::new().unique_for(Duration::from_secs(3600))
    ///     }
    /// }
    ///
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
    /// let invoice = || Invoice { order: 7 };
    /// assert!(queue.enqueue_job_with(&invoice(), |job| job.id("invoice-7"))?.is_added());
    /// queue.ack(queue.lease()?.expect("the invoice"))?; // it ran
    /// let again = queue.enqueue_job_with(&invoice(), |job| job.id("invoice-7"))?;
    /// assert!(matches!(again, Enqueued::Duplicate(_)), "{again:?}");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = (!period.is_zero()).then_some(period);
        self
    }

    /// The states in which a job of this kind holds its id during its
    /// [`unique_for`](Self::unique_for) period, as
    /// [`NewJob::unique_states`] (default: queued, running and done; it
    /// applies only with a period).
    #[must_use]
    pub fn unique_states(mut self, states: UniqueStates) -> Self {
        self.unique_states = Some(states);
        self
    }

    /// The uniqueness period set, if any.
    pub fn unique_period(&self) -> Option<Duration> {
        self.unique_for
    }

    /// `new` as typed enqueue sends it: this kind's uniqueness under the
    /// call's `options` (which override it), kept only if the job has an
    /// id.
    pub(crate) fn typed(&self, new: NewJob, options: impl FnOnce(NewJob) -> NewJob) -> NewJob {
        let kind = match self.unique_for {
            Some(period) => match self.unique_states {
                Some(states) => new.unique_for(period).unique_states(states),
                None => new.unique_for(period),
            },
            None => new,
        };
        let kinds = (kind.unique_for, kind.unique_states);
        let mut new = options(kind);
        // The kind's states hold for a period only: a call that took the
        // period away (`unique_for(Duration::ZERO)`) took them too.
        if new.unique_for.is_none() && new.unique_states == kinds.1 {
            new.unique_states = None;
        }
        // No id: the kind's period has nothing to hold (the call's own,
        // if it differs, is left for the queue to refuse).
        if new.id.is_none() && (new.unique_for, new.unique_states) == kinds {
            new.unique_for = None;
            new.unique_states = None;
        }
        new
    }

    /// The attempts set, if any.
    pub fn attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The timeout set, if any.
    pub fn timeout_value(&self) -> Option<Duration> {
        self.timeout
    }

    /// The queue set, if any.
    pub fn queue_name(&self) -> Option<&str> {
        self.queue.as_deref()
    }
}

/// The [`NewJob`] for `job`: its body encoded, its kind in header
/// [`KIND_HEADER`], its kind's priority. Chain [`NewJob`]'s setters for
/// the call's own options (priority, delay, time, id, headers). The
/// kind's uniqueness ([`KindOptions::unique_for`]) is not in it: it holds
/// an id, which typed enqueue ([`EnqueueJob`]) applies it to.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::{EmbeddedJobs, JobQueue};
/// use dque::runtime::{new_job, Context, Job, JobError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct Greet { name: String }
/// # impl Job for Greet {
/// #     const KIND: &'static str = "greet";
/// #     fn run(self, _: &Context) -> Result<(), JobError> { Ok(()) }
/// # }
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
/// let job = new_job(&Greet { name: "ada".into() })?
///     .priority(-5)
///     .delay(Duration::from_secs(10))
///     .id("greet-ada");
/// assert!(queue.enqueue(job)?.is_added());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `Encode` if the job's arguments do not encode.
pub fn new_job<J: Job>(job: &J) -> Result<NewJob> {
    let body = job.encode().map_err(Error::Encode)?;
    Ok(NewJob::new(body)
        .priority(J::options().priority)
        .header(KIND_HEADER, J::KIND))
}

/// Typed enqueue on any job queue: `queue.enqueue_job(&SendEmail { .. })`.
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue};
/// use dque::runtime::{Context, EnqueueJob, Job, JobError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct Greet { name: String }
/// # impl Job for Greet {
/// #     const KIND: &'static str = "greet";
/// #     fn run(self, _: &Context) -> Result<(), JobError> { Ok(()) }
/// # }
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
/// queue.enqueue_job(&Greet { name: "ada".into() })?;
/// queue.enqueue_job_with(&Greet { name: "bob".into() }, |job| job.priority(-1))?;
/// assert_eq!(queue.counts()?.ready, 2);
/// # Ok(()) }
/// ```
pub trait EnqueueJob {
    /// Enqueues `job` with its kind's defaults.
    ///
    /// # Errors
    ///
    /// `Encode` if it does not encode (nothing added); the queue's
    /// enqueue errors.
    fn enqueue_job<J: Job>(&self, job: &J) -> Result<Enqueued> {
        self.enqueue_job_with(job, |new| new)
    }

    /// Enqueues `job`, with `options` applied to its [`NewJob`] (priority,
    /// delay, time, id, headers). Given an id, a job of a unique kind
    /// ([`KindOptions::unique_for`]) is enqueued unique for the kind's
    /// period, unless `options` says otherwise.
    ///
    /// # Errors
    ///
    /// As [`enqueue_job`](Self::enqueue_job).
    fn enqueue_job_with<J: Job>(
        &self,
        job: &J,
        options: impl FnOnce(NewJob) -> NewJob,
    ) -> Result<Enqueued>;
}

impl<Q: JobQueue + ?Sized> EnqueueJob for Q {
    fn enqueue_job_with<J: Job>(
        &self,
        job: &J,
        options: impl FnOnce(NewJob) -> NewJob,
    ) -> Result<Enqueued> {
        self.enqueue(J::options().typed(new_job(job)?, options))
    }
}

impl EnqueueJob for crate::jobs::QueueSet {
    /// Enqueues into the queue the kind names ([`KindOptions::queue`]), or
    /// the set's first queue.
    fn enqueue_job_with<J: Job>(
        &self,
        job: &J,
        options: impl FnOnce(NewJob) -> NewJob,
    ) -> Result<Enqueued> {
        let kind = J::options();
        let names = self.queues().iter().map(|queue| queue.name());
        let index = crate::jobs::queue_for_kind(names, J::KIND, kind.queue_name())?;
        self.queue(index)
            .enqueue(kind.typed(new_job(job)?, options))
    }
}
