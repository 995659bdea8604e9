//! Many processes on one queue, with no daemon: the program re-runs itself
//! as producer and consumer child processes that open the same queue
//! directory in shared mode (`Options::shared(true)`, Linux). Consumers
//! lease and ack; a lease taken by one process is invisible to the
//! others, and an enqueue in any process wakes a consumer blocked in
//! another. The parent then checks that every item was consumed exactly
//! once and prints who took how many.
//!
//! Run with `cargo run --example many_processes`. It uses a temporary
//! queue and takes a few seconds (each enqueue and ack is fsynced).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dque::{DQue, Options};
use serde::{Deserialize, Serialize};

const PRODUCERS: u64 = 3;
const CONSUMERS: usize = 3;
const PER_PRODUCER: u64 = 300;

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Work(u64),
    /// One per consumer, enqueued by the parent after every producer
    /// finished: FIFO puts it behind all the work.
    Stop,
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Every process opens the queue with the same options.
fn shared() -> Options {
    Options::new().shared(true)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("produce") => produce(Path::new(&args[2]), args[3].parse()?),
        Some("consume") => consume(Path::new(&args[2])),
        _ => parent(),
    }
}

fn produce(path: &Path, producer: u64) -> Result<()> {
    let queue: DQue<Message> = shared().open(path)?;
    for i in 0..PER_PRODUCER {
        queue.enqueue(&Message::Work(producer * PER_PRODUCER + i))?;
    }
    Ok(())
}

/// Takes work until a `Stop`, then prints what it took, one number a line.
fn consume(path: &Path) -> Result<()> {
    let queue: DQue<Message> = shared().open(path)?;
    let mut taken = Vec::new();
    // Waits for an enqueue by any process; gives up if the parent died.
    while let Some(job) = queue.lease_timeout(Duration::from_secs(10))? {
        let stop = matches!(*job, Message::Stop);
        if let Message::Work(n) = *job {
            taken.push(n);
        }
        job.ack()?; // if this process died before it, another would get the job
        if stop {
            let mut out = std::io::stdout().lock();
            for n in taken {
                writeln!(out, "{n}")?;
            }
            return Ok(());
        }
    }
    Err("no Stop within 10 s: did the parent die?".into())
}

/// This program again, as `role`, on the queue at `path`.
fn child(role: &str, path: &Path) -> std::io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(role).arg(path);
    Ok(command)
}

fn parent() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shared");
    let queue: DQue<Message> = shared().create(&path)?;

    // Consumers first: they block until the producers' first items. A
    // consumer's stdout is a pipe: it reports there what it took.
    let consumers = (0..CONSUMERS)
        .map(|_| child("consume", &path)?.stdout(Stdio::piped()).spawn())
        .collect::<std::io::Result<Vec<_>>>()?;
    let producers = (0..PRODUCERS)
        .map(|p| child("produce", &path)?.arg(p.to_string()).spawn())
        .collect::<std::io::Result<Vec<_>>>()?;
    for mut producer in producers {
        assert!(producer.wait()?.success(), "a producer failed");
    }
    // Every open handle, in any process, is listed with its leases.
    println!(
        "producers done; handles open now: {}",
        queue.workers()?.len()
    );
    for _ in 0..CONSUMERS {
        queue.enqueue(&Message::Stop)?;
    }

    let total = PRODUCERS * PER_PRODUCER;
    let mut times_taken = vec![0u32; total as usize];
    for consumer in consumers {
        let pid = consumer.id();
        let output = consumer.wait_with_output()?;
        assert!(output.status.success(), "consumer {pid} failed");
        let text = String::from_utf8(output.stdout)?;
        for line in text.lines() {
            times_taken[line.parse::<usize>()?] += 1;
        }
        println!("consumer pid {pid} took {} items", text.lines().count());
    }
    let once = times_taken.iter().filter(|&&n| n == 1).count();
    let missing = times_taken.iter().filter(|&&n| n == 0).count();
    let twice = times_taken.iter().filter(|&&n| n > 1).count();
    println!(
        "{total} produced: {once} consumed exactly once, {missing} missing, {twice} more than once"
    );
    assert_eq!(once as u64, total);
    assert!(queue.is_empty());
    Ok(())
}
