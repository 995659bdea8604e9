//! `AsyncPgJobs`: the PostgreSQL backend for async workers, over
//! tokio-postgres, running the blocking backend's statements
//! ([`Hot`](super::Hot), [`Statements`]) with the same parameters.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::Notify;

mod recurring;

use super::async_link::{self, Link, Pool};
use super::calls::{rules_of, Rules};
use super::errors::db;
use super::history;
use super::statements::{self, Statements};
use super::{check_new, schema, Hot, PgOptions, Tables, CHANNEL, HANDLES, LEASE_POLL};
use crate::error::{Error, Result};
use crate::jobs::async_contract::{AsyncJobQueue, BoxFuture};
use crate::jobs::clock::unix_ms;
use crate::jobs::job::{DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use crate::jobs::recurring::{DueCache, Schedule, ScheduleInfo};
use crate::jobs::stats::{Counts, QueueStats};
use crate::jobs::Backoff;

/// A job queue in a PostgreSQL database for async workers (features
/// `postgres` and `tokio`): the [`AsyncJobQueue`] contract over the same
/// tables, statements and rules as [`PgJobs`](super::PgJobs), natively on tokio-postgres
/// (no call holds a thread while it waits). Clones share the handle.
///
/// **A small pool of connections per handle**, shared by every task using
/// it (at most [`PgOptions::async_connections`], default 4). A call runs
/// on the connection fewest calls are using, and tokio-postgres pipelines
/// the statements given to one
/// connection (a statement is sent without waiting for the answers of
/// those before it). PostgreSQL runs one connection's statements one after
/// the other in one server process, so the pool opens another connection
/// (in the background; the call does not wait for it) only when every one
/// it has is busy: a handle used by one task at a time keeps one
/// connection, and 8 tasks on one handle run their leases and acks on
/// several server processes. The calls that NOTIFY (enqueue, release,
/// nack, requeue) run on the first connection: PostgreSQL serializes the
/// commits of notifying transactions, so spreading them gains nothing.
/// The first connection LISTENs: its driver, polled here, wakes waiting
/// leases on the notifications of this queue (an enqueue, a retry, a job
/// handed back), and they look again at least every 100 ms (a job falling
/// due, or a lease running out, notifies no one); a look cut by a lost
/// connection is made again on a new one while the wait lasts. The
/// statistics' merge, a transaction, runs about once a second on a
/// connection of its own, so no task's statement ever runs inside it. A
/// lost connection is made again on the next call (the listening one) or
/// when calls overlap again (the others), with back-off while the server
/// comes back (5 s at most); a write whose connection broke after it was
/// sent fails with `OutcomeUnknown`.
///
/// **Cancel safety.** A lease runs in a task of its own: a lease future
/// dropped before it completes (in `select!`, on a timeout) never leaves a
/// job leased with no owner and never counts an attempt, even when the
/// server had already committed the lease: the task sees its answer was
/// not taken and hands the job back uncounted (as `release`). If the
/// runtime stops first, the job comes back when its lease ends, as after
/// a crash.
///
/// **Shutdown.** [`close`](AsyncJobQueue::close) hands back the leases the
/// handle gave out and its workers did not settle. Without it, the last
/// clone's drop does the same (their attempts counted), also when a
/// runtime shutting down drops the tasks holding the handle and their
/// leases: on a thread of its own, over a new blocking connection, which
/// the drop waits for (5 s at most).
///
/// ```no_run
/// use dque::jobs::{AsyncJobQueue, AsyncPgJobs, NewJob};
/// # #[tokio::main]
/// # async fn main() -> Result<(), dque::Error> {
/// let queue = AsyncPgJobs::connect("host=/run/postgresql user=app dbname=app", "mail").await?;
/// queue.enqueue(NewJob::new("hello")).await?;
/// if let Some(lease) = queue.lease_timeout(std::time::Duration::from_secs(5)).await? {
///     queue.ack(lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncPgJobs {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AsyncPgJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncPgJobs")
            .field("queue", &self.inner.queue)
            .field("tables", &self.inner.tables)
            .field("lease_time", &self.inner.lease_time)
            .field("max_attempts", &self.inner.max_attempts)
            .field("connections", &self.inner.pool.connections())
            .finish_non_exhaustive()
    }
}

