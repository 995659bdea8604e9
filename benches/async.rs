//! The async queue against the blocking calls, in one run, on one disk
//! (feature `tokio`). Prints a markdown table with the ratios issue 25
//! names (async ops/s over sync ops/s) and the thread count of 1,000 tasks
//! blocked on an empty queue.
//!
//! ```sh
//! cargo bench --bench async --features tokio
//! DQUE_BENCH_ITEMS=50000 cargo bench --bench async --features tokio   # quick
//! ```
//!
//! Environment: `DQUE_BENCH_DIR` (where the queues go), `DQUE_BENCH_ITEMS`
//! (items of the Turbo cases, default 200,000), `DQUE_BENCH_SAFE_ITEMS`
//! (items of the Safe cases, default 500), `DQUE_BENCH_ROUNDS` (each case
//! runs this many times interleaved, the best kept; default 3),
//! `DQUE_BENCH_WAKES` (wake-ups measured per blocked-tasks case, default
//! 300), `DQUE_BENCH_ONLY_WAKES=1` (only the blocked-tasks cases).
//!
//! The last case wakes the tasks by enqueues from another process: the
//! bench runs its own binary again as that producer
//! ([`CHILD`] in its environment), which enqueues one item per line it
//! reads on stdin, stamped with the monotonic clock both processes share.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dque::{AsyncQueue, Durability, Options, RawQueue};
use futures::StreamExt;

/// Set in the producer child's environment, to the queue's path.
const CHILD: &str = "DQUE_BENCH_ASYNC_CHILD";

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the
/// machine (`Instant` is the same clock, but opaque).
fn monotonic_nanos() -> u128 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(rc, 0);
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

