//! How a command fails: the message an operator reads and the exit code a
//! script tests.

use std::path::Path;
use std::process::ExitCode;

/// Exit codes, for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  done; the queue is healthy
  1  an error (I/O, bad input, a codec the command does not handle)
  2  wrong usage
  3  the queue is damaged: run `dque verify DIR`, then `dque repair DIR`
  4  the queue is in use by a running program (it holds the lock; push and pop
     wait up to a second for it, so that dque commands on one queue take turns)
  5  no queue there: the path is missing or holds something else
  6  pop or peek found the queue empty";

/// Something went wrong: an error and its exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

pub const DAMAGED: u8 = 3;
pub const LOCKED: u8 = 4;
pub const NO_QUEUE: u8 = 5;
pub const EMPTY: u8 = 6;

impl Failure {
    /// Any error that is not the queue's: exit code 1.
    pub fn other(error: impl std::fmt::Display) -> Failure {
        Failure {
            message: error.to_string(),
            code: 1,
        }
    }

    /// A failure with its own message and code.
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// What is said on stderr, after "dque: ".
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prints the message to stderr; the code to exit with.
    pub fn report(self) -> ExitCode {
        eprintln!("dque: {}", self.message);
        ExitCode::from(self.code)
    }

    /// Damage found in the queue at `queue`, and what to run next.
    fn damaged(queue: &Path, what: String) -> Failure {
        let dir = queue.display();
        Failure::new(
            DAMAGED,
            format!(
                "{what}\nrun `dque verify {dir}` for every problem, `dque repair {dir}` to mend"
            ),
        )
    }

    /// The failure for `error` met on the queue at `queue`, with what to do next.
    pub fn from_queue(queue: &Path, error: dque::Error) -> Failure {
        let dir = queue.display();
        match error {
            dque::Error::Locked { .. } => {
                let who = match crate::holder::lock_holder(queue) {
                    Some(pid) => format!("process {pid}"),
                    None => "a running program".into(),
                };
                Failure::new(
                    LOCKED,
                    format!(
                        "{dir} is in use: {who} holds its lock. Stop it first \
                         (stats, peek, dump, dead and verify work while it runs)"
                    ),
                )
            }
            dque::Error::NotFound { .. } => Failure::new(
                NO_QUEUE,
                format!("no queue at {dir}: the path does not exist"),
            ),
            dque::Error::NotAQueue { reason, .. } => {
                Failure::new(NO_QUEUE, format!("{dir} is not a dque queue: {reason}"))
            }
            dque::Error::Corrupted {
                segment,
                offset,
                reason,
            } => Failure::damaged(
                queue,
                format!(
                    "{} is damaged at byte {offset}: {reason}",
                    segment.display()
                ),
            ),
            dque::Error::MissingSegment { path } => Failure::damaged(
                queue,
                format!(
                    "{} is missing between the head and the tail",
                    path.display()
                ),
            ),
            dque::Error::CodecMismatch { found, .. } => Failure::other(format!(
                "{dir} holds items of codec {found} ({}); push and pop handle raw-bytes queues \
                 (codec 0), or any queue's encoded bytes with --encoded",
                codec_name(found)
            )),
            e => Failure::other(e),
        }
    }
}

/// What a codec id means, as far as this build knows.
pub fn codec_name(id: u32) -> &'static str {
    match id {
        0 => "raw bytes",
        1 => "bincode",
        3 => "json",
        2 => "dead letters",
        dque::jobs::JOB_CODEC_ID => "jobs",
        _ => "a program's own codec",
    }
}
