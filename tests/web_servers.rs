//! The dashboard over PostgreSQL and Redis, on real throwaway servers
//! (`tests/pg/`, `tests/redis_server/`): the same pages and actions as on
//! the embedded queue, through the Jobs API alone. Without a server's
//! binaries a test says so and passes, except under `CI=true`.

mod pg;
mod redis_server;
mod skip;
mod web;

use std::sync::Arc;

use axum::http::StatusCode;
use dque::jobs::{JobQueue, PgOptions, RedisOptions};
use dque::web::DashboardOptions;
use pg::PgServer;
use redis_server::RedisServer;
use web::{fill, get, post, router};

/// The pages and actions every backend must serve alike.
async fn dashboard_works(q: Arc<dyn JobQueue>) {
    // A blocking client must not run on the runtime's own threads.
    let filled = q.clone();
    tokio::task::spawn_blocking(move || {
        fill(
            filled.as_ref(),
            3,
            1,
            1,
            &["exit 3: boom", "exit 3: bang", "timeout"],
        )
    })
    .await
    .unwrap();
    let app = router(vec![q.clone()], DashboardOptions::new());
    let overview = get(&app, "/").await;
    assert_eq!(overview.status, StatusCode::OK);
    for (key, shown) in [
        ("0.ready", "3"),
        ("0.scheduled", "1"),
        ("0.leased", "1"),
        ("0.dead", "3"),
    ] {
        assert!(
            overview
                .body
                .contains(&format!("data-live=\"{key}\">{shown}<")),
            "{key} {}",
            overview.body
        );
    }
    for path in [
        "/queues/0",
        "/queues/0?state=ready",
        "/queues/0?state=scheduled",
        "/queues/0?state=leased",
        "/queues/0?state=dead",
    ] {
        let page = get(&app, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
    }
    let dead = get(&app, "/queues/0/dead").await;
    assert!(
        dead.body.contains(">exit 3</a></td><td class=\"n\">2<"),
        "{}",
        dead.body
    );
    let csrf = dead.csrf_or_page(&app).await;
    let done = post(
        &app,
        "/queues/0/actions",
        &[
            ("csrf", &csrf),
            ("action", "requeue"),
            ("id", "d0"),
            ("id", "d1"),
        ],
    )
    .await;
    assert!(done.body.contains("Requeued 2 of 2 jobs."), "{}", done.body);
    let cancelled = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "cancel:r0")],
    )
    .await;
    assert!(
        cancelled.body.contains("Cancelled 1 of 1 jobs."),
        "{}",
        cancelled.body
    );
    let set = post(
        &app,
        "/queues/0/actions",
        &[
            ("csrf", &csrf),
            ("action", "priority"),
            ("priority", "-9"),
            ("id", "r1"),
        ],
    )
    .await;
    assert!(
        set.body.contains("Priority set for 1 of 1 jobs."),
        "{}",
        set.body
    );
    let read = q.clone();
    let counts = tokio::task::spawn_blocking(move || read.counts().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (counts.ready, counts.dead),
        (4, 1),
        "r1, r2, d0, d1 ready; d2 dead"
    );
    let metrics = get(&app, "/metrics").await;
    assert!(
        metrics.body.contains(&format!(
            "dque_jobs{{queue=\"{}\",state=\"ready\"}} 4",
            q.name()
        )),
        "{}",
        metrics.body
    );
    assert!(metrics.body.contains("dque_queue_up"), "{}", metrics.body);

    // The job page, from job_info: a ready job and a dead letter.
    let job = get(&app, "/queues/0/jobs/r1").await;
    assert_eq!(job.status, StatusCode::OK, "{}", job.body);
    assert!(
        job.body.contains("<td id=\"state\">ready</td>"),
        "{}",
        job.body
    );
    let dead = get(&app, "/queues/0/jobs/d2").await;
    assert!(
        dead.body.contains("<td id=\"state\">dead</td>"),
        "{}",
        dead.body
    );
    assert!(dead.body.contains("value=\"requeue:d2\""), "{}", dead.body);
    assert_eq!(
        get(&app, "/queues/0/jobs/nope").await.status,
        StatusCode::NOT_FOUND
    );

    // Pause and resume through the dashboard; the page shows its limits
    // and schedules sections.
    let page = get(&app, "/queues/0").await;
    assert!(page.body.contains("id=\"limits\"") && page.body.contains("id=\"schedules\""));
    let csrf = page.csrf();
    let paused = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "pause")],
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    let overview = get(&app, "/").await;
    assert!(overview.body.contains("badge paused"), "{}", overview.body);
    let resumed = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "resume")],
    )
    .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    let read = q.clone();
    let paused = tokio::task::spawn_blocking(move || read.is_paused().unwrap())
        .await
        .unwrap();
    assert!(!paused);
}

