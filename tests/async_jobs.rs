//! The Jobs API's async contract on the embedded queue (feature `tokio`):
//! a worker behind `Box<dyn AsyncJobQueue>`, waiting woken by an enqueue,
//! and lease futures dropped at random points leaving no job stuck or
//! counted. Rounds: `DQUE_ASYNC_ROUNDS` (default small).

use std::collections::BTreeMap;
use std::time::Duration;

use dque::jobs::{AsyncEmbeddedJobs, AsyncJobQueue, JobOptions, NewJob, Retry};
use dque::{Durability, Options};

const LONG: Duration = Duration::from_secs(30);

fn queue(dir: &tempfile::TempDir, durability: Durability) -> Box<dyn AsyncJobQueue> {
    let jobs = JobOptions::new()
        .queue(
            Options::new()
                .durability(durability)
                .visibility_timeout(Duration::from_secs(3600)),
        )
        .create(dir.path().join("jobs"))
        .unwrap();
    Box::new(AsyncEmbeddedJobs::new(jobs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_behind_a_pointer_runs_the_contract() {
    for durability in [Durability::Safe, Durability::Turbo] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(&dir, durability);
        assert_eq!(q.name(), "jobs");
        q.enqueue(NewJob::new("later")).await.unwrap();
        q.enqueue(NewJob::new("urgent").priority(-1)).await.unwrap();
        let lease = q.lease().await.unwrap().expect("a job");
        assert_eq!(lease.body, b"urgent");
        q.touch(&lease).await.unwrap();
        q.nack(lease, Retry::After(Duration::ZERO), "flaky")
            .await
            .unwrap();
        let lease = q.lease_timeout(LONG).await.unwrap().expect("again");
        assert_eq!((lease.body.as_slice(), lease.attempt), (&b"urgent"[..], 2));
        q.release(lease).await.unwrap();
        let lease = q.lease().await.unwrap().expect("again");
        assert_eq!(lease.attempt, 2, "a release does not count");
        q.fail(lease, "no").await.unwrap();
        let lease = q.lease().await.unwrap().expect("the other");
        q.ack(lease).await.unwrap();
        let counts = q.counts().await.unwrap();
        assert_eq!((counts.ready, counts.dead), (0, 1), "{durability:?}");
        q.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_workers_wake_on_an_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    let q: std::sync::Arc<dyn AsyncJobQueue> = queue(&dir, Durability::Turbo).into();
    let workers: Vec<_> = (0..20)
        .map(|_| {
            let q = std::sync::Arc::clone(&q);
            tokio::spawn(async move {
                let lease = q
                    .lease_timeout(LONG)
                    .await
                    .unwrap()
                    .expect("woken with a job");
                let body = lease.body.clone();
                q.ack(lease).await.unwrap();
                body
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let jobs = (0..20).map(|i| NewJob::new(vec![i])).collect();
    q.enqueue_batch(jobs).await.unwrap();
    let mut got: Vec<u8> = Vec::new();
    for worker in workers {
        got.extend(worker.await.unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lease_futures_leave_no_job_leased_or_counted() {
    let rounds: u64 = std::env::var("DQUE_ASYNC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for durability in [Durability::Safe, Durability::Turbo] {
        let dir = tempfile::tempdir().unwrap();
        let q: std::sync::Arc<dyn AsyncJobQueue> = queue(&dir, durability).into();
        let jobs = (0..50u8).map(|i| NewJob::new(vec![i])).collect();
        q.enqueue_batch(jobs).await.unwrap();
        let tasks: Vec<_> = (0..6u64)
            .map(|seed| {
                let q = std::sync::Arc::clone(&q);
                tokio::spawn(async move {
                    let mut state = seed * 2_654_435_761 + 1;
                    for _ in 0..rounds {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let tiny = Duration::from_micros(state % 300);
                        // A lease dropped by a tiny timeout; one that came
                        // in time is released (uncounted) at once.
                        if let Ok(Ok(Some(lease))) = tokio::time::timeout(tiny, q.lease()).await {
                            q.release(lease).await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        // A job taken for a dropped future is released on the blocking
        // pool: wait until all 50 are ready again.
        let mut waited = 0;
        while q.counts().await.unwrap().ready != 50 {
            waited += 1;
            assert!(
                waited < 3000,
                "{durability:?}: a job stays leased with no owner"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut seen = BTreeMap::new();
        while let Some(lease) = q.lease().await.unwrap() {
            assert_eq!(lease.attempt, 1, "{durability:?}: a dropped lease counted");
            *seen.entry(lease.body.clone()).or_insert(0) += 1;
            q.ack(lease).await.unwrap();
        }
        assert_eq!(seen.len(), 50, "{durability:?}");
        assert!(seen.values().all(|&n| n == 1));
    }
}

#[test]
fn the_async_worker_example_prints_done_1000() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("made/by/the/example");
    // `cargo test` builds the examples beside the tests' directory.
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/async_worker");
    assert!(
        example.exists(),
        "{} not built: run cargo test",
        example.display()
    );
    let out = std::process::Command::new(example)
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().last(), Some("done 1000"));
}

/// The path of an example `cargo test` built beside the tests' directory.
fn example_binary(name: &str) -> std::path::PathBuf {
    let example = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        example.exists(),
        "{} not built: run cargo test",
        example.display()
    );
    example
}

/// One HTTP/1.1 request over a real TCP connection: the status and body.
fn http_post(addr: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_axum_example_enqueues_posted_jobs_and_stops_after_n_requests() {
    use dque::jobs::JobQueue;
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("made/by/the/server");
    let mut server = std::process::Command::new(example_binary("axum_enqueue"))
        .arg(&target)
        .args(["--requests", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line: {first:?}"))
        .to_string();

    let (status, id) = http_post(&addr, "/jobs", "", "resize photo 42");
    assert_eq!(status, 202, "{id}");
    let id = id.trim().to_string();
    assert!(!id.is_empty());
    // A retried request with the same key adds nothing.
    let key = "Idempotency-Key: order-7\r\n";
    let (status, keyed) = http_post(&addr, "/jobs", key, "ship order 7");
    assert_eq!((status, keyed.trim()), (202, "order-7"));
    let (status, again) = http_post(&addr, "/jobs", key, "ship order 7");
    assert_eq!((status, again.trim()), (200, "order-7"));
    let (status, empty) = http_post(&addr, "/jobs", "", "");
    assert_eq!(status, 400, "{empty}");

    assert!(server.wait().unwrap().success(), "exits after 4 requests");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(rest.last().map(String::as_str), Some("served 4"));

    // The jobs are in the queue on disk, once each.
    let queue = JobOptions::new().open(&target).unwrap();
    let mut got = BTreeMap::new();
    while let Some(lease) = queue.lease().unwrap() {
        got.insert(lease.job.id.clone(), lease.job.body.clone());
        queue.ack(lease).unwrap();
    }
    assert_eq!(
        got,
        BTreeMap::from([
            (id, b"resize photo 42".to_vec()),
            ("order-7".to_string(), b"ship order 7".to_vec()),
        ])
    );
}
