//! Random interleavings of a Rust worker and both Python qless clients
//! (qless-py 0.11.4, reqless 0.13.3) on one Redis queue, checked against a
//! model at every step: which job each pop gets (qless's priority, then
//! the order jobs became ready), what a retry or a release does to a job's
//! place and its retries, and each job's state as both sides read it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dque::jobs::{JobLease, JobQueue, Nacked, NewJob, QlessPut, RedisOptions, Retry};
use serde_json::json;

mod qless_clients;
mod redis_server;
mod rng;
mod skip;
use qless_clients::{Client, Kind};
use redis_server::RedisServer;
use rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Rust,
    Python(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Ready, in the order of this number among its priority.
    Waiting(u64),
    Running(Side),
    Complete,
    Failed,
}

#[derive(Debug, Clone)]
struct Job {
    /// qless's priority (higher first).
    priority: i64,
    retries: i64,
    remaining: i64,
    state: State,
    /// Where it was ready before its pop: a Rust release or nack puts it
    /// back there.
    place: u64,
}

#[derive(Default)]
struct Model {
    jobs: BTreeMap<String, Job>,
    next: u64,
}

impl Model {
    fn ready_now(&mut self) -> State {
        self.next += 1;
        State::Waiting(self.next)
    }

    /// The job the next pop must get.
    fn head(&self) -> Option<String> {
        self.jobs
            .iter()
            .filter_map(|(id, job)| match job.state {
                State::Waiting(order) => Some((-job.priority, order, id.clone())),
                _ => None,
            })
            .min()
            .map(|(_, _, id)| id)
    }

    fn held_by(&self, side: Side) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|(_, job)| job.state == State::Running(side))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn qless_state(&self, id: &str) -> &'static str {
        match self.jobs[id].state {
            State::Waiting(_) => "waiting",
            State::Running(_) => "running",
            State::Complete => "complete",
            State::Failed => "failed",
        }
    }
}

