//! Shared mode (several processes on one queue) against exclusive mode, in
//! one run on one disk:
//!
//! - per call, one process: Turbo enqueue, dequeue and lease+ack, Safe
//!   enqueue, dequeue and lease+ack, each exclusive and shared;
//! - producers: 4 processes enqueueing together against 1, Turbo and Safe
//!   (shared mode);
//! - wake-up: how long a worker blocked in `dequeue_block` in another
//!   process takes to return after an enqueue (p50, p99).
//!
//! ```sh
//! cargo bench --bench processes
//! DQUE_BENCH_ITEMS=100000 DQUE_BENCH_SAFE_ITEMS=1000 cargo bench --bench processes  # quick
//! ```
//!
//! `DQUE_BENCH_DIR` picks the disk (default: the system temp dir);
//! `DQUE_BENCH_ONLY` (comma-separated: `per-call`, `producers`, `wake-up`)
//! runs only those parts, and `DQUE_BENCH_ROUNDS` (1) repeats the producer
//! rows, alternating 1 and 4 processes, so their ratio comes from the same
//! minutes. The
//! processes are this binary started again with `DQUE_BENCH_CHILD` set.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dque::{Durability, Options, RawQueue};

#[path = "common/mod.rs"]
mod common;
use common::{env_usize, rate, tempdir};

const CHILD: &str = "DQUE_BENCH_CHILD";
const PAYLOAD: usize = 100;

fn options(durability: Durability, shared: bool) -> Options {
    Options::new().durability(durability).shared(shared)
}

/// One process: enqueue `n` items, then dequeue them, then enqueue `n`
/// more and lease and ack each, exclusive or shared. Rates of the three.
fn per_call(durability: Durability, shared: bool, n: usize) -> (f64, f64, f64) {
    let dir = tempdir();
    let queue = RawQueue::create_with(dir.path().join("q"), &options(durability, shared)).unwrap();
    let item = vec![7u8; PAYLOAD];
    let enqueue = rate(n, |_| queue.enqueue_bytes(&item).unwrap());
    let dequeue = rate(n, |_| {
        queue.dequeue().unwrap().unwrap();
    });
    for _ in 0..n {
        queue.enqueue_bytes(&item).unwrap();
    }
    let lease_ack = rate(n, |_| queue.lease().unwrap().unwrap().ack().unwrap());
    (enqueue, dequeue, lease_ack)
}

/// The body of a producer process: opens the shared queue, says `ready`,
/// waits for a line on stdin, enqueues `n` items.
fn producer_child(path: &str, durability: &str, n: usize) {
    let durability = if durability == "safe" {
        Durability::Safe
    } else {
        Durability::Turbo
    };
    let queue = RawQueue::open_with(path, &options(durability, true)).unwrap();
    let item = vec![7u8; PAYLOAD];
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).unwrap();
    let cpu = cpu_seconds();
    for _ in 0..n {
        queue.enqueue_bytes(&item).unwrap();
    }
    writeln!(out, "cpu {}", cpu_seconds() - cpu).unwrap();
    out.flush().unwrap();
    queue.close().unwrap();
}

