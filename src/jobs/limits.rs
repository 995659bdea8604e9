//! Concurrency limits and pause (issue 27): what every backend shares.
//!
//! A **limit** is a name and a maximum: at most that many leased jobs that
//! name it run at once (a maximum of 1 runs them one at a time: serial
//! execution per tenant or per resource). A job names the limits it takes
//! in its [`LIMITS_HEADER`] header (set with [`NewJob::limit`]); a lease
//! skips a job whose limits are full and takes it once a holder acks,
//! nacks, fails, releases, or dies (its lease ends). A limit no maximum
//! was set for holds any number.
//!
//! A **paused** queue gives no new leases; jobs leased before the pause
//! run on, and their acks, nacks and touches work as usual.

use crate::error::{Error, Result};

use super::job::NewJob;

/// The header that names a job's limits: names separated by commas
/// (`tenant-7,smtp`). On Redis it is the job's qless `throttles`.
pub const LIMITS_HEADER: &str = "limits";

/// The longest limit name, in bytes.
pub const MAX_LIMIT_NAME_BYTES: usize = 255;

/// A limit as [`JobQueue::limits`](super::JobQueue::limits) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Its name.
    pub name: String,
    /// At most this many holders run at once.
    pub max: u32,
    /// Leased jobs that hold it now.
    pub running: u32,
}

impl NewJob {
    /// Makes the job take limit `name` while it runs (adds it to the
    /// [`LIMITS_HEADER`] header; checked by the enqueue).
    ///
    /// ```
    /// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
    /// # fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let queue = EmbeddedJobs::create(dir.path().join("mail"))?;
    /// queue.set_limit("tenant-7", 1)?;
    /// queue.enqueue(NewJob::new("a").limit("tenant-7"))?;
    /// queue.enqueue(NewJob::new("b").limit("tenant-7"))?;
    /// let first = queue.lease()?.expect("a");
    /// assert!(queue.lease()?.is_none(), "tenant-7 is full");
    /// queue.ack(first)?;
    /// assert!(queue.lease()?.is_some(), "b takes it now");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn limit(self, name: impl Into<String>) -> Self {
        let name = name.into();
        let value = match self.headers.iter().find(|(n, _)| n == LIMITS_HEADER) {
            Some((_, old)) if !old.is_empty() => format!("{old},{name}"),
            _ => name,
        };
        self.header(LIMITS_HEADER, value)
    }
}

/// `InvalidJob` unless `name` is 1 to [`MAX_LIMIT_NAME_BYTES`] bytes
/// without control characters, whitespace or commas.
pub fn check_limit_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_LIMIT_NAME_BYTES
        && !name
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == ',');
    match ok {
        true => Ok(()),
        false => Err(Error::InvalidJob {
            reason: format!(
                "limit name {name:?}: a name is 1 to {MAX_LIMIT_NAME_BYTES} bytes without \
                 control characters, spaces or commas"
            ),
        }),
    }
}

/// The limits a header value names, in order, each once (empty names
/// between commas are skipped).
pub(crate) fn limit_names(value: &str) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The limits of a job with `headers`.
pub(crate) fn limits_of(headers: &[(String, String)]) -> Vec<&str> {
    headers
        .iter()
        .find(|(n, _)| n == LIMITS_HEADER)
        .map(|(_, v)| limit_names(v))
        .unwrap_or_default()
}

/// `InvalidJob` unless every limit a job names follows the rules.
pub(crate) fn check_job_limits(headers: &[(String, String)]) -> Result<()> {
    limits_of(headers)
        .into_iter()
        .try_for_each(check_limit_name)
}

/// `InvalidJob` for a maximum of 0 (remove the limit instead).
pub(crate) fn check_max(name: &str, max: u32) -> Result<()> {
    match max {
        0 => Err(Error::InvalidJob {
            reason: format!(
                "limit {name:?}: a maximum is at least 1; remove the limit to let any number run"
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_split_trimmed_and_kept_once() {
        assert_eq!(limit_names("a, b,,a,c "), ["a", "b", "c"]);
        assert!(limit_names("").is_empty());
    }

    #[test]
    fn limit_adds_to_the_header() {
        let job = NewJob::new("x").limit("a").limit("b");
        assert_eq!(limits_of(&job.headers), ["a", "b"]);
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "a b", "a,b", "a\n", &"x".repeat(256)] {
            assert!(check_limit_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_limit_name("ql:q:mail").is_ok());
    }
}
