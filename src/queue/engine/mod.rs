//! The untyped queue: segments of byte records, head and tail, counts and
//! durability. [`DQue`](crate::DQue) wraps it with a codec, a mutex and
//! blocking calls.

mod browse;
mod dead_letters;
mod leases;
mod open;
mod processes;
mod reasons;
mod verify;

pub(crate) use browse::PendingRecord;
pub(crate) use leases::{ById, Unleased};
pub(crate) use open::prepare_directory;
use processes::Reap;

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{CodecError, Error, Result};
use crate::log::commit::SyncBatch;
use crate::log::format::{
    record_frame_len, record_prefix, Config, MarkerType, SegmentHeader, RECORD_OVERHEAD,
};
use crate::log::layout::QueueDir;
use crate::log::lock::DirLock;
use crate::log::recovery::OpenReport;
use crate::log::segment::{Ahead, Segment};
use crate::options::Durability;
use crate::queue::delivery::Deliveries;

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
    /// Attempts an item gets: as stored in the config, or the default.
    max_attempts: u16,
    /// How long a lease holds an item: as stored, or the default.
    visibility_timeout: std::time::Duration,
    /// The most items an enqueue may leave in the queue.
    max_items: Option<u64>,
    /// Whether a damaged tail may be cut (see `Options::cut_damaged_tail`).
    cut_damaged_tail: bool,
    /// Why the last failed attempt of a record failed (a nack's reason, a
    /// decode error), for its dead letter: this handle's, in memory; a
    /// nack's is also in `dque.reasons`, which every handle reads.
    reasons: std::collections::HashMap<u64, String>,
    /// Bytes of `dque.reasons` the last compaction by this handle kept.
    reasons_kept: u64,
    /// The dead-letter queue in `dead/`, once used.
    dead: Option<Box<Engine>>,
    len: u64,
    /// Set when a write or fsync failed: no later write can be trusted.
    refused: Option<Arc<Error>>,
    /// An error met after a call had its effect (a batch that had taken
    /// items, a head retired after its last ack): the call returned `Ok`,
    /// and the next write returns this.
    pub(super) deferred: Option<Error>,
    /// Frames written since open; group commit's tickets.
    written: u64,
    /// Reused buffer where each record frame is assembled before its one copy.
    scratch: Vec<u8>,
    /// Reused list of (start, payload length) of the frames in `scratch`.
    spans: Vec<(usize, usize)>,
    /// Exclusive mode: the queue's lock.
    _lock: Option<DirLock>,
    /// Whether the queue is opened in shared mode (its dead letters too).
    shared: bool,
    /// Shared mode, once open: segments are opened beside other processes,
    /// without judging or cutting their ends (see `Segment::attach`).
    attach_segments: bool,
    /// Shared mode: the control file and this handle's slot.
    link: Option<crate::queue::processes::ProcessLink>,
    /// Shared mode: whether this handle holds the cross-process mutex now.
    held: bool,
    /// Shared mode: `written` when the mutex was taken, to tell whether
    /// the call wrote anything.
    written_at_enter: u64,
    /// Shared mode: the shared ticket of this handle's last frame.
    shared_ticket: u64,
    /// Shared mode: when this handle last looked for dead lease holders.
    last_reap: Option<Instant>,
    /// When this handle opened the queue (for the workers view).
    opened_at: std::time::SystemTime,
    /// The worker name this handle leases under, if given (for the
    /// workers view; in shared mode also in its slot, for the others).
    worker_name: Option<String>,
}

