//! The Jobs API test suite: one set of checks of the `JobQueue` contract,
//! run against every backend. A backend's test file implements [`Backend`]
//! and calls [`jobs_api_suite!`], which makes one `#[test]` per check.
//!
//! Time is a `ManualClock` the checks move: due times, back-off and the
//! statistics are checked without sleeping. Only the blocking checks wait,
//! for a wake-up that must come well inside their time limit.
#![allow(dead_code)] // each test binary uses the parts it needs

pub mod batch;
pub mod history;
pub mod limits;
pub mod paging;
pub mod search;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dque::jobs::{
    Backoff, Enqueued, JobLease, JobQueue, ManualClock, Nacked, NewJob, Order, QueueSet, Retry,
    WaitState,
};
use dque::Error;

mod unique;
#[allow(unused_imports)] // each test binary uses the parts it needs
pub use unique::*;
mod recurring;
#[allow(unused_imports)] // the binaries that run the suite use them
pub use recurring::*;

/// What a check asks of a new queue.
#[derive(Debug, Clone)]
pub struct Settings {
    pub clock: ManualClock,
    pub lease_time: Duration,
    pub max_attempts: u16,
    pub backoff: Backoff,
    /// Completed jobs kept (history, issue 27); `None`: the backend's default.
    pub keep_completed: Option<dque::jobs::KeepCompleted>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            // A fixed start keeps the day of the statistics known.
            clock: ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
            lease_time: Duration::from_secs(60),
            max_attempts: 3,
            backoff: Backoff::new(Duration::from_secs(10), 2.0, Duration::from_secs(1000))
                .jitter(0.0),
            keep_completed: None,
        }
    }
}

/// A backend under test.
pub trait Backend {
    /// A new, empty queue named `name` with `settings`.
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue>;
    /// Queue `name` opened again after its handle was closed: what was
    /// enqueued is there (a restart).
    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue>;
}

/// One `#[test]` per check of the suite, for `$backend` (an expression
/// building a [`Backend`]); or, with `run = f`, each check handed to
/// `f: fn(fn(&dyn Backend))`, which may set up (or skip) around it.
#[macro_export]
macro_rules! jobs_api_suite {
    (run = $runner:path) => {
        $crate::jobs_api_suite!(@each $runner;
            smaller_priority_first_and_fifo_within,
            scheduled_jobs_wait_for_their_time_in_due_order,
            a_due_job_keeps_its_place_among_equal_priorities,
            headers_and_bodies_come_back_as_given,
            bad_ids_and_headers_are_refused_and_add_nothing,
            a_caller_id_is_not_enqueued_twice_while_waiting_or_leased,
            nack_backs_off_then_dead_letters_after_the_last_attempt,
            a_failure_counts_under_the_reasons_group_however_the_job_died,
            nack_without_delay_retries_in_place,
            release_does_not_count_an_attempt,
            release_after_schedules_the_job_without_counting_the_attempt,
            fail_dead_letters_at_once_and_requeue_starts_over,
            priority_of_a_waiting_job_can_change,
            cancel_removes_a_waiting_job_only,
            run_now_makes_a_scheduled_job_ready_at_once,
            waiting_lists_ready_then_scheduled,
            counts_and_statistics_follow_the_jobs,
            a_lease_is_settled_only_by_its_queue,
            jobs_survive_a_restart_in_order,
            batches_keep_order_and_groups,
            queue_sets_lease_in_order_or_round_robin,
            a_blocked_lease_wakes_for_an_enqueue,
            a_blocked_lease_wakes_when_a_job_falls_due,
            a_batch_lease_takes_jobs_in_lease_order,
            a_huge_delay_is_never_due_not_due_now,
            a_closed_handle_refuses_calls_and_wakes_its_waiters,
            // --- unique jobs (issue 27) ---
            a_unique_id_is_held_for_its_period_even_after_the_job_ran, unique_states_choose_whether_done_and_dead_hold_the_id, a_cancelled_unique_job_frees_its_id, a_unique_period_survives_moves_and_a_restart, bad_uniqueness_is_refused_and_adds_nothing, a_requeued_dead_letter_keeps_its_unique_hold, an_enqueue_of_a_dead_letters_id_keeps_the_dead_letter, two_dead_letters_of_one_id_are_both_kept,
            a_schedule_fires_once_per_tick_from_any_lease, schedules_are_listed_replaced_and_removed, missed_ticks_catch_up_by_policy, a_schedules_jobs_carry_its_kind_priority_and_headers, a_paused_queue_fires_no_schedule_until_resumed, // recurring (issue 27)
        );
        $crate::jobs_api_limits_checks!($runner);
        $crate::jobs_api_history_checks!(run = $runner);
        $crate::jobs_api_search_checks!(run = $runner);
        $crate::jobs_api_batch_checks!(run = $runner);
        $crate::jobs_api_paging_checks!(run = $runner);
    };
    (@each_in $runner:path; $module:ident; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $runner(jobs_api::$module::$check);
            }
        )*
    };
    (@each $runner:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $runner(jobs_api::$check);
            }
        )*
    };
    ($backend:expr) => {
        /// Runs a check on a new backend.
        fn run_on_a_new_backend(check: fn(&dyn jobs_api::Backend)) {
            check(&$backend);
        }
        $crate::jobs_api_suite!(run = run_on_a_new_backend);
    };
}

