//! The worker: threads that lease jobs, run their kinds' handlers and
//! settle them, a watchdog that touches the leases of running jobs and
//! enforces timeouts, and a graceful stop.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::context::{Context, StateMap};
use super::job::{Job, KindOptions, KIND_HEADER};
use super::registry::{Kind, Kinds};
use super::rules::{
    apply, is_server_trouble, settle, touch_interval, trouble_pause, Ended, Outcome, Settle,
    UnknownKind, DEFAULT_LEASE_TIME,
};
use super::shutdown::{StopHandle, StopReason, DEFAULT_GRACE};
use crate::jobs::{AddressOptions, JobLease, JobQueue, Order, QueueSet};
use crate::{Error, Result};

/// How long a lease waits for a job before its thread looks at the stop flag.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How often `run` looks whether the worker threads are done.
const POLL: Duration = Duration::from_millis(10);

/// A finished attempt, as hooks see it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Finished<'a> {
    /// The job's kind (the header's value for an unknown kind; empty if none).
    pub kind: &'a str,
    /// The job's id.
    pub id: &'a str,
    /// Which attempt it was (1 for the first).
    pub attempt: u32,
    /// The queue's name.
    pub queue: &'a str,
    /// What became of the job.
    pub outcome: &'a Outcome,
    /// How long the attempt ran.
    pub ran: Duration,
}

pub(crate) type Hook = Arc<dyn Fn(&Finished<'_>) + Send + Sync>;

#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) finished: Vec<Hook>,
    pub(crate) failure: Vec<Hook>,
    pub(crate) dead: Vec<Hook>,
}

/// Counts `finished`, logs it, and calls the hooks: what every runtime
/// (threads, tokio tasks) does once an attempt's job is settled.
pub(crate) fn report(tally: &Tally, hooks: &Hooks, finished: &Finished<'_>) {
    let (kind, id, attempt) = (finished.kind, finished.id, finished.attempt);
    match finished.outcome {
        Outcome::Succeeded => {
            Tally::add(&tally.succeeded);
            tracing::debug!(kind, id, attempt, "job done");
        }
        Outcome::Retrying { reason, .. } => {
            Tally::add(&tally.retried);
            tracing::warn!(kind, id, attempt, reason, "job failed; it runs again");
        }
        Outcome::Dead { reason } => {
            Tally::add(&tally.dead);
            tracing::error!(kind, id, attempt, reason, "job failed; now a dead letter");
        }
        Outcome::Snoozed { .. } => {
            Tally::add(&tally.snoozed);
            tracing::debug!(kind, id, attempt, "job snoozed; it runs again later");
        }
        Outcome::Released => {
            Tally::add(&tally.released);
            tracing::info!(kind, id, attempt, "job given back (the worker stops)");
        }
        Outcome::Lost { error } => {
            Tally::add(&tally.lost);
            tracing::warn!(kind, id, attempt, error, "job's lease lost; it runs again");
        }
    }
    let also: &[Hook] = match finished.outcome {
        Outcome::Retrying { .. } => &hooks.failure,
        Outcome::Dead { .. } => &hooks.dead,
        _ => &[],
    };
    for hook in hooks.finished.iter().chain(also) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(finished))).is_err() {
            tracing::error!(kind, id, "a worker hook panicked");
        }
    }
}

/// What a worker did, returned by [`Worker::run`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Attempts that succeeded (acked).
    pub succeeded: u64,
    /// Failed attempts whose jobs run again.
    pub retried: u64,
    /// Attempts the handler snoozed ([`JobError::Snooze`](super::JobError::Snooze)):
    /// given back uncounted, to run later.
    pub snoozed: u64,
    /// Jobs made dead letters.
    pub dead: u64,
    /// Jobs given back without counting the attempt (the worker stopped).
    pub released: u64,
    /// Jobs whose lease was lost before they were settled (they run again).
    pub lost: u64,
    /// Of the failed attempts: those that panicked.
    pub panicked: u64,
    /// Of the failed attempts: those that timed out.
    pub timed_out: u64,
    /// Handler threads left running: past their timeout, or past the grace
    /// period at the stop. Their jobs were settled without them; what they
    /// return later is ignored. (For the tokio runtime's `AsyncWorker`:
    /// handler tasks aborted so.)
    pub abandoned: u64,
    /// Why the worker stopped (`None` only if it never ran).
    pub stopped: Option<StopReason>,
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) succeeded: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) snoozed: AtomicU64,
    pub(crate) dead: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) abandoned: AtomicU64,
}

