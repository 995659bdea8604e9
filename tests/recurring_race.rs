//! Two schedulers racing every tick (issue 27): two processes, each with
//! its own handle on one queue (embedded in shared mode, PostgreSQL,
//! Redis), are told each tick at once; both fire the schedules and lease
//! what is ready. Every tick's job must be leased exactly once: a second
//! scheduler adds nothing, even after the first's job was acked.
//! Ticks: `DQUE_RECUR_RACE_TICKS` (default 100; the figure is
//! 1,000).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dque::jobs::{tick_id, JobOptions, JobQueue, ManualClock, PgOptions, RedisOptions, Schedule};

mod child;
mod pg;
mod redis_server;
mod skip;

const EVERY: Duration = Duration::from_secs(1);
const NAME: &str = "race";

fn start() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000)
}

fn ticks() -> u64 {
    std::env::var("DQUE_RECUR_RACE_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// The queue of `kind` (dir, pg, redis) at `at`, on `clock`.
fn open(kind: &str, at: &str, clock: &ManualClock) -> Arc<dyn JobQueue> {
    let clock: Arc<dyn dque::jobs::Clock> = Arc::new(clock.clone());
    match kind {
        "dir" => Arc::new(
            JobOptions::new()
                .queue(dque::Options::new().shared(true))
                .clock(clock)
                .open_or_create(at)
                .unwrap(),
        ),
        "pg" => Arc::new(PgOptions::new().clock(clock).connect(at, "race").unwrap()),
        _ => Arc::new(
            RedisOptions::new()
                .clock(clock)
                .connect(at, "race")
                .unwrap(),
        ),
    }
}

/// A child: for each tick read from stdin, sets its clock there, fires
/// the schedules and leases (and acks) what is ready; prints `ID id` per
/// job and `DONE tick`.
fn racer() {
    let clock = ManualClock::new(start());
    let (kind, at) = (
        std::env::var("RACE_KIND").unwrap(),
        std::env::var("RACE_AT").unwrap(),
    );
    let queue = open(&kind, &at, &clock);
    let mut out = std::io::stdout().lock();
    // The harness's "test NAME ... " has no line end: ours start afresh.
    writeln!(out).unwrap();
    for line in std::io::stdin().lock().lines() {
        let tick: u64 = line.unwrap().trim().parse().unwrap();
        clock.set(start() + EVERY * tick as u32);
        queue.fire_schedules().unwrap();
        while let Some(lease) = queue.lease().unwrap() {
            writeln!(out, "ID {}", lease.id).unwrap();
            queue.ack(lease).unwrap();
        }
        writeln!(out, "DONE {tick}").unwrap();
        out.flush().unwrap();
    }
}

/// Races two children on the queue of `kind` at `at` for `ticks()` ticks.
fn race(test: &str, kind: &str, at: &str) {
    let clock = ManualClock::new(start());
    let queue = open(kind, at, &clock);
    queue
        .schedule(Schedule::every(NAME, EVERY).body("tick"))
        .unwrap();
    drop(queue);
    let mut children: Vec<_> = {
        let _one = child::one_spawner_at_a_time();
        (0..2)
            .map(|_| {
                child::command(test)
                    .env("RACE_KIND", kind)
                    .env("RACE_AT", at)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap()
            })
            .collect()
    };
    let mut inputs: Vec<_> = children
        .iter_mut()
        .map(|c| c.stdin.take().unwrap())
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()).lines())
        .collect();
    let mut leased: BTreeMap<String, usize> = BTreeMap::new();
    let ticks = ticks();
    for tick in 0..ticks {
        // Both are told before either is waited for: they race.
        for input in &mut inputs {
            writeln!(input, "{tick}").unwrap();
            input.flush().unwrap();
        }
        for output in &mut outputs {
            loop {
                let line = output.next().expect("the child ended").unwrap();
                if let Some(id) = line.strip_prefix("ID ") {
                    *leased.entry(id.to_owned()).or_default() += 1;
                } else if line == format!("DONE {tick}") {
                    break;
                }
            }
        }
    }
    drop(inputs);
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let twice: Vec<_> = leased.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "jobs leased more than once: {twice:?}");
    let expected: Vec<String> = (0..ticks)
        .map(|k| tick_id(NAME, start() + EVERY * k as u32))
        .collect();
    let got: Vec<String> = leased.into_keys().collect();
    assert_eq!(got.len(), expected.len(), "one job per tick");
    assert_eq!(got, {
        let mut e = expected;
        e.sort();
        e
    });
}

#[test]
fn two_schedulers_on_a_directory_add_one_job_per_tick() {
    if child::run_as_child(racer) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("race");
    race(
        "two_schedulers_on_a_directory_add_one_job_per_tick",
        "dir",
        q.to_str().unwrap(),
    );
}

#[test]
fn two_schedulers_on_postgres_add_one_job_per_tick() {
    if child::run_as_child(racer) {
        return;
    }
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    race(
        "two_schedulers_on_postgres_add_one_job_per_tick",
        "pg",
        &server.url(),
    );
}

#[test]
fn two_schedulers_on_redis_add_one_job_per_tick() {
    if child::run_as_child(racer) {
        return;
    }
    let Some(server) = redis_server::RedisServer::get() else {
        return;
    };
    race(
        "two_schedulers_on_redis_add_one_job_per_tick",
        "redis",
        &server.url(3),
    );
}
