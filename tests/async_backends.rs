//! The Jobs API suite (`tests/jobs_api/`) in its async form: every check
//! of the shared suite runs unchanged through each backend's async handle
//! (`AsyncJobQueue`), by a blocking shim that drives the async calls on a
//! tokio runtime; then async-only checks: lease futures dropped at random
//! points (tiny timeouts), or dropped after the server committed their
//! lease, leave no job stuck or counted, on every backend. Real servers
//! as in `jobs_postgres` and `jobs_redis` (skipped with a line when not
//! installed, failing under `CI=true`). Rounds: `DQUE_ASYNC_ROUNDS`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dque::jobs::{
    AsyncEmbeddedJobs, AsyncJobQueue, Counts, DeadJob, Enqueued, JobLease, JobOptions, JobQueue,
    Nacked, NewJob, PgOptions, QueueStats, RedisOptions, Retry, Waiting,
};
use dque::{Options, Result};

#[macro_use]
mod jobs_api;
mod pg;
mod redis_server;
mod skip;
use jobs_api::{Backend, Settings};
use pg::PgServer;
use redis_server::RedisServer;

/// The runtime the shims drive their calls on (two workers: the
/// connections' drivers and the lease tasks run there).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// An async handle seen as a blocking [`JobQueue`]: each call is the async
/// call, driven to its end. Dropped, it closes the handle, as the blocking
/// handles close when dropped.
#[derive(Debug)]
struct Blocking {
    queue: Box<dyn AsyncJobQueue>,
}

impl Blocking {
    fn shim(queue: impl AsyncJobQueue + 'static) -> Arc<dyn JobQueue> {
        Arc::new(Blocking {
            queue: Box::new(queue),
        })
    }

    fn wait<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        runtime().block_on(call)
    }
}

impl Drop for Blocking {
    fn drop(&mut self) {
        let _ = self.wait(self.queue.close());
    }
}

