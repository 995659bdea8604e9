//! How a queue is opened: durability and segment sizes.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::log::format::{MAX_RECORD_PAYLOAD, MAX_SEGMENT_RECORDS};

/// What survives a power loss. Any mode survives a killed process.
///
/// ```
/// use dque::{DQue, Durability, Options};
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<u64> = Options::new()
///     .durability(Durability::Turbo)
///     .create(dir.path().join("q"))
///     .unwrap();
/// q.enqueue(&1).unwrap();
/// q.sync().unwrap(); // now it survives a power loss too
/// q.set_durability(Durability::Safe).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every call returns only after its bytes (and any directory change) are
    /// fsynced: a returned enqueue or dequeue survives a power loss.
    #[default]
    Safe,
    /// No fsync per call; items are written straight into the kernel's page
    /// cache, so a killed process loses nothing, but a power loss may lose a
    /// suffix of recent calls (enqueues lost, dequeues redelivered, order
    /// kept). [`DQue::sync`](crate::DQue::sync) makes everything so far durable.
    Turbo,
    /// Turbo, plus a background thread that fsyncs what was written at most
    /// this interval apart (dque's wish: "never lose more than n seconds"):
    /// a power loss loses about the last interval of calls, at most. The
    /// interval must be above zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::{DQue, Durability, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: DQue<u64> = Options::new()
    ///     .durability(Durability::Periodic(Duration::from_millis(100)))
    ///     .create(dir.path().join("q"))
    ///     .unwrap();
    /// q.enqueue(&7).unwrap(); // returns at turbo speed; durable within ~100 ms
    /// ```
    Periodic(Duration),
}

impl Durability {
    pub(crate) fn validate(&self) -> Result<()> {
        match self {
            Durability::Periodic(interval) if interval.is_zero() => Err(Error::InvalidOption {
                name: "durability",
                reason: "a Periodic interval must be above zero".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// Settings for opening or creating a queue, with `#[must_use]` setters.
///
/// ```
/// use dque::{DQue, Options};
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<String> = Options::new()
///     .segment_items(1_000)
///     .open_or_create(dir.path().join("jobs"))
///     .unwrap();
/// assert!(q.is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub(crate) durability: Durability,
    pub(crate) segment_items: Option<u32>,
    pub(crate) segment_bytes: Option<u32>,
    pub(crate) max_item_bytes: u32,
    pub(crate) visibility_timeout: Duration,
    pub(crate) max_attempts: u16,
    pub(crate) cut_damaged_tail: bool,
    pub(crate) max_items: Option<u64>,
    pub(crate) shared: bool,
    /// Whether `max_attempts` was set (else the queue's stored value).
    pub(crate) max_attempts_set: bool,
    /// Whether `visibility_timeout` was set (else the queue's stored value).
    pub(crate) visibility_timeout_set: bool,
    /// The caller's schema version of the item type.
    pub(crate) schema_version: Option<u32>,
    /// Whether an open refuses a queue made for another item type.
    pub(crate) check_item_type: bool,
    /// The item type of the handle being opened (`None`: a raw handle);
    /// set by [`DQue`](crate::DQue), not by callers.
    pub(crate) item_type: Option<&'static str>,
}

/// Segment record limit of a new queue when none is given.
pub const DEFAULT_SEGMENT_ITEMS: u32 = 100_000;
/// Segment byte limit of a new queue when none is given.
pub const DEFAULT_SEGMENT_BYTES: u32 = 64 << 20;
/// Largest encoded item accepted when no limit is given.
pub const DEFAULT_MAX_ITEM_BYTES: u32 = 16 << 20;
/// How long a lease holds an item when no timeout is given.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);
/// Delivery attempts before an item is dead-lettered, when none is given.
pub const DEFAULT_MAX_ATTEMPTS: u16 = 5;
/// Smallest segment byte limit accepted.
pub const MIN_SEGMENT_BYTES: u32 = 4096;
/// Largest segment byte limit accepted.
pub const MAX_SEGMENT_BYTES: u32 = 1 << 30;

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Safe,
            segment_items: None,
            segment_bytes: None,
            max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            cut_damaged_tail: false,
            max_items: None,
            shared: false,
            max_attempts_set: false,
            visibility_timeout_set: false,
            schema_version: None,
            check_item_type: true,
            item_type: None,
        }
    }
}

impl Options {
    /// The defaults: `Safe`, sizes as stored in the queue (or the defaults
    /// for a new queue), items up to 16 MiB.
    pub fn new() -> Self {
        Self::default()
    }

    /// Durability of the handle; default [`Durability::Safe`]. It can also be
    /// changed on an open queue.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Items per segment, 1 to 16,777,215; default: what the queue has
    /// stored, or 100,000 for a new queue. A value given here is stored and
    /// applies to segments created from now on; existing segments keep the
    /// size they were created with, so a change never miscounts the queue.
    #[must_use]
    pub fn segment_items(mut self, items: u32) -> Self {
        self.segment_items = Some(items);
        self
    }

