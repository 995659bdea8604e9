//! The workers view: which handles have a queue open and which items each
//! holds (IPC::DirQueue's active host and pid, qless's workers).

use std::time::SystemTime;

/// A handle that has the queue open: a process (and, in shared mode, one of
/// possibly several handles in it), with the items it holds leased.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: dque::DQue<u32> = dque::Options::new().shared(true).open_or_create(dir.path().join("q"))?;
/// q.enqueue(&1)?;
/// let job = q.lease()?.unwrap();
/// let workers = q.workers()?;
/// assert_eq!(workers.len(), 1);
/// assert_eq!(workers[0].pid, std::process::id());
/// assert_eq!(workers[0].leases, vec![job.id()]);
/// assert!(workers[0].this_handle);
/// assert_eq!(workers[0].name, None);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Worker {
    /// Its process id.
    pub pid: u32,
    /// The name of its host (every sharer is on this one).
    pub host: String,
    /// When the handle opened the queue.
    pub started: SystemTime,
    /// Ids of the items it holds leased (leases run out or not), ascending.
    pub leases: Vec<u64>,
    /// Whether it is the handle that asked.
    pub this_handle: bool,
    /// The worker name its handle leases under, if it gave one (a jobs
    /// queue's [`JobOptions::worker`](crate::jobs::JobOptions::worker)).
    pub name: Option<String>,
}
