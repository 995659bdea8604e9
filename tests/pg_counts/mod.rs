//! Counts kept by the statements that move jobs (issue 28, schema 9):
//! after every kind of call, in random sequences on several handles,
//! under concurrent workers (blocking and async), across a rollback, a
//! connection cut after a statement ran or killed in the middle of one,
//! and after the migration that makes them, the kept rows equal a recount
//! of the jobs, and `counts()` equals the full count it replaced.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dque::jobs::{
    Clock, JobLease, JobQueue, KeepCompleted, ManualClock, NewJob, PgJobs, PgOptions, Retry,
    Schedule,
};
use postgres::{Client, NoTls};

use super::pg::PgServer;

/// A schema of its own for each test (removed at the end).
fn schema(test: &str) -> String {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    format!(
        "counts_{test}_{}_{}",
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed)
    )
}

fn admin(server: &PgServer) -> Client {
    Client::connect(&server.url(), NoTls).expect("connect")
}

fn ms_of(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// How the kept rows differ from a recount of the jobs (written here
/// again, not taken from the code under test), and queues without their
/// 64 slot rows; one statement, so one snapshot: exact even while
/// workers run.
fn differences(client: &mut Client, schema: &str) -> Vec<String> {
    let sql = format!(
        "WITH recount AS (
             SELECT qno, count(*) FILTER (WHERE state = 0) AS w,
                    count(*) FILTER (WHERE state = 2) AS d,
                    count(*) FILTER (WHERE state = 3) AS c
             FROM {schema}.jobs GROUP BY qno),
         kept AS (
             SELECT qno, sum(waiting)::bigint AS w, sum(dead)::bigint AS d,
                    sum(completed)::bigint AS c, count(*) FILTER (WHERE slot >= 0) AS slots
             FROM {schema}.counts GROUP BY qno)
         SELECT format('queue %s: kept (waiting %s, dead %s, completed %s), rows (%s, %s, %s)',
                       coalesce(k.qno, r.qno), k.w, k.d, k.c, r.w, r.d, r.c)
         FROM kept k FULL JOIN recount r ON k.qno = r.qno
         WHERE coalesce(k.w, 0) <> coalesce(r.w, 0) OR coalesce(k.d, 0) <> coalesce(r.d, 0)
            OR coalesce(k.c, 0) <> coalesce(r.c, 0)
         UNION ALL
         SELECT format('queue %s has %s slot rows', q.qno, k.slots)
         FROM {schema}.queues q LEFT JOIN kept k ON k.qno = q.qno
         WHERE k.slots IS DISTINCT FROM 64"
    );
    client
        .query(&sql, &[])
        .expect("recount")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The counts as the full count that `counts()` made before issue 28:
/// (ready, scheduled, leased, dead) of queue `name`, at `now` (the
/// queue's clock) and the real time.
fn full_count(client: &mut Client, schema: &str, name: &str, now: i64) -> (u64, u64, u64, u64) {
    let real = ms_of(SystemTime::now());
    let row = client
        .query_one(
            &format!(
                "SELECT
                     count(*) FILTER (WHERE state = 0 AND ready_at <= $2
                                        AND (lease_until IS NULL OR lease_until <= $3)),
                     count(*) FILTER (WHERE state = 0 AND ready_at > $2),
                     count(*) FILTER (WHERE state = 0 AND lease_until > $3),
                     count(*) FILTER (WHERE state = 2)
                 FROM {schema}.jobs WHERE qno = (SELECT qno FROM {schema}.queues WHERE name = $1)"
            ),
            &[&name, &now, &real],
        )
        .expect("full count");
    let n = |i: usize| row.get::<_, i64>(i) as u64;
    (n(0), n(1), n(2), n(3))
}

fn counts(queue: &dyn JobQueue) -> (u64, u64, u64, u64) {
    let c = queue.counts().expect("counts");
    (c.ready, c.scheduled, c.leased, c.dead)
}

/// Checks the kept rows against the recount, and `counts()` against the
/// full count at `now` (the queue's clock), after `step`.
fn check_at(client: &mut Client, schema: &str, queue: &dyn JobQueue, now: i64, step: &str) {
    let differences = differences(client, schema);
    assert!(differences.is_empty(), "after {step}: {differences:?}");
    assert_eq!(
        counts(queue),
        full_count(client, schema, queue.name(), now),
        "after {step}"
    );
}

fn check(client: &mut Client, schema: &str, queue: &dyn JobQueue, step: &str) {
    check_at(client, schema, queue, ms_of(SystemTime::now()), step);
}

fn drop_schema(client: &mut Client, schema: &str) {
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .expect("drop schema");
}

// Issue 28: `counts()` read every live row twice (1.3 s a page at
// 1 000 000 jobs); the counts are now kept by the statements that move
// jobs, each of which must keep them right. Each kind of change, on both
// kinds of handle (one deleting acked jobs, one keeping them completed).
#[test]
fn kept_counts_follow_every_kind_of_state_change() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("moves");
    let mut client = admin(server);
    for keep in [false, true] {
        let options = PgOptions::new()
            .schema(&schema)
            .lease_time(Duration::from_secs(60))
            .max_attempts(3);
        let options = match keep {
            true => options.keep_completed(KeepCompleted::new(Duration::from_secs(3600), 1000)),
            false => options.keep_completed(KeepCompleted::NONE),
        };
        let q = options
            .connect(&server.url(), &format!("q{keep}"))
            .expect("connect");
        let step = |client: &mut Client, what: &str| check(client, &schema, &q, what);
        step(&mut client, "opening");
        q.enqueue_batch(
            (0..20)
                .map(|i| {
                    NewJob::new(format!("b{i}"))
                        .id(format!("j{i}"))
                        .priority(i % 3)
                })
                .collect(),
        )
        .unwrap();
        step(&mut client, "a batch with caller ids");
        q.enqueue_batch(vec![
            NewJob::new("again").id("j0"),
            NewJob::new("new").id("jx"),
        ])
        .unwrap();
        step(&mut client, "a batch of which one id is queued already");
        q.enqueue(
            NewJob::new("later")
                .id("later")
                .delay(Duration::from_secs(3600)),
        )
        .unwrap();
        q.enqueue(NewJob::new("h").header("k", "v")).unwrap();
        q.enqueue_batch((0..3).map(|i| NewJob::new(format!("g{i}"))).collect())
            .unwrap();
        q.enqueue(
            NewJob::new("u")
                .id("unique")
                .unique_for(Duration::from_secs(60)),
        )
        .unwrap();
        q.enqueue(
            NewJob::new("u")
                .id("unique")
                .unique_for(Duration::from_secs(60)),
        )
        .unwrap();
        step(&mut client, "enqueues");
        let mut leases = q.lease_batch(5).unwrap();
        step(&mut client, "a batch lease");
        let one = q.lease().unwrap().expect("a job");
        q.touch(&one).unwrap();
        q.ack(one).unwrap();
        step(&mut client, "an ack");
        q.nack(leases.pop().unwrap(), Retry::After(Duration::ZERO), "again")
            .unwrap();
        step(&mut client, "a nack retrying at once");
        q.nack(
            leases.pop().unwrap(),
            Retry::After(Duration::from_secs(600)),
            "later",
        )
        .unwrap();
        step(&mut client, "a nack retrying later");
        let released = leases.pop().unwrap();
        let released_id = released.job.id.clone();
        q.release(released).unwrap();
        q.set_priority(&released_id, 7).unwrap();
        step(&mut client, "a release and a priority change");
        q.release_after(leases.pop().unwrap(), Duration::from_secs(60))
            .unwrap();
        step(&mut client, "a snooze");
        q.fail(leases.pop().unwrap(), "broken").unwrap();
        step(&mut client, "a failure");
        let dead = q.dead(1).unwrap().remove(0);
        q.requeue_dead(&dead.job.id).unwrap();
        step(&mut client, "a requeue of a dead letter");
        assert!(q.run_now("later").unwrap());
        step(&mut client, "run now");
        q.cancel("j18").unwrap();
        step(&mut client, "a cancel");
        let outcomes = q.cancel_many(&["j17".into(), "j16".into(), "none".into()]);
        assert!(outcomes[0].is_ok() && outcomes[1].is_ok() && outcomes[2].is_err());
        step(&mut client, "a batch cancel");
        let _ = q.set_priority_many(&["j15".into(), "j14".into()], 9);
        step(&mut client, "a batch priority change");
        let mut buried = Vec::new();
        for _ in 0..3 {
            let lease = q.lease().unwrap().expect("a job");
            buried.push(lease.job.id.clone());
            q.fail(lease, "bulk").unwrap();
        }
        step(&mut client, "three failures");
        assert!(q.requeue_dead_many(&buried).iter().all(Result::is_ok));
        step(&mut client, "a bulk requeue");
        // Attempts used up by workers that never came back: buried by the
        // next lease.
        let short = PgOptions::new()
            .schema(&schema)
            .lease_time(Duration::from_millis(1))
            .max_attempts(1)
            .connect(&server.url(), q.name())
            .expect("connect");
        let lost = short.lease().unwrap().expect("a job");
        std::thread::sleep(Duration::from_millis(20));
        drop(lost);
        step(&mut client, "a lease that ran out");
        let again = short.lease().unwrap();
        drop(again);
        std::thread::sleep(Duration::from_millis(20));
        step(&mut client, "a lease after attempts ran out");
        while let Some(lease) = q.lease().unwrap() {
            q.ack(lease).unwrap();
        }
        step(&mut client, "draining");
        let (ready, scheduled, leased, _) = counts(&q);
        assert_eq!((ready, leased), (0, 0));
        assert!(scheduled > 0, "the snoozed and the retried-later jobs");
        // The waits kept in rows reach stats() as they did when read
        // through every live row: the merged days, the log, the rows.
        let stats = q.stats().unwrap();
        let waits: u64 = stats.days.iter().map(|d| d.wait.count).sum();
        let recounted: i64 = client
            .query_one(
                &format!(
                    "SELECT (SELECT coalesce(sum(wait_count), 0) FROM {schema}.stats
                             WHERE queue = $1)::bigint
                          + (SELECT count(*) FILTER (WHERE kind = 0) + count(wait_ms)
                             FROM {schema}.stats_log WHERE queue = $1)
                          + (SELECT count(*) FROM {schema}.jobs
                             WHERE qno = (SELECT qno FROM {schema}.queues WHERE name = $1)
                               AND state = 0 AND wait_ms IS NOT NULL)"
                ),
                &[&q.name()],
            )
            .unwrap()
            .get(0);
        assert_eq!(waits as i64, recounted);
        assert!(waits >= 20, "every job leased: {waits}");
        drop((q, short));
    }
    drop_schema(&mut client, &schema);
}

