//! The statistics' log: one row per counted event (a run, a retry, a
//! failure, a wait), inserted by the statement that made the event, so a
//! worker killed at any point loses none and counts none twice. A job's
//! wait (enqueue to first lease) is kept in its row by the lease (a HOT
//! update, no insert) and rides on the row of the event that settles the
//! attempt (`wait_day`, `wait_ms`); until then reads take it from the
//! job's row. Handles merge the log into the daily rows (`stats`, `failures`)
//! about once a second, in one transaction; a read adds what is not
//! merged yet. Rows are only inserted by workers, so they never wait for
//! each other on a shared counter.

use std::collections::BTreeMap;
use std::time::Duration;

use postgres::Row;

use crate::jobs::stats::DayStats;

/// A wait alone (written by older versions): `ms` is how long the job
/// waited.
pub const WAIT: i16 = 0;
/// An ack: `ms` is how long the job ran.
pub const RUN: i16 = 1;
/// A nack that retries the job.
pub const RETRY: i16 = 2;
/// A job made a dead letter: `grp` is its failure group.
pub const FAILURE: i16 = 3;

/// The columns a log row is read with, in [`add`]'s order.
pub const COLUMNS: &str = "day, kind, ms, grp, wait_day, wait_ms";

/// An `INSERT` of one log row of `kind` for each row of `from` (a CTE, with
/// an optional `WHERE`, whose `wait_day` and `wait_ms` are the wait the
/// event carries, if any); `[queue, day, ms, grp]` are SQL expressions.
pub fn insert(log: &str, kind: i16, [queue, day, ms, grp]: [&str; 4], from: &str) -> String {
    format!(
        "INSERT INTO {log} (queue, day, kind, ms, grp, wait_day, wait_ms) \
         SELECT {queue}, {day}, {kind}::smallint, {ms}, {grp}, wait_day, wait_ms FROM {from}"
    )
}

/// Adds a wait of `ms` milliseconds on `day` to `days`.
fn add_wait(days: &mut BTreeMap<u64, DayStats>, day: i64, ms: i64) {
    let day = day.max(0) as u64;
    let ms = Duration::from_millis(ms.max(0) as u64);
    days.entry(day)
        .or_insert_with(|| DayStats::new(day))
        .wait
        .record(ms);
}

/// Adds a log row ([`COLUMNS`]) to `days`.
pub fn add(days: &mut BTreeMap<u64, DayStats>, row: &Row) {
    if let (Some(day), Some(ms)) = (row.get::<_, Option<i64>>(4), row.get::<_, Option<i64>>(5)) {
        add_wait(days, day, ms);
    }
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
        // A row carrying only a wait (a live job's, read by `stats`), or a
        // kind a newer dque logs: nothing more to count.
        _ => {}
    }
}
