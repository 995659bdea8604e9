//! `GET /queues/{n}`: one queue's counts, its wait and run time charts, and
//! its jobs by state, a page at a time, filtered (`web::filter`: kind,
//! header, id prefix, failure reason).
//!
//! The list of every waiting job is paged by key
//! (`JobQueue::waiting_page`): "more" carries the next page's cursor
//! (`after=`), so pages go past 10,000 jobs and a deep page costs what
//! the first does on the embedded queue and PostgreSQL; a garbled cursor
//! is a 400. The other lists read from the front (`dead(max)`, searches),
//! so page p reads the p pages before it: they stop at
//! [`MAX_LIST_DEPTH`](crate::web::MAX_LIST_DEPTH) jobs. A list of one
//! waiting state, or filtered, is a `JobQueue::search` of at most
//! [`SCAN_BOUND`](crate::web::SCAN_BOUND) jobs where no index answers it,
//! and the page says how many of how many jobs it searched.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::bulk::bulk_bar;
use super::jobs_table::{table, Place, Row};
use super::queue_extras::Extras;
use super::{blocking, failed, page_number, param, queue_number};
use crate::jobs::PageCursor;
use crate::web::charts::chart;
use crate::web::filter::{Filter, STATES};
use crate::web::format::{count, duration};
use crate::web::numbers::Numbers;
use crate::web::{layout, App, MAX_LIST_DEPTH, PAGE_JOBS, SCAN_BOUND};

/// One page of a list: its rows, whether a next page exists, and whether
/// a bound cut the reading short.
struct Listing {
    rows: Vec<Row>,
    more: bool,
    bounded: bool,
    /// Jobs a search read, if the list was searched.
    scanned: Option<u64>,
    /// The next page's cursor, for the lists paged by key (every waiting
    /// job): no depth limit.
    next: Option<PageCursor>,
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
    let asked = Filter::of(&query);
    let state = asked.state.clone();
    let keyed = pages_by_key(&asked);
    let (label, queue) = app.queues[n].clone();
    // A keyset list goes as deep as the cursor takes it; the others stop
    // at the depth a page can re-read.
    let page_no = match keyed {
        true => page_number(&query),
        false => page_number(&query).min(MAX_LIST_DEPTH / PAGE_JOBS),
    };
    let after = match param(&query, "after").filter(|_| keyed) {
        None => None,
        Some(text) => match PageCursor::parse(text) {
            Ok(cursor) => Some(cursor),
            Err(e) => return bad_cursor(&app, n, &label, &e),
        },
    };
    let shown_after = after.clone();
    let now = SystemTime::now();
    let wanted = asked.clone();
    let read = blocking(move || -> crate::Result<(Numbers, Listing, Extras)> {
        let numbers = Numbers::read(queue.as_ref(), now)?;
        let listing = list(queue.as_ref(), &wanted, page_no, after.as_ref())?;
        Ok((numbers, listing, Extras::read(queue.as_ref())))
    })
    .await;
    let (numbers, listing, extras) = match read {
        Ok(read) => read,
        Err(e @ crate::Error::BadCursor { .. }) => return bad_cursor(&app, n, &label, &e),
        Err(e) => return failed(&app, &label, &e),
    };
    let c = numbers.stats.counts;
    let (wait, run) = numbers.timings();
    // The query of this list, less its page: tabs, paging and actions keep it.
    let filter = asked.query();
    // A cursor read back is one this server printed: URL-safe as it is.
    let resume = match &shown_after {
        Some(cursor) => format!("&after={cursor}"),
        None => String::new(),
    };
    let back = format!("/queues/{n}?state={state}{filter}&page={page_no}{resume}");
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
            label { "kind " input type="text" name="kind" value=[asked.kind.as_deref()] placeholder="any"; }
            " "
            label { "header " input type="text" name="header" value=[asked.header.as_ref().map(|(k, v)| format!("{k}={v}"))] placeholder="NAME=VALUE"; }
            " "
            label { "id starts with " input type="text" name="prefix" value=[asked.id.as_deref()]; }
            " "
            label { "reason contains " input type="text" name="reason" value=[asked.reason.as_deref()] placeholder="dead letters"; }
            " "
            button type="submit" { "Filter" }
            @if asked.narrows() { " " a href={ "/queues/" (n) "?state=" (state) } { "clear" } }
        }
        @if let Some(scanned) = listing.scanned {
            @let total = in_states(&c, &state);
            p.note #scanned {
                "Searched " (count(scanned)) " of " (count(total)) " " (state) " jobs"
                @if listing.bounded {
                    " (the bound): matches beyond them are not shown. Where no index answers a filter, a search reads at most this many jobs, from the front of the list (the embedded queue: ids and headers, not bodies)."
                } @else { "." }
            }
        }
        (bulk_bar(&app, n, &asked))
        @if listing.rows.is_empty() {
            p { "No " (state) " jobs" @if page_no > 1 { " on this page" } "." }
        } @else {
            (table(&app, n, &listing.rows, &back, state == "dead"))
        }
        @if keyed {
            nav.pages {
                @if page_no > 1 { a rel="first" href={ "/queues/" (n) "?state=" (state) (filter) } { "← first page" } " " }
                "page " (page_no)
                @if let Some(next) = &listing.next {
                    " " a rel="next" href={ "/queues/" (n) "?state=" (state) (filter) "&page=" (page_no.saturating_add(1)) "&after=" (next) } { "more →" }
                }
            }
        } @else {
            nav.pages {
                @if page_no > 1 { a rel="prev" href={ "/queues/" (n) "?state=" (state) (filter) "&page=" (page_no - 1) } { "← newer" } " " }
                "page " (page_no)
                @if listing.more { " " a rel="next" href={ "/queues/" (n) "?state=" (state) (filter) "&page=" (page_no + 1) } { "more →" } }
            }
        }
        (extras.sections(now))
    };
    layout::page(&app, StatusCode::OK, &label, body)
}

