//! Unique jobs (issue 27) under concurrent producers, on every backend:
//! 8 producers pushing the same ids while a worker runs and acks them
//! never add an id twice within its period: as threads (each with its
//! own handle) and as `dque push` processes (the embedded queue across
//! processes: the ids' lock and `jobs/ids/unique` between them). And the
//! `dque push --unique-for` flags on a directory, PostgreSQL and Redis.
//!
//! Rounds: `DQUE_UNIQUE_ROUNDS` (ids raced by the threads, default 200;
//! process rounds are a tenth of it, at least 2).

mod pg;
mod redis_server;
mod skip;

mod dque_cmd;
use dque_cmd::{dque, ok};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dque::jobs::{AddressOptions, Enqueued, JobQueue, NewJob};

const PRODUCERS: usize = 8;

fn rounds() -> usize {
    std::env::var("DQUE_UNIQUE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// The test that stops a server has it alone (as in the CLI tests).
static SERVER_USE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    SERVER_USE.lock().unwrap_or_else(|e| e.into_inner())
}

fn open(address: &str) -> Box<dyn JobQueue> {
    AddressOptions::new()
        .create(true)
        .open_str(address)
        .unwrap_or_else(|e| panic!("open {address}: {e}"))
}

/// 8 threads, each with its own handle on `address`, enqueue ids
/// `race-0`.. with a period while a worker leases and acks: each id is
/// added exactly once (the pins of the "never a duplicate" guarantee).
fn threads_race(address: &str) {
    let ids = rounds();
    let added: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let (queue, done) = (open(address), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut acked = 0;
            loop {
                match queue.lease().expect("lease") {
                    Some(lease) => {
                        queue.ack(lease).expect("ack");
                        acked += 1;
                    }
                    None if done.load(Ordering::SeqCst) => return acked,
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        })
    };
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (queue, added) = (open(address), Arc::clone(&added));
            std::thread::spawn(move || {
                for i in 0..ids {
                    // Each producer in its own order, so they meet on
                    // every id while it is queued, running and done.
                    let i = (i + p * ids / PRODUCERS) % ids;
                    let id = format!("race-{i}");
                    let job = NewJob::new(id.clone())
                        .id(id.clone())
                        .unique_for(Duration::from_secs(3600));
                    match queue.enqueue(job).expect("enqueue") {
                        Enqueued::Added(_) => *added.lock().unwrap().entry(id).or_default() += 1,
                        Enqueued::AlreadyQueued(_) | Enqueued::Duplicate(_) => {}
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        producer.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let acked = worker.join().unwrap();
    let added = added.lock().unwrap();
    let twice: Vec<_> = added.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "added more than once: {twice:?}");
    assert_eq!(added.len(), ids, "every id added once");
    assert_eq!(acked, ids, "every job ran once");
}

/// `PRODUCERS` `dque push` processes per round push one id at once while
/// `dque pop` takes it: one push adds it, the others say it is held.
fn processes_race(address: &str) {
    let rounds = (rounds() / 10).max(2);
    for round in 0..rounds {
        let id = format!("proc-{round}");
        let pushers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (address, id) = (address.to_owned(), id.clone());
                std::thread::spawn(move || {
                    if p == PRODUCERS / 2 {
                        // Meanwhile the job may run: a push after it is
                        // done must not add it again either.
                        let _ = dque(&["pop", &address]);
                    }
                    let out = dque(&[
                        "push",
                        &address,
                        "--id",
                        &id,
                        "--unique-for",
                        "3600",
                        "body",
                    ]);
                    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                    assert!(out.status.success(), "{stderr}");
                    !stderr.contains("not pushed again")
                })
            })
            .collect();
        let adds = pushers
            .into_iter()
            .map(|p| p.join().unwrap())
            .filter(|added| *added)
            .count();
        assert_eq!(adds, 1, "round {round}: {adds} pushes added {id}");
    }
    // Every job pushed is there once, or ran once.
    let _ = dque(&["pop", address, "-n", "1000"]);
}

/// `dque push --unique-for`: held after the job ran, in a new process
/// (the embedded queue reads `jobs/ids/unique` again); the flags checked.
fn push_flags(address: &str) {
    ok(&["push", address, "--id", "flag", "--unique-for", "3600", "x"]);
    assert_eq!(ok(&["pop", address]), "x");
    let again = dque(&["push", address, "--id", "flag", "--unique-for", "60", "x"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("within its uniqueness period and is done"),
        "{stderr}"
    );
    assert!(!dque(&["pop", address]).status.success(), "nothing added");
    // Dead holds the id only when asked.
    for (id, states, held) in [
        ("d1", "queued,running,done", false),
        ("d2", "queued,running,done,dead", true),
    ] {
        ok(&[
            "push",
            address,
            "--id",
            id,
            "--unique-for",
            "3600",
            "--unique-states",
            states,
            id,
        ]);
        let queue = open(address);
        let lease = queue.lease().unwrap().expect("the job");
        queue.fail(lease, "broken").unwrap();
        queue.close().unwrap();
        let again = dque(&["push", address, "--id", id, "x"]);
        let stderr = String::from_utf8_lossy(&again.stderr);
        assert_eq!(stderr.contains("is dead"), held, "{id}: {stderr}");
        let _ = dque(&["pop", address]);
    }
    let bad = dque(&[
        "push",
        address,
        "--id",
        "b",
        "--unique-for",
        "60",
        "--unique-states",
        "done",
        "x",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("queued and running"), "{stderr}");
    let no_id = dque(&["push", address, "--unique-for", "60", "x"]);
    assert_eq!(no_id.status.code(), Some(2), "{no_id:?}");
}

fn directory() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q");
    ok(&[
        "push",
        q.to_str().unwrap(),
        "--create",
        "--id",
        "first",
        "f",
    ]);
    assert_eq!(ok(&["pop", q.to_str().unwrap()]), "f");
    let q = q.to_str().unwrap().to_owned();
    (dir, q)
}

#[test]
fn unique_jobs_hold_under_8_producer_threads_on_a_directory() {
    let (_dir, q) = directory();
    threads_race(&q);
}

#[test]
fn unique_jobs_hold_under_8_producer_processes_on_a_directory() {
    let (_dir, q) = directory();
    processes_race(&q);
}

#[test]
fn dque_push_unique_flags_on_a_directory() {
    let (_dir, q) = directory();
    push_flags(&q);
}

#[test]
fn unique_jobs_hold_under_8_producers_on_postgres() {
    let _alone = alone();
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let pid = std::process::id();
    threads_race(&server.address(&format!("race-threads-{pid}")));
    processes_race(&server.address(&format!("race-procs-{pid}")));
    push_flags(&server.address(&format!("flags-{pid}")));
}

#[test]
fn unique_jobs_hold_under_8_producers_on_redis() {
    let Some(server) = redis_server::RedisServer::get() else {
        return;
    };
    threads_race(&server.address(3, "race-threads"));
    processes_race(&server.address(4, "race-procs"));
    push_flags(&server.address(5, "flags"));
}
