//! Caller ids while jobs move, from a review of the id index (ids.rs)
//! with reproducers, kept as regression tests. Bugs pinned:
//! - a move (a priority change, a job falling due) let go of the ids' lock
//!   before it ended its old record; a worker that nacked the new copy with
//!   a delay in that gap saw two live records, took its own for a leftover
//!   of a crash and ended it, and the mover then ended the old one: the job
//!   was gone (4 of 6,000 rounds);
//! - `set_priority` whose ack of the old record failed returned the error
//!   but left the new copy: one id named two live jobs after a reopen;
//! - after a move a crash cut, the next `set_priority` ended the leftover
//!   it found and answered Ok without changing the live record.
//!
//! `DQUE_ROUNDS=1000` runs the races longer.

use std::time::Duration;

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, NewJob, Retry};
use dque::{Durability, Options};

fn options(shared: bool, mode: Durability) -> JobOptions {
    JobOptions::new().queue(
        Options::new()
            .shared(shared)
            .durability(mode)
            .segment_items(8)
            .max_attempts(u16::MAX)
            .visibility_timeout(Duration::from_secs(30)),
    )
}

fn job(id: &str) -> NewJob {
    NewJob::new(id.as_bytes().to_vec()).id(id)
}

fn plain() -> NewJob {
    NewJob::new(b"plain".to_vec())
}

/// A record settled by another handle, in a segment this handle has not
/// mapped: does `is_live` call it unsettled (and the id taken)?
#[test]
fn settled_elsewhere_in_unmapped_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a = options(true, Durability::Safe).create(&path).unwrap();
    let b = options(true, Durability::Safe).open(&path).unwrap();
    // A: plain jobs filling segments, then X, then more plain jobs.
    for _ in 0..20 {
        a.enqueue(plain()).unwrap();
    }
    assert!(a.enqueue(job("X")).unwrap().is_added());
    for _ in 0..40 {
        a.enqueue(plain()).unwrap();
    }
    // B cancels X (maps up to it), A never looked past its head.
    b.cancel("X").unwrap();
    let again = a.enqueue(job("X")).unwrap();
    assert!(again.is_added(), "X was cancelled, enqueue says {again:?}");
}

/// As above, X settled by a worker's ack in another handle, the head kept
/// back by a leased record.
#[test]
fn acked_elsewhere_in_unmapped_segment() {
    for mode in [Durability::Safe, Durability::Turbo] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let a = options(true, mode).create(&path).unwrap();
        let b = options(true, mode).open(&path).unwrap();
        for _ in 0..20 {
            a.enqueue(plain()).unwrap();
        }
        assert!(a.enqueue(job("X")).unwrap().is_added());
        for _ in 0..40 {
            a.enqueue(plain()).unwrap();
        }
        let first = b.lease().unwrap().unwrap();
        loop {
            let lease = b.lease().unwrap().unwrap();
            let x = lease.job.id == "X";
            b.ack(lease).unwrap();
            if x {
                break;
            }
        }
        let again = a.enqueue(job("X")).unwrap();
        assert!(again.is_added(), "X was acked, enqueue says {again:?}");
        b.ack(first).unwrap();
    }
}

fn rounds(default: u64) -> u64 {
    std::env::var("DQUE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `set_priority` drops the ids' lock before it acks the old record: a
/// worker that leased the new copy and nacks it with a delay in between
/// finds the old record live, takes its own as a leftover and acks it;
/// then the old one is acked: the job is gone.
#[test]
fn set_priority_racing_a_nack_loses_the_job() {
    for mode in [Durability::Turbo, Durability::Safe] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q = std::sync::Arc::new(options(false, mode).create(&path).unwrap());
        let n = rounds(300);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let worker = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut nacked = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(lease) = q.lease().unwrap() {
                        q.nack(lease, Retry::After(Duration::from_secs(3600)), "later")
                            .unwrap();
                        nacked += 1;
                    }
                }
                nacked
            })
        };
        // Spinners: a loaded machine, so a thread is preempted anywhere.
        let spinners: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_add(1);
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        for i in 0..n {
            let id = format!("job-{i}");
            q.enqueue(job(&id)).unwrap();
            let _ = q.set_priority(&id, 1);
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let nacked = worker.join().unwrap();
        for s in spinners {
            s.join().unwrap();
        }
        let mut seen = std::collections::BTreeMap::new();
        for w in q.waiting(usize::MAX).unwrap() {
            *seen.entry(w.job.id).or_insert(0) += 1;
        }
        let lost: Vec<_> = (0..n)
            .map(|i| format!("job-{i}"))
            .filter(|id| !seen.contains_key(id))
            .collect();
        let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
        eprintln!("{mode:?}: {n} rounds, {nacked} nacks, lost {lost:?}, twice {twice:?}");
        assert!(lost.is_empty() && twice.is_empty());
    }
}

