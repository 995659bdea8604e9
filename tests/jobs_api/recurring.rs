//! The suite's checks of recurring jobs (issue 27): schedules fire from
//! leases, one job per tick (caller id `NAME@TICK`), catch up after
//! downtime by their policy, and are listed, replaced and removed.

use std::time::{Duration, SystemTime};

use dque::jobs::{tick_id, CatchUp, JobQueue, Schedule};
use dque::Error;

use super::{new_queue, Backend, NowTime};

fn ids_of_ready(queue: &dyn JobQueue) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(lease) = queue.lease().expect("lease") {
        ids.push(lease.id.clone());
        queue.ack(lease).expect("ack");
    }
    ids
}

pub fn a_schedule_fires_once_per_tick_from_any_lease(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rec-once");
    let clock = &settings.clock;
    let start = clock.now_time();
    let info = queue
        .schedule(Schedule::every("rec-once-s", Duration::from_secs(60)).body("tick"))
        .expect("schedule");
    assert_eq!(info.next_run, start, "an interval's first tick is at once");
    let lease = queue.lease().unwrap().expect("the first tick's job");
    assert_eq!(lease.id, tick_id("rec-once-s", start));
    assert_eq!(lease.body, b"tick");
    queue.ack(lease).unwrap();
    // The tick was fired: neither a lease nor an explicit firing adds it again.
    assert!(queue.lease().unwrap().is_none());
    assert_eq!(queue.fire_schedules().unwrap(), 0);
    clock.advance(Duration::from_secs(59));
    assert_eq!(queue.fire_schedules().unwrap(), 0, "not due yet");
    clock.advance(Duration::from_secs(1));
    assert_eq!(queue.fire_schedules().unwrap(), 1);
    assert_eq!(
        queue.fire_schedules().unwrap(),
        0,
        "a second firing adds nothing"
    );
    assert_eq!(
        ids_of_ready(&*queue),
        [tick_id("rec-once-s", start + Duration::from_secs(60))]
    );
    let listed = queue.schedules().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].next_run, start + Duration::from_secs(120));
}

pub fn schedules_are_listed_replaced_and_removed(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rec-list");
    let now = settings.clock.now_time();
    let hourly = Schedule::cron("rec-list-h", "0 * * * *").time_zone("Asia/Kolkata");
    let info = queue.schedule(hourly.clone().body("one")).unwrap();
    // Kolkata is UTC+5:30: its hours start at half past UTC hours.
    let secs = info
        .next_run
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(secs % 3600, 1800, "{secs}");
    assert!(info.next_run > now && info.next_run <= now + Duration::from_secs(3600));
    queue
        .schedule(Schedule::every("rec-list-a", Duration::from_secs(5)).priority(3))
        .unwrap();
    // Replaced with the same ticks: the next run stays, the job changes.
    settings.clock.advance(Duration::from_secs(1));
    let again = queue.schedule(hourly.clone().body("two")).unwrap();
    assert_eq!(again.next_run, info.next_run);
    let listed = queue.schedules().unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.schedule.name()).collect();
    assert_eq!(names, ["rec-list-a", "rec-list-h"]);
    assert_eq!(listed[1].schedule.body_bytes(), b"two");
    assert_eq!(listed[1].schedule.zone(), "Asia/Kolkata");
    assert_eq!(listed[0].schedule.priority_value(), 3);
    // Bad schedules are refused and change nothing.
    for bad in [
        Schedule::cron("rec-list-h", "not a cron"),
        Schedule::cron("rec-list-h", "0 * * * *").time_zone("Nowhere/Land"),
    ] {
        let e = queue.schedule(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidJob { .. }), "{e:?}");
    }
    assert_eq!(queue.schedules().unwrap(), listed);
    assert!(queue.unschedule("rec-list-h").unwrap());
    assert!(!queue.unschedule("rec-list-h").unwrap());
    assert_eq!(queue.schedules().unwrap().len(), 1);
    assert!(queue.unschedule("rec-list-a").unwrap());
    assert!(queue.schedules().unwrap().is_empty());
    // A removed schedule fires no more.
    settings.clock.advance(Duration::from_secs(7200));
    assert!(ids_of_ready(&*queue).is_empty());
}

