//! `AsyncPgJobs`: the PostgreSQL backend for async workers, over
//! tokio-postgres, running the blocking backend's statements
//! ([`Hot`](super::Hot), [`Statements`]) with the same parameters.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_postgres::types::ToSql;

use super::async_link::{self, Link};
use super::errors::{db, sent};
use super::history;
use super::statements::{self, Statements};
use super::{
    answers, check_new, day_of, duration_ms, ms, rows, schema, stats_log, sums, taken_in_order,
    Hot, InsertArgs, NewArgs, PgJobs, PgOptions, Tables, CHANNEL, HANDLES, LEASE_POLL, STATS_EVERY,
};
use crate::error::{Error, Result};
use crate::jobs::async_contract::{AsyncJobQueue, BoxFuture};
use crate::jobs::clock::unix_ms;
use crate::jobs::job::{
    new_job_id, DeadJob, Enqueued, JobLease, LeaseToken, Nacked, NewJob, Retry, Waiting,
};
use crate::jobs::stats::{Counts, DayStats, QueueStats};
use crate::jobs::Backoff;

/// A job queue in a PostgreSQL database for async workers (features
/// `postgres` and `tokio`): the [`AsyncJobQueue`] contract over the same
/// tables, statements and rules as [`PgJobs`], natively on tokio-postgres
/// (no call holds a thread while it waits). Clones share the handle.
///
/// **One connection per handle**, shared by every task using it: tokio-
/// postgres pipelines their statements on it (a statement is sent without
/// waiting for the answers of those before it), so 8 tasks on one handle
/// go several times faster than one, without a pool's connections and
/// their server processes. The same connection LISTENs: its driver, polled
/// here, wakes waiting leases on the notifications of this queue (an
/// enqueue, a retry, a job handed back), and they look again at least
/// every 100 ms (a job falling due, or a lease running out, notifies no
/// one); a look cut by a lost connection is made again on a new one
/// while the wait lasts. The statistics' merge, a transaction, runs about once a second
/// on a second connection made for it, so no task's statement ever runs
/// inside it. A lost connection is made again on the next call, with
/// back-off while the server comes back (5 s at most); a write whose
/// connection broke after it was sent fails with `OutcomeUnknown`.
///
/// **Cancel safety.** A lease runs in a task of its own: a lease future
/// dropped before it completes (in `select!`, on a timeout) never leaves a
/// job leased with no owner and never counts an attempt, even when the
/// server had already committed the lease: the task sees its answer was
/// not taken and hands the job back uncounted (as `release`). If the
/// runtime stops first, the job comes back when its lease ends, as after
/// a crash.
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
    /// The connection; `None` or closed: made again by the next call.
    link: Mutex<Option<Arc<Link>>>,
    /// One reconnection at a time.
    connecting: tokio::sync::Mutex<()>,
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
    /// close, as [`PgJobs`] does.
    held: Mutex<HashMap<i64, i64>>,
    /// The statements of the history, what it keeps, and this worker.
    kept: history::HistorySql,
    pruning: history::Pruning,
    worker: String,
}

impl PgOptions {
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
        let mut client = async_link::connect(url, queue, &news, false).await?;
        migrate(&mut client, &self.schema).await?;
        let tables = Tables::new(&self.schema);
        let [find, add] = schema::numbering(&tables.queues);
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
                worker: crate::jobs::history::worker_name(),
                hot: Hot::new(&tables),
                sql: Statements::new(&tables),
                tables,
                url: url.to_owned(),
                link: Mutex::new(Some(Arc::new(async_link::link(client)))),
                connecting: tokio::sync::Mutex::new(()),
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

