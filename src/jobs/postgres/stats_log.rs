//! The statistics' log: one row per counted event (a first lease's wait,
//! a run, a retry, a failure), inserted by the statement that made the
//! event, so a worker killed at any point loses none and counts none
//! twice. Handles merge the log into the daily rows (`stats`, `failures`)
//! about once a second, in one transaction; a read adds what is not
//! merged yet. Rows are only inserted by workers, so they never wait for
//! each other on a shared counter.

use std::collections::BTreeMap;
use std::time::Duration;

use postgres::Row;

use crate::jobs::stats::DayStats;

/// A first lease: `ms` is how long the job waited.
pub const WAIT: i16 = 0;
/// An ack: `ms` is how long the job ran.
pub const RUN: i16 = 1;
/// A nack that retries the job.
pub const RETRY: i16 = 2;
/// A job made a dead letter: `grp` is its failure group.
pub const FAILURE: i16 = 3;

/// An `INSERT` of one log row of `kind` for each row of `from` (a CTE, with
/// an optional `WHERE`); `[queue, day, ms, grp]` are SQL expressions.
pub fn insert(log: &str, kind: i16, [queue, day, ms, grp]: [&str; 4], from: &str) -> String {
    format!(
        "INSERT INTO {log} (queue, day, kind, ms, grp) \
         SELECT {queue}, {day}, {kind}::smallint, {ms}, {grp} FROM {from}"
    )
}

/// Adds a log row (`day, kind, ms, grp`) to `days`.
pub fn add(days: &mut BTreeMap<u64, DayStats>, row: &Row) {
    let day = row.get::<_, i64>(0).max(0) as u64;
    let kind: i16 = row.get(1);
    let ms = Duration::from_millis(row.get::<_, i64>(2).max(0) as u64);
    let stats = days.entry(day).or_insert_with(|| DayStats::new(day));
    match kind {
        WAIT => stats.wait.record(ms),
        RUN => stats.run.record(ms),
        RETRY => stats.retries += 1,
        FAILURE => {
            let group: Option<String> = row.get(3);
            *stats.failures.entry(group.unwrap_or_default()).or_default() += 1;
        }
        // A kind a newer dque logs: not this one's to count.
        _ => {}
    }
}
