//! The tokio worker: N slot tasks (the thread runtime's threads) lease a
//! job each, run its handler as a task of its own while watching it
//! (touching its lease, aborting it at its timeout or at the end of the
//! grace period), and settle it by the rules the thread runtime follows
//! (`rules`, `shutdown`).

use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tracing::Instrument;

use super::async_job::{AsyncContext, AsyncJob, AsyncKind, Handler, TypedAsync};
use super::context::StateMap;
use super::job::{JobError, KindOptions, KIND_HEADER};
use super::registry::{panic_message, Kinds};
use super::rules::{
    apply_async, is_server_trouble, settle, touch_interval, trouble_pause, Ended, Settle,
    UnknownKind, DEFAULT_LEASE_TIME,
};
use super::shutdown::{StopHandle, StopReason, DEFAULT_GRACE};
use super::worker::{report, Finished, Hooks, Summary, Tally};
use crate::jobs::{AddressOptions, AsyncJobQueue, AsyncQueueSet, JobLease, Order};
use crate::{Error, Result};

/// How long a lease waits for a job (or a slot) before the worker looks
/// at the stop flag: the thread runtime's.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How often the grace period looks at a second stop.
const POLL: Duration = Duration::from_millis(10);

/// A worker runtime for tokio programs: runs the registered
/// [`AsyncJob`] kinds' jobs from an [`AsyncJobQueue`] (the embedded
/// queue, PostgreSQL or Redis), or several ([`from_set`](Self::from_set)),
/// or the queue at an ADDRESS ([`open`](Self::open)), at most
/// `concurrency` at a time, each as a tokio task. The rules are
/// [`Worker`](super::Worker)'s:
///
/// - a job of a kind it does not run is a failed attempt, or a dead letter
///   ([`UnknownKind`]), never lost; a body that does not decode is a dead
///   letter with the decode error as its reason;
/// - the lease is touched at a third of the lease time while the handler
///   runs ([`lease_time`](Self::lease_time) must match the queue's);
/// - a panic is caught: a failed attempt, the panic's message its reason;
/// - past the job's own timeout ([`NewJob::timeout`](crate::jobs::NewJob::timeout)),
///   else its kind's, the attempt fails with reason `timed out` and
///   the handler's task is **aborted**: its future is dropped at its next
///   `.await` (a handler that blocks its thread without awaiting cannot be
///   stopped: give such work to `spawn_blocking`);
/// - on a stop (SIGINT/SIGTERM unless [`handle_signals(false)`](Self::handle_signals),
///   a [`StopHandle`], or nothing ready with [`until_empty`](Self::until_empty))
///   no new job is leased; running jobs get the grace period
///   ([`grace`](Self::grace), default 5 s; a second signal ends it at
///   once); those still running then are aborted and given back without
///   counting the attempt. [`run`](Self::run) then returns a [`Summary`]
///   (`abandoned` counts the handler tasks aborted).
///
/// A queue server that fails or goes away does not stop it: it waits and
/// tries again (100 ms, doubling, at most 5 s).
///
/// ```
/// use std::sync::Arc;
/// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, EmbeddedJobs};
/// use dque::runtime::{AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Greet {
///     name: String,
/// }
///
/// impl AsyncJob for Greet {
///     const KIND: &'static str = "greet";
///     async fn perform(self, _cx: &AsyncContext) -> Result<(), JobError> {
///         println!("hello {}", self.name);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue: Arc<dyn AsyncJobQueue> =
///     Arc::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join("jobs"))?));
/// queue.enqueue_job(&Greet { name: "ada".into() }).await?;
/// let summary = AsyncWorker::new(queue)
///     .register::<Greet>()
///     .concurrency(16)
///     .handle_signals(false) // a doctest; a program keeps the default
///     .until_empty(true)
///     .run()
///     .await?;
/// assert_eq!(summary.succeeded, 1);
/// # Ok(()) }
/// ```
pub struct AsyncWorker {
    set: Arc<AsyncQueueSet>,
    kinds: Kinds<dyn AsyncKind>,
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

impl std::fmt::Debug for AsyncWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncWorker")
            .field("queue", &self.set.name())
            .field("kinds", &self.kinds)
            .field("concurrency", &self.concurrency)
            .field("lease_time", &self.lease_time)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl AsyncWorker {
    /// A worker on `queue`: concurrency 1, lease time 30 s, grace 5 s,
    /// SIGINT/SIGTERM handled, unknown kinds retried.
    pub fn new(queue: Arc<dyn AsyncJobQueue>) -> Self {
        let set = AsyncQueueSet::new(vec![queue], Order::InOrder).expect("one queue");
        AsyncWorker::from_set(set)
    }

    /// A worker on the queue a `Box` holds (as an address opens one).
    pub fn from_box(queue: Box<dyn AsyncJobQueue>) -> Self {
        AsyncWorker::new(Arc::from(queue))
    }

    /// A worker on the queue at `address` (a queue directory,
    /// `postgres://…#QUEUE`, `redis://…#QUEUE`: see
    /// [`open_address_async`](crate::jobs::open_address_async)), opened
    /// with default [`AddressOptions`]. The worker owns the queue:
    /// [`run`](Self::run) closes it before it returns.
    ///
    /// ```
    /// use dque::jobs::{open_address_async, AddressOptions, JobQueue};
    /// use dque::runtime::{AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct Greet { name: String }
    /// # impl AsyncJob for Greet {
    /// #     const KIND: &'static str = "greet";
    /// #     async fn perform(self, _: &AsyncContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let address = dir.path().join("jobs").display().to_string();
    /// AddressOptions::new().create(true).open_str(&address)?.close()?;
    /// let queue = open_address_async(&address).await?;
    /// queue.enqueue_job(&Greet { name: "ada".into() }).await?;
    /// drop(queue);
    ///
    /// let summary = AsyncWorker::open(&address)
    ///     .await?
    ///     .register::<Greet>()
    ///     .handle_signals(false)
    ///     .until_empty(true)
    ///     .run()
    ///     .await?;
    /// assert_eq!(summary.succeeded, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open_address_async`](crate::jobs::open_address_async): an
    /// ADDRESS that does not parse or names a backend this build lacks,
    /// or the backend's errors of opening.
    pub async fn open(address: &str) -> Result<Self> {
        AsyncWorker::open_with(address, &AddressOptions::new()).await
    }

    /// [`open`](Self::open) with `options`; their lease time, if set, is
    /// also the worker's ([`lease_time`](Self::lease_time)).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn open_with(address: &str, options: &AddressOptions) -> Result<Self> {
        let mut worker = AsyncWorker::from_box(options.open_str_async(address).await?);
        worker.owns_queue = true;
        if let Some(lease_time) = options.lease_time_value() {
            worker.lease_time = lease_time;
        }
        Ok(worker)
    }

