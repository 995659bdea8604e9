//! `JobQueue::search` in the server, in two plans, both a `WHERE` clause
//! over rows read in an index's order (no job leaves the server unless it
//! matches):
//!
//! - **window** (every filter): the first `scan` jobs of the list of the
//!   states looked in, in the list's order, and the matches among them.
//!   The lists: ready jobs in lease order (the lease index, `jobs_next`);
//!   scheduled jobs by due time (the same index, walked one priority at a
//!   time: one probe a distinct priority); the waiting jobs (ready and
//!   leased ones in lease order, then the scheduled ones), which is also
//!   the list of a search of leased jobs (no index tells a lease); dead
//!   letters oldest first (`jobs_dead`), after the waiting jobs for a
//!   search of every state. Complete when the list ended within the
//!   bound. No index answers a header or a reason: such a search reads at
//!   most `scan` rows, whatever the queue holds.
//! - **id range** (an id prefix; ids compare by their bytes, `COLLATE
//!   "C"` since schema 10, whatever the database's collation): the rows
//!   whose id starts with the prefix, from the id indexes (`jobs_live_ids`, `jobs_kept_ids`),
//!   when neither holds more than `scan` of them: every match, so the
//!   search is complete however long the lists are. More than `scan`:
//!   the window plan.
//!
//! Either way the matches come in the lists' order; a search that found
//! `max` matches among the waiting jobs did not read the dead letters
//! (not complete). A filter of a state alone reads `max + 1` rows at
//! most (each matches): complete if the list ended within them.
//!
//! The statements run with the handle's session settings (generic plans,
//! sorts off): every sort here is of rows a `LIMIT` already bounded (a
//! materialized window or one priority's scheduled rows), the only plan
//! the statement leaves.

use postgres::types::ToSql;

use super::errors::db;
use super::rows::{dead_of, waiting_of};
use super::{ms, Db, PgJobs, JOB_COLUMNS};
use crate::error::Result;
use crate::jobs::search::{Found, FoundJob, JobFilter, JobPlace, SearchState};

/// The rows of a filter's headers: none of them may differ (a job
/// without the header has NULL there, which differs).
const HEADERS_MATCH: &str = "NOT EXISTS (
    SELECT 1 FROM unnest($names::text[], $vals::text[]) AS f(n, v)
    WHERE w.header_values[array_position(w.header_names, f.n)] IS DISTINCT FROM f.v)";

/// Not leased now (`$real`: the real time; a lease ends by the clock).
const FREE: &str = "(lease_until IS NULL OR lease_until <= $real::bigint)";

/// The columns a window keeps of a waiting row: enough to filter it.
const WAITING_KEPT: &str = "seq, id, header_names, header_values, ready_at, lease_until";

/// The scheduled rows (`ready_at` after `$now`) meeting `cond`, by due
/// time, at most `limit`, with columns `cols` (which hold `seq` and
/// `ready_at`). No index is in due order; the lease index is, within a
/// priority: the distinct priorities are walked (one index probe each),
/// each gives its first `limit` rows, and those are sorted. Also the
/// second part of `waiting` (`statements.rs`).
pub(super) fn scheduled_rows(jobs: &str, cols: &str, cond: &str, limit: &str) -> String {
    format!(
        "SELECT s.* FROM (
             WITH RECURSIVE prios(p) AS (
                 (SELECT priority FROM {jobs} WHERE qno = $qno::int AND state < 2
                  ORDER BY priority LIMIT 1)
                 UNION ALL
                 SELECT (SELECT priority FROM {jobs}
                         WHERE qno = $qno::int AND state < 2 AND priority > prios.p
                         ORDER BY priority LIMIT 1)
                 FROM prios WHERE prios.p IS NOT NULL)
             SELECT one.* FROM prios CROSS JOIN LATERAL (
                 SELECT {cols} FROM {jobs}
                 WHERE qno = $qno::int AND state < 2 AND priority = prios.p
                   AND ready_at > $now::bigint {cond}
                 ORDER BY ready_at, seq LIMIT {limit}) one
         ) s ORDER BY s.ready_at, s.seq LIMIT {limit}"
    )
}

