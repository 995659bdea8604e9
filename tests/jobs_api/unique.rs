//! Unique jobs (issue 27): a caller id held for a period after enqueue,
//! across the states the job chose, on every backend.

use std::time::Duration;

use dque::jobs::{Clock, Duplicate, Enqueued, NewJob, Settled, UniqueStates};
use dque::Error;

use super::{lease, new_queue, Backend};

const HOUR: Duration = Duration::from_secs(3600);

fn unique(id: &str) -> NewJob {
    NewJob::new(format!("body of {id}")).id(id).unique_for(HOUR)
}

/// The duplicate an enqueue met, or a panic naming what it got.
fn duplicate(answer: Enqueued) -> Duplicate {
    match answer {
        Enqueued::Duplicate(duplicate) => duplicate,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

// Pins the bug of issue 27: a caller id was unique only while queued, so
// an `order-7` that ran was added again within the hour.
pub fn a_unique_id_is_held_for_its_period_even_after_the_job_ran(backend: &dyn Backend) {
    let (q, settings) = new_queue(backend, "unique_period");
    let enqueued_at = settings.clock.now();
    assert!(q.enqueue(unique("order-7")).unwrap().is_added());
    assert_eq!(
        q.enqueue(unique("order-7")).unwrap(),
        Enqueued::AlreadyQueued("order-7".into()),
        "queued"
    );
    let running = lease(q.as_ref());
    assert_eq!(
        q.enqueue(unique("order-7")).unwrap(),
        Enqueued::AlreadyQueued("order-7".into()),
        "running"
    );
    q.ack(running).unwrap();
    let met = duplicate(q.enqueue(unique("order-7")).unwrap());
    assert_eq!(
        (met.id.as_str(), met.state, met.until),
        ("order-7", Settled::Done, enqueued_at + HOUR),
        "the answer names the job met, its state and the end of its period"
    );
    // Any enqueue of the id within the period, with a period or not.
    let plain = q.enqueue(NewJob::new("again").id("order-7")).unwrap();
    assert!(matches!(plain, Enqueued::Duplicate(_)), "{plain:?}");
    let batch = q
        .enqueue_batch(vec![unique("order-7"), unique("order-8")])
        .unwrap();
    assert!(matches!(batch[0], Enqueued::Duplicate(_)), "{batch:?}");
    assert!(batch[1].is_added(), "{batch:?}");
    settings.clock.advance(HOUR - Duration::from_secs(1));
    assert!(matches!(
        q.enqueue(unique("order-7")).unwrap(),
        Enqueued::Duplicate(_)
    ));
    assert_eq!(q.counts().unwrap().ready, 1, "order-8 only");
    settings.clock.advance(Duration::from_secs(1));
    assert!(
        q.enqueue(unique("order-7")).unwrap().is_added(),
        "the period is over"
    );
    // Without a period, an id that ran is free at once (as before).
    q.enqueue(NewJob::new("p").id("plain")).unwrap();
    while let Some(l) = q.lease().unwrap() {
        q.ack(l).unwrap();
    }
    assert!(q.enqueue(NewJob::new("p").id("plain")).unwrap().is_added());
}

pub fn unique_states_choose_whether_done_and_dead_hold_the_id(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "unique_states");
    // Default states: queued, running, done; a dead job frees its id.
    q.enqueue(unique("default")).unwrap();
    q.fail(lease(q.as_ref()), "broken").unwrap();
    assert!(
        q.enqueue(unique("default")).unwrap().is_added(),
        "dead is not held by default"
    );
    q.ack(lease(q.as_ref())).unwrap();
    // Every state: dead holds it too.
    q.enqueue(unique("all").unique_states(UniqueStates::ALL))
        .unwrap();
    q.fail(lease(q.as_ref()), "broken").unwrap();
    let met = duplicate(q.enqueue(unique("all")).unwrap());
    assert_eq!((met.id.as_str(), met.state), ("all", Settled::Dead));
    // A dead letter requeued waits again, then holds the id as done.
    q.requeue_dead("all").unwrap();
    assert_eq!(
        q.enqueue(unique("all")).unwrap(),
        Enqueued::AlreadyQueued("all".into())
    );
    q.ack(lease(q.as_ref())).unwrap();
    assert_eq!(
        duplicate(q.enqueue(unique("all")).unwrap()).state,
        Settled::Done
    );
    // While waiting or running only (Sidekiq's until_executed).
    q.enqueue(unique("waiting").unique_states(UniqueStates::WAITING))
        .unwrap();
    q.ack(lease(q.as_ref())).unwrap();
    assert!(q.enqueue(unique("waiting")).unwrap().is_added());
    q.ack(lease(q.as_ref())).unwrap();
    // A job that used up its attempts by nacks is dead too.
    q.enqueue(unique("nacked").unique_states(UniqueStates::ALL))
        .unwrap();
    loop {
        let l = lease(q.as_ref());
        match q
            .nack(l, dque::jobs::Retry::After(Duration::ZERO), "no")
            .unwrap()
        {
            dque::jobs::Nacked::Dead => break,
            dque::jobs::Nacked::Retrying { .. } => {}
        }
    }
    assert_eq!(
        duplicate(q.enqueue(unique("nacked")).unwrap()).state,
        Settled::Dead
    );
}

pub fn a_cancelled_unique_job_frees_its_id(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "unique_cancel");
    q.enqueue(unique("c").delay(Duration::from_secs(60)))
        .unwrap();
    q.cancel("c").unwrap();
    assert!(q.enqueue(unique("c")).unwrap().is_added());
}