// Issue 28: a count's change is in the statement of the change it
// counts: rolled back with it (a job enqueued in a caller's transaction),
// and never seen before its commit. Such a job is counted in a row of its
// own, so the caller's open transaction locks no slot row that other
// connections' statements would wait for.
#[test]
fn a_rolled_back_change_leaves_the_kept_counts_as_they_were() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("rollback");
    let mut client = admin(server);
    let q = PgOptions::new()
        .schema(&schema)
        .connect(&server.url(), "q")
        .expect("connect");
    q.enqueue(NewJob::new("kept")).unwrap();
    let mut other = admin(server);
    let mut tx = other.transaction().unwrap();
    q.enqueue_in(&mut tx, NewJob::new("in a transaction"))
        .unwrap();
    q.enqueue_in(&mut tx, NewJob::new("with an id").id("mine"))
        .unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0), "not seen before its commit");
    // The open transaction holds no slot row: no statement of another
    // connection waits for its commit (each row is free to lock now).
    let locked = client.query(
        &format!("SELECT 1 FROM {schema}.counts WHERE slot >= 0 FOR UPDATE NOWAIT"),
        &[],
    );
    assert!(locked.is_ok(), "a slot row stays locked: {locked:?}");
    tx.rollback().unwrap();
    check(&mut client, &schema, &q, "a rollback");
    assert_eq!(counts(&q), (1, 0, 0, 0));
    let mut tx = other.transaction().unwrap();
    q.enqueue_in(&mut tx, NewJob::new("committed")).unwrap();
    q.enqueue_in(
        &mut tx,
        NewJob::new("unique")
            .id("u")
            .unique_for(Duration::from_secs(60)),
    )
    .unwrap();
    tx.commit().unwrap();
    check(&mut client, &schema, &q, "a commit");
    assert_eq!(counts(&q), (3, 0, 0, 0));
    // Counted apart, then folded into a slot by the statistics' merge
    // (due a second after the last).
    std::thread::sleep(Duration::from_millis(1100));
    let lease = q.lease().unwrap().expect("a job");
    q.ack(lease).unwrap();
    check(&mut client, &schema, &q, "a fold");
    let apart: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {schema}.counts WHERE slot < 0"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(apart, 0, "the rows counted apart were folded");
    drop(q);
    drop_schema(&mut client, &schema);
}

