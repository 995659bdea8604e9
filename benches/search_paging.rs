//! The embedded queue's search and paging at depth (issue 28), through
//! the Jobs API and the dashboard's queue page, in process:
//!
//! - searches no index answers, bounded at 10 000 jobs read (the
//!   dashboard's bound), native (`JobQueue::search`: one walk, heads
//!   only, bodies of matches) against the contract's default
//!   (`search_from_the_front`: `waiting(n)` in growing steps, every job
//!   decoded), both answers checked equal;
//! - a page of 50 waiting jobs at depth: `waiting_page` from a cursor
//!   against the old way (`waiting(skip + 51)`, the front re-read), and
//!   the queue page with `after=CURSOR`.
//!
//! Each figure is the median of `DQUE_BENCH_RUNS` runs (default 5).
//!
//! ```sh
//! cargo bench --features web --bench search_paging
//! DQUE_BENCH_SEARCH_JOBS=100000 cargo bench --features web --bench search_paging  # quicker
//! PATH=/usr/lib/postgresql/15/bin:$PATH DQUE_BENCH_SEARCH_BACKEND=postgres \
//!     cargo bench --features web,postgres --bench search_paging   # the pages on PostgreSQL
//! ```
//!
//! The queue: `DQUE_BENCH_SEARCH_JOBS` ready jobs (default 1 000 000) of
//! kind `send_email`, three of kind `rare` among the first 10 000, 1 000
//! scheduled, 1 000 dead letters in 10 reasons. `DQUE_BENCH_DIR` picks
//! the disk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use dque::jobs::{
    search_from_the_front, EmbeddedJobs, JobFilter, JobOptions, JobQueue, NewJob, PageCursor,
    SearchState,
};
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

/// The median time of `runs` runs of `f`, and its last answer.
fn median<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    times.sort();
    (times[times.len() / 2], last.expect("one run"))
}