pub fn a_unique_period_survives_moves_and_a_restart(backend: &dyn Backend) {
    let (q, settings) = new_queue(backend, "unique_restart");
    // Scheduled, falls due, retried later, changes priority: the job
    // keeps its period through every move.
    q.enqueue(unique("moved").delay(Duration::from_secs(10)))
        .unwrap();
    settings.clock.advance(Duration::from_secs(10));
    let first = lease(q.as_ref());
    q.nack(
        first,
        dque::jobs::Retry::After(Duration::from_secs(5)),
        "later",
    )
    .unwrap();
    q.set_priority("moved", -3).unwrap();
    settings.clock.advance(Duration::from_secs(5));
    q.ack(lease(q.as_ref())).unwrap();
    q.close().unwrap();
    drop(q);
    let q = backend.reopen("unique_restart", &settings);
    let met = duplicate(q.enqueue(unique("moved")).unwrap());
    assert_eq!(met.state, Settled::Done);
    settings.clock.advance(HOUR);
    assert!(q.enqueue(unique("moved")).unwrap().is_added());
}

pub fn bad_uniqueness_is_refused_and_adds_nothing(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "unique_bad");
    let refused = |job: NewJob| {
        let e = q.enqueue(job).unwrap_err();
        assert!(matches!(e, Error::InvalidJob { .. }), "{e:?}");
    };
    refused(NewJob::new("no id").unique_for(HOUR));
    refused(unique("done only").unique_states(UniqueStates::DONE));
    refused(
        NewJob::new("no period")
            .id("x")
            .unique_states(UniqueStates::ALL),
    );
    assert!("done,dead".parse::<UniqueStates>().is_err());
    assert!("queued,running,sideways".parse::<UniqueStates>().is_err());
    assert_eq!(q.counts().unwrap().ready, 0);
    // A zero period is no period.
    q.enqueue(NewJob::new("z").id("z").unique_for(Duration::ZERO))
        .unwrap();
    q.ack(lease(q.as_ref())).unwrap();
    assert!(q.enqueue(NewJob::new("z").id("z")).unwrap().is_added());
}

// A dead letter put back keeps its uniqueness: held while dead when asked
// (so no second job meanwhile), and its ack holds the id again.
pub fn a_requeued_dead_letter_keeps_its_unique_hold(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "unique_requeue");
    q.enqueue(unique("all").unique_states(UniqueStates::ALL))
        .unwrap();
    q.fail(lease(q.as_ref()), "broken").unwrap();
    let met = duplicate(
        q.enqueue(unique("all").unique_states(UniqueStates::ALL))
            .unwrap(),
    );
    assert_eq!(met.state, Settled::Dead);
    q.requeue_dead("all").unwrap();
    assert!(
        !q.enqueue(unique("all")).unwrap().is_added(),
        "waiting again"
    );
    q.ack(lease(q.as_ref())).unwrap();
    let met = duplicate(q.enqueue(unique("all")).unwrap());
    assert_eq!(met.state, Settled::Done);
}

