//! What the kept counts (issue 28, schema 9: one more CTE in each
//! statement that moves jobs, and the index `jobs_held` on leased rows)
//! cost the workers: the PostgreSQL backend with them (schema `kept`)
//! against handles whose statements keep no counts, on a schema without
//! the index (`bare`: the statements and indexes of schema 8), side by
//! side in one run on one throwaway server (the tests' `tests/pg/`), in
//! alternating turns (so a busy disk or CPU slows both alike), 100-byte
//! bodies:
//!
//! - enqueue, one at a time, and in batches of 100;
//! - lease + ack with 1 worker, and with 4 workers on their own
//!   connections.
//!
//! Each line gives both rates over all turns and the median over the turns
//! of the time with kept counts over the time without (1.05: 5 % slower),
//! and the ratio of the total times.
//!
//! ```sh
//! PATH=/usr/lib/postgresql/15/bin:$PATH cargo bench --features postgres --bench pg_counts
//! DQUE_BENCH_JOBS=200 DQUE_BENCH_TURNS=10   # jobs a turn, turns
//! DQUE_BENCH_SYNC=off                       # without waiting for the disk at each commit
//! DQUE_BENCH_KEEP_COMPLETED=0               # an ack deletes the row
//! DQUE_BENCH_BARE_INDEX=1                   # both sides with jobs_held: the CTEs alone
//! DQUE_BENCH_AA=1                           # both sides without: the method's own bias
//! ```

use std::time::{Duration, Instant};

use dque::jobs::{JobQueue, NewJob, PgJobs, PgOptions};
use postgres::{Client, NoTls};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const BODY: usize = 100;
const WORKERS: usize = 4;

fn options(schema: &str) -> PgOptions {
    let options = PgOptions::new().schema(schema);
    let options = match schema == "bare" || a_a() {
        true => options.uncounted_for_benchmarks(),
        false => options,
    };
    match std::env::var("DQUE_BENCH_KEEP_COMPLETED").is_ok_and(|v| v == "0") {
        true => options.keep_completed(dque::jobs::KeepCompleted::NONE),
        false => options,
    }
}

/// Both sides without kept counts nor the index (`DQUE_BENCH_AA=1`):
/// what the method reads when nothing differs.
fn a_a() -> bool {
    std::env::var("DQUE_BENCH_AA").is_ok_and(|v| v == "1")
}

/// One side: a queue in schema `kept` (kept counts) or `bare` (none), and
/// its workers' handles.
struct Side {
    queue: PgJobs,
    workers: Vec<PgJobs>,
}

impl Side {
    fn new(url: &str, schema: &str) -> Side {
        Side {
            queue: options(schema).connect(url, "bench").unwrap(),
            workers: (0..WORKERS)
                .map(|_| options(schema).connect(url, "bench").unwrap())
                .collect(),
        }
    }
}

fn lease_ack_all(queue: &dyn JobQueue) {
    while let Some(lease) = queue.lease().unwrap() {
        queue.ack(lease).unwrap();
    }
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Per side, the time of each turn.
#[derive(Default)]
struct Times([Vec<Duration>; 2]);

impl Times {
    fn line(&self, what: &str, jobs_a_turn: usize) {
        let rate = |t: &[Duration]| {
            (jobs_a_turn * t.len()) as f64 / t.iter().sum::<Duration>().as_secs_f64()
        };
        let total = |t: &[Duration]| t.iter().sum::<Duration>().as_secs_f64();
        let mut ratios: Vec<f64> = self.0[0]
            .iter()
            .zip(&self.0[1])
            .map(|(bare, kept)| kept.as_secs_f64() / bare.as_secs_f64().max(1e-9))
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "| {what} | {:.0} | {:.0} | {:.3} | {:.2}–{:.2} | {:.3} |",
            rate(&self.0[0]),
            rate(&self.0[1]),
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1],
            total(&self.0[1]) / total(&self.0[0]).max(1e-9),
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let url = server.url();
    let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "on".into());
    let mut admin = Client::connect(&url, NoTls).unwrap();
    admin
        .batch_execute(&format!("ALTER SYSTEM SET synchronous_commit = '{sync}'"))
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let per_turn = env_usize("DQUE_BENCH_JOBS", 200);
    let turns = env_usize("DQUE_BENCH_TURNS", 10).max(1);
    let (bare, kept) = (Side::new(&url, "bare"), Side::new(&url, "kept"));
    admin
        .batch_execute(
            match std::env::var("DQUE_BENCH_BARE_INDEX").is_ok_and(|v| v == "1") {
                // The statements' CTEs alone.
                true => "SELECT 1",
                false if a_a() => "DROP INDEX bare.jobs_held; DROP INDEX kept.jobs_held",
                false => "DROP INDEX bare.jobs_held",
            },
        )
        .unwrap();
    let sides = [&bare, &kept];
    let body = vec![7u8; BODY];
    let [mut one, mut batch, mut lease1, mut lease4] = Default::default();
    let batches = (per_turn / 10).max(1);
    for turn in 0..turns {
        // Each side first in every other turn.
        for i in [turn % 2, 1 - turn % 2] {
            let side = sides[i];
            let q = &side.queue;
            let t = timed(|| {
                (0..per_turn).for_each(|_| drop(q.enqueue(NewJob::new(body.clone())).unwrap()))
            });
            Times::push(&mut one, i, t);
            let t = timed(|| lease_ack_all(q));
            Times::push(&mut lease1, i, t);
            let t = timed(|| {
                for _ in 0..batches {
                    q.enqueue_batch((0..100).map(|_| NewJob::new(body.clone())).collect())
                        .unwrap();
                }
            });
            Times::push(&mut batch, i, t);
            let t = timed(|| {
                std::thread::scope(|scope| {
                    for worker in &side.workers {
                        scope.spawn(move || lease_ack_all(worker));
                    }
                })
            });
            Times::push(&mut lease4, i, t);
        }
    }
    println!(
        "Kept counts (statements, jobs_held) against none, {turns} turns, {BODY}-byte bodies, \
         synchronous_commit {sync}\n"
    );
    println!(
        "| case | jobs/s without | jobs/s with | with/without (median turn) | spread | totals |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    one.line("enqueue, one at a time", per_turn);
    batch.line("enqueue, batches of 100", batches * 100);
    lease1.line("lease + ack, 1 worker", per_turn);
    lease4.line("lease + ack, 4 workers", batches * 100);
}

impl Times {
    fn push(&mut self, side: usize, t: Duration) {
        self.0[side].push(t);
    }
}