impl Tally {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn summary(&self, stopped: Option<StopReason>) -> Summary {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Summary {
            succeeded: get(&self.succeeded),
            retried: get(&self.retried),
            snoozed: get(&self.snoozed),
            dead: get(&self.dead),
            released: get(&self.released),
            lost: get(&self.lost),
            panicked: get(&self.panicked),
            timed_out: get(&self.timed_out),
            abandoned: get(&self.abandoned),
            stopped,
        }
    }
}

/// A worker runtime: runs the registered kinds' jobs from a queue (or
/// several), `concurrency` at a time, each on its own thread.
///
/// For every job it leases, the worker:
/// - picks the handler by the job's kind (header [`KIND_HEADER`]); a job
///   of a kind it does not run is a failed attempt, or a dead letter
///   ([`UnknownKind`]), never lost; a body that does not decode is a dead
///   letter with the decode error as its reason;
/// - touches the lease at a third of the lease time while the handler runs
///   ([`lease_time`](Self::lease_time) must match the queue's);
/// - catches a panic: a failed attempt, the panic's message its reason;
/// - enforces the job's own timeout ([`NewJob::timeout`](crate::jobs::NewJob::timeout)),
///   else its kind's: the attempt fails with reason
///   `timed out` and the job is retried or dead as its attempts say. A
///   sync handler cannot be stopped from outside: its thread is
///   **abandoned** (left to run; [`Context::should_stop`] turns true so a
///   handler that looks can end; what it returns is ignored) and a new
///   thread takes its place, so concurrency stays N;
/// - settles the job: ack, retry (the kind's back-off and attempts, else
///   the queue's), or dead letter; and calls the hooks.
///
/// On a stop (SIGINT/SIGTERM unless [`handle_signals(false)`](Self::handle_signals),
/// a [`StopHandle`], or nothing ready with [`until_empty`](Self::until_empty))
/// no new job is leased; running jobs get the grace period
/// ([`grace`](Self::grace), default 5 s; a second signal ends it at once)
/// and those still running then are given back without counting the
/// attempt (their threads abandoned). [`run`](Self::run) then returns a
/// [`Summary`].
///
/// A queue server that fails or goes away does not stop it: it waits and
/// tries again (100 ms, doubling, at most 5 s). A lease lost before its
/// settle (the job ran past the lease, the server failed) is counted as
/// `lost`: the job runs again.
///
/// ```
/// use std::sync::Arc;
/// use dque::jobs::{EmbeddedJobs, JobQueue};
/// use dque::runtime::{Context, EnqueueJob, Job, JobError, Worker};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Greet {
///     name: String,
/// }
///
/// impl Job for Greet {
///     const KIND: &'static str = "greet";
///     fn run(self, _cx: &Context) -> Result<(), JobError> {
///         println!("hello {}", self.name);
///         Ok(())
///     }
/// }
///
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = Arc::new(EmbeddedJobs::create(dir.path().join("jobs"))?);
/// queue.enqueue_job(&Greet { name: "ada".into() })?;
/// let summary = Worker::new(queue)
///     .register::<Greet>()
///     .concurrency(4)
///     .handle_signals(false)
///     .until_empty(true)
///     .run()?;
/// assert_eq!(summary.succeeded, 1);
/// # Ok(()) }
/// ```
pub struct Worker {
    set: Arc<QueueSet>,
    kinds: Kinds,
    concurrency: usize,
    lease_time: Duration,
    grace: Duration,
    signals: bool,
    until_empty: bool,
    unknown: UnknownKind,
    state: StateMap,
    hooks: Hooks,
    stop: StopHandle,
    /// The worker opened its queue (from an address): `run` closes it.
    owns_queue: bool,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("kinds", &self.kinds)
            .field("concurrency", &self.concurrency)
            .field("lease_time", &self.lease_time)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `queue`: concurrency 1, lease time 30 s, grace 5 s,
    /// SIGINT/SIGTERM handled, unknown kinds retried.
    pub fn new(queue: Arc<dyn JobQueue>) -> Self {
        let set = QueueSet::new(vec![queue], Order::InOrder).expect("one queue");
        Worker::from_set(set)
    }

