//! What a job is: the one to enqueue, the one leased, and the answers of
//! enqueue and nack. Backend-neutral: plain data.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use super::unique::{Duplicate, Hold, UniqueStates};
use crate::error::{Error, Result};

/// The longest job id a caller may choose, in bytes.
pub const MAX_JOB_ID_BYTES: usize = 100;

/// The longest header name, in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 255;

/// A job to enqueue: a body, and how and when it should run.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::NewJob;
///
/// let job = NewJob::new(b"resize photo.jpg".to_vec())
///     .priority(-5)
///     .delay(Duration::from_secs(30))
///     .header("owner", "ops")
///     .id("photo.jpg");
/// assert_eq!(job.priority_value(), -5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub(crate) body: Vec<u8>,
    pub(crate) priority: i32,
    pub(crate) run_at: RunAt,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) id: Option<String>,
    /// How long the id is held after enqueue (issue 27's unique jobs).
    pub(crate) unique_for: Option<Duration>,
    /// The states the id is held in, if not the default.
    pub(crate) unique_states: Option<UniqueStates>,
}

/// When a new job may first run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAt {
    Now,
    After(Duration),
    At(SystemTime),
}

impl NewJob {
    /// A job with `body`, priority 0, ready now, no headers, and an id the
    /// backend makes up.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        NewJob {
            body: body.into(),
            priority: 0,
            run_at: RunAt::Now,
            headers: Vec::new(),
            id: None,
            unique_for: None,
            unique_states: None,
        }
    }

    /// Sets the priority (default 0): of the ready jobs, one with a smaller
    /// number is leased first; equal priorities keep FIFO order.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Keeps the job out of sight (scheduled) for `delay` from enqueue.
    ///
    /// A job whose time would fall after 9999-12-31T23:59:59Z (as with
    /// `Duration::MAX`) is due at that time on every backend: scheduled,
    /// never due in practice, until its priority, a cancel or a lease by id
    /// changes it.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = if delay.is_zero() {
            RunAt::Now
        } else {
            RunAt::After(delay)
        };
        self
    }

    /// Keeps the job out of sight (scheduled) until `time` (ready at once if
    /// `time` has passed; a time after 9999-12-31T23:59:59Z is that time, as
    /// for [`delay`](Self::delay)).
    #[must_use]
    pub fn at(mut self, time: SystemTime) -> Self {
        self.run_at = RunAt::At(time);
        self
    }

    /// Adds header `name=value` (names are `[A-Za-z0-9_]+`, checked by the
    /// enqueue). A name given twice keeps the last value.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    /// Chooses the job's id: while a job with this id is ready, scheduled
    /// or leased, enqueueing it again does nothing (see [`Enqueued`]).
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Holds the job's id (set with [`id`](Self::id)) for `period` from
    /// enqueue: any enqueue of the id meanwhile adds nothing, even once
    /// this job ran ([`Enqueued::Duplicate`]); in the states of
    /// [`unique_states`](Self::unique_states) (default: queued, running
    /// and done, as Oban and River). Enforced by the store (the ids'
    /// lock, a unique index, the Redis script), so concurrent producers
    /// never both add. A zero period is no period.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{EmbeddedJobs, Enqueued, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
    /// let job = || NewJob::new("mail").id("order-7").unique_for(Duration::from_secs(3600));
    /// assert!(queue.enqueue(job())?.is_added());
    /// let lease = queue.lease()?.expect("a job");
    /// queue.ack(lease)?;
    /// assert!(matches!(queue.enqueue(job())?, Enqueued::Duplicate(_)), "ran within the hour");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn unique_for(mut self, period: Duration) -> Self {
        self.unique_for = (!period.is_zero()).then_some(period);
        self
    }

    /// The states in which the id is held for the period of
    /// [`unique_for`](Self::unique_for) (queued and running must be in;
    /// add [`UniqueStates::DEAD`] to hold it after the job died too).
    #[must_use]
    pub fn unique_states(mut self, states: UniqueStates) -> Self {
        self.unique_states = Some(states);
        self
    }

    /// What the job holds if enqueued at `now`: its period's end and states.
    pub(crate) fn hold(&self, now: SystemTime) -> Option<Hold> {
        let period = self.unique_for?;
        self.id.as_ref()?;
        Some(Hold {
            until_ms: crate::jobs::clock::unix_ms(due_after(now, period)),
            states: self.unique_states.unwrap_or_default(),
        })
    }

    /// Gives the job its own timeout: a worker ends an attempt running
    /// longer (the runtime, `dque work`), failing it with "timed out", and
    /// this timeout takes precedence over the worker's. Stored with the job
    /// on every backend, in header [`TIMEOUT_HEADER`](super::TIMEOUT_HEADER)
    /// (whole milliseconds: less than one is taken as 1, more than
    /// `u64::MAX` as `u64::MAX`). A timeout of zero is refused by the
    /// enqueue (`InvalidJob`), as is a header that holds no whole number
    /// of milliseconds from 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::NewJob;
    /// let job = NewJob::new("resize").timeout(Duration::from_secs(30));
    /// assert_eq!(job.timeout_value(), Some(Duration::from_secs(30)));
    /// ```
    #[must_use]
    pub fn timeout(self, timeout: Duration) -> Self {
        // Zero stays 0, which the enqueue refuses (an attempt that times
        // out at once is no timeout anyone meant).
        let ms = match timeout.is_zero() {
            true => 0,
            false => timeout.as_millis().clamp(1, u128::from(u64::MAX)) as u64,
        };
        self.header(super::history::TIMEOUT_HEADER, ms.to_string())
    }

    /// The job's own timeout, if it has one.
    pub fn timeout_value(&self) -> Option<Duration> {
        self.headers
            .iter()
            .find(|(n, _)| n == super::history::TIMEOUT_HEADER)
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    /// The priority this job will have.
    pub fn priority_value(&self) -> i32 {
        self.priority
    }

    /// When the job will be ready, given the time of enqueue.
    pub(crate) fn ready_at(&self, now: SystemTime) -> SystemTime {
        match self.run_at {
            RunAt::Now => now,
            RunAt::After(delay) => due_after(now, delay),
            RunAt::At(time) => time.min(latest_due()),
        }
    }

    /// `InvalidJob` unless the id and headers follow the rules.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(id) = &self.id {
            check_id(id)?;
        }
        if let Some(states) = self.unique_states {
            states.check()?;
        }
        if self.id.is_none() && (self.unique_for.is_some() || self.unique_states.is_some()) {
            return Err(Error::InvalidJob {
                reason: "a uniqueness period holds a caller id: give the job an id".into(),
            });
        }
        if self.unique_states.is_some() && self.unique_for.is_none() {
            return Err(Error::InvalidJob {
                reason: "unique states apply for a period: give the job unique_for too".into(),
            });
        }
        // Most jobs have no headers: none of their checks called.
        if self.headers.is_empty() {
            return Ok(());
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        super::limits::check_job_limits(&self.headers)?;
        check_timeout_header(&self.headers)?;
        Ok(())
    }
}

