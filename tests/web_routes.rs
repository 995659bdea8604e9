//! Every route of the dashboard (`dque::web`) in process, over the
//! embedded backend: what each page shows, paging, the actions and what
//! they change, the live numbers, `/metrics`, and read-only mode.

mod web;

use std::sync::Arc;

use axum::http::StatusCode;
use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
use dque::web::DashboardOptions;
use web::{fill, get, post, router};

fn queue(dir: &tempfile::TempDir, name: &str) -> Arc<dyn JobQueue> {
    Arc::new(EmbeddedJobs::create(dir.path().join(name)).unwrap())
}

/// The text of cell `data-live="KEY"` of a page.
fn live_cell(body: &str, key: &str) -> String {
    let marker = format!("data-live=\"{key}\">");
    let at = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no {key} in {body}"))
        + marker.len();
    body[at..].split('<').next().unwrap().to_owned()
}

#[tokio::test]
async fn the_overview_shows_every_queue_by_state() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (queue(&dir, "alpha"), queue(&dir, "beta"));
    fill(a.as_ref(), 3, 2, 1, &["exit 3: boom", "timeout"]);
    fill(b.as_ref(), 0, 0, 0, &[]);
    let app = router(vec![a, b], DashboardOptions::new());
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.header("content-type").starts_with("text/html"));
    for (key, shown) in [
        ("0.ready", "3"),
        ("0.scheduled", "2"),
        ("0.leased", "1"),
        ("0.dead", "2"),
        ("1.ready", "0"),
        ("1.dead", "0"),
    ] {
        assert_eq!(live_cell(&page.body, key), shown, "{key}");
    }
    assert!(page.body.contains("/queues/0\">alpha<") && page.body.contains("/queues/1\">beta<"));
    assert_ne!(
        live_cell(&page.body, "0.oldest_ready"),
        "–",
        "alpha has ready jobs"
    );
    assert_eq!(
        live_cell(&page.body, "1.oldest_ready"),
        "–",
        "beta has none"
    );
    assert_eq!(live_cell(&page.body, "0.failed_today"), "2");
}

#[tokio::test]
async fn the_queue_page_lists_each_state_and_pages_through_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 120, 3, 2, &["boom"]);
    let app = router(vec![q], DashboardOptions::new());
    let rows = |body: &str| body.matches("name=\"id\" value=").count();
    let first = get(&app, "/queues/0").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(rows(&first.body), 50);
    assert!(first.body.contains("rel=\"next\""));
    assert!(first.body.contains("<svg"), "the charts");
    // 2 leased, 120 ready, 3 scheduled = 125 waiting: the third page holds 25.
    let third = get(&app, "/queues/0?state=waiting&page=3").await;
    assert_eq!(rows(&third.body), 25);
    assert!(!third.body.contains("rel=\"next\""));
    // Pages by key: the way back is the first page.
    assert!(third.body.contains("rel=\"first\""));
    for (state, count, an_id) in [
        ("ready", 50, "r0"),
        ("leased", 2, "l1"),
        ("scheduled", 3, "s2"),
        ("dead", 1, "d0"),
    ] {
        let page = get(&app, &format!("/queues/0?state={state}")).await;
        assert_eq!(page.status, StatusCode::OK, "{state}");
        assert_eq!(rows(&page.body), count, "{state}");
        assert!(
            page.body.contains(&format!("value=\"{an_id}\"")),
            "{state}: {an_id}"
        );
    }
    let ready3 = get(&app, "/queues/0?state=ready&page=3").await;
    assert_eq!(rows(&ready3.body), 20, "120 ready: 50, 50, 20");
    // Nonsense parameters fall back to the defaults; a missing queue is a 404 page.
    assert_eq!(
        get(&app, "/queues/0?state=bogus&page=-4").await.status,
        StatusCode::OK
    );
    for missing in ["/queues/1", "/queues/x", "/queues/1/dead", "/nowhere"] {
        let page = get(&app, missing).await;
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{missing}");
        assert!(
            page.header("content-type").starts_with("text/html"),
            "{missing}"
        );
    }
}

