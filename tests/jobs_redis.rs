//! The Jobs API suite (`tests/jobs_api/`) against Redis, on a real
//! throwaway `redis-server` (`tests/redis_server/`), and what only this
//! backend does (qless's own calls). Without `redis-server` installed the
//! tests say so and pass, except under `CI=true`, where they fail.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{JobQueue, NewJob, QlessPut, RedisJobs, RedisOptions};

#[macro_use]
mod jobs_api;
mod redis_server;
use jobs_api::{Backend, Settings};
use redis_server::RedisServer;

/// Queues on the test binary's server, in a database of their own: qless's
/// job ids are global to a database (the suite's checks reuse caller ids),
/// and the suite's clock, years ahead, would expire other tests' completed
/// jobs.
struct Redis {
    db: u32,
}

impl Redis {
    fn new() -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        Redis {
            // Database 0 is for the tests below.
            db: 1 + (made % 63) as u32,
        }
    }

    fn open(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        let server = RedisServer::get().expect("checked by the test");
        let queue = RedisOptions::new()
            .lease_time(settings.lease_time)
            .max_attempts(settings.max_attempts)
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
            .connect(&server.url(self.db), name)
            .expect("connect");
        Arc::new(queue)
    }
}

impl Backend for Redis {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        self.open(name, settings)
    }
}

/// Runs `check` if a server is there (else the skip line was printed).
fn with_server(check: impl FnOnce(&Redis)) {
    if RedisServer::get().is_some() {
        check(&Redis::new());
    }
}

mod suite {
    use super::*;

    /// Runs a check of the suite on the server, if there is one.
    fn on_the_server(check: fn(&dyn Backend)) {
        with_server(|backend| check(backend));
    }

    jobs_api_suite!(run = on_the_server);
}

/// A queue of its own on the test server (database 0).
fn queue(name: &str) -> RedisJobs {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let server = RedisServer::get().expect("checked by the caller");
    RedisOptions::new()
        .connect(
            &server.url(0),
            &format!("own{}-{name}", MADE.fetch_add(1, Ordering::Relaxed)),
        )
        .expect("connect")
}

#[test]
fn a_dependency_holds_a_job_until_it_completes() {
    if RedisServer::get().is_none() {
        return;
    }
    let q = queue("depends");
    let first = q.enqueue(NewJob::new("{}")).unwrap();
    let second = q
        .put(
            NewJob::new(r#"{"step": 2}"#),
            QlessPut::new().depends([first.id()]),
        )
        .unwrap();
    assert_eq!(q.queue_counts().unwrap().depends, 1);
    let lease = q.lease().unwrap().expect("the first job");
    assert_eq!(lease.id, first.id());
    assert!(
        q.lease().unwrap().is_none(),
        "the second waits on the first"
    );
    q.ack(lease).unwrap();
    let lease = q
        .lease()
        .unwrap()
        .expect("ready once its dependency completed");
    assert_eq!(lease.id, second.id());
    let record = q.job(second.id()).unwrap().unwrap();
    assert_eq!(record.state, "running");
    q.ack(lease).unwrap();
    let record = q.job(second.id()).unwrap().unwrap();
    assert_eq!(record.state, "complete");
    assert_eq!(record.history_events(), ["put", "popped", "done"]);
}

#[test]
fn tags_tracking_and_failure_groups() {
    if RedisServer::get().is_none() {
        return;
    }
    let q = queue("tags");
    let tag = format!("nightly-{}", q.name());
    let added = q
        .put(NewJob::new("{}"), QlessPut::new().tags([tag.as_str()]))
        .unwrap();
    let id = added.id();
    assert_eq!(q.tagged(&tag, 0, 10).unwrap(), (1, vec![id.to_owned()]));
    assert_eq!(q.tag(id, &["extra"]).unwrap(), [tag.as_str(), "extra"]);
    assert_eq!(q.untag(id, &[tag.as_str()]).unwrap(), ["extra"]);
    assert_eq!(q.tagged(&tag, 0, 10).unwrap().0, 0);
    q.track(id).unwrap();
    assert!(q.tracked().unwrap().contains(&id.to_owned()));
    assert!(q.job(id).unwrap().unwrap().tracked);
    q.untrack(id).unwrap();
    assert!(!q.job(id).unwrap().unwrap().tracked);

    let group = format!("bad-input-{}", q.name());
    let lease = q.lease().unwrap().unwrap();
    q.fail(lease, &format!("{group}: line 3")).unwrap();
    assert!(q.failure_groups().unwrap().contains(&(group.clone(), 1)));
    assert_eq!(q.failed(&group, 0, 10).unwrap(), (1, vec![id.to_owned()]));
    let record = q.job(id).unwrap().unwrap();
    assert_eq!(record.state, "failed");
    assert!(record.failure.contains("line 3"), "{}", record.failure);
    assert_eq!(q.unfail(&group, 10).unwrap(), 1);
    assert!(!q.failure_groups().unwrap().iter().any(|(g, _)| *g == group));
    let again = q.lease().unwrap().expect("unfailed");
    assert_eq!((again.id.as_str(), again.attempt), (id, 1));
    q.complete_to(again, &format!("{}-next", q.name()), Duration::ZERO)
        .unwrap();
    let record = q.job(id).unwrap().unwrap();
    assert_eq!(
        (record.state.as_str(), record.queue.clone()),
        ("waiting", format!("{}-next", q.name()))
    );
    assert_eq!(
        record.history_events(),
        ["put", "popped", "failed", "put", "popped", "done", "put"]
    );
}

#[test]
fn workers_and_config() {
    if RedisServer::get().is_none() {
        return;
    }
    let q = queue("workers");
    q.enqueue(NewJob::new("{}")).unwrap();
    let lease = q.lease().unwrap().unwrap();
    let me = q
        .workers()
        .unwrap()
        .into_iter()
        .find(|w| w.worker == q.worker())
        .expect("listed");
    assert_eq!((me.jobs, me.stalled), (1, 0));
    assert_eq!(q.worker_jobs(q.worker()).unwrap().0, vec![lease.id.clone()]);
    q.ack(lease).unwrap();
    assert!(q.worker_jobs(q.worker()).unwrap().0.is_empty());
    q.set_config("grace-period", Some("5")).unwrap();
    assert_eq!(q.config("grace-period").unwrap().as_deref(), Some("5"));
    q.set_config("grace-period", None).unwrap();
    assert_eq!(q.config("grace-period").unwrap(), None);
}
