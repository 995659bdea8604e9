//! Reviewer's reproducer for `dque work` on a queue whose stored lease
//! time is shorter than the default.

use std::path::Path;
use std::time::Duration;

use dque::jobs::{JobOptions, JobQueue, NewJob};
use dque::Options;

mod dque_cmd;
use dque_cmd::dque;

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

// Review (`dque work` on the runtime's rules): it touches a running job's
// lease every `touch_interval(DEFAULT_LEASE_TIME)` (10 s; 5 s before this
// session), "the queue is opened with the default lease time" — but an
// embedded queue keeps the lease time it was made with
// (`Options::visibility_timeout`, stored), so a command that runs longer
// than that loses its lease and a second thread runs the job again.
#[test]

fn work_touches_within_the_queues_stored_lease_time() {
    let root = tempfile::tempdir().unwrap();
    let q = root.path().join("q");
    let queue = JobOptions::new()
        .queue(Options::new().visibility_timeout(Duration::from_secs(1)))
        .create(&q)
        .unwrap();
    queue.enqueue(NewJob::new("once")).unwrap();
    queue.close().unwrap();
    drop(queue);
    let runs = root.path().join("runs");
    let script = format!("echo run >> '{}'; sleep 3", runs.display());
    let out = dque(&[
        "work",
        s(&q),
        "--jobs",
        "2",
        "--until-empty",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let lines = std::fs::read_to_string(&runs).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        lines.lines().count(),
        1,
        "the job ran {} times; dque work: {:?}, stderr: {stderr}",
        lines.lines().count(),
        out.status
    );
    assert!(out.status.success(), "{:?}, stderr: {stderr}", out.status);
}
