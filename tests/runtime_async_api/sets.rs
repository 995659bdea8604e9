//! The tokio runtime over several queues (`AsyncQueueSet`), from an
//! ADDRESS (`AsyncWorker::open`), and its testing helpers
//! (`testing::{Inline::run_async, drain_async, enqueued_async,
//! assert_enqueued_async}`): what the thread runtime has had since issue 26.

use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{AddressOptions, AsyncJobQueue, AsyncQueueSet, NewJob, Order, Retry};
use dque::runtime::{
    testing, AsyncContext, AsyncJob, AsyncWorker, EnqueueAsyncJob, JobError, KindOptions,
};
use serde::{Deserialize, Serialize};

use super::{dead, runtime, AlwaysFails, AsyncBackend, Echo, Log};
use crate::jobs_api::Settings;

/// Says which queue it ran from (`AsyncContext::queue_name`).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Where {
    pub n: u32,
}

impl AsyncJob for Where {
    const KIND: &'static str = "where";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        tokio::task::yield_now().await;
        cx.state::<Arc<Log>>()
            .push(format!("where {} from {}", self.n, cx.queue_name()));
        Ok(())
    }
}

/// A kind whose typed enqueue goes to a named queue of a set.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Routed {
    pub n: u32,
}

thread_local! {
    /// The queue [`Routed`] names: the test's own (a typed enqueue reads
    /// the kind's options on the caller's thread).
    pub static ROUTED_TO: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl AsyncJob for Routed {
    const KIND: &'static str = "routed";
    async fn perform(self, _: &AsyncContext) -> Result<(), JobError> {
        Ok(())
    }
    fn options() -> KindOptions {
        KindOptions::new().queue(ROUTED_TO.with(|name| name.borrow().clone()))
    }
}

/// Fails its first attempt with a retry an hour later, then succeeds:
/// only a drain with the queue's clock runs it twice without waiting.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Later {
    pub n: u32,
}

impl AsyncJob for Later {
    const KIND: &'static str = "later";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        cx.state::<Arc<Log>>()
            .push(format!("later {} attempt {}", self.n, cx.attempt()));
        match cx.attempt() {
            1 => Err(JobError::retry_after("not yet", Duration::from_secs(3600))),
            _ => Ok(()),
        }
    }
}

/// Enqueues a follow-up [`Echo`] into the queue it runs from.
#[derive(Serialize, Deserialize)]
pub struct FollowUp {
    pub n: u32,
}

impl AsyncJob for FollowUp {
    const KIND: &'static str = "follow_up";
    async fn perform(self, cx: &AsyncContext) -> Result<(), JobError> {
        if cx.attempt() < 2 {
            return Err(JobError::retry(format!("attempt {}", cx.attempt())));
        }
        let queue = cx.try_queue().ok_or_else(|| JobError::fail("no queue"))?;
        queue.enqueue_job(&Echo { n: self.n }).await?;
        Ok(())
    }
}

fn two_queues(
    backend: &dyn AsyncBackend,
    name: &str,
) -> (Arc<dyn AsyncJobQueue>, Arc<dyn AsyncJobQueue>, Settings) {
    let settings = Settings::default();
    let a = backend.make(&format!("{name}-a"), &settings);
    let b = backend.make(&format!("{name}-b"), &settings);
    (a, b, settings)
}

