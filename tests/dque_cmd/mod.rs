//! Running the `dque` binary from a test: its output, or its stdout once
//! it succeeded.
#![allow(dead_code)] // each test binary uses the parts it needs

use std::process::{Command, Output, Stdio};

/// Runs `dque args` with an empty stdin.
pub fn dque(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dque")
}

/// Runs `dque args`, which must succeed; its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = dque(args);
    assert!(
        out.status.success(),
        "dque {args:?}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 stdout")
}

/// The whole flow of the jobs commands on a server queue `q` (an ADDRESS):
/// push with the job flags, peek, work (order, environment, retries and a
/// dead letter), dead, stats, requeue and pop, as on a directory. Leaves
/// one job scheduled an hour ahead.
pub fn every_jobs_command_on(q: &str) {
    ok(&["push", q, "--priority", "3", "low"]);
    ok(&[
        "push",
        q,
        "--priority",
        "-3",
        "--header",
        "owner=ops",
        "--id",
        "urgent",
        "urgent",
    ]);
    let again = dque(&["push", q, "--id", "urgent", "urgent"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("queued already"));
    ok(&["push", q, "--delay", "3600", "later"]);
    let peek = ok(&["peek", q]);
    assert!(
        peek.find("urgent").unwrap() < peek.find("low").unwrap(),
        "{peek}"
    );
    assert!(peek.contains("owner=\"ops\""), "{peek}");
    let log = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "printf '%s %s|' \"$DQUE_JOB_ID\" \"$(cat)\" >> {}",
        log.path().display()
    );
    ok(&["work", q, "--until-empty", "--", "sh", "-c", &script]);
    let ran = std::fs::read_to_string(log.path()).unwrap();
    assert!(ran.starts_with("urgent urgent|"), "{ran}");
    assert!(ran.ends_with(" low|"), "{ran}");
    ok(&["push", q, "poison"]);
    ok(&[
        "work",
        q,
        "--until-empty",
        "--attempts",
        "1",
        "--",
        "sh",
        "-c",
        "echo bad >&2; exit 7",
    ]);
    let dead = ok(&["dead", q]);
    assert!(dead.contains("exit 7: bad"), "{dead}");
    let stats: serde_json::Value = serde_json::from_str(&ok(&["stats", q, "--json"])).unwrap();
    assert_eq!(stats["counts"]["dead"], 1, "{stats}");
    assert_eq!(stats["counts"]["scheduled"], 1, "{stats}");
    assert_eq!(stats["days"][0]["failures"]["exit 7"], 1, "{stats}");
    ok(&["requeue", q, "--all"]);
    assert_eq!(ok(&["pop", q]), "poison");
    let empty = dque(&["pop", q]);
    assert_eq!(
        empty.status.code(),
        Some(6),
        "only the scheduled job is left"
    );
}
