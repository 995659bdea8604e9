//! `dque bench`: what each durability mode costs on the disk holding a
//! directory.
//!
//! Creates a temporary queue under `DIR` (so on the disk you mean to use),
//! measures enqueue and dequeue in each mode (Safe, Turbo, Periodic(100 ms),
//! and Safe with batches of 100) and prints items/s, MB/s and the p50/p99
//! latency of one call as a markdown table on stdout. Beside them, a plain
//! `pwrite` + `fdatasync` loop shows the disk's own limit for Safe. A
//! progress bar goes to stderr, only when stderr is a terminal. Everything
//! created is removed at the end, also after an error or a panic (not after
//! a kill or Ctrl-C, which leave a `.dque-bench-…` directory under `DIR`).

use std::cell::Cell;
use std::error::Error;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::builder::{PathBufValueParser, RangedU64ValueParser, TypedValueParser};
use dque::{Durability, Options, RawQueue};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report;

type BoxError = Box<dyn Error>;

/// Items per call in the batched mode.
const BATCH: usize = 100;
/// Items of the fsync-per-call rows when `--safe-count` is not given.
const DEFAULT_SAFE_COUNT: usize = 2_000;
/// `--size` must stay below this.
const SIZE_LIMIT: u64 = 1 << 30;
/// Rows in the table: the plain loop, then enqueue and dequeue of 4 modes.
const ROWS: usize = 9;
/// How often the progress bar is advanced while a row is measured.
const TICK: Duration = Duration::from_millis(50);
/// Latency slots reserved before a row starts (16 MiB): enough for the
/// default counts, while a huge `--count` grows the vector as it goes
/// instead of failing to reserve it all up front.
const PREALLOCATED_CALLS: usize = 1 << 20;
/// Zeros written at once when preparing the plain loop's file.
const PREFILL_CHUNK: usize = 1 << 20;

/// Options of `dque bench`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct BenchArgs {
    /// A directory on the disk to measure (it must exist). The queues are made
    /// in a temporary .dque-bench-* directory under it, removed at the end.
    #[arg(value_name = "DIR", value_parser = PathBufValueParser::new().try_map(existing_dir))]
    pub dir: PathBuf,

    /// Payload of one item, in bytes (1 to 1 GiB - 1).
    #[arg(
        long,
        value_name = "BYTES",
        default_value_t = 100,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..SIZE_LIMIT),
    )]
    pub size: usize,

    /// Items per mode for Turbo, Periodic(100 ms) and Safe in batches of 100.
    ///
    /// Turbo makes no fsync: an enqueue returns once its bytes are in the
    /// kernel's page cache, so a crash of the process loses nothing, but a
    /// power loss may lose the most recent calls. Periodic(100 ms) is Turbo
    /// plus a background fsync at most 100 ms apart: a power loss loses about
    /// the last 100 ms of calls. A Safe batch of 100 costs one fsync for all
    /// of its items.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = positive)]
    pub count: usize,

    /// Items of the rows with one fsync per call (the plain pwrite +
    /// fdatasync loop and Safe) [default: the smaller of --count and 2000]
    ///
    /// Safe returns from each enqueue or dequeue only once it is fsynced, so
    /// every call that returned survives a power loss. One fsync takes from
    /// tens of microseconds to several milliseconds depending on the disk,
    /// hence fewer items than --count.
    #[arg(long, value_name = "N", value_parser = positive)]
    pub safe_count: Option<usize>,
}

/// Shown at the end of `dque bench --help`.
const AFTER_HELP: &str = "\
Prints a markdown table on stdout: items/s, MB/s and the p50 and p99 latency
of one call, for each mode, beside a plain pwrite + fdatasync loop (the
fastest Safe can be on this disk). A progress bar is drawn on stderr when it
is a terminal. Everything it creates is removed at the end, also after an
error; a kill or Ctrl-C leaves DIR/.dque-bench-* behind, to remove by hand.

Examples:
  dque bench /var/lib/myapp
  dque bench /var/lib/myapp --size 4096 --count 20000";