/// CPU time (user + system) this process has used so far, every thread.
fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn spawn(args: &[&str]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env(CHILD, args.join(" "))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

/// Items per second of `processes` producer processes enqueueing `n` each,
/// and the CPU time their enqueue loops used per item, all processes
/// together (on a shared machine, the steadier of the two).
fn producers(durability: &str, processes: usize, n: usize) -> (f64, Duration) {
    let dir = tempdir();
    let path = dir.path().join("q");
    let queue = RawQueue::create_with(&path, &options(Durability::Turbo, true)).unwrap();
    let count = n.to_string();
    let mut children: Vec<Child> = (0..processes)
        .map(|_| spawn(&["producer", path.to_str().unwrap(), durability, &count]))
        .collect();
    for child in &mut children {
        assert_eq!(wait_for_line(child), "ready");
    }
    let start = Instant::now();
    for child in &mut children {
        child.stdin.as_mut().unwrap().write_all(b"g").unwrap();
    }
    let mut cpu = 0.0;
    for child in &mut children {
        let line = wait_for_line(child);
        let seconds = line.strip_prefix("cpu ").expect("the child's CPU time");
        cpu += seconds.parse::<f64>().unwrap();
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let elapsed = start.elapsed();
    assert_eq!(queue.len(), processes * n);
    let items = processes * n;
    (
        items as f64 / elapsed.as_secs_f64(),
        Duration::from_secs_f64(cpu / items as f64),
    )
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The body of a blocked worker: `dequeue_block` in a loop; for each item
/// (the time it was enqueued) says how long it took to get it.
fn waiter_child(path: &str, n: usize) {
    let queue = RawQueue::open_with(path, &options(Durability::Turbo, true)).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    for _ in 0..n {
        let item = queue.dequeue_block().unwrap();
        let sent = u128::from_le_bytes(item[..16].try_into().unwrap());
        writeln!(out, "{}", unix_nanos().saturating_sub(sent)).unwrap();
        out.flush().unwrap();
    }
}

/// Wake-up latencies (sorted, in µs) of a worker blocked in another process.
fn wake_ups(n: usize) -> Vec<f64> {
    let dir = tempdir();
    let path = dir.path().join("q");
    let queue = RawQueue::create_with(&path, &options(Durability::Turbo, true)).unwrap();
    let mut child = spawn(&["waiter", path.to_str().unwrap(), &n.to_string()]);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        // Let it fall asleep before each item.
        std::thread::sleep(Duration::from_millis(2));
        queue.enqueue_bytes(&unix_nanos().to_le_bytes()).unwrap();
        let nanos: f64 = lines.next().unwrap().unwrap().parse().unwrap();
        latencies.push(nanos / 1000.0);
    }
    assert!(child.wait().unwrap().success());
    latencies.sort_by(f64::total_cmp);
    latencies
}

fn main() {
    if let Ok(child) = std::env::var(CHILD) {
        let args: Vec<&str> = child.split(' ').collect();
        match args[0] {
            "producer" => producer_child(args[1], args[2], args[3].parse().unwrap()),
            "waiter" => waiter_child(args[1], args[2].parse().unwrap()),
            other => panic!("unknown child {other}"),
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let items = env_usize("DQUE_BENCH_ITEMS", 1_000_000);
    let safe_items = env_usize("DQUE_BENCH_SAFE_ITEMS", 5_000);
    let only = std::env::var("DQUE_BENCH_ONLY").unwrap_or_default();
    let wants = |part: &str| only.is_empty() || only.split(',').any(|w| w.trim() == part);
    let per_call_cases = if wants("per-call") {
        vec![
            ("Turbo", Durability::Turbo, items),
            ("Safe", Durability::Safe, safe_items),
        ]
    } else {
        vec![]
    };
    println!("shared mode against exclusive mode, {PAYLOAD}-byte items, one run\n");
    println!("| case | exclusive | shared | shared / exclusive |");
    println!("|---|---|---|---|");
    for (name, durability, n) in per_call_cases {
        let (ex_enq, ex_deq, ex_lease) = per_call(durability, false, n);
        let (sh_enq, sh_deq, sh_lease) = per_call(durability, true, n);
        println!(
            "| {name} enqueue, 1 process | {ex_enq:.0}/s | {sh_enq:.0}/s | {:.2}x |",
            sh_enq / ex_enq
        );
        println!(
            "| {name} dequeue, 1 process | {ex_deq:.0}/s | {sh_deq:.0}/s | {:.2}x |",
            sh_deq / ex_deq
        );
        println!(
            "| {name} lease+ack, 1 process | {ex_lease:.0}/s | {sh_lease:.0}/s | {:.2}x |",
            sh_lease / ex_lease
        );
    }
    println!(
        "\n| producers (shared) | 1 process | 4 processes | 4 / 1 | CPU per item, 1 | CPU per item, 4 |"
    );
    println!("|---|---|---|---|---|---|");
    let rounds = env_usize("DQUE_BENCH_ROUNDS", 1).max(1);
    let producer_cases = if wants("producers") {
        vec![("turbo", items / 4), ("safe", safe_items / 4)]
    } else {
        vec![]
    };
    for (name, n) in producer_cases {
        for _ in 0..rounds {
            let (one, one_cpu) = producers(name, 1, n * 4);
            let (four, four_cpu) = producers(name, 4, n);
            println!(
                "| {name} enqueue | {one:.0}/s | {four:.0}/s | {:.2}x | {one_cpu:.2?} | {four_cpu:.2?} |",
                four / one
            );
        }
    }
    if !wants("wake-up") {
        return;
    }
    let wakes = env_usize("DQUE_BENCH_WAKES", 500);
    let latencies = wake_ups(wakes);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "\nwake-up of a worker blocked in another process, {wakes} wakes: \
         p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
