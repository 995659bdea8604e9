//! Searching a queue's jobs: a [`JobFilter`] (state, headers, id prefix,
//! failure reason) and what [`JobQueue::search`](crate::jobs::JobQueue::search)
//! answers ([`Found`]). The filter is one value every backend reads the
//! same way ([`JobFilter::matches`]); a backend may answer it natively
//! (PostgreSQL: a `WHERE` clause) or by reading its jobs from the front,
//! as the default does, up to a bound the caller gives.

use super::job::{DeadJob, Job, WaitState, Waiting};

/// The states a search looks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchState {
    /// Every job the queue holds: waiting (ready, leased, scheduled) and dead.
    #[default]
    Any,
    /// Ready, leased or scheduled.
    Waiting,
    /// Ready to be leased.
    Ready,
    /// Leased by a worker now.
    Leased,
    /// Scheduled for later (delayed, or a retry's back-off).
    Scheduled,
    /// Dead letters.
    Dead,
}

impl SearchState {
    /// Whether a search in this state reads waiting jobs.
    pub fn reads_waiting(self) -> bool {
        self != SearchState::Dead
    }

    /// Whether a search in this state reads dead letters.
    pub fn reads_dead(self) -> bool {
        matches!(self, SearchState::Any | SearchState::Dead)
    }

    /// Whether a waiting job in `state` is in this state.
    pub fn holds(self, state: WaitState) -> bool {
        matches!(
            (self, state),
            (SearchState::Any | SearchState::Waiting, _)
                | (SearchState::Ready, WaitState::Ready)
                | (SearchState::Leased, WaitState::Leased)
                | (SearchState::Scheduled, WaitState::Scheduled(_))
        )
    }
}

/// Which jobs a search keeps: every condition given must hold (none: every
/// job of the state).
///
/// ```
/// use dque::jobs::{JobFilter, SearchState};
/// let failed_emails = JobFilter::new()
///     .state(SearchState::Dead)
///     .header("klass", "send_email")
///     .reason("timeout");
/// assert!(!failed_emails.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// The states looked in.
    pub state: SearchState,
    /// Headers the job carries with exactly these values.
    pub headers: Vec<(String, String)>,
    /// The start of the job's id (a whole id finds that job).
    pub id_prefix: Option<String>,
    /// Text the reason of a dead letter contains (case-sensitive); only
    /// dead letters have one, so it keeps no waiting job.
    pub reason: Option<String>,
}

impl JobFilter {
    /// Every job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs in `state`.
    pub fn state(mut self, state: SearchState) -> Self {
        self.state = state;
        self
    }

    /// Only jobs with header `name` set to `value` (one more condition).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Only jobs whose id starts with `prefix`.
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    /// Only dead letters whose reason contains `text`.
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        self.reason = Some(text.into());
        self
    }

    /// Whether the filter keeps every job of every state.
    pub fn is_empty(&self) -> bool {
        *self == JobFilter::default()
    }

    /// Whether waiting jobs can match (a reason keeps dead letters only).
    pub fn reads_waiting(&self) -> bool {
        self.state.reads_waiting() && self.reason.is_none()
    }

    /// Whether dead letters can match.
    pub fn reads_dead(&self) -> bool {
        self.state.reads_dead()
    }

    /// Whether `job` in `place` matches: the one meaning of a filter,
    /// which native searches must agree with.
    pub fn matches(&self, job: &Job, place: &JobPlace) -> bool {
        let in_state = match place {
            JobPlace::Waiting(state) => self.reads_waiting() && self.state.holds(*state),
            JobPlace::Dead(_) => self.reads_dead(),
        };
        let reason = match (&self.reason, place) {
            (None, _) => true,
            (Some(text), JobPlace::Dead(reason)) => reason.contains(text.as_str()),
            (Some(_), JobPlace::Waiting(_)) => false,
        };
        in_state
            && reason
            && self
                .id_prefix
                .as_deref()
                .is_none_or(|p| job.id.starts_with(p))
            && self
                .headers
                .iter()
                .all(|(name, value)| job.header(name) == Some(value.as_str()))
    }
}

