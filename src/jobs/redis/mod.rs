//! The Jobs API over Redis in qless's data model: [`RedisJobs`] (feature
//! `redis`). Rust workers and qless clients (qless-py 0.11.4, reqless
//! 0.13.3) share the same jobs in the same Redis: a job one side puts, the
//! other leases, completes, fails or retries, and each sees the other's
//! state, history and statistics.
//!
//! Every operation is one call of dque's own Lua script (loaded once,
//! called by SHA), so it is atomic in Redis. How a job maps to qless's
//! fields (body and `data`, headers and `klass`, the sign of priorities)
//! is in [`encoding`](self::encoding)'s documentation and the README;
//! what is not covered is listed there too.
//!
//! Times come from the client, as in qless: due times, statistics and
//! history use this handle's [`Clock`](super::Clock), lease deadlines the
//! system clock of the host that leases. Hosts whose clocks disagree by
//! `d` see each other's delayed jobs fall due `d` early or late, and a
//! lease taken on a host `d` behind ends `d` early for the others.

#[cfg(feature = "tokio")]
mod async_redis;
mod core;
mod encoding;
mod held;
mod history;
mod limits;
mod qless;
mod recurring;
mod script;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::redis::Value;
use parking_lot::Mutex;

#[cfg(feature = "tokio")]
pub use async_redis::AsyncRedisJobs;
pub use encoding::{DEFAULT_KLASS, KLASS_HEADER};
pub use qless::{QlessJob, QlessPut, QueueCounts, WorkerJobs};

use self::core::{ready, Core};
use self::encoding::duration_seconds;
use self::script::Server;
use super::clock::{Clock, SystemClock};
use super::job::{random_u64, DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use super::recurring::{DueCache, Schedule, ScheduleInfo};
use super::stats::{Counts, Histogram, QueueStats, Timing};
use super::{Backoff, JobQueue};
use crate::error::{Error, Result};

/// How often a blocked lease looks again (Redis tells no one of a put).
const LEASE_POLL_MAX: Duration = Duration::from_millis(50);

/// The longest body a job may have: what an embedded queue takes by default.
const MAX_BODY: usize = crate::options::DEFAULT_MAX_ITEM_BYTES as usize;

static HANDLES: AtomicUsize = AtomicUsize::new(1);

/// The longest list a browsing call asks the script for (Redis takes
/// ranges as 64-bit signed numbers; `usize::MAX` would not fit).
pub(crate) const MAX_LISTED: usize = i32::MAX as usize;

/// Options of a [`RedisJobs`] handle.
///
/// ```no_run
/// use std::time::Duration;
/// use dque::jobs::{JobQueue, NewJob, RedisOptions};
/// # fn main() -> Result<(), dque::Error> {
/// let queue = RedisOptions::new()
///     .lease_time(Duration::from_secs(60))
///     .max_attempts(3)
///     .connect("redis://127.0.0.1:6379/0", "mail")?;
/// queue.enqueue(NewJob::new(r#"{"to": "ops@example.com"}"#))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    lease_time: Duration,
    max_attempts: u16,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    worker: Option<String>,
    /// The most connections an async handle opens (see `AsyncRedisJobs`).
    #[cfg(feature = "tokio")]
    async_connections: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            lease_time: crate::options::DEFAULT_VISIBILITY_TIMEOUT,
            max_attempts: crate::options::DEFAULT_MAX_ATTEMPTS,
            backoff: Backoff::default(),
            clock: Arc::new(SystemClock),
            worker: None,
            #[cfg(feature = "tokio")]
            async_connections: async_redis::DEFAULT_CONNECTIONS,
        }
    }
}

impl RedisOptions {
    /// A lease of 30 s, 5 attempts, [`Backoff::default`], the system
    /// clock, a worker name made of the host's name, the process id and a
    /// number.
    pub fn new() -> Self {
        RedisOptions::default()
    }