impl BenchArgs {
    /// `--safe-count`, or its default.
    fn safe_count(&self) -> usize {
        self.safe_count
            .unwrap_or(self.count.min(DEFAULT_SAFE_COUNT))
    }
}

/// Parses a count of items: a whole number above zero, `_` allowed between
/// digits (`1_000_000`). A function rather than a clap range so that zero
/// gets a plain message instead of "not in 1..18446744073709551615".
fn positive(arg: &str) -> Result<usize, String> {
    match arg.replace('_', "").parse() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Accepts `path` only if it names an existing directory.
fn existing_dir(path: PathBuf) -> Result<PathBuf, String> {
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(path),
        Ok(_) => Err("not a directory".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no such directory".into()),
        Err(e) => Err(format!("cannot read it: {e}")),
    }
}

/// Runs `dque bench`.
pub fn run(args: &BenchArgs) -> Result<ExitCode, BoxError> {
    let safe_count = args.safe_count();
    let [safe, turbo, periodic, batches] = Mode::all(args.count, safe_count);
    // Removed on return, on error and on panic (the drop runs while unwinding).
    let work = tempfile::Builder::new()
        .prefix(".dque-bench-")
        .tempdir_in(&args.dir)
        .map_err(|e| {
            format!(
                "cannot create a directory under {}: {e}",
                args.dir.display()
            )
        })?;
    print_header(args, safe_count)?;

    let bench = Bench::new(work.path(), args.size)?;
    let floor = bench.plain_loop(safe_count)?;
    let safe = bench.mode(&safe)?;
    let turbo = bench.mode(&turbo)?;
    bench.mode(&periodic)?;
    let batches = bench.mode(&batches)?;
    print_summary(&floor, &safe, &turbo, &batches)?;

    let removed = work.path().to_path_buf();
    work.close()?;
    outln!("Removed {} and everything in it.", removed.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Prints what is measured where, and the table's head.
fn print_header(args: &BenchArgs, safe_count: usize) -> Result<(), BoxError> {
    outln!(
        "dque bench: {}-byte items under {} ({})",
        args.size,
        args.dir.display(),
        report::filesystem_of(&args.dir)
    )?;
    outln!(
        "Safe rows: {safe_count} items, one fsync per call; the others: {} items.\n",
        args.count
    )?;
    outln!("| mode | call | items | items/s | MB/s | p50 per call | p99 per call |")?;
    outln!("|---|---|---:|---:|---:|---:|---:|")?;
    Ok(())
}

/// Prints the ratios that matter under the table.
fn print_summary(floor: &Run, safe: &Run, turbo: &Run, batches: &Run) -> Result<(), BoxError> {
    outln!()?;
    outln!(
        "Safe enqueue: {} items/s, {:.2}x the plain fdatasync loop; Turbo is {:.0}x faster than Safe \
         (and loses the last calls on a power loss, not on a crash); batches of 100 in Safe: {} items/s.",
        report::rate(safe.per_sec()),
        safe.per_sec() / floor.per_sec(),
        turbo.per_sec() / safe.per_sec(),
        report::rate(batches.per_sec()),
    )?;
    outln!("Latencies include the clock read around each call.")?;
    Ok(())
}

/// One durability mode to measure: enqueue then dequeue `items`, in calls
/// of `per_call` items each.
struct Mode {
    name: &'static str,
    durability: Durability,
    items: usize,
    per_call: usize,
}

impl Mode {
    /// Safe, Turbo, Periodic(100 ms) and Safe in batches, in table order.
    fn all(count: usize, safe_count: usize) -> [Mode; 4] {
        let mode = |name, durability, items, per_call| Mode {
            name,
            durability,
            items,
            per_call,
        };
        let periodic = Durability::Periodic(Duration::from_millis(100));
        [
            mode("Safe", Durability::Safe, safe_count, 1),
            mode("Turbo", Durability::Turbo, count, 1),
            mode("Periodic(100 ms)", periodic, count, 1),
            mode("Safe, batches of 100", Durability::Safe, count, BATCH),
        ]
    }

    /// Calls each way; at least one, so that a count below the batch size
    /// still measures a whole batch.
    fn calls(&self) -> usize {
        (self.items / self.per_call).max(1)
    }

    /// The names of the enqueue and dequeue calls, as in the table.
    fn call_names(&self) -> (&'static str, &'static str) {
        if self.per_call == 1 {
            ("enqueue", "dequeue")
        } else {
            ("enqueue_batch", "dequeue_batch")
        }
    }
}

/// What every row shares: where to work, the payload, the bars' style.
struct Bench {
    work: PathBuf,
    data: Vec<u8>,
    style: ProgressStyle,
    /// Rows started so far, for the bar's "3/9".
    rows: Cell<usize>,
}

impl Bench {
    /// Works under `work`, with items of `size` bytes.
    fn new(work: &Path, size: usize) -> Result<Bench, BoxError> {
        let style = ProgressStyle::with_template(
            "{prefix} {msg:34} [{wide_bar}] {human_pos}/{human_len} items, {eta} left",
        )?
        .progress_chars("=> ");
        Ok(Bench {
            work: work.to_path_buf(),
            data: (0..size).map(|i| (i * 31 + 7) as u8).collect(),
            style,
            rows: Cell::new(0),
        })
    }

    /// A progress bar for the next row, with `items` to go. It clears itself
    /// when finished or dropped (also on an error), before the row is printed.
    fn row_bar(&self, mode: &str, call: &str, items: usize) -> ProgressBar {
        self.rows.set(self.rows.get() + 1);
        // A stderr target hides itself when stderr is not a terminal, so
        // nothing of the bar reaches a pipe or a file, and stdout never.
        let bar = ProgressBar::with_draw_target(Some(items as u64), ProgressDrawTarget::stderr())
            .with_style(self.style.clone())
            .with_prefix(format!("{}/{ROWS}", self.rows.get()))
            .with_message(format!("{mode} {call}"));
        bar.tick();
        bar
    }

    /// Prints a finished row of the table.
    fn print_row(&self, mode: &str, call: &str, run: &Run) -> Result<(), BoxError> {
        let mb_per_sec = run.per_sec() * self.data.len() as f64 / 1e6;
        outln!(
            "| {mode} | {call} | {} | {} | {mb_per_sec:.1} | {} | {} |",
            run.items,
            report::rate(run.per_sec()),
            report::nanos(run.percentile(0.50).as_nanos() as f64),
            report::nanos(run.percentile(0.99).as_nanos() as f64),
        )?;
        Ok(())
    }

    /// A plain `pwrite` + `fdatasync` of each of `items` items: one
    /// data-only sync per call, the disk's floor for Safe.
    fn plain_loop(&self, items: usize) -> Result<Run, BoxError> {
        let (name, call) = ("plain pwrite + fdatasync", "write");
        let bar = self.row_bar(name, call, items);
        let path = self.work.join("plain");
        let file = File::create(&path)?;
        let len = self
            .data
            .len()
            .checked_mul(items)
            .ok_or("--size times --safe-count is too large")?;
        prefill(&file, len)?;
        let mut at = 0;
        let run = Run::measure(items, 1, &bar, || {
            file.write_all_at(&self.data, at)?;
            at += self.data.len() as u64;
            Ok(file.sync_data()?)
        })?;
        drop(file);
        std::fs::remove_file(&path)?;
        bar.finish_and_clear();
        self.print_row(name, call, &run)?;
        Ok(run)
    }

    /// Enqueues then dequeues in `mode`, in a new queue removed afterwards;
    /// prints both rows and returns the enqueue run.
    fn mode(&self, mode: &Mode) -> Result<Run, BoxError> {
        let path = self.work.join("queue");
        // `--size` is below 1 GiB, so it fits the u32 of max_item_bytes.
        let max_item = (self.data.len() as u32).max(1 << 24);
        let options = Options::new()
            .durability(mode.durability)
            .max_item_bytes(max_item);
        let queue = RawQueue::create_with(&path, &options)?;
        let (enqueue_call, dequeue_call) = mode.call_names();
        let items = mode.calls() * mode.per_call;

        let bar = self.row_bar(mode.name, enqueue_call, items);
        let enqueue = self.enqueue(&queue, mode, &bar)?;
        bar.finish_and_clear();
        self.print_row(mode.name, enqueue_call, &enqueue)?;

        let bar = self.row_bar(mode.name, dequeue_call, items);
        let dequeue = self.dequeue(&queue, mode, &bar)?;
        bar.finish_and_clear();
        self.print_row(mode.name, dequeue_call, &dequeue)?;

        queue.close()?;
        std::fs::remove_dir_all(&path)?;
        Ok(enqueue)
    }

    /// Makes `mode.calls()` enqueue calls of `mode.per_call` items each.
    fn enqueue(&self, queue: &RawQueue, mode: &Mode, bar: &ProgressBar) -> Result<Run, BoxError> {
        if mode.per_call == 1 {
            Run::measure(
                mode.calls(),
                1,
                bar,
                || Ok(queue.enqueue_bytes(&self.data)?),
            )
        } else {
            let batch = vec![self.data.clone(); mode.per_call];
            Run::measure(mode.calls(), mode.per_call, bar, || {
                Ok(queue.enqueue_batch(&batch)?)
            })
        }
    }

    /// Dequeues what [`enqueue`](Self::enqueue) put in, the same calls.
    fn dequeue(&self, queue: &RawQueue, mode: &Mode, bar: &ProgressBar) -> Result<Run, BoxError> {
        let per_call = mode.per_call;
        Run::measure(mode.calls(), per_call, bar, || {
            let got = if per_call == 1 {
                usize::from(queue.dequeue()?.is_some())
            } else {
                queue.dequeue_batch(per_call)?.len()
            };
            if got == per_call {
                Ok(())
            } else {
                Err("the queue held fewer items than were enqueued".into())
            }
        })
    }
}

/// Writes `len` bytes of zeros and syncs them, so that the plain loop
/// overwrites blocks already allocated and written: its fdatasyncs then
/// carry data only, no allocation or extent conversion.
fn prefill(file: &File, len: usize) -> Result<(), BoxError> {
    // `len` is at least one byte (a positive size times a positive count),
    // so the chunk is never empty and step_by never sees zero.
    let zeros = vec![0u8; len.min(PREFILL_CHUNK)];
    for start in (0..len).step_by(zeros.len()) {
        let chunk = zeros.len().min(len - start);
        file.write_all_at(&zeros[..chunk], start as u64)?;
    }
    file.sync_all()?;
    Ok(())
}

/// Per-call latencies (sorted) and the wall time of a run of calls.
struct Run {
    items: usize,
    elapsed: Duration,
    calls: Vec<Duration>,
}

impl Run {
    /// Times `calls` calls of `op`, each moving `per_call` items, advancing
    /// `bar` as it goes.
    fn measure(
        calls: usize,
        per_call: usize,
        bar: &ProgressBar,
        mut op: impl FnMut() -> Result<(), BoxError>,
    ) -> Result<Run, BoxError> {
        let mut latencies = Vec::with_capacity(calls.min(PREALLOCATED_CALLS));
        let start = Instant::now();
        let (mut shown, mut last_tick) = (0, start);
        for done in 1..=calls {
            let call = Instant::now();
            op()?;
            latencies.push(call.elapsed());
            // Advancing the bar reads the clock and may draw; doing it
            // outside the timed call, and only every TICK, keeps it out of
            // the latencies and a negligible share of the wall time.
            if call.duration_since(last_tick) >= TICK {
                bar.inc(((done - shown) * per_call) as u64);
                (shown, last_tick) = (done, call);
            }
        }
        let elapsed = start.elapsed();
        bar.inc(((calls - shown) * per_call) as u64);
        latencies.sort_unstable();
        Ok(Run {
            items: calls * per_call,
            elapsed,
            calls: latencies,
        })
    }

    /// Items per second of wall time.
    fn per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency that a share `p` of the calls did not exceed.
    fn percentile(&self, p: f64) -> Duration {
        // `calls` is never empty: every run makes at least one call.
        let at = ((self.calls.len() as f64 * p).ceil() as usize).clamp(1, self.calls.len());
        self.calls[at - 1]
    }
}