/// An `AsyncWorker` over two queues runs the jobs of both, each handler
/// seeing the queue its job came from, and settles each job in its own
/// queue: acks, retries and dead letters land where the job was (a settle
/// sent to the other queue is refused there, and would stop the worker).
pub fn a_worker_over_two_queues_runs_both_and_settles_each_in_its_own(backend: &dyn AsyncBackend) {
    let (a, b, _) = two_queues(backend, "rta-set");
    runtime().block_on(async {
        a.enqueue_job(&Where { n: 1 }).await.unwrap();
        b.enqueue_job(&Where { n: 2 }).await.unwrap();
        b.enqueue_job(&Where { n: 3 }).await.unwrap();
        b.enqueue_job(&AlwaysFails {}).await.unwrap();
        let log = Arc::new(Log::default());
        let hooks = Arc::new(Log::default());
        let seen = Arc::clone(&hooks);
        let set = AsyncQueueSet::new(vec![Arc::clone(&a), Arc::clone(&b)], Order::RoundRobin)
            .expect("a set");
        let summary = AsyncWorker::from_set(set)
            .register::<Where>()
            .register::<AlwaysFails>()
            .handle_signals(false)
            .until_empty(true)
            .concurrency(2)
            .state(Arc::clone(&log))
            .on_finished(move |f| {
                seen.push(format!("{} {} in {}", f.kind, f.outcome.word(), f.queue))
            })
            .run()
            .await
            .expect("run: every settle reached its job's queue");
        assert_eq!(
            (summary.succeeded, summary.retried, summary.dead),
            (3, 1, 1),
            "{summary:?}"
        );
        let mut lines = log.lines();
        lines.sort();
        let (an, bn) = (a.name(), b.name());
        assert_eq!(
            lines,
            [
                format!("where 1 from {an}"),
                format!("where 2 from {bn}"),
                format!("where 3 from {bn}"),
            ]
        );
        let mut settled = hooks.lines();
        settled.sort();
        assert_eq!(
            settled,
            [
                format!("always_fails dead in {bn}"),
                format!("always_fails retry in {bn}"),
                format!("where ok in {an}"),
                format!("where ok in {bn}"),
                format!("where ok in {bn}"),
            ]
        );
        for queue in [&a, &b] {
            let counts = queue.counts().await.unwrap();
            assert_eq!((counts.ready, counts.leased), (0, 0), "{}", queue.name());
        }
        assert!(dead(a.as_ref()).await.is_empty());
        let dead_b = dead(b.as_ref()).await;
        assert_eq!(dead_b.len(), 1, "{dead_b:?}");
        assert!(dead_b[0].1.contains("attempt 2"), "{dead_b:?}");
    });
}

