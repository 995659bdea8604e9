//! dque's Redis backend and the real Python qless clients (qless-py
//! 0.11.4, reqless 0.13.3) on the same jobs in the same Redis: each side
//! leases, completes, fails and retries what the other put, and sees the
//! other's state, history and statistics. A real throwaway `redis-server`
//! (`tests/redis_server/`), real clients (`tests/qless_clients/`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dque::jobs::{JobQueue, NewJob, QlessPut, RedisJobs, RedisOptions, Retry};
use dque::Error;
use serde_json::{json, Value};

mod qless_clients;
mod redis_server;
mod skip;
use qless_clients::{Client, Kind};
use redis_server::RedisServer;

/// A database of its own on the binary's server, a Rust handle on `queue`
/// and a Python client of `kind`; `None` when a part is missing (skipped).
fn setup(kind: Kind, queue: &str, lease: Duration) -> Option<(RedisJobs, Client, u32)> {
    static DB: AtomicU32 = AtomicU32::new(0);
    let server = RedisServer::get()?;
    qless_clients::python()?;
    let db = DB.fetch_add(1, Ordering::Relaxed) % 64;
    let url = server.url(db);
    let rust = RedisOptions::new()
        .lease_time(lease)
        .worker(format!("rust-{db}"))
        .connect(&url, queue)
        .expect("connect");
    let python = Client::start(kind, &url, &format!("python-{db}"));
    Some((rust, python, db))
}

fn events(job: &Value) -> Vec<String> {
    job["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn python_puts_rust_leases_and_acks_python_sees_it_complete() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "mail", Duration::from_secs(60)) else {
            return;
        };
        let jid = py.put(json!({"queue": "mail", "data": "{\"to\": \"ops\"}", "klass": "py.Mail"}));
        let lease = rust.lease().unwrap().expect("the Python job");
        assert_eq!(lease.id, jid);
        assert_eq!(lease.body, br#"{"to": "ops"}"#, "{kind:?}");
        assert_eq!(lease.header("klass"), Some("py.Mail"));
        assert_eq!((lease.attempt, lease.priority), (1, 0));
        let seen = py.get(&jid).unwrap();
        assert_eq!(
            (seen["state"].as_str(), seen["worker"].as_str()),
            (Some("running"), Some(rust.worker()))
        );
        rust.ack(lease).unwrap();
        let seen = py.get(&jid).unwrap();
        assert_eq!(seen["state"], "complete", "{kind:?}");
        assert_eq!(events(&seen), ["put", "popped", "done"]);
        // Each side sees the day's statistics of both.
        let stats = py.call(json!({"op": "stats", "queue": "mail"}));
        assert_eq!(
            (
                stats["wait"]["count"].as_u64(),
                stats["run"]["count"].as_u64()
            ),
            (Some(1), Some(1))
        );
        let ours = rust.stats().unwrap();
        let day = ours.days.last().expect("today");
        assert_eq!((day.wait.count, day.run.count), (1, 1));
        assert!((day.run.mean - stats["run"]["mean"].as_f64().unwrap()).abs() < 1e-9);
    }
}

#[test]
fn rust_puts_with_priority_tags_delay_and_retries_python_pops_and_completes() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, db)) = setup(kind, "build", Duration::from_secs(60)) else {
            return;
        };
        let urgent = rust
            .put(
                NewJob::new(r#"{"target": "release"}"#)
                    .priority(-5)
                    .header("klass", "ci.Build")
                    .delay(Duration::from_secs(3600)),
                QlessPut::new().tags(["nightly", "arm"]).retries(2),
            )
            .unwrap();
        let plain = rust.enqueue(NewJob::new("not JSON")).unwrap();
        let first = py.pop("build").expect("the ready job");
        assert_eq!(first["jid"], plain.id(), "the delayed one is not due yet");
        assert_eq!(
            first["data"], "\"not JSON\"",
            "a body that is not JSON is a JSON string"
        );
        assert_eq!(first["klass"], dque::jobs::DEFAULT_KLASS);
        // The hour passes: its due time moved into the past, as the clocks
        // would see it (no sleep, so a busy machine cannot reorder this).
        let server = RedisServer::get().unwrap();
        server.cli(db, &["ZADD", "ql:q:build-scheduled", "1", urgent.id()]);
        let job = py.pop("build").expect("due now");
        assert_eq!(job["jid"], urgent.id());
        assert_eq!(job["priority"], 5, "qless's priorities run the other way");
        assert_eq!(job["tags"], json!(["nightly", "arm"]));
        assert_eq!(
            (job["retries"].as_i64(), job["remaining"].as_i64()),
            (Some(2), Some(2))
        );
        assert_eq!(job["klass"], "ci.Build");
        assert_eq!(job["data"], r#"{"target": "release"}"#);
        py.call(json!({"op": "complete", "jid": urgent.id()}));
        py.call(json!({"op": "complete", "jid": plain.id()}));
        let record = rust.job(urgent.id()).unwrap().unwrap();
        assert_eq!(record.state, "complete");
        assert_eq!(record.history_events(), ["put", "popped", "done"]);
        assert_eq!(rust.job(plain.id()).unwrap().unwrap().job.body, b"not JSON");
        assert_eq!(rust.counts().unwrap(), Default::default());
    }
}

