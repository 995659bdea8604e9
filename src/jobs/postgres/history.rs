//! Completed jobs kept in their rows ([`KeepCompleted`]): an ack of a
//! handle that keeps them sets `state = 3` (completed), `started`,
//! `finished` and `worker` instead of deleting the row; the handle prunes
//! completed rows older than the time kept, or beyond the count, once a
//! second or every [`PRUNE_ACKS`] of its acks, whichever comes first, at
//! most [`PRUNE_BATCH`] rows a statement (a bounded cost, on the ack's
//! connection: a handle prunes at least as fast as it completes jobs). Every other statement names the states
//! it reads (0 waiting, 2 dead), so completed rows are in no count and no
//! listing. The lookup ([`JobInfo`]) is one statement for any state.
//!
//! Schema version 8 adds the columns and two indexes (`schema.rs`).

use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use postgres::Row;

use super::{counts, job_of, stats_log, Tables, JOB_COLUMNS};
use crate::jobs::clock::from_unix_ms;
use crate::jobs::history::{JobEvent, JobInfo, JobState, KeepCompleted};

/// The state of a completed row.
pub const COMPLETED: i16 = 3;

/// At most this many completed rows go in one pruning statement.
pub const PRUNE_BATCH: i64 = 1000;

/// How often a handle prunes...
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// ...or after this many of its acks: fewer than a prune's batch, so a
/// handle acking faster than [`PRUNE_BATCH`] a second is kept up with.
pub const PRUNE_ACKS: u32 = (PRUNE_BATCH / 2) as u32;

/// The statements of the history, their text made once per handle.
#[derive(Debug)]
pub struct HistorySql {
    /// As the hot ack, keeping the row: `$1` row, `$2` token, `$3` the
    /// real time, `$4` the queue's name, `$5` the day, `$6` the run time
    /// (ms), `$7` finished, `$8` started (Unix ms), `$9` the worker.
    pub ack_keep: String,
    /// Prunes rows finished before `$2` (`$1` the queue's number).
    pub prune_old: String,
    /// Prunes rows beyond the newest `$2` (`$1` the queue's number).
    pub prune_over: String,
    /// Job `$2` of queue `$1`: its live row, else its newest kept one,
    /// with `newer` the completed rows finished after it (at most `$3`,
    /// the count kept: a lookup applies the count before a prune does).
    pub job_info: String,
}

impl HistorySql {
    pub fn new(tables: &Tables) -> HistorySql {
        let jobs = &tables.jobs;
        // The run time is logged in the same statement, as the hot ack's;
        // the wait stays in the row (the reads of waits take live rows
        // only, `state = 0`) and goes with the log row.
        let ack_keep = format!(
            "WITH gone AS (
                 UPDATE {jobs} SET state = {COMPLETED}, finished = $7, started = $8,
                                   worker = $9, lease_until = NULL
                 WHERE seq = $1 AND state = 0 AND lease_token = $2 AND coalesce(lease_until, 0) > $3
                 RETURNING seq, qno, wait_day, wait_ms),
             logged AS ({log}){counted}
             SELECT count(*) FROM gone",
            log = stats_log::insert(
                &tables.log,
                stats_log::RUN,
                ["$4", "$5", "$6", "NULL"],
                "gone"
            ),
            counted = counts::counted_rows(tables.counts.as_deref(), "gone", counts::COMPLETED),
        );
        let prune = |pick: &str| {
            format!(
                "WITH pruned AS (
                     DELETE FROM {jobs} WHERE seq IN (
                         SELECT seq FROM {jobs} WHERE qno = $1 AND state = {COMPLETED} {pick}
                         LIMIT {PRUNE_BATCH})
                     RETURNING qno){counted}
                 SELECT count(*) FROM pruned",
                counted = counts::counted_rows(tables.counts.as_deref(), "pruned", counts::PRUNED),
            )
        };
        let columns = format!(
            "{JOB_COLUMNS}, state, lease_until, reason, started, finished, worker, \
             (state < 2) AS live"
        );
        HistorySql {
            ack_keep,
            prune_old: prune("AND finished < $2 ORDER BY finished"),
            prune_over: prune("ORDER BY finished DESC OFFSET $2"),
            job_info: format!(
                "(SELECT {columns}, 0::bigint AS newer FROM {jobs}
                  WHERE qno = $1 AND id = $2 AND state < 2)
                 UNION ALL
                 (SELECT {columns}, (SELECT count(*) FROM (
                      SELECT 1 FROM {jobs} c WHERE c.qno = $1 AND c.state = {COMPLETED}
                          AND c.finished > k.finished LIMIT $3) AS n) AS newer
                  FROM {jobs} k WHERE qno = $1 AND id = $2 AND state >= 2
                  ORDER BY seq DESC LIMIT 1)
                 LIMIT 1"
            ),
        }
    }
}

