//! `dque pause`, `resume`, `limit`, `limits`, `push --limit` and what
//! `dque stats` shows of them and of the queue's schedules (issue 27), on
//! a directory, a PostgreSQL queue and a Redis queue alike, on real
//! throwaway servers.

mod pg;
mod redis_server;
mod skip;
use pg::PgServer;
use redis_server::RedisServer;

mod dque_cmd;
use dque_cmd::{dque, ok};

/// The whole flow on queue `q` (an ADDRESS whose queue exists, empty);
/// `tag` makes the limit's name unique (Redis limits are database-wide).
fn limits_and_pause_on(q: &str, tag: &str) {
    let name = format!("tenant-{tag}");
    ok(&["push", q, "--limit", &name, "a", "b"]);
    ok(&["push", q, "free"]);
    ok(&["limit", q, &name, "1"]);
    let listed = ok(&["limits", q]);
    assert_eq!(listed, format!("{name}  0 of 1 running\n"));

    // Paused: nothing is leased, and stats says so (text and JSON).
    ok(&["pause", q]);
    let stats = ok(&["stats", q]);
    assert!(stats.contains("paused       yes"), "{stats}");
    assert!(stats.contains(&format!("limits       {name}")), "{stats}");
    let json: serde_json::Value = serde_json::from_str(&ok(&["stats", q, "--json"])).unwrap();
    assert_eq!(json["paused"], true, "{json}");
    assert_eq!(json["limits"][0]["name"], name.as_str(), "{json}");
    assert_eq!(json["limits"][0]["max"], 1, "{json}");
    let popped = dque(&["pop", q]);
    assert_eq!(popped.status.code(), Some(6), "paused: nothing to pop");
    ok(&["resume", q]);
    let json: serde_json::Value = serde_json::from_str(&ok(&["stats", q, "--json"])).unwrap();
    assert_eq!(json["paused"], false, "{json}");

    // Resumed: pop takes them all (it acks each at once, so the limit of
    // 1 is free again for the second of the tenant).
    assert_eq!(ok(&["pop", q, "-n", "5"]), "a\nb\nfree\n");
    ok(&["limit", q, &name, "--remove"]);
    assert_eq!(ok(&["limits", q]), "no limits\n");
    let listed: serde_json::Value = serde_json::from_str(&ok(&["limits", q, "--json"])).unwrap();
    assert_eq!(listed, serde_json::json!({"paused": false, "limits": []}));

    // Refusals change nothing, and say what to do.
    let zero = dque(&["limit", q, &name, "0"]);
    assert_eq!(zero.status.code(), Some(2));
    let bad = dque(&["push", q, "--limit", "a b", "x"]);
    assert!(!bad.status.success());
    let both = dque(&["push", q, "--limit", "x", "--header", "limits=y", "x"]);
    let told = String::from_utf8_lossy(&both.stderr);
    assert!(told.contains("give the limits one way"), "{told}");
    assert_eq!(
        dque(&["pop", q]).status.code(),
        Some(6),
        "nothing was added"
    );
}

#[test]
fn limits_and_pause_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q");
    let q = q.to_str().unwrap();
    ok(&["push", q, "--create", "first"]);
    assert_eq!(ok(&["pop", q]), "first");
    limits_and_pause_on(q, "dir");
    // Stored in the directory: stats reads them without opening it.
    ok(&["limit", q, "smtp", "3"]);
    ok(&["pause", q]);
    let stats = ok(&["stats", q]);
    assert!(stats.contains("limits       smtp at most 3"), "{stats}");
    assert!(stats.contains("paused       yes"), "{stats}");
}

#[test]
fn limits_and_pause_on_postgres() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("cli-limits-{}", std::process::id()));
    ok(&["push", &q, "first"]);
    assert_eq!(ok(&["pop", &q]), "first");
    limits_and_pause_on(&q, "pg");
}

#[test]
fn limits_and_pause_on_redis() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = server.address(3, "cli-limits");
    limits_and_pause_on(&q, "redis");
    // qless's own keys: the pause is qless's, the limit reqless's throttle.
    ok(&["pause", &q]);
    let paused = server.cli(3, &["SISMEMBER", "ql:paused_queues", "cli-limits"]);
    assert_eq!(paused.trim(), "1");
    ok(&["limit", &q, "smtp", "2"]);
    let max = server.cli(3, &["HGET", "ql:th:smtp", "maximum"]);
    assert_eq!(max.trim(), "2");
}

/// The schedules `dque stats --json` shows, by name: (name, next run).
fn stats_schedules(q: &str) -> Vec<(String, String)> {
    let json: serde_json::Value = serde_json::from_str(&ok(&["stats", q, "--json"])).unwrap();
    let mut found: Vec<(String, String)> = json["schedules"]
        .as_array()
        .unwrap_or_else(|| panic!("no schedules array: {json}"))
        .iter()
        .map(|s| {
            let name = s["name"].as_str().unwrap().to_owned();
            (name, s["next_run"].as_str().unwrap().to_owned())
        })
        .collect();
    found.sort();
    found
}

/// `dque stats` shows each schedule of queue `q` (an ADDRESS whose queue
/// exists) with its next run, in text and JSON, as `dque schedules` lists
/// them; `prefix` makes the names unique where they are global (Redis).
fn schedules_in_stats_on(q: &str, prefix: &str) {
    // Issue 27 left-over: `dque stats` showed a queue's pause and limits
    // but not its schedules, on any backend.
    let (tick, nightly) = (format!("{prefix}tick"), format!("{prefix}nightly"));
    assert_eq!(stats_schedules(q), [], "none yet");
    assert!(
        !ok(&["stats", q]).contains("schedules"),
        "no line when none"
    );
    ok(&["schedule", q, &tick, "--every", "1h", "hello"]);
    ok(&[
        "schedule",
        q,
        &nightly,
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
        "report",
    ]);
    let listed: serde_json::Value = serde_json::from_str(&ok(&["schedules", q, "--json"])).unwrap();
    let mut expected: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["name"].as_str().unwrap().to_owned();
            (name, s["next_run"].as_str().unwrap().to_owned())
        })
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 2, "{listed}");
    assert_eq!(stats_schedules(q), expected);
    let text = ok(&["stats", q]);
    for (name, next) in &expected {
        let cadence = match name == &tick {
            true => "every 1h".to_owned(),
            false => "cron \"0 3 * * *\" Europe/Paris".to_owned(),
        };
        let line = format!("{name} ({cadence}), next run {next}\n");
        assert!(text.contains(&line), "{line:?} not in:\n{text}");
    }
    assert_eq!(
        text.matches("schedules    ").count(),
        1,
        "one heading: {text}"
    );
    ok(&["unschedule", q, &tick]);
    ok(&["unschedule", q, &nightly]);
    assert_eq!(stats_schedules(q), []);
}

#[test]
fn stats_shows_schedules_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q");
    let q = q.to_str().unwrap();
    ok(&["push", q, "--create", "first"]);
    schedules_in_stats_on(q, "");
}

#[test]
fn stats_shows_schedules_on_postgres() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("cli-stats-sched-{}", std::process::id()));
    ok(&["push", &q, "first"]);
    schedules_in_stats_on(&q, "");
}

#[test]
fn stats_shows_schedules_on_redis() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let q = server.address(3, "cli-stats-sched");
    ok(&["push", &q, "first"]);
    schedules_in_stats_on(&q, "cli-stats-");
}
