//! Unique jobs (issue 27): what a uniqueness key costs an enqueue, on
//! every backend, against a plain enqueue (a made-up id) and a caller id
//! alone, one job per call, 100-byte bodies. The cases run in
//! alternating turns, so a busy disk or CPU slows them alike; each ratio
//! is the median of the per-turn ratios to the plain enqueue.
//!
//! ```sh
//! cargo bench --features postgres,redis --bench unique
//! DQUE_BENCH_JOBS=300 DQUE_BENCH_TURNS=3 cargo bench --features postgres,redis --bench unique
//! # PostgreSQL without waiting for the disk at each commit (the statements' own cost):
//! DQUE_BENCH_SYNC=off cargo bench --features postgres,redis --bench unique
//! ```
//!
//! The embedded queue in Safe (one fsync per enqueue) and Turbo; then
//! PostgreSQL and Redis on throwaway servers (`tests/pg`,
//! `tests/redis_server`: skipped if their binaries are missing).

use std::time::{Duration, Instant};

use dque::jobs::{AddressOptions, JobOptions, JobQueue, NewJob};
use dque::{Durability, Options};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/redis_server/mod.rs"]
mod redis_server;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const CASES: [&str; 3] = ["plain enqueue", "caller id", "caller id + unique_for"];

/// Enqueues `n` jobs of case `case` (ids from `from`); jobs per second.
fn turn(queue: &dyn JobQueue, case: usize, from: usize, n: usize) -> f64 {
    let body = vec![7u8; 100];
    let start = Instant::now();
    for i in from..from + n {
        let job = NewJob::new(body.clone());
        let job = match case {
            0 => job,
            1 => job.id(format!("id-{i}")),
            _ => job
                .id(format!("unique-{i}"))
                .unique_for(Duration::from_secs(3600)),
        };
        assert!(queue.enqueue(job).unwrap().is_added());
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn measure(name: &str, queue: &dyn JobQueue, n: usize, turns: usize) {
    let mut rates = vec![Vec::new(); CASES.len()];
    for t in 0..turns {
        for (case, rates) in rates.iter_mut().enumerate() {
            rates.push(turn(queue, case, t * n, n));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (case, case_rates) in rates.iter().enumerate() {
        let ratios: Vec<f64> = case_rates
            .iter()
            .zip(&rates[0])
            .map(|(r, plain)| r / plain)
            .collect();
        println!(
            "| {name} | {} | {:.0}/s | {:.2}x |",
            CASES[case],
            median(case_rates.clone()),
            median(ratios)
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("DQUE_BENCH_JOBS", 1_000);
    let turns = env_usize("DQUE_BENCH_TURNS", 5);
    println!("enqueue, one job a call, {n} jobs a turn, medians of {turns} turns, wall clock\n");
    println!("| backend | case | enqueue | / plain (median of turns) |");
    println!("|---|---|---|---|");
    for (name, durability, n) in [
        ("embedded, Safe", Durability::Safe, n / 4),
        ("embedded, Turbo", Durability::Turbo, n * 20),
    ] {
        let dir = common::tempdir();
        let queue = JobOptions::new()
            .queue(Options::new().durability(durability))
            .create(dir.path().join("q"))
            .unwrap();
        measure(name, &queue, n.max(1), turns);
    }
    if let Some(server) = pg::PgServer::get() {
        let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "on".into());
        let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("ALTER SYSTEM SET synchronous_commit = '{sync}'"))
            .unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        let queue = AddressOptions::new()
            .open_str(&server.address("bench_unique"))
            .unwrap();
        measure(
            &format!("PostgreSQL, synchronous_commit {sync}"),
            queue.as_ref(),
            n,
            turns,
        );
    }
    if let Some(server) = redis_server::RedisServer::get() {
        let queue = AddressOptions::new()
            .open_str(&server.address(1, "bench_unique"))
            .unwrap();
        measure("Redis", queue.as_ref(), n, turns);
    }
}