#[test]
fn an_expired_rust_lease_goes_to_a_python_worker_with_a_retry_used() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, db)) = setup(kind, "slow", Duration::from_secs(60)) else {
            return;
        };
        let id = rust
            .put(NewJob::new("{}"), QlessPut::new().retries(3))
            .unwrap();
        // qless clients take an expired job only after the grace period
        // (default 10 s) more.
        py.call(json!({"op": "config", "name": "grace-period", "value": 0}));
        let lease = rust.lease().unwrap().unwrap();
        assert!(py.pop("slow").is_none(), "held by the Rust worker");
        // The lease time passes: its lock's deadline moved into the past.
        let server = RedisServer::get().unwrap();
        server.cli(db, &["ZADD", "ql:q:slow-locks", "1", id.id()]);
        let job = py.pop("slow").expect("the lease ended");
        assert_eq!(job["jid"], id.id());
        assert_eq!(
            job["remaining"], 2,
            "{kind:?}: the timed-out attempt counted"
        );
        assert!(events(&job).contains(&"timed-out".to_owned()), "{job}");
        let late = rust.ack(lease);
        let lost = matches!(late, Err(Error::LeaseLost { .. }));
        assert!(lost, "{late:?}");
        py.call(json!({"op": "complete", "jid": id.id()}));
        assert_eq!(rust.job(id.id()).unwrap().unwrap().state, "complete");
    }
}

#[test]
fn failures_and_unfail_cross_sides() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "parse", Duration::from_secs(60)) else {
            return;
        };
        // Python puts, Rust fails, Python lists the group and unfails.
        let jid = py.put(json!({"queue": "parse", "data": "{}"}));
        let lease = rust.lease().unwrap().unwrap();
        rust.fail(lease, "bad-input: line 3").unwrap();
        let failed = py.call(json!({"op": "failed", "group": "bad-input"}));
        assert_eq!(failed["total"], 1, "{failed}");
        let seen = py.get(&jid).unwrap();
        assert_eq!(seen["state"], "failed");
        assert_eq!(seen["failure"]["group"], "bad-input");
        assert_eq!(seen["failure"]["message"], "bad-input: line 3");
        assert_eq!(
            py.call(json!({"op": "unfail", "group": "bad-input", "queue": "parse"})),
            1
        );
        let again = rust.lease().unwrap().expect("unfailed");
        assert_eq!((again.id.as_str(), again.attempt), (jid.as_str(), 1));
        rust.ack(again).unwrap();

        // Rust puts, Python fails, Rust lists the dead letter and requeues.
        let id = rust.enqueue(NewJob::new("{}")).unwrap();
        let job = py.pop("parse").unwrap();
        assert_eq!(job["jid"], id.id());
        py.call(
            json!({"op": "fail", "jid": id.id(), "group": "py-error", "message": "KeyError: x"}),
        );
        let dead = rust.dead(10).unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (dead[0].job.id.as_str(), dead[0].reason.as_str()),
            (id.id(), "KeyError: x")
        );
        assert_eq!(rust.counts().unwrap().dead, 1);
        rust.requeue_dead(id.id()).unwrap();
        let job = py.pop("parse").expect("requeued");
        assert_eq!(job["jid"], id.id());
        assert!(py.call(json!({"op": "failed", "group": "py-error"}))["total"] == 0);
        py.call(json!({"op": "complete", "jid": id.id()}));
        // Python's retry and Rust's nack both use up retries.
        let id = rust
            .put(NewJob::new("{}"), QlessPut::new().retries(1))
            .unwrap();
        py.pop("parse").unwrap();
        py.call(json!({"op": "retry", "jid": id.id(), "group": "flaky", "message": "try again"}));
        let lease = rust.lease().unwrap().unwrap();
        assert_eq!(lease.attempt, 2, "{kind:?}");
        let nacked = rust
            .nack(lease, Retry::After(Duration::ZERO), "flaky: again")
            .unwrap();
        assert_eq!(nacked, dque::jobs::Nacked::Dead);
        let seen = py.get(id.id()).unwrap();
        assert_eq!(
            (seen["state"].as_str(), seen["remaining"].as_i64()),
            (Some("failed"), Some(-1))
        );
    }
}

