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
mod pg_counts;
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
        let options = match settings.keep_completed {
            Some(keep) => PgOptions::new().keep_completed(keep),
            None => PgOptions::new(),
        };
        options
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

/// The error of connecting with `url` to queue `queue`.
fn refusal(url: &str, options: PgOptions, queue: &str) -> dque::Error {
    match options.connect(url, queue) {
        Ok(opened) => panic!("{opened:?} opened"),
        Err(e) => e,
    }
}

// Issue 24 (seventh session): an enqueue of jobs without caller ids now
// sends its notification from the count's update (`RETURNING pg_notify`)
// instead of a CTE of its own. Workers poll as well, so no wake-up test
// would notice a lost notification: this listens for it. Every way a job
// is added (with and without caller ids, headers, a uniqueness period,
// one or a batch, in the caller's transaction) notifies the channel with
// the queue's name, once the jobs are committed.
#[test]
fn every_enqueue_notifies_workers_with_the_queues_name() {
    use dque::jobs::NewJob;
    use postgres::fallible_iterator::FallibleIterator;
    use std::time::Duration;
    let Some(server) = PgServer::get() else {
        return;
    };
    let _sharing = sharing();
    let q = queue("notified", Duration::from_secs(30));
    let mut listener = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    listener.batch_execute("LISTEN dque_jobs").unwrap();
    // Whether `add` made the server notify `q`'s name (within 5 s; any
    // notification left from before is dropped first).
    let mut heard = |add: &dyn Fn(&dque::jobs::PgJobs)| {
        let mut notes = listener.notifications();
        while notes.iter().next().unwrap().is_some() {}
        add(&q);
        let mut wait = notes.timeout_iter(Duration::from_secs(5));
        while let Some(note) = wait.next().unwrap() {
            if note.payload() == q.name() {
                return true;
            }
        }
        false
    };
    type Add = Box<dyn Fn(&dque::jobs::PgJobs)>;
    let adds: Vec<(&str, Add)> = vec![
        (
            "one job",
            Box::new(|q| drop(q.enqueue(NewJob::new("a")).unwrap())),
        ),
        (
            "one job with headers",
            Box::new(|q| drop(q.enqueue(NewJob::new("b").header("h", "v")).unwrap())),
        ),
        (
            "a batch",
            Box::new(|q| {
                drop(
                    q.enqueue_batch((0..100).map(|i| NewJob::new(format!("c{i}"))).collect())
                        .unwrap(),
                )
            }),
        ),
        (
            "a batch, some jobs with headers",
            Box::new(|q| {
                drop(
                    q.enqueue_batch(vec![NewJob::new("d0"), NewJob::new("d1").header("h", "v")])
                        .unwrap(),
                )
            }),
        ),
        (
            "a caller id",
            Box::new(|q| drop(q.enqueue(NewJob::new("e").id("notified-e")).unwrap())),
        ),
        (
            "a batch with caller ids",
            Box::new(|q| {
                drop(
                    q.enqueue_batch(vec![NewJob::new("f0").id("notified-f"), NewJob::new("f1")])
                        .unwrap(),
                )
            }),
        ),
        (
            "a uniqueness period",
            Box::new(|q| {
                drop(
                    q.enqueue(
                        NewJob::new("g")
                            .id("notified-g")
                            .unique_for(Duration::from_secs(60)),
                    )
                    .unwrap(),
                )
            }),
        ),
        (
            "the caller's transaction",
            Box::new(|q| {
                let server = PgServer::get().unwrap();
                let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
                let mut tx = client.transaction().unwrap();
                drop(q.enqueue_in(&mut tx, NewJob::new("h")).unwrap());
                tx.commit().unwrap();
            }),
        ),
    ];
    for (what, add) in &adds {
        assert!(heard(add.as_ref()), "{what}: no notification");
    }
    assert_eq!(q.counts().unwrap().ready, 109);
}

// Issue 23, item 5: every server error printed "PostgreSQL: db error; check
// that the server runs and the address is right" (the driver's text without
// the server's). Each refusal a user meets now names its SQLSTATE, the
// server's message and what to do, and the advice about the server and the
// address is given only where the server could not be reached.
#[test]
fn a_refusing_server_says_why_with_its_sqlstate() {
    use pg::{PASSWORD, PASSWORD_USER};
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let weak = format!("weak_{}", std::process::id());
    let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("CREATE ROLE {weak} LOGIN"))
        .unwrap();
    let cases = [
        (
            server.url_as(PASSWORD_USER, Some("wrong"), "postgres"),
            "28P01",
            "password authentication failed",
            "check the user and password",
        ),
        (
            server.url_as("dque", None, "no_such_database"),
            "3D000",
            "database \"no_such_database\" does not exist",
            "create the database",
        ),
        (
            server.url_as("no_such_role", None, "postgres"),
            "28000",
            "role \"no_such_role\" does not exist",
            "check the user",
        ),
        (
            server.url_as(&weak, None, "postgres"),
            "42501",
            "permission denied",
            "grant the user",
        ),
    ];
    for (url, code, said, advice) in cases {
        let schema = format!("refused_{}", std::process::id());
        let error = refusal(&url, PgOptions::new().schema(schema), "q");
        let text = error.to_string();
        let dque::Error::ServerRefused { code: found, .. } = &error else {
            panic!("{code}: not refused by the server: {error:?}");
        };
        assert!(found.ends_with(code), "{code}: {error:?}");
        assert!(text.contains(code) && text.contains(said), "{text}");
        assert!(text.contains(advice), "{text}");
        assert!(!text.contains("db error"), "{text}");
        assert!(!text.contains("the server runs"), "{text}");
    }
    // The right password opens the queue.
    let url = server.url_as(PASSWORD_USER, Some(PASSWORD), "postgres");
    PgOptions::new()
        .schema(format!("pw_{}", std::process::id()))
        .connect(&url, "q")
        .expect("the right password");
    // No server at the address: the advice about the server and address.
    let nowhere = "host=/nonexistent/dque-socket user=dque dbname=postgres";
    let text = refusal(nowhere, PgOptions::new(), "q").to_string();
    assert!(
        text.contains("the server runs and the address is right"),
        "{text}"
    );
    assert!(text.contains("No such file or directory"), "{text}");
}

