//! Read-only access to a queue's files for tools such as the `dque` command:
//! counts, records and a full check, with or without the queue's lock.
//!
//! Nothing here writes to the queue. Without the lock (the queue may be in
//! use by a running program) what is read is a snapshot that may already
//! be out of date: a record being written is not seen yet, a consumed head
//! segment may vanish while it is read (it is then skipped).

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::format::{Config, SegmentHeader, FORMAT_VERSION, RECORD_OVERHEAD};
use crate::log::layout::QueueDir;
use crate::log::lock::DirLock;
use crate::log::recovery::{replay, Replay};
use crate::log::segment::Segment;
use crate::log::verify::{self, read_bounded, ReadError, ScanInput, VerifyReport};
use crate::queue::dead::DeadLetter;
use crate::queue::engine::{prepare_directory, OpenMode};

/// Listings [`QueueFiles::stats`] reads before it gives up on a queue whose
/// head segments are retired under it.
const STATS_TRIES: u32 = 100;

/// A queue directory opened for reading only.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: dque::DQue<String> = dque::DQue::create(dir.path().join("q"))?;
/// q.enqueue(&"hello".to_string())?;
///
/// // Works while `q` is open: no lock is taken, nothing is written.
/// let files = dque::QueueFiles::open(dir.path().join("q"))?;
/// assert_eq!(files.stats()?.items, 1);
/// let mut ids = Vec::new();
/// files.visit_records(|record| {
///     ids.push(record.id);
///     std::ops::ControlFlow::Continue(())
/// })?;
/// assert_eq!(ids, [0]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct QueueFiles {
    path: PathBuf,
    dir: QueueDir,
    config: Config,
    lock: Option<DirLock>,
}

/// What [`QueueFiles::stats`] counts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Format version of the queue's files.
    pub format_version: u32,
    /// Id of the codec items are encoded with (0 raw bytes, 1 bincode).
    pub codec_id: u32,
    /// Record limit of segments created from now on.
    pub segment_items: u32,
    /// Byte limit of segments created from now on.
    pub segment_bytes: u32,
    /// Numbers of the head and tail segments; `None` before the first is made.
    pub segments: Option<(u64, u64)>,
    /// Items in the queue: records not acked (leased ones included).
    pub items: u64,
    /// Items delivered at least once by a lease and not acked: held by a
    /// consumer now, or handed back to be delivered again.
    pub delivered: u64,
    /// Bytes the segment files take (their length, preallocation included).
    pub bytes_on_disk: u64,
    /// Items in the dead-letter queue.
    pub dead_letters: u64,
}

/// One record as [`QueueFiles::visit_records`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredRecord<'a> {
    /// The item's id (what [`DQue::cancel`](crate::DQue::cancel) takes).
    pub id: u64,
    /// Delivery attempts so far (lease markers).
    pub attempts: u16,
    /// Number of the segment holding it.
    pub segment: u64,
    /// Offset of its frame in the segment file.
    pub offset: u64,
    /// The encoded item, as stored.
    pub payload: &'a [u8],
}

impl QueueFiles {
    /// Opens the queue at `path` for reading without its lock, so that it
    /// works while a program has the queue open.
    ///
    /// Fails with [`Error::NotFound`], [`Error::NotAQueue`] or
    /// [`Error::UnsupportedVersion`] when there is no queue to read.
    pub fn open(path: impl AsRef<Path>) -> Result<QueueFiles> {
        QueueFiles::new(path.as_ref(), false)
    }

    /// Opens the queue at `path` and holds its lock until dropped, so that
    /// nothing changes while it is read; fails with [`Error::Locked`] while
    /// a program has it open.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<u8> = dque::DQue::create(dir.path().join("q"))?;
    /// let locked = dque::QueueFiles::open_locked(dir.path().join("q"));
    /// assert!(matches!(locked, Err(dque::Error::Locked { .. })));
    /// drop(q);
    /// assert!(dque::QueueFiles::open_locked(dir.path().join("q"))?.holds_lock());
    /// # Ok(()) }
    /// ```
    pub fn open_locked(path: impl AsRef<Path>) -> Result<QueueFiles> {
        QueueFiles::new(path.as_ref(), true)
    }

    fn new(path: &Path, lock: bool) -> Result<QueueFiles> {
        prepare_directory(path, OpenMode::Open)?;
        let dir = QueueDir::new(path.to_path_buf());
        let lock = if lock {
            Some(DirLock::acquire(path)?)
        } else {
            None
        };
        let config = dir.read_config()?;
        Ok(QueueFiles {
            path: path.to_path_buf(),
            dir,
            config,
            lock,
        })
    }

    /// The directory, the config and the lock, for a repair.
    pub(crate) fn into_parts(self) -> (QueueDir, Config, Option<DirLock>) {
        (self.dir, self.config, self.lock)
    }

    /// The queue directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this handle holds the queue's lock (opened with
    /// [`open_locked`](Self::open_locked)).
    pub fn holds_lock(&self) -> bool {
        self.lock.is_some()
    }

