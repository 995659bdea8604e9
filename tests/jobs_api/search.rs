//! `JobQueue::search` (issue 28): on every backend, whether it filters
//! natively or by reading, it finds exactly the jobs `JobFilter::matches`
//! keeps, in list order (waiting in lease order, then dead letters); and
//! `requeue_dead_many`, the batch a bulk retry uses, answers as
//! `requeue_dead` of each would.

use std::time::Duration;

use dque::jobs::{FoundJob, JobFilter, JobPlace, JobQueue, NewJob, SearchState};

use super::Backend;
use super::{lease, new_queue, put};

/// One `#[test]` per check of this file, for the suite's runner.
#[macro_export]
macro_rules! jobs_api_search_checks {
    (run = $runner:path) => {
        mod search_checks {
            use super::*;
            $crate::jobs_api_suite!(@each_in $runner; search;
                search_finds_what_the_filter_means_in_list_order,
                requeue_dead_many_is_requeue_dead_of_each_in_order,
                search_takes_pattern_characters_literally,
                waiting_lists_due_jobs_as_ready_in_lease_order,
            );
        }
    };
}

/// What the filter means, from the whole lists.
fn reference(q: &dyn JobQueue, filter: &JobFilter) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for w in q.waiting(10_000).unwrap() {
        let place = JobPlace::Waiting(w.state);
        if filter.matches(&w.job, &place) {
            all.push((w.job.id, format!("{place:?}")));
        }
    }
    for d in q.dead(10_000).unwrap() {
        let place = JobPlace::Dead(d.reason);
        if filter.matches(&d.job, &place) {
            all.push((d.job.id, format!("{place:?}")));
        }
    }
    all
}

fn ids(found: &[FoundJob]) -> Vec<(String, String)> {
    found
        .iter()
        .map(|f| (f.job.id.clone(), format!("{:?}", f.place)))
        .collect()
}

pub fn search_finds_what_the_filter_means_in_list_order(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "search");
    let q = q.as_ref();
    let job = |id: &str, kind: &str, tenant: Option<&str>, priority: i32| {
        let mut job = NewJob::new(format!("body of {id}"))
            .id(id)
            .priority(priority)
            .header("klass", kind);
        if let Some(t) = tenant {
            job = job.header("tenant", t);
        }
        job
    };
    // Dead first (they lease first), then one leased, then ready and scheduled.
    for (i, reason) in [
        "exit 3: smtp timeout",
        "exit 1: bad address",
        "exit 3: smtp timeout",
    ]
    .iter()
    .enumerate()
    {
        let kind = if i == 1 { "render" } else { "send_email" };
        put(q, job(&format!("dead-{i}"), kind, Some("a"), -9));
        let l = lease(q);
        q.fail(l, reason).unwrap();
    }
    put(q, job("held-0", "send_email", None, -8));
    let _held = lease(q);
    for i in 0..6 {
        let kind = if i % 3 == 0 { "render" } else { "send_email" };
        let tenant = [Some("a"), Some("b"), None][i % 3];
        put(q, job(&format!("ready-{i}"), kind, tenant, (i % 2) as i32));
    }
    put(
        q,
        job("later-0", "render", Some("b"), 0).delay(Duration::from_secs(3600)),
    );
    put(q, NewJob::new("no headers").id("bare-0"));
    let states = [
        SearchState::Any,
        SearchState::Waiting,
        SearchState::Ready,
        SearchState::Leased,
        SearchState::Scheduled,
        SearchState::Dead,
    ];
    let mut filters = Vec::new();
    for state in states {
        let f = JobFilter::new().state(state);
        filters.push(f.clone());
        filters.push(f.clone().header("klass", "send_email"));
        filters.push(f.clone().header("klass", "render").header("tenant", "b"));
        filters.push(f.clone().header("tenant", "none such"));
        filters.push(f.clone().id_prefix("ready-"));
        filters.push(f.clone().id_prefix("dead-1"));
        filters.push(f.clone().reason("timeout"));
        filters.push(f.clone().reason("bad").header("klass", "render"));
        filters.push(f.clone().header("klass", "send_email").id_prefix("d"));
    }
    for filter in &filters {
        let want = reference(q, filter);
        let found = q.search(filter, 1000, 10_000).unwrap();
        assert_eq!(ids(&found.jobs), want, "{filter:?}");
        assert!(found.complete, "{filter:?}: everything was read");
        // A smaller `max`: the first matches, in the same order.
        let first = q.search(filter, 2, 10_000).unwrap();
        assert_eq!(
            ids(&first.jobs),
            want[..want.len().min(2)],
            "{filter:?} max 2"
        );
    }
    // The headers and body of a found job are the job's.
    let found = q
        .search(&JobFilter::new().id_prefix("ready-1"), 10, 10_000)
        .unwrap();
    assert_eq!(found.jobs.len(), 1);
    assert_eq!(found.jobs[0].job.body, b"body of ready-1");
    assert_eq!(found.jobs[0].job.header("tenant"), Some("b"));
}

