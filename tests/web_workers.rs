//! The workers page (`GET /workers`, over `JobQueue::leases`): who holds
//! which job, since when, until when, on every backend (PostgreSQL and
//! Redis on real throwaway servers, `tests/pg/`, `tests/redis_server/`;
//! without their binaries those tests say so and pass, except under
//! `CI=true`). A worker's name comes from its handle
//! (`AddressOptions::worker`, `dque work --worker`); the embedded queue
//! names the process holding a lease, `host:pid`.

mod pg;
mod redis_server;
mod skip;
mod web;

use std::sync::Arc;

use axum::http::StatusCode;
use dque::jobs::{Address, AddressOptions, EmbeddedJobs, JobQueue, NewJob};
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

/// Enqueues `held` (kind `mail`) and `idle` (ready) through `producer`,
/// leases `held` through `worker`, and checks the workers page over
/// `producer`: `held` is shown with `name_shown` (escaped), its kind, its
/// attempt, its lease's end (and start when `since_known`), and `idle`
/// is not. Returns the page.
fn held_job_is_shown(
    producer: Arc<dyn JobQueue>,
    worker: &dyn JobQueue,
    name_shown: Option<&str>,
    since_known: bool,
) -> String {
    producer
        .enqueue(
            NewJob::new("to ops")
                .id("held")
                .header("klass", "mail")
                .priority(-1),
        )
        .unwrap();
    producer.enqueue(NewJob::new("later").id("idle")).unwrap();
    let lease = worker.lease().unwrap().expect("a job");
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
    // The page as it was, for the caller's own checks.
    row.to_owned()
}

#[test]
fn the_embedded_queue_shows_the_process_holding_a_lease() {
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
    let row = held_job_is_shown(producer.clone(), producer.as_ref(), None, false);
    assert!(
        row.contains(&format!(":{}</code>", std::process::id())),
        "host:pid of this process: {row}"
    );
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
        let row = held_job_is_shown(producer.clone(), worker.as_ref(), Some(shown), true);
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
    let text = server.address(&format!("cliworkers{}", std::process::id()));
    let address: Address = text.parse().unwrap();
    let producer = AddressOptions::new().open(&address).unwrap();
    producer.enqueue(NewJob::new("x").id("slow")).unwrap();
    let mut work = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
        .args([
            "work",
            &text,
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
