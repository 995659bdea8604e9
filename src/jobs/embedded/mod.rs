//! The Jobs API over queue directories: [`EmbeddedJobs`].

#[cfg(feature = "tokio")]
mod async_jobs;
mod batch;
mod envelope;
mod held;
mod history;
mod ids;
mod info;
mod lanes;
mod limits;
mod moves;
mod paging;
mod promote;
mod recurring;
mod room;
mod schedule;
mod search;
mod signal;
mod stats_file;
mod unique;
mod walk;

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

#[cfg(feature = "tokio")]
pub use async_jobs::AsyncEmbeddedJobs;
pub use envelope::{job_from_record, StoredJob, JOB_CODEC_ID};
pub(crate) use lanes::lane_name;
pub use lanes::MAX_LANES;
pub use limits::stored_limits;
pub use recurring::stored_schedules;
pub(crate) use stats_file::read_days;

use self::batch::Scanned;
use self::envelope::{Envelope, JobRecords};
use self::ids::{Ids, IdsLock, Location, Part};
use self::lanes::{make_part, plain_refusal, Lanes};
use self::moves::{PendingMoves, SETTLE_EVERY};
use self::schedule::Schedule;
use self::signal::Signal;
use self::stats_file::StatsBook;
use self::unique::Held;
use super::clock::{from_unix_ms, unix_ms, Clock, SystemClock};
use super::job::{
    new_job_id, DeadJob, Enqueued, Job, JobLease, Nacked, NewJob, Retry, RunAt, WaitState, Waiting,
};
use super::recurring::{DueCache, Schedule as RecurringSchedule, ScheduleInfo};
use super::stats::{Counts, QueueStats};
use super::unique::{Duplicate, Hold, Settled};
use super::{Backoff, JobQueue};
use crate::codec::{Codec, Raw};
use crate::error::{Error, Result};
use crate::options::Options;
use crate::queue::dque::RawQueue;
use crate::queue::engine::ById;
use crate::queue::processes::MAX_WORKER_NAME;

/// Segment size of lanes and the schedule when the options name none:
/// smaller than a root queue's, as a queue may have many lanes.
const PART_SEGMENT_BYTES: u32 = 8 << 20;

/// How often a blocked lease looks again at the lanes on its own (a lease
/// that ended in another lane, say, wakes no one).
const LEASE_POLL: Duration = Duration::from_millis(100);

/// Options of an [`EmbeddedJobs`]: the queue options of its lanes, and
/// what only jobs have.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::{Backoff, EmbeddedJobs, JobOptions};
/// use dque::{Durability, Options};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue: EmbeddedJobs = JobOptions::new()
///     .queue(
///         Options::new()
///             .durability(Durability::Safe)
///             .shared(true)
///             .visibility_timeout(Duration::from_secs(60))
///             .max_attempts(3),
///     )
///     .backoff(Backoff::new(Duration::from_secs(2), 3.0, Duration::from_secs(600)))
///     .open_or_create(dir.path().join("mail"))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct JobOptions {
    queue: Options,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    /// Stored with the queue when given (`jobs/history/keep`).
    keep_completed: Option<super::KeepCompleted>,
    /// The name this handle's leases show (`JobQueue::leases`).
    worker: Option<String>,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            queue: Options::new(),
            backoff: Backoff::default(),
            clock: Arc::new(SystemClock),
            keep_completed: None,
            worker: None,
        }
    }
}

impl JobOptions {
    /// Default options: those of [`Options::new`], [`Backoff::default`],
    /// the system clock.
    pub fn new() -> Self {
        JobOptions::default()
    }

    /// The options of every queue the jobs are kept in: durability, shared
    /// mode, segment sizes; the lease time is
    /// [`Options::visibility_timeout`], and a job's attempts
    /// [`Options::max_attempts`], both stored with the queue as those
    /// options say, so that every handle (and process) uses the same.
    #[must_use]
    pub fn queue(mut self, options: Options) -> Self {
        self.queue = options;
        self
    }

    /// How long a nacked job waits ([`Retry::Backoff`]); default [`Backoff::default`].
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Where due times and statistics read the time (default the system
    /// clock; a [`ManualClock`](super::ManualClock) in tests).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long completed jobs are kept for [`JobQueue::job_info`]
    /// (`jobs/history/`, FORMAT.md "Job history"): stored with the queue,
    /// so every handle and process keeps the same; when not given, the
    /// stored setting holds, else [`KeepCompleted::DEFAULT`](super::KeepCompleted::DEFAULT)
    /// (a day, at most 50,000). [`KeepCompleted::NONE`](super::KeepCompleted::NONE)
    /// keeps none (an ack then costs nothing more).
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::{JobOptions, JobQueue, KeepCompleted, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = JobOptions::new()
    ///     .keep_completed(KeepCompleted::new(Duration::from_secs(3600), 1000))
    ///     .create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("a").id("a"))?;
    /// queue.ack(queue.lease()?.expect("a job"))?;
    /// assert!(queue.job_info("a")?.is_some());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn keep_completed(mut self, keep: super::KeepCompleted) -> Self {
        self.keep_completed = Some(keep);
        self
    }

    /// The worker name this handle leases under, which
    /// [`JobQueue::leases`] shows for its leases (the dashboard's workers
    /// page), in shared mode to every process; without one a lease shows
    /// the process holding it, `host:pid`. An open refuses a name longer
    /// than 188 bytes (`InvalidOption`).
    ///
    /// ```
    /// use dque::jobs::{JobOptions, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = JobOptions::new().worker("mailer-1").create(dir.path().join("q"))?;
    /// queue.enqueue(NewJob::new("hello"))?;
    /// let lease = queue.lease()?.expect("a job");
    /// assert_eq!(queue.leases(10)?[0].worker.as_deref(), Some("mailer-1"));
    /// # queue.ack(lease)?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn worker(mut self, name: impl Into<String>) -> Self {
        self.worker = Some(name.into());
        self
    }

    /// The worker name given (`""`: none); `InvalidOption` if a slot of
    /// the control file cannot hold it.
    fn worker_name(&self) -> Result<&str> {
        let worker = self.worker.as_deref().unwrap_or("");
        if worker.len() > MAX_WORKER_NAME {
            return Err(Error::InvalidOption {
                name: "worker",
                reason: format!(
                    "a worker name of {} bytes; the embedded queue keeps at most \
                     {MAX_WORKER_NAME}: give a shorter one",
                    worker.len()
                ),
            });
        }
        Ok(worker)
    }

    /// Makes a new jobs queue at `path`.
    ///
    /// # Errors
    ///
    /// As [`DQue::create`](crate::DQue::create); `InvalidOption` for a
    /// [`worker`](Self::worker) name too long (nothing is made).
    pub fn create(&self, path: impl AsRef<Path>) -> Result<EmbeddedJobs> {
        let path = path.as_ref();
        crate::jobs::queue_name::check_dir_name(path)?;
        // Before anything is made: an error has no effect.
        self.worker_name()?;
        self.queue
            .create::<Vec<u8>, JobRecords>(path)
            .and_then(|made| made.close())?;
        EmbeddedJobs::start(path, self)
    }

    /// Opens the queue at `path`: a jobs queue, or a plain FIFO queue of
    /// bodies (see [`EmbeddedJobs`]).
    ///
    /// # Errors
    ///
    /// As [`DQue::open`](crate::DQue::open); `CodecMismatch` for a lane
    /// that does not hold jobs; `InvalidOption` for a
    /// [`worker`](Self::worker) name too long; `UnsupportedVersion` (for
    /// its `dque.shm`) in shared mode while processes of a dque with
    /// another control-file layout share the queue.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<EmbeddedJobs> {
        EmbeddedJobs::start(path.as_ref(), self)
    }

    /// Opens the queue at `path`, made as a jobs queue if there is none.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open) and [`create`](Self::create).
    pub fn open_or_create(&self, path: impl AsRef<Path>) -> Result<EmbeddedJobs> {
        let path = path.as_ref();
        match self.create(path) {
            Err(Error::AlreadyExists { .. }) => self.open(path),
            other => other,
        }
    }
}

/// Which handles exist, so a lease cannot be settled through another one.
static HANDLES: AtomicUsize = AtomicUsize::new(1);

