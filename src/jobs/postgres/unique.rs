//! Unique jobs on PostgreSQL (issue 27): a caller id held for a period
//! after enqueue. A row of `unique_ids` (queue, id, since, until, states)
//! is written by the insert that adds a job with a period, in the same
//! statement; the primary key serializes producers (a second insert of
//! the id waits on the first's row lock, then finds it), and the job's
//! own row says how the holder ended: a live row (waiting or leased)
//! holds the id anyway, a dead row enqueued since the hold began is
//! dead, no row is done (acked). A cancel deletes the hold.

use super::Tables;

/// The migration that adds the table (the next schema version).
pub const MIGRATION: &str = "CREATE TABLE {s}.unique_ids (
        qno integer NOT NULL,
        id text NOT NULL,
        since bigint NOT NULL,
        until_ms bigint NOT NULL,
        states smallint NOT NULL,
        PRIMARY KEY (qno, id)
    );";

/// Whether hold `u` (a row of `unique_ids`) keeps its id from a new job
/// now (`$2`): its period runs and its job is waiting, or ended in a
/// state it covers (4 done, 8 dead).
fn blocks(jobs: &str, u: &str) -> String {
    // The states looked at in a sub-select of their own: evaluated only
    // for a hold whose period runs, by index probes (never made a join).
    format!(
        "({u}.until_ms > $2 AND (SELECT
             EXISTS (SELECT 1 FROM {jobs} j WHERE j.qno = $1 AND j.id = {u}.id AND j.state < 2)
             OR ({u}.states & (CASE WHEN {dead} THEN 8 ELSE 4 END)) <> 0))",
        dead = dead(jobs, u),
    )
}

/// Whether the job that took hold `u` died.
fn dead(jobs: &str, u: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {jobs} j WHERE j.qno = $1 AND j.id = {u}.id AND j.state = 2
                     AND j.enqueued_at >= {u}.since)"
    )
}

/// The hold, if any, that keeps caller id `t.id` from a new job now
/// (`hp.held`): a job without a period is refused while its id is held,
/// as any enqueue of it. A lateral probe with a limit, so each job costs
/// one index lookup of `unique_ids`, whatever the planner knows of it
/// (a semi join or a hashed subplan would read every hold).
fn probe(jobs: &str, holds: &str) -> String {
    format!(
        "LEFT JOIN LATERAL (SELECT true AS held FROM {holds} u
                            WHERE t.caller AND u.qno = $1 AND u.id = t.id AND {blocks}
                            LIMIT 1) AS hp ON true",
        blocks = blocks(jobs, "u"),
    )
}

/// The insert of jobs of which some have caller ids, none a period:
/// `$1` the queue's number, `$2` the time, `$3`..`$9` the jobs' arrays
/// (id, caller, priority, body, header names, header values, ready),
/// `$10`, `$11` the channel and the queue's name to notify; `apart`: in
/// a caller's transaction (`counts::counted_apart`). Rows: the ids added (the notification, the same for every row, is delivered
/// once, at the commit).
pub fn insert(tables: &Tables, names: &str, values: &str, apart: bool) -> String {
    let (jobs, holds) = (&tables.jobs, &tables.unique);
    format!(
        "WITH added AS (
             INSERT INTO {jobs} (qno, id, caller_id, priority, body, header_names,
                                 header_values, enqueued_at, ready_at)
             SELECT $1, id, caller, priority, body, {names}, {values}, $2, ready
             FROM unnest($3::text[], $4::bool[], $5::int[], $6::bytea[], $7::text[],
                         $8::text[], $9::bigint[]) WITH ORDINALITY
                  AS t(id, caller, priority, body, names, vals, ready, n)
             {probe}
             WHERE hp.held IS NULL
             ORDER BY n
             ON CONFLICT (qno, id) WHERE state < 2 DO NOTHING
             RETURNING id, qno){counted}
         SELECT added.id FROM added CROSS JOIN (SELECT pg_notify($10, $11)) AS told",
        probe = probe(jobs, holds),
        counted = counted(tables, apart),
    )
}

