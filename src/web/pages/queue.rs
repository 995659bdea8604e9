//! `GET /queues/{n}`: one queue's counts, its wait and run time charts, and
//! its jobs by state, a page at a time.
//!
//! The Jobs API reads from the front (`waiting(max)`, `dead(max)`), so
//! page p reads the p pages before it: the list stops at
//! [`MAX_LIST_DEPTH`](crate::web::MAX_LIST_DEPTH) jobs. A list of one
//! waiting state picks its jobs from the first
//! [`SCAN_BOUND`](crate::web::SCAN_BOUND) waiting ones and says so.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::jobs_table::{table, Place, Row};
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
    let (label, queue) = app.queues[n].clone();
    let now = SystemTime::now();
    let wanted = state.clone();
    let read = blocking(move || -> crate::Result<(Numbers, Listing)> {
        let numbers = Numbers::read(queue.as_ref(), now)?;
        let listing = list(queue.as_ref(), &wanted, page_no)?;
        Ok((numbers, listing))
    })
    .await;
    let (numbers, listing) = match read {
        Ok(read) => read,
        Err(e) => return failed(&app, &label, &e),
    };
    let c = numbers.stats.counts;
    let (wait, run) = numbers.timings();
    let back = format!("/queues/{n}?state={state}&page={page_no}");
    let body = html! {
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
        nav.tabs {
            @for s in STATES {
                a.on[s == state] href={ "/queues/" (n) "?state=" (s) } { (s) }
            }
        }
        @if listing.bounded {
            p.note { "Picked from the first " (count(SCAN_BOUND as u64)) " waiting jobs: the Jobs API lists waiting jobs from the front only." }
        }
        @if listing.rows.is_empty() {
            p { "No " (state) " jobs" @if page_no > 1 { " on this page" } "." }
        } @else {
            (table(&app, n, &listing.rows, &back, state == "dead"))
        }
        nav.pages {
            @if page_no > 1 { a rel="prev" href={ "/queues/" (n) "?state=" (state) "&page=" (page_no - 1) } { "← newer" } " " }
            "page " (page_no)
            @if listing.more { " " a rel="next" href={ "/queues/" (n) "?state=" (state) "&page=" (page_no + 1) } { "more →" } }
        }
    };
    layout::page(&app, StatusCode::OK, &label, body)
}

/// Page `page_no` of the jobs in `state`.
fn list(queue: &dyn crate::jobs::JobQueue, state: &str, page_no: usize) -> crate::Result<Listing> {
    let skip = (page_no - 1) * PAGE_JOBS;
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
    Ok(match state {
        "dead" => {
            let dead = queue.dead(skip + PAGE_JOBS + 1)?;
            let rows = dead
                .into_iter()
                .map(|d| Row {
                    job: d.job,
                    place: Place::Dead(d.reason),
                })
                .collect();
            page(rows, false)
        }
        "waiting" => {
            let waiting = queue.waiting(skip + PAGE_JOBS + 1)?;
            let rows = waiting
                .into_iter()
                .map(|w| Row {
                    job: w.job,
                    place: Place::Waiting(w.state),
                })
                .collect();
            page(rows, false)
        }
        one => {
            let keep = |w: &crate::jobs::Waiting| {
                matches!(
                    (one, w.state),
                    ("ready", WaitState::Ready)
                        | ("leased", WaitState::Leased)
                        | ("scheduled", WaitState::Scheduled(_))
                )
            };
            // Read more of the front until the page is full, the queue
            // ends, or the bound is reached.
            let mut look = (skip + PAGE_JOBS + 1).min(SCAN_BOUND);
            let (waiting, bounded) = loop {
                let waiting = queue.waiting(look)?;
                let ended = waiting.len() < look;
                let found = waiting.iter().filter(|w| keep(w)).count();
                if ended || found > skip + PAGE_JOBS || look == SCAN_BOUND {
                    break (waiting, !ended && look == SCAN_BOUND);
                }
                look = (look * 4).min(SCAN_BOUND);
            };
            let rows = waiting
                .into_iter()
                .filter(|w| keep(w))
                .map(|w| Row {
                    job: w.job,
                    place: Place::Waiting(w.state),
                })
                .collect();
            page(rows, bounded)
        }
    })
}