    /// A worker on the queue a `Box` holds (as an address opens one).
    pub fn from_box(queue: Box<dyn JobQueue>) -> Self {
        Worker::new(Arc::from(queue))
    }

    /// A worker on the queue at `address` (a queue directory,
    /// `postgres://…#QUEUE`, `redis://…#QUEUE`: see
    /// [`open_address`](crate::jobs::open_address)), opened with default
    /// [`AddressOptions`]. The worker owns the queue: [`run`](Self::run)
    /// closes it before it returns.
    ///
    /// ```
    /// use dque::jobs::{AddressOptions, JobQueue};
    /// use dque::runtime::{Context, EnqueueJob, Job, JobError, Worker};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct Greet { name: String }
    /// # impl Job for Greet {
    /// #     const KIND: &'static str = "greet";
    /// #     fn run(self, _: &Context) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let address = dir.path().join("jobs").display().to_string();
    /// let queue = AddressOptions::new().create(true).open_str(&address)?;
    /// queue.enqueue_job(&Greet { name: "ada".into() })?;
    /// queue.close()?;
    ///
    /// let summary = Worker::open(&address)?
    ///     .register::<Greet>()
    ///     .handle_signals(false)
    ///     .until_empty(true)
    ///     .run()?;
    /// assert_eq!(summary.succeeded, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open_address`](crate::jobs::open_address): an ADDRESS that
    /// does not parse or names a backend this build lacks, or the
    /// backend's errors of opening.
    pub fn open(address: &str) -> Result<Self> {
        Worker::open_with(address, &AddressOptions::new())
    }

