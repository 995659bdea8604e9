//! What a batch enqueue of 100 jobs costs the PostgreSQL server, part by
//! part (issue 24: batch enqueue within 1.5x of a plain multi-row
//! `INSERT`): the statement `PgJobs` sends for jobs without caller ids,
//! and variants of it with one part taken away or changed, each on a
//! table of its own (a copy of schema `dque`'s `jobs` with its indexes,
//! made by a `PgJobs` handle on a throwaway server), against the plain
//! table's `INSERT … SELECT unnest($1::bytea[])`. Every case sends its
//! own arrays from this client, prepared once per connection, as the
//! handles do; the cases run in alternating turns (a busy CPU slows them
//! alike), and each turn's figure is its connection's server process's
//! CPU time (`/proc/PID/schedstat`): what the statement costs the
//! server, not the client nor the disk.
//!
//! ```sh
//! PATH=/usr/lib/postgresql/15/bin:$PATH cargo bench --features postgres --bench pg_insert_parts
//! DQUE_BENCH_TURNS=30 DQUE_BENCH_BATCHES=10   # turns, batches of 100 a turn
//! DQUE_BENCH_SYNC=on                          # wait for the disk at each commit (default off)
//! ```

use std::time::Duration;

use dque::jobs::PgOptions;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/pg/mod.rs"]
mod pg;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const BODY: usize = 100;
const BATCH: usize = 100;

/// The session settings of a handle's connection (`connection.rs`).
const HANDLE_SETTINGS: &str =
    "SET enable_sort = off; SET jit = off; SET plan_cache_mode = force_generic_plan";

/// CPU time process `pid` has run (Linux's `schedstat`).
fn cpu(pid: i32) -> Duration {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap_or_default();
    Duration::from_nanos(
        text.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    )
}

/// What a case sends.
#[derive(Clone, Copy)]
enum Args {
    /// The bodies alone (the plain table).
    Bodies,
    /// `PgJobs`'s eight: channel, queue name, qno, time, ids, priorities,
    /// bodies, due times.
    Jobs,
    /// As `Jobs` without channel and name (no notification).
    JobsQuiet,
}

struct Case {
    name: &'static str,
    client: Client,
    statement: Statement,
    pid: i32,
    args: Args,
    cpu: Vec<Duration>,
}

/// The insert of `insert_new` (as at schema 9 and 10) into `table`, with the
/// notification (`notify`) and the count's CTE (`counted`) or without.
fn insert_new(table: &str, notify: bool, counted: bool, order: bool) -> String {
    let mut ctes = Vec::new();
    let (told, first) = match notify {
        true => {
            ctes.push("told AS MATERIALIZED (SELECT pg_notify($1, $2))".to_owned());
            ("told, ", 3)
        }
        false => ("", 1),
    };
    let p = |k: usize| format!("${}", first + k);
    if counted {
        ctes.push(format!(
            "counted AS (UPDATE dque.counts c SET waiting = c.waiting + cardinality({ids}::text[])
                 WHERE c.qno = {qno} AND c.slot = pg_backend_pid() % 64)",
            ids = p(2),
            qno = p(0)
        ));
    }
    let with = match ctes.is_empty() {
        true => String::new(),
        false => format!("WITH {} ", ctes.join(", ")),
    };
    format!(
        "{with}INSERT INTO {table} (qno, id, caller_id, priority, body, enqueued_at, ready_at)
         SELECT {qno}, id, false, priority, body, {now}, ready
         FROM {told}unnest({ids}::text[], {pri}::int[], {bodies}::bytea[], {ready}::bigint[])
              WITH ORDINALITY AS t(id, priority, body, ready, n){order}",
        qno = p(0),
        now = p(1),
        ids = p(2),
        pri = p(3),
        bodies = p(4),
        ready = p(5),
        order = if order { " ORDER BY n" } else { "" },
    )
}