/// `promote_due` drops the ids' lock before it acks the schedule records:
/// a worker that leased the lane copy and nacks it with a delay in between
/// takes its copy as a leftover; then the schedule record is acked.
#[test]
fn promote_racing_a_nack_loses_the_job() {
    for mode in [Durability::Turbo, Durability::Safe] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q = std::sync::Arc::new(options(false, mode).create(&path).unwrap());
        let n = rounds(300);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (q, stop) = (q.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut nacked = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if let Some(lease) = q.lease().unwrap() {
                            q.nack(lease, Retry::After(Duration::from_secs(3600)), "later")
                                .unwrap();
                            nacked += 1;
                        }
                    }
                    nacked
                })
            })
            .collect();
        let spinners: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_add(1);
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        for i in 0..n {
            let id = format!("job-{i}");
            q.enqueue(job(&id).delay(Duration::from_millis(1))).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let nacked: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        for s in spinners {
            s.join().unwrap();
        }
        let mut seen = std::collections::BTreeMap::new();
        for w in q.waiting(usize::MAX).unwrap() {
            *seen.entry(w.job.id).or_insert(0) += 1;
        }
        let lost: Vec<_> = (0..n)
            .map(|i| format!("job-{i}"))
            .filter(|id| !seen.contains_key(id))
            .collect();
        let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
        eprintln!("{mode:?}: {n} rounds, {nacked} nacks, lost {lost:?}, twice {twice:?}");
        assert!(lost.is_empty() && twice.is_empty());
    }
}

/// `set_priority` whose ack of the old record fails: the error comes back,
/// yet the job was copied to its new lane (the call had an effect) and,
/// once the old record's lease runs out, the id names two live records.
#[test]
fn set_priority_failing_its_ack_has_an_effect() {
    use dque::faults::{FaultOp, FaultPlan};
    // Find the write that is the ack: fail each write in turn.
    for nth in 1..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q = options(false, Durability::Safe).create(&path).unwrap();
        q.enqueue(job("X")).unwrap();
        q.enqueue(plain().priority(1)).unwrap(); // lane 1 exists
        let plan = FaultPlan::install(&path);
        plan.fail_nth(FaultOp::Write, nth, std::io::ErrorKind::Other);
        let result = q.set_priority("X", 1);
        drop(plan);
        let Err(e) = result else {
            break;
        };
        drop(q);
        let q = options(false, Durability::Safe).open(&path).unwrap();
        let xs: Vec<i32> = q
            .waiting(usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|w| w.job.id == "X")
            .map(|w| w.job.priority)
            .collect();
        eprintln!("write {nth} failed ({e}): X waits at priorities {xs:?}");
        assert_eq!(
            xs,
            vec![0],
            "set_priority failed with {e}, yet X is at {xs:?}"
        );
    }
}

