//! `job_info` of the embedded queue racing the job's own moves: a job
//! that exists is always found (never `None`, never an error, never in a
//! state it is not in), whether the moves are made by other threads of
//! the same handle or by another process on a shared queue. Rounds:
//! `DQUE_JOB_INFO_RACE_ROUNDS` (moves per check).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{EmbeddedJobs, JobOptions, JobQueue, JobState, NewJob, Retry};
use dque::{Durability, Options};

mod child;

fn rounds() -> u64 {
    std::env::var("DQUE_JOB_INFO_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

fn options(shared: bool) -> Options {
    // Small segments: the job's records are sealed, mapped and retired
    // as it moves.
    Options::new()
        .shared(shared)
        .durability(Durability::Turbo)
        .segment_items(4)
        .visibility_timeout(Duration::from_secs(3600))
        .max_attempts(u16::MAX)
}

fn open(path: &std::path::Path, shared: bool) -> EmbeddedJobs {
    JobOptions::new()
        .queue(options(shared))
        .open_or_create(path)
        .unwrap()
}

/// Asks `job_info` of `id` until `done`, checking the job is always
/// found in one of `states`; returns how many times it asked.
fn watch(queue: &EmbeddedJobs, id: &str, states: &[JobState], done: &AtomicBool) -> u64 {
    let mut asked = 0;
    while !done.load(Ordering::Acquire) {
        let info = queue
            .job_info(id)
            .unwrap_or_else(|e| panic!("job_info({id}) failed after {asked} calls: {e}"));
        let info = info.unwrap_or_else(|| panic!("job {id} exists; job_info said none ({asked})"));
        assert!(
            states.contains(&info.state),
            "{id}: {:?} after {asked}",
            info.state
        );
        assert_eq!(info.job.body, b"the mover", "{id}");
        asked += 1;
    }
    asked
}

/// The state of a job a priority change moves: ready, never leased (by
/// the change itself, while it moves).
const MOVING: &[JobState] = &[JobState::Ready];

/// Moves job `mover` `rounds` times: priority changes (each a new record
/// in another lane, the old one ended), with other jobs enqueued and
/// consumed around it so its segments are sealed and retired.
fn move_by_priority(queue: &EmbeddedJobs, rounds: u64) {
    for round in 0..rounds {
        queue.set_priority("mover", (round % 3) as i32 - 1).unwrap();
        if round % 4 == 0 {
            queue.enqueue(NewJob::new("filler").priority(-5)).unwrap();
            let lease = queue.lease().unwrap().expect("a filler");
            assert_ne!(lease.job.id, "mover");
            queue.ack(lease).unwrap();
        }
    }
}

#[test]
fn job_info_of_a_job_changing_priority_in_another_thread_always_finds_it() {
    // Bug: `job_info` of a job whose priority another thread changed said
    // it was leased (`waiting` too): the change leased the job's record
    // to move it before it took the ids' lock, and `job_info` read the
    // record after it let that lock go. A job changing lanes all the time
    // is always found, ready, never an error (no miss in 20 000 moves
    // either, before: the bounded lookups again held).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = Arc::new(open(&path, false));
    queue.enqueue(NewJob::new("the mover").id("mover")).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (queue, done) = (Arc::clone(&queue), Arc::clone(&done));
        std::thread::spawn(move || watch(&queue, "mover", MOVING, &done))
    };
    move_by_priority(&queue, rounds());
    done.store(true, Ordering::Release);
    assert!(watcher.join().unwrap() > 0);
}

#[test]
fn job_info_of_a_job_leased_and_retried_later_in_another_thread_always_finds_it() {
    // As above, for a job moved by its retries: a nack with a delay moves
    // it to the schedule, its falling due back to its lane. (Held.)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = Arc::new(open(&path, false));
    queue.enqueue(NewJob::new("the mover").id("mover")).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (queue, done) = (Arc::clone(&queue), Arc::clone(&done));
        let states = [JobState::Ready, JobState::Leased, JobState::Scheduled];
        std::thread::spawn(move || watch(&queue, "mover", &states, &done))
    };
    for round in 0..rounds() / 4 {
        let lease = loop {
            match queue.lease().unwrap() {
                Some(lease) => break lease,
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        };
        let retry = match round % 2 {
            0 => Retry::After(Duration::ZERO),
            _ => Retry::After(Duration::from_millis(1)),
        };
        queue.nack(lease, retry, "again").unwrap();
    }
    done.store(true, Ordering::Release);
    assert!(watcher.join().unwrap() > 0);
}

const QUEUE: &str = "DQUE_JOB_INFO_RACE_QUEUE";

#[test]
fn job_info_of_a_job_another_process_moves_always_finds_it() {
    // Bug as above, the moves made by another process on a shared queue,
    // whose segments it seals and retires meanwhile.
    if child::run_as_child(|| {
        let queue = open(std::path::Path::new(&std::env::var(QUEUE).unwrap()), true);
        child::ready();
        move_by_priority(&queue, rounds());
        queue.close().unwrap();
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = open(&path, true);
    queue.enqueue(NewJob::new("the mover").id("mover")).unwrap();
    let mut mover = {
        let _one = child::one_spawner_at_a_time();
        child::command("job_info_of_a_job_another_process_moves_always_finds_it")
            .env(QUEUE, &path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let done = AtomicBool::new(false);
    let asked = std::thread::scope(|s| {
        let watcher = s.spawn(|| watch(&queue, "mover", MOVING, &done));
        let status = mover.wait().unwrap();
        done.store(true, Ordering::Release);
        assert!(status.success(), "the moving process failed: {status}");
        watcher.join().unwrap()
    });
    assert!(asked > 0);
}

/// Twenty jobs `j0`…`j19` with caller ids in lane 0 of a shared queue at
/// `path`, four to a segment: most of them sealed between the head and
/// the tail.
fn twenty_jobs(path: &std::path::Path) -> EmbeddedJobs {
    let queue = open(path, true);
    for i in 0..20 {
        queue
            .enqueue(NewJob::new(format!("job {i}")).id(format!("j{i}")))
            .unwrap();
    }
    queue
}

/// What `reader`, whose index knew `j10` in lane 0, says of it once
/// `move_it` moved it to lane 1: found there.
fn reader_finds_the_moved_job(reader: &EmbeddedJobs, move_it: impl FnOnce()) {
    let before = reader.job_info("j10").unwrap().expect("j10 waits");
    assert_eq!((before.state, before.job.priority), (JobState::Ready, 0));
    move_it();
    let after = reader
        .job_info("j10")
        .unwrap()
        .expect("j10 waits in lane 1, but job_info says no such job");
    assert_eq!((after.state, after.job.priority), (JobState::Ready, 1));
    assert_eq!(after.job.body, b"job 10");
}

#[test]
fn job_info_finds_a_job_another_handle_moved_out_of_a_sealed_segment() {
    // Review of `job_info` reading one record (s5): a handle whose index
    // still holds a job's old record (in a sealed segment, ended by
    // another handle's move) must read the job's new record, not answer
    // "no such job" from the old one. (Held.)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let mover = twenty_jobs(&path);
    let reader = open(&path, true);
    reader_finds_the_moved_job(&reader, || mover.set_priority("j10", 1).unwrap());
}

#[test]
fn job_info_finds_a_job_another_process_moved_out_of_a_sealed_segment() {
    // As above, the move made by another process. (Held.)
    if child::run_as_child(|| {
        let queue = open(std::path::Path::new(&std::env::var(QUEUE).unwrap()), true);
        queue.set_priority("j10", 1).unwrap();
        queue.close().unwrap();
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    // Opened after the jobs were written: the reader maps its head and
    // tail, not the sealed segments between them.
    twenty_jobs(&path).close().unwrap();
    let reader = open(&path, true);
    reader_finds_the_moved_job(&reader, || {
        let status = {
            let _one = child::one_spawner_at_a_time();
            child::command("job_info_finds_a_job_another_process_moved_out_of_a_sealed_segment")
                .env(QUEUE, &path)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap()
        };
        assert!(status.success(), "the moving process failed: {status}");
    });
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn job_info_writes_nothing() {
    // Bug: `job_info` of a job no longer waiting wrote this handle's
    // kept completed jobs out to `jobs/history/` first (the history's
    // lookup flushed its buffer): a read that wrote, and could fail for a
    // write. Reads never write: `job_info` of a waiting, leased,
    // scheduled, completed (kept) and unknown job leaves every file as
    // it was.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = JobOptions::new()
        .queue(options(true))
        .keep_completed(dque::jobs::KeepCompleted::DEFAULT)
        .create(&path)
        .unwrap();
    for i in 0..6 {
        queue
            .enqueue(NewJob::new(format!("job {i}")).id(format!("j{i}")))
            .unwrap();
    }
    queue
        .enqueue(
            NewJob::new("later")
                .id("later")
                .delay(Duration::from_secs(60)),
        )
        .unwrap();
    let done = queue.lease().unwrap().unwrap();
    queue.ack(done).unwrap();
    let _held = queue.lease().unwrap().unwrap();
    let before = snapshot(&path);
    for id in ["j0", "j1", "j2", "j5", "later", "none", &"0".repeat(32)] {
        queue.job_info(id).unwrap();
    }
    // The listing of leases (who holds each, since when) reads the same
    // shared lease table and slots: a read too (review of dque.shm layout 2).
    assert_eq!(queue.leases(10).unwrap().len(), 1);
    assert_eq!(
        queue.job_info("j0").unwrap().unwrap().state,
        JobState::Completed
    );
    let after = snapshot(&path);
    for (file, bytes) in &after {
        assert!(
            before.get(file) == Some(bytes),
            "job_info wrote {}",
            file.display()
        );
    }
    assert_eq!(before.len(), after.len(), "job_info removed a file");
}