/// As [`insert`], some jobs with a period: `$12` each job's period end
/// (Unix ms, 0: none), `$13` its states. A job with a period is added
/// only if its hold was taken: a new row of `unique_ids`, or one whose
/// period ended or whose job ended in a state it does not cover (the
/// upsert locks the row, so two producers of the id are serialized).
pub fn insert_holding(tables: &Tables, names: &str, values: &str, apart: bool) -> String {
    let (jobs, holds) = (&tables.jobs, &tables.unique);
    format!(
        "WITH claimed AS (
             INSERT INTO {holds} AS h (qno, id, since, until_ms, states)
             SELECT DISTINCT ON (id) $1, id, $2, until_ms, states
             FROM unnest($3::text[], $12::bigint[], $13::smallint[]) WITH ORDINALITY
                  AS c(id, until_ms, states, n)
             WHERE until_ms > 0
             ORDER BY id, n
             ON CONFLICT (qno, id) DO UPDATE
                 SET since = EXCLUDED.since, until_ms = EXCLUDED.until_ms,
                     states = EXCLUDED.states
                 WHERE NOT {blocks_existing}
             RETURNING id),
         added AS (
             INSERT INTO {jobs} (qno, id, caller_id, priority, body, header_names,
                                 header_values, enqueued_at, ready_at)
             SELECT $1, id, caller, priority, body, {names}, {values}, $2, ready
             FROM unnest($3::text[], $4::bool[], $5::int[], $6::bytea[], $7::text[],
                         $8::text[], $9::bigint[], $12::bigint[]) WITH ORDINALITY
                  AS t(id, caller, priority, body, names, vals, ready, until_ms, n)
             {probe}
             WHERE CASE WHEN t.until_ms > 0 THEN t.id IN (SELECT id FROM claimed)
                        ELSE hp.held IS NULL END
             ORDER BY n
             ON CONFLICT (qno, id) WHERE state < 2 DO NOTHING
             RETURNING id, qno){counted}
         SELECT added.id FROM added CROSS JOIN (SELECT pg_notify($10, $11)) AS told",
        blocks_existing = blocks(jobs, "h"),
        probe = probe(jobs, holds),
        counted = counted(tables, apart),
    )
}

/// The count of the jobs an insert added (`added`, a CTE); `apart` in a
/// caller's transaction.
fn counted(tables: &Tables, apart: bool) -> String {
    use super::counts::{counted_apart, counted_rows, ADDED};
    match apart {
        false => counted_rows(tables.counts.as_deref(), "added", ADDED),
        true => counted_apart(tables.counts.as_deref(), &tables.count_rows, "added", ADDED),
    }
}

/// The answers for caller ids an insert did not add (a read, on that
/// path only): `$1` the queue's number, `$2` the time, `$3` the ids.
/// Rows: an id held by a job that ran or died, and `done:UNTIL` or
/// `dead:UNTIL`; an id not listed was queued.
pub fn held(jobs: &str, holds: &str) -> String {
    format!(
        "SELECT u.id, CASE WHEN {dead} THEN 'dead:' ELSE 'done:' END || u.until_ms
         FROM {holds} u
         WHERE u.qno = $1 AND u.id = ANY($3::text[]) AND {blocks}
           AND NOT EXISTS (SELECT 1 FROM {jobs} j
                           WHERE j.qno = $1 AND j.id = u.id AND j.state < 2)",
        dead = dead(jobs, "u"),
        blocks = blocks(jobs, "u"),
    )
}

/// The part of a cancel that frees the id of the job it removed (a CTE
/// after `gone`): `$1` qno, `$2` id.
pub fn freed_by_cancel(holds: &str) -> String {
    format!(
        "freed AS (DELETE FROM {holds} WHERE qno = $1 AND id = $2
                       AND EXISTS (SELECT 1 FROM gone))"
    )
}
