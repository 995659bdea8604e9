//! The Jobs API over PostgreSQL: [`PgJobs`] (feature `postgres`), the
//! relational work-queue pattern. A job is a row; a worker claims the next
//! one with `FOR UPDATE SKIP LOCKED`, so workers on many hosts never wait
//! for each other nor take the same job; a lease is a deadline in the row,
//! so a worker that dies simply lets it pass and another takes the job.

#[cfg(feature = "tokio")]
mod async_link;
#[cfg(feature = "tokio")]
mod async_pg;
mod calls;
mod connection;
mod counts;
mod errors;
mod held;
mod history;
mod limits;
mod paging;
mod recurring;
mod rows;
mod schema;
mod search;
mod statements;
mod stats_log;
mod unique;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Mutex, MutexGuard};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row};

use calls::{ready, rules_of, Blocking, Rules};
use connection::Conn;
use errors::{db, sent};
use statements::Statements;

#[cfg(feature = "tokio")]
pub use async_pg::AsyncPgJobs;
pub use schema::SCHEMA_VERSION;

use super::clock::{from_unix_ms, unix_ms, Clock, SystemClock};
use super::job::{new_job_id, DeadJob, Enqueued, Job, JobLease, Nacked, NewJob, Retry, Waiting};
use super::recurring::{DueCache, Schedule, ScheduleInfo};
use super::stats::{Counts, QueueStats, Timing};
use super::{Backoff, JobQueue};
use crate::error::{Error, Result};

/// The channel every enqueue notifies (the payload: the queue's name).
const CHANNEL: &str = "dque_jobs";

/// How often a blocked lease looks again without a notification (one may
/// be missed while a connection is lost, and leases end silently).
const LEASE_POLL: Duration = Duration::from_millis(100);

/// The longest body a job may have: what an embedded queue takes by default.
const MAX_BODY: usize = crate::options::DEFAULT_MAX_ITEM_BYTES as usize;

/// Options of a [`PgJobs`] handle.
///
/// ```no_run
/// use std::time::Duration;
/// use dque::jobs::{JobQueue, NewJob, PgOptions};
/// # fn main() -> Result<(), dque::Error> {
/// let queue = PgOptions::new()
///     .lease_time(Duration::from_secs(60))
///     .max_attempts(3)
///     .connect("host=/run/postgresql user=app dbname=app", "mail")?;
/// queue.enqueue(NewJob::new("hello"))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgOptions {
    schema: String,
    lease_time: Duration,
    max_attempts: u32,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    /// The most connections an async handle opens (see `AsyncPgJobs`).
    #[cfg(feature = "tokio")]
    async_connections: usize,
    keep_completed: super::KeepCompleted,
    worker: Option<String>,
    /// Statements without the kept counts (the benchmark's baseline).
    uncounted: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: "dque".into(),
            lease_time: crate::options::DEFAULT_VISIBILITY_TIMEOUT,
            max_attempts: u32::from(crate::options::DEFAULT_MAX_ATTEMPTS),
            backoff: Backoff::default(),
            clock: Arc::new(SystemClock),
            #[cfg(feature = "tokio")]
            async_connections: async_pg::DEFAULT_CONNECTIONS,
            keep_completed: super::KeepCompleted::DEFAULT,
            worker: None,
            uncounted: false,
        }
    }
}

impl PgOptions {
    /// The worker name this handle leases under (default `host:pid`): kept
    /// in each leased row, so [`JobQueue::leases`] shows who holds what,
    /// and in a completed row as the worker that ran it.
    ///
    /// ```
    /// let options = dque::jobs::PgOptions::new().worker("mailer-1");
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    /// For the benchmark `pg_counts` only: the handle's statements keep
    /// no counts, so its changes make `counts()` wrong for every handle
    /// of the schema. What the kept counts cost the workers is measured
    /// against such a handle on the same server.
    #[doc(hidden)]
    #[must_use]
    pub fn uncounted_for_benchmarks(mut self) -> Self {
        self.uncounted = true;
        self
    }

    /// The worker name a handle leases under: the one set, else `host:pid`.
    fn worker_name(&self) -> String {
        self.worker
            .clone()
            .unwrap_or_else(super::history::worker_name)
    }

    /// How long this handle keeps the jobs it completes, for
    /// [`JobQueue::job_info`] (default [`KeepCompleted::DEFAULT`](super::KeepCompleted::DEFAULT):
    /// a day, at most 50,000): an ack marks the row completed instead of
    /// deleting it, and the handle prunes completed rows about once a
    /// second. [`KeepCompleted::NONE`](super::KeepCompleted::NONE): an ack
    /// deletes the row. (A setting of the handle: workers of one queue
    /// should agree.)
    #[must_use]
    pub fn keep_completed(mut self, keep: super::KeepCompleted) -> Self {
        self.keep_completed = keep;
        self
    }

    /// Schema `dque`, a lease of 30 s, 5 attempts, [`Backoff::default`],
    /// the system clock.
    pub fn new() -> Self {
        PgOptions::default()
    }