#[test]
fn both_sides_putting_pop_in_one_priority_order() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "mixed", Duration::from_secs(60)) else {
            return;
        };
        let mut expected = Vec::new();
        // (side, Jobs API priority); qless's is the negation.
        let plan = [
            ("py", 0),
            ("rust", 0),
            ("py", -1),
            ("rust", 3),
            ("rust", -2),
            ("py", 0),
            ("rust", -1),
        ];
        for (n, (side, priority)) in plan.iter().enumerate() {
            let id = if *side == "py" {
                py.put(json!({"queue": "mixed", "data": format!("{{\"n\": {n}}}"), "priority": -priority}))
            } else {
                rust.enqueue(NewJob::new(format!("{{\"n\": {n}}}")).priority(*priority))
                    .unwrap()
                    .id()
                    .to_owned()
            };
            expected.push((*priority, n, id));
        }
        expected.sort();
        let mut popped = Vec::new();
        for turn in 0..expected.len() {
            if turn % 2 == 0 {
                let lease = rust.lease().unwrap().unwrap();
                popped.push(lease.id.clone());
                rust.ack(lease).unwrap();
            } else {
                let job = py.pop("mixed").unwrap();
                let jid = job["jid"].as_str().unwrap().to_owned();
                py.call(json!({"op": "complete", "jid": jid}));
                popped.push(jid);
            }
        }
        let order: Vec<String> = expected.into_iter().map(|(_, _, id)| id).collect();
        assert_eq!(popped, order, "{kind:?}");
    }
}

#[test]
fn a_dependency_across_the_two_sides() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "chain", Duration::from_secs(60)) else {
            return;
        };
        // Python's job waits on Rust's.
        let first = rust.enqueue(NewJob::new("{}")).unwrap();
        let second = py.put(json!({"queue": "chain", "data": "{}", "depends": [first.id()]}));
        assert_eq!(py.get(&second).unwrap()["state"], "depends");
        let lease = rust.lease().unwrap().unwrap();
        assert_eq!(lease.id, first.id());
        assert!(py.pop("chain").is_none(), "{kind:?}: waits on the first");
        rust.ack(lease).unwrap();
        let job = py.pop("chain").expect("ready once the first completed");
        assert_eq!(job["jid"], second.as_str());
        py.call(json!({"op": "complete", "jid": second}));
        // Rust's job waits on Python's.
        let third = py.put(json!({"queue": "chain", "data": "{}"}));
        let fourth = rust
            .put(NewJob::new("{}"), QlessPut::new().depends([third.as_str()]))
            .unwrap();
        assert_eq!(py.get(fourth.id()).unwrap()["dependencies"], json!([third]));
        assert_eq!(py.pop("chain").unwrap()["jid"], third.as_str());
        assert!(rust.lease().unwrap().is_none());
        py.call(json!({"op": "complete", "jid": third}));
        let lease = rust.lease().unwrap().expect("ready now");
        assert_eq!(lease.id, fourth.id());
        rust.ack(lease).unwrap();
    }
}

/// qless lets a client change a running job's priority: after dque hands
/// the job back, it runs at its new priority.
#[test]
fn a_priority_python_changes_while_rust_holds_the_job_survives_a_release() {
    let Some((rust, mut py, _)) = setup(Kind::QlessPy, "reprio", Duration::from_secs(60)) else {
        return;
    };
    let low = rust.enqueue(NewJob::new("{}").priority(0)).unwrap();
    let high = rust.enqueue(NewJob::new("{}").priority(-50)).unwrap();
    let first = rust.lease().unwrap().unwrap();
    let second = rust.lease().unwrap().unwrap();
    assert_eq!(
        (first.id.as_str(), second.id.as_str()),
        (high.id(), low.id())
    );
    rust.release(first).unwrap();
    py.call(json!({"op": "priority", "jid": low.id(), "priority": 100}));
    rust.release(second).unwrap();
    let next = py.pop("reprio").unwrap();
    assert_eq!(next["jid"], low.id(), "priority 100 goes first now");
    assert_eq!(rust.lease().unwrap().unwrap().id, high.id());
}

