//! An axum handler that enqueues in the request's path: `POST /jobs` with
//! a body adds a job (the body) to an embedded jobs queue and answers
//! `202 Accepted` with the job's id once the queue has it (durably, in
//! Safe mode). An `Idempotency-Key` header becomes the job's caller id, so
//! a client that retries adds the job once (`200 OK`, the same id).
//!
//! ```text
//! cargo run --example axum_enqueue --features tokio -- DIR [--port PORT] [--requests N]
//! curl -i -X POST --data 'resize photo 42' http://127.0.0.1:PORT/jobs
//! ```
//!
//! It prints `listening on http://ADDR` first (port 0, the default, picks
//! a free one), and stops after `N` requests to `/jobs` or on Ctrl-C,
//! finishing the requests under way, then closes the queue and prints
//! `served N`. Feed the jobs to workers with `examples/async_worker.rs`'s
//! loop, or `dque work DIR`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, Enqueued, JobOptions, NewJob};
use tokio::sync::Notify;

/// What the handler shares: the queue, and the count of requests served.
#[derive(Clone)]
struct App {
    queue: Arc<dyn AsyncJobQueue>,
    served: Arc<AtomicUsize>,
    /// Woken after each request, for the `--requests` limit.
    tick: Arc<Notify>,
}

/// `POST /jobs`: the body is the job. Errors answer 503 with what the
/// queue said (a full or closed queue, a failed write: nothing was added).
async fn enqueue(State(app): State<App>, headers: HeaderMap, body: Bytes) -> (StatusCode, String) {
    let answer = if body.is_empty() {
        (StatusCode::BAD_REQUEST, "a job needs a body\n".to_string())
    } else {
        let mut job = NewJob::new(body.to_vec());
        if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
            job = job.id(key);
        }
        match app.queue.enqueue(job).await {
            Ok(Enqueued::Added(id)) => (StatusCode::ACCEPTED, format!("{id}\n")),
            Ok(Enqueued::AlreadyQueued(id)) => (StatusCode::OK, format!("{id}\n")),
            // Held by a job that ran within its uniqueness period.
            Ok(Enqueued::Duplicate(held)) => (StatusCode::OK, format!("{}\n", held.id)),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        }
    };
    app.served.fetch_add(1, Ordering::SeqCst);
    app.tick.notify_one();
    answer
}

fn router(app: App) -> Router {
    Router::new().route("/jobs", post(enqueue)).with_state(app)
}

struct Args {
    dir: std::ffi::OsString,
    port: u16,
    requests: Option<usize>,
}

fn args() -> Result<Args, String> {
    let usage = "usage: axum_enqueue DIR [--port PORT] [--requests N]";
    let mut args = std::env::args_os().skip(1);
    let dir = args.next().ok_or(usage)?;
    let (mut port, mut requests) = (0, None);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .and_then(|v| v.into_string().ok())
            .ok_or(usage)?;
        match flag.to_str() {
            Some("--port") => port = value.parse().map_err(|e| format!("--port: {e}"))?,
            Some("--requests") => {
                requests = Some(value.parse().map_err(|e| format!("--requests: {e}"))?)
            }
            _ => return Err(usage.into()),
        }
    }
    Ok(Args {
        dir,
        port,
        requests,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    std::fs::create_dir_all(&args.dir)?;
    let app = App {
        queue: Arc::new(AsyncEmbeddedJobs::new(
            JobOptions::new().open_or_create(&args.dir)?,
        )),
        served: Arc::new(AtomicUsize::new(0)),
        tick: Arc::new(Notify::new()),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);

    let stop = {
        let app = app.clone();
        async move {
            let enough = async {
                loop {
                    if args
                        .requests
                        .is_some_and(|n| app.served.load(Ordering::SeqCst) >= n)
                    {
                        return;
                    }
                    app.tick.notified().await;
                }
            };
            tokio::select! {
                _ = enough => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
    };
    axum::serve(listener, router(app.clone()))
        .with_graceful_shutdown(stop)
        .await?;
    app.queue.close().await?;
    println!("served {}", app.served.load(Ordering::SeqCst));
    Ok(())
}
