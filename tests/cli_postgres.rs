//! The `dque` command on a PostgreSQL queue (`postgres://…#QUEUE`), on a
//! real throwaway server: push with the job flags, work, pop, peek, dead,
//! requeue and stats, as on a directory.

mod pg;
mod skip;
use pg::PgServer;

mod dque_cmd;
use dque_cmd::every_jobs_command_on;

#[test]
fn every_jobs_command_works_on_a_postgres_queue() {
    let Some(server) = PgServer::get() else {
        return;
    };
    let q = server.address(&format!("cli-{}", std::process::id()));
    every_jobs_command_on(&q);
}