/// `AsyncQueueSet` as an `AsyncJobQueue`: leases in the set's order (in
/// order, or round-robin), settles each lease in the queue it came from,
/// refuses a lease taken elsewhere, enqueues into the first queue (or the
/// one a kind names), and adds up the counts.
pub fn a_queue_set_leases_in_order_and_settles_each_lease_at_home(backend: &dyn AsyncBackend) {
    let (a, b, _) = two_queues(backend, "rta-set-api");
    runtime().block_on(async {
        for i in 0..2 {
            a.enqueue(NewJob::new(format!("a{i}"))).await.unwrap();
            b.enqueue(NewJob::new(format!("b{i}"))).await.unwrap();
        }
        let body = |lease: &dque::jobs::JobLease| String::from_utf8(lease.body.clone()).unwrap();
        let pair = || vec![Arc::clone(&a), Arc::clone(&b)];
        let ordered = AsyncQueueSet::new(pair(), Order::InOrder).unwrap();
        let fair = AsyncQueueSet::new(pair(), Order::RoundRobin).unwrap();
        let mut taken = Vec::new();
        for set in [&ordered, &ordered] {
            let lease = set.lease().await.unwrap().expect("a job");
            taken.push(body(&lease));
            set.release(lease).await.unwrap();
        }
        for _ in 0..3 {
            let lease = fair.lease_timeout(Duration::from_secs(1)).await.unwrap();
            let lease = lease.expect("a job");
            taken.push(body(&lease));
            fair.release(lease).await.unwrap();
        }
        assert_eq!(taken, ["a0", "a0", "a0", "b0", "a0"]);

        // `lease_indexed` tells the queue; the set's own leases it settles
        // where each came from (one in each queue, from the same set).
        let (from, lease) = fair.lease_indexed().await.unwrap().expect("a job");
        assert_eq!((from, body(&lease).as_str()), (1, "b0"));
        fair.queue(from).release(lease).await.unwrap();
        let from_a = fair.lease().await.unwrap().expect("a job");
        let from_b = fair.lease().await.unwrap().expect("a job");
        assert_eq!([body(&from_a), body(&from_b)], ["a0", "b0"]);
        fair.touch(&from_b).await.expect("touched in b");
        fair.touch(&from_a).await.expect("touched in a");
        fair.ack(from_b).await.expect("acked in b");
        let nacked = fair
            .nack(from_a, Retry::After(Duration::ZERO), "again")
            .await;
        assert!(nacked.is_ok(), "nacked in a: {nacked:?}");
        let (ca, cb) = (a.counts().await.unwrap(), b.counts().await.unwrap());
        assert_eq!((ca.ready, ca.leased, cb.ready, cb.leased), (2, 0, 1, 0));

        // A lease the set did not take is refused, with no effect.
        let elsewhere = a.lease().await.unwrap().expect("a job");
        let refused = ordered.ack(elsewhere).await.unwrap_err();
        assert!(
            refused.to_string().contains("not taken through this set"),
            "{refused}"
        );
        assert_eq!(a.counts().await.unwrap().leased, 1, "still leased in a");

        // Enqueue: the first queue; a kind that names a queue, that one.
        let added = ordered.enqueue(NewJob::new("new")).await.unwrap();
        assert!(added.is_added());
        assert_eq!(a.counts().await.unwrap().ready, 2);
        ROUTED_TO.with(|name| *name.borrow_mut() = b.name().to_owned());
        ordered.enqueue_job(&Routed { n: 1 }).await.unwrap();
        testing::assert_enqueued_async(b.as_ref(), &Routed { n: 1 }).await;
        let alone = AsyncQueueSet::new(vec![Arc::clone(&a)], Order::InOrder).unwrap();
        let missing = alone.enqueue_job(&Routed { n: 2 }).await.unwrap_err();
        assert!(missing.to_string().contains("not in this set"), "{missing}");
        assert!(testing::enqueued_async::<Routed>(a.as_ref())
            .await
            .unwrap()
            .is_empty());

        let sum = ordered.counts().await.unwrap();
        let (ca, cb) = (a.counts().await.unwrap(), b.counts().await.unwrap());
        assert_eq!(sum.ready, ca.ready + cb.ready);
        assert_eq!(sum.leased, ca.leased + cb.leased);
        assert_eq!(ordered.name(), format!("{},{}", a.name(), b.name()));
        assert!(AsyncQueueSet::new(Vec::new(), Order::InOrder).is_err());

        // A batch comes from one queue (the first with any), settled there.
        let batch = ordered.lease_batch(10).await.unwrap();
        assert_eq!(batch.len() as u64, sum.ready - cb.ready, "a's ready jobs");
        for lease in batch {
            ordered.ack(lease).await.expect("acked in a");
        }
        let batch = ordered.lease_batch(10).await.unwrap();
        assert_eq!(batch.len() as u64, cb.ready, "then b's");
        for lease in batch {
            ordered.release(lease).await.expect("released in b");
        }
        let b_ready = cb.ready;
        let (ca, cb) = (a.counts().await.unwrap(), b.counts().await.unwrap());
        assert_eq!((ca.ready, cb.ready, cb.leased), (0, b_ready, 0));
    });
}

