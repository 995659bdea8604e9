//! `GET /live`: every queue's numbers as JSON, which the pages' script
//! puts into the elements marked `data-live="N.key"`.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::format::{count, duration};
use super::numbers::Numbers;
use super::pages::blocking;
use super::App;

/// The numbers of every queue, as the pages show them (a queue that
/// failed its read: `{"error": "…"}`).
pub async fn numbers(State(app): State<Arc<App>>) -> Response {
    let reader = app.clone();
    let now = SystemTime::now();
    let queues = blocking(move || {
        reader
            .queues
            .iter()
            .map(|(label, q)| match Numbers::read(q.as_ref(), now) {
                Ok(x) => {
                    let c = x.stats.counts;
                    serde_json::json!({
                        "queue": label,
                        "ready": count(c.ready),
                        "scheduled": count(c.scheduled),
                        "leased": count(c.leased),
                        "dead": count(c.dead),
                        "oldest_ready": x.oldest_ready.map(duration).unwrap_or_else(|| "–".into()),
                        "done_today": count(x.done_today(now)),
                        "failed_today": count(x.failed_today(now)),
                    })
                }
                Err(e) => serde_json::json!({ "queue": label, "error": e.to_string() }),
            })
            .collect::<Vec<_>>()
    })
    .await;
    let body = serde_json::json!({ "queues": queues }).to_string();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}
