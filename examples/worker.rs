//! A worker runtime on an embedded jobs queue: three kinds of typed jobs,
//! four at a time, retries, dead letters, panics caught, and a graceful
//! stop.
//!
//! ```text
//! cargo run --features runtime --example worker -- DIR [--until-empty]
//! ```
//!
//! It opens (or creates) an embedded jobs queue at DIR, shared with other
//! processes, and runs its jobs with concurrency 4:
//! - `greet`, body `{"name": S}`: prints `hello S`;
//! - `fail`, body `{}`: always fails with a retryable error, `failing on purpose`;
//! - `panic`, body `{}`: panics with `boom`;
//!
//! each with 2 attempts and no back-off delay. It prints one line per
//! finished attempt, `KIND ok`, `KIND retry: REASON` or `KIND dead: REASON`,
//! and runs until SIGTERM or SIGINT (the jobs it holds then are given back
//! without counting the attempt) or, with `--until-empty`, until no job is
//! ready; then it exits 0. From a shell:
//!
//! ```text
//! dque push DIR --kind greet '{"name":"ada"}'
//! ```

use std::sync::Arc;

use dque::jobs::{JobOptions, JobQueue};
use dque::runtime::{Context, Finished, Job, JobError, KindOptions, Outcome, Worker};
use dque::Options;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl Job for Greet {
    const KIND: &'static str = "greet";

    fn run(self, _cx: &Context) -> Result<(), JobError> {
        println!("hello {}", self.name);
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Fail {}

impl Job for Fail {
    const KIND: &'static str = "fail";

    fn run(self, _cx: &Context) -> Result<(), JobError> {
        Err(JobError::retry("failing on purpose"))
    }
}

#[derive(Serialize, Deserialize)]
struct Panic {}

impl Job for Panic {
    const KIND: &'static str = "panic";

    fn run(self, _cx: &Context) -> Result<(), JobError> {
        panic!("boom")
    }
}

/// `KIND ok`, `KIND retry: REASON`, `KIND dead: REASON`.
fn line(finished: &Finished<'_>) -> Option<String> {
    let kind = finished.kind;
    match finished.outcome {
        Outcome::Succeeded => Some(format!("{kind} ok")),
        Outcome::Retrying { reason, .. } => Some(format!("{kind} retry: {reason}")),
        Outcome::Dead { reason } => Some(format!("{kind} dead: {reason}")),
        // Given back at a stop, or lost: not a finished attempt.
        _ => None,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir = None;
    let mut until_empty = false;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--until-empty") => until_empty = true,
            _ if dir.is_none() => dir = Some(arg),
            _ => return Err("usage: worker DIR [--until-empty]".into()),
        }
    }
    let dir = dir.ok_or("usage: worker DIR [--until-empty]")?;
    // Shared mode: `dque push DIR` and other workers use it meanwhile.
    let queue: Arc<dyn JobQueue> = Arc::new(
        JobOptions::new()
            .queue(Options::new().shared(true))
            .open_or_create(&dir)?,
    );
    let each = KindOptions::new().max_attempts(2).no_backoff();
    let summary = Worker::new(Arc::clone(&queue))
        .register_with::<Greet>(each.clone())
        .register_with::<Fail>(each.clone())
        .register_with::<Panic>(each)
        .concurrency(4)
        .until_empty(until_empty)
        .on_finished(|finished| {
            if let Some(line) = line(finished) {
                println!("{line}");
            }
        })
        .run()?;
    queue.close()?;
    eprintln!(
        "worker: {} ok, {} retried, {} dead, {} given back ({:?})",
        summary.succeeded, summary.retried, summary.dead, summary.released, summary.stopped
    );
    Ok(())
}
