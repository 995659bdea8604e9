//! `GET /queues/{n}/dead`: the dead letters grouped by failure reason (the
//! text before the reason's first colon, as the stats count them);
//! `?reason=GROUP` lists one group, with a button that requeues all of it.
//! It reads the first [`SCAN_BOUND`](crate::web::SCAN_BOUND) dead letters
//! and says so when there are more.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::jobs_table::{all_form, table, Place, Row};
use super::{blocking, failed, param, queue_number};
use crate::jobs::{failure_group, DeadJob};
use crate::web::format::count;
use crate::web::{layout, App, MAX_SELECTION, SCAN_BOUND};

/// Dead letters of one group listed on the page.
const GROUP_LIST: usize = 200;

/// The dead letters page.
pub async fn page(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    let (label, queue) = app.queues[n].clone();
    let dead = match blocking(move || queue.dead(SCAN_BOUND)).await {
        Ok(dead) => dead,
        Err(e) => return failed(&app, &label, &e),
    };
    let bounded = dead.len() == SCAN_BOUND;
    let mut groups: BTreeMap<String, Vec<DeadJob>> = BTreeMap::new();
    for job in dead {
        groups
            .entry(failure_group(&job.reason))
            .or_default()
            .push(job);
    }
    let mut by_size: Vec<(&String, &Vec<DeadJob>)> = groups.iter().collect();
    by_size.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    let chosen = param(&query, "reason").and_then(|r| groups.get_key_value(r));
    let body = html! {
        @if bounded {
            p.note { "Grouped from the first " (count(SCAN_BOUND as u64)) " dead letters." }
        }
        @if groups.is_empty() { p { "No dead letters." } }
        @else {
            table #groups {
                thead { tr { th { "reason" } th.n { "jobs" } th { "for example" } } }
                tbody {
                    @for (group, jobs) in &by_size {
                        tr {
                            td { a href={ "/queues/" (n) "/dead?reason=" (urlencode(group)) } { (group) } }
                            td.n { (count(jobs.len() as u64)) }
                            td.reason { (jobs[0].reason) }
                        }
                    }
                }
            }
        }
        @if let Some((group, jobs)) = chosen {
            @let back = format!("/queues/{n}/dead?reason={}", urlencode(group));
            h2 { "Reason: " (group) }
            @let ids: Vec<String> = jobs.iter().take(MAX_SELECTION).map(|d| d.job.id.clone()).collect();
            (all_form(&app, n, &ids, "requeue", "Requeue every job of this reason", &back))
            @let rows: Vec<Row> = jobs.iter().take(GROUP_LIST).map(|d| Row {
                job: d.job.clone(),
                place: Place::Dead(d.reason.clone()),
            }).collect();
            @if jobs.len() > GROUP_LIST { p.note { "The first " (GROUP_LIST) " of " (jobs.len()) "." } }
            (table(&app, n, &rows, &back, true))
        }
    };
    layout::page(
        &app,
        StatusCode::OK,
        &format!("{label}: dead letters"),
        body,
    )
}

/// `text` as a query value: every byte but letters and digits escaped.
pub fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