/// When a handle prunes next.
#[derive(Debug)]
pub struct Pruning {
    pub keep: KeepCompleted,
    /// When the last prune ran, and the acks since.
    at: Mutex<(Instant, u32)>,
}

impl Pruning {
    pub fn new(keep: KeepCompleted) -> Pruning {
        Pruning {
            keep,
            at: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Called once an ack: whether a prune is due now (a second since
    /// the last, or [`PRUNE_ACKS`] acks; then both start again).
    pub fn due(&self) -> bool {
        let mut at = self.at.lock();
        at.1 += 1;
        let due = at.1 >= PRUNE_ACKS || at.0.elapsed() >= PRUNE_EVERY;
        if due {
            *at = (Instant::now(), 0);
        }
        due
    }

    /// The first finish time kept at `now_ms`.
    pub fn cutoff(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(i64::try_from(self.keep.for_time().as_millis()).unwrap_or(i64::MAX))
    }

    /// The count kept, as a statement's parameter.
    pub fn count(&self) -> i64 {
        i64::try_from(self.keep.count()).unwrap_or(i64::MAX)
    }
}

/// The row of `job_info`, read at `now` (the queue's clock, ms) and
/// `real_now` (the real time, ms): `None` for a completed row past the
/// time kept.
pub fn info_of(row: &Row, queue: &str, keep: &Pruning, now: i64, real_now: i64) -> Option<JobInfo> {
    let state: i16 = row.get("state");
    let ready: i64 = row.get("ready_at");
    let until: Option<i64> = row.get("lease_until");
    let time = |column: &str| {
        row.get::<_, Option<i64>>(column)
            .map(|ms| from_unix_ms(ms.max(0) as u64))
    };
    let (state, due_at) = match state {
        0 if until.is_some_and(|u| u > real_now) => (JobState::Leased, None),
        0 if ready > now => (JobState::Scheduled, Some(from_unix_ms(ready as u64))),
        0 => (JobState::Ready, None),
        2 => (JobState::Dead, None),
        _ => (JobState::Completed, None),
    };
    let finished: Option<i64> = row.get("finished");
    let newer: i64 = row.get("newer");
    if state == JobState::Completed
        && (finished.is_some_and(|f| f < keep.cutoff(now)) || newer >= keep.count())
    {
        return None;
    }
    let mut info = JobInfo::bare(job_of(row), queue, state);
    info.due_at = due_at;
    info.started_at = time("started");
    info.finished_at = time("finished");
    info.worker = row.get("worker");
    info.last_error = row.get("reason");
    if let Some(at) = info.started_at {
        info.history
            .push(event(at, "leased", info.worker.clone(), None));
    }
    // A dead row keeps no time of death: `last_error` says why.
    if state == JobState::Completed {
        let at = info.finished_at.unwrap_or(SystemTime::UNIX_EPOCH);
        info.history
            .push(event(at, "completed", info.worker.clone(), None));
    }
    Some(info)
}

fn event(at: SystemTime, what: &str, worker: Option<String>, detail: Option<String>) -> JobEvent {
    JobEvent {
        worker,
        detail,
        ..JobEvent::new(at, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bug pinned: a prune was due once a second only, at most
    // `PRUNE_BATCH` rows of each kind, so a handle acking faster left
    // completed rows faster than it pruned them (the table grew without
    // bound). Every `PRUNE_ACKS` acks is due too, whatever the time.
    #[test]
    fn a_prune_is_due_every_few_hundred_acks_whatever_the_time() {
        let pruning = Pruning::new(KeepCompleted::DEFAULT);
        for round in 0..3 {
            let dues = (0..PRUNE_ACKS).filter(|_| pruning.due()).count();
            assert!(dues >= 1, "round {round}: {PRUNE_ACKS} acks, no prune");
        }
        assert!(PRUNE_ACKS as i64 <= PRUNE_BATCH, "a prune keeps up");
    }
}
