//! Acting on every job a filter keeps: `GET /queues/{n}/bulk?…&do=ACTION`
//! searches (through [`JobQueue::search`](crate::jobs::JobQueue::search)),
//! shows how many jobs the action would change, and a form that confirms
//! it; `POST /queues/{n}/bulk` (CSRF token required) searches again and
//! acts on the jobs it finds, one Jobs API call each, unless they are not
//! the jobs shown (more of them, or others: the form carries a fingerprint
//! of the confirmed ids; then it asks again). Neither is routed in
//! read-only mode.
//!
//! The actions: `retry` (a dead letter requeued, its attempts starting
//! over), `cancel` and `priority` (ready or scheduled jobs; a leased one
//! is its worker's). A retry takes at most [`BULK_BOUND`] jobs, a cancel
//! or a priority change [`BULK_LOOKUPS`], found among the first
//! [`SCAN_BOUND`] jobs read where no index answers the filter.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use maud::{html, Markup};

use super::jobs_table::Row;
use super::{blocking, failed, param, queue_number};
use crate::jobs::{FoundJob, JobPlace, JobQueue, WaitState};
use crate::web::filter::Filter;
use crate::web::format::count;
use crate::web::security::check_post;
use crate::web::{layout, App, SCAN_BOUND};

/// Dead letters one retry of every match requeues at most (one pass).
pub const BULK_BOUND: usize = 10_000;
/// Jobs one cancel or priority change of every match changes at most (as
/// many as a selection names; one batch call, `cancel_many` or
/// `set_priority_many`, which finds made-up ids in one pass).
pub const BULK_LOOKUPS: usize = crate::web::MAX_SELECTION;

/// Ids shown on the confirmation page.
const SHOWN_IDS: usize = 20;

/// An action on every match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    Retry,
    Cancel,
    Priority(i32),
}

impl Bulk {
    fn of(fields: &[(String, String)]) -> Result<Self, String> {
        match param(fields, "do").unwrap_or("") {
            "retry" => Ok(Bulk::Retry),
            "cancel" => Ok(Bulk::Cancel),
            "priority" => param(fields, "priority")
                .and_then(|p| p.trim().parse::<i32>().ok())
                .map(Bulk::Priority)
                .ok_or_else(|| "The priority must be a whole number.".to_owned()),
            _ => Err("No such action: retry, cancel and priority are.".to_owned()),
        }
    }

    /// Whether the action can change a job in `place`.
    fn takes(self, place: &JobPlace) -> bool {
        match (self, place) {
            (Bulk::Retry, JobPlace::Dead(_)) => true,
            (Bulk::Cancel | Bulk::Priority(_), JobPlace::Waiting(state)) => {
                *state != WaitState::Leased
            }
            _ => false,
        }
    }

    /// Jobs one action takes at most.
    fn bound(self) -> usize {
        match self {
            Bulk::Retry => BULK_BOUND,
            Bulk::Cancel | Bulk::Priority(_) => BULK_LOOKUPS,
        }
    }

    fn verb(self) -> String {
        match self {
            Bulk::Retry => "Retry".into(),
            Bulk::Cancel => "Cancel".into(),
            Bulk::Priority(p) => format!("Set priority {p} of"),
        }
    }

    fn done(self) -> &'static str {
        match self {
            Bulk::Retry => "Retried",
            Bulk::Cancel => "Cancelled",
            Bulk::Priority(_) => "Priority set for",
        }
    }

    /// The action on every job of `ids`, as a batch call: one pass over
    /// the jobs on the embedded queue (not one look per made-up id), one
    /// statement on PostgreSQL.
    fn apply(self, queue: &dyn JobQueue, ids: &[String]) -> Vec<crate::Result<()>> {
        match self {
            Bulk::Retry => queue.requeue_dead_many(ids),
            Bulk::Cancel => queue.cancel_many(ids),
            Bulk::Priority(p) => queue.set_priority_many(ids, p),
        }
    }
}

/// The jobs an action would change now: the ids, and the search's reach.
struct Matches {
    ids: Vec<String>,
    scanned: u64,
    complete: bool,
}

/// What a confirmed action did: each job's outcome, or nothing because
/// more jobs match now than were confirmed, or other jobs.
enum Applied {
    Done(Vec<(String, crate::Result<()>)>),
    Grown(Matches),
    Changed(Matches),
}

