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
  6  pop or peek found the queue empty; job found no such job
A reader that stops early (`| head`, `| grep -q`) is not an error: the command
stops printing and exits as it would have (pop gives back the item it could not
write; items already written into the pipe count as taken).";

/// Something went wrong: an error and its exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

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
        say!("dque: {}", self.message);
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
                "{dir} holds items of codec {}; push, pop and work take jobs queues and \
                 raw-bytes queues, and push and pop any queue's encoded bytes with --encoded",
                codec_name(found)
            )),
            e => Failure::other(e),
        }
    }
}

/// A codec by name: the ones this build knows; another by its id's four
/// bytes when they are printable ASCII (ids such as `u32::from_le_bytes(*b"json")`),
/// else by number.
pub fn codec_name(id: u32) -> String {
    match id {
        0 => "raw bytes".into(),
        1 => "bincode".into(),
        3 => "json".into(),
        2 => "dead letters".into(),
        dque::jobs::JOB_CODEC_ID => "jobs".into(),
        _ => {
            let bytes = id.to_le_bytes();
            match bytes.iter().all(u8::is_ascii_graphic) {
                true => format!("{:?} (a program's own)", String::from_utf8_lossy(&bytes)),
                false => format!("{id} (a program's own)"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::codec_name;

    #[test]
    fn codecs_are_named_not_numbered() {
        // Issue 23, item 7: a codec mismatch printed `codec 1935830890`.
        assert_eq!(codec_name(0), "raw bytes");
        assert_eq!(codec_name(1), "bincode");
        assert_eq!(codec_name(1_935_830_890), "jobs");
        assert_eq!(
            codec_name(u32::from_le_bytes(*b"json")),
            "\"json\" (a program's own)"
        );
        assert_eq!(codec_name(4242), "4242 (a program's own)");
    }
}
