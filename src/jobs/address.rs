//! An ADDRESS: where a job queue is, as one string for every backend. A
//! queue directory (the embedded queue), `postgres://…#QUEUE` or
//! `postgresql://…#QUEUE` (PostgreSQL), `redis://HOST:PORT[/DB]#QUEUE` or
//! `redis+unix:///SOCKET[?db=N]#QUEUE` (Redis); the queue's name is the
//! text after the first `#`. The `dque` command and
//! [`Worker::open`](crate::runtime::Worker::open) (feature `runtime`) open
//! their queues here.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::{check_queue_name, Backoff, Clock, JobOptions, JobQueue};
use crate::{Error, Options, Result};

/// A parsed ADDRESS: [`open_address`] opens one as it stands,
/// [`AddressOptions::open`] with options.
///
/// ```
/// use dque::jobs::Address;
///
/// let pg: Address = "postgres://app@db.internal/app#mail".parse()?;
/// assert_eq!(pg.queue(), Some("mail"));
/// assert!(matches!(pg, Address::Postgres { .. }));
/// let dir: Address = "/var/lib/app/mail".parse()?;
/// assert_eq!(dir, Address::Dir("/var/lib/app/mail".into()));
/// let typo = "redis://cache:6379".parse::<Address>().unwrap_err();
/// assert!(typo.to_string().contains("name the queue after '#'"));
/// # Ok::<(), dque::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Address {
    /// An embedded jobs queue: its directory.
    Dir(PathBuf),
    /// A queue on a PostgreSQL server (feature `postgres`).
    Postgres {
        /// The connection URL, without the `#QUEUE` fragment.
        url: String,
        /// The queue's name.
        queue: String,
    },
    /// A queue on a Redis server, in qless's data model (feature `redis`).
    Redis {
        /// The connection URL, without the `#QUEUE` fragment.
        url: String,
        /// The queue's name.
        queue: String,
    },
}

/// The schemes an ADDRESS may have, and their backends.
const SCHEMES: [(&str, Backend); 4] = [
    ("postgres", Backend::Postgres),
    ("postgresql", Backend::Postgres),
    ("redis", Backend::Redis),
    ("redis+unix", Backend::Redis),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    Redis,
}

fn refused(address: &str, why: impl fmt::Display) -> Error {
    Error::InvalidOption {
        name: "address",
        reason: format!("{address:?}: {why}"),
    }
}

/// Whether `text` has the form of a URL scheme (RFC 3986: a letter, then
/// letters, digits, `+`, `-`, `.`): else a `://` in it is part of a path.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

impl FromStr for Address {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let scheme = match text.split_once("://") {
            Some((scheme, _)) if is_scheme(scheme) => scheme,
            // `./odd://name` is a directory.
            _ if text.is_empty() => {
                return Err(refused(
                    text,
                    "an empty ADDRESS: give a queue directory or a URL",
                ))
            }
            _ => return Ok(Address::Dir(PathBuf::from(text))),
        };
        let Some(&(_, backend)) = SCHEMES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(scheme))
        else {
            return Err(refused(
                text,
                format_args!(
                    "unknown scheme {scheme:?}; an ADDRESS is a queue directory, \
                     postgres://…#QUEUE, redis://…#QUEUE or redis+unix://…#QUEUE"
                ),
            ));
        };
        let Some((url, queue)) = text.split_once('#') else {
            return Err(refused(
                text,
                format_args!("name the queue after '#', as in {scheme}://host/…#jobs"),
            ));
        };
        if queue.is_empty() {
            return Err(refused(
                text,
                "the queue name after '#' is empty: name the queue",
            ));
        }
        check_queue_name(queue).map_err(|e| refused(text, e))?;
        let (url, queue) = (url.to_owned(), queue.to_owned());
        Ok(match backend {
            Backend::Postgres => Address::Postgres { url, queue },
            Backend::Redis => Address::Redis { url, queue },
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Dir(path) => write!(f, "{}", path.display()),
            Address::Postgres { url, queue } | Address::Redis { url, queue } => {
                write!(f, "{url}#{queue}")
            }
        }
    }
}