fn new_queue(backend: &dyn Backend, name: &str) -> (Arc<dyn JobQueue>, Settings) {
    let settings = Settings::default();
    (backend.make(name, &settings), settings)
}

fn lease(queue: &dyn JobQueue) -> JobLease {
    queue.lease().expect("lease").expect("a ready job")
}

fn body(lease: &JobLease) -> String {
    String::from_utf8(lease.body.clone()).expect("UTF-8 body")
}

/// Leases and acks every ready job; their bodies in order.
/// Leases and acks every ready job; their bodies, in lease order.
pub fn drain(queue: &dyn JobQueue) -> Vec<String> {
    let mut bodies = Vec::new();
    while let Some(lease) = queue.lease().expect("lease") {
        bodies.push(body(&lease));
        queue.ack(lease).expect("ack");
    }
    bodies
}

fn put(queue: &dyn JobQueue, job: NewJob) -> String {
    queue.enqueue(job).expect("enqueue").id().to_owned()
}

pub fn smaller_priority_first_and_fifo_within(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "priorities");
    for (body, priority) in [("a", 5), ("b", 0), ("c", -3), ("d", 5), ("e", 0), ("f", -3)] {
        put(q.as_ref(), NewJob::new(body).priority(priority));
    }
    assert_eq!(drain(q.as_ref()), ["c", "f", "b", "e", "a", "d"]);
}

pub fn scheduled_jobs_wait_for_their_time_in_due_order(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "delays");
    put(
        q.as_ref(),
        NewJob::new("in 30").delay(Duration::from_secs(30)),
    );
    put(
        q.as_ref(),
        NewJob::new("in 10").delay(Duration::from_secs(10)),
    );
    let at = s.clock.now_time() + Duration::from_secs(20);
    put(q.as_ref(), NewJob::new("at 20").at(at));
    put(q.as_ref(), NewJob::new("past").at(UNIX_EPOCH));
    assert_eq!(drain(q.as_ref()), ["past"]);
    s.clock.advance(Duration::from_secs(9));
    assert!(q.lease().unwrap().is_none(), "nothing is due at 9 s");
    s.clock.advance(Duration::from_secs(1));
    assert_eq!(drain(q.as_ref()), ["in 10"]);
    s.clock.advance(Duration::from_secs(100));
    assert_eq!(drain(q.as_ref()), ["at 20", "in 30"]);
}

pub fn a_due_job_keeps_its_place_among_equal_priorities(backend: &dyn Backend) {
    // A job due at 5 s became ready before one enqueued at 7 s: it goes
    // first, even though no call looked at the queue in between.
    let (q, s) = new_queue(backend, "due_place");
    put(
        q.as_ref(),
        NewJob::new("due at 5").delay(Duration::from_secs(5)),
    );
    s.clock.advance(Duration::from_secs(7));
    put(q.as_ref(), NewJob::new("at 7"));
    put(q.as_ref(), NewJob::new("urgent at 7").priority(-1));
    assert_eq!(drain(q.as_ref()), ["urgent at 7", "due at 5", "at 7"]);
}

pub fn headers_and_bodies_come_back_as_given(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "headers");
    let binary: Vec<u8> = (0..=255).collect();
    put(
        q.as_ref(),
        NewJob::new(binary.clone())
            .header("owner", "ops team")
            .header("Trace_ID", "x=1;y=2")
            .header("empty", ""),
    );
    let leased = lease(q.as_ref());
    assert_eq!(leased.body, binary);
    assert_eq!(
        leased.headers,
        [
            ("owner".to_owned(), "ops team".to_owned()),
            ("Trace_ID".to_owned(), "x=1;y=2".to_owned()),
            ("empty".to_owned(), String::new()),
        ]
    );
    assert_eq!(leased.header("owner"), Some("ops team"));
    assert_eq!((leased.attempt, leased.priority), (1, 0));
    q.ack(leased).unwrap();
}

pub fn bad_ids_and_headers_are_refused_and_add_nothing(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "refused");
    let bad = [
        NewJob::new("x").header("with space", "v"),
        NewJob::new("x").header("", "v"),
        NewJob::new("x").header("dash-ed", "v"),
        NewJob::new("x").header("nul", "a\0b"),
        NewJob::new("x").id(""),
        NewJob::new("x").id("a".repeat(101)),
        NewJob::new("x").id("line\nbreak"),
    ];
    for job in bad {
        let refused = q.enqueue(job.clone());
        let invalid = matches!(refused, Err(Error::InvalidJob { .. }));
        assert!(invalid, "{job:?}: {refused:?}");
    }
    let batch = q.enqueue_batch(vec![
        NewJob::new("good"),
        NewJob::new("x").header("b d", ""),
    ]);
    let invalid = matches!(batch, Err(Error::InvalidJob { .. }));
    assert!(invalid, "{batch:?}");
    assert_eq!(q.counts().unwrap().ready, 0, "nothing was added");
}

