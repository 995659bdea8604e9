//! One job's whole record, whatever its state ([`JobInfo`], from
//! [`JobQueue::job_info`](super::JobQueue::job_info)), what its history
//! says happened ([`JobEvent`]), how long completed jobs are kept
//! ([`KeepCompleted`]), and the per-job timeout's header
//! ([`TIMEOUT_HEADER`]). Backend-neutral: plain data, so a dashboard can
//! render a job's page from it (or from its JSON, [`JobInfo::to_json`]).

use std::time::{Duration, SystemTime};

use super::clock::unix_ms;
use super::job::{DeadJob, Job, WaitState, Waiting};

/// The header that holds a job's own timeout, in milliseconds
/// ([`NewJob::timeout`](super::NewJob::timeout)): a header, so every
/// backend stores it with the job as it stores the others (and a qless
/// client sees it in the job's `dque-headers`).
pub const TIMEOUT_HEADER: &str = "dque_timeout_ms";

/// Where a job is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Ready to be leased.
    Ready,
    /// Out of sight until its time ([`JobInfo::due_at`]).
    Scheduled,
    /// Held by a worker now.
    Leased,
    /// A dead letter: its attempts were used up, or a worker failed it.
    Dead,
    /// It ran and was acknowledged; kept as the queue's history keeps
    /// completed jobs ([`KeepCompleted`]).
    Completed,
}

impl JobState {
    /// Its name: `ready`, `scheduled`, `leased`, `dead` or `completed`
    /// (as `dque job` prints it, and [`JobInfo::to_json`]).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Scheduled => "scheduled",
            JobState::Leased => "leased",
            JobState::Dead => "dead",
            JobState::Completed => "completed",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened to a job, as its backend recorded it.
///
/// `what` is one of `enqueued`, `leased`, `nacked`, `released`,
/// `scheduled`, `failed` (a dead letter), `timed-out`, `requeued`,
/// `completed`; a Redis queue also shows qless's own events under their
/// qless names (`throttled`, `put` into another queue is `enqueued`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    /// When (to the second on Redis, the millisecond elsewhere).
    pub at: SystemTime,
    /// What happened.
    pub what: String,
    /// The worker it happened with (a lease's holder), if known.
    pub worker: Option<String>,
    /// More: a nack's or failure's reason, a queue's name.
    pub detail: Option<String>,
}

impl JobEvent {
    /// An event without worker nor detail.
    pub fn new(at: SystemTime, what: impl Into<String>) -> Self {
        JobEvent {
            at,
            what: what.into(),
            worker: None,
            detail: None,
        }
    }
}

/// One job, whatever its state: what [`JobQueue::job_info`](super::JobQueue::job_info)
/// answers. What a backend does not keep is `None` (an embedded queue
/// records no holder of a lease; a completed job's body is kept by every
/// backend that keeps completed jobs).
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue, JobState, NewJob};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.enqueue(NewJob::new("hello").id("greet-1"))?;
/// let info = queue.job_info("greet-1")?.expect("queued");
/// assert_eq!(info.state, JobState::Ready);
/// assert_eq!(info.history[0].what, "enqueued");
/// assert!(info.to_json().contains("\"state\":\"ready\""));
/// assert!(queue.job_info("no-such-job")?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job (`attempt`: the attempts so far, the running one included).
    pub job: Job,
    /// The queue it is in (or completed in).
    pub queue: String,
    /// Where it is now.
    pub state: JobState,
    /// A scheduled job's due time.
    pub due_at: Option<SystemTime>,
    /// When its last attempt started, if known.
    pub started_at: Option<SystemTime>,
    /// When it completed or died, if it did and the time is known.
    pub finished_at: Option<SystemTime>,
    /// The worker holding it (leased) or that ran it last, if known.
    pub worker: Option<String>,
    /// The last error: a dead letter's reason, or a failed attempt's.
    pub last_error: Option<String>,
    /// Its own timeout ([`NewJob::timeout`](super::NewJob::timeout)).
    pub timeout: Option<Duration>,
    /// What happened to it, oldest first, as far as the backend keeps it
    /// (Redis: qless's history; PostgreSQL and embedded: what the row or
    /// record holds: enqueued, the last lease, the end).
    pub history: Vec<JobEvent>,
}

impl JobInfo {
    /// A job whose record says only what [`Waiting`] or [`DeadJob`] does,
    /// its history made from its times.
    pub(crate) fn bare(job: Job, queue: &str, state: JobState) -> Self {
        let timeout = job_timeout(&job);
        let history = vec![JobEvent::new(job.enqueued_at, "enqueued")];
        JobInfo {
            job,
            queue: queue.to_owned(),
            state,
            due_at: None,
            started_at: None,
            finished_at: None,
            worker: None,
            last_error: None,
            timeout,
            history,
        }
    }

    /// A waiting job as [`JobQueue::waiting`](super::JobQueue::waiting) lists it.
    pub(crate) fn of_waiting(waiting: Waiting, queue: &str) -> Self {
        let (state, due_at) = match waiting.state {
            WaitState::Ready => (JobState::Ready, None),
            WaitState::Leased => (JobState::Leased, None),
            WaitState::Scheduled(at) => (JobState::Scheduled, Some(at)),
        };
        let mut info = JobInfo::bare(waiting.job, queue, state);
        info.due_at = due_at;
        info
    }

