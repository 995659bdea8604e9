//! Shared mode across real processes (issue 12): producers and workers in
//! separate processes on one queue, killed with SIGKILL at random and
//! started again, while the others go on.
//!
//! `DQUE_KILLS=500 cargo test --release --test shared_processes` runs longer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dque::{DQue, Durability, Options};

mod child;

const QUEUE: &str = "DQUE_SHARED_QUEUE";
const MODE: &str = "DQUE_SHARED_MODE";
const ROLE: &str = "DQUE_SHARED_ROLE";
const LIFE: &str = "DQUE_SHARED_LIFE";

/// (producer, its life, sequence number within that life).
type Item = (u32, u32, u32);

fn options(mode: &str) -> Options {
    let durability = match mode {
        "safe" => Durability::Safe,
        "periodic" => Durability::Periodic(Duration::from_millis(2)),
        _ => Durability::Turbo,
    };
    // Small segments: rollovers and retirements all the time.
    Options::new()
        .shared(true)
        .durability(durability)
        .segment_items(40)
        .visibility_timeout(Duration::from_secs(3600))
}

/// A child's body (each line it says starts with `@@ `): a producer
/// (`enq SEQ` once each enqueue returned) or a worker (`got P L S ATTEMPT` when a lease returned, `ack P L S` when its
/// ack returned).
fn shared_child() {
    let path = std::env::var(QUEUE).unwrap();
    let mode = std::env::var(MODE).unwrap();
    let life: u32 = std::env::var(LIFE).unwrap().parse().unwrap();
    let queue: DQue<Item> = options(&mode).open(&path).unwrap();
    let mut out = std::io::stdout().lock();
    if std::env::var(ROLE).unwrap() == "producer" {
        for seq in 0..3_000 {
            queue.enqueue(&(life, life, seq)).unwrap();
            writeln!(out, "@@ enq {seq}").unwrap();
            out.flush().unwrap();
        }
        std::thread::sleep(Duration::from_secs(3600));
    }
    loop {
        let Some(job) = queue.lease_timeout(Duration::from_millis(50)).unwrap() else {
            continue;
        };
        let (p, l, s) = *job;
        writeln!(out, "@@ got {p} {l} {s} {}", job.attempt()).unwrap();
        out.flush().unwrap();
        job.ack().unwrap();
        writeln!(out, "@@ ack {p} {l} {s}").unwrap();
        out.flush().unwrap();
    }
}

struct Running {
    child: Child,
    life: u32,
    role: &'static str,
    output: JoinHandle<Vec<String>>,
}

fn start(test: &str, path: &Path, mode: &str, role: &'static str, life: u32) -> Running {
    let _one_at_a_time = child::one_spawner_at_a_time();
    let mut child = child::command(test)
        .env(QUEUE, path)
        .env(MODE, mode)
        .env(ROLE, role)
        .env(LIFE, life.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let output = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| line.split_once("@@ ").map(|(_, said)| said.to_string()))
            .collect()
    });
    Running {
        child,
        life,
        role,
        output,
    }
}

/// What one life of one child printed.
struct Life {
    role: &'static str,
    lines: Vec<String>,
}

fn stop(mut running: Running) -> (u32, Life) {
    running.child.kill().unwrap();
    running.child.wait().unwrap();
    let lines = running.output.join().unwrap();
    (
        running.life,
        Life {
            role: running.role,
            lines,
        },
    )
}

/// Starts the child of `test` on the queue at `path`, its stdout piped.
fn spawn_on(test: &str, path: &Path) -> Child {
    let _one_at_a_time = child::one_spawner_at_a_time();
    child::command(test)
        .env(QUEUE, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The lines a child said (`@@ ` and a message; the test harness prints
/// other lines around them, and the name of the test before the first).
fn said(child: &mut Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| line.split_once("@@ ").map(|(_, said)| said.to_string()))
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Two producers and two workers, one of the four killed and restarted
/// `kills` times, then the queue drained and every line checked.
fn kill_at_random(test: &str, mode: &str, kills: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    DQue::<Item>::create_with(&path, &options(mode)).unwrap();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ kills);
    let mut next_life = 0;
    let mut new_life = || {
        next_life += 1;
        next_life
    };
    let roles = ["producer", "producer", "worker", "worker"];
    let mut running: Vec<Running> = roles
        .iter()
        .map(|&role| start(test, &path, mode, role, new_life()))
        .collect();
    let mut lives = BTreeMap::new();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(5 + rng.below(40)));
        let victim = rng.below(running.len() as u64) as usize;
        let role = running[victim].role;
        let replacement = start(test, &path, mode, role, new_life());
        let (life, printed) = stop(std::mem::replace(&mut running[victim], replacement));
        lives.insert(life, printed);
    }
    for run in running {
        let (life, printed) = stop(run);
        lives.insert(life, printed);
    }
    let drained = drain(&path, mode);
    check(&lives, &drained);
}

