//! Recurring jobs on PostgreSQL: table `schedules` (one row a schedule:
//! the queue's number, the name, the schedule as JSON, what places its
//! ticks, and the next tick in Unix ms). Firing a due schedule is one
//! statement: the row's next tick moves on only if it still holds the
//! value read (a compare-and-set), and the jobs of the fired ticks are
//! inserted (caller ids `NAME@TICK`) in the same statement, so two
//! workers firing at once add one job per tick.

use std::time::SystemTime;

use postgres::types::ToSql;
use postgres::Row;

use super::errors::{db, sent};
use super::{ms, Db, PgJobs, Tables, CHANNEL};
use crate::error::Result;
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::recurring::{Cadence, Schedule, ScheduleInfo};

/// The schema migration that adds the table (appended to the list).
pub(super) const MIGRATION: &str = "CREATE TABLE {s}.schedules (
        qno integer NOT NULL,
        name text NOT NULL,
        spec text NOT NULL,
        ticks text NOT NULL,
        next_at bigint NOT NULL,
        PRIMARY KEY (qno, name)
    );";

fn table(tables: &Tables) -> String {
    // `jobs` is `"schema".jobs`: the same schema.
    let schema = tables.jobs.strip_suffix(".jobs").unwrap_or("public");
    format!("{schema}.schedules")
}

/// The statements, their text made from the tables' names.
pub(super) struct Sql {
    /// `$1` qno, `$2` name, `$3` spec, `$4` ticks, `$5` next if new or
    /// its ticks changed: the next run kept.
    pub upsert: String,
    pub delete: String,
    pub list: String,
    /// See [`Firing`]'s parameters.
    pub fire: String,
}

impl Sql {
    pub fn new(tables: &Tables) -> Sql {
        let schedules = table(tables);
        let jobs = &tables.jobs;
        Sql {
            upsert: format!(
                "INSERT INTO {schedules} AS s (qno, name, spec, ticks, next_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (qno, name) DO UPDATE SET spec = EXCLUDED.spec,
                     ticks = EXCLUDED.ticks,
                     next_at = CASE WHEN s.ticks = EXCLUDED.ticks THEN s.next_at
                                    ELSE EXCLUDED.next_at END
                 RETURNING next_at"
            ),
            delete: format!("DELETE FROM {schedules} WHERE qno = $1 AND name = $2"),
            list: format!("SELECT spec, next_at FROM {schedules} WHERE qno = $1 ORDER BY name"),
            fire: format!(
                "WITH moved AS (
                     UPDATE {schedules} SET next_at = $3
                     WHERE qno = $1 AND name = $2 AND next_at = $4 RETURNING 1),
                 added AS (
                     INSERT INTO {jobs} (qno, id, caller_id, priority, body, header_names,
                                         header_values, enqueued_at, ready_at)
                     SELECT $1, id, true, $7, $8, $9::text[], $10::text[], $11, ready
                     FROM moved, unnest($5::text[], $6::bigint[]) WITH ORDINALITY
                          AS t(id, ready, n)
                     ORDER BY n
                     ON CONFLICT (qno, id) WHERE state < 2 DO NOTHING
                     RETURNING id, qno){counted}
                 SELECT count(*) FROM added CROSS JOIN (SELECT pg_notify($12, $13)) AS told",
                counted = super::counts::counted_rows(
                    tables.counts.as_deref(),
                    "added",
                    super::counts::ADDED
                ),
            ),
        }
    }
}

/// What places a schedule's ticks: a replaced schedule keeps its next run
/// while this is unchanged.
pub(super) fn ticks_key(schedule: &Schedule) -> String {
    match schedule.cadence() {
        Cadence::Every(every) => format!("every {} {}", every.as_millis(), schedule.zone()),
        Cadence::Cron(expression) => format!("cron {expression} {}", schedule.zone()),
    }
}

pub(super) fn info_of(row: &Row) -> Result<ScheduleInfo> {
    let spec: String = row.get(0);
    let next: i64 = row.get(1);
    Ok(ScheduleInfo {
        schedule: Schedule::from_json(&spec)?,
        next_run: from_unix_ms(next.max(0) as u64),
    })
}

/// The parameters of one firing of a due schedule.
pub(super) struct Firing {
    pub name: String,
    pub next: i64,
    pub expected: i64,
    pub ids: Vec<String>,
    pub ready: Vec<i64>,
    pub priority: i32,
    pub body: Vec<u8>,
    pub names: Option<Vec<String>>,
    pub values: Option<Vec<String>>,
}

