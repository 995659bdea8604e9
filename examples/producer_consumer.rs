//! Producers and consumers on one queue, shared with `Arc`, using the
//! blocking dequeue; `close` wakes the consumers when the work is done.
//!
//! Run with `cargo run --example producer_consumer`.

use std::sync::Arc;
use std::thread;

use dque::{DQue, Durability, Error, Options};

const PRODUCERS: u64 = 4;
const CONSUMERS: usize = 3;
const PER_PRODUCER: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let queue: Arc<DQue<u64>> = Arc::new(
        Options::new()
            .durability(Durability::Turbo)
            .segment_items(1_000)
            .create(temp.path().join("numbers"))?,
    );

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let queue = Arc::clone(&queue);
            thread::spawn(move || {
                let (mut count, mut sum) = (0u64, 0u64);
                loop {
                    match queue.dequeue_block() {
                        Ok(n) => {
                            count += 1;
                            sum += n;
                        }
                        Err(Error::Closed) => return (count, sum),
                        Err(e) => panic!("dequeue failed: {e}"),
                    }
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let queue = Arc::clone(&queue);
            thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    queue.enqueue(&(p * PER_PRODUCER + i)).expect("enqueue");
                }
            })
        })
        .collect();
    for producer in producers {
        producer.join().expect("producer panicked");
    }
    // Wait for the consumers to drain what was produced, then stop them.
    while !queue.is_empty() {
        thread::sleep(std::time::Duration::from_millis(5));
    }
    queue.close()?;

    let (mut count, mut sum) = (0, 0);
    for (i, consumer) in consumers.into_iter().enumerate() {
        let (c, s) = consumer.join().expect("consumer panicked");
        println!("consumer {i} took {c} items");
        count += c;
        sum += s;
    }
    let n = PRODUCERS * PER_PRODUCER;
    println!(
        "{count} items delivered, sum {sum} (expected {n} and {})",
        n * (n - 1) / 2
    );
    assert_eq!((count, sum), (n, n * (n - 1) / 2));
    Ok(())
}
