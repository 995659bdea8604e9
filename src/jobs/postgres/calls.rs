//! The calls of both PostgreSQL handles, written once: which statement a
//! call runs with which parameters, what its rows mean, and what it
//! decides from them. The blocking handle ([`PgJobs`]) runs them on its
//! connection, whose futures are done when made ([`ready`]); the async one
//! (`AsyncPgJobs`) on a link of its pool. What differs stays with each
//! handle: which connection a call runs on, and the work after it (the
//! statistics' merge, `NOTIFY`'s connection, the schedules).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use postgres::types::ToSql;
use postgres::Row;

use super::errors::{db, sent};
use super::history::{self, HistorySql, Pruning};
use super::statements::{self, Statements};
use super::{
    added_ids, answers, day_of, duration_ms, limits, ms, not_added, rows, stats_log, sums,
    taken_in_order, Db, Hot, InsertArgs, NewArgs, PgJobs, Tables, CHANNEL, STATS_EVERY,
};
use crate::error::{Error, Result};
use crate::jobs::clock::unix_ms;
use crate::jobs::job::{new_job_id, DeadJob, Enqueued, JobLease, LeaseToken, NewJob, Waiting};
use crate::jobs::stats::{Counts, DayStats, QueueStats};
use crate::jobs::{JobInfo, Limit};

/// What the calls run statements on.
pub(super) trait Sql {
    /// Runs `sql`; its rows.
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, postgres::Error>>;

    /// Runs `sql`; the rows it changed.
    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, postgres::Error>>;
}

/// A blocking connection (the handle's own, or a caller's transaction):
/// each statement is done when its future is made.
pub(super) struct Blocking<'a>(pub(super) &'a mut dyn Db);

impl Sql for Blocking<'_> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, postgres::Error>> {
        std::future::ready(self.0.query(sql, params))
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, postgres::Error>> {
        std::future::ready(self.0.execute(sql, params))
    }
}

/// A link of the async handle's pool runs the calls' statements.
#[cfg(feature = "tokio")]
impl Sql for &super::async_link::Link {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, postgres::Error>> {
        super::async_link::Link::query(self, sql, params)
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, postgres::Error>> {
        super::async_link::Link::execute(self, sql, params)
    }
}

/// The async handle's statistics' merge runs in a transaction.
#[cfg(feature = "tokio")]
impl Sql for &tokio_postgres::Transaction<'_> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, postgres::Error>> {
        tokio_postgres::Transaction::query(self, sql, params)
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, postgres::Error>> {
        tokio_postgres::Transaction::execute(self, sql, params)
    }
}

/// The value of `future`, which must be ready at its first poll (a call
/// over [`Blocking`] is: its statements ran when their futures were made).
pub(super) fn ready<T>(future: impl Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("a blocking connection never waits"),
    }
}

/// The first row of `rows` (a statement that returns one).
fn one(rows: Vec<Row>) -> Row {
    rows.into_iter()
        .next()
        .expect("the statement returns one row")
}

/// The [`Rules`] of a handle (`PgJobs` or the async one's state), whose
/// parts have the same names in both.
macro_rules! rules_of {
    ($handle:expr) => {
        $crate::jobs::postgres::calls::Rules {
            queue: &$handle.queue,
            qno: $handle.qno,
            tables: &$handle.tables,
            hot: &$handle.hot,
            sql: &$handle.sql,
            lease_time: $handle.lease_time,
            max_attempts: $handle.max_attempts,
            handle: $handle.handle,
            held: &$handle.held,
            kept: &$handle.kept,
            pruning: &$handle.pruning,
            worker: &$handle.worker,
            merged_at: &$handle.merged_at,
        }
    };
}
pub(super) use rules_of;

/// A handle's queue, as its calls need it: the same parts in both handles.
pub(super) struct Rules<'a> {
    pub(super) queue: &'a str,
    pub(super) qno: i32,
    pub(super) tables: &'a Tables,
    pub(super) hot: &'a Hot,
    pub(super) sql: &'a Statements,
    pub(super) lease_time: Duration,
    pub(super) max_attempts: u32,
    pub(super) handle: usize,
    pub(super) held: &'a Mutex<HashMap<i64, i64>>,
    pub(super) kept: &'a HistorySql,
    pub(super) pruning: &'a Pruning,
    /// The worker name leases are taken under (kept in the row).
    pub(super) worker: &'a str,
    pub(super) merged_at: &'a Mutex<Instant>,
}

