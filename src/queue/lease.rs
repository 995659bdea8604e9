//! A leased item: held by one consumer until acked, nacked, failed or expired.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::queue::retry::Retry;
use crate::queue::shared::Shared;

/// What a lease needs of its queue: the shared state and the lease length.
/// Owned, so a [`Leased`] can outlive the borrow it was taken with.
#[derive(Debug, Clone)]
pub(crate) struct Lessor {
    pub shared: Arc<Shared>,
    pub visibility_timeout: Duration,
}

impl Lessor {
    pub fn ack(&self, id: u64, attempt: u16) -> Result<()> {
        self.shared
            .write(|engine| engine.ack(&[(id, attempt)], &mut 0))
    }

    /// Acks `leases`; returns how many were acked, and the error if the
    /// call stopped before the end (none acked unless a write failed midway).
    pub fn ack_all(&self, leases: &[(u64, u16)]) -> (usize, Result<()>) {
        let mut acked = 0;
        let result = self.shared.write(|engine| engine.ack(leases, &mut acked));
        if acked > 0 && result.is_err() {
            // Those acks were written: make them as durable as an Ok would.
            let _ = self.shared.sync();
        }
        (acked, result)
    }

    pub fn nack(&self, id: u64, attempt: u16) -> Result<()> {
        self.shared.write(|engine| engine.nack(id, attempt))?;
        self.shared.notify_available();
        Ok(())
    }

    /// Nacks with `reason`, the item out of sight for `retry`'s delay;
    /// returns whether it went to the dead letters.
    pub fn nack_with(&self, id: u64, attempt: u16, reason: &str, retry: Retry) -> Result<bool> {
        let delay = retry.delay(attempt);
        let dead = self
            .shared
            .write(|engine| engine.nack_with(id, attempt, reason, delay))?;
        if !dead && delay.is_zero() {
            self.shared.notify_available();
        }
        Ok(dead)
    }

    pub fn release(&self, id: u64, attempt: u16) -> Result<()> {
        self.shared.write(|engine| engine.release(id, attempt))?;
        self.shared.notify_available();
        Ok(())
    }

    pub fn fail(&self, id: u64, attempt: u16, reason: &str) -> Result<()> {
        self.shared.write(|engine| engine.fail(id, attempt, reason))
    }

    pub fn touch(&self, id: u64, attempt: u16) -> Result<()> {
        let timeout = self.visibility_timeout;
        self.shared
            .read(|engine| engine.touch(id, attempt, timeout))
    }
}

/// An item taken with [`DQue::lease`](crate::DQue::lease): invisible to
/// other consumers until its lease ends. [`ack`](Self::ack) removes it for
/// good; [`nack`](Self::nack) (or dropping the guard) hands it back for
/// redelivery, its attempt counted; [`release`](Self::release) hands it back
/// as if it had never been leased (a worker shutting down);
/// [`fail`](Self::fail) moves it to the dead letters. If the visibility
/// timeout passes first, it is available again and this guard's calls fail
/// with [`Error::LeaseLost`](crate::Error::LeaseLost).
///
/// The guard owns what it needs of the queue: it can move to another thread
/// or into a `'static` task. Once the queue is closed its calls fail with
/// [`Error::Closed`](crate::Error::Closed), and the item is available again
/// at the next open.
///
/// ```
/// use dque::DQue;
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<String> = DQue::create(dir.path().join("jobs"))?;
/// q.enqueue(&"resize".to_string())?;
/// let job = q.lease()?.expect("an item");
/// assert_eq!(job.attempt(), 1);
/// // The guard is owned: work on it in another thread.
/// std::thread::spawn(move || {
///     // ... do the work; if it fails: job.nack() or job.fail("why")
///     job.ack()
/// })
/// .join()
/// .unwrap()?;
/// assert!(q.is_empty());
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard hands the item back for redelivery"]
pub struct Leased<T> {
    lessor: Lessor,
    item: T,
    id: u64,
    attempt: u16,
    settled: bool,
}

