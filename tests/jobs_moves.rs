//! Scheduled jobs of an embedded queue falling due (FORMAT.md, "Moves"):
//! the order in which they join their lanes, a due index bounded in
//! memory, and a handle alone on its queue killed in the middle of moves.
//!
//! `DQUE_KILLS=100 cargo test --release --test jobs_moves` kills longer;
//! `DQUE_MOVE_ROUNDS=200` races moves with threads and closes longer.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, UNIX_EPOCH};

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, ManualClock, NewJob};
use dque::{Durability, Options};

mod child;

fn manual_queue(path: &Path, durability: Durability) -> (EmbeddedJobs, ManualClock) {
    let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let queue = JobOptions::new()
        .queue(Options::new().durability(durability))
        .clock(Arc::new(clock.clone()))
        .open_or_create(path)
        .unwrap();
    (queue, clock)
}

/// Leases and acks every ready job; their bodies, in lease order.
fn drain(queue: &EmbeddedJobs) -> Vec<String> {
    let mut bodies = Vec::new();
    while let Some(lease) = queue.lease().unwrap() {
        bodies.push(String::from_utf8(lease.body.clone()).unwrap());
        queue.ack(lease).unwrap();
    }
    bodies
}

// Issue 24 (delayed jobs): an enqueue of a delayed job no longer moves the
// jobs fallen due meanwhile (it joins no lane, so the order is not at
// stake). This pins that the order in which jobs became ready still holds
// when the move waits for a later call: a ready job enqueued after jobs
// fell due, alone or in a batch, runs after them.
#[test]
fn jobs_due_before_a_ready_job_run_before_it_though_delayed_enqueues_came_between() {
    for durability in [Durability::Turbo, Durability::Safe] {
        let dir = tempfile::tempdir().unwrap();
        let (queue, clock) = manual_queue(&dir.path().join("q"), durability);
        queue
            .enqueue(NewJob::new("due at 5").delay(Duration::from_secs(5)))
            .unwrap();
        queue
            .enqueue(NewJob::new("due at 6").delay(Duration::from_secs(6)))
            .unwrap();
        clock.advance(Duration::from_secs(7));
        // Delayed enqueues after both fell due: nothing moves yet.
        queue
            .enqueue(NewJob::new("due at 17").delay(Duration::from_secs(10)))
            .unwrap();
        queue
            .enqueue_batch(vec![NewJob::new("due at 8").delay(Duration::from_secs(1))])
            .unwrap();
        assert_eq!(queue.counts().unwrap().ready, 2);
        queue.enqueue(NewJob::new("ready at 7")).unwrap();
        clock.advance(Duration::from_secs(2));
        queue
            .enqueue_batch(vec![
                NewJob::new("due at 19").delay(Duration::from_secs(10)),
                NewJob::new("ready at 9"),
            ])
            .unwrap();
        assert_eq!(
            drain(&queue),
            [
                "due at 5",
                "due at 6",
                "ready at 7",
                "due at 8",
                "ready at 9"
            ],
            "{durability:?}"
        );
        clock.advance(Duration::from_secs(20));
        assert_eq!(drain(&queue), ["due at 17", "due at 19"]);
    }
}

