//! Shared mode: a process killed at every write step of a call (append,
//! rollover, head retirement, lease, nack, dead letter, ack), holding the
//! queue's cross-process mutex, leaves a queue the others keep using: no
//! item lost but the one being taken, none doubled, the order kept (issue 12).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use dque::faults::{FaultOp, FaultPlan};
use dque::{DQue, Durability, Options};

mod child;

const QUEUE: &str = "DQUE_CRASH_QUEUE";
const DIE_AT: &str = "DQUE_CRASH_DIE_AT";

fn options() -> Options {
    Options::new()
        .shared(true)
        .durability(Durability::Safe)
        .segment_items(3)
        .max_attempts(2)
}

/// The child: a script of calls, each step said before it starts (`step
/// NAME`) and its outcome after; killed at write `DIE_AT` of the script.
fn script() {
    let path = std::env::var(QUEUE).unwrap();
    let die_at: u64 = std::env::var(DIE_AT).unwrap().parse().unwrap();
    let queue: DQue<u32> = options().open(&path).unwrap();
    let plan = FaultPlan::install(&path);
    plan.die_at_nth(FaultOp::Write, die_at);
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| {
        writeln!(out, "@@ {line}").unwrap();
        out.flush().unwrap();
    };
    say("step enqueue".into());
    queue.enqueue_batch([100, 101, 102, 103, 104]).unwrap();
    say("enqueued 100 101 102 103 104".into());
    for _ in 0..2 {
        say("step dequeue".into());
        let item = queue.dequeue().unwrap().unwrap();
        say(format!("took {item}"));
    }
    say("step lease".into());
    let job = queue.lease().unwrap().unwrap();
    say(format!("leased {}", *job));
    job.nack().unwrap();
    say("step lease".into());
    let job = queue.lease().unwrap().unwrap();
    say(format!("leased {}", *job));
    let failed = *job;
    job.fail("no good").unwrap();
    say(format!("failed {failed}"));
    say("step lease".into());
    let job = queue.lease().unwrap().unwrap();
    let acked = *job;
    say(format!("leased {acked}"));
    say("step ack".into());
    job.ack().unwrap();
    say(format!("took {acked}"));
    say("step enqueue".into());
    queue.enqueue(&105).unwrap();
    say("enqueued 105".into());
    say("done".into());
}

#[test]
fn a_process_killed_at_each_write_leaves_a_queue_the_others_use() {
    if child::run_as_child(script) {
        return;
    }
    let mut die_at = 1;
    loop {
        let finished = kill_at(die_at);
        if finished {
            break;
        }
        die_at += 1;
        assert!(die_at < 500, "the script never finished");
    }
    assert!(die_at > 10, "the script wrote only {die_at} times");
}