pub fn a_caller_id_is_not_enqueued_twice_while_waiting_or_leased(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "ids");
    let first = q.enqueue(NewJob::new("one").id("order-7")).unwrap();
    assert_eq!(first, Enqueued::Added("order-7".into()));
    let again = q.enqueue(NewJob::new("two").id("order-7")).unwrap();
    assert_eq!(again, Enqueued::AlreadyQueued("order-7".into()), "ready");
    let leased = lease(q.as_ref());
    assert_eq!(
        (leased.id.as_str(), body(&leased).as_str()),
        ("order-7", "one")
    );
    assert!(
        !q.enqueue(NewJob::new("three").id("order-7"))
            .unwrap()
            .is_added(),
        "leased"
    );
    q.ack(leased).unwrap();
    assert!(
        q.enqueue(NewJob::new("four").id("order-7"))
            .unwrap()
            .is_added(),
        "after its ack"
    );
    assert_eq!(drain(q.as_ref()), ["four"]);

    put(
        q.as_ref(),
        NewJob::new("later")
            .id("sched")
            .delay(Duration::from_secs(5)),
    );
    assert!(
        !q.enqueue(NewJob::new("dup").id("sched"))
            .unwrap()
            .is_added(),
        "scheduled"
    );
    s.clock.advance(Duration::from_secs(5));
    assert!(
        !q.enqueue(NewJob::new("dup").id("sched"))
            .unwrap()
            .is_added(),
        "fallen due"
    );
    assert_eq!(drain(q.as_ref()), ["later"]);
    // Any text without control characters is an id.
    let odd = "ünïcode / with spaces & \"quotes\"";
    assert!(q.enqueue(NewJob::new("o").id(odd)).unwrap().is_added());
    assert!(!q.enqueue(NewJob::new("o").id(odd)).unwrap().is_added());
    assert_eq!(lease(q.as_ref()).id, odd);
}

pub fn nack_backs_off_then_dead_letters_after_the_last_attempt(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "backoff");
    let id = put(q.as_ref(), NewJob::new("flaky").header("h", "v"));
    let first = lease(q.as_ref());
    assert_eq!(first.attempt, 1);
    let nacked = q.nack(first, Retry::Backoff, "boom: 1").unwrap();
    assert_eq!(
        nacked,
        Nacked::Retrying {
            at: s.clock.now_time() + Duration::from_secs(10)
        }
    );
    assert!(q.lease().unwrap().is_none(), "backing off");
    assert_eq!(q.counts().unwrap().scheduled, 1);
    s.clock.advance(Duration::from_secs(10));
    let second = lease(q.as_ref());
    assert_eq!((second.id.as_str(), second.attempt), (id.as_str(), 2));
    assert_eq!(second.header("h"), Some("v"), "headers survive a retry");
    q.nack(second, Retry::Backoff, "boom: 2").unwrap();
    s.clock.advance(Duration::from_secs(19));
    assert!(q.lease().unwrap().is_none(), "the second back-off is 20 s");
    s.clock.advance(Duration::from_secs(1));
    let third = lease(q.as_ref());
    assert_eq!(third.attempt, 3);
    assert_eq!(
        q.nack(third, Retry::Backoff, "boom: 3").unwrap(),
        Nacked::Dead
    );
    let dead = q.dead(10).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].job.id.as_str(), dead[0].job.attempt),
        (id.as_str(), 3)
    );
    assert!(dead[0].reason.contains("boom: 3"), "{}", dead[0].reason);
    let counts = q.counts().unwrap();
    assert_eq!((counts.ready, counts.scheduled, counts.dead), (0, 0, 1));
}

/// Bug pinned (found by running one example on every backend): a nack
/// that used up a job's attempts was counted in the statistics under the
/// group "card declined (attempts used up" on the embedded queue and
/// PostgreSQL (the group was cut from the dead letter's message, not the
/// reason), "card declined" on Redis; and Redis counted a wait for every
/// lease of a job, not for its first.
pub fn a_failure_counts_under_the_reasons_group_however_the_job_died(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "groups");
    put(q.as_ref(), NewJob::new("nacked"));
    put(q.as_ref(), NewJob::new("failed"));
    for attempt in 1..=s.max_attempts {
        let job = lease(q.as_ref());
        assert_eq!(
            (body(&job).as_str(), job.attempt),
            ("nacked", u32::from(attempt))
        );
        q.nack(job, Retry::After(Duration::ZERO), "card declined: code 51")
            .unwrap();
    }
    let job = lease(q.as_ref());
    q.fail(job, "card declined: code 05").unwrap();
    let stats = q.stats().unwrap();
    let failures: Vec<(&str, u64)> = stats
        .days
        .iter()
        .flat_map(|day| day.failures.iter().map(|(g, n)| (g.as_str(), *n)))
        .collect();
    assert_eq!(failures, [("card declined", 2)]);
    assert_eq!(q.counts().unwrap().dead, 2);
    // The wait is enqueue to first lease: one per job, not one per lease
    // (Redis counted every lease).
    let waits: u64 = stats.days.iter().map(|day| day.wait.count).sum();
    assert_eq!(waits, 2);
}

