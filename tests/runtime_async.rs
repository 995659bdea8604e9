//! The tokio worker runtime (`dque::runtime::AsyncWorker`) on every
//! backend's async handle: the shared checks of `tests/runtime_async_api/`
//! on the embedded queue, PostgreSQL and Redis (real throwaway servers,
//! `tests/pg/` and `tests/redis_server/`; without them installed the
//! server tests say so and pass, except under `CI=true`, where they fail).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, JobOptions, PgOptions, RedisOptions};
use dque::Options;

#[macro_use]
mod jobs_api;
#[macro_use]
mod runtime_async_api;
mod pg;
mod redis_server;
mod skip;
use jobs_api::Settings;
use pg::PgServer;
use redis_server::RedisServer;
use runtime_async_api::{runtime, AsyncBackend};

/// Names unique to a test process and a backend value.
fn prefix() -> String {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    format!(
        "ra{}-{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    )
}

/// Embedded queues in a temporary directory.
struct Embedded {
    dir: tempfile::TempDir,
}

impl AsyncBackend for Embedded {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn AsyncJobQueue> {
        let jobs = JobOptions::new()
            .queue(
                Options::new()
                    .visibility_timeout(settings.lease_time)
                    .max_attempts(settings.max_attempts),
            )
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
            .create(self.dir.path().join(name))
            .expect("create");
        Arc::new(AsyncEmbeddedJobs::new(jobs))
    }
}

mod embedded {
    use super::*;

    fn on_a_new_dir(check: fn(&dyn AsyncBackend)) {
        check(&Embedded {
            dir: tempfile::tempdir().expect("temp dir"),
        });
    }

    runtime_async_suite!(run = on_a_new_dir);
}

/// PostgreSQL queues on the test binary's server, names unique per value.
struct Postgres {
    prefix: String,
}

impl AsyncBackend for Postgres {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn AsyncJobQueue> {
        let server = PgServer::get().expect("checked by the test");
        let options = PgOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()));
        let name = format!("{}-{name}", self.prefix);
        Arc::new(
            runtime()
                .block_on(options.connect_async(&server.url(), &name))
                .expect("connect"),
        )
    }
}

mod postgres {
    use super::*;

    fn on_the_server(check: fn(&dyn AsyncBackend)) {
        if PgServer::get().is_some() {
            check(&Postgres { prefix: prefix() });
        }
    }

    runtime_async_suite!(run = on_the_server);
}

/// Redis queues on the test binary's server, each check in a database of
/// its own: qless's job ids are global to a database, and the suite's
/// clock, years ahead, would expire other checks' completed jobs.
struct Redis {
    db: u32,
}

impl AsyncBackend for Redis {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn AsyncJobQueue> {
        let server = RedisServer::get().expect("checked by the test");
        let options = RedisOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()));
        Arc::new(
            runtime()
                .block_on(options.connect_async(&server.url(self.db), name))
                .expect("connect"),
        )
    }
}

mod redis {
    use super::*;

    fn on_the_server(check: fn(&dyn AsyncBackend)) {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        if RedisServer::get().is_some() {
            let db = (MADE.fetch_add(1, Ordering::Relaxed) % 64) as u32;
            check(&Redis { db });
        }
    }

    runtime_async_suite!(run = on_the_server);
}