/// A qless client's put of an id dque used rewrites the job: dque reads
/// the new data and class, not what it had kept beside the old ones.
#[test]
fn a_python_re_put_replaces_what_dque_wrote() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "reput", Duration::from_secs(60)) else {
            return;
        };
        rust.enqueue(
            NewJob::new("hello")
                .header("klass", "old.Klass")
                .header("owner", "ops")
                .id("same"),
        )
        .unwrap();
        rust.ack(rust.lease().unwrap().unwrap()).unwrap();
        py.put(json!({"queue": "reput", "jid": "same", "data": "{\"to\": \"new\"}", "klass": "new.Klass"}));
        let lease = rust.lease().unwrap().unwrap();
        assert_eq!(lease.body, br#"{"to": "new"}"#, "{kind:?}");
        assert_eq!(
            lease.headers,
            [("klass".to_owned(), "new.Klass".to_owned())]
        );
        rust.ack(lease).unwrap();
    }
}

/// qless's complete refuses data that decodes to `false`: such a body is
/// kept as text, and Python completes it.
#[test]
fn python_completes_a_job_whose_body_is_false() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "falsy", Duration::from_secs(60)) else {
            return;
        };
        let id = rust.enqueue(NewJob::new("false")).unwrap();
        py.pop("falsy").unwrap();
        py.call(json!({"op": "complete", "jid": id.id()}));
        let record = rust.job(id.id()).unwrap().unwrap();
        assert_eq!(
            (record.state.as_str(), record.job.body.as_slice()),
            ("complete", &b"false"[..])
        );
    }
}

/// A Python worker whose lease ran out keeps its job through qless's grace
/// period: dque's pop does not take it, and its heartbeat still holds.
#[test]
fn a_python_worker_keeps_its_job_through_the_grace_period() {
    for kind in Kind::BOTH {
        let Some((rust, mut py, _)) = setup(kind, "grace", Duration::from_secs(60)) else {
            return;
        };
        py.call(json!({"op": "config", "name": "heartbeat", "value": 1}));
        let jid = py.put(json!({"queue": "grace", "data": "{}"}));
        py.pop("grace").unwrap();
        std::thread::sleep(Duration::from_millis(1300));
        assert!(
            rust.lease().unwrap().is_none(),
            "{kind:?}: in its grace period"
        );
        py.call(json!({"op": "heartbeat", "jid": jid}));
        py.call(json!({"op": "complete", "jid": jid}));
        assert_eq!(py.get(&jid).unwrap()["state"], "complete");
    }
}

/// reqless's per-queue throttle: dque takes its lock while a job runs,
/// and releases the one a reqless worker took when dque settles that
/// worker's job.
#[test]
fn reqless_throttle_locks_do_not_leak() {
    let Some((rust, mut py, db)) = setup(Kind::Reqless, "thr", Duration::from_millis(200)) else {
        return;
    };
    let server = RedisServer::get().unwrap();
    let locks = |server: &RedisServer| {
        server
            .cli(db, &["ZCARD", "ql:th:ql:q:thr-locks"])
            .trim()
            .to_owned()
    };
    let jid = py.put(json!({"queue": "thr", "data": "{}"}));
    let lease = rust.lease().unwrap().unwrap();
    assert_eq!(lease.id, jid);
    assert_eq!(
        locks(server),
        "1",
        "dque holds the queue's throttle, as reqless"
    );
    rust.ack(lease).unwrap();
    assert_eq!(locks(server), "0", "and lets it go");
    // A reqless worker takes a lock and lets its lease run out; dque
    // reclaims the job and releases the lock.
    py.call(json!({"op": "config", "name": "heartbeat", "value": 1}));
    py.call(json!({"op": "config", "name": "grace-period", "value": 0}));
    let second = py.put(json!({"queue": "thr", "data": "{}"}));
    py.pop("thr").unwrap();
    assert_eq!(locks(server), "1", "reqless took one");
    std::thread::sleep(Duration::from_millis(1200));
    let lease = rust.lease().unwrap().expect("reclaimed");
    assert_eq!(lease.id, second);
    assert_eq!(locks(server), "1", "reqless's lock went; dque's is the one");
    rust.ack(lease).unwrap();
    assert_eq!(locks(server), "0");
}