    /// The connection, made again if it was lost.
    async fn link(&self) -> Result<Arc<Link>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        if let Some(link) = self.current() {
            return Ok(link);
        }
        let _one = self.connecting.lock().await;
        if let Some(link) = self.current() {
            return Ok(link);
        }
        let client = async_link::connect(&self.url, &self.queue, &self.news, true).await?;
        let link = Arc::new(async_link::link(client));
        *self.link.lock() = Some(Arc::clone(&link));
        Ok(link)
    }

    fn current(&self) -> Option<Arc<Link>> {
        self.link
            .lock()
            .as_ref()
            .filter(|link| !link.is_closed())
            .map(Arc::clone)
    }

    /// The row and token of `lease`, checking it is this handle's.
    fn token_of(&self, lease: &JobLease) -> Result<(i64, i64)> {
        if lease.token.queue != self.handle {
            return Err(Error::InvalidJob {
                reason: format!(
                    "the lease of job {:?} was taken from another queue handle; settle it there",
                    lease.job.id
                ),
            });
        }
        Ok((lease.token.part, lease.token.record as i64))
    }

    fn settled(&self, lease: &JobLease) {
        self.held.lock().remove(&lease.token.part);
    }

    async fn insert(&self, jobs: Vec<NewJob>, now: SystemTime) -> Result<Vec<Enqueued>> {
        let link = self.link().await?;
        if jobs.iter().all(|job| job.id.is_none()) {
            return self.insert_new(&link, jobs, now).await;
        }
        let InsertArgs {
            ids,
            caller,
            priorities,
            bodies,
            names,
            values,
            ready,
        } = InsertArgs::new(jobs, now);
        let rows = link
            .query(
                &self.hot.insert,
                &[
                    &self.qno,
                    &ms(now),
                    &ids,
                    &caller,
                    &priorities,
                    &bodies,
                    &names,
                    &values,
                    &ready,
                    &CHANNEL,
                    &self.queue,
                ],
            )
            .await
            .map_err(sent)?;
        Ok(answers(ids, &rows))
    }

    /// As [`PgJobs`]' `insert_new`: jobs without caller ids, their ids made
    /// here, a new set on the rare collision with a caller's id.
    async fn insert_new(
        &self,
        link: &Link,
        jobs: Vec<NewJob>,
        now: SystemTime,
    ) -> Result<Vec<Enqueued>> {
        let count = jobs.len();
        let NewArgs {
            with_headers,
            priorities,
            bodies,
            names,
            values,
            ready,
        } = NewArgs::new(jobs, now);
        let now_ms = ms(now);
        let mut tries = 0;
        loop {
            tries += 1;
            let ids: Vec<String> = (0..count).map(|_| new_job_id()).collect();
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![
                &CHANNEL,
                &self.queue,
                &self.qno,
                &now_ms,
                &ids,
                &priorities,
                &bodies,
                &ready,
            ];
            let sql = if with_headers {
                params.push(&names);
                params.push(&values);
                &self.hot.insert_new_headers
            } else {
                &self.hot.insert_new
            };
            match link.execute(sql, &params).await {
                Ok(_) => return Ok(ids.into_iter().map(Enqueued::Added).collect()),
                Err(e)
                    if tries < 3
                        && e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                }
                Err(e) => return Err(sent(e)),
            }
        }
    }

    /// Leases up to `max` of the first ready jobs, as [`PgJobs`] does.
    async fn lease_up_to(&self, max: usize) -> Result<Vec<JobLease>> {
        let now = self.now();
        let link = self.link().await?;
        let mut leases = Vec::new();
        while leases.len() < max {
            let real_now = PgJobs::real_now_ms();
            let want = i64::try_from(max - leases.len()).unwrap_or(i64::MAX);
            let sql = if want == 1 {
                &self.hot.lease_one
            } else {
                &self.hot.lease_many
            };
            let rows = link
                .query(
                    sql,
                    &[
                        &self.qno,
                        &ms(now),
                        &real_now,
                        &duration_ms(self.lease_time),
                        &want,
                        &day_of(now),
                    ],
                )
                .await
                .map_err(sent)?;
            if rows.is_empty() {
                break;
            }
            let mut buried = false;
            for (seq, token, job) in taken_in_order(rows) {
                if job.attempt > self.max_attempts {
                    // Leased that often by workers that never came back.
                    let reason = format!(
                        "attempts used up: {} attempts, the last ones never ended",
                        job.attempt - 1
                    );
                    self.bury(&link, seq, token, (&reason, &reason), now)
                        .await?;
                    buried = true;
                    continue;
                }
                self.held.lock().insert(seq, token);
                leases.push(JobLease {
                    job,
                    token: LeaseToken {
                        part: seq,
                        record: token as u64,
                        attempt: 0,
                        queue: self.handle,
                        leased_ms: unix_ms(now),
                    },
                });
            }
            if !buried {
                break;
            }
        }
        Ok(leases)
    }

    /// Hands back `leases` taken for a future that was dropped: uncounted.
    async fn release_all(&self, leases: Vec<JobLease>) {
        for lease in leases {
            // A lost connection: the lease ends with its time, counted.
            let _ = self.release(lease).await;
        }
    }

    async fn release(&self, lease: JobLease) -> Result<()> {
        let link = self.link().await?;
        self.on_lease(&link, &lease, &self.sql.release, &[], None)
            .await?;
        self.settled(&lease);
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
        let link = self.link().await?;
        self.on_lease(&link, &lease, &self.sql.snooze, &[&ms(at)], None)
            .await?;
        self.settled(&lease);
        let _ = self.notify(&link).await;
        Ok(at)
    }

    /// As [`PgJobs`]' `on_lease`.
    async fn on_lease(
        &self,
        link: &Link,
        lease: &JobLease,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        retry_on: Option<SystemTime>,
    ) -> Result<()> {
        let (seq, token) = self.token_of(lease)?;
        let real_now = PgJobs::real_now_ms();
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&seq, &token, &real_now];
        all.extend_from_slice(params);
        let day = retry_on.map(day_of);
        let changed = match &day {
            None => link.execute(sql, &all).await.map_err(sent)?,
            Some(day) => {
                all.push(&self.queue);
                all.push(day);
                let row = link.query_one(sql, &all).await.map_err(sent)?;
                row.get::<_, i64>(0) as u64
            }
        };
        match changed {
            0 => Err(PgJobs::lease_lost(lease)),
            _ => Ok(()),
        }
    }

    async fn bury(
        &self,
        link: &Link,
        seq: i64,
        token: i64,
        (reason, message): (&str, &str),
        now: SystemTime,
    ) -> Result<bool> {
        let group = crate::jobs::stats::failure_group(reason);
        let row = link
            .query_one(
                &self.sql.bury,
                &[&seq, &token, &message, &self.queue, &day_of(now), &group],
            )
            .await
            .map_err(sent)?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    async fn fail_with(
        self: &Arc<Self>,
        lease: JobLease,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        let (seq, token) = self.token_of(&lease)?;
        let now = self.now();
        let link = self.link().await?;
        let held = link
            .query_opt(&self.sql.held, &[&seq, &token, &PgJobs::real_now_ms()])
            .await
            .map_err(db)?
            .is_some();
        if !held || !self.bury(&link, seq, token, (reason, message), now).await? {
            return Err(PgJobs::lease_lost(&lease));
        }
        self.settled(&lease);
        self.merge_stats_if_due();
        Ok(())
    }

    async fn notify(&self, link: &Link) -> Result<()> {
        link.execute(statements::NOTIFY, &[&CHANNEL, &self.queue])
            .await
            .map(drop)
            .map_err(sent)
    }

    async fn missing_or_leased(&self, link: &Link, id: &str) -> Result<()> {
        let found = link
            .query_opt(&self.sql.find_live, &[&self.qno, &id])
            .await
            .map_err(db)?;
        rows::missing_or_leased(found, id, PgJobs::real_now_ms())
    }

    /// Starts a merge of the statistics' log if this handle has not merged
    /// for a second: in a task of its own (a transaction no caller's drop
    /// may cut), whose errors are no caller's (the log keeps its rows).
    fn merge_stats_if_due(self: &Arc<Self>) {
        let due = {
            let mut merged_at = self.merged_at.lock();
            let due = merged_at.elapsed() >= STATS_EVERY;
            if due {
                *merged_at = Instant::now();
            }
            due
        };
        if due {
            let inner = Arc::clone(self);
            tokio::spawn(async move {
                let _ = inner.merge_stats().await;
            });
        }
    }

    /// As [`PgJobs`]' `merge_stats`, on the merger's connection.
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
        let sole: bool = tx
            .query_one(statements::MERGE_LOCK, &[&self.tables.log, &self.queue])
            .await
            .map_err(db)?
            .get(0);
        if !sole {
            return Ok(());
        }
        let rows = tx
            .query(&self.sql.merge_take, &[&self.queue])
            .await
            .map_err(db)?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut days: BTreeMap<u64, DayStats> = BTreeMap::new();
        for row in &rows {
            stats_log::add(&mut days, row);
        }
        // Days in order, so two mergers lock the daily rows in one order.
        for (&day, stats) in &days {
            let day = day as i64;
            let (wait, run) = (sums(&stats.wait), sums(&stats.run));
            let retries = stats.retries as i64;
            tx.execute(
                &self.sql.merge_day,
                &[
                    &self.queue,
                    &day,
                    &wait.0,
                    &wait.1,
                    &wait.2,
                    &wait.3,
                    &run.0,
                    &run.1,
                    &run.2,
                    &run.3,
                    &retries,
                ],
            )
            .await
            .map_err(db)?;
            for (group, count) in &stats.failures {
                tx.execute(
                    &self.sql.merge_failure,
                    &[&self.queue, &day, group, &(*count as i64)],
                )
                .await
                .map_err(db)?;
            }
        }
        tx.commit().await.map_err(db)
    }

    /// Hands back every lease this handle holds, their attempts counted.
    async fn hand_back_held(&self) -> Result<()> {
        let held: Vec<(i64, i64)> = self.held.lock().drain().collect();
        if held.is_empty() {
            return Ok(());
        }
        let (seqs, tokens): (Vec<i64>, Vec<i64>) = held.into_iter().unzip();
        let Some(link) = self.current() else {
            // Lost with the connection: they end with their lease time.
            return Ok(());
        };
        link.execute(&self.sql.hand_back, &[&seqs, &tokens])
            .await
            .map_err(sent)?;
        self.notify(&link).await
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
            let (seq, token) = inner.token_of(&lease)?;
            let now = inner.now();
            let ran = ms(now).saturating_sub(lease.token.leased_ms as i64).max(0);
            let link = inner.link().await?;
            let (real_now, day) = (PgJobs::real_now_ms(), day_of(now));
            let (finished, started) = (ms(now), lease.token.leased_ms as i64);
            let row = match inner.pruning.keep.is_none() {
                true => {
                    link.query_one(
                        &inner.hot.ack,
                        &[&seq, &token, &real_now, &inner.queue, &day, &ran],
                    )
                    .await
                }
                false => {
                    link.query_one(
                        &inner.kept.ack_keep,
                        &[
                            &seq,
                            &token,
                            &real_now,
                            &inner.queue,
                            &day,
                            &ran,
                            &finished,
                            &started,
                            &inner.worker,
                        ],
                    )
                    .await
                }
            }
            .map_err(sent);
            if !matches!(row, Err(Error::OutcomeUnknown { .. })) {
                inner.settled(&lease);
            }
            if row?.get::<_, i64>(0) == 0 {
                return Err(PgJobs::lease_lost(&lease));
            }
            inner.merge_stats_if_due();
            if !inner.pruning.keep.is_none() && inner.pruning.due() {
                // The job is acked: a prune that fails is tried again later.
                let cutoff = inner.pruning.cutoff(finished);
                let _ = link
                    .execute(&inner.kept.prune_old, &[&inner.qno, &cutoff])
                    .await;
                let count = inner.pruning.count();
                let _ = link
                    .execute(&inner.kept.prune_over, &[&inner.qno, &count])
                    .await;
            }
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
            let link = inner.link().await?;
            let at_ms = ms(at);
            let (sql, params): (&str, Vec<&(dyn ToSql + Sync)>) = if delay.is_zero() {
                (&inner.sql.nack_now, vec![])
            } else {
                (&inner.sql.nack_later, vec![&at_ms])
            };
            inner
                .on_lease(&link, &lease, sql, &params, Some(now))
                .await?;
            inner.settled(&lease);
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
            let inner = &self.inner;
            let link = inner.link().await?;
            let until = PgJobs::real_now_ms().saturating_add(duration_ms(inner.lease_time));
            inner
                .on_lease(&link, lease, &inner.sql.touch, &[&until], None)
                .await
        })
    }

    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.inner.fail_with(lease, reason, reason))
    }

    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = ms(inner.now());
            let link = inner.link().await?;
            let changed = link
                .execute(
                    &inner.sql.set_priority,
                    &[&inner.qno, &id, &priority, &now, &PgJobs::real_now_ms()],
                )
                .await
                .map_err(sent)?;
            if changed > 0 {
                return Ok(());
            }
            inner.missing_or_leased(&link, id).await
        })
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let link = inner.link().await?;
            let gone: i64 = link
                .query_one(
                    &inner.sql.cancel,
                    &[&inner.qno, &id, &PgJobs::real_now_ms(), &inner.queue],
                )
                .await
                .map_err(sent)?
                .get(0);
            if gone > 0 {
                return Ok(());
            }
            inner.missing_or_leased(&link, id).await
        })
    }

    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = ms(inner.now());
            let link = inner.link().await?;
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let real_now = PgJobs::real_now_ms();
            let found = link
                .query(&inner.sql.waiting, &[&inner.qno, &now, &limit])
                .await
                .map_err(db)?;
            Ok(found
                .iter()
                .map(|row| rows::waiting_of(row, now, real_now))
                .collect())
        })
    }

    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let link = inner.link().await?;
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let found = link
                .query(&inner.sql.dead, &[&inner.qno, &limit])
                .await
                .map_err(db)?;
            Ok(found.iter().map(rows::dead_of).collect())
        })
    }

    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = ms(inner.now());
            let link = inner.link().await?;
            let requeued = link
                .execute(&inner.sql.requeue_dead, &[&inner.qno, &id, &now])
                .await;
            rows::requeued(requeued, id)?;
            let _ = inner.notify(&link).await;
            Ok(())
        })
    }

    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>> {
        Box::pin(async move {
            let inner = &self.inner;
            let counts = self.counts().await?;
            let link = inner.link().await?;
            let days = link
                .query(&inner.sql.stats_days, &[&inner.queue])
                .await
                .map_err(db)?;
            let failures = link
                .query(&inner.sql.stats_failures, &[&inner.queue])
                .await
                .map_err(db)?;
            let unmerged = link
                .query(&inner.sql.stats_unmerged, &[&inner.queue, &inner.qno])
                .await
                .map_err(db)?;
            Ok(QueueStats {
                queue: inner.queue.clone(),
                counts,
                days: rows::days_of(&days, &failures, &unmerged),
            })
        })
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = ms(inner.now());
            let link = inner.link().await?;
            let row = link
                .query_one(
                    &inner.sql.counts,
                    &[&inner.qno, &now, &PgJobs::real_now_ms()],
                )
                .await
                .map_err(db)?;
            Ok(rows::counts_of(&row))
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
            *inner.link.lock() = None;
            handed_back
        })
    }

    // --- history (issue 27) ---

    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<crate::jobs::JobInfo>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let now = ms(inner.now());
            let link = inner.link().await?;
            let row = link
                .query_opt(&inner.kept.job_info, &[&inner.qno, &id])
                .await
                .map_err(db)?;
            Ok(row.and_then(|row| {
                history::info_of(
                    &row,
                    &inner.queue,
                    &inner.pruning,
                    now,
                    PgJobs::real_now_ms(),
                )
            }))
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone gone without `close`: its leases are handed back
        // (counted) if a runtime is there to send the statement.
        let held: Vec<(i64, i64)> = self.held.lock().drain().collect();
        let link = self.link.lock().take();
        if let (false, Some(link), Ok(runtime)) =
            (held.is_empty(), link, tokio::runtime::Handle::try_current())
        {
            let sql = self.sql.hand_back.clone();
            let (seqs, tokens): (Vec<i64>, Vec<i64>) = held.into_iter().unzip();
            drop(runtime.spawn(async move {
                let _ = link.execute(&sql, &[&seqs, &tokens]).await;
            }));
        }
    }
}
