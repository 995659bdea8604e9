//! The Jobs API: a job queue with priorities, delays, headers, caller ids,
//! retries with back-off, dead letters and statistics, as one contract
//! ([`JobQueue`]) that every backend keeps: the embedded queue here
//! ([`EmbeddedJobs`], a queue directory shared by threads or processes),
//! and servers for workers on many hosts. A worker written against
//! `dyn JobQueue` runs unchanged on any of them, and so does the `dque`
//! command.
//!
//! ```
//! use std::time::Duration;
//! use dque::jobs::{EmbeddedJobs, JobQueue, NewJob, Retry};
//! # fn main() -> Result<(), dque::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
//! queue.enqueue(NewJob::new("thumbnail a.jpg"))?;
//! queue.enqueue(NewJob::new("page the on-call").priority(-10))?;
//! queue.enqueue(NewJob::new("weekly report").delay(Duration::from_secs(3600)))?;
//!
//! // A worker: the urgent job first, then the other; the report is not due.
//! let worker = |queue: &dyn JobQueue| -> Result<Vec<Vec<u8>>, dque::Error> {
//!     let mut done = Vec::new();
//!     while let Some(lease) = queue.lease()? {
//!         if lease.body.is_empty() {
//!             queue.nack(lease, Retry::Backoff, "empty body")?;
//!             continue;
//!         }
//!         done.push(lease.body.clone());
//!         queue.ack(lease)?;
//!     }
//!     Ok(done)
//! };
//! assert_eq!(worker(&queue)?, [&b"page the on-call"[..], b"thumbnail a.jpg"]);
//! assert_eq!(queue.counts()?.scheduled, 1);
//! # Ok(()) }
//! ```
//!
//! The contract, which the shared test suite (`tests/jobs_api/`) checks on
//! every backend:
//!
//! - Of the ready jobs, a lease takes one with the smallest priority
//!   number; equal priorities go in the order they became ready (enqueue,
//!   or the due time of a scheduled job), first in, first out.
//! - A scheduled job (a delay or a time) is invisible until due, then ready.
//! - A lease holds a job for the lease time ([`Options::visibility_timeout`](crate::Options::visibility_timeout));
//!   `touch` extends it; a lease not settled in time ends and the job
//!   runs again (that attempt counted). Delivery is at least once: a crash
//!   between a job's effect and its ack runs it again.
//! - `ack` ends a job; `nack` retries it after a back-off (or a given
//!   delay) until its attempts ([`Options::max_attempts`](crate::Options::max_attempts))
//!   are used up, then it is a dead letter; `release` gives it back without
//!   counting the attempt (`release_after`: scheduled for later, a snooze);
//!   `fail` makes it a dead letter at once.
//! - Enqueueing a caller-chosen id that is ready, scheduled or leased adds
//!   nothing and says so ([`Enqueued::AlreadyQueued`]): not an error, so a
//!   producer may retry after a crash.
//! - A job enqueued with a uniqueness period ([`NewJob::unique_for`])
//!   holds its id for that period from enqueue, in its
//!   [`UniqueStates`] (queued and running, done by default, dead if
//!   asked): an enqueue of the id meanwhile adds nothing and says which
//!   job it met ([`Enqueued::Duplicate`]). The store decides, so
//!   concurrent producers never both add.
//! - A call that returns an error had no effect on the job it names.
//!
//! Queue names follow one rule on every backend ([`check_queue_name`]): 1
//! to [`MAX_QUEUE_NAME_BYTES`] (255) bytes without control characters. A
//! handle is refused (`InvalidJob`) before anything is written for a name
//! that breaks it, so a queue that one backend holds can move to another.
//! An embedded queue's name is its directory's name.

mod address;
#[cfg(feature = "tokio")]
mod async_contract;
mod backoff;
mod clock;
pub(crate) mod embedded;
mod history;
mod job;
mod leases;
mod limits;
mod paging;
#[cfg(feature = "postgres")]
mod postgres;
mod queue_name;
mod recurring;
#[cfg(feature = "redis")]
mod redis;
mod search;
mod several;
#[cfg(feature = "tokio")]
mod several_async;
mod stats;
mod unique;

use std::time::Duration;