impl JobQueue for Blocking {
    fn name(&self) -> &str {
        self.queue.name()
    }
    fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        self.wait(self.queue.enqueue(job))
    }
    fn enqueue_batch(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.wait(self.queue.enqueue_batch(jobs))
    }
    fn lease(&self) -> Result<Option<JobLease>> {
        self.wait(self.queue.lease())
    }
    fn lease_timeout(&self, wait: Duration) -> Result<Option<JobLease>> {
        self.wait(self.queue.lease_timeout(wait))
    }
    fn lease_batch(&self, max: usize) -> Result<Vec<JobLease>> {
        self.wait(self.queue.lease_batch(max))
    }
    fn ack(&self, lease: JobLease) -> Result<()> {
        self.wait(self.queue.ack(lease))
    }
    fn nack(&self, lease: JobLease, retry: Retry, reason: &str) -> Result<Nacked> {
        self.wait(self.queue.nack(lease, retry, reason))
    }
    fn release(&self, lease: JobLease) -> Result<()> {
        self.wait(self.queue.release(lease))
    }
    fn release_after(
        &self,
        lease: JobLease,
        delay: std::time::Duration,
    ) -> Result<std::time::SystemTime> {
        self.wait(self.queue.release_after(lease, delay))
    }
    fn touch(&self, lease: &JobLease) -> Result<()> {
        self.wait(self.queue.touch(lease))
    }
    fn fail(&self, lease: JobLease, reason: &str) -> Result<()> {
        self.wait(self.queue.fail(lease, reason))
    }
    fn set_priority(&self, id: &str, priority: i32) -> Result<()> {
        self.wait(self.queue.set_priority(id, priority))
    }
    fn cancel(&self, id: &str) -> Result<()> {
        self.wait(self.queue.cancel(id))
    }
    // The suite's batch checks run the async batches (issue 28).
    fn cancel_many(&self, ids: &[String]) -> Vec<Result<()>> {
        self.wait(self.queue.cancel_many(ids))
    }
    fn set_priority_many(&self, ids: &[String], priority: i32) -> Vec<Result<()>> {
        self.wait(self.queue.set_priority_many(ids, priority))
    }
    fn run_now(&self, id: &str) -> Result<bool> {
        self.wait(self.queue.run_now(id))
    }
    fn waiting(&self, max: usize) -> Result<Vec<Waiting>> {
        self.wait(self.queue.waiting(max))
    }
    fn dead(&self, max: usize) -> Result<Vec<DeadJob>> {
        self.wait(self.queue.dead(max))
    }
    fn waiting_page(
        &self,
        after: Option<&dque::jobs::PageCursor>,
        max: usize,
    ) -> Result<dque::jobs::Page> {
        self.wait(self.queue.waiting_page(after, max))
    }
    fn requeue_dead(&self, id: &str) -> Result<()> {
        self.wait(self.queue.requeue_dead(id))
    }
    fn counts(&self) -> Result<Counts> {
        self.wait(self.queue.counts())
    }
    fn stats(&self) -> Result<QueueStats> {
        self.wait(self.queue.stats())
    }
    fn close(&self) -> Result<()> {
        self.wait(self.queue.close())
    }
    // --- limits (issue 27) ---
    fn pause(&self) -> Result<()> {
        self.wait(self.queue.pause())
    }
    fn resume(&self) -> Result<()> {
        self.wait(self.queue.resume())
    }
    fn is_paused(&self) -> Result<bool> {
        self.wait(self.queue.is_paused())
    }
    fn set_limit(&self, name: &str, max: u32) -> Result<()> {
        self.wait(self.queue.set_limit(name, max))
    }
    fn remove_limit(&self, name: &str) -> Result<bool> {
        self.wait(self.queue.remove_limit(name))
    }
    fn limits(&self) -> Result<Vec<dque::jobs::Limit>> {
        self.wait(self.queue.limits())
    }

    // --- recurring (issue 27) ---

    fn schedule(&self, schedule: dque::jobs::Schedule) -> Result<dque::jobs::ScheduleInfo> {
        self.wait(self.queue.schedule(schedule))
    }

    fn unschedule(&self, name: &str) -> Result<bool> {
        self.wait(self.queue.unschedule(name))
    }

    fn schedules(&self) -> Result<Vec<dque::jobs::ScheduleInfo>> {
        self.wait(self.queue.schedules())
    }

    fn fire_schedules(&self) -> Result<usize> {
        self.wait(self.queue.fire_schedules())
    }

    // --- history (issue 27) ---
    fn job_info(&self, id: &str) -> Result<Option<dque::jobs::JobInfo>> {
        self.wait(self.queue.job_info(id))
    }
}

