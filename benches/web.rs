//! The dashboard's answer times on a big queue: every page and
//! `/metrics`, searches (filters no index answers read their bound of
//! 10 000 jobs) and the count page of an action on every match, in process
//! (tower's `oneshot`, no socket), each the median of `DQUE_BENCH_RUNS` runs
//! (default 5), on the embedded queue or (`DQUE_BENCH_WEB_BACKEND=postgres`)
//! on PostgreSQL, a throwaway server started from the binaries on PATH (the
//! tests' `tests/pg/`).
//!
//! ```sh
//! cargo bench --features web --bench web
//! DQUE_BENCH_WEB_JOBS=100000 cargo bench --features web --bench web   # quicker
//! PATH=/usr/lib/postgresql/15/bin:$PATH DQUE_BENCH_WEB_BACKEND=postgres \
//!     cargo bench --features web,postgres --bench web
//! ```
//!
//! The queue: `DQUE_BENCH_WEB_JOBS` ready jobs (default 1 000 000), 1 000
//! scheduled, 1 000 dead letters in 10 reasons, 1 000 jobs run (so the
//! stats have a day), and 10 jobs leased by worker `bench-worker`.
//! `DQUE_BENCH_DIR` picks the disk. `DQUE_BENCH_HOLD=FILE` writes the
//! queue's address to FILE once filled and waits until FILE is removed
//! (to look at the server's plans by hand).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use dque::jobs::{Address, AddressOptions, JobQueue, NewJob};
use dque::web::{Dashboard, DashboardOptions};
use dque::{Durability, Options};
use http_body_util::BodyExt;
use tower::ServiceExt;

