//! `AsyncRedisJobs`: the Redis backend for async workers, over redis-rs's
//! multiplexed connection (its `ConnectionManager`, which connects again
//! by itself), calling the same Lua script as [`RedisJobs`](super::RedisJobs)
//! through the same [`Core`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::Value;
use parking_lot::Mutex;

use super::core::{Core, Transport};
use super::encoding::seconds;
use super::script::{
    auth_error, backend, connection_failed, not_run, outcome_unknown, refusal, Server,
    CONNECT_TIMEOUT, REPLY_TIMEOUT, SOURCE,
};
use super::{RedisOptions, LEASE_POLL_MAX};
use crate::error::{Error, Result};
use crate::jobs::async_contract::{AsyncJobQueue, BoxFuture};
use crate::jobs::job::{DeadJob, Enqueued, JobLease, Nacked, NewJob, Retry, Waiting};
use crate::jobs::stats::{Counts, QueueStats};

/// A job queue in Redis, in qless's data model, for async workers
/// (features `redis` and `tokio`): the [`AsyncJobQueue`] contract on the
/// same keys, script and rules as [`RedisJobs`](super::RedisJobs) (their
/// calls are written once), shared with qless clients. Clones share the
/// handle.
///
/// **One multiplexed connection per handle by default**, shared by its
/// tasks: their calls are pipelined on it (sent without waiting for the
/// answers before them). Redis runs every script on one thread, which one
/// pipelined connection keeps busy; [`RedisOptions::async_connections`]
/// allows a few (a call then runs on the connection fewest calls are
/// using, and a handle opens one more, in the background, only when every
/// one it has is busy).
/// redis-rs's `ConnectionManager` makes each again when it breaks; a
/// call whose connection broke under it fails with `OutcomeUnknown` (it
/// may have run; redis-rs reports a call on a connection found closed the
/// same way, so the first call after a server restart fails so), and a
/// server that lost the script is given it again.
/// A waiting lease looks again after 1 ms, doubling to 50 ms, as the
/// blocking one does (Redis tells no one of a put), sleeping on tokio's
/// timer between looks.
///
/// **Cancel safety** as on PostgreSQL ([`AsyncJobQueue`]): a
/// lease runs in a task of its own, and jobs leased for a future dropped
/// before it read them are handed back uncounted (the script's `release`).
///
/// **Shutdown.** [`close`](AsyncJobQueue::close) hands back the leases the
/// handle gave out and its workers did not settle. Without it, the last
/// clone's drop does the same, also when a runtime shutting down drops the
/// tasks holding the handle and their leases: on a thread of its own, over
/// a new blocking connection, which the drop waits for (5 s at most).
///
/// ```no_run
/// use dque::jobs::{AsyncJobQueue, AsyncRedisJobs, NewJob};
/// # #[tokio::main]
/// # async fn main() -> Result<(), dque::Error> {
/// let queue = AsyncRedisJobs::connect("redis://127.0.0.1:6379", "mail").await?;
/// queue.enqueue(NewJob::new("hello")).await?;
/// if let Some(lease) = queue.lease_timeout(std::time::Duration::from_secs(5)).await? {
///     queue.ack(lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncRedisJobs {
    core: Arc<Core>,
    server: Arc<AsyncServer>,
}

impl std::fmt::Debug for AsyncRedisJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRedisJobs")
            .field("queue", &self.core.queue)
            .field("worker", &self.core.worker)
            .field("lease_time", &self.core.lease_time)
            .finish_non_exhaustive()
    }
}

/// The most connections an [`AsyncRedisJobs`] handle opens by default:
/// one. Redis runs every script on its one thread, which one pipelined
/// connection keeps busy (8 tasks on one connection measured as fast as on
/// two, or on a handle each: BENCHMARKS.md, "Async servers").
pub(super) const DEFAULT_CONNECTIONS: usize = 1;

impl RedisOptions {
    /// The most multiplexed connections an async handle
    /// ([`AsyncRedisJobs`]) opens (default 1, which pipelines every task's
    /// calls on one connection: Redis runs scripts on one thread, which
    /// that keeps busy; more may help a server that reads and parses on
    /// several threads, such as Redis with `io-threads`). Beyond the first,
    /// a handle opens one only when all it has are busy with calls. The
    /// blocking [`RedisJobs`](super::RedisJobs) ignores it.
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let queue = dque::jobs::RedisOptions::new()
    ///     .async_connections(4)
    ///     .connect_async("redis://127.0.0.1:6379", "mail")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn async_connections(mut self, most: usize) -> Self {
        self.async_connections = most.max(1);
        self
    }

    /// Connects to the server at `url` and opens queue `queue` for async
    /// workers (see [`AsyncRedisJobs`]); addresses as
    /// [`connect`](Self::connect).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_async(&self, url: &str, queue: &str) -> Result<AsyncRedisJobs> {
        self.check_names(queue)?;
        let server = AsyncServer::connect(url, self.async_connections).await?;
        Ok(AsyncRedisJobs {
            core: Arc::new(self.core(queue)),
            server: Arc::new(server),
        })
    }
}

