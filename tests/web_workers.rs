//! The workers page (`GET /workers`, over `JobQueue::leases`): who holds
//! which job, since when, until when, on every backend (PostgreSQL and
//! Redis on real throwaway servers, `tests/pg/`, `tests/redis_server/`;
//! without their binaries those tests say so and pass, except under
//! `CI=true`). A worker's name comes from its handle
//! (`AddressOptions::worker`, `JobOptions::worker`, `dque work --worker`);
//! without one the embedded queue names the process holding a lease,
//! `host:pid`. The embedded queue's leases are checked in exclusive and
//! shared mode, with another process holding the lease (`tests/child/`).

mod child;
mod pg;
mod redis_server;
mod skip;
mod web;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use dque::jobs::{
    Address, AddressOptions, EmbeddedJobs, JobOptions, JobQueue, JobState, LeaseInfo, NewJob,
};
use dque::web::DashboardOptions;
use pg::PgServer;
use redis_server::RedisServer;
use web::{get, router};

/// A name a worker could give that would run as script if shown raw.
const HOSTILE: &str = "<script>alert(\"w\")</script>&<b>";
/// The same, as an escaped page shows it.
const HOSTILE_SHOWN: &str = "&lt;script&gt;alert(&quot;w&quot;)&lt;/script&gt;&amp;&lt;b&gt;";

/// `GET /workers` of a dashboard over `dashboard`, and the overview.
fn pages(dashboard: Arc<dyn JobQueue>) -> (String, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let answers = runtime.block_on(async {
        let app = router(vec![dashboard], DashboardOptions::new());
        let workers = get(&app, "/workers").await;
        assert_eq!(workers.status, StatusCode::OK, "{}", workers.body);
        (workers.body, get(&app, "/").await.body)
    });
    drop(runtime);
    answers
}

/// What [`held_job_is_shown`] saw: the held job's row of the page, its
/// lease as `leases` gave it, and the wall-clock times just before and
/// just after the worker leased it.
struct Shown {
    row: String,
    lease: LeaseInfo,
    before: SystemTime,
    after: SystemTime,
}

impl Shown {
    /// Checks that the lease's start is known and falls between the times
    /// read around the lease call (give or take `slack`: two clock reads
    /// apart where a backend converts between clocks).
    fn since_is_the_lease_call(&self, slack: Duration) {
        let since = self.lease.since.expect("a lease's start");
        assert!(
            since + slack >= self.before && since <= self.after + slack,
            "leased between {:?} and {:?}, shown since {since:?}",
            self.before,
            self.after
        );
    }
}

/// How far apart two clock reads may be on a loaded machine.
const CLOCK_SLACK: Duration = Duration::from_millis(50);

/// Enqueues `held` (kind `mail`) and `idle` (ready) through `producer`,
/// leases `held` through `worker`, and checks the workers page over
/// `producer`: `held` is shown with `name_shown` (escaped), its kind, its
/// attempt, its lease's end (and start when `since_known`), and `idle`
/// is not; once acked, nothing is shown.
fn held_job_is_shown(
    producer: Arc<dyn JobQueue>,
    worker: &dyn JobQueue,
    name_shown: Option<&str>,
    since_known: bool,
) -> Shown {
    producer
        .enqueue(
            NewJob::new("to ops")
                .id("held")
                .header("klass", "mail")
                .priority(-1),
        )
        .unwrap();
    producer.enqueue(NewJob::new("later").id("idle")).unwrap();
    let before = SystemTime::now();
    let lease = worker.lease().unwrap().expect("a job");
    let after = SystemTime::now();
    assert_eq!(lease.job.id, "held");

    let leases = producer.leases(10).unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].job.id, "held");
    assert_eq!(leases[0].job.attempt, 1);
    let until = leases[0].until.expect("a lease's end");
    assert!(until > std::time::SystemTime::now(), "{until:?}");
    assert_eq!(leases[0].since.is_some(), since_known, "{leases:?}");

    let (page, overview) = pages(producer.clone());
    assert!(overview.contains("href=\"/workers\""), "{overview}");
    let row = page
        .split("<tr>")
        .find(|row| row.contains("/queues/0/jobs/held"))
        .unwrap_or_else(|| panic!("no row of the held job: {page}"));
    if let Some(name) = name_shown {
        assert!(row.contains(&format!("<code>{name}</code>")), "{row}");
    }
    assert!(row.contains("<td class=\"kind\">mail</td>"), "{row}");
    assert!(row.contains("<td class=\"n\">1</td>"), "{row}");
    assert!(row.contains(">in "), "the lease ends in a while: {row}");
    assert_eq!(row.contains(" ago<"), since_known, "{row}");
    assert!(
        !page.contains("jobs/idle"),
        "a ready job is held by no one: {page}"
    );

    worker.ack(lease).unwrap();
    assert!(producer.leases(10).unwrap().is_empty());
    let (page, _) = pages(producer);
    assert!(page.contains("No job is leased."), "{page}");
    // The page and lease as they were, for the caller's own checks.
    Shown {
        row: row.to_owned(),
        lease: leases[0].clone(),
        before,
        after,
    }
}

