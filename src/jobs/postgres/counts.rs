//! Counts kept by the statements that move jobs (issue 28), so that
//! `counts()` and `stats()` read a few rows instead of every live one.
//!
//! Each queue has [`SLOTS`] rows in table `counts` (made with the queue),
//! holding its waiting, dead and kept-completed jobs as sums over the
//! slots; a statement changes the row of its connection's slot
//! (`pg_backend_pid() % SLOTS`), so concurrent producers and workers
//! seldom wait for one another. The change is one more CTE of the
//! statement that moves the jobs ([`counted`]): it commits or rolls back
//! with the move, so the sums equal a recount of the rows in every
//! snapshot. No trigger (a trigger call cost workers 1.16x to 3.27x,
//! BENCHMARKS.md). The CTE reads the moved rows, so it runs after the
//! move: every statement locks job rows first and its slot last, and two
//! statements never wait for each other in a cycle.
//!
//! A job enqueued in a caller's transaction is counted in a row of its
//! own instead ([`counted_apart`]: a new key, which waits for no one),
//! since the slot's row would stay locked until the caller commits and
//! stall every statement of that slot; such rows are folded into a slot
//! by the statistics' merge ([`fold`]).
//!
//! What the sums do not hold is found by index: the leased rows and the
//! waits kept in rows by the partial index `jobs_held` (rows leased or
//! keeping a wait: about as many as leases), the scheduled ones by a walk
//! over the priorities of `jobs_next`, one range each.
//!
//! A statement that finds a leased row by its number writes its lease
//! test as `coalesce(lease_until, 0) > $3` (not strict), which does not
//! imply `jobs_held`'s predicate: the planner takes the primary key, not a walk over every
//! leased row of every queue (which it preferred while that index was
//! small, and would keep doing on stale statistics).
//!
//! Schema version 9 adds the table and the index ([`MIGRATION`]).

/// The rows each queue's counts are spread over.
pub const SLOTS: i32 = 64;

/// Migration 8 → 9: the counts, filled from the rows under a lock that
/// keeps every writer out until the migration commits (a statement of
/// another client that runs at that moment commits before the count, or
/// waits for the migration), and the index on leased rows and kept waits
/// (the lease's update is no longer HOT; measured: no cost seen on a
/// lease and its ack). A handle of an older dque opened before the migration would go
/// on moving jobs without counting them: stop those first (a new one is
/// refused by the version check).
pub const MIGRATION: &str = "LOCK TABLE {s}.jobs, {s}.queues IN SHARE ROW EXCLUSIVE MODE;
    CREATE SEQUENCE {s}.count_rows;
    CREATE TABLE {s}.counts (
        qno integer NOT NULL,
        slot integer NOT NULL,
        waiting bigint NOT NULL DEFAULT 0,
        dead bigint NOT NULL DEFAULT 0,
        completed bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (qno, slot)
    ) WITH (fillfactor = 50);
    INSERT INTO {s}.counts (qno, slot)
        SELECT qno, slot FROM {s}.queues, generate_series(0, 63) AS slot;
    UPDATE {s}.counts c SET waiting = r.waiting, dead = r.dead, completed = r.completed
        FROM (SELECT qno, count(*) FILTER (WHERE state = 0) AS waiting,
                     count(*) FILTER (WHERE state = 2) AS dead,
                     count(*) FILTER (WHERE state = 3) AS completed
              FROM {s}.jobs GROUP BY qno) r
        WHERE c.qno = r.qno AND c.slot = 0;
    CREATE INDEX jobs_held ON {s}.jobs (qno, lease_until)
        WHERE state = 0 AND (lease_until IS NOT NULL OR wait_ms IS NOT NULL);";

/// How a statement changes the counts of the jobs it moved: added to
/// waiting, dead, completed for each.
#[derive(Clone, Copy)]
pub struct Change {
    pub waiting: i8,
    pub dead: i8,
    pub completed: i8,
}

/// Jobs added (waiting).
pub const ADDED: Change = Change {
    waiting: 1,
    dead: 0,
    completed: 0,
};
/// Waiting jobs removed (acked, cancelled).
pub const REMOVED: Change = Change {
    waiting: -1,
    dead: 0,
    completed: 0,
};
/// Waiting jobs completed and kept (the history's ack).
pub const COMPLETED: Change = Change {
    waiting: -1,
    dead: 0,
    completed: 1,
};
/// Waiting jobs made dead letters.
pub const BURIED: Change = Change {
    waiting: -1,
    dead: 1,
    completed: 0,
};
/// Dead letters queued again.
pub const REQUEUED: Change = Change {
    waiting: 1,
    dead: -1,
    completed: 0,
};
/// Completed rows pruned.
pub const PRUNED: Change = Change {
    waiting: 0,
    dead: 0,
    completed: -1,
};

/// The CTE (with its leading comma, to follow the statement's others)
/// that adds `change` times `n` (an expression) jobs of queue `qno` (an
/// expression; NULL: none) to the connection's slot; empty if the handle
/// keeps no counts (`counts` none: the benchmark's baseline). Written as
/// a key lookup (`qno = …`, not a join), so the slot's row is found by
/// the primary key however many queues there are.
pub fn counted(counts: Option<&str>, qno: &str, n: &str, change: Change) -> String {
    let Some(counts) = counts else {
        return String::new();
    };
    format!(", counted AS ({})", update(counts, qno, n, change))
}

