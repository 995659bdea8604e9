//! A batch call on waiting jobs (`cancel_many`, `set_priority_many`, issue
//! 28's bulk actions) killed with SIGKILL mid-batch: it spans a write per
//! job, and each job must end cancelled or not, moved or not, as a single
//! call killed would leave it. After every kill: no job the batch did not
//! reach is lost, no cancelled job comes back twice, a job is in two
//! places only if the kill cut its own move (at most one a kill), and no
//! job stays leased by the dead process.
//!
//! `DQUE_KILLS=100 cargo test --release --test jobs_batch_kill` runs longer.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob};
use dque::{Durability, Options};

mod child;

const QUEUE: &str = "DQUE_BATCH_KILL_QUEUE";
const MODE: &str = "DQUE_BATCH_KILL_MODE";
const JOBS: usize = 60;
/// The priority the batch moves jobs to (they start at 0, 1 and 2).
const MOVED_TO: i32 = -3;

fn options(mode: &str) -> JobOptions {
    let durability = match mode {
        "safe" => Durability::Safe,
        _ => Durability::Turbo,
    };
    JobOptions::new().queue(
        Options::new()
            .shared(true)
            .durability(durability)
            .segment_items(8),
    )
}

fn open(path: &Path, mode: &str) -> EmbeddedJobs {
    options(mode).open(path).expect("open the jobs queue")
}

/// Jobs with made-up ids (most) and caller ids, in three lanes and the
/// schedule.
fn fill(path: &Path, mode: &str) {
    let queue = options(mode).create(path).unwrap();
    for i in 0..JOBS {
        let mut job = NewJob::new(format!("job-{i}")).priority((i % 3) as i32);
        if i % 5 == 0 {
            job = job.id(format!("caller-{i}"));
        }
        if i % 7 == 0 {
            job = job.delay(Duration::from_secs(3600));
        }
        queue.enqueue(job).unwrap();
    }
    queue.close().unwrap();
}

/// The child: the batch over every waiting job, in list order.
fn batch_child(cancel: bool) {
    let path = std::env::var(QUEUE).unwrap();
    let mode = std::env::var(MODE).unwrap();
    let queue = open(Path::new(&path), &mode);
    let ids: Vec<String> = queue
        .waiting(usize::MAX)
        .unwrap()
        .into_iter()
        .map(|w| w.job.id)
        .collect();
    child::ready();
    let outcomes = match cancel {
        true => queue.cancel_many(&ids),
        false => queue.set_priority_many(&ids, MOVED_TO),
    };
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    println!("@@ DONE");
}

/// Every job body in the queue (waiting, leased or dead): its copies'
/// priorities.
fn present(queue: &EmbeddedJobs) -> BTreeMap<String, Vec<i32>> {
    // Moves the jobs due by now first, ending the leftovers of moves a
    // kill cut of jobs with caller ids (as jobs_kill9 does).
    queue.enqueue_batch(Vec::new()).unwrap();
    let mut found: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let waiting = queue
        .waiting(usize::MAX)
        .unwrap()
        .into_iter()
        .map(|w| w.job);
    let dead = queue.dead(usize::MAX).unwrap().into_iter().map(|d| d.job);
    for job in waiting.chain(dead) {
        let body = String::from_utf8(job.body).unwrap();
        found.entry(body).or_default().push(job.priority);
    }
    found
}

fn kill_batches(test: &str, cancel: bool) {
    let _one_at_a_time = child::one_spawner_at_a_time();
    let rounds = child::kills(4);
    let mut cut = 0;
    for round in 0..rounds {
        let mode = if round % 2 == 0 { "safe" } else { "turbo" };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        fill(&path, mode);
        // From the batch's start to well past its end (Safe: a sync a job).
        let run_for = Duration::from_millis((round * 7919) % 40);
        let lines = child::run_until_killed_once_ready(
            test,
            &[(QUEUE, path.display().to_string()), (MODE, mode.to_owned())],
            run_for,
        );
        let done = lines.iter().any(|l| l.contains("@@ DONE"));
        let queue = open(&path, mode);
        let found = present(&queue);
        assert_eq!(
            queue.counts().unwrap().leased,
            0,
            "round {round} ({mode}): leases of the dead"
        );
        let doubled: Vec<_> = found.iter().filter(|(_, p)| p.len() > 1).collect();
        assert!(
            found.keys().all(|b| b.starts_with("job-")),
            "round {round}: {found:?}"
        );
        if cancel {
            assert!(
                doubled.is_empty(),
                "round {round} ({mode}): a cancel left copies: {doubled:?}"
            );
            if done {
                assert!(found.is_empty(), "round {round}: all cancelled: {found:?}");
            }
            cut += usize::from(!done && !found.is_empty() && found.len() < JOBS);
        } else {
            assert_eq!(
                found.len(),
                JOBS,
                "round {round} ({mode}): jobs lost by a priority change: {found:?}"
            );
            assert!(
                doubled.len() <= 1,
                "round {round} ({mode}): copies of more than the job whose move was cut: {doubled:?}"
            );
            let moved = found.values().filter(|p| p.contains(&MOVED_TO)).count();
            if done {
                assert_eq!(moved, JOBS, "round {round}: all moved");
                assert!(doubled.is_empty(), "round {round}: {doubled:?}");
            }
            cut += usize::from(!done && moved > 0 && moved < JOBS);
        }
        queue.close().unwrap();
    }
    println!("{cut} of {rounds} kills came mid-batch");
}

#[test]
fn a_cancel_many_killed_mid_batch_leaves_each_job_cancelled_or_not() {
    if child::run_as_child(|| batch_child(true)) {
        return;
    }
    kill_batches(
        "a_cancel_many_killed_mid_batch_leaves_each_job_cancelled_or_not",
        true,
    );
}

#[test]
fn a_set_priority_many_killed_mid_batch_loses_no_job() {
    if child::run_as_child(|| batch_child(false)) {
        return;
    }
    kill_batches("a_set_priority_many_killed_mid_batch_loses_no_job", false);
}
