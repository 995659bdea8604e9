//! The one rule for queue names, on every backend: checked before anything
//! is written, so a name no backend can hold is refused at once instead of
//! failing later (a PostgreSQL `pg_notify` payload of 8,000 bytes or more,
//! an empty Redis key part).

use std::path::Path;

use crate::error::{Error, Result};

/// The longest queue name, in bytes: what a file name may hold (an embedded
/// queue's name is its directory's name), far under PostgreSQL's
/// notification payload (8,000 bytes) and comfortable in Redis keys.
pub const MAX_QUEUE_NAME_BYTES: usize = 255;

/// `InvalidJob` unless `name` is 1 to [`MAX_QUEUE_NAME_BYTES`] bytes
/// without control characters (NUL included).
///
/// ```
/// use dque::jobs::check_queue_name;
/// assert!(check_queue_name("mail").is_ok());
/// assert!(check_queue_name("").is_err());
/// assert!(check_queue_name(&"q".repeat(256)).is_err());
/// assert!(check_queue_name("tab\there").is_err());
/// ```
///
/// # Errors
///
/// `InvalidJob`, naming the rule.
pub fn check_queue_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_QUEUE_NAME_BYTES || name.chars().any(char::is_control) {
        // A name of any length is quoted by its start only.
        let shown: String = name.chars().take(40).collect();
        let more = if shown.len() < name.len() { "…" } else { "" };
        return Err(Error::InvalidJob {
            reason: format!(
                "queue name {shown:?}{more} ({} bytes): a queue name is 1 to \
                 {MAX_QUEUE_NAME_BYTES} bytes without control characters; choose another",
                name.len()
            ),
        });
    }
    Ok(())
}

/// [`check_queue_name`] for an embedded queue, named by its directory.
pub(crate) fn check_dir_name(path: &Path) -> Result<()> {
    match path.file_name() {
        Some(name) => check_queue_name(&name.to_string_lossy()),
        // `/` or `..`: named by the path as given, which any name may be.
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 23, item 5: one rule for queue names on every backend.
    #[test]
    fn the_rule_takes_what_it_says_and_nothing_else() {
        for good in ["q", "mail-2", "ünïcode", &"x".repeat(MAX_QUEUE_NAME_BYTES)] {
            assert!(check_queue_name(good).is_ok(), "{good:?}");
        }
        let long = "x".repeat(MAX_QUEUE_NAME_BYTES + 1);
        let huge = "x".repeat(8_000);
        for bad in [
            "",
            "a\0b",
            "line\nbreak",
            "\u{7f}",
            long.as_str(),
            huge.as_str(),
        ] {
            let refused = check_queue_name(bad);
            let Err(Error::InvalidJob { reason }) = refused else {
                panic!("{bad:?}: {refused:?}");
            };
            assert!(
                reason.len() < 300,
                "the message quotes a long name's start only"
            );
        }
    }
}
