//! The suite's checks of job history and per-job timeouts (issue 27):
//! `JobQueue::job_info` in every state, completed jobs kept for a time and
//! a count, and the timeout stored with the job. Each backend's suite runs
//! them through [`jobs_api_history_checks!`].

use std::time::Duration;

use dque::jobs::{JobQueue, JobState, KeepCompleted, NewJob, Retry};

use super::{lease, new_queue, put, Backend, Settings};

/// One `#[test]` per check of this file, for the suite's runner.
#[macro_export]
macro_rules! jobs_api_history_checks {
    (run = $runner:path) => {
        mod history_checks {
            use super::*;
            $crate::jobs_api_suite!(@each_in $runner; history;
                job_info_follows_a_job_through_its_states,
                job_info_finds_made_up_ids_and_says_none_for_unknown_ones,
                a_dead_job_shows_its_reason,
                completed_jobs_go_once_past_the_time_kept,
                completed_jobs_beyond_the_count_kept_go,
                keeping_none_leaves_no_completed_job,
                a_job_timeout_is_stored_with_the_job,
                a_bad_job_timeout_is_refused_and_adds_nothing,
                job_info_of_a_reused_id_is_its_newest_job,
                job_info_renders_as_json,
            );
        }
    };
}

/// qless's configuration of `queue`'s database: completed jobs kept as
/// `keep` says (`jobs-history` in seconds, `jobs-history-count`).
#[cfg(feature = "redis")]
pub fn keep_on_redis(queue: &dque::jobs::RedisJobs, keep: KeepCompleted) {
    let seconds = keep.for_time().as_secs().to_string();
    let count = keep.count().to_string();
    queue
        .set_config("jobs-history", Some(&seconds))
        .expect("set jobs-history");
    queue
        .set_config("jobs-history-count", Some(&count))
        .expect("set jobs-history-count");
}

fn info(queue: &dyn JobQueue, id: &str) -> dque::jobs::JobInfo {
    queue
        .job_info(id)
        .expect("job_info")
        .unwrap_or_else(|| panic!("job {id} is known"))
}

fn whats(info: &dque::jobs::JobInfo) -> Vec<&str> {
    info.history.iter().map(|e| e.what.as_str()).collect()
}

pub fn job_info_follows_a_job_through_its_states(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "history-states");
    let q = q.as_ref();
    put(
        q,
        NewJob::new("resize a.jpg")
            .id("h-1")
            .priority(4)
            .header("owner", "ops")
            .delay(Duration::from_secs(30)),
    );
    let scheduled = info(q, "h-1");
    assert_eq!(scheduled.state, JobState::Scheduled);
    assert!(scheduled.due_at.is_some(), "{scheduled:?}");
    assert_eq!(scheduled.queue, q.name());
    assert_eq!(
        (scheduled.job.body.as_slice(), scheduled.job.priority),
        (&b"resize a.jpg"[..], 4)
    );
    assert_eq!(scheduled.job.header("owner"), Some("ops"));
    assert_eq!(whats(&scheduled).first(), Some(&"enqueued"));

    s.clock.advance(Duration::from_secs(31));
    assert_eq!(info(q, "h-1").state, JobState::Ready);

    let first = lease(q);
    let leased = info(q, "h-1");
    assert_eq!(leased.state, JobState::Leased);
    assert_eq!(leased.job.attempt, 1);
    q.nack(first, Retry::After(Duration::ZERO), "disk full")
        .expect("nack");
    let retried = info(q, "h-1");
    assert_eq!(retried.state, JobState::Ready);
    assert_eq!(retried.job.attempt, 1, "one attempt so far");

    s.clock.advance(Duration::from_secs(5));
    let second = lease(q);
    s.clock.advance(Duration::from_secs(2));
    q.ack(second).expect("ack");
    let done = info(q, "h-1");
    assert_eq!(done.state, JobState::Completed, "{done:?}");
    assert_eq!(done.job.attempt, 2);
    assert_eq!(done.job.body, b"resize a.jpg");
    assert_eq!(done.job.header("owner"), Some("ops"));
    let (started, finished) = (
        done.started_at.expect("a start"),
        done.finished_at.expect("a finish"),
    );
    assert!(started <= finished, "{done:?}");
    assert!(done.worker.is_some(), "the worker that ran it: {done:?}");
    let events = whats(&done);
    assert_eq!(events.first(), Some(&"enqueued"), "{events:?}");
    assert_eq!(events.last(), Some(&"completed"), "{events:?}");
    assert!(events.contains(&"leased"), "{events:?}");
    // Completed jobs are in no count and no listing.
    let counts = q.counts().expect("counts");
    assert_eq!(
        (counts.ready, counts.scheduled, counts.leased, counts.dead),
        (0, 0, 0, 0)
    );
    assert!(q.waiting(10).expect("waiting").is_empty());
    // The id is free again: a new job with it is the one found.
    assert!(q
        .enqueue(NewJob::new("again").id("h-1"))
        .expect("enqueue")
        .is_added());
    let again = info(q, "h-1");
    assert_eq!(
        (again.state, again.job.body.as_slice()),
        (JobState::Ready, &b"again"[..])
    );
}