impl AsyncRedisJobs {
    /// Connects with default [`RedisOptions`].
    ///
    /// # Errors
    ///
    /// As [`RedisOptions::connect`].
    pub async fn connect(url: &str, queue: &str) -> Result<AsyncRedisJobs> {
        RedisOptions::new().connect_async(url, queue).await
    }

    /// The worker name this handle leases under.
    pub fn worker(&self) -> &str {
        &self.core.worker
    }

    /// Leases up to `max` jobs in a task of its own, so that a caller
    /// dropping this future cannot lose them: the task hands back what it
    /// could not send, [`Answer`]'s drop what was sent and not read.
    async fn take(&self, max: usize) -> Result<Vec<JobLease>> {
        let (answer, taken) = tokio::sync::oneshot::channel();
        // Clones of the handle (not of its parts): whichever holder goes
        // last, its drop hands back the leases still held.
        let queue = self.clone();
        tokio::spawn(async move {
            let leases = queue.core.lease_up_to(&*queue.server, max).await;
            if let Err(Ok(leases)) = answer.send(leases) {
                release_all(&queue.core, &queue.server, leases).await;
            }
        });
        let mut taken = Answer {
            queue: self.clone(),
            taken,
        };
        (&mut taken.taken).await.unwrap_or(Err(Error::Closed))
    }

    async fn lease_until(&self, deadline: Option<Instant>) -> Result<Option<JobLease>> {
        let mut poll = Duration::from_millis(1);
        loop {
            if let Some(lease) = self.take(1).await?.pop() {
                return Ok(Some(lease));
            }
            let left = deadline.map_or(poll, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(None);
            }
            tokio::time::sleep(left.min(poll)).await;
            poll = (poll * 2).min(LEASE_POLL_MAX);
        }
    }
}

/// Hands back `leases` taken for a future that was dropped, uncounted
/// (even on a handle closed meanwhile, whose close did not see them).
async fn release_all(core: &Core, server: &AsyncServer, leases: Vec<JobLease>) {
    for lease in leases {
        // A lost connection: the lease ends with its time, counted.
        let _ = core.settle_with(server, "release", &lease, &[]).await;
    }
}

/// The answer of a lease task. Sent but never read (its future dropped
/// between the send and the read), the jobs it holds are handed back
/// here, uncounted; not sent yet, the task finds the channel closed and
/// hands them back itself.
struct Answer {
    queue: AsyncRedisJobs,
    taken: tokio::sync::oneshot::Receiver<Result<Vec<JobLease>>>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.taken.close();
        if let Ok(Ok(leases)) = self.taken.try_recv() {
            if leases.is_empty() {
                return;
            }
            let queue = self.queue.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(async move {
                    release_all(&queue.core, &queue.server, leases).await;
                }));
            }
        }
    }
}

impl Drop for AsyncRedisJobs {
    fn drop(&mut self) {
        // The last handle (no lease task running either) closes, as the
        // blocking handle does when dropped.
        if Arc::strong_count(&self.core) != 1 {
            return;
        }
        if self.core.held.lock().is_empty() {
            // Nothing to hand back: the worker's name is forgotten if a
            // runtime is there to send it.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (core, server) = (Arc::clone(&self.core), Arc::clone(&self.server));
                drop(runtime.spawn(async move { core.close(&*server).await }));
            }
            return;
        }
        // Leases to hand back (also when a runtime shutting down drops the
        // tasks holding this handle and their leases): not by a task, which
        // a shutting-down runtime cancels (the jobs then came back only when
        // their lease ended), but on a thread of its own, over a blocking
        // connection, waited for.
        let (core, url) = (Arc::clone(&self.core), self.server.connections.url.clone());
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("dque-redis-hand-back".into())
            .spawn(move || {
                if let Ok(server) = Server::connect(&url) {
                    // The blocking transport's calls are done when made:
                    // one poll runs the close to its end.
                    let close = std::pin::pin!(core.close(&server));
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    let _ = close.poll(&mut cx);
                }
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = finished.recv_timeout(HAND_BACK_WAIT);
        }
    }
}

/// How long a handle's drop waits for its leases to be handed back.
const HAND_BACK_WAIT: Duration = Duration::from_secs(5);

/// The server, over a few multiplexed connections, each made again when
/// it breaks.
///
/// Invariants. A call runs on the connection the fewest calls hold (an
/// `Arc<ConnectionManager>` held by a call counts it). One more connection
/// is opened, in a task of its own, only when every one is held by a call
/// and there is room: a handle used by one task at a time keeps one.
pub(crate) struct AsyncServer {
    connections: Arc<Connections>,
    script: ::redis::Script,
}

