//! `dque schedule`, `dque schedules` and `dque unschedule` (issue 27) on a
//! directory, a PostgreSQL queue and a Redis queue (real throwaway
//! servers): a schedule's jobs appear with nothing but `dque work`
//! running on the address, one per tick.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod dque_cmd;
mod pg;
mod redis_server;
mod skip;
use dque_cmd::{dque, ok};

/// The lines of `path` (none if it is not there yet).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The whole flow on queue `q`; `prefix` makes the schedule names unique
/// where names are global (Redis, as qless's recurring jobs).
fn schedule_commands_on(q: &str, prefix: &str) {
    let tick = format!("{prefix}tick");
    let nightly = format!("{prefix}nightly");
    let out = ok(&[
        "schedule",
        q,
        &tick,
        "--every",
        "500ms",
        "--priority",
        "2",
        "--header",
        "tenant=acme",
        "hello",
    ]);
    assert!(out.contains("next run"), "{out}");
    ok(&[
        "schedule",
        q,
        &nightly,
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
        "--kind",
        "reports.Nightly",
        "report",
    ]);
    // Bad schedules are usage errors and add nothing.
    for bad in [
        vec!["schedule", q, "bad", "--cron", "61 * * * *", "x"],
        vec!["schedule", q, "bad", "--every", "5", "x"],
        vec![
            "schedule",
            q,
            "bad",
            "--every",
            "1s",
            "--tz",
            "Mars/Olympus",
            "x",
        ],
        vec!["schedule", q, "bad", "x"],
    ] {
        let out = dque(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
    let listed: serde_json::Value = serde_json::from_str(&ok(&["schedules", q, "--json"])).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [nightly.as_str(), tick.as_str()], "{listed}");
    assert_eq!(listed[1]["every_ms"], 500);
    assert_eq!(listed[1]["priority"], 2);
    assert_eq!(listed[0]["cron"], "0 3 * * *");
    assert_eq!(listed[0]["tz"], "Europe/Paris");
    let text = ok(&["schedules", q]);
    assert!(
        text.contains(&format!("{tick}\tevery 500ms\tnext ")),
        "{text}"
    );

    // Only `dque work` runs on the address: the ticks' jobs appear.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran");
    let script = format!(
        "echo \"$DQUE_JOB_ID $DQUE_HEADER_tenant $(cat)\" >> {}",
        log.display()
    );
    let mut worker = Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(["work", q, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .expect("start dque work");
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&log).len() < 3 {
        assert!(Instant::now() < deadline, "ran: {:?}", lines(&log));
        assert!(worker.try_wait().unwrap().is_none(), "the worker exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = rustix::process::Pid::from_raw(worker.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(worker.wait().unwrap().success());
    let ran = lines(&log);
    let mut ids: Vec<&str> = ran.iter().map(|l| l.split(' ').next().unwrap()).collect();
    for line in &ran {
        assert!(line.starts_with(&format!("{tick}@")), "{line}");
        assert!(line.ends_with(" acme hello"), "{line}");
    }
    let count = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), count, "one job per tick: {ran:?}");

    ok(&["unschedule", q, &tick]);
    let again = dque(&["unschedule", q, &tick]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let listed: serde_json::Value = serde_json::from_str(&ok(&["schedules", q, "--json"])).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
}

#[test]
fn schedule_commands_on_a_directory() {
    let root = tempfile::tempdir().unwrap();
    let q = root.path().join("q");
    schedule_commands_on(q.to_str().unwrap(), "");
}

#[test]
fn schedule_commands_on_postgres() {
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let q = server.address(&format!("rec-cli-{}", std::process::id()));
    schedule_commands_on(&q, "");
}

#[test]
fn schedule_commands_on_redis_are_qless_recurring_jobs() {
    let Some(server) = redis_server::RedisServer::get() else {
        return;
    };
    let q = server.address(5, "rec-cli");
    schedule_commands_on(&q, "cli-");
    // The schedule left is a qless recurring job of the queue.
    assert_eq!(server.cli(5, &["ZCARD", "ql:q:rec-cli-recur"]).trim(), "1");
    assert_eq!(
        server.cli(5, &["HGET", "ql:r:cli-nightly", "state"]).trim(),
        "recur"
    );
    assert_eq!(
        server.cli(5, &["HGET", "ql:r:cli-nightly", "klass"]).trim(),
        "reports.Nightly"
    );
}

// Pins "an error had no effect": `dque schedule` with a bad schedule on a
// directory that does not exist made the queue there, then refused.
#[test]
fn a_bad_schedule_on_a_missing_directory_makes_no_queue() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("new");
    let q = q.to_str().unwrap();
    for bad in [
        vec!["schedule", q, "bad", "--cron", "61 * * * *", "x"],
        vec![
            "schedule",
            q,
            "bad",
            "--every",
            "1s",
            "--tz",
            "Mars/Olympus",
            "x",
        ],
        vec![
            "schedule", q, "bad", "--every", "1s", "--header", "a b=c", "x",
        ],
        vec!["schedule", q, "", "--every", "1s", "x"],
    ] {
        let out = dque(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(!Path::new(q).exists(), "{bad:?} made {q}");
    }
}
