//! The text of every statement off the hot path (the hot ones are
//! `Hot`'s), made once per handle from the schema's table names: the
//! blocking handle (`PgJobs`) and the async one (`AsyncPgJobs`) run the
//! same statements with the same parameters, so the SQL is written once.

use super::{counts, stats_log, Tables, JOB_COLUMNS};

/// Notifies `$1` (the channel) with `$2` (the queue's name).
pub const NOTIFY: &str = "SELECT pg_notify($1, $2)";

/// One merger of a queue's statistics at a time (`$1` the log table,
/// `$2` the queue): true for the one that got the lock.
pub const MERGE_LOCK: &str =
    "SELECT pg_try_advisory_xact_lock(hashtext('dque stats ' || $1 || ' ' || $2))";

/// The statements, with their parameters (`$n`) said beside each.
#[derive(Debug)]
pub struct Statements {
    /// Hands back leases (`$1` rows, `$2` tokens), their attempts counted.
    pub hand_back: String,
    /// Extends a lease: `$1` row, `$2` token, `$3` the real time, `$4` the
    /// new end. Executes: the rows changed (0: the lease is lost).
    pub touch: String,
    /// Gives a leased job back uncounted: `$1`, `$2`, `$3` as `touch`.
    pub release: String,
    /// Gives a leased job back uncounted, ready at `$4` (ms), after the
    /// jobs scheduled for that time before it (a snooze): `$1`, `$2`, `$3`
    /// as `touch`.
    pub snooze: String,
    /// A nack retrying at once, in place: `$1`, `$2`, `$3` as `touch`,
    /// `$4` the queue's name, `$5` the day; one row: the count changed.
    pub nack_now: String,
    /// A nack retrying later: as `nack_now`, with `$4` the due time (ms),
    /// `$5` the queue's name, `$6` the day.
    pub nack_later: String,
    /// Whether a lease still holds: `$1` row, `$2` token, `$3` the real time.
    pub held: String,
    /// Makes a leased row a dead letter: `$1` row, `$2` token, `$3` the
    /// message, `$4` the queue's name, `$5` the day, `$6` the failure
    /// group; one row: the count buried.
    pub bury: String,
    /// `$1` the queue's name: the log rows, deleted ([`stats_log::COLUMNS`]).
    pub merge_take: String,
    /// Adds a day's sums (`$1` queue, `$2` day, then the wait's and the
    /// run's count, sum, sum of squares, histogram, and the retries).
    pub merge_day: String,
    /// Adds a day's failures of a group: `$1` queue, `$2` day, `$3` group,
    /// `$4` count.
    pub merge_failure: String,
    /// `$1` qno, `$2` id, `$3` priority, `$4` the time, `$5` the real time.
    pub set_priority: String,
    /// `$1` qno, `$2` id, `$3` the time, `$4` the real time: the count of
    /// waiting jobs `id` (made ready by `$3` if scheduled later).
    pub run_now: String,
    /// `$1` qno, `$2` id: the lease end of the live job `id`, if any.
    pub find_live: String,
    /// `$1` qno, `$2` id, `$3` the real time, `$4` the queue's name; one
    /// row: the count removed.
    pub cancel: String,
    /// `$1` qno, `$2` the time, `$3` the limit: waiting rows
    /// ([`JOB_COLUMNS`], `lease_until`).
    pub waiting: String,
    /// `$1` qno, `$2` the limit: dead rows ([`JOB_COLUMNS`], `reason`).
    pub dead: String,
    /// `$1` qno, `$2` id, `$3` the time. One row: the count requeued.
    pub requeue_dead: String,
    /// `$1` qno, `$2` the time, `$3` the real time: ready, scheduled,
    /// leased, dead.
    pub counts: String,
    /// `$1` the queue's name: the daily rows.
    pub stats_days: String,
    /// `$1` the queue's name: day, group, count.
    pub stats_failures: String,
    /// `$1` the queue's name, `$2` qno: the log not merged yet and the
    /// waits kept in live rows ([`stats_log::COLUMNS`]).
    pub stats_unmerged: String,
    /// `$1` qno: folds the rows counted apart (`counts::fold`); none if
    /// the handle keeps no counts.
    pub fold_counts: Option<String>,
}