#[cfg(feature = "tokio")]
pub use address::open_address_async;
pub use address::{open_address, Address, AddressOptions};
#[cfg(feature = "tokio")]
pub use async_contract::{AsyncJobQueue, BoxFuture};
pub use backoff::Backoff;
pub use clock::{Clock, ManualClock, SystemClock};
pub use embedded::stored_limits;
pub use embedded::stored_schedules;
#[cfg(feature = "tokio")]
pub use embedded::AsyncEmbeddedJobs;
pub use embedded::{job_from_record, EmbeddedJobs, JobOptions, StoredJob, JOB_CODEC_ID, MAX_LANES};
pub use history::{JobEvent, JobInfo, JobState, KeepCompleted, TIMEOUT_HEADER};
pub use job::{
    DeadJob, Enqueued, Job, JobLease, Nacked, NewJob, Retry, WaitState, Waiting,
    MAX_HEADER_NAME_BYTES, MAX_JOB_ID_BYTES,
};
pub use leases::LeaseInfo;
pub use limits::{check_limit_name, Limit, LIMITS_HEADER, MAX_LIMIT_NAME_BYTES};
pub use paging::{Page, PageCursor};
#[cfg(all(feature = "postgres", feature = "tokio"))]
pub use postgres::AsyncPgJobs;
#[cfg(feature = "postgres")]
pub use postgres::{PgJobs, PgOptions, SCHEMA_VERSION};
pub use queue_name::{check_queue_name, MAX_QUEUE_NAME_BYTES};
pub use recurring::{tick_id, Cadence, CatchUp, Schedule, ScheduleInfo, MAX_SCHEDULE_NAME_BYTES};
#[cfg(all(feature = "redis", feature = "tokio"))]
pub use redis::AsyncRedisJobs;
#[cfg(feature = "redis")]
pub use redis::{
    QlessJob, QlessPut, QueueCounts, RedisJobs, RedisOptions, WorkerJobs, DEFAULT_KLASS,
    KLASS_HEADER,
};
pub use search::{search_from_the_front, Found, FoundJob, JobFilter, JobPlace, SearchState};
#[cfg(feature = "runtime")]
pub(crate) use several::queue_for_kind;
pub use several::{Order, QueueSet, SET_POLL};
#[cfg(feature = "tokio")]
pub use several_async::AsyncQueueSet;
pub use stats::{
    failure_group, Counts, DayStats, Histogram, QueueStats, Timing, DAY_SECONDS, HISTOGRAM_BUCKETS,
};
pub use unique::{Duplicate, Settled, UniqueStates};

use crate::error::Result;

/// One job queue, whatever holds it. Object safe: workers and the `dque`
/// command hold a `Box<dyn JobQueue>` made from an address ([`open_address`]).
///
/// See the [module documentation](self) for the contract and an example.
pub trait JobQueue: Send + Sync + std::fmt::Debug {
    /// The queue's name (embedded: its directory's name).
    fn name(&self) -> &str;

    /// Adds a job: ready now, or scheduled if it has a delay or a time.
    ///
    /// # Errors
    ///
    /// `InvalidJob` for an id or header the backend cannot hold (nothing
    /// added); the backend's storage errors (`Io`, `WritesRefused`,
    /// `Full`, `ItemTooLarge`, `Closed`), after which nothing was added.
    fn enqueue(&self, job: NewJob) -> Result<Enqueued>;

    /// Adds several jobs, in order; one durable write per part of the
    /// queue they go to, not one per job.
    ///
    /// # Errors
    ///
    /// `InvalidJob` for any job: nothing added. A storage error: the parts
    /// written before the one that failed keep their jobs (which parts, and
    /// in which order, is the backend's: enqueue with caller ids to retry
    /// safely).
    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>>;

    /// Leases the first ready job, if any.
    ///
    /// # Errors
    ///
    /// Storage errors (`Io`, `Corrupted`, `WritesRefused`, `Closed`).
    fn lease(&self) -> Result<Option<JobLease>>;

    /// Leases the first ready job, waiting up to `wait` for one (woken by
    /// an enqueue, a job falling due, or a job handed back).
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    fn lease_timeout(&self, wait: Duration) -> Result<Option<JobLease>>;

