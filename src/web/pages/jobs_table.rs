//! A list of jobs as a table, inside the form of the actions on them (a
//! checkbox a job; one button a job; buttons for the selection). Read-only:
//! the table alone.

use std::time::SystemTime;

use maud::{html, Markup};

use crate::jobs::{Job, WaitState};
use crate::web::format::{ago, preview};
use crate::web::App;

/// Bytes of a body shown in a list.
const BODY_PREVIEW: usize = 120;

/// Where a listed job is.
#[derive(Debug)]
pub enum Place {
    /// Waiting: ready, leased or scheduled.
    Waiting(WaitState),
    /// A dead letter, with why.
    Dead(String),
}

/// A listed job.
#[derive(Debug)]
pub struct Row {
    /// The job.
    pub job: Job,
    /// Where it is.
    pub place: Place,
}

/// The table of `rows` of queue `n`; the actions send the browser back to `back`.
pub fn table(app: &App, n: usize, rows: &[Row], back: &str, dead: bool) -> Markup {
    let now = SystemTime::now();
    let actions = !app.read_only;
    let list = html! {
        table.jobs {
            thead { tr {
                @if actions { th { input type="checkbox" data-select-all title="select all"; } }
                th { "id" } th { "state" } th.n { "priority" } th.n { "attempts" } th { "enqueued" }
                th { "headers" } th { "body" }
                @if dead { th { "reason" } }
                @if actions { th {} }
            } }
            tbody {
                @for row in rows {
                    @let job = &row.job;
                    tr {
                        @if actions { td { input type="checkbox" name="id" value=(job.id); } }
                        td.id { a href=(super::job::href(n, &job.id)) { code { (job.id) } } }
                        td { (state(&row.place, now)) }
                        td.n { (job.priority) }
                        td.n { (job.attempt) }
                        td { (ago(job.enqueued_at, now)) }
                        td { @for (name, value) in &job.headers { code { (name) "=" (value) } " " } }
                        td.body { (preview(&job.body, BODY_PREVIEW)) }
                        @if let Place::Dead(reason) = &row.place { td.reason { (reason) } }
                        @if actions {
                            td { @match row.place {
                                Place::Dead(_) => { button type="submit" name="row" value={ "requeue:" (job.id) } { "Requeue" } }
                                Place::Waiting(WaitState::Leased) => {}
                                Place::Waiting(WaitState::Scheduled(_)) => {
                                    button type="submit" name="row" value={ "run_now:" (job.id) } { "Run now" }
                                    " "
                                    button type="submit" name="row" value={ "cancel:" (job.id) } { "Cancel" }
                                }
                                Place::Waiting(_) => { button type="submit" name="row" value={ "cancel:" (job.id) } { "Cancel" } }
                            } }
                        }
                    }
                }
            }
        }
    };
    if !actions {
        return list;
    }
    html! {
        form method="post" action={ "/queues/" (n) "/actions" } {
            input type="hidden" name="csrf" value=(app.csrf);
            input type="hidden" name="back" value=(back);
            div.bar-actions {
                "Selected: "
                @if dead {
                    button type="submit" name="action" value="requeue" { "Requeue" }
                } @else {
                    button type="submit" name="action" value="cancel" { "Cancel" }
                    button type="submit" name="action" value="run_now" title="scheduled jobs: ready now" { "Run now" }
                    label { "priority " input type="number" name="priority" value="0" min=(i32::MIN) max=(i32::MAX); }
                    button type="submit" name="action" value="priority" { "Set priority" }
                }
            }
            (list)
        }
    }
}

/// A button acting on every job of `ids` at once (a group, a filter),
/// its count on it. None in read-only mode.
pub fn all_form(
    app: &App,
    n: usize,
    ids: &[String],
    action: &str,
    label: &str,
    back: &str,
) -> Markup {
    if app.read_only || ids.is_empty() {
        return html! {};
    }
    html! {
        form.bar-actions method="post" action={ "/queues/" (n) "/actions" } {
            input type="hidden" name="csrf" value=(app.csrf);
            input type="hidden" name="back" value=(back);
            input type="hidden" name="action" value=(action);
            @for id in ids { input type="hidden" name="id" value=(id); }
            button type="submit" { (label) " (" (ids.len()) ")" }
        }
    }
}

fn state(place: &Place, now: SystemTime) -> String {
    match place {
        Place::Waiting(WaitState::Ready) => "ready".into(),
        Place::Waiting(WaitState::Leased) => "leased".into(),
        Place::Waiting(WaitState::Scheduled(at)) => format!("scheduled, due {}", ago(*at, now)),
        Place::Dead(_) => "dead".into(),
    }
}