/// An update of a leased row that holds only while the lease does (`$1`
/// row, `$2` token, `$3` the real time; the test written so that the row
/// is found by its key, not by `jobs_held`: `counts.rs`); with `retry_log` (`$queue`,
/// `$day` parameter numbers), a retry is logged in the same statement and
/// the statement returns the count changed.
fn on_lease(tables: &Tables, set: &str, retry_log: Option<(usize, usize)>) -> String {
    let jobs = &tables.jobs;
    let update = format!(
        "UPDATE {jobs} SET {set} WHERE seq = $1 AND state = 0 AND lease_token = $2 \
         AND coalesce(lease_until, 0) > $3"
    );
    let Some((queue_at, day_at)) = retry_log else {
        return update;
    };
    // The wait kept in the row goes with the retry's log row (`old`
    // reads it before the update; it is only written by a lease, which
    // would have changed the token).
    format!(
        "WITH old AS (
             SELECT wait_day, wait_ms FROM {jobs} WHERE seq = $1 AND state = 0
                 AND lease_token = $2 AND coalesce(lease_until, 0) > $3),
         done AS ({cleared} RETURNING seq),
         logged AS ({log})
         SELECT count(*) FROM done",
        cleared = update.replacen(
            " WHERE seq = $1",
            ", wait_day = NULL, wait_ms = NULL WHERE seq = $1",
            1
        ),
        log = stats_log::insert(
            &tables.log,
            stats_log::RETRY,
            [&format!("${queue_at}"), &format!("${day_at}"), "0", "NULL"],
            "done, old"
        )
    )
}

