//! `dque push` and `dque pop`: jobs in and out of a queue from shell scripts.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dque::jobs::{JobLease, JobQueue, NewJob};
use dque::{Options, RawQueue};

use crate::address::{Address, AddressExt, Make};
use crate::fail::{Failure, EMPTY};

/// Options of `dque push`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque push q 'hello'                  one job per argument
  dque push q --file photo.jpg         a file's bytes as one job
  seq 1000 | dque push q --lines       each line of stdin as one job
  tar c dir | dque push q              all of stdin as one job
  dque push q --priority -5 urgent     smaller priorities run first (default 0)
  dque push q --delay 60 later         ready in 60 seconds
  dque push q --id order-17 --header owner=ops 'bill order 17'
  dque push q --limit tenant-7 'run one at a time with the others of tenant-7'
  dque push q --id order-17 --unique-for 3600 'bill order 17'
                                       not again within the hour, even once it ran
  dque push q --id sync --unique-for 600 --unique-states queued,running,done,dead x
  dque push q --kind greet '{\"name\":\"ada\"}'   a typed job for the worker runtime")]
pub struct PushArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// Items to add, one job per argument; without any (and without
    /// --file), stdin is read.
    pub items: Vec<String>,
    /// Add the bytes of this file as one job.
    #[arg(long, conflicts_with = "items")]
    pub file: Option<PathBuf>,
    /// Add each line of stdin (without its newline) as one job.
    #[arg(long, conflicts_with_all = ["items", "file"])]
    pub lines: bool,
    /// Create the queue (a jobs queue) if ADDRESS does not exist.
    #[arg(long)]
    pub create: bool,
    /// Push into a queue of any codec: the items must already be encoded
    /// with it (bytes from `dque pop --encoded` or `dque peek --raw`).
    #[arg(long, conflicts_with_all = ["create", "priority", "delay", "header", "id", "kind", "limit", "unique_for", "timeout"])]
    pub encoded: bool,
    /// With --create: items per segment of a new queue (default 100000).
    #[arg(long, requires = "create", value_name = "N")]
    pub segment_items: Option<u32>,
    /// The jobs' priority: of the ready jobs, smaller numbers run first.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = 0
    )]
    pub priority: i32,
    /// Keep the jobs out of sight for this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub delay: Option<f64>,
    /// A header NAME=VALUE for every job (NAME: letters, digits, _); repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub header: Vec<String>,
    /// The jobs' kind, for a worker runtime (`impl Job` with `KIND = K`):
    /// header `klass` on every backend (qless's class on Redis).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// The job's id: while a job with this id waits or runs, pushing it
    /// again adds nothing (one item only).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// A limit the jobs take while they run (`dque limit` sets its
    /// maximum): header `limits`; repeatable.
    #[arg(long, value_name = "NAME")]
    pub limit: Vec<String>,
    /// With --id: hold the id for this many seconds from now: pushing it
    /// again within them adds nothing, even once the job ran (a unique
    /// job, as Sidekiq's, Oban's and River's unique periods).
    #[arg(long, value_name = "SECONDS", requires = "id")]
    pub unique_for: Option<f64>,
    /// With --unique-for: the states in which the id is held,
    /// comma-separated: queued, running, done, dead (default
    /// queued,running,done; queued and running are always in).
    #[arg(long, value_name = "STATES", requires = "unique_for")]
    pub unique_states: Option<dque::jobs::UniqueStates>,
    /// The jobs' own timeout in seconds: a worker (`dque work`, the
    /// runtime) ends an attempt running longer as "timed out". Header
    /// `dque_timeout_ms` on every backend.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
}

/// Options of `dque pop`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  item=$(dque pop q)                   take one item (exit code 6 when empty)
  dque pop q -n 100 > batch.txt        up to 100 items, a newline after each
  dque pop q --wait 30                 wait up to 30 s for an item")]
pub struct PopArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
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
pub fn patiently(open: impl FnMut() -> dque::Result<RawQueue>) -> dque::Result<RawQueue> {
    patiently_with(open)
}

