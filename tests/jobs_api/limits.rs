//! The suite's checks of concurrency limits and pause (issue 27), called
//! from the suite's entry point (`jobs_api_limits_checks!`).

use std::time::Duration;

use dque::jobs::{JobQueue, Limit, NewJob, Retry, LIMITS_HEADER};
use dque::Error;

use super::{body, drain, lease, new_queue, put, Backend};

/// One `#[test]` per check of this file, handed to `$runner`.
#[macro_export]
macro_rules! jobs_api_limits_checks {
    ($runner:path) => {
        $crate::jobs_api_limits_checks!(@each $runner;
            a_limit_of_one_runs_its_jobs_one_at_a_time,
            every_way_a_lease_ends_frees_its_limit,
            a_batch_lease_takes_no_more_than_a_limit_allows,
            limits_are_set_listed_changed_and_removed,
            bad_limit_names_and_maxima_are_refused_and_change_nothing,
            a_paused_queue_leases_nothing_and_its_leases_still_settle,
            pause_and_limits_survive_a_restart,
            a_limit_set_counts_the_jobs_already_leased_that_name_it,
            a_job_naming_a_limit_twice_holds_it_once,
            jobs_waiting_on_a_full_limit_run_in_priority_then_fifo_order,
        );
    };
    (@each $runner:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $runner(jobs_api::limits::$check);
            }
        )*
    };
}

/// Limit `name` of queue `q`: the queue's name and `name` (on Redis a
/// limit is a throttle of the whole database, as in qless).
fn n(q: &dyn JobQueue, name: &str) -> String {
    format!("{}.{name}", q.name())
}

fn limit(name: String, max: u32, running: u32) -> Limit {
    Limit { name, max, running }
}

/// Leases every ready job it can without settling any: their bodies.
fn lease_all(queue: &dyn JobQueue) -> Vec<dque::jobs::JobLease> {
    let mut leases = Vec::new();
    while let Some(lease) = queue.lease().expect("lease") {
        leases.push(lease);
    }
    leases
}

pub fn a_limit_of_one_runs_its_jobs_one_at_a_time(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-serial");
    q.set_limit(&n(q.as_ref(), "tenant-7"), 1).unwrap();
    q.set_limit(&n(q.as_ref(), "smtp"), 2).unwrap();
    put(
        q.as_ref(),
        NewJob::new("a").limit(n(q.as_ref(), "tenant-7")),
    );
    put(
        q.as_ref(),
        NewJob::new("b")
            .limit(n(q.as_ref(), "tenant-7"))
            .limit(n(q.as_ref(), "smtp")),
    );
    put(q.as_ref(), NewJob::new("free"));
    put(q.as_ref(), NewJob::new("s1").limit(n(q.as_ref(), "smtp")));
    put(q.as_ref(), NewJob::new("s2").limit(n(q.as_ref(), "smtp")));
    put(
        q.as_ref(),
        NewJob::new("unset").limit(n(q.as_ref(), "no-maximum")),
    );
    let held = lease_all(q.as_ref());
    let bodies: Vec<String> = held.iter().map(body).collect();
    assert_eq!(
        bodies,
        ["a", "free", "s1", "s2", "unset"],
        "b waits for tenant-7; smtp's two are s1 and s2"
    );
    assert_eq!(
        held[0].header(LIMITS_HEADER),
        Some(n(q.as_ref(), "tenant-7").as_str()),
        "the header comes back"
    );
    assert_eq!(
        q.limits().unwrap(),
        [
            limit(n(q.as_ref(), "smtp"), 2, 2),
            limit(n(q.as_ref(), "tenant-7"), 1, 1)
        ]
    );
    let mut held = held.into_iter();
    q.ack(held.next().unwrap()).unwrap();
    assert!(q.lease().unwrap().is_none(), "smtp is still full for b");
    for lease in held {
        q.ack(lease).unwrap();
    }
    let b = lease(q.as_ref());
    assert_eq!(body(&b), "b");
    assert_eq!(b.attempt, 1, "looking past b counted no attempt");
    assert_eq!(
        q.limits().unwrap(),
        [
            limit(n(q.as_ref(), "smtp"), 2, 1),
            limit(n(q.as_ref(), "tenant-7"), 1, 1)
        ]
    );
    q.ack(b).unwrap();
    assert!(q.lease().unwrap().is_none());
}