/// The producer child: one enqueue, stamped just before, per line read.
fn producer_child(path: &std::ffi::OsStr) {
    use std::io::BufRead;
    let q: RawQueue = Options::new()
        .durability(Durability::Turbo)
        .shared(true)
        .open(path)
        .unwrap();
    for line in std::io::stdin().lock().lines() {
        line.unwrap();
        q.enqueue(&monotonic_nanos().to_le_bytes().to_vec())
            .unwrap();
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &tempfile::TempDir, name: &str, durability: Durability) -> RawQueue {
    Options::new()
        .durability(durability)
        .create(dir.path().join(name))
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Items per second of `n` operations that took `took`.
fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

struct Case {
    name: &'static str,
    sync: f64,
    asynchronous: f64,
    target: &'static str,
}

fn enqueue_case(
    dir: &tempfile::TempDir,
    n: usize,
    durability: Durability,
    round: usize,
) -> (f64, f64) {
    let item = vec![7u8; 100];
    let q = open(dir, &format!("sync-enq-{durability:?}-{round}"), durability);
    let start = Instant::now();
    for _ in 0..n {
        q.enqueue(&item).unwrap();
    }
    let sync = rate(n, start.elapsed());
    let q = AsyncQueue::new(open(
        dir,
        &format!("async-enq-{durability:?}-{round}"),
        durability,
    ));
    let asynchronous = runtime().block_on(async {
        let start = Instant::now();
        for _ in 0..n {
            q.enqueue(&item).await.unwrap();
        }
        rate(n, start.elapsed())
    });
    (sync, asynchronous)
}

fn lease_ack_case(dir: &tempfile::TempDir, n: usize, round: usize) -> (f64, f64) {
    let item = vec![7u8; 100];
    let q = open(dir, &format!("sync-lease-{round}"), Durability::Turbo);
    q.enqueue_batch(std::iter::repeat_n(&item, n)).unwrap();
    let start = Instant::now();
    while let Some(job) = q.lease().unwrap() {
        job.ack().unwrap();
    }
    let sync = rate(n, start.elapsed());
    let q = AsyncQueue::new(open(
        dir,
        &format!("async-lease-{round}"),
        Durability::Turbo,
    ));
    let asynchronous = runtime().block_on(async {
        q.enqueue_batch(std::iter::repeat_n(&item, n))
            .await
            .unwrap();
        let start = Instant::now();
        while let Some(job) = q.try_lease().await.unwrap() {
            job.ack().await.unwrap();
        }
        rate(n, start.elapsed())
    });
    (sync, asynchronous)
}

fn batch_case(dir: &tempfile::TempDir, n: usize, round: usize) -> (f64, f64) {
    const BATCH: usize = 100;
    let item = vec![7u8; 100];
    let q = open(dir, &format!("sync-batch-{round}"), Durability::Turbo);
    q.enqueue_batch(std::iter::repeat_n(&item, n)).unwrap();
    let start = Instant::now();
    loop {
        let mut jobs = q.lease_batch(BATCH).unwrap();
        if jobs.is_empty() {
            break;
        }
        q.ack_batch(&mut jobs).unwrap();
    }
    let sync = rate(n, start.elapsed());
    let q = AsyncQueue::new(open(
        dir,
        &format!("async-batch-{round}"),
        Durability::Turbo,
    ));
    let asynchronous = runtime().block_on(async {
        q.enqueue_batch(std::iter::repeat_n(&item, n))
            .await
            .unwrap();
        q.seal(); // the stream ends once the queue is empty
        let start = Instant::now();
        let mut batches = q.lease_batches(BATCH);
        while let Some(batch) = batches.next().await {
            q.ack_batch(batch.unwrap()).await.unwrap();
        }
        rate(n, start.elapsed())
    });
    (sync, asynchronous)
}

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Threads:")
                    .map(|n| n.trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

/// 1,000 tasks blocked on an empty queue: the process's threads before
/// and while they wait, and how long an enqueue from another thread takes
/// to reach a waiting task (each of `wakes` enqueues wakes one).
fn blocked_tasks(
    dir: &tempfile::TempDir,
    shared: bool,
    wakes: usize,
) -> (usize, usize, Vec<Duration>) {
    const TASKS: usize = 1000;
    let path = dir.path().join(format!("blocked-{shared}"));
    let q: RawQueue = Options::new()
        .durability(Durability::Turbo)
        .shared(shared)
        .create(&path)
        .unwrap();
    let runtime = runtime();
    let before = threads();
    let q = AsyncQueue::new(q);
    runtime.block_on(async {
        let (sent, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (q, sent) = (q.clone(), sent.clone());
                tokio::spawn(async move {
                    while let Some(job) = q.lease().await.unwrap() {
                        let at = Instant::now();
                        let stamp = u128::from_le_bytes(job.item()[..16].try_into().unwrap());
                        job.ack().await.unwrap();
                        let _ = sent.send((stamp, at));
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let waiting = threads();
        let origin = Instant::now();
        let producer = Arc::clone(q.queue());
        let mut latencies = Vec::new();
        for _ in 0..wakes {
            let p = Arc::clone(&producer);
            tokio::task::spawn_blocking(move || {
                let stamp = origin.elapsed().as_nanos();
                p.enqueue(&stamp.to_le_bytes().to_vec()).unwrap();
            })
            .await
            .unwrap();
            let (stamp, at) = woken.recv().await.unwrap();
            latencies.push(at.duration_since(origin) - Duration::from_nanos(stamp as u64));
        }
        q.seal();
        for task in tasks {
            task.await.unwrap();
        }
        latencies.sort_unstable();
        (before, waiting, latencies)
    })
}

/// 1,000 tasks blocked on an empty shared-mode queue, woken by enqueues
/// from another process (this binary run again as [`producer_child`]):
/// the threads while they wait, and the latency from the child's stamp,
/// taken just before its enqueue, to the task holding the item.
fn blocked_tasks_other_process(dir: &tempfile::TempDir, wakes: usize) -> (usize, Vec<Duration>) {
    use std::io::Write;
    const TASKS: usize = 1000;
    let path = dir.path().join("blocked-other-process");
    let q: RawQueue = Options::new()
        .durability(Durability::Turbo)
        .shared(true)
        .create(&path)
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD, &path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut go = child.stdin.take().unwrap();
    let runtime = runtime();
    let q = AsyncQueue::new(q);
    let result = runtime.block_on(async {
        let (sent, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (q, sent) = (q.clone(), sent.clone());
                tokio::spawn(async move {
                    while let Some(job) = q.lease().await.unwrap() {
                        let at = monotonic_nanos();
                        let stamp = u128::from_le_bytes(job.item()[..16].try_into().unwrap());
                        job.ack().await.unwrap();
                        let _ = sent.send(at.saturating_sub(stamp));
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let waiting = threads();
        let mut latencies = Vec::new();
        for _ in 0..wakes {
            // Every task is blocked again before the next enqueue.
            tokio::time::sleep(Duration::from_millis(2)).await;
            go.write_all(b"go\n").unwrap();
            go.flush().unwrap();
            let nanos = woken.recv().await.unwrap();
            latencies.push(Duration::from_nanos(nanos as u64));
        }
        drop(go); // the child's stdin ends: it exits
        q.seal();
        for task in tasks {
            task.await.unwrap();
        }
        latencies.sort_unstable();
        (waiting, latencies)
    });
    assert!(child.wait().unwrap().success(), "the producer child failed");
    result
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` runs nothing here
    }
    if let Some(path) = std::env::var_os(CHILD) {
        return producer_child(&path);
    }
    let dir = match std::env::var_os("DQUE_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let n = env("DQUE_BENCH_ITEMS", 200_000);
    let safe_n = env("DQUE_BENCH_SAFE_ITEMS", 500);
    let rounds = env("DQUE_BENCH_ROUNDS", 3);
    let wakes = env("DQUE_BENCH_WAKES", 300);
    if std::env::var_os("DQUE_BENCH_ONLY_WAKES").is_none() {
        throughput_cases(&dir, n, safe_n, rounds);
    }
    println!("| 1,000 tasks blocked on an empty queue | threads before | threads while waiting | wake p50 | wake p99 |");
    println!("|---|---:|---:|---:|---:|");
    let pick = |lat: &[Duration], q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    for shared in [false, true] {
        let (before, waiting, lat) = blocked_tasks(&dir, shared, wakes);
        println!(
            "| {} | {before} | {waiting} | {:?} | {:?} |",
            if shared {
                "shared mode (enqueue from another thread of this process)"
            } else {
                "exclusive mode (enqueue from another thread)"
            },
            pick(&lat, 0.5),
            pick(&lat, 0.99)
        );
    }
    let before = threads();
    let (waiting, lat) = blocked_tasks_other_process(&dir, wakes);
    println!(
        "| shared mode (enqueue from another process) | {before} | {waiting} | {:?} | {:?} |",
        pick(&lat, 0.5),
        pick(&lat, 0.99)
    );
}

fn throughput_cases(dir: &tempfile::TempDir, n: usize, safe_n: usize, rounds: usize) {
    let mut best = [(0f64, 0f64); 4];
    for round in 0..rounds {
        let got = [
            enqueue_case(dir, n, Durability::Turbo, round),
            lease_ack_case(dir, n, round),
            batch_case(dir, n, round),
            enqueue_case(dir, safe_n, Durability::Safe, round),
        ];
        for (b, g) in best.iter_mut().zip(got) {
            *b = (b.0.max(g.0), b.1.max(g.1));
        }
    }
    let cases = [
        Case {
            name: "enqueue, Turbo, 100 B, one task",
            sync: best[0].0,
            asynchronous: best[0].1,
            target: "≥ 0.5x",
        },
        Case {
            name: "lease + ack, Turbo, 100 B, one task",
            sync: best[1].0,
            asynchronous: best[1].1,
            target: "≥ 0.5x",
        },
        Case {
            name: "Stream of batches of 100 vs lease_batch(100), Turbo",
            sync: best[2].0,
            asynchronous: best[2].1,
            target: "≥ 0.8x",
        },
        Case {
            name: "enqueue, Safe, 100 B, one task (blocking pool)",
            sync: best[3].0,
            asynchronous: best[3].1,
            target: "(measured)",
        },
    ];
    println!("| case | sync ops/s | async ops/s | async / sync | target |");
    println!("|---|---:|---:|---:|---|");
    for c in &cases {
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x | {} |",
            c.name,
            c.sync,
            c.asynchronous,
            c.asynchronous / c.sync,
            c.target
        );
    }
    println!();
}
