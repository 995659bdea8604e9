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
        let options = match settings.keep_completed {
            Some(keep) => JobOptions::new().keep_completed(keep),
            None => JobOptions::new(),
        };
        options
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

fn shared_options() -> JobOptions {
    JobOptions::new().queue(Options::new().shared(true))
}

// Found in review: one caller id was added several times when producers
// claimed it at once (a claim file was created empty and filled after, so
// a racing reader took it for a dead claim; and two takers of a stale file
// removed each other's fresh claims). 4 producers on their own handles,
// with and without a stale file for the id, in many rounds: once each.
#[test]
fn concurrent_producers_add_a_caller_id_once() {
    use dque::jobs::NewJob;
    use std::sync::Barrier;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    shared_options().create(&path).unwrap().close().unwrap();
    let handles: Vec<Arc<dque::jobs::EmbeddedJobs>> = (0..4)
        .map(|_| Arc::new(shared_options().open(&path).unwrap()))
        .collect();
    let ids_dir = path.join("jobs").join("ids");
    for round in 0..150 {
        let id = format!("order-{round}");
        if round % 2 == 1 {
            // A pointer left behind by a crash: it names no live record.
            let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
            std::fs::write(ids_dir.join(hex), "lane 0 999999999\n").unwrap();
        }
        let barrier = Arc::new(Barrier::new(handles.len()));
        let added: usize = std::thread::scope(|scope| {
            let runs: Vec<_> = handles
                .iter()
                .map(|queue| {
                    let (barrier, id) = (Arc::clone(&barrier), id.clone());
                    scope.spawn(move || {
                        barrier.wait();
                        usize::from(queue.enqueue(NewJob::new("x").id(id)).unwrap().is_added())
                    })
                })
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).sum()
        });
        assert_eq!(added, 1, "round {round}: id {id} added {added} times");
    }
    assert_eq!(handles[0].counts().unwrap().ready, 150);
}

// Found in review: a requeue_dead that failed (a full queue) kept its
// claim on the job's id, and every later enqueue of that id said it was
// queued already, for as long as the process lived.
#[test]
fn a_failed_requeue_leaves_the_id_free() {
    use dque::jobs::NewJob;
    let dir = tempfile::tempdir().unwrap();
    let queue = JobOptions::new()
        .queue(Options::new().max_items(1))
        .create(dir.path().join("q"))
        .unwrap();
    queue.enqueue(NewJob::new("x").id("x")).unwrap();
    let lease = queue.lease().unwrap().unwrap();
    queue.fail(lease, "boom").unwrap();
    queue.enqueue(NewJob::new("filler")).unwrap();
    let full = queue.requeue_dead("x");
    let is_full = matches!(full, Err(dque::Error::Full { .. }));
    assert!(is_full, "{full:?}");
    let lease = queue.lease().unwrap().unwrap();
    queue.ack(lease).unwrap();
    assert!(queue.enqueue(NewJob::new("x2").id("x")).unwrap().is_added());
}

// Found in review: a handle saw the lanes other processes made only when
// the lanes directory's mtime moved; a lane made in the same clock tick as
// its last listing stayed invisible (its jobs never leased by it, its ids
// accepted again). Simulated by setting the mtime back.
#[test]
fn a_lane_made_in_the_tick_of_the_last_listing_is_seen() {
    use dque::jobs::NewJob;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let producer = shared_options().create(&path).unwrap();
    let worker = shared_options().open(&path).unwrap();
    producer.enqueue(NewJob::new("one").priority(1)).unwrap();
    let lease = worker.lease().unwrap().expect("one");
    worker.ack(lease).unwrap();
    let lanes = path.join("jobs").join("lanes");
    let listed = std::fs::metadata(&lanes).unwrap().modified().unwrap();
    producer
        .enqueue(NewJob::new("two").priority(2).id("two"))
        .unwrap();
    std::fs::File::open(&lanes)
        .unwrap()
        .set_modified(listed)
        .unwrap();
    let again = worker.enqueue(NewJob::new("two").id("two")).unwrap();
    assert!(
        !again.is_added(),
        "the id is queued in a lane this handle had not seen"
    );
    let lease = worker
        .lease_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    assert_eq!(lease.map(|l| l.job.body), Some(b"two".to_vec()));
}

// Found in review: every priority is a lane kept open by every handle, and
// a few hundred exhausted the file descriptors, after which no worker
// could lease. The number of lanes is capped, with a clear error.
#[test]
fn priorities_beyond_the_lane_limit_are_refused_and_add_nothing() {
    use dque::jobs::{NewJob, MAX_LANES};
    let dir = tempfile::tempdir().unwrap();
    let queue = JobOptions::new()
        .queue(Options::new().durability(dque::Durability::Turbo))
        .create(dir.path().join("q"))
        .unwrap();
    for priority in 0..MAX_LANES as i32 {
        queue.enqueue(NewJob::new("x").priority(priority)).unwrap();
    }
    let refused = queue.enqueue(NewJob::new("y").priority(-1));
    let invalid = matches!(refused, Err(dque::Error::InvalidJob { .. }));
    assert!(invalid, "{refused:?}");
    assert_eq!(queue.counts().unwrap().ready, MAX_LANES as u64);
    queue.enqueue(NewJob::new("z").priority(7)).unwrap();
}