    /// [`open`](Self::open) with `options`; their lease time, if set, is
    /// also the worker's ([`lease_time`](Self::lease_time)).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with(address: &str, options: &AddressOptions) -> Result<Self> {
        let mut worker = Worker::from_box(options.open_str(address)?);
        worker.owns_queue = true;
        if let Some(lease_time) = options.lease_time_value() {
            worker.lease_time = lease_time;
        }
        Ok(worker)
    }

    /// A worker leasing from several queues, in the set's order. A queue
    /// whose server is in trouble (an error it retries on) is passed
    /// over: the other queues' jobs run meanwhile.
    pub fn from_set(set: QueueSet) -> Self {
        Worker {
            set: Arc::new(set),
            kinds: Kinds::default(),
            concurrency: 1,
            lease_time: DEFAULT_LEASE_TIME,
            grace: DEFAULT_GRACE,
            signals: true,
            until_empty: false,
            unknown: UnknownKind::default(),
            state: StateMap::default(),
            hooks: Hooks::default(),
            stop: StopHandle::new(),
            owns_queue: false,
        }
    }

    /// Runs jobs of kind `J`, with its defaults ([`Job::options`]).
    #[must_use]
    pub fn register<J: Job>(self) -> Self {
        self.register_with::<J>(J::options())
    }

    /// Runs jobs of kind `J` with `options` instead of its defaults.
    #[must_use]
    pub fn register_with<J: Job>(mut self, options: KindOptions) -> Self {
        self.kinds.register::<J>(options);
        self
    }

    /// How many jobs run at once, each on its own thread (default 1; at least 1).
    #[must_use]
    pub fn concurrency(mut self, threads: usize) -> Self {
        self.concurrency = threads.max(1);
        self
    }

    /// The queue's lease time (default 30 s, every backend's default):
    /// a running job's lease is touched at a third of it. The Jobs API
    /// does not tell a lease's length, so set it when the queue's differs.
    #[must_use]
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// How long running jobs get to finish after a stop (default 5 s).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Whether SIGINT and SIGTERM stop the worker (default true; false for
    /// a program that owns its signals and uses a [`StopHandle`]).
    #[must_use]
    pub fn handle_signals(mut self, handle: bool) -> Self {
        self.signals = handle;
        self
    }

    /// Stops once no job is ready (scheduled jobs are not waited for;
    /// default false: run until stopped).
    #[must_use]
    pub fn until_empty(mut self, until_empty: bool) -> Self {
        self.until_empty = until_empty;
        self
    }

    /// What to do with a job whose kind is not registered (default: a
    /// failed attempt, [`UnknownKind::Retry`]).
    #[must_use]
    pub fn unknown_kind(mut self, unknown: UnknownKind) -> Self {
        self.unknown = unknown;
        self
    }

    /// Shares `value` with every handler ([`Context::state`]); one value per type.
    #[must_use]
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Calls `hook` after every finished attempt, on the thread that
    /// settled it (a panic in a hook is caught and ignored).
    #[must_use]
    pub fn on_finished(mut self, hook: impl Fn(&Finished<'_>) + Send + Sync + 'static) -> Self {
        self.hooks.finished.push(Arc::new(hook));
        self
    }

    /// Calls `hook` after every failed attempt whose job runs again.
    #[must_use]
    pub fn on_failure(mut self, hook: impl Fn(&Finished<'_>) + Send + Sync + 'static) -> Self {
        self.hooks.failure.push(Arc::new(hook));
        self
    }

    /// Calls `hook` after every job made a dead letter.
    #[must_use]
    pub fn on_dead(mut self, hook: impl Fn(&Finished<'_>) + Send + Sync + 'static) -> Self {
        self.hooks.dead.push(Arc::new(hook));
        self
    }

    /// A handle that stops this worker (from another thread, or a job).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The names of the kinds registered, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.kinds.names()
    }

    /// Runs until stopped, then returns what it did. A worker that opened
    /// its queue ([`open`](Self::open)) closes it first.
    ///
    /// # Errors
    ///
    /// `InvalidOption` if no kind is registered, or the signal handlers
    /// cannot be installed; an error of the queue that is not a server's
    /// passing trouble (`Closed`, `Corrupted`, `WritesRefused`...): the
    /// worker then stops as for a signal (running jobs get the grace
    /// period) and returns it; the error of closing a queue it opened.
    pub fn run(self) -> Result<Summary> {
        if self.kinds.names().is_empty() {
            return Err(Error::InvalidOption {
                name: "Worker::register",
                reason: "the worker runs no kind: register at least one".into(),
            });
        }
        let _signals = match self.signals {
            true => Some(self.stop.on_signals().map_err(|e| Error::InvalidOption {
                name: "Worker::handle_signals",
                reason: format!(
                    "cannot handle SIGINT/SIGTERM ({e}): use handle_signals(false) and a StopHandle"
                ),
            })?),
            false => None,
        };
        let grace = self.grace;
        let concurrency = self.concurrency;
        let owns_queue = self.owns_queue;
        let shared = Arc::new(Shared::new(self));
        for _ in 0..concurrency {
            Shared::spawn_thread(&shared);
        }
        let (watch_end, watch_ended) = crossbeam_channel::bounded::<()>(0);
        let watchdog = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("dque-watchdog".into())
                .spawn(move || shared.watch(&watch_ended))
                .expect("a thread")
        };
        // Until told to stop (or every thread ended on an error).
        while !shared.stop.wait(POLL) && shared.threads() > 0 {}
        let deadline = Instant::now() + grace;
        while shared.threads() > 0 && !shared.stop.is_stopping_now() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        shared.give_back_running();
        drop(watch_end);
        let _ = watchdog.join();
        // After the watchdog: it starts no thread any more.
        shared.join_settling_threads();
        let summary = shared.tally.summary(shared.stop.reason());
        let fatal = shared.fatal.lock().take();
        // Every job is settled: what it wrote is made durable by the close.
        let closed = match owns_queue {
            true => shared
                .set
                .queues()
                .iter()
                .try_for_each(|queue| queue.close()),
            false => Ok(()),
        };
        match (fatal, closed) {
            (Some(error), _) | (None, Err(error)) => Err(error),
            (None, Ok(())) => Ok(summary),
        }
    }

    /// Runs every job due on the caller's thread until none is ready (with
    /// `clock`: moving it to each scheduled job's time), as
    /// [`testing::drain`](super::testing::drain) does.
    pub(crate) fn drain(self, clock: Option<&crate::jobs::ManualClock>) -> Result<Summary> {
        let shared = Shared::new(self);
        // Listed as a thread's is: a job starts only in a listed cell.
        let cell = Arc::new(Cell::default());
        shared.cells.lock().push(Arc::clone(&cell));
        let mut scratch = Scratch::default();
        let mut budget = super::testing::DrainBudget::new("testing::drain");
        loop {
            let Some((queue, lease)) = shared.set.lease()? else {
                match clock.map(|clock| (clock, shared.next_due())) {
                    Some((clock, Some(due))) => {
                        clock.set(due?);
                        continue;
                    }
                    _ => break,
                }
            };
            budget.spend()?;
            if let Some((running, kind)) = shared.start(queue, lease) {
                let ended = shared
                    .run_handler(&cell, running, kind.as_ref(), &mut scratch)
                    .expect("the drain's cell stays listed");
                let running = cell.running.lock().take().expect("no watchdog takes it");
                shared.finish(running, ended);
            }
        }
        shared.stop.stop_for(StopReason::Empty);
        let summary = shared.tally.summary(shared.stop.reason());
        let fatal = shared.fatal.lock().take();
        match fatal {
            Some(error) => Err(error),
            None => Ok(summary),
        }
    }
}

