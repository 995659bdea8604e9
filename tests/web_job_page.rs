//! The dashboard's job page (`/queues/{n}/jobs/{id}`, over
//! `JobQueue::job_info`), the lists' links to it and the find box; pausing
//! and resuming a queue; the limits and schedules of a queue page. In
//! process, over the embedded backend.

mod web;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use dque::jobs::{EmbeddedJobs, JobQueue, NewJob, Schedule};
use dque::web::DashboardOptions;
use web::{encode, fill, get, post, router};

fn queue(dir: &tempfile::TempDir, name: &str) -> Arc<dyn JobQueue> {
    Arc::new(EmbeddedJobs::create(dir.path().join(name)).unwrap())
}

#[tokio::test]
async fn the_job_page_shows_one_job_in_each_state_with_the_actions_it_allows() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 2, 1, 1, &["exit 3: boom"]);
    q.enqueue(
        NewJob::new(r#"{"to":"a@b.c","n":[1,2]}"#)
            .id("json-1")
            .header("klass", "Mail"),
    )
    .unwrap();
    q.enqueue(NewJob::new(vec![0xffu8, 0x00, 0x7f]).id("bin-1"))
        .unwrap();
    let app = router(vec![q.clone()], DashboardOptions::new());

    // Each state: its name, and only the buttons it allows.
    for (id, state, buttons, absent) in [
        (
            "r0",
            "ready",
            &["cancel:r0", "priority:r0"][..],
            &["requeue:"][..],
        ),
        ("s0", "scheduled", &["cancel:s0"][..], &["requeue:"][..]),
        (
            "l0",
            "leased",
            &[][..],
            &["cancel:", "requeue:", "priority:"][..],
        ),
        (
            "d0",
            "dead",
            &["requeue:d0"][..],
            &["cancel:", "priority:"][..],
        ),
    ] {
        let page = get(&app, &format!("/queues/0/jobs/{id}")).await;
        assert_eq!(page.status, StatusCode::OK, "{id}");
        assert!(
            page.body
                .contains(&format!("<td id=\"state\">{state}</td>")),
            "{id}: {}",
            page.body
        );
        for b in buttons {
            assert!(
                page.body.contains(&format!("value=\"{b}\"")),
                "{id} offers {b}"
            );
        }
        for b in absent {
            assert!(
                !page.body.contains(&format!("value=\"{b}")),
                "{id} must not offer {b}"
            );
        }
        assert!(page.body.contains("id=\"history\""), "{id}");
    }
    let dead = get(&app, "/queues/0/jobs/d0").await;
    assert!(dead
        .body
        .contains("<pre id=\"last-error\">exit 3: boom</pre>"));

    // The body as JSON (pretty), as text, as hex; the headers.
    let json = get(&app, "/queues/0/jobs/json-1").await;
    assert!(json.body.contains("(JSON, "), "{}", json.body);
    assert!(json.body.contains("&quot;to&quot;: &quot;a@b.c&quot;"));
    assert!(json.body.contains("<code>klass</code>") && json.body.contains("<code>Mail</code>"));
    let text = get(&app, "/queues/0/jobs/r1").await;
    assert!(text.body.contains("(text, ") && text.body.contains(">ready 1</pre>"));
    let bin = get(&app, "/queues/0/jobs/bin-1").await;
    assert!(bin.body.contains("(hex, ") && bin.body.contains(">ff 00 7f</pre>"));

    // A completed job is still found (kept a day by default).
    let lease = q.lease().unwrap().expect("a job");
    let done_id = lease.id.clone();
    q.ack(lease).unwrap();
    let done = get(&app, &format!("/queues/0/jobs/{}", encode(&done_id))).await;
    assert!(
        done.body.contains("<td id=\"state\">completed</td>"),
        "{}",
        done.body
    );

    // No such job, no such queue.
    assert_eq!(
        get(&app, "/queues/0/jobs/nope").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/queues/9/jobs/r0").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn every_list_links_its_ids_to_the_job_page_and_the_find_box_goes_there() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 1, 0, 0, &["boom"]);
    q.enqueue(NewJob::new("x").id("a b/c?d")).unwrap();
    let app = router(vec![q], DashboardOptions::new());
    let list = get(&app, "/queues/0").await;
    assert!(
        list.body.contains("href=\"/queues/0/jobs/r0\""),
        "{}",
        list.body
    );
    assert!(list.body.contains("href=\"/queues/0/jobs/a%20b%2Fc%3Fd\""));
    assert!(list.body.contains("id=\"find\""), "the find box");
    // Bug pinned: the find box's field was named `id`, as the selection's
    // checkboxes are, so counting (or selecting) `input[name=id]` took it
    // for a job. Only the two jobs' checkboxes are named `id`.
    assert_eq!(list.body.matches("name=\"id\"").count(), 2, "{}", list.body);
    let dead = get(&app, "/queues/0/dead?reason=boom").await;
    assert!(dead.body.contains("href=\"/queues/0/jobs/d0\""));
    let odd = get(&app, "/queues/0/jobs/a%20b%2Fc%3Fd").await;
    assert_eq!(odd.status, StatusCode::OK, "an id with a slash is found");

    let found = get(&app, "/queues/0/jobs?job=%20r0%20").await;
    assert_eq!(found.status, StatusCode::SEE_OTHER);
    assert_eq!(found.header("location"), "/queues/0/jobs/r0");
    let odd = get(&app, &format!("/queues/0/jobs?job={}", encode("a b/c?d"))).await;
    assert_eq!(odd.header("location"), "/queues/0/jobs/a%20b%2Fc%3Fd");
    let empty = get(&app, "/queues/0/jobs?job=").await;
    assert_eq!(empty.header("location"), "/queues/0");
}

#[tokio::test]
async fn the_job_page_escapes_hostile_bodies_headers_ids_and_errors() {
    // Every piece of a job a client chose is shown escaped: a body (as
    // JSON and as text), a header value, an id, a failure reason.
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    let evil = "<script>alert(1)</script>\"'&";
    q.enqueue(
        NewJob::new(format!("{{\"x\":\"{}\"}}", "<img src=x onerror=alert(2)>"))
            .id("<b>id</b>")
            .header("h1", evil),
    )
    .unwrap();
    q.enqueue(NewJob::new(evil).id("plain")).unwrap();
    q.enqueue(NewJob::new("d").id("dead").priority(-10))
        .unwrap();
    let lease = q.lease().unwrap().expect("dead comes first");
    assert_eq!(lease.id, "dead");
    q.fail(lease, evil).unwrap();
    let app = router(vec![q], DashboardOptions::new());
    for id in ["<b>id</b>", "plain", "dead"] {
        let page = get(&app, &format!("/queues/0/jobs/{}", encode(id))).await;
        assert_eq!(page.status, StatusCode::OK, "{id}");
        for raw in ["<script>", "<img", "<b>id"] {
            assert!(
                !page.body.contains(raw),
                "{id}: {raw} unescaped in {}",
                page.body
            );
        }
    }
    let missing = get(&app, &format!("/queues/0/jobs/{}", encode("<script>x"))).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(!missing.body.contains("<script>x"));
}

#[tokio::test]
async fn the_job_pages_actions_act_and_come_back_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 1, 0, 0, &["boom"]);
    let app = router(vec![q.clone()], DashboardOptions::new());
    let page = get(&app, "/queues/0/jobs/r0").await;
    let csrf = page.csrf();
    let set = post(
        &app,
        "/queues/0/actions",
        &[
            ("csrf", &csrf),
            ("back", "/queues/0/jobs/r0"),
            ("priority", "-7"),
            ("row", "priority:r0"),
        ],
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    assert!(
        set.body.contains("href=\"/queues/0/jobs/r0\""),
        "back to the job"
    );
    assert_eq!(q.job_info("r0").unwrap().unwrap().job.priority, -7);
    let requeued = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "requeue:d0")],
    )
    .await;
    assert_eq!(requeued.status, StatusCode::OK);
    let after = get(&app, "/queues/0/jobs/d0").await;
    assert!(after.body.contains("<td id=\"state\">ready</td>"));

    // Read-only: the page, without a button.
    let ro = router(vec![q], DashboardOptions::new().read_only(true));
    let page = get(&ro, "/queues/0/jobs/r0").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("<form method=\"post\"") && !page.body.contains("job-actions"));
}

