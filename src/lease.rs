//! A leased item: held by one consumer until acked, nacked, failed or expired.

use std::ops::Deref;

use crate::codec::{Bincode, Codec};
use crate::error::Result;
use crate::queue::DQue;

/// An item taken with [`DQue::lease`]: invisible to other consumers until
/// its lease ends. [`ack`](Self::ack) removes it for good;
/// [`nack`](Self::nack) (or dropping the guard) hands it back for
/// redelivery; [`fail`](Self::fail) moves it to the dead letters. If the
/// visibility timeout passes first, it is available again and this guard's
/// calls fail with [`Error::LeaseLost`](crate::Error::LeaseLost).
///
/// ```
/// use dque::DQue;
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<String> = DQue::create(dir.path().join("jobs"))?;
/// q.enqueue(&"resize".to_string())?;
/// while let Some(job) = q.lease()? {
///     assert_eq!(job.attempt(), 1);
///     // ... do the work; if it fails: job.nack()? or job.fail("why")?
///     job.ack()?;
/// }
/// assert!(q.is_empty());
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard hands the item back for redelivery"]
pub struct Leased<'q, T, C: Codec<T> = Bincode> {
    queue: &'q DQue<T, C>,
    item: T,
    id: u64,
    attempt: u16,
    settled: bool,
}

impl<'q, T, C: Codec<T>> Leased<'q, T, C> {
    pub(crate) fn new(queue: &'q DQue<T, C>, item: T, id: u64, attempt: u16) -> Self {
        Leased {
            queue,
            item,
            id,
            attempt,
            settled: false,
        }
    }

    /// The item.
    pub fn item(&self) -> &T {
        &self.item
    }

    /// The item's id: its position in the queue since creation, stable
    /// across reopens (what [`DQue::cancel`] takes).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Which delivery this is: 1 the first time, counted on disk across
    /// crashes and reopens.
    pub fn attempt(&self) -> u16 {
        self.attempt
    }

    /// Removes the item for good (durably, in Safe mode). Fails with
    /// `LeaseLost` if the lease expired first, and then removes nothing.
    pub fn ack(mut self) -> Result<()> {
        self.settled = true;
        self.queue.ack_lease(self.id, self.attempt)
    }

    /// Hands the item back: the next lease gets it before any newer item. An
    /// item that has had `max_attempts` attempts goes to the dead letters.
    pub fn nack(mut self) -> Result<()> {
        self.settled = true;
        self.queue.nack_lease(self.id, self.attempt)
    }

    /// Moves the item to the dead letters now, with `reason`.
    pub fn fail(mut self, reason: &str) -> Result<()> {
        self.settled = true;
        self.queue.fail_lease(self.id, self.attempt, reason)
    }

    /// Extends the lease by the visibility timeout from now: a heartbeat
    /// for long work.
    pub fn touch(&self) -> Result<()> {
        self.queue.touch_lease(self.id, self.attempt)
    }
}

impl<T, C: Codec<T>> Deref for Leased<'_, T, C> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.item
    }
}

impl<T: std::fmt::Debug, C: Codec<T>> std::fmt::Debug for Leased<'_, T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leased")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("item", &self.item)
            .finish()
    }
}

impl<T, C: Codec<T>> Drop for Leased<'_, T, C> {
    fn drop(&mut self) {
        if !self.settled {
            // As a nack; if the lease already expired there is nothing to hand back.
            let _ = self.queue.nack_lease(self.id, self.attempt);
        }
    }
}