// Issue 23, item 5: a queue name of 8,000 bytes or more could never be
// enqueued (it is the `pg_notify` payload: "db error"), and an empty one
// was taken. Every name that breaks the one rule is refused before
// anything is written: here, not even the schema is made.
#[test]
fn a_queue_name_that_breaks_the_rule_is_refused_before_anything_is_written() {
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("names_{}", std::process::id());
    let long = "n".repeat(dque::jobs::MAX_QUEUE_NAME_BYTES + 1);
    let payload = "n".repeat(8_000);
    for name in ["", "tab\there", "nul\0", long.as_str(), payload.as_str()] {
        let error = refusal(&server.url(), PgOptions::new().schema(&schema), name);
        let dque::Error::InvalidJob { reason } = &error else {
            panic!(
                "{:?}: not refused as invalid: {error:?}",
                &name[..name.len().min(20)]
            );
        };
        assert!(reason.contains("queue name"), "{reason}");
    }
    let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    let schemas: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .unwrap()
        .get(0);
    assert_eq!(schemas, 0, "nothing was written");
    // The longest name the rule takes works end to end (NOTIFY included).
    let longest = "n".repeat(dque::jobs::MAX_QUEUE_NAME_BYTES);
    let jobs = PgOptions::new()
        .schema(&schema)
        .connect(&server.url(), &longest)
        .unwrap();
    jobs.enqueue(dque::jobs::NewJob::new("x")).unwrap();
    let lease = jobs.lease().unwrap().unwrap();
    jobs.ack(lease).unwrap();
}

// Issue 23, item 5: statistics were kept in memory and merged once a
// second, so a worker that died lost what it had not merged ("ran 4,587
// for 5,000 completions"). Each is now written by the statement of the
// event it counts: a handle that vanishes without closing (as a killed
// worker's) loses none, and a read counts each once.
#[test]
fn statistics_of_a_handle_that_never_closed_are_all_counted() {
    use dque::jobs::{NewJob, Retry};
    use std::time::Duration;
    let _sharing = sharing();
    if PgServer::get().is_none() {
        return;
    }
    let worker = queue("stats-kept", Duration::from_secs(60));
    worker
        .enqueue_batch((0..30).map(|n| NewJob::new(format!("{n}"))).collect())
        .unwrap();
    let (mut acked, mut retried, mut failed, mut firsts) = (0, 0, 0, 0);
    for n in 0..30 {
        let lease = worker.lease().unwrap().unwrap();
        firsts += u64::from(lease.attempt == 1);
        match n % 5 {
            0 => {
                worker
                    .nack(lease, Retry::After(Duration::ZERO), "again")
                    .unwrap();
                retried += 1;
            }
            1 => {
                worker.fail(lease, "broken: for good").unwrap();
                failed += 1;
            }
            _ => {
                worker.ack(lease).unwrap();
                acked += 1;
            }
        }
    }
    let reader = same_queue(&worker, Duration::from_secs(60));
    // Gone without a close: nothing of it runs again.
    std::mem::forget(worker);
    let check = |stats: dque::jobs::QueueStats, acked: u64, firsts: u64| {
        let sum = |f: &dyn Fn(&dque::jobs::DayStats) -> u64| stats.days.iter().map(f).sum::<u64>();
        assert_eq!(sum(&|d| d.run.count), acked);
        assert_eq!(sum(&|d| d.retries), retried);
        assert_eq!(sum(&|d| d.failed()), failed);
        assert_eq!(
            sum(&|d| d.wait.count),
            firsts,
            "each job's first lease, once"
        );
    };
    check(reader.stats().unwrap(), acked, firsts);
    // Merged into the daily rows by another handle: still each once.
    std::thread::sleep(Duration::from_millis(1_100));
    let lease = reader.lease().unwrap().unwrap();
    firsts += u64::from(lease.attempt == 1);
    reader.ack(lease).unwrap();
    acked += 1;
    check(reader.stats().unwrap(), acked, firsts);
    reader.close().unwrap();
    check(
        same_queue(&reader, Duration::from_secs(60))
            .stats()
            .unwrap(),
        acked,
        firsts,
    );
}

// Issue 23, item 5: after `pg_ctl restart` every call of a handle failed
// with "connection closed" for as long as it lived. Each kind of call, made
// first after a restart, now works on a new connection.
#[test]
fn every_call_works_again_after_a_server_restart() {
    use dque::jobs::{NewJob, Retry};
    use std::time::Duration;
    let _alone = SERVER_USE.write().unwrap_or_else(|e| e.into_inner());
    let Some(server) = PgServer::get() else {
        return;
    };
    let jobs = queue("restarts", Duration::from_secs(60));
    jobs.enqueue(NewJob::new("a")).unwrap();
    type Call = fn(&dque::jobs::PgJobs);
    let firsts: [(&str, Call); 6] = [
        ("enqueue", |q| {
            q.enqueue(NewJob::new("b")).unwrap();
        }),
        ("counts", |q| {
            q.counts().unwrap();
        }),
        ("stats", |q| {
            q.stats().unwrap();
        }),
        ("lease", |q| {
            let lease = q.lease().unwrap().unwrap();
            q.release(lease).unwrap();
        }),
        ("waiting", |q| {
            q.waiting(10).unwrap();
        }),
        ("blocking lease", |q| {
            let lease = q.lease_timeout(Duration::from_secs(1)).unwrap().unwrap();
            q.nack(lease, Retry::After(Duration::ZERO), "again")
                .unwrap();
        }),
    ];
    for (name, first) in firsts {
        server.restart();
        first(&jobs);
        // And the handle goes on.
        let lease = jobs
            .lease()
            .unwrap()
            .unwrap_or_else(|| panic!("after {name}"));
        jobs.release(lease).unwrap();
    }
    // A lease held across a restart is settled after it.
    let lease = jobs.lease().unwrap().unwrap();
    server.restart();
    jobs.ack(lease).expect("ack after a restart");
}