    /// How long a lease holds a job (default 30 s): qless's heartbeat.
    #[must_use]
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// The attempts a job gets (default 5): a job this handle enqueues gets
    /// qless's `retries` one less, and a nack through this handle makes a
    /// job dead after this many attempts even if its own retries (a qless
    /// client's job: 5 by default) are not used up.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u16) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The back-off of [`Retry::Backoff`].
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The clock of due times, statistics and history (leases always run
    /// on the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The worker name this handle leases under (qless's `worker`; qless
    /// lists jobs by it). Each handle should have its own.
    #[must_use]
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    /// Connects to the server at `url` and opens queue `queue`: a
    /// `redis://[:PASSWORD@]HOST:PORT[/DB]` URL, or a unix socket as
    /// `redis+unix:///PATH[?db=N]` or `unix:///PATH[?db=N]`.
    ///
    /// # Errors
    ///
    /// `Backend` if the URL is malformed or the server cannot be reached
    /// or refuses the script (tested on Redis 7); `InvalidJob` for an
    /// empty queue or worker name.
    pub fn connect(&self, url: &str, queue: &str) -> Result<RedisJobs> {
        self.check_names(queue)?;
        let server = Server::connect(url)?;
        Ok(RedisJobs {
            core: self.core(queue),
            server,
        })
    }

    /// A new handle's state for queue `queue`.
    fn core(&self, queue: &str) -> Core {
        let handle = HANDLES.fetch_add(1, Ordering::Relaxed);
        let worker = self.worker.clone().unwrap_or_else(|| {
            let host = rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned();
            format!("{host}-{}-{handle}", std::process::id())
        });
        Core {
            queue: queue.to_owned(),
            worker,
            lease_time: self.lease_time,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            clock: Arc::clone(&self.clock),
            handle,
            nonce: random_u64(handle as u64),
            calls: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            held: Mutex::new(HashMap::new()),
            due_schedules: DueCache::default(),
        }
    }

    /// Whether `queue` and this worker name can be used.
    fn check_names(&self, queue: &str) -> Result<()> {
        crate::jobs::check_queue_name(queue)?;
        if queue.is_empty() || self.worker.as_deref() == Some("") {
            return Err(Error::InvalidJob {
                reason: "a queue name and a worker name are needed".into(),
            });
        }
        Ok(())
    }
}

/// A job queue in Redis, in qless's data model, shared with qless clients.
///
/// ```no_run
/// use dque::jobs::{JobQueue, NewJob, QlessPut, RedisJobs};
/// # fn main() -> Result<(), dque::Error> {
/// let queue = RedisJobs::connect("redis://127.0.0.1:6379", "mail")?;
/// // A Python qless worker with a `mail.Send` class can run this one.
/// queue.enqueue(NewJob::new(r#"{"to": "ops@example.com"}"#).header("klass", "mail.Send"))?;
/// // qless's own calls: tags, dependencies, retries.
/// let first = queue.put(NewJob::new("{}"), QlessPut::new().tags(["nightly"]))?;
/// queue.put(NewJob::new("{}"), QlessPut::new().depends([first.id()]).retries(0))?;
/// while let Some(lease) = queue.lease()? {
///     queue.ack(lease)?;
/// }
/// # Ok(()) }
/// ```
pub struct RedisJobs {
    core: Core,
    server: Server,
}

impl std::fmt::Debug for RedisJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisJobs")
            .field("queue", &self.core.queue)
            .field("server", &self.server)
            .field("worker", &self.core.worker)
            .field("lease_time", &self.core.lease_time)
            .finish_non_exhaustive()
    }
}

impl RedisJobs {
    /// Connects with default [`RedisOptions`].
    ///
    /// # Errors
    ///
    /// As [`RedisOptions::connect`].
    pub fn connect(url: &str, queue: &str) -> Result<Self> {
        RedisOptions::new().connect(url, queue)
    }

    /// The worker name this handle leases under.
    pub fn worker(&self) -> &str {
        &self.core.worker
    }

    /// Runs script command `command`, unless the handle is closed.
    fn call(&self, command: &str, args: &[&[u8]]) -> Result<Value> {
        ready(self.core.call(&self.server, command, args))
    }

    /// Enqueues `job` with qless's own settings (tags, dependencies, its
    /// retries). Unlike [`JobQueue::enqueue`], a job with this id in any
    /// state anywhere is moved here, as qless's put does.
    ///
    /// # Errors
    ///
    /// As [`JobQueue::enqueue`]; `InvalidJob` for a delay with
    /// dependencies.
    pub fn put(&self, job: NewJob, extra: QlessPut) -> Result<Enqueued> {
        ready(self.core.put_all(&self.server, vec![(job, extra)], "move"))
            .map(|mut added| added.remove(0))
    }

    fn lease_up_to(&self, max: usize) -> Result<Vec<JobLease>> {
        ready(self.core.lease_up_to(&self.server, max))
    }

    /// Completes `lease` and puts the job on queue `next` (qless's
    /// pipelines), ready after `delay`.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the lease ended; `Backend` if the call failed.
    pub fn complete_to(&self, lease: JobLease, next: &str, delay: Duration) -> Result<()> {
        if next.is_empty() {
            return Err(Error::InvalidJob {
                reason: "a next queue's name is needed".into(),
            });
        }
        ready(self.core.settle(
            &self.server,
            "complete",
            &lease,
            &[next.as_bytes(), duration_seconds(delay).as_bytes()],
        ))
        .map(drop)
    }
}

