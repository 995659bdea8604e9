//! The untyped queue: segments of byte records, head and tail, counts and
//! durability. [`DQue`](crate::DQue) wraps it with a codec, a mutex and
//! blocking calls.

use std::collections::VecDeque;
use std::fs;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::commit::SyncBatch;
use crate::dead::{DeadLetter, DEAD_LETTER_CODEC};
use crate::delivery::{Deliveries, Lease};
use crate::error::{CodecError, Error, Result};
use crate::format::{
    record_frame_len, record_prefix, Config, MarkerType, SegmentHeader, RECORD_OVERHEAD,
};
use crate::layout::QueueDir;
use crate::lock::DirLock;
use crate::options::{Durability, Options, DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_ITEMS};
use crate::recovery::OpenReport;
use crate::segment::{SealedCopy, Segment};

/// Whether an open may create the queue, must create it, or must find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Create,
    Open,
    OpenOrCreate,
}

/// The queue's state behind the [`DQue`](crate::DQue) mutex.
///
/// Segments are mapped from the head on as far as deliveries have reached
/// (the front run), plus the tail; segments between them are on disk only.
/// Invariant: the head holds an unsettled record, or it is the tail, or the
/// next delivery retires it.
#[derive(Debug)]
pub struct Engine {
    dir: QueueDir,
    config: Config,
    durability: Durability,
    max_item_bytes: u32,
    /// The head and the segments after it that deliveries reached, in order.
    front: VecDeque<Segment>,
    /// `None` while the last segment of `front` is the tail.
    tail: Option<Segment>,
    deliveries: Deliveries,
    max_attempts: u16,
    /// The dead-letter queue in `dead/`, once used.
    dead: Option<Box<Engine>>,
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
        let (front, tail) = match (segments.first(), segments.last()) {
            (Some(&first), Some(&last)) => {
                check_middle_headers(&dir, first, last)?;
                let mut front = VecDeque::new();
                // Markers only ever reach a run of segments from the head, so
                // replaying until a segment without any finds them all.
                let mut number = first;
                loop {
                    let sealed = sealed_records(&dir, number, last)?;
                    let segment = Segment::open(&dir, number, sealed, &mut report)?;
                    let more = segment.has_markers() && number + 1 < last;
                    front.push_back(segment);
                    if !more {
                        break;
                    }
                    number += 1;
                }
                let tail = if number == last {
                    None
                } else {
                    Some(Segment::open(&dir, last, None, &mut report)?)
                };
                (front, tail)
            }
            _ => {
                let header = new_header(&config, 1, 0);
                (VecDeque::from([Segment::create(&dir, header)?]), None)
            }
        };
        let mut engine = Engine {
            dir,
            config,
            durability: options.durability,
            max_item_bytes: options.max_item_bytes,
            front,
            tail,
            deliveries: Deliveries::default(),
            max_attempts: options.max_attempts,
            dead: None,
            len: 0,
            refused: None,
            written: 0,
            scratch: Vec::new(),
            spans: Vec::new(),
            _lock: lock,
        };
        let settled: usize = engine
            .mapped_segments()
            .map(|s| s.record_count() - s.unsettled_count())
            .sum();
        engine.len = engine.tail().end_id() - engine.head().header.first_id - settled as u64;
        // A tail with markers belongs to the front run: a rollover must not
        // turn it into a middle segment that open would not replay.
        if engine.tail.as_ref().is_some_and(Segment::has_markers) {
            while engine.tail.is_some() {
                engine.extend_front_into(&mut report)?;
            }
        }
        engine.retire_settled_head(&mut report)?;
        Ok((engine, report))
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// The item count once leases past their time have ended (which may
    /// move items to the dead letters).
    pub fn len_now(&mut self) -> Result<u64> {
        self.expire_leases()?;
        Ok(self.len)
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
        self.head().header.number..=self.tail().header.number
    }

    /// The queue directory (read-only, for `verify`).
    pub fn dir(&self) -> &QueueDir {
        &self.dir
    }