pub fn every_way_a_lease_ends_frees_its_limit(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-ends");
    q.set_limit(&n(q.as_ref(), "one"), 1).unwrap();
    for name in ["n1", "n2", "r", "ra", "f", "last"] {
        put(q.as_ref(), NewJob::new(name).limit(n(q.as_ref(), "one")));
    }
    type End = fn(&dyn JobQueue, dque::jobs::JobLease);
    let ends: [(&str, End); 5] = [
        ("nack", |q, l| {
            q.nack(l, Retry::After(Duration::from_secs(3600)), "later")
                .map(drop)
                .unwrap()
        }),
        ("nack in place", |q, l| {
            q.nack(l, Retry::After(Duration::ZERO), "again")
                .map(drop)
                .unwrap()
        }),
        ("release", |q, l| q.release(l).unwrap()),
        ("release_after", |q, l| {
            q.release_after(l, Duration::from_secs(3600))
                .map(drop)
                .unwrap()
        }),
        ("fail", |q, l| q.fail(l, "broken").unwrap()),
    ];
    for (how, end) in ends {
        let held = lease(q.as_ref());
        assert!(q.lease().unwrap().is_none(), "{how}: the limit is full");
        end(q.as_ref(), held);
        let next = q.lease().unwrap();
        assert!(next.is_some(), "{how} freed the limit");
        q.release(next.unwrap()).unwrap();
    }
    let rest = drain(q.as_ref());
    assert!(!rest.is_empty());
    assert_eq!(q.limits().unwrap(), [limit(n(q.as_ref(), "one"), 1, 0)]);
}

pub fn a_batch_lease_takes_no_more_than_a_limit_allows(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-batch");
    q.set_limit(&n(q.as_ref(), "pair"), 2).unwrap();
    for i in 0..5 {
        put(
            q.as_ref(),
            NewJob::new(format!("p{i}")).limit(n(q.as_ref(), "pair")),
        );
    }
    put(q.as_ref(), NewJob::new("free"));
    let batch = q.lease_batch(10).unwrap();
    let bodies: Vec<String> = batch.iter().map(body).collect();
    assert_eq!(bodies, ["p0", "p1", "free"]);
    for lease in batch {
        q.ack(lease).unwrap();
    }
    assert_eq!(q.lease_batch(10).unwrap().len(), 2);
}

pub fn limits_are_set_listed_changed_and_removed(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-list");
    assert!(q.limits().unwrap().is_empty());
    q.set_limit(&n(q.as_ref(), "b"), 3).unwrap();
    q.set_limit(&n(q.as_ref(), "a"), 1).unwrap();
    q.set_limit(&n(q.as_ref(), "b"), 5).unwrap();
    assert_eq!(
        q.limits().unwrap(),
        [
            limit(n(q.as_ref(), "a"), 1, 0),
            limit(n(q.as_ref(), "b"), 5, 0)
        ]
    );
    assert!(q.remove_limit(&n(q.as_ref(), "a")).unwrap());
    assert!(
        !q.remove_limit(&n(q.as_ref(), "a")).unwrap(),
        "already gone"
    );
    assert_eq!(q.limits().unwrap(), [limit(n(q.as_ref(), "b"), 5, 0)]);
    // A removed limit holds any number again.
    put(q.as_ref(), NewJob::new("x").limit(n(q.as_ref(), "a")));
    put(q.as_ref(), NewJob::new("y").limit(n(q.as_ref(), "a")));
    assert_eq!(lease_all(q.as_ref()).len(), 2);
}

pub fn bad_limit_names_and_maxima_are_refused_and_change_nothing(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-bad");
    for name in ["", "a b", "a,b", "tab\t"] {
        let refused = q.set_limit(name, 1);
        assert!(
            matches!(refused, Err(Error::InvalidJob { .. })),
            "{name:?}: {refused:?}"
        );
    }
    let zero = q.set_limit("z", 0);
    assert!(matches!(zero, Err(Error::InvalidJob { .. })), "{zero:?}");
    assert!(q.limits().unwrap().is_empty());
    let bad_job = q.enqueue(NewJob::new("x").header(LIMITS_HEADER, "ok,has space"));
    assert!(
        matches!(bad_job, Err(Error::InvalidJob { .. })),
        "{bad_job:?}"
    );
    assert_eq!(q.counts().unwrap().ready, 0, "nothing added");
}

pub fn a_paused_queue_leases_nothing_and_its_leases_still_settle(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "lim-pause");
    put(q.as_ref(), NewJob::new("a"));
    put(q.as_ref(), NewJob::new("b"));
    put(q.as_ref(), NewJob::new("c"));
    let running = lease(q.as_ref());
    let touched = lease(q.as_ref());
    assert!(!q.is_paused().unwrap());
    q.pause().unwrap();
    q.pause().unwrap(); // twice is once
    assert!(q.is_paused().unwrap());
    assert!(q.lease().unwrap().is_none());
    assert!(q.lease_batch(5).unwrap().is_empty());
    assert!(q
        .lease_timeout(Duration::from_millis(150))
        .unwrap()
        .is_none());
    put(q.as_ref(), NewJob::new("d"));
    q.touch(&touched).unwrap();
    q.ack(running).unwrap();
    q.nack(touched, Retry::After(Duration::ZERO), "again")
        .unwrap();
    s.clock.advance(Duration::from_secs(1));
    assert!(q.lease().unwrap().is_none(), "still paused");
    assert_eq!(q.counts().unwrap().ready, 3);
    q.resume().unwrap();
    assert!(!q.is_paused().unwrap());
    assert_eq!(drain(q.as_ref()), ["b", "c", "d"]);
}

