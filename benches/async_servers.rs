//! The async server handles (`AsyncPgJobs`, `AsyncRedisJobs`) against the
//! blocking ones (`PgJobs`, `RedisJobs`) on the same throwaway servers, in
//! one run; and 8 tasks on one async handle against one task, with the
//! handle's pool of connections (its default) and with one connection
//! (`async_connections(1)`: every task's calls pipelined on it). Prints
//! markdown tables with the ratios issue 25 names: by the wall clock, and
//! by CPU time per job (this process and the server's processes: what a
//! machine shared with other work does not change, as it changes the wall
//! time; PostgreSQL: the backends serving connections, not its writers,
//! checkpointer and vacuum).
//!
//! ```sh
//! PATH=/usr/lib/postgresql/15/bin:$PATH cargo bench --bench async_servers --all-features
//! DQUE_BENCH_JOBS=2000 ...   # quick
//! ```
//!
//! Environment: `DQUE_BENCH_JOBS` (jobs per case, default 5,000),
//! `DQUE_BENCH_ROUNDS` (each case runs this many times interleaved, the
//! best kept; default 3), `DQUE_BENCH_SYNC` (the server's
//! `synchronous_commit`, default `off`: the client's cost, not the disk's),
//! `DQUE_BENCH_PG_POOL` and `DQUE_BENCH_REDIS_POOL` (the pooled handles'
//! `async_connections`, default 4 and 1: the defaults), `DQUE_BENCH_ONLY`
//! (`postgres` or `redis`: that backend alone), `DQUE_BENCH_CPU`
//! (`client` or `server`: the CPU time of that side alone).

use std::collections::HashMap;
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

/// A case's figures: ops/s by the wall clock and CPU time per op, for
/// enqueue and for lease + ack.
#[derive(Clone, Copy, Default)]
struct Figures {
    put: f64,
    take: f64,
    put_cpu: Duration,
    take_cpu: Duration,
}

impl Figures {
    /// The better of two rounds: the higher rate, the lower CPU time.
    fn best(self, other: Figures) -> Figures {
        let low = |a: Duration, b: Duration| if a.is_zero() { b } else { a.min(b) };
        Figures {
            put: self.put.max(other.put),
            take: self.take.max(other.take),
            put_cpu: low(self.put_cpu, other.put_cpu),
            take_cpu: low(self.take_cpu, other.take_cpu),
        }
    }
}

/// CPU time a thread or process has run, in nanoseconds (Linux's
/// `schedstat`: time on a CPU, not waiting for one).
fn cpu_ns(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The server's processes: `root`, or if `children` the processes whose
/// parent it is and which serve a client (PostgreSQL's backends, one per
/// connection; not its writers, checkpointer and vacuum, whose work falls
/// in whichever case runs when they do).
fn server_pids(root: i32, children: bool) -> Vec<i32> {
    if !children {
        return vec![root];
    }
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After "pid (comm) state ": the parent's pid.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, rest)| rest) else {
            continue;
        };
        let serves = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|title| String::from_utf8_lossy(&title).contains("[local]"));
        if serves && rest.split_whitespace().nth(1) == Some(&root.to_string()) {
            pids.push(pid);
        }
    }
    pids
}

/// The CPU time of this process (all its threads) and of the server.
#[derive(Clone, Copy)]
struct Server {
    root: i32,
    children: bool,
}

impl Server {
    /// The CPU time of this process, and of each server process by pid.
    fn cpu(&self) -> (Duration, HashMap<i32, u64>) {
        let me = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let me = Duration::new(me.tv_sec as u64, me.tv_nsec as u32);
        let server = server_pids(self.root, self.children)
            .into_iter()
            .map(|pid| (pid, cpu_ns(&format!("/proc/{pid}/schedstat"))))
            .collect();
        (me, server)
    }

