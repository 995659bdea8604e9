//! The tables of the PostgreSQL backend, made on first use by versioned
//! migrations under an advisory lock (so two workers starting at once do
//! not race), in schema `dque` unless told otherwise.

use postgres::GenericClient;

use super::db;
use crate::error::{Error, Result};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 10;

/// Migration `n` takes the schema from version `n` to `n + 1`. `{s}` is
/// the schema's name (quoted).
const MIGRATIONS: &[&str] = &[
    // 0 → 1: jobs, statistics, failures. `state`: 0 waiting (ready once
    // `ready_at` passed; leased while `lease_until` is ahead), 2 dead. A
    // lease changes no indexed column, so its update is HOT (room left by
    // the fill factor): no index is written per lease.
    "CREATE TABLE {s}.jobs (
        seq bigserial PRIMARY KEY,
        queue text NOT NULL,
        id text NOT NULL,
        caller_id boolean NOT NULL,
        priority integer NOT NULL,
        body bytea NOT NULL,
        header_names text[] NOT NULL,
        header_values text[] NOT NULL,
        enqueued_at bigint NOT NULL,
        ready_at bigint NOT NULL,
        state smallint NOT NULL DEFAULT 0,
        attempts integer NOT NULL DEFAULT 0,
        lease_until bigint,
        lease_token bigint,
        died bigint,
        reason text
    ) WITH (fillfactor = 80);
    CREATE SEQUENCE {s}.lease_tokens;
    CREATE SEQUENCE {s}.deaths;
    CREATE INDEX jobs_next ON {s}.jobs (queue, priority, ready_at, seq) WHERE state < 2;
    CREATE UNIQUE INDEX jobs_live_ids ON {s}.jobs (queue, id) WHERE state < 2;
    CREATE INDEX jobs_dead ON {s}.jobs (queue, died) WHERE state = 2;
    CREATE TABLE {s}.stats (
        queue text NOT NULL,
        day bigint NOT NULL,
        wait_count bigint NOT NULL DEFAULT 0,
        wait_sum float8 NOT NULL DEFAULT 0,
        wait_sumsq float8 NOT NULL DEFAULT 0,
        wait_hist bigint[] NOT NULL DEFAULT array_fill(0::bigint, ARRAY[149]),
        run_count bigint NOT NULL DEFAULT 0,
        run_sum float8 NOT NULL DEFAULT 0,
        run_sumsq float8 NOT NULL DEFAULT 0,
        run_hist bigint[] NOT NULL DEFAULT array_fill(0::bigint, ARRAY[149]),
        retries bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (queue, day)
    );
    CREATE TABLE {s}.failures (
        queue text NOT NULL,
        day bigint NOT NULL,
        grp text NOT NULL,
        count bigint NOT NULL,
        PRIMARY KEY (queue, day, grp)
    );",
    // 1 → 2: the statistics' log (`stats_log.rs`), written in the same
    // statement as the event it counts. No index: rows are inserted by
    // every ack and read by merges, which take a queue's rows at once.
    "CREATE TABLE {s}.stats_log (
        queue text NOT NULL,
        day bigint NOT NULL,
        kind smallint NOT NULL,
        ms bigint NOT NULL,
        grp text
    );",
    // 2 → 3: a job's wait (enqueue to first lease) kept in its row by the
    // lease (columns in no index: the update stays HOT) and logged with
    // the event that settles the attempt, one log row a job instead of
    // two. Nullable columns without a default: no table rewrite. Waits
    // logged by version 2 are in rows of kind 0 already; their jobs'
    // `wait_ms` stays NULL, so none is counted twice.
    "ALTER TABLE {s}.jobs ADD COLUMN wait_day bigint, ADD COLUMN wait_ms bigint;
    ALTER TABLE {s}.stats_log ADD COLUMN wait_day bigint, ADD COLUMN wait_ms bigint;",
    // 3 → 4: a queue's jobs are keyed by its number (`queues`), not its
    // name: the keys of the three indexes written by every insert narrow
    // from (name, …) to (int4, …), and so does the row. A job without
    // headers keeps NULL for both arrays (a bit in the row's null bitmap
    // instead of two empty arrays). Every row is updated once; the
    // indexes are made again on the number.
    "CREATE TABLE {s}.queues (qno serial PRIMARY KEY, name text NOT NULL UNIQUE);
    INSERT INTO {s}.queues (name) SELECT DISTINCT queue FROM {s}.jobs ORDER BY 1;
    DROP INDEX {s}.jobs_next;
    DROP INDEX {s}.jobs_live_ids;
    DROP INDEX {s}.jobs_dead;
    ALTER TABLE {s}.jobs ADD COLUMN qno integer,
        ALTER COLUMN header_names DROP NOT NULL,
        ALTER COLUMN header_values DROP NOT NULL;
    UPDATE {s}.jobs j SET qno = q.qno,
        header_names = CASE WHEN cardinality(j.header_names) > 0 THEN j.header_names END,
        header_values = CASE WHEN cardinality(j.header_names) > 0 THEN j.header_values END
        FROM {s}.queues q WHERE q.name = j.queue;
    ALTER TABLE {s}.jobs ALTER COLUMN qno SET NOT NULL, DROP COLUMN queue;
    CREATE INDEX jobs_next ON {s}.jobs (qno, priority, ready_at, seq) WHERE state < 2;
    CREATE UNIQUE INDEX jobs_live_ids ON {s}.jobs (qno, id) WHERE state < 2;
    CREATE INDEX jobs_dead ON {s}.jobs (qno, died) WHERE state = 2;",
    // 4 → 5 (limits, issue 27): a queue's pause and its limits (read by
    // every lease: a probe of each small table), and the limited lease
    // (`postgres/limits.rs`). A column with a constant default: no table
    // rewrite.
    super::limits::MIGRATION,
    // 5 → 6 (unique jobs, issue 27): the ids held for a period.
    super::unique::MIGRATION,
    // 6 → 7 (recurring jobs, issue 27): the schedules.
    super::recurring::MIGRATION,
    // 7 → 8 (history, issue 27): completed jobs kept in their rows
    // (`state` 3, `history.rs`), with when their last attempt started and
    // finished and the worker that ran it; kept and dead rows found by id,
    // and completed ones pruned by their finish. Nullable columns without
    // a default: no table rewrite.
    "ALTER TABLE {s}.jobs ADD COLUMN started bigint, ADD COLUMN finished bigint,
        ADD COLUMN worker text;
    CREATE INDEX jobs_kept_ids ON {s}.jobs (qno, id) WHERE state >= 2;
    CREATE INDEX jobs_completed ON {s}.jobs (qno, finished) WHERE state = 3;",
    // 8 → 9 (issue 28): counts kept by the statements that move jobs,
    // and an index on leased rows and kept waits (`counts.rs`).
    super::counts::MIGRATION,
    // 9 → 10 (issue 24): ids compare by their bytes (`COLLATE "C"`), the
    // rule they are checked by whatever the database's collation: a
    // linguistic one (`en_US.UTF-8`) made every insert's probe of the id
    // indexes about 0.5 µs a row dearer (BENCHMARKS.md). Equality is
    // unchanged (it is byte equality under every deterministic collation),
    // so no id becomes equal to another; the held ids too, which are
    // compared with the jobs'. No table rewrite: the id indexes are made
    // again, under the table's lock.
    "ALTER TABLE {s}.jobs ALTER COLUMN id TYPE text COLLATE \"C\";
    ALTER TABLE {s}.unique_ids ALTER COLUMN id TYPE text COLLATE \"C\";",
];