/// `InvalidJob` unless the job's timeout header, if any, holds whole
/// milliseconds from 1 (what every worker reads it as; anything else
/// would be stored and then silently be no timeout).
pub(crate) fn check_timeout_header(headers: &[(String, String)]) -> Result<()> {
    let name = super::history::TIMEOUT_HEADER;
    for (_, value) in headers.iter().filter(|(n, _)| n == name) {
        let ms = value.parse::<u64>().ok().filter(|ms| *ms > 0);
        if ms.is_none() {
            return Err(Error::InvalidJob {
                reason: format!(
                    "header {name} = {value:?}: a job's timeout is whole milliseconds from 1 \
                     to {}; give NewJob::timeout a duration above zero",
                    u64::MAX
                ),
            });
        }
    }
    Ok(())
}

/// The latest time a job can be due, 9999-12-31T23:59:59Z: a later one is
/// taken as this. Every backend stores it exactly (a `u64` or `i64` of
/// milliseconds, Redis's `f64` seconds: below 2^53), so a huge delay means
/// "never due" everywhere instead of overflowing into "due now".
pub(crate) fn latest_due() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799)
}

/// When a job delayed by `delay` at `now` is due, at most [`latest_due`].
pub(crate) fn due_after(now: SystemTime, delay: Duration) -> SystemTime {
    now.checked_add(delay)
        .map_or_else(latest_due, |at| at.min(latest_due()))
}

/// `InvalidJob` unless `id` is 1 to [`MAX_JOB_ID_BYTES`] bytes without
/// control characters.
pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_JOB_ID_BYTES || id.chars().any(char::is_control) {
        return Err(Error::InvalidJob {
            reason: format!(
                "job id {id:?}: an id is 1 to {MAX_JOB_ID_BYTES} bytes without control characters"
            ),
        });
    }
    Ok(())
}

/// `InvalidJob` unless the name is `[A-Za-z0-9_]+` (it becomes part of an
/// environment variable's name in `dque work`) and the value holds no NUL.
pub(crate) fn check_header(name: &str, value: &str) -> Result<()> {
    let name_ok = !name.is_empty()
        && name.len() <= MAX_HEADER_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !name_ok {
        return Err(Error::InvalidJob {
            reason: format!(
                "header name {name:?}: names are 1 to {MAX_HEADER_NAME_BYTES} of A-Z, a-z, 0-9 and _"
            ),
        });
    }
    if value.contains('\0') {
        return Err(Error::InvalidJob {
            reason: format!("header {name}: a value cannot hold a NUL byte"),
        });
    }
    Ok(())
}

