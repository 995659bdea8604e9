//! The pages: one module each, and what they share.

pub mod bulk;
pub mod dead;
pub mod job;
pub mod jobs_table;
pub mod overview;
pub mod queue;
pub mod queue_extras;
pub mod workers;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;

use super::layout;
use super::App;

/// Runs `work` (Jobs API calls block) on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("a dashboard read was cancelled: {e}"),
    }
}

/// Queue `n` of a URL's `{n}`, or the page that says there is none.
pub fn queue_number(app: &App, n: &str) -> Result<usize, Box<Response>> {
    match n.parse::<usize>() {
        Ok(n) if n < app.queues.len() => Ok(n),
        _ => Err(Box::new(not_found_page(app))),
    }
}

/// The answer to a queue that failed a read: its error, escaped.
pub fn failed(app: &App, label: &str, error: &crate::Error) -> Response {
    layout::page(
        app,
        StatusCode::INTERNAL_SERVER_ERROR,
        "The queue failed a read",
        html! { p { (label) ": " (error.to_string()) } },
    )
}

/// The value of query parameter `name`.
pub fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    super::security::field(query, name)
}

/// A page number of the query (1 for none or nonsense).
pub fn page_number(query: &[(String, String)]) -> usize {
    param(query, "page")
        .and_then(|p| p.parse::<usize>().ok())
        .filter(|&p| p >= 1)
        .unwrap_or(1)
}

fn not_found_page(app: &App) -> Response {
    layout::page(
        app,
        StatusCode::NOT_FOUND,
        "Not found",
        html! { p { "No such page. " a href="/" { "The overview" } " lists every queue." } },
    )
}

/// Any route not listed.
pub async fn not_found(State(app): State<Arc<App>>) -> Response {
    not_found_page(&app)
}
