//! Recurring jobs on Redis, as qless recurring jobs (`lua/recurring.lua`):
//! the schedule's hash `ql:r:<name>` and the queue's `-recur` zset, which
//! qless clients list (`recur.get`, the queue's `recurring` count) and fire
//! from their own pops (jobs `NAME-COUNT`, every `interval` seconds). dque
//! fires its own from its leases (jobs `NAME@TICK`); the recurring jobs
//! qless clients added are spawned by the script (`recur_spawn`: in its
//! pop and peek, as qless-core's, and at dque's firings; jobs
//! `NAME-COUNT`). Either way the score is moved on in the call that puts
//! the tick's job, so a tick fires once.
//!
//! A cron schedule's qless `interval` is the gap from its next tick to the
//! one after (written at each firing): a qless client firing it keeps to
//! the cron times while the gaps are equal (every hour, every day), and
//! the next dque firing puts it back on them.

use std::time::{Duration, SystemTime};

use ::redis::Value;

use super::core::{put_fields, Core, PutFields, Transport};
use super::encoding::{
    array_of, duration_seconds, encode_body, encode_headers, int_of, qless_priority, text_of,
};
use super::qless::QlessPut;
use crate::error::Result;
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::recurring::{Cadence, CatchUp, Schedule, ScheduleInfo};

/// The most jobs of qless clients' recurring jobs one firing spawns (the
/// rest at the next: a qless recurring job with no backlog spawns every
/// missed tick).
const SPAWN_AT_MOST: usize = 1000;

