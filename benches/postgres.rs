//! The PostgreSQL backend against the floor a hand-written queue would
//! reach (a plain `FOR UPDATE SKIP LOCKED` loop on a table of its own) and
//! against the embedded backend, in one run, on one throwaway server (the
//! tests' `tests/pg/`, from the binaries on PATH), 100-byte bodies:
//!
//! - enqueue, one at a time, and in batches of 100;
//! - lease + ack with 1 worker, and with 8 workers on their own
//!   connections; beside them the one-statement loop (`DELETE … WHERE id =
//!   (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`: no lease, so a
//!   job is lost if its worker dies, one commit a job instead of two).
//!
//! Both hand-written loops prepare their statements once per connection,
//! as PgJobs does.
//!
//! The cases on one connection run in alternating turns (plain, PgJobs,
//! …), so that a busy disk or CPU slows them alike; beside each ratio of
//! totals is the median of the per-turn ratios, which one slow turn does
//! not move. A last table gives the CPU time per job of those cases (the
//! client's thread and the connection's server process, from
//! `/proc/…/schedstat`), which other work on a shared machine moves far
//! less than the wall time.
//!
//! ```sh
//! cargo bench --features postgres --bench postgres
//! DQUE_BENCH_JOBS=2000 cargo bench --features postgres --bench postgres  # quick
//! # the statements' own cost, without waiting for the disk at each commit:
//! DQUE_BENCH_SYNC=off cargo bench --features postgres --bench postgres
//! # PgJobs keeping no completed jobs (an ack deletes the row; the default
//! # keeps them a day: an ack marks the row completed)
//! DQUE_BENCH_KEEP_COMPLETED=0 cargo bench --features postgres --bench postgres
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob, PgOptions};
use dque::Options;
use postgres::{Client, NoTls};

/// PgJobs' options: the default, or keeping no completed jobs with
/// `DQUE_BENCH_KEEP_COMPLETED=0`.
fn pg_options() -> PgOptions {
    match std::env::var("DQUE_BENCH_KEEP_COMPLETED").is_ok_and(|v| v == "0") {
        true => PgOptions::new().keep_completed(dque::jobs::KeepCompleted::NONE),
        false => PgOptions::new(),
    }
}

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const BODY: usize = 100;

/// Turns of the 1-connection cases.
const ROUNDS: usize = 50;

/// Batches of 100 in a turn of the batch case.
const BATCH_TURN: usize = 4;

/// How long `f` took.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// CPU time a thread or process has run, in nanoseconds (Linux's
/// `schedstat`: time on a CPU, not waiting for one nor for the disk).
fn cpu_ns(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU time of this thread and of the server processes `pids`.
fn cpu_of(pids: &[i32]) -> Duration {
    let server: u64 = pids
        .iter()
        .map(|pid| cpu_ns(&format!("/proc/{pid}/schedstat")))
        .sum();
    Duration::from_nanos(server + cpu_ns("/proc/thread-self/schedstat"))
}

/// The server process of `client`'s connection.
fn backend_pid(client: &mut Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0)
}

/// Times of cases run in alternating turns (so that a busy disk or CPU,
/// on a machine shared with other work, slows them alike).
struct Turns {
    /// Per case, the time of each turn.
    times: Vec<Vec<Duration>>,
    /// Per case, the CPU time of each turn: the client's thread and the
    /// case's server process (what other work on the machine does not
    /// change, as it changes the wall time; the disk's waits are not in it).
    cpu: Vec<Vec<Duration>>,
    /// Per case, the client thread's part of `cpu`.
    client: Vec<Vec<Duration>>,
    per_turn: usize,
}

impl Turns {
    /// Runs `rounds` rounds; in each, every case once, in order, `per_turn`
    /// jobs a turn (`cases[i](per_turn)` does them, on the connection of
    /// server process `pids[i]`).
    fn run(
        rounds: usize,
        per_turn: usize,
        pids: &[i32],
        cases: &mut [&mut dyn FnMut(usize)],
    ) -> Turns {
        let mut times = vec![Vec::with_capacity(rounds); cases.len()];
        let mut cpu = vec![Vec::with_capacity(rounds); cases.len()];
        let mut client = vec![Vec::with_capacity(rounds); cases.len()];
        for _ in 0..rounds {
            for (i, case) in cases.iter_mut().enumerate() {
                let before = cpu_of(&pids[i..=i]);
                let client_before = cpu_of(&[]);
                times[i].push(timed(|| case(per_turn)));
                client[i].push(cpu_of(&[]).saturating_sub(client_before));
                cpu[i].push(cpu_of(&pids[i..=i]).saturating_sub(before));
            }
        }
        Turns {
            times,
            cpu,
            client,
            per_turn,
        }
    }

