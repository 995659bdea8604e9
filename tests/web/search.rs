//! Search and bulk actions, the same on every backend: filters by state,
//! kind, header, id prefix and failure reason, and an action on every
//! match that changes exactly the matching jobs.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::StatusCode;
use dque::jobs::{JobQueue, NewJob};
use dque::web::DashboardOptions;

use super::{get, post, router, Answer};

/// Runs blocking Jobs API calls off the runtime's threads.
pub async fn off<T: Send + 'static>(
    q: &Arc<dyn JobQueue>,
    work: impl FnOnce(&dyn JobQueue) -> T + Send + 'static,
) -> T {
    let q = q.clone();
    tokio::task::spawn_blocking(move || work(q.as_ref()))
        .await
        .unwrap()
}

/// The ids of the rows of a list (their checkboxes), in order.
pub fn row_ids(body: &str) -> Vec<String> {
    body.split("name=\"id\" value=\"")
        .skip(1)
        .map(|r| r.split('"').next().unwrap().to_owned())
        .collect()
}

/// The count a confirmation page shows.
pub fn confirmed_count(page: &Answer) -> usize {
    let at = page
        .body
        .find("data-count=\"")
        .unwrap_or_else(|| panic!("no count in {}", page.body))
        + 12;
    page.body[at..].split('"').next().unwrap().parse().unwrap()
}

/// The fingerprint of the confirmed jobs a confirmation page's form carries.
pub fn confirmed_matches(page: &Answer) -> String {
    let at = page
        .body
        .find("name=\"matches\" value=\"")
        .unwrap_or_else(|| panic!("no matches in {}", page.body))
        + 22;
    page.body[at..].split('"').next().unwrap().to_owned()
}

/// Ids of `(state, id)` pairs now: "ready", "scheduled", "dead".
pub fn states(q: &dyn JobQueue) -> BTreeSet<(String, String, i32)> {
    let mut all = BTreeSet::new();
    for w in q.waiting(1000).unwrap() {
        let state = match w.state {
            dque::jobs::WaitState::Scheduled(_) => "scheduled",
            _ => "ready",
        };
        all.insert((state.to_owned(), w.job.id, w.job.priority));
    }
    for d in q.dead(1000).unwrap() {
        all.insert(("dead".to_owned(), d.job.id, d.job.priority));
    }
    all
}

/// Dead: m0, m1, m2 (send_email, "exit 3: smtp timeout"), m3 (send_email,
/// "exit 1: bad address"), p0 (render, "exit 3: smtp timeout"). Ready: m4,
/// m5, p1, p2, p3. Tenant `a` for even numbers, `b` for odd.
pub fn fill_kinds(q: &dyn JobQueue) {
    let job = |id: &str, kind: &str, n: usize, priority: i32| {
        NewJob::new(format!("{{\"job\":\"{id}\"}}"))
            .id(id)
            .priority(priority)
            .header("klass", kind)
            .header("tenant", if n % 2 == 0 { "a" } else { "b" })
    };
    let mut jobs = Vec::new();
    for n in 0..4 {
        jobs.push(job(&format!("m{n}"), "send_email", n, -1));
    }
    jobs.push(job("p0", "render", 0, -1));
    for n in 4..6 {
        jobs.push(job(&format!("m{n}"), "send_email", n, 0));
    }
    for n in 1..4 {
        jobs.push(job(&format!("p{n}"), "render", n, 0));
    }
    q.enqueue_batch(jobs).unwrap();
    for _ in 0..5 {
        let lease = q.lease().unwrap().unwrap();
        let reason = if lease.job.id == "m3" {
            "exit 1: bad address"
        } else {
            "exit 3: smtp timeout"
        };
        q.fail(lease, reason).unwrap();
    }
}

