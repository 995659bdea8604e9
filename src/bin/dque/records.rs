//! `dque peek` and `dque dump`: records as stored, without taking them.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dque::jobs::{job_from_record, StoredJob, WaitState, JOB_CODEC_ID};
use dque::{JobPart, QueueFiles, StoredRecord};

use crate::address::{Address, AddressExt, Make};
use crate::fail::{Failure, EMPTY};

/// Options of `dque peek`.
#[derive(Debug, clap::Args)]
pub struct PeekArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// How many records to show, from the head.
    #[arg(short = 'n', long, default_value_t = 10,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub count: usize,
    /// Write the bytes of one record (the head, or --id) to stdout, as stored.
    #[arg(long)]
    pub raw: bool,
    /// The record to show (with --raw, the one to write); ids are in the
    /// listing (a job's id in a jobs queue).
    #[arg(long)]
    pub id: Option<String>,
    #[command(flatten)]
    pub format: Format,
}

/// Options of `dque dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// The queue directory.
    pub dir: PathBuf,
    #[command(flatten)]
    pub format: Format,
}

/// Options of `dque dead`.
#[derive(Debug, clap::Args)]
pub struct DeadArgs {
    /// The queue: a directory (its dead letters are in DIR/dead), or
    /// postgres://…#QUEUE, redis://…#QUEUE.
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    #[command(flatten)]
    pub format: Format,
}

/// How records are printed.
#[derive(Debug, clap::Args)]
pub struct Format {
    /// One JSON object per record (id, attempts, segment, offset, len, and
    /// text or hex), for scripts.
    #[arg(long)]
    pub json: bool,
    /// Show whole payloads; by default at most 200 bytes of each are shown.
    #[arg(long)]
    pub full: bool,
}

/// Bytes of a payload shown unless `--full`.
const SHOWN: usize = 200;

