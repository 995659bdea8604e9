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
    turns: Turns,
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
        let turns = Turns::new("QueueSet::new", queues.len(), order)?;
        Ok(QueueSet { queues, turns })
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
        self.lease_past(|_| false)
    }

    /// As [`lease`](Self::lease), but a queue whose lease fails with an
    /// error `passing` accepts (a server's passing trouble) is passed
    /// over: its error is returned only if no other queue has a job.
    pub(crate) fn lease_past(
        &self,
        passing: fn(&Error) -> bool,
    ) -> Result<Option<(usize, JobLease)>> {
        let mut passed = Passed::default();
        for index in self.turns.next_turn() {
            match self.queues[index].lease() {
                Ok(Some(lease)) => return Ok(Some((index, lease))),
                Ok(None) => {}
                Err(e) => passed.note(e, passing)?,
            }
        }
        passed.answer()
    }

    /// As [`lease`](Self::lease), waiting up to `wait` for a job. One queue
    /// waits as its backend does; several are looked at again at least
    /// every [`SET_POLL`].
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    pub fn lease_timeout(&self, wait: Duration) -> Result<Option<(usize, JobLease)>> {
        self.lease_timeout_past(wait, |_| false)
    }

    /// As [`lease_timeout`](Self::lease_timeout), passing over a queue in
    /// trouble as [`lease_past`](Self::lease_past) does (a look that
    /// finds no job but such an error ends the wait with it).
    pub(crate) fn lease_timeout_past(
        &self,
        wait: Duration,
        passing: fn(&Error) -> bool,
    ) -> Result<Option<(usize, JobLease)>> {
        if let [only] = self.queues.as_slice() {
            return Ok(only.lease_timeout(wait)?.map(|lease| (0, lease)));
        }
        let mut looks = Looks::new(wait);
        loop {
            if let Some(found) = self.lease_past(passing)? {
                return Ok(Some(found));
            }
            match looks.pause() {
                Some(pause) => std::thread::sleep(pause),
                None => return Ok(None),
            }
        }
    }
}

// What follows are a set's rules, shared by `QueueSet` and the tokio
// runtime's `AsyncQueueSet`: one implementation of which queue a lease
// tries first, how a wait on several queues looks again, and which
// queue a typed enqueue goes to.

/// The order a set's queues are tried in, lease after lease.
#[derive(Debug)]
pub(crate) struct Turns {
    count: usize,
    order: Order,
    next: AtomicUsize,
}

impl Turns {
    /// The turns of `count` queues (at least one: else `InvalidOption`
    /// naming `call`).
    pub(crate) fn new(call: &'static str, count: usize, order: Order) -> Result<Self> {
        if count == 0 {
            return Err(Error::InvalidOption {
                name: call,
                reason: "a set needs at least one queue".into(),
            });
        }
        Ok(Turns {
            count,
            order,
            next: AtomicUsize::new(0),
        })
    }

    /// The queues' indexes one lease tries, in turn: from the first
    /// (in order), or from one further than the last lease did (round-robin).
    pub(crate) fn next_turn(&self) -> impl Iterator<Item = usize> {
        let count = self.count;
        let start = match self.order {
            Order::InOrder => 0,
            Order::RoundRobin => self.next.fetch_add(1, Ordering::Relaxed) % count,
        };
        (0..count).map(move |step| (start + step) % count)
    }
}

/// The pauses between a set's looks at its queues while a lease waits:
/// 1 ms, doubling, at most [`SET_POLL`], never past the wait's end.
#[derive(Debug)]
pub(crate) struct Looks {
    deadline: Option<Instant>,
    pause: Duration,
}

impl Looks {
    pub(crate) fn new(wait: Duration) -> Self {
        Looks {
            deadline: Instant::now().checked_add(wait),
            pause: Duration::from_millis(1),
        }
    }

    /// How long to pause before the next look; `None` once the wait is over.
    pub(crate) fn pause(&mut self) -> Option<Duration> {
        let left = self
            .deadline
            .map_or(SET_POLL, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return None;
        }
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(SET_POLL);
        Some(pause)
    }
}

/// The errors a set's lease passed over (a queue in trouble must not
/// keep the others' jobs from running): the first is the answer when no
/// queue had a job.
#[derive(Debug, Default)]
pub(crate) struct Passed(Option<Error>);

impl Passed {
    /// Keeps `error` if `passing` accepts it; else it is the answer now.
    pub(crate) fn note(&mut self, error: Error, passing: fn(&Error) -> bool) -> Result<()> {
        match passing(&error) {
            true => {
                self.0.get_or_insert(error);
                Ok(())
            }
            false => Err(error),
        }
    }

    /// The answer of a look that found no job: the first error passed over.
    pub(crate) fn answer<T>(self) -> Result<Option<T>> {
        self.0.map_or(Ok(None), Err)
    }
}

/// The index of the queue a typed enqueue of `kind` goes to, among
/// queues named `names` (in the set's order): the one its kind names
/// (`KindOptions::queue`), else the first.
///
/// # Errors
///
/// `InvalidJob` if the kind names a queue the set does not hold.
#[cfg(any(feature = "runtime", feature = "tokio"))]
pub(crate) fn queue_for_kind<'a>(
    mut names: impl Iterator<Item = &'a str>,
    kind: &str,
    wanted: Option<&str>,
) -> Result<usize> {
    let Some(wanted) = wanted else {
        return Ok(0);
    };
    names
        .position(|name| name == wanted)
        .ok_or_else(|| Error::InvalidJob {
            reason: format!(
                "kind {kind:?} goes to queue {wanted:?}, which is not in this set: add it"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_start_at_the_first_or_one_further_each_time() {
        let ordered = Turns::new("test", 3, Order::InOrder).unwrap();
        let fair = Turns::new("test", 3, Order::RoundRobin).unwrap();
        for _ in 0..2 {
            assert_eq!(ordered.next_turn().collect::<Vec<_>>(), [0, 1, 2]);
        }
        let turns: Vec<Vec<usize>> = (0..4).map(|_| fair.next_turn().collect()).collect();
        assert_eq!(turns, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]);
        assert!(Turns::new("test", 0, Order::InOrder).is_err());
    }

    #[test]
    fn looks_pause_doubling_up_to_the_poll_and_end_with_the_wait() {
        let mut long = Looks::new(Duration::from_secs(3600));
        let pauses: Vec<Duration> = (0..8).map(|_| long.pause().unwrap()).collect();
        assert_eq!(pauses[..3], [1, 2, 4].map(Duration::from_millis));
        assert_eq!(pauses[7], SET_POLL);
        assert!(pauses.iter().all(|pause| *pause <= SET_POLL));
        assert_eq!(Looks::new(Duration::ZERO).pause(), None);
        // A wait too long to have an end looks again every SET_POLL at most.
        let mut endless = Looks::new(Duration::MAX);
        assert!((0..10).all(|_| endless.pause().is_some_and(|p| p <= SET_POLL)));
    }
}
