//! The Jobs API for tokio programs (feature `tokio`): [`AsyncJobQueue`],
//! the async form of [`JobQueue`](super::JobQueue)'s worker calls.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::job::{DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use super::recurring::{Schedule, ScheduleInfo};
use super::stats::{Counts, QueueStats};
use crate::error::Result;

/// A boxed future, `Send`, borrowing the queue: what [`AsyncJobQueue`]'s
/// methods return, so that the trait is object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One job queue for async workers. Object safe: a worker holds a
/// `Box<dyn AsyncJobQueue>` (or an `Arc`) and runs on any backend that
/// implements it: the embedded queue
/// ([`AsyncEmbeddedJobs`](super::AsyncEmbeddedJobs)), PostgreSQL
/// (`AsyncPgJobs`, features `postgres` and `tokio`) and Redis
/// (`AsyncRedisJobs`, features `redis` and `tokio`).
///
/// The contract is [`JobQueue`](super::JobQueue)'s (see the [module
/// documentation](super)); each method's future resolves to what the
/// blocking call returns. Waiting ([`lease_timeout`](Self::lease_timeout))
/// holds no thread.
///
/// **Cancel safety.** `lease`, `lease_timeout` and `lease_batch` are
/// cancel-safe: a future dropped before it completes leaves no job leased
/// (a job it took is released, its attempt not counted). The reads
/// (`counts`, `waiting`, `dead`, `stats`) are cancel-safe: they change
/// nothing. The other calls (`enqueue`, `enqueue_batch`, the settling
/// calls `ack`, `nack`, `release`, `fail`, and `set_priority`, `cancel`,
/// `requeue_dead`, `cancel_many`, `set_priority_many`) are not: dropped
/// after their first poll, what they asked may or may not be done (with a
/// server: it runs if the request was sent); dropped before their first
/// poll they did nothing (a lease moved into one is then left to its
/// lease time, as a dropped [`JobLease`] is). A batch dropped midway goes
/// on to its end on the embedded queue (it runs on the blocking pool);
/// on a server each job is asked in turn, and the jobs not yet asked
/// stay as they were.
///
/// ```
/// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, EmbeddedJobs, NewJob};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue: Box<dyn AsyncJobQueue> =
///     Box::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join("jobs"))?));
/// queue.enqueue(NewJob::new("thumbnail a.jpg")).await?;
/// let lease = queue.lease_timeout(std::time::Duration::from_secs(1)).await?.expect("a job");
/// assert_eq!(lease.body, b"thumbnail a.jpg");
/// queue.ack(lease).await?;
/// # Ok(()) }
/// ```
pub trait AsyncJobQueue: Send + Sync + std::fmt::Debug {
    /// The queue's name ([`JobQueue::name`](super::JobQueue::name)).
    fn name(&self) -> &str;

    /// Adds a job ([`JobQueue::enqueue`](super::JobQueue::enqueue)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn enqueue(&self, job: NewJob) -> BoxFuture<'_, Result<Enqueued>>;