// Issue 24 (delayed enqueue): an enqueue moved the jobs fallen due first
// only if its job was ready by the call's clock (`ready_at <= now`), but
// placed it by milliseconds, reading the clock again: a job due within
// the millisecond of the call (a delay under a millisecond, or the clock
// ticking between the two readings) went to its lane without the moves,
// ahead of jobs due before it. The placement now decides both. Pins the
// class: a job written to a lane, whatever its delay, runs after every job
// due before it, enqueued alone, or in a batch with caller ids.
#[test]
fn a_job_due_within_the_millisecond_runs_after_the_jobs_due_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, clock) = manual_queue(&dir.path().join("q"), Durability::Turbo);
    let micros = Duration::from_micros;
    queue
        .enqueue(NewJob::new("due at 1 ms").delay(micros(1_000)))
        .unwrap();
    clock.advance(micros(1_500));
    queue
        .enqueue(NewJob::new("due at 1.9 ms").delay(micros(400)))
        .unwrap();
    assert_eq!(drain(&queue), ["due at 1 ms", "due at 1.9 ms"]);
    queue
        .enqueue(NewJob::new("due at 3 ms").delay(micros(1_500)))
        .unwrap();
    clock.advance(micros(1_600));
    queue
        .enqueue_batch(vec![
            NewJob::new("due at 3.4 ms").id("a").delay(micros(300)),
            NewJob::new("due at 3.5 ms").id("b").delay(micros(400)),
        ])
        .unwrap();
    assert_eq!(
        drain(&queue),
        ["due at 3 ms", "due at 3.4 ms", "due at 3.5 ms"]
    );
}

// Issue 24 (memory of delayed jobs): each handle kept every scheduled
// job in its due index (27 to 137 bytes a job, rebuilt at each open). The
// index now holds the earliest 65,536 at most and reads the rest again
// from disk when it runs out: this pins that jobs past that horizon still
// fall due in due order, none lost or doubled, counted right before they
// move, across a reopen, with ready jobs enqueued in between.
#[test]
fn more_scheduled_jobs_than_the_index_holds_fall_due_in_due_order() {
    const JOBS: u64 = 150_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let (queue, clock) = manual_queue(&path, Durability::Turbo);
    // Due times in a scrambled order: job k is due at k seconds.
    let order = |i: u64| (i * 7919) % JOBS;
    for chunk in 0..JOBS / 10_000 {
        let jobs = (chunk * 10_000..(chunk + 1) * 10_000)
            .map(|i| {
                let k = order(i);
                NewJob::new(k.to_string()).delay(Duration::from_secs(1 + k))
            })
            .collect();
        queue.enqueue_batch(jobs).unwrap();
    }
    assert_eq!(queue.counts().unwrap().scheduled, JOBS);
    let mut next = 0;
    // The bodies must be the next due ones in due order, then `ready`.
    let check = |next: &mut u64, bodies: Vec<String>, ready: Option<&str>| {
        let mut bodies = bodies.into_iter();
        for body in bodies.by_ref() {
            if Some(body.as_str()) == ready {
                break;
            }
            assert_eq!(body, next.to_string(), "out of due order");
            *next += 1;
        }
        assert!(bodies.next().is_none(), "the ready job ran too early");
    };
    // Due in steps, the first inside the index, the next past it.
    let mut now = 0;
    for (step, until) in [(0, 1_000), (1, 100_000), (2, 120_000)] {
        clock.advance(Duration::from_secs(until + 1 - now));
        now = until + 1;
        assert_eq!(queue.counts().unwrap().ready, until + 1 - next);
        let ready = format!("ready {step}");
        queue.enqueue(NewJob::new(ready.clone())).unwrap();
        check(&mut next, drain(&queue), Some(&ready));
    }
    queue.close().unwrap();
    drop(queue);
    let (queue, clock) = manual_queue(&path, Durability::Turbo);
    clock.advance(Duration::from_secs(now + JOBS));
    assert_eq!(queue.counts().unwrap().ready, JOBS - next);
    check(&mut next, drain(&queue), None);
    assert_eq!(next, JOBS);
    assert_eq!(queue.counts().unwrap().scheduled, 0);
}

const QUEUE: &str = "DQUE_JOBS_MOVES_QUEUE";