/// The scenario: every filter finds what it should, and each bulk action
/// changes exactly the jobs its confirmation counted.
pub async fn search_and_bulk(q: Arc<dyn JobQueue>) {
    off(&q, fill_kinds).await;
    let app = router(vec![q.clone()], DashboardOptions::new());
    let list = |path: &'static str| {
        let app = app.clone();
        async move {
            let page = get(&app, path).await;
            assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
            let mut ids = row_ids(&page.body);
            ids.sort();
            (ids, page)
        }
    };
    for (path, want) in [
        (
            "/queues/0?state=dead&kind=send_email",
            &["m0", "m1", "m2", "m3"][..],
        ),
        (
            "/queues/0?state=dead&kind=send_email&reason=timeout",
            &["m0", "m1", "m2"],
        ),
        ("/queues/0?state=dead&reason=bad%20address", &["m3"]),
        ("/queues/0?state=ready&prefix=p", &["p1", "p2", "p3"]),
        (
            "/queues/0?state=waiting&header=tenant%3Db",
            &["m5", "p1", "p3"],
        ),
        (
            "/queues/0?state=dead&header=tenant%3Da&kind=render",
            &["p0"],
        ),
        ("/queues/0?state=ready&reason=timeout", &[]),
        ("/queues/0?state=ready&prefix=m4", &["m4"]),
    ] {
        let (ids, page) = list(path).await;
        assert_eq!(ids, want, "{path}");
        assert!(
            page.body.contains("id=\"scanned\""),
            "{path}: the search's reach"
        );
    }
    // The filter stays in the links that page and in the bulk form.
    let (_, page) = list("/queues/0?state=dead&kind=send_email&reason=timeout").await;
    assert!(page.body.contains("name=\"reason\" value=\"timeout\""));
    let csrf = page.csrf();

    // Retry every failed send_email of one reason: the count first.
    let ask = get(
        &app,
        "/queues/0/bulk?state=dead&kind=send_email&reason=timeout&do=retry",
    )
    .await;
    assert_eq!(ask.status, StatusCode::OK, "{}", ask.body);
    assert_eq!(confirmed_count(&ask), 3);
    let matches = confirmed_matches(&ask);
    let before = off(&q, states).await;
    let retry = |csrf: &str, expect: &str| {
        let (app, csrf, expect) = (app.clone(), csrf.to_owned(), expect.to_owned());
        let matches = matches.clone();
        async move {
            post(
                &app,
                "/queues/0/bulk",
                &[
                    ("csrf", &csrf),
                    ("state", "dead"),
                    ("kind", "send_email"),
                    ("reason", "timeout"),
                    ("do", "retry"),
                    ("expect", &expect),
                    ("matches", &matches),
                ],
            )
            .await
        }
    };
    // Read-only: neither the count page nor the action is served.
    let read_only = router(vec![q.clone()], DashboardOptions::new().read_only(true));
    let path = "/queues/0/bulk?state=dead&kind=send_email&reason=timeout&do=retry";
    assert_eq!(get(&read_only, path).await.status, StatusCode::NOT_FOUND);
    let refused = post(
        &read_only,
        "/queues/0/bulk",
        &[
            ("csrf", &csrf),
            ("state", "dead"),
            ("do", "retry"),
            ("expect", "3"),
        ],
    )
    .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND);
    assert_eq!(off(&q, states).await, before);
    // Without the CSRF token, or with more matching than confirmed: nothing.
    assert_eq!(retry("forged", "3").await.status, StatusCode::FORBIDDEN);
    let grown = retry(&csrf, "2").await;
    assert_eq!(grown.status, StatusCode::CONFLICT, "{}", grown.body);
    assert_eq!(confirmed_count(&grown), 3, "asks again with the new count");
    assert_eq!(off(&q, states).await, before);
    let done = retry(&csrf, "3").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains("Retried 3 of 3 matching jobs"),
        "{}",
        done.body
    );
    let after = off(&q, states).await;
    let changed: BTreeSet<_> = before.symmetric_difference(&after).cloned().collect();
    let mut moved: Vec<&str> = changed
        .iter()
        .filter(|(state, _, _)| state == "ready")
        .map(|(_, id, _)| id.as_str())
        .collect();
    moved.sort();
    assert_eq!(
        moved,
        ["m0", "m1", "m2"],
        "exactly the matches: {changed:?}"
    );
    let dead: Vec<&str> = after
        .iter()
        .filter(|(s, _, _)| s == "dead")
        .map(|(_, id, _)| id.as_str())
        .collect();
    assert_eq!(dead, ["m3", "p0"]);

    // Set the priority of every ready render job; the others keep theirs.
    let ask = get(
        &app,
        "/queues/0/bulk?state=ready&kind=render&do=priority&priority=-5",
    )
    .await;
    assert_eq!(confirmed_count(&ask), 3);
    let matches = confirmed_matches(&ask);
    let set = post(
        &app,
        "/queues/0/bulk",
        &[
            ("csrf", &csrf),
            ("state", "ready"),
            ("kind", "render"),
            ("do", "priority"),
            ("priority", "-5"),
            ("expect", "3"),
            ("matches", &matches),
        ],
    )
    .await;
    assert!(set.body.contains("Priority set for 3 of 3"), "{}", set.body);
    let now = off(&q, states).await;
    for (state, id, priority) in &now {
        let render_ready = id.starts_with('p') && state == "ready";
        assert_eq!(*priority == -5, render_ready, "{id} {priority}");
    }
    assert!(now.contains(&("ready".into(), "m4".into(), 0)));

    // Cancel the ready jobs of tenant b: m1 (retried above), m5, p1, p3.
    let ask = get(
        &app,
        "/queues/0/bulk?state=ready&header=tenant%3Db&do=cancel",
    )
    .await;
    assert_eq!(confirmed_count(&ask), 4, "{}", ask.body);
    let matches = confirmed_matches(&ask);
    let cancel = post(
        &app,
        "/queues/0/bulk",
        &[
            ("csrf", &csrf),
            ("state", "ready"),
            ("header", "tenant=b"),
            ("do", "cancel"),
            ("expect", "4"),
            ("matches", &matches),
        ],
    )
    .await;
    assert!(cancel.body.contains("Cancelled 4 of 4"), "{}", cancel.body);
    let left: BTreeSet<String> = off(&q, states)
        .await
        .into_iter()
        .map(|(_, id, _)| id)
        .collect();
    let want: BTreeSet<String> = ["m0", "m2", "m3", "m4", "p0", "p2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(left, want, "m1, m5, p1, p3 cancelled, and no other");
}