impl Address {
    /// The directory of an embedded queue; `None` for a server's.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Address::Dir(path) => Some(path),
            _ => None,
        }
    }

    /// The queue's name on a server; `None` for a directory (whose queue
    /// is named by its last component).
    pub fn queue(&self) -> Option<&str> {
        match self {
            Address::Dir(_) => None,
            Address::Postgres { queue, .. } | Address::Redis { queue, .. } => Some(queue),
        }
    }
}

/// Opens the job queue at `address` with default [`AddressOptions`]: a
/// directory must hold a jobs queue (opened in shared mode, beside other
/// processes and the `dque` command); a server's queue exists as soon as
/// it is named.
///
/// ```
/// use dque::jobs::{open_address, AddressOptions, JobQueue, NewJob};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let address = dir.path().join("mail").display().to_string();
/// AddressOptions::new().create(true).open_str(&address)?.close()?;
/// let queue = open_address(&address)?;
/// queue.enqueue(NewJob::new("hello"))?;
/// assert_eq!(queue.counts()?.ready, 1);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `InvalidOption` (option `address`) for an ADDRESS that does not parse,
/// or names a backend this build of dque lacks (the error names the
/// feature to enable); else the backend's own errors of opening
/// ([`JobOptions::open`], `PgOptions::connect`, `RedisOptions::connect`),
/// `NotFound` for a directory that does not exist.
pub fn open_address(address: &str) -> Result<Box<dyn JobQueue>> {
    AddressOptions::new().open_str(address)
}

/// How [`AddressOptions::open`] opens a queue: the settings every backend
/// shares (lease time, attempts, back-off, clock), and the embedded
/// queue's own (whether to make a missing directory, its [`Options`]).
/// Unset, each is the backend's default (an embedded queue's stored one).
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::{AddressOptions, JobQueue};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = AddressOptions::new()
///     .create(true)
///     .lease_time(Duration::from_secs(120))
///     .max_attempts(3)
///     .open(&dir.path().join("jobs").display().to_string().parse()?)?;
/// assert_eq!(queue.name(), "jobs");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AddressOptions {
    create: bool,
    embedded: Options,
    lease_time: Option<Duration>,
    max_attempts: Option<u16>,
    backoff: Option<Backoff>,
    clock: Option<Arc<dyn Clock>>,
    worker: Option<String>,
}

impl Default for AddressOptions {
    fn default() -> Self {
        AddressOptions {
            create: false,
            embedded: Options::new().shared(true),
            lease_time: None,
            max_attempts: None,
            backoff: None,
            clock: None,
            worker: None,
        }
    }
}

/// A server backend's options builder with what `$options` set.
#[cfg(any(feature = "postgres", feature = "redis"))]
macro_rules! tuned {
    ($builder:expr, $options:expr) => {{
        let (mut builder, options) = ($builder, $options);
        if let Some(lease_time) = options.lease_time {
            builder = builder.lease_time(lease_time);
        }
        if let Some(attempts) = options.max_attempts {
            builder = builder.max_attempts(attempts);
        }
        if let Some(backoff) = options.backoff {
            builder = builder.backoff(backoff);
        }
        if let Some(clock) = &options.clock {
            builder = builder.clock(Arc::clone(clock));
        }
        if let Some(worker) = &options.worker {
            builder = builder.worker(worker.clone());
        }
        builder
    }};
}

impl AddressOptions {
    /// The defaults: a directory must exist and is opened in shared mode;
    /// the backends' own lease time, attempts, back-off and clock.
    pub fn new() -> Self {
        AddressOptions::default()
    }

