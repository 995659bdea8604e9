//! Several async queues as one (feature `tokio`): [`AsyncQueueSet`], the
//! tokio counterpart of [`QueueSet`](super::QueueSet), by the same rules
//! (`several`'s `Turns`, `Looks` and `queue_for_kind`), and itself an
//! [`AsyncJobQueue`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::async_contract::{AsyncJobQueue, BoxFuture};
use super::job::{DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use super::recurring::{Schedule, ScheduleInfo};
use super::several::{queue_for_kind, Looks, Order, Passed, Turns};
use super::stats::{Counts, QueueStats};
use crate::error::{Error, Result};

/// Several async queues leased from as one: the tokio counterpart of
/// [`QueueSet`](super::QueueSet), with its rules (the queues tried in
/// the set's [`Order`]; a wait on several looks again at least every
/// [`SET_POLL`](super::SET_POLL)), and an [`AsyncJobQueue`] itself, so an
/// [`AsyncWorker`](crate::runtime::AsyncWorker) (feature `runtime`) or
/// any code written for one queue runs over it.
///
/// As an [`AsyncJobQueue`]:
/// - a lease comes from the first queue, in the set's order, with a ready
///   job (a `lease_batch`, from the first with any); the set notes which,
///   and settles it there (`ack`, `nack`,
///   `release`, `release_after`, `fail`; `touch` extends it there). A
///   lease from elsewhere is refused (`InvalidJob`), with no effect;
/// - `enqueue`, `enqueue_batch` and `schedule` add to the first queue; a
///   typed enqueue of a kind that names its queue (`KindOptions::queue`)
///   adds to that one ([`enqueue_into`](AsyncJobQueue::enqueue_into));
/// - the calls by job id (`set_priority`, `cancel`, `run_now`,
///   `requeue_dead`, `job_info`) go to the first queue that holds the job;
/// - the reads add up the queues (`counts`, `stats`), or list them in
///   the set's order (`waiting`, `dead`, `schedules`, `limits`);
/// - `pause`, `resume`, `set_limit`, `remove_limit`, `unschedule`,
///   `fire_schedules` and `close` go to every queue; the set is paused
///   when all are. They are not atomic across the queues (separate
///   stores or servers): on an error (the first queue's to fail), what
///   the other queues did stands; `pause`, `resume`, `set_limit` and
///   `close` still call every queue, the others stop at the error. Each
///   can be repeated to finish it.
///
/// [`lease_indexed`](Self::lease_indexed) leases without the note, and
/// tells the queue to settle with instead (as `QueueSet::lease` does).
/// A lease dropped unsettled leaves its note (a few bytes) until the set
/// is dropped.
///
/// ```
/// use std::sync::Arc;
/// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, AsyncQueueSet, EmbeddedJobs, NewJob, Order};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let open = |name: &str| -> Result<Arc<dyn AsyncJobQueue>, dque::Error> {
///     Ok(Arc::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join(name))?)))
/// };
/// let (urgent, batch) = (open("urgent")?, open("batch")?);
/// batch.enqueue(NewJob::new("b")).await?;
/// urgent.enqueue(NewJob::new("u")).await?;
/// let set = AsyncQueueSet::new(vec![urgent.clone(), batch.clone()], Order::InOrder)?;
/// let lease = set.lease().await?.expect("a job");
/// assert_eq!(lease.body, b"u");
/// set.ack(lease).await?; // acked in `urgent`, where it came from
/// assert_eq!((urgent.counts().await?.ready, batch.counts().await?.ready), (0, 1));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncQueueSet {
    queues: Vec<Arc<dyn AsyncJobQueue>>,
    turns: Turns,
    name: String,
    /// Which queue each lease taken through the trait came from.
    owners: Mutex<HashMap<LeaseKey, usize>>,
}

/// What tells a lease from every other one of the set's queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LeaseKey {
    id: String,
    handle: usize,
    part: i64,
    record: u64,
    attempt: u32,
    leased_ms: u64,
}

impl LeaseKey {
    fn of(lease: &JobLease) -> Self {
        let token = &lease.token;
        LeaseKey {
            id: lease.job.id.clone(),
            handle: token.queue,
            part: token.part,
            record: token.record,
            attempt: token.attempt,
            leased_ms: token.leased_ms,
        }
    }
}

