//! The tour of the Jobs API that the `jobs`, `postgres_jobs` and
//! `redis_jobs` examples share: everything here is written against
//! `&dyn JobQueue`, the contract every backend keeps, so it runs unchanged
//! on the embedded queue, PostgreSQL and Redis.

use std::time::Duration;

use dque::jobs::{JobQueue, Nacked, NewJob, Retry};
use dque::Error;

/// Attempts a job gets before it is a dead letter (each example opens its
/// queue with it).
pub const MAX_ATTEMPTS: u16 = 3;

/// How long a failed job waits before it runs again, in this tour.
const RETRY: Retry = Retry::After(Duration::from_millis(100));

/// Enqueues a few jobs, runs a worker until nothing is left to run, prints
/// the dead letters, counts and statistics, then empties the queue again
/// (so a tour on a server can run twice).
pub fn tour(queue: &dyn JobQueue) -> Result<(), Error> {
    println!("queue {:?}: {:?}", queue.name(), queue.counts()?);

    // Of the ready jobs the smallest priority number runs first (default
    // 0); equal priorities first in, first out.
    queue.enqueue(NewJob::new("send newsletter").priority(10))?;
    queue.enqueue(NewJob::new("reset password").priority(-5))?;
    // Headers are name=value strings a worker reads without the body.
    queue.enqueue(NewJob::new("upload thumbnail").header("kind", "flaky"))?;
    queue.enqueue(NewJob::new("charge card 42").header("kind", "broken"))?;
    // Scheduled: invisible until due. The reminder falls due while the
    // worker runs; the report does not.
    queue.enqueue(NewJob::new("remind me").delay(Duration::from_millis(300)))?;
    let report = queue.enqueue(NewJob::new("weekly report").delay(Duration::from_secs(3600)))?;
    // A caller's id names at most one waiting job: a producer that retries
    // after a crash adds nothing twice (not an error).
    let first = queue.enqueue(NewJob::new("bill order 7").id("order-7"))?;
    let again = queue.enqueue(NewJob::new("bill order 7").id("order-7"))?;
    println!(
        "order-7 added: {}, then again: {}",
        first.is_added(),
        again.is_added()
    );
    println!("before the worker: {:?}\n", queue.counts()?);

    work(queue)?;

    let stats = queue.stats()?;
    println!("\nafter the worker: {:?}", stats.counts);
    if let Some(today) = stats.days.last() {
        println!(
            "today: {} leased (mean wait {:.3} s), {} acked (mean run {:.3} s), {} retries, dead letters by reason {:?}",
            today.wait.count, today.wait.mean, today.run.count, today.run.mean, today.retries, today.failures
        );
    }
    for dead in queue.dead(10)? {
        let body = String::from_utf8_lossy(&dead.job.body);
        println!(
            "dead letter {}: {body:?} after {} attempts: {}",
            dead.job.id, dead.job.attempt, dead.reason
        );
        // After a fix it would go back with its attempts starting over;
        // here it is put back and cancelled, to leave the queue empty.
        queue.requeue_dead(&dead.job.id)?;
        queue.cancel(&dead.job.id)?;
    }
    queue.cancel(report.id())?; // not waiting an hour for it
    println!(
        "after clearing the dead letter and the report: {:?}",
        queue.counts()?
    );
    Ok(())
}

/// A worker: leases what is ready, waiting up to a second for more (a
/// retry or a job falling due wakes it), and acks or nacks each job.
fn work(queue: &dyn JobQueue) -> Result<(), Error> {
    while let Some(job) = queue.lease_timeout(Duration::from_secs(1))? {
        let body = String::from_utf8_lossy(&job.body).into_owned();
        let attempt = job.attempt;
        let failure = match job.header("kind") {
            Some("flaky") if attempt == 1 => "upstream timed out",
            Some("broken") => "card declined",
            _ => {
                println!(
                    "ran {body:?} (priority {}, attempt {attempt})",
                    job.priority
                );
                queue.ack(job)?;
                continue;
            }
        };
        // A nack runs the job again after RETRY (or `Retry::Backoff`:
        // the queue's exponential back-off), until its attempts run out.
        match queue.nack(job, RETRY, failure)? {
            Nacked::Retrying { .. } => {
                println!("{body:?} failed (attempt {attempt}): {failure}; retrying")
            }
            Nacked::Dead => println!("{body:?} failed (attempt {attempt}): now a dead letter"),
        }
    }
    Ok(())
}