pub fn nack_without_delay_retries_in_place(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "nack_now");
    put(q.as_ref(), NewJob::new("a"));
    put(q.as_ref(), NewJob::new("b"));
    let a = lease(q.as_ref());
    q.nack(a, Retry::After(Duration::ZERO), "again").unwrap();
    let again = lease(q.as_ref());
    assert_eq!(
        (body(&again).as_str(), again.attempt),
        ("a", 2),
        "before newer jobs"
    );
    q.ack(again).unwrap();
    assert_eq!(drain(q.as_ref()), ["b"]);
}

pub fn release_does_not_count_an_attempt(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "release");
    put(q.as_ref(), NewJob::new("a"));
    for _ in 0..5 {
        let leased = lease(q.as_ref());
        assert_eq!(leased.attempt, 1);
        q.release(leased).unwrap();
    }
    assert_eq!(drain(q.as_ref()), ["a"]);
}

/// `release_after` (a snooze: the runtime's `JobError::Snooze`) keeps
/// the job scheduled for the delay with its attempts as they were before
/// the lease: snoozed more often than its attempts allow it is never a
/// dead letter, and counted failures go on from where they were. Its
/// caller id stays taken while it waits; a lease of another queue is
/// refused there and changes nothing.
pub fn release_after_schedules_the_job_without_counting_the_attempt(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "release_after");
    let snooze = Duration::from_secs(30);
    put(q.as_ref(), NewJob::new("a").id("snoozer"));
    put(q.as_ref(), NewJob::new("b"));
    // More snoozes than the queue's 3 attempts.
    for round in 0..5 {
        let a = lease(q.as_ref());
        assert_eq!((body(&a).as_str(), a.attempt), ("a", 1), "round {round}");
        let at = q.release_after(a, snooze).unwrap();
        assert_eq!(at, s.clock.now_time() + snooze);
        let waiting = q.waiting(10).unwrap();
        let snoozed = waiting.iter().find(|w| w.job.id == "snoozer").unwrap();
        assert_eq!(
            (snoozed.state, snoozed.job.attempt),
            (WaitState::Scheduled(at), 0),
            "round {round}"
        );
        let again = q.enqueue(NewJob::new("a2").id("snoozer")).unwrap();
        assert_eq!(again, Enqueued::AlreadyQueued("snoozer".into()));
        if round == 0 {
            assert_eq!(drain(q.as_ref()), ["b"], "a waits, b goes first");
        }
        assert!(q.lease().unwrap().is_none(), "not due yet");
        assert_eq!(q.counts().unwrap().scheduled, 1);
        s.clock.advance(snooze);
    }
    // A counted failure, then snoozes (delayed and not) keep its count.
    let a = lease(q.as_ref());
    q.nack(a, Retry::Backoff, "boom").unwrap();
    s.clock.advance(Duration::from_secs(10));
    let a = lease(q.as_ref());
    assert_eq!(a.attempt, 2);
    assert_eq!(
        q.release_after(a, Duration::ZERO).unwrap(),
        s.clock.now_time()
    );
    let a = lease(q.as_ref());
    assert_eq!(a.attempt, 2, "a zero delay is a release");
    q.release_after(a, snooze).unwrap();
    s.clock.advance(snooze);
    let a = lease(q.as_ref());
    assert_eq!(a.attempt, 2);
    q.nack(a, Retry::Backoff, "boom").unwrap();
    s.clock.advance(Duration::from_secs(20));
    let a = lease(q.as_ref());
    assert_eq!(a.attempt, 3);
    assert_eq!(q.nack(a, Retry::Backoff, "boom").unwrap(), Nacked::Dead);
    // Through another queue: refused, the job stays leased where it is.
    let other = backend.make("release_after_other", &s);
    put(q.as_ref(), NewJob::new("c"));
    let c = lease(q.as_ref());
    let wrong = other.release_after(c, snooze);
    assert!(wrong.is_err(), "snoozed through another queue: {wrong:?}");
    let counts = q.counts().unwrap();
    assert_eq!((counts.leased, counts.scheduled), (1, 0), "{counts:?}");
}

