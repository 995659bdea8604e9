//! Recurring jobs on Redis are qless recurring jobs (issue 27): the real
//! Python clients (qless-py 0.11.4, reqless 0.13.3) list a schedule dque
//! added and fire it from their own pops (one job for the tick, which
//! dque then does not add again), and dque lists and fires a recurring
//! job a Python client added. Real throwaway `redis-server`, real clients.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dque::jobs::{JobQueue, RedisJobs, RedisOptions, Schedule};
use serde_json::{json, Value};

mod qless_clients;
mod redis_server;
mod skip;
use qless_clients::{Client, Kind};
use redis_server::RedisServer;

fn setup(kind: Kind, queue: &str) -> Option<(RedisJobs, Client)> {
    static DB: AtomicU32 = AtomicU32::new(10);
    let server = RedisServer::get()?;
    qless_clients::python()?;
    let db = DB.fetch_add(1, Ordering::Relaxed) % 64;
    let url = server.url(db);
    let rust = RedisOptions::new()
        .worker(format!("rust-{db}"))
        .connect(&url, queue)
        .expect("connect");
    let python = Client::start(kind, &url, &format!("python-{db}"));
    Some((rust, python))
}

#[test]
fn a_qless_client_lists_and_fires_a_dque_schedule_once_per_tick() {
    for kind in Kind::BOTH {
        let Some((rust, mut py)) = setup(kind, "recur") else {
            return;
        };
        rust.schedule(
            Schedule::every("hourly", Duration::from_secs(3600))
                .body(r#"{"report": 1}"#)
                .kind("reports.Hourly")
                .priority(-3),
        )
        .unwrap();
        assert_eq!(
            py.call(json!({"op": "recurring", "queue": "recur"})),
            json!(["hourly"]),
            "{kind:?}"
        );
        let seen = py.call(json!({"op": "get_recur", "jid": "hourly"}));
        assert_eq!(seen["klass"], "reports.Hourly", "{kind:?}: {seen}");
        assert_eq!(seen["queue"], "recur");
        assert_eq!(seen["interval"].as_f64(), Some(3600.0), "{seen}");
        assert_eq!(seen["priority"], 3, "qless's priority is the negated one");
        // The first tick is due: the Python client's pop fires it (qless
        // names the job NAME-COUNT) ...
        let job = py.pop("recur").expect("the tick's job, fired by qless");
        assert_eq!(job["jid"], "hourly-1", "{kind:?}: {job}");
        assert_eq!(job["klass"], "reports.Hourly");
        let data: Value = serde_json::from_str(job["data"].as_str().unwrap()).unwrap();
        assert_eq!(data, json!({"report": 1}));
        // ... and dque's leases add nothing more for it.
        assert_eq!(rust.fire_schedules().unwrap(), 0, "{kind:?}");
        assert!(rust.lease().unwrap().is_none(), "{kind:?}");
        let listed = rust.schedules().unwrap();
        assert!(listed[0].next_run > std::time::SystemTime::now() + Duration::from_secs(3000));
        assert!(rust.unschedule("hourly").unwrap());
        assert_eq!(
            py.call(json!({"op": "recurring", "queue": "recur"})),
            json!([])
        );
    }
}

#[test]
fn dque_lists_and_fires_a_recurring_job_a_qless_client_added() {
    for kind in Kind::BOTH {
        let Some((rust, mut py)) = setup(kind, "pyrecur") else {
            return;
        };
        let jid = py.call(json!({
            "op": "recur", "queue": "pyrecur", "klass": "py.Ping",
            "data": "{\"ping\": true}", "interval": 60, "jid": "py-ping",
        }));
        assert_eq!(jid, "py-ping", "{kind:?}");
        let listed = rust.schedules().unwrap();
        assert_eq!(listed.len(), 1, "{kind:?}");
        let schedule = &listed[0].schedule;
        assert_eq!(schedule.name(), "py-ping");
        assert_eq!(
            schedule.cadence(),
            &dque::jobs::Cadence::Every(Duration::from_secs(60))
        );
        let lease = rust
            .lease()
            .unwrap()
            .expect("the tick's job, fired by dque");
        // Spawned as qless spawns it (the script's spawn, its count).
        assert_eq!(lease.id, "py-ping-1");
        assert_eq!(lease.header("klass"), Some("py.Ping"));
        let body: Value = serde_json::from_slice(&lease.body).unwrap();
        assert_eq!(body, json!({"ping": true}));
        rust.ack(lease).unwrap();
        // The Python client's pop finds the tick fired: nothing more.
        assert!(py.pop("pyrecur").is_none(), "{kind:?}");
        let seen = py.call(json!({"op": "get_recur", "jid": "py-ping"}));
        assert_eq!(seen["count"], 1, "{kind:?}: {seen}");
        py.call(json!({"op": "unrecur", "jid": "py-ping"}));
        assert!(rust.schedules().unwrap().is_empty());
    }
}

/// qless-core's `test/test_recurring.py`, the tests that apply to dque's
/// schedules, on a clock the test moves (dque fires at its leases where
/// qless fires at its pops; dque's jobs are `NAME@TICK`, qless's
/// `NAME-COUNT`). What differs by design is in QLESS.md ("Recurring
/// jobs").
mod qless_core_recurring {
    use super::*;
    use dque::jobs::{tick_id, CatchUp, ManualClock, NewJob};
    use std::sync::Arc;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn t0() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// A handle on `queue` in a database of its own, its clock at `t0()`;
    /// the database's number for `redis-cli`.
    fn on(queue: &str) -> Option<(RedisJobs, ManualClock, u32)> {
        static DB: AtomicU32 = AtomicU32::new(20);
        let server = RedisServer::get()?;
        let db = DB.fetch_add(1, Ordering::Relaxed) % 64;
        let clock = ManualClock::new(t0());
        let q = RedisOptions::new()
            .clock(Arc::new(clock.clone()))
            .max_attempts(3)
            .connect(&server.url(db), queue)
            .unwrap();
        Some((q, clock, db))
    }

    fn ids(q: &RedisJobs) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(lease) = q.lease().unwrap() {
            ids.push(lease.id.clone());
            q.ack(lease).unwrap();
        }
        ids
    }

    fn at(s: u64) -> SystemTime {
        t0() + Duration::from_secs(s)
    }

    #[test]
    fn test_basic() {
        let Some((q, clock, _)) = on("queue") else {
            return;
        };
        q.schedule(Schedule::every("jid", Duration::from_secs(60)))
            .unwrap();
        assert_eq!(ids(&q), [tick_id("jid", at(0))]);
        clock.set(at(59));
        assert!(ids(&q).is_empty());
        clock.set(at(61));
        assert_eq!(ids(&q), [tick_id("jid", at(60))]);
    }

    #[test]
    fn test_priority_and_retries() {
        let Some((q, _, _)) = on("queue") else { return };
        q.enqueue(NewJob::new("{}").id("low")).unwrap();
        q.schedule(Schedule::every("high", Duration::from_secs(60)).priority(-10))
            .unwrap();
        let first = q.lease().unwrap().unwrap();
        assert_eq!(first.id, tick_id("high", at(0)));
        let job = q.job(&first.id).unwrap().unwrap();
        assert_eq!(
            (job.retries, job.remaining),
            (2, 2),
            "3 attempts: 2 retries"
        );
        assert_eq!(q.lease().unwrap().unwrap().id, "low");
    }

    #[test]
    fn test_get() {
        let Some((q, _, db)) = on("queue") else {
            return;
        };
        let server = RedisServer::get().unwrap();
        q.schedule(
            Schedule::every("jid", Duration::from_secs(60))
                .kind("klass")
                .body("{}"),
        )
        .unwrap();
        let field = |f: &str| server.cli(db, &["HGET", "ql:r:jid", f]).trim().to_owned();
        for (name, want) in [
            ("jid", "jid"),
            ("klass", "klass"),
            ("data", "{}"),
            ("priority", "0"),
            ("queue", "queue"),
            ("state", "recur"),
            ("tags", "{}"),
            ("count", "0"),
            ("interval", "60.000000"),
            ("retries", "2"),
            ("backlog", "1"),
        ] {
            assert_eq!(field(name), want, "{name}");
        }
        assert_eq!(server.cli(db, &["ZCARD", "ql:q:queue-recur"]).trim(), "1");
    }

    #[test]
    fn test_update_priority_data_klass_by_scheduling_again() {
        let Some((q, clock, _)) = on("queue") else {
            return;
        };
        let every = Schedule::every("jid", Duration::from_secs(60));
        q.schedule(every.clone().body("{}").kind("klass")).unwrap();
        assert_eq!(q.lease().unwrap().unwrap().priority, 0);
        q.schedule(every.body(r#"{"foo": "bar"}"#).kind("class").priority(-10))
            .unwrap();
        clock.set(at(60));
        let lease = q.lease().unwrap().unwrap();
        assert_eq!(lease.id, tick_id("jid", at(60)), "the next run was kept");
        assert_eq!(lease.priority, -10);
        assert_eq!(lease.body, br#"{"foo": "bar"}"#);
        assert_eq!(lease.header("klass"), Some("class"));
    }

    #[test]
    fn test_unrecur() {
        let Some((q, clock, _)) = on("queue") else {
            return;
        };
        q.schedule(Schedule::every("jid", Duration::from_secs(60)))
            .unwrap();
        assert_eq!(ids(&q).len(), 1);
        assert!(q.unschedule("jid").unwrap());
        clock.set(at(60));
        assert!(ids(&q).is_empty());
    }

    #[test]
    fn test_empty_array_data() {
        let Some((q, _, _)) = on("queue") else { return };
        q.schedule(Schedule::every("jid", Duration::from_secs(60)).body("[]"))
            .unwrap();
        let lease = q.lease().unwrap().unwrap();
        assert_eq!(lease.body, b"[]");
        assert_eq!(q.job(&lease.id).unwrap().unwrap().job.body, b"[]");
    }

    #[test]
    fn test_multiple() {
        // qless's backlog 0 spawns every missed tick: dque's Missed(N).
        let Some((q, clock, _)) = on("queue") else {
            return;
        };
        q.schedule(Schedule::every("jid", Duration::from_secs(60)).catch_up(CatchUp::Missed(100)))
            .unwrap();
        clock.set(at(599));
        let fired = ids(&q);
        let want: Vec<String> = (0..10).map(|k| tick_id("jid", at(60 * k))).collect();
        assert_eq!(fired, want);
    }

    #[test]
    fn test_rerecur_keeps_the_count() {
        let Some((q, clock, db)) = on("queue") else {
            return;
        };
        let server = RedisServer::get().unwrap();
        let every = Schedule::every("jid", Duration::from_secs(60));
        q.schedule(every.clone()).unwrap();
        assert_eq!(ids(&q).len(), 1);
        clock.set(at(60));
        q.schedule(every).unwrap();
        assert_eq!(ids(&q), [tick_id("jid", at(60))]);
        assert_eq!(server.cli(db, &["HGET", "ql:r:jid", "count"]).trim(), "2");
    }

    #[test]
    fn test_rerecur_move() {
        let Some((q, clock, db)) = on("queue") else {
            return;
        };
        let server = RedisServer::get().unwrap();
        let other = RedisOptions::new()
            .clock(Arc::new(clock.clone()))
            .connect(&server.url(db), "other")
            .unwrap();
        let every = Schedule::every("jid", Duration::from_secs(60));
        q.schedule(every.clone()).unwrap();
        assert_eq!(ids(&q).len(), 1);
        other.schedule(every).unwrap();
        clock.set(at(60));
        assert!(ids(&q).is_empty(), "no longer in the old queue");
        assert!(q.schedules().unwrap().is_empty());
        assert_eq!(ids(&other), [tick_id("jid", at(60))]);
    }
}