struct Inner {
    queue: String,
    qno: i32,
    tables: Tables,
    hot: Hot,
    sql: Statements,
    url: String,
    /// The connections calls run on (see [`Pool`]).
    pool: Arc<Pool>,
    /// The connection for the statistics' merge (a transaction).
    merger: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
    /// Woken by a notification of this queue, a lost connection, a close.
    news: Arc<Notify>,
    lease_time: Duration,
    max_attempts: u32,
    backoff: Backoff,
    clock: Arc<dyn crate::jobs::Clock>,
    handle: usize,
    closed: AtomicBool,
    merged_at: Mutex<Instant>,
    /// The leases given out and not settled (row, token): handed back at
    /// close, as [`PgJobs`](super::PgJobs) does.
    held: Mutex<HashMap<i64, i64>>,
    /// When the schedules (recurring jobs) may next be due.
    due_schedules: DueCache,
    /// The statements of the history, what it keeps, and this worker.
    kept: history::HistorySql,
    pruning: history::Pruning,
    worker: String,
}

/// The most connections an [`AsyncPgJobs`] handle opens by default: enough
/// for the server to run a few calls at once, few enough that a handle
/// per task does not fill the server's `max_connections` (100 by default)
/// with idle ones (a handle opens its second one only when calls overlap).
pub(super) const DEFAULT_CONNECTIONS: usize = 4;

impl PgOptions {
    /// The most connections an async handle ([`AsyncPgJobs`]) opens
    /// (default 4; at least 1, which pipelines every
    /// task's statements on one connection). Beyond the first, a handle
    /// opens one only when all it has are busy with calls; the statistics'
    /// merge uses one more. The blocking [`PgJobs`](super::PgJobs) ignores it (one
    /// connection per handle).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let queue = dque::jobs::PgOptions::new()
    ///     .async_connections(8)
    ///     .connect_async("host=/run/postgresql user=app dbname=app", "mail")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn async_connections(mut self, most: usize) -> Self {
        self.async_connections = most.max(1);
        self
    }

    /// Connects to the server at `url` and opens queue `queue` for async
    /// workers, making the schema on first use (see [`AsyncPgJobs`]).
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let queue = dque::jobs::PgOptions::new()
    ///     .max_attempts(3)
    ///     .connect_async("host=/run/postgresql user=app dbname=app", "mail")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_async(&self, url: &str, queue: &str) -> Result<AsyncPgJobs> {
        crate::jobs::check_queue_name(queue)?;
        let news = Arc::new(Notify::new());
        let mut client = async_link::connect(url, queue, &news, false, true).await?;
        migrate(&mut client, &self.schema).await?;
        let tables = Tables::new(&self.schema, !self.uncounted);
        let [find, add] = schema::numbering(&tables);
        let qno: i32 = match client.query_opt(&find, &[&queue]).await.map_err(db)? {
            Some(row) => row.get(0),
            None => client.query_one(&add, &[&queue]).await.map_err(db)?.get(0),
        };
        Ok(AsyncPgJobs {
            inner: Arc::new(Inner {
                queue: queue.to_owned(),
                qno,
                kept: history::HistorySql::new(&tables),
                pruning: history::Pruning::new(self.keep_completed),
                worker: self.worker_name(),
                hot: Hot::new(&tables),
                sql: Statements::new(&tables),
                tables,
                url: url.to_owned(),
                pool: Arc::new(Pool::new(url, queue, &news, self.async_connections, client)),
                merger: tokio::sync::Mutex::new(None),
                news,
                lease_time: self.lease_time,
                max_attempts: self.max_attempts,
                backoff: self.backoff,
                clock: Arc::clone(&self.clock),
                handle: HANDLES.fetch_add(1, Ordering::Relaxed),
                closed: AtomicBool::new(false),
                merged_at: Mutex::new(Instant::now()),
                held: Mutex::new(HashMap::new()),
                due_schedules: DueCache::default(),
            }),
        })
    }
}

