//! Mending a queue that does not open: [`repair`].
//!
//! A repair holds the queue's lock from its first read to its last write.
//! It cuts torn tails (as an open would), moves segments that cannot be
//! read into `quarantine/` (never deleting them), and puts a placeholder
//! where a segment is gone from the middle: a segment whose records are
//! all acked, so that the ids of the segments after it still follow and
//! the queue's count stays exact. Each step is durable before the next, so
//! a crash during a repair leaves a queue that the next repair finishes.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::format::{
    marker, record_frame_len, record_prefix, Config, MarkerType, SegmentHeader, MAX_SEGMENT_RECORDS,
};
use crate::log::layout::QueueDir;
use crate::log::quarantine::QUARANTINE_DIR;
use crate::log::recovery::{nonzero_len, replay, short_of_records, OpenReport};
use crate::log::segment::check_header;
use crate::log::verify::{read_bounded, ReadError};
use crate::options::Options;
use crate::queue::engine::{Engine, OpenMode};
use crate::tools::inspect::QueueFiles;

/// What [`repair`] did, or would do in a dry run, in order.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: dque::DQue<u32> = dque::DQue::create(dir.path().join("q"))?;
/// q.enqueue(&7)?;
/// drop(q);
/// let report = dque::repair(dir.path().join("q"), false)?;
/// assert!(report.actions.is_empty(), "a healthy queue needs nothing: {report}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairReport {
    /// The steps, in the order they were (or would be) taken.
    pub actions: Vec<RepairAction>,
    /// True when nothing was changed because a dry run was asked for.
    pub dry_run: bool,
    /// What the open that ends a repair mended besides (temp files removed,
    /// settled segments deleted); empty in a dry run.
    pub opened: OpenReport,
}

impl RepairReport {
    /// Ids that leave the queue: the records of the segments moved aside
    /// (still readable in `quarantine/`), where they are known.
    pub fn ids_lost(&self) -> u64 {
        // A moved middle segment is also filled by a placeholder: count its
        // ids once, from the placeholder.
        let filled: Vec<&PathBuf> = self
            .actions
            .iter()
            .filter_map(|action| match action {
                RepairAction::FillGap { segment, .. } => Some(segment),
                _ => None,
            })
            .collect();
        self.actions
            .iter()
            .map(|action| match action {
                RepairAction::FillGap { records, .. } => *records,
                RepairAction::MoveAside {
                    segment,
                    lost_ids: Some(ids),
                    ..
                } if !filled.contains(&segment) => *ids,
                _ => 0,
            })
            .sum::<u64>()
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.actions.is_empty() {
            return write!(f, "nothing to repair");
        }
        let verb = if self.dry_run { "would take" } else { "took" };
        write!(f, "repair {verb} {} steps:", self.actions.len())?;
        for action in &self.actions {
            write!(f, "\n  {action}")?;
        }
        Ok(())
    }
}

/// One step of a [`repair`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairAction {
    /// A torn or garbage tail zeroed, back to the last whole frame (what
    /// an open does).
    Cut {
        /// The segment file.
        segment: PathBuf,
        /// Where its last whole frame ends.
        offset: u64,
        /// Bytes zeroed, up to the last non-zero byte.
        bytes: u64,
        /// Why the frame at `offset` is not whole.
        reason: String,
    },
    /// A segment that cannot be read, moved into `quarantine/`.
    MoveAside {
        /// Where it was.
        segment: PathBuf,
        /// Where it is now.
        to: PathBuf,
        /// Offset of the damage in it.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// How many ids it held, when its header and its successor's say.
        lost_ids: Option<u64>,
    },
    /// A `reached` marker appended to a segment before a placeholder, so
    /// that an open replays every segment up to the placeholder (see the
    /// front-run rule in `FORMAT.md`).
    MarkReached {
        /// The segment file.
        segment: PathBuf,
    },
    /// A placeholder written where a middle segment is gone: `records`
    /// empty records, every one acked.
    FillGap {
        /// The new segment file.
        segment: PathBuf,
        /// Id of its first record.
        first_id: u64,
        /// Records in it, all settled: ids the queue lost.
        records: u64,
    },
    /// A new, empty tail after the last segment that could be read, where
    /// the tail was moved aside.
    NewTail {
        /// The new segment file.
        segment: PathBuf,
        /// Id its first record will have.
        first_id: u64,
    },
}

