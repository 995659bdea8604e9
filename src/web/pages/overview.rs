//! `GET /`: every queue in one table.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::blocking;
use crate::web::format::{count, duration};
use crate::web::numbers::Numbers;
use crate::web::{layout, App};

/// The overview page.
pub async fn page(State(app): State<Arc<App>>) -> Response {
    let reader = app.clone();
    let now = SystemTime::now();
    let rows = blocking(move || {
        reader
            .queues
            .iter()
            .map(|(_, q)| {
                // A queue without pause (a backend that has none) is never paused.
                let paused = q.is_paused().unwrap_or(false);
                Numbers::read(q.as_ref(), now).map(|numbers| (numbers, paused))
            })
            .collect::<Vec<_>>()
    })
    .await;
    let body = html! {
        table #overview {
            thead { tr {
                th { "queue" } th.n { "ready" } th.n { "scheduled" } th.n { "leased" } th.n { "dead" }
                th.n { "oldest ready" } th.n { "done today" } th.n { "failed today" }
            } }
            tbody {
                @for (n, ((label, _), numbers)) in app.queues.iter().zip(&rows).enumerate() {
                    tr {
                        td {
                            a href={ "/queues/" (n) } { (label) }
                            @if let Ok((_, true)) = numbers { " " span.badge.paused { "paused" } }
                        }
                        @match numbers {
                            Ok((x, _)) => {
                                @let c = x.stats.counts;
                                td.n data-live={ (n) ".ready" } { (count(c.ready)) }
                                td.n data-live={ (n) ".scheduled" } { (count(c.scheduled)) }
                                td.n data-live={ (n) ".leased" } { (count(c.leased)) }
                                td.n { a href={ "/queues/" (n) "/dead" } data-live={ (n) ".dead" } { (count(c.dead)) } }
                                td.n data-live={ (n) ".oldest_ready" } { (x.oldest_ready.map(duration).unwrap_or_else(|| "–".into())) }
                                td.n data-live={ (n) ".done_today" } { (count(x.done_today(now))) }
                                td.n data-live={ (n) ".failed_today" } { (count(x.failed_today(now))) }
                            }
                            Err(e) => { td.error colspan="7" { (e.to_string()) } }
                        }
                    }
                }
            }
        }
        p { a href="/workers" { "Workers" } ": who holds which job, since when." }
        p.note { "Numbers refresh every few seconds. Oldest ready: the oldest of the next "
            (crate::web::numbers::OLDEST_LOOKS_AT) " jobs to be leased." }
    };
    layout::page(&app, StatusCode::OK, "Queues", body)
}