/// [`schema::migrate`]'s statements, on an async client not shared yet.
async fn migrate(client: &mut tokio_postgres::Client, schema_name: &str) -> Result<()> {
    let migration = schema::Migration::new(schema_name);
    let tx = client.transaction().await.map_err(db)?;
    tx.execute(schema::LOCK, &[&schema_name])
        .await
        .map_err(db)?;
    tx.batch_execute(&migration.prelude).await.map_err(db)?;
    let found: Option<i32> = tx
        .query_opt(&migration.version, &[])
        .await
        .map_err(db)?
        .map(|row| row.get(0));
    for step in migration.steps(schema_name, found)? {
        tx.batch_execute(&step).await.map_err(db)?;
    }
    let version = super::SCHEMA_VERSION;
    let updated = tx
        .execute(&migration.set_version, &[&version])
        .await
        .map_err(db)?;
    if updated == 0 {
        tx.execute(&migration.insert_version, &[&version])
            .await
            .map_err(db)?;
    }
    tx.commit().await.map_err(db)
}

impl AsyncPgJobs {
    /// Connects with default [`PgOptions`].
    ///
    /// # Errors
    ///
    /// As [`PgOptions::connect`].
    pub async fn connect(url: &str, queue: &str) -> Result<AsyncPgJobs> {
        PgOptions::new().connect_async(url, queue).await
    }

