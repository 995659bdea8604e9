//! Who holds what: [`JobQueue::leases`](super::JobQueue::leases), the
//! jobs leased now with the worker holding each, since when and until
//! when (the dashboard's workers page, qless's `workers`).

use std::time::SystemTime;

use super::job::{Job, WaitState, Waiting};

/// A job leased now, as [`JobQueue::leases`](super::JobQueue::leases)
/// shows it.
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("mail"))?;
/// queue.enqueue(NewJob::new("hello").id("greet-1"))?;
/// let lease = queue.lease()?.expect("a job");
/// let held = queue.leases(10)?;
/// assert_eq!(held[0].job.id, "greet-1");
/// // Without a worker name the embedded queue names the process holding
/// // it: host:pid.
/// assert!(held[0].worker.as_deref().unwrap().ends_with(&format!(":{}", std::process::id())));
/// assert!(held[0].since.is_some() && held[0].until.is_some());
/// queue.ack(lease)?;
/// assert!(queue.leases(10)?.is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The job (`attempt`: the attempts so far, this one included).
    pub job: Job,
    /// The worker holding it: the name its handle leases under
    /// ([`AddressOptions::worker`](super::AddressOptions::worker)), else
    /// the backend's default (the process holding it as `host:pid` on the
    /// embedded queue); `None` where the backend does not know.
    pub worker: Option<String>,
    /// When the lease began (a touch keeps it), where the backend records
    /// it (every backend of this crate does).
    pub since: Option<SystemTime>,
    /// When the lease ends unless touched or settled, where known.
    pub until: Option<SystemTime>,
}

impl LeaseInfo {
    /// A leased job of which only the job is known.
    pub fn of_job(job: Job) -> Self {
        LeaseInfo {
            job,
            worker: None,
            since: None,
            until: None,
        }
    }
}

/// The leased jobs of a `waiting` listing, `max` at most: what a backend
/// without a lease listing of its own answers.
pub(crate) fn leased_of(waiting: Vec<Waiting>, max: usize) -> Vec<LeaseInfo> {
    waiting
        .into_iter()
        .filter(|w| w.state == WaitState::Leased)
        .take(max)
        .map(|w| LeaseInfo::of_job(w.job))
        .collect()
}