/// The list a search reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    /// Ready jobs, lease order.
    Ready,
    /// Scheduled jobs, by due time.
    Scheduled,
    /// Every waiting job: ready and leased in lease order, then scheduled.
    Waiting,
    /// Dead letters, oldest first.
    Dead,
}

impl List {
    fn of(state: SearchState) -> List {
        match state {
            SearchState::Ready => List::Ready,
            SearchState::Scheduled => List::Scheduled,
            SearchState::Dead => List::Dead,
            _ => List::Waiting,
        }
    }

    /// The list's first `$budget` rows, the columns a filter reads; only
    /// ids in [`$lo`, `$hi`) with `range`, then sorted in the list's order.
    fn rows(self, jobs: &str, range: bool) -> String {
        let ready = format!("state < 2 AND ready_at <= $now::bigint AND {FREE}");
        let scheduled = format!("state < 2 AND ready_at > $now::bigint AND {FREE}");
        let (kept, cond, order) = match self {
            List::Ready => (WAITING_KEPT, ready, "priority, ready_at, seq"),
            List::Scheduled => (WAITING_KEPT, scheduled, "ready_at, seq"),
            List::Waiting => (
                WAITING_KEPT,
                "state < 2".to_owned(),
                "(ready_at > $now::bigint), \
                 CASE WHEN ready_at <= $now::bigint THEN priority END, ready_at, seq",
            ),
            List::Dead => (
                "seq, id, header_names, header_values, reason",
                "state = 2".to_owned(),
                "died",
            ),
        };
        if range {
            // The rows the caller counted (at most `scan`), by the id
            // condition alone, so the id index is the one plan (a state
            // condition would let `jobs_next` or `jobs_dead` walk the whole
            // list instead); then the list's condition, sorted in a
            // materialized step.
            let (live, rest) = match self {
                List::Dead => ("state >= 2", "state = 2".to_owned()),
                _ => ("state < 2", cond),
            };
            return format!(
                "WITH r AS MATERIALIZED (
                     SELECT {kept}, priority, died, state FROM {jobs}
                     WHERE qno = $qno::int AND {live}
                       AND id >= $lo::text AND id < $hi::text
                     LIMIT $budget::bigint)
                 SELECT {kept} FROM r WHERE {rest} ORDER BY {order}"
            );
        }
        match self {
            List::Scheduled => scheduled_rows(
                jobs,
                WAITING_KEPT,
                &format!("AND {FREE}"),
                "$budget::bigint",
            ),
            // Ready and leased rows in lease order, then (only if those
            // run short: the Append is read lazily) the scheduled ones.
            List::Waiting => format!(
                "SELECT * FROM (
                     (SELECT {WAITING_KEPT} FROM {jobs}
                      WHERE qno = $qno::int AND state < 2 AND ready_at <= $now::bigint
                      ORDER BY priority, ready_at, seq LIMIT $budget::bigint)
                     UNION ALL
                     ({scheduled})
                 ) waiting LIMIT $budget::bigint",
                scheduled = scheduled_rows(jobs, WAITING_KEPT, "", "$budget::bigint"),
            ),
            _ => format!(
                "SELECT {kept} FROM {jobs} WHERE qno = $qno::int AND {cond}
                 ORDER BY {order} LIMIT $budget::bigint"
            ),
        }
    }

    /// The search over the list's rows: a first row with how many the
    /// window held (`read`), then the matches in the list's order, up to
    /// `$max`, with their whole rows (none: one row of NULLs but `read`).
    fn search_sql(self, jobs: &str, leased: bool, range: bool) -> String {
        let state = if leased {
            "w.lease_until > $real::bigint"
        } else {
            "true"
        };
        let reason = if self == List::Dead {
            "AND ($reason::text IS NULL OR strpos(coalesce(w.reason, ''), $reason::text) > 0)"
        } else {
            ""
        };
        let extra = if self == List::Dead {
            "j.reason"
        } else {
            "j.lease_until"
        };
        let cols = JOB_COLUMNS
            .split(", ")
            .map(|c| format!("j.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "WITH w AS MATERIALIZED (
                 SELECT l.*, row_number() OVER () AS pos FROM ({rows}) l)
             SELECT n.read, m.pos, {cols}, {extra}
             FROM (SELECT count(*) AS read FROM w) n
             LEFT JOIN LATERAL (
                 SELECT w.seq, w.pos FROM w
                 WHERE {state} AND {HEADERS_MATCH}
                   AND ($prefix::text IS NULL OR starts_with(w.id, $prefix::text))
                   {reason}
                 ORDER BY w.pos LIMIT $max::bigint) m ON true
             LEFT JOIN {jobs} j ON j.seq = m.seq
             ORDER BY m.pos",
            rows = self.rows(jobs, range),
        )
    }
}