/// Names unique to a test process and a backend value.
fn prefix() -> String {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    format!(
        "a{}-{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    )
}

/// The embedded backend's async handle, queues in a temporary directory.
struct Embedded {
    dir: tempfile::TempDir,
}

impl Embedded {
    fn new() -> Self {
        Embedded {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn options(settings: &Settings) -> JobOptions {
        let options = match settings.keep_completed {
            Some(keep) => JobOptions::new().keep_completed(keep),
            None => JobOptions::new(),
        };
        options
            .queue(
                Options::new()
                    .visibility_timeout(settings.lease_time)
                    .max_attempts(settings.max_attempts),
            )
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }
}

impl Backend for Embedded {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let jobs = Self::options(settings)
            .create(self.dir.path().join(name))
            .expect("create");
        Blocking::shim(AsyncEmbeddedJobs::new(jobs))
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let jobs = Self::options(settings)
            .open(self.dir.path().join(name))
            .expect("open");
        Blocking::shim(AsyncEmbeddedJobs::new(jobs))
    }
}

mod embedded {
    use super::*;
    jobs_api_suite!(Embedded::new());
}

/// PostgreSQL's async handle, queues on the test binary's server.
struct Postgres {
    prefix: String,
}

impl Postgres {
    fn options(settings: &Settings) -> PgOptions {
        let options = match settings.keep_completed {
            Some(keep) => PgOptions::new().keep_completed(keep),
            None => PgOptions::new(),
        };
        options
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn open(&self, name: &str, settings: &Settings) -> dque::jobs::AsyncPgJobs {
        let server = PgServer::get().expect("checked by the test");
        let name = format!("{}-{name}", self.prefix);
        runtime()
            .block_on(Self::options(settings).connect_async(&server.url(), &name))
            .expect("connect")
    }
}

impl Backend for Postgres {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Blocking::shim(self.open(name, settings))
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Blocking::shim(self.open(name, settings))
    }
}

mod postgres {
    use super::*;

    /// Runs a check of the suite on the server, if there is one.
    fn on_the_server(check: fn(&dyn Backend)) {
        let _sharing = sharing();
        if PgServer::get().is_some() {
            check(&Postgres { prefix: prefix() });
        }
    }

    jobs_api_suite!(run = on_the_server);
}

/// Redis's async handle, queues on the test binary's server, in a
/// database of their own (as in `jobs_redis`: qless's job ids are global
/// to a database, and the suite's clock would expire other tests' jobs).
struct Redis {
    db: u32,
}

impl Redis {
    fn new() -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        Redis {
            // Database 0 is for the tests below.
            db: 1 + (made % 63) as u32,
        }
    }

    fn open(&self, name: &str, settings: &Settings) -> dque::jobs::AsyncRedisJobs {
        let server = RedisServer::get().expect("checked by the test");
        let options = RedisOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()));
        if let Some(keep) = settings.keep_completed {
            // qless's configuration, set through a blocking handle.
            let blocking = RedisOptions::new()
                .connect(&server.url(self.db), name)
                .expect("connect");
            jobs_api::history::keep_on_redis(&blocking, keep);
        }
        runtime()
            .block_on(options.connect_async(&server.url(self.db), name))
            .expect("connect")
    }
}

impl Backend for Redis {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Blocking::shim(self.open(name, settings))
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Blocking::shim(self.open(name, settings))
    }
}

mod redis {
    use super::*;

    /// Runs a check of the suite on the server, if there is one.
    fn on_the_server(check: fn(&dyn Backend)) {
        if RedisServer::get().is_some() {
            check(&Redis::new());
        }
    }

    jobs_api_suite!(run = on_the_server);
}

/// Tests share the server; the one that restarts it has it alone.
static SERVER_USE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// For a check of the suite (its thread is no runtime's).
fn sharing() -> tokio::sync::RwLockReadGuard<'static, ()> {
    SERVER_USE.blocking_read()
}

