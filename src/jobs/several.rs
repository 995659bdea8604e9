//! Workers over several queues: one call leases from a list of queues,
//! in order (the first with a ready job) or round-robin.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{JobLease, JobQueue};
use crate::error::{Error, Result};

/// How a [`QueueSet`] picks the queue to lease from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The first queue of the list with a ready job.
    InOrder,
    /// Each call starts one queue further than the last one did.
    RoundRobin,
}

/// Several queues leased from as one.
///
/// ```
/// use std::sync::Arc;
/// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob, Order, QueueSet};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let urgent = Arc::new(EmbeddedJobs::create(dir.path().join("urgent"))?);
/// let batch = Arc::new(EmbeddedJobs::create(dir.path().join("batch"))?);
/// batch.enqueue(NewJob::new("b"))?;
/// urgent.enqueue(NewJob::new("u"))?;
/// let set = QueueSet::new(vec![urgent, batch], Order::InOrder)?;
/// let (from, lease) = set.lease()?.expect("a job");
/// assert_eq!((set.queue(from).name(), &lease.body[..]), ("urgent", &b"u"[..]));
/// set.queue(from).ack(lease)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct QueueSet {
    queues: Vec<Arc<dyn JobQueue>>,
    order: Order,
    next: AtomicUsize,
}

/// The longest a blocked [`QueueSet::lease_timeout`] sleeps between looks
/// when it waits on more than one queue.
pub const SET_POLL: Duration = Duration::from_millis(50);

impl QueueSet {
    /// A set of `queues` (at least one) leased from in `order`.
    ///
    /// # Errors
    ///
    /// `InvalidOption` for an empty list.
    pub fn new(queues: Vec<Arc<dyn JobQueue>>, order: Order) -> Result<Self> {
        if queues.is_empty() {
            return Err(Error::InvalidOption {
                name: "QueueSet::new",
                reason: "a set needs at least one queue".into(),
            });
        }
        Ok(QueueSet {
            queues,
            order,
            next: AtomicUsize::new(0),
        })
    }

    /// Queue `index` of the set: settle a lease with the queue it came from.
    ///
    /// # Panics
    ///
    /// If `index` is not below the number of queues.
    pub fn queue(&self, index: usize) -> &dyn JobQueue {
        self.queues[index].as_ref()
    }

    /// The queues, in the set's order.
    pub fn queues(&self) -> &[Arc<dyn JobQueue>] {
        &self.queues
    }

    /// Leases a ready job from the first queue (in the set's order) that
    /// has one; returns the queue's index with it.
    ///
    /// # Errors
    ///
    /// The first error of a queue's lease (the queues after it are not tried).
    pub fn lease(&self) -> Result<Option<(usize, JobLease)>> {
        let count = self.queues.len();
        let start = match self.order {
            Order::InOrder => 0,
            Order::RoundRobin => self.next.fetch_add(1, Ordering::Relaxed) % count,
        };
        for step in 0..count {
            let index = (start + step) % count;
            if let Some(lease) = self.queues[index].lease()? {
                return Ok(Some((index, lease)));
            }
        }
        Ok(None)
    }

    /// As [`lease`](Self::lease), waiting up to `wait` for a job. One queue
    /// waits as its backend does; several are looked at again at least
    /// every [`SET_POLL`].
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    pub fn lease_timeout(&self, wait: Duration) -> Result<Option<(usize, JobLease)>> {
        if let [only] = self.queues.as_slice() {
            return Ok(only.lease_timeout(wait)?.map(|lease| (0, lease)));
        }
        let deadline = Instant::now().checked_add(wait);
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(found) = self.lease()? {
                return Ok(Some(found));
            }
            let now = Instant::now();
            let left = deadline.map_or(SET_POLL, |d| d.saturating_duration_since(now));
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(SET_POLL);
        }
    }
}
