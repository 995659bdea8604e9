//! A handle's connection to the server: its prepared statements, its
//! session settings, and connecting again after it broke (a server
//! restart, a dropped network) on the next call, with back-off for as long
//! as the server is coming back, and a bound on that wait.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row};

use super::errors::{connection_lost, db, never_sent, worth_retrying};
use super::Db;
use crate::error::{Error, Result};

/// How long a call waits for a server that is coming back (restarting,
/// starting up) before it fails; the next call tries again.
pub const RECONNECT_FOR: Duration = Duration::from_secs(5);
/// The first pause between tries, doubled each time up to [`MAX_PAUSE`].
pub(super) const FIRST_PAUSE: Duration = Duration::from_millis(25);
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What every connection of a handle sets first.
///
/// A lease must walk the queue's index in order and stop at the first
/// free row. Without statistics (a table just filled, before autovacuum
/// analyzes it) the planner may rather fetch every ready row and sort
/// them: 2.3 ms a lease at 5,000 jobs instead of 0.2. This connection's
/// queries never need a sort they could avoid. (Disabled plans cost enough
/// to start JIT compilation, 150 ms a statement: JIT is off too, as it
/// helps no query here.) Plans are generic (made once per prepared
/// statement, not per call): with sorts off they walk the index whatever
/// the parameters, and planning a lease anew each call cost more than
/// running it.
pub(super) const SESSION: &str =
    "SET enable_sort = off; SET jit = off; SET plan_cache_mode = force_generic_plan";

/// How long a connection may sit unused before a call first checks, with
/// a round trip, that the server still holds it (over TCP a server that
/// went away is seen only once a call was sent; over a Unix socket the
/// call's write fails first, and is sent again on a new connection).
const IDLE_CHECK: Duration = Duration::from_millis(50);
/// How long that check waits for the server.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The handle's connection, with its prepared statements by text, made
/// again when it broke.
pub struct Conn {
    /// The connection string; `None` for a caller's client, which cannot
    /// be made again.
    url: Option<String>,
    client: Client,
    /// Set when a call found the connection lost: made again before the
    /// next call (the driver sees a closed socket only when it reads).
    broken: bool,
    prepared: HashMap<String, postgres::Statement>,
    used_at: Instant,
}

impl Conn {
    /// Takes `client` as the handle's, its session set up.
    pub fn new(mut client: Client, url: Option<String>) -> Result<Conn> {
        client.batch_execute(SESSION).map_err(db)?;
        Ok(Conn {
            url,
            client,
            broken: false,
            prepared: HashMap::new(),
            used_at: Instant::now(),
        })
    }

    /// Makes sure the connection works, making it again if it broke.
    ///
    /// # Errors
    ///
    /// `Backend` if the server is not back within [`RECONNECT_FOR`] (or
    /// the connection was the caller's); `ServerRefused` if it refuses
    /// the new connection (a changed password).
    pub fn ready(&mut self) -> Result<()> {
        let alive = !self.broken
            && !self.client.is_closed()
            && (self.used_at.elapsed() < IDLE_CHECK || self.client.is_valid(CHECK_TIMEOUT).is_ok());
        if !alive {
            self.reconnect()?;
        }
        Ok(())
    }

    /// The client, for a transaction.
    pub fn client(&mut self) -> Result<&mut Client> {
        self.ready()?;
        self.used_at = Instant::now();
        Ok(&mut self.client)
    }

    /// Makes the next call check the connection first (after an error of
    /// a statement run outside [`Db`], such as a transaction's).
    pub fn suspect(&mut self) {
        self.used_at = Instant::now()
            .checked_sub(IDLE_CHECK)
            .unwrap_or(self.used_at);
    }

    /// Whether there is a connection (closing: no reconnect for this).
    pub fn connected(&self) -> bool {
        !self.broken && !self.client.is_closed()
    }

    fn reconnect(&mut self) -> Result<()> {
        self.broken = true;
        let Some(url) = &self.url else {
            return Err(Error::Backend {
                backend: "PostgreSQL",
                reason: "the connection the queue was opened with is closed; open the \
                         queue again on a new client (or with PgOptions::connect, which \
                         connects again by itself)"
                    .into(),
            });
        };
        let mut client = connect_again(url)?;
        client.batch_execute(SESSION).map_err(db)?;
        self.client = client;
        self.prepared.clear();
        self.broken = false;
        self.used_at = Instant::now();
        Ok(())
    }

    /// Runs `call` with the prepared statement of `sql`; if the server had
    /// closed the connection before the call reached it, once more on a
    /// new connection.
    fn run<T>(
        &mut self,
        sql: &str,
        mut call: impl FnMut(&mut Client, &postgres::Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let first = self.run_once(sql, &mut call);
        let result = match first {
            Err(e) if never_sent(&e) && self.url.is_some() => {
                if self.reconnect().is_err() {
                    return Err(e);
                }
                self.run_once(sql, &mut call)
            }
            other => other,
        };
        if result.as_ref().is_err_and(connection_lost) {
            self.broken = true;
        }
        self.used_at = Instant::now();
        result
    }

    fn run_once<T>(
        &mut self,
        sql: &str,
        call: &mut impl FnMut(&mut Client, &postgres::Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let client = &mut self.client;
        let statement = match self.prepared.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let statement = client.prepare(sql)?;
                self.prepared.insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        call(client, &statement)
    }
}

impl Db for Conn {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.run(sql, |client, statement| client.query(statement, params))
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.run(sql, |client, statement| client.execute(statement, params))
    }
}

/// Connects to `url`, trying again with back-off while the server is down
/// or coming up, for at most [`RECONNECT_FOR`].
fn connect_again(url: &str) -> Result<Client> {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match Client::connect(url, NoTls) {
            Ok(client) => return Ok(client),
            Err(e) if worth_retrying(&e) && start.elapsed() + pause < RECONNECT_FOR => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(e) => return Err(db(e)),
        }
    }
}
