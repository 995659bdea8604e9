//! Moves of a job (with a caller id, and with an id the queue made up)
//! cut by a kill at every step, then the
//! queue reopened: the class of bug behind a CI failure of
//! `jobs_kill9::turbo_job_workers_killed_mid_work_lose_nothing` (a
//! `cancel` of an id `waiting()` had just listed answered `NoSuchJob`).
//!
//! A move writes the job's new record, then ends the old one; a kill in
//! between leaves two records of one job (FORMAT.md, "Moves"). For each
//! kind of move (a priority change of a ready and of a scheduled job, a
//! job falling due, a nack with a delay, `run_now`) the writer is killed
//! right before each of its writes in turn, and after the reopen:
//! - nothing is lost: the job is waiting, and a worker draining the queue
//!   runs it;
//! - `cancel` of its id removes the job: it answers Ok, and afterwards no
//!   copy is listed, none is leased, and a second cancel finds no job;
//!   `cancel_many` of it does the same (its one pass finds every copy).
//!
//! Bugs pinned:
//! - two scheduled records of one job (a priority change of a scheduled
//!   job cut by a kill) falling due in one batch each took the other for
//!   the live copy, and both were ended as leftovers: the job was lost;
//! - `cancel` ended one record of the job: the leftover of a cut move
//!   stayed, and ran, after a cancel that answered Ok.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob, Retry, WaitState};
use dque::{Durability, Options};

mod child;

const QUEUE: &str = "DQUE_CUT_MOVES_QUEUE";
const KIND: &str = "DQUE_CUT_MOVES_KIND";
const STEP: &str = "DQUE_CUT_MOVES_STEP";
const MODE: &str = "DQUE_CUT_MOVES_MODE";
const ID: &str = "DQUE_CUT_MOVES_ID";

/// Long enough for the child's move to happen before the job is due.
const DELAY: Duration = Duration::from_millis(400);

fn options(mode: &str) -> JobOptions {
    let durability = match mode {
        "safe" => Durability::Safe,
        _ => Durability::Turbo,
    };
    JobOptions::new().queue(
        Options::new()
            .shared(true)
            .durability(durability)
            .segment_items(8)
            .max_attempts(u16::MAX)
            .visibility_timeout(Duration::from_secs(30)),
    )
}

/// The moves cut, each from the state [`set_up`] leaves.
const KINDS: [&str; 5] = [
    "priority_of_ready",
    "priority_of_scheduled",
    "falls_due",
    "nack_with_delay",
    "run_now",
];

/// Job X: with the caller id "X", or (`made_up`) with an id the queue
/// makes up, which no index holds.
fn x(made_up: bool) -> NewJob {
    match made_up {
        true => NewJob::new(b"x".to_vec()),
        false => NewJob::new(b"x".to_vec()).id("X"),
    }
}

/// The queue before the move of kind `kind`: job X, and a few plain jobs
/// so that the lanes and the schedule exist and hold other records; X's
/// id.
fn set_up(path: &Path, mode: &str, kind: &str, made_up: bool) -> String {
    let q = options(mode).create(path).unwrap();
    for p in 0..3 {
        q.enqueue(NewJob::new(b"plain".to_vec()).priority(p))
            .unwrap();
    }
    q.enqueue(NewJob::new(b"later".to_vec()).delay(Duration::from_secs(3600)))
        .unwrap();
    let job = match kind {
        "priority_of_ready" | "nack_with_delay" => x(made_up),
        "priority_of_scheduled" | "falls_due" => x(made_up).delay(DELAY),
        "run_now" => x(made_up).delay(Duration::from_secs(3600)),
        _ => unreachable!(),
    };
    let added = q.enqueue(job).unwrap();
    assert!(added.is_added());
    q.close().unwrap();
    added.id().to_owned()
}

/// The child: makes the move, killed (SIGKILL) right before its `STEP`th
/// write; prints `done` if the move returned first.
fn mover() {
    use dque::faults::{FaultOp, FaultPlan};
    let path = PathBuf::from(std::env::var(QUEUE).unwrap());
    let kind = std::env::var(KIND).unwrap();
    let step: u64 = std::env::var(STEP).unwrap().parse().unwrap();
    let mode = std::env::var(MODE).unwrap();
    let id = std::env::var(ID).unwrap();
    let q = options(&mode).open(&path).unwrap();
    if kind == "falls_due" {
        std::thread::sleep(DELAY + Duration::from_millis(20));
    }
    // The lease that the nack settles is taken before the kills count
    // (the plain jobs leased before it stay leased until the kill).
    let lease = match kind.as_str() {
        "nack_with_delay" => loop {
            let lease = q.lease().unwrap().expect("jobs are ready");
            if lease.job.id == id {
                break Some(lease);
            }
            std::mem::forget(lease);
        },
        _ => None,
    };
    let plan = FaultPlan::install(&path);
    plan.die_at_nth(FaultOp::Write, step);
    match kind.as_str() {
        "priority_of_ready" | "priority_of_scheduled" => q.set_priority(&id, 5).unwrap(),
        // An empty batch moves the jobs due.
        "falls_due" => drop(q.enqueue_batch(Vec::new()).unwrap()),
        "nack_with_delay" => drop(
            q.nack(lease.unwrap(), Retry::After(DELAY), "again")
                .unwrap(),
        ),
        "run_now" => assert!(q.run_now(&id).unwrap()),
        _ => unreachable!(),
    }
    drop(plan);
    println!("done");
}