/// A job a thread runs: what the watchdog needs to touch or settle it.
struct Running {
    lease: JobLease,
    queue: usize,
    kind: Option<Arc<dyn Kind>>,
    kind_name: Option<&'static str>,
    started: Instant,
    touched: Instant,
    deadline: Option<Instant>,
}

/// A worker thread's copy of the job it runs, in buffers kept from job to
/// job (no allocation per job once they are large enough).
#[derive(Default)]
struct Scratch {
    id: String,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

/// The largest body buffer a worker thread keeps between jobs.
const KEPT_BODY_BYTES: usize = 1 << 20;

impl Scratch {
    fn copy(&mut self, job: &crate::jobs::Job) {
        self.id.clear();
        self.id.push_str(&job.id);
        // A buffer grown by one huge body is not kept for the small ones.
        if self.body.capacity() > KEPT_BODY_BYTES && job.body.len() <= KEPT_BODY_BYTES {
            self.body = Vec::new();
        }
        self.body.clear();
        self.body.extend_from_slice(&job.body);
        self.headers.truncate(job.headers.len());
        for (at, (name, value)) in job.headers.iter().enumerate() {
            match self.headers.get_mut(at) {
                Some((n, v)) => {
                    n.clear();
                    n.push_str(name);
                    v.clear();
                    v.push_str(value);
                }
                None => self.headers.push((name.clone(), value.clone())),
            }
        }
    }
}

/// One worker thread's place: the job it runs, shared with the watchdog.
#[derive(Default)]
struct Cell {
    running: Mutex<Option<Running>>,
    /// Set when the job's attempt is over without the thread (timeout, stop).
    cancel: AtomicBool,
    idle: AtomicBool,
}

/// What the worker's threads share.
struct Shared {
    set: Arc<QueueSet>,
    kinds: Kinds,
    concurrency: usize,
    touch_every: Duration,
    until_empty: bool,
    unknown: UnknownKind,
    state: StateMap,
    hooks: Hooks,
    stop: StopHandle,
    /// The cells of the threads that run for the worker (not abandoned).
    cells: Mutex<Vec<Arc<Cell>>>,
    /// Every thread started, with its cell: joined at the end unless
    /// abandoned in a handler.
    spawned: Mutex<Vec<(Arc<Cell>, std::thread::JoinHandle<()>)>>,
    idle: AtomicUsize,
    tally: Tally,
    fatal: Mutex<Option<Error>>,
}

impl Shared {
    fn new(worker: Worker) -> Self {
        Shared {
            set: worker.set,
            kinds: worker.kinds,
            concurrency: worker.concurrency,
            touch_every: touch_interval(worker.lease_time),
            until_empty: worker.until_empty,
            unknown: worker.unknown,
            state: worker.state,
            hooks: worker.hooks,
            stop: worker.stop,
            cells: Mutex::new(Vec::new()),
            spawned: Mutex::new(Vec::new()),
            idle: AtomicUsize::new(0),
            tally: Tally::default(),
            fatal: Mutex::new(None),
        }
    }