/// The child: works alone (exclusive mode, Turbo) on a queue whose jobs
/// fall due as it goes, printing `A body` when an ack returned, until
/// killed.
fn mover_child() {
    let path = std::env::var(QUEUE).unwrap();
    let queue = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .open(&path)
        .unwrap();
    child::ready();
    let mut out = std::io::stdout().lock();
    loop {
        if let Some(lease) = queue.lease_timeout(Duration::from_millis(5)).unwrap() {
            let body = String::from_utf8(lease.body.clone()).unwrap();
            queue.ack(lease).unwrap();
            writeln!(out, "@@ A {body}").unwrap();
            out.flush().unwrap();
        }
    }
}

// Issue 24 (delayed jobs): a handle alone on its queue now moves due jobs
// without leasing their schedule records (it reads them, writes them to
// their lanes, and ends them after the lanes' sync). This pins that a
// kill -9 at any step of that leaves every job that was not acked in the
// queue (in the schedule, in its lane, or both).
#[test]
fn a_handle_alone_killed_while_moving_due_jobs_loses_none() {
    if child::run_as_child(mover_child) {
        return;
    }
    let _one_at_a_time = child::one_spawner_at_a_time();
    let rounds = child::kills(4);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let options = JobOptions::new().queue(Options::new().durability(Durability::Turbo));
    options.create(&path).unwrap().close().unwrap();
    let mut enqueued = Vec::new();
    let mut acked = BTreeMap::new();
    for round in 0..rounds {
        // Due over the child's run, priorities mixed: it moves as it goes.
        let queue = options.open(&path).unwrap();
        let jobs: Vec<NewJob> = (0..5_000)
            .map(|i| {
                let body = format!("r{round}j{i}");
                enqueued.push(body.clone());
                NewJob::new(body)
                    .priority((i % 3) as i32)
                    .delay(Duration::from_millis(1 + i % 300))
            })
            .collect();
        queue.enqueue_batch(jobs).unwrap();
        queue.close().unwrap();
        drop(queue);
        let lines = child::run_until_killed_once_ready(
            "a_handle_alone_killed_while_moving_due_jobs_loses_none",
            &[(QUEUE, path.display().to_string())],
            Duration::from_millis(200 + (round * 97) % 300),
        );
        let mut acks = 0;
        for line in lines {
            // (The harness's line "test NAME ... " may come first.)
            if let Some((_, body)) = line.split_once("@@ A ") {
                *acked.entry(body.to_owned()).or_insert(0) += 1;
                acks += 1;
            }
        }
        let queue = options.open(&path).unwrap();
        let mut found: BTreeMap<String, usize> = BTreeMap::new();
        for waiting in queue.waiting(usize::MAX).unwrap() {
            *found
                .entry(String::from_utf8(waiting.job.body).unwrap())
                .or_insert(0) += 1;
        }
        // An ack that returned as the kill came has no line: one at most.
        let lost: Vec<&String> = enqueued
            .iter()
            .filter(|b| !acked.contains_key(*b) && !found.contains_key(*b))
            .collect();
        assert!(
            lost.len() <= 1,
            "round {round} ({acks} acks): jobs lost: {lost:?}"
        );
        let lost: Vec<String> = lost.into_iter().cloned().collect();
        acked.extend(lost.into_iter().map(|body| (body, 1)));
        queue.close().unwrap();
    }
    assert!(!acked.is_empty(), "the child did no work");
}