trait CsrfOf {
    async fn csrf_or_page(&self, app: &axum::Router) -> String;
}

impl CsrfOf for web::Answer {
    /// The page's CSRF token, or the queue page's when this one has no form.
    async fn csrf_or_page(&self, app: &axum::Router) -> String {
        if self.body.contains("name=\"csrf\"") {
            self.csrf()
        } else {
            get(app, "/queues/0").await.csrf()
        }
    }
}

/// Runs `scenario` on a runtime of its own, as [`check`] does.
fn run_on<F: std::future::Future<Output = ()>>(
    q: Arc<dyn JobQueue>,
    scenario: impl FnOnce(Arc<dyn JobQueue>) -> F,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(scenario(q.clone()));
    drop(runtime);
    drop(q);
}

/// Runs the check on a runtime of its own: the blocking clients are made
/// and dropped outside it (PostgreSQL's runs a runtime inside each call).
fn check(q: Arc<dyn JobQueue>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(dashboard_works(q.clone()));
    drop(runtime);
    drop(q);
}

#[test]
fn the_dashboard_serves_a_postgres_queue() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let name = format!("web{}", std::process::id());
    check(Arc::new(
        PgOptions::new()
            .connect(&server.url(), &name)
            .expect("connect"),
    ));
}

#[test]
fn the_dashboard_serves_a_redis_queue() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    check(Arc::new(
        RedisOptions::new()
            .connect(&server.url(0), "web")
            .expect("connect"),
    ));
}

#[test]
fn search_and_bulk_actions_on_a_postgres_queue() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let name = format!("websearch{}", std::process::id());
    let q = PgOptions::new()
        .connect(&server.url(), &name)
        .expect("connect");
    run_on(Arc::new(q), web::search::search_and_bulk);
}

#[test]
fn search_and_bulk_actions_on_a_redis_queue() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = RedisOptions::new()
        .connect(&server.url(0), "websearch")
        .expect("connect");
    run_on(Arc::new(q), web::search::search_and_bulk);
}

#[test]
fn a_selection_of_made_up_ids_on_a_postgres_queue() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let name = format!("webselect{}", std::process::id());
    let q = PgOptions::new()
        .connect(&server.url(), &name)
        .expect("connect");
    run_on(
        Arc::new(q),
        web::search::a_selection_of_made_up_ids_is_cancelled_and_moved,
    );
}

#[test]
fn a_selection_of_made_up_ids_on_a_redis_queue() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = RedisOptions::new()
        .connect(&server.url(0), "webselect")
        .expect("connect");
    run_on(
        Arc::new(q),
        web::search::a_selection_of_made_up_ids_is_cancelled_and_moved,
    );
}

/// The waiting list walked by its "more" links (a cursor each, issue 28)
/// lists every waiting job once in `waiting`'s order; a garbled cursor
/// is a 400.
async fn pages_by_cursor(q: Arc<dyn JobQueue>) {
    let filled = q.clone();
    let expected = tokio::task::spawn_blocking(move || {
        let jobs =
            (0..130).map(|i| dque::jobs::NewJob::new(format!("job {i}")).id(format!("j{i}")));
        filled.enqueue_batch(jobs.collect()).unwrap();
        let all = filled.waiting(1000).unwrap();
        all.into_iter().map(|w| w.job.id).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let app = router(vec![q.clone()], DashboardOptions::new());
    let (mut path, mut seen) = ("/queues/0".to_owned(), Vec::new());
    loop {
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        seen.extend(web::search::row_ids(&page.body));
        let marker = "rel=\"next\" href=\"";
        match page.body.find(marker) {
            Some(at) => {
                let rest = &page.body[at + marker.len()..];
                path = rest.split('"').next().unwrap().replace("&amp;", "&");
                assert!(path.contains("&after="), "{path}");
            }
            None => break,
        }
    }
    assert_eq!(seen, expected);
    let bad = get(&app, "/queues/0?state=waiting&page=2&after=c1.pR.1.2.3~0").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
}

#[test]
fn the_waiting_list_pages_by_cursor_on_a_postgres_queue() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let name = format!("webpages{}", std::process::id());
    run_on(
        Arc::new(
            PgOptions::new()
                .connect(&server.url(), &name)
                .expect("connect"),
        ),
        pages_by_cursor,
    );
}

#[test]
fn the_waiting_list_pages_by_cursor_on_a_redis_queue() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    run_on(
        Arc::new(
            RedisOptions::new()
                .connect(&server.url(0), "webpages")
                .expect("connect"),
        ),
        pages_by_cursor,
    );
}