#[tokio::test]
async fn a_queue_is_paused_and_resumed_from_its_page_and_the_overview_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (queue(&dir, "alpha"), queue(&dir, "beta"));
    fill(a.as_ref(), 1, 0, 0, &[]);
    let app = router(vec![a.clone(), b], DashboardOptions::new());
    let page = get(&app, "/queues/0").await;
    assert!(page.body.contains("value=\"pause\""), "a pause button");
    assert!(!get(&app, "/").await.body.contains("paused"));

    // Without the CSRF token: refused, nothing changed.
    let refused = post(&app, "/queues/0/actions", &[("queue", "pause")]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(!a.is_paused().unwrap());

    let csrf = page.csrf();
    let paused = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "pause")],
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert!(a.is_paused().unwrap() && a.lease().unwrap().is_none());
    let page = get(&app, "/queues/0").await;
    assert!(page.body.contains("value=\"resume\"") && !page.body.contains("value=\"pause\""));
    let overview = get(&app, "/").await;
    assert_eq!(
        overview.body.matches("class=\"badge paused\"").count(),
        1,
        "alpha only"
    );

    let bad = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "drop")],
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(a.is_paused().unwrap(), "a bad verb changes nothing");

    let resumed = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "resume")],
    )
    .await;
    assert_eq!(resumed.status, StatusCode::OK);
    assert!(!a.is_paused().unwrap() && a.lease().unwrap().is_some());

    // Read-only: the state shown, no button, and the route is not served.
    a.pause().unwrap();
    let ro = router(vec![a.clone()], DashboardOptions::new().read_only(true));
    let page = get(&ro, "/queues/0").await;
    assert!(page.body.contains("badge paused") && !page.body.contains("value=\"resume\""));
    let post_ro = post(
        &ro,
        "/queues/0/actions",
        &[("csrf", &csrf), ("queue", "resume")],
    )
    .await;
    assert_ne!(post_ro.status, StatusCode::OK);
    assert!(a.is_paused().unwrap());
}

