//! Recurring jobs: a schedule (a cron expression or a fixed interval, in a
//! time zone) that enqueues a job at each of its ticks.
//!
//! Exactly one job per tick, however many processes fire schedules: the
//! job of a tick has the caller id `NAME@TICK` (the tick in UTC, to the
//! millisecond), and a schedule's next tick moves on with a
//! compare-and-set in the backend's store (a row update, a Lua script, a
//! file under its lock), which the job's enqueue is part of. No process is
//! "the scheduler": every lease fires the schedules that are due, and
//! when none is due that costs one comparison with a time kept in memory
//! (the store is read again at most once a second, to see schedules
//! other processes added).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde_json::{json, Value};

use super::clock::{from_unix_ms, unix_ms};
use super::job::{check_header, NewJob, MAX_JOB_ID_BYTES};
use crate::error::{Error, Result};

/// The header that names a job's kind (the runtime's and qless's `klass`).
const KIND: &str = "klass";

/// How long a handle trusts its memory of the next due time before it
/// reads the store again (to see schedules other processes added).
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// The longest schedule name: `NAME@` and a tick (24 bytes) must make a
/// job id.
pub const MAX_SCHEDULE_NAME_BYTES: usize = MAX_JOB_ID_BYTES - 25;

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    /// Every `Duration` (at least a millisecond), the first tick when the
    /// schedule is added (as qless's `recur` does).
    Every(Duration),
    /// A cron expression of 5 fields (minute hour day month weekday) or 6
    /// (seconds first), in the schedule's time zone.
    Cron(String),
}

/// What a schedule does with the ticks it missed while no worker fired it
/// (every process down, or none leasing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// One job, for the latest tick that passed (the default).
    #[default]
    Latest,
    /// Nothing for missed ticks: when more than one tick passed unfired,
    /// none of them runs and the schedule waits for its next tick.
    Skip,
    /// A job for each missed tick, at most this many (the latest ones).
    Missed(u32),
}

/// A recurring job: a name (unique in its queue), when it ticks, and the
/// job it enqueues at each tick.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::{CatchUp, Schedule};
///
/// let nightly = Schedule::cron("nightly-report", "0 3 * * *")
///     .time_zone("Europe/Paris")
///     .body("build the report")
///     .kind("reports.Nightly")
///     .priority(5)
///     .catch_up(CatchUp::Missed(3));
/// let heartbeat = Schedule::every("heartbeat", Duration::from_secs(30)).body("ping");
/// assert_eq!(nightly.name(), "nightly-report");
/// assert_eq!(heartbeat.zone(), "UTC");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    name: String,
    cadence: Cadence,
    zone: String,
    body: Vec<u8>,
    priority: i32,
    headers: Vec<(String, String)>,
    catch_up: CatchUp,
}

/// A schedule as stored, with its next tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The schedule.
    pub schedule: Schedule,
    /// When its next job is due (a time passed: due at the next lease).
    pub next_run: SystemTime,
}

impl Schedule {
    /// A schedule ticking every `interval`, first when it is added.
    pub fn every(name: impl Into<String>, interval: Duration) -> Self {
        Self::with(name.into(), Cadence::Every(interval))
    }

    /// A schedule ticking at the times of cron expression `expression` (5
    /// fields, or 6 with seconds first), in UTC unless
    /// [`time_zone`](Self::time_zone) says otherwise.
    pub fn cron(name: impl Into<String>, expression: impl Into<String>) -> Self {
        Self::with(name.into(), Cadence::Cron(expression.into()))
    }

    fn with(name: String, cadence: Cadence) -> Self {
        Schedule {
            name,
            cadence,
            zone: "UTC".to_owned(),
            body: Vec::new(),
            priority: 0,
            headers: Vec::new(),
            catch_up: CatchUp::Latest,
        }
    }

