//! The Jobs API over Redis ([`RedisJobs`], feature `redis`), in qless's
//! data model so that qless workers in Python share the jobs: the same
//! tour as the `jobs` example (priorities, a delay, a caller's id enqueued
//! twice, a worker that acks and nacks with a retry, dead letters, counts
//! and statistics), run unchanged on a server. The tour leaves its queue
//! empty, so it can run again (job ids are global to the Redis database,
//! as in qless).
//!
//! Run with a server's address and an optional `#QUEUE` (default
//! `dque-example`), as the first argument or in `DQUE_REDIS_URL`:
//!
//! ```sh
//! cargo run --features redis --example redis_jobs -- 'redis://127.0.0.1:6379/0#demo'
//! DQUE_REDIS_URL='redis+unix:///tmp/redis.sock' cargo run --features redis --example redis_jobs
//! ```
//!
//! Without an address it says how to run it and exits.

mod jobs_tour;

use std::time::Duration;

use dque::jobs::RedisOptions;

const VARIABLE: &str = "DQUE_REDIS_URL";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(address) = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(VARIABLE).ok())
    else {
        println!("Give a Redis server's address, as the first argument or in {VARIABLE}:");
        println!(
            "  cargo run --features redis --example redis_jobs -- 'redis://HOST:PORT/DB#QUEUE'"
        );
        println!("(or a unix socket: redis+unix:///PATH?db=N#QUEUE)");
        return Ok(());
    };
    // `URL#QUEUE`, as the `dque` command takes it.
    let (url, queue) = address
        .split_once('#')
        .unwrap_or((&address, "dque-example"));
    let queue = RedisOptions::new()
        .lease_time(Duration::from_secs(60)) // a lease not settled by then ends
        .max_attempts(jobs_tour::MAX_ATTEMPTS)
        .connect(url, queue)?;
    jobs_tour::tour(&queue)?;
    Ok(())
}