    /// A worker leasing from several queues, in the set's order (as
    /// [`Worker::from_set`](super::Worker::from_set)): each job is settled
    /// in the queue it came from, and its handler sees that queue
    /// ([`AsyncContext::queue`]). A queue whose server is in trouble (an
    /// error the worker retries on) is passed over: the other queues'
    /// jobs run meanwhile.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, AsyncQueueSet, EmbeddedJobs, Order};
    /// use dque::runtime::{AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct Greet { name: String }
    /// # impl AsyncJob for Greet {
    /// #     const KIND: &'static str = "greet";
    /// #     async fn perform(self, _: &AsyncContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let open = |name: &str| -> Result<Arc<dyn AsyncJobQueue>, dque::Error> {
    ///     Ok(Arc::new(AsyncEmbeddedJobs::new(EmbeddedJobs::create(dir.path().join(name))?)))
    /// };
    /// let (urgent, batch) = (open("urgent")?, open("batch")?);
    /// urgent.enqueue_job(&Greet { name: "ada".into() }).await?;
    /// batch.enqueue_job(&Greet { name: "bob".into() }).await?;
    /// let set = AsyncQueueSet::new(vec![urgent, batch], Order::InOrder)?;
    /// let summary = AsyncWorker::from_set(set)
    ///     .register::<Greet>()
    ///     .handle_signals(false)
    ///     .until_empty(true)
    ///     .run()
    ///     .await?;
    /// assert_eq!(summary.succeeded, 2);
    /// # Ok(()) }
    /// ```
    pub fn from_set(set: AsyncQueueSet) -> Self {
        AsyncWorker {
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

    /// Runs jobs of kind `J`, with its defaults ([`AsyncJob::options`]).
    #[must_use]
    pub fn register<J: AsyncJob>(self) -> Self {
        self.register_with::<J>(J::options())
    }

    /// Runs jobs of kind `J` with `options` instead of its defaults.
    #[must_use]
    pub fn register_with<J: AsyncJob>(mut self, options: KindOptions) -> Self {
        self.kinds.insert(
            J::KIND,
            Arc::new(TypedAsync::<J> {
                options,
                job: PhantomData,
            }),
        );
        self
    }

    /// How many jobs run at once, each as a task (default 1; at least 1).
    #[must_use]
    pub fn concurrency(mut self, tasks: usize) -> Self {
        self.concurrency = tasks.max(1);
        self
    }

    /// The queue's lease time (default 30 s, every backend's default): a
    /// running job's lease is touched at a third of it.
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

    /// Stops once no job is ready and none runs (scheduled jobs are not
    /// waited for; default false: run until stopped).
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

    /// Shares `value` with every handler ([`AsyncContext::state`]); one
    /// value per type.
    #[must_use]
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Calls `hook` after every finished attempt (on the worker's task; a
    /// panic in a hook is caught and ignored; keep it short, it holds a slot).
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

    /// A handle that stops this worker (from any thread or task, or a job).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The names of the kinds registered, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.kinds.names()
    }

    /// Runs until stopped, then returns what it did. Call it within a
    /// tokio runtime with its time driver (`enable_time`, or `#[tokio::main]`).
    /// A worker that opened its queue ([`open`](Self::open)) closes it first.
    ///
    /// # Errors
    ///
    /// `InvalidOption` if no kind is registered, or the signal handlers
    /// cannot be installed; an error of the queue that is not a server's
    /// passing trouble (`Closed`, `Corrupted`, `WritesRefused`...): the
    /// worker then stops as for a signal (running jobs get the grace
    /// period) and returns it; the error of closing a queue it opened.
    ///
    /// **Cancel safety:** none. Dropping the future before it completes
    /// (rather than stopping the worker) aborts the running handlers and
    /// settles nothing: their jobs run again once their leases end, the
    /// attempts counted.
    pub async fn run(self) -> Result<Summary> {
        if self.kinds.names().is_empty() {
            return Err(Error::InvalidOption {
                name: "AsyncWorker::register",
                reason: "the worker runs no kind: register at least one".into(),
            });
        }
        let _signals = match self.signals {
            true => Some(self.stop.on_signals().map_err(|e| Error::InvalidOption {
                name: "AsyncWorker::handle_signals",
                reason: format!(
                    "cannot handle SIGINT/SIGTERM ({e}): use handle_signals(false) and a StopHandle"
                ),
            })?),
            false => None,
        };
        let (grace, concurrency, owns_queue) = (self.grace, self.concurrency, self.owns_queue);
        let (grace_over, grace_watch) = watch::channel(false);
        let shared = Arc::new(Shared::new(self, grace_watch));
        let mut slots = JoinSet::new();
        for _ in 0..concurrency {
            slots.spawn(Arc::clone(&shared).slot());
        }
        // Until told to stop (or every slot ended on an error).
        while !shared.stop.is_stopping() && !slots.is_empty() {
            let _ = tokio::time::timeout(POLL, slots.join_next()).await;
        }
        let deadline = Instant::now() + grace;
        while !slots.is_empty() && !shared.stop.is_stopping_now() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = tokio::time::timeout(left.min(POLL), slots.join_next()).await;
        }
        // What still runs is given back uncounted by its watcher.
        let _ = grace_over.send(true);
        while slots.join_next().await.is_some() {}

        let summary = shared.tally.summary(shared.stop.reason());
        let fatal = shared.fatal.lock().take();
        // Every job is settled: what it wrote is made durable by the close.
        let closed = match owns_queue {
            true => shared.set.close().await,
            false => Ok(()),
        };
        match (fatal, closed) {
            (Some(error), _) | (None, Err(error)) => Err(error),
            (None, Ok(())) => Ok(summary),
        }
    }

    /// Runs every job due, one at a time, until none is ready (with
    /// `clock`: moving it to each scheduled job's time), as
    /// [`testing::drain_async`](super::testing::drain_async) does.
    pub(crate) async fn drain(self, clock: Option<&crate::jobs::ManualClock>) -> Result<Summary> {
        // Never sent: a drain has no grace period to end.
        let (_grace_over, grace_watch) = watch::channel(false);
        let shared = Shared::new(self, grace_watch);
        let mut budget = super::testing::DrainBudget::new("testing::drain_async");
        loop {
            let Some((index, lease)) = shared.set.lease_indexed().await? else {
                let Some(clock) = clock else { break };
                let mut due = super::testing::NextDue::default();
                for queue in shared.set.queues() {
                    due.look(queue.waiting(super::testing::DUE_LOOKAHEAD).await?);
                }
                match due.earliest() {
                    Some(at) => {
                        clock.set(at);
                        continue;
                    }
                    None => break,
                }
            };
            budget.spend()?;
            shared.attempt(index, lease).await;
            if let Some(error) = shared.fatal.lock().take() {
                return Err(error);
            }
        }
        shared.stop.stop_for(StopReason::Empty);
        Ok(shared.tally.summary(shared.stop.reason()))
    }
}

/// What the worker's tasks share.
struct Shared {
    set: Arc<AsyncQueueSet>,
    kinds: Kinds<dyn AsyncKind>,
    touch_every: Duration,
    unknown: UnknownKind,
    state: Arc<StateMap>,
    hooks: Hooks,
    stop: StopHandle,
    tally: Tally,
    fatal: Mutex<Option<Error>>,
    concurrency: usize,
    until_empty: bool,
    /// Slots whose last look found no job, after their last job was settled.
    idle: AtomicUsize,
    /// Turns true at the end of the grace period.
    grace_over: watch::Receiver<bool>,
}

/// How an attempt ended, by what its handler's task gave.
fn ended_by(done: std::result::Result<std::result::Result<(), JobError>, JoinError>) -> Ended {
    match done {
        Ok(Ok(())) => Ended::Ok,
        Ok(Err(e)) => Ended::Job(e),
        Err(e) if e.is_panic() => Ended::Panicked(panic_message(e.into_panic().as_ref())),
        // Only this watcher aborts the task, and then it no longer awaits it.
        Err(e) => Ended::Panicked(e.to_string()),
    }
}

/// A handler's task, aborted when dropped.
struct AbortOnDrop(JoinHandle<std::result::Result<(), JobError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What woke an attempt's watcher.
enum Woke {
    Done(std::result::Result<std::result::Result<(), JobError>, JoinError>),
    GraceOver,
    Timer,
}

impl Shared {
    fn new(worker: AsyncWorker, grace_over: watch::Receiver<bool>) -> Self {
        Shared {
            set: worker.set,
            kinds: worker.kinds,
            touch_every: touch_interval(worker.lease_time),
            unknown: worker.unknown,
            state: Arc::new(worker.state),
            hooks: worker.hooks,
            stop: worker.stop,
            tally: Tally::default(),
            fatal: Mutex::new(None),
            concurrency: worker.concurrency,
            until_empty: worker.until_empty,
            idle: AtomicUsize::new(0),
            grace_over,
        }
    }

    /// One slot (as a thread of the thread runtime): lease, run, settle,
    /// until the worker stops.
    async fn slot(self: Arc<Self>) {
        let mut pause = Duration::ZERO;
        let mut idle = false;
        while !self.stop.is_stopping() {
            // A ready job without the waiting's bookkeeping; then a wait.
            // A queue whose server is in trouble keeps no other's job waiting.
            let leased = match self.set.lease_past(is_server_trouble).await {
                Ok(None) => {
                    self.set
                        .lease_timeout_past(LOOK_EVERY, is_server_trouble)
                        .await
                }
                other => other,
            };
            let (index, lease) = match leased {
                Ok(Some(found)) => found,
                Ok(None) => {
                    pause = Duration::ZERO;
                    self.set_idle(&mut idle, true);
                    continue;
                }
                Err(e) if is_server_trouble(&e) => {
                    if pause.is_zero() {
                        tracing::warn!(error = %e, "the queue's server is in trouble; trying again");
                    }
                    pause = trouble_pause(pause);
                    self.pause(pause).await;
                    continue;
                }
                Err(e) => {
                    self.fail_with(e);
                    break;
                }
            };
            pause = Duration::ZERO;
            self.set_idle(&mut idle, false);
            if self.stop.is_stopping() {
                // Told to stop while it waited: the job is not started.
                self.settle(index, lease, None, Settle::Release, Instant::now())
                    .await;
                break;
            }
            self.attempt(index, lease).await;
        }
        self.set_idle(&mut idle, false);
    }

    fn set_idle(&self, idle: &mut bool, now: bool) {
        if *idle != now {
            *idle = now;
            match now {
                true => self.idle.fetch_add(1, Ordering::SeqCst),
                false => self.idle.fetch_sub(1, Ordering::SeqCst),
            };
        }
        // Every slot found nothing at its last look, after its last job
        // (which may have made a job ready again) was settled.
        if now && self.until_empty && self.idle.load(Ordering::SeqCst) >= self.concurrency {
            self.stop.stop_for(StopReason::Empty);
        }
    }

    /// Waits `pause`, or less if the worker stops.
    async fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        while !self.stop.is_stopping() && Instant::now() < until {
            tokio::time::sleep(LOOK_EVERY.min(until - Instant::now())).await;
        }
    }

    fn fail_with(&self, error: Error) {
        tracing::error!(%error, "the worker stops on an error");
        self.fatal.lock().get_or_insert(error);
        self.stop.stop_for(StopReason::Error);
    }

    /// One job, leased from the set's queue `index`, from its lease to its settle.
    async fn attempt(&self, index: usize, lease: JobLease) {
        let started = Instant::now();
        let header = lease.header(KIND_HEADER);
        let Some((kind_name, kind)) = header.and_then(|name| self.kinds.get_named(name)) else {
            let ended = Ended::UnknownKind(header.map(str::to_owned));
            let action = settle(ended, lease.attempt, None, false, self.unknown);
            self.settle(index, lease, None, action, started).await;
            return;
        };
        let kind = Arc::clone(kind);
        let cancel = Arc::new(AtomicBool::new(false));
        // The handler's view of the job is a copy: the lease stays here,
        // to be touched and settled whatever the handler does.
        let cx = AsyncContext {
            kind: kind_name,
            id: lease.id.clone(),
            attempt: lease.attempt,
            priority: lease.priority,
            headers: lease.job.headers.clone(),
            queue: Some(Arc::clone(&self.set.queues()[index])),
            state: Arc::clone(&self.state),
            cancel: Arc::clone(&cancel),
            stop: self.stop.clone(),
        };
        let span = tracing::info_span!(
            "job",
            kind = kind_name,
            id = %lease.id,
            attempt = lease.attempt,
            queue = self.set.queue(index).name(),
        );
        let ended = match kind.start(&lease.body, cx) {
            Err(ended) => Some(ended),
            Ok(handler) => {
                // The job's own timeout (`NewJob::timeout`) takes precedence
                // over its kind's, as in the thread runtime.
                let deadline = lease
                    .timeout()
                    .or(kind.options().timeout_value())
                    .and_then(|t| started.checked_add(t));
                let queue = self.set.queue(index);
                self.watch(handler, span, (queue, &lease), deadline, &cancel)
                    .await
            }
        };
        let action = match ended {
            Some(ended) => {
                match &ended {
                    Ended::Panicked(_) => Tally::add(&self.tally.panicked),
                    Ended::TimedOut => Tally::add(&self.tally.timed_out),
                    _ => {}
                }
                let stopping = self.stop.is_stopping();
                settle(
                    ended,
                    lease.attempt,
                    Some(kind.options()),
                    stopping,
                    self.unknown,
                )
            }
            // The grace period ended with the handler running.
            None => Settle::Release,
        };
        self.settle(index, lease, Some(kind_name), action, started)
            .await;
    }

    /// Runs `handler` as a task and watches it: touches `lease` every
    /// `touch_every`, aborts it at `deadline` (`TimedOut`) or at the end of
    /// the grace period (`None`).
    async fn watch(
        &self,
        handler: Handler,
        span: tracing::Span,
        (queue, lease): (&dyn AsyncJobQueue, &JobLease),
        deadline: Option<Instant>,
        cancel: &AtomicBool,
    ) -> Option<Ended> {
        // Aborted if this watcher is dropped (the `run` future was): a
        // handler never runs on unwatched.
        let mut task = AbortOnDrop(tokio::spawn(handler.instrument(span)));
        let mut grace_over = self.grace_over.clone();
        let mut next_touch = Instant::now() + self.touch_every;
        loop {
            let wake = deadline.map_or(next_touch, |deadline| deadline.min(next_touch));
            let woke = {
                let mut timer = pin!(tokio::time::sleep_until(wake.into()));
                let mut over = pin!(grace_over.wait_for(|over| *over));
                poll_fn(|cx| {
                    if let Poll::Ready(done) = std::pin::Pin::new(&mut task.0).poll(cx) {
                        return Poll::Ready(Woke::Done(done));
                    }
                    if over.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Woke::GraceOver);
                    }
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Woke::Timer);
                    }
                    Poll::Pending
                })
                .await
            };
            match woke {
                Woke::Done(done) => return Some(ended_by(done)),
                Woke::GraceOver => {
                    self.abandon(&task.0, cancel);
                    return None;
                }
                Woke::Timer if deadline.is_some_and(|d| Instant::now() >= d) => {
                    self.abandon(&task.0, cancel);
                    return Some(Ended::TimedOut);
                }
                Woke::Timer => {
                    // A lease lost meanwhile is found by the settle that follows.
                    let _ = queue.touch(lease).await;
                    next_touch = Instant::now() + self.touch_every;
                }
            }
        }
    }

    /// The attempt is over without its handler: abort the task (dropped
    /// at its next `.await`); what it would return is ignored.
    fn abandon(&self, task: &JoinHandle<std::result::Result<(), JobError>>, cancel: &AtomicBool) {
        cancel.store(true, Ordering::SeqCst);
        task.abort();
        Tally::add(&self.tally.abandoned);
    }

    /// Settles `lease` as `action` says, counts it, calls the hooks.
    async fn settle(
        &self,
        index: usize,
        lease: JobLease,
        kind_name: Option<&'static str>,
        action: Settle,
        started: Instant,
    ) {
        let id = lease.id.clone();
        let attempt = lease.attempt;
        let kind = match kind_name {
            Some(name) => name.to_owned(),
            None => lease.header(KIND_HEADER).unwrap_or("").to_owned(),
        };
        let queue = self.set.queue(index);
        let settled = apply_async(queue, lease, action).await;
        match settled {
            Ok(outcome) => {
                let finished = Finished {
                    kind: &kind,
                    id: &id,
                    attempt,
                    queue: queue.name(),
                    outcome: &outcome,
                    ran: started.elapsed(),
                };
                report(&self.tally, &self.hooks, &finished);
            }
            Err(e) => self.fail_with(e),
        }
    }
}
