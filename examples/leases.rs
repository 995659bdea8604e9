//! A worker loop on a plain queue with leases: a task is leased (it stays
//! on disk, invisible to other consumers), then acked when done, nacked
//! with a reason and a [`Retry`] delay when it failed and may succeed
//! later, or failed outright; a task whose attempts run out becomes a dead
//! letter with its reason, and the dead letters are shown at the end.
//!
//! Run with `cargo run --example leases`. It uses a temporary queue and
//! takes about a second (the retries wait 100 ms each).

use std::time::Duration;

use dque::{DQue, Options, Retry};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
enum Task {
    /// Always works.
    Resize(String),
    /// Fails its first attempt (a remote service hiccups), then works.
    Upload(String),
    /// Can never work: failed at once, no retries spent.
    Parse(String),
    /// Fails every time: retried until `max_attempts`, then a dead letter.
    Charge(u32),
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let queue: DQue<Task> = Options::new()
        // A lease not acked within this time ends, and the task is
        // delivered again (the worker died or hung): at least once.
        .visibility_timeout(Duration::from_secs(30))
        // Failed attempts are counted on disk; the third moves the task
        // to the dead letters.
        .max_attempts(3)
        .create(dir.path().join("tasks"))?;

    queue.enqueue_batch([
        Task::Resize("cat.jpg".into()),
        Task::Upload("report.pdf".into()),
        Task::Parse("{not json".into()),
        Task::Charge(42),
        Task::Resize("dog.jpg".into()),
    ])?;
    println!("enqueued {} tasks", queue.len());

    // The loop ends once no task shows up for half a second; a task
    // nacked with a delay comes back well within that.
    while let Some(task) = queue.lease_timeout(Duration::from_millis(500))? {
        // `task` is a guard: it derefs to the item and knows its attempt.
        let attempt = task.attempt();
        match &*task {
            Task::Resize(file) => {
                println!("resized {file} (attempt {attempt})");
                task.ack()?; // done: removed from the queue for good
            }
            Task::Upload(file) if attempt == 1 => {
                println!("upload of {file} timed out (attempt {attempt}): retry in 100 ms");
                // Back in front of newer tasks once the delay has passed.
                // `Retry::Backoff` would wait 1 s, doubling per attempt.
                let dead = task.nack_with(
                    "storage timed out",
                    Retry::After(Duration::from_millis(100)),
                )?;
                assert!(!dead, "attempts left");
            }
            Task::Upload(file) => {
                println!("uploaded {file} (attempt {attempt})");
                task.ack()?;
            }
            Task::Parse(text) => {
                println!("cannot parse {text:?}: failed, no retry");
                task.fail("malformed input")?; // a dead letter at once
            }
            Task::Charge(order) => {
                let order = *order; // the guard is moved into the nack
                                    // The reason becomes the dead letter's if this was the
                                    // last attempt; `nack_with` then returns true.
                let dead = task.nack_with(
                    &format!("card declined for order {order}"),
                    Retry::After(Duration::from_millis(100)),
                )?;
                println!(
                    "charge of order {order} declined (attempt {attempt}){}",
                    if dead {
                        ": out of attempts"
                    } else {
                        ": retry in 100 ms"
                    }
                );
            }
        }
        // Dropping a guard without settling it hands the task back too,
        // as `nack()` does; `touch()` would keep a long lease alive.
    }

    assert!(queue.is_empty(), "every task acked or dead");
    let dead = queue.dead_letters()?;
    println!("\n{} dead letters:", dead.len());
    for letter in &dead {
        let task: Task = letter.item::<Task, dque::Bincode>()?;
        println!(
            "  #{} {task:?} after {} attempt(s): {}",
            letter.id, letter.attempts, letter.reason
        );
    }
    // After a fix, `queue.requeue_dead(id)` puts one back (its attempts
    // start over), and `queue.purge_dead()` drops them all.
    assert_eq!(dead.len(), 2);
    Ok(())
}