impl fmt::Display for RepairAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairAction::Cut {
                segment,
                offset,
                bytes,
                reason,
            } => write!(
                f,
                "cut {}: zero {bytes} bytes from byte {offset} ({reason})",
                segment.display()
            ),
            RepairAction::MoveAside {
                segment,
                to,
                offset,
                reason,
                lost_ids,
            } => {
                write!(
                    f,
                    "move {} to {} (at byte {offset}: {reason})",
                    segment.display(),
                    to.display()
                )?;
                match lost_ids {
                    Some(ids) => write!(f, "; its {ids} ids leave the queue"),
                    None => write!(f, "; its records leave the queue"),
                }
            }
            RepairAction::MarkReached { segment } => write!(
                f,
                "mark {} as reached, so that opens replay up to the placeholder",
                segment.display()
            ),
            RepairAction::FillGap {
                segment,
                first_id,
                records,
            } => write!(
                f,
                "write placeholder {}: {} acked",
                segment.display(),
                id_span(*first_id, *records)
            ),
            RepairAction::NewTail { segment, first_id } => {
                write!(f, "start a new tail {} at id {first_id}", segment.display())
            }
        }
    }
}

/// "id 4" or "ids 4 to 7".
fn id_span(first: u64, count: u64) -> String {
    match count {
        1 => format!("id {first}"),
        _ => format!("ids {first} to {}", first + count.saturating_sub(1)),
    }
}

/// Mends the queue at `path` so that it opens, or (`dry_run`) only says how.
///
/// Takes the queue's lock (fails with [`Error::Locked`] while a program has
/// it open) and holds it to the end. Torn tails are cut; a segment whose
/// header or records are damaged, other than at the very end of the queue,
/// is moved into `quarantine/` inside the queue directory and its ids leave
/// the queue; nothing is deleted. A queue that needs nothing gets nothing.
/// Fails, changing nothing, where it cannot tell what is right: segments
/// whose ids overlap, or files of a newer format.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("q");
/// let q = dque::RawQueue::create_with(&path, &dque::Options::new().segment_items(2))?;
/// for i in 0..6u8 {
///     q.enqueue_bytes(&[i])?;
/// }
/// drop(q);
/// // Damage the middle segment's only header: the queue no longer opens.
/// let middle = path.join(format!("{:020}.seg", 2));
/// let mut bytes = std::fs::read(&middle).unwrap();
/// bytes[20] ^= 0xFF;
/// std::fs::write(&middle, bytes).unwrap();
/// assert!(dque::RawQueue::open(&path).is_err());
///
/// let plan = dque::repair(&path, true)?;
/// assert!(plan.dry_run && !plan.actions.is_empty());
/// let done = dque::repair(&path, false)?;
/// assert_eq!(done.ids_lost(), 2, "{done}");
/// let q = dque::RawQueue::open(&path)?;
/// assert_eq!(q.dequeue()?, Some(vec![0]));
/// assert_eq!(q.dequeue()?, Some(vec![1]));
/// assert_eq!(q.dequeue()?, Some(vec![4]));
/// assert!(path.join("quarantine").join(format!("{:020}.seg", 2)).exists());
/// # Ok(()) }
/// ```
pub fn repair(path: impl AsRef<Path>, dry_run: bool) -> Result<RepairReport> {
    let path = path.as_ref();
    let (dir, config, lock) = QueueFiles::open_locked(path)?.into_parts();
    let plan = Plan::make(&dir, &config)?;
    let mut report = RepairReport {
        actions: plan.actions.clone(),
        dry_run,
        opened: OpenReport::default(),
    };
    if dry_run {
        return Ok(report);
    }
    plan.carry_out(&dir, &config)?;
    // The open removes temp files and retires settled segments (placeholders
    // at the head among them), still under the repair's lock.
    let options = Options::new();
    let (engine, opened) =
        Engine::open_holding(path, &options, config.codec_id, OpenMode::Open, lock)?;
    engine.close()?;
    report.opened = opened;
    Ok(report)
}

/// A segment as the repair read it.
#[derive(Debug)]
enum Seen {
    /// Listed before, gone now, or never there (a gap in the numbers).
    Missing,
    /// Cannot be part of the queue; its header if that could be read.
    Damaged {
        header: Option<SegmentHeader>,
        offset: u64,
        reason: String,
    },
    Sound(Sound),
}

#[derive(Debug)]
struct Sound {
    header: SegmentHeader,
    records: u64,
    has_markers: bool,
    /// End of the last whole frame.
    end: u64,
    /// Bytes to zero after `end`, and why.
    cut: Option<(u64, String)>,
}