// Issue 23, item 5: a call whose connection drops after it was sent says
// that its outcome is not known (`OutcomeUnknown`), not that it failed; the
// next call connects again. Here the ack waits for a row lock another
// session holds, and its server process is ended while it waits.
#[test]
fn a_call_cut_off_after_it_was_sent_says_its_outcome_is_unknown() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("cut_{}", std::process::id());
    let jobs = PgOptions::new()
        .schema(&schema)
        .lease_time(Duration::from_secs(60))
        .connect(&server.url(), "cut")
        .unwrap();
    jobs.enqueue(NewJob::new("x").id("held")).unwrap();
    let lease = jobs.lease().unwrap().unwrap();
    let mut holder = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".jobs WHERE id = 'held' FOR UPDATE"),
        &[],
    )
    .unwrap();
    std::thread::scope(|scope| {
        let acking = scope.spawn(|| jobs.ack(lease));
        let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ended = admin
                .query(
                    // OFFSET 0: the filter runs before the termination
                    // (the planner orders a query's conditions by cost).
                    "SELECT pid FROM (
                         SELECT pid FROM pg_stat_activity
                         WHERE wait_event_type = 'Lock' AND (query LIKE $1 OR query LIKE $2)
                         OFFSET 0) AS waiting
                     WHERE pg_terminate_backend(pid)",
                    // The ack: a DELETE, or an UPDATE keeping the row
                    // as completed (the default keeps completed jobs).
                    &[
                        &format!("%DELETE FROM \"{schema}\".jobs%"),
                        &format!("%UPDATE \"{schema}\".jobs SET state = 3%"),
                    ],
                )
                .unwrap();
            if !ended.is_empty() {
                break;
            }
            assert!(!acking.is_finished(), "the ack did not wait for the row");
            assert!(std::time::Instant::now() < deadline, "the ack never waited");
            std::thread::sleep(Duration::from_millis(20));
        }
        let acked = acking.join().unwrap();
        let unknown = matches!(&acked, Err(dque::Error::OutcomeUnknown { .. }));
        assert!(unknown, "{acked:?}");
        let text = acked.unwrap_err().to_string();
        assert!(text.contains("not known"), "{text}");
    });
    tx.rollback()
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
    // The next call connects again; the job is there (this ack never ran).
    assert_eq!(jobs.counts().unwrap().leased, 1);
}

/// Undoes migration 7 → 8 (history, issue 27).
fn back_to_version_7(client: &mut postgres::Client, schema: &str) {
    pg_counts::back_to_version_8(client, schema);
    client
        .batch_execute(&format!(
            "DROP INDEX {schema}.jobs_kept_ids;
             DROP INDEX {schema}.jobs_completed;
             ALTER TABLE {schema}.jobs DROP COLUMN started, DROP COLUMN finished,
                 DROP COLUMN worker;
             UPDATE {schema}.schema_version SET version = 7;"
        ))
        .unwrap();
}

/// Undoes migration 6 → 7 (recurring jobs, issue 27).
fn back_to_version_6(client: &mut postgres::Client, schema: &str) {
    back_to_version_7(client, schema);
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.schedules;
             UPDATE {schema}.schema_version SET version = 6;"
        ))
        .unwrap();
}

/// Undoes migration 5 → 6 (unique jobs, issue 27).
fn back_to_version_5(client: &mut postgres::Client, schema: &str) {
    back_to_version_6(client, schema);
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.unique_ids;
             UPDATE {schema}.schema_version SET version = 5;"
        ))
        .unwrap();
}

/// Undoes migration 4 → 5 (limits and pause, issue 27).
fn back_to_version_4(client: &mut postgres::Client, schema: &str) {
    back_to_version_5(client, schema);
    client
        .batch_execute(&format!(
            "DROP FUNCTION {schema}.lease_limited;
             DROP FUNCTION {schema}.job_limits;
             DROP TABLE {schema}.limits;
             ALTER TABLE {schema}.queues DROP COLUMN paused;
             UPDATE {schema}.schema_version SET version = 4;"
        ))
        .unwrap();
}

/// Makes schema `schema` (at version 4 or later, no job leased) what version 3
/// made: jobs keyed by the queue's name, empty header arrays, no
/// `queues` table.
fn back_to_version_3(client: &mut postgres::Client, schema: &str) {
    back_to_version_4(client, schema);
    client
        .batch_execute(&format!(
            "ALTER TABLE {schema}.jobs ADD COLUMN queue text;
             UPDATE {schema}.jobs j SET queue = q.name,
                 header_names = coalesce(j.header_names, '{{}}'),
                 header_values = coalesce(j.header_values, '{{}}')
                 FROM {schema}.queues q WHERE q.qno = j.qno;
             ALTER TABLE {schema}.jobs DROP COLUMN qno,
                 ALTER COLUMN queue SET NOT NULL,
                 ALTER COLUMN header_names SET NOT NULL,
                 ALTER COLUMN header_values SET NOT NULL;
             CREATE INDEX jobs_next ON {schema}.jobs (queue, priority, ready_at, seq)
                 WHERE state < 2;
             CREATE UNIQUE INDEX jobs_live_ids ON {schema}.jobs (queue, id) WHERE state < 2;
             CREATE INDEX jobs_dead ON {schema}.jobs (queue, died) WHERE state = 2;
             DROP TABLE {schema}.queues;
             UPDATE {schema}.schema_version SET version = 3;"
        ))
        .unwrap();
}