#[tokio::test]
async fn dead_letters_are_grouped_by_failure_reason() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(
        q.as_ref(),
        0,
        0,
        0,
        &["exit 3: disk full", "exit 3: no route", "timeout"],
    );
    let app = router(vec![q.clone()], DashboardOptions::new());
    let page = get(&app, "/queues/0/dead").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains("reason=exit%203\">exit 3</a></td><td class=\"n\">2<"),
        "{}",
        page.body
    );
    assert!(page.body.contains(">timeout</a></td><td class=\"n\">1<"));
    let group = get(&app, "/queues/0/dead?reason=exit%203").await;
    assert!(group.body.contains("Requeue every job of this reason (2)"));
    assert!(group.body.contains("value=\"d0\"") && group.body.contains("value=\"d1\""));
    assert!(
        !group.body.contains("value=\"d2\""),
        "timeout is another group"
    );
    // The group's button requeues both, and only them.
    let csrf = group.csrf();
    let done = post(
        &app,
        "/queues/0/actions",
        &[
            ("csrf", &csrf),
            ("action", "requeue"),
            ("id", "d0"),
            ("id", "d1"),
            ("back", "/queues/0/dead"),
        ],
    )
    .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("Requeued 2 of 2 jobs."));
    assert!(done.body.contains("href=\"/queues/0/dead\""));
    let counts = q.counts().unwrap();
    assert_eq!((counts.ready, counts.dead), (2, 1));
}

#[tokio::test]
async fn actions_change_one_job_or_a_selection_through_the_jobs_api() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 4, 1, 1, &["boom"]);
    let app = router(vec![q.clone()], DashboardOptions::new());
    let csrf = get(&app, "/queues/0").await.csrf();
    let act = |fields: Vec<(&'static str, String)>| {
        let app = app.clone();
        let csrf = csrf.clone();
        async move {
            let mut all: Vec<(&str, &str)> = vec![("csrf", &csrf)];
            all.extend(fields.iter().map(|(k, v)| (*k, v.as_str())));
            post(&app, "/queues/0/actions", &all).await
        }
    };
    // A row's button: one job, whatever is ticked.
    let one = act(vec![
        ("row", "cancel:r0".into()),
        ("action", "cancel".into()),
        ("id", "r1".into()),
    ])
    .await;
    assert!(one.body.contains("Cancelled 1 of 1 jobs."), "{}", one.body);
    // A selection's priority.
    let set = act(vec![
        ("action", "priority".into()),
        ("priority", "-7".into()),
        ("id", "r2".into()),
        ("id", "s0".into()),
    ])
    .await;
    assert!(
        set.body.contains("Priority set for 2 of 2 jobs."),
        "{}",
        set.body
    );
    let priorities: Vec<(String, i32)> = q
        .waiting(10)
        .unwrap()
        .into_iter()
        .map(|w| (w.job.id, w.job.priority))
        .collect();
    assert!(
        priorities.contains(&("r2".into(), -7)) && priorities.contains(&("s0".into(), -7)),
        "{priorities:?}"
    );
    assert!(
        !priorities.iter().any(|(id, _)| id == "r0"),
        "r0 was cancelled"
    );
    // A selection with a job the action cannot take: the others are done, the refusal is shown.
    let mixed = act(vec![
        ("action", "cancel".into()),
        ("id", "r3".into()),
        ("id", "l0".into()),
        ("id", "nope".into()),
    ])
    .await;
    assert_eq!(mixed.status, StatusCode::OK);
    assert!(
        mixed.body.contains("Cancelled 1 of 3 jobs."),
        "{}",
        mixed.body
    );
    assert!(mixed.body.contains("<code>l0</code>") && mixed.body.contains("<code>nope</code>"));
    // A dead letter back.
    let requeued = act(vec![("row", "requeue:d0".into())]).await;
    assert!(requeued.body.contains("Requeued 1 of 1 jobs."));
    let counts = q.counts().unwrap();
    assert_eq!(
        (counts.ready, counts.scheduled, counts.leased, counts.dead),
        (3, 1, 1, 0),
        "r1, r2, d0 ready; s0 scheduled; l0 leased"
    );
    // Nothing doable: 400 and nothing changed; nothing done: 409.
    let none = act(vec![("action", "cancel".into())]).await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST);
    let bad = act(vec![
        ("action", "priority".into()),
        ("priority", "high".into()),
        ("id", "r1".into()),
    ])
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let failed = act(vec![("row", "requeue:r1".into())]).await;
    assert_eq!(failed.status, StatusCode::CONFLICT);
    assert_eq!(q.counts().unwrap(), counts);
}