    /// Counts items, segments and bytes. Reads the headers, and the
    /// segments that carry markers (the run from the head) and the tail
    /// whole; never the records of the other middle segments.
    pub fn stats(&self) -> Result<Stats> {
        // A consumer may retire a segment between the listing and its read:
        // then the listing is read again. A consumer retires a segment only
        // after taking all of its records, so this ends within a few tries
        // unless segments are retired faster than a few headers are read.
        let mut tries = 0;
        loop {
            match self.stats_once() {
                Err(Error::MissingSegment { .. }) if tries < STATS_TRIES && self.lock.is_none() => {
                    tries += 1
                }
                other => return other,
            }
        }
    }

    fn stats_once(&self) -> Result<Stats> {
        let listing = self.dir.list()?;
        let mut stats = Stats {
            format_version: FORMAT_VERSION,
            codec_id: self.config.codec_id,
            segment_items: self.config.segment_records,
            segment_bytes: self.config.segment_bytes,
            segments: None,
            items: 0,
            delivered: 0,
            bytes_on_disk: 0,
            dead_letters: self.dead_letters()?,
        };
        let (Some(&first), Some(&last)) = (listing.segments.first(), listing.segments.last())
        else {
            return Ok(stats);
        };
        stats.segments = Some((first, last));
        for &number in &listing.segments {
            let path = self.dir.segment_path(number);
            stats.bytes_on_disk += std::fs::metadata(&path).map_or(0, |m| m.len());
        }
        // The first id of the first segment still there when it is read.
        let mut head_first_id = None;
        let mut settled = 0u64;
        let mut number = first;
        let tail = loop {
            let (header, replayed) = match self.read_segment(number) {
                // Retired since the listing, so every record of it was
                // taken: the head is further on.
                Err(Error::MissingSegment { .. }) if number < last && head_first_id.is_none() => {
                    number += 1;
                    continue;
                }
                other => other?,
            };
            head_first_id.get_or_insert(header.first_id);
            settled += replayed.settled.iter().filter(|&&s| s).count() as u64;
            stats.delivered += (0..replayed.records.len())
                .filter(|&i| !replayed.settled[i] && replayed.attempts[i] > 0)
                .count() as u64;
            if number == last {
                break (header, replayed.records.len() as u64);
            }
            // Markers only reach a run from the head: the rest hold none.
            number = if replayed.has_markers {
                number + 1
            } else {
                last
            };
        };
        let head_first_id = head_first_id.expect("the tail was read");
        let end_id = tail.0.first_id + tail.1;
        stats.items = end_id
            .checked_sub(head_first_id)
            .and_then(|records| records.checked_sub(settled))
            .ok_or_else(|| {
                Error::corrupted(
                    self.dir.segment_path(last),
                    16,
                    format!(
                        "the tail ends at id {end_id}, before the head's first id {head_first_id}"
                    ),
                )
            })?;
        Ok(stats)
    }

    fn dead_letters(&self) -> Result<u64> {
        match self.dead_letter_queue()? {
            Some(dead) => Ok(dead.stats()?.items),
            None => Ok(0),
        }
    }

    /// The dead-letter queue (in `dead/`), read without its lock, once an
    /// item was moved there; `None` before.
    pub fn dead_letter_queue(&self) -> Result<Option<QueueFiles>> {
        let dead = self.dir.dead_letter_path();
        if !dead.join(crate::log::layout::CONFIG_FILE).exists() {
            return Ok(None);
        }
        QueueFiles::new(&dead, false).map(Some)
    }