/// One migrator at a time, whatever the schema's state (`$1` the schema).
pub const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('dque schema ' || $1))";

/// The statements of a migration, for schema `quoted` (the blocking and
/// the async handle run them in this order, in one transaction, after
/// [`LOCK`]).
pub struct Migration {
    /// The schema and its version table, made if missing (a batch).
    pub prelude: String,
    /// The version, if recorded (no parameters).
    pub version: String,
    /// Sets the version (`$1`); 0 rows: none recorded yet.
    pub set_version: String,
    /// Records the version (`$1`).
    pub insert_version: String,
    quoted: String,
}

impl Migration {
    pub fn new(schema: &str) -> Migration {
        let quoted = quote(schema);
        Migration {
            prelude: format!(
                "CREATE SCHEMA IF NOT EXISTS {quoted};
                 CREATE TABLE IF NOT EXISTS {quoted}.schema_version (version integer NOT NULL);"
            ),
            version: format!("SELECT version FROM {quoted}.schema_version"),
            set_version: format!("UPDATE {quoted}.schema_version SET version = $1"),
            insert_version: format!("INSERT INTO {quoted}.schema_version (version) VALUES ($1)"),
            quoted,
        }
    }

    /// The steps (batches) from version `found` (none: 0) to
    /// [`SCHEMA_VERSION`] in schema `schema`; `Backend` if `found` is newer.
    pub fn steps(&self, schema: &str, found: Option<i32>) -> Result<Vec<String>> {
        let version = found.unwrap_or(0);
        if version > SCHEMA_VERSION {
            return Err(Error::Backend {
                backend: "PostgreSQL",
                reason: format!(
                    "schema {schema} is at version {version}, made by a newer dque; this one \
                     reads version {SCHEMA_VERSION}: upgrade dque"
                ),
            });
        }
        Ok((version.max(0)..SCHEMA_VERSION)
            .map(|v| MIGRATIONS[v as usize].replace("{s}", &self.quoted))
            .collect())
    }
}

