//! Keyset pages of the waiting rows: the cursor is the last row's place
//! in `waiting`'s order, (priority, ready_at, seq) among the ready rows
//! or (ready_at, seq) among the scheduled ones, and the next page starts
//! after it with a row comparison the lease index (`jobs_next`: qno,
//! priority, ready_at, seq) answers: a deep page costs what the first
//! does.
//!
//! The cursor also carries the first page's time, which splits ready
//! from scheduled rows for the whole walk: a row falling due during a
//! walk keeps its place in it. A row keeps its place while it waits; a
//! retry, a priority change or a requeue gives it a new `seq` (and
//! ready_at): the rule of [`PageCursor`](crate::jobs::PageCursor).

use std::time::SystemTime;

use super::calls::{Rules, Sql};
use super::errors::db;
use super::{ms, rows, PgJobs, JOB_COLUMNS};
use crate::error::Result;
use crate::jobs::paging::{Page, PageCursor};

/// Cursor kinds: a ready (or leased) row, a scheduled one.
const READY: &str = "pR";
const LATER: &str = "pS";

/// Where a page starts.
enum After {
    Start,
    Ready(i32, i64, i64),
    Later(i64, i64),
}

/// `$1` qno, `$2` the walk's split time, `$3` limit, `$4..$6` the ready row's
/// (priority, ready_at, seq) after which the page starts: ready rows in
/// lease order, then the scheduled ones by due time (as `waiting`).
fn after_ready(jobs: &str) -> String {
    format!(
        "SELECT * FROM (
             (SELECT {JOB_COLUMNS}, lease_until FROM {jobs}
              WHERE qno = $1 AND state < 2 AND ready_at <= $2
                AND (priority, ready_at, seq) > ($4::int, $5::bigint, $6::bigint)
              ORDER BY priority, ready_at, seq LIMIT $3)
             UNION ALL
             (SELECT {JOB_COLUMNS}, lease_until FROM {jobs}
              WHERE qno = $1 AND state < 2 AND ready_at > $2
              ORDER BY ready_at, seq LIMIT $3)
         ) listed LIMIT $3"
    )
}

/// `$1` qno, `$2` limit, `$3`/`$4` the scheduled row's (ready_at, seq)
/// after which the page starts.
fn after_later(jobs: &str) -> String {
    format!(
        "SELECT {JOB_COLUMNS}, lease_until FROM {jobs}
         WHERE qno = $1 AND state < 2 AND (ready_at, seq) > ($3::bigint, $4::bigint)
         ORDER BY ready_at, seq LIMIT $2"
    )
}

impl Rules<'_> {
    /// Up to `max` waiting rows at `now` after `after`, with the cursor
    /// of the next page.
    pub(super) async fn waiting_page(
        &self,
        conn: &mut impl Sql,
        after: Option<&PageCursor>,
        max: usize,
        now: SystemTime,
    ) -> Result<Page> {
        let (as_of, from) = after_of(after, ms(now))?;
        let now = ms(now);
        let real_now = PgJobs::real_now_ms();
        // One row more than the page: whether a next page exists.
        let limit = i64::try_from(max).unwrap_or(i64::MAX).saturating_add(1);
        let found = match from {
            After::Start => {
                conn.query(&self.sql.waiting, &[&self.qno, &as_of, &limit])
                    .await
            }
            After::Ready(priority, ready_at, seq) => {
                let sql = after_ready(&self.tables.jobs);
                let params: [&(dyn postgres::types::ToSql + Sync); 6] =
                    [&self.qno, &as_of, &limit, &priority, &ready_at, &seq];
                conn.query(&sql, &params).await
            }
            After::Later(ready_at, seq) => {
                let sql = after_later(&self.tables.jobs);
                conn.query(&sql, &[&self.qno, &limit, &ready_at, &seq])
                    .await
            }
        }
        .map_err(db)?;
        let more = found.len() > max;
        let shown = &found[..max.min(found.len())];
        let next = match (more, shown.last()) {
            (true, Some(last)) => {
                let ready_at: i64 = last.get("ready_at");
                let seq: i64 = last.get("seq");
                let (a, r, s) = (i128::from(as_of), i128::from(ready_at), i128::from(seq));
                // The walk's split, not the time now, says which part a
                // row is in.
                Some(match ready_at <= as_of {
                    false => PageCursor::new(LATER, &[a, r, s]),
                    true => {
                        let priority: i32 = last.get("priority");
                        PageCursor::new(READY, &[a, i128::from(priority), r, s])
                    }
                })
            }
            _ => None,
        };
        let jobs = shown
            .iter()
            .map(|row| rows::waiting_of(row, now, real_now))
            .collect();
        Ok(Page { jobs, next })
    }
}

/// The walk's split time (`now` for a first page) and where the page
/// starts.
///
/// # Errors
///
/// `BadCursor` for one of another backend or out of range.
fn after_of(after: Option<&PageCursor>, now: i64) -> Result<(i64, After)> {
    let Some(cursor) = after else {
        return Ok((now, After::Start));
    };
    Ok(match cursor.kind() {
        LATER => {
            let [as_of, ready_at, seq] = cursor.fields::<i64, 3>(LATER)?;
            (as_of, After::Later(ready_at, seq))
        }
        _ => {
            let [as_of, priority, ready_at, seq] = cursor.fields::<i64, 4>(READY)?;
            let priority = i32::try_from(priority).map_err(|_| crate::Error::BadCursor {
                reason: format!("a priority out of range in {:?}", cursor.to_string()),
            })?;
            (as_of, After::Ready(priority, ready_at, seq))
        }
    })
}
