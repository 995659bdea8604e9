//! The Jobs API over PostgreSQL ([`PgJobs`], feature `postgres`): the same
//! tour as the `jobs` example (priorities, a delay, a caller's id enqueued
//! twice, a worker that acks and nacks with a retry, dead letters, counts
//! and statistics), run unchanged on a server, as workers on many hosts
//! would share it. The tables are made on first use (schema `dque`); the
//! tour leaves its queue empty, so it can run again.
//!
//! Run with a server's address, as a `postgres://` URL or a libpq
//! connection string, and an optional `#QUEUE` (default `dque-example`):
//!
//! ```sh
//! cargo run --features postgres --example postgres_jobs -- 'postgres://postgres@%2Ftmp/postgres#demo'
//! DQUE_POSTGRES_URL='host=/tmp user=postgres dbname=postgres' cargo run --features postgres --example postgres_jobs
//! ```
//!
//! Without an address it says how to run it and exits.

mod jobs_tour;

use std::time::Duration;

use dque::jobs::PgOptions;

const VARIABLE: &str = "DQUE_POSTGRES_URL";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(address) = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(VARIABLE).ok())
    else {
        println!("Give a PostgreSQL server's address, as the first argument or in {VARIABLE}:");
        println!("  cargo run --features postgres --example postgres_jobs -- 'postgres://USER@HOST:PORT/DB#QUEUE'");
        println!("(a unix socket directory as host: postgres://postgres@%2Ftmp/postgres)");
        return Ok(());
    };
    // `URL#QUEUE`, as the `dque` command takes it; several queues share
    // the schema's tables.
    let (url, queue) = address
        .split_once('#')
        .unwrap_or((&address, "dque-example"));
    let queue = PgOptions::new()
        .lease_time(Duration::from_secs(60)) // a lease not settled by then ends
        .max_attempts(jobs_tour::MAX_ATTEMPTS)
        .connect(url, queue)?;
    jobs_tour::tour(&queue)?;
    Ok(())
}