/// A ticked selection of jobs with made-up ids (issue 28: the dashboard
/// now cancels and moves a selection with one batch call,
/// `cancel_many` / `set_priority_many`): each job's outcome is the single
/// call's, a leased job and an unknown id are named as not done, and
/// exactly the ticked jobs change.
pub async fn a_selection_of_made_up_ids_is_cancelled_and_moved(q: Arc<dyn JobQueue>) {
    let made: Vec<String> = off(&q, |q| {
        let leased = q.enqueue(NewJob::new("leased").priority(-9)).unwrap();
        let held = q.lease().unwrap().expect("the leased job");
        std::mem::forget(held); // a worker's, till the end
        let mut made = vec![leased.id().to_owned()];
        for i in 0..6 {
            made.push(
                q.enqueue(NewJob::new(format!("job {i}")))
                    .unwrap()
                    .id()
                    .to_owned(),
            );
        }
        made
    })
    .await;
    let app = router(vec![q.clone()], DashboardOptions::new());
    let csrf = get(&app, "/queues/0").await.csrf();
    let act = |action: &'static str, ids: Vec<String>| {
        let (app, csrf) = (app.clone(), csrf.clone());
        async move {
            let mut fields = vec![
                ("csrf".to_owned(), csrf),
                ("action".to_owned(), action.to_owned()),
                ("priority".to_owned(), "-3".to_owned()),
            ];
            fields.extend(ids.into_iter().map(|id| ("id".to_owned(), id)));
            let fields: Vec<(&str, &str)> = fields
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            post(&app, "/queues/0/actions", &fields).await
        }
    };
    let unknown = "0123456789abcdef0123456789abcdef".to_owned();
    let cancel = vec![
        made[4].clone(),
        made[0].clone(),
        unknown.clone(),
        made[2].clone(),
    ];
    let done = act("cancel", cancel).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains("Cancelled 2 of 4 jobs."),
        "{}",
        done.body
    );
    assert!(
        done.body.contains(&made[0]),
        "the leased job named: {}",
        done.body
    );
    assert!(done.body.contains(&unknown), "the unknown id named");
    let moved = act("priority", vec![made[5].clone(), made[1].clone()]).await;
    assert!(
        moved.body.contains("Priority set for 2 of 2 jobs."),
        "{}",
        moved.body
    );
    let waiting = off(&q, |q| q.waiting(100).unwrap()).await;
    let left: Vec<(&str, i32)> = waiting
        .iter()
        .map(|w| (w.job.id.as_str(), w.job.priority))
        .collect();
    // In lease order: the moved ones first, in the order ticked.
    let want = [
        (made[0].as_str(), -9),
        (made[5].as_str(), -3),
        (made[1].as_str(), -3),
        (made[3].as_str(), 0),
        (made[6].as_str(), 0),
    ];
    assert_eq!(left, want);
}