/// Opens the queue (alone now: it recovers) and takes every item left.
fn drain(path: &Path, mode: &str) -> Vec<Item> {
    let queue: DQue<Item> = options(mode).open(path).unwrap();
    let mut left = Vec::new();
    while let Some(item) = queue.dequeue().unwrap() {
        left.push(item);
    }
    left
}

fn check(lives: &BTreeMap<u32, Life>, drained: &[Item]) {
    let mut enqueued = BTreeSet::new();
    // Each item's deliveries: (attempt, worker life, acked by it).
    let mut deliveries: HashMap<Item, Vec<(u32, u32, bool)>> = HashMap::new();
    for (&life, printed) in lives {
        let mut last_first_delivery: HashMap<(u32, u32), u32> = HashMap::new();
        for line in &printed.lines {
            let words: Vec<&str> = line.split(' ').collect();
            let num = |i: usize| -> u32 { words[i].parse().unwrap() };
            match words[0] {
                "enq" => {
                    assert_eq!(printed.role, "producer");
                    enqueued.insert((life, life, num(1)));
                }
                "got" => {
                    let item = (num(1), num(2), num(3));
                    deliveries
                        .entry(item)
                        .or_default()
                        .push((num(4), life, false));
                    if num(4) == 1 {
                        // First deliveries follow the queue's order, so one
                        // producer's items reach each worker in order.
                        let last = last_first_delivery.insert((item.0, item.1), item.2);
                        assert!(
                            last.is_none_or(|last| last < item.2),
                            "worker {life} got {item:?} after seq {last:?} of that producer"
                        );
                    }
                }
                "ack" => {
                    let item = (num(1), num(2), num(3));
                    let list = deliveries.get_mut(&item).expect("acked after got");
                    let last = list.last_mut().unwrap();
                    assert_eq!(last.1, life, "{item:?} acked by {life}, held by {}", last.1);
                    last.2 = true;
                }
                other => panic!("unexpected line {other:?} from {life}"),
            }
        }
    }
    let mut left = BTreeSet::new();
    let mut last_seq: HashMap<(u32, u32), u32> = HashMap::new();
    for &item in drained {
        assert!(left.insert(item), "{item:?} twice in the queue");
        let last = last_seq.insert((item.0, item.1), item.2);
        assert!(
            last.is_none_or(|l| l < item.2),
            "queue order broken at {item:?}"
        );
    }
    for (item, list) in &mut deliveries {
        list.sort_unstable();
        // Attempts differ (a worker killed before it said `got` leaves a gap).
        assert!(
            list.windows(2).all(|w| w[0].0 < w[1].0),
            "{item:?}: an attempt delivered twice: {list:?}"
        );
        let acks = list.iter().filter(|d| d.2).count();
        assert!(acks <= 1, "{item:?} acked {acks} times: {list:?}");
        // Only a worker that died holding an item lets it go to another:
        // every delivery but the last ended without an ack.
        let (last, earlier) = list.split_last().unwrap();
        assert!(
            earlier.iter().all(|d| !d.2),
            "{item:?} delivered again after an ack: {list:?}"
        );
        if last.2 {
            assert!(
                !left.contains(item),
                "{item:?} acked and still in the queue"
            );
        }
    }
    for item in &enqueued {
        let acked = deliveries
            .get(item)
            .is_some_and(|list| list.iter().any(|d| d.2));
        // A worker killed after its ack returned, before it printed it.
        let held_by_a_dead_worker = deliveries.get(item).is_some_and(|list| !list.is_empty());
        assert!(
            acked || left.contains(item) || held_by_a_dead_worker,
            "{item:?} was enqueued (the call returned) and is gone"
        );
    }
    let acked = deliveries
        .values()
        .filter(|l| l.iter().any(|d| d.2))
        .count();
    assert!(
        enqueued.len() > 100 && acked > 50,
        "the children did too little to test anything: {} enqueued, {acked} acked",
        enqueued.len()
    );
}

#[test]
fn turbo_producers_and_workers_killed_at_random() {
    if child::run_as_child(shared_child) {
        return;
    }
    kill_at_random(
        "turbo_producers_and_workers_killed_at_random",
        "turbo",
        child::kills(50),
    );
}

#[test]
fn safe_producers_and_workers_killed_at_random() {
    if child::run_as_child(shared_child) {
        return;
    }
    kill_at_random(
        "safe_producers_and_workers_killed_at_random",
        "safe",
        child::kills(50),
    );
}

// Periodic: every process runs a flusher thread that syncs through the
// group commit shared by all of them while others are killed.
#[test]
fn periodic_producers_and_workers_killed_at_random() {
    if child::run_as_child(shared_child) {
        return;
    }
    kill_at_random(
        "periodic_producers_and_workers_killed_at_random",
        "periodic",
        child::kills(50),
    );
}

