//! The one Lua script (`lua/`), loaded once per server and called by SHA,
//! and the connection it runs on.

use std::time::{Duration, SystemTime};

use ::redis::{Connection, Value};
use parking_lot::Mutex;

use super::encoding::seconds;
use crate::error::{Error, Result};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call may wait for the server (a long `unfail` is the
/// slowest script; a busy server answers `BUSY` rather than hanging).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The script: shared parts first, then the commands, then the entry.
const SOURCE: &str = concat!(
    include_str!("lua/base.lua"),
    include_str!("lua/jobs.lua"),
    include_str!("lua/qless.lua"),
    include_str!("lua/main.lua"),
);

pub(crate) fn backend(e: &::redis::RedisError) -> Error {
    Error::Backend {
        backend: "Redis",
        reason: e.to_string(),
    }
}

/// What a script call refused, by the code its error starts with.
fn refusal(e: &::redis::RedisError) -> Option<Error> {
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
    connection: Mutex<Option<Connection>>,
    script: ::redis::Script,
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
    /// or `unix:///PATH`) and loads the script.
    pub(crate) fn connect(url: &str) -> Result<Server> {
        let client = ::redis::Client::open(url).map_err(|e| backend(&e))?;
        let server = Server {
            client,
            connection: Mutex::new(None),
            script: ::redis::Script::new(SOURCE),
        };
        let mut guard = server.connection.lock();
        let connection = server.connect_now()?;
        let connection = guard.insert(connection);
        server
            .script
            .prepare_invoke()
            .load(connection)
            .map_err(|e| backend(&e))?;
        drop(guard);
        Ok(server)
    }

    fn connect_now(&self) -> Result<Connection> {
        let connection = self
            .client
            .get_connection_with_timeout(CONNECT_TIMEOUT)
            .map_err(|e| backend(&e))?;
        // A server that stops answering fails the call instead of holding
        // every thread of the handle for ever.
        connection
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| connection.set_write_timeout(Some(REPLY_TIMEOUT)))
            .map_err(|e| backend(&e))?;
        Ok(connection)
    }

    /// Runs `f` on the connection, connecting first if the last one failed.
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> ::redis::RedisResult<T>,
    ) -> Result<T> {
        let mut guard = self.connection.lock();
        let connection = match guard.as_mut() {
            Some(connection) => connection,
            None => guard.insert(self.connect_now()?),
        };
        match f(connection) {
            Ok(value) => Ok(value),
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    *guard = None;
                }
                Err(refusal(&e).unwrap_or_else(|| backend(&e)))
            }
        }
    }

    /// Runs script command `command` at clock time `now` with `args`.
    pub(crate) fn call(&self, command: &str, now: SystemTime, args: &[&[u8]]) -> Result<Value> {
        let now = seconds(now);
        let real = seconds(SystemTime::now());
        self.with(|connection| {
            let mut invocation = self.script.prepare_invoke();
            invocation.arg(command).arg(&now).arg(&real);
            for arg in args {
                invocation.arg(*arg);
            }
            invocation.invoke::<Value>(connection)
        })
    }
}