/// A random number (std's random hash keys, the process id, the time and
/// `salt`): for ids and tokens, not for secrets.
pub(crate) fn random_u64(salt: u64) -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(salt);
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// A new job id: 32 hex digits, a random prefix drawn once per process
/// and a counter (unique without a system call per job).
pub(crate) fn new_job_id() -> String {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| random_u64(0));
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    // As `format!("{prefix:016x}{count:016x}")`, a twentieth of the time:
    // two digits a byte from a table.
    const PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut byte = 0;
        while byte < 256 {
            pairs[byte] = [HEX[byte >> 4], HEX[byte & 15]];
            byte += 1;
        }
        pairs
    };
    let mut digits = [0u8; 32];
    let bytes = [prefix.to_be_bytes(), count.to_be_bytes()];
    for (pair, &byte) in digits.chunks_exact_mut(2).zip(bytes.as_flattened()) {
        pair.copy_from_slice(&PAIRS[usize::from(byte)]);
    }
    debug_assert!(digits.is_ascii());
    // SAFETY: every byte is a hex digit from `PAIRS`: ASCII, so UTF-8
    // (no second look at 32 bytes just written).
    unsafe { String::from_utf8_unchecked(digits.to_vec()) }
}

/// A job as a backend holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job's id: the caller's, or one the backend made up.
    pub id: String,
    /// The body, as enqueued.
    pub body: Vec<u8>,
    /// The priority (smaller runs first).
    pub priority: i32,
    /// The headers, in the order given.
    pub headers: Vec<(String, String)>,
    /// Leased: the attempt this lease is (1 for the first). Browsed:
    /// the attempts so far.
    pub attempt: u32,
    /// When it was enqueued.
    pub enqueued_at: SystemTime,
    /// Whether the id was the caller's choice.
    pub caller_id: bool,
}

impl Job {
    /// The job's own timeout ([`NewJob::timeout`]), if it has one: how
    /// long an attempt may run before a worker ends it as "timed out".
    pub fn timeout(&self) -> Option<Duration> {
        super::history::job_timeout(self)
    }

    /// The value of header `name`, if the job has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A leased job: the job, and what its backend needs to settle the lease.
/// Settle it with the queue it came from ([`JobQueue::ack`](super::JobQueue::ack),
/// `nack`, `release`, `fail`); a lease never settled ends at its time and
/// the job runs again.
#[derive(Debug)]
pub struct JobLease {
    /// The job.
    pub job: Job,
    /// The queue's name for this lease.
    pub(crate) token: LeaseToken,
}

impl std::ops::Deref for JobLease {
    type Target = Job;

    fn deref(&self) -> &Job {
        &self.job
    }
}

/// Where a lease is held: the backend's own coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseToken {
    /// A part of the queue (embedded: the priority lane).
    pub part: i64,
    /// The record or row leased.
    pub record: u64,
    /// The attempt as the part counts it.
    pub attempt: u32,
    /// Which queue handle made it (a lease cannot be settled elsewhere).
    pub queue: usize,
    /// When it was leased (Unix milliseconds), for the run time.
    pub leased_ms: u64,
    /// The job's uniqueness hold (embedded: settled jobs note it).
    pub hold: Option<Hold>,
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// The job was added under this id.
    Added(String),
    /// A job with this caller-chosen id is ready, scheduled or leased
    /// already: nothing was added (retrying an enqueue is safe).
    AlreadyQueued(String),
    /// The id is held by a job enqueued within its uniqueness period that
    /// ran or died since ([`NewJob::unique_for`]): nothing was added.
    Duplicate(Duplicate),
}

impl Enqueued {
    /// The job's id.
    pub fn id(&self) -> &str {
        match self {
            Enqueued::Added(id) | Enqueued::AlreadyQueued(id) => id,
            Enqueued::Duplicate(duplicate) => &duplicate.id,
        }
    }

    /// Whether the job was added by this call.
    pub fn is_added(&self) -> bool {
        match self {
            Enqueued::Added(_) => true,
            Enqueued::AlreadyQueued(_) | Enqueued::Duplicate(_) => false,
        }
    }
}

/// When a nacked job runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// After the queue's back-off for this attempt ([`Backoff`](super::Backoff)).
    Backoff,
    /// After this delay (zero: at once, before newer jobs of its priority;
    /// a time past 9999-12-31T23:59:59Z is that time, as for
    /// [`NewJob::delay`]).
    After(Duration),
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    /// The job runs again: ready at once, or scheduled until this time.
    Retrying {
        /// When it is ready again.
        at: SystemTime,
    },
    /// Its attempts were used up: it is a dead letter now.
    Dead,
}

/// A job waiting to run, as [`JobQueue::waiting`](super::JobQueue::waiting) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The job (`attempt`: the attempts so far).
    pub job: Job,
    /// Ready (perhaps leased now), or scheduled.
    pub state: WaitState,
}

/// Where a waiting job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    /// Ready to be leased.
    Ready,
    /// Leased by a worker now.
    Leased,
    /// Out of sight until this time.
    Scheduled(SystemTime),
}

/// A job whose attempts were used up, or that a worker failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadJob {
    /// The job (`attempt`: the attempts it had).
    pub job: Job,
    /// Why it is dead.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_ids_are_the_prefix_and_a_count_in_32_hex_digits() {
        let (a, b) = (new_job_id(), new_job_id());
        for id in [&a, &b] {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        }
        assert_eq!(a[..16], b[..16], "one prefix per process");
        let count = |id: &str| u64::from_str_radix(&id[16..], 16).unwrap();
        assert!(count(&b) > count(&a), "{a} then {b}");
    }
}