// Issue 24 (seventh session): ids were compared under the database's
// collation, a linguistic one making every insert's probe of the id
// indexes dearer. Schema 10 compares every id column of the schema (the
// jobs' and the held ids', which are compared with each other) by its
// bytes. A database at version 9 is migrated: its columns compare by
// bytes after, and its jobs keep their ids and their rules (a caller's id
// still refused while its job waits, or while its hold runs; ids that
// differ only in case or accents are different ids; a job found by id).
#[test]
fn a_version_9_database_compares_every_id_by_its_bytes() {
    use dque::jobs::{Enqueued, NewJob};
    use std::time::Duration;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("v9_{}", std::process::id());
    let open = || {
        PgOptions::new()
            .schema(&schema)
            .connect(&server.url(), "q")
            .unwrap()
    };
    let hour = Duration::from_secs(3600);
    let q = open();
    q.enqueue_batch(vec![
        NewJob::new("1").id("été"),
        NewJob::new("2").id("B"),
        NewJob::new("3").id("held").unique_for(hour),
        NewJob::new("4"),
    ])
    .unwrap();
    drop(q);
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    pg_counts::back_to_version_9(&mut client, &schema);
    // The collation of every `id` column of the schema's tables.
    let collations = |client: &mut postgres::Client| -> Vec<(String, String)> {
        client
            .query(
                "SELECT c.relname::text, coalesce(co.collname::text, '')
                 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_collation co ON co.oid = a.attcollation
                 WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attname = 'id'
                   AND NOT a.attisdropped ORDER BY 1",
                &[&schema],
            )
            .unwrap()
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    };
    let byte_order = |table: &str| (table.to_owned(), "C".to_owned());
    assert_ne!(
        collations(&mut client),
        [byte_order("jobs"), byte_order("unique_ids")]
    );
    let q = open();
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .unwrap()
        .get(0);
    assert_eq!(version, dque::jobs::SCHEMA_VERSION);
    assert_eq!(
        collations(&mut client),
        [byte_order("jobs"), byte_order("unique_ids")]
    );
    let ids = |jobs: Vec<NewJob>| -> Vec<String> {
        q.enqueue_batch(jobs)
            .unwrap()
            .into_iter()
            .map(|answer| match answer {
                Enqueued::Added(id) => format!("added {id}"),
                Enqueued::AlreadyQueued(id) => format!("queued {id}"),
                Enqueued::Duplicate(_) => "duplicate".to_owned(),
            })
            .collect()
    };
    assert_eq!(
        ids(vec![
            NewJob::new("5").id("été"),
            NewJob::new("6").id("ete"),
            NewJob::new("7").id("B"),
            NewJob::new("8").id("b"),
            NewJob::new("9").id("held").unique_for(hour),
        ]),
        [
            "queued été",
            "added ete",
            "queued B",
            "added b",
            "queued held"
        ]
    );
    q.cancel("été").unwrap();
    assert_eq!(ids(vec![NewJob::new("10").id("été")]), ["added été"]);
    assert_eq!(q.counts().unwrap().ready, 6);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

// Schema 4 keys a queue's jobs by its number instead of its name, and
// keeps NULL for the header arrays of a job without headers. A database
// at version 3 is migrated in place: every job of every queue is there
// after, in its queue only, in its order, with its id (a caller's id
// still refused while its job waits), its headers, its state (ready,
// scheduled, dead), and a new queue gets a number of its own.
#[test]
fn a_version_3_database_migrates_with_every_job() {
    use dque::jobs::{Enqueued, NewJob};
    use std::time::Duration;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("v3_{}", std::process::id());
    let open = |queue: &str| {
        PgOptions::new()
            .schema(&schema)
            .connect(&server.url(), queue)
            .unwrap()
    };
    let (a, b) = (open("a"), open("b"));
    a.enqueue_batch(vec![
        NewJob::new("a1").id("one").header("k", "v"),
        NewJob::new("a2"),
        NewJob::new("a0").priority(-1),
        NewJob::new("later").delay(Duration::from_secs(3600)),
    ])
    .unwrap();
    b.enqueue(NewJob::new("b1").id("one")).unwrap();
    b.enqueue(NewJob::new("dead")).unwrap();
    let lease = b.lease().unwrap().expect("b1");
    b.fail(lease, "broken").unwrap();
    drop((a, b));
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    back_to_version_3(&mut client, &schema);
    let (a, b, c) = (open("a"), open("b"), open("c"));
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .unwrap()
        .get(0);
    assert_eq!(version, dque::jobs::SCHEMA_VERSION);
    let counts = |q: &dque::jobs::PgJobs| {
        let c = q.counts().unwrap();
        (c.ready, c.scheduled, c.leased, c.dead)
    };
    assert_eq!(counts(&a), (3, 1, 0, 0));
    assert_eq!(counts(&b), (1, 0, 0, 1));
    assert_eq!(counts(&c), (0, 0, 0, 0));
    assert_eq!(
        a.enqueue(NewJob::new("again").id("one")).unwrap(),
        Enqueued::AlreadyQueued("one".into())
    );
    let dead = b.dead(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].job.id.as_str(), dead[0].reason.as_str()),
        ("one", "broken")
    );
    b.requeue_dead("one").unwrap();
    c.enqueue(NewJob::new("c1").id("one")).unwrap();
    let mut leased = Vec::new();
    while let Some(lease) = a.lease().unwrap() {
        let headers = lease.job.headers.clone();
        leased.push((String::from_utf8(lease.job.body.clone()).unwrap(), headers));
        a.ack(lease).unwrap();
    }
    let kv = vec![("k".to_owned(), "v".to_owned())];
    assert_eq!(
        leased,
        [
            ("a0".to_owned(), vec![]),
            ("a1".to_owned(), kv),
            ("a2".to_owned(), vec![])
        ]
    );
    assert_eq!(jobs_api::drain(&b), ["dead", "b1"]);
    assert_eq!(jobs_api::drain(&c), ["c1"]);
    assert_eq!(counts(&a), (0, 1, 0, 0));
    drop((a, b, c));
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