/// Dead letters in the order they died, when a qless client failed a job
/// dque had failed before: its latest failure counts.
#[test]
fn dead_letters_follow_a_python_failure_after_a_dque_one() {
    let Some((rust, mut py, _)) = setup(Kind::QlessPy, "refail", Duration::from_secs(60)) else {
        return;
    };
    let j = rust.enqueue(NewJob::new("{}").id("J")).unwrap();
    rust.fail(rust.lease().unwrap().unwrap(), "first: J")
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let k = rust.enqueue(NewJob::new("{}").id("K")).unwrap();
    rust.fail(rust.lease().unwrap().unwrap(), "first: K")
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    py.put(json!({"queue": "refail", "jid": "J", "data": "{}"}));
    py.pop("refail").unwrap();
    py.call(json!({"op": "fail", "jid": "J", "group": "again", "message": "second: J"}));
    let order: Vec<String> = rust
        .dead(10)
        .unwrap()
        .into_iter()
        .map(|d| d.job.id)
        .collect();
    assert_eq!(order, [k.id(), j.id()], "K died before J's second death");
}

/// Pins issue 23 (6) as qless clients see it: the `failed` count of
/// the day a job failed (qless's `stats(date)`) went back to 0 only if the
/// job left the failed state that same day (a requeue the next day left it
/// at 1 and took the next day to -1), and a nack with no reason filed the
/// job in a failure group with no name.
#[test]
fn python_reads_failed_counts_by_the_failure_day_and_a_named_group() {
    for kind in Kind::BOTH {
        let Some((_, mut py, db)) = setup(kind, "daily", Duration::from_secs(60)) else {
            return;
        };
        let url = RedisServer::get().unwrap().url(db);
        let day = 86_400u64;
        let failed_at = 20_100 * day + 600;
        let clock =
            dque::jobs::ManualClock::new(std::time::UNIX_EPOCH + Duration::from_secs(failed_at));
        let rust = RedisOptions::new()
            .clock(std::sync::Arc::new(clock.clone()))
            .connect(&url, "daily")
            .unwrap();
        let failed_on = |py: &mut Client, at: u64| {
            let stats = py.call(json!({"op": "stats", "queue": "daily", "date": at}));
            stats["failed"].as_i64().unwrap_or(0)
        };
        let id = rust
            .put(NewJob::new("{}"), QlessPut::new().retries(0))
            .unwrap();
        let lease = rust.lease().unwrap().unwrap();
        assert_eq!(
            rust.nack(lease, Retry::Backoff, "").unwrap(),
            dque::jobs::Nacked::Dead
        );
        let seen = py.get(id.id()).unwrap();
        assert_eq!(seen["failure"]["group"], "failed-retries-daily", "{kind:?}");
        let group = py.call(json!({"op": "failed", "group": "failed-retries-daily"}));
        assert_eq!(group["total"], 1, "{group}");
        assert_eq!(failed_on(&mut py, failed_at), 1, "{kind:?}");
        clock.advance(Duration::from_secs(day));
        rust.requeue_dead(id.id()).unwrap();
        assert_eq!(
            (
                failed_on(&mut py, failed_at),
                failed_on(&mut py, failed_at + day)
            ),
            (0, 0),
            "{kind:?}: the failure's day and the next"
        );
    }
}

/// Pins a difference qless-core's suite found: a job a qless client put
/// with a delay and a dependency keeps its due time (qless's `scheduled`
/// field) while it waits; when dque completed the dependency, the job was
/// made ready at once instead of scheduled. (reqless only: qless-py 0.11.4
/// refuses a put with both.)
#[test]
fn a_python_delay_behind_a_dependency_holds_after_dque_completes_it() {
    let kind = Kind::Reqless;
    let Some((rust, mut py, _)) = setup(kind, "later", Duration::from_secs(60)) else {
        return;
    };
    let first = rust.enqueue(NewJob::new("{}")).unwrap();
    let second =
        py.put(json!({"queue": "later", "data": "{}", "depends": [first.id()], "delay": 3600}));
    assert_eq!(py.get(&second).unwrap()["state"], "depends");
    let lease = rust.lease().unwrap().unwrap();
    rust.ack(lease).unwrap();
    assert_eq!(py.get(&second).unwrap()["state"], "scheduled", "{kind:?}");
    assert!(py.pop("later").is_none(), "{kind:?}: due in an hour");
    assert!(rust.lease().unwrap().is_none());
    assert_eq!(rust.counts().unwrap().scheduled, 1);
}