/// How long a worker blocked in another process takes to wake for an enqueue.
fn blocked_child() {
    let path = std::env::var(QUEUE).unwrap();
    let queue: DQue<Item> = options("turbo").open(&path).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ ready").unwrap();
    out.flush().unwrap();
    let item = queue.dequeue_block().unwrap();
    writeln!(out, "@@ {} {} {}", item.0, item.1, item.2).unwrap();
    out.flush().unwrap();
}

#[test]
fn a_worker_blocked_in_another_process_wakes_for_an_enqueue() {
    if child::run_as_child(blocked_child) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Item> = options("turbo").create(&path).unwrap();
    let mut child = spawn_on(
        "a_worker_blocked_in_another_process_wakes_for_an_enqueue",
        &path,
    );
    let mut lines = said(&mut child);
    assert_eq!(lines.next().unwrap(), "ready");
    // Blocked by now (or about to be: the wake-up word is read under the
    // mutex before it looks, so an enqueue in between is seen either way).
    std::thread::sleep(Duration::from_millis(100));
    queue.enqueue(&(7, 8, 9)).unwrap();
    let waited = Instant::now();
    assert_eq!(lines.next().unwrap(), "7 8 9");
    assert!(child.wait().unwrap().success());
    assert!(waited.elapsed() < Duration::from_secs(60));
    assert_eq!(queue.len(), 0);
}

/// A worker that leases items and never acks; killed by the parent.
fn holding_child() {
    let path = std::env::var(QUEUE).unwrap();
    let queue: DQue<Item> = options("turbo").max_attempts(2).open(&path).unwrap();
    let held = queue.lease_batch(2).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@ {}", held.len()).unwrap();
    out.flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

// A worker process that dies holding leases gives them back as soon as
// another process looks (not after the hour-long visibility timeout); its
// attempts count, and one on its last attempt goes to the dead letters.
#[test]
fn a_dead_workers_leases_come_back_at_once() {
    if child::run_as_child(holding_child) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Item> = options("turbo").max_attempts(2).create(&path).unwrap();
    queue.enqueue_batch([(0, 0, 0), (0, 0, 1)]).unwrap();
    // The first attempt of item 0 ends with a nack here.
    queue.lease().unwrap().unwrap().nack().unwrap();
    let mut child = spawn_on("a_dead_workers_leases_come_back_at_once", &path);
    let mut lines = said(&mut child);
    assert_eq!(lines.next().unwrap(), "2");
    assert_eq!(
        queue.lease().unwrap().map(|l| *l),
        None,
        "held by the child"
    );
    assert_eq!(queue.workers().unwrap().len(), 2);
    child.kill().unwrap();
    child.wait().unwrap();
    // Not a blocking call: the very next look finds them back.
    let back = queue.lease().unwrap().unwrap();
    assert_eq!((*back, back.attempt()), ((0, 0, 1), 2));
    let letters = queue.dead_letters().unwrap();
    assert_eq!(letters.len(), 1, "item 0 had its two attempts");
    assert_eq!(letters[0].item::<Item, dque::Bincode>().unwrap(), (0, 0, 0));
    assert_eq!(queue.workers().unwrap().len(), 1);
}

// Issue 12: a dead worker's pid may belong to a live process by the time
// the others look (IPC::DirQueue's kill(0) check is fooled by that). Here
// every slot's recorded pid is overwritten with this live process's pid
// after the worker dies: its leases must come back all the same, because
// liveness is its slot's byte lock, which died with it.
#[test]
fn a_reused_pid_does_not_keep_a_dead_workers_leases() {
    if child::run_as_child(holding_child) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Item> = options("turbo").max_attempts(2).create(&path).unwrap();
    queue.enqueue_batch([(0, 0, 0), (0, 0, 1)]).unwrap();
    let mut child = spawn_on("a_reused_pid_does_not_keep_a_dead_workers_leases", &path);
    let mut lines = said(&mut child);
    assert_eq!(lines.next().unwrap(), "2");
    child.kill().unwrap();
    child.wait().unwrap();
    // FORMAT.md, "Shared mode": slots from byte 4096, 64 bytes each, the
    // pid at byte 16 of a slot.
    let control = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("dque.shm"))
        .unwrap();
    for slot in 0..1024u64 {
        use std::os::unix::fs::FileExt;
        let at = 4096 + slot * 64 + 16;
        control
            .write_all_at(&std::process::id().to_le_bytes(), at)
            .unwrap();
    }
    let back: Vec<Item> = queue.lease_batch(5).unwrap().iter().map(|l| **l).collect();
    assert_eq!(back, vec![(0, 0, 0), (0, 0, 1)]);
    assert_eq!(queue.workers().unwrap().len(), 1);
}