pub fn requeue_dead_many_is_requeue_dead_of_each_in_order(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "requeue_many");
    let q = q.as_ref();
    let mut ids = Vec::new();
    for i in 0..4 {
        // Two caller ids, two made up.
        let job = NewJob::new(format!("job {i}")).priority(-1);
        let job = if i % 2 == 0 {
            job.id(format!("dead-{i}"))
        } else {
            job
        };
        ids.push(put(q, job));
        let l = lease(q);
        q.fail(l, "boom").unwrap();
    }
    put(q, NewJob::new("alive").id("alive"));
    let asked: Vec<String> = vec![
        ids[3].clone(),
        "none such".into(),
        ids[0].clone(),
        ids[3].clone(),
        "alive".into(),
        ids[1].clone(),
    ];
    let outcomes = q.requeue_dead_many(&asked);
    let ok: Vec<bool> = outcomes.iter().map(|o| o.is_ok()).collect();
    assert_eq!(ok, [true, false, true, false, false, true], "{outcomes:?}");
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Err(e) = outcome {
            assert!(
                matches!(e, dque::Error::NoSuchJob { .. }),
                "{}: {e:?}",
                asked[i]
            );
        }
    }
    let dead: Vec<String> = q.dead(100).unwrap().into_iter().map(|d| d.job.id).collect();
    assert_eq!(
        dead,
        [ids[2].clone()],
        "only the one not asked for stays dead"
    );
    let waiting = q.waiting(100).unwrap();
    assert_eq!(waiting.len(), 4);
    for w in &waiting {
        assert_eq!(w.job.attempt, 0, "{}: attempts start over", w.job.id);
    }
}

/// A guard (no bug found) on the class a native search invites: `%`, `_`
/// and `\\` in an id prefix or a reason (LIKE wildcards and its escape;
/// `.` and `-` of Lua patterns) mean themselves on every backend, and an
/// empty prefix or reason keeps every job.
pub fn search_takes_pattern_characters_literally(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "search_literal");
    let q = q.as_ref();
    for (id, reason) in [
        ("a%b", "50% done"),
        ("a_b", "x_y"),
        ("axb", "back\\slash"),
        ("a\\b", "dot.dash-"),
        ("a.b", "x5y"),
    ] {
        put(q, NewJob::new(id).id(id));
        let l = lease(q);
        q.fail(l, reason).unwrap();
    }
    for id in ["a%c", "a_c", "abc", "a\\c", "a.c", "%", "_"] {
        put(q, NewJob::new(id).id(id));
    }
    let mut filters = Vec::new();
    for prefix in ["a%", "a_", "a\\", "a.", "%", "_", "", "a"] {
        filters.push(JobFilter::new().id_prefix(prefix));
        filters.push(JobFilter::new().state(SearchState::Dead).id_prefix(prefix));
    }
    for reason in ["%", "_", "\\", "0% d", "x_y", ".", "-", "", "5"] {
        filters.push(JobFilter::new().reason(reason));
    }
    for filter in &filters {
        let want = reference(q, filter);
        let found = q.search(filter, 1000, 10_000).unwrap();
        assert_eq!(ids(&found.jobs), want, "{filter:?}");
    }
    let percent = q
        .search(&JobFilter::new().id_prefix("a%"), 100, 100)
        .unwrap();
    assert_eq!(
        percent.jobs.len(),
        2,
        "a%b and a%c only: {:?}",
        ids(&percent.jobs)
    );
}

/// A guard (no bug found; review of PostgreSQL's `waiting` read as two
/// parts) on what `waiting` promises: the ready jobs in the order they
/// will be leased, then the scheduled ones by due time. A scheduled job
/// that fell due is ready, in its priority's place, before it moves.
pub fn waiting_lists_due_jobs_as_ready_in_lease_order(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "waiting_due");
    let q = q.as_ref();
    put(q, NewJob::new("a").id("a"));
    put(
        q,
        NewJob::new("b")
            .id("b")
            .priority(-5)
            .delay(Duration::from_secs(5)),
    );
    put(
        q,
        NewJob::new("c")
            .id("c")
            .priority(-9)
            .delay(Duration::from_secs(50)),
    );
    put(
        q,
        NewJob::new("d")
            .id("d")
            .priority(3)
            .delay(Duration::from_secs(20)),
    );
    put(q, NewJob::new("e").id("e").priority(3));
    s.clock.advance(Duration::from_secs(30));
    let listed: Vec<(String, String)> = q
        .waiting(10)
        .unwrap()
        .into_iter()
        .map(|w| (w.job.id, format!("{:?}", w.state)))
        .collect();
    let ids: Vec<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids[4], "c", "the one not due comes last: {listed:?}");
    for (id, state) in &listed[..4] {
        assert_eq!(state, "Ready", "{id} is due: {listed:?}");
    }
    // The order they are leased in is the order listed.
    let mut leased = Vec::new();
    for _ in 0..4 {
        let l = lease(q);
        leased.push(l.id.clone());
        q.ack(l).unwrap();
    }
    assert_eq!(leased, ids[..4], "{listed:?}");
}