    /// The schema holding the tables (default `dque`), made on first use.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// How long a lease holds a job (default 30 s).
    #[must_use]
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// Attempts a job gets before it is a dead letter (default 5, at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u16) -> Self {
        self.max_attempts = u32::from(attempts.max(1));
        self
    }

    /// The back-off of [`Retry::Backoff`].
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Where due times and statistics read the time (lease deadlines use
    /// the system clock). Times come from the client, as in qless: the
    /// clocks of the hosts sharing a queue must roughly agree.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Connects to the server at `url` (a libpq connection string or
    /// `postgres://` URL) and opens queue `queue`, making the schema on
    /// first use.
    ///
    /// # Errors
    ///
    /// `InvalidJob` for a queue name that breaks the rule
    /// ([`check_queue_name`](crate::jobs::check_queue_name)), before
    /// connecting; `Backend` if the server cannot be reached;
    /// `ServerRefused` with the server's SQLSTATE and message if it
    /// refuses (a wrong password, an unknown database or role, a missing
    /// privilege); `Backend` if it holds a schema of a newer version.
    pub fn connect(&self, url: &str, queue: &str) -> Result<PgJobs> {
        super::check_queue_name(queue)?;
        let client = Client::connect(url, NoTls).map_err(db)?;
        self.with_client(client, Some(url.to_owned()), queue)
    }

    /// Opens queue `queue` over an existing connection (a blocking lease
    /// then polls, having no connection string to listen with).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub fn open_with_client(&self, client: Client, queue: &str) -> Result<PgJobs> {
        self.with_client(client, None, queue)
    }

    fn with_client(&self, mut client: Client, url: Option<String>, queue: &str) -> Result<PgJobs> {
        super::check_queue_name(queue)?;
        schema::migrate(&mut client, &self.schema)?;
        let tables = Tables::new(&self.schema, !self.uncounted);
        let qno = schema::queue_number(&mut client, &tables, queue)?;
        Ok(PgJobs {
            queue: queue.to_owned(),
            qno,
            kept: history::HistorySql::new(&tables),
            pruning: history::Pruning::new(self.keep_completed),
            worker: self.worker_name(),
            hot: Hot::new(&tables),
            sql: Statements::new(&tables),
            tables,
            link: Mutex::new(Conn::new(client, url.clone())?),
            url,
            listener: Mutex::new(None),
            lease_time: self.lease_time,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            clock: Arc::clone(&self.clock),
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
            closed: AtomicBool::new(false),
            held: Mutex::new(std::collections::HashMap::new()),
            merged_at: Mutex::new(Instant::now()),
            due_schedules: DueCache::default(),
        })
    }
}

/// How often a handle merges the statistics' log into the daily rows.
const STATS_EVERY: Duration = Duration::from_secs(1);

/// A timing as the table keeps it: count, sum, sum of squares, histogram.
fn sums(timing: &Timing) -> (i64, f64, f64, Vec<i64>) {
    let count = timing.count as i64;
    let sum = timing.mean * timing.count as f64;
    // sum of squares = vk + n * mean²
    let sumsq = timing.sum_squares + timing.count as f64 * timing.mean * timing.mean;
    let hist = timing.histogram.buckets.iter().map(|&b| b as i64).collect();
    (count, sum, sumsq, hist)
}

/// What the queries need of a connection: the handle's own (which keeps
/// its statements prepared: one round trip a call) or a caller's client
/// or transaction (statements prepared each time).
pub(crate) trait Db {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>;
    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error>;

    fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        Ok(self
            .query(sql, params)?
            .into_iter()
            .next()
            .expect("the query returns one row"))
    }
}

/// A caller's client or transaction.
struct Theirs<'a, C: GenericClient>(&'a mut C);

impl<C: GenericClient> Db for Theirs<'_, C> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.0.query(sql, params)
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.0.execute(sql, params)
    }
}

/// Which handles exist, so a lease cannot be settled through another one.
static HANDLES: AtomicUsize = AtomicUsize::new(1);

/// The schema-qualified names of the tables.
#[derive(Debug)]
struct Tables {
    jobs: String,
    stats: String,
    failures: String,
    tokens: String,
    deaths: String,
    log: String,
    queues: String,
    /// Unique jobs' holds (issue 27).
    unique: String,
    /// The kept counts (`counts.rs`), always made; none: this handle's
    /// statements do not keep them (the benchmark's baseline).
    counts: Option<String>,
    /// The kept counts' table, for what every handle writes (a new
    /// queue's slots).
    counts_table: String,
    /// The numbers of rows counted apart (`counts::counted_apart`).
    count_rows: String,
}

impl Tables {
    fn new(schema: &str, counted: bool) -> Self {
        let s = schema::quote(schema);
        Tables {
            counts: counted.then(|| format!("{s}.counts")),
            counts_table: format!("{s}.counts"),
            count_rows: format!("{s}.count_rows"),
            jobs: format!("{s}.jobs"),
            stats: format!("{s}.stats"),
            failures: format!("{s}.failures"),
            tokens: format!("{s}.lease_tokens"),
            deaths: format!("{s}.deaths"),
            log: format!("{s}.stats_log"),
            queues: format!("{s}.queues"),
            unique: format!("{s}.unique_ids"),
        }
    }
}

/// The statements of the hot path (enqueue, lease, ack), their text made
/// once per handle: the connection keeps them prepared by text.
#[derive(Debug)]
struct Hot {
    /// Jobs of which some have caller ids (or in a caller's transaction).
    insert: String,
    /// As `insert`, some jobs with a uniqueness period (issue 27).
    insert_holding: String,
    /// `insert` and `insert_holding` in a caller's transaction (counted
    /// apart: `counts::counted_apart`).
    insert_in: String,
    insert_holding_in: String,
    /// The answers for caller ids an insert did not add (issue 27).
    held: String,
    /// Jobs without caller ids nor headers.
    insert_new: String,
    /// Jobs without caller ids, some with headers.
    insert_new_headers: String,
    lease_one: String,
    lease_many: String,
    /// Who leased rows `$1` (`$3`) and when (`$2`): what the limited
    /// lease's function leaves unsaid.
    mark_leased: String,
    ack: String,
}

/// A JSON array of header names or values (`{json}`, text) made a text
/// array again in SQL (unnest cannot take arrays of arrays); none: NULL.
fn headers_of(json: &str) -> String {
    format!(
        "CASE WHEN {json} = '[]' THEN NULL
              ELSE ARRAY(SELECT jsonb_array_elements_text({json}::jsonb)) END"
    )
}