    fn threads(&self) -> usize {
        self.cells.lock().len()
    }

    fn spawn_thread(shared: &Arc<Shared>) {
        let cell = Arc::new(Cell::default());
        shared.cells.lock().push(Arc::clone(&cell));
        let spawned = std::thread::Builder::new()
            .name("dque-worker".into())
            .spawn({
                let (shared, cell) = (Arc::clone(shared), Arc::clone(&cell));
                move || shared.work(&cell)
            });
        match spawned {
            Ok(thread) => shared.spawned.lock().push((cell, thread)),
            Err(e) => {
                // The cell never ran: the worker has one thread fewer.
                shared.leave(&cell);
                tracing::error!(error = %e, "cannot start a worker thread");
            }
        }
    }

    /// Stops the worker for `error`, which it cannot go on after.
    fn fail_with(&self, error: Error) {
        tracing::error!(%error, "the worker stops on an error");
        self.fatal.lock().get_or_insert(error);
        self.stop.stop_for(StopReason::Error);
    }

    /// Removes `cell` from the running threads; false if it was abandoned.
    fn leave(&self, cell: &Arc<Cell>) -> bool {
        let mut cells = self.cells.lock();
        let Some(at) = cells.iter().position(|c| Arc::ptr_eq(c, cell)) else {
            return false;
        };
        cells.swap_remove(at);
        if cell.idle.swap(false, Ordering::SeqCst) {
            self.idle.fetch_sub(1, Ordering::SeqCst);
        }
        true
    }

    fn set_idle(&self, cell: &Cell, idle: bool) {
        if cell.idle.swap(idle, Ordering::SeqCst) != idle {
            match idle {
                true => self.idle.fetch_add(1, Ordering::SeqCst),
                false => self.idle.fetch_sub(1, Ordering::SeqCst),
            };
        }
        // Every thread found nothing at its last look, after its last job
        // (which may have made a job ready again) was settled.
        if idle && self.until_empty && self.idle.load(Ordering::SeqCst) >= self.concurrency {
            self.stop.stop_for(StopReason::Empty);
        }
    }

    /// One worker thread: lease, run, settle, until the worker stops.
    fn work(self: Arc<Self>, cell: &Arc<Cell>) {
        let mut pause = Duration::ZERO;
        let mut scratch = Scratch::default();
        while !self.stop.is_stopping() {
            // A ready job without the waiting's bookkeeping; then a wait.
            // A queue whose server is in trouble keeps no other's job waiting.
            let leased = match self.set.lease_past(is_server_trouble) {
                Ok(None) => self.set.lease_timeout_past(LOOK_EVERY, is_server_trouble),
                other => other,
            };
            let (queue, lease) = match leased {
                Ok(Some(found)) => found,
                Ok(None) => {
                    pause = Duration::ZERO;
                    self.set_idle(cell, true);
                    continue;
                }
                Err(e) if is_server_trouble(&e) => {
                    if pause.is_zero() {
                        tracing::warn!(error = %e, "the queue's server is in trouble; trying again");
                    }
                    pause = trouble_pause(pause);
                    self.stop.wait(pause);
                    continue;
                }
                Err(e) => {
                    self.fail_with(e);
                    break;
                }
            };
            pause = Duration::ZERO;
            self.set_idle(cell, false);
            if self.stop.is_stopping() {
                // Told to stop while it waited: the job is not started.
                self.settle_now(queue, lease, Settle::Release);
                break;
            }
            let Some((running, kind)) = self.start(queue, lease) else {
                continue;
            };
            let Some(ended) = self.run_handler(cell, running, kind.as_ref(), &mut scratch) else {
                // Given back by the end of the grace period: not run.
                return;
            };
            // The watchdog may have taken the job (timeout, stop): then this
            // thread was abandoned, and another runs in its place.
            let Some(running) = cell.running.lock().take() else {
                return;
            };
            self.finish(running, ended);
        }
        self.leave(cell);
    }