/// A job queue in a directory: the [`JobQueue`] contract, embedded.
/// Shared by threads (it is `Sync`), and by processes with
/// [`Options::shared`].
///
/// A jobs queue is a queue directory whose records are job envelopes
/// (codec [`JOB_CODEC_ID`]): the directory itself is the lane of
/// priority 0, so `dque verify`, `dump`, `repair` and `salvage` work on it
/// as on any queue. Beside the segments, `jobs/` holds the rest:
///
/// ```text
/// QUEUE/               the lane of priority 0 (segments, config, dead/)
/// QUEUE/jobs/lanes/+0000000005/   the lane of priority 5, made on first use
/// QUEUE/jobs/scheduled/           jobs waiting for their time
/// QUEUE/jobs/ids/                 one file per caller-chosen id
/// QUEUE/jobs/stats/days           the statistics
/// ```
///
/// Every lane and the schedule is a queue with the handle's options
/// (durability, shared mode, lease time), so each job operation keeps the
/// guarantees of the queue it writes to. A job that moves (falls due, is
/// retried later, changes priority) is written to its new place before it
/// leaves the old one: a crash in between runs it twice at worst, never
/// loses it.
///
/// A plain FIFO queue directory (records that are bodies only) opens too:
/// it serves bodies as jobs of priority 0 with the record id as job id,
/// and refuses what it cannot keep (priorities, delays, headers, ids).
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.enqueue(NewJob::new("a").id("order-1"))?;
/// assert!(!queue.enqueue(NewJob::new("a").id("order-1"))?.is_added());
/// let lease = queue.lease()?.expect("a job");
/// assert_eq!((lease.id.as_str(), lease.attempt), ("order-1", 1));
/// queue.ack(lease)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EmbeddedJobs {
    name: String,
    path: PathBuf,
    handle: usize,
    lanes: Lanes,
    /// `None` for a plain FIFO queue, which holds neither.
    schedule: Option<Schedule>,
    ids: Option<Ids>,
    stats: Option<Mutex<StatsBook>>,
    /// Completed jobs kept; `None` when none are (or a plain queue).
    history: Option<history::History>,
    max_attempts: u32,
    lease_time: Duration,
    /// Safe durability: every write is durable when its call returns.
    safe: bool,
    /// Jobs fallen due whose schedule records wait for their lanes' sync
    /// (Turbo and Periodic, exclusive mode; see `moves`).
    moves: PendingMoves,
    /// Whether moves wait across calls, and at most how long.
    defer_moves: Option<Duration>,
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    signal: Signal,
    /// Set by `close`: every later call fails with `Closed`, and blocked
    /// leases wake to say so.
    closed: AtomicBool,
    /// Pause and concurrency limits (`None` for a plain FIFO queue).
    limits: Option<limits::Limits>,
    /// When the schedules (recurring jobs) may next be due.
    due_schedules: DueCache,
}