// Schema 5 adds pause and limits (issue 27) without touching the jobs. A
// populated database at version 4, with a job leased by a worker that
// runs on through the migration, is migrated by the next program that
// opens it: every job is there, the worker's lease still settles, and a
// limit set after the migration counts the job leased before it.
#[test]
fn a_version_4_database_with_a_leased_job_migrates() {
    use dque::jobs::NewJob;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("v4_{}", std::process::id());
    let open = |queue: &str| {
        PgOptions::new()
            .schema(&schema)
            .connect(&server.url(), queue)
            .unwrap()
    };
    let worker = open("a");
    worker
        .enqueue_batch(vec![
            NewJob::new("held").limit("one"),
            NewJob::new("next").limit("one"),
            NewJob::new("free"),
        ])
        .unwrap();
    let held = worker.lease().unwrap().expect("held");
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    back_to_version_4(&mut client, &schema);
    let a = open("a");
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .unwrap()
        .get(0);
    assert_eq!(version, dque::jobs::SCHEMA_VERSION);
    assert!(!a.is_paused().unwrap());
    a.set_limit("one", 1).unwrap();
    assert_eq!(a.limits().unwrap()[0].running, 1, "held, leased before");
    let free = a.lease().unwrap().expect("free");
    assert_eq!(free.job.body, b"free");
    assert!(a.lease().unwrap().is_none(), "next waits for one");
    worker.ack(held).unwrap();
    a.ack(free).unwrap();
    assert_eq!(jobs_api::drain(&a), ["next"]);
    drop((a, worker));
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

// Schema 4 keeps NULL for the header arrays of a job without headers and
// sends none for a batch without headers: every way a job goes in (a
// batch without caller ids, with some, one job, in a caller's
// transaction) keeps each job's own headers, none, one or several, when
// jobs with and without headers are mixed.
#[test]
fn each_job_keeps_its_own_headers_however_it_is_enqueued() {
    use dque::jobs::NewJob;
    with_server(|_| {
        let q = queue("headers_mixed", std::time::Duration::from_secs(60));
        let job = |n: usize, id: bool| {
            let mut job = NewJob::new(format!("{n}"));
            if id {
                job = job.id(format!("id{n}"));
            }
            for h in 0..n % 3 {
                job = job.header(format!("h{h}"), format!("{n}/{h}"));
            }
            job
        };
        let headers_of = |n: usize| -> Vec<(String, String)> {
            (0..n % 3)
                .map(|h| (format!("h{h}"), format!("{n}/{h}")))
                .collect()
        };
        // Without caller ids: all without headers, then mixed (the first
        // without).
        q.enqueue_batch(vec![job(0, false), job(3, false)]).unwrap();
        q.enqueue_batch([6, 1, 2, 4, 5, 7, 8].map(|n| job(n, false)).into())
            .unwrap();
        // With caller ids, mixed, some jobs without.
        q.enqueue_batch(vec![job(9, true), job(10, false), job(11, true)])
            .unwrap();
        q.enqueue(job(12, false)).unwrap();
        q.enqueue(job(13, true)).unwrap();
        let server = PgServer::get().unwrap();
        let mut app = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let mut tx = app.transaction().unwrap();
        q.enqueue_in(&mut tx, job(14, false)).unwrap();
        q.enqueue_in(&mut tx, job(15, true)).unwrap();
        tx.commit().unwrap();
        let mut seen = Vec::new();
        while let Some(lease) = q.lease().unwrap() {
            let n: usize = String::from_utf8(lease.job.body.clone())
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(lease.job.headers, headers_of(n), "job {n}");
            seen.push(n);
            q.ack(lease).unwrap();
        }
        let mut order = vec![0, 3, 6, 1, 2, 4, 5, 7, 8];
        order.extend(9..=15);
        assert_eq!(seen, order);
    });
}

// Schema 3 keeps a first lease's wait in the job's row and logs it with
// the event that settles the attempt. A database at version 2 (whose
// leases logged their waits at once) is migrated in place: a job leased
// under version 2, its wait logged then, is settled under version 3 and
// its wait is counted once, not twice nor lost; a job leased under
// version 3 counts its wait while leased and once settled.
#[test]
fn a_version_2_database_migrates_and_counts_every_wait_once() {
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("v2_{}", std::process::id());
    let options = || {
        PgOptions::new()
            .schema(&schema)
            .lease_time(std::time::Duration::from_secs(60))
    };
    let q = options().connect(&server.url(), "q").unwrap();
    q.enqueue(dque::jobs::NewJob::new("old").id("old")).unwrap();
    q.close().unwrap();
    drop(q);
    // Back to version 2's tables, then a lease as version 2 made it: the
    // row leased (its lease run out since), its wait in the log.
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    back_to_version_3(&mut client, &schema);
    client
        .batch_execute(&format!(
            "ALTER TABLE {schema}.jobs DROP COLUMN wait_day, DROP COLUMN wait_ms;
             ALTER TABLE {schema}.stats_log DROP COLUMN wait_day, DROP COLUMN wait_ms;
             UPDATE {schema}.schema_version SET version = 2;
             UPDATE {schema}.jobs SET attempts = 1, lease_until = 1,
                 lease_token = nextval('{schema}.lease_tokens');
             INSERT INTO {schema}.stats_log (queue, day, kind, ms, grp)
                 SELECT 'q', ready_at / 86400000 * 86400, 0, 1500, NULL FROM {schema}.jobs;"
        ))
        .unwrap();
    let q = options().connect(&server.url(), "q").unwrap();
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .unwrap()
        .get(0);
    assert_eq!(version, dque::jobs::SCHEMA_VERSION);
    let waits = |q: &dque::jobs::PgJobs| -> (u64, u64) {
        let stats = q.stats().unwrap();
        let wait = stats.days.iter().map(|d| d.wait.count).sum();
        let run = stats.days.iter().map(|d| d.run.count).sum();
        (wait, run)
    };
    assert_eq!(waits(&q), (1, 0));
    let old = q.lease().unwrap().expect("the old job, its lease run out");
    assert_eq!(old.job.attempt, 2);
    q.ack(old).unwrap();
    assert_eq!(waits(&q), (1, 1));
    q.enqueue(dque::jobs::NewJob::new("new").id("new")).unwrap();
    let new = q.lease().unwrap().expect("the new job");
    assert_eq!(waits(&q), (2, 1), "a leased job's wait is counted");
    q.ack(new).unwrap();
    assert_eq!(waits(&q), (2, 2));
    q.close().unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

// Schema 3 keeps a first lease's wait in the job's row until the attempt
// settles: each way a job leaves or goes back (hand back, retry, a lease
// run out and then a cancel, a failure) must count its wait exactly once,
// counted too while the job is leased.
#[test]
fn a_wait_kept_in_the_row_is_counted_once_however_the_job_settles() {
    with_server(|_| {
        let lease_time = std::time::Duration::from_millis(300);
        let q = queue("waits_once", lease_time);
        let waits = || -> u64 {
            let stats = q.stats().unwrap();
            stats.days.iter().map(|d| d.wait.count).sum()
        };
        for id in ["released", "retried", "cancelled", "failed"] {
            q.enqueue(dque::jobs::NewJob::new(id).id(id)).unwrap();
        }
        let mut counted = 0;
        // Handed back, then leased again: one wait.
        let job = q.lease().unwrap().unwrap();
        assert_eq!(job.job.id, "released");
        counted += 1;
        assert_eq!(waits(), counted, "a leased job's wait is counted");
        q.release(job).unwrap();
        assert_eq!(waits(), counted);
        let job = q.lease().unwrap().unwrap();
        assert_eq!(job.job.id, "released");
        q.ack(job).unwrap();
        assert_eq!(waits(), counted);
        // Retried, then done.
        let job = q.lease().unwrap().unwrap();
        assert_eq!(job.job.id, "retried");
        counted += 1;
        q.nack(
            job,
            dque::jobs::Retry::After(std::time::Duration::ZERO),
            "again",
        )
        .unwrap();
        assert_eq!(waits(), counted);
        let job = q.lease().unwrap().unwrap();
        assert_eq!((job.job.id.as_str(), job.job.attempt), ("retried", 2));
        q.ack(job).unwrap();
        assert_eq!(waits(), counted);
        // Leased by a worker that never came back, then cancelled.
        let job = q.lease().unwrap().unwrap();
        assert_eq!(job.job.id, "cancelled");
        counted += 1;
        std::mem::forget(job);
        std::thread::sleep(lease_time * 2);
        assert_eq!(waits(), counted);
        q.cancel("cancelled").unwrap();
        assert_eq!(waits(), counted);
        // Failed, requeued, leased again: a new first lease, a new wait.
        let job = q.lease().unwrap().unwrap();
        assert_eq!(job.job.id, "failed");
        counted += 1;
        q.fail(job, "broken").unwrap();
        assert_eq!(waits(), counted);
        q.requeue_dead("failed").unwrap();
        assert_eq!(waits(), counted);
        let job = q.lease().unwrap().unwrap();
        counted += 1;
        q.ack(job).unwrap();
        assert_eq!(waits(), counted);
        q.close().unwrap();
    });
}

fn prune_jobs() -> usize {
    std::env::var("DQUE_PRUNE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

// Bug: a handle pruned completed rows once a second, at most 1,000 of
// each kind a time, so a handle acking faster than that (a batch worker
// does thousands a second) left completed rows beyond the count kept
// faster than it pruned them: the table grew without bound. Pruning now
// also runs every few hundred acks of the handle, whatever the time. The
// pin that fails on the old code whatever the machine's speed is
// `postgres::history`'s unit test; this checks the outcome on a server
// (it fails on the old code only where acks outrun a second's prune).
// Rounds: `DQUE_PRUNE_JOBS`.
#[test]
fn pruning_keeps_up_with_a_handle_that_acks_fast() {
    with_server(|backend| {
        let server = PgServer::get().expect("checked by with_server");
        let name = format!("{}-prune-fast", backend.prefix);
        let keep = dque::jobs::KeepCompleted::new(std::time::Duration::from_secs(3600), 10);
        let q = PgOptions::new()
            .keep_completed(keep)
            .connect(&server.url(), &name)
            .expect("connect");
        let n = prune_jobs();
        for chunk in 0..n.div_ceil(500) {
            let jobs = (0..500)
                .map(|i| dque::jobs::NewJob::new(format!("job {chunk}-{i}")))
                .collect();
            q.enqueue_batch(jobs).unwrap();
            for lease in q.lease_batch(500).unwrap() {
                q.ack(lease).unwrap();
            }
        }
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let kept: i64 = client
            .query_one(
                "SELECT count(*) FROM dque.jobs j JOIN dque.queues q USING (qno)
                 WHERE q.name = $1 AND j.state = 3",
                &[&name],
            )
            .unwrap()
            .get(0);
        assert!(
            kept <= 10 + 1000,
            "{kept} completed rows kept after {n} acks, the count kept being 10"
        );
    });
}

// A guard (no bug found): `waiting` reads its ready part and its scheduled
// part as a UNION ALL with no ORDER BY over both, relying on the Append
// giving its parts in order. Plans that free parallelism and no index
// scans make likely (PostgreSQL 15 plans a Gather in each part, no
// Parallel Append) must keep the order: ready by priority then age, then
// scheduled by due time, at every `max`.
#[test]
fn waiting_keeps_ready_then_scheduled_under_parallel_plans() {
    use dque::jobs::NewJob;
    use std::time::Duration;
    with_server(|_| {
        let server = PgServer::get().expect("checked");
        let mut admin = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let db = format!("parallel_{}", std::process::id());
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {db} SET parallel_setup_cost = 0;
                 ALTER DATABASE {db} SET parallel_tuple_cost = 0;
                 ALTER DATABASE {db} SET min_parallel_table_scan_size = 0;
                 ALTER DATABASE {db} SET min_parallel_index_scan_size = 0;
                 ALTER DATABASE {db} SET enable_indexscan = off;
                 ALTER DATABASE {db} SET enable_bitmapscan = off;"
            ))
            .unwrap();
        let url = server.url_as("dque", None, &db);
        let q = PgOptions::new().connect(&url, "parallel").unwrap();
        // Interleaved in enqueue order: ready ones of mixed priorities and
        // scheduled ones of mixed due times.
        let n = 3000;
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| {
                let job = NewJob::new(format!("{i}")).id(format!("j{i:05}"));
                if i % 2 == 0 {
                    job.priority((i % 7) as i32 - 3)
                } else {
                    job.delay(Duration::from_secs(3600 + ((i * 37) % 1000) as u64))
                }
            })
            .collect();
        for chunk in jobs.chunks(500) {
            q.enqueue_batch(chunk.to_vec()).unwrap();
        }
        let mut ready: Vec<(i32, usize)> = (0..n)
            .filter(|i| i % 2 == 0)
            .map(|i| ((i % 7) as i32 - 3, i))
            .collect();
        ready.sort();
        let mut scheduled: Vec<(usize, usize)> = (0..n)
            .filter(|i| i % 2 == 1)
            .map(|i| ((i * 37) % 1000, i))
            .collect();
        scheduled.sort();
        let expected: Vec<String> = ready
            .iter()
            .map(|(_, i)| format!("j{i:05}"))
            .chain(scheduled.iter().map(|(_, i)| format!("j{i:05}")))
            .collect();
        for max in [n, n / 2 + 10, 100] {
            let listed: Vec<String> = q
                .waiting(max)
                .unwrap()
                .into_iter()
                .map(|w| w.job.id)
                .collect();
            assert_eq!(listed, expected[..max], "waiting({max})");
        }
        drop(q);
        let _ = admin.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"));
    });
}

// A guard (no bug found) on the lease statements that now store who leased
// a row and when: every way to lease, on the sync and the async handle (a
// plain lease, a batch, a limited kind's lease) leaves the handle's name
// and a start in the row, which `leases` and `job_info` show.
#[test]
fn every_lease_path_records_its_worker_and_start() {
    use dque::jobs::{AsyncJobQueue, NewJob};
    use std::time::Duration;
    with_server(|_| {
        let server = PgServer::get().expect("checked");
        let name = format!("{}-leasers", Postgres::new().prefix);
        let options = |w: &str| {
            PgOptions::new()
                .lease_time(Duration::from_secs(60))
                .worker(w)
        };
        let sync = options("w-sync").connect(&server.url(), &name).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let aq = runtime
            .block_on(options("w-async").connect_async(&server.url(), &name))
            .unwrap();
        sync.set_limit("smtp", 10).unwrap();
        let put = |id: &str, limited: bool| {
            let job = NewJob::new(id).id(id);
            let job = if limited { job.limit("smtp") } else { job };
            assert!(sync.enqueue(job).unwrap().is_added());
        };
        let mut who = std::collections::BTreeMap::new();
        let mut held = Vec::new();
        let mut async_held = Vec::new();
        // Plain: one, then a batch, on each handle.
        put("s1", false);
        held.push(sync.lease().unwrap().unwrap());
        who.insert("s1", "w-sync");
        put("a1", false);
        async_held.push(runtime.block_on(aq.lease()).unwrap().unwrap());
        who.insert("a1", "w-async");
        for id in ["s2", "s3"] {
            put(id, false);
            who.insert(id, "w-sync");
        }
        held.extend(sync.lease_batch(2).unwrap());
        for id in ["a2", "a3"] {
            put(id, false);
            who.insert(id, "w-async");
        }
        async_held.extend(runtime.block_on(aq.lease_batch(2)).unwrap());
        // Limited: the limit's own statement.
        put("sl", true);
        held.push(sync.lease().unwrap().unwrap());
        who.insert("sl", "w-sync");
        put("al", true);
        async_held.push(runtime.block_on(aq.lease()).unwrap().unwrap());
        who.insert("al", "w-async");
        assert_eq!(held.len() + async_held.len(), who.len());
        let leases = sync.leases(100).unwrap();
        let shown: std::collections::BTreeMap<&str, &str> = leases
            .iter()
            .map(|l| (l.job.id.as_str(), l.worker.as_deref().unwrap_or("?")))
            .collect();
        assert_eq!(shown, who);
        for lease in &leases {
            assert!(lease.since.is_some(), "{}: no start", lease.job.id);
            let info = sync.job_info(&lease.job.id).unwrap().unwrap();
            assert_eq!(info.worker, lease.worker, "{}", lease.job.id);
            assert!(info.started_at.is_some(), "{}", lease.job.id);
        }
        for lease in held {
            sync.ack(lease).unwrap();
        }
        for lease in async_held {
            runtime.block_on(aq.ack(lease)).unwrap();
        }
        assert!(sync.leases(100).unwrap().is_empty());
    });
}

/// A proxy in front of the server's Unix socket that, once, lets the
/// statement whose text holds `needle` run to its end on the server and
/// then drops the client's connection before the answer reaches it (a
/// connection lost after the statement committed).
struct CutProxy {
    dir: tempfile::TempDir,
    cut: Arc<AtomicUsize>,
}

/// Run once by a [`CutProxy`] after its cut, before it forwards the next
/// thing a client sends (what happens between a batch and its next call).
type AfterCut = Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// Where one connection of a [`CutProxy`] is: forwarding, the statement
/// seen (its execution comes next), or its execution sent.
const FORWARDING: usize = 0;
const ARMED: usize = 1;
const CUTTING: usize = 2;
const DONE: usize = 3;

impl CutProxy {
    fn start(server: &PgServer, needle: &'static str) -> CutProxy {
        Self::start_then(server, needle, Box::new(|| {}))
    }

    fn start_then(
        server: &PgServer,
        needle: &'static str,
        after_cut: Box<dyn FnOnce() + Send>,
    ) -> CutProxy {
        let after_cut: AfterCut = Arc::new(std::sync::Mutex::new(Some(after_cut)));
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join(".s.PGSQL.5432")).unwrap();
        let upstream = server
            .url()
            .split_whitespace()
            .find_map(|part| part.strip_prefix("host="))
            .map(|host| std::path::Path::new(host).join(".s.PGSQL.5432"))
            .unwrap();
        let cut = Arc::new(AtomicUsize::new(FORWARDING));
        let state = Arc::clone(&cut);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = UnixStream::connect(&upstream).unwrap();
                let (state_up, state_down) = (Arc::clone(&state), Arc::clone(&state));
                let after_cut = Arc::clone(&after_cut);
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        if state_up.load(Ordering::SeqCst) == DONE {
                            if let Some(then) = after_cut.lock().unwrap().take() {
                                then();
                            }
                        }
                        let seen = chunk.windows(needle.len()).any(|w| w == needle.as_bytes());
                        let _ = state_up.compare_exchange(
                            ARMED,
                            CUTTING,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                        if seen {
                            let _ = state_up.compare_exchange(
                                FORWARDING,
                                ARMED,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            );
                        }
                        if s_out.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = [0u8; 65536];
                    let mut held = Vec::new();
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if state_down.load(Ordering::SeqCst) != CUTTING {
                            if c_out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            continue;
                        }
                        // The statement's answer, kept from the client up
                        // to its end (ReadyForQuery: committed).
                        held.extend_from_slice(&buf[..n]);
                        let mut at = 0;
                        let mut ended = false;
                        while held.len() >= at + 5 {
                            let len = u32::from_be_bytes(held[at + 1..at + 5].try_into().unwrap());
                            let end = at + 1 + len as usize;
                            if held.len() < end {
                                break;
                            }
                            ended |= held[at] == b'Z';
                            at = end;
                        }
                        if ended {
                            state_down.store(DONE, Ordering::SeqCst);
                            let _ = c_out.shutdown(std::net::Shutdown::Both);
                            let _ = s_in.shutdown(std::net::Shutdown::Both);
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        CutProxy { dir, cut }
    }

    fn url(&self) -> String {
        format!(
            "host={} user=dque dbname=postgres",
            self.dir.path().display()
        )
    }

    fn has_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst) == DONE
    }
}

