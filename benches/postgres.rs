//! The PostgreSQL backend against the floor a hand-written queue would
//! reach (a plain `FOR UPDATE SKIP LOCKED` loop on a table of its own) and
//! against the embedded backend, in one run, on one throwaway server (the
//! tests' `tests/pg/`, from the binaries on PATH), 100-byte bodies:
//!
//! - enqueue, one at a time, and in batches of 100;
//! - lease + ack with 1 worker, and with 8 workers on their own
//!   connections.
//!
//! ```sh
//! cargo bench --features postgres --bench postgres
//! DQUE_BENCH_JOBS=2000 cargo bench --features postgres --bench postgres  # quick
//! ```

use std::sync::Arc;
use std::time::Instant;

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob, PgOptions};
use dque::Options;
use postgres::{Client, NoTls};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const BODY: usize = 100;

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
        Plain {
            client,
            table: table.to_owned(),
        }
    }

    fn again(&self, url: &str) -> Self {
        Plain {
            client: Client::connect(url, NoTls).unwrap(),
            table: self.table.clone(),
        }
    }

    fn enqueue(&mut self, body: &[u8]) {
        self.client
            .execute(
                &format!("INSERT INTO {} (body) VALUES ($1)", self.table),
                &[&body],
            )
            .unwrap();
    }

    fn enqueue_batch(&mut self, bodies: &[Vec<u8>]) {
        self.client
            .execute(
                &format!(
                    "INSERT INTO {} (body) SELECT unnest($1::bytea[])",
                    self.table
                ),
                &[&bodies],
            )
            .unwrap();
    }

    /// Leases one row and deletes it; false when there is none.
    fn lease_ack(&mut self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let row = self
            .client
            .query_opt(
                &format!(
                    "UPDATE {t} SET locked_until = $1 + 30000 WHERE id = (
                         SELECT id FROM {t} WHERE locked_until < $1 ORDER BY id
                         LIMIT 1 FOR UPDATE SKIP LOCKED)
                     RETURNING id, body",
                    t = self.table
                ),
                &[&now],
            )
            .unwrap();
        let Some(row) = row else {
            return false;
        };
        let id: i64 = row.get(0);
        self.client
            .execute(&format!("DELETE FROM {} WHERE id = $1", self.table), &[&id])
            .unwrap();
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
    let n = env_usize("DQUE_BENCH_JOBS", 20_000);
    let workers = 8;
    let body = vec![7u8; BODY];
    let bodies: Vec<Vec<u8>> = (0..100).map(|_| body.clone()).collect();

    // Enqueue, one at a time.
    let mut plain = Plain::new(&url, "bench_plain");
    let plain_enq = rate(n, || (0..n).for_each(|_| plain.enqueue(&body)));
    let jobs = PgOptions::new().connect(&url, "bench").unwrap();
    let pg_enq = rate(n, || {
        (0..n).for_each(|_| {
            jobs.enqueue(NewJob::new(body.clone())).unwrap();
        })
    });
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

    // Lease + ack, one worker.
    let plain_lease = rate(n, || while plain.lease_ack() {});
    let pg_lease = rate(n, || lease_ack_all(&jobs));
    let emb_lease = rate(emb_n, || lease_ack_all(&embedded));

    // Batches of 100.
    let plain_batch = rate(n, || {
        (0..n / 100).for_each(|_| plain.enqueue_batch(&bodies))
    });
    let pg_batch = rate(n, || {
        (0..n / 100).for_each(|_| {
            jobs.enqueue_batch(bodies.iter().map(|b| NewJob::new(b.clone())).collect())
                .unwrap();
        })
    });

    // Lease + ack, 8 workers on their own connections (the batches above).
    let plain_workers: Vec<Plain> = (0..workers).map(|_| plain.again(&url)).collect();
    let plain_8 = rate(n, || {
        std::thread::scope(|scope| {
            for mut worker in plain_workers {
                scope.spawn(move || while worker.lease_ack() {});
            }
        })
    });
    let pg_workers: Vec<Arc<dyn JobQueue>> = (0..workers)
        .map(|_| Arc::new(PgOptions::new().connect(&url, "bench").unwrap()) as Arc<dyn JobQueue>)
        .collect();
    let pg_8 = rate(n, || {
        std::thread::scope(|scope| {
            for worker in &pg_workers {
                scope.spawn(move || lease_ack_all(worker.as_ref()));
            }
        })
    });

    println!("PostgreSQL backend against a plain SKIP LOCKED loop, one run, {BODY}-byte bodies, {n} jobs\n");
    println!("| case | plain loop | PgJobs | plain / PgJobs | embedded (Safe) |");
    println!("|---|---|---|---|---|");
    let row = |case: &str, plain: f64, pg: f64, embedded: Option<f64>| {
        println!(
            "| {case} | {plain:.0}/s | {pg:.0}/s | {:.2}x | {} |",
            plain / pg,
            embedded.map_or("—".into(), |e| format!("{e:.0}/s"))
        );
    };
    row("enqueue, one at a time", plain_enq, pg_enq, Some(emb_enq));
    row("enqueue, batches of 100", plain_batch, pg_batch, None);
    row(
        "lease + ack, 1 worker",
        plain_lease,
        pg_lease,
        Some(emb_lease),
    );
    row("lease + ack, 8 workers", plain_8, pg_8, None);
    println!(
        "\nbatch enqueue / single enqueue (PgJobs): {:.1}x (target >= 10x)",
        pg_batch / pg_enq
    );
}