    /// Record bytes per segment, 4 KiB to 1 GiB; default: what the queue has
    /// stored, or 64 MiB for a new queue. A segment always takes its first
    /// item, however large. Stored like [`segment_items`](Self::segment_items).
    #[must_use]
    pub fn segment_bytes(mut self, bytes: u32) -> Self {
        self.segment_bytes = Some(bytes);
        self
    }

    /// Most items the queue may hold (leased ones count), at least 1;
    /// default: no limit. An enqueue that would pass it fails with
    /// [`Error::Full`] and writes nothing;
    /// [`DQue::enqueue_timeout`](crate::DQue::enqueue_timeout) waits for
    /// room instead (back-pressure). A limit of this handle, not stored in
    /// the queue: a queue already over it is kept whole, and only refuses
    /// new items until consumers bring it under.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<u32> = dque::Options::new().max_items(2).create(dir.path().join("q"))?;
    /// q.enqueue_batch([1, 2])?;
    /// assert!(matches!(q.enqueue(&3), Err(dque::Error::Full { len: 2, .. })));
    /// q.dequeue()?;
    /// q.enqueue(&3)?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn max_items(mut self, items: u64) -> Self {
        self.max_items = Some(items);
        self
    }

    /// Largest encoded item accepted, 1 byte to 1 GiB - 1; default 16 MiB.
    /// Larger items fail with [`Error::ItemTooLarge`] and write nothing.
    #[must_use]
    pub fn max_item_bytes(mut self, bytes: u32) -> Self {
        self.max_item_bytes = bytes;
        self
    }

