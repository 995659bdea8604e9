//! The one Lua script (`lua/`), loaded once per server and called by SHA,
//! and the connection it runs on: made again, with back-off, on the call
//! after it failed (a restarted server has forgotten the script: it is
//! loaded again when the server says `NOSCRIPT`).
//!
//! What a failed call did is told apart by when the connection failed: a
//! call that never reached the server whole (no connection, or the
//! sending failed) did nothing and says so; one that was sent and got no
//! answer may have run, and says that. A connection idle for a while is
//! checked with a `PING` before a call is sent on it, so a call after a
//! server restart does not find the dead connection by losing its own
//! outcome.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use ::redis::{Connection, Value};
use parking_lot::Mutex;

use super::core::Transport;
use super::encoding::seconds;
use crate::error::{Error, Result};

/// How long a connection may take to open.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call may wait for the server (a long `unfail` is the
/// slowest script; a busy server answers `BUSY` rather than hanging).
pub(super) const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The script: shared parts first, then the commands, then the entry.
pub(super) const SOURCE: &str = concat!(
    include_str!("lua/base.lua"),
    include_str!("lua/unique.lua"),
    include_str!("lua/aside.lua"),
    include_str!("lua/jobs.lua"),
    include_str!("lua/qless.lua"),
    include_str!("lua/limits.lua"),
    include_str!("lua/recurring.lua"),
    include_str!("lua/history.lua"),
    include_str!("lua/main.lua"),
);

/// How long a reconnect keeps trying (with back-off) before the call
/// fails: long enough to ride over a server restart, short enough that a
/// caller hears of a server that stays down.
const RECONNECT_FOR: Duration = Duration::from_secs(5);

/// The first and the longest pause between two tries of a reconnect.
const RECONNECT_PAUSE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// A connection unused this long is checked (`PING`) before a call is
/// sent on it: a server that closed it meanwhile (a restart, a timeout)
/// then costs a reconnect instead of the call's outcome. A busy
/// connection (a worker polling every 50 ms at most) is never checked.
const IDLE_CHECK: Duration = Duration::from_millis(250);

pub(crate) fn backend(e: &::redis::RedisError) -> Error {
    Error::Backend {
        backend: "Redis",
        reason: e.to_string(),
    }
}

/// The error of a call that did not run: no connection could be made.
pub(super) fn not_run(e: &::redis::RedisError) -> Error {
    if let Some(error) = auth_error(e) {
        return error;
    }
    Error::Backend {
        backend: "Redis",
        reason: format!("{e} (the call did not run; the next call connects again)"),
    }
}

/// The error of a call that was sent and got no answer (the same variant
/// as PostgreSQL's, so a caller matches one error on every backend).
pub(super) fn outcome_unknown(e: &::redis::RedisError) -> Error {
    Error::OutcomeUnknown {
        backend: "Redis",
        reason: e.to_string(),
    }
}

/// What a server that wants a password, or refused one, said, as an
/// error that says what to do.
pub(super) fn auth_error(e: &::redis::RedisError) -> Option<Error> {
    let said = e.to_string();
    let reason = if e.code() == Some("NOAUTH") || said.contains("NOAUTH") {
        format!(
            "the server wants a password and the address gives none: add it as \
             redis://:PASSWORD@HOST:PORT/DB (or redis://USER:PASSWORD@...), or \
             unix:///PATH?pass=PASSWORD for a socket (the server said: {said})"
        )
    } else if e.kind() == ::redis::ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || said.contains("WRONGPASS")
    {
        format!(
            "the server refused the password (or user name) of the address: check them \
             (the server said: {said})"
        )
    } else if said.contains("without any password configured") {
        format!(
            "the address gives a password and the server has none: drop it from the \
             address, or set one on the server (the server said: {said})"
        )
    } else {
        return None;
    };
    Some(Error::Backend {
        backend: "Redis",
        reason,
    })
}