impl AsyncQueueSet {
    /// A set of `queues` (at least one) leased from in `order`; its
    /// [`name`](AsyncJobQueue::name) is theirs, joined by `,`.
    ///
    /// # Errors
    ///
    /// `InvalidOption` for an empty list.
    pub fn new(queues: Vec<Arc<dyn AsyncJobQueue>>, order: Order) -> Result<Self> {
        let turns = Turns::new("AsyncQueueSet::new", queues.len(), order)?;
        let name = queues
            .iter()
            .map(|queue| queue.name())
            .collect::<Vec<_>>()
            .join(",");
        Ok(AsyncQueueSet {
            queues,
            turns,
            name,
            owners: Mutex::new(HashMap::new()),
        })
    }

    /// Queue `index` of the set.
    ///
    /// # Panics
    ///
    /// If `index` is not below the number of queues.
    pub fn queue(&self, index: usize) -> &dyn AsyncJobQueue {
        self.queues[index].as_ref()
    }

    /// The queues, in the set's order.
    pub fn queues(&self) -> &[Arc<dyn AsyncJobQueue>] {
        &self.queues
    }

    /// Leases a ready job from the first queue (in the set's order) that
    /// has one, and returns the queue's index with it: settle it with
    /// [`queue`](Self::queue)`(index)`, not with the set. Cancel-safe.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, AsyncQueueSet, EmbeddedJobs, NewJob, Order};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dque::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let open = |name: &str| -> Result<Arc<dyn AsyncJobQueue>, dque::Error> {
    /// #     Ok(Arc::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join(name))?)))
    /// # };
    /// let set = AsyncQueueSet::new(vec![open("a")?, open("b")?], Order::RoundRobin)?;
    /// set.queue(1).enqueue(NewJob::new("in b")).await?;
    /// let (from, lease) = set.lease_indexed().await?.expect("a job");
    /// assert_eq!(set.queue(from).name(), "b");
    /// set.queue(from).ack(lease).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of a queue's lease (the queues after it are not tried).
    pub async fn lease_indexed(&self) -> Result<Option<(usize, JobLease)>> {
        self.lease_past(|_| false).await
    }

    /// As [`lease_indexed`](Self::lease_indexed), but a queue whose lease
    /// fails with an error `passing` accepts (a server's passing trouble)
    /// is passed over: its error is returned only if no other queue has
    /// a job. Cancel-safe.
    pub(crate) async fn lease_past(
        &self,
        passing: fn(&Error) -> bool,
    ) -> Result<Option<(usize, JobLease)>> {
        let mut passed = Passed::default();
        for index in self.turns.next_turn() {
            match self.queues[index].lease().await {
                Ok(Some(lease)) => return Ok(Some((index, lease))),
                Ok(None) => {}
                Err(e) => passed.note(e, passing)?,
            }
        }
        passed.answer()
    }

    /// As [`lease_indexed`](Self::lease_indexed), waiting up to `wait`
    /// for a job. One queue waits as its backend does; several are looked
    /// at again at least every [`SET_POLL`](super::SET_POLL). Cancel-safe.
    ///
    /// # Errors
    ///
    /// As [`lease_indexed`](Self::lease_indexed).
    pub async fn lease_timeout_indexed(&self, wait: Duration) -> Result<Option<(usize, JobLease)>> {
        self.lease_timeout_past(wait, |_| false).await
    }