pub fn missed_ticks_catch_up_by_policy(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rec-catch");
    let clock = &settings.clock;
    let start = clock.now_time();
    let every = Duration::from_secs(10);
    for (name, policy) in [
        ("rec-catch-latest", CatchUp::Latest),
        ("rec-catch-skip", CatchUp::Skip),
        ("rec-catch-missed", CatchUp::Missed(3)),
    ] {
        queue
            .schedule(Schedule::every(name, every).catch_up(policy))
            .unwrap();
    }
    assert_eq!(ids_of_ready(&*queue).len(), 3, "each first tick");
    // Down for 55 s: ticks at 10 .. 50 s were missed.
    clock.advance(Duration::from_secs(55));
    let mut ids = ids_of_ready(&*queue);
    ids.sort();
    let at = |s: u64| start + Duration::from_secs(s);
    let mut expected = vec![
        tick_id("rec-catch-latest", at(50)),
        tick_id("rec-catch-missed", at(30)),
        tick_id("rec-catch-missed", at(40)),
        tick_id("rec-catch-missed", at(50)),
    ];
    expected.sort();
    assert_eq!(ids, expected);
    for info in queue.schedules().unwrap() {
        assert_eq!(info.next_run, at(60), "{}", info.schedule.name());
    }
    // On time again, a skipping schedule fires its tick.
    clock.advance(Duration::from_secs(5));
    assert_eq!(ids_of_ready(&*queue).len(), 3);
}

pub fn a_schedules_jobs_carry_its_kind_priority_and_headers(backend: &dyn Backend) {
    let (queue, _settings) = new_queue(backend, "rec-job");
    queue.enqueue(dque::jobs::NewJob::new("plain")).unwrap();
    queue
        .schedule(
            Schedule::every("rec-job-s", Duration::from_secs(3600))
                .body(r#"{"report": "daily"}"#)
                .kind("reports.Daily")
                .priority(-5)
                .header("tenant", "acme"),
        )
        .unwrap();
    let lease = queue.lease().unwrap().expect("the schedule's job first");
    assert_eq!(lease.body, br#"{"report": "daily"}"#);
    assert_eq!(lease.priority, -5);
    assert_eq!(lease.header("klass"), Some("reports.Daily"));
    assert_eq!(lease.header("tenant"), Some("acme"));
    assert!(lease.id.starts_with("rec-job-s@"));
    queue.ack(lease).unwrap();
}

// Pins (review of this session's Redis change): a lease on a paused queue
// fired its due schedules on PostgreSQL and Redis (one job a tick piled up
// while paused) but not on the embedded queue. The rule on every backend:
// while paused, leases fire nothing; the first lease after `resume` fires
// what is due by each schedule's catch-up policy.
pub fn a_paused_queue_fires_no_schedule_until_resumed(backend: &dyn Backend) {
    let (queue, settings) = new_queue(backend, "rec-paused");
    let clock = &settings.clock;
    let start = clock.now_time();
    queue.pause().unwrap();
    queue
        .schedule(Schedule::every("rec-paused-s", Duration::from_secs(60)).body("tick"))
        .expect("schedule");
    for _ in 0..3 {
        assert!(queue.lease().unwrap().is_none(), "paused");
        clock.advance(Duration::from_secs(60));
    }
    assert!(queue.lease().unwrap().is_none(), "paused");
    let counts = queue.counts().unwrap();
    assert_eq!(
        (counts.ready, counts.scheduled),
        (0, 0),
        "a paused queue's leases fired a schedule"
    );
    queue.resume().unwrap();
    assert_eq!(
        ids_of_ready(&*queue),
        [tick_id("rec-paused-s", start + Duration::from_secs(180))],
        "the latest missed tick, by the default catch-up"
    );
}