// Issue 28: a scheduled job (delayed, or backing off after a failed
// attempt) could not be made ready before its time; `run_now` does, keeping
// the job as it is, and finds no waiting job in a leased, dead or unknown id.
pub fn run_now_makes_a_scheduled_job_ready_at_once(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "run_now");
    let hour = Duration::from_secs(3600);
    let ready = put(q.as_ref(), NewJob::new("ready").priority(2));
    let delayed = put(
        q.as_ref(),
        NewJob::new("delayed")
            .priority(2)
            .header("h", "v")
            .delay(hour),
    );
    put(q.as_ref(), NewJob::new("other").delay(hour));
    assert!(q.run_now(&ready).unwrap(), "a ready job is waiting");
    assert!(q.run_now(&delayed).unwrap());
    assert_eq!(q.counts().unwrap().scheduled, 1, "only the job asked for");
    // Behind the ready jobs of its priority, as a job falling due now.
    let first = lease(q.as_ref());
    assert_eq!(body(&first), "ready", "a ready job keeps its place");
    q.ack(first).unwrap();
    let d = lease(q.as_ref());
    let seen = |l: &JobLease| {
        let h = l.header("h").map(str::to_owned);
        (l.id.clone(), body(l), l.priority, l.attempt, h)
    };
    let kept = |attempt| {
        (
            delayed.clone(),
            "delayed".to_owned(),
            2,
            attempt,
            Some("v".into()),
        )
    };
    assert_eq!(seen(&d), kept(1));
    assert!(!q.run_now(&delayed).unwrap(), "a leased job is not waiting");
    // Backing off after a failed attempt: ready at once, counted once.
    q.nack(d, Retry::Backoff, "boom").unwrap();
    assert!(q.lease().unwrap().is_none(), "backing off");
    assert!(q.run_now(&delayed).unwrap());
    let again = lease(q.as_ref());
    assert_eq!(seen(&again), kept(2));
    // Dead and unknown ids: no waiting job, nothing changed.
    q.fail(again, "gave up").unwrap();
    assert!(
        !q.run_now(&delayed).unwrap(),
        "a dead letter is not waiting"
    );
    assert_eq!(q.dead(10).unwrap().len(), 1, "the dead letter stays");
    assert!(!q.run_now("no-such-job").unwrap());
    assert!(q.lease().unwrap().is_none(), "the other job still waits");
    // Made ready, it stays ready across a restart.
    let other = q.waiting(10).unwrap()[0].job.id.clone();
    assert!(q.run_now(&other).unwrap());
    q.close().unwrap();
    let q = backend.reopen("run_now", &s);
    assert_eq!(drain(q.as_ref()), ["other"]);
}

pub fn fail_dead_letters_at_once_and_requeue_starts_over(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "fail");
    let id = put(q.as_ref(), NewJob::new("poison").priority(4).id("p-1"));
    q.fail(lease(q.as_ref()), "exit 3: bad input").unwrap();
    assert!(q.lease().unwrap().is_none());
    let dead = q.dead(10).unwrap();
    assert_eq!(
        (dead[0].job.id.as_str(), dead[0].reason.as_str()),
        (id.as_str(), "exit 3: bad input")
    );
    assert_eq!(dead[0].job.priority, 4);
    // The id is free while the job is dead.
    assert!(!q
        .enqueue(NewJob::new("x").id("nope"))
        .unwrap()
        .id()
        .is_empty());
    let missing = q.requeue_dead("no-such-id");
    let no_such = matches!(missing, Err(Error::NoSuchJob { .. }));
    assert!(no_such, "{missing:?}");
    q.requeue_dead(&id).unwrap();
    assert!(q.dead(10).unwrap().is_empty());
    assert!(
        !q.enqueue(NewJob::new("dup").id("p-1")).unwrap().is_added(),
        "queued again"
    );
    let back = q.lease().unwrap().expect("requeued");
    let back = if back.id == "nope" {
        q.ack(back).unwrap();
        lease(q.as_ref())
    } else {
        back
    };
    assert_eq!(
        (back.id.as_str(), back.attempt, back.priority),
        (id.as_str(), 1, 4)
    );
}

pub fn priority_of_a_waiting_job_can_change(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "reprioritize");
    let a = put(q.as_ref(), NewJob::new("a"));
    put(q.as_ref(), NewJob::new("b"));
    let c = put(
        q.as_ref(),
        NewJob::new("c").delay(Duration::from_secs(5)).id("c"),
    );
    q.set_priority(&a, 2).unwrap();
    q.set_priority(&c, -1).unwrap();
    q.set_priority(&a, 2).unwrap(); // unchanged: no effect
    let missing = q.set_priority("nope", 1);
    let no_such = matches!(missing, Err(Error::NoSuchJob { .. }));
    assert!(no_such, "{missing:?}");
    assert_eq!(drain(q.as_ref()), ["b", "a"], "c is still scheduled");
    s.clock.advance(Duration::from_secs(5));
    let leased = lease(q.as_ref());
    assert_eq!(
        (leased.id.as_str(), leased.priority, leased.attempt),
        ("c", -1, 1)
    );
    let held = q.set_priority("c", 3);
    let busy = matches!(held, Err(Error::JobLeased { .. }));
    assert!(busy, "{held:?}");
    q.ack(leased).unwrap();
}