    /// Leases up to `max` jobs in a task of its own, so that a caller
    /// dropping this future cannot lose them: leases whose answer was not
    /// taken are handed back uncounted by the task (answer not sent yet)
    /// or by [`Answer`]'s drop (sent, not read).
    async fn take(&self, max: usize) -> Result<Vec<JobLease>> {
        let (answer, taken) = tokio::sync::oneshot::channel();
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            let leases = inner.lease_up_to(max).await;
            if let Err(Ok(leases)) = answer.send(leases) {
                inner.release_all(leases).await;
            }
        });
        let mut taken = Answer {
            inner: Arc::clone(&self.inner),
            taken,
        };
        (&mut taken.taken).await.unwrap_or(Err(Error::Closed))
    }

    async fn lease_until(&self, deadline: Option<Instant>) -> Result<Option<JobLease>> {
        loop {
            // Registered before the look: a notification after it is kept.
            let mut woken = pin!(self.inner.news.notified());
            woken.as_mut().enable();
            match self.take(1).await {
                Ok(mut taken) => {
                    if let Some(lease) = taken.pop() {
                        return Ok(Some(lease));
                    }
                }
                // The connection broke under a look (a server restart):
                // the look is made again on a new connection while there
                // is time. Had the server leased a job for it, that job
                // comes back when its lease ends, as after a crash.
                Err(Error::OutcomeUnknown { .. })
                    if deadline.is_none_or(|d| Instant::now() < d) => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            // A job falling due or a lease running out notifies no one.
            let mut until = now + LEASE_POLL;
            if let Some(d) = deadline {
                until = until.min(d);
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

/// The answer of a lease task. Sent but never read (its future dropped
/// between the send and the read), the jobs it holds are handed back
/// here, uncounted; not sent yet, the task finds the channel closed and
/// hands them back itself.
struct Answer {
    inner: Arc<Inner>,
    taken: tokio::sync::oneshot::Receiver<Result<Vec<JobLease>>>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        // Closed first: a send after it fails (the task hands back); one
        // before it is read here.
        self.taken.close();
        if let Ok(Ok(leases)) = self.taken.try_recv() {
            if leases.is_empty() {
                return;
            }
            let inner = Arc::clone(&self.inner);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(async move { inner.release_all(leases).await }));
            }
        }
    }
}

impl Inner {
    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// The connection of the pool the next statements run on (the least
    /// busy one), made again if it was lost.
    async fn link(&self) -> Result<Arc<Link>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.pool.get().await
    }

    /// The connection for a call that NOTIFYs: the pool's first (see
    /// [`Pool::listener`]).
    async fn notifying_link(&self) -> Result<Arc<Link>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.pool.listener().await
    }

    /// The queue as the calls written once for both handles need it.
    fn rules(&self) -> Rules<'_> {
        rules_of!(self)
    }

    /// Inserts `jobs` (see [`Rules::insert`]) on the notifying connection.
    async fn insert(&self, jobs: Vec<NewJob>, now: SystemTime) -> Result<Vec<Enqueued>> {
        let link = self.notifying_link().await?;
        self.rules().insert(&mut &*link, jobs, now, true).await
    }

    /// Leases up to `max` of the first ready jobs, as [`PgJobs`](super::PgJobs) does.
    async fn lease_up_to(&self, max: usize) -> Result<Vec<JobLease>> {
        let now = self.now();
        // A paused queue's leases fire nothing, as in `PgJobs`.
        if self.due_schedules.due(unix_ms(now)) && !self.is_paused().await.unwrap_or(false) {
            self.fire_due_quietly(now).await;
        }
        let link = self.link().await?;
        self.rules().lease_up_to(&mut &*link, max, now).await
    }

    /// Hands back `leases` taken for a future that was dropped: uncounted.
    async fn release_all(&self, leases: Vec<JobLease>) {
        for lease in leases {
            // A lost connection: the lease ends with its time, counted.
            let _ = self.release(lease).await;
        }
    }

    async fn release(&self, lease: JobLease) -> Result<()> {
        let link = self.notifying_link().await?;
        self.rules().release(&mut &*link, &lease, None).await?;
        let _ = self.notify(&link).await;
        Ok(())
    }

    async fn release_after(&self, lease: JobLease, delay: Duration) -> Result<SystemTime> {
        let now = self.now();
        if delay.is_zero() {
            self.release(lease).await?;
            return Ok(now);
        }
        let at = crate::jobs::job::due_after(now, delay);
        let link = self.notifying_link().await?;
        self.rules().release(&mut &*link, &lease, Some(at)).await?;
        let _ = self.notify(&link).await;
        Ok(at)
    }

    async fn fail_with(
        self: &Arc<Self>,
        lease: JobLease,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        let now = self.now();
        let link = self.link().await?;
        self.rules()
            .fail(&mut &*link, &lease, (reason, message), now)
            .await?;
        self.merge_stats_if_due();
        Ok(())
    }

    async fn notify(&self, link: &Link) -> Result<()> {
        self.rules().notify(&mut &*link).await
    }

    /// Starts a merge of the statistics' log if this handle has not merged
    /// for a second: in a task of its own (a transaction no caller's drop
    /// may cut), whose errors are no caller's (the log keeps its rows).
    fn merge_stats_if_due(self: &Arc<Self>) {
        if self.rules().merge_due() {
            let inner = Arc::clone(self);
            tokio::spawn(async move {
                let _ = inner.merge_stats().await;
            });
        }
    }

    /// As [`PgJobs`](super::PgJobs)' `merge_stats`, on the merger's connection.
    async fn merge_stats(&self) -> Result<()> {
        let mut merger = self.merger.lock().await;
        if merger
            .as_ref()
            .is_none_or(tokio_postgres::Client::is_closed)
        {
            // Its notifications are not listened to: no driver task needed
            // beyond the one polling it.
            let (client, connection) = tokio_postgres::connect(&self.url, NoTlsConnect)
                .await
                .map_err(db)?;
            tokio::spawn(connection);
            *merger = Some(client);
        }
        let client = merger.as_mut().expect("just made");
        let merged = self.merge_once(client).await;
        if merged.is_err() {
            *merger = None;
        }
        merged
    }

    async fn merge_once(&self, client: &mut tokio_postgres::Client) -> Result<()> {
        let tx = client.transaction().await.map_err(db)?;
        self.rules().merge_stats(&mut &tx).await?;
        tx.commit().await.map_err(db)
    }

    /// Hands back every lease this handle holds, their attempts counted.
    async fn hand_back_held(&self) -> Result<()> {
        let held: Vec<(i64, i64)> = self.held.lock().drain().collect();
        if held.is_empty() {
            return Ok(());
        }
        let Some(link) = self.pool.current() else {
            // Lost with the connection: they end with their lease time.
            return Ok(());
        };
        self.rules().hand_back(&mut &*link, held).await
    }
}