    /// The job to run of leased `lease`, with its kind; or `None` when
    /// it is settled at once (unknown kind).
    fn start(&self, queue: usize, lease: JobLease) -> Option<(Running, Arc<dyn Kind>)> {
        let now = Instant::now();
        let header = lease.header(KIND_HEADER);
        let Some((kind_name, kind)) = header.and_then(|name| self.kinds.get_named(name)) else {
            let ended = Ended::UnknownKind(header.map(str::to_owned));
            let running = Running {
                lease,
                queue,
                kind: None,
                kind_name: None,
                started: now,
                touched: now,
                deadline: None,
            };
            self.finish(running, ended);
            return None;
        };
        let kind = Arc::clone(kind);
        // The job's own timeout (`NewJob::timeout`) takes precedence over
        // its kind's.
        let timeout = lease.job.timeout().or(kind.options().timeout);
        let running = Running {
            deadline: timeout.and_then(|t| now.checked_add(t)),
            kind: Some(Arc::clone(&kind)),
            kind_name: Some(kind_name),
            lease,
            queue,
            started: now,
            touched: now,
        };
        Some((running, kind))
    }

    /// Runs the handler of `running`, which waits in `cell` meanwhile
    /// (where the watchdog touches its lease, or takes it at its timeout);
    /// returns how the attempt ended.
    fn run_handler(
        &self,
        cell: &Cell,
        running: Running,
        kind: &dyn Kind,
        scratch: &mut Scratch,
    ) -> Option<Ended> {
        // The handler's view of the job is a copy (into buffers the thread
        // reuses): the lease itself is the watchdog's to settle if the
        // handler outlives its timeout.
        scratch.copy(&running.lease.job);
        let (attempt, priority) = (running.lease.attempt, running.lease.priority);
        let kind_name = running.kind_name.unwrap_or("");
        let queue = self.set.queue(running.queue);
        cell.cancel.store(false, Ordering::SeqCst);
        {
            // Installed under the cells' lock: once the grace period gave
            // back what ran (and let the cells go), a job leased just
            // before is given back too, not run after `run` returned.
            let cells = self.cells.lock();
            if !cells.iter().any(|c| std::ptr::eq(Arc::as_ptr(c), cell)) {
                drop(cells);
                self.settle_running(running, Settle::Release);
                return None;
            }
            *cell.running.lock() = Some(running);
        }
        let span = tracing::info_span!(
            "job",
            kind = kind_name,
            id = %scratch.id,
            attempt,
            queue = queue.name(),
        );
        let _entered = span.enter();
        let cx = Context {
            kind: kind_name,
            id: &scratch.id,
            attempt,
            priority,
            headers: &scratch.headers,
            queue: Some(queue),
            queue_name: queue.name(),
            state: &self.state,
            stop: &cell.cancel,
            worker_stop: self.stop.flag(),
        };
        Some(kind.run(&scratch.body, &cx))
    }

    /// Settles `running` as `ended` says, counts it, calls the hooks.
    fn finish(&self, running: Running, ended: Ended) {
        match &ended {
            Ended::Panicked(_) => Tally::add(&self.tally.panicked),
            Ended::TimedOut => Tally::add(&self.tally.timed_out),
            _ => {}
        }
        let action = settle(
            ended,
            running.lease.attempt,
            running.kind.as_ref().map(|kind| kind.options()),
            self.stop.is_stopping(),
            self.unknown,
        );
        self.settle_running(running, action);
    }