    /// Adds a job into the queue named `queue`, for a typed enqueue whose
    /// kind names its queue (`KindOptions::queue`, feature `runtime`). A
    /// queue of several ([`AsyncQueueSet`](super::AsyncQueueSet)) adds it
    /// to its member of that name; a single queue (the default) adds it
    /// to itself, whatever the name, as [`enqueue`](Self::enqueue).
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue); a set: `InvalidJob` if it holds no
    /// queue named `queue` (nothing added).
    fn enqueue_into<'a>(&'a self, queue: &'a str, job: NewJob) -> BoxFuture<'a, Result<Enqueued>> {
        let _ = queue;
        self.enqueue(job)
    }

    /// Adds several jobs ([`JobQueue::enqueue_batch`](super::JobQueue::enqueue_batch)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> BoxFuture<'_, Result<Vec<Enqueued>>>;

    /// Leases the first ready job, if any, without waiting.
    ///
    /// # Errors
    ///
    /// As [`JobQueue::lease`](super::JobQueue::lease).
    fn lease(&self) -> BoxFuture<'_, Result<Option<JobLease>>>;

    /// Leases the first ready job, waiting up to `wait` for one.
    ///
    /// # Errors
    ///
    /// As [`JobQueue::lease_timeout`](super::JobQueue::lease_timeout).
    fn lease_timeout(&self, wait: Duration) -> BoxFuture<'_, Result<Option<JobLease>>>;

    /// Leases up to `max` ready jobs at once, in lease order, without
    /// waiting ([`JobQueue::lease_batch`](super::JobQueue::lease_batch)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn lease_batch(&self, max: usize) -> BoxFuture<'_, Result<Vec<JobLease>>>;

    /// Ends the job ([`JobQueue::ack`](super::JobQueue::ack)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn ack(&self, lease: JobLease) -> BoxFuture<'_, Result<()>>;

    /// Retries the job or makes it dead ([`JobQueue::nack`](super::JobQueue::nack)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn nack<'a>(
        &'a self,
        lease: JobLease,
        retry: Retry,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Nacked>>;

    /// Gives the job back uncounted ([`JobQueue::release`](super::JobQueue::release)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn release(&self, lease: JobLease) -> BoxFuture<'_, Result<()>>;

    /// Gives the job back to run after `delay`, its attempt uncounted
    /// ([`JobQueue::release_after`](super::JobQueue::release_after)).
    /// Not cancel-safe once polled: dropped, the job may be given back
    /// or still be leased until its lease time ends.
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn release_after(
        &self,
        lease: JobLease,
        delay: std::time::Duration,
    ) -> BoxFuture<'_, Result<std::time::SystemTime>>;

    /// Extends the lease ([`JobQueue::touch`](super::JobQueue::touch)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn touch<'a>(&'a self, lease: &'a JobLease) -> BoxFuture<'a, Result<()>>;

    /// Makes the job a dead letter now ([`JobQueue::fail`](super::JobQueue::fail)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Changes the priority of waiting job `id`
    /// ([`JobQueue::set_priority`](super::JobQueue::set_priority)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>>;

    /// Removes waiting job `id` ([`JobQueue::cancel`](super::JobQueue::cancel)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Removes waiting jobs `ids`, as `cancel` of each in order would
    /// ([`JobQueue::cancel_many`](super::JobQueue::cancel_many)).
    fn cancel_many<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(ids.len());
            for id in ids {
                outcomes.push(self.cancel(id).await);
            }
            outcomes
        })
    }

    /// Changes the priority of waiting jobs `ids`, as `set_priority` of
    /// each in order would
    /// ([`JobQueue::set_priority_many`](super::JobQueue::set_priority_many)).
    fn set_priority_many<'a>(
        &'a self,
        ids: &'a [String],
        priority: i32,
    ) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(ids.len());
            for id in ids {
                outcomes.push(self.set_priority(id, priority).await);
            }
            outcomes
        })
    }

    /// Makes scheduled job `id` ready now
    /// ([`JobQueue::run_now`](super::JobQueue::run_now)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn run_now<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Up to `max` waiting jobs ([`JobQueue::waiting`](super::JobQueue::waiting)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>>;

    /// Up to `max` dead letters, oldest first ([`JobQueue::dead`](super::JobQueue::dead)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>>;

    /// Puts dead letter `id` back, ready
    /// ([`JobQueue::requeue_dead`](super::JobQueue::requeue_dead)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>>;

    /// The counts and the statistics of the days on record
    /// ([`JobQueue::stats`](super::JobQueue::stats)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>>;

    /// Jobs by state, now ([`JobQueue::counts`](super::JobQueue::counts)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn counts(&self) -> BoxFuture<'_, Result<Counts>>;

    /// Closes the queue ([`JobQueue::close`](super::JobQueue::close));
    /// waiting leases end with `Closed`.
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn close(&self) -> BoxFuture<'_, Result<()>>;

    // --- limits (issue 27) ---

    /// Pauses the queue ([`JobQueue::pause`](super::JobQueue::pause)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn pause(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(unsupported(self.name(), "pause")) })
    }

    /// Resumes the queue ([`JobQueue::resume`](super::JobQueue::resume)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn resume(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Err(unsupported(self.name(), "resume")) })
    }

    /// Whether the queue is paused ([`JobQueue::is_paused`](super::JobQueue::is_paused)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn is_paused(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async { Ok(false) })
    }

    /// Sets limit `name` to `max` ([`JobQueue::set_limit`](super::JobQueue::set_limit)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn set_limit<'a>(&'a self, name: &'a str, max: u32) -> BoxFuture<'a, Result<()>> {
        let _ = (name, max);
        Box::pin(async { Err(unsupported(self.name(), "limits")) })
    }

    /// Removes limit `name` ([`JobQueue::remove_limit`](super::JobQueue::remove_limit)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn remove_limit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        let _ = name;
        Box::pin(async { Err(unsupported(self.name(), "limits")) })
    }

    /// The limits with their holders ([`JobQueue::limits`](super::JobQueue::limits)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn limits(&self) -> BoxFuture<'_, Result<Vec<super::Limit>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    // --- recurring (issue 27) ---

    /// Adds or replaces a schedule ([`JobQueue::schedule`](super::JobQueue::schedule)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn schedule(&self, schedule: Schedule) -> BoxFuture<'_, Result<ScheduleInfo>>;

    /// Removes a schedule ([`JobQueue::unschedule`](super::JobQueue::unschedule)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn unschedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// The schedules ([`JobQueue::schedules`](super::JobQueue::schedules)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn schedules(&self) -> BoxFuture<'_, Result<Vec<ScheduleInfo>>>;

    /// Fires the due schedules ([`JobQueue::fire_schedules`](super::JobQueue::fire_schedules)).
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn fire_schedules(&self) -> BoxFuture<'_, Result<usize>>;

    // --- history (issue 27) ---

    /// Job `id` whatever its state, with its history
    /// ([`JobQueue::job_info`](super::JobQueue::job_info)). A read: cancel-safe.
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<super::JobInfo>>> {
        Box::pin(async move {
            let waiting = self.waiting(super::history::ALL).await?;
            let dead = match waiting.iter().any(|w| w.job.id == id) {
                true => Vec::new(),
                false => self.dead(super::history::ALL).await?,
            };
            super::history::find_listed(id, self.name(), waiting, || Ok(dead))
        })
    }

    // --- paging (issue 28) ---

    /// A page of the waiting jobs from `after` on
    /// ([`JobQueue::waiting_page`](super::JobQueue::waiting_page)). A read:
    /// cancel-safe. The default reads the front (`waiting`) up to the
    /// page's end.
    ///
    /// # Errors
    ///
    /// As the blocking call.
    fn waiting_page<'a>(
        &'a self,
        after: Option<&'a super::PageCursor>,
        max: usize,
    ) -> BoxFuture<'a, Result<super::Page>> {
        Box::pin(async move {
            let skip = super::paging::offset_of(after)?;
            let jobs = self
                .waiting(skip.saturating_add(max).saturating_add(1))
                .await?;
            super::paging::by_offset(after, max, |_| Ok(jobs))
        })
    }
}

/// What a backend without pause or limits answers.
fn unsupported(queue: &str, what: &str) -> crate::Error {
    crate::Error::InvalidJob {
        reason: format!("queue {queue:?}: this backend has no {what}; use one that does"),
    }
}