/// Brings schema `schema` to [`SCHEMA_VERSION`], or fails if the database
/// holds a newer one (written by a newer dque).
pub fn migrate(client: &mut impl GenericClient, schema: &str) -> Result<()> {
    let migration = Migration::new(schema);
    let mut tx = client.transaction().map_err(db)?;
    tx.execute(LOCK, &[&schema]).map_err(db)?;
    tx.batch_execute(&migration.prelude).map_err(db)?;
    let found: Option<i32> = tx
        .query_opt(&migration.version, &[])
        .map_err(db)?
        .map(|row| row.get(0));
    for step in migration.steps(schema, found)? {
        tx.batch_execute(&step).map_err(db)?;
    }
    let updated = tx
        .execute(&migration.set_version, &[&SCHEMA_VERSION])
        .map_err(db)?;
    if updated == 0 {
        tx.execute(&migration.insert_version, &[&SCHEMA_VERSION])
            .map_err(db)?;
    }
    tx.commit().map_err(db)
}

/// The statements that number queues: a lookup (`$1` the name), then,
/// for a new queue, an insert that returns its number and makes its rows
/// of kept counts (`counts.rs`) in the same statement.
pub fn numbering(tables: &super::Tables) -> [String; 2] {
    // Two handles numbering a new queue at once: the second one's insert
    // waits for the first's, then updates its row to return its number
    // (its slots are there already).
    let queues = &tables.queues;
    [
        format!("SELECT qno FROM {queues} WHERE name = $1"),
        format!(
            "WITH numbered AS (
                 INSERT INTO {queues} (name) VALUES ($1)
                 ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING qno),
             slots AS (
                 INSERT INTO {counts} (qno, slot)
                 SELECT qno, slot FROM numbered, generate_series(0, {last}) AS slot
                 ON CONFLICT DO NOTHING)
             SELECT qno FROM numbered",
            counts = tables.counts_table,
            last = super::counts::SLOTS - 1,
        ),
    ]
}

/// The number of queue `name`, given it on first use. Looked up first,
/// so opening a known queue writes nothing.
pub fn queue_number(
    client: &mut impl GenericClient,
    tables: &super::Tables,
    name: &str,
) -> Result<i32> {
    let [find, add] = numbering(tables);
    if let Some(row) = client.query_opt(&find, &[&name]).map_err(db)? {
        return Ok(row.get(0));
    }
    Ok(client.query_one(&add, &[&name]).map_err(db)?.get(0))
}

/// `name` as a quoted SQL identifier.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
