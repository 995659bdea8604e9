//! A full, read-only check of a queue's files: [`DQue::verify`](crate::DQue::verify).
//!
//! Every segment from head to tail is replayed with [`recovery::replay`]
//! (the same frame rules the open and the dequeues apply), and the segments
//! are checked against each other. Nothing is written, cut or deleted: a
//! problem is reported, never repaired.

use std::fmt;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::engine::Engine;
use crate::error::Result;
use crate::format::{HeaderError, SegmentHeader, SEGMENT_HEADER_LEN};
use crate::recovery::{self, nonzero_len};

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
        write!(f, "{} problems:", self.problems.len())?;
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
}

/// Checks every segment of the queue `engine` holds, reading the mapped head
/// and tail from their mappings and the others from disk, one at a time.
pub(crate) fn verify(engine: &Engine, queue: &Path, codec_id: u32) -> Result<VerifyReport> {
    let dir = engine.dir();
    let mut problems = Vec::new();
    let mut problem = |segment: &Path, offset: u64, reason: String| {
        problems.push(Problem {
            segment: segment.to_path_buf(),
            offset,
            reason,
        });
    };

    match dir.read_config() {
        Ok(config) if config.codec_id != codec_id => problem(
            &dir.config_path(),
            16,
            format!(
                "codec id is {}, the open handle's is {codec_id}",
                config.codec_id
            ),
        ),
        Ok(_) => {}
        Err(e) => problem(&dir.config_path(), 0, e.to_string()),
    }

    let numbers = engine.segment_numbers();
    let listing = dir.list()?;
    for &number in &listing.segments {
        if !numbers.contains(&number) {
            problem(
                &dir.segment_path(number),
                0,
                format!(
                    "segment file outside the queue's segments {}..={}: \
                     the next open would take it for part of the queue",
                    numbers.start(),
                    numbers.end()
                ),
            );
        }
    }

    let mut scanned: Vec<Option<Scanned>> = Vec::new();
    for number in numbers.clone() {
        let path = dir.segment_path(number);
        let mapped = engine.mapped_segments().find(|s| s.header.number == number);
        let read;
        let bytes = match mapped {
            Some(segment) => segment.bytes(),
            None => {
                if listing.segments.binary_search(&number).is_err() {
                    problem(&path, 0, "segment is missing between head and tail".into());
                    scanned.push(None);
                    continue;
                }
                match read_bounded(&path) {
                    Ok(bytes) => {
                        read = bytes;
                        &read[..]
                    }
                    Err(reason) => {
                        problem(&path, 0, reason);
                        scanned.push(None);
                        continue;
                    }
                }
            }
        };
        scanned.push(scan(&path, bytes, number, &mut problem));
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
                format!(
                    "sealed segment has {} whole records of {expected}, then: {}",
                    this.summary.records,
                    why.unwrap_or("zeros")
                ),
            ),
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

    let segments: Vec<SegmentSummary> = scanned.into_iter().flatten().map(|s| s.summary).collect();
    let mut report = VerifyReport { segments, problems };
    // Damage found above already explains a count that differs; the count
    // is compared only for sound segments, where it must be exact.
    if report.problems.is_empty() && report.items() != engine.len() {
        report.problems.push(Problem {
            segment: queue.to_path_buf(),
            offset: 0,
            reason: format!(
                "the segments hold {} items, the open queue counts {}",
                report.items(),
                engine.len()
            ),
        });
    }
    Ok(report)
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
                    crate::format::FORMAT_VERSION
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
    })
}

/// The whole of a segment file that is not mapped, read with a buffer sized
/// by the file's length on disk (never by a length read from inside it).
fn read_bounded(path: &Path) -> std::result::Result<Vec<u8>, String> {
    let meta = fs::metadata(path).map_err(|e| format!("cannot read the segment: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let len = usize::try_from(meta.len()).map_err(|_| "file too large to read".to_string())?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len)
        .map_err(|e| format!("cannot hold the {len}-byte file in memory: {e}"))?;
    File::open(path)
        .and_then(|file| file.take(len as u64).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read the segment: {e}"))?;
    Ok(bytes)
}