    /// CPU time per job of case `i` (client and server), over all its turns.
    fn cpu_per_job(&self, i: usize) -> Duration {
        let total: Duration = self.cpu[i].iter().sum();
        total / (self.per_turn * self.cpu[i].len()) as u32
    }

    /// The client thread's CPU time per job of case `i`, over all its turns.
    fn client_per_job(&self, i: usize) -> Duration {
        let total: Duration = self.client[i].iter().sum();
        total / (self.per_turn * self.client[i].len()) as u32
    }

    /// The median over the rounds of case `b`'s CPU time over case `a`'s.
    fn median_cpu_ratio(&self, a: usize, b: usize) -> f64 {
        median(&self.cpu[a], &self.cpu[b])
    }

    /// Jobs per second of case `i`, over all its turns.
    fn rate(&self, i: usize) -> f64 {
        let total: Duration = self.times[i].iter().sum();
        (self.per_turn * self.times[i].len()) as f64 / total.as_secs_f64()
    }

    /// The median over the rounds of case `b`'s time over case `a`'s in
    /// the same round: what a spike in one turn does not move.
    fn median_ratio(&self, a: usize, b: usize) -> f64 {
        median(&self.times[a], &self.times[b])
    }
}

/// The median of `b[i] / a[i]`.
fn median(a: &[Duration], b: &[Duration]) -> f64 {
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| b.as_secs_f64() / a.as_secs_f64().max(1e-9))
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// Jobs per second of `n` jobs done in `f`.
fn rate(n: usize, f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    n as f64 / start.elapsed().as_secs_f64()
}

/// The plain loop: a table, INSERT; UPDATE … SKIP LOCKED to lease, DELETE to ack.
struct Plain {
    client: Client,
    table: String,
    statements: Option<Statements>,
}

/// The loop's statements, prepared once.
struct Statements {
    insert: postgres::Statement,
    insert_batch: postgres::Statement,
    lease: postgres::Statement,
    ack: postgres::Statement,
    take: postgres::Statement,
}

impl Statements {
    fn new(client: &mut Client, t: &str) -> Self {
        let mut prepare = |sql: String| client.prepare(&sql).unwrap();
        Statements {
            insert: prepare(format!("INSERT INTO {t} (body) VALUES ($1)")),
            insert_batch: prepare(format!("INSERT INTO {t} (body) SELECT unnest($1::bytea[])")),
            lease: prepare(format!(
                "UPDATE {t} SET locked_until = $1 + 30000 WHERE id = (
                     SELECT id FROM {t} WHERE locked_until < $1 ORDER BY id
                     LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING id, body"
            )),
            ack: prepare(format!("DELETE FROM {t} WHERE id = $1")),
            take: prepare(format!(
                "DELETE FROM {t} WHERE id = (
                     SELECT id FROM {t} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING id, body"
            )),
        }
    }
}

impl Plain {
    fn new(url: &str, table: &str) -> Self {
        let mut client = Client::connect(url, NoTls).unwrap();
        client
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {table};
                 CREATE TABLE {table} (id bigserial PRIMARY KEY, body bytea NOT NULL,
                                       locked_until bigint NOT NULL DEFAULT 0);
                 CREATE INDEX ON {table} (locked_until, id);"
            ))
            .unwrap();
        let statements = Some(Statements::new(&mut client, table));
        Plain {
            client,
            table: table.to_owned(),
            statements,
        }
    }

    fn again(&self, url: &str) -> Self {
        let mut client = Client::connect(url, NoTls).unwrap();
        let statements = Some(Statements::new(&mut client, &self.table));
        Plain {
            client,
            table: self.table.clone(),
            statements,
        }
    }

    fn statements(&self) -> &Statements {
        self.statements.as_ref().expect("prepared")
    }

    fn enqueue(&mut self, body: &[u8]) {
        let insert = self.statements().insert.clone();
        self.client.execute(&insert, &[&body]).unwrap();
    }

    fn enqueue_batch(&mut self, bodies: &[Vec<u8>]) {
        let insert = self.statements().insert_batch.clone();
        self.client.execute(&insert, &[&bodies]).unwrap();
    }

    /// Takes one row with one statement (no lease); false when none.
    fn take(&mut self) -> bool {
        let take = self.statements().take.clone();
        self.client.query_opt(&take, &[]).unwrap().is_some()
    }

    /// Leases one row and deletes it; false when there is none.
    fn lease_ack(&mut self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let (lease, ack) = (
            self.statements().lease.clone(),
            self.statements().ack.clone(),
        );
        let row = self.client.query_opt(&lease, &[&now]).unwrap();
        let Some(row) = row else {
            return false;
        };
        let id: i64 = row.get(0);
        self.client.execute(&ack, &[&id]).unwrap();
        true
    }
}