impl Hot {
    fn new(tables: &Tables) -> Hot {
        let jobs = &tables.jobs;
        let (names, values) = (headers_of("names"), headers_of("vals"));
        // `$1` the queue's number, `$2` the time, `$10`, `$11` the channel
        // and the queue's name to notify.
        // `$1` the queue's number, `$2` the time, `$10`, `$11` the channel
        // and the queue's name to notify; one round trip: the holds of
        // unique jobs, the insert, and the notification (the same one sent
        // for every row is delivered once, at the commit).
        let insert = unique::insert(tables, &names, &values, false);
        let insert_holding = unique::insert_holding(tables, &names, &values, false);
        // `$1`, `$2` the channel and the queue's name to notify (once, at
        // the commit, whatever the row count), `$3` the queue's number,
        // `$4` the time.
        let insert_new = |with_headers: bool| {
            let (columns, select, arrays, names_values) = if with_headers {
                (
                    ", header_names, header_values",
                    format!(", {names}, {values}"),
                    ", $9::text[], $10::text[]",
                    ", names, vals",
                )
            } else {
                ("", String::new(), "", "")
            };
            // The count is the array's length (all are added or none),
            // not the insert's RETURNING, which would cost every row; its
            // update sends the notification too. Without counts (the
            // benchmarks' baseline) a CTE of its own sends it.
            let (with, told) = match tables.counts.as_deref() {
                Some(counts) => (
                    counts::counted_returning(
                        counts,
                        "$3",
                        "cardinality($5::text[])",
                        counts::ADDED,
                        "pg_notify($1, $2)",
                    ),
                    "",
                ),
                None => (
                    "told AS MATERIALIZED (SELECT pg_notify($1, $2))".to_owned(),
                    "told, ",
                ),
            };
            format!(
                "WITH {with}
                 INSERT INTO {jobs} (qno, id, caller_id, priority, body, enqueued_at,
                                     ready_at{columns})
                 SELECT $3, id, false, priority, body, $4, ready{select}
                 FROM {told}unnest($5::text[], $6::int[], $7::bytea[], $8::bigint[]{arrays})
                      WITH ORDINALITY AS t(id, priority, body, ready{names_values}, n)
                 ORDER BY n"
            )
        };
        // The wait of a first lease is kept in the row (no index holds
        // it: the update stays HOT) until the attempt settles, whose log
        // row carries it; reads count it from the row till then. A job
        // handed back (`release`) keeps the wait of its first lease: one
        // wait a job.
        let limits_table = format!("{}.limits", limits::schema(tables));
        let lease = |which: &str, close: &str| {
            format!(
                "UPDATE {jobs} j
                     SET attempts = j.attempts + 1, lease_until = $3 + $4,
                         lease_token = nextval('{tokens}'), started = $2, worker = $7,
                         wait_day = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL
                                         THEN $6 ELSE j.wait_day END,
                         wait_ms = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL
                                        THEN GREATEST($2 - j.ready_at, 0) ELSE j.wait_ms END
                     WHERE j.seq {which}
                         SELECT seq FROM {jobs}
                         WHERE qno = $1
                           AND state = 0 AND ready_at <= $2
                           AND (lease_until IS NULL OR lease_until <= $3)
                           AND NOT EXISTS (SELECT 1 FROM {queues} q
                                           WHERE q.qno = $1 AND q.paused)
                           AND NOT EXISTS (SELECT 1 FROM {limits} l WHERE l.qno = $1)
                         ORDER BY priority, ready_at, seq
                         LIMIT $5
                         FOR UPDATE SKIP LOCKED{close}
                     RETURNING {cols}, j.lease_token",
                tokens = tables.tokens,
                queues = tables.queues,
                limits = limits_table,
                cols = JOB_COLUMNS
                    .split(", ")
                    .map(|c| format!("j.{c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        };
        // The run time is logged in the same statement as the delete, with
        // the wait kept in the row: one log row a job.
        let ack = format!(
            "WITH gone AS (
                 DELETE FROM {jobs} WHERE seq = $1 AND state = 0 AND lease_token = $2
                     AND coalesce(lease_until, 0) > $3
                 RETURNING seq, qno, wait_day, wait_ms),
             logged AS ({log}){counted}
             SELECT count(*) FROM gone",
            log = stats_log::insert(
                &tables.log,
                stats_log::RUN,
                ["$4", "$5", "$6", "NULL"],
                "gone"
            ),
            counted = counts::counted_rows(tables.counts.as_deref(), "gone", counts::REMOVED),
        );
        Hot {
            insert,
            insert_holding,
            insert_in: unique::insert(tables, &names, &values, true),
            insert_holding_in: unique::insert_holding(tables, &names, &values, true),
            held: unique::held(jobs, &tables.unique),
            insert_new: insert_new(false),
            insert_new_headers: insert_new(true),
            // One job: `=` a subquery (an index probe); several: `ANY`.
            lease_one: lease("= (", ")"),
            lease_many: lease("= ANY(ARRAY(", "))"),
            mark_leased: format!("UPDATE {jobs} SET started = $2, worker = $3 WHERE seq = ANY($1)"),
            ack,
        }
    }
}

/// A job queue in a PostgreSQL database: the [`JobQueue`] contract over
/// rows, for workers on many hosts. Several named queues share the
/// schema's tables.
///
/// Jobs can be enqueued in the caller's own transaction
/// ([`enqueue_in`](Self::enqueue_in)): the job exists if and only if the
/// caller's data committed.
pub struct PgJobs {
    queue: String,
    /// The queue's number: what the jobs' rows and indexes hold.
    qno: i32,
    tables: Tables,
    /// The text of the statements of the hot path, made once.
    hot: Hot,
    /// The text of the others.
    sql: Statements,
    link: Mutex<Conn>,
    /// The connection string, for the listening connection.
    url: Option<String>,
    /// A second connection that LISTENs, made by the first blocking lease.
    listener: Mutex<Option<Client>>,
    lease_time: Duration,
    max_attempts: u32,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    handle: usize,
    closed: AtomicBool,
    /// When this handle last merged the statistics' log.
    merged_at: Mutex<Instant>,
    /// The leases this handle gave out and has not settled (row, token):
    /// handed back when it closes, as a closed embedded handle's are.
    held: Mutex<std::collections::HashMap<i64, i64>>,
    /// When the schedules (recurring jobs) may next be due.
    due_schedules: DueCache,
    /// The statements of the history, what it keeps, and this worker.
    kept: history::HistorySql,
    pruning: history::Pruning,
    worker: String,
}

impl std::fmt::Debug for PgJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJobs")
            .field("queue", &self.queue)
            .field("tables", &self.tables)
            .field("lease_time", &self.lease_time)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

/// A job's row, as read by the queries below (`JOB_COLUMNS`).
const JOB_COLUMNS: &str = "seq, id, caller_id, priority, body, header_names, header_values, \
                           enqueued_at, ready_at, attempts";

fn job_of(row: &Row) -> Job {
    // NULL: no headers (schema 4).
    let names: Vec<String> = row
        .get::<_, Option<Vec<String>>>("header_names")
        .unwrap_or_default();
    let values: Vec<String> = row
        .get::<_, Option<Vec<String>>>("header_values")
        .unwrap_or_default();
    let attempts: i32 = row.get("attempts");
    Job {
        id: row.get("id"),
        body: row.get("body"),
        priority: row.get("priority"),
        headers: names.into_iter().zip(values).collect(),
        attempt: attempts.max(0) as u32,
        enqueued_at: from_unix_ms(row.get::<_, i64>("enqueued_at").max(0) as u64),
        caller_id: row.get("caller_id"),
    }
}

fn ms(time: SystemTime) -> i64 {
    i64::try_from(unix_ms(time)).unwrap_or(i64::MAX)
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn day_of(time: SystemTime) -> i64 {
    let seconds = unix_ms(time) / 1000;
    (seconds - seconds % super::stats::DAY_SECONDS) as i64
}

impl PgJobs {
    /// Connects with default [`PgOptions`].
    ///
    /// # Errors
    ///
    /// As [`PgOptions::connect`].
    pub fn connect(url: &str, queue: &str) -> Result<Self> {
        PgOptions::new().connect(url, queue)
    }

    /// The connection, made again if it broke.
    fn client(&self) -> Result<MutexGuard<'_, Conn>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        let mut conn = self.link.lock();
        conn.ready()?;
        Ok(conn)
    }

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Lease deadlines run on the real clock, as the embedded queue's do.
    fn real_now_ms() -> i64 {
        ms(SystemTime::now())
    }

    /// Adds `job` in the caller's transaction (or on any client): the job
    /// exists if and only if that transaction commits. Workers are told at
    /// the commit (NOTIFY is transactional).
    ///
    /// ```no_run
    /// use dque::jobs::{NewJob, PgJobs};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "host=/run/postgresql user=app dbname=app";
    /// let jobs = PgJobs::connect(url, "mail")?;
    /// let mut app = postgres::Client::connect(url, postgres::NoTls)?;
    /// let mut tx = app.transaction()?;
    /// tx.execute("INSERT INTO orders (id) VALUES (7)", &[])?;
    /// jobs.enqueue_in(&mut tx, NewJob::new("mail the invoice of order 7").id("order-7"))?;
    /// tx.commit()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`JobQueue::enqueue`].
    pub fn enqueue_in(&self, client: &mut impl GenericClient, job: NewJob) -> Result<Enqueued> {
        self.check_new(&job)?;
        let now = self.now();
        self.insert(&mut Theirs(client), vec![job], now, false)
            .map(|mut added| added.remove(0))
    }

    fn check_new(&self, job: &NewJob) -> Result<()> {
        check_new(job)
    }
}

/// Whether this backend can hold `job`.
fn check_new(job: &NewJob) -> Result<()> {
    job.check()?;
    if job.body.len() > MAX_BODY {
        return Err(Error::ItemTooLarge {
            size: job.body.len(),
            max: MAX_BODY as u32,
        });
    }
    Ok(())
}

impl PgJobs {
    /// The queue as the calls written once for both handles need it.
    fn rules(&self) -> Rules<'_> {
        rules_of!(self)
    }

    /// Inserts `jobs` (see [`Rules::insert`]).
    fn insert(
        &self,
        client: &mut dyn Db,
        jobs: Vec<NewJob>,
        now: SystemTime,
        own: bool,
    ) -> Result<Vec<Enqueued>> {
        ready(self.rules().insert(&mut Blocking(client), jobs, now, own))
    }

    /// Leases up to `max` of the first ready jobs (or ones whose lease
    /// ended) with one statement, without waiting.
    fn lease_up_to(&self, max: usize) -> Result<Vec<JobLease>> {
        let now = self.now();
        // A paused queue's leases fire nothing (as on every backend): the
        // first lease after the resume fires by the catch-up policy.
        if self.due_schedules.due(unix_ms(now)) && !self.is_paused().unwrap_or(false) {
            self.fire_due_quietly(now);
        }
        let mut client = self.client()?;
        ready(
            self.rules()
                .lease_up_to(&mut Blocking(&mut *client), max, now),
        )
    }

    /// Hands back every lease this handle holds, their attempts counted.
    fn hand_back_held(&self) -> Result<()> {
        let held: Vec<(i64, i64)> = self.held.lock().drain().collect();
        if held.is_empty() {
            return Ok(());
        }
        let mut client = self.link.lock();
        client.ready()?;
        ready(self.rules().hand_back(&mut Blocking(&mut *client), held))
    }

    fn lease_lost(lease: &JobLease) -> Error {
        Error::LeaseLost {
            id: lease.token.part as u64,
            attempt: u16::try_from(lease.job.attempt).unwrap_or(u16::MAX),
        }
    }

    fn notify(&self, client: &mut dyn Db) -> Result<()> {
        ready(self.rules().notify(&mut Blocking(client)))
    }

    /// Merges the statistics' log into the daily rows if this handle has
    /// not for [`STATS_EVERY`]. Its errors are not the caller's (whose call
    /// took effect): the log keeps its rows for the next merge.
    fn merge_stats_if_due(&self, client: &mut Conn) {
        if self.rules().merge_due() {
            let _ = self.merge_stats(client);
        }
    }

    /// Moves this queue's rows of the statistics' log into the daily rows,
    /// in one transaction: each row is counted once, by one merger (a
    /// second one at the same time leaves the work to the first; one
    /// started by another dque without that rule would wait for the rows,
    /// then skip those already gone).
    fn merge_stats(&self, client: &mut Conn) -> Result<()> {
        let merged = self.merge_stats_once(client);
        if merged.is_err() {
            client.suspect();
        }
        merged
    }

    fn merge_stats_once(&self, client: &mut Conn) -> Result<()> {
        let mut tx = client.client()?.transaction().map_err(db)?;
        ready(
            self.rules()
                .merge_stats(&mut Blocking(&mut Theirs(&mut tx))),
        )?;
        tx.commit().map_err(db)
    }

    /// Waits up to `wait` for a notification of this queue (or any other
    /// reason to look again).
    fn wait_for_news(&self, wait: Duration) -> Result<()> {
        let Some(url) = &self.url else {
            std::thread::sleep(wait);
            return Ok(());
        };
        let mut listener = self.listener.lock();
        if listener.is_none() {
            let listening = Client::connect(url, NoTls).and_then(|mut client| {
                client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
                Ok(client)
            });
            match listening {
                Ok(client) => *listener = Some(client),
                // The server is away: the next lease says so (or connects
                // again); until then the wait is a poll.
                Err(_) => {
                    drop(listener);
                    std::thread::sleep(wait);
                    return Ok(());
                }
            }
        }
        let client = listener.as_mut().expect("just made");
        let waited = client.notifications().timeout_iter(wait).next().map(drop);
        if waited.is_err() {
            // A lost connection is made again at the next wait; the lease
            // that follows tells whether the server is there.
            *listener = None;
        }
        Ok(())
    }
}

/// The arrays of `Hot::insert` for `jobs` enqueued at `now`.
struct InsertArgs {
    ids: Vec<String>,
    caller: Vec<bool>,
    priorities: Vec<i32>,
    bodies: Vec<Vec<u8>>,
    names: Vec<String>,
    values: Vec<String>,
    ready: Vec<i64>,
    /// Each job's period end (Unix ms, 0: none) and states (unique jobs).
    until: Vec<i64>,
    states: Vec<i16>,
}

impl InsertArgs {
    fn new(jobs: Vec<NewJob>, now: SystemTime) -> InsertArgs {
        let count = jobs.len();
        let mut args = InsertArgs {
            ids: Vec::with_capacity(count),
            caller: Vec::with_capacity(count),
            priorities: Vec::with_capacity(count),
            bodies: Vec::with_capacity(count),
            names: Vec::with_capacity(count),
            values: Vec::with_capacity(count),
            ready: Vec::with_capacity(count),
            until: Vec::with_capacity(count),
            states: Vec::with_capacity(count),
        };
        for job in jobs {
            args.ready.push(ms(job.ready_at(now).max(now)));
            let hold = job.hold(now);
            args.until
                .push(hold.map_or(0, |h| h.until_ms.min(i64::MAX as u64) as i64));
            args.states
                .push(hold.map_or(0, |h| i16::from(h.states.bits())));
            args.caller.push(job.id.is_some());
            args.ids.push(job.id.unwrap_or_else(new_job_id));
            args.priorities.push(job.priority);
            args.bodies.push(job.body);
            // One JSON array of names and one of values per job, made
            // text arrays again in SQL (unnest cannot take arrays of arrays).
            args.names
                .push(json_array(job.headers.iter().map(|(n, _)| n.as_str())));
            args.values
                .push(json_array(job.headers.iter().map(|(_, v)| v.as_str())));
        }
        args
    }
}

/// The ids an insert added.
fn added_ids(rows: &[Row]) -> std::collections::HashSet<String> {
    rows.iter().map(|r| r.get(0)).collect()
}

/// The caller ids of `ids` not `added`: queued already, or held.
fn not_added(
    ids: &[String],
    caller: &[bool],
    added: &std::collections::HashSet<String>,
) -> Vec<String> {
    ids.iter()
        .zip(caller)
        .filter(|(id, &caller)| caller && !added.contains(*id))
        .map(|(id, _)| id.clone())
        .collect()
}

/// The answer for each of `ids`, in order, from the ids `Hot::insert`
/// added and those `Hot::held` found held (`done:UNTIL`, `dead:UNTIL`).
fn answers(
    ids: Vec<String>,
    added: std::collections::HashSet<String>,
    held_rows: &[Row],
) -> Vec<Enqueued> {
    let held: std::collections::HashMap<String, String> = held_rows
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut seen = std::collections::HashSet::new();
    ids.into_iter()
        .map(|id| {
            // An id given twice in one batch is added once.
            if added.contains(&id) && seen.insert(id.clone()) {
                Enqueued::Added(id)
            } else if let Some(answer) = held.get(&id) {
                crate::jobs::unique::duplicate_of(id, answer)
            } else {
                Enqueued::AlreadyQueued(id)
            }
        })
        .collect()
}

/// The arrays of `Hot::insert_new` for `jobs` (no caller ids) enqueued at
/// `now`; header arrays only if some job has headers.
struct NewArgs {
    with_headers: bool,
    priorities: Vec<i32>,
    bodies: Vec<Vec<u8>>,
    names: Vec<String>,
    values: Vec<String>,
    ready: Vec<i64>,
}

impl NewArgs {
    fn new(jobs: Vec<NewJob>, now: SystemTime) -> NewArgs {
        let count = jobs.len();
        let with_headers = jobs.iter().any(|job| !job.headers.is_empty());
        let mut args = NewArgs {
            with_headers,
            priorities: Vec::with_capacity(count),
            bodies: Vec::with_capacity(count),
            names: Vec::new(),
            values: Vec::new(),
            ready: Vec::with_capacity(count),
        };
        for job in jobs {
            args.ready.push(ms(job.ready_at(now).max(now)));
            args.priorities.push(job.priority);
            if with_headers {
                args.names
                    .push(json_array(job.headers.iter().map(|(n, _)| n.as_str())));
                args.values
                    .push(json_array(job.headers.iter().map(|(_, v)| v.as_str())));
            }
            args.bodies.push(job.body);
        }
        args
    }
}

/// The rows a lease statement returned, as (row, token, job), in the
/// queue's lease order (RETURNING keeps no order).
fn taken_in_order(rows: Vec<Row>) -> Vec<(i64, i64, Job)> {
    let mut taken: Vec<(i32, i64, i64, i64, Job)> = rows
        .into_iter()
        .map(|row| {
            let job = job_of(&row);
            (
                job.priority,
                row.get::<_, i64>("ready_at"),
                row.get::<_, i64>("seq"),
                row.get::<_, i64>("lease_token"),
                job,
            )
        })
        .collect();
    taken.sort_by_key(|(priority, ready, seq, _, _)| (*priority, *ready, *seq));
    taken
        .into_iter()
        .map(|(_, _, seq, token, job)| (seq, token, job))
        .collect()
}

/// `parts` as a JSON array of strings.
fn json_array<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("[");
    for (i, part) in parts.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in part.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

impl JobQueue for PgJobs {
    fn lease_time(&self) -> Option<Duration> {
        Some(self.lease_time)
    }

    fn name(&self) -> &str {
        &self.queue
    }

    fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.check_new(&job)?;
        let now = self.now();
        let mut client = self.client()?;
        self.insert(&mut *client, vec![job], now, true)
            .map(|mut added| added.remove(0))
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        for job in &jobs {
            self.check_new(job)?;
        }
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let mut client = self.client()?;
        // One statement: all the jobs, or none.
        self.insert(&mut *client, jobs, now, true)
    }

    fn lease(&self) -> Result<Option<JobLease>> {
        Ok(self.lease_up_to(1)?.pop())
    }

    fn lease_batch(&self, max: usize) -> Result<Vec<JobLease>> {
        self.lease_up_to(max)
    }

    fn lease_timeout(&self, wait: Duration) -> Result<Option<JobLease>> {
        let deadline = Instant::now().checked_add(wait);
        loop {
            if let Some(lease) = self.lease_up_to(1)?.pop() {
                return Ok(Some(lease));
            }
            let left = deadline.map_or(LEASE_POLL, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(None);
            }
            // A notification may come between the look and the wait; the
            // poll bounds what that costs.
            self.wait_for_news(left.min(LEASE_POLL))?;
        }
    }

    fn ack(&self, lease: JobLease) -> Result<()> {
        let now = self.now();
        let mut client = self.client()?;
        ready(self.rules().ack(&mut Blocking(&mut *client), &lease, now))?;
        self.merge_stats_if_due(&mut client);
        // The job is acked: a prune that fails is tried again later.
        let _ = ready(self.rules().prune_if_due(&mut Blocking(&mut *client), now));
        Ok(())
    }

    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked> {
        if lease.job.attempt >= self.max_attempts {
            let attempts = lease.job.attempt;
            let message = format!("{reason} (attempts used up: {attempts})");
            self.fail_with(lease, reason, &message)?;
            return Ok(Nacked::Dead);
        }
        let delay = match retry {
            Retry::Backoff => self.backoff.delay(lease.job.attempt),
            Retry::After(delay) => delay,
        };
        let now = self.now();
        let at = super::job::due_after(now, delay);
        let mut client = self.client()?;
        let retry_at = (!delay.is_zero()).then_some(at);
        ready(
            self.rules()
                .retry(&mut Blocking(&mut *client), &lease, retry_at, now),
        )?;
        // The retry is done: a lost notification only delays a worker by
        // its poll, and is no reason to report a failure.
        let _ = self.notify(&mut *client);
        self.merge_stats_if_due(&mut client);
        Ok(Nacked::Retrying { at })
    }

    fn release(&self, lease: JobLease) -> Result<()> {
        let mut client = self.client()?;
        ready(
            self.rules()
                .release(&mut Blocking(&mut *client), &lease, None),
        )?;
        let _ = self.notify(&mut *client);
        Ok(())
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> Result<SystemTime> {
        let now = self.now();
        if delay.is_zero() {
            self.release(lease)?;
            return Ok(now);
        }
        let at = super::job::due_after(now, delay);
        let mut client = self.client()?;
        ready(
            self.rules()
                .release(&mut Blocking(&mut *client), &lease, Some(at)),
        )?;
        let _ = self.notify(&mut *client);
        Ok(at)
    }

    fn touch(&self, lease: &JobLease) -> Result<()> {
        let mut client = self.client()?;
        ready(self.rules().touch(&mut Blocking(&mut *client), lease))
    }

    fn fail(&self, lease: JobLease, reason: &str) -> Result<()> {
        self.fail_with(lease, reason, reason)
    }

    fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        let now = self.now();
        let mut client = self.client()?;
        ready(
            self.rules()
                .set_priority(&mut Blocking(&mut *client), id, priority, now),
        )
    }

    fn cancel_many(&self, ids: &[String]) -> Vec<Result<()>> {
        match self.cancel_all(ids) {
            Ok(outcomes) => outcomes,
            // The statement may have run: a job it removed is gone when
            // asked again, and `NoSuchJob` would deny this call's own
            // cancel. Whatever is asked again and found still there
            // answers for itself.
            Err(Error::OutcomeUnknown { backend, reason }) => ids
                .iter()
                .map(|id| match self.cancel(id) {
                    Err(Error::NoSuchJob { .. }) => Err(Error::OutcomeUnknown {
                        backend,
                        reason: reason.clone(),
                    }),
                    outcome => outcome,
                })
                .collect(),
            // Nothing done: each job on its own, as `cancel`.
            Err(_) => ids.iter().map(|id| self.cancel(id)).collect(),
        }
    }

    fn set_priority_many(&self, ids: &[String], priority: i32) -> Vec<Result<()>> {
        match self.set_priority_all(ids, priority) {
            Ok(outcomes) => outcomes,
            // The statement may have moved any job: one found at the
            // priority asked answers `Ok`; an error (leased, done since)
            // cannot say this call changed nothing.
            Err(Error::OutcomeUnknown { backend, reason }) => ids
                .iter()
                .map(|id| {
                    self.set_priority(id, priority)
                        .map_err(|_| Error::OutcomeUnknown {
                            backend,
                            reason: reason.clone(),
                        })
                })
                .collect(),
            // Nothing done: each job on its own, as `set_priority`.
            Err(_) => ids
                .iter()
                .map(|id| self.set_priority(id, priority))
                .collect(),
        }
    }

    fn run_now(&self, id: &str) -> Result<bool> {
        let now = self.now();
        let mut client = self.client()?;
        ready(self.rules().run_now(&mut Blocking(&mut *client), id, now))
    }

    fn cancel(&self, id: &str) -> Result<()> {
        let mut client = self.client()?;
        ready(self.rules().cancel(&mut Blocking(&mut *client), id))
    }

    fn waiting(&self, max: usize) -> Result<Vec<Waiting>> {
        let now = self.now();
        let mut client = self.client()?;
        ready(self.rules().waiting(&mut Blocking(&mut *client), max, now))
    }

    /// Keyset on the lease index's order (`paging`).
    fn waiting_page(&self, after: Option<&super::PageCursor>, max: usize) -> Result<super::Page> {
        let now = self.now();
        let mut client = self.client()?;
        let rules = self.rules();
        ready(rules.waiting_page(&mut Blocking(&mut *client), after, max, now))
    }

    fn leases(&self, max: usize) -> Result<Vec<super::LeaseInfo>> {
        let mut client = self.client()?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &held::leases(&self.tables),
                &[&self.qno, &Self::real_now_ms(), &limit],
            )
            .map_err(db)?;
        Ok(rows.iter().map(held::lease_of).collect())
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadJob>> {
        let mut client = self.client()?;
        ready(self.rules().dead(&mut Blocking(&mut *client), max))
    }

    fn requeue_dead(&self, id: &str) -> Result<()> {
        let now = self.now();
        let mut client = self.client()?;
        ready(
            self.rules()
                .requeue_dead(&mut Blocking(&mut *client), id, now),
        )?;
        let _ = self.notify(&mut *client);
        Ok(())
    }

    fn counts(&self) -> Result<Counts> {
        let now = self.now();
        let mut client = self.client()?;
        ready(self.rules().counts(&mut Blocking(&mut *client), now))
    }

    fn stats(&self) -> Result<QueueStats> {
        let counts = self.counts()?;
        let mut client = self.client()?;
        ready(self.rules().stats(&mut Blocking(&mut *client), counts))
    }

    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let handed_back = self.hand_back_held();
        // The log is kept if this fails: statistics are merged by the next
        // handle (and read from the log until then).
        let mut client = self.link.lock();
        if client.connected() {
            let _ = self.merge_stats(&mut client);
        }
        handed_back
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> Result<()> {
        self.set_paused(true)
    }

    fn resume(&self) -> Result<()> {
        self.set_paused(false)
    }

    fn is_paused(&self) -> Result<bool> {
        let mut client = self.client()?;
        ready(self.rules().is_paused(&mut Blocking(&mut *client)))
    }

    fn set_limit(&self, name: &str, max: u32) -> Result<()> {
        let mut client = self.client()?;
        ready(
            self.rules()
                .set_limit(&mut Blocking(&mut *client), name, max),
        )
    }

    fn remove_limit(&self, name: &str) -> Result<bool> {
        let mut client = self.client()?;
        ready(self.rules().remove_limit(&mut Blocking(&mut *client), name))
    }

    fn limits(&self) -> Result<Vec<crate::jobs::Limit>> {
        let mut client = self.client()?;
        ready(self.rules().limits(&mut Blocking(&mut *client)))
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        self.add_schedule(schedule)
    }

    fn unschedule(&self, name: &str) -> Result<bool> {
        self.remove_schedule(name)
    }

    fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.list_schedules()
    }

