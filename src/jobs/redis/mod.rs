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

mod encoding;
mod qless;
mod script;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::redis::Value;
use parking_lot::Mutex;

pub use encoding::{DEFAULT_KLASS, KLASS_HEADER};
pub use qless::{QlessJob, QlessPut, QueueCounts, WorkerJobs};

use self::encoding::{
    array_of, duration_seconds, encode_body, encode_headers, int_of, qless_priority, text_of,
    JobReply,
};
use self::script::Server;
use super::clock::{Clock, SystemClock};
use super::job::{
    new_job_id, random_u64, DeadJob, Enqueued, JobLease, LeaseToken, Nacked, NewJob, Retry,
    WaitState, Waiting,
};
use super::stats::{failure_group, Counts, DayStats, Histogram, QueueStats, Timing};
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
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            lease_time: crate::options::DEFAULT_VISIBILITY_TIMEOUT,
            max_attempts: crate::options::DEFAULT_MAX_ATTEMPTS,
            backoff: Backoff::default(),
            clock: Arc::new(SystemClock),
            worker: None,
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
        crate::jobs::check_queue_name(queue)?;
        if queue.is_empty() || self.worker.as_deref() == Some("") {
            return Err(Error::InvalidJob {
                reason: "a queue name and a worker name are needed".into(),
            });
        }
        let server = Server::connect(url)?;
        let handle = HANDLES.fetch_add(1, Ordering::Relaxed);
        let worker = self.worker.clone().unwrap_or_else(|| {
            let host = rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned();
            format!("{host}-{}-{handle}", std::process::id())
        });
        Ok(RedisJobs {
            queue: queue.to_owned(),
            server,
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
        })
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
    queue: String,
    server: Server,
    worker: String,
    lease_time: Duration,
    max_attempts: u16,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    handle: usize,
    /// Makes this handle's lease tokens its own, even beside another
    /// handle (or an earlier process) with the same worker name.
    nonce: u64,
    /// Numbers this handle's lease calls (part of each lease's token).
    calls: AtomicU64,
    closed: AtomicBool,
    /// Leases given out and not settled (job id → token): handed back at
    /// close, as a closed embedded handle's are.
    held: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for RedisJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisJobs")
            .field("queue", &self.queue)
            .field("server", &self.server)
            .field("worker", &self.worker)
            .field("lease_time", &self.lease_time)
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
        &self.worker
    }

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Runs script command `command`, unless the handle is closed.
    fn call(&self, command: &str, args: &[&[u8]]) -> Result<Value> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.server.call(command, self.now(), args)
    }

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

    /// Puts `jobs` in one script call (all or none); `mode` is `new` (a
    /// queued id is left alone) or `move` (qless's put: moved here).
    fn put_all(&self, jobs: Vec<(NewJob, QlessPut)>, mode: &str) -> Result<Vec<Enqueued>> {
        let now = self.now();
        let mut fields: Vec<Vec<u8>> = vec![mode.into(), self.queue.clone().into_bytes()];
        let mut ids = Vec::with_capacity(jobs.len());
        for (job, extra) in &jobs {
            Self::check_new(job)?;
            extra.check(job)?;
            let made = job.id.is_none();
            let id = job.id.clone().unwrap_or_else(new_job_id);
            let (data, raw) = encode_body(&job.body);
            let (klass, headers) = encode_headers(&job.headers);
            let delay = job.ready_at(now).duration_since(now).unwrap_or_default();
            let retries = extra
                .retries
                .unwrap_or_else(|| u32::from(self.max_attempts).saturating_sub(1));
            fields.extend([
                id.clone().into_bytes(),
                klass.into_bytes(),
                data.into_bytes(),
                qless_priority(job.priority).to_string().into_bytes(),
                serde_json::to_vec(&extra.tags).expect("strings serialize"),
                duration_seconds(delay).into_bytes(),
                retries.to_string().into_bytes(),
                serde_json::to_vec(&extra.depends).expect("strings serialize"),
                if raw.is_some() {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                },
                raw.map(<[u8]>::to_vec).unwrap_or_default(),
                headers.into_bytes(),
                if made { b"1".to_vec() } else { b"0".to_vec() },
            ]);
            ids.push(id);
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let args: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        let reply = self.call("put", &args)?;
        let added = array_of(&reply)?;
        Ok(ids
            .into_iter()
            .zip(added)
            .map(|(id, added)| match int_of(added) {
                Ok(1) => Enqueued::Added(id),
                _ => Enqueued::AlreadyQueued(id),
            })
            .collect())
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
        self.put_all(vec![(job, extra)], "move")
            .map(|mut added| added.remove(0))
    }

    /// The token of lease `record` of lease call `call`: the worker's name
    /// and a bar first (the script tells dque's leases by it), then this
    /// handle's nonce.
    fn lease_token(&self, call: i64, record: u64) -> String {
        format!("{}|{:016x}-{call}:{record}", self.worker, self.nonce)
    }

    fn lease_up_to(&self, max: usize) -> Result<Vec<JobLease>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed) as i64;
        let base = self.lease_token(call, 0);
        let base = base
            .strip_suffix(":0")
            .expect("the token ends with the record");
        let reply = self.call(
            "pop",
            &[
                self.queue.as_bytes(),
                self.worker.as_bytes(),
                max.min(MAX_LISTED).to_string().as_bytes(),
                duration_seconds(self.lease_time).as_bytes(),
                base.as_bytes(),
            ],
        )?;
        let mut leases = Vec::new();
        let mut tokens = Vec::new();
        for (index, value) in array_of(&reply)?.iter().enumerate() {
            let reply = JobReply::parse(value)?;
            tokens.push((reply.job.id.clone(), reply.lease.clone()));
            leases.push(JobLease {
                token: LeaseToken {
                    part: call,
                    record: index as u64 + 1,
                    attempt: reply.job.attempt,
                    queue: self.handle,
                    leased_ms: 0,
                },
                job: reply.job,
            });
        }
        // Checked under the lock `close` drains under: a close that ran
        // meanwhile never saw these, so they go back uncounted and the call
        // had no effect; else close will find them.
        let mut held = self.held.lock();
        if self.closed.load(Ordering::SeqCst) {
            drop(held);
            for lease in leases {
                let _ = self.settle_anyway("release", &lease);
            }
            let _ = self
                .server
                .call("deregister", self.now(), &[self.worker.as_bytes()]);
            return Err(Error::Closed);
        }
        held.extend(tokens);
        Ok(leases)
    }

    /// The lease's token in Redis, checking it is this handle's.
    fn token_of(&self, lease: &JobLease) -> Result<String> {
        if lease.token.queue != self.handle {
            return Err(Error::InvalidJob {
                reason: format!(
                    "the lease of job {:?} was taken from another queue handle; settle it there",
                    lease.job.id
                ),
            });
        }
        Ok(self.lease_token(lease.token.part, lease.token.record))
    }

    /// Runs settling command `command` on `lease` with `extra` arguments;
    /// `LeaseLost` if the lease no longer holds.
    fn settle(&self, command: &str, lease: &JobLease, extra: &[&[u8]]) -> Result<Value> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.settle_with(command, lease, extra)
    }

    /// [`settle`](Self::settle), even on a closed handle.
    fn settle_anyway(&self, command: &str, lease: &JobLease) -> Result<Value> {
        self.settle_with(command, lease, &[])
    }

    fn settle_with(&self, command: &str, lease: &JobLease, extra: &[&[u8]]) -> Result<Value> {
        let token = self.token_of(lease)?;
        let mut args: Vec<&[u8]> = vec![
            lease.job.id.as_bytes(),
            self.queue.as_bytes(),
            self.worker.as_bytes(),
            token.as_bytes(),
        ];
        args.extend_from_slice(extra);
        let result = self.server.call(command, self.now(), &args);
        if command != "heartbeat" {
            // Only this lease's entry: a stale lease of a job this handle
            // leased again must not drop the live one.
            let mut held = self.held.lock();
            if held.get(&lease.job.id) == Some(&token) {
                held.remove(&lease.job.id);
            }
        }
        result.map_err(|e| match e {
            Error::LeaseLost { .. } | Error::NoSuchJob { .. } => Error::LeaseLost {
                id: lease.token.record,
                attempt: u16::try_from(lease.job.attempt).unwrap_or(u16::MAX),
            },
            other => other,
        })
    }

    /// Ends every lease this handle holds, their attempts counted (as an
    /// embedded handle's end when it closes).
    fn hand_back_held(&self) -> Result<()> {
        let held: Vec<(String, String)> = self.held.lock().drain().collect();
        let now = self.now();
        let mut first_error = None;
        for (id, token) in held {
            let args: [&[u8]; 4] = [
                id.as_bytes(),
                self.queue.as_bytes(),
                self.worker.as_bytes(),
                token.as_bytes(),
            ];
            match self.server.call("abandon", now, &args) {
                Ok(_) | Err(Error::LeaseLost { .. } | Error::NoSuchJob { .. }) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
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
        self.settle(
            "complete",
            &lease,
            &[next.as_bytes(), duration_seconds(delay).as_bytes()],
        )
        .map(drop)
    }

    fn fail_with(&self, lease: JobLease, group: &str, message: &str) -> Result<()> {
        self.settle("fail", &lease, &[group.as_bytes(), message.as_bytes()])
            .map(drop)
    }

    /// The jobs listing command `command` answers for this queue, `max` at
    /// most.
    fn list(&self, command: &str, max: usize) -> Result<Vec<JobReply>> {
        let max = max.min(MAX_LISTED).to_string();
        let reply = self.call(command, &[self.queue.as_bytes(), max.as_bytes()])?;
        array_of(&reply)?.iter().map(JobReply::parse).collect()
    }

    fn read_days(&self) -> Result<Vec<DayStats>> {
        // qless keeps `ql:s:{wait,run,stats}:<day>:<queue>`; the days on
        // record are found by their keys.
        let pattern = format!("ql:s:*:{}", glob_escape(&self.queue));
        let keys: Vec<String> = self.server.with(|connection| {
            let keys: ::redis::Iter<'_, String> = ::redis::cmd("SCAN")
                .cursor_arg(0)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .clone()
                .iter(connection)?;
            keys.collect()
        })?;
        let suffix = format!(":{}", self.queue);
        let mut days: BTreeMap<u64, DayStats> = BTreeMap::new();
        for key in keys {
            let Some(rest) = key
                .strip_prefix("ql:s:")
                .and_then(|k| k.strip_suffix(&suffix))
            else {
                continue;
            };
            let Some((kind, day)) = rest.split_once(':') else {
                continue;
            };
            let Ok(day) = day.parse::<u64>() else {
                continue;
            };
            let fields: HashMap<String, String> = self
                .server
                .with(|connection| ::redis::cmd("HGETALL").arg(&key).query(connection))?;
            let record = days.entry(day).or_insert_with(|| DayStats::new(day));
            match kind {
                "wait" => record.wait = timing_of(&fields),
                "run" => record.run = timing_of(&fields),
                "stats" => {
                    let number = |name: &str| {
                        fields
                            .get(name)
                            .and_then(|v| v.parse::<i64>().ok())
                            .unwrap_or(0)
                            .max(0) as u64
                    };
                    record.retries = number("retries");
                    let mut grouped = 0;
                    for (name, value) in &fields {
                        if let Some(group) = name.strip_prefix("dque-failure:") {
                            let count = value.parse::<u64>().unwrap_or(0);
                            grouped += count;
                            record.failures.insert(group.to_owned(), count);
                        }
                    }
                    // Failures a qless client recorded carry no group here.
                    let others = number("failures").saturating_sub(grouped);
                    if others > 0 {
                        record.failures.insert("qless".to_owned(), others);
                    }
                }
                _ => {}
            }
        }
        Ok(days.into_values().collect())
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
    fn name(&self) -> &str {
        &self.queue
    }

    fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.put_all(vec![(job, QlessPut::new())], "new")
            .map(|mut added| added.remove(0))
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.put_all(
            jobs.into_iter().map(|job| (job, QlessPut::new())).collect(),
            "new",
        )
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
        self.settle("complete", &lease, &[b"", b"0"]).map(drop)
    }

    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked> {
        // The job's own retries (qless's) or this handle's attempts,
        // whichever run out first.
        if lease.job.attempt >= u32::from(self.max_attempts) {
            let attempts = lease.job.attempt;
            // The group comes from the reason alone (not the note added to
            // it); without one, qless's group for used-up retries.
            let group = failure_group(reason);
            let group = if group.is_empty() {
                format!("failed-retries-{}", self.queue)
            } else {
                group
            };
            let reason = if reason.is_empty() {
                format!("Job exhausted retries in queue \"{}\"", self.queue)
            } else {
                reason.to_owned()
            };
            let message = format!("{reason} (attempts used up: {attempts})");
            self.fail_with(lease, &group, &message)?;
            return Ok(Nacked::Dead);
        }
        let delay = match retry {
            Retry::Backoff => self.backoff.delay(lease.job.attempt),
            Retry::After(delay) => delay,
        };
        let now = self.now();
        let at = super::job::due_after(now, delay);
        let delay = at.duration_since(now).unwrap_or_default();
        let group = failure_group(reason);
        let answer = self.settle(
            "retry",
            &lease,
            &[
                duration_seconds(delay).as_bytes(),
                group.as_bytes(),
                reason.as_bytes(),
            ],
        )?;
        Ok(match text_of(&answer).as_str() {
            "failed" => Nacked::Dead,
            _ => Nacked::Retrying { at },
        })
    }

    fn release(&self, lease: JobLease) -> Result<()> {
        self.settle("release", &lease, &[]).map(drop)
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> Result<SystemTime> {
        let now = self.now();
        if delay.is_zero() {
            self.release(lease)?;
            return Ok(now);
        }
        let at = super::job::due_after(now, delay);
        let delay = at.duration_since(now).unwrap_or_default();
        self.settle("snooze", &lease, &[duration_seconds(delay).as_bytes()])?;
        Ok(at)
    }

    fn touch(&self, lease: &JobLease) -> Result<()> {
        self.settle(
            "heartbeat",
            lease,
            &[duration_seconds(self.lease_time).as_bytes()],
        )
        .map(drop)
    }

    fn fail(&self, lease: JobLease, reason: &str) -> Result<()> {
        let group = failure_group(reason);
        let group = if group.is_empty() { "failed" } else { &group };
        self.fail_with(lease, group, reason)
    }

    fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        self.call(
            "priority",
            &[
                id.as_bytes(),
                self.queue.as_bytes(),
                qless_priority(priority).to_string().as_bytes(),
                b"0",
            ],
        )
        .map(drop)
    }

    fn cancel(&self, id: &str) -> Result<()> {
        self.call("cancel", &[self.queue.as_bytes(), id.as_bytes()])
            .map(drop)
    }

    fn waiting(&self, max: usize) -> Result<Vec<Waiting>> {
        let now = self.now();
        Ok(self
            .list("waiting", max)?
            .into_iter()
            .map(|reply| {
                let state = match reply.state.as_str() {
                    "running" => WaitState::Leased,
                    "scheduled" => WaitState::Scheduled(reply.at.unwrap_or(now)),
                    _ => WaitState::Ready,
                };
                Waiting {
                    job: reply.job,
                    state,
                }
            })
            .collect())
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadJob>> {
        Ok(self
            .list("dead", max)?
            .into_iter()
            .map(|reply| DeadJob {
                reason: reply.failure_message(),
                job: reply.job,
            })
            .collect())
    }

    fn requeue_dead(&self, id: &str) -> Result<()> {
        self.call("requeue", &[id.as_bytes(), self.queue.as_bytes()])
            .map(drop)
    }

    fn counts(&self) -> Result<Counts> {
        let counts = self.queue_counts_now()?;
        Ok(Counts {
            ready: counts.waiting,
            scheduled: counts.scheduled,
            leased: counts.running,
            dead: counts.failed,
        })
    }

    fn stats(&self) -> Result<QueueStats> {
        let counts = self.counts()?;
        Ok(QueueStats {
            queue: self.queue.clone(),
            counts,
            days: self.read_days()?,
        })
    }

    fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let handed_back = self.hand_back_held();
        // qless lists workers; one that holds nothing is forgotten.
        let forgotten = self
            .server
            .call("deregister", self.now(), &[self.worker.as_bytes()]);
        handed_back.and(forgotten.map(drop))
    }
}

impl Drop for RedisJobs {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
