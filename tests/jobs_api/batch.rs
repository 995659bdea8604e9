//! `cancel_many` and `set_priority_many` (issue 28: a dashboard's bulk
//! cancel or priority change of ids the embedded queue made up cost one
//! read of the jobs per id, 30 ms a job at 100 000 jobs): on every
//! backend, a batch answers and changes exactly what the single call of
//! each id, in order, does on the same starting state: ready, scheduled,
//! leased and dead jobs, caller ids and made-up ids (and a caller id that
//! looks made up), unknown ids and ids asked twice.

use std::collections::HashMap;
use std::time::Duration;

use dque::jobs::{JobLease, JobQueue, NewJob, WaitState};

use super::{lease, new_queue, put, Backend};

/// One `#[test]` per check of this file, for the suite's runner.
#[macro_export]
macro_rules! jobs_api_batch_checks {
    (run = $runner:path) => {
        mod batch_checks {
            use super::*;
            $crate::jobs_api_suite!(@each_in $runner; batch;
                cancel_many_is_cancel_of_each_in_order,
                set_priority_many_is_set_priority_of_each_in_order,
            );
        }
    };
}

/// A caller's id of the form dque makes ids up in (32 hex digits), the
/// last one `tag`'s (job ids are the server's on Redis, not the queue's).
fn looks_made_up(tag: char) -> String {
    format!("0123456789abcdef0123456789abcde{tag}")
}

/// A queue in the starting state; its jobs' ids by role, and the leases
/// held (kept for the calls: a leased job is its worker's).
struct Start {
    queue: std::sync::Arc<dyn JobQueue>,
    ids: HashMap<&'static str, String>,
    _held: Vec<JobLease>,
}

/// The queue `name`, its caller ids its own (`tag` the last digit of
/// the one that looks made up).
fn start(backend: &dyn Backend, name: &str, tag: char) -> Start {
    let (q, _) = new_queue(backend, name);
    let mut ids = HashMap::new();
    let like_made_up = looks_made_up(tag);
    let job = |role: &str, caller: Option<&str>| {
        let job = NewJob::new(format!("body of {role}")).header("role", role);
        match caller {
            Some(id) if id.len() == 32 => job.id(id),
            Some(id) => job.id(format!("{name}-{id}")),
            None => job,
        }
    };
    // Dead letters first (they lease first), then the leased jobs.
    for (role, caller) in [("dead made-up", None), ("dead caller", Some("dead-c"))] {
        ids.insert(role, put(q.as_ref(), job(role, caller).priority(-20)));
        let l = lease(q.as_ref());
        q.fail(l, "boom").unwrap();
    }
    let mut held = Vec::new();
    for (role, caller) in [
        ("leased made-up", None),
        ("leased caller", Some("leased-c")),
    ] {
        ids.insert(role, put(q.as_ref(), job(role, caller).priority(-10)));
        held.push(lease(q.as_ref()));
    }
    for (role, caller, priority) in [
        ("ready made-up 1", None, 0),
        ("ready caller 1", Some("ready-c1"), 0),
        ("ready made-up 2", None, 3),
        ("ready looks made-up", Some(like_made_up.as_str()), 3),
        ("ready made-up at -2", None, -2),
        ("ready made-up 3", None, 0),
        ("ready caller 2", Some("ready-c2"), 5),
    ] {
        ids.insert(role, put(q.as_ref(), job(role, caller).priority(priority)));
    }
    for (role, caller) in [
        ("scheduled made-up", None),
        ("scheduled caller", Some("sched-c")),
    ] {
        let delayed = job(role, caller).delay(Duration::from_secs(3600));
        ids.insert(role, put(q.as_ref(), delayed));
    }
    Start {
        queue: q,
        ids,
        _held: held,
    }
}

/// The ids asked, in order, by role (unknown ones as given).
fn asked(ids: &HashMap<&'static str, String>) -> Vec<String> {
    [
        "ready made-up 3",
        "leased made-up",
        "unknown 0123456789abcdef0123456789abcdee",
        "ready caller 1",
        "scheduled made-up",
        "dead made-up",
        "ready looks made-up",
        "ready made-up 3",
        "leased caller",
        "ready made-up at -2",
        "unknown none such",
        "scheduled caller",
        "dead caller",
        "ready made-up 1",
        "ready made-up 2",
    ]
    .iter()
    .map(|role| match role.strip_prefix("unknown ") {
        Some(id) => id.to_owned(),
        None => ids[role].clone(),
    })
    .collect()
}

