//! `JobQueue::search` in the server: the filter as a `WHERE` clause over
//! the queue's rows (waiting ones in lease order, then dead letters in
//! the order they died), so no job leaves the server unless it matches
//! and no bound cuts the search short. No index answers a header, an id
//! prefix or a reason: the server reads the queue's rows of the states
//! looked in (the `qno` indexes narrow it to the queue and state).
//!
//! Each statement's text is fixed (an absent condition is a NULL or an
//! empty array), so the connection prepares it once.

use postgres::types::ToSql;

use super::errors::db;
use super::rows::{dead_of, waiting_of};
use super::{ms, Db, PgJobs, JOB_COLUMNS};
use crate::error::Result;
use crate::jobs::search::{Found, FoundJob, JobFilter, JobPlace, SearchState};
use crate::jobs::JobQueue;

/// The rows of a filter's headers: none of them may differ (a job
/// without the header has NULL there, which differs).
const HEADERS_MATCH: &str = "NOT EXISTS (
    SELECT 1 FROM unnest($H1::text[], $H2::text[]) AS f(n, v)
    WHERE header_values[array_position(header_names, f.n)] IS DISTINCT FROM f.v)";

/// The order of `waiting`: ready jobs first, in lease order, then the
/// rest by due time.
const WAITING_ORDER: &str =
    "(ready_at > $2), CASE WHEN ready_at <= $2 THEN priority END, ready_at, seq";

/// The order of ready jobs alone: the lease order, which the lease index
/// gives, so the server stops at the limit instead of sorting every live
/// row (2 s at 1 000 000 jobs).
const READY_ORDER: &str = "priority, ready_at, seq";

/// `$1` qno, `$2` now, `$3` the real time, `$4` the state (0 any waiting,
/// 1 ready, 2 leased, 3 scheduled, as `rows::waiting_of` tells them),
/// `$5`/`$6` header names and values, `$7` id prefix, `$8` limit.
fn waiting_sql(jobs: &str, order: &str) -> String {
    format!(
        "SELECT {JOB_COLUMNS}, lease_until FROM {jobs}
         WHERE qno = $1 AND state < 2
           AND CASE $4::int
                 WHEN 1 THEN ready_at <= $2 AND (lease_until IS NULL OR lease_until <= $3)
                 WHEN 2 THEN lease_until > $3
                 WHEN 3 THEN ready_at > $2 AND (lease_until IS NULL OR lease_until <= $3)
                 ELSE true END
           AND {headers}
           AND ($7::text IS NULL OR starts_with(id, $7))
         ORDER BY {order}
         LIMIT $8",
        headers = HEADERS_MATCH.replace("$H1", "$5").replace("$H2", "$6"),
    )
}

/// `$1` qno, `$2`/`$3` header names and values, `$4` id prefix, `$5`
/// reason text, `$6` limit.
fn dead_sql(jobs: &str) -> String {
    format!(
        "SELECT {JOB_COLUMNS}, reason FROM {jobs}
         WHERE qno = $1 AND state = 2
           AND {headers}
           AND ($4::text IS NULL OR starts_with(id, $4))
           AND ($5::text IS NULL OR strpos(coalesce(reason, ''), $5) > 0)
         ORDER BY died LIMIT $6",
        headers = HEADERS_MATCH.replace("$H1", "$2").replace("$H2", "$3"),
    )
}

/// The search: up to `max` matches; it reads every row of the states
/// looked in, so it is complete, and counts them as scanned.
pub(super) fn search(q: &PgJobs, filter: &JobFilter, max: usize) -> Result<Found> {
    let names: Vec<&str> = filter.headers.iter().map(|(n, _)| n.as_str()).collect();
    let values: Vec<&str> = filter.headers.iter().map(|(_, v)| v.as_str()).collect();
    let prefix = filter.id_prefix.as_deref();
    let limit = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let counts = q.counts()?;
    let mut found = Found {
        complete: true,
        ..Found::default()
    };
    let now = ms(q.now());
    let real_now = PgJobs::real_now_ms();
    if filter.reads_waiting() {
        let (state, scanned): (i32, u64) = match filter.state {
            SearchState::Ready => (1, counts.ready),
            SearchState::Leased => (2, counts.leased),
            SearchState::Scheduled => (3, counts.scheduled),
            _ => (0, counts.ready + counts.leased + counts.scheduled),
        };
        let params: [&(dyn ToSql + Sync); 8] = [
            &q.qno,
            &now,
            &real_now,
            &state,
            &names,
            &values,
            &prefix,
            &limit(max),
        ];
        let order = match state {
            1 => READY_ORDER,
            _ => WAITING_ORDER,
        };
        let rows = q
            .client()?
            .query(&waiting_sql(&q.tables.jobs, order), &params)
            .map_err(db)?;
        found.jobs = rows
            .iter()
            .map(|row| {
                let w = waiting_of(row, now, real_now);
                FoundJob {
                    job: w.job,
                    place: JobPlace::Waiting(w.state),
                }
            })
            .collect();
        found.scanned += scanned;
    }
    if filter.reads_dead() && found.jobs.len() < max {
        let reason = filter.reason.as_deref();
        let params: [&(dyn ToSql + Sync); 6] = [
            &q.qno,
            &names,
            &values,
            &prefix,
            &reason,
            &limit(max - found.jobs.len()),
        ];
        let rows = q
            .client()?
            .query(&dead_sql(&q.tables.jobs), &params)
            .map_err(db)?;
        found.jobs.extend(rows.iter().map(|row| {
            let d = dead_of(row);
            FoundJob {
                job: d.job,
                place: JobPlace::Dead(d.reason),
            }
        }));
        found.scanned += counts.dead;
    } else if filter.reads_dead() {
        // Stopped at `max` before the dead letters.
        found.complete = false;
    }
    Ok(found)
}