impl<T> Leased<T> {
    pub(crate) fn new(lessor: Lessor, item: T, id: u64, attempt: u16) -> Self {
        Leased {
            lessor,
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
    /// across reopens (what [`DQue::cancel`](crate::DQue::cancel) takes).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Which delivery this is: 1 the first time, counted on disk across
    /// crashes and reopens.
    pub fn attempt(&self) -> u16 {
        self.attempt
    }

    /// Removes the item for good (durably, in Safe mode: one fsync, shared
    /// with concurrent callers).
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the lease expired first (then it removes nothing),
    /// `Closed` once the queue is closed, or the I/O error of the write.
    pub fn ack(mut self) -> Result<()> {
        self.settled = true;
        self.lessor.ack(self.id, self.attempt)
    }

    /// Hands the item back: the next lease gets it before any newer item,
    /// and this attempt stays counted. An item that has had `max_attempts`
    /// attempts goes to the dead letters.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub fn nack(mut self) -> Result<()> {
        self.settled = true;
        self.lessor.nack(self.id, self.attempt)
    }

    /// Hands the item back after a failure, with why, and when it may
    /// come back ([`Retry`]): the Jobs API's nack for the plain queue.
    /// The attempt stays counted. If it was the item's last attempt
    /// ([`DQue::max_attempts`](crate::DQue::max_attempts)) the item goes to
    /// the dead letters now with `reason` as theirs, and this returns
    /// `true`; else it is delivered again once the delay has passed (to
    /// any consumer, in any process of a shared queue), and `reason`
    /// stays with it: if a later attempt ends without a word (its lease
    /// runs out) and that was its last, the dead letter says "not acked
    /// after N attempts; last failure: REASON".
    ///
    /// A delay is kept in memory (in shared mode, in the control file
    /// every process sees): it holds while the queue is open, across
    /// the death of the process that nacked, but not across a reopen
    /// (an exclusive one, or the first shared handle after all closed),
    /// after which the item is available at once, its attempts still
    /// counted.
    ///
    /// The reason stays with the item on disk (`dque.reasons`, beside the
    /// segments): if a later attempt ends without a word and it was the
    /// last, the dead letter names the last reason any handle gave, in any
    /// process, across reopens and crashes. It is durable before this
    /// returns, in every mode (one fsync, for a nack with a non-empty
    /// reason only; plain [`nack`](Self::nack) and [`ack`](Self::ack)
    /// never touch the file). The reason of the last attempt is written
    /// into the dead letter itself.
    ///
    /// Until the delay passes the item counts in
    /// [`len`](crate::DQue::len), is not in
    /// [`leased_len`](crate::DQue::leased_len), and can be
    /// [`cancel`](crate::DQue::cancel)led.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use std::time::Duration;
    /// use dque::Retry;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<String> = dque::Options::new().max_attempts(2).create(dir.path().join("q"))?;
    /// q.enqueue(&"charge card 42".to_string())?;
    /// let job = q.lease()?.expect("an item");
    /// let dead = job.nack_with("gateway timed out", Retry::After(Duration::from_millis(50)))?;
    /// assert!(!dead);
    /// assert!(q.lease()?.is_none(), "not before its delay");
    /// let job = q.lease_timeout(Duration::from_secs(10))?.expect("back after 50 ms");
    /// assert!(job.nack_with("card declined", Retry::Backoff)?, "its last attempt");
    /// assert_eq!(q.dead_letters()?[0].reason, "card declined");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack); the error of writing the dead letter.
    pub fn nack_with(mut self, reason: &str, retry: Retry) -> Result<bool> {
        self.settled = true;
        self.lessor.nack_with(self.id, self.attempt, reason, retry)
    }

    /// Hands the item back as if this lease had never happened: its attempt
    /// is not counted (on disk too), so `max_attempts` is not brought nearer.
    /// For a worker that stops before it started the work (IPC::DirQueue's
    /// `return_to_queue`).
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue(&7)?;
    /// q.lease()?.expect("an item").release()?;
    /// assert_eq!(q.lease()?.expect("the item again").attempt(), 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub fn release(mut self) -> Result<()> {
        self.settled = true;
        self.lessor.release(self.id, self.attempt)
    }

    /// Moves the item to the dead letters now, with `reason`.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack).
    pub fn fail(mut self, reason: &str) -> Result<()> {
        self.settled = true;
        self.lessor.fail(self.id, self.attempt, reason)
    }

    /// Extends the lease by the visibility timeout from now: a heartbeat
    /// for long work. Writes nothing.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the lease expired first, `Closed` once the queue is closed.
    pub fn touch(&self) -> Result<()> {
        self.lessor.touch(self.id, self.attempt)
    }

    /// The id and attempt, for a batch ack.
    pub(crate) fn token(&self) -> (u64, u16) {
        (self.id, self.attempt)
    }

    /// The item, its id and attempt, with the guard spent: the caller
    /// settles the lease itself, through the queue's [`Lessor`].
    pub(crate) fn into_parts(mut self) -> (T, u64, u16)
    where
        T: Default,
    {
        self.settled = true;
        (std::mem::take(&mut self.item), self.id, self.attempt)
    }

    /// The guard spent for what settles its lease: the queue's [`Lessor`],
    /// the id and the attempt (the item is dropped).
    #[cfg(feature = "tokio")]
    pub(crate) fn into_token(mut self) -> (Lessor, u64, u16) {
        self.settled = true;
        (self.lessor.clone(), self.id, self.attempt)
    }

    /// Spends the guard without handing the item back: it was acked.
    pub(crate) fn spend(mut self) {
        self.settled = true;
    }

    /// Whether `self` was leased from the queue behind `lessor`.
    pub(crate) fn is_from(&self, shared: &Arc<Shared>) -> bool {
        Arc::ptr_eq(&self.lessor.shared, shared)
    }
}

impl<T> Deref for Leased<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.item
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Leased<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leased")
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("item", &self.item)
            .finish()
    }
}

impl<T> Drop for Leased<T> {
    fn drop(&mut self) {
        if !self.settled {
            // As a nack; if the lease already expired there is nothing to hand back.
            let _ = self.lessor.nack(self.id, self.attempt);
        }
    }
}
