//! The async handle's connections (`AsyncPgJobs`): a small pool per
//! handle, shared by its tasks. Each connection pipelines the statements
//! given to it (sent without waiting for the answers before them); the
//! pool spreads calls over its connections so that the server runs them
//! in several processes at once. This module polls the connections itself
//! and turns the notifications of the handle's queue into a tokio
//! [`Notify`]; a lost connection is made again on the next call, with
//! back-off, for at most [`RECONNECT_FOR`](super::connection::RECONNECT_FOR).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, Statement};

use super::connection::{FIRST_PAUSE, MAX_PAUSE, RECONNECT_FOR, SESSION};
use super::errors::{db, worth_retrying};
use super::CHANNEL;
use crate::error::Result;

/// One connection: its client and its prepared statements by text.
pub struct Link {
    client: Client,
    prepared: Mutex<HashMap<String, Statement>>,
}

impl Link {
    /// Whether the connection ended (its driver saw it close).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    async fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.prepared.lock().get(sql) {
            return Ok(statement.clone());
        }
        // Two tasks may prepare the same text at once: both work.
        let statement = self.client.prepare(sql).await?;
        self.prepared
            .lock()
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `sql` (prepared once per connection); its rows.
    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.client.query(&statement, params).await
    }

    /// Runs `sql`; the rows it changed.
    pub async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.client.execute(&statement, params).await
    }

    /// Runs `sql`; its first row.
    pub async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.client.query_one(&statement, params).await
    }
}

/// Connects to `url`, its session set up, and if `listen`, listening on
/// [`CHANNEL`]: a task polls the connection and wakes `news` for each
/// notification naming `queue` (and once when the connection ends, so
/// waiters look again and find it gone). `patient`: trying again with
/// back-off while the server is down or coming up, for at most
/// [`RECONNECT_FOR`]. The `Client` is returned bare so the caller may
/// first run a transaction (a migration) on it alone.
pub async fn connect(
    url: &str,
    queue: &str,
    news: &Arc<Notify>,
    patient: bool,
    listen: bool,
) -> Result<Client> {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    let (client, mut connection) = loop {
        match tokio_postgres::connect(url, NoTls).await {
            Ok(made) => break made,
            Err(e) if patient && worth_retrying(&e) && start.elapsed() + pause < RECONNECT_FOR => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(e) => return Err(db(e)),
        }
    };
    let news = Arc::clone(news);
    let queue = queue.to_owned();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    if note.payload() == queue {
                        news.notify_waiters();
                    }
                }
                Some(Ok(_)) => {}
                // Ended (the server closed it, or the client was dropped).
                Some(Err(_)) | None => break,
            }
        }
        news.notify_waiters();
    });
    let setup = if listen {
        format!("{SESSION}; LISTEN {CHANNEL}")
    } else {
        SESSION.to_owned()
    };
    client.batch_execute(&setup).await.map_err(db)?;
    Ok(client)
}

/// `client` as a shared link.
pub fn link(client: Client) -> Link {
    Link {
        client,
        prepared: Mutex::new(HashMap::new()),
    }
}

/// A handle's connections: the listener, which also runs calls, and up to
/// `size - 1` more, opened only when calls overlap.
///
/// Invariants. A call runs on the connection the fewest calls hold (an
/// `Arc<Link>` held by a call counts it: its strong count less the pool's
/// own). A connection is added, in a task of its own (no caller's drop can
/// cut it), only when every live one is held by a call; so a handle used by
/// one task at a time keeps one connection, as before pools. Only the
/// listener LISTENs (one notification per enqueue reaches one connection of
/// the handle): a call that finds it lost makes it again, with back-off,
/// before running; a lost extra connection is dropped from the pool and
/// made again when calls overlap again.
pub struct Pool {
    url: String,
    queue: String,
    news: Arc<Notify>,
    size: usize,
    links: Mutex<Links>,
    /// One reconnection of the listener at a time.
    connecting: tokio::sync::Mutex<()>,
    /// One extra connection being opened at a time.
    growing: AtomicBool,
    closed: AtomicBool,
}

#[derive(Default)]
struct Links {
    listener: Option<Arc<Link>>,
    extra: Vec<Arc<Link>>,
}

