//! The untyped queue: segments of byte records, head and tail, counts and
//! durability. [`DQue`](crate::DQue) wraps it with a codec, a mutex and
//! blocking calls.

use std::fs;
use std::path::Path;

use crate::commit::SyncBatch;
use crate::error::{CodecError, Error, Result};
use crate::format::{record_frame_len, record_prefix, Config, SegmentHeader, RECORD_OVERHEAD};
use crate::layout::QueueDir;
use crate::lock::DirLock;
use crate::options::{Durability, Options, DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_ITEMS};
use crate::recovery::OpenReport;
use crate::segment::Segment;

/// Whether an open may create the queue, must create it, or must find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Create,
    Open,
    OpenOrCreate,
}

/// The queue's state behind the [`DQue`](crate::DQue) mutex.
///
/// Invariant: the head segment holds an unsettled record, or it is the tail,
/// or the next dequeue retires it. Segments strictly between head and tail
/// are on disk only.
#[derive(Debug)]
pub struct Engine {
    dir: QueueDir,
    config: Config,
    durability: Durability,
    max_item_bytes: u32,
    head: Segment,
    /// `None` while the head is also the tail.
    tail: Option<Segment>,
    len: u64,
    /// Set when a write or fsync failed: no later write can be trusted.
    refused: Option<String>,
    /// Frames written since open; group commit's tickets.
    written: u64,
    /// Reused buffer where each record frame is assembled before its one copy.
    scratch: Vec<u8>,
    /// Reused list of (start, payload length) of the frames in `scratch`.
    spans: Vec<(usize, usize)>,
    _lock: DirLock,
}