    /// Calls `visit` on every record not acked, from the head on, until it
    /// says stop. One segment at a time is read into memory.
    ///
    /// A sealed segment with fewer whole records than its successor's
    /// header says it holds ends the walk with [`Error::Corrupted`] after
    /// its readable records were visited.
    pub fn visit_records(
        &self,
        mut visit: impl FnMut(StoredRecord<'_>) -> ControlFlow<()>,
    ) -> Result<()> {
        let listing = self.dir.list()?;
        let (Some(&first), Some(&last)) = (listing.segments.first(), listing.segments.last())
        else {
            return Ok(());
        };
        // A program consuming the queue retires segments from the head on:
        // one gone since the listing is skipped if every one before it is
        // gone too. Any other missing segment is damage.
        let retired = |number: u64| self.lock.is_none() && !self.dir.segment_path(number).exists();
        for number in first..=last {
            let (header, replayed, bytes) = match self.read_segment_bytes(number) {
                Ok(read) => read,
                Err(Error::MissingSegment { .. })
                    if (first..number).all(retired) && retired(number) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            // Records a sealed segment must hold: up to its successor's first
            // id. A successor that is missing ends the walk after this one.
            let (held, gap) = if number == last {
                (None, None)
            } else {
                match Segment::read_header(&self.dir, number + 1) {
                    Ok(next) => (
                        Some((next.first_id.checked_sub(header.first_id), next)),
                        None,
                    ),
                    Err(Error::MissingSegment { .. }) if (first..=number).all(retired) => continue,
                    Err(gap @ Error::MissingSegment { .. }) => (None, Some(gap)),
                    Err(e) => return Err(e),
                }
            };
            let found = replayed.records.len() as u64;
            // More records than ids before the successor: ids would repeat.
            if let Some((held, next)) = held {
                if held.is_none_or(|held| found > held) {
                    return Err(Error::corrupted(
                        self.dir.segment_path(number + 1),
                        16,
                        format!(
                            "first id {} does not follow segment {number} \
                             (first id {}, {found} records)",
                            next.first_id, header.first_id
                        ),
                    ));
                }
            }
            if visit_unsettled(number, &header, &replayed, &bytes, &mut visit).is_break() {
                return Ok(());
            }
            if let Some(gap) = gap {
                return Err(gap);
            }
            if let Some((Some(held), _)) = held {
                replayed.check_sealed(&self.dir.segment_path(number), held)?;
            }
        }
        Ok(())
    }

    /// Calls `visit` on every dead letter (items moved out after failing
    /// too often, with the reason), oldest first, until it says stop.
    ///
    /// ```
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let q: dque::DQue<String> = dque::DQue::create(dir.path().join("q"))?;
    /// q.enqueue(&"bad job".to_string())?;
    /// q.lease()?.expect("an item").fail("malformed input")?;
    ///
    /// let files = dque::QueueFiles::open(dir.path().join("q"))?;
    /// let mut reasons = Vec::new();
    /// files.visit_dead_letters(|letter| {
    ///     reasons.push(letter.reason);
    ///     std::ops::ControlFlow::Continue(())
    /// })?;
    /// assert_eq!(reasons, ["malformed input"]);
    /// # Ok(()) }
    /// ```
    pub fn visit_dead_letters(
        &self,
        mut visit: impl FnMut(DeadLetter) -> ControlFlow<()>,
    ) -> Result<()> {
        let Some(dead) = self.dead_letter_queue()? else {
            return Ok(());
        };
        let mut undecodable = None;
        dead.visit_records(
            |record| match DeadLetter::decode(record.id, record.payload) {
                Ok(letter) => visit(letter),
                Err(e) => {
                    undecodable = Some(e);
                    ControlFlow::Break(())
                }
            },
        )?;
        undecodable.map_or(Ok(()), Err)
    }

    /// Reads every byte of every segment and checks it, like
    /// [`DQue::verify`](crate::DQue::verify); `progress` is called with the
    /// bytes read so far and the total after each segment.
    ///
    /// Without the lock, what follows the last whole frame of a segment is
    /// not judged (a program may be writing there: a record into the tail,
    /// a marker into a head segment), and head segments retired during the
    /// check are skipped; damage before the end of a segment's frames, and
    /// missing records, are still found.
    pub fn verify(&self, mut progress: impl FnMut(u64, u64)) -> Result<VerifyReport> {
        let listing = self.dir.list()?;
        let (Some(&first), Some(&last)) = (listing.segments.first(), listing.segments.last())
        else {
            return Ok(VerifyReport::default());
        };
        let total: u64 = listing
            .segments
            .iter()
            .map(|&n| std::fs::metadata(self.dir.segment_path(n)).map_or(0, |m| m.len()))
            .sum();
        let input = ScanInput {
            dir: &self.dir,
            numbers: first..=last,
            listed: &listing.segments,
            live: self.lock.is_none(),
        };
        let mut read_so_far = 0;
        let read = |number| read_bounded(&self.dir.segment_path(number)).map(Cow::Owned);
        Ok(verify::check_segments(&input, read, |len| {
            read_so_far += len;
            progress(read_so_far, total.max(read_so_far));
        }))
    }

    fn read_segment(&self, number: u64) -> Result<(SegmentHeader, Replay)> {
        self.read_segment_bytes(number)
            .map(|(header, replayed, _)| (header, replayed))
    }

    /// Reads segment `number` whole and replays it.
    fn read_segment_bytes(&self, number: u64) -> Result<(SegmentHeader, Replay, Vec<u8>)> {
        let path = self.dir.segment_path(number);
        let bytes = read_bounded(&path).map_err(|e| match e {
            ReadError::Gone => Error::MissingSegment { path: path.clone() },
            ReadError::Other(reason) => Error::io(&path, std::io::Error::other(reason)),
        })?;
        let header = crate::log::segment::check_header(&path, &bytes, number)?;
        let replayed = replay(&bytes, header.max_records);
        Ok((header, replayed, bytes))
    }
}

/// Calls `visit` on each unsettled record of a replayed segment.
fn visit_unsettled(
    number: u64,
    header: &SegmentHeader,
    replayed: &Replay,
    bytes: &[u8],
    visit: &mut impl FnMut(StoredRecord<'_>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    replayed
        .records
        .iter()
        .enumerate()
        .filter(|&(index, _)| !replayed.settled[index])
        .try_for_each(|(index, &(at, len))| {
            let start = at as usize + RECORD_OVERHEAD;
            visit(StoredRecord {
                id: header.first_id + index as u64,
                attempts: replayed.attempts[index],
                segment: number,
                offset: u64::from(at),
                payload: &bytes[start..start + len as usize],
            })
        })
}
