//! What each durability mode costs on your disk.
//!
//! ```sh
//! cargo run --release --example disk_check -- DIR [--size BYTES] [--count N] [--safe-count N]
//! ```
//!
//! Creates a temporary queue under `DIR` (on the disk you mean to use),
//! measures enqueue and dequeue in each mode — Safe, Turbo, Periodic(100 ms),
//! and Safe with batches of 100 — and prints items/s, MB/s and the p50/p99
//! latency of one call. Beside them, a plain `pwrite` + `fdatasync` loop
//! shows the disk's own limit for Safe. Everything it created is removed at
//! the end, also after an error or a panic (not after a kill or Ctrl-C,
//! which leave a `.tmp…` directory under `DIR`).
//!
//! `--size` is the payload of an item (default 100 bytes); `--count` the
//! items per mode (default 100,000); `--safe-count` the items of the
//! fsync-per-call rows (default: the smaller of `--count` and 2,000, as one
//! fsync takes from tens of microseconds to several milliseconds).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dque::{Durability, Options, RawQueue};

#[path = "support/report.rs"]
mod report;

const BATCH: usize = 100;
const USAGE: &str = "usage: disk_check DIR [--size BYTES] [--count N] [--safe-count N]\n\
     Measures dque's durability modes on the disk holding DIR, in a temporary queue it removes.";

struct Args {
    dir: PathBuf,
    size: usize,
    count: usize,
    safe_count: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut dir = None;
    let (mut size, mut count, mut safe_count) = (100, 100_000, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let value = args.next().ok_or(format!("{name} needs a number"))?;
            value
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{name}: {value:?} is not a number"))
        };
        match arg.as_str() {
            "--size" => size = number("--size")?,
            "--count" => count = number("--count")?,
            "--safe-count" => safe_count = Some(number("--safe-count")?),
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => return Err(format!("one DIR only (also got {extra:?})")),
        }
    }
    let dir = dir.ok_or("DIR is missing")?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if size == 0 || size >= 1 << 30 {
        return Err("--size must be 1 byte to 1 GiB - 1".into());
    }
    if count == 0 {
        return Err("--count must be above zero".into());
    }
    let safe_count = safe_count.unwrap_or(count.min(2_000)).max(1);
    Ok(Args {
        dir,
        size,
        count,
        safe_count,
    })
}

/// Per-call latencies and the wall time of a run of calls.
struct Run {
    items: usize,
    elapsed: Duration,
    calls: Vec<Duration>,
}

impl Run {
    /// Times `calls` calls of `op`, each moving `per_call` items.
    fn measure<E>(
        calls: usize,
        per_call: usize,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Run, E> {
        let mut latencies = Vec::with_capacity(calls);
        let start = Instant::now();
        for _ in 0..calls {
            let call = Instant::now();
            op()?;
            latencies.push(call.elapsed());
        }
        let elapsed = start.elapsed();
        latencies.sort_unstable();
        Ok(Run {
            items: calls * per_call,
            elapsed,
            calls: latencies,
        })
    }

    fn per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let at = ((self.calls.len() as f64 * p).ceil() as usize).clamp(1, self.calls.len());
        self.calls[at - 1]
    }
}

fn row(mode: &str, op: &str, run: &Run, size: usize) {
    println!(
        "| {mode} | {op} | {} | {} | {:.1} | {} | {} |",
        run.items,
        report::rate(run.per_sec()),
        run.per_sec() * size as f64 / 1e6,
        report::nanos(run.percentile(0.50).as_nanos() as f64),
        report::nanos(run.percentile(0.99).as_nanos() as f64),
    );
}

