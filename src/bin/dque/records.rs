//! `dque peek` and `dque dump`: records as stored, without taking them.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use dque::{QueueFiles, StoredRecord};

use crate::fail::{Failure, EMPTY};

/// Options of `dque peek`.
#[derive(Debug, clap::Args)]
pub struct PeekArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// How many records to show, from the head.
    #[arg(short = 'n', long, default_value_t = 10,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub count: usize,
    /// Write the bytes of one record (the head, or --id) to stdout, as stored.
    #[arg(long)]
    pub raw: bool,
    /// The record to show (with --raw, the one to write); ids are in the listing.
    #[arg(long)]
    pub id: Option<u64>,
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
    /// The queue directory (its dead letters are in DIR/dead).
    pub dir: PathBuf,
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
    let mut shown = 0;
    let mut raw = None;
    let wanted = |record: &StoredRecord<'_>| args.id.is_none_or(|id| id == record.id);
    let limit = if args.id.is_some() { 1 } else { args.count };
    walk(&args.dir, |record, out| {
        if !wanted(&record) {
            return Ok(ControlFlow::Continue(()));
        }
        if args.raw {
            raw = Some(record.payload.to_vec());
            return Ok(ControlFlow::Break(()));
        }
        print_record(out, &record, &args.format)?;
        shown += 1;
        Ok(if shown >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    if let Some(bytes) = raw {
        std::io::stdout()
            .write_all(&bytes)
            .map_err(Failure::other)?;
        return Ok(ExitCode::SUCCESS);
    }
    if shown == 0 {
        let what = match args.id {
            Some(id) => format!("no pending record with id {id}"),
            None => "the queue is empty".into(),
        };
        return Err(Failure::new(EMPTY, what));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn dump(args: &DumpArgs) -> Result<ExitCode, Failure> {
    walk(&args.dir, |record, out| {
        print_record(out, &record, &args.format)?;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn dead(args: &DeadArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let files = QueueFiles::open(&args.dir).map_err(fail)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut broken = None;
    let visited = files.visit_dead_letters(|letter| {
        match print_dead_letter(&mut out, &letter, &args.format) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                broken = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    finish(out, broken)?;
    visited.map_err(fail)?;
    Ok(ExitCode::SUCCESS)
}

/// Flushes `out`; a pipe closed early (`| head`) is not an error.
fn finish(mut out: impl Write, broken: Option<std::io::Error>) -> Result<(), Failure> {
    match broken.map_or_else(|| out.flush(), Err) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(Failure::other),
    }
}

/// Visits the records of the queue at `dir` with a locked, buffered stdout.
fn walk(
    dir: &std::path::Path,
    mut visit: impl FnMut(StoredRecord<'_>, &mut dyn Write) -> std::io::Result<ControlFlow<()>>,
) -> Result<(), Failure> {
    let files = QueueFiles::open(dir).map_err(|e| Failure::from_queue(dir, e))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut broken = None;
    let walked = files.visit_records(|record| match visit(record, &mut out) {
        Ok(flow) => flow,
        Err(e) => {
            broken = Some(e);
            ControlFlow::Break(())
        }
    });
    finish(out, broken)?;
    walked.map_err(|e| Failure::from_queue(dir, e))
}

fn print_record(
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

fn print_dead_letter(
    out: &mut impl Write,
    letter: &dque::DeadLetter,
    format: &Format,
) -> std::io::Result<()> {
    let shown = Shown::new(&letter.payload, format);
    if format.json {
        let mut value = serde_json::json!({
            "dead_id": letter.id,
            "id": letter.original_id,
            "attempts": letter.attempts,
            "reason": letter.reason,
        });
        shown.add_to(&mut value);
        return writeln!(out, "{value}");
    }
    writeln!(
        out,
        "dead {:<4} id {:<6} attempts {:<2} reason {:?}\n          {shown}",
        letter.id, letter.original_id, letter.attempts, letter.reason
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