// Issue 24 (delayed jobs): alone on its queue, a handle now moves a due job
// without leasing its schedule record, so a cancel (or a priority change)
// by id racing with the move could end the record after the move read it
// and before its copy reached the lane: the cancel returned Ok and the job
// ran anyway. This pins that a job whose cancel returned Ok never runs,
// and that every other job runs once, while threads cancel jobs by id as
// they fall due and others lease them.
#[test]
fn a_cancelled_job_never_runs_though_it_was_falling_due() {
    let rounds = child::kills(3);
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let queue = Arc::new(
            JobOptions::new()
                .queue(Options::new().durability(Durability::Turbo))
                .create(dir.path().join("q"))
                .unwrap(),
        );
        let mut ids = Vec::new();
        for i in 0..400u64 {
            let job = NewJob::new(format!("j{i}")).delay(Duration::from_millis(1 + i % 20));
            ids.push((queue.enqueue(job).unwrap().id().to_owned(), format!("j{i}")));
        }
        let cancelled = std::thread::scope(|scope| {
            let canceller = scope.spawn(|| {
                let mut cancelled = Vec::new();
                for (id, body) in ids.iter().rev().step_by(2) {
                    if queue.cancel(id).is_ok() {
                        cancelled.push(body.clone());
                    }
                }
                cancelled
            });
            let worker = scope.spawn(|| {
                let mut ran = Vec::new();
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                while std::time::Instant::now() < deadline {
                    match queue.lease_timeout(Duration::from_millis(50)).unwrap() {
                        Some(lease) => {
                            ran.push(String::from_utf8(lease.body.clone()).unwrap());
                            queue.ack(lease).unwrap();
                        }
                        None if queue.counts().unwrap().scheduled == 0 => break,
                        None => {}
                    }
                }
                ran
            });
            let cancelled = canceller.join().unwrap();
            let ran = worker.join().unwrap();
            let mut ran_count: BTreeMap<&str, usize> = BTreeMap::new();
            for body in &ran {
                *ran_count.entry(body.as_str()).or_insert(0) += 1;
            }
            for body in &cancelled {
                assert!(
                    !ran_count.contains_key(body.as_str()),
                    "round {round}: {body} was cancelled and ran"
                );
            }
            for (_, body) in &ids {
                let runs = ran_count.get(body.as_str()).copied().unwrap_or(0);
                let expected = usize::from(!cancelled.contains(body));
                assert_eq!(runs, expected, "round {round}: {body}");
            }
            cancelled
        });
        assert!(cancelled.len() <= 200);
    }
}

// Issue 24 (memory of delayed jobs): handles of one queue in one process
// (shared mode) now share one due index, and a handle notes its own
// scheduled records only once it has read the schedule. This pins that
// jobs scheduled through either handle, before or after the other read
// the schedule, fall due once each, in due order, whichever handle leases.
#[test]
fn handles_of_one_process_share_the_due_index_and_move_each_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let options = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo).shared(true))
        .clock(Arc::new(clock.clone()));
    let a = options.open_or_create(&path).unwrap();
    let b = options.open(&path).unwrap();
    // Job k is due at k + 1 seconds, through `a` for even k, `b` for odd.
    for k in 0..200u64 {
        let (through, at) = (if k % 2 == 0 { &a } else { &b }, k + 1);
        through
            .enqueue(NewJob::new(at.to_string()).delay(Duration::from_secs(at)))
            .unwrap();
        if k == 100 {
            // `b` reads the schedule halfway through.
            assert_eq!(b.counts().unwrap().scheduled, 101);
        }
    }
    let mut seen = Vec::new();
    for step in 1..=4u64 {
        clock.advance(Duration::from_secs(50));
        loop {
            let handle = if seen.len() % 3 == 0 { &a } else { &b };
            let Some(lease) = handle.lease().unwrap() else {
                break;
            };
            seen.push(String::from_utf8(lease.body.clone()).unwrap());
            handle.ack(lease).unwrap();
        }
        assert_eq!(seen.len() as u64, step * 50, "after {} s", step * 50);
    }
    let expected: Vec<String> = (1..=200u64).map(|at| at.to_string()).collect();
    assert_eq!(seen, expected);
    assert_eq!(a.counts().unwrap().scheduled + b.counts().unwrap().ready, 0);
}

