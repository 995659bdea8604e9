//! The main job on a temporary queue: enqueue, close, reopen, drain.
//!
//! Run with `cargo run --example demo`. Pass a directory to keep the queue.

use dque::{DQue, Options};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u32,
    task: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let path = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => temp.path().join("jobs"),
    };

    // Small segments so the demo shows them rolling over.
    let queue: DQue<Job> = Options::new().segment_items(4).open_or_create(&path)?;
    println!("opened {} holding {} items", path.display(), queue.len());
    for id in 1..=10 {
        queue.enqueue(&Job {
            id,
            task: format!("resize image {id}"),
        })?;
    }
    println!(
        "enqueued 10 jobs: len {}, segments {:?}",
        queue.len(),
        queue.segment_numbers()?
    );
    let first = queue.dequeue()?.expect("just enqueued");
    println!("dequeued {first:?}");
    queue.close()?;
    println!("closed; reopening");

    let queue: DQue<Job> = DQue::open(&path)?;
    println!(
        "reopened: len {}, segments {:?}, report clean: {}",
        queue.len(),
        queue.segment_numbers()?,
        queue.open_report().is_clean()
    );
    while let Some(job) = queue.dequeue()? {
        println!("dequeued {job:?} (left {})", queue.len());
    }
    println!("drained; segments {:?}", queue.segment_numbers()?);
    Ok(())
}
