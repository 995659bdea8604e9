//! The worker runtime's checks (`tests/runtime_api/`) against PostgreSQL,
//! on a real throwaway server (`tests/pg/`). Without PostgreSQL installed
//! the tests say so and pass, except under `CI=true`, where they fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dque::jobs::{JobQueue, PgOptions};

#[macro_use]
mod jobs_api;
#[macro_use]
mod runtime_api;
mod child;
mod pg;
mod skip;
use jobs_api::{Backend, Settings};
use pg::PgServer;

/// Queues on the test binary's server, their names unique to this value.
struct Postgres {
    prefix: String,
}

impl Postgres {
    fn new() -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        Postgres {
            prefix: format!(
                "rt{}-{}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn open(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let server = PgServer::get().expect("checked by the test");
        let queue = PgOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
            .connect(&server.url(), &format!("{}-{name}", self.prefix))
            .expect("connect");
        Arc::new(queue)
    }
}

impl Backend for Postgres {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }
}

/// Runs a check of the suite on the server, if there is one (else the
/// skip line was printed).
fn on_the_server(check: fn(&dyn Backend)) {
    if PgServer::get().is_some() {
        check(&Postgres::new());
    }
}

mod suite {
    use super::*;
    runtime_suite!(run = on_the_server);
}

#[test]
fn a_worker_runs_from_a_postgres_address() {
    if let Some(server) = PgServer::get() {
        let queue = format!("{}-address", Postgres::new().prefix);
        runtime_api::a_worker_runs_from_an_address(&server.address(&queue));
    }
}

/// Pins the untested signal path on this backend: SIGTERM was tested on
/// the embedded queue only (server backends through the programmatic
/// stop). A worker process stopped by SIGTERM mid-job ends the job that
/// finishes within the grace, gives back the other uncounted, and no job
/// is lost or run twice.
#[test]
fn sigterm_mid_job_finishes_or_gives_back() {
    if child::run_as_child(runtime_api::sigterm_worker_process) {
        return;
    }
    if let Some(server) = PgServer::get() {
        let queue = format!("{}-sigterm", Postgres::new().prefix);
        runtime_api::sigterm_mid_job_finishes_or_gives_back(
            "sigterm_mid_job_finishes_or_gives_back",
            &server.address(&queue),
        );
    }
}
