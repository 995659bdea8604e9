//! `AsyncEmbeddedJobs`: the embedded jobs queue behind [`AsyncJobQueue`].

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::{unix_ms, EmbeddedJobs, Schedule, LEASE_POLL};
use crate::error::{Error, Result};
use crate::jobs::async_contract::{AsyncJobQueue, BoxFuture};
use crate::jobs::job::{DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use crate::jobs::recurring::{Schedule as RecurringSchedule, ScheduleInfo};
use crate::jobs::stats::{Counts, QueueStats};
use crate::jobs::JobQueue;
use crate::queue::asynchronous::offload::run;

/// An [`EmbeddedJobs`] for async workers (feature `tokio`): the
/// [`AsyncJobQueue`] contract over the same queue directory. Clones share
/// the queue.
///
/// Waiting holds no thread: a waiting lease sleeps on a tokio
/// notification that every write of the queue that may make a job ready
/// reaches (in shared mode also other processes' writes, through one
/// watcher thread per handle), or on a timer for the next scheduled job.
/// In Safe mode every call that writes runs on tokio's blocking pool (it
/// waits for fsyncs); in Turbo and Periodic mode it runs inline, but for
/// the calls that move a job (`nack`, `set_priority`, `requeue_dead`: the
/// job's new record is fsynced before its old one ends, in every mode),
/// which run on the pool too. One fsync stays inline in Turbo and
/// Periodic: a lease or enqueue that settles the moves of jobs fallen due
/// syncs their lanes first (at most every 100 ms; FORMAT.md, "Moves").
#[derive(Debug, Clone)]
pub struct AsyncEmbeddedJobs {
    jobs: Arc<EmbeddedJobs>,
}

impl AsyncEmbeddedJobs {
    /// Wraps an open jobs queue.
    pub fn new(jobs: EmbeddedJobs) -> Self {
        Self::from_arc(Arc::new(jobs))
    }

    /// Wraps a jobs queue blocking code shares too.
    pub fn from_arc(jobs: Arc<EmbeddedJobs>) -> Self {
        AsyncEmbeddedJobs { jobs }
    }

    /// The blocking handle, for every other call of [`JobQueue`].
    pub fn jobs(&self) -> &Arc<EmbeddedJobs> {
        &self.jobs
    }

    /// Runs `work` on the queue: on the blocking pool in Safe mode.
    async fn call<R: Send + 'static>(
        &self,
        work: impl FnOnce(&EmbeddedJobs) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let jobs = Arc::clone(&self.jobs);
        run(self.jobs.safe, move || work(&jobs)).await
    }

    /// Runs `work`, which may move a job (and so fsync its new record
    /// before ending the old one, in every mode), on the blocking pool.
    async fn call_moving<R: Send + 'static>(
        &self,
        work: impl FnOnce(&EmbeddedJobs) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let jobs = Arc::clone(&self.jobs);
        run(true, move || work(&jobs)).await
    }

    /// One try to lease, cancel-safe: on the blocking pool, a job taken
    /// for a future dropped meanwhile is released, its attempt uncounted.
    async fn try_lease(&self) -> Result<Option<JobLease>> {
        Ok(self.take(1).await?.pop())
    }

    /// Up to `max` leases without waiting, cancel-safe as
    /// [`try_lease`](Self::try_lease).
    async fn take(&self, max: usize) -> Result<Vec<JobLease>> {
        let take = move |jobs: &EmbeddedJobs| -> Result<Vec<JobLease>> {
            match max {
                1 => Ok(jobs.lease_now()?.into_iter().collect()),
                _ => JobQueue::lease_batch(jobs, max),
            }
        };
        if !self.jobs.safe || tokio::runtime::Handle::try_current().is_err() {
            // Inline: it returns in the poll that took the jobs.
            return take(&self.jobs);
        }
        let (answer, taken) = tokio::sync::oneshot::channel();
        let jobs = Arc::clone(&self.jobs);
        tokio::task::spawn_blocking(move || {
            if let Err(Ok(leases)) = answer.send(take(&jobs)) {
                // Its future is gone: no one owns the jobs.
                for lease in leases {
                    let _ = jobs.release(lease);
                }
            }
        });
        let mut taken = Answer {
            jobs: Arc::clone(&self.jobs),
            taken,
        };
        (&mut taken.taken).await.unwrap_or(Err(Error::Closed))
    }

    async fn lease_until(&self, deadline: Option<Instant>) -> Result<Option<JobLease>> {
        let signal = &self.jobs.signal;
        loop {
            // Registered before the look: a wake-up after it is kept.
            let mut woken = pin!(signal.wakeups().notified_available());
            woken.as_mut().enable();
            if let Some(lease) = self.try_lease().await? {
                // Others may be ready too: pass the wake-up on.
                signal.wakeups().available();
                return Ok(Some(lease));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            // As the blocking lease: a poll for what no one signals
            // (a lane's lease running out), and the next scheduled job.
            let mut until = now + LEASE_POLL;
            if let Some(d) = deadline {
                until = until.min(d);
            }
            if let Some(due) = self.jobs.schedule.as_ref().and_then(Schedule::next_due) {
                let left = due.saturating_sub(unix_ms(self.jobs.now()));
                until = until.min(now + Duration::from_millis(left));
            }
            let mut timer = pin!(tokio::time::sleep_until(until.into()));
            std::future::poll_fn(|cx| {
                if woken.as_mut().poll(cx).is_ready() || timer.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }
}

/// The answer of a lease taken on the blocking pool. Sent but never read
/// (its future dropped between the send and the read), the job it holds
/// is given back here, uncounted; not sent yet, the sender finds the
/// channel closed and gives it back itself.
struct Answer {
    jobs: Arc<EmbeddedJobs>,
    taken: tokio::sync::oneshot::Receiver<Result<Vec<JobLease>>>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        // Closed first: a send after it fails (the sender gives the job
        // back); one before it is read here. (Read, then closed, a value
        // sent in between would be dropped with the channel.)
        self.taken.close();
        if let Ok(Ok(leases)) = self.taken.try_recv() {
            if leases.is_empty() {
                return;
            }
            let jobs = Arc::clone(&self.jobs);
            let release = move || {
                for lease in leases {
                    let _ = jobs.release(lease);
                }
            };
            // A release fsyncs in Safe mode: not on a task's thread.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(release)),
                Err(_) => release(),
            }
        }
    }
}

impl AsyncJobQueue for AsyncEmbeddedJobs {
    fn name(&self) -> &str {
        JobQueue::name(&*self.jobs)
    }

    fn enqueue(&self, job: NewJob) -> BoxFuture<'_, Result<Enqueued>> {
        Box::pin(self.call(move |jobs| jobs.enqueue(job)))
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> BoxFuture<'_, Result<Vec<Enqueued>>> {
        Box::pin(self.call(move |queue| queue.enqueue_batch(jobs)))
    }

    fn lease(&self) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(self.try_lease())
    }

    fn lease_timeout(&self, wait: Duration) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(self.lease_until(Instant::now().checked_add(wait)))
    }

    fn lease_batch(&self, max: usize) -> BoxFuture<'_, Result<Vec<JobLease>>> {
        Box::pin(self.take(max))
    }

    fn ack(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.call(move |jobs| jobs.ack(lease)))
    }

    fn nack<'a>(
        &'a self,
        lease: JobLease,
        retry: Retry,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Nacked>> {
        let reason = reason.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.nack(lease, retry, &reason)))
    }

    fn release_after(
        &self,
        lease: JobLease,
        delay: Duration,
    ) -> BoxFuture<'_, Result<std::time::SystemTime>> {
        Box::pin(self.call_moving(move |jobs| jobs.release_after(lease, delay)))
    }

    fn release(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.call(move |jobs| jobs.release(lease)))
    }

    fn touch<'a>(&'a self, lease: &'a JobLease) -> BoxFuture<'a, Result<()>> {
        // Writes nothing: inline.
        Box::pin(async move { self.jobs.touch(lease) })
    }

    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        let reason = reason.to_owned();
        Box::pin(self.call(move |jobs| jobs.fail(lease, &reason)))
    }

    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>> {
        let id = id.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.set_priority(&id, priority)))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        let id = id.to_owned();
        Box::pin(self.call(move |jobs| jobs.cancel(&id)))
    }

    fn cancel_many<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Vec<Result<()>>> {
        let asked = ids.to_vec();
        Box::pin(async move {
            // A pass over the jobs: on the blocking pool in every mode.
            let done = self
                .call_moving(move |jobs| Ok(jobs.cancel_many(&asked)))
                .await;
            // The blocking pool gone (the runtime shutting down): none done.
            done.unwrap_or_else(|_| ids.iter().map(|_| Err(Error::Closed)).collect())
        })
    }

    fn set_priority_many<'a>(
        &'a self,
        ids: &'a [String],
        priority: i32,
    ) -> BoxFuture<'a, Vec<Result<()>>> {
        let asked = ids.to_vec();
        Box::pin(async move {
            let moving = move |jobs: &EmbeddedJobs| Ok(jobs.set_priority_many(&asked, priority));
            let done = self.call_moving(moving).await;
            done.unwrap_or_else(|_| ids.iter().map(|_| Err(Error::Closed)).collect())
        })
    }

    fn run_now<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        let id = id.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.run_now(&id)))
    }

    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>> {
        // Reads: inline, as `counts`.
        Box::pin(async move { self.jobs.waiting(max) })
    }

    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>> {
        Box::pin(async move { self.jobs.dead(max) })
    }

    fn waiting_page<'a>(
        &'a self,
        after: Option<&'a crate::jobs::PageCursor>,
        max: usize,
    ) -> BoxFuture<'a, Result<crate::jobs::Page>> {
        // A read: inline, as `waiting`.
        Box::pin(async move { self.jobs.waiting_page(after, max) })
    }

    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        let id = id.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.requeue_dead(&id)))
    }

    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>> {
        Box::pin(async move { self.jobs.stats() })
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts>> {
        Box::pin(async move { self.jobs.counts() })
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let jobs = Arc::clone(&self.jobs);
            let closed = run(true, move || JobQueue::close(&*jobs)).await;
            // Waiting leases look again and find the queue closed.
            self.jobs.signal.wakeups().close();
            closed
        })
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.call_moving(|jobs| jobs.set_paused(true)))
    }

    fn resume(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.call_moving(|jobs| jobs.set_paused(false)))
    }

    fn is_paused(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move { self.jobs.paused() })
    }

    fn set_limit<'a>(&'a self, name: &'a str, max: u32) -> BoxFuture<'a, Result<()>> {
        let name = name.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.set_limit_to(&name, Some(max)).map(drop)))
    }

    fn remove_limit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        let name = name.to_owned();
        Box::pin(self.call_moving(move |jobs| jobs.set_limit_to(&name, None)))
    }

    fn limits(&self) -> BoxFuture<'_, Result<Vec<crate::jobs::Limit>>> {
        Box::pin(self.call(|jobs| jobs.list_limits()))
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: RecurringSchedule) -> BoxFuture<'_, Result<ScheduleInfo>> {
        Box::pin(self.call(move |jobs| jobs.schedule(schedule)))
    }

    fn unschedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        let name = name.to_owned();
        Box::pin(self.call(move |jobs| jobs.unschedule(&name)))
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<ScheduleInfo>>> {
        Box::pin(self.call(|jobs| jobs.schedules()))
    }

    fn fire_schedules(&self) -> BoxFuture<'_, Result<usize>> {
        Box::pin(self.call(|jobs| jobs.fire_schedules()))
    }

    // --- history (issue 27) ---

    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<crate::jobs::JobInfo>>> {
        // A read, inline as `waiting` (it reads files, as `waiting` does).
        Box::pin(async move { self.jobs.job_info(id) })
    }
}