fn lease_ack_all(queue: &dyn JobQueue) {
    while let Some(lease) = queue.lease().unwrap() {
        queue.ack(lease).unwrap();
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
    let n = env_usize("DQUE_BENCH_JOBS", 20_000);
    let workers = 8;
    let body = vec![7u8; BODY];
    let bodies: Vec<Vec<u8>> = (0..100).map(|_| body.clone()).collect();

    // Enqueue, one at a time, in turns.
    let mut plain = Plain::new(&url, "bench_plain");
    // Named, so that its server process can be found for its CPU time.
    let jobs = pg_options()
        .connect(&format!("{url} application_name=bench_pgjobs"), "bench")
        .unwrap();
    let jobs_pid: i32 = admin
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_pgjobs'",
            &[],
        )
        .unwrap()
        .get(0);
    let plain_pid = backend_pid(&mut plain.client);
    let enq = Turns::run(
        ROUNDS,
        n / ROUNDS,
        &[plain_pid, jobs_pid],
        &mut [
            &mut |k| (0..k).for_each(|_| plain.enqueue(&body)),
            &mut |k| {
                (0..k).for_each(|_| {
                    jobs.enqueue(NewJob::new(body.clone())).unwrap();
                })
            },
        ],
    );
    let (plain_enq, pg_enq) = (enq.rate(0), enq.rate(1));
    let dir = tempfile::tempdir().unwrap();
    let embedded: EmbeddedJobs = JobOptions::new()
        .queue(Options::new())
        .create(dir.path().join("q"))
        .unwrap();
    let emb_n = n.min(5_000);
    let emb_enq = rate(emb_n, || {
        (0..emb_n).for_each(|_| {
            embedded.enqueue(NewJob::new(body.clone())).unwrap();
        })
    });

    // The one-statement loop's table, as full as the others.
    let mut one = Plain::new(&url, "bench_one");
    let one_pid = backend_pid(&mut one.client);
    (0..n / 100).for_each(|_| one.enqueue_batch(&bodies));
    (0..n % 100).for_each(|_| one.enqueue(&body));

    // Lease + ack, one worker (and the one-statement loop), in turns.
    let lease = Turns::run(
        ROUNDS,
        n / ROUNDS,
        &[plain_pid, jobs_pid, one_pid],
        &mut [
            &mut |k| (0..k).for_each(|_| assert!(plain.lease_ack())),
            &mut |k| {
                (0..k).for_each(|_| {
                    let lease = jobs.lease().unwrap().expect("a job");
                    jobs.ack(lease).unwrap();
                })
            },
            &mut |k| (0..k).for_each(|_| assert!(one.take())),
        ],
    );
    let (plain_lease, pg_lease, one_take) = (lease.rate(0), lease.rate(1), lease.rate(2));
    while plain.lease_ack() {}
    lease_ack_all(&jobs);
    while one.take() {}
    let emb_lease = rate(emb_n, || lease_ack_all(&embedded));

    // Batches of 100, in turns of BATCH_TURN batches (at least n jobs
    // each, as many as the lease cases below then take).
    let batch_rounds = (n / 100 / BATCH_TURN).max(ROUNDS / 2);
    let batch = Turns::run(
        batch_rounds,
        BATCH_TURN * 100,
        &[plain_pid, jobs_pid],
        &mut [
            &mut |k| (0..k / 100).for_each(|_| plain.enqueue_batch(&bodies)),
            &mut |k| {
                (0..k / 100).for_each(|_| {
                    jobs.enqueue_batch(bodies.iter().map(|b| NewJob::new(b.clone())).collect())
                        .unwrap();
                })
            },
        ],
    );
    let (plain_batch, pg_batch) = (batch.rate(0), batch.rate(1));
    let batched = batch_rounds * BATCH_TURN * 100;

    // Lease + ack, 8 workers on their own connections (the batches above).
    let plain_workers: Vec<Plain> = (0..workers).map(|_| plain.again(&url)).collect();
    let plain_8 = rate(batched, || {
        std::thread::scope(|scope| {
            for mut worker in plain_workers {
                scope.spawn(move || while worker.lease_ack() {});
            }
        })
    });
    let pg_workers: Vec<Arc<dyn JobQueue>> = (0..workers)
        .map(|_| Arc::new(pg_options().connect(&url, "bench").unwrap()) as Arc<dyn JobQueue>)
        .collect();
    let pg_8 = rate(batched, || {
        std::thread::scope(|scope| {
            for worker in &pg_workers {
                scope.spawn(move || lease_ack_all(worker.as_ref()));
            }
        })
    });
    (0..batched / 100).for_each(|_| one.enqueue_batch(&bodies));
    let one_workers: Vec<Plain> = (0..workers).map(|_| one.again(&url)).collect();
    let one_8 = rate(batched, || {
        std::thread::scope(|scope| {
            for mut worker in one_workers {
                scope.spawn(move || while worker.take() {});
            }
        })
    });

    println!("PostgreSQL backend against a plain SKIP LOCKED loop, one run, {BODY}-byte bodies, {n} jobs, synchronous_commit {sync}\n");
    println!("| case | plain loop | PgJobs | plain / PgJobs | median of turns | embedded (Safe) |");
    println!("|---|---|---|---|---|---|");
    let row = |case: &str, plain: f64, pg: f64, median: Option<f64>, embedded: Option<f64>| {
        println!(
            "| {case} | {plain:.0}/s | {pg:.0}/s | {:.2}x | {} | {} |",
            plain / pg,
            median.map_or("—".into(), |m| format!("{m:.2}x")),
            embedded.map_or("—".into(), |e| format!("{e:.0}/s"))
        );
    };
    row(
        "enqueue, one at a time",
        plain_enq,
        pg_enq,
        Some(enq.median_ratio(0, 1)),
        Some(emb_enq),
    );
    row(
        "enqueue, batches of 100",
        plain_batch,
        pg_batch,
        Some(batch.median_ratio(0, 1)),
        None,
    );
    row(
        "lease + ack, 1 worker",
        plain_lease,
        pg_lease,
        Some(lease.median_ratio(0, 1)),
        Some(emb_lease),
    );
    row("lease + ack, 8 workers", plain_8, pg_8, None, None);
    println!("\nThe one-statement loop (DELETE … SKIP LOCKED … RETURNING: no lease, one commit a job):\n");
    println!("| case | one-statement loop | PgJobs | one-statement / PgJobs | median of turns |");
    println!("|---|---|---|---|---|");
    println!(
        "| 1 worker | {one_take:.0}/s | {pg_lease:.0}/s | {:.2}x | {:.2}x |",
        one_take / pg_lease,
        lease.median_ratio(2, 1)
    );
    println!(
        "| 8 workers | {one_8:.0}/s | {pg_8:.0}/s | {:.2}x | — |",
        one_8 / pg_8
    );
    println!(
        "\nbatch enqueue / single enqueue (PgJobs): {:.1}x (target >= 10x)",
        pg_batch / pg_enq
    );
    println!("\nCPU time per job, the client's thread and the connection's server process (not the disk's waits, nor the WAL writer's):\n");
    println!("| case | plain loop | PgJobs | PgJobs / plain | median of turns | client part: plain, PgJobs |");
    println!("|---|---|---|---|---|---|");
    for (case, turns, a, b) in [
        ("enqueue, one at a time", &enq, 0, 1),
        ("enqueue, batches of 100", &batch, 0, 1),
        ("lease + ack, 1 worker", &lease, 0, 1),
        ("one-statement loop (as plain) / PgJobs", &lease, 2, 1),
    ] {
        let (ta, tb) = (turns.cpu_per_job(a), turns.cpu_per_job(b));
        let (ca, cb) = (turns.client_per_job(a), turns.client_per_job(b));
        println!(
            "| {case} | {:.1} µs | {:.1} µs | {:.2}x | {:.2}x | {:.1} µs, {:.1} µs |",
            ta.as_secs_f64() * 1e6,
            tb.as_secs_f64() * 1e6,
            tb.as_secs_f64() / ta.as_secs_f64().max(1e-12),
            turns.median_cpu_ratio(a, b),
            ca.as_secs_f64() * 1e6,
            cb.as_secs_f64() * 1e6,
        );
    }
}
