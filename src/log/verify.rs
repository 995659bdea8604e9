//! A full, read-only check of a queue's files: [`DQue::verify`](crate::DQue::verify).
//!
//! Every segment from head to tail is replayed with [`recovery::replay`]
//! (the same frame rules the open and the dequeues apply), and the segments
//! are checked against each other. Nothing is written, cut or deleted: a
//! problem is reported, never repaired.

use std::borrow::Cow;
use std::fmt;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::log::format::{HeaderError, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::log::layout::QueueDir;
use crate::log::recovery::{self, nonzero_len, short_of_records};

/// What [`DQue::verify`](crate::DQue::verify) found: one summary per segment
/// from head to tail, and every problem.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: dque::DQue<u32> = dque::Options::new()
///     .segment_items(2)
///     .create(dir.path().join("q"))?;
/// for i in 0..5 {
///     q.enqueue(&i)?;
/// }
/// q.dequeue()?;
/// let report = q.verify()?;
/// assert!(report.is_healthy(), "{report}");
/// assert_eq!(report.segments.len(), 3);
/// assert_eq!(report.items(), 4);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The segments from head to tail whose header could be read, in order.
    pub segments: Vec<SegmentSummary>,
    /// Everything found wrong; empty for a healthy queue.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// True when no problem was found: every frame up to each segment's
    /// clean end is valid, the segments follow each other, and they hold
    /// exactly [`len`](crate::DQue::len) items.
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }

    /// Items found in the segments: records not settled by a marker.
    pub fn items(&self) -> u64 {
        self.segments.iter().map(SegmentSummary::unsettled).sum()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} segments, {} items, ",
            self.segments.len(),
            self.items()
        )?;
        if self.problems.is_empty() {
            return write!(f, "healthy");
        }
        let plural = if self.problems.len() == 1 { "" } else { "s" };
        write!(f, "{} problem{plural}:", self.problems.len())?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

/// One segment as [`DQue::verify`](crate::DQue::verify) read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentSummary {
    /// The segment's number (in its file name and header).
    pub number: u64,
    /// The segment file.
    pub path: PathBuf,
    /// Id of its first record.
    pub first_id: u64,
    /// Whole, valid records found before the clean end (or the first bad frame).
    pub records: u64,
    /// How many of them an ack marker settles.
    pub settled: u64,
    /// Bytes of valid frames after the header, padding included.
    pub frame_bytes: u64,
}

impl SegmentSummary {
    /// Records not settled: items still in the queue.
    pub fn unsettled(&self) -> u64 {
        self.records - self.settled
    }
}

/// One thing [`DQue::verify`](crate::DQue::verify) found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The segment file the problem is in. For a problem of the whole
    /// queue, the config file or the queue directory.
    pub segment: PathBuf,
    /// Byte offset in that file: the start of the first frame that is not
    /// valid, the header field that is wrong, or 0.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at byte {}: {}",
            self.segment.display(),
            self.offset,
            self.reason
        )
    }
}

/// A segment whose header was read, and what its replay found.
struct Scanned {
    header: SegmentHeader,
    summary: SegmentSummary,
    /// End of the last valid frame.
    end: usize,
    /// The invalid frame that stopped the replay, if it did not stop at zeros.
    stopped_by: Option<&'static str>,
    /// Just past the last non-zero byte after `end`, if there is one.
    garbage_end: Option<usize>,
    /// Where a whole record follows a bad frame no torn write explains
    /// (FORMAT.md, "Tail damage").
    damage_before: Option<usize>,
}

/// How long a scan without the lock waits before it reads a segment again
/// to tell damage from a copy in progress.
const SECOND_LOOK: std::time::Duration = std::time::Duration::from_millis(20);

/// Where [`check_segments`] gets a segment's bytes, and how it reports.
pub(crate) struct ScanInput<'a> {
    pub dir: &'a QueueDir,
    /// The segment numbers from head to tail.
    pub numbers: std::ops::RangeInclusive<u64>,
    /// Numbers of the segment files in the directory, ascending.
    pub listed: &'a [u64],
    /// True when another handle may be writing the queue while it is read:
    /// the end of any segment's frames may then be a write in progress (a
    /// record into the tail, a marker into a head segment), and a head
    /// segment may be retired under the scan.
    pub live: bool,
}