    /// Whether a missing queue directory is made as a jobs queue (default
    /// false). A server's queue needs no making: this changes nothing there.
    #[must_use]
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// The options of an embedded queue (default `Options::new().shared(true)`:
    /// other processes and the `dque` command may open it at once). The
    /// settings below override its lease time and attempts.
    #[must_use]
    pub fn embedded(mut self, options: Options) -> Self {
        self.embedded = options;
        self
    }

    /// The lease time, on every backend.
    #[must_use]
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = Some(lease_time);
        self
    }

    /// The lease time set, if any.
    pub fn lease_time_value(&self) -> Option<Duration> {
        self.lease_time
    }

    /// The attempts a job gets, on every backend.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u16) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The worker name leases are taken under, on every backend (default:
    /// the backend's, `host:pid` on PostgreSQL and the embedded queue),
    /// which [`JobQueue::leases`] shows (and Redis's qless clients list).
    /// The embedded queue refuses a name longer than 188 bytes
    /// ([`JobOptions::worker`]).
    ///
    /// ```
    /// let options = dque::jobs::AddressOptions::new().worker("mailer-1");
    /// assert_eq!(options.worker_value(), Some("mailer-1"));
    /// ```
    #[must_use]
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    /// The worker name set, if any.
    pub fn worker_value(&self) -> Option<&str> {
        self.worker.as_deref()
    }

    /// The back-off after a failed attempt, on every backend.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The clock of due times and statistics, on every backend.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Parses `address` and opens its queue.
    ///
    /// # Errors
    ///
    /// As [`open_address`].
    pub fn open_str(&self, address: &str) -> Result<Box<dyn JobQueue>> {
        self.open(&address.parse()?)
    }

    /// Opens the queue at `address`.
    ///
    /// # Errors
    ///
    /// As [`open_address`].
    pub fn open(&self, address: &Address) -> Result<Box<dyn JobQueue>> {
        match address {
            Address::Dir(path) => self.open_dir(path),
            Address::Postgres { url, queue } => self.open_postgres(address, url, queue),
            Address::Redis { url, queue } => self.open_redis(address, url, queue),
        }
    }

    fn open_dir(&self, path: &Path) -> Result<Box<dyn JobQueue>> {
        Ok(Box::new(self.embedded_jobs(path)?))
    }

    /// The embedded queue at `path`, for the blocking and the async open.
    fn embedded_jobs(&self, path: &Path) -> Result<super::EmbeddedJobs> {
        let mut queue = self.embedded;
        if let Some(lease_time) = self.lease_time {
            queue = queue.visibility_timeout(lease_time);
        }
        if let Some(attempts) = self.max_attempts {
            queue = queue.max_attempts(attempts);
        }
        let mut options = JobOptions::new().queue(queue);
        if let Some(backoff) = self.backoff {
            options = options.backoff(backoff);
        }
        if let Some(clock) = &self.clock {
            options = options.clock(Arc::clone(clock));
        }
        if let Some(worker) = &self.worker {
            options = options.worker(worker.clone());
        }
        match self.create {
            true => options.open_or_create(path),
            false => options.open(path),
        }
    }

    #[cfg(feature = "postgres")]
    fn open_postgres(&self, _: &Address, url: &str, queue: &str) -> Result<Box<dyn JobQueue>> {
        let options = tuned!(super::PgOptions::new(), self);
        Ok(Box::new(options.connect(url, queue)?))
    }

    #[cfg(not(feature = "postgres"))]
    fn open_postgres(&self, address: &Address, _: &str, _: &str) -> Result<Box<dyn JobQueue>> {
        Err(missing_feature(address, "PostgreSQL", "postgres"))
    }

    #[cfg(feature = "redis")]
    fn open_redis(&self, _: &Address, url: &str, queue: &str) -> Result<Box<dyn JobQueue>> {
        let options = tuned!(super::RedisOptions::new(), self);
        Ok(Box::new(options.connect(url, queue)?))
    }

    #[cfg(not(feature = "redis"))]
    fn open_redis(&self, address: &Address, _: &str, _: &str) -> Result<Box<dyn JobQueue>> {
        Err(missing_feature(address, "Redis", "redis"))
    }
}