// Issue 28: the dashboard could not run a scheduled job now (Sidekiq's
// "Retry now" / "Add to queue"); a row's button and the selection's do,
// through `JobQueue::run_now`, and only with the page's CSRF token.
#[tokio::test]
async fn run_now_makes_scheduled_jobs_ready_from_a_row_or_a_selection() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 1, 3, 1, &[]);
    let app = router(vec![q.clone()], DashboardOptions::new());
    let page = get(&app, "/queues/0").await;
    assert!(page.body.contains("value=\"run_now:s0\""), "{}", page.body);
    assert!(
        !page.body.contains("value=\"run_now:r0\"") && !page.body.contains("value=\"run_now:l0\""),
        "only scheduled rows have the button"
    );
    let csrf = page.csrf();
    let before = q.counts().unwrap();
    let forged = post(
        &app,
        "/queues/0/actions",
        &[("csrf", "forged"), ("row", "run_now:s0")],
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    assert_eq!(
        q.counts().unwrap(),
        before,
        "a refused POST changes nothing"
    );
    let one = post(
        &app,
        "/queues/0/actions",
        &[("csrf", &csrf), ("row", "run_now:s0")],
    )
    .await;
    assert!(
        one.body.contains("Made ready now 1 of 1 jobs."),
        "{}",
        one.body
    );
    assert_eq!(q.counts().unwrap().scheduled, 2);
    // A selection: the scheduled job is made ready, the leased and the
    // unknown ones are not waiting and are listed as not done.
    let fields = [
        ("csrf", csrf.as_str()),
        ("action", "run_now"),
        ("id", "s1"),
        ("id", "l0"),
        ("id", "nope"),
    ];
    let some = post(&app, "/queues/0/actions", &fields).await;
    assert_eq!(some.status, StatusCode::OK);
    assert!(
        some.body.contains("Made ready now 1 of 3 jobs."),
        "{}",
        some.body
    );
    assert!(some.body.contains("<code>l0</code>") && some.body.contains("<code>nope</code>"));
    let counts = q.counts().unwrap();
    assert_eq!(
        (counts.ready, counts.scheduled, counts.leased),
        (3, 1, 1),
        "{counts:?}"
    );
    let leased: Vec<String> =
        std::iter::from_fn(|| q.lease().unwrap().map(|l| l.job.id.clone())).collect();
    assert_eq!(
        leased,
        ["r0", "s0", "s1"],
        "ready behind the jobs ready before"
    );
}

#[tokio::test]
async fn live_numbers_and_assets_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 2, 1, 0, &["x"]);
    let app = router(vec![q], DashboardOptions::new());
    let live = get(&app, "/live").await;
    assert_eq!(live.header("content-type"), "application/json");
    let json: serde_json::Value = serde_json::from_str(&live.body).unwrap();
    let first = &json["queues"][0];
    assert_eq!(
        (
            first["queue"].as_str(),
            first["ready"].as_str(),
            first["scheduled"].as_str(),
            first["dead"].as_str()
        ),
        (Some("q"), Some("2"), Some("1"), Some("1"))
    );
    let script = get(&app, "/static/dque.js").await;
    assert!(script.header("content-type").starts_with("text/javascript"));
    assert!(script.body.contains("fetch(\"/live\""));
    assert!(get(&app, "/static/dque.css")
        .await
        .header("content-type")
        .starts_with("text/css"));
    assert_eq!(
        get(&app, "/static/other.js").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn metrics_are_collected_at_scrape_time() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 3, 1, 0, &["exit 1: no"]);
    let app = router(vec![q.clone()], DashboardOptions::new());
    let before = get(&app, "/metrics").await;
    assert_eq!(before.status, StatusCode::OK);
    assert!(before
        .header("content-type")
        .starts_with("application/openmetrics-text"));
    for line in [
        "dque_jobs{queue=\"q\",state=\"ready\"} 3",
        "dque_jobs{queue=\"q\",state=\"scheduled\"} 1",
        "dque_jobs{queue=\"q\",state=\"dead\"} 1",
        "dque_jobs_failed_total{queue=\"q\"} 1",
        "dque_jobs_completed_total{queue=\"q\"} 0",
        "dque_queue_up{queue=\"q\"} 1",
        "# TYPE dque_job_wait_seconds histogram",
        "# EOF",
    ] {
        assert!(before.body.contains(line), "{line} in\n{}", before.body);
    }
    // Two jobs run: the next scrape counts them, in the first bucket.
    for _ in 0..2 {
        let lease = q.lease().unwrap().unwrap();
        q.ack(lease).unwrap();
    }
    let after = get(&app, "/metrics").await;
    for line in [
        "dque_jobs{queue=\"q\",state=\"ready\"} 1",
        "dque_jobs_completed_total{queue=\"q\"} 2",
        "dque_job_run_seconds_count{queue=\"q\"} 2",
        "dque_job_run_seconds_bucket{le=\"1.0\",queue=\"q\"} 2",
        "dque_job_run_seconds_bucket{le=\"+Inf\",queue=\"q\"} 2",
        "dque_job_wait_seconds_count{queue=\"q\"} 3",
    ] {
        assert!(after.body.contains(line), "{line} in\n{}", after.body);
    }
}

