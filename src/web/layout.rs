//! The page around every page: the head, the navigation, the script.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use super::App;

/// A full page with the navigation of every queue.
pub fn page(app: &App, status: StatusCode, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    nav {
                        a.brand href="/" { "dque" }
                        a href="/" { "Overview" }
                        @for (n, (label, _)) in app.queues.iter().enumerate() {
                            a href={ "/queues/" (n) } title=(label) { (short(label)) }
                        }
                        a href="/workers" { "Workers" }
                        a href="/metrics" { "Metrics" }
                        @if app.read_only { span.badge { "read-only" } }
                    }
                }
                main { h1 { (title) } (body) }
                script src="/static/dque.js" {}
            }
        }
    };
    respond(status, markup)
}

/// A page without the queues (errors, the login form).
pub fn bare(status: StatusCode, title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body { main { h1 { (title) } (body) } }
        }
    };
    respond(status, markup)
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · dque" }
            link rel="stylesheet" href="/static/dque.css";
        }
    }
}

fn respond(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// A label short enough for the navigation: its last 32 characters.
fn short(label: &str) -> String {
    let chars: Vec<char> = label.chars().collect();
    if chars.len() <= 32 {
        label.to_owned()
    } else {
        format!("…{}", chars[chars.len() - 31..].iter().collect::<String>())
    }
}