#[cfg(feature = "postgres")]
#[path = "../tests/pg/mod.rs"]
mod pg;
#[cfg(feature = "postgres")]
#[path = "../tests/skip/mod.rs"]
mod skip;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let jobs = env("DQUE_BENCH_WEB_JOBS", 1_000_000);
    let runs = env("DQUE_BENCH_RUNS", 5).max(1);
    let dir = match std::env::var_os("DQUE_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let started = Instant::now();
    let backend = std::env::var("DQUE_BENCH_WEB_BACKEND").unwrap_or_default();
    let address_text: String = match backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => match pg::PgServer::get() {
            Some(server) => server.address(&format!("big{}", std::process::id())),
            None => return,
        },
        "" | "embedded" => dir.path().join("big").display().to_string(),
        other => panic!("DQUE_BENCH_WEB_BACKEND={other}: embedded or postgres (feature postgres)"),
    };
    let address: Address = address_text.parse().unwrap();
    let options = AddressOptions::new()
        .create(true)
        .embedded(Options::new().shared(true).durability(Durability::Turbo));
    let queue = options.open(&address).unwrap();
    for i in 0..1_000 {
        queue.enqueue(NewJob::new(format!("will run {i}"))).unwrap();
    }
    for i in 0..1_000 {
        queue
            .enqueue(NewJob::new(format!("will fail {i}")).priority(-1))
            .unwrap();
    }
    for i in 0..1_000 {
        let lease = queue.lease().unwrap().unwrap();
        queue
            .fail(lease, &format!("reason {}: job {i}", i % 10))
            .unwrap();
    }
    for _ in 0..1_000 {
        let lease = queue.lease().unwrap().unwrap();
        queue.ack(lease).unwrap();
    }
    let mut left = jobs;
    while left > 0 {
        let n = left.min(10_000);
        let batch = (0..n)
            .map(|i| {
                NewJob::new(format!("{{\"n\":{i},\"to\":\"someone@example.com\"}}"))
                    .header("klass", "send_email")
            })
            .collect();
        queue.enqueue_batch(batch).unwrap();
        left -= n;
    }
    let later = (0..1_000)
        .map(|i| NewJob::new(format!("later {i}")).delay(Duration::from_secs(3600)))
        .collect();
    queue.enqueue_batch(later).unwrap();
    // Held by a worker of its own name till the end (the workers page).
    let worker = options
        .clone()
        .worker("bench-worker")
        .open(&address)
        .unwrap();
    let held: Vec<_> = (0..10).map(|_| worker.lease().unwrap().unwrap()).collect();
    println!(
        "{} queue: {jobs} ready, 1000 scheduled, 1000 dead, 1000 run, 10 leased; filled in {:.1?}",
        if backend.is_empty() {
            "embedded"
        } else {
            &backend
        },
        started.elapsed()
    );
    if let Some(hold) = std::env::var_os("DQUE_BENCH_HOLD") {
        // For EXPLAIN by hand (psql): the queue's address written to file
        // `hold`; the bench goes on once that file is removed.
        std::fs::write(&hold, &address_text).unwrap();
        println!("holding: remove {} to go on", hold.to_string_lossy());
        while std::path::Path::new(&hold).exists() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let shown_queue: Arc<dyn JobQueue> = Arc::from(queue);
    let shown: Vec<(String, Arc<dyn JobQueue>)> = vec![("big".into(), shown_queue.clone())];
    let router = Dashboard::new(shown, DashboardOptions::new()).router();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let routes = [
        "/",
        "/queues/0",
        "/queues/0?state=waiting&page=200",
        "/queues/0?state=ready",
        "/queues/0?state=scheduled",
        "/queues/0?state=dead",
        "/queues/0?state=waiting&kind=send_email",
        "/queues/0?state=waiting&kind=none_such",
        "/queues/0?state=waiting&header=tenant%3Dnone",
        "/queues/0?state=ready&prefix=zz",
        "/queues/0?state=waiting&prefix=0",
        "/queues/0?state=scheduled&prefix=a",
        "/queues/0?state=leased",
        "/queues/0?state=scheduled&kind=send_email",
        "/queues/0?state=dead&prefix=zz",
        "/queues/0?state=dead&kind=none_such",
        "/queues/0?state=dead&reason=reason%203",
        "/queues/0?state=dead&reason=none_such",
        "/queues/0/bulk?state=waiting&kind=send_email&do=cancel",
        "/queues/0/bulk?state=waiting&kind=none_such&do=cancel",
        "/queues/0/bulk?state=dead&reason=reason%203&do=retry",
        "/queues/0/dead",
        "/queues/0/dead?reason=reason%203",
        "/workers",
        "/live",
        "/metrics",
    ];
    println!("{:<56} {:>10} {:>10}", "route", "median", "bytes");
    for route in routes {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..runs {
            let request = Request::get(route).body(Body::empty()).unwrap();
            let t = Instant::now();
            let body = runtime.block_on(async {
                let response = router.clone().oneshot(request).await.unwrap();
                assert!(
                    response.status().is_success(),
                    "{route}: {}",
                    response.status()
                );
                response.into_body().collect().await.unwrap().to_bytes()
            });
            times.push(t.elapsed());
            bytes = body.len();
        }
        times.sort();
        println!("{route:<56} {:>10.2?} {bytes:>10}", times[times.len() / 2]);
    }
    // The searches alone, as a page of 50 asks (51 matches, a bound of
    // 10 000 jobs read): the pages above also count the queue's jobs.
    {
        use dque::jobs::{JobFilter, SearchState};
        let f = JobFilter::new;
        let searches = [
            ("ready", f().state(SearchState::Ready)),
            ("scheduled", f().state(SearchState::Scheduled)),
            ("leased", f().state(SearchState::Leased)),
            (
                "waiting, kind send_email",
                f().header("klass", "send_email")
                    .state(SearchState::Waiting),
            ),
            (
                "waiting, kind none_such",
                f().header("klass", "none_such").state(SearchState::Waiting),
            ),
            (
                "ready, kind send_email, max 10 000 (a bulk action)",
                f().header("klass", "send_email").state(SearchState::Ready),
            ),
            (
                "scheduled, kind none_such",
                f().header("klass", "none_such")
                    .state(SearchState::Scheduled),
            ),
            (
                "waiting, header tenant=none",
                f().header("tenant", "none").state(SearchState::Waiting),
            ),
            (
                "waiting, prefix zz",
                f().id_prefix("zz").state(SearchState::Waiting),
            ),
            (
                "waiting, prefix 0",
                f().id_prefix("0").state(SearchState::Waiting),
            ),
            ("any, prefix zz", f().id_prefix("zz")),
            ("any, kind none_such", f().header("klass", "none_such")),
            ("dead", f().state(SearchState::Dead)),
            (
                "dead, reason reason 3",
                f().reason("reason 3").state(SearchState::Dead),
            ),
            (
                "dead, reason none_such",
                f().reason("none_such").state(SearchState::Dead),
            ),
            (
                "dead, prefix zz",
                f().id_prefix("zz").state(SearchState::Dead),
            ),
        ];
        println!(
            "{:<56} {:>10} {:>8} {:>8} {:>9}",
            "search (max 51, scan 10 000)", "median", "found", "scanned", "complete"
        );
        for (label, filter) in searches {
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let t = Instant::now();
                let max = if label.contains("max 10 000") {
                    10_000
                } else {
                    51
                };
                let found = shown_queue.search(&filter, max, 10_000).unwrap();
                times.push(t.elapsed());
                last = Some(found);
            }
            times.sort();
            let found = last.unwrap();
            println!(
                "{label:<56} {:>10.2?} {:>8} {:>8} {:>9}",
                times[times.len() / 2],
                found.jobs.len(),
                found.scanned,
                found.complete
            );
        }
    }
    // A bulk retry's cost: the 1 000 dead letters requeued one by one
    // (each call reads the dead letters to find its own), then, failed
    // again, in one pass (`requeue_dead_many`, what the dashboard uses).
    let queue = &shown_queue;
    let dead_ids = || -> Vec<String> {
        queue
            .dead(10_000)
            .unwrap()
            .into_iter()
            .map(|d| d.job.id)
            .collect()
    };
    let fail_again = |n: usize| {
        for _ in 0..n {
            let lease = queue.lease().unwrap().unwrap();
            queue.fail(lease, "reason 0: again").unwrap();
        }
    };
    let ids = dead_ids();
    let t = Instant::now();
    for id in &ids {
        queue.requeue_dead(id).unwrap();
    }
    println!(
        "requeue {} dead letters one by one: {:.2?}",
        ids.len(),
        t.elapsed()
    );
    fail_again(ids.len());
    let ids = dead_ids();
    let t = Instant::now();
    let outcomes = queue.requeue_dead_many(&ids);
    assert!(outcomes.iter().all(Result::is_ok));
    println!(
        "requeue {} dead letters in one pass: {:.2?}",
        ids.len(),
        t.elapsed()
    );
    // A bulk cancel's cost: 1 000 jobs with ids dque made up, the most one
    // cancel of every match takes, each found by reading up to it.
    let filter = dque::jobs::JobFilter::new()
        .state(dque::jobs::SearchState::Ready)
        .header("klass", "send_email");
    let found = queue.search(&filter, 1_000, 10_000).unwrap();
    let t = Instant::now();
    for job in &found.jobs {
        queue.cancel(&job.job.id).unwrap();
    }
    println!(
        "cancel {} jobs with made-up ids one by one: {:.2?} ({:.2?} a job)",
        found.jobs.len(),
        t.elapsed(),
        t.elapsed() / found.jobs.len().max(1) as u32
    );
    // The same in one pass (`cancel_many`, what the dashboard uses), then
    // priority changes one by one and in one pass (`set_priority_many`).
    let batch = |what: &str, act: &dyn Fn(&[String]) -> Vec<dque::Result<()>>| {
        let found = queue.search(&filter, 1_000, 10_000).unwrap();
        let ids: Vec<String> = found.jobs.into_iter().map(|f| f.job.id).collect();
        let t = Instant::now();
        let outcomes = act(&ids);
        assert!(outcomes.iter().all(Result::is_ok), "{what}");
        println!(
            "{what} {} jobs with made-up ids: {:.2?} ({:.2?} a job)",
            ids.len(),
            t.elapsed(),
            t.elapsed() / ids.len().max(1) as u32
        );
    };
    batch("cancel_many", &|ids| queue.cancel_many(ids));
    batch("set_priority one by one", &|ids| {
        ids.iter().map(|id| queue.set_priority(id, 1)).collect()
    });
    batch("set_priority_many", &|ids| queue.set_priority_many(ids, 2));
    for lease in held {
        // Its lease may have ended during a long run.
        let _ = worker.release(lease);
    }
}