// Issue 28, review: jobs enqueued in callers' transactions are counted in
// rows of their own, folded into a slot by each handle's statistics'
// merge (at its close too). Handles closing at once fold the same rows
// at once: each row is added by one fold (none twice, none lost), and no
// fold fails (one that failed, say on a deadlock, would leave rows apart).
#[test]
fn concurrent_folds_add_each_row_counted_apart_once() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("folds");
    let mut client = admin(server);
    let open = || {
        PgOptions::new()
            .schema(&schema)
            .connect(&server.url(), "q")
            .expect("connect")
    };
    let first = open();
    for round in 0..(rounds() / 30).max(2) {
        let barrier = std::sync::Barrier::new(6);
        std::thread::scope(|scope| {
            for t in 0..6 {
                let (barrier, q) = (&barrier, open());
                let url = server.url();
                scope.spawn(move || {
                    let mut theirs = Client::connect(&url, NoTls).expect("connect");
                    let mut tx = theirs.transaction().unwrap();
                    for n in 0..3 {
                        q.enqueue_in(&mut tx, NewJob::new(format!("{round}.{t}.{n}")))
                            .unwrap();
                    }
                    tx.commit().unwrap();
                    barrier.wait();
                    q.close().unwrap();
                });
            }
        });
        check(&mut client, &schema, &first, &format!("round {round}"));
        let apart: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {schema}.counts WHERE slot < 0"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(apart, 0, "round {round}: a fold left rows apart");
        assert_eq!(counts(&first).0, 18 * (round as u64 + 1));
    }
    drop(first);
    drop_schema(&mut client, &schema);
}