impl Statements {
    pub fn new(tables: &Tables) -> Statements {
        let jobs = &tables.jobs;
        let counted = tables.counts.as_deref();
        let add = |column: &str| {
            format!(
                "{column} = {stats}.{column} + EXCLUDED.{column}",
                stats = tables.stats
            )
        };
        let add_hist = |column: &str| {
            format!(
                "{column} = ARRAY(SELECT a + b FROM unnest({stats}.{column}, EXCLUDED.{column}) AS t(a, b))",
                stats = tables.stats
            )
        };
        // In place (its ready time and order kept) when at once; else ready
        // then, after the jobs scheduled for that time before it.
        let later = format!(
            "lease_until = NULL, lease_token = NULL, ready_at = $4, \
             seq = nextval(pg_get_serial_sequence('{jobs}', 'seq'))"
        );
        Statements {
            hand_back: format!(
                "UPDATE {jobs} j SET lease_until = NULL, lease_token = NULL
                 FROM unnest($1::bigint[], $2::bigint[]) AS h(seq, token)
                 WHERE j.seq = h.seq AND j.state = 0 AND j.lease_token = h.token"
            ),
            touch: on_lease(tables, "lease_until = $4", None),
            release: on_lease(
                tables,
                "attempts = attempts - 1, lease_until = NULL, lease_token = NULL",
                None,
            ),
            snooze: on_lease(
                tables,
                &format!(
                    "attempts = attempts - 1, lease_until = NULL, lease_token = NULL, \
                     ready_at = $4, seq = nextval(pg_get_serial_sequence('{jobs}', 'seq'))"
                ),
                None,
            ),
            nack_now: on_lease(tables, "lease_until = NULL, lease_token = NULL", Some((4, 5))),
            nack_later: on_lease(tables, &later, Some((5, 6))),
            held: format!(
                "SELECT 1 FROM {jobs} WHERE seq = $1 AND state = 0 AND lease_token = $2 \
                 AND coalesce(lease_until, 0) > $3"
            ),
            // The failure is logged in the same statement, under the group
            // of its reason (the message may add to it), with the wait kept
            // in the row if this was its first attempt (the row keeps it,
            // dead rows are not read for waits; `requeue_dead` clears it).
            bury: format!(
                "WITH buried AS (
                     UPDATE {jobs} SET state = 2, reason = $3, died = nextval('{deaths}'),
                         lease_until = NULL, lease_token = NULL
                     WHERE seq = $1 AND state = 0 AND lease_token = $2
                     RETURNING seq, qno, wait_day, wait_ms),
                 logged AS ({log}){counted}
                 SELECT count(*) FROM buried",
                deaths = tables.deaths,
                counted = counts::counted_rows(counted, "buried", counts::BURIED),
                log = stats_log::insert(
                    &tables.log,
                    stats_log::FAILURE,
                    ["$4", "$5", "0", "$6"],
                    "buried"
                ),
            ),
            merge_take: format!(
                "DELETE FROM {log} WHERE queue = $1 RETURNING {columns}",
                log = tables.log,
                columns = stats_log::COLUMNS
            ),
            merge_day: format!(
                "INSERT INTO {stats} (queue, day, wait_count, wait_sum, wait_sumsq, wait_hist,
                                      run_count, run_sum, run_sumsq, run_hist, retries)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (queue, day) DO UPDATE SET {}, {}, {}, {}, {}, {}, {}, {}, {}",
                add("wait_count"),
                add("wait_sum"),
                add("wait_sumsq"),
                add_hist("wait_hist"),
                add("run_count"),
                add("run_sum"),
                add("run_sumsq"),
                add_hist("run_hist"),
                add("retries"),
                stats = tables.stats,
            ),
            merge_failure: format!(
                "INSERT INTO {failures} (queue, day, grp, count) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (queue, day, grp) DO UPDATE SET count = {failures}.count + EXCLUDED.count",
                failures = tables.failures
            ),
            // A ready job goes to the end of its new priority, as if
            // enqueued now; a scheduled one keeps its due time. Unchanged:
            // no move.
            set_priority: format!(
                "UPDATE {jobs} SET priority = $3,
                     ready_at = CASE WHEN ready_at <= $4 THEN $4 ELSE ready_at END,
                     seq = nextval(pg_get_serial_sequence('{jobs}', 'seq'))
                 WHERE qno = $1 AND id = $2 AND state = 0 AND priority <> $3
                   AND (lease_until IS NULL OR lease_until <= $5)"
            ),
            // A scheduled job is due now, at the end of its priority's due
            // jobs (as one falling due); a ready one keeps its place, and a
            // leased one (its lease ahead) is not waiting.
            run_now: format!(
                "UPDATE {jobs} SET ready_at = LEAST(ready_at, $3)
                 WHERE qno = $1 AND id = $2 AND state = 0
                   AND (lease_until IS NULL OR lease_until <= $4)"
            ),
            find_live: format!(
                "SELECT lease_until FROM {jobs} WHERE qno = $1 AND id = $2 AND state < 2"
            ),
            // A job whose worker died keeps its first lease's wait in the
            // row: logged by the same statement.
            cancel: format!(
                "WITH gone AS (
                     DELETE FROM {jobs} WHERE qno = $1 AND id = $2 AND
                         state = 0 AND (lease_until IS NULL OR lease_until <= $3)
                     RETURNING qno, wait_day, wait_ms),
                 {freed},
                 logged AS ({log}){counted}
                 SELECT count(*) FROM gone",
                freed = super::unique::freed_by_cancel(&tables.unique),
                counted = counts::counted_rows(counted, "gone", counts::REMOVED),
                log = stats_log::insert(
                    &tables.log,
                    stats_log::WAIT,
                    ["$4", "d", "m", "NULL"],
                    "(SELECT wait_day AS d, wait_ms AS m, NULL::bigint AS wait_day, \
                      NULL::bigint AS wait_ms FROM gone WHERE wait_ms IS NOT NULL) w"
                ),
            ),
            // The ready (and leased) rows in lease order, which the lease
            // index gives (an ORDER BY of both parts at once sorted every
            // live row: 0.2 s a page at 100 000 jobs); the scheduled ones
            // by due time (the lease index walked a priority at a time:
            // `search::scheduled_rows`) only when those run short (the outer LIMIT stops
            // pulling from the Append at $3 rows, and a non-parallel
            // Append gives its parts in order).
            waiting: format!(
                "SELECT * FROM (
                     (SELECT {JOB_COLUMNS}, lease_until FROM {jobs}
                      WHERE qno = $1 AND state < 2 AND ready_at <= $2
                      ORDER BY priority, ready_at, seq LIMIT $3)
                     UNION ALL
                     ({scheduled})
                 ) listed LIMIT $3",
                scheduled = super::search::scheduled_rows(
                    jobs,
                    &format!("{JOB_COLUMNS}, lease_until"),
                    "",
                    "$3"
                )
                .replace("$qno::int", "$1")
                .replace("$now::bigint", "$2"),
            ),
            dead: format!(
                "SELECT {JOB_COLUMNS}, reason FROM {jobs} WHERE qno = $1 AND state = 2
                 ORDER BY died LIMIT $2"
            ),
            requeue_dead: format!(
                "WITH requeued AS (
                     UPDATE {jobs} SET state = 0, attempts = 0, ready_at = $3, reason = NULL,
                         died = NULL, wait_day = NULL, wait_ms = NULL,
                         seq = nextval(pg_get_serial_sequence('{jobs}', 'seq'))
                     WHERE seq = (SELECT seq FROM {jobs} WHERE qno = $1 AND id = $2 AND state = 2
                                  ORDER BY died LIMIT 1)
                     RETURNING qno){counted}
                 SELECT count(*) FROM requeued",
                counted = counts::counted_rows(counted, "requeued", counts::REQUEUED),
            ),
            fold_counts: counted.map(counts::fold),
            counts: match counted {
                Some(kept) => counts::read(jobs, kept),
                None => counts::read_all(jobs),
            },
            stats_days: format!(
                "SELECT day, wait_count, wait_sum, wait_sumsq, wait_hist,
                        run_count, run_sum, run_sumsq, run_hist, retries
                 FROM {stats} WHERE queue = $1 ORDER BY day",
                stats = tables.stats
            ),
            stats_failures: format!(
                "SELECT day, grp, count FROM {failures} WHERE queue = $1",
                failures = tables.failures
            ),
            // With the log not merged yet (a read writes nothing), and the
            // waits still kept in live rows (attempts not settled yet), in
            // one statement: a wait moving from a row to the log is seen
            // once.
            stats_unmerged: format!(
                "SELECT {columns} FROM {log} WHERE queue = $1
                 UNION ALL
                 SELECT wait_day, -1::smallint, 0::bigint, NULL::text, wait_day, wait_ms
                 FROM {jobs} WHERE qno = $2 AND state = 0 AND wait_ms IS NOT NULL
                   AND (lease_until IS NOT NULL OR wait_ms IS NOT NULL)",
                log = tables.log,
                columns = stats_log::COLUMNS
            ),
        }
    }
}