/// `text` with Redis's glob characters escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A qless `wait` or `run` record as a [`Timing`].
fn timing_of(fields: &HashMap<String, String>) -> Timing {
    let float = |name: &str| {
        fields
            .get(name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut histogram = Histogram::default();
    for (index, bucket) in histogram.buckets.iter_mut().enumerate() {
        *bucket = fields
            .get(&Histogram::bucket_name(index))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
            .max(0) as u64;
    }
    Timing {
        count: float("total").max(0.0) as u64,
        mean: float("mean"),
        sum_squares: float("vk"),
        histogram,
    }
}

impl JobQueue for RedisJobs {
    fn lease_time(&self) -> Option<Duration> {
        Some(self.core.lease_time)
    }

    fn name(&self) -> &str {
        &self.core.queue
    }

    fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.enqueue_batch(vec![job])
            .map(|mut added| added.remove(0))
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        ready(self.core.enqueue_batch(&self.server, jobs))
    }

    fn lease(&self) -> Result<Option<JobLease>> {
        Ok(self.lease_up_to(1)?.pop())
    }

    fn lease_batch(&self, max: usize) -> Result<Vec<JobLease>> {
        self.lease_up_to(max)
    }

    fn lease_timeout(&self, wait: Duration) -> Result<Option<JobLease>> {
        let deadline = Instant::now().checked_add(wait);
        let mut poll = Duration::from_millis(1);
        loop {
            if let Some(lease) = self.lease_up_to(1)?.pop() {
                return Ok(Some(lease));
            }
            let left = deadline.map_or(poll, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(left.min(poll));
            poll = (poll * 2).min(LEASE_POLL_MAX);
        }
    }

    fn ack(&self, lease: JobLease) -> Result<()> {
        ready(self.core.ack(&self.server, lease))
    }

    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked> {
        ready(self.core.nack(&self.server, lease, retry, reason))
    }

    fn release(&self, lease: JobLease) -> Result<()> {
        ready(self.core.release(&self.server, lease))
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> Result<SystemTime> {
        ready(self.core.release_after(&self.server, lease, delay))
    }

    fn touch(&self, lease: &JobLease) -> Result<()> {
        ready(self.core.touch(&self.server, lease))
    }

    fn fail(&self, lease: JobLease, reason: &str) -> Result<()> {
        ready(self.core.fail(&self.server, lease, reason))
    }

    fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        ready(self.core.set_priority(&self.server, id, priority))
    }

    fn cancel(&self, id: &str) -> Result<()> {
        ready(self.core.cancel(&self.server, id))
    }

    fn run_now(&self, id: &str) -> Result<bool> {
        ready(self.core.run_now(&self.server, id))
    }

    fn waiting(&self, max: usize) -> Result<Vec<Waiting>> {
        ready(self.core.waiting(&self.server, max))
    }

    fn leases(&self, max: usize) -> Result<Vec<super::LeaseInfo>> {
        ready(self.core.leases(&self.server, max))
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadJob>> {
        ready(self.core.dead(&self.server, max))
    }

    fn requeue_dead(&self, id: &str) -> Result<()> {
        ready(self.core.requeue_dead(&self.server, id))
    }

    fn counts(&self) -> Result<Counts> {
        ready(self.core.counts(&self.server))
    }

    fn stats(&self) -> Result<QueueStats> {
        ready(self.core.stats(&self.server))
    }

    fn close(&self) -> Result<()> {
        ready(self.core.close(&self.server))
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> Result<()> {
        ready(self.core.set_paused(&self.server, true))
    }

    fn resume(&self) -> Result<()> {
        ready(self.core.set_paused(&self.server, false))
    }

    fn is_paused(&self) -> Result<bool> {
        ready(self.core.is_paused(&self.server))
    }

    fn set_limit(&self, name: &str, max: u32) -> Result<()> {
        ready(self.core.set_limit(&self.server, name, max))
    }

    fn remove_limit(&self, name: &str) -> Result<bool> {
        ready(self.core.remove_limit(&self.server, name))
    }

    fn limits(&self) -> Result<Vec<crate::jobs::Limit>> {
        ready(self.core.limits(&self.server))
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        ready(self.core.add_schedule(&self.server, schedule))
    }

    fn unschedule(&self, name: &str) -> Result<bool> {
        ready(self.core.remove_schedule(&self.server, name))
    }

    fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        ready(self.core.list_schedules(&self.server))
    }

    fn fire_schedules(&self) -> Result<usize> {
        ready(self.core.fire_due(&self.server, self.core.now()))
    }

    // --- history (issue 27) ---

    fn job_info(&self, id: &str) -> Result<Option<super::JobInfo>> {
        ready(self.core.job_info(&self.server, id))
    }
}

impl Drop for RedisJobs {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