/// Opens the job queue at `address` for tokio programs (feature `tokio`),
/// with default [`AddressOptions`]: the async handle of the backend
/// ([`AsyncEmbeddedJobs`](super::AsyncEmbeddedJobs), `AsyncPgJobs`,
/// `AsyncRedisJobs`), from the same ADDRESS forms as [`open_address`].
///
/// ```
/// use dque::jobs::{open_address_async, AddressOptions, AsyncJobQueue, JobQueue, NewJob};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let address = dir.path().join("mail").display().to_string();
/// AddressOptions::new().create(true).open_str(&address)?.close()?;
/// let queue = open_address_async(&address).await?;
/// queue.enqueue(NewJob::new("hello")).await?;
/// assert_eq!(queue.counts().await?.ready, 1);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// As [`open_address`] (with `PgOptions::connect_async` and
/// `RedisOptions::connect_async` for the servers).
#[cfg(feature = "tokio")]
pub async fn open_address_async(address: &str) -> Result<Box<dyn super::AsyncJobQueue>> {
    AddressOptions::new().open_str_async(address).await
}

#[cfg(feature = "tokio")]
impl AddressOptions {
    /// Parses `address` and opens its queue's async handle.
    ///
    /// # Errors
    ///
    /// As [`open_address_async`].
    pub async fn open_str_async(&self, address: &str) -> Result<Box<dyn super::AsyncJobQueue>> {
        self.open_async(&address.parse()?).await
    }

    /// Opens the async handle of the queue at `address` (an embedded
    /// queue is opened on tokio's blocking threads: it reads its files).
    ///
    /// ```
    /// use dque::jobs::{AddressOptions, AsyncJobQueue};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dque::Error> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let address = dir.path().join("jobs").display().to_string().parse()?;
    /// let queue = AddressOptions::new().create(true).open_async(&address).await?;
    /// assert_eq!(queue.name(), "jobs");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`open_address_async`].
    pub async fn open_async(&self, address: &Address) -> Result<Box<dyn super::AsyncJobQueue>> {
        match address {
            Address::Dir(path) => {
                let (options, path) = (self.clone(), path.clone());
                let jobs = tokio::task::spawn_blocking(move || options.embedded_jobs(&path))
                    .await
                    .map_err(|e| Error::InvalidOption {
                        name: "address",
                        reason: format!("the open of {address} did not finish ({e}); try again"),
                    })??;
                Ok(Box::new(super::AsyncEmbeddedJobs::new(jobs)))
            }
            Address::Postgres { url, queue } => self.open_postgres_async(address, url, queue).await,
            Address::Redis { url, queue } => self.open_redis_async(address, url, queue).await,
        }
    }

    #[cfg(feature = "postgres")]
    async fn open_postgres_async(
        &self,
        _: &Address,
        url: &str,
        queue: &str,
    ) -> Result<Box<dyn super::AsyncJobQueue>> {
        let options = tuned!(super::PgOptions::new(), self);
        Ok(Box::new(options.connect_async(url, queue).await?))
    }

    #[cfg(not(feature = "postgres"))]
    async fn open_postgres_async(
        &self,
        address: &Address,
        _: &str,
        _: &str,
    ) -> Result<Box<dyn super::AsyncJobQueue>> {
        Err(missing_feature(address, "PostgreSQL", "postgres"))
    }

    #[cfg(feature = "redis")]
    async fn open_redis_async(
        &self,
        _: &Address,
        url: &str,
        queue: &str,
    ) -> Result<Box<dyn super::AsyncJobQueue>> {
        let options = tuned!(super::RedisOptions::new(), self);
        Ok(Box::new(options.connect_async(url, queue).await?))
    }