/// Bug pinned (issue 28): the embedded queue's leases showed no start
/// (`since` was always unknown) and no worker name, only `host:pid`.
#[test]
fn the_embedded_queue_shows_the_process_holding_a_lease_and_since_when() {
    let dir = tempfile::tempdir().unwrap();
    let address: Address = dir
        .path()
        .join("mail")
        .display()
        .to_string()
        .parse()
        .unwrap();
    let producer: Arc<dyn JobQueue> =
        Arc::from(AddressOptions::new().create(true).open(&address).unwrap());
    let shown = held_job_is_shown(producer.clone(), producer.as_ref(), None, true);
    assert!(
        shown
            .row
            .contains(&format!(":{}</code>", std::process::id())),
        "host:pid of this process: {}",
        shown.row
    );
    shown.since_is_the_lease_call(CLOCK_SLACK);
}

/// Bug pinned (issue 28): a named handle of an exclusive embedded queue
/// showed `host:pid` and no start.
#[test]
fn an_exclusive_embedded_queue_shows_its_worker_name_and_since_when() {
    let dir = tempfile::tempdir().unwrap();
    let queue: Arc<dyn JobQueue> = Arc::new(
        JobOptions::new()
            .worker("solo-1")
            .create(dir.path().join("mail"))
            .unwrap(),
    );
    let shown = held_job_is_shown(queue.clone(), queue.as_ref(), Some("solo-1"), true);
    assert_eq!(shown.lease.worker.as_deref(), Some("solo-1"));
    shown.since_is_the_lease_call(CLOCK_SLACK);
    // `job_info` of a leased job names its holder and the lease's start.
    let lease = queue.lease().unwrap().expect("the idle job");
    let since = queue.leases(1).unwrap()[0].since;
    let info = queue.job_info(&lease.job.id).unwrap().unwrap();
    assert_eq!(info.state, JobState::Leased);
    assert_eq!(info.worker.as_deref(), Some("solo-1"), "{info:?}");
    assert!(since.is_some() && info.started_at.is_some(), "{info:?}");
    let apart = |a: SystemTime, b: SystemTime| a.max(b).duration_since(a.min(b)).unwrap();
    assert!(apart(since.unwrap(), info.started_at.unwrap()) < CLOCK_SLACK);
    queue.ack(lease).unwrap();
}

/// Bug pinned (issue 28), exclusive mode: a touch must keep a lease's
/// start (it moves only its end).
#[test]
fn an_exclusive_embedded_touch_keeps_the_start_and_moves_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let queue = EmbeddedJobs::create(dir.path().join("q")).unwrap();
    queue.enqueue(NewJob::new("x")).unwrap();
    let lease = queue.lease().unwrap().unwrap();
    let first = queue.leases(1).unwrap().remove(0);
    std::thread::sleep(Duration::from_millis(400));
    queue.touch(&lease).unwrap();
    let touched = queue.leases(1).unwrap().remove(0);
    let (since, then) = (touched.since.unwrap(), first.since.unwrap());
    let moved = since.max(then).duration_since(since.min(then)).unwrap();
    assert!(moved < CLOCK_SLACK, "a touch moved the start by {moved:?}");
    assert!(touched.until.unwrap() >= first.until.unwrap() + Duration::from_millis(300));
    queue.ack(lease).unwrap();
}

