//! The async server handles (`AsyncPgJobs`, `AsyncRedisJobs`) against the
//! blocking ones (`PgJobs`, `RedisJobs`) on the same throwaway servers, in
//! one run; and 8 tasks on one async handle against one task (their calls
//! are pipelined on the handle's one connection). Prints markdown tables
//! with the ratios issue 25 names.
//!
//! ```sh
//! PATH=/usr/lib/postgresql/15/bin:$PATH cargo bench --bench async_servers --all-features
//! DQUE_BENCH_JOBS=2000 ...   # quick
//! ```
//!
//! Environment: `DQUE_BENCH_JOBS` (jobs per case, default 5,000),
//! `DQUE_BENCH_ROUNDS` (each case runs this many times interleaved, the
//! best kept; default 3), `DQUE_BENCH_SYNC` (the server's
//! `synchronous_commit`, default `off`: the client's cost, not the disk's).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dque::jobs::{AsyncJobQueue, JobQueue, NewJob, PgOptions, RedisOptions};
use postgres::{Client, NoTls};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/redis_server/mod.rs"]
mod redis_server;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const BODY: usize = 100;

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Enqueues `n` jobs one at a time, then leases and acks them one at a
/// time: (enqueue/s, lease+ack/s).
fn sync_case(queue: &dyn JobQueue, n: usize) -> (f64, f64) {
    let body = vec![7u8; BODY];
    let put = timed(|| {
        for _ in 0..n {
            queue.enqueue(NewJob::new(body.clone())).unwrap();
        }
    });
    let take = timed(|| {
        while let Some(lease) = queue.lease().unwrap() {
            queue.ack(lease).unwrap();
        }
    });
    (rate(n, put), rate(n, take))
}

/// As [`sync_case`] with `tasks` tasks sharing the async handle, each
/// doing its share.
async fn async_case(queue: &Arc<dyn AsyncJobQueue>, n: usize, tasks: usize) -> (f64, f64) {
    let start = Instant::now();
    let putters: Vec<_> = (0..tasks)
        .map(|t| {
            let queue = Arc::clone(queue);
            let share = n / tasks + usize::from(t < n % tasks);
            tokio::spawn(async move {
                let body = vec![7u8; BODY];
                for _ in 0..share {
                    queue.enqueue(NewJob::new(body.clone())).await.unwrap();
                }
            })
        })
        .collect();
    for putter in putters {
        putter.await.unwrap();
    }
    let put = start.elapsed();
    let start = Instant::now();
    let takers: Vec<_> = (0..tasks)
        .map(|_| {
            let queue = Arc::clone(queue);
            tokio::spawn(async move {
                while let Some(lease) = queue.lease().await.unwrap() {
                    queue.ack(lease).await.unwrap();
                }
            })
        })
        .collect();
    for taker in takers {
        taker.await.unwrap();
    }
    (rate(n, put), rate(n, start.elapsed()))
}

/// One backend's row of figures: the three cases, best of `rounds`.
fn measure(
    runtime: &tokio::runtime::Runtime,
    blocking: &dyn JobQueue,
    one: &Arc<dyn AsyncJobQueue>,
    eight: &Arc<dyn AsyncJobQueue>,
    n: usize,
    rounds: usize,
) -> [(f64, f64); 3] {
    // [sync, async 1 task, async 8 tasks] x (enqueue, lease+ack).
    let mut best = [(0f64, 0f64); 3];
    for _ in 0..rounds {
        let got = [
            sync_case(blocking, n),
            runtime.block_on(async_case(one, n, 1)),
            runtime.block_on(async_case(eight, n, 8)),
        ];
        for (b, g) in best.iter_mut().zip(got) {
            *b = (b.0.max(g.0), b.1.max(g.1));
        }
    }
    best
}

fn print(backend: &str, best: &[(f64, f64); 3]) {
    println!("| {backend}: case | sync ops/s | async 1 task | async / sync (target ≥ 0.91x, i.e. within 1.1x) | async 8 tasks, one handle | 8 tasks / 1 task (target ≥ 3x) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, pick) in [
        ("enqueue, one at a time", 0),
        ("lease + ack, one at a time", 1),
    ] {
        let get = |case: (f64, f64)| if pick == 0 { case.0 } else { case.1 };
        let (s, a1, a8) = (get(best[0]), get(best[1]), get(best[2]));
        println!(
            "| {name} | {s:.0} | {a1:.0} | {:.2}x | {a8:.0} | {:.2}x |",
            a1 / s,
            a8 / a1
        );
    }
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let url = server.url();
    let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "off".into());
    let mut admin = Client::connect(&url, NoTls).unwrap();
    admin
        .batch_execute(&format!("ALTER SYSTEM SET synchronous_commit = '{sync}'"))
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let n = env_usize("DQUE_BENCH_JOBS", 5_000);
    let rounds = env_usize("DQUE_BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let blocking = PgOptions::new().connect(&url, "bench_sync").unwrap();
    let one: Arc<dyn AsyncJobQueue> = Arc::new(
        runtime
            .block_on(PgOptions::new().connect_async(&url, "bench_async_1"))
            .unwrap(),
    );
    let eight: Arc<dyn AsyncJobQueue> = Arc::new(
        runtime
            .block_on(PgOptions::new().connect_async(&url, "bench_async_8"))
            .unwrap(),
    );
    let pg = measure(&runtime, &blocking, &one, &eight, n, rounds);
    println!("{n} jobs of {BODY} B a case, best of {rounds}, a current-thread runtime; one local server each (Unix socket)");
    println!();
    print(&format!("PostgreSQL 15 (synchronous_commit = {sync})"), &pg);
    runtime.block_on(async {
        one.close().await.unwrap();
        eight.close().await.unwrap();
    });
    let Some(redis) = redis_server::RedisServer::get() else {
        return;
    };
    let url = redis.url(0);
    let blocking = RedisOptions::new().connect(&url, "bench_sync").unwrap();
    let one: Arc<dyn AsyncJobQueue> = Arc::new(
        runtime
            .block_on(RedisOptions::new().connect_async(&url, "bench_async_1"))
            .unwrap(),
    );
    let eight: Arc<dyn AsyncJobQueue> = Arc::new(
        runtime
            .block_on(RedisOptions::new().connect_async(&url, "bench_async_8"))
            .unwrap(),
    );
    let best = measure(&runtime, &blocking, &one, &eight, n, rounds);
    print("Redis", &best);
    runtime.block_on(async {
        one.close().await.unwrap();
        eight.close().await.unwrap();
    });
}
