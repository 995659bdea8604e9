//! A test whose server is missing says so where `cargo test` shows it.
//!
//! Issue 23, item 8: the skip line went through `eprintln!`, which the test
//! harness captures, so `cargo test` said "41 passed" when nothing ran; and
//! on stock Debian, where PostgreSQL's programs are not on PATH, the tests
//! said "PostgreSQL is not installed" with it installed.
//!
//! This binary runs itself again as a child with a PATH that holds no
//! `redis-server` and the harness's capture on (the default), and reads
//! the child's stderr.

#[cfg(feature = "postgres")]
mod pg;
mod redis_server;
mod skip;

use std::process::{Command, Output};

use redis_server::RedisServer;

/// Set in the child's environment: only then do the child checks ask for
/// a server.
const CHILD: &str = "DQUE_SKIPS_CHILD";

#[test]
fn child_asks_for_redis_once() {
    if std::env::var_os(CHILD).is_some() {
        assert!(RedisServer::get().is_none(), "no redis-server on PATH");
    }
}

#[test]
fn child_asks_for_redis_twice() {
    if std::env::var_os(CHILD).is_some() {
        assert!(RedisServer::get().is_none(), "no redis-server on PATH");
    }
}

/// This binary's child checks, run with a PATH without `redis-server`, the
/// harness capturing their output, and `CI` as given.
fn run_children(ci: Option<&str>) -> Output {
    let empty = tempfile::tempdir().expect("temp dir");
    let mut command = Command::new(std::env::current_exe().expect("this binary"));
    command
        .args(["child_asks_for_redis", "--test-threads=1"])
        .env(CHILD, "1")
        .env("PATH", empty.path())
        .env_remove("RUST_TEST_NOCAPTURE")
        .env_remove("CI");
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    command.output().expect("run this test binary again")
}

#[test]
fn a_missing_server_is_named_once_in_the_default_output() {
    // Pins: the skip line reaches stderr past the harness's capture, once
    // per test binary however many tests skip, naming the binary and what
    // to install.
    let output = run_children(None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("2 passed"), "{stdout}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("skipped: "))
        .collect();
    assert_eq!(lines.len(), 1, "one skip line:\n{stderr}");
    for word in ["skips", "redis-server is not installed", "apt-get install"] {
        assert!(lines[0].contains(word), "{word:?} in {:?}", lines[0]);
    }
}

#[test]
fn a_missing_server_fails_under_ci() {
    // Pins: under CI=true a missing server is a failure, not a skip.
    let output = run_children(Some("true"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(
        stdout.contains("CI=true and redis-server is not installed"),
        "{stdout}"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn postgresql_is_found_where_debian_puts_it() {
    // Pins: with nothing on PATH, the helper finds PostgreSQL's programs
    // in /usr/lib/postgresql/NN/bin (where `.ci/run` looks), the newest.
    let debian: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    let empty = tempfile::tempdir().expect("temp dir");
    let found = pg::programs_dir(empty.path().as_os_str());
    match debian.is_empty() {
        true => assert_eq!(found, None),
        false => {
            let found = found.expect("found in /usr/lib/postgresql");
            assert!(debian.contains(&found), "{found:?} of {debian:?}");
        }
    }
}