    /// Sets the IANA time zone a cron expression is read in (default
    /// `UTC`): `0 9 * * *` in `Europe/Paris` is 9:00 in Paris, summer and
    /// winter.
    #[must_use]
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = zone.into();
        self
    }

    /// Sets the body of each job.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets each job's priority (default 0; smaller runs first).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Adds header `name=value` to each job (a name given twice keeps the
    /// last value).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    /// Sets the jobs' kind: the `klass` header, which the worker runtime
    /// and qless clients dispatch on.
    #[must_use]
    pub fn kind(self, kind: impl Into<String>) -> Self {
        self.header(KIND, kind)
    }

    /// Sets what happens to ticks missed while no worker ran (default
    /// [`CatchUp::Latest`]).
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When it ticks.
    pub fn cadence(&self) -> &Cadence {
        &self.cadence
    }

    /// Its time zone's IANA name.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// The body of its jobs.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// The priority of its jobs.
    pub fn priority_value(&self) -> i32 {
        self.priority
    }

    /// The headers of its jobs, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// Its catch-up policy.
    pub fn catch_up_policy(&self) -> CatchUp {
        self.catch_up
    }

    /// Checks the schedule without a queue (what
    /// [`JobQueue::schedule`](super::JobQueue::schedule) checks first), so
    /// that a tool can refuse bad input before it opens or makes one.
    ///
    /// ```
    /// use dque::jobs::Schedule;
    /// assert!(Schedule::cron("r", "0 9 * * *").time_zone("Europe/Paris").check().is_ok());
    /// assert!(Schedule::cron("r", "61 * * * *").check().is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidJob` unless the name, cadence, zone, catch-up policy and
    /// headers are usable; its text says what to change.
    pub fn check(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidJob { reason });
        if self.name.is_empty()
            || self.name.len() > MAX_SCHEDULE_NAME_BYTES
            || self.name.chars().any(char::is_control)
        {
            return invalid(format!(
                "schedule name {:?}: use 1 to {MAX_SCHEDULE_NAME_BYTES} bytes without control \
                 characters",
                self.name
            ));
        }
        self.zone_tz()?;
        match &self.cadence {
            Cadence::Every(every) if every.as_millis() == 0 => {
                return invalid("an interval of at least 1ms is needed".to_owned())
            }
            Cadence::Every(_) => {}
            Cadence::Cron(expression) => {
                parse_cron(expression)?;
            }
        }
        if self.catch_up == CatchUp::Missed(0) {
            return invalid("CatchUp::Missed(0) runs nothing: use CatchUp::Skip".to_owned());
        }
        for (name, value) in &self.headers {
            check_header(name, value)?;
        }
        // Its jobs' timeout, refused now rather than at every tick.
        super::job::check_timeout_header(&self.headers)?;
        Ok(())
    }

    fn zone_tz(&self) -> Result<Tz> {
        self.zone.parse::<Tz>().map_err(|_| Error::InvalidJob {
            reason: format!(
                "unknown time zone {:?}: use an IANA name such as UTC or Europe/Paris",
                self.zone
            ),
        })
    }

    /// The first tick of a schedule added at `now`: `now` for an interval
    /// (qless's recur fires at once), the first cron time after `now`.
    pub(crate) fn first_tick(&self, now: SystemTime) -> Result<SystemTime> {
        match &self.cadence {
            Cadence::Every(_) => Ok(from_unix_ms(unix_ms(now))),
            Cadence::Cron(_) => self.tick_after(now),
        }
    }

    /// The first tick strictly after `t`.
    pub(crate) fn tick_after(&self, t: SystemTime) -> Result<SystemTime> {
        match &self.cadence {
            Cadence::Every(every) => Ok(from_unix_ms(unix_ms(t) + every_ms(*every))),
            Cadence::Cron(expression) => cron_after(
                &parse_cron(expression)?,
                self.zone_tz()?,
                unix_ms(t),
                expression,
            ),
        }
    }

    /// Whether the tick of this schedule's cadence and zone (the parts that
    /// place its ticks) are those of `other`.
    pub(crate) fn same_ticks(&self, other: &Schedule) -> bool {
        self.cadence == other.cadence && self.zone == other.zone
    }

    /// The job for the tick at `tick`: id `NAME@TICK`, due at the tick.
    pub(crate) fn job_for(&self, tick: SystemTime) -> NewJob {
        let mut job = NewJob::new(self.body.clone())
            .priority(self.priority)
            .id(tick_id(&self.name, tick))
            .at(tick);
        for (name, value) in &self.headers {
            job = job.header(name.clone(), value.clone());
        }
        job
    }

    /// How long the jobs of `firing`, enqueued at `now`, hold their ids
    /// (in every state) so that no later firing plans their ticks again:
    /// until the tick by which the catch-up policy has dropped them (the
    /// N-th tick after the last, N = 1 unless [`CatchUp::Missed`]). A
    /// store whose enqueue and next-tick write are not one step (the
    /// embedded queue: two files) fires a tick again after a failure or
    /// a crash between them, and the caller id alone dedupes only while
    /// the first job waits.
    pub(crate) fn refire_hold(&self, firing: &Firing, now: SystemTime) -> Result<Duration> {
        const STEPS: u32 = 64;
        let Some(&last) = firing.ticks.last() else {
            return Ok(Duration::ZERO);
        };
        let n = match self.catch_up {
            CatchUp::Missed(max) => max.max(1),
            CatchUp::Latest | CatchUp::Skip => 1,
        };
        let dropped_ms = match &self.cadence {
            Cadence::Every(every) => {
                unix_ms(last).saturating_add(u64::from(n).saturating_mul(every_ms(*every)))
            }
            Cadence::Cron(_) => {
                // A few ticks found; beyond them the widest gap seen.
                let (mut t, mut widest) = (unix_ms(last), 0);
                for _ in 0..n.min(STEPS) {
                    let next = unix_ms(self.tick_after(from_unix_ms(t))?);
                    widest = widest.max(next - t);
                    t = next;
                }
                t.saturating_add(u64::from(n.saturating_sub(STEPS)).saturating_mul(widest))
            }
        };
        Ok(Duration::from_millis(
            dropped_ms.saturating_sub(unix_ms(now)).max(1),
        ))
    }

    /// The schedule as JSON (how the stores keep it).
    pub(crate) fn to_json(&self) -> String {
        let (kind, value) = match &self.cadence {
            Cadence::Every(every) => ("every_ms", json!(every_ms(*every))),
            Cadence::Cron(expression) => ("cron", json!(expression)),
        };
        let catch_up = match self.catch_up {
            CatchUp::Latest => json!("latest"),
            CatchUp::Skip => json!("skip"),
            CatchUp::Missed(n) => json!(n),
        };
        let body = match std::str::from_utf8(&self.body) {
            Ok(text) => json!({ "text": text }),
            Err(_) => json!({ "bytes": self.body }),
        };
        json!({
            "name": self.name,
            kind: value,
            "zone": self.zone,
            "body": body,
            "priority": self.priority,
            "headers": self.headers,
            "catch_up": catch_up,
        })
        .to_string()
    }

    /// A schedule from [`to_json`](Self::to_json)'s text.
    pub(crate) fn from_json(text: &str) -> Result<Schedule> {
        let bad = || Error::Backend {
            backend: "schedules",
            reason: format!("a stored schedule is not readable: {text:?}"),
        };
        let v: Value = serde_json::from_str(text).map_err(|_| bad())?;
        let cadence = if let Some(ms) = v["every_ms"].as_u64() {
            Cadence::Every(Duration::from_millis(ms))
        } else {
            Cadence::Cron(v["cron"].as_str().ok_or_else(bad)?.to_owned())
        };
        let body = if let Some(text) = v["body"]["text"].as_str() {
            text.as_bytes().to_vec()
        } else {
            serde_json::from_value(v["body"]["bytes"].clone()).map_err(|_| bad())?
        };
        let catch_up = match &v["catch_up"] {
            Value::String(s) if s == "skip" => CatchUp::Skip,
            Value::Number(n) => CatchUp::Missed(n.as_u64().unwrap_or(1) as u32),
            _ => CatchUp::Latest,
        };
        Ok(Schedule {
            name: v["name"].as_str().ok_or_else(bad)?.to_owned(),
            cadence,
            zone: v["zone"].as_str().unwrap_or("UTC").to_owned(),
            body,
            priority: v["priority"].as_i64().unwrap_or(0) as i32,
            headers: serde_json::from_value(v["headers"].clone()).map_err(|_| bad())?,
            catch_up,
        })
    }

    /// What firing this schedule, whose next tick is `next`, does at
    /// `now`: `None` if it is not due; else the ticks to enqueue (oldest
    /// first; none when skipped) and the next tick after them.
    pub(crate) fn plan(&self, next: SystemTime, now: SystemTime) -> Result<Option<Firing>> {
        if next > now {
            return Ok(None);
        }
        let last = self.last_tick_at_or_before(next, now)?;
        let following = self.tick_after(last)?;
        let ticks = match self.catch_up {
            CatchUp::Latest => vec![last],
            CatchUp::Skip if last == next => vec![last],
            CatchUp::Skip => Vec::new(),
            CatchUp::Missed(max) => self.ticks_back(next, last, max)?,
        };
        Ok(Some(Firing {
            ticks,
            next: following,
        }))
    }

    /// The last tick at or before `now`, given that `next` (≤ `now`) is one.
    fn last_tick_at_or_before(&self, next: SystemTime, now: SystemTime) -> Result<SystemTime> {
        match &self.cadence {
            Cadence::Every(every) => {
                let (next, now, every) = (unix_ms(next), unix_ms(now), every_ms(*every));
                Ok(from_unix_ms(next + (now - next) / every * every))
            }
            Cadence::Cron(expression) => {
                let cron = parse_cron(expression)?;
                let last = cron_last_between(
                    &cron,
                    self.zone_tz()?,
                    unix_ms(next),
                    unix_ms(now),
                    expression,
                )?;
                Ok(last.map_or(next, from_unix_ms).max(next))
            }
        }
    }

    /// Up to `max` ticks from `first` to `last`, the latest ones, oldest
    /// first.
    fn ticks_back(&self, first: SystemTime, last: SystemTime, max: u32) -> Result<Vec<SystemTime>> {
        let mut ticks = vec![last];
        match &self.cadence {
            Cadence::Every(every) => {
                let every = every_ms(*every);
                let mut t = unix_ms(last);
                while ticks.len() < max as usize && t >= unix_ms(first) + every {
                    t -= every;
                    ticks.push(from_unix_ms(t));
                }
            }
            Cadence::Cron(expression) => {
                let cron = parse_cron(expression)?;
                let tz = self.zone_tz()?;
                let mut t = unix_ms(last);
                while ticks.len() < max as usize && t > unix_ms(first) {
                    match cron_last_between(&cron, tz, unix_ms(first), t - 1, expression)? {
                        Some(before) => {
                            ticks.push(from_unix_ms(before));
                            t = before;
                        }
                        None => break,
                    }
                }
            }
        }
        ticks.reverse();
        Ok(ticks)
    }
}