/// Bug pinned (issue 28): in shared mode, a lease taken through another
/// handle showed that handle's `host:pid` whatever name it leased under,
/// and no start. Each lease shows its own handle's name: a handle named
/// one way beside one named another (or not at all).
#[test]
fn a_shared_embedded_queue_shows_each_handles_worker_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mail").display().to_string();
    AddressOptions::new()
        .create(true)
        .open_str(&path)
        .unwrap()
        .close()
        .unwrap();
    named_worker_is_shown(&path);
}

/// Bug pinned (issue 28): a lease held by another process showed its
/// `host:pid` only, never the name the process leases under, nor since
/// when; a touch must keep the start (it moves only the end). The child
/// holds the lease; this process reads `/workers`.
#[test]
fn a_lease_held_by_another_process_shows_its_worker_name_and_start() {
    const NAME: &str = "child-mailer";
    if child::run_as_child(lease_holding_child) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let address = dir.path().join("mail").display().to_string();
    let reader: Arc<dyn JobQueue> = Arc::from(
        AddressOptions::new()
            .create(true)
            .open_str(&address)
            .unwrap(),
    );
    reader.enqueue(NewJob::new("first").id("first")).unwrap();
    reader
        .enqueue(NewJob::new("to ops").id("held").header("klass", "mail"))
        .unwrap();
    // A lease ended leaves the shared table's floor below every lease
    // held: a lower bound, which a write sets right and a read must not.
    let first = reader.lease().unwrap().expect("the first job");
    reader.ack(first).unwrap();
    let mut child = {
        let _one = child::one_spawner_at_a_time();
        child::command("a_lease_held_by_another_process_shows_its_worker_name_and_start")
            .env("DQUE_TEST_QUEUE", &address)
            .env("DQUE_TEST_WORKER", NAME)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = |what: &str| -> Vec<u128> {
        // The harness may print its own words before the child's on a line.
        let line = from_child
            .by_ref()
            .map(Result::unwrap)
            .find_map(|line| Some(line.split_once("@@ ")?.1.to_owned()))
            .unwrap_or_else(|| panic!("the child ended before it said {what}"));
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some(what), "{line}");
        words.map(|n| n.parse().unwrap()).collect()
    };
    let mut tell = |what: &str| writeln!(to_child, "{what}").unwrap();

    let times = said("LEASED");
    let (before, after) = (wall(times[0]), wall(times[1]));
    // A read: `leases` leaves the shared control file as it was (it used
    // to set the lease table's floor and count again).
    let control = dir.path().join("mail").join("dque.shm");
    let control_before = std::fs::read(&control).unwrap();
    let leases = reader.leases(10).unwrap();
    assert!(
        std::fs::read(&control).unwrap() == control_before,
        "leases() wrote the control file"
    );
    assert_eq!(leases.len(), 1, "{leases:?}");
    let first = leases[0].clone();
    assert_eq!(first.job.id, "held");
    assert_eq!(first.worker.as_deref(), Some(NAME), "{first:?}");
    Shown {
        row: String::new(),
        lease: first.clone(),
        before,
        after,
    }
    .since_is_the_lease_call(CLOCK_SLACK);
    // `job_info` of the leased job says the same.
    let info = reader.job_info("held").unwrap().expect("the held job");
    assert_eq!(info.state, JobState::Leased);
    assert_eq!(info.worker.as_deref(), Some(NAME), "{info:?}");
    let (started, since) = (info.started_at.unwrap(), first.since.unwrap());
    let apart = started
        .max(since)
        .duration_since(started.min(since))
        .unwrap();
    assert!(apart < CLOCK_SLACK, "{info:?} against {first:?}");
    let (page, _) = pages(reader.clone());
    let row = page
        .split("<tr>")
        .find(|row| row.contains("/queues/0/jobs/held"))
        .unwrap_or_else(|| panic!("no row of the held job: {page}"));
    assert!(row.contains(&format!("<code>{NAME}</code>")), "{row}");
    assert!(row.contains(" ago<"), "a start is shown: {row}");

    // Touched later: the end moves, the start stays.
    std::thread::sleep(Duration::from_millis(400));
    tell("touch");
    said("TOUCHED");
    let touched = reader.leases(10).unwrap();
    assert_eq!(touched.len(), 1, "{touched:?}");
    let (since, then) = (touched[0].since.unwrap(), first.since.unwrap());
    let moved = since.max(then).duration_since(since.min(then)).unwrap();
    assert!(moved < CLOCK_SLACK, "a touch moved the start by {moved:?}");
    assert!(
        touched[0].until.unwrap() >= first.until.unwrap() + Duration::from_millis(300),
        "the touch moved the end: {touched:?} after {first:?}"
    );

    // Settled: no longer shown, while its process lives on.
    tell("ack");
    said("ACKED");
    assert!(reader.leases(10).unwrap().is_empty());
    let (page, _) = pages(reader.clone());
    assert!(page.contains("No job is leased."), "{page}");
    tell("exit");
    assert!(child.wait().unwrap().success());
}