    /// How long a lease holds an item before it is available again unless
    /// acked or touched, above zero; default: what the queue has stored,
    /// or 30 s. Stored with the queue like
    /// [`max_attempts`](Self::max_attempts), with the same rules in
    /// shared mode. Stored in nanoseconds: `Duration::MAX` is about 584
    /// years.
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self.visibility_timeout_set = true;
        self
    }

    /// Delivery attempts an item gets: once it has been leased this many
    /// times without an ack, a nack or an expired lease moves it to the
    /// dead letters; at least 1. Default: what the queue has stored, or 5.
    ///
    /// A value given here is stored in the queue's config (FORMAT.md,
    /// "Config"), so every handle agrees on when an item is dead: a later
    /// open that sets none uses it. In shared mode the handle that opens
    /// the queue alone stores it; a handle joining others uses the stored
    /// value, and one that sets another value is refused with
    /// [`Error::InvalidOption`] (naming both) rather than disagree with
    /// them: change it once every handle has closed.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("q");
    /// let shared = dque::Options::new().shared(true);
    /// let first: dque::DQue<u32> = shared.max_attempts(3).create(&path)?;
    /// let second: dque::DQue<u32> = shared.open(&path)?; // sets none: uses 3
    /// assert_eq!(second.max_attempts(), 3);
    /// let other = shared.max_attempts(7).open::<u32, dque::Bincode>(&path);
    /// assert!(matches!(other, Err(dque::Error::InvalidOption { name: "max_attempts", .. })));
    /// drop((first, second));
    /// let alone: dque::DQue<u32> = dque::Options::new().max_attempts(7).open(&path)?;
    /// assert_eq!(alone.max_attempts(), 7); // stored from now on
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn max_attempts(mut self, attempts: u16) -> Self {
        self.max_attempts = attempts;
        self.max_attempts_set = true;
        self
    }

    /// The version of the item type's schema, recorded with the item
    /// type when a typed queue is created; default none. Raise it when
    /// the type changes in a way old records cannot be decoded as (README,
    /// "Changing the item type"): an open with another schema version is
    /// refused with [`Error::ItemTypeMismatch`], before any consumer meets
    /// an old record.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("q");
    /// let v1: dque::DQue<u32> = dque::Options::new().schema_version(1).create(&path)?;
    /// drop(v1);
    /// let v2 = dque::Options::new().schema_version(2).open::<u32, dque::Bincode>(&path);
    /// assert!(matches!(v2, Err(dque::Error::ItemTypeMismatch { .. })));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn schema_version(mut self, version: u32) -> Self {
        self.schema_version = Some(version);
        self
    }

    /// Whether an open of a typed queue refuses a queue created for
    /// another item type or schema version ([`Error::ItemTypeMismatch`]);
    /// default `true`. With `false` the items are decoded as this handle's
    /// type whatever the queue was made for (a record that does not
    /// decode is then a failed attempt, see [`DQue::lease`](crate::DQue::lease)),
    /// and what the queue records is left as it is. Raw handles
    /// ([`RawQueue`](crate::RawQueue), [`DQue::open_encoded_with`](crate::DQue::open_encoded_with))
    /// are never refused.
    ///
    /// The type's name is what `std::any::type_name` gives, which may
    /// change when the type moves to another module or with a new
    /// compiler: if an open is refused for that reason alone, open with
    /// `false`.
    #[must_use]
    pub fn check_item_type(mut self, check: bool) -> Self {
        self.check_item_type = check;
        self
    }

    /// Whether an open may cut a damaged tail: a bad frame in the last
    /// segment followed by whole records, which no torn write leaves (a
    /// flipped bit in synced data, say). Default `false`: such an open fails
    /// with [`Error::Corrupted`] naming the segment and offset, and changes
    /// nothing. With `true` the open cuts the tail back to the last whole
    /// frame, keeping a copy of the file in `quarantine/` (where `dque
    /// salvage` reads it) and reporting it in
    /// [`DQue::open_report`](crate::DQue::open_report) with `damage` set:
    /// RocksDB's point-in-time recovery. Torn tails (a crash mid-write, or
    /// unsynced writes a power loss left with holes) are cut either way,
    /// with a copy kept. See FORMAT.md, "Tail damage".
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("q");
    /// let q: dque::DQue<u32> = dque::DQue::create(&path)?;
    /// q.enqueue_batch(&[1, 2, 3])?;
    /// q.close()?;
    /// let segment = path.join(format!("{:020}.seg", 1));
    /// let mut bytes = std::fs::read(&segment).unwrap();
    /// bytes[40 + 8] ^= 0x01; // one bit of the first record's payload
    /// std::fs::write(&segment, bytes).unwrap();
    ///
    /// let refused = dque::DQue::<u32>::open(&path);
    /// assert!(matches!(refused, Err(dque::Error::Corrupted { offset: 40, .. })));
    /// let q: dque::DQue<u32> = dque::Options::new().cut_damaged_tail(true).open(&path)?;
    /// assert!(q.is_empty());
    /// assert!(q.open_report().repairs[0].damage);
    /// assert!(q.open_report().repairs[0].kept.as_ref().unwrap().exists());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn cut_damaged_tail(mut self, cut: bool) -> Self {
        self.cut_damaged_tail = cut;
        self
    }

    /// Whether the queue is shared between processes: default `false`
    /// (exclusive: one handle at a time, others get [`Error::Locked`]).
    ///
    /// With `true`, any number of processes (up to 1,024 handles at once)
    /// open the queue together, each with this option, and every call keeps
    /// its meaning across them: one FIFO order, an exact `len()`, items taken
    /// once, and blocked calls woken by other processes' enqueues. A process
    /// that dies, even in the middle of a call, never blocks or damages the
    /// queue for the others. Linux only; a queue on a network file system
    /// (NFS, SMB) is refused with [`Error::SharedModeUnsupported`]. An
    /// exclusive handle and shared handles exclude each other
    /// ([`Error::Locked`]). The protocol is in FORMAT.md, "Shared mode".
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("q");
    /// let shared = dque::Options::new().shared(true);
    /// let producer: dque::DQue<u32> = shared.open_or_create(&path)?;
    /// let worker: dque::DQue<u32> = shared.open(&path)?; // another process, typically
    /// producer.enqueue(&7)?;
    /// assert_eq!(worker.dequeue()?, Some(7));
    /// assert!(matches!(dque::DQue::<u32>::open(&path), Err(dque::Error::Locked { .. })));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.durability.validate()?;
        if self.visibility_timeout.is_zero() {
            return Err(Error::InvalidOption {
                name: "visibility_timeout",
                reason: "must be above zero".into(),
            });
        }
        if self.max_items == Some(0) {
            return Err(Error::InvalidOption {
                name: "max_items",
                reason: "must be at least 1".into(),
            });
        }
        if self.max_attempts == 0 {
            return Err(Error::InvalidOption {
                name: "max_attempts",
                reason: "must be at least 1".into(),
            });
        }
        if let Some(items) = self.segment_items {
            if items == 0 || items > MAX_SEGMENT_RECORDS {
                return Err(Error::InvalidOption {
                    name: "segment_items",
                    reason: format!("{items} is outside 1..={MAX_SEGMENT_RECORDS}"),
                });
            }
        }
        if let Some(bytes) = self.segment_bytes {
            if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&bytes) {
                return Err(Error::InvalidOption {
                    name: "segment_bytes",
                    reason: format!("{bytes} is outside {MIN_SEGMENT_BYTES}..={MAX_SEGMENT_BYTES}"),
                });
            }
        }
        if self.max_item_bytes == 0 || self.max_item_bytes > MAX_RECORD_PAYLOAD {
            return Err(Error::InvalidOption {
                name: "max_item_bytes",
                reason: format!(
                    "{} is outside 1..={MAX_RECORD_PAYLOAD}",
                    self.max_item_bytes
                ),
            });
        }
        Ok(())
    }
}