// Review finding (bounded due index, exclusive mode): when the index runs out past
// its horizon, `Schedule::refill` reads every unsettled schedule record
// from disk, skipping those in the pending moves but not those another
// thread has taken (`Index::moving`) and not yet ended. Alone on its queue a
// move takes records without a lease, so the second thread reads and moves
// them again: one job lands twice in its lane.
#[test]
fn threads_moving_past_the_index_horizon_move_each_job_once() {
    const JOBS: usize = 70_000;
    const THREADS: usize = 4;
    let rounds: usize = std::env::var("DQUE_MOVE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    for durability in [Durability::Turbo, Durability::Safe] {
        for round in 0..rounds {
            let dir = tempfile::tempdir().unwrap();
            let (queue, clock) = manual_queue(&dir.path().join("q"), durability);
            for chunk in 0..JOBS / 10_000 {
                let jobs = (chunk * 10_000..(chunk + 1) * 10_000)
                    .map(|i| NewJob::new(i.to_string()).delay(Duration::from_secs(10)))
                    .collect();
                queue.enqueue_batch(jobs).unwrap();
            }
            clock.advance(Duration::from_secs(20));
            let barrier = Barrier::new(THREADS);
            std::thread::scope(|scope| {
                for _ in 0..THREADS {
                    scope.spawn(|| {
                        barrier.wait();
                        // An empty batch moves the jobs fallen due.
                        queue.enqueue_batch(Vec::new()).unwrap();
                    });
                }
            });
            queue.sync().unwrap();
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for waiting in queue.waiting(usize::MAX).unwrap() {
                *seen
                    .entry(String::from_utf8(waiting.job.body).unwrap())
                    .or_insert(0) += 1;
            }
            let twice: Vec<&String> = seen
                .iter()
                .filter(|(_, &n)| n > 1)
                .map(|(body, _)| body)
                .collect();
            assert!(
                twice.is_empty(),
                "{durability:?} round {round}: {} jobs twice, e.g. {:?}",
                twice.len(),
                &twice[..twice.len().min(5)]
            );
            assert_eq!(seen.len(), JOBS, "{durability:?} round {round}");
        }
    }
}

// Review finding F2 (close racing a deferred move, exclusive Turbo): `move_due` writes
// a batch to its lane, then notes its schedule records in the pending
// moves. A `close()` that runs between the two settles the moves it finds
// and closes the lanes; the records noted after it are never ended (the
// drop's settle fails on the closed lanes), so the reopened queue moves
// those jobs again: each runs twice, with no crash. Fixed by the moves'
// gate: a close waits for a step of a move under way, and a step that
// starts after the close sees it and fails with no effect.
#[test]
fn a_close_racing_a_move_leaves_no_job_twice() {
    const JOBS: usize = 20_000;
    let rounds: usize = std::env::var("DQUE_MOVE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let mut doubled_rounds = 0;
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let (queue, clock) = manual_queue(&path, Durability::Turbo);
        let jobs = (0..JOBS)
            .map(|i| NewJob::new(i.to_string()).delay(Duration::from_secs(10)))
            .collect();
        queue.enqueue_batch(jobs).unwrap();
        clock.advance(Duration::from_secs(20));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // Moves every job due (and fails once the queue is closed).
                let _ = queue.lease();
            });
            scope.spawn(|| {
                std::thread::sleep(Duration::from_micros((round as u64 * 397) % 3000));
                let _ = queue.close();
            });
        });
        drop(queue);
        let (queue, clock) = manual_queue(&path, Durability::Turbo);
        clock.advance(Duration::from_secs(20));
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for waiting in queue.waiting(usize::MAX).unwrap() {
            *seen
                .entry(String::from_utf8(waiting.job.body).unwrap())
                .or_insert(0) += 1;
        }
        // The one leased before the close may be counted once or not at all.
        assert!(seen.len() >= JOBS - 1, "round {round}: {} jobs", seen.len());
        let doubled = seen.values().filter(|&&n| n > 1).count();
        if doubled > 0 {
            eprintln!("round {round}: {doubled} jobs twice");
            doubled_rounds += 1;
        }
    }
    assert_eq!(
        doubled_rounds, 0,
        "{doubled_rounds} of {rounds} rounds left jobs twice"
    );
}
