//! Whether `dque serve` slows the workers of the queue it shows (issue 28:
//! by less than 5 %). Workers lease, enqueue a replacement and ack, as fast
//! as they can, on a queue with a backlog; beside them a dashboard serves
//! the queue over a socket from handles of its own, as `dque serve` does.
//! The run alternates turns without a poller and with a browser-like one
//! (quiet, polled, polled, quiet, …, so a drift of the machine's speed
//! falls on both alike): the overview and the queue page loaded at the
//! turn's start, `/live` every `DQUE_BENCH_LIVE_MS` (default 3 000, the
//! pages' refresh) and `/metrics` every `DQUE_BENCH_METRICS_MS` (default
//! 5 000, a Prometheus scraping every few seconds). It prints the jobs a
//! second of each turn, the ratio of the polled turns' total to the quiet
//! ones', and the median of the ratios of neighbouring turns.
//!
//! ```sh
//! cargo bench --features web --bench web_load                  # embedded
//! DQUE_BENCH_WEB_BACKEND=postgres cargo bench --features web,postgres --bench web_load
//! DQUE_BENCH_LIVE_MS=250 cargo bench --features web --bench web_load   # a harsher poller
//! ```
//!
//! Settings: `DQUE_BENCH_WORKERS` worker threads (default 2),
//! `DQUE_BENCH_SYNC=off` (PostgreSQL: `synchronous_commit`, default on),
//! `DQUE_BENCH_BACKLOG` jobs waiting (default 100 000), `DQUE_BENCH_TURNS`
//! (default 10), `DQUE_BENCH_TURN_MS` (default 6 000), `DQUE_BENCH_DIR`
//! the disk. The embedded queue is shared (as `dque serve` opens it) and
//! Turbo (no fsync: the workers are bound by the CPU, where a dashboard's
//! reads would show most).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dque::jobs::{Address, AddressOptions, JobQueue, NewJob};
use dque::web::{Dashboard, DashboardOptions};
use dque::{Durability, Options};

#[path = "common/mod.rs"]
mod common;
#[cfg(feature = "postgres")]
#[path = "../tests/pg/mod.rs"]
mod pg;
#[cfg(feature = "postgres")]
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