pub fn cancel_removes_a_waiting_job_only(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "cancel");
    let a = put(q.as_ref(), NewJob::new("a"));
    let b = put(q.as_ref(), NewJob::new("b").priority(1));
    let c = put(
        q.as_ref(),
        NewJob::new("c").delay(Duration::from_secs(9)).id("c"),
    );
    q.cancel(&c).unwrap();
    q.cancel(&b).unwrap();
    let gone = q.cancel(&b);
    let no_such = matches!(gone, Err(Error::NoSuchJob { .. }));
    assert!(no_such, "{gone:?}");
    let leased = lease(q.as_ref());
    assert_eq!(leased.id, a);
    let held = q.cancel(&a);
    let busy = matches!(held, Err(Error::JobLeased { .. }));
    assert!(busy, "{held:?}");
    q.ack(leased).unwrap();
    assert_eq!(q.counts().unwrap(), Default::default());
    assert!(
        q.enqueue(NewJob::new("c").id("c")).unwrap().is_added(),
        "a cancelled id is free"
    );
}

pub fn waiting_lists_ready_then_scheduled(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "waiting");
    put(
        q.as_ref(),
        NewJob::new("late").delay(Duration::from_secs(50)),
    );
    put(
        q.as_ref(),
        NewJob::new("soon").delay(Duration::from_secs(5)),
    );
    put(q.as_ref(), NewJob::new("low").priority(9));
    put(q.as_ref(), NewJob::new("high").priority(-9));
    let held = lease(q.as_ref());
    let waiting = q.waiting(10).unwrap();
    let listed: Vec<(String, WaitState)> = waiting
        .iter()
        .map(|w| (String::from_utf8(w.job.body.clone()).unwrap(), w.state))
        .collect();
    let now = s.clock.now_time();
    assert_eq!(
        listed,
        [
            ("high".to_owned(), WaitState::Leased),
            ("low".to_owned(), WaitState::Ready),
            (
                "soon".to_owned(),
                WaitState::Scheduled(now + Duration::from_secs(5))
            ),
            (
                "late".to_owned(),
                WaitState::Scheduled(now + Duration::from_secs(50))
            ),
        ]
    );
    assert_eq!(q.waiting(3).unwrap().len(), 3);
    assert_eq!(q.waiting(0).unwrap().len(), 0);
    q.ack(held).unwrap();
}

pub fn counts_and_statistics_follow_the_jobs(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "stats");
    put(q.as_ref(), NewJob::new("a"));
    put(q.as_ref(), NewJob::new("b"));
    put(q.as_ref(), NewJob::new("c").delay(Duration::from_secs(100)));
    s.clock.advance(Duration::from_secs(5));
    let a = lease(q.as_ref());
    let counts = q.counts().unwrap();
    assert_eq!(
        (counts.ready, counts.scheduled, counts.leased, counts.dead),
        (1, 1, 1, 0)
    );
    s.clock.advance(Duration::from_secs(90));
    q.ack(a).unwrap();
    let b = lease(q.as_ref());
    q.fail(b, "exit 2: no such file").unwrap();
    s.clock.advance(Duration::from_secs(5));
    let c = lease(q.as_ref());
    q.nack(c, Retry::After(Duration::from_secs(1)), "again")
        .unwrap();

    let stats = q.stats().unwrap();
    assert_eq!(stats.queue, q.name());
    assert_eq!(
        (
            stats.counts.ready,
            stats.counts.scheduled,
            stats.counts.dead
        ),
        (0, 1, 1)
    );
    assert_eq!(stats.days.len(), 1, "one day: {:?}", stats.days);
    let day = &stats.days[0];
    assert_eq!(day.day % dque::jobs::DAY_SECONDS, 0);
    // Waits: a 5 s, b 95 s, c 0 s after its due time.
    assert_eq!(day.wait.count, 3);
    assert!(
        (day.wait.mean - 100.0 / 3.0).abs() < 1e-6,
        "{}",
        day.wait.mean
    );
    let bucket = |name: &str| {
        let at = (0..dque::jobs::HISTOGRAM_BUCKETS)
            .find(|&i| dque::jobs::Histogram::bucket_name(i) == name)
            .unwrap();
        (
            day.wait.histogram.buckets[at],
            day.run.histogram.buckets[at],
        )
    };
    assert_eq!(bucket("s5"), (1, 0));
    assert_eq!(bucket("m1"), (1, 1), "95 s waited, 90 s ran");
    assert_eq!(bucket("s0"), (1, 0));
    assert_eq!(day.run.count, 1);
    assert_eq!(day.failures.get("exit 2"), Some(&1));
    assert_eq!(day.retries, 1);
    // Persisted: a restart keeps them.
    q.close().unwrap();
    let q = backend.reopen("stats", &s);
    let again = q.stats().unwrap();
    assert_eq!(again.days, stats.days);
}