/// `sql` with its named parameters (`$name`) numbered in the order of
/// `params`, and the values of the ones it uses.
fn bind<'a>(
    sql: &str,
    params: &[(&str, &'a (dyn ToSql + Sync))],
) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
    let mut sql = sql.to_owned();
    let mut used = Vec::new();
    for (name, value) in params {
        let named = format!("${name}");
        if sql.contains(&named) {
            used.push(*value);
            sql = sql.replace(&named, &format!("${}", used.len()));
        }
    }
    (sql, used)
}

/// The end of the ids starting with `prefix` in byte order: the prefix
/// with its last character made the next one (none: every id after it).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The rows of waiting jobs (`state < 2`) or of kept ones (dead or
/// completed) with ids in [`$lo`, `$hi`), counted up to `$budget`.
fn range_count(jobs: &str, kept: bool) -> String {
    let state = if kept { "state >= 2" } else { "state < 2" };
    format!(
        "SELECT count(*) FROM (SELECT 1 FROM {jobs}
             WHERE qno = $qno::int AND {state} AND id >= $lo::text AND id < $hi::text
             LIMIT $budget::bigint) r"
    )
}

/// One list's part of a search: its matches, the rows read, and whether
/// the list ended within them.
struct Part {
    jobs: Vec<FoundJob>,
    read: u64,
    ended: bool,
}

