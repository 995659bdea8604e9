//! The async handle's connection (`AsyncPgJobs`): one tokio-postgres
//! connection per handle, shared by its tasks, whose concurrent
//! statements are pipelined (sent without waiting for the answers before
//! them). This module polls the connection itself and turns the
//! notifications of the handle's queue into a tokio [`Notify`]; a lost
//! connection is made again on the next call, with back-off, for at most
//! [`RECONNECT_FOR`](super::connection::RECONNECT_FOR).

use std::collections::HashMap;
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

    /// Runs `sql`; its first row, if any.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        self.client.query_opt(&statement, params).await
    }
}

/// Connects to `url`, its session set up, listening on [`CHANNEL`]: a
/// task polls the connection and wakes `news` for each notification
/// naming `queue` (and once when the connection ends, so waiters look
/// again and find it gone). `patient`: trying again with back-off while
/// the server is down or coming up, for at most [`RECONNECT_FOR`]. The
/// `Client` is returned bare so the caller may first run a transaction
/// (a migration) on it alone.
pub async fn connect(url: &str, queue: &str, news: &Arc<Notify>, patient: bool) -> Result<Client> {
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
    client
        .batch_execute(&format!("{SESSION}; LISTEN {CHANNEL}"))
        .await
        .map_err(db)?;
    Ok(client)
}

/// `client` as a shared link.
pub fn link(client: Client) -> Link {
    Link {
        client,
        prepared: Mutex::new(HashMap::new()),
    }
}