pub fn job_info_finds_made_up_ids_and_says_none_for_unknown_ones(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "history-made-up");
    let q = q.as_ref();
    let id = put(q, NewJob::new("no id given"));
    assert_eq!(info(q, &id).state, JobState::Ready);
    q.ack(lease(q)).expect("ack");
    assert_eq!(info(q, &id).state, JobState::Completed);
    assert!(q.job_info("never-enqueued").expect("job_info").is_none());
    assert!(q
        .job_info("0123456789abcdef0123456789abcdef")
        .expect("job_info")
        .is_none());
}

pub fn a_dead_job_shows_its_reason(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "history-dead");
    let q = q.as_ref();
    put(q, NewJob::new("bad input").id("h-dead"));
    q.fail(lease(q), "cannot parse").expect("fail");
    let dead = info(q, "h-dead");
    assert_eq!(dead.state, JobState::Dead);
    assert!(
        dead.last_error
            .as_deref()
            .is_some_and(|e| e.contains("cannot parse")),
        "{dead:?}"
    );
    assert_eq!(dead.job.body, b"bad input");
}

pub fn completed_jobs_go_once_past_the_time_kept(backend: &dyn Backend) {
    let settings = Settings {
        keep_completed: Some(KeepCompleted::new(Duration::from_secs(3600), 1000)),
        ..Settings::default()
    };
    let q = backend.make("history-time", &settings);
    let q = q.as_ref();
    put(q, NewJob::new("old").id("h-old"));
    q.ack(lease(q)).expect("ack");
    settings.clock.advance(Duration::from_secs(1800));
    assert_eq!(
        info(q, "h-old").state,
        JobState::Completed,
        "within the hour"
    );
    settings.clock.advance(Duration::from_secs(1801));
    // A later completion (Redis prunes at completions, as qless does).
    put(q, NewJob::new("new").id("h-new"));
    q.ack(lease(q)).expect("ack");
    assert!(
        q.job_info("h-old").expect("job_info").is_none(),
        "kept past the hour"
    );
    assert_eq!(info(q, "h-new").state, JobState::Completed);
}

pub fn completed_jobs_beyond_the_count_kept_go(backend: &dyn Backend) {
    let settings = Settings {
        keep_completed: Some(KeepCompleted::new(Duration::from_secs(86_400), 3)),
        ..Settings::default()
    };
    let q = backend.make("history-count", &settings);
    let q = q.as_ref();
    for n in 0..6 {
        put(q, NewJob::new(format!("job {n}")).id(format!("h-{n}")));
        settings.clock.advance(Duration::from_secs(1));
        q.ack(lease(q)).expect("ack");
    }
    // Bug pinned: PostgreSQL applied only the time kept to lookups, so a
    // job beyond the count kept was still found until a prune (at most a
    // second, or hundreds of acks, later) deleted its row: the count
    // applies to lookups at once, whenever the prune runs.
    let kept: Vec<bool> = (0..6)
        .map(|n| q.job_info(&format!("h-{n}")).expect("job_info").is_some())
        .collect();
    assert_eq!(
        kept,
        [false, false, false, true, true, true],
        "the newest 3 kept, before any prune"
    );
    put(q, NewJob::new("last").id("h-last"));
    settings.clock.advance(Duration::from_secs(1));
    q.ack(lease(q)).expect("ack");
    let kept: Vec<bool> = (0..6)
        .map(|n| q.job_info(&format!("h-{n}")).expect("job_info").is_some())
        .collect();
    assert_eq!(
        kept,
        [false, false, false, false, true, true],
        "the newest 3 kept"
    );
    assert!(q.job_info("h-last").expect("job_info").is_some());
}

pub fn keeping_none_leaves_no_completed_job(backend: &dyn Backend) {
    let settings = Settings {
        keep_completed: Some(KeepCompleted::NONE),
        ..Settings::default()
    };
    let q = backend.make("history-none", &settings);
    let q = q.as_ref();
    put(q, NewJob::new("gone").id("h-gone"));
    q.ack(lease(q)).expect("ack");
    assert!(q.job_info("h-gone").expect("job_info").is_none());
}

