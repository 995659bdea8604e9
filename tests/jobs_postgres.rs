//! The Jobs API suite (`tests/jobs_api/`) against PostgreSQL, on a real
//! throwaway server (`tests/pg/`), and what only this backend does.
//! Without PostgreSQL installed the tests say so and pass, except under
//! `CI=true`, where they fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dque::jobs::{JobQueue, PgOptions};

#[macro_use]
mod jobs_api;
mod pg;
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
                "t{}-{}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn options(settings: &Settings) -> PgOptions {
        PgOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn open(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let server = PgServer::get().expect("checked by the test");
        let queue = Self::options(settings)
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

/// Runs `check` if a server is there (else the skip line was printed).
fn with_server(check: impl FnOnce(&Postgres)) {
    if PgServer::get().is_some() {
        check(&Postgres::new());
    }
}

mod suite {
    use super::*;

    macro_rules! pg_suite {
        ($($check:ident),* $(,)?) => {
            $(
                #[test]
                fn $check() {
                    with_server(|backend| jobs_api::$check(backend));
                }
            )*
        };
    }

    pg_suite!(
        smaller_priority_first_and_fifo_within,
        scheduled_jobs_wait_for_their_time_in_due_order,
        a_due_job_keeps_its_place_among_equal_priorities,
        headers_and_bodies_come_back_as_given,
        bad_ids_and_headers_are_refused_and_add_nothing,
        a_caller_id_is_not_enqueued_twice_while_waiting_or_leased,
        nack_backs_off_then_dead_letters_after_the_last_attempt,
        nack_without_delay_retries_in_place,
        release_does_not_count_an_attempt,
        fail_dead_letters_at_once_and_requeue_starts_over,
        priority_of_a_waiting_job_can_change,
        cancel_removes_a_waiting_job_only,
        waiting_lists_ready_then_scheduled,
        counts_and_statistics_follow_the_jobs,
        a_lease_is_settled_only_by_its_queue,
        jobs_survive_a_restart_in_order,
        batches_keep_order_and_groups,
        queue_sets_lease_in_order_or_round_robin,
        a_blocked_lease_wakes_for_an_enqueue,
        a_blocked_lease_wakes_when_a_job_falls_due,
    );
}