    /// Leases up to `max` ready jobs at once, in the order single leases
    /// would take them (a backend may do it in one round trip).
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease); an error after the first lease keeps the
    /// ones taken (they are returned, and the error is not).
    fn lease_batch(&self, max: usize) -> Result<Vec<JobLease>> {
        let mut leases = Vec::new();
        while leases.len() < max {
            match self.lease() {
                Ok(Some(lease)) => leases.push(lease),
                Ok(None) => break,
                Err(e) if leases.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(leases)
    }

    /// Ends the job: it ran.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the lease ended first (the job may be with another
    /// worker); `InvalidJob` for a lease of another queue; storage errors.
    fn ack(&self, lease: JobLease) -> Result<()>;

    /// The job failed this attempt: it runs again after `retry`, or becomes
    /// a dead letter with `reason` if its attempts are used up.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked>;

    /// Gives the job back untouched, as if this attempt had not happened
    /// (a worker shutting down).
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    fn release(&self, lease: JobLease) -> Result<()>;

    /// Gives the job back without counting the attempt, to run again after
    /// `delay`: a snooze (a job waiting on a rate limit or another job, not
    /// failing). It is scheduled until then, its attempts as they were
    /// before this lease, so snoozing never makes it a dead letter; a zero
    /// `delay` is [`release`](Self::release). Returns when it is ready again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
    /// queue.enqueue(NewJob::new("call the API"))?;
    /// let lease = queue.lease()?.expect("a job");
    /// queue.release_after(lease, Duration::from_secs(60))?; // rate limited
    /// assert_eq!(queue.counts()?.scheduled, 1);
    /// assert_eq!(queue.waiting(1)?[0].job.attempt, 0, "not counted");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    fn release_after(&self, lease: JobLease, delay: Duration) -> Result<std::time::SystemTime>;

    /// Extends the lease by the lease time, from now.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    fn touch(&self, lease: &JobLease) -> Result<()>;

    /// Makes the job a dead letter now, with `reason`.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    fn fail(&self, lease: JobLease, reason: &str) -> Result<()>;

    /// Changes the priority of waiting job `id` (ready or scheduled).
    /// Finding a job by an id the backend made up may read every waiting
    /// job (embedded); by a caller's id it is one lookup.
    ///
    /// # Errors
    ///
    /// `NoSuchJob` if no job `id` is waiting; `JobLeased` if a worker holds
    /// it; storage errors.
    fn set_priority(&self, id: &str, priority: i32) -> Result<()>;

    /// Removes waiting job `id` without running it. On the embedded
    /// queue, a job a crash caught in the middle of a move has two
    /// records (`waiting` lists both): a cancel ends every one, so no copy
    /// runs after it.
    ///
    /// # Errors
    ///
    /// As [`set_priority`](Self::set_priority).
    fn cancel(&self, id: &str) -> Result<()>;

    /// Removes waiting jobs `ids`, as [`cancel`](Self::cancel) of each in
    /// order would: the outcome of each (an id asked twice finds no job
    /// the second time; a leased job answers `JobLeased`, a dead letter
    /// `NoSuchJob`). A backend may find them all at once (embedded: one
    /// read of the jobs for the ids it made up, not one per id;
    /// PostgreSQL: one statement). Each job is cancelled or not on its
    /// own, as by `cancel`: a crash mid-batch leaves no job half-done.
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// let made_up = queue.enqueue(NewJob::new("a"))?.id().to_owned();
    /// queue.enqueue(NewJob::new("b").id("b"))?;
    /// let outcomes = queue.cancel_many(&[made_up, "b".into(), "c".into()]);
    /// assert!(outcomes[0].is_ok() && outcomes[1].is_ok() && outcomes[2].is_err());
    /// assert_eq!(queue.counts()?.ready, 0);
    /// # Ok(()) }
    /// ```
    fn cancel_many(&self, ids: &[String]) -> Vec<Result<()>> {
        ids.iter().map(|id| self.cancel(id)).collect()
    }

    /// Changes the priority of waiting jobs `ids`, as
    /// [`set_priority`](Self::set_priority) of each in order would: the
    /// outcome of each, and the ready ones moved to the end of `priority`
    /// in the order asked. A backend may find them all at once (as
    /// [`cancel_many`](Self::cancel_many)); each job moves or not on its own.
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// let a = queue.enqueue(NewJob::new("a"))?.id().to_owned();
    /// let b = queue.enqueue(NewJob::new("b"))?.id().to_owned();
    /// let outcomes = queue.set_priority_many(&[b.clone(), a], -1);
    /// assert!(outcomes.iter().all(|o| o.is_ok()));
    /// assert_eq!(queue.lease()?.expect("a job").job.id, b, "moved first");
    /// # Ok(()) }
    /// ```
    fn set_priority_many(&self, ids: &[String], priority: i32) -> Vec<Result<()>> {
        ids.iter()
            .map(|id| self.set_priority(id, priority))
            .collect()
    }

    /// Makes scheduled job `id` ready now ("Retry now" of Sidekiq's UI): a
    /// delayed job, or one waiting out its back-off after a failed attempt,
    /// is leased next in its priority's order, with its attempts, priority,
    /// headers, body and id kept. `Ok(true)` if job `id` is waiting (a
    /// ready job is left as it is); `Ok(false)` if no job `id` is waiting:
    /// unknown, leased by a worker (it is not waiting) or a dead letter
    /// (see [`requeue_dead`](Self::requeue_dead)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
    /// let delayed = NewJob::new("report").delay(Duration::from_secs(3600));
    /// let id = queue.enqueue(delayed)?.id().to_owned();
    /// assert!(queue.lease()?.is_none(), "due in an hour");
    /// assert!(queue.run_now(&id)?);
    /// assert_eq!(queue.lease()?.expect("ready now").job.id, id);
    /// assert!(!queue.run_now("no such job")?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors (the job stays as it was).
    fn run_now(&self, id: &str) -> Result<bool>;

    /// Up to `max` waiting jobs: the ready ones (and leased) in the order
    /// they will be leased, then the scheduled ones by due time. A read.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn waiting(&self, max: usize) -> Result<Vec<Waiting>>;

    /// Up to `max` dead letters, oldest first. A read.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn dead(&self, max: usize) -> Result<Vec<DeadJob>>;

    /// Up to `max` jobs leased now, soonest-ending lease first: the worker
    /// holding each, since when and until when, as far as the backend
    /// records them ([`LeaseInfo`]). A read.
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
    /// queue.enqueue(NewJob::new("a"))?;
    /// let lease = queue.lease()?.expect("a job");
    /// assert_eq!(queue.leases(10)?[0].job.id, lease.id);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn leases(&self, max: usize) -> Result<Vec<LeaseInfo>> {
        Ok(leases::leased_of(self.waiting(history::ALL)?, max))
    }

    /// Puts dead letter `id` back, ready, with its attempts starting over.
    ///
    /// # Errors
    ///
    /// `NoSuchJob` if no dead letter has this id; storage errors.
    fn requeue_dead(&self, id: &str) -> Result<()>;

    /// Puts dead letters `ids` back, as [`requeue_dead`](Self::requeue_dead)
    /// of each in order would: the outcome of each (an id asked twice
    /// finds no letter the second time). A backend may find them all in one
    /// pass (embedded: one read of the dead letters, not one per id).
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("a").id("a"))?;
    /// queue.fail(queue.lease()?.expect("a job"), "boom")?;
    /// let outcomes = queue.requeue_dead_many(&["a".into(), "b".into()]);
    /// assert!(outcomes[0].is_ok() && outcomes[1].is_err());
    /// # Ok(()) }
    /// ```
    fn requeue_dead_many(&self, ids: &[String]) -> Vec<Result<()>> {
        ids.iter().map(|id| self.requeue_dead(id)).collect()
    }

    /// Jobs by state, now. A read.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn counts(&self) -> Result<Counts>;

    /// The counts and the statistics of the days on record. A read.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn stats(&self) -> Result<QueueStats>;

    /// Closes the queue: what it wrote is durable as its mode promises,
    /// later calls fail with `Closed`.
    ///
    /// # Errors
    ///
    /// The error of a last write or sync.
    fn close(&self) -> Result<()>;

    /// How long a lease of this handle lasts unless touched, if the
    /// backend says (the embedded queue's stored visibility timeout, a
    /// server backend's `lease_time` option): what a worker touching its
    /// leases goes by.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use dque::jobs::{JobOptions, JobQueue};
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let options = dque::Options::new().visibility_timeout(Duration::from_secs(5));
    /// let q = JobOptions::new().queue(options).create(dir.path().join("q"))?;
    /// assert_eq!(q.lease_time(), Some(Duration::from_secs(5)));
    /// # Ok(()) }
    /// ```
    fn lease_time(&self) -> Option<Duration> {
        None
    }

    // --- limits (issue 27) ---

    /// Pauses the queue: no new leases (a lease finds nothing) until
    /// [`resume`](Self::resume); jobs leased before run on and settle as
    /// usual, and enqueues are kept. Every handle and process on the queue
    /// sees it, and it outlives a restart. On Redis it is qless's pause.
    /// Leases fire no schedule while the queue is paused: the first lease
    /// after the resume fires what is due by each schedule's catch-up
    /// policy ([`fire_schedules`](Self::fire_schedules) fires them
    /// whatever the pause).
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("a"))?;
    /// queue.pause()?;
    /// assert!(queue.is_paused()? && queue.lease()?.is_none());
    /// queue.resume()?;
    /// assert!(queue.lease()?.is_some());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors (nothing changed); `InvalidJob` on a plain FIFO
    /// queue directory, or from a backend that has neither.
    fn pause(&self) -> Result<()> {
        Err(limits_unsupported(self.name(), "pause"))
    }

    /// Lets leases take jobs again after [`pause`](Self::pause).
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    fn resume(&self) -> Result<()> {
        Err(limits_unsupported(self.name(), "resume"))
    }

    /// Whether the queue is paused. A read.
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    fn is_paused(&self) -> Result<bool> {
        Ok(false)
    }

    /// Sets limit `name` to `max` holders at once (made, or changed; a
    /// maximum below the holders running now lets them finish and leases
    /// no more until they are under it). Jobs name their limits in the
    /// [`LIMITS_HEADER`] header ([`NewJob::limit`]). Jobs already leased
    /// that name it count as its holders (also those leased while it was
    /// removed).
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, Limit};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// queue.set_limit("smtp", 2)?;
    /// assert_eq!(queue.limits()?, [Limit { name: "smtp".into(), max: 2, running: 0 }]);
    /// assert!(queue.remove_limit("smtp")?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidJob` for a bad name ([`check_limit_name`]) or a maximum of
    /// 0 (nothing changed); otherwise as [`pause`](Self::pause).
    fn set_limit(&self, name: &str, max: u32) -> Result<()> {
        let _ = (name, max);
        Err(limits_unsupported(self.name(), "limits"))
    }

    /// Removes limit `name` (its jobs run with no limit); whether it was set.
    ///
    /// # Errors
    ///
    /// As [`set_limit`](Self::set_limit).
    fn remove_limit(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(limits_unsupported(self.name(), "limits"))
    }

    /// The limits set on this queue, by name, with their holders now. A read.
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    fn limits(&self) -> Result<Vec<Limit>> {
        Ok(Vec::new())
    }

    // --- recurring (issue 27) ---

    /// Adds schedule `schedule`, or replaces the one of its name (which
    /// keeps its next run if its cadence and time zone are unchanged, so a
    /// program may declare its schedules at every start). Its jobs are
    /// enqueued by the leases of any worker on the queue, one per tick
    /// (caller id `NAME@TICK`), however many processes lease. Returns the
    /// schedule with its next run.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{EmbeddedJobs, JobQueue, Schedule};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("jobs"))?;
    /// queue.schedule(Schedule::every("ping", Duration::from_secs(60)).body("ping"))?;
    /// let lease = queue.lease()?.expect("the first tick is due at once");
    /// assert!(lease.id.starts_with("ping@"));
    /// assert_eq!(queue.schedules()?.len(), 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidJob` for a bad name, cron expression, time zone or header
    /// (nothing changed); storage errors.
    fn schedule(&self, schedule: Schedule) -> Result<ScheduleInfo>;

    /// Removes schedule `name`; whether there was one. Jobs it enqueued
    /// stay.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn unschedule(&self, name: &str) -> Result<bool>;

    /// The queue's schedules by name, with their next runs. A read.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn schedules(&self) -> Result<Vec<ScheduleInfo>>;

    /// Enqueues the jobs of the schedules due now (what every lease does
    /// first); the number of jobs added.
    ///
    /// # Errors
    ///
    /// Storage errors; schedules fired before the error keep their jobs.
    fn fire_schedules(&self) -> Result<usize>;

    // --- history (issue 27) ---

    /// Job `id` whatever its state (ready, scheduled, leased, dead, or
    /// completed and kept: [`KeepCompleted`]), with its history as far as
    /// the backend keeps it; `None` if the queue has no such job (or no
    /// longer keeps it). A read.
    ///
    /// By a caller's id it is one lookup; by a made-up id an embedded
    /// queue reads its waiting jobs through (as [`cancel`](Self::cancel)
    /// does). The default reads [`waiting`](Self::waiting) and
    /// [`dead`](Self::dead) through and knows no completed job.
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, JobState, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("a").id("order-7"))?;
    /// queue.ack(queue.lease()?.expect("a job"))?;
    /// let info = queue.job_info("order-7")?.expect("kept a day by default");
    /// assert_eq!(info.state, JobState::Completed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn job_info(&self, id: &str) -> Result<Option<JobInfo>> {
        history::find_listed(id, self.name(), self.waiting(history::ALL)?, || {
            self.dead(history::ALL)
        })
    }

    // --- search (issue 28) ---

    /// Up to `max` jobs that `filter` keeps, waiting ones first in lease
    /// order, then dead letters oldest first, with how many jobs were read
    /// and whether every job of the states looked in was. A read.
    ///
    /// Where no index answers the filter (the default, which Redis keeps),
    /// it reads [`waiting`](Self::waiting) and then [`dead`](Self::dead)
    /// from the front, at most `scan` jobs in all: its cost is those jobs
    /// read, bodies and all, and matches beyond them are not found
    /// ([`Found::complete`] says so). The embedded queue answers the same
    /// in one walk over its records, reading each job's id and headers
    /// where they lie and the bodies of matches only
    /// ([`search_from_the_front`] is the default, to compare with). A
    /// backend that filters natively (PostgreSQL) reads in the server and
    /// finds them all.
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobFilter, JobQueue, NewJob, SearchState};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("a").id("mail-1").header("klass", "send_email"))?;
    /// queue.enqueue(NewJob::new("b").id("pdf-1").header("klass", "render"))?;
    /// queue.fail(queue.lease()?.expect("a job"), "exit 3: smtp timeout")?;
    /// let dead_mail = JobFilter::new().state(SearchState::Dead).reason("timeout");
    /// let found = queue.search(&dead_mail, 50, 10_000)?;
    /// assert_eq!(found.jobs.len(), 1);
    /// assert_eq!(found.jobs[0].job.id, "mail-1");
    /// assert!(found.complete);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn search(&self, filter: &JobFilter, max: usize, scan: usize) -> Result<Found> {
        search::by_reading(filter, max, scan, |n| self.waiting(n), |n| self.dead(n))
    }

    // --- paging (issue 28) ---

    /// Up to `max` waiting jobs in [`waiting`](Self::waiting)'s order,
    /// from where the page before ended (`after`: its
    /// [`Page::next`]; `None` the first page). A read.
    ///
    /// The embedded queue and PostgreSQL resume from the cursor's
    /// position, so a deep page costs what the first does; the default
    /// (Redis) reads the front up to the page's end. A job that stays
    /// where it waits is listed once in a walk of every page; one that
    /// moves between pages shows at its new place (see [`PageCursor`]).
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// for i in 0..25 {
    ///     queue.enqueue(NewJob::new(format!("job {i}")))?;
    /// }
    /// let (mut seen, mut after) = (0, None);
    /// loop {
    ///     let page = queue.waiting_page(after.as_ref(), 10)?;
    ///     seen += page.jobs.len();
    ///     match page.next {
    ///         Some(next) => after = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// assert_eq!(seen, 25);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`BadCursor`](crate::Error::BadCursor) for a cursor this backend
    /// did not make (nothing read); storage errors.
    fn waiting_page(&self, after: Option<&PageCursor>, max: usize) -> Result<Page> {
        paging::by_offset(after, max, |n| self.waiting(n))
    }
}

/// What a backend without pause or limits answers.
fn limits_unsupported(queue: &str, what: &str) -> crate::Error {
    crate::Error::InvalidJob {
        reason: format!("queue {queue:?}: this backend has no {what}; use one that does"),
    }
}
