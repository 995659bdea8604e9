//! Job history on the embedded queue (issue 27) beyond the shared suite:
//! handles sharing a queue append their completed jobs to one day file
//! at once (each its own buffer and `O_APPEND` file), and every entry is
//! found whole; the setting is stored with the queue, so a handle opened
//! without it keeps what the queue says. Rounds: `DQUE_HISTORY_JOBS`.

use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{JobOptions, JobQueue, JobState, KeepCompleted, NewJob};
use dque::Options;

fn jobs_per_handle() -> usize {
    std::env::var("DQUE_HISTORY_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

#[test]
fn handles_sharing_a_queue_append_whole_entries_that_are_all_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = JobOptions::new().queue(Options::new().shared(true));
    let n = jobs_per_handle();
    let first = shared.create(&path).unwrap();
    for i in 0..2 * n {
        first
            .enqueue(NewJob::new(format!("body {i}")).id(format!("job-{i}")))
            .unwrap();
    }
    std::thread::scope(|scope| {
        for _ in 0..3 {
            let handle = shared.open(&path).unwrap();
            scope.spawn(move || {
                while let Some(lease) = handle.lease().unwrap() {
                    handle.ack(lease).unwrap();
                }
                handle.close().unwrap();
            });
        }
    });
    first.close().unwrap();
    let reader = shared.open(&path).unwrap();
    for i in 0..2 * n {
        let info = reader
            .job_info(&format!("job-{i}"))
            .unwrap()
            .unwrap_or_else(|| panic!("job-{i} kept"));
        assert_eq!(info.state, JobState::Completed);
        assert_eq!(info.job.body, format!("body {i}").as_bytes());
        assert_eq!(info.job.attempt, 1);
    }
}

#[test]
fn the_setting_is_stored_with_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let none = JobOptions::new()
        .keep_completed(KeepCompleted::NONE)
        .create(&path)
        .unwrap();
    none.close().unwrap();
    drop(none);
    // Opened without the setting: the stored one (none kept) holds.
    let plain: Arc<dyn JobQueue> = Arc::new(JobOptions::new().open(&path).unwrap());
    plain.enqueue(NewJob::new("a").id("a")).unwrap();
    plain.ack(plain.lease().unwrap().unwrap()).unwrap();
    assert!(plain.job_info("a").unwrap().is_none());
    plain.close().unwrap();
    drop(plain);
    // Set again: kept from then on, by every later handle.
    let keeping = JobOptions::new()
        .keep_completed(KeepCompleted::new(Duration::from_secs(60), 10))
        .open(&path)
        .unwrap();
    keeping.close().unwrap();
    drop(keeping);
    let later = JobOptions::new().open(&path).unwrap();
    later.enqueue(NewJob::new("b").id("b")).unwrap();
    later.ack(later.lease().unwrap().unwrap()).unwrap();
    assert_eq!(
        later.job_info("b").unwrap().map(|i| i.state),
        Some(JobState::Completed)
    );
}

// Bug pinned: a keep time longer than u64::MAX milliseconds (say
// `Duration::MAX`, "keep them for ever") was stored in jobs/history/keep
// as a number no later open could read: every open of the queue without
// its own setting failed with InvalidOption until the file was removed.
#[test]
fn a_keep_time_too_long_for_milliseconds_is_stored_readably() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    for for_time in [Duration::MAX, Duration::from_secs(u64::MAX / 10)] {
        let keep = KeepCompleted::new(for_time, 10);
        let first = JobOptions::new()
            .keep_completed(keep)
            .open_or_create(&path)
            .unwrap();
        first.enqueue(NewJob::new("x").id("k-1")).unwrap();
        let lease = first.lease().unwrap().expect("a job");
        first.ack(lease).unwrap();
        first.close().unwrap();
        let again = JobOptions::new().open(&path).expect("opened again");
        let info = again.job_info("k-1").unwrap().expect("kept");
        assert_eq!(info.state, JobState::Completed);
        again.close().unwrap();
    }
}

/// Bug pinned (issue 28): a completed job's history named the process
/// that ran it (`host:pid`) even when its handle leased under a worker
/// name, which PostgreSQL records instead.
#[test]
fn a_completed_job_names_the_worker_its_handle_leased_under() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = Options::new().shared(true);
    let named = JobOptions::new()
        .queue(shared)
        .worker("mailer-3")
        .create(&path)
        .unwrap();
    let unnamed = JobOptions::new().queue(shared).open(&path).unwrap();
    named.enqueue(NewJob::new("a").id("by-name")).unwrap();
    named.ack(named.lease().unwrap().unwrap()).unwrap();
    unnamed.enqueue(NewJob::new("b").id("by-process")).unwrap();
    unnamed.ack(unnamed.lease().unwrap().unwrap()).unwrap();
    // Each handle's history is read through it (another sees it once
    // written out).
    let info = named.job_info("by-name").unwrap().expect("kept");
    assert_eq!(info.state, JobState::Completed);
    assert_eq!(info.worker.as_deref(), Some("mailer-3"), "{info:?}");
    let info = unnamed.job_info("by-process").unwrap().expect("kept");
    let pid = format!(":{}", std::process::id());
    assert!(info.worker.as_deref().unwrap().ends_with(&pid), "{info:?}");
}