/// The merger's connection needs no TLS (as the handle's).
use tokio_postgres::NoTls as NoTlsConnect;

impl AsyncJobQueue for AsyncPgJobs {
    fn name(&self) -> &str {
        &self.inner.queue
    }

    fn enqueue(&self, job: NewJob) -> BoxFuture<'_, Result<Enqueued>> {
        Box::pin(async move {
            check_new(&job)?;
            let now = self.inner.now();
            let mut added = self.inner.insert(vec![job], now).await?;
            Ok(added.remove(0))
        })
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> BoxFuture<'_, Result<Vec<Enqueued>>> {
        Box::pin(async move {
            for job in &jobs {
                check_new(job)?;
            }
            if jobs.is_empty() {
                return Ok(Vec::new());
            }
            let now = self.inner.now();
            self.inner.insert(jobs, now).await
        })
    }

    fn lease(&self) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(async move { Ok(self.take(1).await?.pop()) })
    }

    fn lease_timeout(&self, wait: Duration) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(self.lease_until(Instant::now().checked_add(wait)))
    }

    fn lease_batch(&self, max: usize) -> BoxFuture<'_, Result<Vec<JobLease>>> {
        Box::pin(self.take(max))
    }

    fn ack(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner.rules().ack(&mut &*link, &lease, now).await?;
            inner.merge_stats_if_due();
            // The job is acked: a prune that fails is tried again later.
            let _ = inner.rules().prune_if_due(&mut &*link, now).await;
            Ok(())
        })
    }

    fn nack<'a>(
        &'a self,
        lease: JobLease,
        retry: Retry,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Nacked>> {
        Box::pin(async move {
            let inner = &self.inner;
            if lease.job.attempt >= inner.max_attempts {
                let attempts = lease.job.attempt;
                let message = format!("{reason} (attempts used up: {attempts})");
                inner.fail_with(lease, reason, &message).await?;
                return Ok(Nacked::Dead);
            }
            let delay = match retry {
                Retry::Backoff => inner.backoff.delay(lease.job.attempt),
                Retry::After(delay) => delay,
            };
            let now = inner.now();
            let at = crate::jobs::job::due_after(now, delay);
            let link = inner.notifying_link().await?;
            let retry_at = (!delay.is_zero()).then_some(at);
            inner
                .rules()
                .retry(&mut &*link, &lease, retry_at, now)
                .await?;
            let _ = inner.notify(&link).await;
            inner.merge_stats_if_due();
            Ok(Nacked::Retrying { at })
        })
    }

    fn release(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.release(lease))
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> BoxFuture<'_, Result<SystemTime>> {
        Box::pin(self.inner.release_after(lease, delay))
    }

    fn touch<'a>(&'a self, lease: &'a JobLease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let link = self.inner.link().await?;
            self.inner.rules().touch(&mut &*link, lease).await
        })
    }

    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.inner.fail_with(lease, reason, reason))
    }

    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner
                .rules()
                .set_priority(&mut &*link, id, priority, now)
                .await
        })
    }

    fn run_now<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner.rules().run_now(&mut &*link, id, now).await
        })
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let link = self.inner.link().await?;
            self.inner.rules().cancel(&mut &*link, id).await
        })
    }

    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner.rules().waiting(&mut &*link, max, now).await
        })
    }

    fn waiting_page<'a>(
        &'a self,
        after: Option<&'a crate::jobs::PageCursor>,
        max: usize,
    ) -> BoxFuture<'a, Result<crate::jobs::Page>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner
                .rules()
                .waiting_page(&mut &*link, after, max, now)
                .await
        })
    }

    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>> {
        Box::pin(async move {
            let link = self.inner.link().await?;
            self.inner.rules().dead(&mut &*link, max).await
        })
    }

    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.notifying_link().await?;
            inner.rules().requeue_dead(&mut &*link, id, now).await?;
            let _ = inner.notify(&link).await;
            Ok(())
        })
    }

    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>> {
        Box::pin(async move {
            let counts = self.counts().await?;
            let link = self.inner.link().await?;
            self.inner.rules().stats(&mut &*link, counts).await
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner.rules().counts(&mut &*link, now).await
        })
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            if inner.closed.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            // Waiting leases look again and find the handle closed.
            inner.news.notify_waiters();
            let handed_back = inner.hand_back_held().await;
            // The log is kept if this fails: merged by the next handle.
            let _ = inner.merge_stats().await;
            inner.pool.close();
            handed_back
        })
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.set_paused(true))
    }

    fn resume(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.set_paused(false))
    }

    fn is_paused(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(self.inner.is_paused())
    }

    fn set_limit<'a>(&'a self, name: &'a str, max: u32) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let link = self.inner.notifying_link().await?;
            self.inner.rules().set_limit(&mut &*link, name, max).await
        })
    }

    fn remove_limit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let link = self.inner.notifying_link().await?;
            self.inner.rules().remove_limit(&mut &*link, name).await
        })
    }

    fn limits(&self) -> BoxFuture<'_, Result<Vec<crate::jobs::Limit>>> {
        Box::pin(async move {
            let link = self.inner.link().await?;
            self.inner.rules().limits(&mut &*link).await
        })
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: Schedule) -> BoxFuture<'_, Result<ScheduleInfo>> {
        Box::pin(self.inner.add_schedule(schedule))
    }

    fn unschedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.remove_schedule(name))
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<ScheduleInfo>>> {
        Box::pin(self.inner.list_schedules())
    }

    fn fire_schedules(&self) -> BoxFuture<'_, Result<usize>> {
        Box::pin(async move { self.inner.fire_due(self.inner.now()).await })
    }

    // --- history (issue 27) ---

    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<crate::jobs::JobInfo>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = inner.now();
            let link = inner.link().await?;
            inner.rules().job_info(&mut &*link, id, now).await
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone gone without `close` (also when its runtime shuts
        // down and drops the tasks holding it and their leases): its leases
        // are handed back (counted), as the blocking handle's drop does.
        // Not by a task on the runtime, which a shutting-down runtime
        // cancels (the jobs then came back only when their lease ended):
        // on a thread of its own, with the blocking client, waited for.
        let held: Vec<(i64, i64)> = self.held.lock().drain().collect();
        self.pool.close();
        if held.is_empty() {
            return;
        }
        let (seqs, tokens): (Vec<i64>, Vec<i64>) = held.into_iter().unzip();
        let (url, sql, queue) = (
            self.url.clone(),
            self.sql.hand_back.clone(),
            self.queue.clone(),
        );
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("dque-pg-hand-back".into())
            .spawn(move || {
                // A lost server: the leases end with their time, counted.
                if let Ok(mut client) = postgres::Client::connect(&url, postgres::NoTls) {
                    if client.execute(&sql, &[&seqs, &tokens]).is_ok() {
                        let _ = client.execute(statements::NOTIFY, &[&CHANNEL, &queue]);
                    }
                }
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = finished.recv_timeout(HAND_BACK_WAIT);
        }
    }
}

impl Inner {
    async fn is_paused(&self) -> Result<bool> {
        let link = self.link().await?;
        self.rules().is_paused(&mut &*link).await
    }

    async fn set_paused(&self, paused: bool) -> Result<()> {
        let link = self.notifying_link().await?;
        self.rules().set_paused(&mut &*link, paused).await
    }
}

/// How long a handle's drop waits for its leases to be handed back.
const HAND_BACK_WAIT: Duration = Duration::from_secs(5);
