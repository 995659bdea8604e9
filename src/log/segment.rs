//! One segment file, open and mapped: append frames, read records, settle them.
//!
//! This is the only module with `unsafe`: memmap2's mapping calls.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapMut;

use crate::error::{Error, Result};
use crate::faults::{self, Durable, FaultOp};
use crate::log::format::{
    marker, HeaderError, MarkerType, SegmentHeader, FORMAT_VERSION, RECORD_OVERHEAD,
    SEGMENT_HEADER_LEN,
};
use crate::log::layout::QueueDir;
use crate::log::mapping::{self, FileGate, Mapping};
use crate::log::recovery::{
    damage_before_records, damaged_tail, kept_end, nonzero_len, replay, replay_published,
    OpenReport, Repair, Replay,
};
use crate::log::zeroing::ZeroAhead;

/// A new segment's file starts this large (beyond its header) and doubles as
/// it fills; the bytes past the last frame are zeros, the clean end.
const INITIAL_CAPACITY: usize = 1 << 20;
/// Room a new segment starts with per record it may hold (a small record
/// and its markers), when that is less than [`INITIAL_CAPACITY`].
const BYTES_PER_RECORD_GUESS: usize = 256;
const PAGE: usize = 4096;
/// Frames written together that reach this many bytes (a batch of large
/// items) go in with `pwrite(2)` rather than through the mapping: the
/// kernel then copies into its pages without a page fault per page, and
/// nothing is faulted in or zeroed ahead for them. Measured with batches of
/// 100 items of 4 KiB: Safe enqueue 2.1x, Turbo 1.5x. Smaller writes stay
/// with the mapping, where the ahead-work makes them cheaper (with 11 KB
/// Safe batches, `pwrite` was 0.75x).
const WRITTEN_THROUGH_FILE: usize = 64 * 1024;

/// An open, mapped segment and the state of its records.
#[derive(Debug)]
pub struct Segment {
    pub header: SegmentHeader,
    path: PathBuf,
    /// Shared with group-commit leaders, who fsync it outside the queue's lock.
    file: Arc<File>,
    map: Mapping,
    /// The frames so far: each record's offset and payload length (checked
    /// when it was replayed or written; a record's index is its position),
    /// which are settled, their delivery attempts, whether any marker was
    /// read or written (segments with markers form a run from the head,
    /// which open replays), and `end`, where the next frame goes.
    frames: Replay,
    /// Written to since it was last handed to a sync: a group commit syncs
    /// only such segments (an fsync of a clean file costs as much here).
    dirty: bool,
    /// Blocks written with zeros ahead of a Safe writer (in a segment this
    /// handle created).
    zeroed: ZeroAhead,
}

/// What a write does for the writes that follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// No fsync follows each call (Turbo, Periodic): the mapping's next
    /// pages are faulted in, and the written ones handed to writeback, by a
    /// background thread (see `mapping`).
    FaultIn,
    /// An fsync follows each call (Safe): the next blocks are written with
    /// zeros, so that those fsyncs write data only (see `zeroing`). Faulting
    /// in would not do: the fsync would also write the pages made dirty.
    WriteZeros,
}

impl Segment {
    /// Creates the segment durably: written under a temporary name, fsynced,
    /// renamed into place, directory fsynced. A crash leaves either no
    /// segment or a whole empty one.
    pub fn create(dir: &QueueDir, header: SegmentHeader) -> Result<Segment> {
        // Sized to the segment's own limits: a segment of a few items must
        // not take a megabyte of disk (it grows if its records are larger).
        let by_records = (header.max_records as usize).saturating_mul(BYTES_PER_RECORD_GUESS);
        let capacity = round_up_to_page(
            SEGMENT_HEADER_LEN
                + INITIAL_CAPACITY
                    .min(header.max_bytes as usize)
                    .min(by_records),
        );
        let path = dir.segment_path(header.number);
        let file = dir.create_durably(&path, |file| {
            file.write_all(&header.encode())?;
            preallocate(file, capacity)
        })?;
        let file = Arc::new(file);
        let gate = FileGate::of(&file, &path).map_err(|e| Error::io(&path, e))?;
        let map = map(&file, &path, gate)?;
        Ok(Segment {
            header,
            path,
            file,
            map,
            frames: Replay {
                end: SEGMENT_HEADER_LEN,
                ..Replay::default()
            },
            dirty: false,
            zeroed: ZeroAhead::for_new_file(),
        })
    }

