//! `AsyncQueue`: a queue for tokio tasks.

use std::borrow::Borrow;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::codec::{Bincode, Codec};
use crate::error::{Error, Result};
use crate::queue::asynchronous::lease::AsyncLeased;
use crate::queue::asynchronous::offload::{durable, fsyncs, run};
use crate::queue::asynchronous::stream::QueueStream;
use crate::queue::asynchronous::waiting::{wait, Waited};
use crate::queue::deadline::deadline_after;
use crate::queue::dque::DQue;
use crate::queue::lease::Leased;

/// A [`DQue`] for tokio tasks (feature `tokio`): enqueue, dequeue and
/// lease as `async fn`s, and [`Stream`](futures_core::Stream)s of leases
/// and items. Clones share the queue; every method takes `&self`.
///
/// **Waiting holds no thread.** A task waiting for an item waits on a
/// tokio notification that every wake-up of the queue reaches (an
/// enqueue, an item handed back, a close; in shared mode also the writes
/// of other processes, through one watcher thread per queue handle), or
/// on a timer for a lease about to expire.
///
/// **Where calls run.** In Turbo and Periodic mode no call waits for an
/// fsync: each runs inline on its task (microseconds, under the queue's
/// mutex). In Safe mode the writes wait for their fsync on tokio's
/// blocking pool, where concurrent callers share one (group commit); a
/// lease is taken inline and only its fsync goes to the pool.
///
/// **Cancel safety** (as tokio documents it): a lease, batch or dequeue
/// future dropped while it waits took nothing. A lease future dropped
/// after it took an item (in Safe mode, while its fsync runs) gives the
/// item back without counting the attempt, as a dropped [`AsyncLeased`]
/// does. Each method says more.
///
/// **Shutdown.** [`seal`](Self::seal) says "no more items through this
/// handle": later enqueues fail with `Closed`, and waiting consumers
/// (and the streams) end once the queue holds no item, leased ones
/// included, so a drain finishes every item. [`close`](Self::close) stops
/// at once: waiting calls fail with `Closed`, streams end.
///
/// The runtime needs its timer (`enable_all`, or `#[tokio::main]`).
///
/// ```
/// use futures::StreamExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::AsyncQueue::new(dque::DQue::<u32>::create(dir.path().join("q"))?);
/// let consumer = tokio::spawn({
///     let q = q.clone();
///     async move {
///         let mut sum = 0;
///         let mut leases = q.leases();
///         while let Some(job) = leases.next().await {
///             let job = job?;
///             sum += *job;
///             job.ack().await?;
///         }
///         Ok::<u32, dque::Error>(sum)
///     }
/// });
/// q.enqueue_batch([1, 2, 3]).await?;
/// q.seal(); // no more: the consumer ends once the queue is empty
/// assert_eq!(consumer.await.unwrap()?, 6);
/// # Ok(()) }
/// ```
pub struct AsyncQueue<T, C: Codec<T> = Bincode> {
    queue: Arc<DQue<T, C>>,
}

impl<T, C: Codec<T>> Clone for AsyncQueue<T, C> {
    fn clone(&self) -> Self {
        AsyncQueue {
            queue: Arc::clone(&self.queue),
        }
    }
}

impl<T, C: Codec<T>> std::fmt::Debug for AsyncQueue<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncQueue")
            .field("queue", &self.queue)
            .finish()
    }
}

