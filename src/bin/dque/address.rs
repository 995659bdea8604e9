//! ADDRESS: where the jobs commands find a queue. A queue directory, or
//! `postgres://…#QUEUE` / `postgresql://…#QUEUE` for PostgreSQL and
//! `redis://HOST:PORT[/DB]#QUEUE` / `redis+unix:///SOCKET[?db=N]#QUEUE` for
//! Redis (the queue's name after `#`). Every jobs command
//! opens its queue here, as a `dyn JobQueue`, so each works on every
//! backend this build has.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use dque::jobs::{Backoff, JobOptions, JobQueue};
use dque::Options;

use crate::fail::Failure;
use crate::push_pop::{patiently_with, MAX_ITEM_BYTES};

/// A parsed ADDRESS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A queue directory.
    Dir(PathBuf),
    /// A queue on a server: the URL without the fragment, and the queue.
    Server {
        scheme: String,
        url: String,
        queue: String,
    },
}

const SCHEMES: [&str; 4] = ["postgres", "postgresql", "redis", "redis+unix"];

impl FromStr for Address {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((scheme, _)) = text.split_once("://") else {
            return Ok(Address::Dir(PathBuf::from(text)));
        };
        if !SCHEMES.contains(&scheme) {
            // `./weird://name` is a directory; a bare unknown scheme is a typo.
            return Err(format!(
                "{text:?}: unknown scheme {scheme:?}; an ADDRESS is a queue directory, \
                 postgres://…#QUEUE, redis://…#QUEUE or redis+unix://…#QUEUE"
            ));
        }
        let Some((url, queue)) = text.split_once('#') else {
            return Err(format!(
                "{text:?}: name the queue after '#', as in {scheme}://host/…#jobs"
            ));
        };
        if queue.is_empty() {
            return Err(format!("{text:?}: the queue name after '#' is empty"));
        }
        Ok(Address::Server {
            scheme: scheme.to_owned(),
            url: url.to_owned(),
            queue: queue.to_owned(),
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Dir(path) => write!(f, "{}", path.display()),
            Address::Server { url, queue, .. } => write!(f, "{url}#{queue}"),
        }
    }
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
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning {
    /// Attempts a job gets (default 5).
    pub max_attempts: Option<u16>,
    /// The back-off after a failed attempt.
    pub backoff: Option<Backoff>,
}

impl Address {
    /// The directory, for messages and the failure mapping.
    pub fn path(&self) -> &Path {
        match self {
            Address::Dir(path) => path,
            Address::Server { .. } => Path::new(""),
        }
    }

    /// The failure for `error` met on this queue.
    pub fn failure(&self, error: dque::Error) -> Failure {
        Failure::from_queue(self.path(), error)
    }

    /// Opens the job queue at this address (in shared mode for a directory,
    /// beside programs and other commands).
    pub fn open(&self, make: Make) -> Result<Arc<dyn JobQueue>, Failure> {
        self.open_tuned(make, &Tuning::default())
    }

    /// [`open`](Self::open), with a worker's attempts and back-off.
    pub fn open_tuned(&self, make: Make, tuning: &Tuning) -> Result<Arc<dyn JobQueue>, Failure> {
        let path = match self {
            Address::Dir(path) => path,
            Address::Server { scheme, url, queue } => {
                return open_server(scheme, url, queue, tuning);
            }
        };
        // Any item the format can hold: the library's default cap protects
        // programs from runaway items, an operator pushes what they mean to.
        let mut queue = Options::new().shared(true).max_item_bytes(MAX_ITEM_BYTES);
        if let Make::IfMissing {
            segment_items: Some(n),
        } = make
        {
            queue = queue.segment_items(n);
        }
        if let Some(attempts) = tuning.max_attempts {
            queue = queue.max_attempts(attempts);
        }
        let mut options = JobOptions::new().queue(queue);
        if let Some(backoff) = tuning.backoff {
            options = options.backoff(backoff);
        }
        let opened = patiently_with(|| match make {
            Make::No => options.open(path),
            Make::IfMissing { .. } => options.open_or_create(path),
        })
        .map_err(|e| match e {
            dque::Error::NotFound { .. } => Failure::new(
                crate::fail::NO_QUEUE,
                format!(
                    "no queue at {}: the path does not exist (push --create makes one)",
                    path.display()
                ),
            ),
            e => self.failure(e),
        })?;
        Ok(Arc::new(opened) as Arc<dyn JobQueue>)
    }
}

/// `options`, a server backend's builder, with a worker's tuning.
macro_rules! tuned {
    ($options:expr, $tuning:expr) => {{
        let mut options = $options;
        if let Some(attempts) = $tuning.max_attempts {
            options = options.max_attempts(attempts);
        }
        if let Some(backoff) = $tuning.backoff {
            options = options.backoff(backoff);
        }
        options
    }};
}

/// Opens queue `queue` of the server at `url`: Redis (in qless's data
/// model) for the redis schemes, else PostgreSQL. A server's queue exists
/// as soon as it is named: `--create` changes nothing there.
fn open_server(
    scheme: &str,
    url: &str,
    queue: &str,
    tuning: &Tuning,
) -> Result<Arc<dyn JobQueue>, Failure> {
    Ok(if scheme.starts_with("redis") {
        let options = tuned!(dque::jobs::RedisOptions::new(), tuning);
        Arc::new(options.connect(url, queue).map_err(Failure::other)?)
    } else {
        let options = tuned!(dque::jobs::PgOptions::new(), tuning);
        Arc::new(options.connect(url, queue).map_err(Failure::other)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_directories_or_servers() {
        assert_eq!("q".parse(), Ok(Address::Dir("q".into())));
        assert_eq!("/tmp/a b".parse(), Ok(Address::Dir("/tmp/a b".into())));
        assert_eq!(
            "postgres://u@h:5432/db#mail".parse(),
            Ok(Address::Server {
                scheme: "postgres".into(),
                url: "postgres://u@h:5432/db".into(),
                queue: "mail".into()
            })
        );
        assert!(
            "redis://h:6379/0".parse::<Address>().is_err(),
            "no queue name"
        );
        assert!("redis://h#".parse::<Address>().is_err(), "empty queue name");
        assert_eq!(
            "redis+unix:///run/redis.sock?db=2#mail".parse(),
            Ok(Address::Server {
                scheme: "redis+unix".into(),
                url: "redis+unix:///run/redis.sock?db=2".into(),
                queue: "mail".into()
            })
        );
        assert!("ftp://h#q".parse::<Address>().is_err(), "unknown scheme");
    }
}