// Bug (issue 28 review): a `cancel_many` whose statement ran but whose
// connection dropped before its answer came (outcome unknown) asked each
// job again on its own: the jobs the statement had removed then answered
// `NoSuchJob`, an error for a job this very call cancelled (a call that
// returns an error had no effect), where a `cancel` cut off the same way
// says `OutcomeUnknown`.
#[test]
fn a_batch_cancel_cut_off_after_it_ran_does_not_say_no_such_job() {
    use dque::jobs::NewJob;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("batch_cut_{}", std::process::id());
    let direct = PgOptions::new()
        .schema(&schema)
        .connect(&server.url(), "cut")
        .unwrap();
    direct.enqueue(NewJob::new("held")).unwrap();
    let lease = direct.lease().unwrap().expect("a job");
    let mut ids: Vec<String> = (0..3)
        .map(|i| {
            direct
                .enqueue(NewJob::new(format!("job {i}")))
                .unwrap()
                .id()
                .to_owned()
        })
        .collect();
    ids.push(lease.job.id.clone());
    ids.push("none such".into());
    let proxy = CutProxy::start(server, "RETURNING id, wait_day");
    let jobs = PgOptions::new()
        .schema(&schema)
        .connect(&proxy.url(), "cut")
        .unwrap();
    let outcomes = jobs.cancel_many(&ids);
    assert!(
        proxy.has_cut(),
        "the batch's statement was cut off: {outcomes:?}"
    );
    let counts = direct.counts().unwrap();
    assert_eq!((counts.ready, counts.leased), (0, 1), "the statement ran");
    for (id, outcome) in ids.iter().zip(&outcomes) {
        let honest = match id.as_str() {
            "none such" => !matches!(outcome, Ok(())),
            leased if *leased == lease.job.id => {
                matches!(outcome, Err(dque::Error::JobLeased { .. }))
            }
            _ => matches!(outcome, Ok(()) | Err(dque::Error::OutcomeUnknown { .. })),
        };
        assert!(honest, "{id}: {outcome:?} (all: {outcomes:?})");
    }
}

