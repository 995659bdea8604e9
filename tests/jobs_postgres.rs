//! The Jobs API suite (`tests/jobs_api/`) against PostgreSQL, on a real
//! throwaway server (`tests/pg/`), and what only this backend does.
//! Without PostgreSQL installed the tests say so and pass, except under
//! `CI=true`, where they fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dque::jobs::{JobQueue, PgOptions};

#[macro_use]
mod jobs_api;
mod pg;
use jobs_api::{Backend, Settings};
use pg::PgServer;

/// Queues on the test binary's server, their names unique to this value.
struct Postgres {
    prefix: String,
}

impl Postgres {
    fn new() -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        Postgres {
            prefix: format!(
                "t{}-{}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn options(settings: &Settings) -> PgOptions {
        PgOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn open(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let server = PgServer::get().expect("checked by the test");
        let queue = Self::options(settings)
            .connect(&server.url(), &format!("{}-{name}", self.prefix))
            .expect("connect");
        Arc::new(queue)
    }
}

impl Backend for Postgres {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }
}

/// Tests share the server; the one that restarts it has it alone.
static SERVER_USE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn sharing() -> std::sync::RwLockReadGuard<'static, ()> {
    SERVER_USE.read().unwrap_or_else(|e| e.into_inner())
}

/// Runs `check` if a server is there (else the skip line was printed).
fn with_server(check: impl FnOnce(&Postgres)) {
    let _sharing = sharing();
    if PgServer::get().is_some() {
        check(&Postgres::new());
    }
}

mod suite {
    use super::*;

    macro_rules! pg_suite {
        ($($check:ident),* $(,)?) => {
            $(
                #[test]
                fn $check() {
                    with_server(|backend| jobs_api::$check(backend));
                }
            )*
        };
    }

    pg_suite!(
        smaller_priority_first_and_fifo_within,
        scheduled_jobs_wait_for_their_time_in_due_order,
        a_due_job_keeps_its_place_among_equal_priorities,
        headers_and_bodies_come_back_as_given,
        bad_ids_and_headers_are_refused_and_add_nothing,
        a_caller_id_is_not_enqueued_twice_while_waiting_or_leased,
        nack_backs_off_then_dead_letters_after_the_last_attempt,
        nack_without_delay_retries_in_place,
        release_does_not_count_an_attempt,
        fail_dead_letters_at_once_and_requeue_starts_over,
        priority_of_a_waiting_job_can_change,
        cancel_removes_a_waiting_job_only,
        waiting_lists_ready_then_scheduled,
        counts_and_statistics_follow_the_jobs,
        a_lease_is_settled_only_by_its_queue,
        jobs_survive_a_restart_in_order,
        batches_keep_order_and_groups,
        queue_sets_lease_in_order_or_round_robin,
        a_blocked_lease_wakes_for_an_enqueue,
        a_blocked_lease_wakes_when_a_job_falls_due,
        a_batch_lease_takes_jobs_in_lease_order,
    );
}

/// A queue of its own on the test server, with `lease_time`.
fn queue(name: &str, lease_time: std::time::Duration) -> dque::jobs::PgJobs {
    let server = PgServer::get().expect("checked by the caller");
    let unique = format!("{}-{name}", Postgres::new().prefix);
    PgOptions::new()
        .lease_time(lease_time)
        .max_attempts(10)
        .connect(&server.url(), &unique)
        .expect("connect")
}

/// The same queue again, on a new connection.
fn same_queue(of: &dque::jobs::PgJobs, lease_time: std::time::Duration) -> dque::jobs::PgJobs {
    let server = PgServer::get().expect("checked by the caller");
    PgOptions::new()
        .lease_time(lease_time)
        .max_attempts(10)
        .connect(&server.url(), of.name())
        .expect("connect")
}

// Eight workers, each on its own connection, lease and ack 2,000 jobs of
// mixed priorities at once: every job is acked exactly once.
#[test]
fn concurrent_workers_ack_every_job_exactly_once() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    let _sharing = sharing();
    if PgServer::get().is_none() {
        return;
    }
    let lease = Duration::from_secs(60);
    let producer = queue("concurrent", lease);
    let jobs: Vec<NewJob> = (0..2000)
        .map(|n| NewJob::new(format!("{n}")).priority(n % 5))
        .collect();
    producer.enqueue_batch(jobs).unwrap();
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let worker = same_queue(&producer, lease);
            let done = &done;
            scope.spawn(move || {
                while let Some(job) = worker.lease().unwrap() {
                    let body = String::from_utf8(job.body.clone()).unwrap();
                    worker.ack(job).unwrap();
                    done.lock().unwrap().push(body);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort();
    let before = done.len();
    done.dedup();
    assert_eq!((before, done.len()), (2000, 2000), "each job once");
    assert_eq!(producer.counts().unwrap(), Default::default());
}

// A worker that dies holding leases (its connection gone, no ack): the jobs
// come back after the lease time to another worker, the attempt counted.
#[test]
fn leases_of_a_vanished_worker_come_back_after_the_lease_time() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    let _sharing = sharing();
    if PgServer::get().is_none() {
        return;
    }
    let lease = Duration::from_millis(500);
    let producer = queue("vanished", lease);
    producer
        .enqueue_batch((0..3).map(|n| NewJob::new(format!("{n}"))).collect())
        .unwrap();
    {
        let doomed = same_queue(&producer, lease);
        let held: Vec<_> = (0..3).map(|_| doomed.lease().unwrap().unwrap()).collect();
        assert_eq!(held.len(), 3);
        // As a process killed with SIGKILL: no close, no hand-back.
        std::mem::forget(held);
        std::mem::forget(doomed);
    }
    let other = same_queue(&producer, lease);
    assert!(other.lease().unwrap().is_none(), "held until their time");
    std::thread::sleep(Duration::from_millis(600));
    let again: Vec<_> = (0..3)
        .map(|_| other.lease().unwrap().expect("back"))
        .collect();
    assert!(again.iter().all(|job| job.attempt == 2), "{again:?}");
    for job in again {
        other.ack(job).unwrap();
    }
}

// The server crashes (`pg_ctl stop -m immediate`) and comes back: every
// enqueue that returned is there; a handle gets a clear error while the
// server is down.
#[test]
fn an_immediate_restart_loses_nothing_committed() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    let _alone = SERVER_USE.write().unwrap_or_else(|e| e.into_inner());
    let Some(server) = PgServer::get() else {
        return;
    };
    let lease = Duration::from_secs(60);
    let producer = queue("restart", lease);
    producer
        .enqueue_batch((0..100).map(|n| NewJob::new(format!("{n}"))).collect())
        .unwrap();
    producer.enqueue(NewJob::new("last").id("last")).unwrap();
    server.restart_immediate();
    let broken = producer.enqueue(NewJob::new("on a dead connection"));
    let backend = matches!(broken, Err(dque::Error::Backend { .. }));
    assert!(backend, "{broken:?}");
    let after = same_queue(&producer, lease);
    assert_eq!(after.counts().unwrap().ready, 101);
    assert!(!after
        .enqueue(NewJob::new("last").id("last"))
        .unwrap()
        .is_added());
}