/// Replays every segment of `input` (bytes from `read`, one at a time) and
/// checks them against each other; `done` is called with the length of
/// each segment once it was read.
pub(crate) fn check_segments<'b>(
    input: &ScanInput<'_>,
    mut read: impl FnMut(u64) -> std::result::Result<Cow<'b, [u8]>, ReadError>,
    mut done: impl FnMut(u64),
) -> VerifyReport {
    let mut problems = Vec::new();
    let mut problem = |segment: &Path, offset: u64, reason: String| {
        problems.push(Problem {
            segment: segment.to_path_buf(),
            offset,
            reason,
        });
    };
    let mut scanned: Vec<Option<Scanned>> = Vec::new();
    for number in input.numbers.clone() {
        let path = input.dir.segment_path(number);
        if input.listed.binary_search(&number).is_err() {
            problem(&path, 0, "segment is missing between head and tail".into());
            scanned.push(None);
            continue;
        }
        let bytes = match read(number) {
            Ok(bytes) => bytes,
            // Consumed and retired by the queue's user since the listing.
            Err(ReadError::Gone) if input.live => {
                scanned.push(None);
                continue;
            }
            Err(e) => {
                problem(&path, 0, e.to_string());
                scanned.push(None);
                continue;
            }
        };
        done(bytes.len() as u64);
        scanned.push(scan(&path, &bytes, number, &mut problem));
    }

    for (i, this) in scanned.iter().enumerate() {
        let Some(this) = this else { continue };
        let next = scanned.get(i + 1).and_then(Option::as_ref);
        // Records the segment must hold: known from its successor's header.
        let mut expected = None;
        if let Some(next) = next {
            let gap = next.header.first_id.checked_sub(this.header.first_id);
            match gap.filter(|&gap| gap <= u64::from(this.header.max_records)) {
                Some(gap) => expected = Some(gap),
                None => problem(
                    &next.summary.path,
                    16,
                    format!(
                        "first id {} does not follow segment {} (first id {}, at most {} records)",
                        next.header.first_id,
                        this.header.number,
                        this.header.first_id,
                        this.header.max_records
                    ),
                ),
            }
        }
        let end = this.end as u64;
        let why = this.stopped_by;
        match expected {
            Some(expected) if this.summary.records != expected => problem(
                &this.summary.path,
                end,
                short_of_records(this.summary.records, expected, why),
            ),
            // Past the last whole frame, a writer may be halfway through a
            // copy: a record into the tail, a marker into any segment. Only
            // damage that is still there a moment later is reported.
            _ if input.live => {
                if this.damage_before.is_some() {
                    std::thread::sleep(SECOND_LOOK);
                    let again = read(this.header.number).ok().and_then(|bytes| {
                        let mut ignore = |_: &Path, _: u64, _: String| {};
                        scan(&this.summary.path, &bytes, this.header.number, &mut ignore)
                    });
                    if let Some(again) = again.filter(|a| a.end == this.end) {
                        if let Some(record_at) = again.damage_before {
                            let reason = recovery::damaged_tail(why, record_at);
                            problem(&this.summary.path, end, reason);
                        }
                    }
                }
            }
            _ if this.damage_before.is_some() => {
                let record_at = this.damage_before.expect("checked");
                problem(
                    &this.summary.path,
                    end,
                    recovery::damaged_tail(why, record_at),
                );
            }
            _ => {
                if let Some(why) = why {
                    // A sealed segment whose records are all whole: only
                    // markers can follow, and an open would cut them.
                    let reason = if expected.is_some() {
                        format!("{why} (after the last record of a sealed segment)")
                    } else {
                        why.to_string()
                    };
                    problem(&this.summary.path, end, reason);
                } else if let Some(garbage_end) = this.garbage_end {
                    problem(
                        &this.summary.path,
                        end,
                        format!("non-zero bytes after the clean end, up to byte {garbage_end}"),
                    );
                }
            }
        }
    }

    let segments = scanned.into_iter().flatten().map(|s| s.summary).collect();
    VerifyReport { segments, problems }
}

/// Reads the header and replays the frames of segment `number`, reporting
/// what is wrong with the header (then the frames are not read).
fn scan(
    path: &Path,
    bytes: &[u8],
    number: u64,
    problem: &mut impl FnMut(&Path, u64, String),
) -> Option<Scanned> {
    let header = match SegmentHeader::decode(bytes) {
        Ok(header) => header,
        Err(HeaderError::Invalid(reason)) => {
            problem(path, 0, reason.to_string());
            return None;
        }
        Err(HeaderError::Version(found)) => {
            problem(
                path,
                4,
                format!(
                    "format version {found}, this dque reads version {}",
                    crate::log::format::FORMAT_VERSION
                ),
            );
            return None;
        }
    };
    if header.number != number {
        problem(
            path,
            8,
            format!(
                "header says segment {}, file name says {number}",
                header.number
            ),
        );
        return None;
    }
    let replayed = recovery::replay(bytes, header.max_records);
    let garbage = nonzero_len(&bytes[replayed.end..]);
    Some(Scanned {
        summary: SegmentSummary {
            number,
            path: path.to_path_buf(),
            first_id: header.first_id,
            records: replayed.records.len() as u64,
            settled: replayed.settled.iter().filter(|&&s| s).count() as u64,
            frame_bytes: (replayed.end - SEGMENT_HEADER_LEN) as u64,
        },
        header,
        end: replayed.end,
        stopped_by: replayed.stopped_by,
        garbage_end: (garbage > 0).then_some(replayed.end + garbage),
        damage_before: recovery::damage_before_records(bytes, replayed.end, replayed.end + garbage),
    })
}

/// Why a segment file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The file is not there (any more).
    Gone,
    /// Anything else, said for a report.
    Other(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Gone => write!(f, "cannot read the segment: it is gone"),
            ReadError::Other(why) => write!(f, "{why}"),
        }
    }
}

/// The whole of a segment file that is not mapped, read with a buffer sized
/// by the file's length on disk (never by a length read from inside it).
pub(crate) fn read_bounded(path: &Path) -> std::result::Result<Vec<u8>, ReadError> {
    let failed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => ReadError::Gone,
        _ => ReadError::Other(format!("cannot read the segment: {e}")),
    };
    let meta = fs::metadata(path).map_err(failed)?;
    if !meta.is_file() {
        return Err(ReadError::Other("not a regular file".into()));
    }
    let len = usize::try_from(meta.len())
        .map_err(|_| ReadError::Other("file too large to read".into()))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len)
        .map_err(|e| ReadError::Other(format!("cannot hold the {len}-byte file in memory: {e}")))?;
    File::open(path)
        .and_then(|file| file.take(len as u64).read_to_end(&mut bytes))
        .map_err(failed)?;
    Ok(bytes)
}