impl Seen {
    fn header(&self) -> Option<&SegmentHeader> {
        match self {
            Seen::Missing => None,
            Seen::Damaged { header, .. } => header.as_ref(),
            Seen::Sound(sound) => Some(&sound.header),
        }
    }
}

/// The steps of a repair, worked out before any is taken.
struct Plan {
    actions: Vec<RepairAction>,
}

impl Plan {
    fn make(dir: &QueueDir, config: &Config) -> Result<Plan> {
        let listing = dir.list()?;
        let (Some(&first), Some(&last)) = (listing.segments.first(), listing.segments.last())
        else {
            return Ok(Plan {
                actions: Vec::new(),
            });
        };
        let mut seen = Vec::new();
        for number in first..=last {
            seen.push(read(dir, number)?);
        }
        judge_sealed(dir, first, &mut seen)?;

        let sound: Vec<usize> = (0..seen.len())
            .filter(|&i| matches!(seen[i], Seen::Sound(_)))
            .collect();
        let mut actions = Vec::new();
        let number = |i: usize| first + i as u64;
        for (i, this) in seen.iter().enumerate() {
            if let Seen::Sound(Sound {
                cut: Some((bytes, reason)),
                end,
                ..
            }) = this
            {
                actions.push(RepairAction::Cut {
                    segment: dir.segment_path(number(i)),
                    offset: *end,
                    bytes: *bytes,
                    reason: reason.clone(),
                });
            }
        }
        // Gaps between two sound segments get placeholders; before the first
        // sound one nothing is needed (the head moves on), after the last a
        // new tail starts.
        let mut fills = Vec::new();
        for pair in sound.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            if after > before + 1 {
                fills.extend(placeholders(dir, &seen, before, after, first)?);
            }
        }
        if let Some(&last_fill) = fills.last().map(|(i, _, _)| i) {
            for &i in sound.iter().take_while(|&&i| i < last_fill) {
                let Seen::Sound(s) = &seen[i] else {
                    unreachable!()
                };
                if !s.has_markers {
                    if s.records == 0 {
                        return Err(cannot(dir, number(i), "an empty segment before a gap"));
                    }
                    actions.push(RepairAction::MarkReached {
                        segment: dir.segment_path(number(i)),
                    });
                }
            }
        }
        let quarantine = dir.path().join(QUARANTINE_DIR);
        for (i, this) in seen.iter().enumerate() {
            if let Seen::Damaged { offset, reason, .. } = this {
                let lost_ids = this.header().and_then(|header| {
                    let next = seen.get(i + 1).and_then(Seen::header)?;
                    next.first_id.checked_sub(header.first_id)
                });
                let name = dir.segment_path(number(i));
                actions.push(RepairAction::MoveAside {
                    to: free_name(&quarantine, &name),
                    segment: name,
                    offset: *offset,
                    reason: reason.clone(),
                    lost_ids,
                });
            }
        }

