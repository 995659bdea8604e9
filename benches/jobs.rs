//! The Jobs API against the plain FIFO, in one run on one disk:
//!
//! - enqueue and lease+ack, in Turbo, Periodic (100 ms) and Safe: the
//!   plain FIFO (`RawQueue`, lease and ack) and, as ratios to it, jobs of
//!   one priority, of 10 random priorities (their lanes made before the
//!   timed part, the time to make them shown apart), with a caller id each, with a
//!   1 ms delay (system clock: each call moves the jobs fallen due
//!   meanwhile, as in use), and delayed jobs all due at once (a manual
//!   clock moved past them: every lease first moves jobs out of the
//!   schedule); each figure the median of `DQUE_BENCH_RUNS` runs;
//! - memory: anonymous RSS growth with 1 M scheduled jobs, in bytes per job, and the
//!   time to open a queue holding them and make its first call (which
//!   reads the schedule's due times to fill its bounded due index);
//! - `dque work` with `true` as the command: time per job, against
//!   spawning `true` that many times from this process (the floor);
//! - `job_info` of one job among `DQUE_BENCH_INFO_JOBS` waiting ones
//!   (default 1 000 000; 0 skips it): by a caller id near the head, in
//!   the middle and at the tail, a leased job, a scheduled job, and a
//!   made-up id in the middle; time per call, the median of 3.
//!
//! ```sh
//! cargo bench --bench jobs
//! # quick (seconds): fewer items, one run, no memory or `dque work` part
//! DQUE_BENCH_QUICK=1 cargo bench --bench jobs
//! # one case in one mode, for a profiler (`perf record -g`, callgrind)
//! DQUE_BENCH_QUICK=1 DQUE_BENCH_MODES=turbo DQUE_BENCH_CASES="one priority" cargo bench --bench jobs
//! # job_info alone, on 1 M waiting jobs
//! DQUE_BENCH_QUICK=1 DQUE_BENCH_MODES=none DQUE_BENCH_INFO_JOBS=1000000 cargo bench --bench jobs
//! ```
//!
//! Sizes: `DQUE_BENCH_ITEMS` (Turbo and Periodic), `DQUE_BENCH_SAFE_ITEMS`,
//! `DQUE_BENCH_ID_ITEMS` (most jobs with caller ids per run),
//! `DQUE_BENCH_SCHEDULED` (memory part; 0 skips it), `DQUE_BENCH_WORK_JOBS`
//! (0 skips it), `DQUE_BENCH_RUNS`. `DQUE_BENCH_MODES` and
//! `DQUE_BENCH_CASES` keep the modes and cases whose names contain one of
//! their comma-separated words (the plain FIFO always runs).
//! `DQUE_BENCH_DIR` picks the disk (default: the system temp dir).
//! `DQUE_BENCH_CLOCK=cpu` counts the process's CPU time instead of the
//! wall clock: steadier on a shared machine, meaningful for Turbo only.
//! `DQUE_BENCH_KEEP_COMPLETED=0` keeps no completed jobs (history off;
//! by default a queue keeps them a day, as `KeepCompleted::DEFAULT`).

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use dque::jobs::{Clock, EmbeddedJobs, JobOptions, JobQueue, ManualClock, NewJob, SystemClock};
use dque::{Durability, Options, RawQueue};

#[path = "common/mod.rs"]
mod common;
use common::{env_usize, rate, tempdir, Rng};

const PAYLOAD: usize = 100;

/// The plain FIFO: enqueue `n`, then lease and ack each.
fn plain(durability: Durability, n: usize) -> (f64, f64) {
    let dir = tempdir();
    let options = Options::new().durability(durability);
    let queue = RawQueue::create_with(dir.path().join("q"), &options).unwrap();
    let item = vec![7u8; PAYLOAD];
    let enqueue = rate(n, |_| queue.enqueue_bytes(&item).unwrap());
    let lease_ack = rate(n, |_| {
        queue.lease().unwrap().expect("an item").ack().unwrap()
    });
    queue.close().unwrap();
    (enqueue, lease_ack)
}

