//! Concurrency limits and pause on PostgreSQL (issue 27).
//!
//! `queues.paused` and the queue's rows in `limits` are read by every
//! lease's statement: while it is paused or has a limit it leases nothing, and the
//! handle calls `lease_limited`, a function that returns nothing for a
//! paused queue and otherwise, under a transaction-scoped advisory lock
//! of the queue, leases the first ready job whose limits all have room.
//! The lock makes limited leases of a queue one at a time; the function's
//! statements (PL/pgSQL, READ COMMITTED) each see what the lease before
//! committed, so no limit is ever taken past its maximum. A limit's
//! holders are its jobs' rows leased now: an ack, nack, fail or release
//! ends a hold with the lease, and so does a lease that runs out (a
//! worker that died), with nothing else to mend.
//!
//! Costs: a lease of a queue with neither pays a probe of `queues` and
//! one of `limits`' primary key in its statement, and a lease that finds nothing one more statement (the
//! function, which looks at `queues` and returns). A limited lease reads
//! the queue's leased jobs with headers once, to count the holders.

use postgres::Row;

use super::Tables;
use crate::jobs::limits::{check_limit_name, check_max, Limit};

/// Migration 4 → 5 (`{s}`: the schema, quoted). `job_limits` names each
/// limit once (`a,a` is `{a}`): a job holds a limit once, as on every
/// backend.
pub(super) const MIGRATION: &str = "\
ALTER TABLE {s}.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;
CREATE TABLE {s}.limits (
    qno integer NOT NULL,
    name text NOT NULL,
    max integer NOT NULL,
    PRIMARY KEY (qno, name)
);
CREATE FUNCTION {s}.job_limits(names text[], vals text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $f$
    SELECT coalesce(array_agg(DISTINCT btrim(x)) FILTER (WHERE btrim(x) <> ''), '{}')
    FROM unnest(string_to_array(vals[array_position(names, 'limits')], ',')) AS x
$f$;
CREATE FUNCTION {s}.lease_limited(p_qno integer, p_now bigint, p_real bigint,
                                  p_lease bigint, p_day bigint)
RETURNS SETOF {s}.jobs LANGUAGE plpgsql AS $f$
BEGIN
    IF coalesce((SELECT paused FROM {s}.queues WHERE qno = p_qno), false)
       OR NOT EXISTS (SELECT 1 FROM {s}.limits WHERE qno = p_qno) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('dque limits'), p_qno);
    RETURN QUERY
    WITH held AS (
        SELECT x AS name, count(*) AS n
        FROM {s}.jobs h, unnest({s}.job_limits(h.header_names, h.header_values)) AS x
        WHERE h.qno = p_qno AND h.state = 0 AND h.header_names IS NOT NULL
          AND h.lease_until > p_real
        GROUP BY x),
    full_limits AS (
        SELECT coalesce(array_agg(l.name), '{}') AS names
        FROM {s}.limits l LEFT JOIN held ON held.name = l.name
        WHERE l.qno = p_qno AND coalesce(held.n, 0) >= l.max)
    UPDATE {s}.jobs j
        SET attempts = j.attempts + 1, lease_until = p_real + p_lease,
            lease_token = nextval('{s}.lease_tokens'),
            wait_day = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL
                            THEN p_day ELSE j.wait_day END,
            wait_ms = CASE WHEN j.attempts = 0 AND j.wait_ms IS NULL
                           THEN GREATEST(p_now - j.ready_at, 0) ELSE j.wait_ms END
        WHERE j.seq = (
            SELECT c.seq FROM {s}.jobs c, full_limits f
            WHERE c.qno = p_qno AND c.state = 0 AND c.ready_at <= p_now
              AND (c.lease_until IS NULL OR c.lease_until <= p_real)
              AND (c.header_names IS NULL
                   OR NOT ({s}.job_limits(c.header_names, c.header_values) && f.names))
            ORDER BY c.priority, c.ready_at, c.seq
            LIMIT 1
            FOR UPDATE OF c SKIP LOCKED)
        RETURNING j.*;
END
$f$;";

/// The schema of `tables`, quoted.
pub(super) fn schema(tables: &Tables) -> &str {
    tables
        .queues
        .strip_suffix(".queues")
        .expect("the queues table is in the schema")
}

/// One limited lease: `$1` the queue's number, `$2` the clock's now and
/// `$3` the real now (ms), `$4` the lease time (ms), `$5` the day.
pub(super) fn lease(tables: &Tables) -> String {
    format!(
        "SELECT * FROM {}.lease_limited($1, $2, $3, $4, $5)",
        schema(tables)
    )
}

/// Sets the pause (`$1` the queue's number, `$2` paused).
pub(super) fn pause(tables: &Tables) -> String {
    format!("UPDATE {} SET paused = $2 WHERE qno = $1", tables.queues)
}

/// Whether the queue is paused (`$1` its number): one row.
pub(super) fn paused(tables: &Tables) -> String {
    format!(
        "SELECT coalesce((SELECT paused FROM {} WHERE qno = $1), false)",
        tables.queues
    )
}

/// Sets limit `$2` of queue `$1` to `$3`.
pub(super) fn set(tables: &Tables) -> String {
    let s = schema(tables);
    format!(
        "INSERT INTO {s}.limits (qno, name, max) VALUES ($1, $2, $3)
         ON CONFLICT (qno, name) DO UPDATE SET max = EXCLUDED.max"
    )
}

/// Removes limit `$2` of queue `$1`: one row, whether it was set.
pub(super) fn remove(tables: &Tables) -> String {
    let s = schema(tables);
    format!(
        "WITH gone AS (DELETE FROM {s}.limits WHERE qno = $1 AND name = $2 RETURNING 1)
         SELECT count(*) > 0 FROM gone"
    )
}

/// The limits of queue `$1` with their holders at real time `$2`.
pub(super) fn list(tables: &Tables) -> String {
    let s = schema(tables);
    format!(
        "SELECT l.name, l.max, (
             SELECT count(*) FROM {s}.jobs h
             WHERE h.qno = $1 AND h.state = 0 AND h.header_names IS NOT NULL
               AND h.lease_until > $2
               AND l.name = ANY({s}.job_limits(h.header_names, h.header_values))) AS running
         FROM {s}.limits l WHERE l.qno = $1 ORDER BY l.name"
    )
}

/// Checks a limit's name and maximum: the arguments of [`set`] after the
/// queue's number.
pub(super) fn set_args(name: &str, max: u32) -> crate::error::Result<i32> {
    check_limit_name(name)?;
    check_max(name, max)?;
    Ok(i32::try_from(max).unwrap_or(i32::MAX))
}

/// A limit as [`list`] answers it.
pub(super) fn limit_of(row: &Row) -> Limit {
    let number = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
    Limit {
        name: row.get(0),
        max: number(i64::from(row.get::<_, i32>(1))),
        running: number(row.get::<_, i64>(2)),
    }
}