/// The child of `a_lease_held_by_another_process_shows_its_worker_name_and_start`:
/// leases the job at `DQUE_TEST_QUEUE` as worker `DQUE_TEST_WORKER` and
/// says when (before and after the call, in nanoseconds since the epoch);
/// then does what each line from the parent says (`touch`, `ack`, `exit`)
/// and says it did.
fn lease_holding_child() {
    let address = std::env::var("DQUE_TEST_QUEUE").unwrap();
    let name = std::env::var("DQUE_TEST_WORKER").unwrap();
    let queue = AddressOptions::new()
        .worker(name)
        .open_str(&address)
        .unwrap();
    let before = nanos(SystemTime::now());
    let lease = queue.lease().unwrap().expect("the parent's job");
    let after = nanos(SystemTime::now());
    say(&format!("LEASED {before} {after}"));
    let mut lease = Some(lease);
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            "touch" => {
                queue.touch(lease.as_ref().unwrap()).unwrap();
                say("TOUCHED");
            }
            "ack" => {
                queue.ack(lease.take().unwrap()).unwrap();
                say("ACKED");
            }
            _ => break,
        }
    }
    queue.close().unwrap();
}

/// A line for the parent.
fn say(what: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {what}").unwrap();
    out.flush().unwrap();
}

fn nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn wall(nanos: u128) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos as u64)
}

/// The control file of a shared queue (`dque.shm`) changed layout (2:
/// slots hold worker names, leases their start). One a process of the old
/// layout left (it died, or closed) is made anew by the next process to
/// open the queue alone; while a process of another layout shares the
/// queue, an open refuses it (`UnsupportedVersion`) and changes nothing.
#[test]
fn a_control_file_of_the_old_layout_is_remade_alone_and_refused_while_in_use() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mail");
    let address = path.display().to_string();
    let queue = AddressOptions::new()
        .create(true)
        .open_str(&address)
        .unwrap();
    queue.enqueue(NewJob::new("x").id("held")).unwrap();
    queue.close().unwrap();
    // Layout 1 as an old dque left it: header, 1024 slots of 64 bytes,
    // two tables of 65,536 leases of 32 bytes.
    let shm = path.join("dque.shm");
    let mut old = vec![0u8; 4096 + 1024 * 64 + 2 * 65_536 * 32];
    old[..4].copy_from_slice(b"DQSH");
    old[4..8].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&shm, &old).unwrap();

    let queue = AddressOptions::new()
        .worker("w-2")
        .open_str(&address)
        .unwrap();
    let lease = queue.lease().unwrap().expect("the job");
    let held = queue.leases(10).unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].worker.as_deref(), Some("w-2"));
    assert!(held[0].since.is_some(), "{held:?}");

    // A process of the old layout shares the queue now: the file it maps
    // says layout 1.
    let control = std::fs::OpenOptions::new().write(true).open(&shm).unwrap();
    control.write_all_at(&1u32.to_le_bytes(), 4).unwrap();
    match AddressOptions::new().open_str(&address) {
        Err(dque::Error::UnsupportedVersion {
            path,
            found: 1,
            supported: 2,
        }) => assert_eq!(path, shm),
        Err(e) => panic!("another refusal: {e}"),
        Ok(_) => panic!("joined a queue shared under another layout"),
    }
    control.write_all_at(&2u32.to_le_bytes(), 4).unwrap();
    assert_eq!(
        queue.leases(10).unwrap().len(),
        1,
        "the refusal changed nothing"
    );
    let other = AddressOptions::new().open_str(&address).unwrap();
    assert_eq!(other.leases(10).unwrap()[0].worker.as_deref(), Some("w-2"));
    queue.ack(lease).unwrap();
    other.close().unwrap();
    queue.close().unwrap();
}

