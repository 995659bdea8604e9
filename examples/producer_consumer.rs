//! Producers and consumers on one queue, shared with `Arc`, using the
//! blocking calls; `seal` tells the consumers no more is coming: they
//! drain what is left and stop.
//!
//! Run with `cargo run --example producer_consumer`.

use std::sync::Arc;
use std::thread;

use dque::{DQue, Durability, Options};

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
                // Waits for each item; ends once the queue is sealed and empty.
                for n in queue.items() {
                    count += 1;
                    sum += n.expect("dequeue");
                }
                (count, sum)
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
    // No more items: the consumers drain what was produced, then stop.
    queue.seal();

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
    assert!(queue.is_empty());
    queue.close()?;
    Ok(())
}