/// The header that names a job's kind: the worker runtime's
/// `KIND_HEADER`, qless's class on Redis.
pub const KIND_HEADER: &str = "klass";

/// Whether a list is paged by key (`JobQueue::waiting_page`): every
/// waiting job, unfiltered.
fn pages_by_key(filter: &Filter) -> bool {
    !filter.narrows() && filter.state == "waiting"
}

/// The answer to a cursor the queue refused (garbled, or another
/// queue's): 400, with the way back to the first page.
fn bad_cursor(app: &App, n: usize, label: &str, error: &crate::Error) -> Response {
    layout::page(
        app,
        StatusCode::BAD_REQUEST,
        label,
        html! {
            p { (error.to_string()) }
            p { a href={ "/queues/" (n) } { "The first page" } }
        },
    )
}

/// Page `page_no` of the jobs `filter` keeps: for every waiting job, the
/// page after cursor `after` (`waiting_page`); the front of `dead` when
/// it keeps every dead letter; else a search of at most [`SCAN_BOUND`]
/// jobs.
fn list(
    queue: &dyn crate::jobs::JobQueue,
    filter: &Filter,
    page_no: usize,
    after: Option<&PageCursor>,
) -> crate::Result<Listing> {
    if pages_by_key(filter) {
        let mut page = queue.waiting_page(after, PAGE_JOBS)?;
        // A page number without a cursor (a link from before keyset
        // pages, or typed): reached page by page from the first, as deep
        // as a list read from the front goes.
        if after.is_none() {
            for _ in 1..page_no.min(MAX_LIST_DEPTH / PAGE_JOBS) {
                page = match page.next.take() {
                    Some(next) => queue.waiting_page(Some(&next), PAGE_JOBS)?,
                    // Past the end: an empty page.
                    None => crate::jobs::Page::default(),
                };
            }
        }
        let rows = page
            .jobs
            .into_iter()
            .map(|w| Row {
                job: w.job,
                place: Place::Waiting(w.state),
            })
            .collect();
        return Ok(Listing {
            rows,
            more: page.next.is_some(),
            bounded: false,
            scanned: None,
            next: page.next,
        });
    }
    let skip = (page_no - 1) * PAGE_JOBS;
    let want = skip + PAGE_JOBS + 1;
    let page = |mut all: Vec<Row>, bounded: bool, scanned: Option<u64>| {
        let more = all.len() > skip + PAGE_JOBS;
        all.truncate(skip + PAGE_JOBS);
        let rows = all.split_off(skip.min(all.len()));
        Listing {
            rows,
            more: more && skip + PAGE_JOBS < MAX_LIST_DEPTH,
            bounded,
            scanned,
            next: None,
        }
    };
    let dead_row = |d: crate::jobs::DeadJob| Row {
        job: d.job,
        place: Place::Dead(d.reason),
    };
    if !filter.narrows() && filter.state == "dead" {
        let rows = queue.dead(want)?.into_iter().map(dead_row).collect();
        return Ok(page(rows, false, None));
    }
    let found = queue.search(&filter.jobs_filter(), want, SCAN_BOUND)?;
    let bounded = !found.complete && found.jobs.len() < want;
    let rows = found.jobs.into_iter().map(Row::from).collect();
    Ok(page(rows, bounded, Some(found.scanned)))
}

/// The jobs of a list's state now.
fn in_states(c: &crate::jobs::Counts, state: &str) -> u64 {
    match state {
        "ready" => c.ready,
        "leased" => c.leased,
        "scheduled" => c.scheduled,
        "dead" => c.dead,
        _ => c.ready + c.leased + c.scheduled,
    }
}

#[cfg(all(test, feature = "runtime"))]
mod tests {
    #[test]
    fn the_kind_is_the_runtimes_kind_header() {
        assert_eq!(super::KIND_HEADER, crate::runtime::KIND_HEADER);
    }
}
