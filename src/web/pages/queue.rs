//! `GET /queues/{n}`: one queue's counts, its wait and run time charts, and
//! its jobs by state, a page at a time.
//!
//! The Jobs API reads from the front (`waiting(max)`, `dead(max)`), so
//! page p reads the p pages before it: the list stops at
//! [`MAX_LIST_DEPTH`](crate::web::MAX_LIST_DEPTH) jobs. A list of one
//! waiting state picks its jobs from the first
//! [`SCAN_BOUND`](crate::web::SCAN_BOUND) waiting ones (or dead letters)
//! and says so; so does a list of one kind (`?kind=K`: header `klass`,
//! the kind of the worker runtime and qless's class), which the Jobs API
//! cannot look up, so it reads every job it shows past.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::jobs_table::{table, Place, Row};
use super::queue_extras::Extras;
use super::{blocking, failed, page_number, param, queue_number};
use crate::jobs::WaitState;
use crate::web::charts::chart;
use crate::web::format::{count, duration};
use crate::web::numbers::Numbers;
use crate::web::{layout, App, MAX_LIST_DEPTH, PAGE_JOBS, SCAN_BOUND};

/// The states a list can show.
const STATES: [&str; 5] = ["waiting", "ready", "leased", "scheduled", "dead"];

/// One page of a list: its rows, whether a next page exists, and whether
/// a bound cut the reading short.
struct Listing {
    rows: Vec<Row>,
    more: bool,
    bounded: bool,
}

/// The queue page.
pub async fn page(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    let state = param(&query, "state")
        .filter(|s| STATES.contains(s))
        .unwrap_or("waiting")
        .to_owned();
    let page_no = page_number(&query).min(MAX_LIST_DEPTH / PAGE_JOBS);
    let kind = param(&query, "kind")
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    let wanted_kind = kind.clone();
    let (label, queue) = app.queues[n].clone();
    let now = SystemTime::now();
    let wanted = state.clone();
    let read = blocking(move || -> crate::Result<(Numbers, Listing, Extras)> {
        let numbers = Numbers::read(queue.as_ref(), now)?;
        let listing = list(queue.as_ref(), &wanted, wanted_kind.as_deref(), page_no)?;
        Ok((numbers, listing, Extras::read(queue.as_ref())))
    })
    .await;
    let (numbers, listing, extras) = match read {
        Ok(read) => read,
        Err(e) => return failed(&app, &label, &e),
    };
    let c = numbers.stats.counts;
    let (wait, run) = numbers.timings();
    // The query of this list, less its page: tabs, paging and actions keep it.
    let filter = match &kind {
        Some(k) => format!("&kind={}", super::dead::urlencode(k)),
        None => String::new(),
    };
    let back = format!("/queues/{n}?state={state}{filter}&page={page_no}");
    let body = html! {
        (extras.pause_bar(&app, n))
        table.counts { tbody { tr {
            th { "ready" } td.n data-live={ (n) ".ready" } { (count(c.ready)) }
            th { "scheduled" } td.n data-live={ (n) ".scheduled" } { (count(c.scheduled)) }
            th { "leased" } td.n data-live={ (n) ".leased" } { (count(c.leased)) }
            th { a href={ "/queues/" (n) "/dead" } { "dead" } } td.n data-live={ (n) ".dead" } { (count(c.dead)) }
            th { "oldest ready" } td.n data-live={ (n) ".oldest_ready" } { (numbers.oldest_ready.map(duration).unwrap_or_else(|| "–".into())) }
        } } }
        div.charts {
            (chart("Wait (enqueue to lease)", &wait))
            (chart("Run (lease to ack)", &run))
        }
        p.note { (numbers.stats.days.len()) " days on record." }
        form.find #find method="get" action={ "/queues/" (n) "/jobs" } {
            label { "find a job by id " input type="text" name="job" required; }
            " "
            button type="submit" { "Open" }
        }
        nav.tabs {
            @for s in STATES {
                a.on[s == state] href={ "/queues/" (n) "?state=" (s) (filter) } { (s) }
            }
        }
        form.filter method="get" action={ "/queues/" (n) } {
            input type="hidden" name="state" value=(state);
            label { "kind " input type="text" name="kind" value=[kind.as_deref()] placeholder="any"; }
            " "
            button type="submit" { "Filter" }
            @if kind.is_some() { " " a href={ "/queues/" (n) "?state=" (state) } { "all kinds" } }
        }
        @if listing.bounded {
            p.note { "Picked from the first " (count(SCAN_BOUND as u64)) " jobs: the Jobs API lists jobs from the front only." }
        }
        @if listing.rows.is_empty() {
            p { "No " (state) " jobs" @if page_no > 1 { " on this page" } "." }
        } @else {
            (table(&app, n, &listing.rows, &back, state == "dead"))
        }
        nav.pages {
            @if page_no > 1 { a rel="prev" href={ "/queues/" (n) "?state=" (state) (filter) "&page=" (page_no - 1) } { "← newer" } " " }
            "page " (page_no)
            @if listing.more { " " a rel="next" href={ "/queues/" (n) "?state=" (state) (filter) "&page=" (page_no + 1) } { "more →" } }
        }
        (extras.sections(now))
    };
    layout::page(&app, StatusCode::OK, &label, body)
}

