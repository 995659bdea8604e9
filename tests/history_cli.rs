//! `dque job` and `dque work --timeout` (issue 27, history and timeouts)
//! on a directory, `postgres://…#QUEUE` and `redis://…#QUEUE` alike: one
//! job's record whatever its state, and a job running past its timeout
//! failing that attempt with "timed out" (the job's own timeout first).
//! Runs the real binary on real throwaway servers.

mod pg;
mod redis_server;
mod skip;
use pg::PgServer;
use redis_server::RedisServer;

mod dque_cmd;
use dque_cmd::{dque, ok};

fn job_json(q: &str, id: &str) -> serde_json::Value {
    serde_json::from_str(&ok(&["job", q, id, "--json"])).expect("one JSON document")
}

fn whats(job: &serde_json::Value) -> Vec<String> {
    job["history"]
        .as_array()
        .expect("a history")
        .iter()
        .map(|e| e["what"].as_str().expect("what").to_owned())
        .collect()
}

/// `dque job` follows a job from ready to completed; an unknown id is
/// exit code 6.
fn job_command_on(q: &str) {
    ok(&["push", q, "--id", "h-job", "--header", "owner=ops", "hello"]);
    let text = ok(&["job", q, "h-job"]);
    assert!(text.starts_with("job h-job in queue "), "{text}");
    assert!(text.contains(": ready"), "{text}");
    assert!(text.contains("owner=ops"), "{text}");
    assert!(text.contains("5 bytes: hello"), "{text}");
    assert_eq!(job_json(q, "h-job")["state"], "ready");
    ok(&[
        "work",
        q,
        "--until-empty",
        "--",
        "sh",
        "-c",
        "cat > /dev/null",
    ]);
    let done = job_json(q, "h-job");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    assert_eq!(done["body"], "hello", "{done}");
    assert!(done["worker"].is_string(), "{done}");
    assert!(done["finished_at_ms"].is_u64(), "{done}");
    let events = whats(&done);
    assert_eq!(
        events.first().map(String::as_str),
        Some("enqueued"),
        "{events:?}"
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("completed"),
        "{events:?}"
    );
    let text = ok(&["job", q, "h-job"]);
    assert!(text.contains(": completed"), "{text}");
    let unknown = dque(&["job", q, "no-such-job"]);
    assert_eq!(unknown.status.code(), Some(6), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no job \"no-such-job\""),
        "{unknown:?}"
    );
}

/// `dque work --timeout`: a command past the job's timeout is stopped
/// and the attempt fails with "timed out"; the job's own timeout (`push
/// --timeout`) takes precedence over the worker's, both ways.
fn work_timeout_on(q: &str) {
    // Its own 0.3 s beats the worker's 30 s: it times out.
    ok(&["push", q, "--id", "h-own", "--timeout", "0.3", "own"]);
    // Its own 30 s beats the worker's 0.3 s: it runs to its end.
    ok(&["push", q, "--id", "h-long", "--timeout", "30", "long"]);
    // None of its own: the worker's 0.3 s.
    ok(&["push", q, "--id", "h-plain", "plain"]);
    ok(&[
        "work",
        q,
        "--until-empty",
        "--jobs",
        "3",
        "--attempts",
        "1",
        "--timeout",
        "0.3",
        "--",
        "sh",
        "-c",
        // Each job's command would end well after 0.3 s.
        "cat > /dev/null; sleep 2",
    ]);
    for (id, state) in [
        ("h-own", "dead"),
        ("h-plain", "dead"),
        ("h-long", "completed"),
    ] {
        let job = job_json(q, id);
        assert_eq!(job["state"], state, "{id}: {job}");
        if state == "dead" {
            let error = job["last_error"].as_str().expect("an error");
            assert!(error.starts_with("timed out"), "{id}: {error}");
        }
    }
    assert_eq!(job_json(q, "h-own")["timeout_ms"], 300);
}

#[test]
fn job_and_work_timeout_on_a_directory() {
    let root = tempfile::tempdir().unwrap();
    let q = root.path().join("q");
    let q = q.to_str().expect("UTF-8 path");
    ok(&["push", q, "--create", "first"]);
    ok(&["pop", q]);
    job_command_on(q);
    work_timeout_on(q);
}

#[test]
fn job_and_work_timeout_on_postgres() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("hist-{}", std::process::id()));
    job_command_on(&q);
    work_timeout_on(&q);
}

#[test]
fn job_and_work_timeout_on_redis() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = server.address(1, "hist");
    job_command_on(&q);
    work_timeout_on(&q);
}