    /// `f`'s wall time and CPU time (this process and the server's;
    /// `DQUE_BENCH_CPU`: `client` or `server` counts that side alone). A
    /// server process that ended meanwhile (a closed handle's backend)
    /// counts nothing; one started meanwhile counts all its time.
    fn timed(&self, f: impl FnOnce()) -> (Duration, Duration) {
        let (me, server) = self.cpu();
        let start = Instant::now();
        f();
        let wall = start.elapsed();
        let (me_after, server_after) = self.cpu();
        let server_used: u64 = server_after
            .iter()
            .map(|(pid, ns)| ns.saturating_sub(server.get(pid).copied().unwrap_or(0)))
            .sum();
        let (client, server) = (me_after - me, Duration::from_nanos(server_used));
        let cpu = match std::env::var("DQUE_BENCH_CPU").as_deref() {
            Ok("client") => client,
            Ok("server") => server,
            _ => client + server,
        };
        (wall, cpu)
    }
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

/// Enqueues `n` jobs one at a time, then leases and acks them one at a
/// time.
fn sync_case(server: Server, queue: &dyn JobQueue, n: usize) -> Figures {
    let body = vec![7u8; BODY];
    let put = server.timed(|| {
        for _ in 0..n {
            queue.enqueue(NewJob::new(body.clone())).unwrap();
        }
    });
    let take = server.timed(|| {
        while let Some(lease) = queue.lease().unwrap() {
            queue.ack(lease).unwrap();
        }
    });
    figures(n, put, take)
}

fn figures(n: usize, put: (Duration, Duration), take: (Duration, Duration)) -> Figures {
    Figures {
        put: rate(n, put.0),
        take: rate(n, take.0),
        put_cpu: put.1 / n as u32,
        take_cpu: take.1 / n as u32,
    }
}

/// As [`sync_case`] with `tasks` tasks sharing the async handle, each
/// doing its share.
fn async_case(
    runtime: &tokio::runtime::Runtime,
    server: Server,
    queues: &[Arc<dyn AsyncJobQueue>],
    n: usize,
    tasks: usize,
) -> Figures {
    let put = server.timed(|| {
        runtime.block_on(async {
            let putters: Vec<_> = (0..tasks)
                .map(|t| {
                    let queue = Arc::clone(&queues[t % queues.len()]);
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
        })
    });
    let take = server.timed(|| {
        runtime.block_on(async {
            let takers: Vec<_> = (0..tasks)
                .map(|t| {
                    let queue = Arc::clone(&queues[t % queues.len()]);
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
        })
    });
    figures(n, put, take)
}

/// How a backend's handles are opened: the blocking one, and an async one
/// on `queue` with at most `connections` connections.
struct Opener<'a> {
    blocking: &'a dyn Fn() -> Box<dyn JobQueue>,
    open: &'a dyn Fn(&str, usize) -> Arc<dyn AsyncJobQueue>,
    /// The pooled handles' most connections.
    pool: usize,
    /// Run before each case, untimed (PostgreSQL: a vacuum, so that no
    /// case scans the dead rows of the ones before it, and fresh
    /// statistics).
    before: &'a dyn Fn(),
}

/// One backend's row of figures, best of `rounds`: sync; async 1 task
/// (pool); 8 tasks on one handle (pool); 8 tasks on a handle of one
/// connection; 8 tasks on a handle each. Each case opens its handles and
/// closes them after (every handle LISTENs on PostgreSQL: an idle one
/// open would add to every enqueue's cost).
fn measure(
    runtime: &tokio::runtime::Runtime,
    server: Server,
    opener: &Opener<'_>,
    n: usize,
    rounds: usize,
) -> [Figures; 5] {
    let run = |queue: &str, connections: usize, handles: usize, tasks: usize| {
        (opener.before)();
        let queues: Vec<_> = (0..handles)
            .map(|_| (opener.open)(queue, connections))
            .collect();
        let got = async_case(runtime, server, &queues, n, tasks);
        runtime.block_on(async {
            for queue in &queues {
                queue.close().await.unwrap();
            }
        });
        got
    };
    let mut best = [Figures::default(); 5];
    for _ in 0..rounds {
        let got = [
            {
                (opener.before)();
                sync_case(server, (opener.blocking)().as_ref(), n)
            },
            run("bench_async_1", opener.pool, 1, 1),
            run("bench_async_8", opener.pool, 1, 8),
            run("bench_async_8_one", 1, 1, 8),
            run("bench_async_8_each", 1, 8, 8),
        ];
        for (b, g) in best.iter_mut().zip(got) {
            *b = b.best(g);
        }
    }
    best
}

fn print(backend: &str, best: &[Figures; 5]) {
    println!("| {backend}: case | sync ops/s | async 1 task | async / sync | sync CPU µs/op | async CPU µs/op | sync / async CPU (target ≥ 0.91x, i.e. within 1.1x) | async 8 tasks, one handle | 8 tasks / 1 task (target ≥ 3x) | 8 tasks, one connection | its 8 / 1 | 8 tasks, a handle each | its 8 / 1 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, pick) in [
        ("enqueue, one at a time", 0),
        ("lease + ack, one at a time", 1),
    ] {
        let get = |f: &Figures| if pick == 0 { f.put } else { f.take };
        let cpu = |f: &Figures| {
            let d = if pick == 0 { f.put_cpu } else { f.take_cpu };
            d.as_secs_f64() * 1e6
        };
        let [s, a1, a8, a8one, a8each] = best;
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x | {:.1} | {:.1} | {:.2}x | {:.0} | {:.2}x | {:.0} | {:.2}x | {:.0} | {:.2}x |",
            get(s),
            get(a1),
            get(a1) / get(s),
            cpu(s),
            cpu(a1),
            cpu(s) / cpu(a1),
            get(a8),
            get(a8) / get(a1),
            get(a8one),
            get(a8one) / get(a1),
            get(a8each),
            get(a8each) / get(a1),
        );
    }
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("DQUE_BENCH_JOBS", 5_000);
    let rounds = env_usize("DQUE_BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("{n} jobs of {BODY} B a case, best of {rounds}, a current-thread runtime; one local server each (Unix socket); CPU: this process and the server's");
    println!();
    let only = std::env::var("DQUE_BENCH_ONLY").unwrap_or_default();
    if only != "redis" {
        postgres(&runtime, n, rounds);
    }
    if only != "postgres" {
        redis(&runtime, n, rounds);
    }
}

fn postgres(runtime: &tokio::runtime::Runtime, n: usize, rounds: usize) {
    let Some(pg_server) = pg::PgServer::get() else {
        return;
    };
    let url = pg_server.url();
    let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "off".into());
    let mut admin = Client::connect(&url, NoTls).unwrap();
    admin
        .batch_execute(&format!("ALTER SYSTEM SET synchronous_commit = '{sync}'"))
        .unwrap();
    // No autovacuum in a case (its work would count as the case's): a
    // vacuum before each case instead.
    admin
        .batch_execute("ALTER SYSTEM SET autovacuum = off")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let admin = std::cell::RefCell::new(admin);
    let vacuum = || admin.borrow_mut().batch_execute("VACUUM ANALYZE").unwrap();
    // The postmaster: the parent of this connection's backend.
    let backend: i32 = admin
        .borrow_mut()
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).unwrap();
    let postmaster: i32 = stat
        .rsplit_once(") ")
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let server = Server {
        root: postmaster,
        children: true,
    };
    let blocking =
        || -> Box<dyn JobQueue> { Box::new(PgOptions::new().connect(&url, "bench_sync").unwrap()) };
    let open = |queue: &str, connections: usize| -> Arc<dyn AsyncJobQueue> {
        Arc::new(
            runtime
                .block_on(
                    PgOptions::new()
                        .async_connections(connections)
                        .connect_async(&url, queue),
                )
                .unwrap(),
        )
    };
    let pool = env_usize("DQUE_BENCH_PG_POOL", 4);
    let opener = Opener {
        blocking: &blocking,
        open: &open,
        pool,
        before: &vacuum,
    };
    let best = measure(runtime, server, &opener, n, rounds);
    print(
        &format!("PostgreSQL 15 (synchronous_commit = {sync}), pool of {pool}"),
        &best,
    );
}

fn redis(runtime: &tokio::runtime::Runtime, n: usize, rounds: usize) {
    let Some(redis) = redis_server::RedisServer::get() else {
        return;
    };
    let url = redis.url(0);
    let info = redis.cli(0, &["INFO", "server"]);
    let pid: i32 = info
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let server = Server {
        root: pid,
        children: false,
    };
    let blocking = || -> Box<dyn JobQueue> {
        Box::new(RedisOptions::new().connect(&url, "bench_sync").unwrap())
    };
    let open = |queue: &str, connections: usize| -> Arc<dyn AsyncJobQueue> {
        Arc::new(
            runtime
                .block_on(
                    RedisOptions::new()
                        .async_connections(connections)
                        .connect_async(&url, queue),
                )
                .unwrap(),
        )
    };
    let pool = env_usize("DQUE_BENCH_REDIS_POOL", 1);
    let opener = Opener {
        blocking: &blocking,
        open: &open,
        pool,
        before: &|| {},
    };
    let best = measure(runtime, server, &opener, n, rounds);
    print(&format!("Redis, pool of {pool}"), &best);
}