/// Enqueues then dequeues `items` in calls of `per_call` items, in a new queue.
fn check_mode(
    path: &Path,
    durability: Durability,
    data: &[u8],
    items: usize,
    per_call: usize,
) -> Result<(Run, Run), dque::Error> {
    let options = Options::new()
        .durability(durability)
        .max_item_bytes((data.len() as u32).max(1 << 24));
    let queue = RawQueue::create_with(path, &options)?;
    let calls = (items / per_call).max(1);
    let (enqueue, dequeue) = if per_call == 1 {
        let enqueue = Run::measure(calls, 1, || queue.enqueue_bytes(data))?;
        let dequeue = Run::measure(calls, 1, || {
            queue.dequeue()?.expect("an item was enqueued");
            Ok(())
        })?;
        (enqueue, dequeue)
    } else {
        let batch = vec![data.to_vec(); per_call];
        let enqueue = Run::measure(calls, per_call, || queue.enqueue_batch(&batch))?;
        let dequeue = Run::measure(calls, per_call, || {
            assert_eq!(queue.dequeue_batch(per_call)?.len(), per_call);
            Ok(())
        })?;
        (enqueue, dequeue)
    };
    queue.close()?;
    Ok((enqueue, dequeue))
}

/// pwrite + fdatasync of `items` items into blocks written and synced
/// beforehand: one data-only sync per call, the disk's floor for Safe.
fn fdatasync_loop(path: &Path, data: &[u8], items: usize) -> std::io::Result<Run> {
    let file = File::create(path)?;
    let zeros = vec![0u8; data.len() * items.min(1024)];
    for start in (0..data.len() * items).step_by(zeros.len()) {
        let len = zeros.len().min(data.len() * items - start);
        file.write_all_at(&zeros[..len], start as u64)?;
    }
    file.sync_all()?;
    let mut at = 0;
    Run::measure(items, 1, || {
        file.write_all_at(data, at)?;
        at += data.len() as u64;
        file.sync_data()
    })
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    // Removed on return, on error and on panic (drop runs while unwinding).
    let work = tempfile::Builder::new()
        .prefix(".dque-disk-check-")
        .tempdir_in(&args.dir)?;
    let data: Vec<u8> = (0..args.size).map(|i| (i * 31 + 7) as u8).collect();
    let (count, safe) = (args.count, args.safe_count);
    println!(
        "dque disk check: {}-byte items under {} ({})",
        args.size,
        args.dir.display(),
        report::filesystem_of(&args.dir)
    );
    println!("Safe rows: {safe} items, one fsync per call; the others: {count} items.\n");
    println!("| mode | call | items | items/s | MB/s | p50 per call | p99 per call |");
    println!("|---|---|---:|---:|---:|---:|---:|");

    let floor = fdatasync_loop(&work.path().join("plain"), &data, safe)?;
    row("plain pwrite + fdatasync", "write", &floor, args.size);
    let modes: [(&str, Durability, usize, usize); 4] = [
        ("Safe", Durability::Safe, safe, 1),
        ("Turbo", Durability::Turbo, count, 1),
        (
            "Periodic(100 ms)",
            Durability::Periodic(Duration::from_millis(100)),
            count,
            1,
        ),
        ("Safe, batches of 100", Durability::Safe, count, BATCH),
    ];
    let mut results = Vec::new();
    for (i, (name, durability, items, per_call)) in modes.into_iter().enumerate() {
        let path = work.path().join(format!("q{i}"));
        let (enqueue, dequeue) = check_mode(&path, durability, &data, items, per_call)?;
        let (enq_name, deq_name) = if per_call == 1 {
            ("enqueue", "dequeue")
        } else {
            ("enqueue_batch", "dequeue_batch")
        };
        row(name, enq_name, &enqueue, args.size);
        row(name, deq_name, &dequeue, args.size);
        std::fs::remove_dir_all(&path)?;
        results.push(enqueue);
    }

    let (safe_run, turbo_run, batch_run) = (&results[0], &results[1], &results[3]);
    println!();
    println!(
        "Safe enqueue: {} items/s, {:.2}x the plain fdatasync loop; Turbo is {:.0}x faster than Safe \
         (and loses the last calls on a power loss, not on a crash); batches of 100 in Safe: {} items/s.",
        report::rate(safe_run.per_sec()),
        safe_run.per_sec() / floor.per_sec(),
        turbo_run.per_sec() / safe_run.per_sec(),
        report::rate(batch_run.per_sec()),
    );
    println!("Latencies include the clock read around each call.");
    let removed = work.path().to_path_buf();
    work.close()?;
    println!("Removed {}.", removed.display());
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) => {
            if !problem.is_empty() {
                eprintln!("disk_check: {problem}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("disk_check: {e}");
            ExitCode::FAILURE
        }
    }
}