    /// The mapped segments: the front run from the head, then the tail.
    pub fn mapped_segments(&self) -> impl Iterator<Item = &Segment> {
        self.front.iter().chain(&self.tail)
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
        let tail = self.tail_mut();
        let (index, _) = tail.append_record(frame, payload_len)?;
        let id = tail.header.first_id + index as u64;
        self.written += 1;
        self.len += 1;
        Ok(id)
    }

    /// Calls `read` on the next available record's id and payload.
    pub fn peek_with<R>(
        &mut self,
        read: impl FnOnce(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        let Some(id) = self.next_available()? else {
            return Ok(None);
        };
        let (segment, index) = self.find(id).expect("available records are mapped");
        read(id, segment.payload(index)).map(Some)
    }

    /// Like [`peek_with`](Self::peek_with), then settles the record if `read`
    /// succeeded, so a record that does not decode is never lost.
    pub fn pop_with<R>(&mut self, read: impl FnOnce(u64, &[u8]) -> Result<R>) -> Result<Option<R>> {
        self.check_writable()?;
        let Some(id) = self.next_available()? else {
            return Ok(None);
        };
        let (segment, index) = self.find(id).expect("available records are mapped");
        let item = read(id, segment.payload(index))?;
        self.mark(id, MarkerType::Ack)?;
        self.deliveries.take(id);
        Ok(Some(item))
    }

    /// Leases the next available record for `timeout`: calls `read` on it,
    /// and if that succeeds counts the attempt on disk; returns what `read`
    /// gave and the lease.
    pub fn lease_with<R>(
        &mut self,
        timeout: Duration,
        read: impl FnOnce(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<(R, u64, Lease)>> {
        self.check_writable()?;
        let (id, attempt) = loop {
            let Some(id) = self.next_available()? else {
                return Ok(None);
            };
            let (segment, index) = self.find(id).expect("available records are mapped");
            let attempts = segment.attempts(index);
            if attempts < self.max_attempts {
                break (id, attempts + 1);
            }
            // Leased that often by handles that never came back (crashes).
            let reason = format!("{attempts} attempts, the last ones never ended");
            self.dead_letter(id, attempts, &reason)?;
        };
        let (segment, index) = self.find(id).expect("available records are mapped");
        let item = read(id, segment.payload(index))?;
        self.mark(id, MarkerType::Lease)?;
        let lease = Lease {
            attempt,
            expires: Instant::now() + timeout,
        };
        self.deliveries.start_lease(id, lease);
        Ok(Some((item, id, lease)))
    }

    /// Settles leased record `id` if the lease with `attempt` still holds it.
    pub fn ack(&mut self, id: u64, attempt: u16) -> Result<()> {
        self.check_writable()?;
        self.current_lease(id, attempt)?;
        self.mark(id, MarkerType::Ack)?;
        self.deliveries.end_lease(id);
        Ok(())
    }

    /// Hands leased record `id` back: available again at its place in the
    /// order, or dead-lettered once it has had `max_attempts` attempts.
    pub fn nack(&mut self, id: u64, attempt: u16) -> Result<()> {
        self.current_lease(id, attempt)?;
        self.hand_back(id, attempt)
    }

    /// Extends the lease of `id` to `timeout` from now.
    pub fn touch(&mut self, id: u64, attempt: u16, timeout: Duration) -> Result<()> {
        self.current_lease(id, attempt)?;
        self.deliveries.extend_lease(id, Instant::now() + timeout);
        Ok(())
    }

    /// Moves leased record `id` to the dead letters at once.
    pub fn fail(&mut self, id: u64, attempt: u16, reason: &str) -> Result<()> {
        self.check_writable()?;
        self.current_lease(id, attempt)?;
        self.deliveries.end_lease(id);
        self.dead_letter(id, attempt, reason)
    }

    /// Settles pending record `id`, which no one holds.
    pub fn cancel(&mut self, id: u64) -> Result<()> {
        self.check_writable()?;
        self.expire_leases()?;
        if self.deliveries.is_leased(id) {
            return Err(Error::Leased { id });
        }
        while self.find(id).is_none() && id < self.tail().end_id() {
            if id < self.head().header.first_id || !self.extend_front()? {
                break;
            }
        }
        match self.find(id) {
            Some((segment, index)) if !segment.is_settled(index) => {}
            _ => return Err(Error::NotPending { id }),
        }
        self.mark(id, MarkerType::Ack)?;
        self.deliveries.take(id);
        Ok(())
    }

    /// Calls `visit` on every pending record in order (id, attempts so far,
    /// leased now, payload) until it says stop. Mapped segments are read in
    /// place; the ones between them are mapped one at a time.
    pub fn visit_pending(
        &mut self,
        mut visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        self.expire_leases()?;
        for segment in &self.front {
            if visit_mapped(segment, &self.deliveries, &mut visit).is_break() {
                return Ok(());
            }
        }
        let Some(tail) = &self.tail else {
            return Ok(());
        };
        let after_front = self.front.back().expect("never empty").header.number + 1;
        for number in after_front..tail.header.number {
            let sealed = sealed_records(&self.dir, number, tail.header.number)?;
            let middle = SealedCopy::read(&self.dir, number, sealed.expect("has a successor"))?;
            // Outside the front run no lease reaches a record, and reading
            // a copy changes nothing on disk.
            for (id, attempts, payload) in middle.unsettled() {
                if visit(id, attempts, false, payload).is_break() {
                    return Ok(());
                }
            }
        }
        let _ = visit_mapped(tail, &self.deliveries, &mut visit);
        Ok(())
    }

    /// The dead letters, oldest first (none if no item ever failed).
    pub fn dead_letter_list(&mut self) -> Result<Vec<DeadLetter>> {
        let Some(dead) = self.existing_dead_letters()? else {
            return Ok(Vec::new());
        };
        let mut letters = Vec::new();
        dead.visit_pending(|id, _, _, bytes| {
            letters.push(DeadLetter::decode(id, bytes));
            ControlFlow::Continue(())
        })?;
        letters.into_iter().collect()
    }

    /// Puts dead letter `id` back at the end of the queue (attempts start
    /// over); returns the item's new id.
    pub fn requeue_dead(&mut self, id: u64) -> Result<u64> {
        let dead = self
            .existing_dead_letters()?
            .ok_or(Error::NotPending { id })?;
        let mut payload = None;
        dead.visit_pending(|at, _, _, bytes| {
            if at == id {
                payload = Some(DeadLetter::decode(id, bytes).map(|letter| letter.payload));
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        let payload = payload.ok_or(Error::NotPending { id })??;
        // Appended before the letter is removed: a crash in between leaves
        // the item in both places, never in neither.
        let new_id = self.append_with(|out| {
            out.extend_from_slice(&payload);
            Ok(())
        })?;
        let safe = self.durability == Durability::Safe;
        let dead = self.dead_letters()?;
        dead.cancel(id)?;
        if safe {
            dead.sync()?;
        }
        Ok(new_id)
    }

    /// Removes every dead letter; returns how many there were.
    pub fn purge_dead(&mut self) -> Result<u64> {
        let safe = self.durability == Durability::Safe;
        let Some(dead) = self.existing_dead_letters()? else {
            return Ok(0);
        };
        let mut purged = 0;
        while dead.pop_with(|_, _| Ok(()))?.is_some() {
            purged += 1;
        }
        if safe {
            dead.sync()?;
        }
        Ok(purged)
    }

    /// When the nearest lease ends, if any is held.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.deliveries.next_expiry()
    }

    fn existing_dead_letters(&mut self) -> Result<Option<&mut Engine>> {
        if self.dead.is_none() && !self.dir.dead_letter_path().exists() {
            return Ok(None);
        }
        self.dead_letters().map(Some)
    }

    /// Ends every lease as if its time were up (a test seam).
    #[cfg(feature = "fault-injection")]
    pub fn expire_leases_now(&mut self) {
        self.deliveries.expire_all();
    }

    /// Records leased now (leases past their time end first).
    pub fn leased_count(&mut self) -> Result<usize> {
        self.expire_leases()?;
        Ok(self.deliveries.leased_count())
    }

    /// The next record no one holds, in order: handed-back records first
    /// (they are older), then records never delivered. Ends expired leases
    /// and retires a consumed head first.
    fn next_available(&mut self) -> Result<Option<u64>> {
        self.expire_leases()?;
        self.retire_settled_head(&mut OpenReport::default())?;
        if let Some(id) = self.deliveries.first_returned() {
            return Ok(Some(id));
        }
        loop {
            let id = self.deliveries.fresh_from(self.head().header.first_id);
            if id >= self.tail().end_id() {
                return Ok(None);
            }
            match self.find(id) {
                Some((segment, index)) => {
                    if !segment.is_settled(index) && !self.deliveries.is_leased(id) {
                        return Ok(Some(id));
                    }
                    self.deliveries.skip(id);
                }
                None => {
                    if !self.extend_front()? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn expire_leases(&mut self) -> Result<()> {
        if self.deliveries.leased_count() == 0 {
            return Ok(());
        }
        for (id, lease) in self.deliveries.expired(Instant::now()) {
            self.hand_back(id, lease.attempt)?;
        }
        Ok(())
    }

    fn hand_back(&mut self, id: u64, attempt: u16) -> Result<()> {
        if attempt >= self.max_attempts {
            self.deliveries.end_lease(id);
            let reason = format!("not acked after {attempt} attempts");
            return self.dead_letter(id, attempt, &reason);
        }
        self.deliveries.hand_back(id);
        Ok(())
    }

    fn current_lease(&self, id: u64, attempt: u16) -> Result<()> {
        match self.deliveries.lease(id) {
            Some(lease) if lease.attempt == attempt && lease.expires > Instant::now() => Ok(()),
            _ => Err(Error::LeaseLost { id, attempt }),
        }
    }

    /// Copies record `id` to the dead letters with `reason`, then settles it here.
    fn dead_letter(&mut self, id: u64, attempts: u16, reason: &str) -> Result<()> {
        let (segment, index) = self.find(id).expect("leased records are mapped");
        let letter = DeadLetter::encode(id, attempts, reason, segment.payload(index));
        // Written (and in Safe mode synced) before the marker: a crash in
        // between leaves the record in both places, never in neither.
        let durability = self.durability;
        let dead = self.dead_letters()?;
        dead.append_with(|out| {
            out.extend_from_slice(&letter);
            Ok(())
        })?;
        if durability == Durability::Safe {
            dead.sync()?;
        }
        self.mark(id, MarkerType::Dead)
    }

    /// The dead-letter queue, opened (or created) on first use.
    fn dead_letters(&mut self) -> Result<&mut Engine> {
        if self.dead.is_none() {
            let options = Options::new()
                .durability(self.durability)
                .max_item_bytes(crate::format::MAX_RECORD_PAYLOAD);
            let path = self.dir.dead_letter_path();
            let (dead, _) =
                Engine::open(&path, &options, DEAD_LETTER_CODEC, OpenMode::OpenOrCreate)?;
            self.dead = Some(Box::new(dead));
        }
        Ok(self.dead.as_mut().expect("just opened"))
    }

    /// Appends a `kind` marker for record `id` and keeps the count right.
    fn mark(&mut self, id: u64, kind: MarkerType) -> Result<()> {
        // Segments with markers stay in the front run (which open replays):
        // a record of the tail brings the tail, and any segment before it, in.
        while self.tail.as_ref().is_some_and(|t| id >= t.header.first_id) {
            self.extend_front()?;
        }
        let position = self
            .front
            .iter()
            .position(|s| id < s.end_id())
            .expect("marked records are in the front run");
        for earlier in self.front.range_mut(..position) {
            if !earlier.has_markers() {
                earlier.mark(0, MarkerType::Reached)?;
                self.written += 1;
            }
        }
        let index = (id - self.front[position].header.first_id) as usize;
        self.front[position].mark(index, kind)?;
        self.written += 1;
        if kind.settles() {
            self.len -= 1;
        }
        Ok(())
    }

    /// The mapped segment holding record `id`, and its index there.
    fn find(&self, id: u64) -> Option<(&Segment, usize)> {
        self.mapped_segments()
            .find(|s| s.header.first_id <= id && id < s.end_id())
            .map(|s| (s, (id - s.header.first_id) as usize))
    }

    /// Maps the segment after the front run (a middle one, or the tail);
    /// false when the front run already ends with the tail.
    fn extend_front(&mut self) -> Result<bool> {
        self.extend_front_into(&mut OpenReport::default())
    }

    /// [`extend_front`](Self::extend_front), noting cuts in `report`.
    fn extend_front_into(&mut self, report: &mut OpenReport) -> Result<bool> {
        let Some(tail) = &self.tail else {
            return Ok(false);
        };
        let number = self.front.back().expect("never empty").header.number + 1;
        let next = if tail.header.number == number {
            self.tail.take().expect("checked above")
        } else {
            let sealed = sealed_records(&self.dir, number, tail.header.number)?;
            // Sealed before its successor existed: no cut is allowed.
            let middle = Segment::open(&self.dir, number, sealed, report)?;
            // Counted as items at open, when only its header was read.
            self.len -= (middle.record_count() - middle.unsettled_count()) as u64;
            middle
        };
        self.front.push_back(next);
        Ok(true)
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
    /// durable: the mapped segments written since their last sync (a sealed
    /// segment was fsynced when it was sealed).
    pub fn sync_batch(&mut self) -> SyncBatch {
        let files = self
            .front
            .iter_mut()
            .chain(&mut self.tail)
            .filter_map(Segment::take_dirty_file)
            .collect();
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
        if let Some(dead) = self.dead.take() {
            dead.close()?;
        }
        self.sync()
    }

    /// Makes every write so far durable, under the lock.
    pub fn sync(&mut self) -> Result<()> {
        let result = self
            .front
            .iter_mut()
            .chain(&mut self.tail)
            .try_for_each(Segment::sync);
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

    fn head(&self) -> &Segment {
        &self.front[0]
    }

    fn tail(&self) -> &Segment {
        match &self.tail {
            Some(tail) => tail,
            None => self.front.back().expect("never empty"),
        }
    }

    fn tail_mut(&mut self) -> &mut Segment {
        match &mut self.tail {
            Some(tail) => tail,
            None => self.front.back_mut().expect("never empty"),
        }
    }

    /// Seals the tail and starts the next segment.
    fn roll_over(&mut self) -> Result<()> {
        // Fsynced in every mode, so a later segment never outlives an earlier
        // one's records after a power loss: what survives is a prefix.
        let sealed = self.tail_mut().sync();
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
        // An old tail outside the front run (no delivery reached it) becomes
        // a middle segment: unmapped.
        drop(self.tail.replace(next));
        if self.head().unsettled_count() == 0 {
            self.retire_settled_head(&mut OpenReport::default())?;
        }
        Ok(())
    }

    /// Deletes fully settled head segments that have a successor, noting
    /// them (and any cut in the segments it replays) in `report`.
    fn retire_settled_head(&mut self, report: &mut OpenReport) -> Result<()> {
        while self.head().unsettled_count() == 0 && (self.front.len() > 1 || self.tail.is_some()) {
            if self.front.len() == 1 {
                self.extend_front_into(report)?;
            }
            let done = self.front.pop_front().expect("two or more");
            report.deleted_segments.push(done.path().to_path_buf());
            let result = done.delete(&self.dir);
            self.refuse_on_error(result)?;
        }
        Ok(())
    }
}

/// Calls `visit` on each unsettled record of a mapped segment.
fn visit_mapped(
    segment: &Segment,
    deliveries: &Deliveries,
    visit: &mut impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    (0..segment.record_count())
        .filter(|&index| !segment.is_settled(index))
        .try_for_each(|index| {
            let id = segment.header.first_id + index as u64;
            let leased = deliveries.is_leased(id);
            visit(id, segment.attempts(index), leased, segment.payload(index))
        })
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
