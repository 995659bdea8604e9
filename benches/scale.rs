//! Memory and open time against queue length: queues of 10 k, 1 M and 10 M
//! items of 100 bytes (built in Turbo), each opened in a fresh process so
//! that the numbers of one size never mix with another's.
//!
//! ```sh
//! cargo bench --bench scale
//! DQUE_SCALE_SIZES=10000,1000000 cargo bench --bench scale   # quick
//! ```
//!
//! Environment (all optional): `DQUE_BENCH_DIR` (default: the system temp
//! dir), `DQUE_SCALE_SIZES` (default `10000,1000000,10000000`),
//! `DQUE_SCALE_COLD=0` to skip the cold-cache open (which drops the page
//! cache through /proc/sys/vm/drop_caches, as root only; skipped when that
//! is not writable).
//!
//! For each size: a child process builds the queue and closes it; a second
//! child opens it with the page cache warm (five times: the median is
//! reported); a third (cold) drops the page cache first and opens it once. Each opening child reports the open time and its memory
//! (VmRSS, split into anonymous and file-backed pages, and the peak VmHWM
//! from /proc/self/status) right after the open and again after it has
//! dequeued and enqueued as many items as the queue's first tenth (at most
//! 1 M each way). 10 M items take about 1.2 GB of disk for a while; every
//! queue is removed before the next size is built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use dque::{Durability, Options, RawQueue};

const PAYLOAD: [u8; 100] = [0x5A; 100];
const CHILD: &str = "--dque-scale-child";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == CHILD) {
        return child(&args[at + 1..]);
    }
    // `cargo test --benches` runs this without `--bench`: do nothing then.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let base = std::env::var_os("DQUE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let sizes: Vec<u64> = std::env::var("DQUE_SCALE_SIZES")
        .unwrap_or_else(|_| "10000,1000000,10000000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .expect("DQUE_SCALE_SIZES: item counts")
        })
        .collect();
    let cold = std::env::var("DQUE_SCALE_COLD").map_or(true, |v| v != "0");
    println!(
        "queues of 100-byte items under {}; each line from a fresh process",
        base.display()
    );
    println!();
    println!("| items | segments | disk | build (Turbo) | open (median of 5) | open, cold cache | RSS after open (anon + file) | ops after open | RSS after ops (anon + file) | peak RSS (VmHWM) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for items in sizes {
        let dir = tempfile::tempdir_in(&base).expect("a temporary directory");
        let queue = dir.path().join("q");
        let build = run_child(&["build", path_arg(&queue), &items.to_string()]);
        let disk = dir_bytes(&queue);
        let warm = run_child(&["open", path_arg(&queue), "warm"]);
        let cold = if cold {
            Some(run_child(&["open", path_arg(&queue), "cold"]))
        } else {
            None
        };
        let cold_open = cold
            .as_ref()
            .and_then(|c| c.get("open_us"))
            .map_or("n/a".to_string(), |us| fmt_us(us));
        println!(
            "| {} | {} | {:.0} MB | {} | {} | {} | {} | {} | {} | {} |",
            items,
            warm["segments"],
            disk as f64 / 1e6,
            fmt_us(&build["build_us"]),
            fmt_us(&warm["open_us"]),
            cold_open,
            rss(&warm, "open"),
            warm["ops"],
            rss(&warm, "ops"),
            mib(&warm["ops_hwm_kb"]),
        );
        drop(dir);
    }
}

type Report = std::collections::BTreeMap<String, String>;

fn path_arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

fn run_child(args: &[&str]) -> Report {
    let exe = std::env::current_exe().expect("this bench's own path");
    let out = Command::new(exe)
        .arg(CHILD)
        .args(args)
        .output()
        .expect("run a child process");
    assert!(
        out.status.success(),
        "child {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn fmt_us(us: &str) -> String {
    let us: f64 = us.parse().expect("microseconds");
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

fn mib(kb: &str) -> String {
    format!("{:.1} MiB", kb.parse::<f64>().expect("kB") / 1024.0)
}

fn rss(r: &Report, when: &str) -> String {
    format!(
        "{} ({} + {})",
        mib(&r[&format!("{when}_rss_kb")]),
        mib(&r[&format!("{when}_anon_kb")]),
        mib(&r[&format!("{when}_file_kb")]),
    )
}

fn dir_bytes(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .expect("queue directory")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// The `kB` fields of /proc/self/status that matter here.
fn status() -> Report {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("0")
            .to_string()
    };
    [
        ("rss_kb", field("VmRSS:")),
        ("anon_kb", field("RssAnon:")),
        ("file_kb", field("RssFile:")),
        ("hwm_kb", field("VmHWM:")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn print_status(prefix: &str) {
    for (k, v) in status() {
        println!("{prefix}_{k}={v}");
    }
}

fn child(args: &[String]) {
    let (command, rest) = args.split_first().expect("a child command");
    match command.as_str() {
        "build" => build(Path::new(&rest[0]), rest[1].parse().expect("item count")),
        "open" => open(Path::new(&rest[0]), rest[1] == "cold"),
        other => panic!("unknown child command {other}"),
    }
}

fn build(path: &Path, items: u64) {
    let queue =
        RawQueue::create_with(path, &Options::new().durability(Durability::Turbo)).expect("create");
    let start = Instant::now();
    for _ in 0..items {
        queue.enqueue_bytes(&PAYLOAD).expect("enqueue");
    }
    queue.close().expect("close (syncs)");
    println!("build_us={}", start.elapsed().as_micros());
}

fn open(path: &Path, cold: bool) {
    if cold {
        // Written-back pages only can be dropped: sync first.
        let _ = Command::new("sync").status();
        if std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
            return; // no open_us: reported as n/a
        }
    }
    let options = Options::new().durability(Durability::Turbo);
    // A cold open is timed once (a second one would be warm); a warm one
    // five times, reporting the median. The last handle stays open.
    let tries = if cold { 1 } else { 5 };
    let mut times = Vec::new();
    let mut queue = None;
    for _ in 0..tries {
        drop(queue.take());
        let start = Instant::now();
        queue = Some(RawQueue::open_with(path, &options).expect("open"));
        times.push(start.elapsed());
    }
    let queue = queue.expect("opened");
    times.sort();
    println!("open_us={}", times[times.len() / 2].as_micros());
    print_status("open");
    let segments = queue.segment_numbers().expect("segments");
    println!("segments={}", segments.end() - segments.start() + 1);
    let len = queue.len() as u64;
    let ops = (len / 10).clamp(1, 1_000_000);
    let start = Instant::now();
    for _ in 0..ops {
        queue.dequeue().expect("dequeue").expect("an item");
    }
    for _ in 0..ops {
        queue.enqueue_bytes(&PAYLOAD).expect("enqueue");
    }
    println!("ops={ops}");
    println!("ops_us={}", start.elapsed().as_micros());
    assert_eq!(queue.len() as u64, len);
    print_status("ops");
    queue.close().expect("close");
}