    fn fire_schedules(&self) -> Result<usize> {
        self.fire_due(self.now())
    }

    // --- history (issue 27) ---

    /// Natively: the filter as a `WHERE` clause over the first `scan` rows
    /// of the states' lists in index order, or over every job with an id
    /// prefix the id indexes answer (`postgres/search.rs`).
    fn search(&self, filter: &super::JobFilter, max: usize, scan: usize) -> Result<super::Found> {
        search::search(self, filter, max, scan)
    }

    fn job_info(&self, id: &str) -> Result<Option<super::JobInfo>> {
        let now = self.now();
        let mut client = self.client()?;
        ready(self.rules().job_info(&mut Blocking(&mut *client), id, now))
    }
}

impl PgJobs {
    fn set_paused(&self, paused: bool) -> Result<()> {
        let mut client = self.client()?;
        ready(self.rules().set_paused(&mut Blocking(&mut *client), paused))
    }
}

impl Drop for PgJobs {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl PgJobs {
    /// Dead-letters a leased job with `message`, counted in the
    /// statistics under `reason`'s failure group.
    fn fail_with(&self, lease: JobLease, reason: &str, message: &str) -> Result<()> {
        let now = self.now();
        let mut client = self.client()?;
        ready(
            self.rules()
                .fail(&mut Blocking(&mut *client), &lease, (reason, message), now),
        )?;
        self.merge_stats_if_due(&mut client);
        Ok(())
    }
}

/// Batch calls on waiting jobs (issue 28's bulk actions): one statement
/// changes every job asked; the ones it did not change are answered as
/// the single call answers (`find_live` of each, in one read). A failed
/// statement changed nothing (or its outcome is unknown): the caller then
/// asks each job on its own.
impl PgJobs {
    fn cancel_all(&self, ids: &[String]) -> Result<Vec<Result<()>>> {
        let t = &self.tables;
        let cancel = format!(
            "WITH gone AS (
                 DELETE FROM {jobs} WHERE qno = $1 AND id = ANY($2::text[]) AND
                     state = 0 AND (lease_until IS NULL OR lease_until <= $3)
                 RETURNING id, wait_day, wait_ms, qno),
             freed AS (DELETE FROM {holds} WHERE qno = $1 AND id IN (SELECT id FROM gone)),
             logged AS ({log}){counted}
             SELECT id FROM gone",
            jobs = t.jobs,
            holds = t.unique,
            log = stats_log::insert(
                &t.log,
                stats_log::WAIT,
                ["$4", "d", "m", "NULL"],
                "(SELECT wait_day AS d, wait_ms AS m, NULL::bigint AS wait_day, \
                  NULL::bigint AS wait_ms FROM gone WHERE wait_ms IS NOT NULL) w"
            ),
            counted = counts::counted_rows(t.counts.as_deref(), "gone", counts::REMOVED),
        );
        let mut client = self.client()?;
        let params: [&(dyn ToSql + Sync); 4] = [&self.qno, &ids, &Self::real_now_ms(), &self.queue];
        let gone = client.query(&cancel, &params).map_err(sent)?;
        Ok(self.answer_all(&mut *client, ids, gone))
    }

