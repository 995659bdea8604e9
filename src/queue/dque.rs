//! The public typed queue: `DQue<T, C>`.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{ControlFlow, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;

use parking_lot::Mutex;

use crate::codec::{Bincode, Codec, Raw};
use crate::error::{Error, Result};
use crate::log::recovery::OpenReport;
use crate::log::verify::VerifyReport;
use crate::options::{Durability, Options};
use crate::queue::dead::DeadLetter;
use crate::queue::deadline::deadline_after;
use crate::queue::drain::Drain;
use crate::queue::engine::{ById, Engine, OpenMode, PendingRecord, Unleased};
use crate::queue::flusher::Flusher;
use crate::queue::iter::{Iter, Pending};
use crate::queue::lease::{Leased, Lessor};
use crate::queue::shared::Shared;
use crate::queue::workers::Worker;

/// A durable FIFO queue of `T` items in one directory.
///
/// Share it between threads with [`Arc`](std::sync::Arc); every method takes
/// `&self`. One handle per queue at a time: a second open fails with
/// [`Error::Locked`]. Items are encoded by `C` ([`Bincode`] unless chosen).
///
/// ```
/// use dque::DQue;
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<String> = DQue::open_or_create(dir.path().join("q"))?;
/// q.enqueue(&"first".to_string())?;
/// q.enqueue(&"second".to_string())?;
/// assert_eq!(q.len(), 2);
/// assert_eq!(q.peek()?.as_deref(), Some("first"));
/// assert_eq!(q.dequeue()?.as_deref(), Some("first"));
/// q.close()?;
///
/// let q: DQue<String> = DQue::open(dir.path().join("q"))?;
/// assert_eq!(q.dequeue()?.as_deref(), Some("second"));
/// assert_eq!(q.dequeue()?, None);
/// # Ok(()) }
/// ```
pub struct DQue<T, C: Codec<T> = Bincode> {
    shared: Arc<Shared>,
    /// Runs while the durability is `Periodic`.
    flusher: Mutex<Option<Flusher>>,
    path: PathBuf,
    /// As stored with the queue (or the default): every handle's.
    visibility_timeout: Duration,
    /// As stored with the queue (or the default): every handle's.
    max_attempts: u16,
    report: OpenReport,
    codec: C,
    /// The codec id stored in the queue: `C::ID`, except for a raw view of
    /// another codec's queue ([`DQue::open_encoded_with`]).
    codec_id: u32,
    // Items are only ever held encoded, so the queue is Send + Sync for any T.
    _item: PhantomData<fn(T) -> T>,
}

/// A queue of byte strings stored as they are; see [`Raw`].
pub type RawQueue = DQue<Vec<u8>, Raw>;

impl<T, C: Codec<T>> std::fmt::Debug for DQue<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DQue")
            .field("path", &self.path)
            .field("len", &self.len())
            .finish()
    }
}