#[derive(Clone, Copy)]
enum Shape {
    OnePriority,
    TenPriorities,
    CallerIds,
    /// A caller id and a uniqueness period each (issue 27).
    UniqueIds,
    /// A 1 ms delay, the system clock.
    DelayedMs,
    /// Random delays, then a manual clock moved past them all.
    AllDue,
}

const SHAPES: [(&str, Shape); 6] = [
    ("jobs, one priority", Shape::OnePriority),
    ("jobs, 10 random priorities", Shape::TenPriorities),
    ("jobs with a caller id each", Shape::CallerIds),
    ("jobs with a caller id and unique_for", Shape::UniqueIds),
    ("jobs with a 1 ms delay", Shape::DelayedMs),
    ("delayed jobs, all due at lease", Shape::AllDue),
];

/// Jobs of `shape`: enqueue `n`, then lease and ack each.
fn jobs(durability: Durability, shape: Shape, n: usize) -> (f64, f64) {
    let dir = tempdir();
    let manual = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let clock: Arc<dyn Clock> = match shape {
        Shape::DelayedMs => Arc::new(SystemClock),
        _ => Arc::new(manual.clone()),
    };
    let mut options = JobOptions::new()
        .queue(Options::new().durability(durability))
        .clock(clock);
    if std::env::var("DQUE_BENCH_KEEP_COMPLETED").is_ok_and(|v| v == "0") {
        options = options.keep_completed(dque::jobs::KeepCompleted::NONE);
    }
    let queue = options.create(dir.path().join("q")).unwrap();
    if let Shape::TenPriorities = shape {
        // A lane (a queue per priority) is made, with its fsyncs, once in
        // a queue's life: before the timed part, its cost shown apart.
        let start = Instant::now();
        for priority in 0..10 {
            queue
                .enqueue(NewJob::new("first").priority(priority))
                .unwrap();
        }
        while let Some(lease) = queue.lease().unwrap() {
            queue.ack(lease).unwrap();
        }
        LANES_MADE_US.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
    let mut rng = Rng(42);
    let enqueue = rate(n, |i| {
        let job = NewJob::new(vec![7u8; PAYLOAD]);
        let job = match shape {
            Shape::OnePriority => job,
            Shape::TenPriorities => job.priority(rng.below(10) as i32),
            Shape::CallerIds => job.id(format!("id-{i}")),
            Shape::UniqueIds => job
                .id(format!("id-{i}"))
                .unique_for(Duration::from_secs(3600)),
            Shape::DelayedMs => job.delay(Duration::from_millis(1)),
            Shape::AllDue => job.delay(Duration::from_secs(1 + rng.below(3600))),
        };
        assert!(queue.enqueue(job).unwrap().is_added());
    });
    manual.advance(Duration::from_secs(7200));
    std::thread::sleep(Duration::from_millis(2));
    let lease_ack = rate(n, |_| {
        let lease = queue.lease().unwrap().expect("a job");
        queue.ack(lease).unwrap();
    });
    queue.close().unwrap();
    (enqueue, lease_ack)
}

/// The longest time seen to make the 9 lanes of the 10-priority case.
static LANES_MADE_US: AtomicU64 = AtomicU64::new(0);

/// Resident memory of this process, in bytes: anonymous memory only
/// (`RssAnon`: the heap, the due index), not the pages of mapped segment
/// files, which the kernel may drop and read again.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// RSS growth per scheduled job while enqueueing `n` of them, and the time
/// to open the queue again and make a first call (which reads the due
/// times of the schedule's records to fill its due index).
fn scheduled_memory(n: usize) -> (f64, f64, Duration) {
    let dir = tempdir();
    let path = dir.path().join("q");
    let options = JobOptions::new().queue(Options::new().durability(Durability::Turbo));
    let before = rss();
    let queue = options.create(&path).unwrap();
    let mut rng = Rng(7);
    for chunk in 0..n / 1000 {
        let jobs = (0..1000)
            .map(|i| {
                NewJob::new(format!("job {chunk}-{i}"))
                    .delay(Duration::from_secs(3600 + rng.below(86_400)))
            })
            .collect();
        queue.enqueue_batch(jobs).unwrap();
    }
    let after = rss();
    queue.close().unwrap();
    drop(queue);
    let reopen_before = rss();
    let start = Instant::now();
    let queue: EmbeddedJobs = options.open(&path).unwrap();
    // The index is filled at the first call that looks at the schedule.
    assert!(queue.lease().unwrap().is_none());
    let opened = start.elapsed();
    let reopened = rss();
    let per_job = (after.saturating_sub(before)) as f64 / n as f64;
    let per_job_reopened = (reopened.saturating_sub(reopen_before)) as f64 / n as f64;
    (per_job, per_job_reopened, opened)
}

/// Seconds per job of `dque work --until-empty -- true` over `n` jobs, and
/// of spawning `true` `n` times from here.
fn work_overhead(n: usize) -> Option<(f64, f64)> {
    let dque = std::env::var_os("CARGO_BIN_EXE_dque")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            let target = exe.parent()?.parent()?;
            let bin = target.join("dque");
            bin.exists().then_some(bin)
        })?;
    let dir = tempdir();
    let path = dir.path().join("q");
    let queue = JobOptions::new().create(&path).unwrap();
    queue
        .enqueue_batch((0..n).map(|i| NewJob::new(format!("{i}"))).collect())
        .unwrap();
    queue.close().unwrap();
    drop(queue);
    let start = Instant::now();
    let status = Command::new(&dque)
        .args([
            "work",
            path.to_str().unwrap(),
            "--until-empty",
            "--",
            "true",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let work = start.elapsed().as_secs_f64() / n as f64;
    let start = Instant::now();
    for _ in 0..n {
        assert!(Command::new("true").status().unwrap().success());
    }
    let spawn = start.elapsed().as_secs_f64() / n as f64;
    Some((work, spawn))
}

/// Time per `job_info` call on a queue of `n` waiting jobs with caller
/// ids (`job-0` …), one of them leased, one scheduled, one with a made-up
/// id in the middle: (what was asked, median time of 3 calls).
fn job_info_costs(n: usize) -> Vec<(String, Duration)> {
    let dir = tempdir();
    let queue: EmbeddedJobs = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .create(dir.path().join("q"))
        .unwrap();
    let body = vec![7u8; PAYLOAD];
    let mut made_up = String::new();
    for start in (0..n).step_by(10_000) {
        let end = (start + 10_000).min(n);
        let batch = (start..end)
            .map(|i| NewJob::new(body.clone()).id(format!("job-{i}")))
            .collect();
        queue.enqueue_batch(batch).unwrap();
        if start <= n / 2 && n / 2 < end {
            made_up = queue
                .enqueue(NewJob::new(body.clone()))
                .unwrap()
                .id()
                .to_owned();
        }
    }
    queue
        .enqueue(
            NewJob::new(body.clone())
                .id("later")
                .delay(Duration::from_secs(3600)),
        )
        .unwrap();
    let leased = queue.lease().unwrap().expect("a job");
    let asked = [
        ("leased (job-0)".to_owned(), leased.job.id.clone()),
        ("caller id near the head".to_owned(), "job-10".to_owned()),
        (
            "caller id in the middle".to_owned(),
            format!("job-{}", n / 2),
        ),
        ("caller id at the tail".to_owned(), format!("job-{}", n - 1)),
        ("scheduled".to_owned(), "later".to_owned()),
        ("made-up id in the middle".to_owned(), made_up),
    ];
    asked
        .into_iter()
        .map(|(what, id)| {
            let mut times: Vec<Duration> = (0..3)
                .map(|_| {
                    let start = Instant::now();
                    let info = queue.job_info(&id).unwrap();
                    let took = start.elapsed();
                    assert_eq!(info.expect("waiting").job.id, id);
                    took
                })
                .collect();
            times.sort();
            (what, times[times.len() / 2])
        })
        .collect()
}

/// Whether `name` is kept by the comma-separated words of `var` (all
/// names are when it is unset).
fn chosen(var: &str, name: &str) -> bool {
    match std::env::var(var) {
        Ok(words) => words
            .split(',')
            .any(|w| name.to_lowercase().contains(&w.trim().to_lowercase())),
        Err(_) => true,
    }
}

/// The median of each of the two rates over `runs` runs of `run`.
fn median(runs: usize, mut run: impl FnMut() -> (f64, f64)) -> (f64, f64) {
    let (mut a, mut b): (Vec<f64>, Vec<f64>) = (0..runs.max(1)).map(|_| run()).unzip();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[a.len() / 2], b[b.len() / 2])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var_os("DQUE_BENCH_QUICK").is_some();
    let pick = |var, full, small| env_usize(var, if quick { small } else { full });
    let items = pick("DQUE_BENCH_ITEMS", 200_000, 30_000);
    let safe_items = pick("DQUE_BENCH_SAFE_ITEMS", 2_000, 200);
    let id_items = pick("DQUE_BENCH_ID_ITEMS", 20_000, 3_000);
    let scheduled = pick("DQUE_BENCH_SCHEDULED", 1_000_000, 0);
    let work_jobs = pick("DQUE_BENCH_WORK_JOBS", 500, 0);
    let info_jobs = pick("DQUE_BENCH_INFO_JOBS", 1_000_000, 0);
    let runs = pick("DQUE_BENCH_RUNS", 3, 1);
    let clock = if common::cpu_clock() {
        "CPU time"
    } else {
        "wall clock"
    };
    println!(
        "jobs against the plain FIFO, {PAYLOAD}-byte bodies, one run, medians of {runs}, {clock}\n"
    );
    println!("| mode | case | enqueue | / plain | lease+ack | / plain |");
    println!("|---|---|---|---|---|---|");
    let periodic = Durability::Periodic(Duration::from_millis(100));
    for (name, durability, n) in [
        ("Turbo", Durability::Turbo, items),
        ("Periodic", periodic, items),
        ("Safe", Durability::Safe, safe_items),
    ] {
        if !chosen("DQUE_BENCH_MODES", name) {
            continue;
        }
        let (plain_enq, plain_lease) = median(runs, || plain(durability, n));
        println!("| {name} | plain FIFO | {plain_enq:.0}/s | 1.00x | {plain_lease:.0}/s | 1.00x |");
        for (case, shape) in SHAPES {
            if !chosen("DQUE_BENCH_CASES", case) {
                continue;
            }
            let n = match shape {
                Shape::CallerIds | Shape::UniqueIds => n.min(id_items),
                _ => n,
            };
            let (enq, lease) = median(runs, || jobs(durability, shape, n));
            println!(
                "| {name} | {case} | {enq:.0}/s | {:.2}x | {lease:.0}/s | {:.2}x |",
                enq / plain_enq,
                lease / plain_lease
            );
        }
    }
    let lanes_made = LANES_MADE_US.load(Ordering::Relaxed);
    if lanes_made > 0 {
        println!(
            "\n10 priorities: the 9 lanes beside the root were made before the timed part, \
             in at most {:.1} ms (once in a queue's life)",
            lanes_made as f64 / 1e3
        );
    }
    if scheduled > 0 {
        let (per_job, per_job_reopened, opened) = scheduled_memory(scheduled);
        println!(
            "\n{scheduled} scheduled jobs: anonymous RSS grew {per_job:.1} bytes per job while enqueueing; \
             reopened, {per_job_reopened:.1} bytes per job; open and first call {opened:.2?}"
        );
    }
    if info_jobs > 0 {
        println!(
            "\n`job_info` of one job among {info_jobs} waiting (Turbo, wall clock, median of 3):\n"
        );
        println!("| job asked | time per call |");
        println!("|---|---|");
        for (what, took) in job_info_costs(info_jobs) {
            println!("| {what} | {took:.2?} |");
        }
    }
    if work_jobs > 0 {
        match work_overhead(work_jobs) {
            Some((work, spawn)) => println!(
                "`dque work -- true`: {:.2} ms per job; spawning `true` alone: {:.2} ms ({:.2}x)",
                work * 1e3,
                spawn * 1e3,
                work / spawn
            ),
            None => {
                println!("`dque work`: build it first (cargo build --release --features cli)")
            }
        }
    }
}
