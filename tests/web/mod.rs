//! In-process requests to a dashboard (`dque::web`): a router answers
//! through tower's `oneshot`, no socket.

#![allow(dead_code)]

pub mod search;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use dque::jobs::{JobQueue, NewJob};
use dque::web::{Dashboard, DashboardOptions};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// An answer: status, headers, body as text.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The value of hidden field `csrf` of the page.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a form with a CSRF token")
            + 19;
        self.body[at..].split('"').next().unwrap().to_owned()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
}

/// The router of a dashboard over `queues` named by their names.
pub fn router(queues: Vec<Arc<dyn JobQueue>>, options: DashboardOptions) -> Router {
    let shown = queues
        .iter()
        .map(|q| (q.name().to_owned(), q.clone()))
        .collect();
    Dashboard::new(shown, options).router()
}

/// Sends `request` to `router`.
pub async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// `GET path`, with `headers`.
pub async fn get_with(router: &Router, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(router, request.body(Body::empty()).unwrap()).await
}

/// `GET path`.
pub async fn get(router: &Router, path: &str) -> Answer {
    get_with(router, path, &[]).await
}

/// `POST path` with a form of `fields`, and `headers`.
pub async fn post_with(
    router: &Router,
    path: &str,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Answer {
    let body = fields
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut request =
        Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(router, request.body(Body::from(body)).unwrap()).await
}

/// `POST path` with a form of `fields`.
pub async fn post(router: &Router, path: &str, fields: &[(&str, &str)]) -> Answer {
    post_with(router, path, fields, &[]).await
}

/// Percent-encodes every byte but letters and digits.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Adds `ready` ready jobs, `scheduled` scheduled ones, `leased` leased
/// ones and one dead letter per reason of `dead` (ids `r0`…, `s0`…, `l0`…, `d0`…).
pub fn fill(queue: &dyn JobQueue, ready: usize, scheduled: usize, leased: usize, dead: &[&str]) {
    let mut jobs = Vec::new();
    for i in 0..leased {
        jobs.push(
            NewJob::new(format!("leased {i}"))
                .id(format!("l{i}"))
                .priority(-2),
        );
    }
    for (i, _) in dead.iter().enumerate() {
        jobs.push(
            NewJob::new(format!("dead {i}"))
                .id(format!("d{i}"))
                .priority(-1),
        );
    }
    for i in 0..ready {
        jobs.push(NewJob::new(format!("ready {i}")).id(format!("r{i}")));
    }
    for i in 0..scheduled {
        jobs.push(
            NewJob::new(format!("later {i}"))
                .id(format!("s{i}"))
                .delay(std::time::Duration::from_secs(3600)),
        );
    }
    queue.enqueue_batch(jobs).unwrap();
    let mut held = Vec::new();
    for _ in 0..leased {
        held.push(queue.lease().unwrap().unwrap());
    }
    for reason in dead {
        let lease = queue.lease().unwrap().unwrap();
        assert!(lease.job.id.starts_with('d'), "{}", lease.job.id);
        queue.fail(lease, reason).unwrap();
    }
    // Dropped unsettled: the jobs stay leased until their lease time ends.
    drop(held);
}