/// Two shared handles in one process (each its own index and mutex; the
/// `flock`s on separate open file descriptions exclude each other), with
/// plain jobs appended meanwhile to the same lanes and the schedule: each
/// id is added once.
#[test]
fn two_shared_handles_in_one_process_add_each_id_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a = std::sync::Arc::new(options(true, Durability::Turbo).create(&path).unwrap());
    let b = std::sync::Arc::new(options(true, Durability::Turbo).open(&path).unwrap());
    let n = rounds(300) as usize;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let plain_writer = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut job = plain().priority((i % 3) as i32);
                if i % 5 == 0 {
                    job = job.delay(Duration::from_secs(3600));
                }
                b.enqueue(job).unwrap();
                i += 1;
            }
        })
    };
    let producers: Vec<_> = [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(k, q)| {
            std::thread::spawn(move || {
                let mut added = 0;
                for i in 0..n {
                    let i = if k % 2 == 0 { i } else { n - 1 - i };
                    let mut job = job(&format!("id-{i}")).priority((i % 3) as i32);
                    if i % 4 == 0 {
                        job = job.delay(Duration::from_secs(3600));
                    }
                    added += usize::from(q.enqueue(job).unwrap().is_added());
                }
                added
            })
        })
        .collect();
    let added: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    plain_writer.join().unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for w in a.waiting(usize::MAX).unwrap() {
        if w.job.id.starts_with("id-") {
            *seen.entry(w.job.id).or_insert(0) += 1;
        }
    }
    assert_eq!(added, n);
    assert_eq!(seen.len(), n);
    assert!(seen.values().all(|&c| c == 1));
}

/// Shared and exclusive handles cannot mix on one queue (an exclusive
/// handle's index is never refreshed from the write count).
#[test]
fn exclusive_and_shared_handles_do_not_mix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = options(true, Durability::Safe).create(&path).unwrap();
    assert!(options(false, Durability::Safe).open(&path).is_err());
    drop(shared);
    let alone = options(false, Durability::Safe).open(&path).unwrap();
    assert!(options(true, Durability::Safe).open(&path).is_err());
    assert!(options(false, Durability::Safe).open(&path).is_err());
    drop(alone);
}

mod child;

const CRASH_QUEUE: &str = "REVIEW_IDS_QUEUE";
const CRASH_STEP: &str = "REVIEW_IDS_STEP";

fn set_priority_killed_at_a_step() {
    use dque::faults::{FaultOp, FaultPlan};
    let path = std::path::PathBuf::from(std::env::var(CRASH_QUEUE).unwrap());
    let step: u64 = std::env::var(CRASH_STEP).unwrap().parse().unwrap();
    let q = options(true, Durability::Safe).open(&path).unwrap();
    let plan = FaultPlan::install(&path);
    plan.die_at_nth(FaultOp::Write, step);
    let _ = q.set_priority("X", 1);
    println!("done");
}

/// A move cut by a kill (the copy written, the old record not ended): the
/// next move of the job (here a priority change; a nack with a delay
/// alike) finds the other record live, takes its own source as the
/// leftover and ends it, and answers Ok: the change asked for is dropped
/// (X stays at priority 1, not 5).
#[test]
fn a_move_after_a_cut_move_is_dropped() {
    if child::run_as_child(set_priority_killed_at_a_step) {
        return;
    }
    let _one = child::one_spawner_at_a_time();
    let mut cut = 0;
    for step in 1..8 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        {
            let q = options(true, Durability::Safe).create(&path).unwrap();
            q.enqueue(job("X")).unwrap();
            q.enqueue(plain().priority(1)).unwrap();
        }
        let out = child::command("a_move_after_a_cut_move_is_dropped")
            .env(CRASH_QUEUE, &path)
            .env(CRASH_STEP, step.to_string())
            .stderr(std::process::Stdio::null())
            .output()
            .unwrap();
        let q = options(true, Durability::Safe).open(&path).unwrap();
        let xs = |q: &EmbeddedJobs| -> Vec<i32> {
            q.waiting(usize::MAX)
                .unwrap()
                .into_iter()
                .filter(|w| w.job.id == "X")
                .map(|w| w.job.priority)
                .collect()
        };
        let before = xs(&q);
        let finished = String::from_utf8_lossy(&out.stdout).contains("done");
        eprintln!("step {step}: finished {finished}, X at {before:?}");
        if finished {
            break;
        }
        if before.len() == 2 {
            cut += 1;
            let changed = q.set_priority("X", 5);
            let after = xs(&q);
            eprintln!("  set_priority(X, 5) -> {changed:?}; X at {after:?}");
            assert!(
                changed.is_err() || after.contains(&5),
                "set_priority answered Ok, yet X waits at {after:?}"
            );
        }
    }
    assert!(cut > 0, "no step cut the move");
}
