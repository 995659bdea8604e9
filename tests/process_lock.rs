//! The process lock: one open handle per queue, checked across two real
//! processes and within one.
//!
//! A cross-process test runs this test binary again as a child, filtered to
//! that same test, whose first line (`child::run_as_child`) then runs
//! [`child_process`] instead: it reads what to do from environment variables
//! and answers on stdout in lines that start with [`ANSWER`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use dque::{DQue, Durability, Error, Options};

mod child;

/// The queue the child opens.
const CHILD_QUEUE: &str = "DQUE_LOCK_CHILD";
/// What the child does once it opened the queue: `drain` (dequeue every item,
/// report them, close) or `hold` (report, then keep the queue open until
/// killed or until its stdin closes).
const CHILD_MODE: &str = "DQUE_LOCK_CHILD_MODE";
/// Prefix of the child's answers, to tell them from the test harness's output.
const ANSWER: &str = "DQUE_CHILD ";
/// Far longer than a child ever needs; only a hung child reaches it.
const STUCK: Duration = Duration::from_secs(60);

/// Runs this file's tests one at a time. A spawned child holds copies of the
/// parent's open files between its fork and its exec, lock files included,
/// so a test that closes and reopens a queue while another test spawns a
/// child could see a lock that the child is about to drop.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The body of the child process (see the module docs).
fn child_process() {
    let path = std::env::var_os(CHILD_QUEUE).unwrap();
    let mode = std::env::var(CHILD_MODE).unwrap_or_else(|_| "drain".into());
    match DQue::<u64>::open(&path) {
        Err(Error::Locked { path }) => println!("{ANSWER}LOCKED {}", path.display()),
        Err(e) => println!("{ANSWER}ERROR {e}"),
        Ok(q) if mode == "hold" => {
            println!("{ANSWER}HELD");
            // Keeps the queue open until the parent kills us or closes stdin.
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            q.close().unwrap();
        }
        Ok(q) => {
            let mut items = Vec::new();
            while let Some(item) = q.dequeue().unwrap() {
                items.push(item);
            }
            q.close().unwrap();
            println!("{ANSWER}OPENED {items:?}");
        }
    }
}

/// A child of `test` (the calling test's name) that opens `queue` in `mode`.
fn child_command(test: &str, queue: &Path, mode: &str) -> Command {
    let mut command = child::command(test);
    command.env(CHILD_QUEUE, queue).env(CHILD_MODE, mode);
    command
}

/// The child's answer in a line of its stdout (the harness may print
/// `test <name> ... ` before it on the same line).
fn answer_in(line: &str) -> Option<&str> {
    line.find(ANSWER).map(|at| &line[at + ANSWER.len()..])
}

/// Runs a `drain` child of `test` to its end and returns its one answer.
fn run_child(test: &str, queue: &Path) -> String {
    let output = child_command(test, queue, "drain")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<&str> = stdout.lines().filter_map(answer_in).collect();
    assert_eq!(answers.len(), 1, "child stdout:\n{stdout}");
    answers[0].to_string()
}

/// Starts a `hold` child of `test` and waits until it reports that it holds
/// the queue.
fn hold_in_child(test: &str, queue: &Path) -> Child {
    let mut child = child_command(test, queue, "hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(answer) = answer_in(&line) {
                let _ = tx.send(answer.to_string());
            }
        }
    });
    match rx.recv_timeout(STUCK) {
        Ok(answer) if answer == "HELD" => child,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not hold the queue: {other:?}");
        }
    }
}

fn lock_path(queue: &Path) -> PathBuf {
    queue.join("dque.lock")
}

fn assert_locked<T: std::fmt::Debug>(result: Result<T, Error>, queue: &Path) {
    match result {
        Err(Error::Locked { path }) => assert_eq!(path, lock_path(queue)),
        other => panic!(
            "expected Locked naming {:?}, got {other:?}",
            lock_path(queue)
        ),
    }
}

#[test]
fn child_process_is_locked_out_while_the_parent_holds_the_queue() {
    if child::run_as_child(child_process) {
        return;
    }
    let this = "child_process_is_locked_out_while_the_parent_holds_the_queue";
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("q");
    let q: DQue<u64> = DQue::create(&queue).unwrap();
    for i in 1..=3 {
        q.enqueue(&i).unwrap();
    }

    let answer = run_child(this, &queue);
    assert_eq!(answer, format!("LOCKED {}", lock_path(&queue).display()));

    // The child's failed open left the parent's queue as it was.
    assert_eq!(q.len(), 3);
    assert_eq!(q.dequeue().unwrap(), Some(1));
    q.close().unwrap();

    // Closed (though the handle still exists): the child opens it and finds
    // the parent's items.
    assert_eq!(run_child(this, &queue), "OPENED [2, 3]");
    drop(q);

    // The child's dequeues are durable across processes.
    let q: DQue<u64> = DQue::open(&queue).unwrap();
    assert!(q.is_empty(), "the child's dequeues came back: {q:?}");
}

