//! A lease taken by an async task: the guard of [`AsyncQueue::lease`](crate::AsyncQueue::lease).

use std::ops::Deref;

use crate::error::Result;
use crate::queue::asynchronous::offload::{fsyncs, run};
use crate::queue::lease::{Leased, Lessor};
use crate::queue::retry::Retry;

/// An item leased by an async task: invisible to other consumers until
/// its lease ends. Settle it with [`ack`](Self::ack), [`nack`](Self::nack),
/// [`nack_with`](Self::nack_with), [`release`](Self::release) or
/// [`fail`](Self::fail); [`touch`](Self::touch) extends it.
///
/// **Dropped unsettled** (a task cancelled, a `select!` branch lost, a
/// panic), the guard gives the item back *without counting the attempt*,
/// as [`release`](Self::release) does: a cancelled task did not try the
/// item. (The blocking [`Leased`] guard counts it, as a nack.) In Safe
/// mode the give-back's fsync runs on tokio's blocking pool, so a drop
/// never blocks the task; the item is available again when it is done.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::AsyncQueue::new(dque::DQue::<String>::create(dir.path().join("q"))?);
/// q.enqueue(&"resize".to_string()).await?;
/// let job = q.lease().await?.expect("an item");
/// assert_eq!((job.as_str(), job.attempt()), ("resize", 1));
/// drop(job); // given back, the attempt not counted
/// let job = q.lease().await?.expect("the item again");
/// assert_eq!(job.attempt(), 1);
/// job.ack().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard gives the item back"]
pub struct AsyncLeased<T> {
    /// `None` once settled.
    inner: Option<Leased<T>>,
}

impl<T> AsyncLeased<T> {
    pub(crate) fn new(leased: Leased<T>) -> Self {
        AsyncLeased {
            inner: Some(leased),
        }
    }

    fn leased(&self) -> &Leased<T> {
        self.inner
            .as_ref()
            .expect("a guard is settled only by value")
    }

    /// The guard spent: what settles its lease.
    fn token(mut self) -> (Lessor, u64, u16) {
        self.inner
            .take()
            .expect("a guard is settled only by value")
            .into_token()
    }

    /// The sync guard inside, which settles the lease from now on.
    pub(crate) fn into_leased(mut self) -> Leased<T> {
        self.inner.take().expect("a guard is settled only by value")
    }

    /// The item.
    pub fn item(&self) -> &T {
        self.leased().item()
    }

    /// The item's id ([`Leased::id`]).
    pub fn id(&self) -> u64 {
        self.leased().id()
    }

    /// Which delivery this is: 1 the first time ([`Leased::attempt`]).
    pub fn attempt(&self) -> u16 {
        self.leased().attempt()
    }

    /// Removes the item for good ([`Leased::ack`]).
    ///
    /// Cancel safety: dropped before its first poll, the guard inside is
    /// dropped (the item given back); once polled the ack runs to its end
    /// (in Safe mode on the blocking pool) even if the future is dropped.
    ///
    /// # Errors
    ///
    /// As [`Leased::ack`].
    pub async fn ack(self) -> Result<()> {
        let (lessor, id, attempt) = self.token();
        run(fsyncs(&lessor.shared), move || lessor.ack(id, attempt)).await
    }

    /// Hands the item back, this attempt counted ([`Leased::nack`]).
    ///
    /// Cancel safety: as [`ack`](Self::ack).
    ///
    /// # Errors
    ///
    /// As [`Leased::nack`].
    pub async fn nack(self) -> Result<()> {
        let (lessor, id, attempt) = self.token();
        run(fsyncs(&lessor.shared), move || lessor.nack(id, attempt)).await
    }

    /// Hands the item back after a failure, with why and when it may come
    /// back; returns whether it went to the dead letters ([`Leased::nack_with`]).
    ///
    /// Cancel safety: as [`ack`](Self::ack).
    ///
    /// # Errors
    ///
    /// As [`Leased::nack_with`].
    pub async fn nack_with(self, reason: &str, retry: Retry) -> Result<bool> {
        let (lessor, id, attempt) = self.token();
        let reason = reason.to_owned();
        // A reason is fsynced in every mode.
        let blocks = !reason.is_empty() || fsyncs(&lessor.shared);
        run(blocks, move || {
            lessor.nack_with(id, attempt, &reason, retry)
        })
        .await
    }

    /// Hands the item back as if this lease had never happened
    /// ([`Leased::release`]); what a drop does too.
    ///
    /// Cancel safety: as [`ack`](Self::ack).
    ///
    /// # Errors
    ///
    /// As [`Leased::release`].
    pub async fn release(self) -> Result<()> {
        let (lessor, id, attempt) = self.token();
        run(fsyncs(&lessor.shared), move || lessor.release(id, attempt)).await
    }

    /// Moves the item to the dead letters now ([`Leased::fail`]).
    ///
    /// Cancel safety: as [`ack`](Self::ack).
    ///
    /// # Errors
    ///
    /// As [`Leased::fail`].
    pub async fn fail(self, reason: &str) -> Result<()> {
        let (lessor, id, attempt) = self.token();
        let reason = reason.to_owned();
        run(fsyncs(&lessor.shared), move || {
            lessor.fail(id, attempt, &reason)
        })
        .await
    }

    /// Extends the lease by the visibility timeout from now. Writes
    /// nothing and never waits, so it is a plain call.
    ///
    /// # Errors
    ///
    /// As [`Leased::touch`].
    pub fn touch(&self) -> Result<()> {
        self.leased().touch()
    }
}

impl<T> Deref for AsyncLeased<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.item()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for AsyncLeased<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(leased) => leased.fmt(f),
            None => f.write_str("AsyncLeased(settled)"),
        }
    }
}

impl<T> Drop for AsyncLeased<T> {
    fn drop(&mut self) {
        let Some(leased) = self.inner.take() else {
            return;
        };
        let (lessor, id, attempt) = leased.into_token();
        if fsyncs(&lessor.shared) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn_blocking(move || {
                    // If the lease already ended there is nothing to give back.
                    let _ = lessor.release(id, attempt);
                });
                return;
            }
        }
        let _ = lessor.release(id, attempt);
    }
}