pub fn peek(args: &PeekArgs) -> Result<ExitCode, Failure> {
    let Address::Dir(dir) = &args.address else {
        return peek_server(args);
    };
    let mut shown = 0;
    let mut raw = None;
    let jobs = is_jobs_queue(dir)?;
    let wanted_record = match (&args.id, jobs) {
        (Some(id), false) => Some(
            id.parse::<u64>()
                .map_err(|_| Failure::new(2, format!("--id {id:?}: record ids are numbers")))?,
        ),
        _ => None,
    };
    let wanted = |record: &StoredRecord<'_>| match (&args.id, jobs) {
        (None, _) => true,
        (Some(_), false) => wanted_record == Some(record.id),
        (Some(id), true) => job_from_record(record.payload).is_ok_and(|s| s.job.id == *id),
    };
    let limit = if args.id.is_some() { 1 } else { args.count };
    walk(dir, jobs, |part, record, out| {
        if !wanted(&record) {
            return Ok(ControlFlow::Continue(()));
        }
        if args.raw {
            raw = Some(record.payload.to_vec());
            return Ok(ControlFlow::Break(()));
        }
        print_record(out, jobs, part, &record, &args.format)?;
        shown += 1;
        Ok(if shown >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    if let Some(bytes) = raw {
        crate::output::written(std::io::stdout().write_all(&bytes))?;
        return Ok(ExitCode::SUCCESS);
    }
    if shown == 0 {
        let what = match &args.id {
            Some(id) => format!("no pending record with id {id}"),
            None => "the queue is empty".into(),
        };
        return Err(Failure::new(EMPTY, what));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn dump(args: &DumpArgs) -> Result<ExitCode, Failure> {
    let jobs = is_jobs_queue(&args.dir)?;
    walk(&args.dir, jobs, |part, record, out| {
        print_record(out, jobs, part, &record, &args.format)?;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `peek` of a server's queue: its waiting jobs through the Jobs API.
fn peek_server(args: &PeekArgs) -> Result<ExitCode, Failure> {
    let queue = args.address.open(Make::No)?;
    let fail = |e| args.address.failure(e);
    let waiting = match &args.id {
        Some(id) => queue
            .waiting(usize::MAX)
            .map_err(fail)?
            .into_iter()
            .filter(|w| w.job.id == *id)
            .take(1)
            .collect(),
        None => queue.waiting(args.count).map_err(fail)?,
    };
    if waiting.is_empty() {
        let what = match &args.id {
            Some(id) => format!("no waiting job has id {id}"),
            None => "the queue is empty".into(),
        };
        return Err(Failure::new(EMPTY, what));
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.raw {
        let written = out.write_all(&waiting[0].job.body).err();
        return finish(out, written).map(|()| ExitCode::SUCCESS);
    }
    let mut broken = None;
    for w in &waiting {
        let due = match w.state {
            WaitState::Scheduled(at) => Some(at),
            _ => None,
        };
        let stored = StoredJob::new(w.job.clone(), due);
        let part = if due.is_some() {
            JobPart::Scheduled
        } else {
            JobPart::Lane(w.job.priority)
        };
        if let Err(e) = print_job(&mut out, part, None, &stored, &args.format) {
            broken = Some(e);
            break;
        }
    }
    finish(out, broken)?;
    Ok(ExitCode::SUCCESS)
}

/// `dead` of a server's queue: its dead jobs through the Jobs API.
fn dead_server(args: &DeadArgs) -> Result<ExitCode, Failure> {
    let queue = args.address.open(Make::No)?;
    let dead = queue
        .dead(usize::MAX)
        .map_err(|e| args.address.failure(e))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut broken = None;
    for (n, job) in dead.iter().enumerate() {
        let shown = Shown::new(&job.job.body, &args.format);
        let written = if args.format.json {
            let mut value = serde_json::json!({
                "dead_id": n,
                "job": job.job.id,
                "priority": job.job.priority,
                "attempts": job.job.attempt,
                "reason": job.reason,
            });
            shown.add_to(&mut value);
            writeln!(out, "{value}")
        } else {
            writeln!(
                out,
                "dead {n:<4} job {} priority {} attempts {:<2} reason {:?}\n          {shown}",
                job.job.id, job.job.priority, job.job.attempt, job.reason
            )
        };
        if let Err(e) = written {
            broken = Some(e);
            break;
        }
    }
    finish(out, broken)?;
    Ok(ExitCode::SUCCESS)
}

/// Whether the queue at `dir` holds jobs (its records are job envelopes).
fn is_jobs_queue(dir: &Path) -> Result<bool, Failure> {
    let fail = |e| Failure::from_queue(dir, e);
    let stats = QueueFiles::open(dir)
        .and_then(|f| f.stats())
        .map_err(fail)?;
    Ok(stats.codec_id == JOB_CODEC_ID)
}

pub fn dead(args: &DeadArgs) -> Result<ExitCode, Failure> {
    let Address::Dir(dir) = &args.address else {
        return dead_server(args);
    };
    let fail = |e| Failure::from_queue(dir, e);
    let jobs = is_jobs_queue(dir)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut broken = None;
    // A jobs queue keeps the dead letters of each priority lane.
    for (part, part_dir) in dque::job_parts(dir).map_err(fail)? {
        let JobPart::Lane(_) = part else { continue };
        let files = QueueFiles::open(&part_dir).map_err(fail)?;
        let visited = files.visit_dead_letters(|letter| {
            match print_dead_letter(&mut out, &letter, jobs, &args.format) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    broken = Some(e);
                    ControlFlow::Break(())
                }
            }
        });
        visited.map_err(fail)?;
        if broken.is_some() {
            break;
        }
    }
    finish(out, broken)?;
    Ok(ExitCode::SUCCESS)
}

/// Flushes `out`; a pipe closed early (`| head`) is not an error.
fn finish(mut out: impl Write, broken: Option<std::io::Error>) -> Result<(), Failure> {
    crate::output::written(broken.map_or_else(|| out.flush(), Err))
}

/// Visits the records of the queue at `dir` with a locked, buffered stdout:
/// of a jobs queue, every lane from the smallest priority, then the schedule.
fn walk(
    dir: &Path,
    jobs: bool,
    mut visit: impl FnMut(JobPart, StoredRecord<'_>, &mut dyn Write) -> std::io::Result<ControlFlow<()>>,
) -> Result<(), Failure> {
    let fail = |e| Failure::from_queue(dir, e);
    let parts = match jobs {
        true => dque::job_parts(dir).map_err(fail)?,
        false => vec![(JobPart::Lane(0), dir.to_path_buf())],
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut broken = None;
    let mut stopped = false;
    for (part, part_dir) in parts {
        let files = QueueFiles::open(&part_dir).map_err(fail)?;
        let walked = files.visit_records(|record| match visit(part, record, &mut out) {
            Ok(ControlFlow::Continue(())) => ControlFlow::Continue(()),
            Ok(ControlFlow::Break(())) => {
                stopped = true;
                ControlFlow::Break(())
            }
            Err(e) => {
                broken = Some(e);
                ControlFlow::Break(())
            }
        });
        walked.map_err(fail)?;
        if stopped || broken.is_some() {
            break;
        }
    }
    finish(out, broken)
}

/// A record: a job if the queue holds jobs (and it reads as one), else
/// its bytes.
fn print_record(
    out: &mut dyn Write,
    jobs: bool,
    part: JobPart,
    record: &StoredRecord<'_>,
    format: &Format,
) -> std::io::Result<()> {
    match jobs.then(|| job_from_record(record.payload).ok()).flatten() {
        Some(stored) => print_job(out, part, Some(record), &stored, format),
        None => print_plain(out, record, format),
    }
}

fn print_plain(
    out: &mut dyn Write,
    record: &StoredRecord<'_>,
    format: &Format,
) -> std::io::Result<()> {
    let shown = Shown::new(record.payload, format);
    if format.json {
        let mut value = serde_json::json!({
            "id": record.id,
            "attempts": record.attempts,
            "segment": record.segment,
            "offset": record.offset,
        });
        shown.add_to(&mut value);
        return writeln!(out, "{value}");
    }
    writeln!(
        out,
        "id {:<6} attempts {:<2} {shown}",
        record.id, record.attempts
    )
}

/// A job: its id, priority, attempts, due time, headers, then the body
/// (and, stored in a queue directory, its record's place).
fn print_job(
    out: &mut dyn Write,
    part: JobPart,
    record: Option<&StoredRecord<'_>>,
    stored: &StoredJob,
    format: &Format,
) -> std::io::Result<()> {
    let job = &stored.job;
    let shown = Shown::new(&job.body, format);
    let attempts = job.attempt + record.map_or(0, |r| u32::from(r.attempts));
    let due_at = match (part, stored.due) {
        (JobPart::Scheduled, Some(due)) => Some(due),
        _ => None,
    };
    let due = due_at.map(|due| {
        due.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    if format.json {
        let headers: serde_json::Map<String, serde_json::Value> = job
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone().into()))
            .collect();
        let mut value = serde_json::json!({
            "id": job.id,
            "priority": job.priority,
            "attempts": attempts,
            "headers": headers,
            "scheduled": matches!(part, JobPart::Scheduled),
            "due": due,
            "due_at": due_at.map(crate::when::rfc3339),
        });
        if let Some(record) = record {
            value["record"] = record.id.into();
            value["segment"] = record.segment.into();
            value["offset"] = record.offset.into();
        }
        shown.add_to(&mut value);
        return writeln!(out, "{value}");
    }
    let headers: Vec<String> = job
        .headers
        .iter()
        .map(|(n, v)| format!("{n}={v:?}"))
        .collect();
    let due = due_at.map_or(String::new(), |due| {
        format!(" due {}", crate::when::shown(due))
    });
    let headers = match headers.is_empty() {
        true => String::new(),
        false => format!(" headers {}", headers.join(" ")),
    };
    writeln!(
        out,
        "job {} priority {} attempts {attempts}{due}{headers}\n          {shown}",
        job.id, job.priority
    )
}

fn print_dead_letter(
    out: &mut impl Write,
    letter: &dque::DeadLetter,
    jobs: bool,
    format: &Format,
) -> std::io::Result<()> {
    let stored = jobs
        .then(|| job_from_record(&letter.payload).ok())
        .flatten();
    let body = stored
        .as_ref()
        .map_or(&letter.payload[..], |s| &s.job.body[..]);
    let shown = Shown::new(body, format);
    if format.json {
        let mut value = serde_json::json!({
            "dead_id": letter.id,
            "id": letter.original_id,
            "attempts": letter.attempts,
            "reason": letter.reason,
        });
        if let Some(stored) = &stored {
            value["job"] = stored.job.id.clone().into();
            value["priority"] = stored.job.priority.into();
            value["attempts"] = (stored.job.attempt + u32::from(letter.attempts)).into();
        }
        shown.add_to(&mut value);
        return writeln!(out, "{value}");
    }
    let what = match &stored {
        Some(stored) => format!(
            "job {} priority {} attempts {:<2}",
            stored.job.id,
            stored.job.priority,
            stored.job.attempt + u32::from(letter.attempts)
        ),
        None => format!(
            "id {:<6} attempts {:<2}",
            letter.original_id, letter.attempts
        ),
    };
    writeln!(
        out,
        "dead {:<4} {what} reason {:?}\n          {shown}",
        letter.id, letter.reason
    )
}

/// A payload as shown: text or hex, cut at [`SHOWN`] bytes unless `--full`.
pub struct Shown<'a> {
    len: usize,
    shown: &'a [u8],
    text: Option<&'a str>,
}

impl<'a> Shown<'a> {
    pub fn new(payload: &'a [u8], format: &Format) -> Self {
        let shown = if format.full {
            payload
        } else {
            &payload[..payload.len().min(SHOWN)]
        };
        Shown {
            len: payload.len(),
            shown,
            text: as_text(shown),
        }
    }

    fn cut(&self) -> bool {
        self.shown.len() < self.len
    }

    /// Adds `len`, `truncated` and `text` or `hex` to a JSON object.
    pub fn add_to(&self, value: &mut serde_json::Value) {
        value["len"] = self.len.into();
        value["truncated"] = self.cut().into();
        match self.text {
            Some(text) => value["text"] = text.into(),
            None => value["hex"] = hex(self.shown).into(),
        }
    }
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:>6} bytes  ", self.len)?;
        match self.text {
            Some(text) => write!(f, "{text:?}")?,
            None => write!(f, "hex {}", hex(self.shown))?,
        }
        if self.cut() {
            write!(f, " …")?;
        }
        Ok(())
    }
}

/// The payload as text when it is UTF-8 without control characters other
/// than tab and newline (a cut may split the last character: it is dropped).
fn as_text(bytes: &[u8]) -> Option<&str> {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let printable = text
        .chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\t');
    (printable && !bytes.is_empty()).then_some(text)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_shown_as_text_and_binary_as_hex() {
        assert_eq!(as_text(b"hello\tworld\n"), Some("hello\tworld\n"));
        assert_eq!(as_text(b"\x00\x01"), None, "control bytes are not text");
        assert_eq!(as_text(&[0xff, 0xfe]), None, "not UTF-8");
        assert_eq!(as_text("héllo".as_bytes()), Some("héllo"));
        // A cut through "é" leaves the part before it.
        assert_eq!(as_text(&"hé".as_bytes()[..2]), Some("h"));
        assert_eq!(as_text(b""), None, "an empty payload shows as empty hex");
        assert_eq!(hex(&[0, 0xab, 0x10]), "00 ab 10");
    }
}
