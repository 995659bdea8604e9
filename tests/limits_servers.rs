//! A limit of 1 on PostgreSQL and Redis (issue 27): workers on their own
//! connections race to lease jobs that all take one limit; no two ever
//! hold it at once, including when a worker "dies" (drops its lease
//! unsettled, which then runs out) and the others go on. On real
//! throwaway servers.
//!
//! `DQUE_LIMIT_ROUNDS=2000 cargo test --all-features --test limits_servers`
//! runs longer.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use dque::jobs::{JobQueue, NewJob, PgOptions, RedisOptions};

mod pg;
mod redis_server;
mod skip;
use pg::PgServer;
use redis_server::RedisServer;

const LEASE: Duration = Duration::from_millis(300);

/// `workers` handles made by `open` share the queue; `rounds` leases in
/// all, a tenth of them abandoned.
fn race(open: &(dyn Fn() -> Box<dyn JobQueue> + Sync), workers: usize, rounds: usize) {
    let setup = open();
    setup.set_limit("one", 1).unwrap();
    let jobs: Vec<NewJob> = (0..rounds + workers)
        .map(|n| NewJob::new(format!("j{n}")).limit("one"))
        .collect();
    setup.enqueue_batch(jobs).unwrap();
    let held = AtomicBool::new(false);
    let leased = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for w in 0..workers {
            let (held, leased) = (&held, &leased);
            scope.spawn(move || {
                let queue = open();
                while leased.load(Ordering::SeqCst) < rounds {
                    let Some(lease) = queue.lease_timeout(Duration::from_millis(50)).unwrap()
                    else {
                        continue;
                    };
                    let n = leased.fetch_add(1, Ordering::SeqCst);
                    assert!(
                        !held.swap(true, Ordering::SeqCst),
                        "worker {w}: two hold limit one"
                    );
                    std::thread::sleep(Duration::from_millis(3));
                    held.store(false, Ordering::SeqCst);
                    if n % 10 == 9 {
                        // Dies: its lease runs out; the limit comes back then.
                        drop(lease);
                        continue;
                    }
                    queue.ack(lease).unwrap();
                }
            });
        }
    });
    assert!(leased.load(Ordering::SeqCst) >= rounds);
}

fn rounds() -> usize {
    std::env::var("DQUE_LIMIT_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(60)
}

#[test]
fn a_limit_of_one_never_has_two_holders_on_postgres() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let queue = format!("limit-race-{}", std::process::id());
    let open = || -> Box<dyn JobQueue> {
        Box::new(
            PgOptions::new()
                .lease_time(LEASE)
                .connect(&server.url(), &queue)
                .unwrap(),
        )
    };
    race(&open, 4, rounds());
}

#[test]
fn a_limit_of_one_never_has_two_holders_on_redis() {
    let Some(server) = RedisServer::get() else {
        return;
    };
    let open = || -> Box<dyn JobQueue> {
        Box::new(
            RedisOptions::new()
                .lease_time(LEASE)
                .connect(&server.url(5), "limit-race")
                .unwrap(),
        )
    };
    race(&open, 4, rounds());
}
