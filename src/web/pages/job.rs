//! `GET /queues/{n}/jobs/{id}`: one job, whatever its state, from
//! [`JobQueue::job_info`](crate::jobs::JobQueue::job_info): its body (as
//! JSON when it parses, else text, else hex), headers, attempts, times,
//! history, last error, and the actions its state allows. `GET
//! /queues/{n}/jobs?job=ID` is the queue page's "find a job" box: it sends
//! the browser to the job's page.
//!
//! Cost: one `job_info` (one lookup by a caller's id; an embedded queue
//! reads its waiting jobs through for a made-up id, as `cancel` does),
//! and at most [`BODY_SHOWN`] bytes of the body rendered.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};

use super::dead::urlencode;
use super::{blocking, failed, param, queue_number};
use crate::jobs::{JobInfo, JobState};
use crate::web::format::ago;
use crate::web::{layout, App};

/// Bytes of a body a job page shows at most (the rest is cut, and it says so).
pub const BODY_SHOWN: usize = 64 * 1024;

/// The path of job `id`'s page in queue `n`.
pub fn href(n: usize, id: &str) -> String {
    format!("/queues/{n}/jobs/{}", urlencode(id))
}

/// The job page.
pub async fn page(State(app): State<Arc<App>>, Path((n, id)): Path<(String, String)>) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    let (label, queue) = app.queues[n].clone();
    let wanted = id.clone();
    let info = match blocking(move || queue.job_info(&wanted)).await {
        Ok(info) => info,
        Err(e) => return failed(&app, &label, &e),
    };
    let Some(info) = info else {
        let body = html! {
            p #missing { "Queue " (label) " has no job " code { (id) } " (or no longer keeps it: completed jobs are kept for a while only)." }
            p { a href={ "/queues/" (n) } { "Back to the queue" } }
        };
        return layout::page(&app, StatusCode::NOT_FOUND, "No such job", body);
    };
    let body = render(&app, n, &info, SystemTime::now());
    layout::page(&app, StatusCode::OK, &format!("Job {}", info.job.id), body)
}

/// The find box's target: the job's page, or the queue's when no id is given.
pub async fn find(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    let to = match param(&query, "job")
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        Some(id) => href(n, id),
        None => format!("/queues/{n}"),
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(&to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn render(app: &App, n: usize, info: &JobInfo, now: SystemTime) -> Markup {
    let job = &info.job;
    let time = |t: Option<SystemTime>| t.map(|t| ago(t, now));
    let (kind, shown) = body(&job.body);
    html! {
        table.counts #job { tbody {
            tr { th { "queue" } td { a href={ "/queues/" (n) } { (info.queue) } } }
            tr { th { "state" } td #state { (info.state.as_str()) } }
            tr { th { "priority" } td { (job.priority) } }
            tr { th { "attempts" } td #attempts { (job.attempt) } }
            tr { th { "id" } td { code { (job.id) } " " small { @if job.caller_id { "(the caller's)" } @else { "(made by dque)" } } } }
            tr { th { "enqueued" } td { (ago(job.enqueued_at, now)) } }
            @if let Some(t) = time(info.due_at) { tr { th { "due" } td { (t) } } }
            @if let Some(t) = time(info.started_at) { tr { th { "started" } td { (t) } } }
            @if let Some(t) = time(info.finished_at) { tr { th { "finished" } td { (t) } } }
            @if let Some(w) = &info.worker { tr { th { "worker" } td { code { (w) } } } }
            @if let Some(t) = info.timeout { tr { th { "timeout" } td { (crate::web::format::duration(t)) } } }
        } }
        @if let Some(error) = &info.last_error {
            h2 { "Last error" }
            pre #last-error { (error) }
        }
        (actions(app, n, info))
        h2 { "Body " small { "(" (kind) ", " (job.body.len()) " bytes)" } }
        pre #body { (shown) }
        @if job.body.len() > BODY_SHOWN { p.note { "Only the first " (BODY_SHOWN) " bytes are shown." } }
        h2 { "Headers" }
        @if job.headers.is_empty() { p { "None." } } @else {
            table #headers { tbody { @for (name, value) in &job.headers {
                tr { th { code { (name) } } td { code { (value) } } }
            } } }
        }
        h2 { "History" }
        table #history {
            thead { tr { th { "when" } th { "what" } th { "worker" } th { "detail" } } }
            tbody { @for e in &info.history {
                tr {
                    td { (ago(e.at, now)) }
                    td { (e.what) }
                    td { @if let Some(w) = &e.worker { code { (w) } } }
                    td { @if let Some(d) = &e.detail { (d) } }
                }
            } }
        }
    }
}

/// How a body reads and the text shown: `JSON` pretty-printed when the
/// whole (shown) body parses, else `text` when UTF-8, else `hex`.
fn body(bytes: &[u8]) -> (&'static str, String) {
    let cut = &bytes[..bytes.len().min(BODY_SHOWN)];
    if cut.len() == bytes.len() {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
            if let Ok(pretty) = serde_json::to_string_pretty(&value) {
                return ("JSON", pretty);
            }
        }
    }
    match std::str::from_utf8(cut) {
        Ok(text) => ("text", text.to_owned()),
        // A cut inside a character of a UTF-8 body.
        Err(e) if e.error_len().is_none() => (
            "text",
            String::from_utf8_lossy(&cut[..e.valid_up_to()]).into_owned(),
        ),
        Err(_) => ("hex", hex_dump(cut)),
    }
}

/// Bytes as lines of 32 hex digits.
fn hex_dump(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| {
            line.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The buttons the job's state allows: requeue a dead letter; cancel or
/// reprioritise a ready or scheduled job. None in read-only mode.
fn actions(app: &App, n: usize, info: &JobInfo) -> Markup {
    let waiting = matches!(info.state, JobState::Ready | JobState::Scheduled);
    if app.read_only || !(waiting || info.state == JobState::Dead) {
        return html! {};
    }
    let id = &info.job.id;
    html! {
        form.bar-actions #job-actions method="post" action={ "/queues/" (n) "/actions" } {
            input type="hidden" name="csrf" value=(app.csrf);
            input type="hidden" name="back" value=(href(n, id));
            @if info.state == JobState::Dead {
                button type="submit" name="row" value={ "requeue:" (id) } { "Requeue" }
            } @else {
                button type="submit" name="row" value={ "cancel:" (id) } { "Cancel" }
                " "
                label { "priority " input type="number" name="priority" value=(info.job.priority) min=(i32::MIN) max=(i32::MAX); }
                button type="submit" name="row" value={ "priority:" (id) } { "Set priority" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_show_as_json_text_or_hex() {
        assert_eq!(body(br#"{"a":1}"#), ("JSON", "{\n  \"a\": 1\n}".to_owned()));
        assert_eq!(body(b"plain {"), ("text", "plain {".to_owned()));
        assert_eq!(body(&[0xff, 0x00, 0x41]), ("hex", "ff 00 41".to_owned()));
        let long = "é".repeat(BODY_SHOWN);
        let (kind, shown) = body(long.as_bytes());
        assert_eq!(kind, "text");
        assert_eq!(shown.len(), BODY_SHOWN);
    }
}