/// The fingerprint of a set of ids (in any order) the confirmation form
/// carries: the action runs only on the very jobs confirmed, never on one
/// that began to match after the count (a same count hides a swap).
fn fingerprint(ids: &[String]) -> String {
    use std::hash::{Hash, Hasher};
    let mut sorted: Vec<&String> = ids.iter().collect();
    sorted.sort();
    // Fixed keys: the page and the POST are hashed by the same process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    sorted.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn matches(queue: &dyn JobQueue, filter: &Filter, bulk: Bulk) -> crate::Result<Matches> {
    let found = queue.search(&filter.jobs_filter(), SCAN_BOUND, SCAN_BOUND)?;
    let ids: Vec<String> = found
        .jobs
        .into_iter()
        .filter(|f| bulk.takes(&f.place))
        .map(|f| f.job.id)
        .take(bulk.bound())
        .collect();
    Ok(Matches {
        ids,
        scanned: found.scanned,
        complete: found.complete,
    })
}

/// The buttons under a list that act on every job of its filter (a GET to
/// the confirmation page). None in read-only mode.
pub fn bulk_bar(app: &App, n: usize, filter: &Filter) -> Markup {
    if app.read_only {
        return html! {};
    }
    html! {
        form.bar-actions #bulk method="get" action={ "/queues/" (n) "/bulk" } {
            (filter.hidden())
            "Every match: "
            @if filter.state == "dead" {
                button type="submit" name="do" value="retry" { "Retry all…" }
            } @else {
                button type="submit" name="do" value="cancel" { "Cancel all…" }
                " "
                label { "priority " input type="number" name="priority" value="0" min=(i32::MIN) max=(i32::MAX); }
                button type="submit" name="do" value="priority" { "Set priority of all…" }
            }
        }
    }
}

fn list_href(n: usize, filter: &Filter) -> String {
    format!("/queues/{n}?state={}{}", filter.state, filter.query())
}

fn refused(app: &App, why: String) -> Response {
    layout::page(
        app,
        StatusCode::BAD_REQUEST,
        "Nothing done",
        html! { p { (why) } },
    )
}

/// The page that counts the jobs an action would change, and confirms it.
fn confirm_page(
    app: &App,
    n: usize,
    filter: &Filter,
    bulk: Bulk,
    found: &Matches,
    status: StatusCode,
    before: Markup,
) -> Response {
    let total = found.ids.len();
    let body = html! {
        (before)
        p #count data-count=(total) {
            (bulk.verb()) " " strong { (count(total as u64)) } " jobs: " (filter.describe()) "."
        }
        p.note #scanned {
            "Searched " (count(found.scanned)) " jobs"
            @if found.complete { ", every one of these states." }
            @else { " (the bound): jobs beyond them are not included; run it again for the rest." }
            @if total == bulk.bound() { " One action takes at most " (count(total as u64)) " jobs: run it again for the rest." }
        }
        @if total > 0 {
            p { "For example: "
                @for id in found.ids.iter().take(SHOWN_IDS) { code { (id) } " " }
                @if total > SHOWN_IDS { "…" }
            }
            form method="post" action={ "/queues/" (n) "/bulk" } {
                input type="hidden" name="csrf" value=(app.csrf);
                (filter.hidden())
                @match bulk {
                    Bulk::Retry => { input type="hidden" name="do" value="retry"; }
                    Bulk::Cancel => { input type="hidden" name="do" value="cancel"; }
                    Bulk::Priority(p) => {
                        input type="hidden" name="do" value="priority";
                        input type="hidden" name="priority" value=(p);
                    }
                }
                input type="hidden" name="expect" value=(total);
                input type="hidden" name="matches" value=(fingerprint(&found.ids));
                button type="submit" #confirm { (bulk.verb()) " " (total) " jobs" }
            }
        } @else {
            p { "No job matches: nothing to do." }
        }
        p { a #back href=(list_href(n, filter)) { "Back to the list" } }
    };
    layout::page(app, status, "Act on every match", body)
}

