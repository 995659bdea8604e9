//! The worker runtime (`dque::runtime`) against what it saves writing, in
//! one run on one disk, each figure by the wall clock and by the process's
//! CPU clock side by side (CPU time of all its threads: on a busy machine
//! the time spent waiting for a core is not the runtime's cost):
//!
//! - per-job cost on a Turbo embedded jobs queue: a `Worker` with one
//!   thread running a kind that adds two numbers, against a hand-written
//!   loop doing the same (lease, decode the JSON body, run, ack); the
//!   runtime's time runs from `run` until the last job's hook (its final
//!   idle wait is not work);
//! - with feature `tokio` too, the same for the tokio runtime: an
//!   `AsyncWorker` with concurrency 1 against a hand-written async loop
//!   (lease, decode, run, ack through `AsyncEmbeddedJobs`), both on a
//!   current-thread runtime;
//! - scaling: the same handler sleeping 1 ms, 4 threads against 1 (wall
//!   clock: sleeping is its point).
//!
//! ```sh
//! cargo bench --features runtime,tokio --bench runtime
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
use common::{cpu_seconds, env_usize, tempdir};

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

/// A reading of both clocks.
#[derive(Clone, Copy)]
struct Stamp {
    wall: Instant,
    cpu: f64,
}

impl Stamp {
    fn now() -> Self {
        Stamp {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    /// Seconds per job from `self` to `end` for `n` jobs: (wall, CPU).
    fn per_job(self, end: Stamp, n: usize) -> Cost {
        Cost {
            wall: end.wall.duration_since(self.wall).as_secs_f64() / n as f64,
            cpu: (end.cpu - self.cpu) / n as f64,
        }
    }
}

/// Seconds per job, by each clock.
#[derive(Clone, Copy)]
struct Cost {
    wall: f64,
    cpu: f64,
}

/// A Turbo jobs queue holding `n` jobs made by `job`.
fn embedded_of<J: Job>(
    dir: &tempfile::TempDir,
    n: usize,
    job: impl Fn(u64) -> J,
) -> dque::jobs::EmbeddedJobs {
    let queue = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .create(dir.path().join("q"))
        .unwrap();
    for i in 0..n as u64 {
        queue.enqueue_job(&job(i)).unwrap();
    }
    queue
}

fn queue_of<J: Job>(
    dir: &tempfile::TempDir,
    n: usize,
    job: impl Fn(u64) -> J,
) -> Arc<dyn JobQueue> {
    Arc::new(embedded_of(dir, n, job))
}

/// Seconds per job of the hand-written loop.
fn by_hand(n: usize) -> Cost {
    let dir = tempdir();
    let queue = queue_of(&dir, n, |i| Add { a: i, b: 1 });
    let start = Stamp::now();
    while let Some(lease) = queue.lease().unwrap() {
        let job: Add = serde_json::from_slice(&lease.body).unwrap();
        SUM.fetch_add(job.a + job.b, Ordering::Relaxed);
        queue.ack(lease).unwrap();
    }
    let cost = start.per_job(Stamp::now(), n);
    queue.close().unwrap();
    cost
}

/// The last job's hook stamps the end.
fn last_hook(n: usize) -> (Arc<Mutex<Option<Stamp>>>, impl Fn() + Send + Sync + 'static) {
    let done = AtomicUsize::new(0);
    let last = Arc::new(Mutex::new(None));
    let at = Arc::clone(&last);
    let hook = move || {
        if done.fetch_add(1, Ordering::Relaxed) + 1 == n {
            *at.lock().unwrap() = Some(Stamp::now());
        }
    };
    (last, hook)
}

/// Seconds per job of a worker with `threads` threads running `n` jobs
/// made by `job`, from its start to the last job's hook.
fn by_worker<J: Job>(n: usize, threads: usize, job: impl Fn(u64) -> J) -> Cost {
    let dir = tempdir();
    let queue = queue_of(&dir, n, job);
    let (last, hook) = last_hook(n);
    let worker = Worker::new(Arc::clone(&queue))
        .register::<J>()
        .concurrency(threads)
        .handle_signals(false)
        .until_empty(true)
        .on_finished(move |_| hook());
    let start = Stamp::now();
    let summary = worker.run().unwrap();
    assert_eq!(summary.succeeded as usize, n);
    let end = last.lock().unwrap().expect("the last job's hook ran");
    queue.close().unwrap();
    start.per_job(end, n)
}

/// The tokio runtime's part: the same job as an `AsyncJob`.
#[cfg(feature = "tokio")]
mod tokio_part {
    use super::*;
    use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue};
    use dque::runtime::{AsyncContext, AsyncJob, AsyncWorker};

    impl AsyncJob for Add {
        const KIND: &'static str = "add";
        async fn perform(self, _cx: &AsyncContext) -> Result<(), JobError> {
            SUM.fetch_add(self.a + self.b, Ordering::Relaxed);
            Ok(())
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn async_queue(dir: &tempfile::TempDir, n: usize) -> Arc<dyn AsyncJobQueue> {
        Arc::new(AsyncEmbeddedJobs::new(embedded_of(dir, n, |i| Add {
            a: i,
            b: 1,
        })))
    }

    /// Seconds per job of a hand-written async loop.
    pub fn by_hand_async(n: usize) -> Cost {
        let dir = tempdir();
        let queue = async_queue(&dir, n);
        runtime().block_on(async {
            let start = Stamp::now();
            while let Some(lease) = queue.lease().await.unwrap() {
                let job: Add = serde_json::from_slice(&lease.body).unwrap();
                SUM.fetch_add(job.a + job.b, Ordering::Relaxed);
                queue.ack(lease).await.unwrap();
            }
            let cost = start.per_job(Stamp::now(), n);
            queue.close().await.unwrap();
            cost
        })
    }

    /// Seconds per job of an `AsyncWorker` with concurrency 1.
    pub fn by_async_worker(n: usize) -> Cost {
        let dir = tempdir();
        let queue = async_queue(&dir, n);
        let (last, hook) = last_hook(n);
        runtime().block_on(async {
            let worker = AsyncWorker::new(Arc::clone(&queue))
                .register::<Add>()
                .concurrency(1)
                .handle_signals(false)
                .until_empty(true)
                .on_finished(move |_| hook());
            let start = Stamp::now();
            let summary = worker.run().await.unwrap();
            assert_eq!(summary.succeeded as usize, n);
            let end = last.lock().unwrap().expect("the last job's hook ran");
            queue.close().await.unwrap();
            start.per_job(end, n)
        })
    }
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// The medians of `runs` rounds of (loop, runtime), by each clock.
fn pair(runs: usize, mut round: impl FnMut() -> (Cost, Cost)) -> (Cost, Cost) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (x, y) = round();
        a.push(x);
        b.push(y);
    }
    let med = |costs: &[Cost]| Cost {
        wall: median(costs.iter().map(|c| c.wall).collect()),
        cpu: median(costs.iter().map(|c| c.cpu).collect()),
    };
    (med(&a), med(&b))
}

fn print_pair(loop_name: &str, runtime_name: &str, (hand, runtime): (Cost, Cost)) {
    println!(
        "  {loop_name:<38} {:8.2} us {:8.2} us",
        hand.wall * 1e6,
        hand.cpu * 1e6
    );
    println!(
        "  {runtime_name:<38} {:8.2} us {:8.2} us   {:.2}x / {:.2}x the loop (target <= 1.5x)",
        runtime.wall * 1e6,
        runtime.cpu * 1e6,
        runtime.wall / hand.wall,
        runtime.cpu / hand.cpu
    );
}

fn main() {
    let items = env_usize("DQUE_BENCH_ITEMS", 100_000);
    let sleeps = env_usize("DQUE_BENCH_SLEEPS", 400);
    let runs = env_usize("DQUE_BENCH_RUNS", 3).max(1);

    println!("per job, Turbo embedded, {items} jobs, median of {runs}:");
    println!("  {:<38} {:>11} {:>11}", "", "wall", "process CPU");
    let threads = pair(runs, || {
        (by_hand(items), by_worker(items, 1, |i| Add { a: i, b: 1 }))
    });
    print_pair(
        "hand-written lease/decode/ack loop",
        "Worker, 1 thread",
        threads,
    );
    #[cfg(feature = "tokio")]
    {
        let tasks = pair(runs, || {
            (
                tokio_part::by_hand_async(items),
                tokio_part::by_async_worker(items),
            )
        });
        print_pair(
            "hand-written async loop (tokio)",
            "AsyncWorker, concurrency 1",
            tasks,
        );
    }

    let mut one = Vec::new();
    let mut four = Vec::new();
    for _ in 0..runs {
        one.push(by_worker(sleeps, 1, |_| Nap {}).wall);
        four.push(by_worker(sleeps, 4, |_| Nap {}).wall);
    }
    let (one, four) = (median(one), median(four));
    println!("handler sleeping 1 ms, {sleeps} jobs, median of {runs} (wall):");
    println!("  1 thread   {:8.0} jobs/s", 1.0 / one);
    println!(
        "  4 threads  {:8.0} jobs/s   {:.2}x one (target >= 3x)",
        1.0 / four,
        one / four
    );
    std::hint::black_box(SUM.load(Ordering::Relaxed));
}
