//! Limits and pause (issue 27) between dque's Redis backend and the real
//! Python clients: a limit is a reqless throttle and a pause qless's, so
//! each side honours what the other set, and a lock either side takes is
//! released when that side settles its job.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dque::jobs::{JobQueue, NewJob, RedisJobs, RedisOptions};
use serde_json::json;

mod qless_clients;
mod redis_server;
mod skip;
use qless_clients::{Client, Kind};
use redis_server::RedisServer;

/// A database of its own (counted down from 63: `qless_interop` counts
/// up), a Rust handle on `queue` and a Python client of `kind`.
fn setup(kind: Kind, queue: &str) -> Option<(RedisJobs, Client)> {
    setup_leasing(kind, queue, Duration::from_secs(60))
}

/// As [`setup`], the Rust handle's leases lasting `lease_time`.
fn setup_leasing(kind: Kind, queue: &str, lease_time: Duration) -> Option<(RedisJobs, Client)> {
    static DB: AtomicU32 = AtomicU32::new(0);
    let server = RedisServer::get()?;
    qless_clients::python()?;
    let db = 63 - DB.fetch_add(1, Ordering::Relaxed) % 32;
    let url = server.url(db);
    let rust = RedisOptions::new()
        .lease_time(lease_time)
        .worker(format!("rust-{db}"))
        .connect(&url, queue)
        .expect("connect");
    let python = Client::start(kind, &url, &format!("python-{db}"));
    Some((rust, python))
}

#[test]
fn a_pause_on_either_side_stops_the_other() {
    for kind in Kind::BOTH {
        let Some((rust, mut py)) = setup(kind, "paused") else {
            return;
        };
        py.put(json!({"queue": "paused", "data": "{}"}));
        py.call(json!({"op": "pause", "queue": "paused"}));
        assert!(rust.is_paused().unwrap(), "{kind:?}: qless's pause is ours");
        assert!(rust.lease().unwrap().is_none());
        rust.resume().unwrap();
        rust.pause().unwrap();
        assert!(py.pop("paused").is_none(), "{kind:?}: ours is qless's");
        rust.resume().unwrap();
        let job = py.pop("paused").expect("resumed");
        py.call(json!({"op": "complete", "jid": job["jid"]}));
    }
}

#[test]
fn a_reqless_throttle_limits_dque_and_a_dque_limit_limits_reqless() {
    let Some((rust, mut py)) = setup(Kind::Reqless, "thr") else {
        return;
    };
    // Set by reqless, honoured by dque.
    py.call(json!({"op": "throttle_set", "name": "tenant", "maximum": 1}));
    let first = py.put(json!({"queue": "thr", "data": "{}", "throttles": ["tenant"]}));
    let second = py.put(json!({"queue": "thr", "data": "{}", "throttles": ["tenant"]}));
    let held = rust.lease().unwrap().expect("one");
    assert_eq!(held.id, first);
    assert!(rust.lease().unwrap().is_none(), "tenant is full");
    assert!(py.pop("thr").is_none(), "for reqless too");
    rust.ack(held).unwrap();
    let job = py.pop("thr").expect("the pending job came back to work");
    assert_eq!(job["jid"], second.as_str());
    assert!(rust.lease().unwrap().is_none(), "reqless holds it now");
    py.call(json!({"op": "complete", "jid": second}));

    // Set by dque, honoured by reqless; a dque job's limits are its throttles.
    rust.set_limit("smtp", 1).unwrap();
    assert_eq!(
        py.call(json!({"op": "throttle_maximum", "name": "smtp"})),
        1
    );
    let ours = rust
        .enqueue(NewJob::new("mail").limit("smtp"))
        .unwrap()
        .id()
        .to_owned();
    let theirs = py.put(json!({"queue": "thr", "data": "{}", "throttles": ["smtp"]}));
    let job = py.pop("thr").expect("ours first");
    assert_eq!(job["jid"], ours.as_str());
    assert_eq!(
        py.call(json!({"op": "throttle_locks", "name": "smtp"})),
        json!([ours])
    );
    assert!(rust.lease().unwrap().is_none(), "smtp is full");
    py.call(json!({"op": "complete", "jid": ours}));
    let lease = rust
        .lease()
        .unwrap()
        .expect("reqless's release let it back");
    assert_eq!(lease.id, theirs);
    rust.ack(lease).unwrap();
    assert_eq!(rust.limits().unwrap()[0].running, 0);
}

// Bug (review of issue 27): a job dque set aside on a full throttle waits
// outside the work set, and came back only when a holder's lease ended
// through dque's script. When the holder was a job dque had leased but a
// qless-py worker (which knows no throttles) took over after the lease
// ran out and completed, its lock stayed and nothing let the waiting job
// back: it was never leased again.
#[test]
fn a_job_waiting_on_a_limit_comes_back_when_a_qless_py_worker_ends_its_holder() {
    let Some((rust, mut py)) = setup_leasing(Kind::QlessPy, "stale", Duration::from_millis(500))
    else {
        return;
    };
    // qless's grace period would give the lease that ran out 10 s more.
    py.call(json!({"op": "config", "name": "grace-period", "value": 0}));
    rust.set_limit("stale-one", 1).unwrap();
    let holder = rust
        .enqueue(NewJob::new("holder").limit("stale-one"))
        .unwrap()
        .id()
        .to_owned();
    rust.enqueue(NewJob::new("waiter").limit("stale-one"))
        .unwrap();
    let lost = rust.lease().unwrap().expect("the holder");
    assert!(rust.lease().unwrap().is_none(), "the waiter is set aside");
    std::thread::sleep(Duration::from_millis(1200));
    let job = py
        .pop("stale")
        .expect("qless-py takes the job whose lease ran out");
    assert_eq!(job["jid"], holder.as_str());
    py.call(json!({"op": "complete", "jid": holder}));
    drop(lost);
    let waiter = rust.lease().unwrap().expect("the waiter comes back");
    assert_eq!(waiter.body, b"waiter");
    rust.ack(waiter).unwrap();
}
