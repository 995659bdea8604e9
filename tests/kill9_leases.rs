//! A consumer killed with SIGKILL while it holds leases: after reopen every
//! item it held comes back, nothing acked returns, nothing is lost.
//!
//! `DQUE_KILLS=200 cargo test --release --test kill9_leases` runs longer.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use dque::{DQue, Durability, Options};

mod child;

const CHILD_QUEUE: &str = "DQUE_KILL9_LEASE_QUEUE";
const CHILD_MODE: &str = "DQUE_KILL9_LEASE_MODE";

fn options(mode: &str) -> Options {
    let durability = if mode == "safe" {
        Durability::Safe
    } else {
        Durability::Turbo
    };
    Options::new().durability(durability).segment_items(16)
}

/// The child's body (see `child::run_as_child`): leases items, keeps up to
/// four at a time, acks them in a shuffled order and reports each ack as it
/// returns.
fn lease_child() {
    let path = std::env::var(CHILD_QUEUE).unwrap();
    let mode = std::env::var(CHILD_MODE).unwrap();
    let queue: DQue<u64> = DQue::open_with(&path, &options(&mode)).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    let mut held = Vec::new();
    let mut turn = 0u64;
    loop {
        turn += 1;
        if held.len() < 4 {
            match queue.lease().unwrap() {
                Some(job) => held.push(job),
                None if held.is_empty() => std::thread::sleep(Duration::from_millis(1)),
                None => {}
            }
        }
        if held.len() == 4 || (turn % 3 == 0 && !held.is_empty()) {
            let job = held.swap_remove((turn as usize * 7) % held.len());
            let n = *job;
            job.ack().unwrap();
            writeln!(out, "A {n}").unwrap();
            out.flush().unwrap();
        }
    }
}

/// Kills consumers started as children of `test` (the calling test's name)
/// `kills` times.
fn kill_consumers(test: &str, mode: &str, kills: u64) {
    let _one_at_a_time = child::one_spawner_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    drop(DQue::<u64>::create_with(&path, &options(mode)).unwrap());
    let mut next = 0u64;
    let mut acked = BTreeSet::new();
    let mut reported_acks = 0;
    for cycle in 0..kills {
        // Top the queue up, then let a consumer loose on it.
        {
            let queue: DQue<u64> = DQue::open_with(&path, &options(mode)).unwrap();
            queue
                .enqueue_batch((next..next + 40).collect::<Vec<_>>())
                .unwrap();
            next += 40;
        }
        let env = [
            (CHILD_QUEUE, path.display().to_string()),
            (CHILD_MODE, mode.to_string()),
        ];
        let run_for = Duration::from_millis(15 + (cycle * 7919) % 50);
        let lines = child::run_until_killed(test, &env, run_for);
        for line in lines {
            if let Some(n) = line.strip_prefix("A ") {
                let n: u64 = n.parse().unwrap();
                assert!(acked.insert(n), "cycle {cycle}: item {n} acked twice");
                reported_acks += 1;
            }
        }

        let queue: DQue<u64> = DQue::open_with(&path, &options(mode)).unwrap();
        assert_eq!(
            queue.leased_len(),
            0,
            "cycle {cycle}: leases outlived the process"
        );
        let pending: BTreeSet<u64> = queue
            .pending(usize::MAX)
            .unwrap()
            .into_iter()
            .map(|p| p.item)
            .collect();
        for n in &acked {
            assert!(
                !pending.contains(n),
                "cycle {cycle} ({mode}): acked item {n} came back"
            );
        }
        // An item leased by max_attempts consumers that all died moves to
        // the dead letters when next leased: set aside, not lost.
        let dead: BTreeSet<u64> = queue
            .dead_letters()
            .unwrap()
            .iter()
            .map(|d| d.item::<u64, dque::Bincode>().unwrap())
            .collect();
        // Every other item, including those the dead consumer held, is
        // pending again; but for one ack in flight when the kill came.
        let gone: Vec<u64> = (0..next)
            .filter(|n| !pending.contains(n) && !acked.contains(n) && !dead.contains(n))
            .collect();
        assert!(
            gone.len() <= 1,
            "cycle {cycle} ({mode}): items lost without an ack: {gone:?}"
        );
        acked.extend(gone);
    }
    assert!(
        reported_acks as u64 > kills,
        "consumers did almost no work ({reported_acks} acks in {kills} runs)"
    );
}

#[test]
fn safe_consumer_killed_holding_leases_loses_nothing() {
    if child::run_as_child(lease_child) {
        return;
    }
    kill_consumers(
        "safe_consumer_killed_holding_leases_loses_nothing",
        "safe",
        child::kills(30),
    );
}

#[test]
fn turbo_consumer_killed_holding_leases_loses_nothing() {
    if child::run_as_child(lease_child) {
        return;
    }
    kill_consumers(
        "turbo_consumer_killed_holding_leases_loses_nothing",
        "turbo",
        child::kills(30),
    );
}