fn main() {
    let jobs = env("DQUE_BENCH_SEARCH_JOBS", 1_000_000);
    let runs = env("DQUE_BENCH_RUNS", 5).max(1);
    if std::env::var("DQUE_BENCH_SEARCH_BACKEND").as_deref() == Ok("postgres") {
        #[cfg(feature = "postgres")]
        postgres_pages(jobs, runs);
        return;
    }
    let dir = match std::env::var_os("DQUE_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let started = Instant::now();
    let queue: EmbeddedJobs = JobOptions::new()
        .queue(Options::new().durability(Durability::Turbo))
        .create(dir.path().join("big"))
        .unwrap();
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
    let mut done = 0;
    while done < jobs {
        let n = (jobs - done).min(10_000);
        let batch = (done..done + n)
            .map(|i| {
                let kind = match i {
                    2_000 | 5_000 | 8_000 => "rare",
                    _ => "send_email",
                };
                NewJob::new(format!("{{\"n\":{i},\"to\":\"someone@example.com\"}}"))
                    .header("klass", kind)
            })
            .collect();
        queue.enqueue_batch(batch).unwrap();
        done += n;
    }
    let later = (0..1_000)
        .map(|i| NewJob::new(format!("later {i}")).delay(Duration::from_secs(3600)))
        .collect();
    queue.enqueue_batch(later).unwrap();
    queue.sync().unwrap();
    println!(
        "embedded queue: {jobs} ready, 1000 scheduled, 1000 dead; filled in {:.1?}",
        started.elapsed()
    );

    println!(
        "\n{:<52} {:>10} {:>10} {:>8} {:>8}",
        "search (max 51, bound 10 000)", "native", "default", "found", "read"
    );
    let searches = [
        (
            "kind none_such (matches none)",
            JobFilter::new().header("klass", "none_such"),
        ),
        (
            "kind rare (3 matches)",
            JobFilter::new().header("klass", "rare"),
        ),
        (
            "ready, id prefix zz (matches none)",
            JobFilter::new().state(SearchState::Ready).id_prefix("zz"),
        ),
        (
            "dead, reason 3 (100 matches)",
            JobFilter::new().state(SearchState::Dead).reason("reason 3"),
        ),
        (
            "kind send_email (matches all)",
            JobFilter::new().header("klass", "send_email"),
        ),
    ];
    for (name, filter) in &searches {
        let (native_time, native) = median(runs, || queue.search(filter, 51, 10_000).unwrap());
        let (default_time, default) = median(runs, || {
            search_from_the_front(&queue, filter, 51, 10_000).unwrap()
        });
        assert_eq!(native, default, "{name}: the same answer");
        println!(
            "{name:<52} {native_time:>10.2?} {default_time:>10.2?} {:>8} {:>8}",
            native.jobs.len(),
            native.scanned
        );
    }

    // Cursors at depth, found by a walk of big pages.
    let depths = [0usize, 9_950, jobs / 2, jobs.saturating_sub(1_000)];
    let mut cursors: Vec<(usize, Option<PageCursor>)> = Vec::new();
    let (mut at, mut after): (usize, Option<PageCursor>) = (0, None);
    for &depth in &depths {
        while at < depth {
            let step = (depth - at).min(10_000);
            let page = queue.waiting_page(after.as_ref(), step).unwrap();
            at += page.jobs.len();
            after = page.next;
        }
        cursors.push((depth, after.clone()));
    }
    println!(
        "\n{:<52} {:>10} {:>10}",
        "a page of 50 waiting jobs after", "by cursor", "from front"
    );
    for (depth, cursor) in &cursors {
        let (by_cursor, page) = median(runs, || queue.waiting_page(cursor.as_ref(), 50).unwrap());
        // The old way: the front read up to the page (deep ones once: slow).
        let front_runs = if *depth <= 10_000 { runs } else { 1 };
        let (from_front, front) = median(front_runs, || queue.waiting(depth + 51).unwrap());
        let front_ids: Vec<_> = front[*depth..].iter().take(50).map(|w| &w.job.id).collect();
        let page_ids: Vec<_> = page.jobs.iter().map(|w| &w.job.id).collect();
        assert_eq!(page_ids, front_ids, "after {depth}: the same page");
        println!(
            "{:<52} {by_cursor:>10.2?} {from_front:>10.2?}",
            format!("{depth} jobs")
        );
    }

    let shown: Arc<dyn JobQueue> = Arc::new(queue);
    let router = Dashboard::new(vec![("big".into(), shown)], DashboardOptions::new()).router();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut routes = vec![
        "/queues/0".to_owned(),
        "/queues/0?state=waiting&page=200".to_owned(),
        "/queues/0?state=waiting&kind=none_such".to_owned(),
        "/queues/0?state=waiting&kind=rare".to_owned(),
    ];
    for (depth, cursor) in &cursors[1..] {
        if let Some(cursor) = cursor {
            let page = depth / 50 + 1;
            routes.push(format!(
                "/queues/0?state=waiting&page={page}&after={cursor}"
            ));
        }
    }
    println!("\n{:<52} {:>10} {:>10}", "queue page", "median", "bytes");
    for route in &routes {
        let (time, bytes) = median(runs, || {
            let request = Request::get(route.as_str()).body(Body::empty()).unwrap();
            runtime.block_on(async {
                let response = router.clone().oneshot(request).await.unwrap();
                assert!(response.status().is_success(), "{route}");
                response
                    .into_body()
                    .collect()
                    .await
                    .unwrap()
                    .to_bytes()
                    .len()
            })
        });
        let shown = match route.find("&after=") {
            Some(at) => format!("{}&after=…", &route[..at]),
            None => route.clone(),
        };
        println!("{shown:<52} {time:>10.2?} {bytes:>10}");
    }
}

/// A page of 50 at depth on PostgreSQL: `waiting_page` from a cursor (a
/// row comparison on the lease index) against `waiting(skip + 51)`.
#[cfg(feature = "postgres")]
fn postgres_pages(jobs: usize, runs: usize) {
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let address: dque::jobs::Address = server
        .address(&format!("pages{}", std::process::id()))
        .parse()
        .unwrap();
    let queue = dque::jobs::AddressOptions::new()
        .create(true)
        .open(&address)
        .unwrap();
    let started = Instant::now();
    let mut done = 0;
    while done < jobs {
        let n = (jobs - done).min(10_000);
        let batch = (done..done + n)
            .map(|i| NewJob::new(format!("{{\"n\":{i}}}")).header("klass", "send_email"))
            .collect();
        queue.enqueue_batch(batch).unwrap();
        done += n;
    }
    println!(
        "postgres queue: {jobs} ready; filled in {:.1?}",
        started.elapsed()
    );
    let depths = [0usize, 9_950, jobs / 2, jobs.saturating_sub(1_000)];
    let (mut at, mut after): (usize, Option<PageCursor>) = (0, None);
    println!(
        "{:<52} {:>10} {:>10}",
        "a page of 50 waiting jobs after", "by cursor", "from front"
    );
    for &depth in &depths {
        while at < depth {
            let step = (depth - at).min(10_000);
            let page = queue.waiting_page(after.as_ref(), step).unwrap();
            at += page.jobs.len();
            after = page.next;
        }
        let (by_cursor, page) = median(runs, || queue.waiting_page(after.as_ref(), 50).unwrap());
        let front_runs = if depth <= 10_000 { runs } else { 1 };
        let (from_front, front) = median(front_runs, || queue.waiting(depth + 51).unwrap());
        let front_ids: Vec<_> = front[depth..].iter().take(50).map(|w| &w.job.id).collect();
        let page_ids: Vec<_> = page.jobs.iter().map(|w| &w.job.id).collect();
        assert_eq!(page_ids, front_ids, "after {depth}: the same page");
        println!(
            "{:<52} {by_cursor:>10.2?} {from_front:>10.2?}",
            format!("{depth} jobs")
        );
    }
}