pub fn pause_and_limits_survive_a_restart(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "lim-restart");
    q.set_limit(&n(q.as_ref(), "one"), 1).unwrap();
    put(q.as_ref(), NewJob::new("a").limit(n(q.as_ref(), "one")));
    put(q.as_ref(), NewJob::new("b").limit(n(q.as_ref(), "one")));
    q.pause().unwrap();
    q.close().unwrap();
    let q = backend.reopen("lim-restart", &s);
    assert!(q.is_paused().unwrap());
    assert_eq!(q.limits().unwrap(), [limit(n(q.as_ref(), "one"), 1, 0)]);
    assert!(q.lease().unwrap().is_none());
    q.resume().unwrap();
    let a = lease(q.as_ref());
    assert!(
        q.lease().unwrap().is_none(),
        "the limit held after a restart"
    );
    q.ack(a).unwrap();
    assert_eq!(drain(q.as_ref()), ["b"]);
}

// Bug (review of issue 27): the embedded queue counted as holders only the
// jobs leased while a limit (or a pause) was set, so a job leased before
// `set_limit`, or between a `remove_limit` and a new `set_limit`, ran on
// uncounted and a limit of 1 had two holders (PostgreSQL and Redis count
// every leased job that names the limit).
pub fn a_limit_set_counts_the_jobs_already_leased_that_name_it(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-late");
    let one = n(q.as_ref(), "one");
    for name in ["a", "b", "c", "d"] {
        put(q.as_ref(), NewJob::new(name).limit(one.clone()));
    }
    let a = lease(q.as_ref());
    q.set_limit(&one, 1).unwrap();
    assert_eq!(q.limits().unwrap(), [limit(one.clone(), 1, 1)]);
    assert!(q.lease().unwrap().is_none(), "a, leased before, holds it");
    q.ack(a).unwrap();
    let b = lease(q.as_ref());
    assert_eq!(body(&b), "b");
    // Removed and set again while b runs, with c leased in between.
    assert!(q.remove_limit(&one).unwrap());
    let c = lease(q.as_ref());
    q.ack(b).unwrap();
    q.set_limit(&one, 1).unwrap();
    assert_eq!(q.limits().unwrap(), [limit(one.clone(), 1, 1)]);
    assert!(
        q.lease().unwrap().is_none(),
        "c, leased unlimited, holds it"
    );
    q.ack(c).unwrap();
    assert_eq!(drain(q.as_ref()), ["d"]);
}

// Bug (review of issue 27): on PostgreSQL a job whose `limits` header
// named a limit twice counted as two holders, so a limit of 2 ran one job.
pub fn a_job_naming_a_limit_twice_holds_it_once(backend: &dyn Backend) {
    let (q, _s) = new_queue(backend, "lim-twice");
    let two = n(q.as_ref(), "two");
    q.set_limit(&two, 2).unwrap();
    put(
        q.as_ref(),
        NewJob::new("twice").header(LIMITS_HEADER, format!("{two}, {two}")),
    );
    put(
        q.as_ref(),
        NewJob::new("again").limit(two.clone()).limit(two.clone()),
    );
    put(q.as_ref(), NewJob::new("third").limit(two.clone()));
    let first = lease(q.as_ref());
    let second = q.lease().unwrap();
    assert!(second.is_some(), "a limit of 2 runs two jobs");
    assert_eq!(q.limits().unwrap(), [limit(two.clone(), 2, 2)]);
    assert!(q.lease().unwrap().is_none(), "and no third");
    q.ack(first).unwrap();
    q.ack(second.unwrap()).unwrap();
    assert_eq!(drain(q.as_ref()), ["third"]);
}

// Bug (review of issue 27): on Redis the jobs a lease set aside because
// their limit was full came back (one for each holder that ended) in the
// order they were set aside, ties broken by their ids: a more urgent job
// set aside later, or a job with a smaller id enqueued later, ran first.
pub fn jobs_waiting_on_a_full_limit_run_in_priority_then_fifo_order(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "lim-order");
    let one = n(q.as_ref(), "one");
    q.set_limit(&one, 1).unwrap();
    put(q.as_ref(), NewJob::new("holder").limit(one.clone()));
    let holder = lease(q.as_ref());
    put(
        q.as_ref(),
        NewJob::new("low").limit(one.clone()).priority(5),
    );
    put(
        q.as_ref(),
        NewJob::new("first").limit(one.clone()).id("zz-first"),
    );
    put(
        q.as_ref(),
        NewJob::new("second").limit(one.clone()).id("aa-second"),
    );
    assert!(q.lease().unwrap().is_none(), "the limit is full");
    s.clock.advance(Duration::from_secs(1));
    put(
        q.as_ref(),
        NewJob::new("urgent").limit(one.clone()).priority(-5),
    );
    assert!(q.lease().unwrap().is_none(), "the limit is still full");
    q.ack(holder).unwrap();
    assert_eq!(drain(q.as_ref()), ["urgent", "first", "second", "low"]);
}