/// Where a found job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobPlace {
    /// Waiting: ready, leased or scheduled.
    Waiting(WaitState),
    /// A dead letter, with its reason.
    Dead(String),
}

/// A job a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundJob {
    /// The job (`attempt`: the attempts so far).
    pub job: Job,
    /// Its state.
    pub place: JobPlace,
}

/// What a search found: the matches, waiting jobs first in lease order,
/// then dead letters oldest first; how many jobs it read; whether it read
/// every job of the states it looked in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The matches, at most the `max` asked for.
    pub jobs: Vec<FoundJob>,
    /// Jobs read to find them (a native search: the rows the server
    /// looked at, up to the scan bound, or those an index gave).
    pub scanned: u64,
    /// Whether no job of the states looked in was left unread: `false`
    /// when the scan bound cut the search short (more may match beyond).
    /// A search that stopped at `max` matches is complete if it had read
    /// every job.
    pub complete: bool,
}

/// What [`JobQueue::search`](crate::jobs::JobQueue::search)'s default
/// answers on `queue`, whatever the backend does natively: the front of
/// `waiting` and then of `dead`, read in growing steps until `max`
/// matches, the end, or `scan` jobs read. A native search answers the
/// same; this is what to compare it with (and what it costs without one).
///
/// ```
/// use dque::jobs::{search_from_the_front, EmbeddedJobs, JobFilter, JobQueue, NewJob};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.enqueue(NewJob::new("a").header("klass", "render"))?;
/// let filter = JobFilter::new().header("klass", "render");
/// assert_eq!(queue.search(&filter, 10, 100)?, search_from_the_front(&queue, &filter, 10, 100)?);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// Storage errors.
pub fn search_from_the_front(
    queue: &(impl crate::jobs::JobQueue + ?Sized),
    filter: &JobFilter,
    max: usize,
    scan: usize,
) -> crate::Result<Found> {
    by_reading(filter, max, scan, |n| queue.waiting(n), |n| queue.dead(n))
}

/// The default search: the front of [`waiting`](crate::jobs::JobQueue::waiting)
/// and then of [`dead`](crate::jobs::JobQueue::dead), read in growing
/// steps until `max` matches, the end, or `scan` jobs read in all.
pub(crate) fn by_reading(
    filter: &JobFilter,
    max: usize,
    scan: usize,
    waiting: impl Fn(usize) -> crate::Result<Vec<Waiting>>,
    dead: impl Fn(usize) -> crate::Result<Vec<DeadJob>>,
) -> crate::Result<Found> {
    let mut found = Found {
        complete: true,
        ..Found::default()
    };
    let mut budget = scan;
    if filter.reads_waiting() {
        let (jobs, read, ended) = read_front(
            &waiting,
            |w: Waiting| {
                let place = JobPlace::Waiting(w.state);
                filter
                    .matches(&w.job, &place)
                    .then_some(FoundJob { job: w.job, place })
            },
            max,
            budget,
        )?;
        found.jobs = jobs;
        found.scanned += read as u64;
        found.complete &= ended;
        budget -= read;
    }
    if filter.reads_dead() && found.jobs.len() < max {
        let (jobs, read, ended) = read_front(
            &dead,
            |d: DeadJob| {
                let place = JobPlace::Dead(d.reason);
                filter
                    .matches(&d.job, &place)
                    .then_some(FoundJob { job: d.job, place })
            },
            max - found.jobs.len(),
            budget,
        )?;
        found.jobs.extend(jobs);
        found.scanned += read as u64;
        found.complete &= ended;
    } else if filter.reads_dead() {
        // Stopped at `max` before the dead letters: they were not read.
        found.complete = false;
    }
    Ok(found)
}