/// A worker name longer than a control-file slot holds is refused before
/// anything is made (an error has no effect); the longest it holds is kept
/// whole.
#[test]
fn an_embedded_worker_name_too_long_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let refused = JobOptions::new().worker("w".repeat(189)).create(&path);
    assert!(
        matches!(
            refused,
            Err(dque::Error::InvalidOption { name: "worker", .. })
        ),
        "{refused:?}"
    );
    assert!(!path.exists());
    let longest = "é".repeat(94);
    let queue = JobOptions::new()
        .worker(longest.clone())
        .queue(dque::Options::new().shared(true))
        .create(&path)
        .unwrap();
    queue.enqueue(NewJob::new("x")).unwrap();
    let lease = queue.lease().unwrap().unwrap();
    let other = JobOptions::new()
        .queue(dque::Options::new().shared(true))
        .open(&path)
        .unwrap();
    assert_eq!(other.leases(1).unwrap()[0].worker, Some(longest));
    queue.ack(lease).unwrap();
}

#[test]
fn an_embedded_queue_without_leases_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let q: Arc<dyn JobQueue> = Arc::new(EmbeddedJobs::create(dir.path().join("q")).unwrap());
    q.enqueue(NewJob::new("x")).unwrap();
    let (page, _) = pages(q);
    assert!(page.contains("No job is leased."), "{page}");
}

/// A named worker on a server: the page shows its name, escaped.
fn named_worker_is_shown(address: &str) {
    let address: Address = address.parse().unwrap();
    let producer: Arc<dyn JobQueue> = Arc::from(AddressOptions::new().open(&address).unwrap());
    for (name, shown) in [("mailer-7", "mailer-7"), (HOSTILE, HOSTILE_SHOWN)] {
        let worker = AddressOptions::new().worker(name).open(&address).unwrap();
        let row = held_job_is_shown(producer.clone(), worker.as_ref(), Some(shown), true).row;
        assert!(!row.contains("<script>"), "{row}");
        worker.close().unwrap();
    }
    producer.close().unwrap();
}

#[test]
fn a_postgres_worker_is_shown_by_its_name() {
    let Some(server) = PgServer::get() else {
        return;
    };
    named_worker_is_shown(&server.address(&format!("workers{}", std::process::id())));
}

#[test]
fn a_redis_worker_is_shown_by_its_name() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    named_worker_is_shown(&server.address(3, "workers"));
}

#[test]
fn dque_work_leases_under_the_name_it_is_given() {
    let Some(server) = PgServer::get() else {
        return;
    };
    dque_work_leases_under_its_name(&server.address(&format!("cliworkers{}", std::process::id())));
}

/// Bug pinned (issue 28): `dque work --worker NAME` on an embedded queue
/// leased as `host:pid`, the name given ignored.
#[test]
fn dque_work_on_an_embedded_queue_leases_under_the_name_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("cli").display().to_string();
    AddressOptions::new()
        .create(true)
        .open_str(&text)
        .unwrap()
        .close()
        .unwrap();
    dque_work_leases_under_its_name(&text);
}

/// `dque work --worker cli-7` on the queue at `text`, seen by another
/// handle while it runs a job.
fn dque_work_leases_under_its_name(text: &str) {
    let address: Address = text.parse().unwrap();
    let producer = AddressOptions::new().open(&address).unwrap();
    producer.enqueue(NewJob::new("x").id("slow")).unwrap();
    let mut work = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
        .args([
            "work",
            text,
            "--worker",
            "cli-7",
            "--until-empty",
            "--",
            "sleep",
            "3",
        ])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let leases = loop {
        let leases = producer.leases(10).unwrap();
        if !leases.is_empty() || std::time::Instant::now() > deadline {
            break leases;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(work.wait().unwrap().success());
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].worker.as_deref(), Some("cli-7"));
    assert!(producer.leases(10).unwrap().is_empty());
}
