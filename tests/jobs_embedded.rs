//! The Jobs API suite (`tests/jobs_api/`) against the embedded backend,
//! in exclusive and in shared mode.

use std::path::PathBuf;
use std::sync::Arc;

use dque::jobs::{JobOptions, JobQueue};
use dque::Options;

#[macro_use]
mod jobs_api;
use jobs_api::{Backend, Settings};

/// Queues in a temporary directory, one subdirectory per name.
struct Embedded {
    dir: tempfile::TempDir,
    shared: bool,
}

impl Embedded {
    fn new(shared: bool) -> Self {
        Embedded {
            dir: tempfile::tempdir().expect("temp dir"),
            shared,
        }
    }

    fn options(&self, settings: &Settings) -> JobOptions {
        JobOptions::new()
            .queue(
                Options::new()
                    .shared(self.shared)
                    .visibility_timeout(settings.lease_time)
                    .max_attempts(settings.max_attempts),
            )
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Backend for Embedded {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(
            self.options(settings)
                .create(self.path(name))
                .expect("create"),
        )
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(self.options(settings).open(self.path(name)).expect("open"))
    }
}

mod exclusive {
    use super::*;
    jobs_api_suite!(Embedded::new(false));
}

mod shared {
    use super::*;
    jobs_api_suite!(Embedded::new(true));
}

// Found by tests/jobs_kill9.rs: a process killed while making a priority
// lane left its directory without a config, and every later open of the
// queue failed with NotAQueue. Lanes are now made under a temporary name
// and renamed; a temporary directory whose maker died is removed.
#[test]
fn a_lane_left_half_made_by_a_crash_does_not_wedge_the_queue() {
    use dque::jobs::NewJob;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = JobOptions::new().create(&path).unwrap();
    let lanes = path.join("jobs").join("lanes");
    // u32::MAX is never a live pid; this process is.
    let dead = lanes.join(format!(".+0000000007.{}.1.making", u32::MAX));
    let alive = lanes.join(format!(".+0000000008.{}.1.making", std::process::id()));
    for temp in [&dead, &alive] {
        std::fs::create_dir_all(temp).unwrap();
        std::fs::write(temp.join("dque.lock"), b"").unwrap();
    }
    queue.enqueue(NewJob::new("seven").priority(7)).unwrap();
    queue.enqueue(NewJob::new("zero")).unwrap();
    let lease = queue.lease().unwrap().expect("a job");
    assert_eq!(lease.body, b"zero");
    queue.ack(lease).unwrap();
    assert!(!dead.exists(), "the dead maker's directory is removed");
    assert!(alive.exists(), "a live maker's directory is left alone");
    queue.close().unwrap();
    let reopened = JobOptions::new().open(&path).unwrap();
    assert_eq!(reopened.lease().unwrap().expect("a job").body, b"seven");
}