struct Connections {
    url: String,
    client: ::redis::Client,
    config: ConnectionManagerConfig,
    size: usize,
    open: Mutex<Vec<Arc<ConnectionManager>>>,
    growing: AtomicBool,
}

impl Connections {
    /// The least held connection, starting one more if all are held and
    /// there is room.
    fn least_held(self: &Arc<Self>) -> Arc<ConnectionManager> {
        let open = self.open.lock();
        let mut best = Arc::clone(&open[0]);
        for connection in &open[1..] {
            if Arc::strong_count(connection) < Arc::strong_count(&best) {
                best = Arc::clone(connection);
            }
        }
        // Held by the list, by `best` here, and by calls.
        let grow = Arc::strong_count(&best) > 2 && open.len() < self.size;
        drop(open);
        if grow && !self.growing.swap(true, Ordering::SeqCst) {
            let connections = Arc::clone(self);
            tokio::spawn(async move {
                let made = ConnectionManager::new_with_config(
                    connections.client.clone(),
                    connections.config.clone(),
                )
                .await;
                if let Ok(made) = made {
                    let mut open = connections.open.lock();
                    if open.len() < connections.size {
                        open.push(Arc::new(made));
                    }
                }
                connections.growing.store(false, Ordering::SeqCst);
            });
        }
        best
    }
}

impl AsyncServer {
    /// Connects to `url` (at most `size` connections, one for now) and
    /// loads the script; once (a wrong address fails at once).
    async fn connect(url: &str, size: usize) -> Result<AsyncServer> {
        let client = ::redis::Client::open(url).map_err(|e| backend(&e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(REPLY_TIMEOUT));
        let mut connection = ConnectionManager::new_with_config(client.clone(), config.clone())
            .await
            .map_err(|e| not_run(&e))?;
        let script = ::redis::Script::new(SOURCE);
        // A small PING first: a server with a password refuses the script
        // from a client that gave none with an error naming no password.
        ::redis::cmd("PING")
            .query_async::<()>(&mut connection)
            .await
            .map_err(|e| auth_error(&e).unwrap_or_else(|| not_run(&e)))?;
        script
            .load_async(&mut connection)
            .await
            .map_err(|e| auth_error(&e).unwrap_or_else(|| backend(&e)))?;
        Ok(AsyncServer {
            connections: Arc::new(Connections {
                url: url.to_owned(),
                client,
                config,
                size: size.max(1),
                open: Mutex::new(vec![Arc::new(connection)]),
                growing: AtomicBool::new(false),
            }),
            script,
        })
    }

    /// A connection for one call, and what counts the call on it until
    /// dropped.
    fn connection(&self) -> (ConnectionManager, Arc<ConnectionManager>) {
        let held = self.connections.least_held();
        (ConnectionManager::clone(&held), held)
    }
}

impl Transport for AsyncServer {
    fn script(
        &self,
        command: &str,
        now: SystemTime,
        args: &[&[u8]],
    ) -> impl Future<Output = Result<Value>> + Send {
        let mut evalsha = ::redis::cmd("EVALSHA");
        evalsha
            .arg(self.script.get_hash())
            .arg(0)
            .arg(command)
            .arg(seconds(now))
            .arg(seconds(SystemTime::now()));
        for arg in args {
            evalsha.arg(*arg);
        }
        let (mut connection, held) = self.connection();
        async move {
            let _held = held;
            // At most: a NOSCRIPT (a restarted or flushed server), then
            // the call again.
            for _ in 0..2 {
                let sent = evalsha.query_async::<Value>(&mut connection).await;
                let e = match sent.and_then(Value::extract_error) {
                    Ok(value) => return Ok(value),
                    Err(e) => e,
                };
                if e.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript) {
                    // It did not run: load the script, then send it again.
                    self.script
                        .load_async(&mut connection)
                        .await
                        .map_err(|e| not_run(&e))?;
                    continue;
                }
                if connection_failed(&e) {
                    // On a multiplexed connection a failed call may have
                    // been sent whole.
                    return Err(outcome_unknown(&e));
                }
                return Err(refusal(&e).unwrap_or_else(|| backend(&e)));
            }
            Err(Error::Backend {
                backend: "Redis",
                reason: "the server lost the script again right after it was loaded (the call \
                         did not run); check that nothing flushes its scripts"
                    .into(),
            })
        }
    }

