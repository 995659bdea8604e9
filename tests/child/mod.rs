//! Real child processes for crash tests: the test binary runs one of its
//! own tests as the child, which reports each acknowledged operation on
//! stdout, and the parent kills it with SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Held while a test spawns children: a child forked for one test briefly
/// holds copies of every open file, another test's queue lock included,
/// until it execs; a reopen in that window would see a spurious Locked.
pub fn one_spawner_at_a_time() -> MutexGuard<'static, ()> {
    static SPAWN: Mutex<()> = Mutex::new(());
    SPAWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs test `entry` of this binary as a child with `env`, kills it after
/// `run_for`, and returns every line it printed.
pub fn run_until_killed(entry: &str, env: &[(&str, String)], run_for: Duration) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
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

/// Kills per mode: 50 by default, `DQUE_KILLS` for a longer round.
pub fn kills(default: u64) -> u64 {
    std::env::var("DQUE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