/// The header that names a job's kind: the worker runtime's
/// `KIND_HEADER`, qless's class on Redis.
pub const KIND_HEADER: &str = "klass";

/// Page `page_no` of the jobs in `state` (of `kind`, if given).
fn list(
    queue: &dyn crate::jobs::JobQueue,
    state: &str,
    kind: Option<&str>,
    page_no: usize,
) -> crate::Result<Listing> {
    let skip = (page_no - 1) * PAGE_JOBS;
    let want = skip + PAGE_JOBS + 1;
    let page = |mut all: Vec<Row>, bounded: bool| {
        let more = all.len() > skip + PAGE_JOBS;
        all.truncate(skip + PAGE_JOBS);
        let rows = all.split_off(skip.min(all.len()));
        Listing {
            rows,
            more: more && skip + PAGE_JOBS < MAX_LIST_DEPTH,
            bounded,
        }
    };
    let of_kind = |job: &crate::jobs::Job| kind.is_none_or(|k| job.header(KIND_HEADER) == Some(k));
    if state == "dead" {
        let (dead, bounded) = if kind.is_none() {
            (queue.dead(want)?, false)
        } else {
            scan(|n| queue.dead(n), |d| of_kind(&d.job), want)?
        };
        let rows = dead
            .into_iter()
            .filter(|d| of_kind(&d.job))
            .map(|d| Row {
                job: d.job,
                place: Place::Dead(d.reason),
            })
            .collect();
        return Ok(page(rows, bounded));
    }
    let in_state = |w: &crate::jobs::Waiting| {
        matches!(
            (state, w.state),
            ("waiting", _)
                | ("ready", WaitState::Ready)
                | ("leased", WaitState::Leased)
                | ("scheduled", WaitState::Scheduled(_))
        )
    };
    let keep = |w: &crate::jobs::Waiting| in_state(w) && of_kind(&w.job);
    let (waiting, bounded) = if state == "waiting" && kind.is_none() {
        (queue.waiting(want)?, false)
    } else {
        scan(|n| queue.waiting(n), keep, want)?
    };
    let rows = waiting
        .into_iter()
        .filter(keep)
        .map(|w| Row {
            job: w.job,
            place: Place::Waiting(w.state),
        })
        .collect();
    Ok(page(rows, bounded))
}

/// Reads more of the front (`read(n)`) until `want` items pass `keep`,
/// the list ends, or [`SCAN_BOUND`] items were read; whether the bound
/// cut it short.
fn scan<T>(
    read: impl Fn(usize) -> crate::Result<Vec<T>>,
    keep: impl Fn(&T) -> bool,
    want: usize,
) -> crate::Result<(Vec<T>, bool)> {
    let mut look = want.min(SCAN_BOUND);
    loop {
        let items = read(look)?;
        let ended = items.len() < look;
        let found = items.iter().filter(|i| keep(i)).count();
        if ended || found >= want || look == SCAN_BOUND {
            return Ok((items, !ended && look == SCAN_BOUND && found < want));
        }
        look = (look * 4).min(SCAN_BOUND);
    }
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    #[test]
    fn the_kind_is_the_runtimes_kind_header() {
        assert_eq!(super::KIND_HEADER, crate::runtime::KIND_HEADER);
    }
}