/// The search: up to `max` matches among the first `scan` jobs of the
/// states' lists, or every match where the id indexes hold the prefix's
/// jobs (see the module).
pub(super) fn search(q: &PgJobs, filter: &JobFilter, max: usize, scan: usize) -> Result<Found> {
    let names: Vec<&str> = filter.headers.iter().map(|(n, _)| n.as_str()).collect();
    let values: Vec<&str> = filter.headers.iter().map(|(_, v)| v.as_str()).collect();
    let prefix = filter.id_prefix.as_deref();
    let reason = filter.reason.as_deref();
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let now = ms(q.now());
    let real_now = PgJobs::real_now_ms();
    let jobs = &q.tables.jobs;
    let mut client = q.client()?;
    // The id range, if the indexes can give every match within `scan` rows.
    let range = match prefix.map(|p| (p, prefix_end(p))) {
        Some((lo, Some(hi))) if scan > 0 => {
            // Ids compare by their bytes whatever the database's
            // collation (schema 10): the ids starting with the prefix are
            // one range of each id index.
            let over = count(scan).saturating_add(1);
            let mut fits = true;
            for (reads, kept) in [(filter.reads_waiting(), false), (filter.reads_dead(), true)] {
                if fits && reads {
                    let hi = hi.as_str();
                    let (sql, params) = bind(
                        &range_count(jobs, kept),
                        &[("qno", &q.qno), ("lo", &lo), ("hi", &hi), ("budget", &over)],
                    );
                    let n: i64 = client.query(&sql, &params).map_err(db)?[0].get(0);
                    fits = n < over;
                }
            }
            fits.then(|| (lo.to_owned(), hi))
        }
        _ => None,
    };
    let (lo, hi) = range.clone().unwrap_or_default();
    let (lo, hi) = (lo.as_str(), hi.as_str());
    let leased = filter.state == SearchState::Leased;
    // Every row of the list matches: reading past `max` rows finds nothing
    // more; one more row tells whether the list ended.
    let plain = filter.headers.is_empty() && prefix.is_none() && reason.is_none() && !leased;
    let mut part = |list: List, budget: usize, max: usize| -> Result<Part> {
        let budget = count(match (&range, plain) {
            (Some(_), _) => scan,
            (None, true) => budget.min(max.saturating_add(1)),
            (None, false) => budget,
        });
        let max = count(max);
        let (sql, params) = bind(
            &list.search_sql(jobs, leased, range.is_some()),
            &[
                ("qno", &q.qno),
                ("now", &now),
                ("real", &real_now),
                ("names", &names),
                ("vals", &values),
                ("prefix", &prefix),
                ("reason", &reason),
                ("budget", &budget),
                ("max", &max),
                ("lo", &lo),
                ("hi", &hi),
            ],
        );
        let rows = client.query(&sql, &params).map_err(db)?;
        let read = rows.first().map_or(0, |row| row.get::<_, i64>("read")) as u64;
        let jobs = rows
            .iter()
            .filter(|row| row.get::<_, Option<i64>>("pos").is_some())
            .map(|row| match list {
                List::Dead => {
                    let d = dead_of(row);
                    FoundJob {
                        job: d.job,
                        place: JobPlace::Dead(d.reason),
                    }
                }
                _ => {
                    let w = waiting_of(row, now, real_now);
                    FoundJob {
                        job: w.job,
                        place: JobPlace::Waiting(w.state),
                    }
                }
            })
            .collect();
        Ok(Part {
            jobs,
            read,
            // The range held every row of its ids.
            ended: range.is_some() || read < budget as u64,
        })
    };
    let mut found = Found {
        complete: true,
        ..Found::default()
    };
    let mut budget = scan;
    if filter.reads_waiting() {
        if budget == 0 || max == 0 {
            found.complete = max == 0 && budget > 0;
        } else {
            let waiting = part(List::of(filter.state), budget, max)?;
            found.jobs = waiting.jobs;
            found.scanned += waiting.read;
            found.complete &= waiting.ended;
            budget -= (waiting.read as usize).min(budget);
        }
    }
    if filter.reads_dead() && found.jobs.len() < max {
        if budget == 0 && range.is_none() {
            found.complete = false;
        } else {
            let dead = part(List::Dead, budget, max - found.jobs.len())?;
            found.jobs.extend(dead.jobs);
            found.scanned += dead.read;
            found.complete &= dead.ended;
        }
    } else if filter.reads_dead() {
        // Stopped at `max` before the dead letters: they were not read.
        found.complete = false;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_prefix_is_the_next_string_in_byte_order() {
        assert_eq!(prefix_end("abc").as_deref(), Some("abd"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        assert_eq!(prefix_end(""), None);
        for id in ["abc", "abc0", "abc\u{10FFFF}\u{10FFFF}", "abcé"] {
            assert!(id >= "abc" && id < prefix_end("abc").unwrap().as_str());
        }
        assert!("abd" >= prefix_end("abc").unwrap().as_str());
    }

    #[test]
    fn named_parameters_are_numbered_in_order_of_the_list() {
        let (a, b) = (1i32, 2i64);
        let (sql, params) = bind(
            "x = $b AND y = $a AND z = $b",
            &[("a", &a), ("b", &b), ("c", &a)],
        );
        assert_eq!(sql, "x = $2 AND y = $1 AND z = $2");
        assert_eq!(params.len(), 2);
    }
}