        for (i, first_id, records) in fills {
            actions.push(RepairAction::FillGap {
                segment: dir.segment_path(number(i)),
                first_id,
                records,
            });
        }
        if let Some(&tail) = sound.last().filter(|&&i| i + 1 < seen.len()) {
            let Seen::Sound(s) = &seen[tail] else {
                unreachable!()
            };
            let first_id = s.header.first_id + s.records;
            if new_tail_header(config, number(tail + 1), first_id).is_none() {
                return Err(cannot(
                    dir,
                    number(tail),
                    "no ids are left for a new tail after it",
                ));
            }
            actions.push(RepairAction::NewTail {
                segment: dir.segment_path(number(tail + 1)),
                first_id,
            });
        }
        Ok(Plan { actions })
    }

    /// Takes the steps in an order where a crash between two leaves a
    /// queue the next repair mends: cuts and markers first (each alone is
    /// what an open or a delivery would write), then the moves, then the
    /// placeholders filling the gaps the moves left.
    fn carry_out(&self, dir: &QueueDir, config: &Config) -> Result<()> {
        for action in &self.actions {
            match action {
                RepairAction::Cut {
                    segment,
                    offset,
                    bytes,
                    ..
                } => {
                    // Bytes are never destroyed: a copy first, for salvage.
                    let content = fs::read(segment).map_err(|e| Error::io(segment, e))?;
                    let (start, cut_end) = (*offset as usize, (offset + bytes) as usize);
                    let end = crate::log::recovery::kept_end(&content, start, cut_end);
                    crate::log::quarantine::keep_copy(
                        dir,
                        segment,
                        &content[..end],
                        *offset as usize,
                    )?;
                    write_synced(segment, *offset, &vec![0; *bytes as usize])?
                }
                RepairAction::MarkReached { segment } => {
                    let end = replayed_end(segment)?;
                    write_synced(segment, end, &marker(MarkerType::Reached, 0))?;
                }
                _ => {}
            }
        }
        let mut moved = false;
        for action in &self.actions {
            if let RepairAction::MoveAside { segment, to, .. } = action {
                if !moved {
                    let quarantine = dir.path().join(QUARANTINE_DIR);
                    fs::create_dir_all(&quarantine).map_err(|e| Error::io(&quarantine, e))?;
                    dir.sync()?;
                    moved = true;
                }
                fs::rename(segment, to).map_err(|e| Error::io(segment, e))?;
            }
        }
        if moved {
            QueueDir::new(dir.path().join(QUARANTINE_DIR)).sync()?;
            dir.sync()?;
        }
        for action in &self.actions {
            match action {
                RepairAction::FillGap {
                    segment,
                    first_id,
                    records,
                } => {
                    let number = number_of(segment);
                    write_segment(dir, number, |out| {
                        write_placeholder(out, config, number, *first_id, *records)
                    })?
                }
                RepairAction::NewTail { segment, first_id } => {
                    let number = number_of(segment);
                    let header =
                        new_tail_header(config, number, *first_id).expect("checked when planned");
                    write_segment(dir, number, |out| out.write_all(&header.encode()))?
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Reads segment `number` whole; damage is noted, other failures end the
/// repair (a file it cannot read is not for it to move).
fn read(dir: &QueueDir, number: u64) -> Result<Seen> {
    let path = dir.segment_path(number);
    let bytes = match read_bounded(&path) {
        Ok(bytes) => bytes,
        Err(ReadError::Gone) => return Ok(Seen::Missing),
        Err(ReadError::Other(reason)) => {
            return Err(Error::io(&path, std::io::Error::other(reason)))
        }
    };
    let header = match check_header(&path, &bytes, number) {
        Ok(header) => header,
        Err(Error::Corrupted { offset, reason, .. }) => {
            return Ok(Seen::Damaged {
                header: None,
                offset,
                reason,
            })
        }
        Err(e) => return Err(e),
    };
    let replayed = replay(&bytes, header.max_records);
    let garbage = nonzero_len(&bytes[replayed.end..]) as u64;
    let cut = (garbage > 0).then(|| {
        let why = replayed.stopped_by.unwrap_or("bytes after the end");
        (garbage, why.to_string())
    });
    Ok(Seen::Sound(Sound {
        header,
        records: replayed.records.len() as u64,
        has_markers: replayed.has_markers,
        end: replayed.end as u64,
        cut,
    }))
}

/// Marks damaged every sound segment with fewer whole records than its
/// successor's header says it holds.
fn judge_sealed(dir: &QueueDir, first: u64, seen: &mut [Seen]) -> Result<()> {
    for i in 0..seen.len().saturating_sub(1) {
        let Seen::Sound(this) = &seen[i] else {
            continue;
        };
        let Some(next) = seen[i + 1].header().copied() else {
            // Its record count is unknown: a frame that stopped the replay
            // may hide whole records after it, which a cut would destroy.
            if let Some((_, why)) = this.cut.as_ref() {
                seen[i] = Seen::Damaged {
                    header: Some(this.header),
                    offset: this.end,
                    reason: format!("{why}, in a segment that has a successor"),
                };
            }
            continue;
        };
        let held = next.first_id.checked_sub(this.header.first_id);
        let Some(held) = held.filter(|&held| held <= u64::from(this.header.max_records)) else {
            return Err(cannot(
                dir,
                first + i as u64 + 1,
                "its first id does not follow the segment before it",
            ));
        };
        if this.records > held {
            return Err(cannot(
                dir,
                first + i as u64,
                "it holds more records than its successor's first id allows",
            ));
        }
        if this.records < held {
            let why = this.cut.as_ref().map(|(_, why)| why.as_str());
            let reason = short_of_records(this.records, held, why);
            seen[i] = Seen::Damaged {
                header: Some(this.header),
                offset: this.end,
                reason,
            };
        }
    }
    Ok(())
}

/// Placeholders for the segments between sound `before` and `after`: the
/// first takes the ids the others do not (one each: a sealed segment
/// holds at least one record).
fn placeholders(
    dir: &QueueDir,
    seen: &[Seen],
    before: usize,
    after: usize,
    first: u64,
) -> Result<Vec<(usize, u64, u64)>> {
    let (Seen::Sound(prev), Seen::Sound(next)) = (&seen[before], &seen[after]) else {
        unreachable!("placeholders go between sound segments")
    };
    let start = prev.header.first_id + prev.records;
    let gaps = (after - before - 1) as u64;
    let ids = next
        .header
        .first_id
        .checked_sub(start)
        .filter(|&ids| ids >= gaps);
    let Some(ids) = ids else {
        return Err(cannot(
            dir,
            first + after as u64,
            "too few ids between it and the segment before the gap",
        ));
    };
    let mut fills = Vec::new();
    let mut id = start;
    for (k, i) in (before + 1..after).enumerate() {
        let records = if k == 0 { ids - (gaps - 1) } else { 1 };
        if records > u64::from(MAX_SEGMENT_RECORDS) {
            return Err(cannot(dir, first + i as u64, "the gap is too wide to fill"));
        }
        fills.push((i, id, records));
        id += records;
    }
    Ok(fills)
}

/// Writes a sealed segment of `records` empty records, every one acked.
fn write_placeholder(
    out: &mut impl Write,
    config: &Config,
    number: u64,
    first_id: u64,
    records: u64,
) -> std::io::Result<()> {
    let record_bytes = records as usize * record_frame_len(0);
    let header = SegmentHeader {
        number,
        first_id,
        max_records: records as u32,
        max_bytes: config.segment_bytes.max(record_bytes as u32),
    };
    out.write_all(&header.encode())?;
    for _ in 0..records {
        out.write_all(&record_prefix(&[]))?;
    }
    for index in 0..records {
        out.write_all(&marker(MarkerType::Ack, index as u32))?;
    }
    Ok(())
}

/// The header of a new, empty tail at `first_id`, if the ids left let it
/// hold a record (a hostile header may have used nearly all of them).
fn new_tail_header(config: &Config, number: u64, first_id: u64) -> Option<SegmentHeader> {
    let ids_left = u64::MAX - first_id;
    let max_records = u64::from(config.segment_records).min(ids_left) as u32;
    (max_records > 0).then_some(SegmentHeader {
        number,
        first_id,
        max_records,
        max_bytes: config.segment_bytes,
    })
}

/// Creates segment `number` with what `write` writes, durably: temp file,
/// fsync, rename, directory fsync. Written through a buffer, never held
/// whole: a placeholder can be hundreds of megabytes.
fn write_segment(
    dir: &QueueDir,
    number: u64,
    write: impl FnOnce(&mut BufWriter<&mut File>) -> std::io::Result<()>,
) -> Result<()> {
    dir.create_durably(&dir.segment_path(number), |file| {
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        out.flush()
    })
    .map(drop)
}

fn write_synced(path: &Path, offset: u64, bytes: &[u8]) -> Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| {
            file.write_all_at(bytes, offset)?;
            file.sync_data()
        })
        .map_err(|e| Error::io(path, e))
}

/// End of the last whole frame of a segment whose tail was already cut.
fn replayed_end(path: &Path) -> Result<u64> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    let header = SegmentHeader::decode(&bytes)
        .map_err(|_| Error::corrupted(path, 0, "header changed during the repair"))?;
    Ok(replay(&bytes, header.max_records).end as u64)
}

/// `name`'s file name inside `dir`, with `.1`, `.2`, … added if taken.
fn free_name(dir: &Path, name: &Path) -> PathBuf {
    let file = name.file_name().expect("a segment path names a file");
    let mut to = dir.join(file);
    let mut n = 0;
    while to.exists() {
        n += 1;
        to = dir.join(format!("{}.{n}", file.to_string_lossy()));
    }
    to
}

fn number_of(segment: &Path) -> u64 {
    crate::log::layout::parse_segment_name(
        &segment.file_name().unwrap_or_default().to_string_lossy(),
    )
    .expect("planned segment paths are segment names")
}

fn cannot(dir: &QueueDir, number: u64, why: &str) -> Error {
    Error::corrupted(
        dir.segment_path(number),
        0,
        format!("repair cannot mend this: {why}"),
    )
}