fn main() {
    let workers = env_usize("DQUE_BENCH_WORKERS", 2).max(1);
    let backlog = env_usize("DQUE_BENCH_BACKLOG", 100_000);
    let turns = env_usize("DQUE_BENCH_TURNS", 10).max(2);
    let turn = Duration::from_millis(env_usize("DQUE_BENCH_TURN_MS", 6_000) as u64);
    let live_every = Duration::from_millis(env_usize("DQUE_BENCH_LIVE_MS", 3_000) as u64);
    let metrics_every = Duration::from_millis(env_usize("DQUE_BENCH_METRICS_MS", 5_000) as u64);
    let dir = common::tempdir();
    let backend = std::env::var("DQUE_BENCH_WEB_BACKEND").unwrap_or_default();
    let address: Address = match backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => match pg::PgServer::get() {
            Some(server) => {
                let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "on".into());
                let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
                let set = format!("ALTER SYSTEM SET synchronous_commit = '{sync}'");
                admin.batch_execute(&set).unwrap();
                admin.batch_execute("SELECT pg_reload_conf()").unwrap();
                server.address(&format!("load{}", std::process::id()))
            }
            None => return,
        },
        "" | "embedded" => dir.path().join("load").display().to_string(),
        other => panic!("DQUE_BENCH_WEB_BACKEND={other}: embedded or postgres (feature postgres)"),
    }
    .parse()
    .unwrap();
    let options = AddressOptions::new()
        .create(true)
        .embedded(Options::new().shared(true).durability(Durability::Turbo));
    let queue: Arc<dyn JobQueue> = Arc::from(options.open(&address).unwrap());
    let job = |i: usize| {
        NewJob::new(format!("{{\"n\":{i},\"to\":\"someone@example.com\"}}"))
            .header("klass", "send_email")
    };
    let mut left = backlog;
    while left > 0 {
        let n = left.min(10_000);
        queue.enqueue_batch((0..n).map(job).collect()).unwrap();
        left -= n;
    }

    // The dashboard, on handles of its own, on a socket.
    let shown: Arc<dyn JobQueue> = Arc::from(options.open(&address).unwrap());
    // Dropped here at the end, not in the server's runtime (a blocking
    // PostgreSQL client may not be dropped in one).
    let (listen, stop_server, server) = serve(shown.clone());

    // The workers.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (queue, stop, done) = (queue.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = w << 40;
                while !stop.load(Ordering::Relaxed) {
                    let Some(lease) = queue.lease_timeout(Duration::from_millis(50)).unwrap()
                    else {
                        continue;
                    };
                    queue.enqueue(job(i)).unwrap();
                    queue.ack(lease).unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    println!(
        "{} backlog {backlog}, {workers} workers, turns of {turn:?}, /live every {live_every:?}, \
         /metrics every {metrics_every:?}",
        if backend.is_empty() {
            "embedded"
        } else {
            &backend
        }
    );
    std::thread::sleep(Duration::from_secs(1)); // warm up
    let mut results: Vec<(bool, f64)> = Vec::new();
    let mut answers: Vec<Duration> = Vec::new();
    for t in 0..turns {
        // quiet, polled, polled, quiet, quiet, polled, …
        let polled = matches!(t % 4, 1 | 2);
        let before = done.load(Ordering::Relaxed);
        let started = Instant::now();
        let mut slowest = String::new();
        if polled {
            let times = poll(listen, turn, live_every, metrics_every);
            let max = times.iter().copied().max().unwrap_or_default();
            slowest = format!(", slowest answer {max:.1?}");
            answers.extend(times);
        } else {
            std::thread::sleep(turn);
        }
        let rate = (done.load(Ordering::Relaxed) - before) as f64 / started.elapsed().as_secs_f64();
        let kind = if polled { "polled" } else { "quiet" };
        println!("turn {t:>2} {kind:<7} {rate:>10.0} jobs/s{slowest}");
        results.push((polled, rate));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    stop_server.send(()).unwrap();
    server.join().unwrap();
    drop(shown);

    let total = |p: bool| -> f64 { results.iter().filter(|r| r.0 == p).map(|r| r.1).sum() };
    let count = |p: bool| results.iter().filter(|r| r.0 == p).count() as f64;
    let (quiet, polled) = (total(false) / count(false), total(true) / count(true));
    // Each polled turn against its quiet neighbour (turns 4k+1 → 4k, 4k+2 → 4k+3).
    let mut pairs: Vec<f64> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.0)
        .filter_map(|(t, r)| {
            let other = if t % 4 == 1 { t - 1 } else { t + 1 };
            results.get(other).map(|q| r.1 / q.1)
        })
        .collect();
    pairs.sort_by(f64::total_cmp);
    answers.sort();
    println!(
        "quiet {quiet:.0} jobs/s, polled {polled:.0} jobs/s: polled/quiet {:.3} (slowdown {:+.1} %); \
         median of neighbouring turns {:.3}; {} answers, median {:.1?}, slowest {:.1?}",
        polled / quiet,
        (1.0 - polled / quiet) * 100.0,
        pairs.get(pairs.len() / 2).copied().unwrap_or(f64::NAN),
        answers.len(),
        answers.get(answers.len() / 2).copied().unwrap_or_default(),
        answers.last().copied().unwrap_or_default(),
    );
}

/// Serves `queue` on 127.0.0.1 from a thread of its own: the address, the
/// stop, the thread.
fn serve(
    queue: Arc<dyn JobQueue>,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound, listen) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            bound.send(listener.local_addr().unwrap()).unwrap();
            let name = queue.name().to_owned();
            Dashboard::new(vec![(name, queue)], DashboardOptions::new())
                .serve_until(listener, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
    });
    (listen.recv().unwrap(), stop, thread)
}

/// A browser on the overview and a Prometheus for `turn`: the pages at
/// once, then `/live` and `/metrics` at their intervals. The answers' times.
fn poll(listen: SocketAddr, turn: Duration, live: Duration, metrics: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let mut times = vec![fetch(listen, "/"), fetch(listen, "/queues/0")];
    let (mut next_live, mut next_metrics) = (live, Duration::ZERO);
    loop {
        let next = next_live.min(next_metrics);
        if next >= turn {
            break;
        }
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        if next == next_metrics {
            times.push(fetch(listen, "/metrics"));
            next_metrics += metrics;
        } else {
            times.push(fetch(listen, "/live"));
            next_live += live;
        }
    }
    if let Some(rest) = turn.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    times
}

/// `GET path` over a new connection, to its end: how long it took.
fn fetch(listen: SocketAddr, path: &str) -> Duration {
    let start = Instant::now();
    let mut stream = TcpStream::connect(listen).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    start.elapsed()
}