/// `GET /queues/{n}/bulk`: the count, and the form that confirms.
pub async fn confirm(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    let bulk = match Bulk::of(&query) {
        Ok(bulk) => bulk,
        Err(why) => return refused(&app, why),
    };
    let filter = Filter::of(&query);
    let (label, queue) = app.queues[n].clone();
    let asked = filter.clone();
    match blocking(move || matches(queue.as_ref(), &asked, bulk)).await {
        Ok(found) => confirm_page(&app, n, &filter, bulk, &found, StatusCode::OK, html! {}),
        Err(e) => failed(&app, &label, &e),
    }
}

/// `POST /queues/{n}/bulk`: searches again and acts, unless more jobs
/// match than the confirmation showed.
pub async fn apply(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    if let Err(refusal) = check_post(&app, &headers, &fields) {
        return *refusal;
    }
    let bulk = match Bulk::of(&fields) {
        Ok(bulk) => bulk,
        Err(why) => return refused(&app, why),
    };
    let Some(expect) = param(&fields, "expect").and_then(|e| e.parse::<usize>().ok()) else {
        return refused(
            &app,
            "The form names no count: confirm from the count's page.".into(),
        );
    };
    let Some(confirmed) = param(&fields, "matches").map(str::to_owned) else {
        return refused(
            &app,
            "The form names no matches: confirm from the count's page.".into(),
        );
    };
    let filter = Filter::of(&fields);
    let (label, queue) = app.queues[n].clone();
    let asked = filter.clone();
    let work = blocking(move || -> crate::Result<Applied> {
        let found = matches(queue.as_ref(), &asked, bulk)?;
        // Never more than the user saw: ask again instead.
        if found.ids.len() > expect {
            return Ok(Applied::Grown(found));
        }
        if fingerprint(&found.ids) != confirmed {
            return Ok(Applied::Changed(found));
        }
        let outcomes = bulk.apply(queue.as_ref(), &found.ids);
        Ok(Applied::Done(found.ids.into_iter().zip(outcomes).collect()))
    })
    .await;
    let outcomes = match work {
        Ok(Applied::Done(outcomes)) => outcomes,
        Ok(Applied::Grown(grown)) => {
            let said = html! {
                p #changed { "More jobs match now than the " (expect) " you confirmed: nothing done. Confirm the new count." }
            };
            return confirm_page(&app, n, &filter, bulk, &grown, StatusCode::CONFLICT, said);
        }
        Ok(Applied::Changed(now)) => {
            let said = html! {
                p #changed { "Other jobs match now than the " (expect) " you confirmed: nothing done. Confirm the jobs that match now." }
            };
            return confirm_page(&app, n, &filter, bulk, &now, StatusCode::CONFLICT, said);
        }
        Err(e) => return failed(&app, &label, &e),
    };
    let done = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    let status = if done == 0 && !outcomes.is_empty() {
        StatusCode::CONFLICT
    } else {
        StatusCode::OK
    };
    let body = html! {
        p #outcome { (bulk.done()) " " (done) " of " (outcomes.len()) " matching jobs (" (expect) " when confirmed): " (filter.describe()) "." }
        @if done < outcomes.len() {
            table { thead { tr { th { "job" } th { "not done: why" } } }
                tbody { @for (id, result) in &outcomes { @if let Err(e) = result {
                    tr { td { code { (id) } } td { (e.to_string()) } }
                } } } }
        }
        p { a #back href=(list_href(n, &filter)) { "Back to the list" } }
    };
    layout::page(&app, status, "Done", body)
}

impl From<FoundJob> for Row {
    fn from(found: FoundJob) -> Self {
        Row {
            job: found.job,
            place: match found.place {
                JobPlace::Waiting(state) => super::jobs_table::Place::Waiting(state),
                JobPlace::Dead(reason) => super::jobs_table::Place::Dead(reason),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_takes_the_jobs_it_can_change() {
        let ready = JobPlace::Waiting(WaitState::Ready);
        let leased = JobPlace::Waiting(WaitState::Leased);
        let dead = JobPlace::Dead("x".into());
        assert!(Bulk::Retry.takes(&dead) && !Bulk::Retry.takes(&ready));
        for waiting in [Bulk::Cancel, Bulk::Priority(3)] {
            assert!(waiting.takes(&ready) && !waiting.takes(&leased) && !waiting.takes(&dead));
        }
    }
}