/// A tick as the zset's score: Unix seconds to the millisecond.
fn score(t: SystemTime) -> String {
    let ms = unix_ms(t);
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn time_of_score(text: &str) -> SystemTime {
    let seconds: f64 = text.parse().unwrap_or(0.0);
    from_unix_ms((seconds * 1000.0).round().max(0.0) as u64)
}

/// qless's `interval` (seconds) after tick `next`: the interval, or a
/// cron schedule's gap to the tick after `next`.
fn interval_after(schedule: &Schedule, next: SystemTime) -> String {
    let gap = match schedule.cadence() {
        Cadence::Every(every) => *every,
        Cadence::Cron(_) => schedule
            .tick_after(next)
            .ok()
            .and_then(|after| after.duration_since(next).ok())
            .unwrap_or(Duration::from_secs(60)),
    };
    duration_seconds(gap)
}

/// What places a schedule's ticks: a replaced schedule keeps its next run
/// while this is unchanged.
fn ticks_key(schedule: &Schedule) -> String {
    match schedule.cadence() {
        Cadence::Every(every) => format!("every {} {}", every.as_millis(), schedule.zone()),
        Cadence::Cron(expression) => format!("cron {expression} {}", schedule.zone()),
    }
}

/// A schedule listed: dque's own from its spec, a qless client's from
/// qless's fields (every `interval` seconds, its `backlog` as catch-up).
fn info_of(value: &Value) -> Result<ScheduleInfo> {
    let f: Vec<String> = array_of(value)?.iter().map(text_of).collect();
    let next_run = time_of_score(&f[1]);
    if !f[2].is_empty() {
        return Ok(ScheduleInfo {
            schedule: Schedule::from_json(&f[2])?,
            next_run,
        });
    }
    let interval: f64 = f[6].parse().unwrap_or(60.0);
    let backlog: u32 = f[7].parse::<f64>().unwrap_or(0.0) as u32;
    let priority: i64 = f[5].parse::<f64>().unwrap_or(0.0) as i64;
    let schedule = Schedule::every(f[0].clone(), Duration::from_secs_f64(interval.max(0.001)))
        .body(f[4].clone())
        .kind(f[3].clone())
        .priority(i32::try_from(-priority).unwrap_or(0))
        .catch_up(match backlog {
            0 => CatchUp::Missed(u32::MAX),
            n => CatchUp::Missed(n),
        });
    Ok(ScheduleInfo { schedule, next_run })
}

impl Core {
    pub(crate) async fn add_schedule(
        &self,
        t: &impl Transport,
        schedule: Schedule,
    ) -> Result<ScheduleInfo> {
        schedule.check()?;
        let first = schedule.first_tick(self.now())?;
        let (klass, _) = encode_headers(schedule.headers());
        let (data, _) = encode_body(schedule.body_bytes());
        let backlog = match schedule.catch_up_policy() {
            CatchUp::Latest | CatchUp::Skip => 1,
            CatchUp::Missed(n) => n,
        };
        let retries = u32::from(self.max_attempts).saturating_sub(1);
        let fields = [
            self.queue.clone(),
            schedule.name().to_owned(),
            klass,
            data,
            qless_priority(schedule.priority_value()).to_string(),
            interval_after(&schedule, first),
            retries.to_string(),
            backlog.to_string(),
            schedule.to_json(),
            ticks_key(&schedule),
            score(first),
        ];
        let args: Vec<&[u8]> = fields.iter().map(|f| f.as_bytes()).collect();
        let next = self.call(t, "recur_set", &args).await?;
        self.due_schedules.forget();
        Ok(ScheduleInfo {
            schedule,
            next_run: time_of_score(&text_of(&next)),
        })
    }

    pub(crate) async fn remove_schedule(&self, t: &impl Transport, name: &str) -> Result<bool> {
        let reply = self
            .call(t, "recur_del", &[self.queue.as_bytes(), name.as_bytes()])
            .await?;
        self.due_schedules.forget();
        Ok(int_of(&reply)? == 1)
    }

    pub(crate) async fn list_schedules(&self, t: &impl Transport) -> Result<Vec<ScheduleInfo>> {
        let mut listed: Vec<ScheduleInfo> = self
            .listed(t)
            .await?
            .into_iter()
            .map(|(info, _)| info)
            .collect();
        listed.sort_by(|a, b| a.schedule.name().cmp(b.schedule.name()));
        Ok(listed)
    }

    /// The queue's recurring jobs, each with whether it is dque's own (a
    /// schedule with a spec) rather than one a qless client added.
    async fn listed(&self, t: &impl Transport) -> Result<Vec<(ScheduleInfo, bool)>> {
        let reply = self.call(t, "recur_list", &[self.queue.as_bytes()]).await?;
        array_of(&reply)?
            .iter()
            .map(|value| {
                Ok((
                    info_of(value)?,
                    !array_of(value)?
                        .get(2)
                        .map(text_of)
                        .unwrap_or_default()
                        .is_empty(),
                ))
            })
            .collect()
    }

    /// Fires the schedules due at `now`; the number of jobs added.
    ///
    /// dque's own schedules are planned here (cron, time zones, catch-up)
    /// and fired by `recur_fire`; the recurring jobs qless clients added
    /// are spawned by the script (`recur_spawn`, as its pop does), so
    /// their jobs are `JID-COUNT` whoever fires them.
    pub(crate) async fn fire_due(&self, t: &impl Transport, now: SystemTime) -> Result<usize> {
        let schedules = self.listed(t).await?;
        let mut added = 0;
        let mut earliest: Option<SystemTime> = None;
        if schedules
            .iter()
            .any(|(info, ours)| !ours && info.next_run <= now)
        {
            let most = SPAWN_AT_MOST.to_string();
            let reply = self
                .call(t, "recur_spawn", &[self.queue.as_bytes(), most.as_bytes()])
                .await?;
            added += usize::try_from(int_of(&reply)?).unwrap_or(0);
            // Their next ticks moved in the script: looked at again soon.
            earliest = Some(now + Duration::from_secs(1));
        }
        for (info, ours) in &schedules {
            let s = &info.schedule;
            if !ours {
                if info.next_run > now {
                    earliest = Some(earliest.map_or(info.next_run, |e| e.min(info.next_run)));
                }
                continue;
            }
            let mut next = info.next_run;
            if let Some(plan) = s.plan(info.next_run, now)? {
                let mut fields = vec![
                    self.queue.clone().into_bytes(),
                    s.name().as_bytes().to_vec(),
                    score(info.next_run).into_bytes(),
                    score(plan.next).into_bytes(),
                    interval_after(s, plan.next).into_bytes(),
                ];
                let retries = u32::from(self.max_attempts).saturating_sub(1);
                for &tick in &plan.ticks {
                    let job = s.job_for(tick);
                    let id = job.id.clone().unwrap_or_default();
                    fields.extend(put_fields(PutFields {
                        id: &id,
                        job: &job,
                        extra: &QlessPut::default(),
                        made: false,
                        hold: job.hold(now),
                        delay: Duration::ZERO,
                        retries,
                    }));
                }
                let args: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
                let reply = self.call(t, "recur_fire", &args).await?;
                added += usize::try_from(int_of(&reply)?).unwrap_or(0);
                next = plan.next;
            }
            earliest = Some(earliest.map_or(next, |e| e.min(next)));
        }
        self.due_schedules.remember(earliest, unix_ms(now));
        Ok(added)
    }

    /// As [`fire_due`](Self::fire_due) for a lease: an error does not stop
    /// the lease (the schedules are tried again within a second).
    pub(crate) async fn fire_due_quietly(&self, t: &impl Transport) {
        let now = self.now();
        if !self.due_schedules.due(unix_ms(now)) {
            return;
        }
        // A paused queue's leases fire nothing (as qless-core's pop spawns
        // nothing): the first lease after the resume fires by the
        // catch-up policy.
        if self.is_paused(t).await.unwrap_or(false) {
            return;
        }
        if self.fire_due(t, now).await.is_err() {
            self.due_schedules.remember(None, unix_ms(now));
        }
    }
}