    #[cfg(not(feature = "redis"))]
    async fn open_redis_async(
        &self,
        address: &Address,
        _: &str,
        _: &str,
    ) -> Result<Box<dyn super::AsyncJobQueue>> {
        Err(missing_feature(address, "Redis", "redis"))
    }
}

#[cfg(any(not(feature = "postgres"), not(feature = "redis")))]
fn missing_feature(address: &Address, backend: &str, feature: &str) -> Error {
    refused(
        &address.to_string(),
        format_args!(
            "this build of dque has no {backend} backend: build it with \
             feature `{feature}` (features = [\"{feature}\"] in Cargo.toml)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Address {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} did not parse: {e}"))
    }

    fn refusal(text: &str) -> String {
        match text.parse::<Address>() {
            Ok(address) => panic!("{text:?} parsed as {address:?}"),
            Err(
                e @ Error::InvalidOption {
                    name: "address", ..
                },
            ) => e.to_string(),
            Err(e) => panic!("{text:?}: not an address refusal: {e:?}"),
        }
    }

    #[test]
    fn each_form_parses() {
        assert_eq!(parsed("q"), Address::Dir("q".into()));
        assert_eq!(parsed("/tmp/a b"), Address::Dir("/tmp/a b".into()));
        // Not a scheme before `://`: a path.
        assert_eq!(parsed("./odd://name"), Address::Dir("./odd://name".into()));
        assert_eq!(parsed("a b://c"), Address::Dir("a b://c".into()));
        let pg = |url: &str, queue: &str| Address::Postgres {
            url: url.into(),
            queue: queue.into(),
        };
        let redis = |url: &str, queue: &str| Address::Redis {
            url: url.into(),
            queue: queue.into(),
        };
        assert_eq!(
            parsed("postgres://u@h:5432/db#mail"),
            pg("postgres://u@h:5432/db", "mail")
        );
        assert_eq!(
            parsed("postgresql://h/db#a#b"),
            pg("postgresql://h/db", "a#b")
        );
        assert_eq!(parsed("PostgreSQL://h#q"), pg("PostgreSQL://h", "q"));
        assert_eq!(
            parsed("redis://h:6379/2#mail"),
            redis("redis://h:6379/2", "mail")
        );
        assert_eq!(
            parsed("redis+unix:///run/redis.sock?db=2#mail"),
            redis("redis+unix:///run/redis.sock?db=2", "mail")
        );
    }

    #[test]
    fn an_address_prints_as_it_was_given() {
        for text in [
            "q",
            "/var/q",
            "postgres://u@h/db#mail",
            "redis+unix:///s?db=1#q",
        ] {
            assert_eq!(parsed(text).to_string(), text);
        }
    }

    #[test]
    fn bad_addresses_are_refused_with_what_to_do() {
        for (text, says) in [
            ("", "an empty ADDRESS"),
            ("ftp://h#q", "unknown scheme \"ftp\""),
            ("ftp://h#q", "postgres://…#QUEUE"),
            ("redis://h:6379/0", "name the queue after '#'"),
            ("postgres://h/db", "as in postgres://host/…#jobs"),
            ("redis://h#", "the queue name after '#' is empty"),
            ("redis://h#a\nb", "without control characters"),
        ] {
            let error = refusal(text);
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn accessors_tell_the_directory_and_the_queue() {
        assert_eq!(parsed("q").dir(), Some(Path::new("q")));
        assert_eq!(parsed("q").queue(), None);
        assert_eq!(parsed("redis://h#jobs").queue(), Some("jobs"));
        assert_eq!(parsed("redis://h#jobs").dir(), None);
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_missing_backend_names_its_feature() {
        let Err(error) = open_address("postgres://h/db#q") else {
            panic!("opened without the backend");
        };
        assert!(error.to_string().contains("feature `postgres`"), "{error}");
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn a_missing_redis_backend_names_its_feature() {
        let Err(error) = open_address("redis://h#q") else {
            panic!("opened without the backend");
        };
        assert!(error.to_string().contains("feature `redis`"), "{error}");
    }
}
