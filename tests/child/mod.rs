//! Real child processes for crash and lock tests. A test that needs a child
//! runs this test binary again, filtered to itself alone ([`command`]), with
//! a marker in the environment; its first line, [`run_as_child`], sees the
//! marker and runs the child's body instead of the test. So every test the
//! harness counts is a real test: no entry point that passes by doing
//! nothing when run on its own.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Set in a child's environment, to the name of the test it runs.
const CHILD: &str = "DQUE_TEST_CHILD";

/// The first line of every test that starts children:
/// `if child::run_as_child(body) { return; }`. In a child started by
/// [`command`] it runs `body` and returns true; in a normal run it returns
/// false and the test goes on as the parent.
pub fn run_as_child(body: impl FnOnce()) -> bool {
    let in_child = std::env::var_os(CHILD).is_some();
    if in_child {
        body();
    }
    in_child
}

/// This test binary, set to run only `test` (the name of the calling test,
/// which starts with [`run_as_child`]) as a child. A wrong name runs no test
/// at all, so the child reports nothing and the parent's checks fail.
pub fn command(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, test);
    command
}

/// Held while a test spawns children: a child forked for one test briefly
/// holds copies of every open file, another test's queue lock included,
/// until it execs; a reopen in that window would see a spurious Locked.
pub fn one_spawner_at_a_time() -> MutexGuard<'static, ()> {
    static SPAWN: Mutex<()> = Mutex::new(());
    SPAWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// `test` started as a child (see [`command`]) with `env`, and its stdout.
fn spawn_with_stdout(test: &str, env: &[(&str, String)]) -> (Child, ChildStdout) {
    let mut child = command(test)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    (child, stdout)
}

/// Runs `test` as a child (see [`command`]) with `env`, kills it with
/// SIGKILL after `run_for`, and returns every line it printed.
pub fn run_until_killed(test: &str, env: &[(&str, String)], run_for: Duration) -> Vec<String> {
    let (mut child, stdout) = spawn_with_stdout(test, env);
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(run_for);
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap()
}

/// The line a child prints with [`ready`] once its queue is open.
const READY: &str = "@@ READY";

/// Says, from a child, that its setup is done (its queue open): the parent's
/// [`run_until_killed_once_ready`] times its kill from here.
pub fn ready() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY}").unwrap();
    out.flush().unwrap();
}

/// As [`run_until_killed`], but `run_for` counts from the child's [`ready`]
/// line (waited for up to a minute), not from the spawn: on a loaded
/// machine starting a process can take longer than a round, and a child
/// killed before it began would test nothing. Returns the lines after it.
pub fn run_until_killed_once_ready(
    test: &str,
    env: &[(&str, String)],
    run_for: Duration,
) -> Vec<String> {
    let (mut child, stdout) = spawn_with_stdout(test, env);
    let (lines, read) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let wait = deadline.saturating_duration_since(std::time::Instant::now());
        match read.recv_timeout(wait) {
            Ok(line) if line.contains(READY) => break,
            Ok(_) => {}
            Err(gone) => {
                let _ = child.kill();
                panic!("the child was not ready within a minute: {gone}");
            }
        }
    }
    std::thread::sleep(run_for);
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    read.try_iter().collect()
}

/// Kills per mode: `default`, or `DQUE_KILLS` for a longer round.
pub fn kills(default: u64) -> u64 {
    std::env::var("DQUE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Copies a queue directory `from` to `to` (files and subdirectories), as
/// a kill left it: checks that change a queue run on the copy.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
