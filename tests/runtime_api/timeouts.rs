//! The runtime's checks of per-job timeouts (issue 27): a job's own
//! timeout (`NewJob::timeout`, stored with the job) takes precedence over
//! its kind's, both ways. Each backend's runtime suite runs them through
//! [`runtime_timeout_checks!`].

use std::sync::Arc;
use std::time::Duration;

use dque::runtime::{new_job, KindOptions};

use super::{dead, new_queue, worker, Log, Stubborn};
use crate::jobs_api::Backend;

/// One `#[test]` per check of this file, for the suite's runner.
#[macro_export]
macro_rules! runtime_timeout_checks {
    (run = $runner:path) => {
        mod timeout_checks {
            use super::*;
            #[test]
            fn a_jobs_own_timeout_takes_precedence_over_its_kinds() {
                $runner(runtime_api::timeouts::a_jobs_own_timeout_takes_precedence_over_its_kinds);
            }
        }
    };
}

pub fn a_jobs_own_timeout_takes_precedence_over_its_kinds(backend: &dyn Backend) {
    let (queue, _) = new_queue(backend, "rt-own-timeout");
    // Its own 200 ms is shorter than its kind's 30 s: it times out.
    let short = new_job(&Stubborn { ms: 1_500 })
        .unwrap()
        .timeout(Duration::from_millis(200));
    // Its own 30 s is longer than its kind's: it runs to its end.
    let long = new_job(&Stubborn { ms: 600 })
        .unwrap()
        .timeout(Duration::from_secs(30));
    queue.enqueue(short).unwrap();
    queue.enqueue(long).unwrap();
    let log = Arc::new(Log::default());
    let summary = worker(&queue, &log)
        .register_with::<Stubborn>(
            KindOptions::new()
                .max_attempts(1)
                .timeout(Duration::from_millis(300)),
        )
        .concurrency(2)
        .run()
        .expect("run");
    assert_eq!(
        (summary.timed_out, summary.dead, summary.succeeded),
        (1, 1, 1),
        "{summary:?}"
    );
    let dead = dead(queue.as_ref());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].1, "timed out");
    assert!(
        log.lines().contains(&"stubborn 600 ended".to_owned()),
        "{:?}",
        log.lines()
    );
    // The record says why, on every backend.
    let stored = queue.dead(1).unwrap().remove(0).job;
    assert_eq!(stored.timeout(), Some(Duration::from_millis(200)));
    let info = queue.job_info(&stored.id).unwrap().expect("dead, kept");
    assert!(info.last_error.is_some_and(|e| e.contains("timed out")));
}
