//! The worker runtime (`dque::runtime`) against what it saves writing, in
//! one run on one disk:
//!
//! - per-job cost on a Turbo embedded jobs queue: a `Worker` with one
//!   thread running a kind that adds two numbers, against a hand-written
//!   loop doing the same (lease, decode the JSON body, run, ack); the
//!   runtime's time runs from `run` until the last job's hook (its final
//!   idle wait is not work);
//! - scaling: the same handler sleeping 1 ms, 4 threads against 1.
//!
//! ```sh
//! cargo bench --features runtime --bench runtime
//! DQUE_BENCH_ITEMS=20000 DQUE_BENCH_SLEEPS=200 DQUE_BENCH_RUNS=1 cargo bench --features runtime --bench runtime
//! ```
//!
//! Sizes: `DQUE_BENCH_ITEMS` (jobs per run of the per-job part, default
//! 100 000), `DQUE_BENCH_SLEEPS` (jobs of the scaling part, default 400),
//! `DQUE_BENCH_RUNS` (median of, default 3); `DQUE_BENCH_DIR` picks the disk.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dque::jobs::{JobOptions, JobQueue};
use dque::runtime::{Context, EnqueueJob, Job, JobError, Worker};
use dque::{Durability, Options};
use serde::{Deserialize, Serialize};

#[path = "common/mod.rs"]
mod common;
use common::{env_usize, tempdir};

#[derive(Serialize, Deserialize)]
struct Add {
    a: u64,
    b: u64,
}

/// Where the handlers put their sums (so the work is not optimized away).
static SUM: AtomicU64 = AtomicU64::new(0);

impl Job for Add {
    const KIND: &'static str = "add";
    fn run(self, _cx: &Context) -> Result<(), JobError> {
        SUM.fetch_add(self.a + self.b, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Nap {}

impl Job for Nap {
    const KIND: &'static str = "nap";
    fn run(self, _cx: &Context) -> Result<(), JobError> {
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }
}

/// A Turbo jobs queue holding `n` jobs made by `job`.
fn queue_of<J: Job>(
    dir: &tempfile::TempDir,
    n: usize,
    job: impl Fn(u64) -> J,
) -> Arc<dyn JobQueue> {
    let queue = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .create(dir.path().join("q"))
        .unwrap();
    for i in 0..n as u64 {
        queue.enqueue_job(&job(i)).unwrap();
    }
    Arc::new(queue)
}

/// Seconds per job of the hand-written loop.
fn by_hand(n: usize) -> f64 {
    let dir = tempdir();
    let queue = queue_of(&dir, n, |i| Add { a: i, b: 1 });
    let start = Instant::now();
    while let Some(lease) = queue.lease().unwrap() {
        let job: Add = serde_json::from_slice(&lease.body).unwrap();
        SUM.fetch_add(job.a + job.b, Ordering::Relaxed);
        queue.ack(lease).unwrap();
    }
    let spent = start.elapsed();
    queue.close().unwrap();
    spent.as_secs_f64() / n as f64
}

/// Seconds per job of a worker with `threads` threads running `n` jobs
/// made by `job`, from its start to the last job's hook.
fn by_worker<J: Job>(n: usize, threads: usize, job: impl Fn(u64) -> J) -> f64 {
    let dir = tempdir();
    let queue = queue_of(&dir, n, job);
    let done = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(Mutex::new(None));
    let (counter, at) = (Arc::clone(&done), Arc::clone(&last));
    let worker = Worker::new(Arc::clone(&queue))
        .register::<J>()
        .concurrency(threads)
        .handle_signals(false)
        .until_empty(true)
        .on_finished(move |_| {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == n {
                *at.lock().unwrap() = Some(Instant::now());
            }
        });
    let start = Instant::now();
    let summary = worker.run().unwrap();
    assert_eq!(summary.succeeded as usize, n);
    let end = last.lock().unwrap().expect("the last job's hook ran");
    queue.close().unwrap();
    end.duration_since(start).as_secs_f64() / n as f64
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn main() {
    let items = env_usize("DQUE_BENCH_ITEMS", 100_000);
    let sleeps = env_usize("DQUE_BENCH_SLEEPS", 400);
    let runs = env_usize("DQUE_BENCH_RUNS", 3).max(1);

    let mut hand = Vec::new();
    let mut worker = Vec::new();
    for _ in 0..runs {
        hand.push(by_hand(items));
        worker.push(by_worker(items, 1, |i| Add { a: i, b: 1 }));
    }
    let (hand, worker) = (median(hand), median(worker));
    println!("per job, Turbo embedded, {items} jobs, median of {runs}:");
    println!(
        "  hand-written lease/decode/ack loop  {:8.2} us",
        hand * 1e6
    );
    println!(
        "  Worker, 1 thread                    {:8.2} us   {:.2}x the loop (target <= 1.5x)",
        worker * 1e6,
        worker / hand
    );

    let mut one = Vec::new();
    let mut four = Vec::new();
    for _ in 0..runs {
        one.push(by_worker(sleeps, 1, |_| Nap {}));
        four.push(by_worker(sleeps, 4, |_| Nap {}));
    }
    let (one, four) = (median(one), median(four));
    println!("handler sleeping 1 ms, {sleeps} jobs, median of {runs}:");
    println!("  1 thread   {:8.0} jobs/s", 1.0 / one);
    println!(
        "  4 threads  {:8.0} jobs/s   {:.2}x one (target >= 3x)",
        1.0 / four,
        one / four
    );
    std::hint::black_box(SUM.load(Ordering::Relaxed));
}