/// How many calls the random sequences make (and rounds the concurrent
/// workers run): `DQUE_TEST_PG_COUNTS_ROUNDS`, small by default.
fn rounds() -> usize {
    std::env::var("DQUE_TEST_PG_COUNTS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

/// A small seeded generator (the seed is printed with a failure).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A random job: a made-up or a caller id from a small pool (so some are
/// queued already), sometimes unique for a while, delayed, with headers.
fn random_job(rng: &mut Rng, n: usize) -> NewJob {
    let mut job = NewJob::new(format!("body {n}")).priority(rng.below(3) as i32);
    if rng.below(2) == 0 {
        job = job.id(format!("c{}", rng.below(12)));
        if rng.below(3) == 0 {
            job = job.unique_for(Duration::from_secs(30 + rng.below(60)));
        }
    }
    if rng.below(4) == 0 {
        job = job.delay(Duration::from_secs(1 + rng.below(20)));
    }
    if rng.below(4) == 0 {
        job = job.header("kind", "k");
    }
    job
}

// Issue 28, the class: after any sequence of the contract's calls on
// several handles (one deleting acked jobs, one keeping them completed and
// pruning them, one whose leases run out and use up attempts), on a clock
// that moves (schedules fire, delayed jobs fall due), every count equals
// a recount of the rows. Seeded; `DQUE_TEST_PG_COUNTS_ROUNDS` calls.
#[test]
fn any_sequence_of_calls_keeps_the_counts_equal_to_a_recount() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let seed = std::env::var("DQUE_TEST_PG_COUNTS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| ms_of(SystemTime::now()) as u64);
    let schema = schema("random");
    let mut client = admin(server);
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let open = |keep: KeepCompleted, lease: Duration| {
        PgOptions::new()
            .schema(&schema)
            .clock(clock.clone())
            .lease_time(lease)
            .max_attempts(2)
            .keep_completed(keep)
            .connect(&server.url(), "q")
            .expect("connect")
    };
    let handles = [
        open(KeepCompleted::NONE, Duration::from_secs(600)),
        open(
            KeepCompleted::new(Duration::from_secs(5), 3),
            Duration::from_secs(600),
        ),
    ];
    let short = open(KeepCompleted::NONE, Duration::from_millis(1));
    handles[0]
        .schedule(Schedule::every("tick", Duration::from_secs(7)).body("tick"))
        .unwrap();
    let mut rng = Rng(seed);
    let mut held: Vec<(usize, JobLease)> = Vec::new();
    let mut completed_fell = false;
    let mut last_completed = 0i64;
    for call in 0..rounds() {
        let h = rng.below(2) as usize;
        let q = &handles[h];
        let what = match rng.below(17) {
            0 | 1 => {
                let _ = q.enqueue(random_job(&mut rng, call));
                "enqueue"
            }
            2 => {
                let jobs = (0..1 + rng.below(4) as usize)
                    .map(|i| random_job(&mut rng, call * 10 + i))
                    .collect();
                let _ = q.enqueue_batch(jobs);
                "enqueue_batch"
            }
            3 | 4 => {
                let leases = q.lease_batch(1 + rng.below(3) as usize).unwrap();
                held.extend(leases.into_iter().map(|l| (h, l)));
                "lease"
            }
            5..=7 if !held.is_empty() => {
                let (h, lease) = held.swap_remove(rng.below(held.len() as u64) as usize);
                let q = &handles[h];
                match rng.below(6) {
                    0 | 1 => q.ack(lease).unwrap(),
                    2 => {
                        let _ = q.nack(lease, Retry::After(Duration::ZERO), "now").unwrap();
                    }
                    3 => {
                        let later = Retry::After(Duration::from_secs(5));
                        let _ = q.nack(lease, later, "later").unwrap();
                    }
                    4 => q.fail(lease, "broken").unwrap(),
                    _ => match rng.below(2) {
                        0 => q.release(lease).unwrap(),
                        _ => {
                            let _ = q.release_after(lease, Duration::from_secs(3)).unwrap();
                        }
                    },
                }
                "settle a lease"
            }
            8 if !held.is_empty() => {
                let (h, lease) = &held[rng.below(held.len() as u64) as usize];
                handles[*h].touch(lease).unwrap();
                "touch"
            }
            9 => {
                let ids: Vec<String> = q.dead(3).unwrap().into_iter().map(|d| d.job.id).collect();
                match rng.below(2) {
                    0 => ids.iter().for_each(|id| drop(q.requeue_dead(id))),
                    _ => drop(q.requeue_dead_many(&ids)),
                }
                "requeue_dead"
            }
            10 => {
                let id = pick_id(q, &mut rng);
                let _ = q.cancel(&id);
                "cancel"
            }
            11 => {
                let ids = vec![pick_id(q, &mut rng), pick_id(q, &mut rng), "c3".into()];
                let _ = q.cancel_many(&ids);
                "cancel_many"
            }
            12 => {
                let id = pick_id(q, &mut rng);
                match rng.below(2) {
                    0 => drop(q.set_priority(&id, rng.below(4) as i32)),
                    _ => drop(q.set_priority_many(&[id, "c5".into()], rng.below(4) as i32)),
                }
                "set_priority"
            }
            13 => {
                let id = pick_id(q, &mut rng);
                let _ = q.run_now(&id);
                "run_now"
            }
            14 => {
                clock.advance(Duration::from_secs(1 + rng.below(8)));
                let _ = q.fire_schedules();
                "the clock moved"
            }
            15 => {
                // A worker that never comes back: its lease runs out, and
                // its attempts may be used up by the next lease.
                if let Some(lost) = short.lease().unwrap() {
                    std::thread::sleep(Duration::from_millis(3));
                    drop(lost);
                }
                "a lease that ran out"
            }
            _ => {
                // Prunes are due once a second (or every few hundred acks).
                if rng.below(8) == 0 {
                    std::thread::sleep(Duration::from_millis(1100));
                }
                if let Some(lease) = handles[1].lease().unwrap() {
                    handles[1].ack(lease).unwrap();
                }
                "an ack keeping the job"
            }
        };
        let step = format!("call {call} ({what}) of seed {seed}");
        check_at(&mut client, &schema, q, ms_of(clock.now()), &step);
        let completed: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {schema}.jobs WHERE state = 3"),
                &[],
            )
            .unwrap()
            .get(0);
        completed_fell |= completed < last_completed;
        last_completed = completed;
    }
    // A prune, whatever the random calls did (they prune only if a second
    // passed between acks): acks past the count kept, then one after the
    // time kept and a second.
    let completed = |client: &mut Client| -> i64 {
        client
            .query_one(
                &format!("SELECT count(*) FROM {schema}.jobs WHERE state = 3"),
                &[],
            )
            .unwrap()
            .get(0)
    };
    let ack_one = |step: &str| {
        let lease = handles[1].lease().unwrap().expect("a ready job to ack");
        handles[1].ack(lease).unwrap();
        format!("{step} of seed {seed}")
    };
    for n in 0..5 {
        handles[1]
            .enqueue(NewJob::new(format!("last {n}")))
            .unwrap();
    }
    for _ in 0..4 {
        let step = ack_one("an ack past the count kept");
        check_at(&mut client, &schema, &handles[1], ms_of(clock.now()), &step);
    }
    let before = completed(&mut client);
    clock.advance(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1100));
    let step = ack_one("an ack after the time kept");
    check_at(&mut client, &schema, &handles[1], ms_of(clock.now()), &step);
    completed_fell |= completed(&mut client) < before;
    assert!(completed_fell, "a prune ran (seed {seed})");
    drop((handles, short, held));
    drop_schema(&mut client, &schema);
}

