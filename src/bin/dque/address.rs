//! ADDRESS: where the jobs commands find a queue. A queue directory, or
//! `postgres://…#QUEUE` / `postgresql://…#QUEUE` for PostgreSQL and
//! `redis://HOST:PORT[/DB]#QUEUE` / `redis+unix:///SOCKET[?db=N]#QUEUE` for
//! Redis (the queue's name after `#`). The library parses and opens it
//! (`dque::jobs::Address`, `AddressOptions`): this module adds what the
//! command needs around that (waiting on a locked directory, its item
//! cap, its exit codes), so every jobs command opens its queue the way a
//! program's `Worker::open` does, on every backend.

use std::path::Path;
use std::sync::Arc;

pub use dque::jobs::Address;
use dque::jobs::{AddressOptions, Backoff, JobQueue};
use dque::Options;

use crate::fail::Failure;
use crate::push_pop::{patiently_with, MAX_ITEM_BYTES};

/// Parses an ADDRESS argument (the library's parser); the error is the
/// reason alone, as clap shows it after the argument.
pub fn parse(text: &str) -> Result<Address, String> {
    text.parse().map_err(|e| match e {
        dque::Error::InvalidOption { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// Whether a jobs command may make the queue it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Make {
    /// The queue must exist.
    No,
    /// A missing queue directory is made as a jobs queue.
    IfMissing {
        /// Items per segment of a new queue.
        segment_items: Option<u32>,
    },
}

/// What a worker may set of how its handle treats jobs.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Attempts a job gets (default 5).
    pub max_attempts: Option<u16>,
    /// The back-off after a failed attempt.
    pub backoff: Option<Backoff>,
    /// The worker name leases are taken under (`dque work --worker`).
    pub worker: Option<String>,
}

/// What the command does with an ADDRESS beyond the library's opening.
pub trait AddressExt {
    /// The directory, for messages and the failure mapping (empty for a server).
    fn path(&self) -> &Path;

    /// The failure for `error` met on this queue.
    fn failure(&self, error: dque::Error) -> Failure;

    /// Opens the job queue at this address (in shared mode for a directory,
    /// beside programs and other commands).
    fn open(&self, make: Make) -> Result<Arc<dyn JobQueue>, Failure> {
        self.open_tuned(make, &Tuning::default())
    }

    /// [`open`](Self::open), with a worker's attempts and back-off.
    fn open_tuned(&self, make: Make, tuning: &Tuning) -> Result<Arc<dyn JobQueue>, Failure>;
}

impl AddressExt for Address {
    fn path(&self) -> &Path {
        self.dir().unwrap_or(Path::new(""))
    }

    fn failure(&self, error: dque::Error) -> Failure {
        Failure::from_queue(AddressExt::path(self), error)
    }

    fn open_tuned(&self, make: Make, tuning: &Tuning) -> Result<Arc<dyn JobQueue>, Failure> {
        // Any item the format can hold: the library's default cap protects
        // programs from runaway items, an operator pushes what they mean to.
        let mut embedded = Options::new().shared(true).max_item_bytes(MAX_ITEM_BYTES);
        if let Make::IfMissing {
            segment_items: Some(n),
        } = make
        {
            embedded = embedded.segment_items(n);
        }
        let mut options = AddressOptions::new()
            .embedded(embedded)
            .create(matches!(make, Make::IfMissing { .. }));
        if let Some(attempts) = tuning.max_attempts {
            options = options.max_attempts(attempts);
        }
        if let Some(backoff) = tuning.backoff {
            options = options.backoff(backoff);
        }
        if let Some(worker) = &tuning.worker {
            options = options.worker(worker.clone());
        }
        let opened = patiently_with(|| options.open(self)).map_err(|e| match (e, self) {
            (dque::Error::NotFound { .. }, Address::Dir(path)) => Failure::new(
                crate::fail::NO_QUEUE,
                format!(
                    "no queue at {}: the path does not exist (push --create makes one)",
                    path.display()
                ),
            ),
            (e, Address::Dir(_)) => self.failure(e),
            (e, _) => Failure::other(e),
        })?;
        Ok(Arc::from(opened))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_parses_with_the_library_and_shows_the_reason_alone() {
        assert_eq!(parse("q"), Ok(Address::Dir("q".into())));
        let refused = parse("ftp://h#q").unwrap_err();
        assert!(
            refused.starts_with("\"ftp://h#q\": unknown scheme"),
            "{refused}"
        );
    }
}
