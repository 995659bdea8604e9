//! Caller ids on the embedded queue, against jobs without them and the
//! plain FIFO, in one run on one disk:
//!
//! - enqueue rate, Turbo and Safe: the plain FIFO (`RawQueue`), jobs of one
//!   priority, and the same jobs each with its own caller id, and an
//!   enqueue of an id already queued (the answer `AlreadyQueued`);
//! - many ids: with `DQUE_BENCH_IDS` jobs held (default 1 M), the memory an
//!   id costs a handle (RSS growth), the time to open the queue and the time
//!   of the first caller-id call after it (which reads the waiting records'
//!   headers once), the files on disk, and the enqueue rate at that size.
//!
//! ```sh
//! cargo bench --bench ids
//! DQUE_BENCH_ITEMS=20000 DQUE_BENCH_SAFE_ITEMS=300 DQUE_BENCH_IDS=100000 cargo bench --bench ids  # quick
//! ```

use std::time::Instant;

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob};
use dque::{Durability, Options, RawQueue};

#[path = "common/mod.rs"]
mod common;
use common::{env_usize, rate, tempdir};

const PAYLOAD: usize = 100;

fn jobs(durability: Durability, path: &std::path::Path) -> EmbeddedJobs {
    JobOptions::new()
        .queue(Options::new().durability(durability))
        .open_or_create(path)
        .unwrap()
}

/// Enqueues per second: plain FIFO, jobs, jobs with ids, ids already there.
fn rates(durability: Durability, n: usize) -> [f64; 4] {
    let body = vec![7u8; PAYLOAD];
    let dir = tempdir();
    let plain = RawQueue::create_with(
        dir.path().join("plain"),
        &Options::new().durability(durability),
    )
    .unwrap();
    let plain_rate = rate(n, |_| {
        plain.enqueue_bytes(&body).unwrap();
    });
    let queue = jobs(durability, &dir.path().join("jobs"));
    let jobs_rate = rate(n, |_| {
        queue.enqueue(NewJob::new(body.clone())).unwrap();
    });
    let queue = jobs(durability, &dir.path().join("ids"));
    let ids_rate = rate(n, |i| {
        let added = queue
            .enqueue(NewJob::new(body.clone()).id(format!("order-{i}")))
            .unwrap();
        assert!(added.is_added());
    });
    let again_rate = rate(n, |i| {
        let again = queue
            .enqueue(NewJob::new(body.clone()).id(format!("order-{i}")))
            .unwrap();
        assert!(!again.is_added());
    });
    [plain_rate, jobs_rate, ids_rate, again_rate]
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            match entry.file_type().unwrap().is_dir() {
                true => files_under(&entry.path()),
                false => 1,
            }
        })
        .sum()
}

/// `held` jobs with ids: memory per id, open time, first call, files.
fn many(held: usize) {
    let dir = tempdir();
    let path = dir.path().join("q");
    let body = vec![7u8; PAYLOAD];
    {
        let queue = jobs(Durability::Turbo, &path);
        let batch: Vec<NewJob> = (0..held)
            .map(|i| NewJob::new(body.clone()).id(format!("order-{i}")))
            .collect();
        // One at a time: the path an id takes.
        for job in batch {
            queue.enqueue(job).unwrap();
        }
        queue.close().unwrap();
    }
    let before = rss_kib();
    let started = Instant::now();
    let queue = jobs(Durability::Turbo, &path);
    let opened = started.elapsed();
    let started = Instant::now();
    let first = queue
        .enqueue(NewJob::new(body.clone()).id("order-0"))
        .unwrap();
    let first_call = started.elapsed();
    assert!(!first.is_added());
    let grown = rss_kib().saturating_sub(before);
    let n = 20_000;
    let at_size = rate(n, |i| {
        queue
            .enqueue(NewJob::new(body.clone()).id(format!("new-{i}")))
            .unwrap();
    });
    println!(
        "{held} ids held: open {:.1} ms, first caller-id call {:.0} ms, handle memory {} B/id (anonymous RSS), \
         {} files under the queue, enqueue with a new id {:.0}/s",
        opened.as_secs_f64() * 1e3,
        first_call.as_secs_f64() * 1e3,
        grown * 1024 / held as u64,
        files_under(&path),
        at_size
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("DQUE_BENCH_ITEMS", 200_000);
    let safe_n = env_usize("DQUE_BENCH_SAFE_ITEMS", 2_000);
    println!("enqueue, 100-byte bodies: rate, and ratio to the plain FIFO");
    for (name, durability, n) in [
        ("Turbo", Durability::Turbo, n),
        ("Safe", Durability::Safe, safe_n),
    ] {
        let [plain, jobs, ids, again] = rates(durability, n);
        println!(
            "{name:5}  plain {plain:>9.0}/s  jobs {jobs:>9.0}/s {:.2}x  with ids {ids:>9.0}/s {:.2}x  \
             an id already queued {again:>9.0}/s {:.2}x",
            jobs / plain,
            ids / plain,
            again / plain
        );
    }
    many(env_usize("DQUE_BENCH_IDS", 1_000_000));
}