impl<T, C: Codec<T>> DQue<T, C> {
    /// Creates a new queue at `path` with default [`Options`]; fails with
    /// [`Error::AlreadyExists`] if one is there. The directory may exist if empty.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` if a queue is there; `NotAQueue` for a file, or a directory
    /// holding other files; `Locked` if another handle holds it; `InvalidOption`
    /// for an option out of range; `Io`. A failed create leaves no queue.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        Self::create_with(path, &Options::default())
    }

    /// Opens the existing queue at `path`; fails with [`Error::NotFound`] if
    /// there is none. Needs no sizes: they are stored in the queue.
    ///
    /// # Errors
    ///
    /// `NotFound` if there is no queue; `NotAQueue`; `Locked` if another handle
    /// holds it; `CodecMismatch` for a queue of another codec;
    /// `UnsupportedVersion`; `Corrupted` or `MissingSegment` for damage an open
    /// must not mend (`dque repair` mends it, see FORMAT.md); `InvalidOption`; `Io`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &Options::default())
    }

    /// Opens the queue at `path`, creating it if there is none.
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create) and [`open`](Self::open).
    pub fn open_or_create(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_or_create_with(path, &Options::default())
    }

    /// [`create`](Self::create) with options.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` if a queue is there; `NotAQueue` for a file, or a directory
    /// holding other files; `Locked` if another handle holds it; `InvalidOption`
    /// for an option out of range; `Io`. A failed create leaves no queue.
    pub fn create_with(path: impl AsRef<Path>, options: &Options) -> Result<Self> {
        Self::start(
            path.as_ref(),
            &Self::typed(options),
            OpenMode::Create,
            C::ID,
        )
    }

    /// [`open`](Self::open) with options.
    ///
    /// # Errors
    ///
    /// `NotFound` if there is no queue; `NotAQueue`; `Locked` if another handle
    /// holds it; `CodecMismatch` for a queue of another codec;
    /// `UnsupportedVersion`; `Corrupted` or `MissingSegment` for damage an open
    /// must not mend (`dque repair` mends it, see FORMAT.md); `InvalidOption`; `Io`.
    pub fn open_with(path: impl AsRef<Path>, options: &Options) -> Result<Self> {
        Self::start(path.as_ref(), &Self::typed(options), OpenMode::Open, C::ID)
    }

    /// [`open_or_create`](Self::open_or_create) with options.
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create) and [`open`](Self::open).
    pub fn open_or_create_with(path: impl AsRef<Path>, options: &Options) -> Result<Self> {
        Self::start(
            path.as_ref(),
            &Self::typed(options),
            OpenMode::OpenOrCreate,
            C::ID,
        )
    }

    /// `options` with this handle's item type, which a typed queue records
    /// at creation and checks at open; raw bytes have none.
    fn typed(options: &Options) -> Options {
        let mut options = *options;
        if C::ID != <Raw as Codec<Vec<u8>>>::ID {
            options.item_type = Some(std::any::type_name::<T>());
        }
        options
    }

    fn start(path: &Path, options: &Options, mode: OpenMode, codec_id: u32) -> Result<Self> {
        let (engine, report) = Engine::open(path, options, codec_id, mode)?;
        let queue = DQue {
            path: path.to_path_buf(),
            visibility_timeout: engine.visibility_timeout(),
            max_attempts: engine.max_attempts(),
            shared: Arc::new(Shared::new(engine)),
            flusher: Mutex::new(None),
            report,
            codec: C::default(),
            codec_id,
            _item: PhantomData,
        };
        queue.run_flusher_for(options.durability)?;
        Ok(queue)
    }

    /// Starts or stops the background flusher to match `durability`.
    fn run_flusher_for(&self, durability: Durability) -> Result<()> {
        let mut flusher = self.flusher.lock();
        if let Some(running) = flusher.take() {
            running.stop();
        }
        if let Durability::Periodic(interval) = durability {
            let started = Flusher::start(Arc::downgrade(&self.shared), interval)
                .map_err(|e| Error::io(&self.path, e))?;
            *flusher = Some(started);
        }
        Ok(())
    }

    /// The queue's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Delivery attempts an item gets before it goes to the dead letters:
    /// [`Options::max_attempts`] as stored with the queue (every handle of
    /// it uses the same), or the default, 5.
    pub fn max_attempts(&self) -> u16 {
        self.max_attempts
    }

    /// How long a lease holds an item: [`Options::visibility_timeout`] as
    /// stored with the queue, or the default, 30 s.
    pub fn visibility_timeout(&self) -> Duration {
        self.visibility_timeout
    }

    /// What the open found and repaired (torn tails cut, leftovers removed).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Appends an item. In [`Durability::Safe`] it is on disk when this
    /// returns; callers enqueueing at the same time share one fsync.
    ///
    /// # Errors
    ///
    /// `Encode` or `ItemTooLarge` (nothing written); `Full` under
    /// [`Options::max_items`]; `Closed`; `WritesRefused` after a failed fsync;
    /// `Io`. A failed write wrote nothing; a failed fsync (Safe) leaves the
    /// item to the disk's fate and makes the queue refuse later writes.
    pub fn enqueue(&self, item: &T) -> Result<()> {
        self.shared
            .write_item(|engine| engine.append_with(|out| self.codec.encode(item, out)))?;
        Ok(())
    }

    /// Like [`enqueue`](Self::enqueue), but when the queue holds its
    /// [`Options::max_items`] it waits up to `timeout` for room
    /// (back-pressure) instead of failing at once. Any `Duration` works;
    /// `Duration::MAX` waits for ever.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<u32> = dque::Options::new().max_items(1).create(dir.path().join("q"))?;
    /// q.enqueue(&1)?;
    /// let full = q.enqueue_timeout(&2, Duration::from_millis(10));
    /// assert!(matches!(full, Err(dque::Error::Full { .. })));
    /// q.dequeue()?;
    /// q.enqueue_timeout(&2, Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Full` if no room came in time, `Closed` if the queue was closed
    /// meanwhile, otherwise as [`enqueue`](Self::enqueue); each had no effect.
    pub fn enqueue_timeout(&self, item: &T, timeout: Duration) -> Result<()> {
        self.shared
            .write_item_when_room(deadline_after(timeout), |engine| {
                engine.append_with(|out| self.codec.encode(item, out))
            })?;
        Ok(())
    }

    /// Appends every item of `items` (any iterator of items or of
    /// references to them) in order, with one fsync for all in
    /// [`Durability::Safe`]. An empty batch does nothing.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch(&[1, 2, 3])?;
    /// q.enqueue_batch((4..=6).filter(|n| n % 2 == 0))?;
    /// assert_eq!(q.dequeue_batch(10)?, vec![1, 2, 3, 4, 6]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Every item is encoded before the first is written: if one cannot be
    /// (`Encode`) or is too large (`ItemTooLarge`), nothing is written.
    /// `Closed`, or the I/O error of the write (then nothing was
    /// acknowledged; in Safe mode a failed fsync leaves the batch's fate to
    /// the disk, as for [`enqueue`](Self::enqueue)). A batch that fills the
    /// last segment is written one segment at a time: when a write fails
    /// after the batch's first items went into a segment since sealed,
    /// those stay, and the handle refuses every later write
    /// (`WritesRefused`), so that no retry adds them twice; reopening shows
    /// which are in.
    pub fn enqueue_batch<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        let items: Vec<I::Item> = items.into_iter().collect();
        if items.is_empty() {
            return Ok(());
        }
        self.shared.write_item(|engine| {
            engine.append_many(items.len(), |i, out| {
                self.codec.encode(items[i].borrow(), out)
            })
        })?;
        Ok(())
    }

    /// Removes and returns up to `max` of the oldest items (fewer when the
    /// queue holds fewer), with one fsync for all in [`Durability::Safe`].
    ///
    /// A record that does not decode goes to the dead letters, as in
    /// [`dequeue`](Self::dequeue).
    ///
    /// # Errors
    ///
    /// An error before the first item is returned and took nothing. An
    /// error after some items ends the batch: the call returns the items it
    /// took, and the error (which had no effect) comes from the next call
    /// that writes.
    pub fn dequeue_batch(&self, max: usize) -> Result<Vec<T>> {
        self.shared
            .write(|engine| engine.pop_many(max, |id, bytes| self.decode(id, bytes)))
    }

    /// Like [`dequeue_batch`](Self::dequeue_batch), but waits up to
    /// `timeout` until at least one item is there, then takes up to `max`
    /// (yaque's `recv_batch`): empty only when the time ran out first. Any
    /// `Duration` works; `Duration::MAX` waits for ever.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = std::sync::Arc::new(dque::DQue::<u32>::create(dir.path().join("q"))?);
    /// let producer = std::sync::Arc::clone(&q);
    /// std::thread::spawn(move || producer.enqueue_batch([1, 2, 3]));
    /// let got = q.dequeue_batch_timeout(10, Duration::from_secs(30))?;
    /// assert!(!got.is_empty() && got.len() <= 3);
    /// assert!(q.dequeue_batch_timeout(10, Duration::ZERO)?.len() <= 2);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`dequeue_batch`](Self::dequeue_batch), and `Closed` if the queue
    /// is closed while waiting.
    pub fn dequeue_batch_timeout(&self, max: usize, timeout: Duration) -> Result<Vec<T>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let taken = self
            .shared
            .wait_for(deadline_after(timeout), true, |engine| {
                let items = engine.pop_many(max, |id, bytes| self.decode(id, bytes))?;
                Ok((!items.is_empty()).then_some(items))
            })?;
        Ok(taken.unwrap_or_default())
    }

    /// Removes and returns the oldest item, or `None` when the queue is empty.
    ///
    /// A record that does not decode as `T` never stops the queue: it is
    /// moved to the dead letters at once, its bytes as stored and the
    /// decode error as the reason (read it with
    /// [`dead_letters`](Self::dead_letters), put it back with
    /// [`requeue_dead`](Self::requeue_dead) once the type is fixed), and
    /// the call goes on with the next record. Nothing is deleted. (A
    /// [`lease`](Self::lease) counts an attempt instead.)
    ///
    /// # Errors
    ///
    /// `Corrupted` or `MissingSegment`
    /// when the call reaches a damaged segment; `Closed`; `WritesRefused`; `Io`;
    /// or the error a batch met after it took items. Each had no effect.
    pub fn dequeue(&self) -> Result<Option<T>> {
        self.shared
            .write(|engine| engine.pop_with(|id, bytes| self.decode(id, bytes)))
    }

    /// Returns the oldest item without removing it, or `None` when empty:
    /// the item the next dequeue would take, so records that do not decode
    /// are passed over (the next dequeue or lease settles them; [`iter`](Self::iter)
    /// lists them as errors, [`peek_raw`](Self::peek_raw) shows their bytes).
    ///
    /// # Errors
    ///
    /// `Corrupted`, `MissingSegment` or `Io` reading a segment past the
    /// mapped ones; `Closed`. A peek writes nothing.
    pub fn peek(&self) -> Result<Option<T>> {
        self.shared
            .read(|engine| engine.peek_with(|id, bytes| self.decode(id, bytes)))
    }

    /// Like [`dequeue`](Self::dequeue), but waits for an item; fails with
    /// [`Error::Closed`] if the queue is closed while waiting, or once the
    /// handle is [`seal`](Self::seal)ed and the queue empty.
    ///
    /// # Errors
    ///
    /// As [`dequeue`](Self::dequeue), and `Closed` if the queue is closed
    /// while waiting, or sealed and drained.
    pub fn dequeue_block(&self) -> Result<T> {
        self.shared
            .wait_for(None, true, |engine| {
                engine.pop_with(|id, b| self.decode(id, b))
            })?
            // Without a deadline only a drain ends the wait empty.
            .ok_or(Error::Closed)
    }

    /// Like [`peek`](Self::peek), but waits for an item.
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek), and `Closed` if the queue is closed while
    /// waiting, or sealed and drained.
    pub fn peek_block(&self) -> Result<T> {
        self.shared
            .wait_for(None, false, |engine| {
                engine.peek_with(|id, b| self.decode(id, b))
            })?
            .ok_or(Error::Closed)
    }

    /// Like [`dequeue_block`](Self::dequeue_block), but gives up after
    /// `timeout` and returns `None`.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// assert_eq!(q.dequeue_timeout(Duration::from_millis(5))?, None);
    /// q.enqueue(&1)?;
    /// assert_eq!(q.peek_timeout(Duration::MAX)?, Some(1)); // any Duration
    /// assert_eq!(q.dequeue_timeout(Duration::MAX)?, Some(1));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`dequeue`](Self::dequeue), and `Closed` if the queue is closed while waiting.
    pub fn dequeue_timeout(&self, timeout: Duration) -> Result<Option<T>> {
        self.shared
            .wait_for(deadline_after(timeout), true, |engine| {
                engine.pop_with(|id, b| self.decode(id, b))
            })
    }

    /// Like [`peek_block`](Self::peek_block), but gives up after `timeout`
    /// and returns `None`.
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek), and `Closed` if the queue is closed while waiting.
    pub fn peek_timeout(&self, timeout: Duration) -> Result<Option<T>> {
        self.shared
            .wait_for(deadline_after(timeout), false, |engine| {
                engine.peek_with(|id, b| self.decode(id, b))
            })
    }

    /// Leases the next available item: it stays in the queue, invisible to
    /// other consumers, until the guard acks it or the visibility timeout
    /// passes. `None` when no item is available. The attempt is counted on
    /// disk first (durably in Safe mode), so a crash mid-work still counts.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue(&7)?;
    /// let job = q.lease()?.expect("an item");
    /// assert_eq!((*job, job.attempt(), q.len(), q.leased_len()), (7, 1, 1, 1));
    /// assert_eq!(q.lease()?.map(|j| *j), None, "leased items are hidden");
    /// job.ack()?;
    /// assert!(q.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// A record that does not decode as `T` is a failed attempt, not a
    /// stop: its attempt is counted, it is out of sight for the visibility
    /// timeout (another consumer, of another version, may decode it), and
    /// the call goes on with the next record. Once its attempts are used
    /// up it goes to the dead letters, bytes intact, with the decode error
    /// as the reason.
    ///
    /// # Errors
    ///
    /// `Closed`, or the I/O error of the write.
    pub fn lease(&self) -> Result<Option<Leased<T>>> {
        self.lease_until(Some(Instant::now()))
    }

    /// Like [`lease`](Self::lease), but waits for an item (new, handed
    /// back, or whose lease expired); fails with `Closed` if closed
    /// meanwhile, or once the handle is [`seal`](Self::seal)ed and the
    /// queue holds no item (leased ones included).
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease); `Closed` when closed, or sealed and drained.
    pub fn lease_block(&self) -> Result<Leased<T>> {
        // Without a deadline only a drain ends the wait empty.
        self.lease_until(None)?.ok_or(Error::Closed)
    }

    /// Like [`lease_block`](Self::lease_block), giving up after `timeout`
    /// (any `Duration`: `Duration::MAX` waits for ever). Once the handle is
    /// [`seal`](Self::seal)ed and the queue holds no item it returns `None`
    /// at once: a `while let Some(job) = q.lease_timeout(t)?` loop ends.
    ///
    /// # Errors
    ///
    /// As [`lease`](Self::lease).
    pub fn lease_timeout(&self, timeout: Duration) -> Result<Option<Leased<T>>> {
        self.lease_until(deadline_after(timeout))
    }

    fn lease_until(&self, deadline: Option<Instant>) -> Result<Option<Leased<T>>> {
        let leased = self.shared.wait_for(deadline, true, |engine| {
            engine.lease_with(self.visibility_timeout, |id, bytes| self.decode(id, bytes))
        })?;
        Ok(leased.map(|(item, id, lease)| Leased::new(self.lessor(), item, id, lease.attempt)))
    }

    /// Leases up to `max` available items at once, with one fsync for all
    /// in [`Durability::Safe`]; empty when none is available. Ack them
    /// together with [`ack_batch`](Self::ack_batch).
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch([1, 2, 3])?;
    /// let mut jobs = q.lease_batch(10)?;
    /// assert_eq!(jobs.iter().map(|j| **j).collect::<Vec<_>>(), [1, 2, 3]);
    /// q.ack_batch(&mut jobs)?;
    /// assert!(q.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// An error before the first lease is returned and had no effect; one
    /// after ends the batch, which returns what it leased, and is returned
    /// by the next call that writes (as [`dequeue_batch`](Self::dequeue_batch)).
    pub fn lease_batch(&self, max: usize) -> Result<Vec<Leased<T>>> {
        self.lease_batch_until(max, Some(Instant::now()))
    }

    /// Like [`lease_batch`](Self::lease_batch), but waits up to `timeout`
    /// until at least one item is available, then leases up to `max`.
    ///
    /// # Errors
    ///
    /// As [`lease_batch`](Self::lease_batch), and `Closed` if the queue is
    /// closed while waiting.
    pub fn lease_batch_timeout(&self, max: usize, timeout: Duration) -> Result<Vec<Leased<T>>> {
        self.lease_batch_until(max, deadline_after(timeout))
    }

    fn lease_batch_until(&self, max: usize, deadline: Option<Instant>) -> Result<Vec<Leased<T>>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let leased = self.shared.wait_for(deadline, true, |engine| {
            let leased = engine.lease_many(max, self.visibility_timeout, |id, bytes| {
                self.decode(id, bytes)
            })?;
            Ok((!leased.is_empty()).then_some(leased))
        })?;
        let lessor = self.lessor();
        Ok(leased
            .unwrap_or_default()
            .into_iter()
            .map(|(item, id, lease)| Leased::new(lessor.clone(), item, id, lease.attempt))
            .collect())
    }

    /// Acks every lease in `leases` with one write under the lock and one
    /// fsync in [`Durability::Safe`]: the batch counterpart of
    /// [`Leased::ack`]. The acked guards are taken out of `leases`: on
    /// `Ok` it is empty.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch([1, 2, 3])?;
    /// let mut jobs = q.lease_batch(10)?;
    /// q.ack_batch(&mut jobs)?;
    /// assert!(jobs.is_empty() && q.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// If a lease expired (`LeaseLost`, naming it), was taken from another
    /// queue (`InvalidOption`) or is there twice, nothing is acked and
    /// `leases` is left as it was: drop the one named, retry the rest.
    /// `Closed` or `WritesRefused`: nothing acked. If a write fails midway
    /// (a full disk), the leases acked before it are taken out and the rest
    /// stay in `leases`, unacked.
    pub fn ack_batch(&self, leases: &mut Vec<Leased<T>>) -> Result<()> {
        if let Some(foreign) = leases.iter().find(|lease| !lease.is_from(&self.shared)) {
            return Err(Error::InvalidOption {
                name: "ack_batch",
                reason: format!(
                    "lease of item {} was taken from another queue",
                    foreign.id()
                ),
            });
        }
        if leases.is_empty() {
            return Ok(());
        }
        let tokens: Vec<(u64, u16)> = leases.iter().map(Leased::token).collect();
        let (acked, result) = self.lessor().ack_all(&tokens);
        leases.drain(..acked).for_each(Leased::spend);
        result
    }

    /// Leases pending item `id` out of order (see `Engine::lease_id`).
    /// One id: no `Vec` for the ids or the answers (a due job's lease).
    pub(crate) fn lease_id(&self, id: u64) -> Result<ById<Leased<T>>> {
        let found = self.shared.write(|engine| {
            engine.lease_id(id, self.visibility_timeout, |bytes| self.decode(id, bytes))
        })?;
        Ok(self.leased_by_id(found, id))
    }

    /// A record leased by id as the handle's [`Leased`].
    fn leased_by_id(&self, found: ById<T>, id: u64) -> ById<Leased<T>> {
        match found {
            ById::Leased(item, lease) => {
                ById::Leased(Leased::new(self.lessor(), item, id, lease.attempt), lease)
            }
            ById::Busy => ById::Busy,
            ById::Gone => ById::Gone,
        }
    }

    /// Leases pending items `ids` out of order, in one call (one fsync in
    /// Safe), each as [`lease_id`](Self::lease_id) would. On an error the
    /// ones leased before it stay leased until their lease ends.
    pub(crate) fn lease_ids(&self, ids: &[u64]) -> Result<Vec<ById<Leased<T>>>> {
        let found = self.shared.write(|engine| {
            ids.iter()
                .map(|&id| {
                    engine.lease_id(id, self.visibility_timeout, |bytes| self.decode(id, bytes))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        Ok(found
            .into_iter()
            .zip(ids)
            .map(|(found, &id)| self.leased_by_id(found, id))
            .collect())
    }

    /// The bytes of records `ids` that are unsettled and held by no one,
    /// without leasing them (see `Engine::unleased_payload`). A read.
    pub(crate) fn read_unleased(&self, ids: &[u64]) -> Result<Vec<Unleased<Vec<u8>>>> {
        self.shared.read(|engine| {
            ids.iter()
                .map(|&id| {
                    Ok(match engine.unleased_payload(id)? {
                        Unleased::Read(bytes) => Unleased::Read(bytes.to_vec()),
                        Unleased::Busy => Unleased::Busy,
                        Unleased::Gone => Unleased::Gone,
                    })
                })
                .collect()
        })
    }

    /// Ends pending records `ids` as [`cancel`](Self::cancel) does, in one
    /// call (one fsync in Safe); a record already gone is skipped. On an
    /// error, the ones before it are ended: returns how many, and the error.
    pub(crate) fn cancel_all(&self, ids: &[u64]) -> (usize, Result<()>) {
        let mut done = 0;
        let result = self.shared.write(|engine| {
            for &id in ids {
                match engine.cancel(id) {
                    Ok(()) | Err(Error::NotPending { .. }) => done += 1,
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        (done, result)
    }

    /// Appends `items`, each already encoded with the queue's codec, all
    /// or none (one fsync in Safe); returns the id of the first.
    pub(crate) fn enqueue_encoded_batch(&self, items: &[Vec<u8>]) -> Result<u64> {
        let last = self.shared.write_item(|engine| {
            engine.append_many(items.len(), |i, out| {
                out.extend_from_slice(&items[i]);
                Ok(())
            })
        })?;
        Ok(last + 1 - items.len() as u64)
    }

    /// Appends `bytes`, already encoded with the queue's codec, as one
    /// item; returns its id.
    pub(crate) fn enqueue_encoded(&self, bytes: &[u8]) -> Result<u64> {
        self.shared.write_item(|engine| {
            engine.append_with(|out| {
                out.extend_from_slice(bytes);
                Ok(())
            })
        })
    }

    /// Appends one item whose encoded bytes `write` appends to the buffer
    /// it is given; returns its id.
    pub(crate) fn enqueue_encoded_with(&self, write: impl FnOnce(&mut Vec<u8>)) -> Result<u64> {
        self.shared.write_item(|engine| {
            engine.append_with(|out| {
                write(out);
                Ok(())
            })
        })
    }

    /// Whether item `id` is in the queue, pending or leased. A read.
    pub(crate) fn is_unsettled(&self, id: u64) -> Result<bool> {
        self.shared.read(|engine| Ok(engine.is_unsettled(id)))
    }

    /// Which of items `ids` are in the queue, pending or leased (each as
    /// [`is_unsettled`](Self::is_unsettled) says), under one lock. A read.
    pub(crate) fn unsettled_among(&self, ids: &[u64]) -> Result<Vec<bool>> {
        self.shared
            .read(|engine| Ok(ids.iter().map(|&id| engine.is_unsettled(id)).collect()))
    }

    /// Whether item `id` is leased now. A read.
    pub(crate) fn is_held(&self, id: u64) -> Result<bool> {
        self.shared.read(|engine| Ok(engine.is_held(id)))
    }

    /// Whether item `id` is leased now in lease attempt `attempt`, dead
    /// processes' leases given back first (a write only then).
    pub(crate) fn holds_lease(&self, id: u64, attempt: u16) -> Result<bool> {
        self.shared.write(|engine| engine.holds_lease(id, attempt))
    }

    /// The attempt of item `id`'s lease, if it is leased now. A read.
    pub(crate) fn held_attempt(&self, id: u64) -> Result<Option<u16>> {
        self.shared.read(|engine| Ok(engine.held_attempt(id)))
    }

    /// When item `id`'s lease began and when it ends, if it is leased
    /// now. A read.
    pub(crate) fn held_times(
        &self,
        id: u64,
    ) -> Result<Option<(std::time::Instant, std::time::Instant)>> {
        self.shared.read(|engine| {
            Ok(engine
                .held_lease(id)
                .map(|lease| (lease.since, lease.expires)))
        })
    }

    /// The pending records from id `from` to the end of the segment
    /// holding the first of them (see `Engine::pending_chunk`). A read.
    pub(crate) fn pending_chunk(&self, from: u64) -> Result<Vec<PendingRecord>> {
        self.shared.read(|engine| engine.pending_chunk(from))
    }

    /// Calls `visit` on each pending record from id `from` on (id,
    /// attempts so far, leased now, payload in place) until it says stop
    /// (see `Engine::visit_pending`). A read.
    pub(crate) fn visit_pending_from(
        &self,
        from: u64,
        visit: impl FnMut(u64, u16, bool, &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<()> {
        self.shared
            .read(|engine| engine.visit_pending_after(from, visit))
    }

    /// As [`pending_chunk`](Self::pending_chunk), without copying the
    /// payloads: `visit` sees each in place. Returns the id to go on from
    /// (`None` at the end). A read.
    pub(crate) fn visit_pending_chunk(
        &self,
        from: u64,
        visit: impl FnMut(u64, &[u8]),
    ) -> Result<Option<u64>> {
        let last = self.shared.read(|engine| engine.visit_chunk(from, visit))?;
        Ok(last.map(|id| id + 1))
    }

    /// The first `max` dead letters, oldest first. A read.
    pub(crate) fn dead_letters_up_to(&self, max: usize) -> Result<Vec<DeadLetter>> {
        self.shared.read(|engine| engine.dead_letters_up_to(max))
    }

    /// How many dead letters there are. A read.
    pub(crate) fn dead_len(&self) -> Result<u64> {
        self.shared.read(|engine| engine.dead_letter_count())
    }

    /// The id the next enqueued item gets. A read.
    pub(crate) fn end_id(&self) -> Result<u64> {
        self.shared.read(|engine| Ok(engine.end_id()))
    }

    /// Puts dead letter `id` back as [`requeue_dead`](Self::requeue_dead)
    /// does, with its bytes as `rewrite` makes them; returns the new id.
    pub(crate) fn requeue_dead_with(
        &self,
        id: u64,
        rewrite: impl FnOnce(Vec<u8>) -> Vec<u8>,
    ) -> Result<u64> {
        let new_id = self
            .shared
            .write_item(|engine| engine.requeue_dead_with(id, rewrite))?;
        Ok(new_id)
    }

    /// Shared mode: the futex word every write of every process moves.
    pub(crate) fn waker(&self) -> Option<crate::queue::processes::Waker> {
        self.shared.waker()
    }

    /// The state every handle and guard of this queue shares.
    #[cfg(feature = "tokio")]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// `item` encoded as [`enqueue`](Self::enqueue) would write it.
    #[cfg(feature = "tokio")]
    pub(crate) fn encode_item(&self, item: &T) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.codec.encode(item, &mut out).map_err(Error::Encode)?;
        Ok(out)
    }

    /// Decodes record `id`'s bytes (`Decode` naming it if they do not).
    #[cfg(feature = "tokio")]
    pub(crate) fn decode_item(&self, id: u64, bytes: &[u8]) -> Result<T> {
        self.decode(id, bytes)
    }

    pub(crate) fn lessor(&self) -> Lessor {
        Lessor {
            shared: Arc::clone(&self.shared),
            visibility_timeout: self.visibility_timeout,
        }
    }

    /// Removes pending item `id` (see [`Leased::id`], [`pending`](Self::pending))
    /// without delivering it. Fails with `Leased` if a consumer holds it and
    /// `NotPending` if it is gone already.
    ///
    /// # Errors
    ///
    /// `Leased` if a consumer holds it, `NotPending` if it is gone or never
    /// was; `Corrupted` or `Io` reading a segment; `Closed`; `WritesRefused`.
    pub fn cancel(&self, id: u64) -> Result<()> {
        self.shared.write(|engine| engine.cancel(id))
    }

    /// Ends every lease now, as if the visibility timeout had passed, and
    /// settles them as the next write would (handed back, or moved to the
    /// dead letters after the last attempt), so tests can expire leases
    /// without waiting (feature `fault-injection`).
    ///
    /// # Errors
    ///
    /// `Closed`; the error of moving an item to the dead letters (`Io`).
    #[cfg(feature = "fault-injection")]
    pub fn expire_leases_now(&self) -> Result<()> {
        self.shared.write(|engine| engine.expire_leases_now())?;
        self.shared.notify_available();
        Ok(())
    }

    /// The handles that have the queue open, with the items each holds
    /// leased: in shared mode every live process's handles
    /// ([`Options::shared`]), else this handle alone. A read.
    ///
    /// # Errors
    /// `Closed` after close; an I/O error if the lock file cannot be read.
    ///
    /// See [`Worker`] for an example.
    pub fn workers(&self) -> Result<Vec<Worker>> {
        self.shared.read(|engine| engine.workers())
    }

    /// Names the worker this handle leases under (`""`: none): its entry in
    /// [`workers`](Self::workers) shows it, in shared mode to every process
    /// (at most `MAX_WORKER_NAME` bytes, checked by the caller).
    pub(crate) fn set_worker_name(&self, name: &str) -> Result<()> {
        self.shared.read(|engine| {
            engine.set_worker_name(name);
            Ok(())
        })
    }

    /// Items leased right now (they are counted in [`len`](Self::len) too).
    pub fn leased_len(&self) -> usize {
        self.shared
            .read(|engine| Ok(engine.leased_count()))
            .unwrap_or(0)
    }

    /// Up to `max` pending items in delivery order (handed-back items aside),
    /// without consuming them: id, attempts so far, whether leased now, and
    /// the item. Segments past the mapped ones are read one at a time.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch(&[10, 20, 30])?;
    /// let held = q.lease()?.expect("an item");
    /// let pending = q.pending(10)?;
    /// assert_eq!(pending.iter().map(|p| p.item).collect::<Vec<_>>(), [10, 20, 30]);
    /// assert!(pending[0].leased && !pending[1].leased);
    /// q.cancel(pending[2].id)?;
    /// assert_eq!(q.len(), 2);
    /// # drop(held); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Decode` for a record that does not decode; `Corrupted`, `MissingSegment`
    /// or `Io` reading a segment; `Closed`.
    pub fn pending(&self, max: usize) -> Result<Vec<Pending<T>>> {
        self.shared.read(|engine| {
            let mut found = Vec::new();
            let mut failed = None;
            engine.visit_pending(|id, attempts, leased, bytes| {
                if found.len() >= max {
                    return ControlFlow::Break(());
                }
                match self.decode(id, bytes) {
                    Ok(item) => found.push(Pending {
                        id,
                        attempts,
                        leased,
                        item,
                    }),
                    Err(e) => {
                        failed = Some(e);
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            })?;
            failed.map_or(Ok(found), Err)
        })
    }

    /// The pending items in delivery order (items handed back aside), as a
    /// lazy iterator: each is decoded when the walk reaches it, memory holds
    /// one segment's items at most, and nothing is consumed or written. See
    /// [`Iter`] for what a walk sees of concurrent calls.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<u32> = dque::Options::new().segment_items(2).create(dir.path().join("q"))?;
    /// q.enqueue_batch(0..5)?;
    /// let even: Vec<u32> = q
    ///     .iter()
    ///     .map(|pending| pending.map(|p| p.item))
    ///     .filter(|item| item.as_ref().map_or(true, |n| n % 2 == 0))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(even, [0, 2, 4]);
    /// assert_eq!(q.len(), 5);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A record that does not decode is yielded as `Err(Decode)` naming it,
    /// and the walk goes on. A step yields `Err` and then the walk ends if
    /// a segment cannot be read (`Corrupted`, `Io`), or the queue was
    /// closed (`Closed`).
    pub fn iter(&self) -> Iter<'_, T, C> {
        Iter::new(&self.shared, &self.codec)
    }

    /// Removes every item no one holds (leased items stay until acked or
    /// their lease ends) and returns how many; one fsync in
    /// [`Durability::Safe`]. It writes one ack marker per item, like that
    /// many dequeues without decoding, and deletes segments as they empty.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch(0..100)?;
    /// let held = q.lease()?.expect("an item");
    /// assert_eq!(q.clear()?, 99);
    /// assert_eq!(q.len(), 1);
    /// held.ack()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Closed`, or an I/O error before the first item (nothing removed).
    /// An error after some items ends the call, which returns how many it
    /// removed; the error (which had no effect) comes from the next write.
    pub fn clear(&self) -> Result<u64> {
        self.shared
            .write(|engine| Ok(engine.pop_many(usize::MAX, |_, _| Ok(()))?.len() as u64))
    }

    /// Items moved to the dead letters (by [`Leased::fail`] or after
    /// `max_attempts`), oldest first, with their reasons.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.enqueue_batch([1, 2])?;
    /// q.lease()?.expect("an item").fail("cannot parse")?;
    /// q.lease()?.expect("an item").fail("cannot parse")?;
    /// let dead = q.dead_letters()?;
    /// assert_eq!((dead.len(), dead[0].reason.as_str()), (2, "cannot parse"));
    /// q.requeue_dead(dead[0].id)?; // back at the end, attempts anew
    /// assert_eq!(q.purge_dead()?, 1);
    /// assert_eq!(q.dequeue()?, Some(1));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Corrupted` or `Io` reading `dead/` (also if it did not open with the
    /// queue); `Closed`.
    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>> {
        self.shared.read(Engine::dead_letter_list)
    }

    /// Puts dead letter `id` (a [`DeadLetter::id`]) back at the end of the
    /// queue, with its attempts starting over.
    ///
    /// # Errors
    ///
    /// `NotPending` if there is no such letter; `Full`; `Closed`;
    /// `WritesRefused`; `Io`; each had no effect. Once the item is back, a
    /// failure to remove the letter (then in both places) is the next write's error.
    pub fn requeue_dead(&self, id: u64) -> Result<()> {
        self.shared.write_item(|engine| engine.requeue_dead(id))?;
        Ok(())
    }

    /// Deletes every dead letter; returns how many there were.
    ///
    /// # Errors
    ///
    /// `Closed`; `WritesRefused`; `Io` before the first letter (nothing
    /// removed); a later one is the next write's error.
    pub fn purge_dead(&self) -> Result<u64> {
        self.shared.write(Engine::purge_dead)
    }

    /// Items in the queue (leased ones included): exact, O(1), and a read
    /// that writes nothing. 0 once closed, the only case it cannot count.
    pub fn len(&self) -> usize {
        self.shared
            .read(|engine| Ok(engine.len_now() as usize))
            .unwrap_or(0)
    }

    /// Whether the queue holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the oldest record and returns its payload bytes as stored,
    /// without decoding them, or `None` when the queue is empty.
    ///
    /// This is how a record that does not decode (a "poison" item) is
    /// taken aside to be looked at without a trip through the dead letters.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<Vec<u8>> = dque::DQue::create(dir.path().join("q"))?;
    /// q.enqueue(&vec![0xff])?; // not UTF-8
    /// q.enqueue(&b"ok".to_vec())?;
    /// q.close()?;
    ///
    /// let q: dque::DQue<String> = dque::Options::new().check_item_type(false).open(dir.path().join("q"))?;
    /// assert_eq!(q.peek()?.as_deref(), Some("ok")); // passed over
    /// let poison = q.dequeue_raw()?.expect("the record is still there");
    /// assert_eq!(poison, [1, 0xff]); // bincode: length, then the bytes
    /// assert_eq!(q.dequeue()?.as_deref(), Some("ok"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`dequeue`](Self::dequeue).
    pub fn dequeue_raw(&self) -> Result<Option<Vec<u8>>> {
        self.shared
            .write(|engine| engine.pop_with(|_, bytes| Ok(bytes.to_vec())))
    }

    /// Returns the oldest record's payload bytes without decoding or
    /// removing them, or `None` when the queue is empty.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<u8> = dque::DQue::create(dir.path().join("q"))?;
    /// q.enqueue(&7)?;
    /// assert_eq!(q.peek_raw()?, Some(vec![7]));
    /// assert_eq!(q.len(), 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek).
    pub fn peek_raw(&self) -> Result<Option<Vec<u8>>> {
        self.shared
            .read(|engine| engine.peek_with(|_, bytes| Ok(bytes.to_vec())))
    }

    /// Reads every segment from head to tail and checks it, without
    /// consuming, repairing or writing anything: an operator's check of a
    /// queue in use.
    ///
    /// Checked: each header (magic, version, CRC, number), that the segment
    /// numbers follow each other with no file missing or left outside them,
    /// that first ids agree (a sealed segment holds exactly its successor's
    /// first id minus its own records, all of them whole), that every frame
    /// up to each segment's clean end is valid (CRC, padding, markers) with
    /// only zeros after it, that the config parses and names this codec, and
    /// that the segments hold exactly [`len`](Self::len) items.
    ///
    /// Damage is reported in [`VerifyReport::problems`] with the file and
    /// offset; the call itself fails only when the queue is closed or its
    /// directory cannot be listed. It holds the queue's lock while it runs,
    /// so other calls wait: it reads every byte of the queue. The mapped
    /// head and tail are read in place; every other segment is read whole
    /// into memory, one at a time.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<String> = dque::Options::new()
    ///     .segment_items(10)
    ///     .create(dir.path().join("q"))?;
    /// for i in 0..25 {
    ///     q.enqueue(&format!("job {i}"))?;
    /// }
    /// q.dequeue()?;
    /// let report = q.verify()?;
    /// assert!(report.is_healthy(), "{report}");
    /// assert_eq!(report.items(), q.len() as u64);
    /// for segment in &report.segments {
    ///     println!("{}: {} records from id {}", segment.path.display(), segment.records, segment.first_id);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Closed`; `Io` if the directory cannot be listed. Damage is in the
    /// report, not an error.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.shared
            .read(|engine| engine.verify(&self.path, self.codec_id))
    }

    /// Numbers of the segment files from head to tail (names in the directory).
    ///
    /// # Errors
    ///
    /// `Closed`.
    pub fn segment_numbers(&self) -> Result<RangeInclusive<u64>> {
        self.shared.read(|engine| Ok(engine.segment_numbers()))
    }

    /// The handle's current durability.
    ///
    /// # Errors
    ///
    /// `Closed`.
    pub fn durability(&self) -> Result<Durability> {
        self.shared.read(|engine| Ok(engine.durability()))
    }

    /// Switches durability on the open queue (dque's TurboOn / TurboOff).
    /// Switching to `Safe` first syncs what Turbo wrote.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use dque::Durability;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = dque::DQue::<u32>::create(dir.path().join("q"))?;
    /// q.set_durability(Durability::Turbo)?; // a bulk load without fsyncs
    /// q.enqueue_batch(0..1000)?;
    /// q.sync()?; // all of it durable now
    /// q.set_durability(Durability::Safe)?;
    /// assert_eq!(q.durability()?, Durability::Safe);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidOption` for a zero `Periodic` interval; `Closed`; switching to
    /// `Safe` syncs first, and fails with that sync's `Io` or `WritesRefused`.
    pub fn set_durability(&self, durability: Durability) -> Result<()> {
        durability.validate()?;
        self.shared
            .read(|engine| engine.set_durability(durability))?;
        self.run_flusher_for(durability)
    }

    /// Says "no more items through this handle": producers are done.
    /// Later enqueues through it (and [`requeue_dead`](Self::requeue_dead))
    /// fail with `Closed`, having written nothing; consumers go on until
    /// the queue holds no item, leased ones included, so a nacked item or
    /// an expired lease still comes back to them first. Then the blocking
    /// calls end: `*_block` fail with `Closed`, `*_timeout` return `None`
    /// (or empty) at once, and [`leases`](Self::leases) and
    /// [`items`](Self::items) end. The queue stays open (reads, acks,
    /// [`close`](Self::close)); in shared mode other processes may still
    /// enqueue, and this handle's consumers stop only once they find the
    /// queue empty. An [`AsyncQueue`](crate::AsyncQueue) over the same
    /// handle shares the seal. It cannot be undone: open the queue again.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// use std::sync::Arc;
    /// let dir = tempfile::tempdir().unwrap();
    /// let q = Arc::new(dque::DQue::<u32>::create(dir.path().join("q"))?);
    /// let consumer = std::thread::spawn({
    ///     let q = Arc::clone(&q);
    ///     move || {
    ///         let mut sum = 0;
    ///         for job in q.leases() {
    ///             let job = job?;
    ///             sum += *job;
    ///             job.ack()?;
    ///         }
    ///         Ok::<u32, dque::Error>(sum)
    ///     }
    /// });
    /// q.enqueue_batch([1, 2, 3])?;
    /// q.seal(); // no more: the consumer ends once the queue is empty
    /// assert!(matches!(q.enqueue(&4), Err(dque::Error::Closed)));
    /// assert_eq!(consumer.join().unwrap()?, 6);
    /// # Ok(()) }
    /// ```
    pub fn seal(&self) {
        self.shared.seal();
    }

    /// Whether [`seal`](Self::seal) was called on this handle.
    pub fn is_sealed(&self) -> bool {
        self.shared.is_sealed()
    }

    /// The leases of a consumer, one [`lease_block`](Self::lease_block)
    /// after another, until the handle is [`seal`](Self::seal)ed and the
    /// queue holds no item, or the queue closes. Another error is yielded
    /// and the iterator goes on. Ack (or nack) each before the next: a
    /// guard held keeps the drain from ending.
    pub fn leases(&self) -> Drain<'_, Leased<T>> {
        Drain::new(move || self.lease_block())
    }

    /// The items of a consumer, one [`dequeue_block`](Self::dequeue_block)
    /// after another (removed: no lease), ending as [`leases`](Self::leases)
    /// does. Not [`iter`](Self::iter), which reads without removing.
    pub fn items(&self) -> Drain<'_, T> {
        Drain::new(move || self.dequeue_block())
    }

    /// Makes every call so far durable (fdatasync of head and tail), in any mode.
    ///
    /// # Errors
    ///
    /// `Closed`; `WritesRefused` after an earlier failure; the `Io` of the
    /// fsync, after which the queue refuses writes.
    pub fn sync(&self) -> Result<()> {
        self.shared.sync()
    }

    /// Syncs, releases the lock and wakes blocked callers with
    /// [`Error::Closed`]. Later calls fail with `Closed`. Drop closes too,
    /// but cannot report an error.
    ///
    /// # Errors
    ///
    /// `Closed` if it was closed already; the error of its last sync (`Io`,
    /// `WritesRefused`), which the calls it settled get too.
    pub fn close(&self) -> Result<()> {
        if let Some(flusher) = self.flusher.lock().take() {
            flusher.stop();
        }
        self.shared.close()
    }

    fn decode(&self, id: u64, bytes: &[u8]) -> Result<T> {
        self.codec
            .decode(bytes)
            .map_err(|source| Error::Decode { id, source })
    }
}

impl DQue<Vec<u8>, Raw> {
    /// Opens the existing queue at `path` whatever codec it was made with,
    /// handing its items as their encoded bytes: for tools that move items
    /// between queues (a dead letter or a salvaged record back into its
    /// queue). Bytes enqueued through it must already be encoded with the
    /// queue's codec, or its programs will fail to decode them
    /// (each a failed attempt, then a dead letter).
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let typed: dque::DQue<String> = dque::DQue::create(dir.path().join("q"))?;
    /// typed.enqueue(&"job".to_string())?;
    /// drop(typed);
    ///
    /// let raw = dque::RawQueue::open_encoded_with(dir.path().join("q"), &dque::Options::new())?;
    /// let encoded = raw.dequeue()?.expect("one item");
    /// raw.enqueue_bytes(&encoded)?; // back, as it was
    /// drop(raw);
    ///
    /// let typed: dque::DQue<String> = dque::DQue::open(dir.path().join("q"))?;
    /// assert_eq!(typed.dequeue()?.as_deref(), Some("job"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_encoded_with(path: impl AsRef<Path>, options: &Options) -> Result<Self> {
        let path = path.as_ref();
        crate::queue::engine::prepare_directory(path, OpenMode::Open)?;
        let stored = crate::log::layout::QueueDir::new(path.to_path_buf()).read_config()?;
        Self::start(path, options, OpenMode::Open, stored.codec_id)
    }

    /// The id of the codec the queue's items are encoded with (0 for raw
    /// bytes; another only for [`open_encoded_with`](Self::open_encoded_with)).
    pub fn codec_id(&self) -> u32 {
        self.codec_id
    }

    /// Appends a byte string without copying it into a `Vec` first.
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub fn enqueue_bytes(&self, bytes: &[u8]) -> Result<()> {
        self.enqueue_encoded(bytes).map(drop)
    }
}

impl<T, C: Codec<T>> Drop for DQue<T, C> {
    fn drop(&mut self) {
        // An error here has no one to go to; the data is in the kernel anyway.
        let _ = self.close();
    }
}

impl Options {
    /// Creates a queue of `T` with these options; see [`DQue::create`].
    /// Any codec: the one of the `DQue` type asked for ([`Bincode`] unless
    /// named).
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let raw: dque::RawQueue = dque::Options::new().create(dir.path().join("raw"))?;
    /// let typed: dque::DQue<u32> = dque::Options::new().create(dir.path().join("typed"))?;
    /// # drop((raw, typed)); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`DQue::create`].
    pub fn create<T, C: Codec<T>>(&self, path: impl AsRef<Path>) -> Result<DQue<T, C>> {
        DQue::create_with(path, self)
    }

    /// Opens a queue of `T` with these options; see [`DQue::open`].
    ///
    /// # Errors
    ///
    /// As [`DQue::open`].
    pub fn open<T, C: Codec<T>>(&self, path: impl AsRef<Path>) -> Result<DQue<T, C>> {
        DQue::open_with(path, self)
    }

    /// Opens or creates a queue of `T`; see [`DQue::open_or_create`].
    ///
    /// # Errors
    ///
    /// As [`DQue::open_or_create`].
    pub fn open_or_create<T, C: Codec<T>>(&self, path: impl AsRef<Path>) -> Result<DQue<T, C>> {
        DQue::open_or_create_with(path, self)
    }
}

impl<'q, T, C: Codec<T>> IntoIterator for &'q DQue<T, C> {
    type Item = Result<Pending<T>>;
    type IntoIter = Iter<'q, T, C>;

    /// [`DQue::iter`].
    fn into_iter(self) -> Iter<'q, T, C> {
        self.iter()
    }
}