impl Engine {
    pub fn open(
        path: &Path,
        options: &Options,
        codec_id: u32,
        mode: OpenMode,
    ) -> Result<(Engine, OpenReport)> {
        options.validate()?;
        prepare_directory(path, mode)?;
        let dir = QueueDir::new(path.to_path_buf());
        let lock = DirLock::acquire(path)?;
        // Listed again under the lock: another handle may have changed it.
        let listing = dir.list()?;
        if listing.has_config && mode == OpenMode::Create {
            return Err(Error::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        let mut report = OpenReport::default();
        // Leftovers of a crash go first: writing the config reuses its temp name.
        for temp in &listing.temp_files {
            fs::remove_file(temp).map_err(|e| Error::io(temp, e))?;
            report.removed_temp_files.push(temp.clone());
        }
        if !listing.temp_files.is_empty() {
            dir.sync()?;
        }
        let config = if listing.has_config {
            let stored = dir.read_config()?;
            if stored.codec_id != codec_id {
                return Err(Error::CodecMismatch {
                    path: dir.config_path(),
                    found: stored.codec_id,
                    expected: codec_id,
                });
            }
            let wanted = config_for(options, codec_id, Some(&stored));
            if wanted != stored {
                dir.write_config(&wanted)?;
            }
            wanted
        } else {
            if !listing.segments.is_empty() {
                return Err(Error::NotAQueue {
                    path: path.to_path_buf(),
                    reason: format!("it holds segments but no {}", crate::layout::CONFIG_FILE),
                });
            }
            let config = config_for(options, codec_id, None);
            dir.write_config(&config)?;
            config
        };

        let segments = &listing.segments;
        for pair in segments.windows(2) {
            if pair[1] != pair[0] + 1 {
                return Err(Error::MissingSegment {
                    path: dir.segment_path(pair[0] + 1),
                });
            }
        }
        let (head, tail) = match (segments.first(), segments.last()) {
            (Some(&first), Some(&last)) => {
                check_middle_headers(&dir, first, last)?;
                let sealed = sealed_records(&dir, first, last)?;
                let head = Segment::open(&dir, first, sealed, &mut report)?;
                let tail = if last == first {
                    None
                } else {
                    Some(Segment::open(&dir, last, None, &mut report)?)
                };
                (head, tail)
            }
            _ => {
                let header = new_header(&config, 1, 0);
                (Segment::create(&dir, header)?, None)
            }
        };
        let mut engine = Engine {
            dir,
            config,
            durability: options.durability,
            max_item_bytes: options.max_item_bytes,
            head,
            tail,
            len: 0,
            refused: None,
            written: 0,
            scratch: Vec::new(),
            spans: Vec::new(),
            _lock: lock,
        };
        engine.len = engine.tail().end_id()
            - engine.head.header.first_id
            - (engine.head.record_count() - engine.head.unsettled_count()) as u64;
        if let Some(tail) = &engine.tail {
            engine.len -= (tail.record_count() - tail.unsettled_count()) as u64;
        }
        engine.retire_settled_head(&mut report)?;
        Ok((engine, report))
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Switches durability; going to `Safe` first makes everything so far durable.
    pub fn set_durability(&mut self, durability: Durability) -> Result<()> {
        if durability == Durability::Safe && self.durability != Durability::Safe {
            self.sync()?;
        }
        self.durability = durability;
        Ok(())
    }

    pub fn segment_numbers(&self) -> std::ops::RangeInclusive<u64> {
        self.head.header.number..=self.tail().header.number
    }

    /// The queue directory (read-only, for `verify`).
    pub fn dir(&self) -> &QueueDir {
        &self.dir
    }

    /// The mapped segments: the head, and the tail when it is another one.
    pub fn mapped_segments(&self) -> (&Segment, Option<&Segment>) {
        (&self.head, self.tail.as_ref())
    }

    /// Appends one record whose payload `encode` writes; returns its id.
    pub fn append_with(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), CodecError>,
    ) -> Result<u64> {
        let mut encode = Some(encode);
        self.append_many(1, |_, out| (encode.take().expect("called once"))(out))
    }

    /// Appends `count` records, the `i`th written by `encode(i, ..)`; returns
    /// the id of the last. Every item is encoded and checked before the first
    /// is written, so an encoding error or an item too large writes nothing.
    pub fn append_many(
        &mut self,
        count: usize,
        mut encode: impl FnMut(usize, &mut Vec<u8>) -> Result<(), CodecError>,
    ) -> Result<u64> {
        self.check_writable()?;
        let mut frames = std::mem::take(&mut self.scratch);
        let mut spans = std::mem::take(&mut self.spans);
        frames.clear();
        spans.clear();
        let encoded = (0..count).try_for_each(|i| {
            let start = frames.len();
            frames.resize(start + RECORD_OVERHEAD, 0);
            encode(i, &mut frames).map_err(Error::Encode)?;
            let payload_len = frames.len() - start - RECORD_OVERHEAD;
            if payload_len > self.max_item_bytes as usize {
                return Err(Error::ItemTooLarge {
                    size: payload_len,
                    max: self.max_item_bytes,
                });
            }
            let prefix = record_prefix(&frames[start + RECORD_OVERHEAD..]);
            frames[start..start + RECORD_OVERHEAD].copy_from_slice(&prefix);
            frames.resize(start + record_frame_len(payload_len), 0);
            spans.push((start, payload_len));
            Ok(())
        });
        let result = encoded.and_then(|()| {
            let mut last_id = None;
            for (i, &(start, payload_len)) in spans.iter().enumerate() {
                let end = spans.get(i + 1).map_or(frames.len(), |&(next, _)| next);
                last_id = Some(self.append_frame(&frames[start..end], payload_len)?);
            }
            last_id.ok_or(Error::InvalidOption {
                name: "batch",
                reason: "a batch needs at least one item".into(),
            })
        });
        self.scratch = frames;
        self.spans = spans;
        result
    }

    fn append_frame(&mut self, frame: &[u8], payload_len: usize) -> Result<u64> {
        if !self.tail().accepts(frame.len()) {
            self.roll_over()?;
        }
        let tail = self.tail.as_mut().unwrap_or(&mut self.head);
        let (index, _) = tail.append_record(frame, payload_len)?;
        self.written += 1;
        self.len += 1;
        Ok(tail.header.first_id + index as u64)
    }

    /// Calls `read` on the oldest unsettled record's id and payload.
    pub fn peek_with<R>(
        &mut self,
        read: impl FnOnce(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        self.retire_settled_head(&mut OpenReport::default())?;
        match self.head.first_unsettled() {
            None => Ok(None),
            Some(index) => {
                let id = self.head.header.first_id + index as u64;
                read(id, self.head.payload(index)).map(Some)
            }
        }
    }

    /// Like [`peek_with`](Self::peek_with), then settles the record if `read`
    /// succeeded, so a record that does not decode is never lost.
    pub fn pop_with<R>(&mut self, read: impl FnOnce(u64, &[u8]) -> Result<R>) -> Result<Option<R>> {
        self.check_writable()?;
        self.retire_settled_head(&mut OpenReport::default())?;
        let Some(index) = self.head.first_unsettled() else {
            return Ok(None);
        };
        let id = self.head.header.first_id + index as u64;
        let item = read(id, self.head.payload(index))?;
        self.head.settle(index)?;
        self.written += 1;
        self.len -= 1;
        Ok(Some(item))
    }

    /// The ticket a caller who just wrote must see durable before it
    /// returns: `None` unless the durability is `Safe`.
    pub fn ticket_to_wait(&self) -> Option<u64> {
        (self.durability == Durability::Safe).then_some(self.written)
    }

    /// Tickets written so far: every write counts one.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// What a group-commit leader must sync to make every write so far
    /// durable: the head and the tail (segments before the tail were
    /// fsynced when they were sealed).
    pub fn sync_batch(&self) -> SyncBatch {
        let mut files = vec![self.head.file_handle()];
        files.extend(self.tail.as_ref().map(Segment::file_handle));
        SyncBatch {
            files,
            ticket: self.written,
        }
    }

    /// Stops all writes: a sync failed, so nothing after it is known durable.
    pub fn refuse(&mut self, cause: &Error) {
        self.refused.get_or_insert_with(|| cause.to_string());
    }

    /// Retires a consumed head segment, so that a clean shutdown leaves
    /// nothing for the next open to mend, and makes every write durable.
    pub fn close(mut self) -> Result<()> {
        // Best effort: a damaged next segment is reported by the dequeue
        // that reaches it, and a segment left here is deleted on open.
        let _ = self.retire_settled_head(&mut OpenReport::default());
        self.sync()
    }

    /// Makes every write so far durable, under the lock.
    pub fn sync(&mut self) -> Result<()> {
        let result = self
            .head
            .sync()
            .and_then(|()| self.tail.as_ref().map_or(Ok(()), Segment::sync));
        self.refuse_on_error(result)
    }

    fn refuse_on_error(&mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            self.refused = Some(e.to_string());
        }
        result
    }

    fn check_writable(&self) -> Result<()> {
        match &self.refused {
            Some(cause) => Err(Error::WritesRefused {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn tail(&self) -> &Segment {
        self.tail.as_ref().unwrap_or(&self.head)
    }

    /// Seals the tail and starts the next segment.
    fn roll_over(&mut self) -> Result<()> {
        // Fsynced in every mode, so a later segment never outlives an earlier
        // one's records after a power loss: what survives is a prefix.
        let sealed = self.tail().sync();
        self.refuse_on_error(sealed)?;
        let header = new_header(
            &self.config,
            self.tail().header.number + 1,
            self.tail().end_id(),
        );
        let created = Segment::create(&self.dir, header);
        let next = match created {
            Ok(next) => next,
            Err(e) => {
                self.refused = Some(e.to_string());
                return Err(e);
            }
        };
        // The old tail, unless it is the head, becomes a middle segment: unmapped.
        drop(self.tail.replace(next));
        if self.head.unsettled_count() == 0 {
            self.retire_settled_head(&mut OpenReport::default())?;
        }
        Ok(())
    }

    /// Deletes fully settled head segments that have a successor, noting
    /// them (and any cut in the segments it replays) in `report`.
    fn retire_settled_head(&mut self, report: &mut OpenReport) -> Result<()> {
        while self.head.unsettled_count() == 0 {
            let Some(tail) = &self.tail else { break };
            let next_number = self.head.header.number + 1;
            let next = if tail.header.number == next_number {
                self.tail.take().expect("checked above")
            } else {
                let sealed = sealed_records(&self.dir, next_number, tail.header.number)?;
                // Middle segments were sealed before their successor existed: no cut is allowed.
                let middle = Segment::open(&self.dir, next_number, sealed, report)?;
                // Counted as items at open, when only its header was read.
                self.len -= (middle.record_count() - middle.unsettled_count()) as u64;
                middle
            };
            let done = std::mem::replace(&mut self.head, next);
            report.deleted_segments.push(done.path().to_path_buf());
            let result = done.delete(&self.dir);
            self.refuse_on_error(result)?;
        }
        Ok(())
    }
}

/// Checks the path and makes the directory when the mode allows, without
/// touching a directory that holds someone else's files.
fn prepare_directory(path: &Path, mode: OpenMode) -> Result<()> {
    match fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            return Err(Error::NotAQueue {
                path: path.to_path_buf(),
                reason: "it is a file, not a directory".into(),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if mode == OpenMode::Open {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                QueueDir::new(parent.to_path_buf()).sync()?;
            }
            return Ok(());
        }
        Err(e) => return Err(Error::io(path, e)),
    }
    let listing = QueueDir::new(path.to_path_buf()).list()?;
    if listing.has_config {
        return Ok(());
    }
    if !listing.foreign.is_empty() {
        return Err(Error::NotAQueue {
            path: path.to_path_buf(),
            reason: format!(
                "it has no {} and holds other files, such as {}",
                crate::layout::CONFIG_FILE,
                listing.foreign[0]
            ),
        });
    }
    // Segments without a config (lost or deleted): refused before the lock
    // file is made, like any other directory that is not a queue.
    if mode == OpenMode::Open || !listing.segments.is_empty() {
        let holds = if listing.segments.is_empty() {
            ""
        } else {
            "segments but "
        };
        return Err(Error::NotAQueue {
            path: path.to_path_buf(),
            reason: format!("it holds {holds}no {}", crate::layout::CONFIG_FILE),
        });
    }
    Ok(())
}

fn config_for(options: &Options, codec_id: u32, stored: Option<&Config>) -> Config {
    Config {
        segment_records: options
            .segment_items
            .or(stored.map(|c| c.segment_records))
            .unwrap_or(DEFAULT_SEGMENT_ITEMS),
        segment_bytes: options
            .segment_bytes
            .or(stored.map(|c| c.segment_bytes))
            .unwrap_or(DEFAULT_SEGMENT_BYTES),
        codec_id,
    }
}

fn new_header(config: &Config, number: u64, first_id: u64) -> SegmentHeader {
    SegmentHeader {
        number,
        first_id,
        max_records: config.segment_records,
        max_bytes: config.segment_bytes,
    }
}

/// Record count of segment `number` if it has a successor (up to `last`):
/// the gap between its first id and its successor's.
fn sealed_records(dir: &QueueDir, number: u64, last: u64) -> Result<Option<u64>> {
    if number == last {
        return Ok(None);
    }
    let this = Segment::read_header(dir, number)?;
    let next = Segment::read_header(dir, number + 1)?;
    Ok(Some(next.first_id - this.first_id))
}

/// Reads every header from `first` to `last` (one small read each, never the
/// records) and checks that ids grow by at most each segment's record limit.
fn check_middle_headers(dir: &QueueDir, first: u64, last: u64) -> Result<()> {
    let mut previous = Segment::read_header(dir, first)?;
    for number in first + 1..=last {
        let header = Segment::read_header(dir, number)?;
        let gap = header.first_id.checked_sub(previous.first_id);
        if gap.is_none_or(|gap| gap > u64::from(previous.max_records)) {
            return Err(Error::corrupted(
                dir.segment_path(number),
                16,
                format!(
                    "first id {} does not follow segment {} (first id {}, at most {} records)",
                    header.first_id, previous.number, previous.first_id, previous.max_records
                ),
            ));
        }
        previous = header;
    }
    Ok(())
}
