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
        assert_eq!(py.call(json!({"op": "recurring", "queue": "recur"})), json!([]));
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
        let lease = rust.lease().unwrap().expect("the tick's job, fired by dque");
        assert!(lease.id.starts_with("py-ping@"), "{}", lease.id);
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