impl<T: 'static, C: Codec<T>> AsyncQueue<T, C> {
    /// Wraps an open queue. In shared mode it starts the queue handle's
    /// watcher thread (once per handle), which wakes tasks on the writes
    /// of other processes.
    pub fn new(queue: DQue<T, C>) -> Self {
        Self::from_arc(Arc::new(queue))
    }

    /// Wraps a queue that blocking code shares too: both sides' calls
    /// wake each other's waiters.
    pub fn from_arc(queue: Arc<DQue<T, C>>) -> Self {
        if let Some(waker) = queue.waker() {
            // Without the thread a task still wakes on this process's
            // writes and on its lease timers; the error has no one to go to.
            let _ = queue.shared().wakeups().watch(waker);
        }
        AsyncQueue { queue }
    }

    /// The blocking handle, for the calls that never wait (`len`, `peek`,
    /// `pending`, `dead_letters`, `workers`...): each is a short look
    /// under the queue's mutex, fine to call from a task.
    pub fn queue(&self) -> &Arc<DQue<T, C>> {
        &self.queue
    }

    fn refuse_if_sealed(&self) -> Result<()> {
        if self.queue.shared().is_sealed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Appends an item ([`DQue::enqueue`]). Encoded on the task; written
    /// inline, or in Safe mode written and fsynced on the blocking pool.
    ///
    /// Cancel safety: not cancel-safe in Safe mode: once polled, the item
    /// is written even if the future is dropped (the write runs to its
    /// end). In Turbo and Periodic mode it completes in its first poll.
    ///
    /// # Errors
    ///
    /// `Closed` after [`seal`](Self::seal) or close; otherwise as
    /// [`DQue::enqueue`]. Each had no effect.
    pub async fn enqueue(&self, item: &T) -> Result<()> {
        self.refuse_if_sealed()?;
        let bytes = self.queue.encode_item(item)?;
        let queue = Arc::clone(&self.queue);
        run(fsyncs(queue.shared()), move || {
            queue.enqueue_encoded(&bytes).map(drop)
        })
        .await
    }

    /// Appends every item of `items`, in order, all or none, with one
    /// fsync in Safe mode ([`DQue::enqueue_batch`]).
    ///
    /// Cancel safety: as [`enqueue`](Self::enqueue).
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_batch<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.refuse_if_sealed()?;
        let encoded = items
            .into_iter()
            .map(|item| self.queue.encode_item(item.borrow()))
            .collect::<Result<Vec<_>>>()?;
        if encoded.is_empty() {
            return Ok(());
        }
        let queue = Arc::clone(&self.queue);
        run(fsyncs(queue.shared()), move || {
            queue.enqueue_encoded_batch(&encoded).map(drop)
        })
        .await
    }

    /// Like [`enqueue`](Self::enqueue), but when the queue holds its
    /// [`Options::max_items`](crate::Options::max_items) it waits up to
    /// `timeout` for room (back-pressure), without a thread.
    ///
    /// Cancel safety: cancel-safe while it waits for room (nothing
    /// written); once a try is on the blocking pool (Safe), as
    /// [`enqueue`](Self::enqueue).
    ///
    /// # Errors
    ///
    /// `Full` if no room came in time; otherwise as [`enqueue`](Self::enqueue).
    pub async fn enqueue_timeout(&self, item: &T, timeout: Duration) -> Result<()> {
        self.refuse_if_sealed()?;
        let deadline = deadline_after(timeout);
        let bytes = Arc::new(self.queue.encode_item(item)?);
        let wakeups = Arc::clone(self.queue.shared().wakeups());
        loop {
            let mut room = pin!(wakeups.notified_room());
            room.as_mut().enable();
            let queue = Arc::clone(&self.queue);
            let tried = Arc::clone(&bytes);
            match run(fsyncs(queue.shared()), move || {
                queue.enqueue_encoded(&tried).map(drop)
            })
            .await
            {
                Err(full @ Error::Full { .. }) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(full);
                    }
                    // A lease running out on its last attempt makes room
                    // with no one to signal it: wake up for it too.
                    let expiry = self
                        .queue
                        .shared()
                        .read(|engine| Ok(engine.next_expiry()))?;
                    let until = match (deadline, expiry) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let mut timer =
                        until.map(|until| Box::pin(tokio::time::sleep_until(until.into())));
                    std::future::poll_fn(|cx| {
                        let woken = room.as_mut().poll(cx).is_ready()
                            || timer
                                .as_mut()
                                .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                        if woken {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        }
                    })
                    .await;
                }
                other => return other,
            }
        }
    }

    /// Removes and returns the oldest item, waiting for one; `None` once
    /// the handle is [`seal`](Self::seal)ed and the queue empty.
    ///
    /// Cancel safety: cancel-safe in Turbo and Periodic mode (it returns in
    /// the poll that took the item). In Safe mode a future dropped while
    /// its fsync runs has removed the item: use [`lease`](Self::lease)
    /// where a task may be cancelled.
    ///
    /// # Errors
    ///
    /// As [`DQue::dequeue`]; `Closed` if the queue is closed meanwhile.
    pub async fn dequeue(&self) -> Result<Option<T>> {
        self.dequeue_until(None).await
    }

    /// Like [`dequeue`](Self::dequeue), giving up after `timeout` (`None`).
    ///
    /// Cancel safety: as [`dequeue`](Self::dequeue).
    ///
    /// # Errors
    ///
    /// As [`dequeue`](Self::dequeue).
    pub async fn dequeue_timeout(&self, timeout: Duration) -> Result<Option<T>> {
        self.dequeue_until(deadline_after(timeout)).await
    }

    async fn dequeue_until(&self, deadline: Option<Instant>) -> Result<Option<T>> {
        let queue = &*self.queue;
        let waited = wait(queue.shared(), deadline, true, |engine| {
            engine.pop_with(|id, bytes| queue.decode_item(id, bytes))
        })
        .await?;
        match waited {
            Waited::Found(item, ticket) => {
                durable(queue.shared(), ticket).await?;
                Ok(Some(item))
            }
            Waited::TimedOut | Waited::Drained => Ok(None),
        }
    }

    /// Leases the next available item, waiting for one (new, handed back,
    /// or whose lease expired); `None` once the handle is
    /// [`seal`](Self::seal)ed and the queue holds no item.
    ///
    /// Cancel safety: cancel-safe. Dropped while it waits, it took
    /// nothing; dropped while its fsync runs (Safe mode), the item it took
    /// is given back and the attempt not counted.
    ///
    /// # Errors
    ///
    /// As [`DQue::lease`]; `Closed` if the queue is closed meanwhile.
    pub async fn lease(&self) -> Result<Option<AsyncLeased<T>>> {
        self.lease_until(None).await
    }

    /// Leases an item if one is available now, without waiting.
    ///
    /// Cancel safety: as [`lease`](Self::lease).
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    pub async fn try_lease(&self) -> Result<Option<AsyncLeased<T>>> {
        self.lease_until(Some(Instant::now())).await
    }

    /// Like [`lease`](Self::lease), giving up after `timeout` (`None`).
    ///
    /// Cancel safety: as [`lease`](Self::lease).
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    pub async fn lease_timeout(&self, timeout: Duration) -> Result<Option<AsyncLeased<T>>> {
        self.lease_until(deadline_after(timeout)).await
    }

    async fn lease_until(&self, deadline: Option<Instant>) -> Result<Option<AsyncLeased<T>>> {
        let mut batch = self.lease_batch_until(1, deadline).await?;
        Ok(batch.pop())
    }

    /// Leases up to `max` available items at once (one fsync for all in
    /// Safe mode), waiting until at least one is there; empty once the
    /// handle is [`seal`](Self::seal)ed and the queue holds no item.
    ///
    /// Cancel safety: as [`lease`](Self::lease).
    ///
    /// # Errors
    ///
    /// As [`DQue::lease_batch`]; `Closed` if the queue is closed meanwhile.
    pub async fn lease_batch(&self, max: usize) -> Result<Vec<AsyncLeased<T>>> {
        self.lease_batch_until(max, None).await
    }

    /// Like [`lease_batch`](Self::lease_batch), giving up after `timeout`
    /// (empty).
    ///
    /// Cancel safety: as [`lease`](Self::lease).
    ///
    /// # Errors
    ///
    /// As [`lease_batch`](Self::lease_batch).
    pub async fn lease_batch_timeout(
        &self,
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<AsyncLeased<T>>> {
        self.lease_batch_until(max, deadline_after(timeout)).await
    }

    async fn lease_batch_until(
        &self,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<AsyncLeased<T>>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let queue = &*self.queue;
        let timeout = queue.visibility_timeout();
        let waited = wait(queue.shared(), deadline, true, |engine| {
            let leased = if max == 1 {
                engine
                    .lease_with(timeout, |id, bytes| queue.decode_item(id, bytes))?
                    .into_iter()
                    .collect()
            } else {
                engine.lease_many(max, timeout, |id, bytes| queue.decode_item(id, bytes))?
            };
            Ok((!leased.is_empty()).then_some(leased))
        })
        .await?;
        let Waited::Found(leased, ticket) = waited else {
            return Ok(Vec::new());
        };
        // Held by guards before the next await: a drop from here on gives
        // every item back, its attempt not counted.
        let lessor = queue.lessor();
        let guards: Vec<AsyncLeased<T>> = leased
            .into_iter()
            .map(|(item, id, lease)| {
                AsyncLeased::new(Leased::new(lessor.clone(), item, id, lease.attempt))
            })
            .collect();
        durable(queue.shared(), ticket).await?;
        Ok(guards)
    }

    /// Acks every lease in `leases` with one write and one fsync in Safe
    /// mode ([`DQue::ack_batch`]).
    ///
    /// Cancel safety: dropped before its first poll, the guards are
    /// dropped (the items given back); once polled the acks run to their
    /// end.
    ///
    /// # Errors
    ///
    /// As [`DQue::ack_batch`]. The guards it did not ack are dropped,
    /// which gives their items back, their attempts not counted.
    pub async fn ack_batch(&self, leases: Vec<AsyncLeased<T>>) -> Result<()>
    where
        T: Send,
    {
        let mut leased: Vec<Leased<T>> = leases.into_iter().map(AsyncLeased::into_leased).collect();
        let queue = Arc::clone(&self.queue);
        run(fsyncs(queue.shared()), move || {
            let acked = queue.ack_batch(&mut leased);
            // The ones not acked go back, their attempts not counted.
            leased
                .into_iter()
                .for_each(|left| drop(AsyncLeased::new(left)));
            acked
        })
        .await
    }

    /// Says "no more items through this handle": later enqueues through
    /// any clone fail with `Closed`, and waiting consumers (and the
    /// streams) end once the queue holds no item, leased ones included
    /// (so every item is acked or dead first). Consumers keep working
    /// until then: a nacked item comes back to them. The queue stays
    /// open; in shared mode other processes may still enqueue, and this
    /// handle's consumers stop only when they find the queue empty.
    /// It is [`DQue::seal`]: blocking consumers of the same handle see it too.
    pub fn seal(&self) {
        self.queue.shared().seal();
    }

    /// Whether [`seal`](Self::seal) was called on this queue handle.
    pub fn is_sealed(&self) -> bool {
        self.queue.shared().is_sealed()
    }

    /// Closes the queue ([`DQue::close`]): syncs (on the blocking pool),
    /// and waiting calls fail with `Closed`; streams end.
    ///
    /// Cancel safety: once polled the close runs to its end.
    ///
    /// # Errors
    ///
    /// As [`DQue::close`].
    pub async fn close(&self) -> Result<()>
    where
        T: Send,
    {
        let queue = Arc::clone(&self.queue);
        run(true, move || queue.close()).await
    }

    /// A [`Stream`](futures_core::Stream) of leases, one
    /// [`lease`](Self::lease) after another: it ends when the handle is
    /// sealed and the queue empty, or when the queue closes; another
    /// error is yielded and the stream goes on. Dropping the stream
    /// while it waits is cancel-safe, as for [`lease`](Self::lease).
    pub fn leases(&self) -> QueueStream<AsyncLeased<T>>
    where
        T: Send,
    {
        let queue = self.clone();
        QueueStream::new(move || {
            let queue = queue.clone();
            Box::pin(async move { queue.lease().await })
        })
    }

    /// A [`Stream`](futures_core::Stream) of batches of up to `max`
    /// leases ([`lease_batch`](Self::lease_batch)): one lock and (Safe) one
    /// fsync a batch. Ends as [`leases`](Self::leases) does.
    pub fn lease_batches(&self, max: usize) -> QueueStream<Vec<AsyncLeased<T>>>
    where
        T: Send,
    {
        let queue = self.clone();
        QueueStream::new(move || {
            let queue = queue.clone();
            Box::pin(async move {
                let batch = queue.lease_batch(max.max(1)).await?;
                Ok((!batch.is_empty()).then_some(batch))
            })
        })
    }

    /// A [`Stream`](futures_core::Stream) of items, each dequeued (no
    /// lease: see [`dequeue`](Self::dequeue) for cancel safety). Ends as
    /// [`leases`](Self::leases) does: a drain once sealed.
    pub fn items(&self) -> QueueStream<T>
    where
        T: Send,
    {
        let queue = self.clone();
        QueueStream::new(move || {
            let queue = queue.clone();
            Box::pin(async move { queue.dequeue().await })
        })
    }
}