/// How many rounds the random-drop checks run.
fn rounds() -> u64 {
    std::env::var("DQUE_ASYNC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Six tasks drop lease futures at random points (timeouts of 0 to 300 µs
/// around `lease` and `lease_batch`), releasing what they got in time;
/// then every job is ready again (a job taken for a dropped future was
/// handed back), and leased once more each is on attempt 1 (no dropped
/// lease counted).
async fn dropped_lease_futures_lose_nothing(q: Arc<dyn AsyncJobQueue>) {
    let jobs = (0..50u8).map(|i| NewJob::new(vec![i])).collect();
    q.enqueue_batch(jobs).await.unwrap();
    let rounds = rounds();
    let tasks: Vec<_> = (0..6u64)
        .map(|seed| {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let mut state = seed * 2_654_435_761 + 1;
                for round in 0..rounds {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let tiny = Duration::from_micros(state % 300);
                    let got = if round % 3 == 0 {
                        tokio::time::timeout(tiny, q.lease_batch(3)).await
                    } else {
                        tokio::time::timeout(tiny, q.lease())
                            .await
                            .map(|lease| lease.map(|l| l.into_iter().collect()))
                    };
                    if let Ok(Ok(leases)) = got {
                        for lease in leases {
                            q.release(lease).await.unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    settle_all_ready(q.as_ref(), 50).await;
    let mut seen = BTreeMap::new();
    while let Some(lease) = q.lease().await.unwrap() {
        assert_eq!(lease.attempt, 1, "a dropped lease counted an attempt");
        *seen.entry(lease.body.clone()).or_insert(0) += 1;
        q.ack(lease).await.unwrap();
    }
    assert_eq!(seen.len(), 50);
    assert!(seen.values().all(|&n| n == 1));
}

/// Waits (a few seconds at most) until `ready` jobs are ready and none
/// leased: jobs of dropped futures are handed back by tasks.
async fn settle_all_ready(q: &dyn AsyncJobQueue, ready: u64) {
    for _ in 0..500 {
        let counts = q.counts().await.unwrap();
        if counts.ready == ready && counts.leased == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "a job stays leased with no owner: {:?}",
        q.counts().await.unwrap()
    );
}

// Bug class pinned: a lease future dropped after the server committed its
// lease (the answer on its way, or arrived and not read) must not leave
// the job leased with no owner, nor count the attempt. A lease run in the
// caller's own future loses the server's answer with the future: the job
// stays leased until its lease time, then runs on attempt 2.
async fn a_lease_dropped_after_the_server_committed_is_given_back(q: Arc<dyn AsyncJobQueue>) {
    // A lease run to its end first: the connection has its statements
    // prepared, so the next lease is sent by its future's first poll.
    q.enqueue(NewJob::new("warm")).await.unwrap();
    let warm = q.lease().await.unwrap().expect("warm");
    q.ack(warm).await.unwrap();
    q.enqueue(NewJob::new("only")).await.unwrap();
    for pause in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(100),
    ] {
        {
            let mut lease = q.lease();
            // One poll sends the lease; then its answer comes (or not yet),
            // and the future is dropped unread.
            let first = futures::poll!(lease.as_mut());
            assert!(first.is_pending() || pause.is_zero(), "{first:?}");
            if let std::task::Poll::Ready(Ok(Some(lease))) = first {
                q.release(lease).await.unwrap();
            }
            tokio::time::sleep(pause).await;
        }
        settle_all_ready(q.as_ref(), 1).await;
    }
    let lease = q.lease().await.unwrap().expect("the job");
    assert_eq!(lease.attempt, 1, "a dropped lease counted an attempt");
    q.ack(lease).await.unwrap();
}

mod dropped_futures {
    use super::*;

    fn embedded() -> (tempfile::TempDir, Arc<dyn AsyncJobQueue>) {
        let dir = tempfile::tempdir().unwrap();
        let jobs = JobOptions::new()
            .queue(
                Options::new()
                    .durability(dque::Durability::Safe)
                    .visibility_timeout(Duration::from_secs(3600)),
            )
            .create(dir.path().join("jobs"))
            .unwrap();
        (dir, Arc::new(AsyncEmbeddedJobs::new(jobs)))
    }

    async fn postgres(name: &str) -> Option<Arc<dyn AsyncJobQueue>> {
        // The helper starts the server with the blocking client, which
        // cannot run on a runtime's thread.
        let server = tokio::task::spawn_blocking(PgServer::get).await.unwrap()?;
        let queue = PgOptions::new()
            .lease_time(Duration::from_secs(3600))
            .connect_async(&server.url(), &format!("{}-{name}", prefix()))
            .await
            .expect("connect");
        Some(Arc::new(queue))
    }

    async fn redis(name: &str) -> Option<Arc<dyn AsyncJobQueue>> {
        let server = tokio::task::spawn_blocking(RedisServer::get)
            .await
            .unwrap()?;
        // Several connections (the default is one): the drops run over a
        // pool, as on PostgreSQL (whose default pool is 4).
        let queue = RedisOptions::new()
            .lease_time(Duration::from_secs(3600))
            .async_connections(3)
            .connect_async(&server.url(0), &format!("{}-{name}", prefix()))
            .await
            .expect("connect");
        Some(Arc::new(queue))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_random_drops() {
        if let Some(q) = redis("random_drops").await {
            dropped_lease_futures_lose_nothing(q).await;
        }
    }

    // One thread: the lease task cannot run before the first poll has
    // returned (on two, a preempted test thread could find its answer
    // already there, and the check would not drop it unread).
    #[tokio::test(flavor = "current_thread")]
    async fn redis_drop_after_commit() {
        if let Some(q) = redis("drop_after_commit").await {
            a_lease_dropped_after_the_server_committed_is_given_back(q).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_random_drops() {
        let (_dir, q) = embedded();
        dropped_lease_futures_lose_nothing(q).await;
    }

    // One thread: the lease task cannot run before the first poll has
    // returned (on two, a preempted test thread could find its answer
    // already there, and the check would not drop it unread).
    #[tokio::test(flavor = "current_thread")]
    async fn embedded_drop_after_commit() {
        let (_dir, q) = embedded();
        a_lease_dropped_after_the_server_committed_is_given_back(q).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_random_drops() {
        let _sharing = SERVER_USE.read().await;
        if let Some(q) = postgres("random_drops").await {
            dropped_lease_futures_lose_nothing(q).await;
        }
    }

    // One thread: the lease task cannot run before the first poll has
    // returned (on two, a preempted test thread could find its answer
    // already there, and the check would not drop it unread).
    #[tokio::test(flavor = "current_thread")]
    async fn postgres_drop_after_commit() {
        let _sharing = SERVER_USE.read().await;
        if let Some(q) = postgres("drop_after_commit").await {
            a_lease_dropped_after_the_server_committed_is_given_back(q).await;
        }
    }
}

// A server restart under an async handle: a lease waiting across it and
// the next calls go on, on a connection made again (the driver saw the
// old one close), with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_postgres_handle_connects_again_after_a_restart() {
    let Some(server) = tokio::task::spawn_blocking(PgServer::get).await.unwrap() else {
        return;
    };
    let _alone = SERVER_USE.write().await;
    let q: Arc<dyn AsyncJobQueue> = Arc::new(
        PgOptions::new()
            .connect_async(&server.url(), &format!("{}-restart", prefix()))
            .await
            .expect("connect"),
    );
    // Calls overlapping first: the handle has several connections (its
    // pool), all lost in the restart; the ones beyond the first are made
    // again only when calls overlap again.
    overlapping_calls(&q).await;
    q.enqueue(NewJob::new("before")).await.unwrap();
    let waiter = {
        let q = Arc::clone(&q);
        tokio::spawn(async move {
            let first = q.lease().await.unwrap().expect("before");
            q.ack(first).await.unwrap();
            q.lease_timeout(Duration::from_secs(30)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::task::spawn_blocking(|| server.restart())
        .await
        .unwrap();
    q.enqueue(NewJob::new("after"))
        .await
        .expect("enqueue after the restart");
    let lease = waiter
        .await
        .unwrap()
        .expect("the waiting lease goes on")
        .expect("woken with the job");
    assert_eq!(lease.body, b"after");
    q.ack(lease).await.unwrap();
    overlapping_calls(&q).await;
    assert_eq!(q.counts().await.unwrap(), Counts::default());
}

/// 8 tasks calling at once, so that a handle opens its pool's connections.
async fn overlapping_calls(q: &Arc<dyn AsyncJobQueue>) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let q = Arc::clone(q);
            tokio::spawn(async move {
                for _ in 0..20 {
                    q.counts().await.expect("counts");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

// A Redis server restart under an async handle: its multiplexed
// connection is made again (redis-rs's ConnectionManager) and the script
// loaded again (the restarted server answers NOSCRIPT); the first call on
// the dead connection may fail, saying its outcome is unknown or that it
// did not run, never anything else, and the calls after it work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_redis_handle_works_again_after_its_server_restarts() {
    let Some(mut server) = tokio::task::spawn_blocking(|| redis_server::OwnServer::start(&[]))
        .await
        .unwrap()
    else {
        return;
    };
    let q = RedisOptions::new()
        .connect_async(&server.url(0, ""), "restarted")
        .await
        .expect("connect");
    q.enqueue(NewJob::new("{}").id("before")).await.unwrap();
    for pause in [Duration::ZERO, Duration::from_millis(300)] {
        server = tokio::task::spawn_blocking(move || {
            server.stop();
            server.resume();
            server
        })
        .await
        .unwrap();
        tokio::time::sleep(pause).await;
        let mut failed = 0;
        loop {
            match q.enqueue(NewJob::new("{}").id("after")).await {
                Ok(added) => {
                    assert!(added.is_added(), "the restarted server is empty");
                    break;
                }
                Err(dque::Error::OutcomeUnknown { .. } | dque::Error::Backend { .. })
                    if failed < 3 =>
                {
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("after {failed} failures: {e:?}"),
            }
        }
        let lease = q
            .lease()
            .await
            .unwrap()
            .expect("the job put after the restart");
        assert_eq!(lease.id, "after");
        q.ack(lease).await.unwrap();
    }
}

/// The server processes of connections named `application`.
async fn backends_named(url: &str, application: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )
        .await
        .unwrap()
        .get(0)
}

// Issue 25 (8 tasks on one async handle ran every statement in one server
// process, on its one connection): a handle opens more connections, up to
// its `async_connections`, when its tasks' calls overlap, and keeps one
// when one task uses it at a time (no more server processes for a program
// with a handle per task). The overlapping tasks lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_postgres_handle_pools_connections_only_when_calls_overlap() {
    let Some(server) = tokio::task::spawn_blocking(PgServer::get).await.unwrap() else {
        return;
    };
    let _sharing = SERVER_USE.read().await;
    // Each handle's connections under a name of their own (a closed
    // handle's statistics merger stays connected until it is dropped).
    let named = |name: &str| format!("{name}{}", std::process::id());
    let open = |name: &'static str, most: usize| {
        let url = format!("{} application_name={}", server.url(), named(name));
        async move {
            PgOptions::new()
                .async_connections(most)
                .connect_async(&url, &format!("{}-{name}", prefix()))
                .await
                .expect("connect")
        }
    };
    // One task at a time: one connection, whatever the pool's size.
    let alone = open("pool_alone", 4).await;
    for i in 0..50u8 {
        alone.enqueue(NewJob::new(vec![i])).await.unwrap();
        let lease = alone.lease().await.unwrap().expect("just put");
        alone.release(lease).await.unwrap();
    }
    assert_eq!(backends_named(&server.url(), &named("pool_alone")).await, 1);
    alone.close().await.unwrap();

    // 8 tasks at once: more than one connection, at most the size.
    let shared = Arc::new(open("pool_shared", 3).await);
    let tasks: Vec<_> = (0..8u8)
        .map(|t| {
            let q = Arc::clone(&shared);
            tokio::spawn(async move {
                for i in 0..40u8 {
                    q.enqueue(NewJob::new(vec![t, i])).await.unwrap();
                }
                let mut leased = Vec::new();
                while let Some(lease) = q.lease().await.unwrap() {
                    leased.push(lease.body.clone());
                    q.release_after(lease, Duration::from_secs(3600))
                        .await
                        .unwrap();
                }
                leased
            })
        })
        .collect();
    let mut seen = BTreeMap::new();
    for task in tasks {
        for body in task.await.unwrap() {
            *seen.entry(body).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 8 * 40, "every job leased");
    assert!(seen.values().all(|&n| n == 1), "no job leased twice");
    let open_now = backends_named(&server.url(), &named("pool_shared")).await;
    assert!(
        (2..=3).contains(&open_now),
        "8 overlapping tasks ran on {open_now} connections (pool of 3)"
    );
    shared.close().await.unwrap();
}

/// How many clients Redis at `socket` has, less the one asking.
fn redis_clients(socket: &std::path::Path) -> usize {
    let output = std::process::Command::new("redis-cli")
        .arg("-s")
        .arg(socket)
        .args(["INFO", "clients"])
        .output()
        .expect("redis-cli");
    let info = String::from_utf8_lossy(&output.stdout);
    let count: usize = info
        .lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .expect("connected_clients")
        .trim()
        .parse()
        .unwrap();
    count - 1
}

// Issue 25, on Redis: a handle opens more multiplexed connections, up to
// its `async_connections`, when its tasks' calls overlap, and keeps one
// when one task uses it at a time; the overlapping tasks lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_redis_handle_pools_connections_only_when_calls_overlap() {
    let Some(server) = tokio::task::spawn_blocking(|| redis_server::OwnServer::start(&[]))
        .await
        .unwrap()
    else {
        return;
    };
    let alone = RedisOptions::new()
        .async_connections(4)
        .connect_async(&server.url(0, ""), "alone")
        .await
        .expect("connect");
    for i in 0..50u8 {
        alone.enqueue(NewJob::new(vec![i])).await.unwrap();
        let lease = alone.lease().await.unwrap().expect("just put");
        alone.release(lease).await.unwrap();
    }
    assert_eq!(redis_clients(&server.socket()), 1);
    alone.close().await.unwrap();
    drop(alone);

    let shared = Arc::new(
        RedisOptions::new()
            .async_connections(3)
            .connect_async(&server.url(0, ""), "shared")
            .await
            .expect("connect"),
    );
    let tasks: Vec<_> = (0..8u8)
        .map(|t| {
            let q = Arc::clone(&shared);
            tokio::spawn(async move {
                for i in 0..40u8 {
                    q.enqueue(NewJob::new(vec![t, i])).await.unwrap();
                }
                let mut leased = Vec::new();
                while let Some(lease) = q.lease().await.unwrap() {
                    leased.push(lease.body.clone());
                    q.ack(lease).await.unwrap();
                }
                leased
            })
        })
        .collect();
    let mut seen = BTreeMap::new();
    for task in tasks {
        for body in task.await.unwrap() {
            *seen.entry(body).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 8 * 40, "every job leased");
    assert!(seen.values().all(|&n| n == 1), "no job leased twice");
    let open_now = redis_clients(&server.socket());
    assert!(
        (2..=3).contains(&open_now),
        "8 overlapping tasks ran on {open_now} connections (pool of 3)"
    );
    shared.close().await.unwrap();
}

/// Leases three jobs of `queue` in tasks that then wait forever, holding
/// the handle and their leases, and shuts the runtime down under them.
fn shut_down_holding_leases(queue: impl std::future::Future<Output = Arc<dyn AsyncJobQueue>>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let q = queue.await;
        let jobs = (0..3u8).map(|i| NewJob::new(vec![i])).collect();
        q.enqueue_batch(jobs).await.unwrap();
        for _ in 0..3 {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let lease = q.lease().await.unwrap().expect("a job");
                std::future::pending::<()>().await;
                drop(lease);
            });
        }
        for _ in 0..500 {
            if q.counts().await.unwrap().leased == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the tasks did not lease");
    });
    // The tasks, the handle's last clones and the leases are dropped here.
    drop(runtime);
}

// Issue 25 (left open by its first session): leases held by tasks when
// their runtime shut down came back only when their lease ended (an
// hour here), as after a crash: the handle's drop handed them back in a
// task that the shutting-down runtime cancelled.
#[test]
fn leases_held_at_runtime_shutdown_are_handed_back_on_postgres() {
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let name = format!("{}-shutdown", prefix());
    let url = server.url();
    shut_down_holding_leases(async {
        let queue = PgOptions::new()
            .lease_time(Duration::from_secs(3600))
            .connect_async(&url, &name)
            .await
            .expect("connect");
        Arc::new(queue) as Arc<dyn AsyncJobQueue>
    });
    let blocking = PgOptions::new().connect(&url, &name).unwrap();
    let counts = blocking.counts().unwrap();
    assert_eq!((counts.ready, counts.leased), (3, 0), "{counts:?}");
}

// The same on Redis.
#[test]
fn leases_held_at_runtime_shutdown_are_handed_back_on_redis() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let name = format!("{}-shutdown", prefix());
    let url = server.url(0);
    shut_down_holding_leases(async {
        let queue = RedisOptions::new()
            .lease_time(Duration::from_secs(3600))
            .connect_async(&url, &name)
            .await
            .expect("connect");
        Arc::new(queue) as Arc<dyn AsyncJobQueue>
    });
    let blocking = RedisOptions::new().connect(&url, &name).unwrap();
    let counts = blocking.counts().unwrap();
    assert_eq!((counts.ready, counts.leased), (3, 0), "{counts:?}");
}