    fn keys(&self, pattern: &str) -> impl Future<Output = Result<Vec<String>>> + Send {
        let (mut connection, held) = self.connection();
        let pattern = pattern.to_owned();
        async move {
            let _held = held;
            let mut keys = Vec::new();
            let mut cursor = "0".to_owned();
            loop {
                let (next, found): (String, Vec<String>) = ::redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut connection)
                    .await
                    .map_err(|e| backend(&e))?;
                keys.extend(found);
                if next == "0" {
                    return Ok(keys);
                }
                cursor = next;
            }
        }
    }

    fn hash(&self, key: &str) -> impl Future<Output = Result<HashMap<String, String>>> + Send {
        let (mut connection, held) = self.connection();
        let key = key.to_owned();
        async move {
            let _held = held;
            ::redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .map_err(|e| backend(&e))
        }
    }
}

impl AsyncJobQueue for AsyncRedisJobs {
    fn name(&self) -> &str {
        &self.core.queue
    }

    fn enqueue(&self, job: NewJob) -> BoxFuture<'_, Result<Enqueued>> {
        Box::pin(async move {
            let mut added = self.core.enqueue_batch(&*self.server, vec![job]).await?;
            Ok(added.remove(0))
        })
    }

    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> BoxFuture<'_, Result<Vec<Enqueued>>> {
        Box::pin(self.core.enqueue_batch(&*self.server, jobs))
    }

    fn lease(&self) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(async move { Ok(self.take(1).await?.pop()) })
    }

    fn lease_timeout(&self, wait: Duration) -> BoxFuture<'_, Result<Option<JobLease>>> {
        Box::pin(self.lease_until(Instant::now().checked_add(wait)))
    }

    fn lease_batch(&self, max: usize) -> BoxFuture<'_, Result<Vec<JobLease>>> {
        Box::pin(self.take(max))
    }

    fn ack(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.ack(&*self.server, lease))
    }

    fn nack<'a>(
        &'a self,
        lease: JobLease,
        retry: Retry,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<Nacked>> {
        Box::pin(self.core.nack(&*self.server, lease, retry, reason))
    }

    fn release(&self, lease: JobLease) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.release(&*self.server, lease))
    }

    fn release_after(
        &self,
        lease: JobLease,
        delay: std::time::Duration,
    ) -> BoxFuture<'_, Result<std::time::SystemTime>> {
        Box::pin(self.core.release_after(&*self.server, lease, delay))
    }

    fn touch<'a>(&'a self, lease: &'a JobLease) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.touch(&*self.server, lease))
    }

    fn fail<'a>(&'a self, lease: JobLease, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.fail(&*self.server, lease, reason))
    }

    fn set_priority<'a>(&'a self, id: &'a str, priority: i32) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.set_priority(&*self.server, id, priority))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.cancel(&*self.server, id))
    }

    fn run_now<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.run_now(&*self.server, id))
    }

    fn waiting(&self, max: usize) -> BoxFuture<'_, Result<Vec<Waiting>>> {
        Box::pin(self.core.waiting(&*self.server, max))
    }

    fn dead(&self, max: usize) -> BoxFuture<'_, Result<Vec<DeadJob>>> {
        Box::pin(self.core.dead(&*self.server, max))
    }

    fn requeue_dead<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.requeue_dead(&*self.server, id))
    }

    fn stats(&self) -> BoxFuture<'_, Result<QueueStats>> {
        Box::pin(self.core.stats(&*self.server))
    }

    fn counts(&self) -> BoxFuture<'_, Result<Counts>> {
        Box::pin(self.core.counts(&*self.server))
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.close(&*self.server))
    }

    // --- limits (issue 27) ---

    fn pause(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.set_paused(&*self.server, true))
    }

    fn resume(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.set_paused(&*self.server, false))
    }

    fn is_paused(&self) -> BoxFuture<'_, Result<bool>> {
        Box::pin(self.core.is_paused(&*self.server))
    }

    fn set_limit<'a>(&'a self, name: &'a str, max: u32) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.core.set_limit(&*self.server, name, max))
    }

    fn remove_limit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.remove_limit(&*self.server, name))
    }

    fn limits(&self) -> BoxFuture<'_, Result<Vec<crate::jobs::Limit>>> {
        Box::pin(self.core.limits(&*self.server))
    }

    // --- recurring (issue 27) ---

    fn schedule(
        &self,
        schedule: crate::jobs::Schedule,
    ) -> BoxFuture<'_, Result<crate::jobs::ScheduleInfo>> {
        Box::pin(self.core.add_schedule(&*self.server, schedule))
    }

    fn unschedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.core.remove_schedule(&*self.server, name))
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<crate::jobs::ScheduleInfo>>> {
        Box::pin(self.core.list_schedules(&*self.server))
    }

    fn fire_schedules(&self) -> BoxFuture<'_, Result<usize>> {
        Box::pin(async move { self.core.fire_due(&*self.server, self.core.now()).await })
    }

    // --- history (issue 27) ---

    fn job_info<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<crate::jobs::JobInfo>>> {
        Box::pin(self.core.job_info(&*self.server, id))
    }
}
