//! The Jobs API suite (`tests/jobs_api/`) against PostgreSQL, on a real
//! throwaway server (`tests/pg/`), and what only this backend does.
//! Without PostgreSQL installed the tests say so and pass, except under
//! `CI=true`, where they fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dque::jobs::{JobQueue, PgOptions};

#[macro_use]
mod jobs_api;
mod child;
mod pg;
mod skip;
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

    /// Runs a check of the suite on the server, if there is one.
    fn on_the_server(check: fn(&dyn Backend)) {
        with_server(|backend| check(backend));
    }

    jobs_api_suite!(run = on_the_server);
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

/// The child's body for the exactly-once run: leases and acks until the
/// queue is empty, printing each job's body.
fn draining_child() {
    let url = std::env::var(CHILD_URL).unwrap();
    let queue = std::env::var(CHILD_QUEUE).unwrap();
    let jobs = PgOptions::new().connect(&url, &queue).unwrap();
    let mut out = std::io::stdout().lock();
    loop {
        let batch = jobs.lease_batch(5).unwrap();
        if batch.is_empty() {
            break;
        }
        for job in batch {
            let body = String::from_utf8(job.body.clone()).unwrap();
            jobs.ack(job).unwrap();
            std::io::Write::write_all(&mut out, format!("@@ A {body}\n").as_bytes()).unwrap();
        }
    }
}

// Eight worker processes, each on its own connection, lease and ack 2,000
// jobs of mixed priorities at once: every job is acked exactly once.
#[test]
fn worker_processes_ack_every_job_exactly_once() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    if child::run_as_child(draining_child) {
        return;
    }
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let producer = queue("concurrent", Duration::from_secs(60));
    let jobs: Vec<NewJob> = (0..2000)
        .map(|n| NewJob::new(format!("{n}")).priority(n % 5))
        .collect();
    producer.enqueue_batch(jobs).unwrap();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            child::command("worker_processes_ack_every_job_exactly_once")
                .env(CHILD_URL, server.url())
                .env(CHILD_QUEUE, producer.name())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut done = Vec::new();
    let mut busy = 0;
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        assert!(output.status.success(), "a worker failed: {output:?}");
        let acked: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once("@@ A ").map(|(_, b)| b.to_owned()))
            .collect();
        busy += usize::from(!acked.is_empty());
        done.extend(acked);
    }
    done.sort();
    let before = done.len();
    done.dedup();
    assert_eq!((before, done.len()), (2000, 2000), "each job once");
    assert!(busy >= 2, "the work was shared ({busy} workers acked any)");
    assert_eq!(producer.counts().unwrap(), Default::default());
}

const CHILD_QUEUE: &str = "DQUE_PG_QUEUE";
const CHILD_URL: &str = "DQUE_PG_URL";

/// The child's body: leases three jobs, says so, and waits to be killed.
fn leasing_child() {
    let url = std::env::var(CHILD_URL).unwrap();
    let queue = std::env::var(CHILD_QUEUE).unwrap();
    let jobs = PgOptions::new()
        .lease_time(std::time::Duration::from_millis(700))
        .max_attempts(10)
        .connect(&url, &queue)
        .unwrap();
    let held: Vec<_> = (0..3).map(|_| jobs.lease().unwrap().unwrap()).collect();
    println!("@@ LEASED {}", held.len());
    std::thread::sleep(std::time::Duration::from_secs(60));
}

// A worker process killed with SIGKILL while it holds leases: the jobs come
// back after the lease time to another worker, the attempt counted.
#[test]
fn leases_of_a_killed_worker_come_back_after_the_lease_time() {
    use dque::jobs::NewJob;
    use std::io::BufRead;
    use std::time::Duration;
    if child::run_as_child(leasing_child) {
        return;
    }
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let lease = Duration::from_millis(700);
    let producer = queue("killed", lease);
    producer
        .enqueue_batch((0..3).map(|n| NewJob::new(format!("{n}"))).collect())
        .unwrap();
    let mut worker = child::command("leases_of_a_killed_worker_come_back_after_the_lease_time")
        .env(CHILD_URL, server.url())
        .env(CHILD_QUEUE, producer.name())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = worker.stdout.take().unwrap();
    let leased = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("@@ LEASED 3"));
    assert!(leased, "the child leased its jobs");
    worker.kill().unwrap();
    worker.wait().unwrap();
    let other = same_queue(&producer, lease);
    assert!(other.lease().unwrap().is_none(), "held until their time");
    std::thread::sleep(Duration::from_millis(800));
    let again = other.lease_batch(3).unwrap();
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|job| job.attempt == 2), "{again:?}");
    for job in again {
        other.ack(job).unwrap();
    }
}

// A database whose schema a newer dque made is refused with a clear error,
// and nothing is changed.
#[test]
fn a_schema_of_a_newer_version_is_refused() {
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("newer_{}", std::process::id());
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.schema_version (version integer);
             INSERT INTO {schema}.schema_version VALUES ({});",
            dque::jobs::SCHEMA_VERSION + 1
        ))
        .unwrap();
    let refused = PgOptions::new().schema(&schema).connect(&server.url(), "q");
    let message = match refused {
        Err(dque::Error::Backend { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    assert!(message.contains("newer dque"), "{message}");
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "nothing was made");
}

// The server crashes (`pg_ctl stop -m immediate`) and comes back: every
// enqueue that returned is there, and the handle that was open works again
// on its next call (issue 23: it failed with "connection closed" for as
// long as it lived).
#[test]
fn an_immediate_restart_loses_nothing_committed_and_the_handle_goes_on() {
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
    producer
        .enqueue(NewJob::new("after the restart"))
        .expect("the handle connects again");
    let after = same_queue(&producer, lease);
    assert_eq!(after.counts().unwrap().ready, 102);
    assert!(!after
        .enqueue(NewJob::new("last").id("last"))
        .unwrap()
        .is_added());
}
