//! What the rows of [`Statements`](super::statements::Statements)' reads
//! mean, and what their outcomes say: one reading for the blocking and the
//! async handle.

use std::collections::BTreeMap;

use postgres::Row;

use super::errors::sent;
use super::{job_of, stats_log};
use crate::error::{Error, Result};
use crate::jobs::clock::from_unix_ms;
use crate::jobs::job::{DeadJob, WaitState, Waiting};
use crate::jobs::stats::{Counts, DayStats, Histogram, Timing};

/// A row of `waiting`, at the time `now` and the real time `real_now` (ms).
pub fn waiting_of(row: &Row, now: i64, real_now: i64) -> Waiting {
    let ready: i64 = row.get("ready_at");
    let until: Option<i64> = row.get("lease_until");
    let state = if until.is_some_and(|u| u > real_now) {
        WaitState::Leased
    } else if ready > now {
        WaitState::Scheduled(from_unix_ms(ready as u64))
    } else {
        WaitState::Ready
    };
    Waiting {
        job: job_of(row),
        state,
    }
}

/// A row of `dead`.
pub fn dead_of(row: &Row) -> DeadJob {
    DeadJob {
        job: job_of(row),
        reason: row.get::<_, Option<String>>("reason").unwrap_or_default(),
    }
}

/// The row of `counts`.
pub fn counts_of(row: &Row) -> Counts {
    let count = |i: usize| row.get::<_, i64>(i).max(0) as u64;
    Counts {
        ready: count(0),
        scheduled: count(1),
        leased: count(2),
        dead: count(3),
    }
}

/// What `requeue_dead`'s execution says about dead letter `id`.
pub fn requeued(outcome: Result<u64, postgres::Error>, id: &str) -> Result<()> {
    match outcome {
        Ok(0) => Err(Error::NoSuchJob { id: id.to_owned() }),
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Err(Error::InvalidJob {
                reason: format!("a job with id {id:?} is queued again already"),
            })
        }
        Err(e) => Err(sent(e)),
    }
}

/// The answer for a job `id` that no row matched, from `find_live`'s row:
/// `JobLeased` if a worker holds it, `NoSuchJob` if there is none, else
/// `Ok` (waiting, and already as asked).
pub fn missing_or_leased(found: Option<Row>, id: &str, real_now: i64) -> Result<()> {
    missing_or_leased_at(found.as_ref(), 0, id, real_now)
}

/// As [`missing_or_leased`], the lease's end in column `at` of the row.
pub fn missing_or_leased_at(found: Option<&Row>, at: usize, id: &str, real_now: i64) -> Result<()> {
    match found {
        Some(row)
            if row
                .get::<_, Option<i64>>(at)
                .is_some_and(|until| until > real_now) =>
        {
            Err(Error::JobLeased { id: id.to_owned() })
        }
        // Found waiting: its priority is unchanged already.
        Some(_) => Ok(()),
        None => Err(Error::NoSuchJob { id: id.to_owned() }),
    }
}

/// The days of the statistics from the rows of `stats_days`,
/// `stats_failures` and `stats_unmerged`, in day order.
pub fn days_of(days: &[Row], failures: &[Row], unmerged: &[Row]) -> Vec<DayStats> {
    let mut days: Vec<DayStats> = days.iter().map(day_of_row).collect();
    for row in failures {
        let day = row.get::<_, i64>(0).max(0) as u64;
        let at = match days.iter().position(|d| d.day == day) {
            Some(at) => at,
            None => {
                days.push(DayStats::new(day));
                days.sort_by_key(|d| d.day);
                days.iter().position(|d| d.day == day).expect("just added")
            }
        };
        days[at]
            .failures
            .insert(row.get(1), row.get::<_, i64>(2).max(0) as u64);
    }
    let mut logged = BTreeMap::new();
    for row in unmerged {
        stats_log::add(&mut logged, row);
    }
    for (day, stats) in logged {
        match days.iter_mut().find(|d| d.day == day) {
            Some(known) => known.merge(&stats),
            None => days.push(stats),
        }
    }
    days.sort_by_key(|d| d.day);
    days
}

/// A daily row of `stats_days`.
fn day_of_row(row: &Row) -> DayStats {
    let timing = |count: &str, sum: &str, sumsq: &str, hist: &str| {
        let count: i64 = row.get(count);
        let sum: f64 = row.get(sum);
        let sumsq: f64 = row.get(sumsq);
        let buckets: Vec<i64> = row.get(hist);
        let n = count.max(0) as u64;
        let mean = if n > 0 { sum / n as f64 } else { 0.0 };
        Timing {
            count: n,
            mean,
            sum_squares: if n > 0 {
                (sumsq - sum * mean).max(0.0)
            } else {
                0.0
            },
            histogram: Histogram {
                buckets: buckets.into_iter().map(|b| b.max(0) as u64).collect(),
            },
        }
    };
    DayStats {
        day: row.get::<_, i64>("day").max(0) as u64,
        wait: timing("wait_count", "wait_sum", "wait_sumsq", "wait_hist"),
        run: timing("run_count", "run_sum", "run_sumsq", "run_hist"),
        failures: Default::default(),
        retries: row.get::<_, i64>("retries").max(0) as u64,
    }
}