    /// Reads only the header of segment `number`.
    pub fn read_header(dir: &QueueDir, number: u64) -> Result<SegmentHeader> {
        let path = dir.segment_path(number);
        let mut bytes = Vec::with_capacity(SEGMENT_HEADER_LEN);
        File::open(&path)
            .and_then(|f| f.take(SEGMENT_HEADER_LEN as u64).read_to_end(&mut bytes))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::MissingSegment { path: path.clone() },
                _ => Error::io(&path, e),
            })?;
        check_header(&path, &bytes, number)
    }

    /// Opens segment `number` and replays its frames.
    ///
    /// `sealed_records` is the record count of a segment that has a
    /// successor: all of them must be whole, and only a torn tail of markers
    /// after them may be cut. The last segment (`None`) may end anywhere.
    /// What follows the last whole frame is cut if it is what a torn write
    /// leaves (FORMAT.md, "Tail damage"); a bad frame followed by whole
    /// records is damage, refused with `Corrupted` unless `cut_damaged`.
    /// A cut keeps a copy of the file in `quarantine/` first, then zeroes
    /// the bytes durably, and is reported.
    pub fn open(
        dir: &QueueDir,
        number: u64,
        sealed_records: Option<u64>,
        cut_damaged: bool,
        report: &mut OpenReport,
    ) -> Result<Segment> {
        Segment::open_judging(
            dir,
            number,
            sealed_records,
            Some((cut_damaged, report)),
            None,
        )
    }

    /// Opens segment `number` beside other processes (shared mode, under
    /// their mutex): like [`open`](Self::open), but what follows the last
    /// whole frame is neither judged nor cut. Other processes write whole
    /// frames only; anything else there is a dead process's torn write,
    /// which the next write mends (see `queue::engine::processes`).
    pub fn attach(dir: &QueueDir, number: u64, sealed_records: Option<u64>) -> Result<Segment> {
        Segment::open_judging(dir, number, sealed_records, None, None)
    }

    /// Attaches the tail segment `number` that another process created
    /// (shared mode, under their mutex), reading exactly the frames they
    /// published, up to `published`, without checking their CRCs again:
    /// the trust [`catch_up_published`](Self::catch_up_published) gives the
    /// tail's new frames, given to a new tail's first ones. (Checking them
    /// was a quarter of the CPU of four producer processes on two cores: a
    /// process off its core for a while attached a tail full of frames.)
    pub fn attach_published(dir: &QueueDir, number: u64, published: usize) -> Result<Segment> {
        Segment::open_judging(dir, number, None, None, Some(published))
    }

    fn open_judging(
        dir: &QueueDir,
        number: u64,
        sealed_records: Option<u64>,
        judge: Option<(bool, &mut OpenReport)>,
        published: Option<usize>,
    ) -> Result<Segment> {
        let path = dir.segment_path(number);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::MissingSegment { path: path.clone() },
                _ => Error::io(&path, e),
            })?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < SEGMENT_HEADER_LEN as u64 {
            return Err(Error::corrupted(
                &path,
                0,
                "file is shorter than a segment header",
            ));
        }
        let file = Arc::new(file);
        let gate = FileGate::of(&file, &path).map_err(|e| Error::io(&path, e))?;
        if sealed_records.is_some() {
            // It has a successor: nothing is faulted in any more.
            gate.seal();
        }
        let mut map = map(&file, &path, gate)?;
        let header = check_header(&path, &map, number)?;
        let replayed = match published {
            Some(published) => replay_published(
                &map[..published.clamp(SEGMENT_HEADER_LEN, map.len())],
                header.max_records,
            ),
            None => replay(&map, header.max_records),
        };
        if let Some(expected) = sealed_records {
            replayed.check_sealed(&path, expected)?;
        }
        // Judged only on open: attaching reads no byte past the frames (a
        // scan of the zeros would read, and map, the whole rest of the file).
        let judged = judge.map(|judge| (judge, replayed.end + nonzero_len(&map[replayed.end..])));
        if let Some(((cut_damaged, report), garbage_end)) =
            judged.filter(|&(_, garbage_end)| garbage_end > replayed.end)
        {
            let damage = damage_before_records(&map, replayed.end, garbage_end);
            if let (Some(record_at), false) = (damage, cut_damaged) {
                return Err(Error::corrupted(
                    &path,
                    replayed.end,
                    damaged_tail(replayed.stopped_by, record_at),
                ));
            }
            let cut = replayed.end..garbage_end;
            let copy_end = kept_end(&map, replayed.end, garbage_end);
            let kept = crate::log::quarantine::keep_copy(dir, &path, &map[..copy_end], cut.start)?;
            faults::check(FaultOp::Write, &path).map_err(|e| Error::io(&path, e))?;
            map[cut.clone()].fill(0);
            faults::check(FaultOp::Sync, &path)
                .and_then(|()| map.flush_range(cut.start, cut.len()))
                .map_err(|e| Error::io(&path, e))?;
            faults::synced(&path, Durable::Range(cut));
            report.repairs.push(Repair {
                segment: path.clone(),
                offset: replayed.end as u64,
                bytes_cut: (garbage_end - replayed.end) as u64,
                reason: replayed
                    .stopped_by
                    .unwrap_or("bytes after the end")
                    .to_string(),
                kept: Some(kept),
                damage: damage.is_some(),
            });
        }
        Ok(Segment {
            header,
            path,
            file,
            map,
            frames: replayed,
            dirty: false,
            zeroed: ZeroAhead::off(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole mapped file, header included (read-only, for `verify`).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn record_count(&self) -> usize {
        self.frames.records.len()
    }

    pub fn unsettled_count(&self) -> usize {
        self.frames.records.len() - self.frames.settled_count
    }

    /// End of the last whole frame: where the next one goes.
    pub fn end(&self) -> usize {
        self.frames.end
    }

    /// [`catch_up`](Self::catch_up) for the tail, up to `published`, the end
    /// of the frames the other processes published: exactly those are read
    /// (a dead process's unpublished bytes after them are not), without
    /// checking their CRCs again.
    pub fn catch_up_published(&mut self, published: usize) -> Result<()> {
        if published > self.map.len() {
            self.map = map(&self.file, &self.path, Arc::clone(self.map.gate()))?;
        }
        let published = published.min(self.map.len());
        if published > self.frames.end {
            self.frames
                .resume_published(&self.map[..published], self.header.max_records);
        }
        Ok(())
    }

    /// Reads the frames other processes wrote since this mapping last looked
    /// (shared mode), up to the first that is not whole, mapping the file
    /// again if it grew. The caller holds the queue's cross-process lock,
    /// under which every frame is written whole.
    pub fn catch_up(&mut self) -> Result<()> {
        self.frames.resume(&self.map, self.header.max_records);
        // Stopped by the end of this mapping: the file may have grown in
        // another process (looked at only then: it costs a system call).
        let near_end = self.frames.end + RECORD_OVERHEAD > self.map.len();
        if self.frames.stopped_by.is_some() || near_end {
            let len = self
                .file
                .metadata()
                .map_err(|e| Error::io(&self.path, e))?
                .len();
            if len as usize > self.map.len() {
                self.map = map(&self.file, &self.path, Arc::clone(self.map.gate()))?;
                self.frames.resume(&self.map, self.header.max_records);
            }
        }
        Ok(())
    }

    /// Id of the record after the last one: the first id of the next segment.
    pub fn end_id(&self) -> u64 {
        self.header.first_id + self.frames.records.len() as u64
    }

    /// How many of the next record frames, of lengths `frame_lens`, fit
    /// one after another under the segment's limits (its first record
    /// always does).
    pub fn fitting(&self, frame_lens: impl IntoIterator<Item = usize>) -> usize {
        let records = self.frames.records.len();
        let room = (self.header.max_records as usize).saturating_sub(records);
        let mut record_bytes = self.frames.end - SEGMENT_HEADER_LEN;
        let mut fit = 0;
        for frame_len in frame_lens.into_iter().take(room) {
            record_bytes += frame_len;
            if records + fit > 0 && record_bytes > self.header.max_bytes as usize {
                break;
            }
            fit += 1;
        }
        fit
    }

    /// Copies whole record frames, one after another, into the segment with
    /// one write (see `append`); `records` gives each one's offset in `frames` and payload
    /// length. Returns the first one's index.
    pub fn append_records(
        &mut self,
        frames: &[u8],
        records: impl IntoIterator<Item = (usize, usize)>,
        ahead: Ahead,
    ) -> Result<usize> {
        self.append(frames, ahead)?;
        let first = self.frames.records.len();
        let start = self.frames.end - frames.len();
        for (at, payload_len) in records {
            debug_assert!(at + crate::log::format::record_frame_len(payload_len) <= frames.len());
            let replay = &mut self.frames;
            replay
                .records
                .push(((start + at) as u32, payload_len as u32));
            replay.settled.push(false);
            replay.attempts.push(0);
        }
        Ok(first)
    }

    /// Appends a `kind` marker for record `index` (settling it, or counting
    /// a delivery attempt); returns the bytes written.
    pub fn mark(&mut self, index: usize, kind: MarkerType, ahead: Ahead) -> Result<Range<usize>> {
        debug_assert!(kind == MarkerType::Reached || !self.frames.settled[index]);
        let range = self.append(&marker(kind, index as u32), ahead)?;
        let frames = &mut self.frames;
        frames.has_markers = true;
        match kind {
            MarkerType::Ack | MarkerType::Dead => {
                frames.settled[index] = true;
                frames.settled_count += 1;
            }
            MarkerType::Lease => frames.attempts[index] = frames.attempts[index].saturating_add(1),
            MarkerType::Release => {
                frames.attempts[index] = frames.attempts[index].saturating_sub(1)
            }
            MarkerType::Reached => {}
        }
        Ok(range)
    }

    /// Whether record `index` is settled (acked or dead-lettered).
    pub fn is_settled(&self, index: usize) -> bool {
        self.frames.settled[index]
    }

    /// Delivery attempts of record `index` so far.
    pub fn attempts(&self, index: usize) -> u16 {
        self.frames.attempts[index]
    }

    /// Whether the segment holds any marker.
    pub fn has_markers(&self) -> bool {
        self.frames.has_markers
    }

    /// The payload of record `index`, read from the mapping.
    pub fn payload(&self, index: usize) -> &[u8] {
        let (at, len) = self.frames.records[index];
        let start = at as usize + RECORD_OVERHEAD;
        &self.map[start..start + len as usize]
    }

    /// The open file and its path, for a sync outside the queue's lock, if
    /// anything was written since the last time; the caller syncs it. On
    /// Linux an fsync of the file also writes what went through the mapping.
    pub fn take_dirty_file(&mut self) -> Option<(Arc<File>, PathBuf)> {
        std::mem::take(&mut self.dirty).then(|| (Arc::clone(&self.file), self.path.clone()))
    }

    /// Makes every byte written so far durable (fdatasync), with no
    /// fault-in running on the file meanwhile (see `mapping`).
    pub fn sync(&mut self) -> Result<()> {
        mapping::sync_data(&self.file, &self.path).map_err(|e| Error::io(&self.path, e))?;
        self.dirty = false;
        Ok(())
    }

    /// Seals the segment before a successor is made: drops the fault-ins
    /// asked for it (waiting for the one in flight), then makes every byte
    /// durable. Nothing is faulted in for it afterwards.
    pub fn seal(&mut self) -> Result<()> {
        self.map.gate().seal();
        self.sync()
    }

    /// Notes that another process sealed the segment (shared mode): no
    /// more fault-ins for it.
    pub fn sealed_elsewhere(&self) {
        self.map.gate().seal();
    }

    /// Whether the segment can take no more records (markers still go in).
    fn is_full(&self) -> bool {
        self.frames.records.len() >= self.header.max_records as usize
            || self.frames.end >= self.record_limit()
    }

    /// Records end before here (the first may end after it, alone).
    fn record_limit(&self) -> usize {
        SEGMENT_HEADER_LEN.saturating_add(self.header.max_bytes as usize)
    }

    /// Removes the file; its directory entry is gone durably on return.
    pub fn delete(self, dir: &QueueDir) -> Result<()> {
        let Segment {
            path, map, file, ..
        } = self;
        drop(map);
        drop(file);
        faults::check(FaultOp::Write, &path)
            .and_then(|()| fs::remove_file(&path))
            .map_err(|e| Error::io(&path, e))?;
        dir.sync()
    }

    /// Writes whole frames after the last one: through the mapping, or with
    /// `pwrite(2)` when they are many bytes at once (the same page cache, so
    /// the mapping sees them). A failed `pwrite` may leave part of them
    /// written past the end, which the next write overwrites (and an open
    /// after a crash cuts, as any torn write).
    fn append(&mut self, frames: &[u8], ahead: Ahead) -> Result<Range<usize>> {
        let range = self.frames.end..self.frames.end + frames.len();
        if range.end > self.map.len() {
            self.grow(range.end)?;
        }
        faults::check(FaultOp::Write, &self.path).map_err(|e| Error::io(&self.path, e))?;
        let through_file = frames.len() >= WRITTEN_THROUGH_FILE;
        if through_file {
            self.file
                .write_all_at(frames, range.start as u64)
                .map_err(|e| Error::io(&self.path, e))?;
        } else {
            self.map[range.clone()].copy_from_slice(frames);
        }
        self.frames.end = range.end;
        self.dirty = true;
        match ahead {
            _ if through_file => {}
            // Nothing for a full segment: only markers follow, and its seal.
            Ahead::FaultIn if self.is_full() => {}
            Ahead::FaultIn => {
                self.map.fault_in_ahead(range.end, self.record_limit());
                self.map.write_back_behind(range.end);
            }
            // Not into pages faulted in ahead (a Turbo writer's, before a
            // switch to Safe): those are cached in large folios already.
            Ahead::WriteZeros => self.zeroed.after_write(
                &self.file,
                range.end.max(self.map.faulted_in_to()),
                self.map.len(),
            ),
        }
        Ok(range)
    }

    /// Extends the file (at least doubling it) and maps it again. The old
    /// mapping's dirty pages stay in the page cache, so nothing is lost. A
    /// file another process already made long enough is only mapped again:
    /// it never shrinks, which would take bytes from under other mappings.
    fn grow(&mut self, needed: usize) -> Result<()> {
        let io = |e| Error::io(&self.path, e);
        let len = self.file.metadata().map_err(io)?.len() as usize;
        if len < needed {
            let new_len = round_up_to_page(needed.max(self.map.len() * 2)).max(len);
            faults::check(FaultOp::Write, &self.path)
                .and_then(|()| preallocate(&self.file, new_len))
                .map_err(io)?;
        }
        self.map = map(&self.file, &self.path, Arc::clone(self.map.gate()))?;
        Ok(())
    }
}

/// A sealed segment read into memory and never written: how the segments
/// between the front run and the tail are browsed, so that looking changes
/// nothing on disk.
pub struct SealedCopy {
    header: SegmentHeader,
    bytes: Vec<u8>,
    replay: Replay,
}

impl SealedCopy {
    /// Reads segment `number`, which must hold `records` whole records.
    ///
    /// It judges what follows the last whole frame as an open of the segment
    /// would, without cutting anything: damage (unless `cut_damaged`, with
    /// which the open would cut it and keep the records) fails as `Corrupted`,
    /// so a read and the dequeue that reaches the segment agree.
    pub fn read(
        dir: &QueueDir,
        number: u64,
        records: u64,
        cut_damaged: bool,
    ) -> Result<SealedCopy> {
        let path = dir.segment_path(number);
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let header = check_header(&path, &bytes, number)?;
        let replay = replay(&bytes, header.max_records);
        replay.check_sealed(&path, records)?;
        let garbage_end = replay.end + nonzero_len(&bytes[replay.end..]);
        if let (Some(record_at), false) = (
            damage_before_records(&bytes, replay.end, garbage_end),
            cut_damaged,
        ) {
            return Err(Error::corrupted(
                &path,
                replay.end,
                damaged_tail(replay.stopped_by, record_at),
            ));
        }
        Ok(SealedCopy {
            header,
            bytes,
            replay,
        })
    }

    /// Id, attempts and payload of every record not settled, in order.
    pub fn unsettled(&self) -> impl Iterator<Item = (u64, u16, &[u8])> {
        self.replay
            .records
            .iter()
            .enumerate()
            .filter(|&(index, _)| !self.replay.settled[index])
            .map(|(index, &(at, len))| {
                let start = at as usize + RECORD_OVERHEAD;
                (
                    self.header.first_id + index as u64,
                    self.replay.attempts[index],
                    &self.bytes[start..start + len as usize],
                )
            })
    }
}

fn map(file: &File, path: &Path, gate: Arc<FileGate>) -> Result<Mapping> {
    // SAFETY: the mapping is only valid while no one truncates the file
    // behind our back. In exclusive mode the queue's lock keeps every other
    // dque handle out; in shared mode other handles only ever extend a
    // segment (`grow` never shrinks one) or unlink it (the mapping keeps the
    // inode), and every change is made under the queue's mutex.
    unsafe { MmapMut::map_mut(file) }
        .map(|map| Mapping::new(map, gate))
        .map_err(|e| Error::io(path, e))
}

pub(crate) fn check_header(path: &Path, bytes: &[u8], number: u64) -> Result<SegmentHeader> {
    let header = SegmentHeader::decode(bytes).map_err(|e| match e {
        HeaderError::Version(found) => Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        },
        HeaderError::Invalid(reason) => Error::corrupted(path, 0, reason),
    })?;
    if header.number != number {
        return Err(Error::corrupted(
            path,
            0,
            format!(
                "header says segment {}, file name says {number}",
                header.number
            ),
        ));
    }
    Ok(header)
}

/// Extends the file to `len` bytes with blocks reserved, so that writes
/// through the mapping never need space the disk no longer has (which would
/// be a SIGBUS, not an error). Falls back to a sparse extension where the
/// file system cannot reserve.
fn preallocate(file: &File, len: usize) -> std::io::Result<()> {
    // The length first: `allocate` skips files that already hold enough
    // blocks without extending them.
    file.set_len(len as u64)?;
    match fs4::FileExt::allocate(file, len as u64) {
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => Ok(()),
        other => other,
    }
}

fn round_up_to_page(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}