// Bug (issue 28 review): a `set_priority_many` whose statement ran but
// whose connection dropped before its answer came asked each job again:
// a job it had moved and a worker leased since answered `JobLeased`, an
// error for a job whose priority this very call changed; such a job's
// outcome is not known (`OutcomeUnknown`).
#[test]
fn a_batch_priority_change_cut_off_after_it_ran_says_no_error_it_cannot_know() {
    use dque::jobs::NewJob;
    let _sharing = sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = format!("batch_cut_priority_{}", std::process::id());
    let direct = Arc::new(
        PgOptions::new()
            .schema(&schema)
            .connect(&server.url(), "cut")
            .unwrap(),
    );
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let job = NewJob::new(format!("job {i}"));
            direct.enqueue(job).unwrap().id().to_owned()
        })
        .collect();
    // After the cut, before the batch asks again: the first job moved is
    // leased (the moved ones come first).
    let leased = Arc::new(std::sync::Mutex::new(None));
    let (worker, taken) = (Arc::clone(&direct), Arc::clone(&leased));
    let lease_one = Box::new(move || {
        *taken.lock().unwrap() = worker.lease().unwrap();
    });
    let proxy = CutProxy::start_then(server, "WITH ORDINALITY", lease_one);
    let jobs = PgOptions::new()
        .schema(&schema)
        .connect(&proxy.url(), "cut")
        .unwrap();
    let outcomes = jobs.set_priority_many(&ids, -5);
    assert!(
        proxy.has_cut(),
        "the batch's statement was cut off: {outcomes:?}"
    );
    let lease = leased
        .lock()
        .unwrap()
        .take()
        .expect("a job leased after the cut");
    assert_eq!(lease.job.priority, -5, "the statement ran");
    for (id, outcome) in ids.iter().zip(&outcomes) {
        let honest = matches!(outcome, Ok(()) | Err(dque::Error::OutcomeUnknown { .. }));
        assert!(honest, "{id}: {outcome:?} (all: {outcomes:?})");
    }
}