/// The CTE `counted` (without a leading comma: the statement's first) of
/// [`counted`], whose update also returns `also` (an expression without
/// columns, such as the statement's notification): it is evaluated once,
/// for the slot's row, which every queue has (made with the queue), and a
/// data-modifying CTE runs to completion whether or not the statement
/// reads it. One CTE instead of two joined to the moved rows: measured
/// 3 % of a batch's server time (BENCHMARKS.md, issue 24's seventh session).
pub fn counted_returning(counts: &str, qno: &str, n: &str, change: Change, also: &str) -> String {
    format!(
        "counted AS ({} RETURNING {also})",
        update(counts, qno, n, change)
    )
}

/// The update of [`counted`].
fn update(counts: &str, qno: &str, n: &str, change: Change) -> String {
    let mut set = Vec::new();
    for (column, by) in [
        ("waiting", change.waiting),
        ("dead", change.dead),
        ("completed", change.completed),
    ] {
        match by {
            0 => {}
            1 => set.push(format!("{column} = c.{column} + {n}")),
            -1 => set.push(format!("{column} = c.{column} - {n}")),
            _ => unreachable!("a change counts each job once"),
        }
    }
    format!(
        "UPDATE {counts} c SET {set}
             WHERE c.qno = {qno} AND c.slot = pg_backend_pid() % {SLOTS}",
        set = set.join(", ")
    )
}

/// [`counted`] for the rows of CTE `moved` (which returns `qno`; every
/// statement moves jobs of one queue): nothing written if it moved none.
pub fn counted_rows(counts: Option<&str>, moved: &str, change: Change) -> String {
    counted(
        counts,
        &format!("(SELECT qno FROM {moved} LIMIT 1)"),
        &format!("(SELECT count(*) FROM {moved})"),
        change,
    )
}

/// As [`counted_rows`], in a row of its own (slot `-n`, `n` drawn from
/// sequence `apart`), for a caller's transaction.
pub fn counted_apart(counts: Option<&str>, apart: &str, moved: &str, change: Change) -> String {
    let Some(counts) = counts else {
        return String::new();
    };
    format!(
        ", counted AS (INSERT INTO {counts} (qno, slot, waiting, dead, completed)
             SELECT qno, -nextval('{apart}'), n * {w}, n * {d}, n * {c}
             FROM (SELECT qno, count(*) AS n FROM {moved} GROUP BY qno) g)",
        w = change.waiting,
        d = change.dead,
        c = change.completed,
    )
}

/// Folds queue `$1`'s rows counted apart (committed ones) into the
/// connection's slot; a row seen by two folds at once is deleted, and
/// added, by one.
pub fn fold(counts: &str) -> String {
    format!(
        "WITH apart AS (
             DELETE FROM {counts} WHERE qno = $1 AND slot < 0
             RETURNING waiting, dead, completed)
         UPDATE {counts} c SET waiting = c.waiting + s.w, dead = c.dead + s.d,
                              completed = c.completed + s.c
         FROM (SELECT sum(waiting) AS w, sum(dead) AS d, sum(completed) AS c FROM apart) s
         WHERE c.qno = $1 AND c.slot = pg_backend_pid() % {SLOTS} AND s.w IS NOT NULL"
    )
}

/// `counts()`: `$1` qno, `$2` the time, `$3` the real time: ready,
/// scheduled, leased, dead, in one snapshot. Waiting and dead are the
/// kept sums; scheduled a walk over the queue's priorities (one range of
/// `jobs_next` each); leased, and leased rows due later (counted in both
/// scheduled and leased), a range of `jobs_held`. Ready is what is left
/// of waiting.
pub fn read(jobs: &str, counts: &str) -> String {
    format!(
        "WITH RECURSIVE kept AS (
             SELECT coalesce(sum(waiting), 0)::bigint AS waiting,
                    coalesce(sum(dead), 0)::bigint AS dead
             FROM {counts} WHERE qno = $1),
         priorities AS (
             (SELECT priority FROM {jobs} WHERE qno = $1 AND state < 2
              ORDER BY priority LIMIT 1)
             UNION ALL
             SELECT (SELECT j.priority FROM {jobs} j WHERE j.qno = $1 AND j.state < 2
                         AND j.priority > p.priority ORDER BY j.priority LIMIT 1)
             FROM priorities p WHERE p.priority IS NOT NULL),
         scheduled AS (
             SELECT coalesce(sum((SELECT count(*) FROM {jobs} j
                                  WHERE j.qno = $1 AND j.state < 2
                                    AND j.priority = p.priority AND j.ready_at > $2)), 0)::bigint
                        AS n
             FROM priorities p WHERE p.priority IS NOT NULL),
         leased AS (
             SELECT count(*) AS n, count(*) FILTER (WHERE ready_at > $2) AS later
             FROM {jobs} WHERE qno = $1 AND state = 0 AND lease_until > $3)
         SELECT kept.waiting - scheduled.n - leased.n + leased.later, scheduled.n, leased.n,
                kept.dead
         FROM kept, scheduled, leased"
    )
}

/// `counts()` without kept counts (the benchmark's baseline): every live
/// row of the queue, as before schema 9.
pub fn read_all(jobs: &str) -> String {
    format!(
        "SELECT
             count(*) FILTER (WHERE state = 0 AND ready_at <= $2
                                AND (lease_until IS NULL OR lease_until <= $3)),
             count(*) FILTER (WHERE state = 0 AND ready_at > $2),
             count(*) FILTER (WHERE state = 0 AND lease_until > $3),
             count(*) FILTER (WHERE state = 2)
         FROM {jobs} WHERE qno = $1"
    )
}