    /// A dead letter as [`JobQueue::dead`](super::JobQueue::dead) lists it.
    pub(crate) fn of_dead(dead: DeadJob, queue: &str) -> Self {
        let mut info = JobInfo::bare(dead.job, queue, JobState::Dead);
        info.last_error = Some(dead.reason);
        info
    }

    /// The record as one JSON object (times as Unix milliseconds, the
    /// body as text when it is UTF-8, else as `body_hex`): what
    /// `dque job --json` prints, and what a web page can read.
    pub fn to_json(&self) -> String {
        use serde_json::{json, Value};
        let ms = |t: Option<SystemTime>| t.map_or(Value::Null, |t| json!(unix_ms(t)));
        let (body, body_hex) = match std::str::from_utf8(&self.job.body) {
            Ok(text) => (json!(text), Value::Null),
            Err(_) => (Value::Null, json!(hex(&self.job.body))),
        };
        let headers: serde_json::Map<String, Value> = self
            .job
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), json!(v)))
            .collect();
        let history: Vec<Value> = self
            .history
            .iter()
            .map(|e| {
                json!({
                    "at_ms": unix_ms(e.at),
                    "what": e.what,
                    "worker": e.worker,
                    "detail": e.detail,
                })
            })
            .collect();
        json!({
            "id": self.job.id,
            "queue": self.queue,
            "state": self.state.as_str(),
            "priority": self.job.priority,
            "attempts": self.job.attempt,
            "caller_id": self.job.caller_id,
            "body": body,
            "body_hex": body_hex,
            "headers": headers,
            "timeout_ms": self.timeout.map(|t| t.as_millis() as u64),
            "enqueued_at_ms": unix_ms(self.job.enqueued_at),
            "due_at_ms": ms(self.due_at),
            "started_at_ms": ms(self.started_at),
            "finished_at_ms": ms(self.finished_at),
            "worker": self.worker,
            "last_error": self.last_error,
            "history": history,
        })
        .to_string()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A job's own timeout, from its [`TIMEOUT_HEADER`].
pub(crate) fn job_timeout(job: &Job) -> Option<Duration> {
    job.header(TIMEOUT_HEADER)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// How long completed jobs are kept for [`JobQueue::job_info`](super::JobQueue::job_info)
/// to find: for a time and up to a count, whichever is reached first (as
/// qless's `jobs-history` and `jobs-history-count`). The default keeps
/// them for a day, at most 50,000 ([`KeepCompleted::DEFAULT`]); Redis
/// keeps what its qless configuration says (qless's default: 7 days,
/// 50,000).
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::KeepCompleted;
/// let keep = KeepCompleted::new(Duration::from_secs(3600), 1000);
/// assert_eq!(keep.count(), 1000);
/// assert!(KeepCompleted::NONE.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepCompleted {
    for_time: Duration,
    count: u64,
}

impl KeepCompleted {
    /// A day, at most 50,000 jobs (River keeps completed jobs a day; qless
    /// caps its history at 50,000).
    pub const DEFAULT: KeepCompleted = KeepCompleted {
        for_time: Duration::from_secs(24 * 3600),
        count: 50_000,
    };

    /// Completed jobs are not kept (an ack removes the job).
    pub const NONE: KeepCompleted = KeepCompleted {
        for_time: Duration::ZERO,
        count: 0,
    };

    /// Keeps them for `for_time`, at most `count` (either zero: none). A
    /// time beyond `u64::MAX` milliseconds is taken as that (what every
    /// backend stores).
    pub fn new(for_time: Duration, count: u64) -> Self {
        if for_time.is_zero() || count == 0 {
            return KeepCompleted::NONE;
        }
        // Stored and compared in milliseconds: a longer time would not
        // read back (the embedded queue's `keep` file) or would wrap.
        let for_time = for_time.min(Duration::from_millis(u64::MAX));
        KeepCompleted { for_time, count }
    }

    /// How long a completed job is kept.
    pub fn for_time(&self) -> Duration {
        self.for_time
    }

    /// How many completed jobs are kept at most.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether none are kept.
    pub fn is_none(&self) -> bool {
        self.count == 0
    }
}

impl Default for KeepCompleted {
    fn default() -> Self {
        KeepCompleted::DEFAULT
    }
}

/// The fallback lookup of [`JobQueue::job_info`](super::JobQueue::job_info)
/// for a backend that keeps no index: the waiting jobs, then the dead
/// letters, read through.
pub(crate) fn find_listed(
    id: &str,
    queue: &str,
    waiting: Vec<Waiting>,
    dead: impl FnOnce() -> crate::error::Result<Vec<DeadJob>>,
) -> crate::error::Result<Option<JobInfo>> {
    if let Some(w) = waiting.into_iter().find(|w| w.job.id == id) {
        return Ok(Some(JobInfo::of_waiting(w, queue)));
    }
    Ok(dead()?
        .into_iter()
        .rev()
        .find(|d| d.job.id == id)
        .map(|d| JobInfo::of_dead(d, queue)))
}

/// As many jobs as a listing can hold: what the fallback lookup reads.
pub(crate) const ALL: usize = u32::MAX as usize;

/// This process's name as a worker, `host:pid`: what an embedded or
/// PostgreSQL queue records as the worker of a completed job.
pub(crate) fn worker_name() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}", std::process::id())
}
