//! `POST /queues/{n}/actions`: requeue dead letters, cancel waiting jobs,
//! change their priority, run scheduled jobs now; one job (a row's button, `row=ACTION:ID`) or a
//! selection (`action=…` and an `id` per job); pause or resume the queue
//! (`queue=pause|resume`). Through the Jobs API only;
//! not routed in read-only mode. The answer lists what each job got.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use maud::html;

use super::pages::{blocking, queue_number};
use super::security::{check_post, field};
use super::{layout, App, MAX_SELECTION};

/// What a POST asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Requeue,
    Cancel,
    Priority(i32),
    /// A scheduled job (delayed, or backing off) made ready now.
    RunNow,
}

impl Action {
    fn done(self) -> &'static str {
        match self {
            Action::Requeue => "Requeued",
            Action::Cancel => "Cancelled",
            Action::Priority(_) => "Priority set for",
            Action::RunNow => "Made ready now",
        }
    }
}

/// The action route.
pub async fn act(
    State(app): State<Arc<App>>,
    Path(n): Path<String>,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let n = match queue_number(&app, &n) {
        Ok(n) => n,
        Err(page) => return *page,
    };
    if let Err(refused) = check_post(&app, &headers, &fields) {
        return *refused;
    }
    if let Some(verb) = field(&fields, "queue") {
        return on_queue(&app, n, verb, field(&fields, "back")).await;
    }
    let (action, ids) = match parse(&fields) {
        Ok(asked) => asked,
        Err(why) => {
            return layout::page(
                &app,
                StatusCode::BAD_REQUEST,
                "Nothing done",
                html! { p { (why) } },
            )
        }
    };
    let back = back(field(&fields, "back"), n);
    let queue = app.queues[n].1.clone();
    let outcomes = blocking(move || {
        // Batches: one pass over the dead letters or the jobs, not one
        // look per job.
        let batch = match action {
            Action::Requeue => Some(queue.requeue_dead_many(&ids)),
            Action::Cancel => Some(queue.cancel_many(&ids)),
            Action::Priority(p) => Some(queue.set_priority_many(&ids, p)),
            Action::RunNow => None,
        };
        if let Some(outcomes) = batch {
            return ids.into_iter().zip(outcomes).collect();
        }
        ids.into_iter()
            .map(|id| {
                let result = match action {
                    Action::Requeue => queue.requeue_dead(&id),
                    Action::Cancel => queue.cancel(&id),
                    Action::Priority(p) => queue.set_priority(&id, p),
                    Action::RunNow => match queue.run_now(&id) {
                        Ok(true) => Ok(()),
                        // Leased, dead or gone: not waiting.
                        Ok(false) => Err(crate::Error::NoSuchJob { id: id.clone() }),
                        Err(e) => Err(e),
                    },
                };
                (id, result)
            })
            .collect::<Vec<_>>()
    })
    .await;
    let done = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    let status = if done == 0 {
        StatusCode::CONFLICT
    } else {
        StatusCode::OK
    };
    let body = html! {
        p #outcome { (action.done()) " " (done) " of " (outcomes.len()) " jobs." }
        @if done < outcomes.len() {
            table { thead { tr { th { "job" } th { "not done: why" } } }
                tbody { @for (id, result) in &outcomes { @if let Err(e) = result {
                    tr { td { code { (id) } } td { (e.to_string()) } }
                } } } }
        }
        p { a #back href=(back) { "Back" } }
    };
    layout::page(&app, status, "Done", body)
}

/// Pauses or resumes queue `n` (`verb`), through the Jobs API.
async fn on_queue(app: &App, n: usize, verb: &str, back_to: Option<&str>) -> Response {
    let pause = match verb {
        "pause" => true,
        "resume" => false,
        _ => {
            return layout::page(
                app,
                StatusCode::BAD_REQUEST,
                "Nothing done",
                html! { p { "No such queue action: pause and resume are." } },
            )
        }
    };
    let (label, queue) = app.queues[n].clone();
    let result = blocking(move || if pause { queue.pause() } else { queue.resume() }).await;
    let (status, said) = match &result {
        Ok(()) if pause => (
            StatusCode::OK,
            "Paused: workers lease nothing from it until it is resumed.".to_owned(),
        ),
        Ok(()) => (
            StatusCode::OK,
            "Resumed: workers lease from it again.".to_owned(),
        ),
        Err(e) => (StatusCode::CONFLICT, e.to_string()),
    };
    let body = html! {
        p #outcome { (label) ": " (said) }
        p { a #back href=(back(back_to, n)) { "Back" } }
    };
    layout::page(app, status, "Done", body)
}

/// The action and the ids of a form, or why it asks for nothing doable.
fn parse(fields: &[(String, String)]) -> Result<(Action, Vec<String>), String> {
    let verb = |name: &str, priority: Option<&str>| -> Result<Action, String> {
        match name {
            "requeue" => Ok(Action::Requeue),
            "cancel" => Ok(Action::Cancel),
            "run_now" => Ok(Action::RunNow),
            "priority" => priority
                .and_then(|p| p.trim().parse::<i32>().ok())
                .map(Action::Priority)
                .ok_or_else(|| "The priority must be a whole number.".to_owned()),
            _ => Err("No such action: requeue, cancel, priority and run_now are.".to_owned()),
        }
    };
    let priority = field(fields, "priority");
    // A row's own button names its job and wins over the checkboxes.
    if let Some(row) = field(fields, "row") {
        let (name, id) = row
            .split_once(':')
            .ok_or("A row's button names ACTION:ID.")?;
        return Ok((verb(name, priority)?, vec![id.to_owned()]));
    }
    let action = verb(field(fields, "action").unwrap_or(""), priority)?;
    // Each job once, in the order given.
    let mut seen = std::collections::HashSet::new();
    let ids: Vec<String> = fields
        .iter()
        .filter(|(n, v)| n == "id" && seen.insert(v.as_str()))
        .map(|(_, v)| v.clone())
        .collect();
    if ids.is_empty() {
        return Err("No job selected: tick the jobs first.".into());
    }
    if ids.len() > MAX_SELECTION {
        return Err(format!(
            "{} jobs selected; one action takes at most {MAX_SELECTION}.",
            ids.len()
        ));
    }
    Ok((action, ids))
}

/// Where the answer links back to: a path of this dashboard, else the queue.
fn back(asked: Option<&str>, n: usize) -> String {
    match asked {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains(['\\', '\r', '\n']) =>
        {
            path.to_owned()
        }
        _ => format!("/queues/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_form_asks_for_one_action_on_named_jobs() {
        let asked = parse(&form(&[
            ("action", "cancel"),
            ("id", "a"),
            ("id", "b"),
            ("id", "a"),
        ]))
        .unwrap();
        assert_eq!(asked, (Action::Cancel, vec!["a".into(), "b".into()]));
        let run = parse(&form(&[("row", "run_now:s1"), ("action", "cancel")])).unwrap();
        assert_eq!(run, (Action::RunNow, vec!["s1".into()]));
        let row = parse(&form(&[
            ("action", "cancel"),
            ("id", "a"),
            ("row", "requeue:x:y"),
        ]))
        .unwrap();
        assert_eq!(row, (Action::Requeue, vec!["x:y".into()]));
        let p = parse(&form(&[
            ("action", "priority"),
            ("priority", "-3"),
            ("id", "a"),
        ]))
        .unwrap();
        assert_eq!(p.0, Action::Priority(-3));
        for bad in [
            form(&[("action", "cancel")]),
            form(&[("action", "drop"), ("id", "a")]),
            form(&[("action", "priority"), ("priority", "x"), ("id", "a")]),
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_back_link_stays_on_this_dashboard() {
        assert_eq!(
            back(Some("/queues/1?state=dead"), 0),
            "/queues/1?state=dead"
        );
        for away in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "javascript:x",
        ] {
            assert_eq!(back(Some(away), 2), "/queues/2", "{away}");
        }
    }
}