impl Rules<'_> {
    /// Whether the statistics' log is due a merge (this handle has not
    /// merged for [`STATS_EVERY`]); if so, the next is due from now.
    pub(super) fn merge_due(&self) -> bool {
        let mut merged_at = self.merged_at.lock();
        let due = merged_at.elapsed() >= STATS_EVERY;
        if due {
            *merged_at = Instant::now();
        }
        due
    }

    /// Inserts `jobs` with one statement; the answer for each, in order.
    /// `own`: on the handle's connection (not in a caller's transaction,
    /// which an error would abort), where jobs without caller ids take
    /// [`insert_new`](Self::insert_new).
    pub(super) async fn insert(
        &self,
        conn: &mut impl Sql,
        jobs: Vec<NewJob>,
        now: SystemTime,
        own: bool,
    ) -> Result<Vec<Enqueued>> {
        if own && jobs.iter().all(|job| job.id.is_none()) {
            return self.insert_new(conn, jobs, now).await;
        }
        let InsertArgs {
            ids,
            caller,
            priorities,
            bodies,
            names,
            values,
            ready,
            until,
            states,
        } = InsertArgs::new(jobs, now);
        let now_ms = ms(now);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.qno,
            &now_ms,
            &ids,
            &caller,
            &priorities,
            &bodies,
            &names,
            &values,
            &ready,
            &CHANNEL,
            &self.queue,
        ];
        let statement = match (until.iter().any(|&u| u > 0), own) {
            (true, own) => {
                params.push(&until);
                params.push(&states);
                match own {
                    true => &self.hot.insert_holding,
                    false => &self.hot.insert_holding_in,
                }
            }
            (false, true) => &self.hot.insert,
            (false, false) => &self.hot.insert_in,
        };
        let rows = conn.query(statement, &params).await.map_err(sent)?;
        let added = added_ids(&rows);
        let missing = not_added(&ids, &caller, &added);
        let held = match missing.is_empty() {
            true => Vec::new(),
            false => conn
                .query(&self.hot.held, &[&self.qno, &now_ms, &missing])
                .await
                .map_err(sent)?,
        };
        Ok(answers(ids, added, &held))
    }

    /// Inserts jobs that have no caller id, with one statement. Their ids
    /// are made here (a random prefix per process and a counter), so no
    /// row can be queued under them already: a plain `INSERT` without `ON
    /// CONFLICT` (whose speculative insertion and returned ids cost about
    /// as much per row as the insert itself). The unique index still
    /// checks: should a made-up id equal a caller's id, the statement
    /// fails, having added nothing, and is made again with new ids. A
    /// batch without headers sends no header arrays.
    async fn insert_new(
        &self,
        conn: &mut impl Sql,
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
        // Another collision with the new ids would not be chance: the
        // third try reports it.
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
            match conn.execute(sql, &params).await {
                Ok(_) => return Ok(ids.into_iter().map(Enqueued::Added).collect()),
                Err(e)
                    if tries < 3
                        && e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => {}
                Err(e) => return Err(sent(e)),
            }
        }
    }

    /// Leases up to `max` of the first ready jobs (or ones whose lease
    /// ended) at `now` under the handle's worker name, without waiting; a
    /// job leased more often than its attempts allow (by workers that
    /// never came back) is buried instead. (Firing due schedules first is
    /// the handle's.)
    pub(super) async fn lease_up_to(
        &self,
        conn: &mut impl Sql,
        max: usize,
        now: SystemTime,
    ) -> Result<Vec<JobLease>> {
        let mut leases = Vec::new();
        while leases.len() < max {
            let real_now = PgJobs::real_now_ms();
            let want = i64::try_from(max - leases.len()).unwrap_or(i64::MAX);
            let sql = if want == 1 {
                &self.hot.lease_one
            } else {
                &self.hot.lease_many
            };
            let rows = conn
                .query(
                    sql,
                    &[
                        &self.qno,
                        &ms(now),
                        &real_now,
                        &duration_ms(self.lease_time),
                        &want,
                        &day_of(now),
                        &self.worker,
                    ],
                )
                .await
                .map_err(sent)?;
            // Nothing: the queue may be paused or limited, whose leases
            // the lease statement leaves to `lease_limited` (one a call).
            let (rows, limited) = match rows.is_empty() {
                false => (rows, false),
                true => (
                    conn.query(
                        &limits::lease(self.tables),
                        &[
                            &self.qno,
                            &ms(now),
                            &real_now,
                            &duration_ms(self.lease_time),
                            &day_of(now),
                        ],
                    )
                    .await
                    .map_err(sent)?,
                    true,
                ),
            };
            if rows.is_empty() {
                break;
            }
            let taken = taken_in_order(rows);
            if limited {
                // Who holds them is shown, not relied on: the leases stand
                // (and the call answers them) if this fails.
                let seqs: Vec<i64> = taken.iter().map(|(seq, _, _)| *seq).collect();
                let _ = conn
                    .execute(&self.hot.mark_leased, &[&seqs, &ms(now), &self.worker])
                    .await;
            }
            let mut buried = false;
            for (seq, token, job) in taken {
                if job.attempt > self.max_attempts {
                    // Leased that often by workers that never came back.
                    let reason = format!(
                        "attempts used up: {} attempts, the last ones never ended",
                        job.attempt - 1
                    );
                    self.bury(conn, seq, token, (&reason, &reason), now).await?;
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
                        hold: None,
                    },
                });
            }
            if !buried && !limited {
                break;
            }
        }
        Ok(leases)
    }

    /// The row and token of `lease`, checking it is this handle's.
    pub(super) fn token_of(&self, lease: &JobLease) -> Result<(i64, i64)> {
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

    /// Forgets `lease` (settled, or lost).
    pub(super) fn settled(&self, lease: &JobLease) {
        self.held.lock().remove(&lease.token.part);
    }

    /// Acks `lease` at `now` (keeping the job in the history if the
    /// handle keeps completed jobs); `LeaseLost` if it no longer holds.
    /// The lease is forgotten unless the outcome is unknown.
    pub(super) async fn ack(
        &self,
        conn: &mut impl Sql,
        lease: &JobLease,
        now: SystemTime,
    ) -> Result<()> {
        let (seq, token) = self.token_of(lease)?;
        let ran = ms(now).saturating_sub(lease.token.leased_ms as i64).max(0);
        let (real_now, day) = (PgJobs::real_now_ms(), day_of(now));
        let rows = match self.pruning.keep.is_none() {
            true => {
                conn.query(
                    &self.hot.ack,
                    &[&seq, &token, &real_now, &self.queue, &day, &ran],
                )
                .await
            }
            false => {
                let (finished, started) = (ms(now), lease.token.leased_ms as i64);
                conn.query(
                    &self.kept.ack_keep,
                    &[
                        &seq,
                        &token,
                        &real_now,
                        &self.queue,
                        &day,
                        &ran,
                        &finished,
                        &started,
                        &self.worker,
                    ],
                )
                .await
            }
        }
        .map_err(sent);
        if !matches!(rows, Err(Error::OutcomeUnknown { .. })) {
            self.settled(lease);
        }
        if one(rows?).get::<_, i64>(0) == 0 {
            return Err(PgJobs::lease_lost(lease));
        }
        Ok(())
    }

    /// Deletes completed rows past what is kept (a batch of each kind), if
    /// the handle keeps completed jobs and a prune is due.
    pub(super) async fn prune_if_due(&self, conn: &mut impl Sql, now: SystemTime) -> Result<()> {
        if self.pruning.keep.is_none() || !self.pruning.due() {
            return Ok(());
        }
        let cutoff = self.pruning.cutoff(ms(now));
        conn.query(&self.kept.prune_old, &[&self.qno, &cutoff])
            .await
            .map_err(db)?;
        let count = self.pruning.count();
        conn.query(&self.kept.prune_over, &[&self.qno, &count])
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Makes a leased row a dead letter with `message`, counted under
    /// `reason`'s failure group; whether it was still leased.
    pub(super) async fn bury(
        &self,
        conn: &mut impl Sql,
        seq: i64,
        token: i64,
        (reason, message): (&str, &str),
        now: SystemTime,
    ) -> Result<bool> {
        let group = crate::jobs::stats::failure_group(reason);
        let rows = conn
            .query(
                &self.sql.bury,
                &[&seq, &token, &message, &self.queue, &day_of(now), &group],
            )
            .await
            .map_err(sent)?;
        Ok(one(rows).get::<_, i64>(0) > 0)
    }

    /// Runs `sql` (one of [`Statements`]' updates of a leased row: `$1`
    /// seq, `$2` token, `$3` the real time, then `params`) if the lease
    /// still holds; `LeaseLost` if not. With `retry_on`, the statement
    /// logs a retry for that day (its last two parameters, the queue's
    /// name and the day, are added here) and returns the count changed.
    async fn on_lease(
        &self,
        conn: &mut impl Sql,
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
            None => conn.execute(sql, &all).await.map_err(sent)?,
            Some(day) => {
                all.push(&self.queue);
                all.push(day);
                let rows = conn.query(sql, &all).await.map_err(sent)?;
                one(rows).get::<_, i64>(0) as u64
            }
        };
        match changed {
            0 => Err(PgJobs::lease_lost(lease)),
            _ => Ok(()),
        }
    }

    /// Gives `lease` back uncounted: ready now, or at `at` after the jobs
    /// already due then (a snooze). Forgets it.
    pub(super) async fn release(
        &self,
        conn: &mut impl Sql,
        lease: &JobLease,
        at: Option<SystemTime>,
    ) -> Result<()> {
        match at {
            None => {
                self.on_lease(conn, lease, &self.sql.release, &[], None)
                    .await?
            }
            Some(at) => {
                self.on_lease(conn, lease, &self.sql.snooze, &[&ms(at)], None)
                    .await?
            }
        }
        self.settled(lease);
        Ok(())
    }

    /// Retries `lease` at `at` (none: now, in place), counting the
    /// attempt and a retry for `now`'s day, and forgets it.
    pub(super) async fn retry(
        &self,
        conn: &mut impl Sql,
        lease: &JobLease,
        at: Option<SystemTime>,
        now: SystemTime,
    ) -> Result<()> {
        let at_ms = at.map(ms);
        let (sql, params): (&str, Vec<&(dyn ToSql + Sync)>) = match &at_ms {
            None => (&self.sql.nack_now, vec![]),
            Some(at_ms) => (&self.sql.nack_later, vec![at_ms]),
        };
        self.on_lease(conn, lease, sql, &params, Some(now)).await?;
        self.settled(lease);
        Ok(())
    }

    /// Extends `lease` by the handle's lease time from now.
    pub(super) async fn touch(&self, conn: &mut impl Sql, lease: &JobLease) -> Result<()> {
        let until = PgJobs::real_now_ms().saturating_add(duration_ms(self.lease_time));
        self.on_lease(conn, lease, &self.sql.touch, &[&until], None)
            .await
    }

    /// Dead-letters `lease` with `message` (counted under `reason`'s
    /// failure group) if it still holds; `LeaseLost` if not. Forgets it.
    pub(super) async fn fail(
        &self,
        conn: &mut impl Sql,
        lease: &JobLease,
        (reason, message): (&str, &str),
        now: SystemTime,
    ) -> Result<()> {
        let (seq, token) = self.token_of(lease)?;
        let held = !conn
            .query(&self.sql.held, &[&seq, &token, &PgJobs::real_now_ms()])
            .await
            .map_err(db)?
            .is_empty();
        if !held || !self.bury(conn, seq, token, (reason, message), now).await? {
            return Err(PgJobs::lease_lost(lease));
        }
        self.settled(lease);
        Ok(())
    }

    /// Hands back `held` leases (row, token), their attempts counted, and
    /// tells the listeners.
    pub(super) async fn hand_back(&self, conn: &mut impl Sql, held: Vec<(i64, i64)>) -> Result<()> {
        let (seqs, tokens): (Vec<i64>, Vec<i64>) = held.into_iter().unzip();
        conn.execute(&self.sql.hand_back, &[&seqs, &tokens])
            .await
            .map_err(sent)?;
        self.notify(conn).await
    }

    /// Tells the listeners of this queue to look.
    pub(super) async fn notify(&self, conn: &mut impl Sql) -> Result<()> {
        conn.execute(statements::NOTIFY, &[&CHANNEL, &self.queue])
            .await
            .map(drop)
            .map_err(sent)
    }

    /// The answer for a job `id` that no row matched: `JobLeased` if a
    /// worker holds it, `NoSuchJob` if there is none, else `Ok` (waiting,
    /// and already as asked).
    pub(super) async fn missing_or_leased(&self, conn: &mut impl Sql, id: &str) -> Result<()> {
        let found = conn
            .query(&self.sql.find_live, &[&self.qno, &id])
            .await
            .map_err(db)?;
        rows::missing_or_leased(found.into_iter().next(), id, PgJobs::real_now_ms())
    }

    /// Sets the priority of waiting job `id` at `now`.
    pub(super) async fn set_priority(
        &self,
        conn: &mut impl Sql,
        id: &str,
        priority: i32,
        now: SystemTime,
    ) -> Result<()> {
        let changed = conn
            .execute(
                &self.sql.set_priority,
                &[&self.qno, &id, &priority, &ms(now), &PgJobs::real_now_ms()],
            )
            .await
            .map_err(sent)?;
        if changed > 0 {
            return Ok(());
        }
        self.missing_or_leased(conn, id).await
    }

    /// Makes scheduled job `id` ready at `now`; whether it is waiting.
    pub(super) async fn run_now(
        &self,
        conn: &mut impl Sql,
        id: &str,
        now: SystemTime,
    ) -> Result<bool> {
        let waiting = conn
            .execute(
                &self.sql.run_now,
                &[&self.qno, &id, &ms(now), &PgJobs::real_now_ms()],
            )
            .await
            .map_err(sent)?;
        Ok(waiting > 0)
    }

    /// Removes waiting job `id`.
    pub(super) async fn cancel(&self, conn: &mut impl Sql, id: &str) -> Result<()> {
        let rows = conn
            .query(
                &self.sql.cancel,
                &[&self.qno, &id, &PgJobs::real_now_ms(), &self.queue],
            )
            .await
            .map_err(sent)?;
        if one(rows).get::<_, i64>(0) > 0 {
            return Ok(());
        }
        self.missing_or_leased(conn, id).await
    }

    /// Up to `max` dead letters.
    pub(super) async fn dead(&self, conn: &mut impl Sql, max: usize) -> Result<Vec<DeadJob>> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let found = conn
            .query(&self.sql.dead, &[&self.qno, &limit])
            .await
            .map_err(db)?;
        Ok(found.iter().map(rows::dead_of).collect())
    }

    /// Queues dead letter `id` again at `now`, its attempts reset.
    pub(super) async fn requeue_dead(
        &self,
        conn: &mut impl Sql,
        id: &str,
        now: SystemTime,
    ) -> Result<()> {
        let requeued = conn
            .query(&self.sql.requeue_dead, &[&self.qno, &id, &ms(now)])
            .await
            .map(|rows| one(rows).get::<_, i64>(0) as u64);
        rows::requeued(requeued, id)
    }

    /// What [`JobQueue::job_info`](crate::jobs::JobQueue::job_info)
    /// answers for `id` at `now`: a live row, or a completed one kept.
    pub(super) async fn job_info(
        &self,
        conn: &mut impl Sql,
        id: &str,
        now: SystemTime,
    ) -> Result<Option<JobInfo>> {
        let found = conn
            .query(
                &self.kept.job_info,
                &[&self.qno, &id, &self.pruning.count()],
            )
            .await
            .map_err(db)?;
        Ok(found.into_iter().next().and_then(|row| {
            history::info_of(
                &row,
                self.queue,
                self.pruning,
                ms(now),
                PgJobs::real_now_ms(),
            )
        }))
    }

    /// Whether the queue is paused.
    pub(super) async fn is_paused(&self, conn: &mut impl Sql) -> Result<bool> {
        let rows = conn
            .query(&limits::paused(self.tables), &[&self.qno])
            .await
            .map_err(sent)?;
        Ok(one(rows).get(0))
    }

    /// Pauses or resumes the queue, and tells the listeners.
    pub(super) async fn set_paused(&self, conn: &mut impl Sql, paused: bool) -> Result<()> {
        conn.execute(&limits::pause(self.tables), &[&self.qno, &paused])
            .await
            .map_err(sent)?;
        self.notify(conn).await
    }

    /// Sets limit `name` to `max` leases at once.
    pub(super) async fn set_limit(&self, conn: &mut impl Sql, name: &str, max: u32) -> Result<()> {
        let max = limits::set_args(name, max)?;
        conn.execute(&limits::set(self.tables), &[&self.qno, &name, &max])
            .await
            .map_err(sent)?;
        // A higher maximum may let blocked workers take jobs now.
        self.notify(conn).await
    }

    /// Removes limit `name`; whether there was one.
    pub(super) async fn remove_limit(&self, conn: &mut impl Sql, name: &str) -> Result<bool> {
        crate::jobs::check_limit_name(name)?;
        let rows = conn
            .query(&limits::remove(self.tables), &[&self.qno, &name])
            .await
            .map_err(sent)?;
        self.notify(conn).await?;
        Ok(one(rows).get(0))
    }

    /// The queue's limits, each with the leases it holds now.
    pub(super) async fn limits(&self, conn: &mut impl Sql) -> Result<Vec<Limit>> {
        let rows = conn
            .query(
                &limits::list(self.tables),
                &[&self.qno, &PgJobs::real_now_ms()],
            )
            .await
            .map_err(sent)?;
        Ok(rows.iter().map(limits::limit_of).collect())
    }

    /// Up to `max` waiting jobs at `now`, ready ones first.
    pub(super) async fn waiting(
        &self,
        conn: &mut impl Sql,
        max: usize,
        now: SystemTime,
    ) -> Result<Vec<Waiting>> {
        let now = ms(now);
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let real_now = PgJobs::real_now_ms();
        let found = conn
            .query(&self.sql.waiting, &[&self.qno, &now, &limit])
            .await
            .map_err(db)?;
        Ok(found
            .iter()
            .map(|row| rows::waiting_of(row, now, real_now))
            .collect())
    }

    /// The queue's counts at `now`.
    pub(super) async fn counts(&self, conn: &mut impl Sql, now: SystemTime) -> Result<Counts> {
        let rows = conn
            .query(
                &self.sql.counts,
                &[&self.qno, &ms(now), &PgJobs::real_now_ms()],
            )
            .await
            .map_err(db)?;
        Ok(rows::counts_of(&one(rows)))
    }

    /// The queue's statistics with `counts`: the daily rows, their
    /// failure groups, and the log not merged yet.
    pub(super) async fn stats(&self, conn: &mut impl Sql, counts: Counts) -> Result<QueueStats> {
        let days = conn
            .query(&self.sql.stats_days, &[&self.queue])
            .await
            .map_err(db)?;
        let failures = conn
            .query(&self.sql.stats_failures, &[&self.queue])
            .await
            .map_err(db)?;
        let unmerged = conn
            .query(&self.sql.stats_unmerged, &[&self.queue, &self.qno])
            .await
            .map_err(db)?;
        Ok(QueueStats {
            queue: self.queue.to_owned(),
            counts,
            days: rows::days_of(&days, &failures, &unmerged),
        })
    }

    /// Merges the statistics' log into the daily rows, in the transaction
    /// `conn` runs in (the caller commits it): each row is counted once,
    /// by one merger (a second one at the same time leaves the work to the
    /// first; one started by another dque without that rule would wait for
    /// the rows, then skip those already gone).
    pub(super) async fn merge_stats(&self, conn: &mut impl Sql) -> Result<()> {
        if let Some(fold) = &self.sql.fold_counts {
            conn.execute(fold, &[&self.qno]).await.map_err(db)?;
        }
        // One merger of a queue at a time; the others go on at once (their
        // rows are merged by this one or the next).
        let locked = conn
            .query(statements::MERGE_LOCK, &[&self.tables.log, &self.queue])
            .await
            .map_err(db)?;
        if !one(locked).get::<_, bool>(0) {
            return Ok(());
        }
        let rows = conn
            .query(&self.sql.merge_take, &[&self.queue])
            .await
            .map_err(db)?;
        let mut days: BTreeMap<u64, DayStats> = BTreeMap::new();
        for row in &rows {
            stats_log::add(&mut days, row);
        }
        // Days in order, so two mergers lock the daily rows in one order.
        for (&day, stats) in &days {
            let day = day as i64;
            let (wait, run) = (sums(&stats.wait), sums(&stats.run));
            let retries = stats.retries as i64;
            conn.execute(
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
                conn.execute(
                    &self.sql.merge_failure,
                    &[&self.queue, &day, group, &(*count as i64)],
                )
                .await
                .map_err(db)?;
            }
        }
        Ok(())
    }
}