#[test]
fn child_process_opens_the_queue_after_the_parent_drops_it() {
    if child::run_as_child(child_process) {
        return;
    }
    let this = "child_process_opens_the_queue_after_the_parent_drops_it";
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("q");
    let q: DQue<u64> = Options::new()
        .durability(Durability::Turbo)
        .segment_items(2)
        .create(&queue)
        .unwrap();
    for i in 10..15 {
        q.enqueue(&i).unwrap();
    }
    assert!(run_child(this, &queue).starts_with("LOCKED "));
    drop(q);
    assert_eq!(run_child(this, &queue), "OPENED [10, 11, 12, 13, 14]");
}

#[test]
fn parent_is_locked_out_while_a_child_holds_the_queue_and_not_after_it_dies() {
    if child::run_as_child(child_process) {
        return;
    }
    let this = "parent_is_locked_out_while_a_child_holds_the_queue_and_not_after_it_dies";
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("q");
    let q: DQue<u64> = DQue::create(&queue).unwrap();
    q.enqueue(&5).unwrap();
    q.close().unwrap();

    let mut child = hold_in_child(this, &queue);
    let while_held = DQue::<u64>::open(&queue);
    let or_created = DQue::<u64>::open_or_create(&queue);
    // Killed, not asked to close: the lock must die with the process.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_locked(while_held, &queue);
    assert_locked(or_created, &queue);

    let q: DQue<u64> = DQue::open(&queue).unwrap();
    assert_eq!(q.dequeue().unwrap(), Some(5));
}

#[test]
fn second_open_in_the_same_process_is_locked() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("q");
    let q: DQue<u64> = DQue::create(&queue).unwrap();
    q.enqueue(&1).unwrap();

    assert_locked(DQue::<u64>::open(&queue), &queue);
    assert_locked(DQue::<u64>::open_or_create(&queue), &queue);
    assert_locked(Options::new().open::<u64, dque::Bincode>(&queue), &queue);
    // From another thread as well.
    let other = queue.clone();
    let from_thread = thread::spawn(move || DQue::<u64>::open(&other).map(drop))
        .join()
        .unwrap();
    assert_locked(from_thread, &queue);

    // The failed opens changed nothing.
    assert_eq!(q.len(), 1);
    q.enqueue(&2).unwrap();

    // close() releases the lock while the closed handle still exists.
    q.close().unwrap();
    let reopened: DQue<u64> = DQue::open(&queue).unwrap();
    assert_eq!(reopened.dequeue().unwrap(), Some(1));
    assert_locked(DQue::<u64>::open(&queue), &queue);

    // Dropping releases it too.
    drop(reopened);
    drop(q);
    let again: DQue<u64> = DQue::open(&queue).unwrap();
    assert_eq!(again.dequeue().unwrap(), Some(2));
    assert_eq!(again.dequeue().unwrap(), None);
}

#[test]
fn lock_does_not_cross_queues() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let a: DQue<u64> = DQue::create(dir.path().join("a")).unwrap();
    let b: DQue<u64> = DQue::create(dir.path().join("b")).unwrap();
    a.enqueue(&1).unwrap();
    b.enqueue(&2).unwrap();
    assert_eq!(a.dequeue().unwrap(), Some(1));
    assert_eq!(b.dequeue().unwrap(), Some(2));
}

/// How many close-and-reopen rounds the spawning race runs
/// (`DQUE_LOCK_SPAWN_ROUNDS`; a few hundred in CI, more when hunting).
fn spawn_race_rounds() -> usize {
    std::env::var("DQUE_LOCK_SPAWN_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(300)
}

// Pins: a handle this program closed can be opened again at once, even
// while other threads spawn child processes (each child holds a copy of the
// lock file between its fork and its exec). Both open modes, since each takes
// the lock its own way.
#[test]
fn a_closed_queue_reopens_while_other_threads_spawn_processes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    Command::new("true").status().unwrap();
                }
            });
        }
        let result = std::panic::catch_unwind(|| {
            for (name, options) in [
                ("exclusive", Options::new()),
                ("shared", Options::new().shared(true)),
            ] {
                let path = dir.path().join(name);
                for round in 0..spawn_race_rounds() {
                    let q: DQue<u64> = options.open_or_create(&path).unwrap_or_else(|e| {
                        panic!("{name} open in round {round} after a close: {e}")
                    });
                    q.enqueue(&(round as u64)).unwrap();
                    drop(q);
                }
            }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}