pub fn a_lease_is_settled_only_by_its_queue(backend: &dyn Backend) {
    let settings = Settings::default();
    let a = backend.make("settle_a", &settings);
    let b = backend.make("settle_b", &settings);
    put(a.as_ref(), NewJob::new("from a"));
    put(b.as_ref(), NewJob::new("from b"));
    let leased = lease(a.as_ref());
    let wrong = b.ack(leased);
    assert!(wrong.is_err(), "acked through another queue: {wrong:?}");
    // Neither queue lost its job: a's stays leased, b's is still ready.
    assert_eq!(a.counts().unwrap().leased, 1);
    assert_eq!(drain(b.as_ref()), ["from b"]);
}

pub fn jobs_survive_a_restart_in_order(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "restart");
    put(q.as_ref(), NewJob::new("p1").priority(1));
    put(q.as_ref(), NewJob::new("p0"));
    put(
        q.as_ref(),
        NewJob::new("due")
            .delay(Duration::from_secs(3))
            .header("k", "v"),
    );
    put(q.as_ref(), NewJob::new("id").id("kept"));
    let held = lease(q.as_ref());
    assert_eq!(body(&held), "p0");
    q.close().unwrap();
    drop(held); // its lease ended with the handle
    let q = backend.reopen("restart", &s);
    assert!(!q.enqueue(NewJob::new("x").id("kept")).unwrap().is_added());
    let again = lease(q.as_ref());
    assert_eq!(
        (body(&again).as_str(), again.attempt),
        ("p0", 2),
        "the unacked lease came back"
    );
    q.ack(again).unwrap();
    s.clock.advance(Duration::from_secs(3));
    let rest = drain(q.as_ref());
    assert_eq!(rest, ["id", "due", "p1"]);
}

pub fn batches_keep_order_and_groups(backend: &dyn Backend) {
    let (q, s) = new_queue(backend, "batch");
    let jobs = vec![
        NewJob::new("b1").priority(1),
        NewJob::new("a1"),
        NewJob::new("s1").delay(Duration::from_secs(1)),
        NewJob::new("a2"),
        NewJob::new("b2").priority(1),
    ];
    let enqueued = q.enqueue_batch(jobs).unwrap();
    assert_eq!(enqueued.len(), 5);
    assert!(enqueued.iter().all(Enqueued::is_added));
    s.clock.advance(Duration::from_secs(1));
    assert_eq!(drain(q.as_ref()), ["a1", "a2", "s1", "b1", "b2"]);
    let with_ids = q
        .enqueue_batch(vec![NewJob::new("x").id("i"), NewJob::new("y").id("i")])
        .unwrap();
    assert_eq!(
        with_ids,
        [
            Enqueued::Added("i".into()),
            Enqueued::AlreadyQueued("i".into())
        ]
    );
}

pub fn queue_sets_lease_in_order_or_round_robin(backend: &dyn Backend) {
    let settings = Settings::default();
    let a = backend.make("set_a", &settings);
    let b = backend.make("set_b", &settings);
    for i in 0..2 {
        put(a.as_ref(), NewJob::new(format!("a{i}")));
        put(b.as_ref(), NewJob::new(format!("b{i}")));
    }
    let take = |set: &QueueSet| {
        let (from, leased) = set.lease().unwrap().expect("a job");
        let text = body(&leased);
        set.queue(from).release(leased).unwrap();
        text
    };
    let ordered = QueueSet::new(vec![a.clone(), b.clone()], Order::InOrder).unwrap();
    assert_eq!([take(&ordered), take(&ordered)], ["a0", "a0"]);
    let fair = QueueSet::new(vec![a.clone(), b.clone()], Order::RoundRobin).unwrap();
    assert_eq!([take(&fair), take(&fair), take(&fair)], ["a0", "b0", "a0"]);
    drain(a.as_ref());
    let (from, leased) = ordered.lease().unwrap().expect("b's job");
    assert_eq!((from, body(&leased).as_str()), (1, "b0"));
    ordered.queue(from).ack(leased).unwrap();
    let empty: Vec<Arc<dyn JobQueue>> = Vec::new();
    assert!(QueueSet::new(empty, Order::InOrder).is_err());
}

pub fn a_blocked_lease_wakes_for_an_enqueue(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "wake_enqueue");
    let producer = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            put(q.as_ref(), NewJob::new("late").priority(7));
        })
    };
    let leased = q.lease_timeout(Duration::from_secs(20)).unwrap();
    producer.join().unwrap();
    assert_eq!(leased.map(|l| body(&l)).as_deref(), Some("late"));
    let none = q.lease_timeout(Duration::from_millis(20)).unwrap();
    assert!(none.is_none());
}

pub fn a_blocked_lease_wakes_when_a_job_falls_due(backend: &dyn Backend) {
    // The clock is moved while the worker sleeps: the worker must look
    // again by itself (a backend polls at least every few hundred ms).
    let (q, s) = new_queue(backend, "wake_due");
    put(
        q.as_ref(),
        NewJob::new("due").delay(Duration::from_secs(60)),
    );
    let mover = {
        let clock = s.clock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            clock.advance(Duration::from_secs(60));
        })
    };
    let leased = q.lease_timeout(Duration::from_secs(20)).unwrap();
    mover.join().unwrap();
    assert_eq!(leased.map(|l| body(&l)).as_deref(), Some("due"));
}