impl Engine {
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The item count as of now, written nothing: items whose last allowed
    /// lease ran out are left out (the next write moves them to the dead
    /// letters).
    pub fn len_now(&self) -> u64 {
        // No lease, no clock read (a lease of jobs looks at lanes' lengths).
        if self.deliveries.leased_count() == 0 {
            return self.len;
        }
        let doomed = self
            .deliveries
            .doomed_count(Instant::now(), self.max_attempts);
        self.len - doomed as u64
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Attempts an item gets (as stored with the queue, or the default).
    pub fn max_attempts(&self) -> u16 {
        self.max_attempts
    }

    /// How long a lease holds an item (as stored with the queue, or the default).
    pub fn visibility_timeout(&self) -> std::time::Duration {
        self.visibility_timeout
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
        if let Some(max) = self.max_items {
            // Leases that ran out on their last attempt leave the count now.
            self.expire_leases()?;
            if self.len + count as u64 > max {
                return Err(Error::Full {
                    len: self.len,
                    adding: count as u64,
                    max,
                });
            }
        }
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
        let result = encoded.and_then(|()| self.append_frames(&frames, &spans));
        self.scratch = frames;
        self.spans = spans;
        result
    }

    /// Writes encoded frames (`spans`: each one's start in `frames` and
    /// payload length) into the tail, as many at once as the tail takes,
    /// rolling over between; returns the last one's id.
    fn append_frames(&mut self, frames: &[u8], spans: &[(usize, usize)]) -> Result<u64> {
        let mut last_id = None;
        if let Err(e) = self.append_runs(frames, spans, &mut last_id) {
            // Items of this call are in the queue already (an earlier run,
            // in a segment since sealed): the call cannot be undone, so no
            // write may follow it unnoticed, least of all a retry that would
            // add those items twice.
            if last_id.is_some() {
                self.refuse(&e);
            }
            return Err(e);
        }
        // Made only when needed: it allocates its reason, and this runs
        // once per item.
        last_id.ok_or_else(|| Error::InvalidOption {
            name: "batch",
            reason: "a batch needs at least one item".into(),
        })
    }

    /// The runs of [`append_frames`](Self::append_frames), each written
    /// whole or not at all; `last_id` is the last id written so far.
    fn append_runs(
        &mut self,
        frames: &[u8],
        spans: &[(usize, usize)],
        last_id: &mut Option<u64>,
    ) -> Result<()> {
        let frame_end = |i: usize| spans.get(i + 1).map_or(frames.len(), |&(next, _)| next);
        let ahead = self.ahead();
        let mut next = 0;
        while next < spans.len() {
            let lens = (next..spans.len()).map(|i| frame_end(i) - spans[i].0);
            let mut fit = self.tail().fitting(lens.clone());
            if fit == 0 {
                self.roll_over()?;
                fit = self.tail().fitting(lens).max(1);
            }
            let run = &spans[next..next + fit];
            let (start, end) = (run[0].0, frame_end(next + fit - 1));
            let tail = self.tail_mut();
            let first = tail.append_records(
                &frames[start..end],
                run.iter()
                    .map(|&(at, payload_len)| (at - start, payload_len)),
                ahead,
            )?;
            let (last, number) = (
                tail.header.first_id + (first + fit - 1) as u64,
                tail.header.number,
            );
            *last_id = Some(last);
            self.wrote(number);
            self.len += fit as u64;
            next += fit;
        }
        Ok(())
    }

    /// Calls `read` on the next available record's id and payload. A read:
    /// it writes nothing and maps nothing (segments past the mapped ones are
    /// read into memory, as `visit_pending` does), seeing expired leases as
    /// the next write will settle them.
    pub fn peek_with<R>(
        &mut self,
        mut read: impl FnMut(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        let now = Instant::now();
        if let Some(id) = self
            .deliveries
            .first_available_again(now, self.max_attempts)
        {
            let (segment, index) = self.find(id).expect("delivered records are mapped");
            match read(id, segment.payload(index)) {
                // Passed over as the next lease or dequeue would pass it.
                Err(Error::Decode { .. }) => {}
                found => return found.map(Some),
            }
        }
        // Every record before the cursor is settled, leased or handed back.
        let from = self.deliveries.fresh();
        let mut found = None;
        self.visit_pending_from(from, false, |id, _, leased, payload| {
            if leased {
                return ControlFlow::Continue(());
            }
            match read(id, payload) {
                Err(Error::Decode { .. }) => ControlFlow::Continue(()),
                other => {
                    found = Some(other);
                    ControlFlow::Break(())
                }
            }
        })?;
        found.transpose()
    }

    /// Like [`peek_with`](Self::peek_with), then settles the record if `read`
    /// succeeded, so a record that does not decode is never lost.
    ///
    /// A record that does not decode (`read` fails with `Decode`) goes to
    /// the dead letters at once, its bytes as they were and the decode
    /// error as the reason, and the call goes on with the next record.
    pub fn pop_with<R>(
        &mut self,
        mut read: impl FnMut(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        self.check_writable()?;
        loop {
            let Some(id) = self.next_available()? else {
                return Ok(None);
            };
            let (segment, index) = self.find(id).expect("available records are mapped");
            let attempts = segment.attempts(index);
            let item = match read(id, segment.payload(index)) {
                Ok(item) => item,
                Err(Error::Decode { source, .. }) => {
                    let reason = format!("does not decode as the item type: {source}");
                    self.dead_letter(id, attempts, &reason)?;
                    self.deliveries.take(id);
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.mark(id, MarkerType::Ack)?;
            self.deliveries.take(id);
            return Ok(Some(item));
        }
    }

    /// Pops up to `max` records with `read`. An error after the first one
    /// ends the batch, which returns what it took; the error (which had no
    /// effect) is returned by the next write, or, if it is a record that
    /// does not decode, by the next call that reaches that record.
    pub fn pop_many<R>(
        &mut self,
        max: usize,
        mut read: impl FnMut(u64, &[u8]) -> Result<R>,
    ) -> Result<Vec<R>> {
        self.take_many(max, |engine| engine.pop_with(&mut read))
    }

    /// Runs `take` up to `max` times, until it finds nothing: a batch. An
    /// error after the first success ends the batch, which keeps what it
    /// took; the error is deferred to the next write, except a record that
    /// does not decode, which stays and fails the next call that reaches it.
    pub(super) fn take_many<R>(
        &mut self,
        max: usize,
        mut take: impl FnMut(&mut Self) -> Result<Option<R>>,
    ) -> Result<Vec<R>> {
        let mut taken = Vec::with_capacity(max.min(self.len as usize));
        while taken.len() < max {
            match take(self) {
                Ok(Some(item)) => taken.push(item),
                Ok(None) => break,
                Err(e) if taken.is_empty() => return Err(e),
                Err(Error::Decode { .. }) => break,
                Err(e) => {
                    self.defer(e);
                    break;
                }
            }
        }
        Ok(taken)
    }

    /// Keeps `error`, met after a call had its effect, for the next write.
    pub(crate) fn defer(&mut self, error: Error) {
        self.deferred.get_or_insert(error);
    }

    /// The next record no one holds, in order: handed-back records first
    /// (they are older), then records never delivered. Ends expired leases
    /// and retires a consumed head first (the callers write anyway).
    fn next_available(&mut self) -> Result<Option<u64>> {
        self.reap_dead_workers(Reap::Sometimes)?;
        let found = self.next_available_here()?;
        // Shared: before saying there is nothing, make sure no lease is held
        // by a process that died (looked at least once per such call).
        if found.is_none() && self.reap_dead_workers(Reap::BeforeNone)? > 0 {
            return self.next_available_here();
        }
        Ok(found)
    }

    fn next_available_here(&mut self) -> Result<Option<u64>> {
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
        let ahead = self.ahead();
        for at in 0..position {
            if !self.front[at].has_markers() {
                self.front[at].mark(0, MarkerType::Reached, ahead)?;
                self.wrote(self.front[at].header.number);
            }
        }
        let index = (id - self.front[position].header.first_id) as usize;
        self.front[position].mark(index, kind, ahead)?;
        self.wrote(self.front[position].header.number);
        if kind.settles() {
            if !self.reasons.is_empty() {
                self.reasons.remove(&id);
            }
            // A head this settled is retired by the next call that takes
            // an item (`next_available`), before that call's effect: a
            // failed delete then fails a call that did nothing.
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

    /// The item count from the mapped segments (exact: markers are only
    /// ever in the front run and the tail).
    fn counted_len(&self) -> u64 {
        let settled: usize = self
            .mapped_segments()
            .map(|s| s.record_count() - s.unsettled_count())
            .sum();
        self.tail().end_id() - self.head().header.first_id - settled as u64
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
            let middle = if self.attach_segments {
                Segment::attach(&self.dir, number, sealed)?
            } else {
                Segment::open(&self.dir, number, sealed, self.cut_damaged_tail, report)?
            };
            // Counted as items at open, when only its header was read. (In
            // shared mode the count may be older than the markers others
            // wrote since; catching up counts it again from the segments.)
            let settled = (middle.record_count() - middle.unsettled_count()) as u64;
            debug_assert!(
                self.link.is_some() || self.len >= settled,
                "items miscounted"
            );
            self.len = self.len.saturating_sub(settled);
            middle
        };
        self.front.push_back(next);
        Ok(true)
    }

    /// What each write prepares for the next ones: an fsync follows every
    /// call only in `Safe`.
    fn ahead(&self) -> Ahead {
        match self.durability {
            Durability::Safe => Ahead::WriteZeros,
            Durability::Turbo | Durability::Periodic(_) => Ahead::FaultIn,
        }
    }

    /// The ticket a caller who just wrote must see durable before it
    /// returns: `None` unless the durability is `Safe`.
    pub fn ticket_to_wait(&self) -> Option<u64> {
        (self.durability == Durability::Safe).then(|| match &self.link {
            // Shared: the ticket of this handle's last frame among every
            // process's (their group commit is shared too).
            Some(_) => self.shared_ticket,
            None => self.written(),
        })
    }

    /// Counts a frame written into segment `number`: a ticket for group
    /// commit (in shared mode, one of every process's, and the segment is
    /// marked for the next shared fsync).
    #[inline]
    fn wrote(&mut self, number: u64) {
        self.written += 1;
        if let Some(link) = &self.link {
            let is_tail = number == self.tail().header.number;
            self.shared_ticket = crate::queue::processes::note_write(link.state(), number, is_tail);
        }
    }

    /// Tickets written so far: every write counts one, the dead letters'
    /// too (a purge writes only there, and `sync()` must still cover it).
    pub fn written(&self) -> u64 {
        self.written + self.dead.as_ref().map_or(0, |dead| dead.written())
    }

    /// What a group-commit leader must sync to make every write so far
    /// durable: the mapped segments written since their last sync (a sealed
    /// segment was fsynced when it was sealed).
    pub fn sync_batch(&mut self) -> SyncBatch {
        let mut files: Vec<_> = self
            .front
            .iter_mut()
            .chain(&mut self.tail)
            .filter_map(Segment::take_dirty_file)
            .collect();
        if let Some(dead) = &mut self.dead {
            files.extend(dead.sync_batch().files);
        }
        SyncBatch {
            files,
            ticket: self.written(),
        }
    }

    /// Stops all writes: a sync failed, so nothing after it is known durable.
    pub fn refuse(&mut self, cause: &Error) {
        self.refused.get_or_insert_with(|| cause.refusal_cause());
    }

    /// Retires a consumed head segment, so that a clean shutdown leaves
    /// nothing for the next open to mend, and makes every write durable.
    pub fn close(mut self) -> Result<()> {
        // Shared: under the mutex, and the slot is freed; a failure to take
        // it leaves the slot to be freed as a dead one's.
        let left = self.enter(true).and_then(|()| {
            // Best effort: a damaged next segment is reported by the dequeue
            // that reaches it, and a segment left here is deleted on open.
            let _ = self.retire_settled_head(&mut OpenReport::default());
            let left = self.leave_slot();
            self.leave();
            left
        });
        let dead = self.dead.take().map_or(Ok(()), |dead| dead.close());
        let main = self.sync();
        // After a failed sync, a later one proves nothing: say so.
        dead.and(main).and(left).and_then(|()| self.check_refused())
    }

    /// Makes every write so far durable, the dead letters' too, under the lock.
    pub fn sync(&mut self) -> Result<()> {
        let mut result = self
            .front
            .iter_mut()
            .chain(&mut self.tail)
            .try_for_each(Segment::sync);
        if let (Ok(()), Some(dead)) = (&result, &mut self.dead) {
            result = dead.sync();
        }
        self.refuse_on_sync_error(result)
    }

    fn refuse_on_error(&mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            self.refuse(e);
        }
        result
    }

    /// Stops all writes after a failed fsync: in shared mode, every
    /// process's (they share the page cache whose state is now unknown).
    pub fn refuse_after_sync(&mut self, cause: &Error) {
        self.refuse_everywhere();
        self.refuse(cause);
    }

    fn refuse_on_sync_error(&mut self, result: Result<()>) -> Result<()> {
        if let Err(e) = &result {
            self.refuse_after_sync(e);
        }
        result
    }

    /// Before a write: the error a call that had its effect left for the
    /// next one (once), then the refusal after a failed sync.
    pub(crate) fn check_writable(&mut self) -> Result<()> {
        if let Some(deferred) = self.deferred.take() {
            return Err(deferred);
        }
        self.check_refused()
    }

    /// `WritesRefused` once a write or sync failed. Calls on a lease guard
    /// check only this: a deferred error belongs to the next dequeue,
    /// lease or enqueue, not to a guard, whose call spends it.
    pub(crate) fn check_refused(&self) -> Result<()> {
        match &self.refused {
            Some(cause) => Err(Error::WritesRefused {
                cause: Arc::clone(cause),
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
        // At the end of u64 (segment numbers or ids) the next header would
        // be one the format refuses, and the queue would no longer open: it
        // is never made (checked before any write).
        let header = new_header(
            &self.config,
            self.tail().header.number.saturating_add(1),
            self.tail().end_id(),
        );
        if let Err(crate::log::format::HeaderError::Invalid(why)) =
            SegmentHeader::decode(&header.encode())
        {
            return Err(Error::corrupted(
                self.tail().path(),
                0,
                format!("the queue is at the end of its numbers, no segment can follow: {why}"),
            ));
        }
        // Fsynced in every mode, so a later segment never outlives an earlier
        // one's records after a power loss: what survives is a prefix. No
        // page of it is faulted in from here on (see `log::mapping`).
        let sealed = self.tail_mut().seal();
        self.refuse_on_sync_error(sealed)?;
        let created = Segment::create(&self.dir, header);
        let next = match created {
            Ok(next) => next,
            Err(e) => {
                self.refuse(&e);
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
