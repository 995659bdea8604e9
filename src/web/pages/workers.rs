//! `GET /workers`: who holds what, since when. For each queue, the jobs
//! leased now ([`JobQueue::leases`](crate::jobs::JobQueue::leases)): the
//! worker holding each (the name its handle leases under, else the
//! backend's default: the process `host:pid` on the embedded queue), the
//! job, its kind, when the lease began (where the backend records it) and
//! when it ends. Each queue lists its first [`LEASE_LIST`] leases, soonest-ending
//! first, and says so when there are more.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::blocking;
use super::queue::KIND_HEADER;
use crate::jobs::LeaseInfo;
use crate::web::format::{ago, count};
use crate::web::{layout, App};

/// Leases of one queue listed on the page.
pub const LEASE_LIST: usize = 500;

/// The workers page.
pub async fn page(State(app): State<Arc<App>>) -> Response {
    let reader = app.clone();
    let held = blocking(move || {
        reader
            .queues
            .iter()
            .map(|(_, q)| q.leases(LEASE_LIST + 1))
            .collect::<Vec<_>>()
    })
    .await;
    let now = SystemTime::now();
    let body = html! {
        p.note { "The jobs leased now, by queue: the worker holding each, since when, and when its lease ends unless touched. \
            A worker is the name its handle leases under (dque work --worker), else the process holding the lease as host:pid (PostgreSQL, embedded)." }
        @for (n, ((label, _), leases)) in app.queues.iter().zip(&held).enumerate() {
            h2 { a href={ "/queues/" (n) } { (label) } }
            @match leases {
                Ok(leases) => (queue_leases(n, leases, now)),
                Err(e) => p.error { (e.to_string()) },
            }
        }
    };
    layout::page(&app, StatusCode::OK, "Workers", body)
}

/// One queue's leases: each worker with its count, then every lease.
fn queue_leases(n: usize, leases: &[LeaseInfo], now: SystemTime) -> Markup {
    let shown = &leases[..leases.len().min(LEASE_LIST)];
    let mut by_worker: BTreeMap<&str, (usize, Option<SystemTime>)> = BTreeMap::new();
    for lease in shown {
        let entry = by_worker.entry(worker_of(lease)).or_default();
        entry.0 += 1;
        entry.1 = match (entry.1, lease.since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    html! {
        @if shown.is_empty() { p { "No job is leased." } }
        @else {
            @if leases.len() > LEASE_LIST {
                p.note { "The first " (count(LEASE_LIST as u64)) " leases, soonest-ending first." }
            }
            table.workers {
                thead { tr { th { "worker" } th.n { "jobs held" } th { "oldest lease since" } } }
                tbody {
                    @for (worker, (held, oldest)) in &by_worker {
                        tr {
                            td.worker { code { (worker) } }
                            td.n { (count(*held as u64)) }
                            td { (when(*oldest, now)) }
                        }
                    }
                }
            }
            table.leases {
                thead { tr {
                    th { "worker" } th { "job" } th { "kind" } th.n { "attempt" }
                    th { "leased" } th { "lease ends" }
                } }
                tbody {
                    @for lease in shown {
                        tr {
                            td.worker { code { (worker_of(lease)) } }
                            td.id { a href=(super::job::href(n, &lease.job.id)) { code { (lease.job.id) } } }
                            td.kind { (lease.job.header(KIND_HEADER).unwrap_or("–")) }
                            td.n { (lease.job.attempt) }
                            td { (when(lease.since, now)) }
                            td { (when(lease.until, now)) }
                        }
                    }
                }
            }
        }
    }
}

/// The worker's name as shown (`unknown` where the backend keeps none).
fn worker_of(lease: &LeaseInfo) -> &str {
    lease.worker.as_deref().unwrap_or("unknown")
}

/// A time as "5s ago" or "in 25s", with the full time on hover; `–` unknown.
fn when(at: Option<SystemTime>, now: SystemTime) -> Markup {
    match at {
        Some(at) => html! { time title=(rfc3339(at)) { (ago(at, now)) } },
        None => html! { "–" },
    }
}

/// `at` in UTC, to the second.
fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at)
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_show_in_utc() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(at), "2023-11-14 22:13:20 UTC");
    }
}