impl Pool {
    /// A pool of at most `size` (at least 1) connections to `url`, its
    /// listener `first` (connected with `listen`).
    pub fn new(url: &str, queue: &str, news: &Arc<Notify>, size: usize, first: Client) -> Pool {
        Pool {
            url: url.to_owned(),
            queue: queue.to_owned(),
            news: Arc::clone(news),
            size: size.max(1),
            links: Mutex::new(Links {
                listener: Some(Arc::new(link(first))),
                extra: Vec::new(),
            }),
            connecting: tokio::sync::Mutex::new(()),
            growing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// The connection a call should run on: the least held live one, the
    /// listener made again first if it was lost.
    ///
    /// # Errors
    ///
    /// `Closed` after [`close`](Self::close); as [`connect`] if the
    /// listener was lost and the server does not come back in time.
    pub async fn get(self: &Arc<Self>) -> Result<Arc<Link>> {
        self.get_or_listener(true).await
    }

    /// The listener, made again first if it was lost: for the calls that
    /// NOTIFY. PostgreSQL serializes the commits of transactions that
    /// notify (one lock for the database), so spreading them over
    /// connections gains nothing and adds lock waits; pipelined on one
    /// connection they measured faster.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub async fn listener(self: &Arc<Self>) -> Result<Arc<Link>> {
        self.get_or_listener(false).await
    }

    async fn get_or_listener(self: &Arc<Self>, spread: bool) -> Result<Arc<Link>> {
        let pick = |pool: &Arc<Self>| {
            if spread {
                pool.least_held()
            } else {
                pool.current()
            }
        };
        if let Some(link) = pick(self) {
            return Ok(link);
        }
        let _one = self.connecting.lock().await;
        if let Some(link) = pick(self) {
            return Ok(link);
        }
        if self.closed.load(Ordering::SeqCst) {
            return Err(crate::error::Error::Closed);
        }
        let client = connect(&self.url, &self.queue, &self.news, true, true).await?;
        let link = Arc::new(link(client));
        let mut links = self.links.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(crate::error::Error::Closed);
        }
        links.listener = Some(Arc::clone(&link));
        Ok(link)
    }

    /// The least held live connection, starting one more if all are held
    /// and the pool has room; `None` if the listener is lost (or closed).
    fn least_held(self: &Arc<Self>) -> Option<Arc<Link>> {
        let mut links = self.links.lock();
        let listener = links.listener.as_ref().filter(|l| !l.is_closed())?;
        let mut best = Arc::clone(listener);
        links.extra.retain(|l| !l.is_closed());
        for link in &links.extra {
            if Arc::strong_count(link) < Arc::strong_count(&best) {
                best = Arc::clone(link);
            }
        }
        // Held by the pool, by `best` here, and by calls.
        let all_held = Arc::strong_count(&best) > 2;
        let room = 1 + links.extra.len() < self.size;
        drop(links);
        if all_held && room && !self.growing.swap(true, Ordering::SeqCst) {
            let pool = Arc::clone(self);
            tokio::spawn(async move {
                let made = connect(&pool.url, &pool.queue, &pool.news, false, false).await;
                if let Ok(client) = made {
                    let mut links = pool.links.lock();
                    if !pool.closed.load(Ordering::SeqCst) && 1 + links.extra.len() < pool.size {
                        links.extra.push(Arc::new(link(client)));
                    }
                }
                pool.growing.store(false, Ordering::SeqCst);
            });
        }
        Some(best)
    }

    /// The listener if it is live (no reconnection): for handing back at
    /// close.
    pub fn current(&self) -> Option<Arc<Link>> {
        let links = self.links.lock();
        links
            .listener
            .as_ref()
            .filter(|l| !l.is_closed())
            .map(Arc::clone)
    }

    /// How many connections the pool holds now (live or not yet seen lost).
    pub fn connections(&self) -> usize {
        let links = self.links.lock();
        usize::from(links.listener.is_some()) + links.extra.len()
    }

    /// Drops every connection (calls running keep theirs until they end);
    /// later calls fail with `Closed`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        *self.links.lock() = Links::default();
    }
}