// Pins a bug of Redis (review of issue 27): there a job's id is its key,
// so an enqueue of a dead letter's id (the id not held while dead: a
// plain caller id, or a uniqueness without dead) replaced the dead letter,
// its body and reason lost. On every backend the dead letter is kept
// beside the new job, its requeue refused while the id is taken, and
// allowed once the new job is done.
pub fn an_enqueue_of_a_dead_letters_id_keeps_the_dead_letter(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "dead_id_kept");
    for (id, held) in [("plain", false), ("held", true)] {
        let new = |body: &str| {
            let job = NewJob::new(body).id(id);
            if held {
                job.unique_for(HOUR)
            } else {
                job
            }
        };
        let id = id.to_owned();
        q.enqueue(new("old")).unwrap();
        q.fail(lease(q.as_ref()), "broken: old").unwrap();
        assert!(q.enqueue(new("new")).unwrap().is_added(), "{id}");
        let dead = q.dead(10).unwrap();
        assert_eq!(dead.len(), 1, "{id}: the dead letter was replaced");
        assert_eq!(
            (
                dead[0].job.id.as_str(),
                dead[0].job.body.as_slice(),
                dead[0].reason.as_str()
            ),
            (id.as_str(), &b"old"[..], "broken: old"),
        );
        let counts = q.counts().unwrap();
        assert_eq!((counts.ready, counts.dead), (1, 1), "{id}");
        // Its requeue is refused while the new job holds the id.
        match q.requeue_dead(&id) {
            Err(Error::InvalidJob { reason }) => {
                assert!(reason.contains("queued again"), "{reason}")
            }
            other => panic!("{id}: requeue while the id is taken: {other:?}"),
        }
        assert_eq!(q.dead(10).unwrap().len(), 1, "{id}: a refused requeue");
        let running = lease(q.as_ref());
        assert_eq!(running.body, b"new", "{id}");
        q.ack(running).unwrap();
        // Once the new job is done, the dead letter can go back.
        q.requeue_dead(&id).unwrap();
        assert!(q.dead(10).unwrap().is_empty(), "{id}");
        let again = lease(q.as_ref());
        assert_eq!(
            (again.id.as_str(), again.body.as_slice()),
            (id.as_str(), &b"old"[..])
        );
        q.ack(again).unwrap();
    }
}

// The same class, twice: a job of a dead letter's id that dies too is a
// second dead letter of the id; both are kept, requeued one at a time,
// the oldest first (on Redis the second was set aside in its turn).
pub fn two_dead_letters_of_one_id_are_both_kept(backend: &dyn Backend) {
    let (q, _settings) = new_queue(backend, "dead_id_twice");
    for (body, reason) in [("first", "broken: first"), ("second", "broken: second")] {
        q.enqueue(NewJob::new(body).id("twice")).unwrap();
        q.fail(lease(q.as_ref()), reason).unwrap();
    }
    let dead = q.dead(10).unwrap();
    let reasons: Vec<&str> = dead.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(reasons, ["broken: first", "broken: second"]);
    assert_eq!(q.counts().unwrap().dead, 2);
    q.requeue_dead("twice").unwrap();
    assert_eq!(q.dead(10).unwrap().len(), 1);
    let again = lease(q.as_ref());
    assert_eq!(again.body, b"first");
    match q.requeue_dead("twice") {
        Err(Error::InvalidJob { reason }) => assert!(reason.contains("queued again"), "{reason}"),
        other => panic!("requeue while the id is taken: {other:?}"),
    }
    q.ack(again).unwrap();
    q.requeue_dead("twice").unwrap();
    assert!(q.dead(10).unwrap().is_empty());
    assert_eq!(lease(q.as_ref()).body, b"second");
}