#[tokio::test]
async fn read_only_serves_no_actions() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 2, 0, 0, &["boom"]);
    let writable = router(vec![q.clone()], DashboardOptions::new());
    let csrf = get(&writable, "/queues/0").await.csrf();
    let app = router(vec![q.clone()], DashboardOptions::new().read_only(true));
    for path in [
        "/",
        "/queues/0",
        "/queues/0?state=dead",
        "/queues/0/dead",
        "/queues/0/dead?reason=boom",
    ] {
        let page = get(&app, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        // The kind filter is a GET form: nothing else may be.
        for action in [
            "method=\"post\"",
            "name=\"action\"",
            "name=\"row\"",
            "csrf",
            "type=\"checkbox\"",
        ] {
            assert!(!page.body.contains(action), "{path} shows {action}");
        }
    }
    assert!(get(&app, "/").await.body.contains("read-only"));
    let before = q.counts().unwrap();
    for fields in [
        vec![("row", "requeue:d0")],
        vec![("action", "cancel"), ("id", "r0")],
    ] {
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend(fields);
        let refused = post(&app, "/queues/0/actions", &all).await;
        assert_eq!(refused.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(q.counts().unwrap(), before);
    assert_eq!(q.waiting(10).unwrap().len(), 2);
}

#[tokio::test]
async fn lists_filter_by_kind_and_keep_the_filter_in_their_links() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    let mut jobs = Vec::new();
    for i in 0..120 {
        let kind = if i % 2 == 0 { "send_email" } else { "resize" };
        jobs.push(
            NewJob::new(format!("job {i}"))
                .id(format!("j{i}"))
                .header("klass", kind),
        );
    }
    for i in 0..4 {
        let kind = if i % 2 == 0 { "send_email" } else { "resize" };
        jobs.push(
            NewJob::new("bad")
                .id(format!("d{i}"))
                .priority(-1)
                .header("klass", kind),
        );
    }
    q.enqueue_batch(jobs).unwrap();
    for _ in 0..4 {
        let lease = q.lease().unwrap().unwrap();
        q.fail(lease, "exit 1: no").unwrap();
    }
    let app = router(vec![q], DashboardOptions::new());
    let ids = |body: &str| -> Vec<String> {
        body.split("name=\"id\" value=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().to_owned())
            .collect()
    };
    let first = get(&app, "/queues/0?state=waiting&kind=resize").await;
    let shown = ids(&first.body);
    assert_eq!(shown.len(), 50);
    assert!(
        shown
            .iter()
            .all(|id| id[1..].parse::<u32>().unwrap() % 2 == 1),
        "{shown:?}"
    );
    assert!(
        first
            .body
            .contains("href=\"/queues/0?state=waiting&amp;kind=resize&amp;page=2\""),
        "paging keeps the kind"
    );
    assert!(
        first
            .body
            .contains("href=\"/queues/0?state=dead&amp;kind=resize\""),
        "tabs keep the kind"
    );
    assert!(first
        .body
        .contains("name=\"back\" value=\"/queues/0?state=waiting&amp;kind=resize&amp;page=1\""));
    let second = get(&app, "/queues/0?state=ready&kind=resize&page=2").await;
    assert_eq!(ids(&second.body).len(), 10, "60 resize jobs: 50, then 10");
    let dead = get(&app, "/queues/0?state=dead&kind=send_email").await;
    assert_eq!(ids(&dead.body), ["d0", "d2"]);
    let none = get(&app, "/queues/0?state=dead&kind=nothing").await;
    assert!(ids(&none.body).is_empty());
    assert!(none.body.contains("No dead jobs"));
}

/// The `href` of the link `rel="REL"` of a page, unescaped.
fn link(body: &str, rel: &str) -> Option<String> {
    let marker = format!("rel=\"{rel}\" href=\"");
    let at = body.find(&marker)? + marker.len();
    Some(body[at..].split('"').next()?.replace("&amp;", "&"))
}

// Issue 28: lists stopped at 10,000 jobs (page 200) and a deep page
// re-read every job before it. The list of every waiting job is paged by
// key now: "more" carries a cursor, and a walk of the links lists every
// job once, past 10,000.
#[tokio::test]
async fn the_waiting_list_pages_by_cursor_past_ten_thousand_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    let total: usize = 10_080;
    let jobs = (0..total).map(|i| NewJob::new(format!("job {i}")).id(format!("j{i}")));
    q.enqueue_batch(jobs.collect()).unwrap();
    let app = router(vec![q], DashboardOptions::new());
    let mut path = "/queues/0".to_owned();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        pages += 1;
        let ids = page.body.split("name=\"id\" value=\"").skip(1);
        seen.extend(ids.map(|rest| rest.split('"').next().unwrap().to_owned()));
        match link(&page.body, "next") {
            Some(next) => {
                assert!(next.contains("&after="), "{next}");
                assert!(next.contains(&format!("&page={}", pages + 1)), "{next}");
                path = next;
            }
            None => break,
        }
    }
    assert_eq!(pages, total.div_ceil(50));
    let expected: Vec<String> = (0..total).map(|i| format!("j{i}")).collect();
    assert_eq!(seen, expected, "every job once, in lease order");
    // The last page (past 10,000) offers the way back to the first.
    assert!(get(&app, &path).await.body.contains("rel=\"first\""));
}