    fn set_priority_all(&self, ids: &[String], priority: i32) -> Result<Vec<Result<()>>> {
        // As `set_priority`, each ready job to the end of its new
        // priority: the sequence numbers drawn in the order asked (a
        // volatile CTE is computed once, in its subquery's order).
        let update = format!(
            "WITH asked AS (
                 SELECT id, min(n) AS n FROM unnest($2::text[]) WITH ORDINALITY AS a(id, n)
                 GROUP BY id),
             numbered AS (
                 SELECT id, nextval(pg_get_serial_sequence('{jobs}', 'seq')) AS seq FROM (
                     SELECT a.id FROM asked a JOIN {jobs} j ON j.qno = $1 AND j.id = a.id
                     WHERE j.state = 0 AND j.priority <> $3
                       AND (j.lease_until IS NULL OR j.lease_until <= $5)
                     ORDER BY a.n) o)
             UPDATE {jobs} j SET priority = $3,
                 ready_at = CASE WHEN j.ready_at <= $4 THEN $4 ELSE j.ready_at END,
                 seq = numbered.seq
             FROM numbered
             WHERE j.qno = $1 AND j.id = numbered.id AND j.state = 0 AND j.priority <> $3
               AND (j.lease_until IS NULL OR j.lease_until <= $5)
             RETURNING j.id",
            jobs = self.tables.jobs,
        );
        let now = ms(self.now());
        let mut client = self.client()?;
        let params: [&(dyn ToSql + Sync); 5] =
            [&self.qno, &ids, &priority, &now, &Self::real_now_ms()];
        let moved = client.query(&update, &params).map_err(sent)?;
        Ok(self.answer_all(&mut *client, ids, moved))
    }

    /// Each id's outcome, the statement done: `Ok` for the first ask of
    /// an id in `changed` (rows of its id); else as `missing_or_leased`
    /// answers now (the error of that read if it fails: those jobs were
    /// not changed, the others were).
    fn answer_all(
        &self,
        client: &mut dyn Db,
        ids: &[String],
        changed: Vec<Row>,
    ) -> Vec<Result<()>> {
        let mut changed: std::collections::HashSet<String> =
            changed.iter().map(|row| row.get(0)).collect();
        let live = format!(
            "SELECT id, lease_until FROM {jobs} WHERE qno = $1 AND id = ANY($2::text[]) AND state < 2",
            jobs = self.tables.jobs
        );
        let live: std::result::Result<std::collections::HashMap<String, Row>, String> = client
            .query(&live, &[&self.qno, &ids])
            .map(|rows| {
                rows.into_iter()
                    .map(|row| (row.get::<_, String>(0), row))
                    .collect()
            })
            .map_err(|e| e.to_string());
        let real_now = Self::real_now_ms();
        ids.iter()
            .map(|id| match (changed.remove(id), &live) {
                (true, _) => Ok(()),
                (false, Ok(live)) => rows::missing_or_leased_at(live.get(id), 1, id, real_now),
                (false, Err(reason)) => Err(Error::Backend {
                    backend: "PostgreSQL",
                    reason: reason.clone(),
                }),
            })
            .collect()
    }
}
