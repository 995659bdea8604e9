//! `dque push` and `dque pop`: a raw-bytes queue from shell scripts.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dque::{Options, RawQueue};

use crate::fail::{Failure, EMPTY};

/// Options of `dque push`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque push q 'hello'                  one item per argument
  dque push q --file photo.jpg         a file's bytes as one item
  seq 1000 | dque push q --lines       each line of stdin as one item
  tar c dir | dque push q              all of stdin as one item")]
pub struct PushArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Items to add, one per argument; without any (and without --file),
    /// stdin is read.
    pub items: Vec<String>,
    /// Add the bytes of this file as one item.
    #[arg(long, conflicts_with = "items")]
    pub file: Option<PathBuf>,
    /// Add each line of stdin (without its newline) as one item.
    #[arg(long, conflicts_with_all = ["items", "file"])]
    pub lines: bool,
    /// Create the queue (for raw bytes) if DIR does not exist.
    #[arg(long)]
    pub create: bool,
    /// Push into a queue of any codec: the items must already be encoded
    /// with it (bytes from `dque pop --encoded` or `dque peek --raw`).
    #[arg(long, conflicts_with = "create")]
    pub encoded: bool,
    /// With --create: items per segment of a new queue (default 100000).
    #[arg(long, requires = "create", value_name = "N")]
    pub segment_items: Option<u32>,
}

/// Options of `dque pop`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  item=$(dque pop q)                   take one item (exit code 6 when empty)
  dque pop q -n 100 > batch.txt        up to 100 items, a newline after each
  dque pop q --wait 30                 wait up to 30 s for an item")]
pub struct PopArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Take up to N items, writing a newline after each; by default one
    /// item is taken and its bytes are written exactly.
    #[arg(short = 'n', long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub count: Option<usize>,
    /// Wait up to this many seconds for a first item when the queue is empty.
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    /// Pop from a queue of any codec, writing the bytes its codec wrote.
    #[arg(long)]
    pub encoded: bool,
}

/// The largest item the format holds (a record's length has 30 bits).
pub const MAX_ITEM_BYTES: u32 = (1 << 30) - 1;

/// How long push and pop wait for a queue another handle holds alone: a
/// program that keeps the queue open in exclusive mode still gets a quick
/// "in use". (Commands join queues in shared mode: several `dque` commands
/// and programs that share the queue work on it together.)
const LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// How the commands open a queue they write to: in shared mode, beside any
/// program (or other command) that shares it.
pub fn joining() -> Options {
    Options::new().shared(true)
}