/// An id of a waiting job of `q`, or a made-up one.
fn pick_id(q: &PgJobs, rng: &mut Rng) -> String {
    let waiting = q.waiting(20).unwrap();
    match waiting.is_empty() || rng.below(5) == 0 {
        true => format!("c{}", rng.below(12)),
        false => waiting[rng.below(waiting.len() as u64) as usize]
            .job
            .id
            .clone(),
    }
}

// Issue 28: workers on their own connections change counts at once (on
// different slots of the same rows, or the same slot): every snapshot of
// the kept rows, taken while they run, equals a recount.
#[test]
fn kept_counts_stay_exact_under_concurrent_workers() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("workers");
    let mut client = admin(server);
    // Half the workers delete acked jobs, half keep them completed.
    let open = |keep: bool| {
        let options = PgOptions::new()
            .schema(&schema)
            .lease_time(Duration::from_secs(60))
            .max_attempts(2);
        match keep {
            true => options.keep_completed(KeepCompleted::new(Duration::from_secs(60), 20)),
            false => options.keep_completed(KeepCompleted::NONE),
        }
        .connect(&server.url(), "q")
        .expect("connect")
    };
    let first = open(true);
    let finished = AtomicUsize::new(0);
    let snapshots = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8u64)
            .map(|w| {
                let q = open(w % 2 == 0);
                let finished = &finished;
                scope.spawn(move || {
                    // Counted also if it panics, so that the checker stops.
                    let _finished = Finished(finished);
                    let mut rng = Rng(w * 7919 + 17);
                    for round in 0..rounds() {
                        let delay = Duration::from_secs(if rng.below(10) < 2 { 3600 } else { 0 });
                        let ids = q
                            .enqueue_batch(
                                (0..3)
                                    .map(|i| NewJob::new(format!("{w}-{round}-{i}")).delay(delay))
                                    .collect(),
                            )
                            .unwrap();
                        for lease in q.lease_batch(2).unwrap() {
                            match rng.below(10) {
                                0..=4 => q.ack(lease).unwrap(),
                                5 => {
                                    let _ =
                                        q.nack(lease, Retry::After(Duration::ZERO), "x").unwrap();
                                }
                                6 => q.fail(lease, "y").unwrap(),
                                7 => q.release(lease).unwrap(),
                                _ => drop(q.touch(&lease)),
                            }
                        }
                        match rng.below(10) {
                            0 => {
                                for dead in q.dead(2).unwrap() {
                                    let _ = q.requeue_dead(&dead.job.id);
                                }
                            }
                            1 => drop(q.cancel_many(&[ids[0].id().to_owned()])),
                            2 => drop(q.cancel(ids[1].id())),
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        let checker = scope.spawn(|| {
            let mut client = admin(server);
            let mut snapshots = 0;
            while finished.load(Ordering::SeqCst) < 8 {
                let differences = differences(&mut client, &schema);
                assert!(differences.is_empty(), "while workers ran: {differences:?}");
                snapshots += 1;
            }
            snapshots
        });
        for worker in workers {
            worker.join().unwrap();
        }
        checker.join().unwrap()
    });
    assert!(snapshots > 0);
    check(&mut client, &schema, &first, "the workers");
    drop(first);
    drop_schema(&mut client, &schema);
}

// Issue 28: the async handle runs the same statements (written once): its
// concurrent tasks keep the counts equal to a recount too.
#[cfg(feature = "tokio")]
#[test]
fn kept_counts_stay_exact_under_concurrent_async_workers() {
    use dque::jobs::AsyncJobQueue;
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("async");
    let mut client = admin(server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let url = server.url();
    let sync = PgOptions::new()
        .schema(&schema)
        .connect(&url, "q")
        .expect("connect");
    let checker = {
        let (finished, schema) = (Arc::clone(&finished), schema.clone());
        let mut client = admin(server);
        std::thread::spawn(move || {
            let mut snapshots = 0;
            while finished.load(Ordering::SeqCst) < 4 {
                let differences = differences(&mut client, &schema);
                assert!(differences.is_empty(), "while tasks ran: {differences:?}");
                snapshots += 1;
            }
            snapshots
        })
    };
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..4u64 {
            let options = PgOptions::new()
                .schema(&schema)
                .lease_time(Duration::from_secs(60))
                .max_attempts(2);
            let options = match w % 2 {
                0 => options.keep_completed(KeepCompleted::new(Duration::from_secs(60), 10)),
                _ => options.keep_completed(KeepCompleted::NONE),
            };
            let q = options.connect_async(&url, "q").await.expect("connect");
            let finished = Arc::clone(&finished);
            tasks.push(tokio::spawn(async move {
                let _finished = Finished(&finished);
                let mut rng = Rng(w * 31 + 5);
                for round in 0..rounds() / 2 {
                    let ids = q
                        .enqueue_batch(
                            (0..3)
                                .map(|i| NewJob::new(format!("{w}-{round}-{i}")))
                                .collect(),
                        )
                        .await
                        .unwrap();
                    for lease in q.lease_batch(2).await.unwrap() {
                        match rng.below(6) {
                            0..=2 => q.ack(lease).await.unwrap(),
                            3 => drop(q.nack(lease, Retry::After(Duration::ZERO), "x").await),
                            4 => q.fail(lease, "y").await.unwrap(),
                            _ => q.release(lease).await.unwrap(),
                        }
                    }
                    match rng.below(6) {
                        0 => {
                            for dead in q.dead(2).await.unwrap() {
                                let _ = q.requeue_dead(&dead.job.id).await;
                            }
                        }
                        1 => drop(q.cancel(ids[0].id()).await),
                        _ => {}
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert!(checker.join().unwrap() > 0);
    check(&mut client, &schema, &sync, "the async tasks");
    drop(sync);
    drop_schema(&mut client, &schema);
}

/// Counts a finished worker when dropped (also by a panic).
struct Finished<'a>(&'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

// Issue 28: a statement either ran whole or not at all. Cut off after
// it ran (its answer lost: the handle says the outcome is unknown), or
// killed while it waited for a row in the middle of its work, the counts
// equal a recount.
#[test]
fn a_statement_cut_off_or_killed_midway_leaves_exact_counts() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("cut");
    let mut client = admin(server);
    let direct = PgOptions::new()
        .schema(&schema)
        .keep_completed(KeepCompleted::NONE)
        .connect(&server.url(), "q")
        .expect("connect");
    // Each statement that moves jobs, found by a piece of its text.
    let cuts: [(&'static str, &str); 5] = [
        ("cardinality($5", "an enqueue"),
        ("DELETE FROM", "an ack"),
        ("died = nextval", "a failure"),
        ("requeued AS", "a requeue"),
        ("freed AS (DELETE", "a cancel"),
    ];
    for (needle, what) in cuts {
        direct
            .enqueue_batch((0..4).map(|i| NewJob::new(format!("{i}"))).collect())
            .unwrap();
        let lease = direct.lease().unwrap().expect("a job");
        direct.fail(lease, "dead").unwrap();
        let dead_id = direct.dead(1).unwrap().remove(0).job.id;
        let waiting_id = direct.waiting(1).unwrap().remove(0).job.id;
        let proxy = super::CutProxy::start(server, needle);
        let cut = PgOptions::new()
            .schema(&schema)
            .keep_completed(KeepCompleted::NONE)
            .connect(&proxy.url(), "q")
            .expect("connect");
        let outcome = match what {
            "an enqueue" => cut.enqueue(NewJob::new("x")).map(drop),
            "an ack" => {
                let lease = cut.lease().unwrap().expect("a job");
                cut.ack(lease)
            }
            "a failure" => {
                let lease = cut.lease().unwrap().expect("a job");
                cut.fail(lease, "cut")
            }
            "a requeue" => cut.requeue_dead(&dead_id),
            _ => cut.cancel(&waiting_id),
        };
        assert!(proxy.has_cut(), "{what} was cut off: {outcome:?}");
        assert!(
            matches!(outcome, Err(dque::Error::OutcomeUnknown { .. })),
            "{what}: {outcome:?}"
        );
        check(&mut client, &schema, &direct, &format!("{what} cut off"));
    }
    // Killed midway: a batch cancel removes a row, then waits for one
    // that another transaction holds, and its connection is ended.
    let ids: Vec<String> = direct
        .enqueue_batch(
            ["m1", "m2", "m3"]
                .iter()
                .map(|id| NewJob::new("m").id(*id))
                .collect(),
        )
        .unwrap()
        .iter()
        .map(|e| e.id().to_owned())
        .collect();
    let mut holder = admin(server);
    let mut tx = holder.transaction().unwrap();
    tx.query(
        &format!("SELECT 1 FROM {schema}.jobs WHERE id = 'm3' FOR UPDATE"),
        &[],
    )
    .unwrap();
    let victim = PgOptions::new()
        .schema(&schema)
        .connect(&server.url(), "q")
        .expect("connect");
    let running = std::thread::spawn(move || victim.cancel_many(&ids));
    let pid = waiting_pid(&mut client, &schema);
    client
        .query("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    check(
        &mut client,
        &schema,
        &direct,
        "a batch cancel killed midway",
    );
    tx.rollback().unwrap();
    // The handle asks each job again on a new connection.
    let outcomes = running.join().unwrap();
    assert_eq!(outcomes.len(), 3);
    check(&mut client, &schema, &direct, "the jobs asked again");
    drop(direct);
    drop_schema(&mut client, &schema);
}

/// The process id of the backend left waiting for a row lock on
/// `schema`'s jobs.
fn waiting_pid(client: &mut Client, schema: &str) -> i32 {
    for _ in 0..500 {
        let found = client
            .query(
                "SELECT pid FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
                &[&schema],
            )
            .unwrap();
        if let Some(row) = found.first() {
            return row.get(0);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the call never waited for the locked row");
}

/// Undoes migration 9 → 10 (ids compared by bytes, issue 24): the
/// database's collation again.
pub fn back_to_version_9(client: &mut Client, schema: &str) {
    client
        .batch_execute(&format!(
            "ALTER TABLE {schema}.jobs ALTER COLUMN id TYPE text COLLATE \"default\";
             ALTER TABLE {schema}.unique_ids ALTER COLUMN id TYPE text COLLATE \"default\";
             UPDATE {schema}.schema_version SET version = 9;"
        ))
        .expect("back to version 9");
}

/// Undoes migrations 8 → 9 (kept counts, issue 28) and after.
pub fn back_to_version_8(client: &mut Client, schema: &str) {
    back_to_version_9(client, schema);
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.counts;
             DROP SEQUENCE {schema}.count_rows;
             DROP INDEX {schema}.jobs_held;
             UPDATE {schema}.schema_version SET version = 8;"
        ))
        .expect("back to version 8");
}

// Issue 28: a database made by the previous schema (version 8) gets its
// counts from the rows it has, in every state (waiting, scheduled,
// leased, a lease run out, waits kept in rows, dead, completed), in
// several queues, including changes made by a version-8 client (written
// here as SQL) after the jobs were made.
#[test]
fn a_version_8_database_gets_its_counts_from_its_rows() {
    let _sharing = super::sharing();
    let Some(server) = PgServer::get() else {
        return;
    };
    let schema = schema("v8");
    let mut client = admin(server);
    let open = |queue: &str, lease: Duration| {
        PgOptions::new()
            .schema(&schema)
            .lease_time(lease)
            .keep_completed(KeepCompleted::new(Duration::from_secs(3600), 1000))
            .connect(&server.url(), queue)
            .expect("connect")
    };
    let (q, short, other) = (
        open("q", Duration::from_secs(60)),
        open("q", Duration::from_millis(100)),
        open("other", Duration::from_secs(60)),
    );
    q.enqueue_batch((0..30).map(|i| NewJob::new(format!("{i}"))).collect())
        .unwrap();
    q.enqueue(NewJob::new("later").delay(Duration::from_secs(3600)))
        .unwrap();
    other.enqueue(NewJob::new("o")).unwrap();
    let _held = q.lease_batch(3).unwrap();
    let lost = short.lease().unwrap().expect("a job");
    for _ in 0..2 {
        let lease = q.lease().unwrap().expect("a job");
        q.fail(lease, "broken").unwrap();
    }
    for _ in 0..4 {
        let lease = q.lease().unwrap().expect("a job");
        q.ack(lease).unwrap();
    }
    // (`q` stays open: a closed handle hands its leases back.)
    drop((short, other, lost));
    back_to_version_8(&mut client, &schema);
    // What a version-8 dque does next, counting nothing: an enqueue, an
    // ack, a death, a new queue.
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.jobs (qno, id, caller_id, priority, body, enqueued_at, ready_at)
                 SELECT qno, 'v8', true, 0, '', 0, 0 FROM {schema}.queues WHERE name = 'q';
             DELETE FROM {schema}.jobs WHERE seq = (SELECT min(seq) FROM {schema}.jobs
                 WHERE state = 0 AND lease_until IS NULL AND ready_at < 1000000000000000);
             INSERT INTO {schema}.queues (name) VALUES ('made at 8');
             INSERT INTO {schema}.jobs (qno, id, caller_id, priority, body, enqueued_at,
                                        ready_at, state, died, reason)
                 SELECT qno, 'd8', true, 0, '', 0, 0, 2, 1, 'x' FROM {schema}.queues
                 WHERE name = 'made at 8';"
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let version = |client: &mut Client| -> i32 {
        client
            .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(version(&mut client), 8);
    let reopened = open("q", Duration::from_secs(60));
    assert_eq!(version(&mut client), dque::jobs::SCHEMA_VERSION);
    check(&mut client, &schema, &reopened, "the migration");
    // 30 + later + v8, less 2 dead, 4 acked, 1 deleted at 8; 3 leased.
    assert_eq!(counts(&reopened), (21, 1, 3, 2));
    let made_at_8 = open("made at 8", Duration::from_secs(60));
    assert_eq!(counts(&made_at_8), (0, 0, 0, 1));
    // And they go on from there.
    while let Some(lease) = reopened.lease().unwrap() {
        reopened.ack(lease).unwrap();
    }
    check(&mut client, &schema, &reopened, "acks after the migration");
    drop((reopened, made_at_8, q));
    drop_schema(&mut client, &schema);
}
