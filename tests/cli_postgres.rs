//! The `dque` command on a PostgreSQL queue (`postgres://…#QUEUE`), on a
//! real throwaway server: push with the job flags, work, pop, peek, dead,
//! requeue and stats, as on a directory.

mod pg;
mod skip;
use pg::PgServer;

mod dque_cmd;
use dque_cmd::{every_jobs_command_on, ok};

/// The test that stops the server has it alone.
static SERVER_USE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    SERVER_USE.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn every_jobs_command_works_on_a_postgres_queue() {
    let _alone = alone();
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("cli-{}", std::process::id()));
    every_jobs_command_on(&q);
}

/// Lines in `path` (0 if it is not there yet).
fn lines_in(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// Waits until `path` holds `want` lines, or panics after a minute.
fn wait_for_lines(path: &std::path::Path, want: usize, worker: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while lines_in(path) < want {
        let exited = worker.try_wait().unwrap();
        assert!(exited.is_none(), "the worker exited: {exited:?}");
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {want} jobs done",
            lines_in(path)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

// Issue 23, item 5: `dque work` exited 1 on the first server error, and its
// handle never connected again. Across a `pg_ctl restart`, and across a
// server down for longer than a call waits for it, the worker keeps
// running and does the jobs pushed once the server is back.
#[test]
fn work_rides_over_server_restarts() {
    use std::process::{Command, Stdio};
    let _alone = alone();
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("restarts-{}", std::process::id()));
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let script = format!("cat >> {}; echo >> {}", done.display(), done.display());
    for n in 0..5 {
        ok(&["push", &q, &format!("before {n}")]);
    }
    let errors = dir.path().join("stderr");
    let mut worker = Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(["work", &q, "--jobs", "2", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .unwrap();
    wait_for_lines(&done, 5, &mut worker);
    server.restart();
    for n in 0..5 {
        ok(&["push", &q, &format!("after a restart {n}")]);
    }
    wait_for_lines(&done, 10, &mut worker);
    // Down longer than a call waits (5 s): the worker's calls fail, and it
    // says so and goes on.
    server.down_for(std::time::Duration::from_secs(7));
    for n in 0..5 {
        ok(&["push", &q, &format!("after a stop {n}")]);
    }
    wait_for_lines(&done, 15, &mut worker);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&worker),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = worker.wait().unwrap();
    let said = std::fs::read_to_string(&errors).unwrap();
    assert!(status.success(), "{status:?}: {said}");
    assert!(said.contains("tries again"), "{said}");
    assert!(said.contains("answers again"), "{said}");
    let ran = std::fs::read_to_string(&done).unwrap();
    for n in 0..5 {
        for when in ["before", "after a restart", "after a stop"] {
            assert!(ran.contains(&format!("{when} {n}")), "{ran}");
        }
    }
}