/// Runs `open` until it does not fail with `Locked`, for [`LOCK_PATIENCE`].
pub fn patiently(mut open: impl FnMut() -> dque::Result<RawQueue>) -> dque::Result<RawQueue> {
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match open() {
            Err(dque::Error::Locked { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    }
}

/// Opens the queue at `dir` for raw bytes; with `encoded`, whatever its codec.
pub fn open_raw(dir: &std::path::Path, options: &Options, encoded: bool) -> dque::Result<RawQueue> {
    if encoded {
        RawQueue::open_encoded_with(dir, options)
    } else {
        RawQueue::open_with(dir, options)
    }
}

/// Lines of stdin enqueued per batch (one fsync each) with `--lines`.
const LINES_PER_BATCH: usize = 10_000;

pub fn push(args: &PushArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    // Opened before stdin is read: a locked or missing queue consumes nothing.
    // Any item the format can hold: the library's default cap protects
    // programs from runaway items, an operator pushes what they mean to.
    let max = joining().max_item_bytes(MAX_ITEM_BYTES);
    let queue = patiently(|| {
        if args.create {
            let mut options = max;
            if let Some(n) = args.segment_items {
                options = options.segment_items(n);
            }
            RawQueue::open_or_create_with(&args.dir, &options)
        } else {
            open_raw(&args.dir, &max, args.encoded)
        }
    })
    .map_err(|e| match e {
        dque::Error::NotFound { .. } => Failure::new(
            crate::fail::NO_QUEUE,
            format!(
                "no queue at {}: the path does not exist (push --create makes one)",
                args.dir.display()
            ),
        ),
        e => fail(e),
    })?;
    let mut pushed = 0;
    let mut push_batch = |items: &[Vec<u8>]| -> Result<(), Failure> {
        // One write and one fsync per batch: its items are durable together.
        queue.enqueue_batch(items).map_err(|e| {
            let failure = fail(e);
            match pushed {
                0 => failure,
                n => Failure::new(
                    failure.code(),
                    format!("{} (after {n} items were pushed)", failure.message()),
                ),
            }
        })?;
        pushed += items.len();
        Ok(())
    };
    if args.lines {
        let mut batch = Vec::with_capacity(LINES_PER_BATCH);
        for line in std::io::stdin().lock().split(b'\n') {
            let mut line = line.map_err(Failure::other)?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            batch.push(line);
            if batch.len() == LINES_PER_BATCH {
                push_batch(&batch)?;
                batch.clear();
            }
        }
        push_batch(&batch)?;
    } else {
        push_batch(&read_items(args).map_err(Failure::other)?)?;
    }
    queue.close().map_err(fail)?;
    Ok(ExitCode::SUCCESS)
}

/// The items of a push without `--lines`: the arguments, a file, or stdin.
fn read_items(args: &PushArgs) -> std::io::Result<Vec<Vec<u8>>> {
    if let Some(file) = &args.file {
        return std::fs::read(file).map(|bytes| vec![bytes]).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot read {}: {e}", file.display()))
        });
    }
    if !args.items.is_empty() {
        return Ok(args.items.iter().map(|s| s.as_bytes().to_vec()).collect());
    }
    let mut bytes = Vec::new();
    std::io::stdin().lock().read_to_end(&mut bytes)?;
    if bytes.is_empty() {
        // Most likely a producer that failed, not a wish for an empty item.
        return Err(std::io::Error::other(
            "stdin was empty: nothing pushed (an empty item is pushed with: dque push DIR '')",
        ));
    }
    Ok(vec![bytes])
}

pub fn pop(args: &PopArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let deadline = match args.wait {
        Some(secs) => {
            let wait = Duration::try_from_secs_f64(secs).map_err(|_| {
                Failure::new(
                    2,
                    format!("--wait {secs}: give a number of seconds, 0 or more"),
                )
            })?;
            Some(Instant::now() + wait)
        }
        None => None,
    };
    let mut out = std::io::stdout().lock();
    // Kept open while it waits: an enqueue by any process wakes it.
    let queue = patiently(|| open_raw(&args.dir, &joining(), args.encoded)).map_err(fail)?;
    let taken = take(&queue, args, deadline, &mut out)?;
    queue.close().map_err(fail)?;
    if taken == 0 {
        return Err(Failure::new(EMPTY, "the queue is empty"));
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes up to `--count` items (one without it) to `out`, taking each only
/// once its bytes are written; waits until `deadline` for the first one;
/// returns how many were taken.
fn take(
    queue: &RawQueue,
    args: &PopArgs,
    deadline: Option<Instant>,
    out: &mut impl Write,
) -> Result<usize, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let mut taken = 0;
    while taken < args.count.unwrap_or(1) {
        // Leased while its bytes are written: no other process takes it
        // meanwhile, and one whose bytes did not reach stdout (a closed
        // pipe, a full disk) is released, back at its place with no
        // delivery attempt counted. (If this command dies, its lease comes
        // back as soon as another handle looks.)
        let wait = match deadline {
            Some(deadline) if taken == 0 => deadline.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        };
        let Some(item) = queue.lease_timeout(wait).map_err(fail)? else {
            break;
        };
        let written = out.write_all(&item).and_then(|()| {
            // Exact bytes for scripts; a newline for eyes on a terminal.
            if args.count.is_some() || std::io::stdout().is_terminal() {
                out.write_all(b"\n")?;
            }
            out.flush()
        });
        if let Err(e) = written {
            item.release().map_err(fail)?;
            return Err(Failure::other(format!(
                "cannot write to stdout: {e}; the item stays in the queue"
            )));
        }
        item.ack().map_err(fail)?;
        taken += 1;
    }
    Ok(taken)
}
