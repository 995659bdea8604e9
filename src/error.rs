//! The one error type of the crate.

use std::{fmt, io, path::PathBuf, sync::Arc};

/// Result alias used throughout dque.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Boxed error a [`Codec`](crate::Codec) returns when it cannot encode or decode.
pub type CodecError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong with a queue.
///
/// Each variant names the file (and offset, where one applies) and its
/// message says what to do next.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let first = dque::DQue::<u32>::create(dir.path().join("q"))?;
/// let second = dque::DQue::<u32>::open(dir.path().join("q"));
/// assert!(matches!(second, Err(dque::Error::Locked { .. })));
/// # drop(first); Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call on `path` failed.
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// Another handle (in this process or another one) holds the queue open.
    ///
    /// An open waits up to half a second for a lock being released before
    /// it says so: a child process spawned by this program holds a copy of
    /// the lock from its fork to its exec, so a handle just closed may still
    /// look held for that moment.
    Locked {
        /// The lock file that is held.
        path: PathBuf,
    },
    /// A segment holds bytes that are not a valid frame where one must be.
    Corrupted {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the first bad frame.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// A file was written by a format version this build does not read.
    UnsupportedVersion {
        /// The file that carries the version.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// A segment between the head and the tail is missing.
    MissingSegment {
        /// Where the segment should be.
        path: PathBuf,
    },
    /// The path exists but is not a dque queue.
    NotAQueue {
        /// The path given, or its config file when that is what does not parse.
        path: PathBuf,
        /// Why it is not taken for a queue.
        reason: String,
    },
    /// [`create`](crate::DQue::create) found a queue already there.
    AlreadyExists {
        /// The queue directory.
        path: PathBuf,
    },
    /// [`open`](crate::DQue::open) found nothing at the path.
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The queue was written with another codec than the one it is opened with.
    CodecMismatch {
        /// The config file.
        path: PathBuf,
        /// Codec id stored in the queue.
        found: u32,
        /// Codec id of the handle being opened.
        expected: u32,
    },
    /// A typed queue was created for another item type (or schema
    /// version, [`Options::schema_version`](crate::Options::schema_version))
    /// than the handle being opened; nothing was read or written. See
    /// README, "Changing the item type".
    ItemTypeMismatch {
        /// The config file.
        path: PathBuf,
        /// The item type the queue was created for (`std::any::type_name`).
        stored: Box<str>,
        /// Its schema version, if one was set.
        stored_schema: Option<u32>,
        /// The item type of the handle being opened.
        opened: &'static str,
        /// Its schema version, if one was set.
        opened_schema: Option<u32>,
    },
    /// An encoded item is larger than [`Options::max_item_bytes`](crate::Options::max_item_bytes).
    ItemTooLarge {
        /// Encoded size of the item.
        size: usize,
        /// The configured maximum.
        max: u32,
    },
    /// The queue holds its limit of items ([`Options::max_items`](crate::Options::max_items));
    /// nothing was written.
    Full {
        /// Items in the queue.
        len: u64,
        /// Items the call would have added.
        adding: u64,
        /// The limit.
        max: u64,
    },
    /// The codec could not encode an item; nothing was written.
    Encode(CodecError),
    /// A record does not decode as the item type. A consuming call never
    /// returns it (it counts a failed attempt, see
    /// [`DQue::lease`](crate::DQue::lease)); reads and dead letters do.
    Decode {
        /// Id of the record (its position in the queue since creation).
        id: u64,
        /// What the codec said.
        source: CodecError,
    },
    /// An option is out of its documented range.
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// Why the value is refused.
        reason: String,
    },
    /// An earlier write or fsync failed, so later writes could not be trusted
    /// to be durable; the queue refuses writes until it is reopened.
    WritesRefused {
        /// The failure that stopped writes (its [`source`](std::error::Error::source)
        /// is the operating system's error, errno included).
        cause: Arc<Error>,
    },
    /// The queue was closed (by [`close`](crate::DQue::close) or drop),
    /// or an enqueue came after [`seal`](crate::DQue::seal), or a
    /// blocking consumer found the sealed queue drained.
    Closed,
    /// A lease expired (or was ended) before this call: the item may be
    /// with another consumer now, so it was left alone.
    LeaseLost {
        /// Id of the item.
        id: u64,
        /// The attempt the lost lease was.
        attempt: u16,
    },
    /// The item is leased by a consumer; it cannot be cancelled.
    Leased {
        /// Id of the item.
        id: u64,
    },
    /// No pending item has this id (it was consumed, cancelled or never existed).
    NotPending {
        /// The id asked for.
        id: u64,
    },
    /// The queue cannot be opened in shared mode ([`Options::shared`](crate::Options::shared))
    /// where it is: a network file system, or all process slots taken.
    SharedModeUnsupported {
        /// The queue directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A job given to a job queue breaks a rule (an id or header name it
    /// cannot hold, a priority or delay a plain FIFO queue cannot keep, a
    /// lease from another queue); nothing was written.
    InvalidJob {
        /// What is wrong, and what to do instead.
        reason: String,
    },
    /// No job with this id is waiting (ready or scheduled) in the queue.
    NoSuchJob {
        /// The id asked for.
        id: String,
    },
    /// The job is leased by a worker now, so it cannot be changed or cancelled.
    JobLeased {
        /// The job's id.
        id: String,
    },
    /// A job queue's server (PostgreSQL, Redis) failed the call or could
    /// not be reached; the call had no effect unless it says otherwise.
    Backend {
        /// Which server.
        backend: &'static str,
        /// What it said.
        reason: String,
    },
    /// A job queue's server received the call and refused it (a
    /// PostgreSQL error with its SQLSTATE: a wrong password, an unknown
    /// database, a missing privilege); the call had no effect.
    ServerRefused {
        /// Which server.
        backend: &'static str,
        /// The server's code for the error (`SQLSTATE 28P01`).
        code: String,
        /// The server's message, and what to do next where that is known.
        reason: String,
    },
    /// The connection to a job queue's server was lost after the call was
    /// sent: whether the server did it is not known. The handle connects
    /// again on its next call; look (counts, waiting) before repeating a
    /// call that must not happen twice, or repeat it with a caller id.
    OutcomeUnknown {
        /// Which server.
        backend: &'static str,
        /// What broke the connection.
        reason: String,
    },
    /// A page cursor given back (a URL's `after=`) is not one this list
    /// made: garbled, cut short, or from another backend or list. Nothing
    /// was read; start again from the first page.
    BadCursor {
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// The cause to keep for later refusals after this error: a copy of it
    /// (I/O errors keep their path, kind and errno; others their message),
    /// or the cause it carries if it is a refusal itself.
    pub(crate) fn refusal_cause(&self) -> Arc<Error> {
        let copy = |e: &io::Error| match e.raw_os_error() {
            Some(errno) => io::Error::from_raw_os_error(errno),
            None => io::Error::new(e.kind(), e.to_string()),
        };
        Arc::new(match self {
            Error::WritesRefused { cause } => return Arc::clone(cause),
            Error::Io { path, source } => Error::io(path.clone(), copy(source)),
            other => Error::io(PathBuf::new(), io::Error::other(other.to_string())),
        })
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupted(
        segment: impl Into<PathBuf>,
        offset: usize,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corrupted {
            segment: segment.into(),
            offset: offset as u64,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "I/O error on {}: {source}", path.display()),
            Error::Locked { path } if held_shared(path) => write!(
                f,
                "queue {} is open in shared mode by other handles: join them with \
                 Options::shared(true) (the dque command joins by itself), or close them all \
                 to open it alone",
                path.parent().unwrap_or(path).display()
            ),
            Error::Locked { path } => write!(
                f,
                "queue is locked by another handle ({}); close the other handle or process \
                 first (or open every handle with Options::shared(true) to use the queue \
                 from several at once)",
                path.display()
            ),
            Error::Corrupted {
                segment,
                offset,
                reason,
            } => write!(
                f,
                "segment {} is corrupted at byte {offset}: {reason}; nothing was changed; \
                 `dque::repair` (the `dque repair` command) moves a damaged segment aside",
                segment.display()
            ),
            Error::UnsupportedVersion {
                path,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}, this dque reads version {supported}; \
                 open it with a dque that knows version {found}",
                path.display()
            ),
            Error::MissingSegment { path } => write!(
                f,
                "segment {} is missing between the head and the tail of the queue; \
                 restore it from a backup, or let `dque::repair` (`dque repair`) fill the gap \
                 and go on without its items",
                path.display()
            ),
            Error::NotAQueue { path, reason } => write!(
                f,
                "{} is not a dque queue ({reason}); point dque at a new or empty directory",
                path.display()
            ),
            Error::AlreadyExists { path } => write!(
                f,
                "a queue already exists at {}; use open or open_or_create",
                path.display()
            ),
            Error::NotFound { path } => write!(
                f,
                "no queue at {}; use create or open_or_create",
                path.display()
            ),
            Error::CodecMismatch {
                path,
                found,
                expected,
            } => write!(
                f,
                "queue {} was written with codec {} but is opened with codec {}; \
                 open it with the codec it was created with",
                path.display(),
                codec_name(*found),
                codec_name(*expected)
            ),
            Error::ItemTypeMismatch {
                path,
                stored,
                stored_schema,
                opened,
                opened_schema,
            } => {
                let schema = |v: &Option<u32>| v.map_or(String::new(), |v| format!(" schema {v}"));
                write!(
                    f,
                    "queue {} was created for items of type {stored}{} but is opened as {opened}{}; \
                     open it with the type it was made for, migrate its items (README, \
                     \"Changing the item type\"), or open with \
                     Options::check_item_type(false) to decode them as {opened} anyway",
                    path.display(),
                    schema(stored_schema),
                    schema(opened_schema),
                )
            }
            Error::ItemTooLarge { size, max } => write!(
                f,
                "item of {size} bytes is over the maximum of {max} bytes; \
                 raise Options::max_item_bytes or split the item"
            ),
            Error::Full { len, adding, max } if adding > max => write!(
                f,
                "a batch of {adding} items can never fit under the limit of {max} items; \
                 nothing was written: split the batch or raise Options::max_items"
            ),
            Error::Full { len, adding, max } => write!(
                f,
                "the queue holds {len} items of at most {max}, no room for {adding} more; \
                 nothing was written: wait for consumers (enqueue_timeout) or raise Options::max_items"
            ),
            Error::Encode(e) => write!(f, "item could not be encoded, nothing was written: {e}"),
            Error::Decode { id, source } => write!(
                f,
                "record {id} does not decode as the queue's item type ({source}); \
                 read it with a raw-bytes queue (peek_raw, dque records) or requeue it \
                 from the dead letters once the type is fixed"
            ),
            Error::InvalidOption { name, reason } => write!(f, "option {name}: {reason}"),
            Error::WritesRefused { cause } => write!(
                f,
                "the queue refuses writes after an earlier failure ({cause}); \
                 fix the disk, then reopen the queue"
            ),
            Error::Closed => write!(
                f,
                "the queue is closed (or sealed: no more enqueues, and consumers stop once it \
                 is empty); open it again to use it"
            ),
            Error::LeaseLost { id, attempt } => write!(
                f,
                "the lease of item {id} (attempt {attempt}) expired or ended; the item was left \
                 for whoever holds it now: raise Options::visibility_timeout or touch() the lease"
            ),
            Error::Leased { id } => write!(
                f,
                "item {id} is leased by a consumer; wait for its ack or its lease to end"
            ),
            Error::NotPending { id } => write!(
                f,
                "no pending item has id {id}; it was consumed or cancelled already"
            ),
            Error::SharedModeUnsupported { path, reason } => write!(
                f,
                "queue {} cannot be shared between processes: {reason}; open it in \
                 exclusive mode, or for workers on several hosts use a database-backed \
                 queue (the PostgreSQL and Redis backends)",
                path.display()
            ),
            Error::InvalidJob { reason } => write!(f, "invalid job: {reason}"),
            Error::NoSuchJob { id } => write!(
                f,
                "no job {id:?} is waiting in the queue; it ran, was cancelled, or never was \
                 (see the dead letters)"
            ),
            Error::JobLeased { id } => write!(
                f,
                "job {id:?} is leased by a worker now; wait until it is acked or handed back"
            ),
            Error::Backend { backend, reason } => write!(
                f,
                "{backend}: {reason}; check that the server runs and the address is right"
            ),
            Error::ServerRefused {
                backend,
                code,
                reason,
            } => write!(f, "{backend} refused the call ({code}): {reason}"),
            Error::BadCursor { reason } => write!(
                f,
                "bad page cursor: {reason}; start again from the first page (a cursor is \
                 valid only for the list and the backend that made it)"
            ),
            Error::OutcomeUnknown { backend, reason } => write!(
                f,
                "{backend}: the connection was lost after the call was sent ({reason}), so \
                 whether it took effect is not known; the next call connects again: look \
                 (counts, waiting) before repeating it, or repeat it with a caller id"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Encode(e) | Error::Decode { source: e, .. } => Some(e.as_ref()),
            Error::WritesRefused { cause } => Some(cause.as_ref()),
            _ => None,
        }
    }
}

/// Whether the lock file at `path` is held by shared handles (a shared
/// `flock` in /proc/locks: `FLOCK ADVISORY READ PID MAJ:MIN:INODE`), read
/// without touching the lock. False when that cannot be told.
fn held_shared(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(inode) = std::fs::metadata(path).map(|m| m.ino()) else {
        return false;
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Blocked waiters (`->`) shift the fields: only holders count.
        fields.len() >= 6
            && fields[1] == "FLOCK"
            && fields[3] == "READ"
            && fields[5].rsplit(':').next() == Some(inode.to_string().as_str())
    })
}

/// A codec id as a name: the crate's own by name, another as its four
/// bytes if they are printable (ids are often four letters), else the
/// number.
fn codec_name(id: u32) -> String {
    match id {
        0 => "raw bytes (0)".into(),
        1 => "bincode (1)".into(),
        2 => "dead letters (2)".into(),
        3 => "json (3)".into(),
        _ => {
            let bytes = id.to_le_bytes();
            match bytes.iter().all(u8::is_ascii_graphic) {
                true => format!("{:?} ({id})", String::from_utf8_lossy(&bytes)),
                false => format!("{id} (a program's own)"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 11, bug 7: a refusal's cause keeps the errno of the failure.
    #[test]
    fn a_refusal_cause_keeps_the_errno() {
        let failed = Error::io("/q/seg", io::Error::from_raw_os_error(5));
        let cause = failed.refusal_cause();
        let Error::Io { path, source } = cause.as_ref() else {
            panic!("{cause:?}");
        };
        assert_eq!(
            (path.to_str(), source.raw_os_error()),
            (Some("/q/seg"), Some(5))
        );
        let refused = Error::WritesRefused { cause };
        let again = refused.refusal_cause();
        let same = matches!(&refused, Error::WritesRefused { cause } if Arc::ptr_eq(cause, &again));
        assert!(same, "a refusal's cause is passed on, not wrapped");
    }

    // Issue 23, item 7: a codec mismatch said `codec 1935830890`.
    #[test]
    fn a_codec_mismatch_names_the_codecs() {
        let mismatch = Error::CodecMismatch {
            path: "/q/dque.conf".into(),
            found: u32::from_le_bytes(*b"jobs"),
            expected: 1,
        };
        let text = mismatch.to_string();
        assert!(text.contains("codec \"jobs\" (1935830890)"), "{text}");
        assert!(text.contains("codec bincode (1)"), "{text}");
        assert_eq!(codec_name(0xFFFF_0000), "4294901760 (a program's own)");
    }
}
