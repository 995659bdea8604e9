//! `job_info` of a waiting job on the embedded queue reads the one record
//! its id's location names, not the queue's listing (issue 27's left-over
//! on its cost): whatever the job's state and wherever its record is (a
//! mapped segment, a sealed one between them, a lane of another priority,
//! the schedule), it says what `waiting` lists. Rounds:
//! `DQUE_JOB_INFO_ROUNDS`.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use dque::jobs::{
    EmbeddedJobs, JobOptions, JobQueue, JobState, ManualClock, NewJob, Retry, WaitState,
};
use dque::Options;

fn rounds() -> u64 {
    std::env::var("DQUE_JOB_INFO_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Every waiting job's `job_info` against the listing of `queue`.
fn agrees_with_the_listing(queue: &EmbeddedJobs) {
    let listed = queue.waiting(usize::MAX).unwrap();
    assert!(!listed.is_empty());
    for waiting in listed {
        let id = &waiting.job.id;
        let info = queue
            .job_info(id)
            .unwrap()
            .unwrap_or_else(|| panic!("{id} waits but job_info says no such job"));
        let (state, due_at) = match waiting.state {
            WaitState::Ready => (JobState::Ready, None),
            WaitState::Leased => (JobState::Leased, None),
            WaitState::Scheduled(at) => (JobState::Scheduled, Some(at)),
        };
        assert_eq!(info.job, waiting.job, "{id}");
        assert_eq!((info.state, info.due_at), (state, due_at), "{id}");
        assert_eq!(info.queue, "q");
    }
}

#[test]
fn job_info_of_every_waiting_job_says_what_the_listing_says() {
    for round in 0..rounds() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        // Four records a segment: most of them sealed between the mapped
        // head and tail, read from their files.
        let queue = JobOptions::new()
            .queue(Options::new().segment_items(4).max_attempts(5))
            .clock(Arc::new(clock.clone()))
            .create(dir.path().join("q"))
            .unwrap();
        let mut rng = Rng(round + 1);
        for i in 0..60 {
            let mut job = NewJob::new(format!("body {i}")).priority(rng.below(3) as i32 - 1);
            if rng.below(2) == 0 {
                job = job.id(format!("job-{i}"));
            }
            if rng.below(4) == 0 {
                job = job.delay(Duration::from_secs(1 + rng.below(100)));
            }
            queue.enqueue(job).unwrap();
        }
        // Leased now; leased and given back (attempts counted); acked.
        let held: Vec<_> = (0..3).map(|_| queue.lease().unwrap().unwrap()).collect();
        let again = queue.lease().unwrap().unwrap();
        queue
            .nack(again, Retry::After(Duration::ZERO), "again")
            .unwrap();
        let done = queue.lease().unwrap().unwrap();
        let done_id = done.job.id.clone();
        queue.ack(done).unwrap();
        // Some scheduled jobs fall due with no call since to move them.
        clock.advance(Duration::from_secs(50));
        agrees_with_the_listing(&queue);
        assert_eq!(
            queue.job_info(&done_id).unwrap().map(|i| i.state),
            Some(JobState::Completed),
            "{done_id}"
        );
        assert_eq!(queue.job_info("job-none").unwrap(), None);
        assert_eq!(queue.job_info(&"0".repeat(32)).unwrap(), None);
        drop(held);
    }
}

#[test]
fn job_info_of_a_plain_queues_item_reads_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let raw = dque::RawQueue::create_with(&path, &Options::new().segment_items(4)).unwrap();
    for i in 0..20u32 {
        raw.enqueue_bytes(format!("item {i}").as_bytes()).unwrap();
    }
    raw.close().unwrap();
    drop(raw);
    let queue = EmbeddedJobs::open(&path).unwrap();
    assert!(queue.is_plain());
    let lease = queue.lease().unwrap().unwrap();
    agrees_with_the_listing(&queue);
    assert_eq!(queue.job_info("9").unwrap().unwrap().job.body, b"item 9");
    assert_eq!(queue.job_info("no-number").unwrap(), None);
    drop(lease);
}

#[test]
fn job_info_after_a_torn_tail_was_cut_answers_for_the_records_kept() {
    // Review of `job_info` reading one record (s5): after a crash left
    // the last record torn (cut at the next open, its bytes kept aside),
    // every job kept is found where it is, and the cut one is no job
    // (no error, no stale location). (Held.)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let options = || {
        JobOptions::new().queue(
            Options::new()
                .segment_items(4)
                .durability(dque::Durability::Safe),
        )
    };
    let queue = options().create(&path).unwrap();
    for i in 0..10 {
        let job = NewJob::new(format!("body {i}")).id(format!("job-{i}"));
        queue.enqueue(job).unwrap();
    }
    queue.close().unwrap();
    // The last bit written in the root lane's newest segment: the last
    // record's.
    let newest = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[last] ^= 0x01;
    std::fs::write(&newest, bytes).unwrap();
    let queue = options().open(&path).unwrap();
    let kept = queue.waiting(usize::MAX).unwrap().len();
    assert_eq!(kept, 9, "the torn record is cut");
    agrees_with_the_listing(&queue);
    assert_eq!(queue.job_info("job-9").unwrap(), None);
}