/// The async testing helpers on a backend's queue: `enqueued_async` and
/// `assert_enqueued_async` see what waits; `drain_async` with the queue's
/// manual clock runs a retry due in an hour at once; `Inline::run_async`
/// runs a handler by value, with the queue it is given.
pub fn the_async_testing_helpers_drain_and_tell_what_was_enqueued(backend: &dyn AsyncBackend) {
    let settings = Settings::default();
    let queue = backend.make("rta-helpers", &settings);
    runtime().block_on(async {
        queue.enqueue_job(&Later { n: 1 }).await.unwrap();
        queue.enqueue_job(&Echo { n: 7 }).await.unwrap();
        assert_eq!(
            testing::enqueued_async::<Echo>(queue.as_ref())
                .await
                .unwrap(),
            [Echo { n: 7 }]
        );
        testing::assert_enqueued_async(queue.as_ref(), &Later { n: 1 }).await;
        // Its panic names what does wait.
        let absent = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                testing::assert_enqueued_async(queue.as_ref(), &Echo { n: 8 }).await
            })
            .await
        };
        let message = match absent {
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_default()
            }
            other => panic!("no panic for a job that is not there: {other:?}"),
        };
        assert!(message.contains("Echo { n: 7 }"), "{message}");

        let log = Arc::new(Log::default());
        let worker = AsyncWorker::new(Arc::clone(&queue))
            .register::<Later>()
            .register::<Echo>()
            .state(Arc::clone(&log));
        let summary = testing::drain_async(worker, Some(&settings.clock))
            .await
            .expect("drain");
        assert_eq!(
            (summary.retried, summary.succeeded, summary.dead),
            (1, 2, 0),
            "{summary:?}"
        );
        let mut lines = log.lines();
        lines.sort();
        assert_eq!(
            lines,
            ["echo 7 attempt 1", "later 1 attempt 1", "later 1 attempt 2"]
        );
        assert_eq!(queue.counts().await.unwrap(), Default::default());

        // Without the clock the retry is left for its time.
        queue.enqueue_job(&Later { n: 2 }).await.unwrap();
        let worker = AsyncWorker::new(Arc::clone(&queue))
            .register::<Later>()
            .state(Arc::clone(&log));
        let summary = testing::drain_async(worker, None).await.expect("drain");
        assert_eq!((summary.retried, summary.succeeded), (1, 0), "{summary:?}");
        assert_eq!(queue.counts().await.unwrap().scheduled, 1);

        // Inline: the handler's answer as it is, the queue it was given.
        let inline = testing::Inline::new().async_queue(Arc::clone(&queue));
        assert_eq!(
            inline.run_async(FollowUp { n: 9 }).await,
            Err(JobError::retry("attempt 1"))
        );
        assert_eq!(inline.attempt(2).run_async(FollowUp { n: 9 }).await, Ok(()));
        testing::assert_enqueued_async(queue.as_ref(), &Echo { n: 9 }).await;
        let bare = testing::Inline::new().attempt(2);
        let answer = bare.run_async(FollowUp { n: 1 }).await;
        assert_eq!(answer, Err(JobError::fail("no queue")));
    });
}

/// An `AsyncWorker` opened from an ADDRESS (`AsyncWorker::open`) runs the
/// jobs a blocking handle from the same ADDRESS (the library's other
/// opener, `AddressOptions::open_str`) enqueued there.
pub fn an_async_worker_runs_from_an_address(address: &str) {
    // Blocking handles are used outside the runtime (the PostgreSQL one
    // runs its own).
    let producer = AddressOptions::new()
        .create(true)
        .open_str(address)
        .expect("open the address");
    for n in 1..=3 {
        let job = dque::runtime::new_async_job(&Echo { n }).unwrap();
        producer.enqueue(job).unwrap();
    }
    let log = Arc::new(Log::default());
    let summary = runtime().block_on(async {
        let bad = AsyncWorker::open("redis://nowhere:6379").await.unwrap_err();
        assert!(
            bad.to_string().contains("name the queue after '#'"),
            "{bad}"
        );
        AsyncWorker::open(address)
            .await
            .expect("a worker from the address")
            .handle_signals(false)
            .until_empty(true)
            .state(Arc::clone(&log))
            .register::<Echo>()
            .run()
            .await
            .expect("run")
    });
    assert_eq!(summary.succeeded, 3, "{summary:?}");
    let mut lines = log.lines();
    lines.sort();
    assert_eq!(
        lines,
        ["echo 1 attempt 1", "echo 2 attempt 1", "echo 3 attempt 1"]
    );
    assert_eq!(producer.counts().unwrap(), Default::default());
    producer.close().unwrap();
}