    fn settle_now(&self, queue: usize, lease: JobLease, action: Settle) {
        let now = Instant::now();
        let running = Running {
            lease,
            queue,
            kind: None,
            kind_name: None,
            started: now,
            touched: now,
            deadline: None,
        };
        self.settle_running(running, action);
    }

    fn settle_running(&self, running: Running, action: Settle) {
        let Running {
            lease,
            queue,
            kind_name,
            started,
            ..
        } = running;
        let id = lease.id.clone();
        let attempt = lease.attempt;
        let header_kind;
        let kind = match kind_name {
            Some(name) => name,
            None => {
                header_kind = lease.header(KIND_HEADER).unwrap_or("").to_owned();
                header_kind.as_str()
            }
        };
        let queue = self.set.queue(queue);
        let outcome = match apply(queue, lease, action) {
            Ok(outcome) => outcome,
            Err(e) => {
                self.fail_with(e);
                return;
            }
        };
        let finished = Finished {
            kind,
            id: &id,
            attempt,
            queue: queue.name(),
            outcome: &outcome,
            ran: started.elapsed(),
        };
        report(&self.tally, &self.hooks, &finished);
    }

    /// The watchdog: touches the leases of running jobs, and ends those
    /// past their timeout, until `end` is dropped.
    fn watch(self: &Arc<Self>, end: &crossbeam_channel::Receiver<()>) {
        let tick =
            (self.touch_every / 4).clamp(Duration::from_millis(1), Duration::from_millis(25));
        while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = end.recv_timeout(tick) {
            let now = Instant::now();
            let cells = self.cells.lock().clone();
            for cell in cells {
                let mut slot = cell.running.lock();
                let Some(running) = slot.as_mut() else {
                    continue;
                };
                if running.deadline.is_some_and(|deadline| now >= deadline) {
                    let running = slot.take().expect("a job");
                    drop(slot);
                    cell.cancel.store(true, Ordering::SeqCst);
                    self.abandon(&cell);
                    if !self.stop.is_stopping() {
                        Shared::spawn_thread(self);
                    }
                    self.finish(running, Ended::TimedOut);
                } else if now.duration_since(running.touched) >= self.touch_every {
                    // A lease lost meanwhile is found by the settle that follows.
                    let _ = self.set.queue(running.queue).touch(&running.lease);
                    running.touched = now;
                }
            }
        }
    }

    /// `cell`'s thread no longer runs for the worker.
    fn abandon(&self, cell: &Arc<Cell>) {
        if self.leave(cell) {
            Tally::add(&self.tally.abandoned);
        }
    }

    /// At the end of the grace period: every job still running is given
    /// back without counting the attempt, its thread abandoned.
    fn give_back_running(&self) {
        let cells = std::mem::take(&mut *self.cells.lock());
        for cell in cells {
            let running = cell.running.lock().take();
            if let Some(running) = running {
                cell.cancel.store(true, Ordering::SeqCst);
                Tally::add(&self.tally.abandoned);
                self.settle_running(running, Settle::Release);
            }
        }
    }

    /// Waits for every thread not abandoned in a handler: one still in a
    /// lease call gives back what it leases, one settling a job that ended
    /// finishes the settle. So once `run` returns the worker holds no lease
    /// (but an abandoned handler's, given back already) and the queue can
    /// be closed under no thread of it. Each is in a bounded queue call.
    fn join_settling_threads(&self) {
        let spawned = std::mem::take(&mut *self.spawned.lock());
        for (cell, thread) in spawned {
            // Set only when its job was taken from it: its handler may run on.
            if !cell.cancel.load(Ordering::SeqCst) {
                let _ = thread.join();
            }
        }
    }

    /// The earliest due time of a scheduled job in the set, if any.
    fn next_due(&self) -> Option<Result<std::time::SystemTime>> {
        let mut due = super::testing::NextDue::default();
        for queue in self.set.queues() {
            match queue.waiting(super::testing::DUE_LOOKAHEAD) {
                Ok(waiting) => due.look(waiting),
                Err(e) => return Some(Err(e)),
            }
        }
        due.earliest().map(Ok)
    }
}