/// Runs the script killed at write `die_at` beside a handle of this
/// process, checks the queue; true if the script finished.
fn kill_at(die_at: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<u32> = options().create(&path).unwrap();
    queue.enqueue_batch([0, 1, 2, 3, 4]).unwrap();
    let output = {
        let _one_at_a_time = child::one_spawner_at_a_time();
        child::command("a_process_killed_at_each_write_leaves_a_queue_the_others_use")
            .env(QUEUE, &path)
            .env(DIE_AT, die_at.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
    .wait_with_output()
    .unwrap();
    let said: Vec<String> = BufReader::new(&output.stdout[..])
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| line.split_once("@@ ").map(|(_, s)| s.to_string()))
        .collect();
    let context = format!("killed at write {die_at}, after {said:?}");
    let context = format!("{context}; files: {:?}", files(&path));

    let mut enqueued: BTreeSet<u32> = (0..5).collect();
    let mut taken = Vec::new();
    let mut failed = Vec::new();
    for line in &said {
        let words: Vec<&str> = line.split(' ').collect();
        let nums = || words[1..].iter().map(|w| w.parse::<u32>().unwrap());
        match words[0] {
            "enqueued" => enqueued.extend(nums()),
            "took" => taken.extend(nums()),
            "failed" => failed.extend(nums()),
            _ => {}
        }
    }
    // Killed in the middle of an append, it may have left part of a frame:
    // here, the head of a record that claims more bytes than follow.
    let torn = said.last().is_some_and(|last| last == "step enqueue");
    if torn {
        scribble_after_last_frame(&path);
    }
    // A read first: it must see a consistent queue before any write mends it.
    let len_seen = queue.len();
    let mut drained = Vec::new();
    while let Some(item) = queue.dequeue().unwrap() {
        drained.push(item);
    }
    let dead: Vec<u32> = queue
        .dead_letters()
        .unwrap()
        .iter()
        .map(|letter| letter.item::<u32, dque::Bincode>().unwrap())
        .collect();
    // Killed between a dead letter and the marker that settles its record,
    // the record goes to the dead letters again: in both places, never in
    // neither (as after a power loss, FORMAT.md). Only that item may double.
    let failing = said
        .last()
        .and_then(|last| last.strip_prefix("leased "))
        .map(|item| item.parse::<u32>().unwrap());
    let mut dead_once = dead.clone();
    dead_once.dedup();
    assert!(
        dead_once.len() == dead.len() || (dead_once.len() + 1 == dead.len() && failing.is_some()),
        "dead letters {dead:?}, {context}"
    );
    // The dead process's leases were counted by the read; on their last
    // attempt they go to the dead letters when a write finds it dead.
    let reaped = dead_once.len() - failed.len();
    // The whole records of an enqueue cut short stay, as after a kill in
    // exclusive mode; a read before the mend does not count them yet.
    let enqueueing = said.last().is_some_and(|last| last == "step enqueue");
    if !enqueueing {
        assert_eq!(
            len_seen,
            drained.len() + reaped,
            "{drained:?} {dead:?} {context}"
        );
    }
    assert!(len_seen <= drained.len() + reaped, "{context}");
    assert!(
        drained.windows(2).all(|w| w[0] < w[1]),
        "order: {drained:?}, {context}"
    );
    let mut everywhere: Vec<u32> = drained
        .iter()
        .chain(&taken)
        .chain(&dead_once)
        .copied()
        .collect();
    everywhere.sort_unstable();
    let unique: BTreeSet<u32> = everywhere.iter().copied().collect();
    assert_eq!(
        unique.len(),
        everywhere.len(),
        "an item twice: {everywhere:?}, {context}"
    );
    for item in &failed {
        assert!(
            dead.contains(item),
            "{item} failed but not a dead letter, {context}"
        );
    }
    let missing: Vec<u32> = enqueued.difference(&unique).copied().collect();
    let taking = said
        .last()
        .is_some_and(|last| last == "step dequeue" || last == "step ack");
    assert!(
        missing.is_empty() || (missing.len() == 1 && taking),
        "lost {missing:?}: {context}"
    );
    if torn {
        let kept = std::fs::read_dir(path.join(dque::QUARANTINE_DIR))
            .unwrap()
            .count();
        assert_eq!(kept, 1, "the torn frame's copy is kept, {context}");
    }
    // The queue goes on, and opens alone afterwards healthy.
    queue.enqueue(&999).unwrap();
    assert_eq!(queue.dequeue().unwrap(), Some(999), "{context}");
    assert_eq!(queue.workers().unwrap().len(), 1, "{context}");
    queue.close().unwrap();
    let alone: DQue<u32> = DQue::open(&path).unwrap();
    assert!(alone.verify().unwrap().is_healthy(), "{context}");
    assert!(alone.is_empty(), "{context}");
    said.last().is_some_and(|last| last == "done")
}

fn files(path: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in walk(path) {
        names.push(entry);
    }
    names.sort();
    names
}

fn walk(path: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(format!(
                "{} {}",
                p.display(),
                entry.metadata().unwrap().len()
            ));
        }
    }
    out
}

/// Writes the first bytes of a record frame after the last frame of the
/// tail (the last segment): its frames are small records and markers,
/// whose 4-byte words are never all zero, so the first zero word is the end.
fn scribble_after_last_frame(path: &std::path::Path) {
    let mut segments: Vec<_> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    let tail = segments.last().unwrap();
    let mut bytes = std::fs::read(tail).unwrap();
    let end = (40..bytes.len())
        .step_by(4)
        .find(|&at| bytes[at..at + 4] == [0; 4])
        .unwrap();
    // A record of 64 bytes: head word, then two bytes of its CRC.
    bytes[end..end + 6].copy_from_slice(&[64, 0, 0, 0x80, 0x5A, 0xA5]);
    std::fs::write(tail, bytes).unwrap();
}

// Shared mode: a failed fsync in one handle stops the writes of every
// handle (they share the page cache whose state is now unknown), until the
// queue is opened again by a handle alone.
#[test]
fn a_failed_fsync_refuses_writes_in_every_handle_until_reopened_alone() {
    // No child may be forked meanwhile: until it execs it holds copies of
    // this test's lock file, and the reopen below would not be alone.
    let _no_spawns = child::one_spawner_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let a: DQue<u32> = options().create(&path).unwrap();
    let b: DQue<u32> = options().open(&path).unwrap();
    a.enqueue(&1).unwrap();
    let plan = FaultPlan::install(&path);
    plan.fail_nth(FaultOp::Sync, 1, std::io::ErrorKind::Other);
    let failed = a.enqueue(&2).unwrap_err();
    let is_refusal = matches!(failed, dque::Error::WritesRefused { .. });
    assert!(
        !is_refusal,
        "the failed fsync itself, not a refusal: {failed}"
    );
    for queue in [&a, &b] {
        for refused in [queue.enqueue(&3).unwrap_err(), queue.dequeue().unwrap_err()] {
            let is_refusal = matches!(refused, dque::Error::WritesRefused { .. });
            assert!(is_refusal, "{refused}");
        }
    }
    drop(plan);
    a.close().unwrap_err();
    drop(b);
    let alone: DQue<u32> = options().open(&path).unwrap();
    alone.enqueue(&4).unwrap();
    assert_eq!(alone.dequeue().unwrap(), Some(1));
}