/// Reads the front (`read(n)`) in growing steps until `max` items pass
/// `keep`, the list ends, or `bound` items were read: the kept items, the
/// items read, and whether the list ended within them.
fn read_front<T, K>(
    read: impl Fn(usize) -> crate::Result<Vec<T>>,
    keep: impl Fn(T) -> Option<K>,
    max: usize,
    bound: usize,
) -> crate::Result<(Vec<K>, usize, bool)> {
    if bound == 0 || max == 0 {
        // Nothing read: complete only if nothing could be asked for.
        return Ok((Vec::new(), 0, max == 0 && bound > 0));
    }
    // A first step of a few times `max`, as filters keep some of what they read.
    let mut look = max.saturating_mul(4).max(64).min(bound);
    loop {
        let items = read(look)?;
        let read_now = items.len();
        let ended = read_now < look;
        let mut kept = Vec::new();
        for item in items {
            if kept.len() == max {
                break;
            }
            if let Some(k) = keep(item) {
                kept.push(k);
            }
        }
        if ended || kept.len() >= max || look == bound {
            return Ok((kept, read_now, ended));
        }
        look = look.saturating_mul(4).min(bound);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn job(id: &str, headers: &[(&str, &str)]) -> Job {
        Job {
            id: id.into(),
            body: Vec::new(),
            priority: 0,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            attempt: 0,
            enqueued_at: SystemTime::UNIX_EPOCH,
            caller_id: true,
        }
    }

    #[test]
    fn every_condition_must_hold() {
        let email = job("order-17", &[("klass", "send_email"), ("tenant", "a")]);
        let ready = JobPlace::Waiting(WaitState::Ready);
        let dead = JobPlace::Dead("exit 3: timeout".into());
        assert!(JobFilter::new().matches(&email, &ready));
        assert!(JobFilter::new().matches(&email, &dead));
        let f = JobFilter::new()
            .header("klass", "send_email")
            .id_prefix("order-1");
        assert!(f.matches(&email, &ready) && f.matches(&email, &dead));
        assert!(!f.clone().header("tenant", "b").matches(&email, &ready));
        assert!(!f.clone().id_prefix("order-2").matches(&email, &ready));
        assert!(!JobFilter::new()
            .header("klass", "send")
            .matches(&email, &ready));
        let r = JobFilter::new().reason("timeout");
        assert!(r.matches(&email, &dead) && !r.matches(&email, &ready));
        assert!(!JobFilter::new().reason("Timeout").matches(&email, &dead));
        let s = JobFilter::new().state(SearchState::Scheduled);
        assert!(!s.matches(&email, &ready) && !s.matches(&email, &dead));
        assert!(s.matches(
            &email,
            &JobPlace::Waiting(WaitState::Scheduled(SystemTime::UNIX_EPOCH))
        ));
        assert!(!JobFilter::new()
            .state(SearchState::Dead)
            .matches(&email, &ready));
    }

    #[test]
    fn reading_stops_at_the_bound_and_says_so() {
        let waiting = |n: usize| -> crate::Result<Vec<Waiting>> {
            Ok((0..n.min(1000))
                .map(|i| Waiting {
                    job: job(
                        &format!("w{i}"),
                        &[("k", if i % 10 == 0 { "x" } else { "y" })],
                    ),
                    state: WaitState::Ready,
                })
                .collect())
        };
        let dead = |n: usize| -> crate::Result<Vec<DeadJob>> {
            Ok((0..n.min(5))
                .map(|i| DeadJob {
                    job: job(&format!("d{i}"), &[("k", "x")]),
                    reason: "boom".into(),
                })
                .collect())
        };
        let x = JobFilter::new().header("k", "x");
        let all = by_reading(&x, 10_000, 10_000, waiting, dead).unwrap();
        assert_eq!(
            (all.jobs.len(), all.scanned, all.complete),
            (105, 1005, true)
        );
        let cut = by_reading(&x, 10_000, 500, waiting, dead).unwrap();
        assert_eq!(
            (cut.jobs.len(), cut.scanned, cut.complete),
            (50, 500, false)
        );
        let few = by_reading(&x, 3, 10_000, waiting, dead).unwrap();
        assert_eq!(few.jobs.len(), 3);
        assert!(!few.complete, "stopped before the rest");
        let dead_only = by_reading(&JobFilter::new().reason("oo"), 100, 10, waiting, dead).unwrap();
        assert_eq!(
            (dead_only.jobs.len(), dead_only.scanned, dead_only.complete),
            (5, 5, true)
        );
    }
}