#[tokio::test]
async fn the_queue_page_shows_its_limits_and_schedules() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    let app = router(vec![q.clone()], DashboardOptions::new());
    let empty = get(&app, "/queues/0").await;
    assert!(empty.body.contains("id=\"limits\"") && empty.body.contains("None set."));
    assert!(empty.body.contains("id=\"schedules\""));

    q.set_limit("smtp", 2).unwrap();
    q.enqueue(NewJob::new("a").limit("smtp")).unwrap();
    let _held = q.lease().unwrap().expect("a");
    q.schedule(Schedule::every("<b>ping</b>", Duration::from_secs(90)).body("p"))
        .unwrap();
    q.schedule(Schedule::cron("nightly", "0 3 * * *").time_zone("Europe/Paris"))
        .unwrap();
    let page = get(&app, "/queues/0").await;
    assert!(
        page.body
            .contains("<td><code>smtp</code></td><td class=\"n\">2</td><td class=\"n\">1</td>"),
        "name, max, running: {}",
        page.body
    );
    assert!(page.body.contains("every 1m 30s"));
    assert!(page.body.contains("cron 0 3 * * * (Europe/Paris)"));
    assert!(page.body.contains("&lt;b&gt;ping&lt;/b&gt;") && !page.body.contains("<b>ping"));
    assert!(page.body.contains("<td>in "), "the nightly run is to come");
}
