//! The jobs commands as scripts use them: `dque push` with priorities,
//! delays, headers and ids, `dque work` (one command per job, its exit
//! deciding the job's fate, SIGTERM giving running jobs back) and
//! `dque stats --json`. Runs the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod dque_cmd;
use dque_cmd::{dque, ok};

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn stats(q: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["stats", s(q), "--json"])).expect("one JSON document")
}

/// A queue made by `push --create` in a temporary directory.
fn new_queue(root: &Path) -> PathBuf {
    let q = root.join("q");
    ok(&["push", s(&q), "--create", "--delay", "3600", "placeholder"]);
    ok(&["push", s(&q), "--id", "x", "x"]);
    // Start each test with one scheduled job that never runs, so
    // `--until-empty` is seen not to wait for scheduled jobs.
    let cancel = ok(&["pop", s(&q)]);
    assert_eq!(cancel, "x");
    q
}

#[test]
fn work_runs_each_job_once_in_priority_order_with_its_environment() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&["push", s(&q), "--priority", "5", "low"]);
    ok(&[
        "push",
        s(&q),
        "--header",
        "owner=ops",
        "--header",
        "Step_2=b c",
        "plain",
    ]);
    ok(&[
        "push",
        s(&q),
        "--priority",
        "-3",
        "--id",
        "order-9",
        "urgent",
    ]);
    let again = dque(&[
        "push",
        s(&q),
        "--priority",
        "-3",
        "--id",
        "order-9",
        "urgent",
    ]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("queued already"));
    let log = root.path().join("log");
    let script = format!(
        "printf '%s|%s|%s|%s|%s|%s\\n' \"$DQUE_JOB_ID\" \"$DQUE_ATTEMPT\" \"$DQUE_PRIORITY\" \
         \"$DQUE_HEADER_owner\" \"$DQUE_HEADER_Step_2\" \"$(cat)\" >> {}",
        s(&log)
    );
    ok(&["work", s(&q), "--until-empty", "--", "sh", "-c", &script]);
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| {
            // Made-up ids differ per run: keep only whether there is one.
            let (id, rest) = line.split_once('|').unwrap();
            let id = if id == "order-9" { id } else { "<made up>" };
            format!("{id}|{rest}")
        })
        .collect();
    assert_eq!(
        lines,
        [
            "order-9|1|-3|||urgent",
            "<made up>|1|0|ops|b c|plain",
            "<made up>|1|5|||low",
        ]
    );
    let v = stats(&q);
    assert_eq!(
        v["counts"]["scheduled"], 1,
        "the delayed job was not waited for: {v}"
    );
    assert_eq!(v["counts"]["ready"], 0, "{v}");
    assert_eq!(v["days"][0]["run"]["count"], 4, "x, then three: {v}");
}

#[test]
fn a_failing_command_is_retried_then_dead_with_its_exit_and_last_line() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&["push", s(&q), "poison"]);
    let attempts = root.path().join("attempts");
    let script = format!(
        "echo \"$DQUE_ATTEMPT\" >> {}; echo 'first line' >&2; echo 'disk on fire' >&2; exit 3",
        s(&attempts)
    );
    let out = dque(&[
        "work",
        s(&q),
        "--until-empty",
        "--attempts",
        "3",
        "--backoff",
        "0",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("disk on fire"),
        "stderr is relayed"
    );
    assert_eq!(std::fs::read_to_string(&attempts).unwrap(), "1\n2\n3\n");
    let dead = ok(&["dead", s(&q)]);
    assert!(dead.contains("exit 3: disk on fire"), "{dead}");
    let v = stats(&q);
    assert_eq!(v["counts"]["dead"], 1, "{v}");
    assert_eq!(v["days"][0]["failures"]["exit 3"], 1, "{v}");
    assert_eq!(v["days"][0]["retries"], 2, "{v}");
}

#[test]
fn a_backoff_keeps_the_job_scheduled() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&["push", s(&q), "flaky"]);
    ok(&[
        "work",
        s(&q),
        "--until-empty",
        "--backoff",
        "600",
        "--",
        "false",
    ]);
    let v = stats(&q);
    assert_eq!(
        (&v["counts"]["scheduled"], &v["counts"]["ready"]),
        (&2.into(), &0.into()),
        "{v}"
    );
}

#[test]
fn jobs_run_n_at_a_time() {
    // Each job waits (up to 10 s) until two jobs have started: with
    // --jobs 2 both pass; one at a time, each would time out and fail.
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    let marks = root.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    for i in 0..4 {
        ok(&["push", s(&q), &format!("job{i}")]);
    }
    let script = format!(
        "cd {}; touch \"$(cat)\"; n=0; while [ \"$(ls | wc -l)\" -lt 2 ]; do \
         n=$((n+1)); [ $n -gt 1000 ] && exit 1; sleep 0.01; done",
        s(&marks)
    );
    ok(&[
        "work",
        s(&q),
        "--until-empty",
        "--jobs",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let v = stats(&q);
    assert_eq!(v["counts"]["dead"], 0, "{v}");
    assert_eq!(v["days"][0]["retries"], 0, "no job timed out: {v}");
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 4);
}

#[test]
fn sigterm_gives_running_jobs_back_without_an_attempt() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&["push", s(&q), "long"]);
    let started = root.path().join("started");
    let script = format!("touch {}; sleep 60; echo finished", s(&started));
    let worker = Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(["work", s(&q), "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start dque work");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = rustix::process::Pid::from_raw(worker.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let out = worker.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "the command was stopped, not finished"
    );
    // The job is back, ready, its attempt not counted.
    let v = stats(&q);
    assert_eq!(
        (&v["counts"]["ready"], &v["counts"]["leased"]),
        (&1.into(), &0.into()),
        "{v}"
    );
    let attempt = root.path().join("attempt");
    let record = format!("echo \"$DQUE_ATTEMPT\" > {}", s(&attempt));
    ok(&["work", s(&q), "--until-empty", "--", "sh", "-c", &record]);
    assert_eq!(std::fs::read_to_string(&attempt).unwrap(), "1\n");
}