/// [`patiently`] for any handle.
pub fn patiently_with<Q>(mut open: impl FnMut() -> dque::Result<Q>) -> dque::Result<Q> {
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
    if args.encoded {
        return push_encoded(args);
    }
    let template = job_template(args)?;
    if args.id.is_some() && (args.lines || args.items.len() > 1) {
        return Err(Failure::new(2, "--id names one job: push one item with it"));
    }
    // Opened before stdin is read: a locked or missing queue consumes nothing.
    let make = match args.create {
        true => Make::IfMissing {
            segment_items: args.segment_items,
        },
        false => Make::No,
    };
    let queue = args.address.open(make)?;
    let fail = |e| args.address.failure(e);
    let mut pushed = 0;
    let mut push_batch = |items: Vec<Vec<u8>>| -> Result<(), Failure> {
        let count = items.len();
        let jobs = items
            .into_iter()
            .map(|body| template.with_body(body))
            .collect();
        // One write and one fsync per batch (per priority lane): its jobs
        // are durable together.
        let enqueued = queue.enqueue_batch(jobs).map_err(|e| {
            let failure = fail(e);
            match pushed {
                0 => failure,
                n => Failure::new(
                    failure.code(),
                    format!("{} (after {n} items were pushed)", failure.message()),
                ),
            }
        })?;
        for already in enqueued.iter().filter(|e| !e.is_added()) {
            match already {
                dque::jobs::Enqueued::Duplicate(held) => say!(
                    "dque: job {:?} was pushed within its uniqueness period and is {}                      (held until {}): not pushed again",
                    held.id,
                    held.state.name(),
                    crate::when::rfc3339(held.until)
                ),
                _ => say!(
                    "dque: job {:?} is queued already (waiting or running): not pushed again",
                    already.id()
                ),
            }
        }
        pushed += count;
        Ok(())
    };
    if args.lines {
        let mut batch = Vec::with_capacity(LINES_PER_BATCH);
        for line in std::io::stdin().lock().split(b'\n') {
            batch.push(without_cr(line.map_err(Failure::other)?));
            if batch.len() == LINES_PER_BATCH {
                push_batch(std::mem::take(&mut batch))?;
            }
        }
        push_batch(batch)?;
    } else {
        push_batch(read_items(args).map_err(Failure::other)?)?;
    }
    queue.close().map_err(fail)?;
    Ok(ExitCode::SUCCESS)
}

/// A line of `--lines` without the `\r` of a CRLF ending.
fn without_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// What every job of one push gets besides its body.
struct JobTemplate {
    priority: i32,
    delay: Option<Duration>,
    headers: Vec<(String, String)>,
    id: Option<String>,
    unique_for: Option<Duration>,
    unique_states: Option<dque::jobs::UniqueStates>,
}

impl JobTemplate {
    fn with_body(&self, body: Vec<u8>) -> NewJob {
        let mut job = NewJob::new(body).priority(self.priority);
        if let Some(delay) = self.delay {
            job = job.delay(delay);
        }
        for (name, value) in &self.headers {
            job = job.header(name.clone(), value.clone());
        }
        if let Some(id) = &self.id {
            job = job.id(id.clone());
        }
        if let Some(period) = self.unique_for {
            job = job.unique_for(period);
        }
        if let Some(states) = self.unique_states {
            job = job.unique_states(states);
        }
        job
    }
}

fn job_template(args: &PushArgs) -> Result<JobTemplate, Failure> {
    let delay = args
        .delay
        .map(|secs| {
            Duration::try_from_secs_f64(secs).map_err(|_| {
                Failure::new(
                    2,
                    format!("--delay {secs}: give a number of seconds, 0 or more"),
                )
            })
        })
        .transpose()?;
    let unique_for = args
        .unique_for
        .map(|secs| match Duration::try_from_secs_f64(secs) {
            Ok(period) if !period.is_zero() => Ok(period),
            _ => Err(Failure::new(
                2,
                format!("--unique-for {secs}: give a number of seconds, more than 0"),
            )),
        })
        .transpose()?;
    let mut headers: Vec<(String, String)> = args
        .header
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .ok_or_else(|| Failure::new(2, format!("--header {pair:?}: give it as NAME=VALUE")))
        })
        .collect::<Result<_, _>>()?;
    if let Some(kind) = &args.kind {
        if headers
            .iter()
            .any(|(name, _)| name == dque::runtime::KIND_HEADER)
        {
            return Err(Failure::new(
                2,
                format!(
                    "--kind and --header {}=…: give the kind once",
                    dque::runtime::KIND_HEADER
                ),
            ));
        }
        headers.push((dque::runtime::KIND_HEADER.to_owned(), kind.clone()));
    }
    crate::limits::add_limits(&mut headers, &args.limit)?;
    if let Some(seconds) = args.timeout {
        let timeout = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                Failure::new(
                    2,
                    format!("--timeout {seconds}: give a number of seconds, more than 0"),
                )
            })?;
        // As `NewJob::timeout` writes it: whole milliseconds, at least 1.
        headers.retain(|(name, _)| name != dque::jobs::TIMEOUT_HEADER);
        let ms = timeout.as_millis().max(1).to_string();
        headers.push((dque::jobs::TIMEOUT_HEADER.to_owned(), ms));
    }
    Ok(JobTemplate {
        priority: args.priority,
        delay,
        headers,
        id: args.id.clone(),
        unique_for,
        unique_states: args.unique_states,
    })
}