/// As [`insert_new`] with both CTEs, the notification sent by the
/// count's update (`RETURNING`: a data-modifying CTE runs to completion
/// whether or not it is read) instead of a CTE of its own joined to the rows.
fn merged(table: &str) -> String {
    format!(
        "WITH counted AS (UPDATE dque.counts c SET waiting = c.waiting + cardinality($5::text[])
             WHERE c.qno = $3 AND c.slot = pg_backend_pid() % 64 RETURNING pg_notify($1, $2))
         INSERT INTO {table} (qno, id, caller_id, priority, body, enqueued_at, ready_at)
         SELECT $3, id, false, priority, body, $4, ready
         FROM unnest($5::text[], $6::int[], $7::bytea[], $8::bigint[])
              WITH ORDINALITY AS t(id, priority, body, ready, n) ORDER BY n"
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(server) = pg::PgServer::get() else {
        return;
    };
    let url = server.url();
    let sync = std::env::var("DQUE_BENCH_SYNC").unwrap_or_else(|_| "off".into());
    let turns = env_usize("DQUE_BENCH_TURNS", 30);
    let batches = env_usize("DQUE_BENCH_BATCHES", 10);
    let mut admin = Client::connect(&url, NoTls).unwrap();
    admin
        .batch_execute(&format!("ALTER SYSTEM SET synchronous_commit = '{sync}'"))
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The schema, made by a handle (queue number 1 and its count rows).
    drop(PgOptions::new().connect(&url, "parts").unwrap());
    let mut copy = |name: &str, changes: &str| {
        admin
            .batch_execute(&format!(
                "CREATE TABLE {name} (LIKE dque.jobs INCLUDING ALL) WITH (fillfactor = 80); {changes}"
            ))
            .unwrap();
    };
    copy("j_now", "");
    copy("j_quiet", "");
    copy("j_merged", "");
    copy("j_nocount", "");
    copy("j_bare", "");
    copy("j_noorder", "");
    copy("j_noids", "DROP INDEX j_noids_qno_id_idx;");
    copy(
        "j_c",
        "ALTER TABLE j_c ALTER COLUMN id TYPE text COLLATE \"default\";",
    );
    copy(
        "j_nonunique",
        "DROP INDEX j_nonunique_qno_id_idx;
         CREATE INDEX ON j_nonunique (qno, id) WHERE state < 2;",
    );
    copy(
        "j_nodedup",
        "ALTER INDEX j_nodedup_qno_id_idx SET (deduplicate_items = off);
         ALTER INDEX j_nodedup_qno_priority_ready_at_seq_idx SET (deduplicate_items = off);
         ALTER INDEX j_nodedup_qno_id_idx1 SET (deduplicate_items = off);
         REINDEX TABLE j_nodedup;",
    );
    copy(
        "j_big",
        "DROP INDEX j_big_qno_id_idx; ALTER TABLE j_big ADD COLUMN made bigserial;
         CREATE UNIQUE INDEX ON j_big (qno, made) WHERE state < 2;",
    );
    copy(
        "j_c_full",
        "ALTER TABLE j_c_full ALTER COLUMN id TYPE text COLLATE \"default\";",
    );
    copy(
        "j_icu",
        "ALTER TABLE j_icu ALTER COLUMN id TYPE text COLLATE \"en-US-x-icu\";",
    );
    copy(
        "j_fewer",
        "DROP INDEX j_fewer_qno_died_idx; DROP INDEX j_fewer_qno_id_idx1;
         DROP INDEX j_fewer_qno_finished_idx; DROP INDEX j_fewer_qno_lease_until_idx;",
    );
    admin
        .batch_execute(
            "CREATE TABLE plain (id bigserial PRIMARY KEY, body bytea NOT NULL,
                                 locked_until bigint NOT NULL DEFAULT 0);
             CREATE INDEX ON plain (locked_until, id);",
        )
        .unwrap();
    let indexes: Vec<(String, String)> = admin
        .query(
            "SELECT tablename, string_agg(indexdef, '; ') FROM pg_indexes
             WHERE tablename IN ('j_noids', 'j_fewer', 'j_c') GROUP BY 1",
            &[],
        )
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (table, defs) in &indexes {
        eprintln!("{table}: {defs}");
    }

    let case = |name: &'static str, sql: String, args: Args, setup: &str| {
        let mut client = Client::connect(&url, NoTls).unwrap();
        // The handles' session settings (`connection.rs`), or the case's.
        client
            .batch_execute(match setup {
                "" => HANDLE_SETTINGS,
                setup => setup,
            })
            .unwrap();
        let statement = client.prepare(&sql).unwrap();
        let pid = client
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        Case {
            name,
            client,
            statement,
            pid,
            args,
            cpu: Vec::new(),
        }
    };
    let mut cases = vec![
        case(
            "plain INSERT … unnest(bodies)",
            "INSERT INTO plain (body) SELECT unnest($1::bytea[])".into(),
            Args::Bodies,
            "SET jit = off",
        ),
        case(
            "insert_new (notify, count, 7 indexes; ids COLLATE \"C\")",
            insert_new("j_now", true, true, true),
            Args::Jobs,
            "",
        ),
        case(
            "  … notified by the count's CTE (RETURNING pg_notify)",
            merged("j_merged"),
            Args::Jobs,
            "",
        ),
        case(
            "  … plans chosen by the server (plan_cache_mode auto)",
            insert_new("j_now", true, true, true),
            Args::Jobs,
            "SET enable_sort = off; SET jit = off",
        ),
        case(
            "  … without the count (schema 8)",
            insert_new("j_nocount", true, false, true),
            Args::Jobs,
            "",
        ),
        case(
            "  … without the notification",
            insert_new("j_quiet", false, true, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "bare insert (no CTE)",
            insert_new("j_bare", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … without ORDER BY n",
            insert_new("j_noorder", false, false, false),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … without jobs_live_ids",
            insert_new("j_noids", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … jobs_live_ids not unique",
            insert_new("j_nonunique", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … no deduplication in the indexes",
            insert_new("j_nodedup", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … unique (qno, made bigserial) instead of (qno, id)",
            insert_new("j_big", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "insert_new, ids in the database's collation (schema 9)",
            insert_new("j_c_full", true, true, true),
            Args::Jobs,
            "",
        ),
        case(
            "  … ids in the database's collation (schema 9)",
            insert_new("j_c", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … id COLLATE \"en-US-x-icu\" (a database in en_US)",
            insert_new("j_icu", false, false, true),
            Args::JobsQuiet,
            "",
        ),
        case(
            "  … without the 4 partial indexes no new row enters",
            insert_new("j_fewer", false, false, true),
            Args::JobsQuiet,
            "",
        ),
    ];

    // `DQUE_BENCH_CASES=0,1,5`: those cases alone (0, the plain table, always).
    if let Ok(only) = std::env::var("DQUE_BENCH_CASES") {
        let keep: Vec<usize> = only
            .split(',')
            .filter_map(|k| k.trim().parse().ok())
            .collect();
        let mut k = 0;
        cases.retain(|_| {
            k += 1;
            k == 1 || keep.contains(&(k - 1))
        });
    }
    let bodies: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![7u8; BODY]).collect();
    let priorities = vec![0i32; BATCH];
    let ready = vec![1_700_000_000_000i64; BATCH];
    let (channel, queue, qno, now) = ("dque", "parts", 1i32, 1_700_000_000_000i64);
    let mut counter = 0u64;
    for _ in 0..turns {
        for case in cases.iter_mut() {
            let before = cpu(case.pid);
            for _ in 0..batches {
                let ids: Vec<String> = (0..BATCH)
                    .map(|_| {
                        counter += 1;
                        format!("{:016x}{counter:016x}", 0x5eed_u64)
                    })
                    .collect();
                let params: Vec<&(dyn ToSql + Sync)> = match case.args {
                    Args::Bodies => vec![&bodies],
                    Args::Jobs => vec![
                        &channel,
                        &queue,
                        &qno,
                        &now,
                        &ids,
                        &priorities,
                        &bodies,
                        &ready,
                    ],
                    Args::JobsQuiet => vec![&qno, &now, &ids, &priorities, &bodies, &ready],
                };
                case.client.execute(&case.statement, &params).unwrap();
            }
            case.cpu.push(cpu(case.pid).saturating_sub(before));
        }
    }
    let plans: Vec<String> = cases
        .iter_mut()
        .map(|case| {
            case.client
                .query_one(
                    "SELECT coalesce(sum(generic_plans), 0)::text || ' generic, '
                            || coalesce(sum(custom_plans), 0)::text || ' custom'
                     FROM pg_prepared_statements",
                    &[],
                )
                .unwrap()
                .get(0)
        })
        .collect();
    println!(
        "Server CPU per row of a batch of {BATCH} ({turns} turns × {batches} batches, synchronous_commit {sync}); ratios: median over turns of case / plain\n"
    );
    println!("| case | µs a row (median turn) | / plain | plans |");
    println!("|---|---:|---:|---|");
    let per_row = |d: Duration| d.as_secs_f64() * 1e6 / (batches * BATCH) as f64;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let plain = cases[0].cpu.clone();
    for (case, plans) in cases.iter().zip(&plans) {
        let rows = median(case.cpu.iter().map(|&d| per_row(d)).collect());
        let ratio = median(
            case.cpu
                .iter()
                .zip(&plain)
                .map(|(c, p)| c.as_secs_f64() / p.as_secs_f64().max(1e-9))
                .collect(),
        );
        println!("| {} | {rows:.2} | {ratio:.2}x | {plans} |", case.name);
    }
}