#[test]
fn a_command_that_cannot_start_leaves_the_job_alone() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&["push", s(&q), "kept"]);
    let out = dque(&["work", s(&q), "--until-empty", "--", "/no/such/command"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run"));
    assert_eq!(ok(&["pop", s(&q)]), "kept");
}

#[test]
fn job_flags_on_a_plain_queue_are_refused_and_add_nothing() {
    let root = tempfile::tempdir().unwrap();
    let plain = root.path().join("plain");
    dque::RawQueue::create(&plain).unwrap().close().unwrap();
    for flags in [
        &["--priority", "1"][..],
        &["--delay", "5"],
        &["--header", "a=b"],
        &["--id", "i"],
    ] {
        let mut args = vec!["push", s(&plain)];
        args.extend_from_slice(flags);
        args.push("item");
        let out = dque(&args);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("plain FIFO queue"));
    }
    // Bodies alone work as before, and `work` runs them.
    ok(&["push", s(&plain), "body"]);
    let log = root.path().join("log");
    ok(&[
        "work",
        s(&plain),
        "--until-empty",
        "--",
        "sh",
        "-c",
        &format!("cat > {}", s(&log)),
    ]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "body");
    let bad = dque(&["push", s(&plain), "--header", "no-equals-sign", "x"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn server_addresses_are_parsed_and_a_server_that_is_not_there_is_an_error() {
    // Nothing listens on port 1: a clear error naming the server, exit 1.
    let out = dque(&["stats", "postgres://u@127.0.0.1:1/db#jobs"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PostgreSQL"),
        "{out:?}"
    );
    let out = dque(&["stats", "redis://127.0.0.1:1#jobs"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Redis"),
        "{out:?}"
    );
    let out = dque(&["push", "redis://localhost", "x"]);
    assert_eq!(out.status.code(), Some(2), "no queue name: a usage error");
}

#[test]
fn peek_dump_dead_and_requeue_show_jobs_with_their_headers() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    ok(&[
        "push",
        s(&q),
        "--priority",
        "2",
        "--header",
        "owner=ops",
        "--id",
        "j-1",
        "body one",
    ]);
    ok(&["push", s(&q), "--priority", "-2", "body two"]);
    let peek = ok(&["peek", s(&q), "-n", "1"]);
    assert!(
        peek.contains("priority -2") && peek.contains("body two"),
        "{peek}"
    );
    let one = ok(&["peek", s(&q), "--id", "j-1"]);
    assert!(
        one.contains("owner=\"ops\"") && one.contains("body one"),
        "{one}"
    );
    let dump: Vec<serde_json::Value> = ok(&["dump", s(&q), "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let listed: Vec<(&str, bool)> = dump
        .iter()
        .map(|v| {
            (
                v["text"].as_str().unwrap(),
                v["scheduled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("body two", false),
            ("body one", false),
            ("placeholder", true)
        ],
        "lanes by priority, then the schedule"
    );
    assert_eq!(dump[1]["headers"]["owner"], "ops");
    assert_eq!(dump[1]["id"], "j-1");
    ok(&[
        "work",
        s(&q),
        "--until-empty",
        "--attempts",
        "1",
        "--",
        "false",
    ]);
    let dead = ok(&["dead", s(&q)]);
    assert!(
        dead.contains("job j-1 priority 2") && dead.contains("reason \"exit 1"),
        "{dead}"
    );
    let missing = dque(&["requeue", s(&q), "no-such-job"]);
    assert_eq!(missing.status.code(), Some(1));
    ok(&["requeue", s(&q), "j-1"]);
    let v = stats(&q);
    assert_eq!(
        (&v["counts"]["ready"], &v["counts"]["dead"]),
        (&1.into(), &1.into()),
        "{v}"
    );
}

// Found in review: after SIGTERM, a worker waiting for a job still started
// the command for a job pushed right then (killing it a moment later and
// giving the job back, so its effect happened twice).
#[test]
fn no_job_starts_after_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let q = new_queue(root.path());
    let log = root.path().join("ran");
    for _ in 0..5 {
        let script = format!("echo ran >> {}; sleep 5", s(&log));
        let worker = Command::new(env!("CARGO_BIN_EXE_dque"))
            .args(["work", s(&q), "--", "sh", "-c", &script])
            .spawn()
            .expect("start dque work");
        // Waiting for a job now (the queue has none ready).
        std::thread::sleep(Duration::from_millis(300));
        let pid = rustix::process::Pid::from_raw(worker.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        ok(&["push", s(&q), "late"]);
        let out = worker.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(!log.exists(), "a command started after SIGTERM");
        assert_eq!(ok(&["pop", s(&q)]), "late");
    }
}