pub fn a_batch_lease_takes_jobs_in_lease_order(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "lease_batch");
    for (body, priority) in [("c", 2), ("a", 0), ("b", 1), ("a2", 0), ("later", 9)] {
        put(q.as_ref(), NewJob::new(body).priority(priority));
    }
    put(
        q.as_ref(),
        NewJob::new("scheduled").delay(Duration::from_secs(60)),
    );
    let batch = q.lease_batch(4).unwrap();
    let bodies: Vec<String> = batch.iter().map(body).collect();
    assert_eq!(bodies, ["a", "a2", "b", "c"]);
    assert!(batch.iter().all(|lease| lease.attempt == 1));
    for lease in batch {
        q.ack(lease).unwrap();
    }
    let rest: Vec<String> = q.lease_batch(10).unwrap().iter().map(body).collect();
    assert_eq!(rest, ["later"], "scheduled jobs stay out");
    assert!(q.lease_batch(10).unwrap().is_empty());
}

/// The clock's time, for expectations.
trait NowTime {
    fn now_time(&self) -> SystemTime;
}

impl NowTime for ManualClock {
    fn now_time(&self) -> SystemTime {
        dque::jobs::Clock::now(self)
    }
}

pub fn a_huge_delay_is_never_due_not_due_now(backend: &dyn Backend) {
    // Issue 23, item 7: `delay(Duration::from_secs(u64::MAX))` overflowed
    // the clock (`checked_add(..).unwrap_or(now)`) and made the job ready at
    // once. Every way to ask for a time past the end (a delay, a time, a
    // nack's retry) saturates to the same far date on every backend.
    let (q, s) = new_queue(backend, "huge_delays");
    let latest = UNIX_EPOCH + Duration::from_secs(253_402_300_799); // 9999-12-31T23:59:59Z
    let beyond = UNIX_EPOCH
        .checked_add(Duration::from_secs(400_000_000_000))
        .expect("a time after 9999 fits a SystemTime");
    let huge = [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_secs(i64::MAX as u64),
        Duration::from_millis(u64::MAX),
        beyond.duration_since(s.clock.now_time()).unwrap(),
    ];
    for (n, delay) in huge.iter().enumerate() {
        put(q.as_ref(), NewJob::new(format!("delay {n}")).delay(*delay));
    }
    put(q.as_ref(), NewJob::new("at beyond").at(beyond));
    put(q.as_ref(), NewJob::new("at latest").at(latest));
    put(q.as_ref(), NewJob::new("nacked"));
    let nacked = lease(q.as_ref());
    assert_eq!(
        q.nack(nacked, Retry::After(Duration::MAX), "later")
            .unwrap(),
        Nacked::Retrying { at: latest },
        "a nack's huge delay is the latest time too"
    );
    let scheduled = huge.len() as u64 + 3;
    assert!(q.lease().unwrap().is_none(), "a huge delay is not due now");
    let counts = q.counts().unwrap();
    assert_eq!((counts.ready, counts.scheduled), (0, scheduled));
    for waiting in q.waiting(100).unwrap() {
        let body = String::from_utf8_lossy(&waiting.job.body).into_owned();
        assert_eq!(waiting.state, WaitState::Scheduled(latest), "{body}");
    }
    s.clock.advance(Duration::from_secs(100 * 365 * 86_400));
    assert!(q.lease().unwrap().is_none(), "nor in a hundred years");
    drop(q);
    let q = backend.reopen("huge_delays", &s);
    assert!(q.lease().unwrap().is_none(), "nor after a restart");
    assert_eq!(q.counts().unwrap().scheduled, scheduled);
}

// Bug class pinned: a closed handle must refuse every call with `Closed`
// and wake its blocked leases with it. The embedded backend's lease found
// its lanes closed and answered `Ok(None)`, so a `lease_timeout` waiting
// on a closed queue slept to its deadline (found while building async).
pub fn a_closed_handle_refuses_calls_and_wakes_its_waiters(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "closing");
    put(q.as_ref(), NewJob::new("left"));
    assert_eq!(drain(q.as_ref()), ["left"]);
    let waiter = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || q.lease_timeout(Duration::from_secs(60)))
    };
    std::thread::sleep(Duration::from_millis(200));
    q.close().expect("close");
    let woken = waiter.join().expect("the waiter did not panic");
    assert!(
        matches!(woken, Err(Error::Closed)),
        "a waiting lease ends with Closed, got {woken:?}"
    );
    let enqueued = q.enqueue(NewJob::new("late"));
    assert!(matches!(enqueued, Err(Error::Closed)), "{enqueued:?}");
    let leased = q.lease();
    assert!(matches!(leased, Err(Error::Closed)), "{leased:?}");
    let batch = q.enqueue_batch(vec![NewJob::new("late")]);
    assert!(matches!(batch, Err(Error::Closed)), "{batch:?}");
}