impl Firing {
    /// The firings of `schedules` due at `now`, and the earliest next run
    /// as it will be once they are done.
    pub fn plan(
        schedules: &[ScheduleInfo],
        now: SystemTime,
    ) -> Result<(Vec<Firing>, Option<SystemTime>)> {
        let mut firings = Vec::new();
        let mut earliest: Option<SystemTime> = None;
        for info in schedules {
            let s = &info.schedule;
            let next = match s.plan(info.next_run, now)? {
                None => info.next_run,
                Some(plan) => {
                    let headers = s.headers();
                    let (names, values) = if headers.is_empty() {
                        (None, None)
                    } else {
                        (
                            Some(headers.iter().map(|(n, _)| n.clone()).collect()),
                            Some(headers.iter().map(|(_, v)| v.clone()).collect()),
                        )
                    };
                    firings.push(Firing {
                        name: s.name().to_owned(),
                        next: ms(plan.next),
                        expected: ms(info.next_run),
                        ids: plan
                            .ticks
                            .iter()
                            .map(|&t| crate::jobs::recurring::tick_id(s.name(), t))
                            .collect(),
                        ready: plan.ticks.iter().map(|&t| ms(t)).collect(),
                        priority: s.priority_value(),
                        body: s.body_bytes().to_vec(),
                        names,
                        values,
                    });
                    plan.next
                }
            };
            earliest = Some(earliest.map_or(next, |e| e.min(next)));
        }
        Ok((firings, earliest))
    }

    /// The statement's parameters, given the queue's number and name and
    /// the time.
    pub fn params<'a>(
        &'a self,
        qno: &'a i32,
        now: &'a i64,
        queue: &'a String,
    ) -> [&'a (dyn ToSql + Sync); 13] {
        [
            qno,
            &self.name,
            &self.next,
            &self.expected,
            &self.ids,
            &self.ready,
            &self.priority,
            &self.body,
            &self.names,
            &self.values,
            now,
            &CHANNEL,
            queue,
        ]
    }
}

impl PgJobs {
    pub(super) fn add_schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        schedule.check()?;
        let sql = Sql::new(&self.tables);
        let first = ms(schedule.first_tick(self.now())?);
        let row = self
            .client()?
            .query_one(
                &sql.upsert,
                &[
                    &self.qno,
                    &schedule.name().to_owned(),
                    &schedule.to_json(),
                    &ticks_key(&schedule),
                    &first,
                ],
            )
            .map_err(sent)?;
        self.due_schedules.forget();
        let next: i64 = row.get(0);
        Ok(ScheduleInfo {
            schedule,
            next_run: from_unix_ms(next.max(0) as u64),
        })
    }

    pub(super) fn remove_schedule(&self, name: &str) -> Result<bool> {
        let sql = Sql::new(&self.tables);
        let n = self
            .client()?
            .execute(&sql.delete, &[&self.qno, &name.to_owned()])
            .map_err(sent)?;
        self.due_schedules.forget();
        Ok(n > 0)
    }

    pub(super) fn list_schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let sql = Sql::new(&self.tables);
        let rows = self.client()?.query(&sql.list, &[&self.qno]).map_err(db)?;
        rows.iter().map(info_of).collect()
    }

    /// Fires the schedules due at `now`; the number of jobs added.
    pub(super) fn fire_due(&self, now: SystemTime) -> Result<usize> {
        let now_ms = unix_ms(now);
        let schedules = self.list_schedules()?;
        let (firings, earliest) = Firing::plan(&schedules, now)?;
        let sql = Sql::new(&self.tables);
        let mut added = 0;
        for firing in &firings {
            let row = self
                .client()?
                .query_one(&sql.fire, &firing.params(&self.qno, &ms(now), &self.queue))
                .map_err(sent)?;
            added += row.get::<_, i64>(0) as usize;
        }
        self.due_schedules.remember(earliest, now_ms);
        Ok(added)
    }

    /// As [`fire_due`](Self::fire_due) for a lease: an error does not stop
    /// the lease (the schedules are tried again within a second).
    pub(super) fn fire_due_quietly(&self, now: SystemTime) {
        if self.fire_due(now).is_err() {
            self.due_schedules.remember(None, unix_ms(now));
        }
    }
}