/// How many waiting copies of job `id` `waiting()` lists.
fn listed(q: &EmbeddedJobs, id: &str) -> usize {
    q.waiting(usize::MAX)
        .unwrap()
        .iter()
        .filter(|w| w.job.id == id)
        .count()
}

/// Leases and acks every job until none is ready or leased, and none
/// scheduled is due soon (those due in an hour stay); how many times X ran, or what is left if jobs
/// counted stay out of reach.
fn drain(q: &EmbeddedJobs, id: &str) -> Result<usize, String> {
    let mut ran = 0;
    let deadline = std::time::Instant::now() + 3 * DELAY;
    loop {
        match q.lease_timeout(Duration::from_millis(50)).unwrap() {
            Some(lease) => {
                ran += usize::from(lease.job.id == id);
                q.ack(lease).unwrap();
            }
            None => {
                let counts = q.counts().unwrap();
                let soon = SystemTime::now() + 2 * DELAY;
                let later = q
                    .waiting(usize::MAX)
                    .unwrap()
                    .iter()
                    .all(|w| matches!(w.state, WaitState::Scheduled(at) if at > soon));
                if counts.ready + counts.leased == 0 && later {
                    return Ok(ran);
                }
                if std::time::Instant::now() > deadline {
                    let waiting = q.waiting(usize::MAX).unwrap();
                    return Err(format!(
                        "X ran {ran} times, then no lease, with {counts:?} and waiting {waiting:?}"
                    ));
                }
            }
        }
    }
}

/// One cut: job X's move of `kind` killed before write `step`, then the
/// checks; whether the move finished before the kill.
fn cut_once(
    test: &str,
    mode: &str,
    kind: &str,
    step: u64,
    made_up: bool,
    cuts: &mut usize,
    problems: &mut Vec<String>,
) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let id = set_up(&path, mode, kind, made_up);
    let out = child::command(test)
        .env(QUEUE, &path)
        .env(KIND, kind)
        .env(STEP, step.to_string())
        .env(MODE, mode)
        .env(ID, &id)
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let finished = String::from_utf8_lossy(&out.stdout).contains("done");
    assert!(
        finished || out.status.code().is_none(),
        "{kind}, step {step}: the mover failed: {out:?}"
    );
    // Every copy is due, wherever the kill left it.
    std::thread::sleep(DELAY + Duration::from_millis(50));
    let copy = dir.path().join("copy");
    child::copy_dir(&path, &copy);
    let batch_copy = dir.path().join("batch");
    child::copy_dir(&path, &batch_copy);
    let at = format!("{mode}, {kind}, id {id}, killed before write {step}");
    // Nothing lost: listed, and run by a worker.
    let q = options(mode).open(&copy).unwrap();
    let copies = listed(&q, &id);
    *cuts += usize::from(copies > 1);
    let ran = drain(&q, &id);
    eprintln!("{at}: finished {finished}, {copies} copies listed, ran {ran:?}");
    // Run, or still scheduled (in an hour: a `run_now` cut early).
    let kept = ran.as_ref().is_ok_and(|&ran| ran > 0) || listed(&q, &id) > 0;
    match ran {
        Ok(_) if copies > 0 && kept => {}
        Ok(ran) => problems.push(format!("{at}: X lost ({copies} listed, ran {ran} times)")),
        Err(stuck) => problems.push(format!("{at}: stuck: {stuck}")),
    }
    drop(q);
    // A cancel removes the job, every copy of it; so does a batch cancel.
    for (how, queue) in [("cancel", &path), ("cancel_many", &batch_copy)] {
        let q = options(mode).open(queue).unwrap();
        let cancel = |q: &EmbeddedJobs| match how {
            "cancel" => q.cancel(&id),
            _ => q.cancel_many(std::slice::from_ref(&id)).pop().unwrap(),
        };
        match cancel(&q) {
            Ok(()) => {
                let left = listed(&q, &id);
                let again = cancel(&q);
                let ran = drain(&q, &id);
                if left > 0 || ran != Ok(0) || again.is_ok() {
                    problems.push(format!(
                        "{at}: {how}(X) was Ok, yet {left} copies are listed, \
                         X ran: {ran:?}, a second {how} answered {again:?}"
                    ));
                }
            }
            Err(e) => problems.push(format!("{at}: {how}(X) answered {e}")),
        }
    }
    finished
}

fn cut_at_every_step(test: &str, mode: &str) {
    let _one_at_a_time = child::one_spawner_at_a_time();
    let mut problems = Vec::new();
    let mut cuts = 0;
    for made_up in [false, true] {
        for kind in KINDS {
            for step in 1.. {
                let finished = cut_once(test, mode, kind, step, made_up, &mut cuts, &mut problems);
                if finished {
                    break;
                }
            }
        }
    }
    assert!(cuts > 0, "no kill left two copies: the test cuts no move");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn turbo_moves_cut_by_a_kill_at_every_step() {
    if child::run_as_child(mover) {
        return;
    }
    cut_at_every_step("turbo_moves_cut_by_a_kill_at_every_step", "turbo");
}

#[test]
fn safe_moves_cut_by_a_kill_at_every_step() {
    if child::run_as_child(mover) {
        return;
    }
    cut_at_every_step("safe_moves_cut_by_a_kill_at_every_step", "safe");
}
