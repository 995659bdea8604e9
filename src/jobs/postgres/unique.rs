//! Unique jobs on PostgreSQL (issue 27): a caller id held for a period
//! after enqueue. A row of `unique_ids` (queue, id, since, until, states)
//! is written by the insert that adds a job with a period, in the same
//! statement; the primary key serializes producers (a second insert of
//! the id waits on the first's row lock, then finds it), and the job's
//! own row says how the holder ended: a live row (waiting or leased)
//! holds the id anyway, a dead row enqueued since the hold began is
//! dead, no row is done (acked). A cancel deletes the hold.

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
    format!(
        "({u}.until_ms > $2 AND (
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

/// The insert of jobs of which some have caller ids: `$1` the queue's
/// number, `$2` the time, `$3`..`$9` the jobs' arrays (id, caller,
/// priority, body, header names, header values, ready), `$10`, `$11` the
/// channel and the queue's name to notify, `$12` each job's period end
/// (0: none), `$13` its states. Rows: an id added (answer NULL), or an
/// id held by a job that ran or died (answer `done:UNTIL`/`dead:UNTIL`);
/// an id in neither was queued already.
pub fn insert(jobs: &str, holds: &str, names: &str, values: &str) -> String {
    let blocks_existing = blocks(jobs, "h");
    format!(
        "WITH t AS MATERIALIZED (
             SELECT * FROM unnest($3::text[], $4::bool[], $5::int[], $6::bytea[], $7::text[],
                                  $8::text[], $9::bigint[], $12::bigint[], $13::smallint[])
                 WITH ORDINALITY AS t(id, caller, priority, body, names, vals, ready, until_ms,
                                      states, n)),
         held AS (
             SELECT u.id, CASE WHEN {dead} THEN 'dead:' ELSE 'done:' END || u.until_ms AS answer
             FROM {holds} u
             WHERE u.qno = $1 AND u.id IN (SELECT id FROM t WHERE caller)
               AND {blocks}
               AND NOT EXISTS (SELECT 1 FROM {jobs} j
                               WHERE j.qno = $1 AND j.id = u.id AND j.state < 2)),
         claimed AS (
             INSERT INTO {holds} AS h (qno, id, since, until_ms, states)
             SELECT DISTINCT ON (id) $1, id, $2, until_ms, states FROM t
             WHERE until_ms > 0 AND id NOT IN (SELECT id FROM held)
             ORDER BY id, n
             ON CONFLICT (qno, id) DO UPDATE
                 SET since = EXCLUDED.since, until_ms = EXCLUDED.until_ms,
                     states = EXCLUDED.states
                 WHERE NOT {blocks_existing}
             RETURNING id),
         added AS (
             INSERT INTO {jobs} (qno, id, caller_id, priority, body, header_names,
                                 header_values, enqueued_at, ready_at)
             SELECT $1, id, caller, priority, body, {names}, {values}, $2, ready FROM t
             WHERE id NOT IN (SELECT id FROM held)
               AND (until_ms = 0 OR id IN (SELECT id FROM claimed))
             ORDER BY n
             ON CONFLICT (qno, id) WHERE state < 2 DO NOTHING
             RETURNING id)
         SELECT added.id, NULL::text AS answer
             FROM added CROSS JOIN (SELECT pg_notify($10, $11)) AS told
         UNION ALL SELECT id, answer FROM held",
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