// A cursor comes back from a URL anyone can edit: garbled or another
// backend's, it is a clear 400 naming the way back, never a 500.
#[tokio::test]
async fn a_garbled_cursor_in_the_url_is_a_bad_request() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 120, 0, 0, &[]);
    let app = router(vec![q], DashboardOptions::new());
    let first = get(&app, "/queues/0").await;
    let next = link(&first.body, "next").expect("a next page");
    let cursor = next.split("&after=").nth(1).unwrap().to_owned();
    let second = get(&app, &next).await;
    assert_eq!(second.status, StatusCode::OK);
    let mut garbled = cursor.clone();
    garbled.insert(3, '9');
    for bad in [
        garbled.as_str(),
        &cursor[..cursor.len() - 2],
        "nonsense",
        "%3Cscript%3E",
        // Well formed (its check holds) but an offset, not this queue's kind.
        "c1.o.50~7e9717ad",
    ] {
        let page = get(&app, &format!("/queues/0?state=waiting&page=2&after={bad}")).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{bad}: {}", page.body);
        assert!(page.body.contains("bad page cursor"), "{bad}");
        assert!(
            page.body.contains("href=\"/queues/0\""),
            "{bad}: the way back"
        );
        assert!(!page.body.contains("<script>"), "{bad}: escaped");
    }
}

// Bug (rev7): a keyset list's page number is not capped (the cursor
// takes it as deep as the list goes), and its "more" link printed
// `page_no + 1`: `page=18446744073709551615` with a valid cursor
// overflowed (a panic in a debug build, a wrap to page 0 in release).
// Any page number in the URL gives a page, its next link a number.
#[tokio::test]
async fn the_largest_page_number_with_a_cursor_is_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(&dir, "q");
    fill(q.as_ref(), 120, 0, 0, &[]);
    let app = router(vec![q], DashboardOptions::new());
    let first = get(&app, "/queues/0").await;
    let next = link(&first.body, "next").expect("a next page");
    let cursor = next.split("&after=").nth(1).unwrap().to_owned();
    for page_no in [u64::MAX, u64::MAX - 1] {
        let path = format!("/queues/0?state=waiting&page={page_no}&after={cursor}");
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        let more = link(&page.body, "next").expect("a next page after the second");
        assert!(!more.contains("&page=0&"), "{more}");
    }
}