/// What one firing of a due schedule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Firing {
    /// The ticks whose jobs to enqueue, oldest first.
    pub ticks: Vec<SystemTime>,
    /// The schedule's next tick after them.
    pub next: SystemTime,
}

/// The caller id of the job of `name`'s tick at `tick`: `NAME@TICK`.
pub fn tick_id(name: &str, tick: SystemTime) -> String {
    format!("{name}@{}", utc(tick).format("%Y-%m-%dT%H:%M:%S%.3fZ"))
}

fn every_ms(every: Duration) -> u64 {
    u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn utc(t: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(t)
}

fn parse_cron(expression: &str) -> Result<Cron> {
    let fields = expression.split_whitespace().count();
    let invalid = |why: String| Error::InvalidJob {
        reason: format!(
            "cron expression {expression:?}: {why}; use 5 fields (minute hour day month weekday) \
             or 6 (seconds first), e.g. \"*/5 * * * *\""
        ),
    };
    if !(5..=6).contains(&fields) {
        return Err(invalid(format!("{fields} fields")));
    }
    Cron::new(expression)
        .with_seconds_optional()
        .parse()
        .map_err(|e| invalid(e.to_string()))
}

/// The first tick of `cron` in `tz` strictly after Unix millisecond `ms`
/// (ticks are whole seconds).
fn cron_after(cron: &Cron, tz: Tz, ms: u64, expression: &str) -> Result<SystemTime> {
    let seconds = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    let at = tz
        .timestamp_opt(seconds, 0)
        .single()
        .ok_or_else(|| Error::InvalidJob {
            reason: format!("a time out of range for cron expression {expression:?}"),
        })?;
    let next = cron
        .find_next_occurrence(&at, false)
        .map_err(|e| Error::InvalidJob {
            reason: format!(
                "cron expression {expression:?} has no next time ({e}): fix the expression"
            ),
        })?;
    Ok(from_unix_ms(
        u64::try_from(next.timestamp_millis()).unwrap_or(0),
    ))
}

/// The last tick of `cron` in `tz` from `floor_ms` to `now_ms` (Unix
/// milliseconds, both included), if any. croner searches forward only:
/// the search starts a second before `now_ms` and doubles its reach back
/// until it finds a tick or passes `floor_ms`, so it costs a few dozen
/// searches whatever the gap, not one per tick missed.
fn cron_last_between(
    cron: &Cron,
    tz: Tz,
    floor_ms: u64,
    now_ms: u64,
    expression: &str,
) -> Result<Option<u64>> {
    if now_ms < floor_ms {
        return Ok(None);
    }
    let mut reach: u64 = 1_000;
    loop {
        let from = now_ms.saturating_sub(reach);
        let covered = from < floor_ms;
        // Strictly after `from`; from just below the floor when it is passed.
        let start = if covered {
            floor_ms.saturating_sub(1)
        } else {
            from
        };
        let first = unix_ms(cron_after(cron, tz, start, expression)?);
        if first <= now_ms {
            // No tick after `now_ms - reach / 2` (the last reach found none):
            // few steps from here.
            let mut last = first;
            loop {
                let next = unix_ms(cron_after(cron, tz, last, expression)?);
                if next > now_ms {
                    return Ok(Some(last));
                }
                last = next;
            }
        }
        if covered || (floor_ms == 0 && from == 0) {
            return Ok(None);
        }
        reach = reach.saturating_mul(2);
    }
}

const NEVER: u64 = u64::MAX;

/// A handle's memory of when its schedules may next need firing: a time
/// in milliseconds, read with one atomic load on every lease.
#[derive(Debug, Default)]
pub(crate) struct DueCache {
    check_at_ms: AtomicU64,
}

impl DueCache {
    /// Whether a lease at `now_ms` should look at the schedules: the time
    /// remembered has come, or it lies more than [`REFRESH`] ahead (the
    /// clock went back since: a stale time must not hide schedules other
    /// processes add).
    #[inline]
    pub fn due(&self, now_ms: u64) -> bool {
        let at = self.check_at_ms.load(Ordering::Relaxed);
        now_ms >= at || (at != NEVER && at - now_ms > REFRESH.as_millis() as u64)
    }

    /// Never due: a queue that cannot hold schedules (a plain FIFO).
    pub fn never(&self) {
        self.check_at_ms.store(NEVER, Ordering::Relaxed);
    }

    /// Remembers the earliest next tick (`None`: no schedule), looked at
    /// again at the latest [`REFRESH`] after `now_ms`.
    pub fn remember(&self, earliest: Option<SystemTime>, now_ms: u64) {
        let refresh = now_ms.saturating_add(REFRESH.as_millis() as u64);
        let at = earliest.map_or(refresh, |t| unix_ms(t).min(refresh));
        self.check_at_ms.store(at, Ordering::Relaxed);
    }

    /// Forgets: the next lease reads the store (a schedule was changed).
    pub fn forget(&self) {
        self.check_at_ms.store(0, Ordering::Relaxed);
    }
}

/// The next run to store for `schedule` added at `now`, given the one it
/// replaces (kept if its ticks are placed the same way, so a program that
/// declares its schedules at every start neither fires one twice nor
/// moves it).
pub(crate) fn next_run_for(
    schedule: &Schedule,
    replaced: Option<(&Schedule, SystemTime)>,
    now: SystemTime,
) -> Result<SystemTime> {
    match replaced {
        Some((old, next)) if old.same_ticks(schedule) => Ok(next),
        _ => schedule.first_tick(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(text: &str) -> SystemTime {
        DateTime::parse_from_rfc3339(text).unwrap().into()
    }

    #[test]
    fn every_ticks_from_its_start_and_catches_up_by_policy() {
        let s = Schedule::every("s", Duration::from_secs(10));
        let next = at("2026-01-01T00:00:00Z");
        assert_eq!(s.plan(next, next - Duration::from_millis(1)).unwrap(), None);
        let f = s.plan(next, at("2026-01-01T00:00:35Z")).unwrap().unwrap();
        assert_eq!(f.ticks, [at("2026-01-01T00:00:30Z")]);
        assert_eq!(f.next, at("2026-01-01T00:00:40Z"));
        let s = s.catch_up(CatchUp::Missed(2));
        let f = s.plan(next, at("2026-01-01T00:00:35Z")).unwrap().unwrap();
        assert_eq!(
            f.ticks,
            [at("2026-01-01T00:00:20Z"), at("2026-01-01T00:00:30Z")]
        );
        let s = s.catch_up(CatchUp::Missed(100));
        assert_eq!(
            s.plan(next, at("2026-01-01T00:00:35Z"))
                .unwrap()
                .unwrap()
                .ticks
                .len(),
            4
        );
        let s = s.catch_up(CatchUp::Skip);
        assert!(s
            .plan(next, at("2026-01-01T00:00:35Z"))
            .unwrap()
            .unwrap()
            .ticks
            .is_empty());
        assert_eq!(
            s.plan(next, at("2026-01-01T00:00:05Z"))
                .unwrap()
                .unwrap()
                .ticks,
            [next]
        );
    }

    #[test]
    fn cron_ticks_in_its_time_zone_across_summer_time() {
        let s = Schedule::cron("r", "0 9 * * *").time_zone("Europe/Paris");
        // 9:00 in Paris is 8:00 UTC in winter, 7:00 UTC in summer.
        assert_eq!(
            s.tick_after(at("2026-01-10T12:00:00Z")).unwrap(),
            at("2026-01-11T08:00:00Z")
        );
        assert_eq!(
            s.tick_after(at("2026-07-10T12:00:00Z")).unwrap(),
            at("2026-07-11T07:00:00Z")
        );
        let six = Schedule::cron("r", "*/15 * * * * *");
        assert_eq!(
            six.tick_after(at("2026-01-01T00:00:01Z")).unwrap(),
            at("2026-01-01T00:00:15Z")
        );
        let f = Schedule::cron("r", "0 * * * *")
            .catch_up(CatchUp::Missed(3))
            .plan(at("2026-01-01T01:00:00Z"), at("2026-01-01T05:30:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(
            f.ticks,
            [
                at("2026-01-01T03:00:00Z"),
                at("2026-01-01T04:00:00Z"),
                at("2026-01-01T05:00:00Z")
            ]
        );
        assert_eq!(f.next, at("2026-01-01T06:00:00Z"));
    }

    #[test]
    fn the_due_time_is_looked_at_again_when_the_clock_goes_back() {
        // A remembered time more than REFRESH ahead of the clock (set back
        // since) would otherwise hide other processes' schedules until the
        // clock caught up.
        let cache = DueCache::default();
        assert!(cache.due(5_000), "a new handle looks at once");
        cache.remember(None, 10_000);
        assert!(!cache.due(10_999));
        assert!(cache.due(11_000));
        cache.remember(Some(UNIX_EPOCH + Duration::from_millis(10_500)), 10_000);
        assert!(!cache.due(10_499) && cache.due(10_500));
        assert!(cache.due(2_000), "the clock went back an hour's worth");
        cache.never();
        assert!(!cache.due(0) && !cache.due(u64::MAX - 1));
        cache.forget();
        assert!(cache.due(0));
    }

    #[test]
    fn the_last_missed_cron_ticks_are_found_whatever_the_gap() {
        let daily = Schedule::cron("d", "0 3 * * *").time_zone("America/New_York");
        let next = at("2026-03-01T08:00:00Z"); // 3:00 in New York (EST)
        let f = daily
            .clone()
            .catch_up(CatchUp::Missed(3))
            .plan(next, at("2026-03-20T06:59:59Z"))
            .unwrap()
            .unwrap();
        // EDT from March 8: 3:00 is 7:00 UTC; the 20th's is not due yet.
        assert_eq!(
            f.ticks,
            [
                at("2026-03-17T07:00:00Z"),
                at("2026-03-18T07:00:00Z"),
                at("2026-03-19T07:00:00Z")
            ]
        );
        assert_eq!(f.next, at("2026-03-20T07:00:00Z"));
        // Every second, a year missed: the latest only, found at once.
        let f = Schedule::cron("s", "* * * * * *")
            .plan(at("2025-01-01T00:00:00Z"), at("2026-01-01T00:00:00.250Z"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (f.ticks, f.next),
            (vec![at("2026-01-01T00:00:00Z")], at("2026-01-01T00:00:01Z"))
        );
        // The tick itself is due at its time, not before.
        let f = daily.plan(next, next).unwrap().unwrap();
        assert_eq!(f.ticks, [next]);
        assert_eq!(
            daily.plan(next, next - Duration::from_millis(1)).unwrap(),
            None
        );
    }

    #[test]
    fn a_fired_ticks_hold_lasts_until_its_catch_up_drops_it() {
        // Pins the embedded queue's re-fired tick (a failure between the
        // enqueue and the schedules file's write): the hold must last
        // until no later firing can plan the tick again.
        let now = at("2026-01-01T00:00:35Z");
        let every = Schedule::every("e", Duration::from_secs(10));
        for (policy, until) in [
            (CatchUp::Latest, "2026-01-01T00:00:40Z"),
            (CatchUp::Missed(3), "2026-01-01T00:01:00Z"),
        ] {
            let s = every.clone().catch_up(policy);
            let firing = s.plan(at("2026-01-01T00:00:00Z"), now).unwrap().unwrap();
            let hold = s.refire_hold(&firing, now).unwrap();
            assert_eq!(now + hold, at(until), "{policy:?}");
            // Re-planned just before then, the last fired tick is in again;
            // from then on, it is not.
            let last = *firing.ticks.last().unwrap();
            let before = s.plan(
                at("2026-01-01T00:00:00Z"),
                now + hold - Duration::from_millis(1),
            );
            assert!(before.unwrap().unwrap().ticks.contains(&last), "{policy:?}");
            let after = s.plan(at("2026-01-01T00:00:00Z"), now + hold);
            assert!(!after.unwrap().unwrap().ticks.contains(&last), "{policy:?}");
        }
        let monthly = Schedule::cron("m", "0 0 31 * *").catch_up(CatchUp::Missed(100));
        let firing = monthly
            .plan(at("2026-01-31T00:00:00Z"), at("2026-02-01T00:00:00Z"))
            .unwrap()
            .unwrap();
        let hold = monthly
            .refire_hold(&firing, at("2026-02-01T00:00:00Z"))
            .unwrap();
        assert!(hold > Duration::from_secs(100 * 31 * 86_400), "{hold:?}");
    }

    #[test]
    fn cron_ticks_in_a_summer_time_gap_or_overlap_fire_once() {
        // 2:30 does not exist in New York on 2026-03-08 and happens twice
        // on 2026-11-01: a daily 2:30 must still tick once a day, never
        // stop nor fire twice.
        let s = Schedule::cron("d", "30 2 * * *").time_zone("America/New_York");
        for (from, to) in [
            ("2026-03-07T12:00:00Z", "2026-03-10T12:00:00Z"),
            ("2026-10-31T12:00:00Z", "2026-11-03T12:00:00Z"),
        ] {
            let mut t = at(from);
            let mut ticks = Vec::new();
            loop {
                t = s.tick_after(t).unwrap();
                if t > at(to) {
                    break;
                }
                ticks.push(utc(t).to_rfc3339());
            }
            assert_eq!(ticks.len(), 3, "{ticks:?}");
        }
    }

    #[test]
    fn bad_schedules_are_refused() {
        for bad in [
            Schedule::cron("x", "* * *"),
            Schedule::cron("x", "61 * * * *"),
            Schedule::cron("x", "* * * * * * *"),
            Schedule::every("x", Duration::ZERO),
            Schedule::every("x", Duration::from_secs(1)).time_zone("Mars/Olympus"),
            Schedule::every("", Duration::from_secs(1)),
            Schedule::every("x".repeat(76), Duration::from_secs(1)),
            Schedule::every("x", Duration::from_secs(1)).header("bad name", "v"),
            Schedule::every("x", Duration::from_secs(1)).catch_up(CatchUp::Missed(0)),
        ] {
            assert!(
                matches!(bad.check(), Err(Error::InvalidJob { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn json_round_trips_and_tick_ids_are_utc_millis() {
        let s = Schedule::cron("n", "0 3 * * *")
            .time_zone("Asia/Tokyo")
            .body(vec![0xff, 0])
            .kind("k")
            .priority(-3)
            .catch_up(CatchUp::Missed(7));
        assert_eq!(Schedule::from_json(&s.to_json()).unwrap(), s);
        let e = Schedule::every("e", Duration::from_millis(500))
            .body("text")
            .catch_up(CatchUp::Skip);
        assert_eq!(Schedule::from_json(&e.to_json()).unwrap(), e);
        let tick = UNIX_EPOCH + Duration::from_millis(1_800_000_000_500);
        assert_eq!(tick_id("n", tick), "n@2027-01-15T08:00:00.500Z");
        assert!(tick_id(&"x".repeat(MAX_SCHEDULE_NAME_BYTES), tick).len() <= MAX_JOB_ID_BYTES);
    }
}
