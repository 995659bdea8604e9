//! Who holds what on PostgreSQL ([`JobQueue::leases`](crate::jobs::JobQueue::leases)):
//! a leased row keeps its worker's name and its lease's start (`worker`,
//! `started`, set by the lease statement) beside its end (`lease_until`).
//! The listing reads the index of leased rows (`jobs_held`, schema 9),
//! in the order of their ends.

use postgres::Row;

use super::{job_of, Tables, JOB_COLUMNS};
use crate::jobs::clock::from_unix_ms;
use crate::jobs::LeaseInfo;

/// The rows leased now (`$1` the queue's number, `$2` the real time in
/// ms, `$3` the most), soonest-ending first.
pub(super) fn leases(tables: &Tables) -> String {
    format!(
        "SELECT {JOB_COLUMNS}, started, lease_until, worker FROM {jobs}
         WHERE qno = $1 AND state = 0 AND lease_until > $2
         ORDER BY lease_until, seq LIMIT $3",
        jobs = tables.jobs
    )
}

/// A row of [`leases`].
pub(super) fn lease_of(row: &Row) -> LeaseInfo {
    let time = |column: &str| {
        row.get::<_, Option<i64>>(column)
            .map(|ms| from_unix_ms(ms.max(0) as u64))
    };
    let mut info = LeaseInfo::of_job(job_of(row));
    info.worker = row.get("worker");
    info.since = time("started");
    info.until = time("lease_until");
    info
}