fn run(seed: u64, steps: usize) {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let server = RedisServer::get().expect("checked");
    // Databases 40 to 63, emptied first.
    let db = 40 + RUNS.fetch_add(1, Ordering::Relaxed) % 24;
    server.cli(db, &["FLUSHDB"]);
    let url = server.url(db);
    let queue = "model";
    let rust = RedisOptions::new()
        .max_attempts(100) // the jobs' own retries decide
        .worker("rust")
        .connect(&url, queue)
        .unwrap();
    let mut pythons = [
        Client::start(Kind::QlessPy, &url, "qless-py"),
        Client::start(Kind::Reqless, &url, "reqless"),
    ];
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut rust_held: BTreeMap<String, JobLease> = BTreeMap::new();
    let mut log = Vec::new();

    for step in 0..steps {
        let side = match rng.below(3) {
            0 => Side::Rust,
            n => Side::Python(n as usize - 1),
        };
        let op = rng.below(10);
        log.push(format!("{step}: {side:?} op {op}"));
        match op {
            // Put.
            0..=2 => {
                let priority = rng.below(3) as i64 - 1;
                let retries = rng.below(3) as i64;
                let id = match side {
                    Side::Rust => rust
                        .put(
                            NewJob::new(format!("{{\"step\": {step}}}")).priority(-priority as i32),
                            QlessPut::new().retries(retries as u32),
                        )
                        .unwrap()
                        .id()
                        .to_owned(),
                    Side::Python(n) => pythons[n].put(json!({
                        "queue": queue, "data": format!("{{\"step\": {step}}}"),
                        "priority": priority, "retries": retries,
                    })),
                };
                // Both Python clients send `retries or 5`: 0 means 5.
                let retries = match side {
                    Side::Python(_) if retries == 0 => 5,
                    _ => retries,
                };
                let state = model.ready_now();
                model.jobs.insert(
                    id,
                    Job {
                        priority,
                        retries,
                        remaining: retries,
                        state,
                        place: 0,
                    },
                );
            }
            // Pop.
            3..=5 => {
                let expected = model.head();
                let got = match side {
                    Side::Rust => rust.lease().unwrap().map(|lease| {
                        let id = lease.id.clone();
                        let job = &model.jobs.get(&id);
                        if let Some(job) = job {
                            let attempt = (job.retries - job.remaining + 1) as u32;
                            assert_eq!(
                                lease.attempt,
                                attempt,
                                "seed {seed}, steps:\n{}",
                                log.join("\n")
                            );
                        }
                        rust_held.insert(id.clone(), lease);
                        id
                    }),
                    Side::Python(n) => pythons[n]
                        .pop(queue)
                        .map(|job| job["jid"].as_str().unwrap().to_owned()),
                };
                assert_eq!(got, expected, "seed {seed}, steps:\n{}", log.join("\n"));
                if let Some(id) = got {
                    let job = model.jobs.get_mut(&id).unwrap();
                    if let State::Waiting(order) = job.state {
                        job.place = order;
                    }
                    job.state = State::Running(side);
                }
            }
            // Settle a job this side holds: complete, retry, fail, release.
            _ => {
                let held = model.held_by(side);
                if held.is_empty() {
                    continue;
                }
                let id = held[rng.below(held.len() as u64) as usize].clone();
                let how = rng.below(4);
                log.push(format!("  settle {id} how {how}"));
                let job = model.jobs.get_mut(&id).unwrap();
                match (side, how) {
                    (Side::Rust, 0) => {
                        rust.ack(rust_held.remove(&id).unwrap()).unwrap();
                        job.state = State::Complete;
                        // qless restores a completed job's retries.
                        job.remaining = job.retries;
                    }
                    (Side::Python(n), 0) => {
                        pythons[n].call(json!({"op": "complete", "jid": id}));
                        job.state = State::Complete;
                        job.remaining = job.retries;
                    }
                    (Side::Rust, 1) => {
                        let lease = rust_held.remove(&id).unwrap();
                        let nacked = rust
                            .nack(lease, Retry::After(Duration::ZERO), "again")
                            .unwrap();
                        job.remaining -= 1;
                        if job.remaining < 0 {
                            assert_eq!(
                                nacked,
                                Nacked::Dead,
                                "seed {seed}, steps:\n{}",
                                log.join("\n")
                            );
                            job.state = State::Failed;
                        } else {
                            // In place: before newer jobs of its priority.
                            job.state = State::Waiting(job.place);
                        }
                    }
                    (Side::Python(n), 1) => {
                        pythons[n].call(
                            json!({"op": "retry", "jid": id, "group": "again", "message": "again"}),
                        );
                        job.remaining -= 1;
                        if job.remaining < 0 {
                            job.state = State::Failed;
                        } else {
                            // qless puts a retried job after the others.
                            model.next += 1;
                            job.state = State::Waiting(model.next);
                        }
                    }
                    (Side::Rust, 2) => {
                        rust.fail(rust_held.remove(&id).unwrap(), "broken: model")
                            .unwrap();
                        job.state = State::Failed;
                    }
                    (Side::Python(n), 2) => {
                        pythons[n].call(
                            json!({"op": "fail", "jid": id, "group": "broken", "message": "model"}),
                        );
                        job.state = State::Failed;
                    }
                    (Side::Rust, _) => {
                        rust.release(rust_held.remove(&id).unwrap()).unwrap();
                        job.state = State::Waiting(job.place);
                    }
                    (Side::Python(n), _) => {
                        pythons[n].call(json!({"op": "heartbeat", "jid": id}));
                    }
                }
            }
        }
        // Both sides read one job as the model says.
        if !model.jobs.is_empty() {
            let ids: Vec<&String> = model.jobs.keys().collect();
            let id = ids[rng.below(ids.len() as u64) as usize].clone();
            let reader = rng.below(2) as usize;
            let seen = pythons[reader].get(&id).expect("the job exists");
            assert_eq!(
                seen["state"],
                model.qless_state(&id),
                "{id}: seed {seed}, steps:\n{}",
                log.join("\n")
            );
            assert_eq!(
                seen["remaining"],
                model.jobs[&id].remaining,
                "{id}: seed {seed}, steps:\n{}",
                log.join("\n")
            );
            let ours = rust.job(&id).unwrap().unwrap();
            assert_eq!(
                ours.state,
                model.qless_state(&id),
                "seed {seed}, steps:\n{}",
                log.join("\n")
            );
        }
    }
    let counts = rust.queue_counts().unwrap();
    let count = |f: fn(&State) -> bool| model.jobs.values().filter(|j| f(&j.state)).count() as u64;
    assert_eq!(counts.waiting, count(|s| matches!(s, State::Waiting(_))));
    assert_eq!(counts.running, count(|s| matches!(s, State::Running(_))));
    assert_eq!(counts.failed, count(|s| *s == State::Failed));
}

#[test]
fn rust_and_python_workers_interleaved_follow_the_model() {
    if RedisServer::get().is_none() || qless_clients::python().is_none() {
        return;
    }
    let seeds: u64 = std::env::var("DQUE_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        run(seed, 150);
    }
}
