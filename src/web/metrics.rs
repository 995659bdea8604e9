//! `GET /metrics`: every queue's numbers in the OpenMetrics text format
//! (which Prometheus scrapes), collected when scraped: nothing is kept
//! between scrapes.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `dque_jobs` | gauge | queue, state | jobs ready, scheduled, leased, dead now |
//! | `dque_oldest_ready_age_seconds` | gauge | queue | the age of the oldest of the next jobs to be leased |
//! | `dque_jobs_completed_total` | counter | queue | jobs acked, over the days on record |
//! | `dque_jobs_failed_total` | counter | queue | jobs that became dead letters, over the days on record |
//! | `dque_jobs_retried_total` | counter | queue | nacks that put a job back, over the days on record |
//! | `dque_job_wait_seconds` | histogram | queue | enqueue (or due time) to first lease |
//! | `dque_job_run_seconds` | histogram | queue | lease to ack |
//! | `dque_queue_up` | gauge | queue | 1 if the queue answered this scrape, else 0 |
//!
//! The totals and histograms are sums over the days the backend keeps
//! statistics for: when a day leaves the record they fall, which
//! Prometheus reads as a counter reset. The Jobs API counts no enqueues,
//! so there is no enqueued total.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use super::charts::{bins, BOUNDS};
use super::numbers::Numbers;
use super::pages::blocking;
use super::App;
use crate::jobs::Timing;

type Labels = Vec<(String, String)>;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A histogram whose buckets are already counted (the stats'), encoded as is.
#[derive(Debug, Default, Clone)]
struct Counted(Arc<Mutex<Bucketed>>);

/// A histogram's sum, count, and (upper bound, count) per bucket.
type Bucketed = (f64, u64, Vec<(f64, u64)>);

impl Counted {
    fn set(&self, timing: &Timing) {
        let bins = bins(&timing.histogram);
        let buckets = bins
            .iter()
            .enumerate()
            .map(|(i, &n)| (BOUNDS.get(i).map_or(f64::MAX, |&b| b as f64), n))
            .collect();
        let sum = timing.mean * timing.count as f64;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = (sum, timing.count, buckets);
    }
}

impl TypedMetric for Counted {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Counted {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let data = self.0.lock().unwrap_or_else(|e| e.into_inner());
        encoder.encode_histogram::<NoLabelSet>(data.0, data.1, &data.2, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The scrape.
pub async fn scrape(State(app): State<Arc<App>>) -> Response {
    let reader = app.clone();
    let text = blocking(move || collect(&reader)).await;
    match text {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Reads every queue and encodes what it read.
fn collect(app: &App) -> Result<String, std::fmt::Error> {
    let now = SystemTime::now();
    let jobs = Family::<Labels, Gauge>::default();
    let oldest = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let completed = Family::<Labels, Counter>::default();
    let failed = Family::<Labels, Counter>::default();
    let retried = Family::<Labels, Counter>::default();
    let wait = Family::<Labels, Counted>::default();
    let run = Family::<Labels, Counted>::default();
    let up = Family::<Labels, Gauge>::default();
    for (label, queue) in &app.queues {
        let queue_label = vec![("queue".to_owned(), label.clone())];
        let numbers = match Numbers::read(queue.as_ref(), now) {
            Ok(numbers) => numbers,
            Err(_) => {
                up.get_or_create(&queue_label).set(0);
                continue;
            }
        };
        up.get_or_create(&queue_label).set(1);
        let c = numbers.stats.counts;
        for (state, n) in [
            ("ready", c.ready),
            ("scheduled", c.scheduled),
            ("leased", c.leased),
            ("dead", c.dead),
        ] {
            let labels = vec![
                ("queue".to_owned(), label.clone()),
                ("state".to_owned(), state.to_owned()),
            ];
            jobs.get_or_create(&labels)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        oldest
            .get_or_create(&queue_label)
            .set(numbers.oldest_ready.map_or(0.0, |d| d.as_secs_f64()));
        let days = &numbers.stats.days;
        completed
            .get_or_create(&queue_label)
            .inc_by(days.iter().map(|d| d.run.count).sum());
        failed
            .get_or_create(&queue_label)
            .inc_by(days.iter().map(|d| d.failed()).sum());
        retried
            .get_or_create(&queue_label)
            .inc_by(days.iter().map(|d| d.retries).sum());
        let (wait_times, run_times) = numbers.timings();
        wait.get_or_create(&queue_label).set(&wait_times);
        run.get_or_create(&queue_label).set(&run_times);
    }
    let mut registry = Registry::with_prefix("dque");
    registry.register("jobs", "Jobs by queue and state, now", jobs);
    registry.register(
        "oldest_ready_age_seconds",
        "Age of the oldest of the next jobs to be leased",
        oldest,
    );
    registry.register(
        "jobs_completed",
        "Jobs acked, over the days on record",
        completed,
    );
    registry.register(
        "jobs_failed",
        "Jobs that became dead letters, over the days on record",
        failed,
    );
    registry.register(
        "jobs_retried",
        "Nacks that put a job back, over the days on record",
        retried,
    );
    registry.register(
        "job_wait_seconds",
        "Enqueue (or due time) to first lease",
        wait,
    );
    registry.register("job_run_seconds", "Lease to ack", run);
    registry.register("queue_up", "1 if the queue answered this scrape", up);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}