    /// As [`lease_timeout_indexed`](Self::lease_timeout_indexed), passing
    /// over a queue in trouble as [`lease_past`](Self::lease_past) does.
    pub(crate) async fn lease_timeout_past(
        &self,
        wait: Duration,
        passing: fn(&Error) -> bool,
    ) -> Result<Option<(usize, JobLease)>> {
        if let [only] = self.queues.as_slice() {
            return Ok(only.lease_timeout(wait).await?.map(|lease| (0, lease)));
        }
        let mut looks = Looks::new(wait);
        loop {
            if let Some(found) = self.lease_past(passing).await? {
                return Ok(Some(found));
            }
            match looks.pause() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Ok(None),
            }
        }
    }

    /// Notes where `lease` came from: the set settles it there.
    fn noted(&self, (index, lease): (usize, JobLease)) -> JobLease {
        self.owners.lock().insert(LeaseKey::of(&lease), index);
        lease
    }

    /// The queue `lease` came from; with `settle`, its note is dropped.
    fn owner(&self, lease: &JobLease, settle: bool) -> Result<&dyn AsyncJobQueue> {
        let key = LeaseKey::of(lease);
        let mut owners = self.owners.lock();
        let index = match settle {
            true => owners.remove(&key),
            false => owners.get(&key).copied(),
        };
        index
            .map(|index| self.queue(index))
            .ok_or_else(|| Error::InvalidJob {
                reason: format!(
                    "job {}: its lease was not taken through this set ({}); settle it with \
                 the queue it came from",
                    lease.job.id, self.name
                ),
            })
    }

    /// Calls `each` on every queue, in order; the first error, once all
    /// were called.
    async fn every<'a, F>(&'a self, each: impl Fn(&'a dyn AsyncJobQueue) -> F) -> Result<()>
    where
        F: std::future::Future<Output = Result<()>>,
    {
        let mut first = None;
        for queue in &self.queues {
            if let Err(e) = each(queue.as_ref()).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// `each`'s answer from the first queue that holds job `id` (its
    /// `NoSuchJob` passes to the next); the last queue's `NoSuchJob` if none.
    async fn by_id<'a, T, F>(&'a self, each: impl Fn(&'a dyn AsyncJobQueue) -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let mut last = None;
        for queue in &self.queues {
            match each(queue.as_ref()).await {
                Err(e @ Error::NoSuchJob { .. }) => last = Some(e),
                answer => return answer,
            }
        }
        Err(last.expect("a set holds a queue"))
    }

    /// Up to `max` of what `each` lists, queue after queue.
    async fn listed<'a, T, F>(
        &'a self,
        max: usize,
        each: impl Fn(&'a dyn AsyncJobQueue, usize) -> F,
    ) -> Result<Vec<T>>
    where
        F: std::future::Future<Output = Result<Vec<T>>>,
    {
        let mut all = Vec::new();
        for queue in &self.queues {
            if all.len() >= max {
                break;
            }
            all.extend(each(queue.as_ref(), max - all.len()).await?);
        }
        all.truncate(max);
        Ok(all)
    }
}

fn add_counts(sum: &mut Counts, more: &Counts) {
    sum.ready += more.ready;
    sum.scheduled += more.scheduled;
    sum.leased += more.leased;
    sum.dead += more.dead;
}

impl AsyncJobQueue for AsyncQueueSet {
    fn name(&self) -> &str {
        &self.name
    }

    fn enqueue(&self, job: NewJob) -> BoxFuture<'_, Result<Enqueued>> {
        self.queues[0].enqueue(job)
    }

    fn enqueue_into<'a>(&'a self, queue: &'a str, job: NewJob) -> BoxFuture<'a, Result<Enqueued>> {
        // The kind travels in header `klass` (the runtime's `KIND_HEADER`).
        let kind = job.headers.iter().find(|(name, _)| name == "klass");
        let kind = kind.map_or("", |(_, value)| value.as_str());
        let names = self.queues.iter().map(|queue| queue.name());
        match queue_for_kind(names, kind, Some(queue)) {
            Ok(index) => self.queues[index].enqueue(job),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> BoxFuture<'_, Result<Vec<Enqueued>>> {
        self.queues[0].enqueue_batch(jobs)
    }

    fn lease(&self) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(async move { Ok(self.lease_indexed().await?.map(|found| self.noted(found))) })
    }

    fn lease_timeout(&self, wait: Duration) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(async move {
            let found = self.lease_timeout_indexed(wait).await?;
            Ok(found.map(|found| self.noted(found)))
        })
    }

    /// Up to `max` jobs from the first queue, in the set's order, that
    /// has any: one backend call answers, so the call stays cancel-safe
    /// (a lease batch gathered across queues would be lost if dropped
    /// between two of them).
    fn lease_batch(&self, max: usize) -> BoxFuture<'_, Result<Vec<JobLease>>> {
        Box::pin(async move {
            for index in self.turns.next_turn() {
                let leases = self.queues[index].lease_batch(max).await?;
                if !leases.is_empty() {
                    let noted = leases.into_iter().map(|lease| self.noted((index, lease)));
                    return Ok(noted.collect());
                }
            }
            Ok(Vec::new())
        })
    }

    fn ack(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.owner(&lease, true)?.ack(lease).await })
    }

    fn nack<'a>(
        &'a self,
        lease: JobLease,
        retry: Retry,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Nacked>> {
        Box::pin(async move { self.owner(&lease, true)?.nack(lease, retry, reason).await })
    }

    fn release(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.owner(&lease, true)?.release(lease).await })
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> BoxFuture<'_, Result<SystemTime>> {
        Box::pin(async move { self.owner(&lease, true)?.release_after(lease, delay).await })
    }

    fn touch<'a>(&'a self, lease: &'a JobLease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.owner(lease, false)?.touch(lease).await })
    }

    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move { self.owner(&lease, true)?.fail(lease, reason).await })
    }

    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.by_id(move |queue| queue.set_priority(id, priority)))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.by_id(move |queue| queue.cancel(id)))
    }

    fn run_now<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            for queue in &self.queues {
                if queue.run_now(id).await? {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }

    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>> {
        Box::pin(self.listed(max, |queue, max| queue.waiting(max)))
    }

    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>> {
        Box::pin(self.listed(max, |queue, max| queue.dead(max)))
    }

    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.by_id(move |queue| queue.requeue_dead(id)))
    }

    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>> {
        Box::pin(async move {
            let mut sum = QueueStats {
                queue: self.name.clone(),
                counts: Counts::default(),
                days: Vec::new(),
            };
            for queue in &self.queues {
                let stats = queue.stats().await?;
                add_counts(&mut sum.counts, &stats.counts);
                for day in &stats.days {
                    match sum.days.iter_mut().find(|d| d.day == day.day) {
                        Some(same) => same.merge(day),
                        None => sum.days.push(day.clone()),
                    }
                }
            }
            sum.days.sort_by_key(|day| day.day);
            Ok(sum)
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts>> {
        Box::pin(async move {
            let mut sum = Counts::default();
            for queue in &self.queues {
                add_counts(&mut sum, &queue.counts().await?);
            }
            Ok(sum)
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.every(|queue| queue.close()))
    }

    fn pause(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.every(|queue| queue.pause()))
    }

    fn resume(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.every(|queue| queue.resume()))
    }

    fn is_paused(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move {
            for queue in &self.queues {
                if !queue.is_paused().await? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    fn set_limit<'a>(&'a self, name: &'a str, max: u32) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.every(move |queue| queue.set_limit(name, max)))
    }

    fn remove_limit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut removed = false;
            for queue in &self.queues {
                removed |= queue.remove_limit(name).await?;
            }
            Ok(removed)
        })
    }

    fn limits(&self) -> BoxFuture<'_, Result<Vec<super::Limit>>> {
        Box::pin(self.listed(usize::MAX, |queue, _| queue.limits()))
    }

    fn schedule(&self, schedule: Schedule) -> BoxFuture<'_, Result<ScheduleInfo>> {
        self.queues[0].schedule(schedule)
    }

    fn unschedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut removed = false;
            for queue in &self.queues {
                removed |= queue.unschedule(name).await?;
            }
            Ok(removed)
        })
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<ScheduleInfo>>> {
        Box::pin(self.listed(usize::MAX, |queue, _| queue.schedules()))
    }

    fn fire_schedules(&self) -> BoxFuture<'_, Result<usize>> {
        Box::pin(async move {
            let mut fired = 0;
            for queue in &self.queues {
                fired += queue.fire_schedules().await?;
            }
            Ok(fired)
        })
    }

    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<super::JobInfo>>> {
        Box::pin(async move {
            for queue in &self.queues {
                if let Some(info) = queue.job_info(id).await? {
                    return Ok(Some(info));
                }
            }
            Ok(None)
        })
    }
}
