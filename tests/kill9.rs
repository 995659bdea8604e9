//! Real process crashes: a child process enqueues and dequeues numbered
//! items, reporting each operation as it returns; the parent kills it with
//! SIGKILL at a random moment, reopens the queue and checks that every
//! reported enqueue is there, every reported dequeue is gone, nothing is
//! duplicated and order is kept. In Safe and in Turbo mode: turbo must lose
//! nothing on a process kill either.
//!
//! `DQUE_KILLS=500 cargo test --release --test kill9` runs a longer round.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use dque::{DQue, Durability, Options};

mod child;

const CHILD_QUEUE: &str = "DQUE_KILL9_QUEUE";
const CHILD_MODE: &str = "DQUE_KILL9_MODE";
const CHILD_START: &str = "DQUE_KILL9_START";
const CHILD_SEED: &str = "DQUE_KILL9_SEED";

fn options(mode: Durability) -> Options {
    // Small segments: kills land in rollovers and segment deletions too.
    Options::new().durability(mode).segment_items(64)
}

fn mode_from(name: &str) -> Durability {
    match name {
        "safe" => Durability::Safe,
        _ => Durability::Turbo,
    }
}

/// The child's body (see `child::run_as_child`): opens the queue `kill_cycles`
/// names in its env vars and enqueues and dequeues until killed.
fn child_process() {
    let queue_path = std::env::var(CHILD_QUEUE).unwrap();
    let mode = mode_from(&std::env::var(CHILD_MODE).unwrap());
    let mut next: u64 = std::env::var(CHILD_START).unwrap().parse().unwrap();
    let mut rng: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let queue: DQue<u64> = DQue::open_with(&queue_path, &options(mode)).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    loop {
        rng = lcg(rng);
        if rng % 10 < 6 {
            queue.enqueue(&next).unwrap();
            writeln!(out, "E {next}").unwrap();
            next += 1;
        } else {
            match queue.dequeue().unwrap() {
                Some(n) => writeln!(out, "D {n}").unwrap(),
                None => writeln!(out, "D -").unwrap(),
            }
        }
        out.flush().unwrap();
    }
}

fn lcg(x: u64) -> u64 {
    x.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}

struct Reported {
    enqueued: Vec<u64>,
    dequeued: Vec<u64>,
}

/// Starts `test` as a child on `queue`, kills it after `run_for`, returns
/// what it reported.
fn run_and_kill(
    test: &str,
    queue: &Path,
    mode: &str,
    start: u64,
    seed: u64,
    run_for: Duration,
) -> Reported {
    let env = [
        (CHILD_QUEUE, queue.display().to_string()),
        (CHILD_MODE, mode.to_string()),
        (CHILD_START, start.to_string()),
        (CHILD_SEED, seed.to_string()),
    ];
    let lines = child::run_until_killed(test, &env, run_for);
    // The kill may come before the child reports anything, even READY; but
    // no operation may be reported by a child that never opened the queue.
    let ready = lines.iter().any(|l| l.ends_with("READY"));
    assert!(
        ready
            || !lines
                .iter()
                .any(|l| l.starts_with("E ") || l.starts_with("D ")),
        "child reported operations without opening the queue: {lines:?}"
    );
    let mut reported = Reported {
        enqueued: Vec::new(),
        dequeued: Vec::new(),
    };
    for line in lines {
        if let Some(n) = line.strip_prefix("E ") {
            reported.enqueued.push(n.parse().unwrap());
        } else if let Some(n) = line.strip_prefix("D ") {
            if n != "-" {
                reported.dequeued.push(n.parse().unwrap());
            }
        }
    }
    reported
}

/// Kills children of `test` (the calling test's name) `kills` times.
fn kill_cycles(test: &str, mode: &str, kills: u64) {
    let _one_at_a_time = child::one_spawner_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    DQue::<u64>::create_with(&path, &options(mode_from(mode))).unwrap();
    let mut seed = 0x5eed ^ kills;
    let mut total_reported = 0;
    for cycle in 0..kills {
        seed = lcg(seed);
        let start = cycle * 1_000_000;
        let run_for = Duration::from_millis(20 + seed % 60);
        let reported = run_and_kill(test, &path, mode, start, seed, run_for);
        total_reported += reported.enqueued.len();

        // The queue is drained after every cycle, so it starts empty and
        // holds exactly start.. in order.
        let queue: DQue<u64> = DQue::open(&path).unwrap();
        let mut left = Vec::new();
        while let Some(n) = queue.dequeue().unwrap() {
            left.push(n);
        }
        drop(queue);

        let e = reported.enqueued.len() as u64;
        let d = reported.dequeued.len() as u64;
        assert_eq!(
            reported.enqueued,
            (start..start + e).collect::<Vec<_>>(),
            "child enqueues in order"
        );
        assert_eq!(
            reported.dequeued,
            (start..start + d).collect::<Vec<_>>(),
            "child dequeues in FIFO order"
        );
        // At most one operation was in flight when the kill came: it may or
        // may not have happened. Everything reported must hold exactly:
        // the queue holds start+dequeues .. start+enqueues, where each count
        // is the reported one or, for the one call in flight, one more.
        let possible = [(d, e), (d + 1, e), (d, e + 1)];
        let fits = possible.iter().any(|&(deqs, enqs)| {
            deqs <= enqs && left == (start + deqs..start + enqs).collect::<Vec<_>>()
        });
        assert!(
            fits,
            "cycle {cycle} ({mode}): reported {d} dequeues and {e} enqueues from {start}, \
             but the queue holds {left:?}"
        );
    }
    assert!(
        total_reported as u64 > kills,
        "children did almost no work ({total_reported} enqueues in {kills} runs)"
    );
}

#[test]
fn safe_mode_survives_kill_9() {
    if child::run_as_child(child_process) {
        return;
    }
    kill_cycles("safe_mode_survives_kill_9", "safe", child::kills(50));
}

#[test]
fn turbo_mode_survives_kill_9() {
    if child::run_as_child(child_process) {
        return;
    }
    kill_cycles("turbo_mode_survives_kill_9", "turbo", child::kills(50));
}