/// An outcome as a comparable word.
fn kind(outcome: &dque::Result<()>) -> String {
    match outcome {
        Ok(()) => "ok".into(),
        Err(dque::Error::NoSuchJob { .. }) => "no such job".into(),
        Err(dque::Error::JobLeased { .. }) => "leased".into(),
        Err(e) => format!("{e:?}"),
    }
}

/// What the queue holds, by role: the waiting list in order (state and
/// priority), then the dead letters.
fn state(start: &Start) -> Vec<String> {
    let role_of: HashMap<&str, &str> = start
        .ids
        .iter()
        .map(|(role, id)| (id.as_str(), *role))
        .collect();
    let q = &start.queue;
    let mut seen = Vec::new();
    for w in q.waiting(100).unwrap() {
        let state = match w.state {
            WaitState::Ready => "ready",
            WaitState::Leased => "leased",
            WaitState::Scheduled(_) => "scheduled",
        };
        let role = role_of[w.job.id.as_str()];
        seen.push(format!("{role}: {state} at {}", w.job.priority));
    }
    for d in q.dead(100).unwrap() {
        seen.push(format!("{}: dead", role_of[d.job.id.as_str()]));
    }
    let c = q.counts().unwrap();
    seen.push(format!(
        "counts {} ready {} scheduled {} leased {} dead",
        c.ready, c.scheduled, c.leased, c.dead
    ));
    seen
}

/// Runs `single` of each asked id on one queue and `batch` on another in
/// the same starting state; both answer and end alike.
fn compare(
    backend: &dyn Backend,
    (name, tags): (&str, [char; 2]),
    single: impl Fn(&dyn JobQueue, &str) -> dque::Result<()>,
    batch: impl Fn(&dyn JobQueue, &[String]) -> Vec<dque::Result<()>>,
) -> Vec<String> {
    let one_by_one = start(backend, &format!("{name}_single"), tags[0]);
    let at_once = start(backend, &format!("{name}_batch"), tags[1]);
    let asked_single = asked(&one_by_one.ids);
    let asked_batch = asked(&at_once.ids);
    let singles: Vec<String> = asked_single
        .iter()
        .map(|id| kind(&single(one_by_one.queue.as_ref(), id)))
        .collect();
    let batched: Vec<String> = batch(at_once.queue.as_ref(), &asked_batch)
        .iter()
        .map(kind)
        .collect();
    assert_eq!(batched, singles, "the batch answers as the single calls");
    assert_eq!(
        state(&at_once),
        state(&one_by_one),
        "the batch leaves the queue as the single calls"
    );
    singles
}

pub fn cancel_many_is_cancel_of_each_in_order(backend: &dyn Backend) {
    let answers = compare(
        backend,
        ("cancel_many", ['a', 'b']),
        |q, id| q.cancel(id),
        |q, ids| q.cancel_many(ids),
    );
    // The single calls' answers, as the contract says (the batch's equal
    // them): the second ask of a job finds none; leased ones are refused.
    assert_eq!(
        answers,
        [
            "ok",
            "leased",
            "no such job",
            "ok",
            "ok",
            "no such job",
            "ok",
            "no such job",
            "leased",
            "ok",
            "no such job",
            "ok",
            "no such job",
            "ok",
            "ok",
        ]
    );
}

pub fn set_priority_many_is_set_priority_of_each_in_order(backend: &dyn Backend) {
    let answers = compare(
        backend,
        ("priority_many", ['c', 'd']),
        |q, id| q.set_priority(id, -2),
        |q, ids| q.set_priority_many(ids, -2),
    );
    // An id asked twice is found again where the first call moved it.
    assert_eq!(
        answers,
        [
            "ok",
            "leased",
            "no such job",
            "ok",
            "ok",
            "no such job",
            "ok",
            "ok",
            "leased",
            "ok",
            "no such job",
            "ok",
            "no such job",
            "ok",
            "ok",
        ]
    );
}
