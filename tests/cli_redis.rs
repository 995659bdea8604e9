//! The `dque` command on a Redis queue (`redis+unix://…#QUEUE`), on a
//! real throwaway server: push with the job flags, work, pop, peek, dead,
//! requeue and stats, as on a directory; and a job a Python qless client
//! put, run by `dque work`.

mod redis_server;
mod skip;
use redis_server::RedisServer;

mod qless_clients;

mod dque_cmd;
use dque_cmd::{every_jobs_command_on, ok};

#[test]
fn every_jobs_command_works_on_a_redis_queue() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = server.address(1, "cli");
    every_jobs_command_on(&q);
    // The same jobs, as qless keeps them.
    let failed = server.cli(1, &["SMEMBERS", "ql:failures"]);
    assert!(failed.trim().is_empty(), "requeued: {failed}");
    let scheduled = server.cli(1, &["ZCARD", "ql:q:cli-scheduled"]);
    assert_eq!(scheduled.trim(), "1");
}

#[test]
fn dque_work_runs_a_job_a_python_client_put() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    if qless_clients::python().is_none() {
        return;
    }
    let mut py =
        qless_clients::Client::start(qless_clients::Kind::QlessPy, &server.url(2), "python-cli");
    let jid = py.put(serde_json::json!({
        "queue": "py", "data": "{\"file\": \"a.jpg\"}", "klass": "photos.Resize"
    }));
    let log = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "printf '%s %s %s' \"$DQUE_JOB_ID\" \"$DQUE_HEADER_klass\" \"$(cat)\" >> {}",
        log.path().display()
    );
    let q = server.address(2, "py");
    ok(&["work", &q, "--until-empty", "--", "sh", "-c", &script]);
    let ran = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(ran, format!("{jid} photos.Resize {{\"file\": \"a.jpg\"}}"));
    let job = py.get(&jid).unwrap();
    assert_eq!(job["state"], "complete");
}