/// `push --encoded`: bytes already in the queue's codec, into a queue
/// directory of any codec, as records without a job envelope.
fn push_encoded(args: &PushArgs) -> Result<ExitCode, Failure> {
    let Address::Dir(dir) = &args.address else {
        return Err(Failure::new(2, "--encoded works on queue directories"));
    };
    let fail = |e| Failure::from_queue(dir, e);
    let max = joining().max_item_bytes(MAX_ITEM_BYTES);
    let queue = patiently(|| open_raw(dir, &max, true)).map_err(fail)?;
    let items = if args.lines {
        std::io::stdin()
            .lock()
            .split(b'\n')
            .map(|line| line.map(without_cr))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(Failure::other)?
    } else {
        read_items(args).map_err(Failure::other)?
    };
    queue.enqueue_batch(&items).map_err(fail)?;
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
    let taken = if args.encoded {
        let Address::Dir(dir) = &args.address else {
            return Err(Failure::new(2, "--encoded works on queue directories"));
        };
        let fail = |e| Failure::from_queue(dir, e);
        let queue = patiently(|| open_raw(dir, &joining(), true)).map_err(fail)?;
        let taken = take(&Encoded(&queue), args, deadline, &mut out)?;
        queue.close().map_err(fail)?;
        taken
    } else {
        let queue = args.address.open(Make::No)?;
        let taken = take(&Jobs(queue.as_ref()), args, deadline, &mut out)?;
        queue.close().map_err(|e| args.address.failure(e))?;
        taken
    };
    if taken == 0 && !crate::output::reader_gone() {
        return Err(Failure::new(EMPTY, "the queue is empty"));
    }
    Ok(ExitCode::SUCCESS)
}

/// What `pop` takes from: a lease of bytes, then ack or release.
trait Source {
    type Lease;
    fn lease(&self, wait: Duration) -> dque::Result<Option<Self::Lease>>;
    fn bytes<'a>(&self, lease: &'a Self::Lease) -> &'a [u8];
    fn ack(&self, lease: Self::Lease) -> dque::Result<()>;
    fn release(&self, lease: Self::Lease) -> dque::Result<()>;
}

/// A queue of any codec, its records' bytes as stored.
struct Encoded<'q>(&'q RawQueue);

impl Source for Encoded<'_> {
    type Lease = dque::Leased<Vec<u8>>;
    fn lease(&self, wait: Duration) -> dque::Result<Option<Self::Lease>> {
        self.0.lease_timeout(wait)
    }
    fn bytes<'a>(&self, lease: &'a Self::Lease) -> &'a [u8] {
        lease.item()
    }
    fn ack(&self, lease: Self::Lease) -> dque::Result<()> {
        lease.ack()
    }
    fn release(&self, lease: Self::Lease) -> dque::Result<()> {
        lease.release()
    }
}

/// A job queue, its jobs' bodies.
struct Jobs<'q>(&'q dyn JobQueue);

impl Source for Jobs<'_> {
    type Lease = JobLease;
    fn lease(&self, wait: Duration) -> dque::Result<Option<JobLease>> {
        match wait.is_zero() {
            true => self.0.lease(),
            false => self.0.lease_timeout(wait),
        }
    }
    fn bytes<'a>(&self, lease: &'a JobLease) -> &'a [u8] {
        &lease.body
    }
    fn ack(&self, lease: JobLease) -> dque::Result<()> {
        self.0.ack(lease)
    }
    fn release(&self, lease: JobLease) -> dque::Result<()> {
        self.0.release(lease)
    }
}

/// Writes up to `--count` items (one without it) to `out`, taking each only
/// once its bytes are written; waits until `deadline` for the first one;
/// returns how many were taken.
fn take<S: Source>(
    source: &S,
    args: &PopArgs,
    deadline: Option<Instant>,
    out: &mut impl Write,
) -> Result<usize, Failure> {
    let fail = |e| args.address.failure(e);
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
        let Some(item) = source.lease(wait).map_err(fail)? else {
            break;
        };
        let written = out.write_all(source.bytes(&item)).and_then(|()| {
            // Exact bytes for scripts; a newline for eyes on a terminal.
            if args.count.is_some() || std::io::stdout().is_terminal() {
                out.write_all(b"\n")?;
            }
            out.flush()
        });
        if let Err(e) = written {
            source.release(item).map_err(fail)?;
            // A reader that left (`| head`) ends the pop quietly; any
            // other failure is an error.
            crate::output::written(Err(e)).map_err(|failure| {
                Failure::other(format!("{failure}; the item stays in the queue"))
            })?;
            break;
        }
        source.ack(item).map_err(fail)?;
        taken += 1;
    }
    Ok(taken)
}