impl EmbeddedJobs {
    /// Makes a new jobs queue at `path` with default [`JobOptions`].
    ///
    /// # Errors
    ///
    /// As [`JobOptions::create`].
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        JobOptions::new().create(path)
    }

    /// Opens the queue at `path` with default [`JobOptions`].
    ///
    /// # Errors
    ///
    /// As [`JobOptions::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        JobOptions::new().open(path)
    }

    /// The queue directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes everything written so far durable, in every part of the
    /// queue (as [`DQue::sync`](crate::DQue::sync)
    /// does for one queue).
    ///
    /// # Errors
    ///
    /// The first error of a part's sync (`Io`, `WritesRefused`, `Closed`).
    pub fn sync(&self) -> Result<()> {
        self.settle_moves(true)?;
        for (_, lane) in self.lanes.known() {
            lane.sync()?;
        }
        if let Some(history) = &self.history {
            history.flush()?;
        }
        // Caller ids live in their jobs' records: nothing else to sync.
        match &self.schedule {
            Some(schedule) => schedule.queue.sync(),
            None => Ok(()),
        }
    }

    /// Whether this is a plain FIFO queue of bodies (no priorities,
    /// delays, headers or ids).
    pub fn is_plain(&self) -> bool {
        self.schedule.is_none()
    }

    fn start(path: &Path, options: &JobOptions) -> Result<Self> {
        crate::jobs::queue_name::check_dir_name(path)?;
        let worker = options.worker_name()?;
        // Checked before the queue is opened (and, shared, joined): a
        // program's typed items are not job bodies a worker can run.
        crate::queue::engine::prepare_directory(path, crate::queue::engine::OpenMode::Open)?;
        let codec_id = crate::log::layout::QueueDir::new(path.to_path_buf())
            .read_config()?
            .codec_id;
        if codec_id != JOB_CODEC_ID && codec_id != <Raw as Codec<Vec<u8>>>::ID {
            return Err(Error::CodecMismatch {
                path: path.join(crate::log::layout::CONFIG_FILE),
                found: codec_id,
                expected: JOB_CODEC_ID,
            });
        }
        let root = RawQueue::open_encoded_with(path, &options.queue)?;
        root.set_worker_name(worker)?;
        // The queue's stored settings, which every handle shares (so two
        // processes agree on when a job has had its attempts).
        let (max_attempts, lease_time) = (root.max_attempts(), root.visibility_timeout());
        let plain = root.codec_id() != JOB_CODEC_ID;
        let signal = Signal::new(root.waker());
        let root = Arc::new(root);
        // Lanes and the schedule settle their own leases: the jobs layer
        // counts a job's attempts across the records it moves through.
        let mut parts = options.queue.max_attempts(u16::MAX);
        if parts.segment_bytes.is_none() {
            parts = parts.segment_bytes(PART_SEGMENT_BYTES);
        }
        let jobs = path.join("jobs");
        let limits = match plain {
            true => None,
            false => Some(limits::Limits::open(&jobs)?),
        };
        let (schedule, ids, stats, lanes_dir, history) = if plain {
            (None, None, None, None, None)
        } else {
            let make = |dir: PathBuf| {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| Error::io(&dir, e))
                    .map(|()| dir)
            };
            let lanes_dir = make(jobs.join("lanes"))?;
            let ids_dir = make(jobs.join("ids"))?;
            let stats_dir = make(jobs.join("stats"))?;
            let schedule = Schedule::new(
                make_part(&jobs.join("scheduled"), &parts)?,
                options.queue.shared,
            );
            let history_dir = jobs.join("history");
            let stored = history::stored_keep(&history_dir)?;
            let keep = match options.keep_completed {
                Some(keep) if stored != Some(keep) => {
                    history::store_keep(&history_dir, keep)?;
                    keep
                }
                Some(keep) => keep,
                None => stored.unwrap_or_default(),
            };
            let history = match keep.is_none() {
                true => None,
                false => {
                    let history = history::History::new(make(history_dir)?, keep);
                    Some(match worker.is_empty() {
                        true => history,
                        false => history.named(worker),
                    })
                }
            };
            (
                Some(schedule),
                Some(Ids::new(ids_dir, options.queue.shared)),
                Some(Mutex::new(StatsBook::new(stats_dir))),
                Some(lanes_dir),
                history,
            )
        };
        // Shared, another process may take a schedule record whose lease
        // ran out while its move waited: moves settle batch by batch.
        let defer_moves = match options.queue.durability {
            _ if options.queue.shared || plain => None,
            crate::Durability::Safe => None,
            crate::Durability::Turbo => Some(SETTLE_EVERY),
            crate::Durability::Periodic(every) => Some(every.min(SETTLE_EVERY)),
        }
        .map(|every| every.min(lease_time / 4));
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(EmbeddedJobs {
            name,
            path: path.to_path_buf(),
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
            lanes: Lanes::new(root, lanes_dir, parts, worker),
            schedule,
            ids,
            stats,
            history,
            max_attempts: u32::from(max_attempts.max(1)),
            lease_time,
            safe: options.queue.durability == crate::Durability::Safe,
            moves: PendingMoves::default(),
            defer_moves,
            backoff: options.backoff,
            clock: Arc::clone(&options.clock),
            signal,
            closed: AtomicBool::new(false),
            limits,
            due_schedules: DueCache::default(),
        })
    }

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Adds to today's statistics (nothing for a plain queue).
    fn record_stats(&self, now_ms: u64, add: impl FnOnce(&mut super::DayStats)) {
        if let Some(stats) = &self.stats {
            let mut book = stats.lock();
            add(book.day(now_ms));
            // Statistics never fail a job call; a write that fails is
            // tried again at the next flush.
            let _ = book.flush_if_due(now_ms);
        }
    }

    /// Makes the job just written at `location` durable before its old
    /// record is ended: page writeback keeps no order between files, so
    /// in Turbo or Periodic mode a power loss could otherwise keep the end
    /// of the old record and lose the new one. (Safe: durable already.)
    fn durable_before_moving_on(&self, location: Location) -> Result<()> {
        if self.safe {
            return Ok(());
        }
        match self.part(location)? {
            Some(queue) => queue.sync(),
            None => Ok(()),
        }
    }

    /// The ids' lock if `needed` (a job with a caller id is written) and
    /// this queue keeps ids, with its index made current.
    fn ids_lock_if(&self, needed: bool) -> Result<Option<IdsLock<'_>>> {
        match (&self.ids, needed) {
            (Some(ids), true) => {
                let mut locked = ids.lock()?;
                locked.refresh(|| self.parts())?;
                Ok(Some(locked))
            }
            _ => Ok(None),
        }
    }

    /// Every queue that holds job records: the lanes (listed again, even
    /// if the lanes directory's mtime has not moved), then the schedule.
    fn parts(&self) -> Result<Vec<(Part, Arc<RawQueue>)>> {
        let mut parts: Vec<(Part, Arc<RawQueue>)> = self
            .lanes
            .listed()?
            .into_iter()
            .map(|(priority, lane)| (Part::Lane(priority), lane))
            .collect();
        if let Some(schedule) = &self.schedule {
            parts.push((Part::Schedule, Arc::clone(&schedule.queue)));
        }
        Ok(parts)
    }

    /// Notes the record of a job with a caller id just written at
    /// `location`, under the lock taken before it was written.
    fn note(&self, locked: Option<&mut IdsLock<'_>>, job: &Job, location: Location) {
        if let (true, Some(locked)) = (job.caller_id, locked) {
            locked.add(&job.id, location);
        }
    }

    /// Takes a record noted by [`note`](Self::note) out again: its write
    /// was undone.
    fn unnote(&self, locked: Option<&mut IdsLock<'_>>, job: &Job, location: Location) {
        if let (true, Some(locked)) = (job.caller_id, locked) {
            locked.remove(&job.id, location);
        }
    }

    /// Ends a leased job's record with `end`; a job whose uniqueness
    /// period covers `state` and runs on first writes that its id stays
    /// held (under the ids' lock, durable in Safe mode), so no enqueue
    /// sees the id free in between. `end` failing frees it again.
    fn settle_holding(
        &self,
        job: &Job,
        hold: Option<Hold>,
        state: Settled,
        end: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // The clock only for a hold (most jobs have none: no read per ack).
        let Some(hold) = hold.filter(|_| job.caller_id) else {
            return end();
        };
        let now_ms = unix_ms(self.now());
        if !hold.holds(state, now_ms) {
            return end();
        }
        let Some(mut locked) = self.ids_lock_if(true)? else {
            return end();
        };
        let held = Held {
            until_ms: hold.until_ms,
            state,
        };
        locked.note_held(&job.id, Some(held), self.safe, now_ms)?;
        if let Err(e) = end() {
            let _ = locked.note_held(&job.id, None, self.safe, now_ms);
            return Err(e);
        }
        Ok(())
    }

    /// Forgets the record of a job with a caller id at `location`, just
    /// settled for good by this handle.
    fn forget(&self, job: &Job, location: Location) {
        if let (true, Some(ids)) = (job.caller_id, &self.ids) {
            ids.forget(&job.id, location);
        }
    }

    /// Under the ids' lock (taken if the job has a caller id), before the
    /// job whose record is at `source` is written elsewhere: true if a
    /// live record of it elsewhere makes `source` a leftover of a move a
    /// crash cut (after the copy was written, before `source` was ended),
    /// only to be ended; else the write is announced to other processes.
    /// `ending`: records of this call found leftovers already, live until
    /// it ends them, but no copy of the job (of two records of one job
    /// moved together, one must stay the job).
    fn prepare_move(
        &self,
        locked: Option<&mut IdsLock<'_>>,
        job: &Job,
        source: Location,
        ending: &[Location],
    ) -> Result<bool> {
        let (Some(locked), true) = (locked, job.caller_id) else {
            return Ok(false);
        };
        let elsewhere = match ending {
            [] => self.live_record(locked, &job.id, &[source])?,
            _ => self
                .live_records(locked, &job.id)?
                .into_iter()
                .find(|at| *at != source && !ending.contains(at)),
        };
        if elsewhere.is_some() {
            return Ok(true);
        }
        locked.will_write()?;
        Ok(false)
    }

    /// Under the ids' lock, made current: a live record of the job with
    /// caller id `id` other than those in `except` (where the job is now,
    /// if it is moved). For an enqueue, one means the id is taken; for a
    /// move, that the record moved is a leftover.
    fn live_record(
        &self,
        locked: &mut IdsLock<'_>,
        id: &str,
        except: &[Location],
    ) -> Result<Option<Location>> {
        locked.live_record(id, except, |at| self.is_live(at))
    }

    /// Under the ids' lock, made current: every live record of the job
    /// with caller id `id` (more than one after a move a crash cut).
    fn live_records(&self, locked: &mut IdsLock<'_>, id: &str) -> Result<Vec<Location>> {
        locked.live_records(id, |at| self.is_live(at))
    }

    /// The unsettled records of the job with `id`, `max` at most, looked
    /// for record by record in every lane and the schedule (for made-up
    /// ids, which no index holds; more than one after a move a crash cut).
    fn scan_for(&self, id: &str, max: usize) -> Result<Vec<Location>> {
        let mut found = Vec::new();
        // The id read alone (no copy of the body); a record whose head
        // does not decode is no job.
        let wanted = |bytes: &[u8]| {
            Envelope::id_of(bytes) == Some(id) && Envelope::decode_head(bytes).is_ok()
        };
        for (priority, lane) in self.lanes.all()? {
            for pending in lane.iter() {
                let pending = pending?;
                if wanted(&pending.item) {
                    found.push(Location::Lane(priority, pending.id));
                    if found.len() >= max {
                        return Ok(found);
                    }
                }
            }
        }
        if let Some(schedule) = &self.schedule {
            for pending in schedule.queue.iter() {
                let pending = pending?;
                // Moved to its lane already (its record waits for a sync).
                if self.moves.contains(pending.id) {
                    continue;
                }
                if wanted(&pending.item) {
                    found.push(Location::Scheduled(pending.id));
                    if found.len() >= max {
                        return Ok(found);
                    }
                }
            }
        }
        Ok(found)
    }

    /// Whether the record at `location` is unsettled.
    fn is_live(&self, location: Location) -> Result<bool> {
        match location {
            Location::Lane(priority, record) => match self.lanes.get(priority)? {
                Some(lane) => lane.is_unsettled(record),
                None => Ok(false),
            },
            Location::Scheduled(record) => match &self.schedule {
                Some(schedule) => schedule.queue.is_unsettled(record),
                None => Ok(false),
            },
        }
    }

    /// The job a lane record holds, for a lease of attempt `lane_attempt`.
    fn job_of(&self, bytes: Vec<u8>, record: u64, lane_attempt: u16) -> Result<Envelope> {
        if self.is_plain() {
            return Ok(Envelope {
                job: Job {
                    id: record.to_string(),
                    body: bytes,
                    priority: 0,
                    headers: Vec::new(),
                    attempt: u32::from(lane_attempt),
                    enqueued_at: SystemTime::UNIX_EPOCH,
                    caller_id: false,
                },
                due_ms: 0,
                attempts_before: 0,
                hold: None,
            });
        }
        let mut envelope =
            Envelope::decode_owned(bytes).map_err(|source| Error::Decode { id: record, source })?;
        envelope.job.attempt = envelope.attempts_before + u32::from(lane_attempt);
        Ok(envelope)
    }

    /// `Err(Closed)` once this handle is closed.
    fn check_open(&self) -> Result<()> {
        match self.closed.load(Ordering::Acquire) {
            true => Err(Error::Closed),
            false => Ok(()),
        }
    }

    /// Leases the first ready job, without waiting.
    fn lease_now(&self) -> Result<Option<JobLease>> {
        self.check_open()?;
        let Some(limits) = &self.limits else {
            return self.lease_first();
        };
        // A queue that uses neither pause nor limits: one memory read
        // (and, after the lease, a look at the job's headers).
        if limits.in_use() {
            return self.lease_limited(limits);
        }
        let found = self.lease_first();
        // A job that names no limit, not paused: handed on as it is (the
        // lease, ~170 bytes, not moved out and back in).
        if let Ok(Some(lease)) = &found {
            if lease.job.headers.is_empty() && !limits.is_paused() {
                return found;
            }
        }
        self.admit_unlocked(limits, found?)
    }

    /// Leases the first ready job, in priority order (records that are no
    /// job, or whose attempts ran out, are ended on the way: [`take`](Self::take)).
    #[inline]
    fn lease_first(&self) -> Result<Option<JobLease>> {
        let now = self.now();
        let now_ms = unix_ms(now);
        if self.due_schedules.due(now_ms) {
            self.fire_due_quietly(now);
        }
        self.promote_due_at(now_ms)?;
        let lanes = self.lanes.list()?;
        for (at, (priority, lane)) in lanes.iter().enumerate() {
            // A read is cheaper than a lease's write path (the last lane
            // is leased from at once: nothing is left to skip to).
            if at + 1 < lanes.len() && lane.is_empty() {
                continue;
            }
            while let Some(leased) = lane.lease()? {
                // Returned as `take` made it (no unwrapping and wrapping
                // again: a lease is moved as few times as it can be).
                match self.take(lane, *priority, leased, now_ms, &mut |_, _, _, _| true) {
                    Ok(None) => continue,
                    taken => return taken,
                }
            }
        }
        Ok(None)
    }

    /// `set_priority` of a jobs queue, with limited leases kept from
    /// looking past jobs.
    fn set_priority_now(&self, id: &str, priority: i32) -> Result<()> {
        self.set_priority_in(id, priority, None)
    }

    /// [`set_priority_now`](Self::set_priority_now), a made-up id looked
    /// up in `scanned` (a batch's one pass) if given.
    fn set_priority_in(&self, id: &str, priority: i32, scanned: Option<&Scanned>) -> Result<()> {
        self.promote_due(self.now())?;
        // A job with a caller id is taken and moved under the ids' lock it
        // was found under: a reader of its records (`job_info`) never sees
        // it leased by its own move.
        let (location, held) = self.locate_holding_in(id, scanned)?;
        if let Location::Lane(p, record) = location {
            if p == priority {
                // No change; but a leased job is refused as for any change.
                let lane = self.lanes.get(p)?.ok_or_else(|| no_such_job(id))?;
                return match lane.is_held(record)? {
                    true => Err(Error::JobLeased { id: id.to_owned() }),
                    false => Ok(()),
                };
            }
        }
        let taken = self.take_waiting(id, location)?;
        if taken.envelope.job.priority == priority {
            // A scheduled job already of that priority: nothing moves.
            return taken.queue.lessor().release(taken.record, taken.attempt);
        }
        let mut envelope = taken.envelope.clone();
        envelope.job.priority = priority;
        match self.move_taken(taken, &envelope, held)? {
            Moved::Moved => Ok(()),
            // The record found was a leftover, now ended: the change goes
            // to the job's live record.
            Moved::LeftoverEnded => self.set_priority_now(id, priority),
        }
    }

    /// `run_now`, with limited leases kept from looking past jobs: a
    /// scheduled job moves as `set_priority` moves one, due now, so `place`
    /// puts it at the end of its lane (as a due job falls).
    fn run_now_now(&self, id: &str) -> Result<bool> {
        self.promote_due(self.now())?;
        let (location, held) = match self.locate_holding_in(id, None) {
            Ok(found) => found,
            Err(Error::NoSuchJob { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        if let Location::Lane(p, record) = location {
            // Ready, or leased by a worker (not waiting).
            let lane = match self.lanes.get(p)? {
                Some(lane) => lane,
                None => return Ok(false),
            };
            return Ok(!lane.is_held(record)?);
        }
        let taken = match self.take_waiting(id, location) {
            Ok(taken) => taken,
            Err(Error::NoSuchJob { .. } | Error::JobLeased { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut envelope = taken.envelope.clone();
        envelope.due_ms = unix_ms(self.now());
        match self.move_taken(taken, &envelope, held)? {
            Moved::Moved => Ok(true),
            // The record found was a leftover, now ended: the job's live
            // record is the one to move.
            Moved::LeftoverEnded => self.run_now_now(id),
        }
    }

    /// `cancel`, with limited leases kept from looking past jobs: every
    /// record of the job ends (a move a crash cut leaves two, and the one
    /// left would run after the cancel), or none does.
    fn cancel_now(&self, id: &str) -> Result<()> {
        self.cancel_in(id, None)
    }

    /// [`cancel_now`](Self::cancel_now), a made-up id looked up in
    /// `scanned` (a batch's one pass) if given.
    fn cancel_in(&self, id: &str, scanned: Option<&Scanned>) -> Result<()> {
        self.promote_due(self.now())?;
        // A caller id's records are found and ended under the ids' lock:
        // no move writes another record of the job in between.
        let mut locked = self.ids_lock_if(!self.is_plain())?;
        let records = match &mut locked {
            Some(locked) => self.live_records(locked, id)?,
            None => Vec::new(),
        };
        if records.is_empty() {
            // Not a caller id's: no index to keep the lock for.
            drop(locked.take());
        }
        let records = match (records.is_empty(), self.is_plain(), looks_made_up(id)) {
            (false, _, _) => records,
            // No ids' lock taken: `locate` reads no index.
            (true, true, _) => vec![self.locate(id)?],
            // Not a caller id: a made-up id is in no index.
            (true, false, true) => self.made_up_records(id, scanned)?,
            (true, false, false) => Vec::new(),
        };
        if records.is_empty() {
            return Err(no_such_job(id));
        }
        // A worker runs one copy: the job is not waiting, nothing ends.
        for &location in &records {
            let Location::Lane(priority, record) = location else {
                continue;
            };
            if let Some(lane) = self.lanes.get(priority)? {
                if lane.is_held(record)? {
                    return Err(Error::JobLeased { id: id.to_owned() });
                }
            }
        }
        let mut ended = 0;
        for &location in &records {
            let queue = self.part(location)?.ok_or_else(|| no_such_job(id))?;
            match self.cancel_waiting(&queue, location) {
                Ok(()) => ended += 1,
                // Once one record ended, the job is cancelled: another
                // that is taken or gone since it was found (a made-up id's
                // records are found without a lock) is a copy on its way
                // to the lane record ended, or one a worker took.
                Err(Error::Leased { .. } | Error::NotPending { .. }) if ended > 0 => {}
                Err(Error::Leased { .. }) => return Err(Error::JobLeased { id: id.to_owned() }),
                Err(Error::NotPending { .. }) => {}
                Err(e) => return Err(e),
            }
            match (&mut locked, &self.ids) {
                (Some(locked), _) => locked.remove(id, location),
                (None, Some(ids)) => ids.forget(id, location),
                (None, None) => {}
            }
        }
        drop(locked);
        match ended {
            0 => Err(no_such_job(id)),
            _ => Ok(()),
        }
    }

    /// Requeues dead letter `letter` of lane `priority`, which holds `job`.
    fn requeue_letter(&self, priority: i32, lane: &RawQueue, letter: u64, job: &Job) -> Result<()> {
        let id = job.id.as_str();
        let mut locked = self.ids_lock_if(job.caller_id)?;
        if let Some(locked) = &mut locked {
            if self.live_record(locked, id, &[])?.is_some() {
                return Err(Error::InvalidJob {
                    reason: format!("a job with id {id:?} is queued again already"),
                });
            }
            let now_ms = unix_ms(self.now());
            if locked.held(id, now_ms).is_some() {
                // Waiting again: its record holds the id now; a
                // cancel of it frees the id, as for any job.
                locked.note_held(id, None, self.safe, now_ms)?;
            }
            locked.will_write()?;
        }
        let plain = self.is_plain();
        let record = lane.requeue_dead_with(letter, |bytes| {
            if plain {
                return bytes;
            }
            // Its attempts start over.
            Envelope::decode(&bytes).map_or(bytes, |mut envelope| {
                envelope.attempts_before = 0;
                envelope.encode()
            })
        })?;
        self.note(locked.as_mut(), job, Location::Lane(priority, record));
        drop(locked);
        self.signal.notify();
        Ok(())
    }

    /// The lane a lease was taken from, checking the lease is this handle's.
    fn lane_of(&self, lease: &JobLease) -> Result<(i32, Arc<RawQueue>)> {
        let token = &lease.token;
        let priority = i32::try_from(token.part).ok();
        let lane = match priority {
            Some(priority) if token.queue == self.handle => self.lanes.get(priority)?,
            _ => None,
        };
        match (priority, lane) {
            (Some(priority), Some(lane)) => Ok((priority, lane)),
            _ => Err(Error::InvalidJob {
                reason: format!(
                    "the lease of job {:?} was taken from another queue handle; settle it there",
                    lease.job.id
                ),
            }),
        }
    }

    fn lane_attempt(lease: &JobLease) -> u16 {
        u16::try_from(lease.token.attempt).unwrap_or(u16::MAX)
    }

    /// Dead-letters a leased job with `message`, counted in the
    /// statistics under `reason`'s failure group.
    fn fail_lease(&self, lease: JobLease, reason: &str, message: &str) -> Result<()> {
        let (priority, lane) = self.lane_of(&lease)?;
        let record = lease.token.record;
        self.settle_holding(&lease.job, lease.token.hold, Settled::Dead, || {
            lane.lessor()
                .fail(record, Self::lane_attempt(&lease), message)
        })?;
        self.record_stats(unix_ms(self.now()), |day| day.record_failure(reason));
        self.forget(&lease.job, Location::Lane(priority, record));
        Ok(())
    }

    /// Where waiting job `id` is.
    fn locate(&self, id: &str) -> Result<Location> {
        self.locate_in(id, None)
    }

    /// [`locate`](Self::locate), a made-up id looked up in `scanned` (a
    /// batch's one pass over the jobs) instead of looked for again.
    fn locate_in(&self, id: &str, scanned: Option<&Scanned>) -> Result<Location> {
        if self.is_plain() {
            let record = id.parse().map_err(|_| no_such_job(id))?;
            return match self.is_live(Location::Lane(0, record))? {
                true => Ok(Location::Lane(0, record)),
                false => Err(no_such_job(id)),
            };
        }
        if let Some(mut locked) = self.ids_lock_if(true)? {
            if let Some(location) = self.live_record(&mut locked, id, &[])? {
                return Ok(location);
            }
        }
        // Not a caller id: a made-up id is in no index, so the jobs are
        // looked through (or were, by a batch's one pass).
        if !looks_made_up(id) {
            return Err(no_such_job(id));
        }
        if let Some(scanned) = scanned {
            match scanned.first(id) {
                Some(location) if self.still_there(location)? => return Ok(location),
                // Moved since the pass: looked for again below.
                Some(_) => {}
                // The pass found no record of it: if it waits now, in a
                // record written since.
                None => {
                    let since = self.records_since(id, scanned, 1)?;
                    return since.first().copied().ok_or_else(|| no_such_job(id));
                }
            }
        }
        let found = self.scan_for(id, 1)?;
        found.first().copied().ok_or_else(|| no_such_job(id))
    }

    /// [`locate`](Self::locate), and for a caller id the ids' lock it was
    /// found under, held: the job stays where it is until it is dropped
    /// (every move of a caller id's job takes it).
    fn locate_holding_in(
        &self,
        id: &str,
        scanned: Option<&Scanned>,
    ) -> Result<(Location, Option<IdsLock<'_>>)> {
        if let Some(mut locked) = self.ids_lock_if(!self.is_plain())? {
            if let Some(location) = self.live_record(&mut locked, id, &[])? {
                return Ok((location, Some(locked)));
            }
        }
        Ok((self.locate_in(id, scanned)?, None))
    }

    /// The queue holding `location`.
    fn part(&self, location: Location) -> Result<Option<Arc<RawQueue>>> {
        Ok(match location {
            Location::Lane(priority, _) => self.lanes.get(priority)?,
            Location::Scheduled(_) => self.schedule.as_ref().map(|s| Arc::clone(&s.queue)),
        })
    }

    /// Leases the waiting record of job `id` at `location`, to move it:
    /// the queue, the envelope, the record and the lease's attempt.
    fn take_waiting(&self, id: &str, location: Location) -> Result<Taken> {
        let queue = self.part(location)?.ok_or_else(|| no_such_job(id))?;
        let record = location.record();
        match self.lease_waiting(&queue, location)? {
            ById::Leased(leased, _) => {
                let (bytes, _, attempt) = leased.into_parts();
                match Envelope::decode(&bytes) {
                    Ok(mut envelope) => {
                        // Attempts a lane record had count (less the lease
                        // taken to move it); a schedule record's leases
                        // were moves, not attempts.
                        if let Location::Lane(..) = location {
                            envelope.attempts_before += u32::from(attempt - 1);
                        }
                        Ok(Taken {
                            queue,
                            envelope,
                            source: location,
                            record,
                            attempt,
                        })
                    }
                    Err(source) => {
                        let _ = queue.lessor().release(record, attempt);
                        Err(Error::Decode { id: record, source })
                    }
                }
            }
            ById::Busy => Err(Error::JobLeased { id: id.to_owned() }),
            ById::Gone => Err(no_such_job(id)),
        }
    }

    /// Writes `envelope` where it belongs now (its lane, or the schedule
    /// if `due_ms` is set); returns where.
    fn place(&self, envelope: &Envelope) -> Result<Location> {
        // The clock only for a delayed job.
        let now_ms = match envelope.due_ms {
            0 => 0,
            _ => unix_ms(self.now()),
        };
        self.place_at(envelope, now_ms)
    }

    /// [`place`](Self::place) at `now_ms`, read by the caller already.
    fn place_at(&self, envelope: &Envelope, now_ms: u64) -> Result<Location> {
        let write = |out: &mut Vec<u8>| envelope.encode_into(out);
        if envelope.due_ms > 0 && envelope.due_ms > now_ms {
            let schedule = self
                .schedule
                .as_ref()
                .ok_or_else(|| plain_refusal("a delay"))?;
            let record = schedule.queue.enqueue_encoded_with(write)?;
            schedule.note(envelope.due_ms, record);
            return Ok(Location::Scheduled(record));
        }
        let priority = envelope.job.priority;
        let record = self
            .lanes
            .get_or_make(priority)?
            .enqueue_encoded_with(write)?;
        Ok(Location::Lane(priority, record))
    }

    /// Moves a taken job to where `envelope` (changed) says, then ends its
    /// old record; on failure it stays where it was. `held`: the ids'
    /// lock, if the caller took it already.
    fn move_taken(
        &self,
        taken: Taken,
        envelope: &Envelope,
        held: Option<IdsLock<'_>>,
    ) -> Result<Moved> {
        let lessor = taken.queue.lessor();
        // Held until the old record is ended: a decision about the id in
        // between would see two live records and take one for a leftover.
        let taking = match held {
            Some(held) => Ok(Some(held)),
            None => self.ids_lock_if(envelope.job.caller_id),
        };
        let mut locked = match taking {
            Ok(locked) => locked,
            Err(e) => {
                let _ = lessor.release(taken.record, taken.attempt);
                return Err(e);
            }
        };
        let leftover = match self.prepare_move(locked.as_mut(), &envelope.job, taken.source, &[]) {
            Ok(leftover) => leftover,
            Err(e) => {
                let _ = lessor.release(taken.record, taken.attempt);
                return Err(e);
            }
        };
        if leftover {
            // A move a crash cut left this record behind: it only ends,
            // and the caller moves the job's live record instead.
            lessor.ack(taken.record, taken.attempt)?;
            return Ok(Moved::LeftoverEnded);
        }
        let location = match self.place(envelope) {
            Ok(location) => location,
            Err(e) => {
                let _ = lessor.release(taken.record, taken.attempt);
                return Err(e);
            }
        };
        self.note(locked.as_mut(), &envelope.job, location);
        let moved = self
            .durable_before_moving_on(location)
            .and_then(|()| lessor.ack(taken.record, taken.attempt));
        if let Err(e) = moved {
            // The job stays where it was: its copy goes if no one took it
            // yet (the error then means what it says: no effect).
            if let Some(queue) = self.part(location)? {
                if queue.cancel(location.record()).is_ok() {
                    self.unnote(locked.as_mut(), &envelope.job, location);
                }
            }
            let _ = lessor.release(taken.record, taken.attempt);
            return Err(e);
        }
        drop(locked);
        self.signal.notify();
        Ok(Moved::Moved)
    }
}

/// What [`EmbeddedJobs::move_taken`] did.
enum Moved {
    Moved,
    /// The record taken was a leftover of a move a crash cut: ended only.
    LeftoverEnded,
}

/// A waiting job leased to be moved.
struct Taken {
    queue: Arc<RawQueue>,
    envelope: Envelope,
    /// Where its record is.
    source: Location,
    record: u64,
    attempt: u16,
}

/// Whether `id` may be one the queue made up (32 hex digits), which no
/// index holds.
fn looks_made_up(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn no_such_job(id: &str) -> Error {
    Error::NoSuchJob { id: id.to_owned() }
}

impl EmbeddedJobs {
    /// Checks a new job against what this queue can keep.
    fn check_new(&self, job: &NewJob) -> Result<()> {
        job.check()?;
        if self.is_plain() {
            let refused = if job.priority != 0 {
                Some("a priority other than 0")
            } else if job.run_at != RunAt::Now {
                Some("a delay")
            } else if !job.headers.is_empty() {
                Some("a header")
            } else if job.id.is_some() {
                Some("a caller-chosen id")
            } else {
                None
            };
            if let Some(what) = refused {
                return Err(plain_refusal(what));
            }
        }
        Ok(())
    }

    /// The envelope of a new job enqueued at `now`.
    fn envelope_of(job: NewJob, now: SystemTime) -> Envelope {
        let ready_at = job.ready_at(now);
        let hold = job.hold(now);
        let caller_id = job.id.is_some();
        Envelope {
            job: Job {
                id: job.id.unwrap_or_else(new_job_id),
                body: job.body,
                priority: job.priority,
                headers: job.headers,
                attempt: 0,
                enqueued_at: now,
                caller_id,
            },
            due_ms: if ready_at > now { unix_ms(ready_at) } else { 0 },
            attempts_before: 0,
            hold,
        }
    }

    /// Whether `job`, enqueued at `now`, is written to its lane (not to
    /// the schedule): ready, or due within the millisecond `now` is in
    /// (as [`place_at`](Self::place_at) decides by milliseconds).
    fn lands_in_lane(job: &NewJob, now: SystemTime) -> bool {
        let ready_at = job.ready_at(now);
        ready_at <= now || unix_ms(ready_at) <= unix_ms(now)
    }

    /// Enqueues one checked job; with `promote`, first moves the jobs
    /// fallen due if it goes to a lane (so that equal priorities keep the
    /// order in which jobs became ready), decided as it is placed.
    fn enqueue_one(&self, job: NewJob, now: SystemTime, promote: bool) -> Result<Enqueued> {
        if self.is_plain() {
            if promote {
                self.promote_before_adding(true, now)?;
            }
            let root = self.lanes.get(0)?.expect("the root lane");
            let record = root.enqueue_encoded(&job.body)?;
            return Ok(Enqueued::Added(record.to_string()));
        }
        let envelope = Self::envelope_of(job, now);
        // Placed by this call's clock reading (none for a ready job).
        let now_ms = match envelope.due_ms {
            0 => 0,
            _ => unix_ms(now),
        };
        if promote {
            let to_lane = envelope.due_ms == 0 || envelope.due_ms <= now_ms;
            self.promote_before_adding(to_lane, now)?;
        }
        let Some(mut locked) = self.ids_lock_if(envelope.job.caller_id)? else {
            self.place_at(&envelope, now_ms)?;
            return Ok(Enqueued::Added(envelope.job.id));
        };
        // (The id moves out of the envelope at the end: no copy.)
        let id = &envelope.job.id;
        if self.live_record(&mut locked, id, &[])?.is_some() {
            return Ok(Enqueued::AlreadyQueued(envelope.job.id));
        }
        if let Some(held) = locked.held(id, unix_ms(now)) {
            return Ok(Enqueued::Duplicate(Duplicate {
                id: envelope.job.id,
                state: held.state,
                until: from_unix_ms(held.until_ms),
            }));
        }
        locked.will_write()?;
        let location = self.place_at(&envelope, now_ms)?;
        locked.add(&envelope.job.id, location);
        // The job is added: a sweep that fails is tried again later.
        let _ = locked.sweep_if_due(|| self.parts());
        Ok(Enqueued::Added(envelope.job.id))
    }

    /// Enqueues checked jobs without caller ids, each group of one lane
    /// (or of the schedule) with one write.
    fn enqueue_grouped(&self, jobs: Vec<NewJob>, now: SystemTime) -> Result<Vec<Enqueued>> {
        let envelopes: Vec<Envelope> = jobs
            .into_iter()
            .map(|job| Self::envelope_of(job, now))
            .collect();
        let mut groups: std::collections::BTreeMap<Option<i32>, Vec<usize>> = Default::default();
        for (at, envelope) in envelopes.iter().enumerate() {
            let lane = (envelope.due_ms == 0).then_some(envelope.job.priority);
            groups.entry(lane).or_default().push(at);
        }
        for (lane, members) in groups {
            let bytes: Vec<Vec<u8>> = members.iter().map(|&at| envelopes[at].encode()).collect();
            match lane {
                Some(priority) => {
                    self.lanes
                        .get_or_make(priority)?
                        .enqueue_encoded_batch(&bytes)?;
                }
                None => {
                    let schedule = self.schedule.as_ref().expect("checked: a jobs queue");
                    let first = schedule.queue.enqueue_encoded_batch(&bytes)?;
                    for (offset, &at) in members.iter().enumerate() {
                        schedule.note(envelopes[at].due_ms, first + offset as u64);
                    }
                }
            }
        }
        Ok(envelopes
            .into_iter()
            .map(|envelope| Enqueued::Added(envelope.job.id))
            .collect())
    }
    /// Moves leased `lease` (of lane `priority`) to the schedule, due
    /// after `delay` from `now`, with `attempts_before` attempts counted:
    /// a delayed nack counts the one just made, a snooze does not.
    fn reschedule(
        &self,
        lease: JobLease,
        priority: i32,
        lane: &RawQueue,
        now: SystemTime,
        delay: Duration,
        attempts_before: u32,
    ) -> Result<SystemTime> {
        let lessor = lane.lessor();
        let (record, attempt) = (lease.token.record, Self::lane_attempt(&lease));
        // Still held (else another worker may have it): then moved to the
        // schedule before its record here is ended.
        lessor.touch(record, attempt)?;
        let at = super::job::due_after(now, delay);
        let envelope = Envelope {
            attempts_before,
            due_ms: unix_ms(at).max(1),
            hold: lease.token.hold,
            job: lease.job,
        };
        // A job with a caller id moves under the ids' lock, held until the
        // old record is ended: no one decides about the id in between.
        let mut locked = self.ids_lock_if(envelope.job.caller_id)?;
        let source = Location::Lane(priority, record);
        if self.prepare_move(locked.as_mut(), &envelope.job, source, &[])? {
            // A leftover of a move cut by a crash: the job waits
            // elsewhere already, this copy only ends.
            lessor.ack(record, attempt)?;
            return Ok(at);
        }
        let location = self.place(&envelope)?;
        self.note(locked.as_mut(), &envelope.job, location);
        let moved = self
            .durable_before_moving_on(location)
            .and_then(|()| lessor.ack(record, attempt));
        if let Err(e) = moved {
            // The job stays where it was, leased: its copy in the schedule
            // goes (no one leases a record there before it is due), so the
            // error means what it says: no effect.
            if let Some(queue) = self.part(location)? {
                if queue.cancel(location.record()).is_ok() {
                    self.unnote(locked.as_mut(), &envelope.job, location);
                }
            }
            return Err(e);
        }
        drop(locked);
        self.signal.notify();
        Ok(at)
    }
}

impl JobQueue for EmbeddedJobs {
    fn lease_time(&self) -> Option<Duration> {
        Some(self.lease_time)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.check_open()?;
        self.check_new(&job)?;
        let now = self.now();
        // (Due jobs first if it goes to a lane.)
        let enqueued = self.enqueue_one(job, now, true)?;
        self.signal.notify();
        Ok(enqueued)
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.check_open()?;
        for job in &jobs {
            self.check_new(job)?;
        }
        let now = self.now();
        // (An empty batch moves them too: a way to have them moved.)
        let ready = jobs.is_empty() || jobs.iter().any(|job| Self::lands_in_lane(job, now));
        self.promote_before_adding(ready, now)?;
        let enqueued = if self.is_plain() || jobs.iter().any(|job| job.id.is_some()) {
            jobs.into_iter()
                .map(|job| self.enqueue_one(job, now, false))
                .collect::<Result<_>>()?
        } else {
            self.enqueue_grouped(jobs, now)?
        };
        self.signal.notify();
        Ok(enqueued)
    }

    fn lease(&self) -> Result<Option<JobLease>> {
        self.lease_now()
    }

    fn lease_timeout(&self, wait: Duration) -> Result<Option<JobLease>> {
        let deadline = Instant::now().checked_add(wait);
        loop {
            let seen = self.signal.observe();
            if let Some(lease) = self.lease_now()? {
                return Ok(Some(lease));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let mut until = now + LEASE_POLL;
            if let Some(d) = deadline {
                until = until.min(d);
            }
            if let Some(due) = self.schedule.as_ref().and_then(Schedule::next_due) {
                let left = due.saturating_sub(unix_ms(self.now()));
                until = until.min(now + Duration::from_millis(left));
            }
            // Idle: the completed jobs' entries are written.
            if let Some(history) = &self.history {
                history.flush_if_due();
            }
            self.signal.wait(seen, until);
        }
    }

    fn ack(&self, lease: JobLease) -> Result<()> {
        let (priority, lane) = self.lane_of(&lease)?;
        let record = lease.token.record;
        self.settle_holding(&lease.job, lease.token.hold, Settled::Done, || {
            lane.lessor().ack(record, Self::lane_attempt(&lease))
        })?;
        let now_ms = unix_ms(self.now());
        let ran = Duration::from_millis(now_ms.saturating_sub(lease.token.leased_ms));
        self.record_stats(now_ms, |day| day.run.record(ran));
        self.forget(&lease.job, Location::Lane(priority, record));
        if let Some(history) = &self.history {
            history.record(&lease.job, lease.token.leased_ms, now_ms);
        }
        Ok(())
    }

    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked> {
        let (priority, lane) = self.lane_of(&lease)?;
        if lease.job.attempt >= self.max_attempts {
            let attempts = lease.job.attempt;
            let message = format!("{reason} (attempts used up: {attempts})");
            self.fail_lease(lease, reason, &message)?;
            return Ok(Nacked::Dead);
        }
        let delay = match retry {
            Retry::Backoff => self.backoff.delay(lease.job.attempt),
            Retry::After(delay) => delay,
        };
        let now = self.now();
        if delay.is_zero() || self.is_plain() {
            // Back at its place in its lane, this attempt counted.
            lane.lessor()
                .nack(lease.token.record, Self::lane_attempt(&lease))?;
            self.record_stats(unix_ms(now), |day| day.retries += 1);
            self.signal.notify();
            return Ok(Nacked::Retrying { at: now });
        }
        let attempts_before = lease.job.attempt;
        let at = self.reschedule(lease, priority, &lane, now, delay, attempts_before)?;
        self.record_stats(unix_ms(now), |day| day.retries += 1);
        Ok(Nacked::Retrying { at })
    }

    fn release(&self, lease: JobLease) -> Result<()> {
        let (_, lane) = self.lane_of(&lease)?;
        lane.lessor()
            .release(lease.token.record, Self::lane_attempt(&lease))?;
        self.signal.notify();
        Ok(())
    }

    fn release_after(&self, lease: JobLease, delay: Duration) -> Result<SystemTime> {
        let now = self.now();
        if delay.is_zero() || self.is_plain() {
            // A plain queue has no schedule: back at its place, as a nack
            // with a delay goes there.
            self.release(lease)?;
            return Ok(now);
        }
        let (priority, lane) = self.lane_of(&lease)?;
        // The attempts before this lease: this one is taken back.
        let attempts_before = lease.job.attempt.saturating_sub(1);
        self.reschedule(lease, priority, &lane, now, delay, attempts_before)
    }

    fn touch(&self, lease: &JobLease) -> Result<()> {
        let (_, lane) = self.lane_of(lease)?;
        lane.lessor()
            .touch(lease.token.record, Self::lane_attempt(lease))
    }

    fn fail(&self, lease: JobLease, reason: &str) -> Result<()> {
        self.fail_lease(lease, reason, reason)
    }

    fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        if self.is_plain() {
            return Err(plain_refusal("a priority other than 0"));
        }
        let _no_look_past = self.lock_limited_leases()?;
        self.set_priority_now(id, priority)
    }

    fn cancel(&self, id: &str) -> Result<()> {
        let _no_look_past = self.lock_limited_leases()?;
        self.cancel_now(id)
    }

    /// The made-up ids found in one pass over the jobs (each `cancel` of
    /// one reads up to it), then each cancelled as `cancel` does.
    fn cancel_many(&self, ids: &[String]) -> Vec<Result<()>> {
        self.cancel_many_now(ids)
    }

    /// The made-up ids found in one pass over the jobs, then each moved as
    /// `set_priority` does.
    fn set_priority_many(&self, ids: &[String], priority: i32) -> Vec<Result<()>> {
        self.set_priority_many_now(ids, priority)
    }

    fn run_now(&self, id: &str) -> Result<bool> {
        let _no_look_past = self.lock_limited_leases()?;
        self.run_now_now(id)
    }
    fn waiting(&self, max: usize) -> Result<Vec<Waiting>> {
        let _no_look_past = self.lock_limited_leases()?;
        let now_ms = unix_ms(self.now());
        // The schedule first: jobs due by now are ready (the next call that
        // writes moves them to the end of their lanes, in due order), the
        // rest are listed last, the `max` soonest, kept in a heap.
        // Of each lane's due jobs, the `max` soonest (not the first `max`
        // met in record order: their due times need not rise with it).
        let mut due: BTreeMap<i32, BinaryHeap<(u64, u64, Vec<u8>)>> = BTreeMap::new();
        let mut soonest: BinaryHeap<(u64, u64, Vec<u8>)> = BinaryHeap::new();
        if let Some(schedule) = &self.schedule {
            for pending in schedule.queue.iter() {
                let pending = pending?;
                // Moved to its lane already (its record waits for a sync).
                if self.moves.contains(pending.id) {
                    continue;
                }
                let at = Envelope::due_ms_of(&pending.item).unwrap_or(0);
                if at <= now_ms {
                    let priority =
                        Envelope::priority_of(&pending.item).map_err(|source| Error::Decode {
                            id: pending.id,
                            source,
                        })?;
                    let lane = due.entry(priority).or_default();
                    if lane.len() < max
                        || lane
                            .peek()
                            .is_some_and(|top| (at, pending.id) < (top.0, top.1))
                    {
                        lane.push((at, pending.id, pending.item));
                        if lane.len() > max {
                            lane.pop();
                        }
                    }
                } else if soonest.len() < max
                    || soonest
                        .peek()
                        .is_some_and(|top| (at, pending.id) < (top.0, top.1))
                {
                    soonest.push((at, pending.id, pending.item));
                    if soonest.len() > max {
                        soonest.pop();
                    }
                }
            }
        }
        let lanes: BTreeMap<i32, Arc<RawQueue>> = self.lanes.all()?.into_iter().collect();
        let mut priorities: Vec<i32> = lanes.keys().chain(due.keys()).copied().collect();
        priorities.sort_unstable();
        priorities.dedup();
        let mut found = Vec::new();
        for priority in priorities {
            if let Some(lane) = lanes.get(&priority) {
                for pending in lane.iter() {
                    if found.len() >= max {
                        return Ok(found);
                    }
                    let pending = pending?;
                    let mut envelope = self.job_of(pending.item, pending.id, pending.attempts)?;
                    envelope.job.attempt = envelope.attempts_before + u32::from(pending.attempts);
                    let state = if pending.leased {
                        WaitState::Leased
                    } else {
                        WaitState::Ready
                    };
                    found.push(Waiting {
                        job: envelope.job,
                        state,
                    });
                }
            }
            let fallen = due.remove(&priority).unwrap_or_default();
            for (_, record, bytes) in fallen.into_sorted_vec() {
                if found.len() >= max {
                    return Ok(found);
                }
                let envelope = Envelope::decode(&bytes)
                    .map_err(|source| Error::Decode { id: record, source })?;
                found.push(Waiting {
                    job: envelope.job,
                    state: WaitState::Ready,
                });
            }
        }
        for (at, record, bytes) in soonest.into_sorted_vec() {
            if found.len() >= max {
                break;
            }
            let envelope =
                Envelope::decode(&bytes).map_err(|source| Error::Decode { id: record, source })?;
            found.push(Waiting {
                job: envelope.job,
                state: WaitState::Scheduled(from_unix_ms(at)),
            });
        }
        Ok(found)
    }

    fn leases(&self, max: usize) -> Result<Vec<super::LeaseInfo>> {
        self.leases_now(max)
    }

    /// In one walk over the lanes and the schedule, then the dead letters,
    /// the filter tested on each record's id and headers (`search`); the
    /// same answer as the default's reading from the front.
    fn search(&self, filter: &super::JobFilter, max: usize, scan: usize) -> Result<super::Found> {
        if self.is_plain() {
            let (waiting, dead) = (|n| self.waiting(n), |n| self.dead(n));
            return super::search::by_reading(filter, max, scan, waiting, dead);
        }
        self.search_now(filter, max, scan)
    }

    /// From the cursor's lane record or due time on (`paging`).
    fn waiting_page(&self, after: Option<&super::PageCursor>, max: usize) -> Result<super::Page> {
        self.waiting_page_now(after, max)
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadJob>> {
        let mut found = Vec::new();
        for (_, lane) in self.lanes.all()? {
            for letter in lane.dead_letters_up_to(max - found.len())? {
                let envelope = self.job_of(letter.payload, letter.original_id, letter.attempts)?;
                found.push(DeadJob {
                    job: envelope.job,
                    reason: letter.reason,
                });
            }
        }
        Ok(found)
    }

    fn requeue_dead(&self, id: &str) -> Result<()> {
        // As every call that adds to a lane: due jobs became ready first.
        self.promote_due(self.now())?;
        for (priority, lane) in self.lanes.all()? {
            for letter in lane.dead_letters()? {
                let envelope =
                    self.job_of(letter.payload.clone(), letter.original_id, letter.attempts)?;
                if envelope.job.id == id {
                    return self.requeue_letter(priority, &lane, letter.id, &envelope.job);
                }
            }
        }
        Err(no_such_job(id))
    }

    /// In one pass over the dead letters (each `requeue_dead` reads them
    /// all to find its one): the first letter of each id requeued, as
    /// `requeue_dead` would.
    fn requeue_dead_many(&self, ids: &[String]) -> Vec<Result<()>> {
        let mut outcomes: Vec<Option<Result<()>>> = (0..ids.len()).map(|_| None).collect();
        // An id asked twice is requeued once; its second ask finds no letter.
        let mut wanted: HashMap<&str, usize> = HashMap::new();
        for (i, id) in ids.iter().enumerate().rev() {
            wanted.insert(id.as_str(), i);
        }
        let pass = (|| -> Result<()> {
            self.promote_due(self.now())?;
            for (priority, lane) in self.lanes.all()? {
                for letter in lane.dead_letters()? {
                    if wanted.is_empty() {
                        return Ok(());
                    }
                    let envelope =
                        self.job_of(letter.payload.clone(), letter.original_id, letter.attempts)?;
                    if let Some(i) = wanted.remove(envelope.job.id.as_str()) {
                        outcomes[i] =
                            Some(self.requeue_letter(priority, &lane, letter.id, &envelope.job));
                    }
                }
            }
            Ok(())
        })();
        outcomes
            .into_iter()
            .zip(ids)
            .map(|(outcome, id)| match (outcome, &pass) {
                (Some(outcome), _) => outcome,
                // Not reached: the pass failed first; each its own try.
                (None, Err(_)) => self.requeue_dead(id),
                (None, Ok(())) => Err(no_such_job(id)),
            })
            .collect()
    }

    fn counts(&self) -> Result<Counts> {
        let _no_look_past = self.lock_limited_leases()?;
        let mut counts = Counts::default();
        for (_, lane) in self.lanes.all()? {
            let leased = lane.leased_len() as u64;
            counts.leased += leased;
            counts.ready += (lane.len() as u64).saturating_sub(leased);
            counts.dead += lane.dead_len()?;
        }
        if let Some(schedule) = &self.schedule {
            // Jobs due by now count as ready before they are moved.
            let due = schedule.due_by(unix_ms(self.now()), |r| self.moves.contains(r))?;
            counts.ready += due;
            // Records of moves waiting for a sync are in their lanes.
            let moved = self.moves.len() as u64;
            counts.scheduled = (schedule.queue.len() as u64).saturating_sub(due + moved);
        }
        Ok(counts)
    }

    fn stats(&self) -> Result<QueueStats> {
        let days = match &self.stats {
            Some(stats) => stats.lock().days()?,
            None => Vec::new(),
        };
        Ok(QueueStats {
            queue: self.name.clone(),
            counts: self.counts()?,
            days,
        })
    }

    fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.signal.notify();
        // No move is in the middle of a step while the moves settle and
        // the queues close (see `moves`); later steps see `closed`.
        let _shut = self.moves.shut();
        let settled = self.settle_moves(true);
        let flushed = match &self.stats {
            Some(stats) => stats.lock().flush(),
            None => Ok(()),
        };
        let flushed = flushed.and(self.history.as_ref().map_or(Ok(()), |h| h.flush()));
        let lanes = self.lanes.close();
        let schedule = self.schedule.as_ref().map_or(Ok(()), |s| s.queue.close());
        settled.and(lanes).and(schedule).and(flushed)
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> Result<()> {
        self.set_paused(true)
    }

    fn resume(&self) -> Result<()> {
        self.set_paused(false)
    }

    fn is_paused(&self) -> Result<bool> {
        self.paused()
    }

    fn set_limit(&self, name: &str, max: u32) -> Result<()> {
        self.set_limit_to(name, Some(max)).map(drop)
    }

    fn remove_limit(&self, name: &str) -> Result<bool> {
        self.set_limit_to(name, None)
    }

    fn limits(&self) -> Result<Vec<crate::jobs::Limit>> {
        self.list_limits()
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: RecurringSchedule) -> Result<ScheduleInfo> {
        self.add_schedule(schedule)
    }

    fn unschedule(&self, name: &str) -> Result<bool> {
        self.remove_schedule(name)
    }

    fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.list_schedules()
    }

    fn fire_schedules(&self) -> Result<usize> {
        self.check_open()?;
        self.fire_due(self.now())
    }

    // --- history (issue 27) ---

    fn job_info(&self, id: &str) -> Result<Option<super::JobInfo>> {
        // The waiting job's one record, not the listing (`info`).
        self.info_of(id)
    }
}

impl Drop for EmbeddedJobs {
    fn drop(&mut self) {
        // As a close would: the lanes synced, then the moves ended.
        let _ = self.settle_moves(true);
        if let Some(stats) = &self.stats {
            let _ = stats.lock().flush();
        }
        if let Some(history) = &self.history {
            let _ = history.flush();
        }
    }
}
