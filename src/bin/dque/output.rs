//! Writing to stdout and stderr without panicking.
//!
//! A reader that leaves early (`| head`, `| grep -q`, `| true`) closes the
//! pipe. That is not the command's failure: printing stops (later writes
//! are skipped) and the command ends with the status it would have had, so
//! a verdict such as `verify`'s exit 3 still holds and `if dque workers q |
//! grep -q …` under `set -o pipefail` sees grep's answer. Rust ignores
//! SIGPIPE, so such a write returns EPIPE, which `print!` turns into a
//! panic (exit 101): commands print through [`out!`] and [`outln!`]
//! instead. SIGPIPE is not set back to its default (death at the write,
//! status 141) because `pop` must first give back the item it could not
//! write, and `work` writes to its commands' stdin.

use std::fmt;
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::fail::Failure;

/// Set once a write to stdout met a closed pipe.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader has gone: nothing more is written to it.
pub fn reader_gone() -> bool {
    READER_GONE.load(Ordering::Relaxed)
}

/// The outcome of a write to stdout: a closed pipe is remembered and is
/// not an error; any other failure (a full disk) is, with what it was.
pub fn written(result: std::io::Result<()>) -> Result<(), Failure> {
    match result {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            READER_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other.map_err(|e| Failure::other(format!("cannot write to stdout: {e}"))),
    }
}

/// Writes `args` to stdout, unless its reader has gone.
pub fn stdout_fmt(args: fmt::Arguments<'_>) -> Result<(), Failure> {
    if reader_gone() {
        return Ok(());
    }
    written(std::io::stdout().lock().write_fmt(args))
}

/// Flushes stdout (what `print!` left in its buffer).
pub fn flush() -> Result<(), Failure> {
    if reader_gone() {
        return Ok(());
    }
    written(std::io::stdout().lock().flush())
}

/// Writes `args` and a newline to stderr; a closed stderr is ignored (there
/// is nowhere left to say anything).
pub fn stderr_line(args: fmt::Arguments<'_>) {
    drop(writeln!(std::io::stderr().lock(), "{args}"));
}

/// `print!` that neither panics nor writes once stdout's reader has gone:
/// evaluates to `Result<(), Failure>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::stdout_fmt(format_args!($($arg)*))
    };
}

/// `println!` through [`out!`].
macro_rules! outln {
    () => {
        $crate::output::stdout_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that does not panic on a closed stderr.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::stderr_line(format_args!($($arg)*))
    };
}