/// Whether `e` means the connection is no good (as opposed to the server
/// refusing the command on a working connection).
pub(super) fn connection_failed(e: &::redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// What a script call refused, by the code its error starts with.
pub(super) fn refusal(e: &::redis::RedisError) -> Option<Error> {
    let id = e.detail().unwrap_or("").to_owned();
    match e.code()? {
        "DQUE-NOJOB" => Some(Error::NoSuchJob { id }),
        "DQUE-LEASED" => Some(Error::JobLeased { id }),
        "DQUE-INVALID" => Some(Error::InvalidJob { reason: id }),
        // The lease's token is the caller's to turn into LeaseLost.
        "DQUE-LOST" => Some(Error::LeaseLost { id: 0, attempt: 0 }),
        _ => None,
    }
}

/// A connection to one server, made again after it fails.
pub(crate) struct Server {
    client: ::redis::Client,
    link: Mutex<Link>,
    script: ::redis::Script,
}

/// The connection, if there is one, and when a call was last sent on it.
struct Link {
    connection: Option<Connection>,
    used: Instant,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("address", &self.client.get_connection_info().addr())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Connects to `url` (`redis://HOST:PORT/DB`, `redis+unix:///PATH?db=N`
    /// or `unix:///PATH`) and loads the script; once, without retrying (a
    /// wrong address fails at once).
    pub(crate) fn connect(url: &str) -> Result<Server> {
        let client = ::redis::Client::open(url).map_err(|e| backend(&e))?;
        let server = Server {
            client,
            link: Mutex::new(Link {
                connection: None,
                used: Instant::now(),
            }),
            script: ::redis::Script::new(SOURCE),
        };
        let mut connection = server.open().map_err(|e| not_run(&e))?;
        server
            .script
            .prepare_invoke()
            .load(&mut connection)
            .map_err(|e| auth_error(&e).unwrap_or_else(|| backend(&e)))?;
        let mut link = server.link.lock();
        link.connection = Some(connection);
        link.used = Instant::now();
        drop(link);
        Ok(server)
    }

    /// A new connection, its timeouts set and its access checked: a small
    /// `PING` first, as a server with a password refuses a large command
    /// (the script) from a client that gave none with a protocol error
    /// that names no password.
    fn open(&self) -> ::redis::RedisResult<Connection> {
        let mut connection = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        // A server that stops answering fails the call instead of holding
        // every thread of the handle for ever.
        connection.set_read_timeout(Some(REPLY_TIMEOUT))?;
        connection.set_write_timeout(Some(REPLY_TIMEOUT))?;
        ::redis::cmd("PING").query::<()>(&mut connection)?;
        Ok(connection)
    }

    /// A new connection, tried again with back-off while the server cannot
    /// be reached, for [`RECONNECT_FOR`] at most.
    fn reconnect(&self) -> Result<Connection> {
        let started = Instant::now();
        let mut pause = RECONNECT_PAUSE.0;
        loop {
            match self.open() {
                Ok(connection) => return Ok(connection),
                Err(e) if connection_failed(&e) && auth_error(&e).is_none() => {
                    if started.elapsed() + pause > RECONNECT_FOR {
                        return Err(not_run(&e));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RECONNECT_PAUSE.1);
                }
                Err(e) => return Err(not_run(&e)),
            }
        }
    }

    /// The connection to send a call on: the one there is if it still
    /// answers (checked when idle), else a new one.
    fn ready<'a>(&self, link: &'a mut Link) -> Result<&'a mut Connection> {
        if link.used.elapsed() >= IDLE_CHECK {
            if let Some(connection) = link.connection.as_mut() {
                if ::redis::cmd("PING").query::<()>(connection).is_err() {
                    link.connection = None;
                }
            }
        }
        if link.connection.is_none() {
            link.connection = Some(self.reconnect()?);
        }
        link.used = Instant::now();
        Ok(link.connection.as_mut().expect("connected above"))
    }

    /// Runs `read` on the connection, connecting first if the last one
    /// failed; `read` must only read (it runs once more, on a new
    /// connection, when the connection fails under it).
    pub(crate) fn with<T>(
        &self,
        mut read: impl FnMut(&mut Connection) -> ::redis::RedisResult<T>,
    ) -> Result<T> {
        let mut link = self.link.lock();
        let mut tries = 0;
        loop {
            tries += 1;
            let connection = self.ready(&mut link)?;
            match read(connection) {
                Ok(value) => return Ok(value),
                Err(e) if connection_failed(&e) => {
                    link.connection = None;
                    if tries == 2 {
                        return Err(backend(&e));
                    }
                }
                Err(e) => return Err(refusal(&e).unwrap_or_else(|| backend(&e))),
            }
        }
    }

    /// Runs script command `command` at clock time `now` with `args`.
    pub(crate) fn call(&self, command: &str, now: SystemTime, args: &[&[u8]]) -> Result<Value> {
        let now = seconds(now);
        let real = seconds(SystemTime::now());
        let mut evalsha = ::redis::cmd("EVALSHA");
        evalsha
            .arg(self.script.get_hash())
            .arg(0)
            .arg(command)
            .arg(&now)
            .arg(&real);
        for arg in args {
            evalsha.arg(*arg);
        }
        let packed = evalsha.get_packed_command();
        let mut link = self.link.lock();
        // At most: a send on a connection found dead, and a NOSCRIPT.
        for _ in 0..3 {
            let connection = self.ready(&mut link)?;
            if let Err(e) = connection.send_packed_command(&packed) {
                // Not sent whole: the server ran nothing.
                link.connection = None;
                if !connection_failed(&e) {
                    return Err(not_run(&e));
                }
                continue;
            }
            let e = match connection.recv_response().and_then(Value::extract_error) {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            if connection_failed(&e) {
                link.connection = None;
                return Err(outcome_unknown(&e));
            }
            if e.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript) {
                // A restarted (or flushed) server: load the script, then
                // send the call again (it did not run).
                let loaded = self.script.prepare_invoke().load(connection);
                if let Err(e) = loaded {
                    if connection_failed(&e) {
                        link.connection = None;
                    }
                    return Err(not_run(&e));
                }
                continue;
            }
            return Err(refusal(&e).unwrap_or_else(|| backend(&e)));
        }
        Err(Error::Backend {
            backend: "Redis",
            reason: "the connection failed again and again before the call could be sent (the \
                     call did not run)"
                .into(),
        })
    }
}

/// The blocking transport: each call is done when its future is made.
impl Transport for Server {
    fn script(
        &self,
        command: &str,
        now: SystemTime,
        args: &[&[u8]],
    ) -> impl Future<Output = Result<Value>> + Send {
        std::future::ready(self.call(command, now, args))
    }

    fn keys(&self, pattern: &str) -> impl Future<Output = Result<Vec<String>>> + Send {
        std::future::ready(self.with(|connection| {
            let keys: ::redis::Iter<'_, String> = ::redis::cmd("SCAN")
                .cursor_arg(0)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .clone()
                .iter(connection)?;
            keys.collect()
        }))
    }

    fn hash(&self, key: &str) -> impl Future<Output = Result<HashMap<String, String>>> + Send {
        std::future::ready(
            self.with(|connection| ::redis::cmd("HGETALL").arg(key).query(connection)),
        )
    }
}