pub fn a_job_timeout_is_stored_with_the_job(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "history-timeout");
    let q = q.as_ref();
    put(
        q,
        NewJob::new("slow")
            .id("h-slow")
            .timeout(Duration::from_millis(1500)),
    );
    put(q, NewJob::new("plain").id("h-plain"));
    assert_eq!(info(q, "h-slow").timeout, Some(Duration::from_millis(1500)));
    assert_eq!(info(q, "h-plain").timeout, None);
    let slow = lease(q);
    assert_eq!(slow.timeout(), Some(Duration::from_millis(1500)));
    let plain = lease(q);
    assert_eq!(plain.timeout(), None);
}

// Bug pinned: a timeout of 0 (`NewJob::timeout(Duration::ZERO)`, made a
// timeout of 1 ms that failed every attempt at once) and a timeout header
// that is no number of milliseconds (`header("dque_timeout_ms", "abc")`,
// stored, then silently no timeout at all) were accepted.
pub fn a_bad_job_timeout_is_refused_and_adds_nothing(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "history-bad-timeout");
    let q = q.as_ref();
    let header = dque::jobs::TIMEOUT_HEADER;
    let bad = [
        NewJob::new("x").id("t-bad").timeout(Duration::ZERO),
        NewJob::new("x").id("t-bad").header(header, "0"),
        NewJob::new("x").id("t-bad").header(header, ""),
        NewJob::new("x").id("t-bad").header(header, "abc"),
        NewJob::new("x").id("t-bad").header(header, "-5"),
        NewJob::new("x").id("t-bad").header(header, "1.5"),
        NewJob::new("x")
            .id("t-bad")
            .header(header, "99999999999999999999999"),
    ];
    for job in bad {
        let refused = q.enqueue(job.clone());
        let invalid = matches!(refused, Err(dque::Error::InvalidJob { .. }));
        assert!(invalid, "{job:?}: {refused:?}");
        let batch = q.enqueue_batch(vec![NewJob::new("good"), job.clone()]);
        let invalid = matches!(batch, Err(dque::Error::InvalidJob { .. }));
        assert!(invalid, "{job:?} in a batch: {batch:?}");
    }
    assert!(q.job_info("t-bad").expect("job_info").is_none());
    assert_eq!(q.counts().expect("counts").ready, 0, "nothing was added");
    // Less than a millisecond, or more than any clock reaches: taken as
    // 1 ms and as the longest timeout stored.
    put(
        q,
        NewJob::new("quick")
            .id("t-quick")
            .timeout(Duration::from_micros(10)),
    );
    put(q, NewJob::new("long").id("t-long").timeout(Duration::MAX));
    assert_eq!(info(q, "t-quick").timeout, Some(Duration::from_millis(1)));
    assert_eq!(
        info(q, "t-long").timeout,
        Some(Duration::from_millis(u64::MAX))
    );
}

// Bug pinned: on the embedded queue, an id whose first job died and whose
// next one completed was shown as the dead one (dead letters were looked
// at before the kept completed jobs, whatever their age).
pub fn job_info_of_a_reused_id_is_its_newest_job(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "history-reused");
    let q = q.as_ref();
    put(q, NewJob::new("first, dies").id("r-1"));
    q.fail(lease(q), "broken").expect("fail");
    s.clock.advance(Duration::from_secs(1));
    put(q, NewJob::new("second, completes").id("r-1"));
    s.clock.advance(Duration::from_secs(1));
    q.ack(lease(q)).expect("ack");
    let newest = info(q, "r-1");
    assert_eq!(
        (newest.state, newest.job.body.as_slice()),
        (JobState::Completed, &b"second, completes"[..]),
        "{newest:?}"
    );
    // And the other way round: a completed job, then a dead one.
    s.clock.advance(Duration::from_secs(1));
    put(q, NewJob::new("third, dies").id("r-1"));
    s.clock.advance(Duration::from_secs(1));
    q.fail(lease(q), "broken again").expect("fail");
    let newest = info(q, "r-1");
    assert_eq!(
        (newest.state, newest.job.body.as_slice()),
        (JobState::Dead, &b"third, dies"[..]),
        "{newest:?}"
    );
}

pub fn job_info_renders_as_json(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "history-json");
    let q = q.as_ref();
    put(
        q,
        NewJob::new(vec![0xff, 0x00]).id("h-bytes").header("a", "b"),
    );
    let json: serde_json::Value =
        serde_json::from_str(&info(q, "h-bytes").to_json()).expect("JSON");
    assert_eq!(json["id"], "h-bytes");
    assert_eq!(json["state"], "ready");
    assert_eq!(json["body_hex"], "ff00");
    assert_eq!(json["headers"]["a"], "b");
    assert_eq!(json["history"][0]["what"], "enqueued");
}
