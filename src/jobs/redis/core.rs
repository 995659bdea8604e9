//! What a Redis handle is and does, written once for the blocking handle
//! ([`RedisJobs`](super::RedisJobs)) and the async one (`AsyncRedisJobs`):
//! [`Core`] holds the handle's state and runs the contract's calls as
//! async functions over a [`Transport`], the one place that talks to the
//! server. The blocking transport answers at once (its futures are ready
//! when made), so the blocking handle drives them with [`ready`], with no
//! runtime; the async one sends on redis-rs's multiplexed connection.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ::redis::Value;
use parking_lot::Mutex;

use super::encoding::{
    array_of, duration_seconds, encode_body, encode_headers, int_of, qless_priority, text_of,
    JobReply,
};
use super::qless::QlessPut;
use super::{glob_escape, timing_of, MAX_BODY, MAX_LISTED};
use crate::error::{Error, Result};
use crate::jobs::clock::Clock;
use crate::jobs::job::{
    new_job_id, DeadJob, Enqueued, JobLease, LeaseToken, Nacked, NewJob, Retry, WaitState, Waiting,
};
use crate::jobs::stats::{failure_group, Counts, DayStats, QueueStats};
use crate::jobs::Backoff;

/// What a handle needs of the server: the script's calls, and the two
/// reads of the statistics' keys.
pub(crate) trait Transport: Sync {
    /// Runs script command `command` at clock time `now` with `args`.
    fn script(
        &self,
        command: &str,
        now: SystemTime,
        args: &[&[u8]],
    ) -> impl Future<Output = Result<Value>> + Send;

    /// The keys matching `pattern` (a `SCAN`; a read).
    fn keys(&self, pattern: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The fields of hash `key` (a read).
    fn hash(&self, key: &str) -> impl Future<Output = Result<HashMap<String, String>>> + Send;
}

/// The value of `future`, which must be ready at its first poll (the
/// blocking transport's are: they did their work when made).
pub(crate) fn ready<T>(future: impl Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("a blocking transport never waits"),
    }
}

/// A handle's state: its queue, its worker, its leases.
pub(crate) struct Core {
    pub(crate) queue: String,
    pub(crate) worker: String,
    pub(crate) lease_time: Duration,
    pub(crate) max_attempts: u16,
    pub(crate) backoff: Backoff,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) handle: usize,
    /// Makes this handle's lease tokens its own, even beside another
    /// handle (or an earlier process) with the same worker name.
    pub(crate) nonce: u64,
    /// Numbers this handle's lease calls (part of each lease's token).
    pub(crate) calls: AtomicU64,
    pub(crate) closed: AtomicBool,
    /// Leases given out and not settled (job id → token): handed back at
    /// close, as a closed embedded handle's are.
    pub(crate) held: Mutex<HashMap<String, String>>,
    /// When the schedules (recurring jobs) may next be due.
    pub(crate) due_schedules: crate::jobs::recurring::DueCache,
}

impl Core {
    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Runs script command `command`, unless the handle is closed.
    pub(crate) async fn call(
        &self,
        t: &impl Transport,
        command: &str,
        args: &[&[u8]],
    ) -> Result<Value> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        t.script(command, self.now(), args).await
    }

    fn check_new(job: &NewJob) -> Result<()> {
        job.check()?;
        if job.body.len() > MAX_BODY {
            return Err(Error::ItemTooLarge {
                size: job.body.len(),
                max: MAX_BODY as u32,
            });
        }
        Ok(())
    }

    /// Puts `jobs` in one script call (all or none); `mode` is `new` (a
    /// queued id is left alone) or `move` (qless's put: moved here).
    pub(crate) async fn put_all(
        &self,
        t: &impl Transport,
        jobs: Vec<(NewJob, QlessPut)>,
        mode: &str,
    ) -> Result<Vec<Enqueued>> {
        let now = self.now();
        let mut fields: Vec<Vec<u8>> = vec![mode.into(), self.queue.clone().into_bytes()];
        let mut ids = Vec::with_capacity(jobs.len());
        for (job, extra) in &jobs {
            Self::check_new(job)?;
            extra.check(job)?;
            let made = job.id.is_none();
            let hold = job.hold(now);
            let id = job.id.clone().unwrap_or_else(new_job_id);
            let delay = job.ready_at(now).duration_since(now).unwrap_or_default();
            let retries = extra
                .retries
                .unwrap_or_else(|| u32::from(self.max_attempts).saturating_sub(1));
            fields.extend(put_fields(PutFields {
                id: &id,
                job,
                extra,
                made,
                hold,
                delay,
                retries,
            }));
            ids.push(id);
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let args: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        let reply = self.call(t, "put", &args).await?;
        let added = array_of(&reply)?;
        Ok(ids
            .into_iter()
            .zip(added)
            .map(|(id, added)| match int_of(added) {
                Ok(1) => Enqueued::Added(id),
                Ok(_) => Enqueued::AlreadyQueued(id),
                // `done:UNTIL` or `dead:UNTIL` (unique.lua).
                Err(_) => crate::jobs::unique::duplicate_of(id, &text_of(added)),
            })
            .collect())
    }

    /// The token of lease `record` of lease call `call`: the worker's name
    /// and a bar first (the script tells dque's leases by it), then this
    /// handle's nonce.
    fn lease_token(&self, call: i64, record: u64) -> String {
        format!("{}|{:016x}-{call}:{record}", self.worker, self.nonce)
    }

    pub(crate) async fn lease_up_to(
        &self,
        t: &impl Transport,
        max: usize,
    ) -> Result<Vec<JobLease>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.fire_due_quietly(t).await;
        let call = self.calls.fetch_add(1, Ordering::Relaxed) as i64;
        let base = self.lease_token(call, 0);
        let base = base
            .strip_suffix(":0")
            .expect("the token ends with the record");
        let reply = self
            .call(
                t,
                "pop",
                &[
                    self.queue.as_bytes(),
                    self.worker.as_bytes(),
                    max.min(MAX_LISTED).to_string().as_bytes(),
                    duration_seconds(self.lease_time).as_bytes(),
                    base.as_bytes(),
                ],
            )
            .await?;
        let mut leases = Vec::new();
        let mut tokens = Vec::new();
        for (index, value) in array_of(&reply)?.iter().enumerate() {
            let reply = JobReply::parse(value)?;
            tokens.push((reply.job.id.clone(), reply.lease.clone()));
            leases.push(JobLease {
                token: LeaseToken {
                    part: call,
                    record: index as u64 + 1,
                    attempt: reply.job.attempt,
                    queue: self.handle,
                    leased_ms: 0,
                    hold: None,
                },
                job: reply.job,
            });
        }
        // Checked under the lock `close` drains under: a close that ran
        // meanwhile never saw these, so they go back uncounted and the call
        // had no effect; else close will find them.
        let closed = {
            let mut held = self.held.lock();
            let closed = self.closed.load(Ordering::SeqCst);
            if !closed {
                held.extend(tokens);
            }
            closed
        };
        if closed {
            for lease in leases {
                let _ = self.settle_with(t, "release", &lease, &[]).await;
            }
            let _ = t
                .script("deregister", self.now(), &[self.worker.as_bytes()])
                .await;
            return Err(Error::Closed);
        }
        Ok(leases)
    }

    /// The lease's token in Redis, checking it is this handle's.
    fn token_of(&self, lease: &JobLease) -> Result<String> {
        if lease.token.queue != self.handle {
            return Err(Error::InvalidJob {
                reason: format!(
                    "the lease of job {:?} was taken from another queue handle; settle it there",
                    lease.job.id
                ),
            });
        }
        Ok(self.lease_token(lease.token.part, lease.token.record))
    }

    /// Runs settling command `command` on `lease` with `extra` arguments;
    /// `LeaseLost` if the lease no longer holds.
    pub(crate) async fn settle(
        &self,
        t: &impl Transport,
        command: &str,
        lease: &JobLease,
        extra: &[&[u8]],
    ) -> Result<Value> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.settle_with(t, command, lease, extra).await
    }

    /// [`settle`](Self::settle), even on a closed handle.
    pub(crate) async fn settle_with(
        &self,
        t: &impl Transport,
        command: &str,
        lease: &JobLease,
        extra: &[&[u8]],
    ) -> Result<Value> {
        let token = self.token_of(lease)?;
        let mut args: Vec<&[u8]> = vec![
            lease.job.id.as_bytes(),
            self.queue.as_bytes(),
            self.worker.as_bytes(),
            token.as_bytes(),
        ];
        args.extend_from_slice(extra);
        let result = t.script(command, self.now(), &args).await;
        if command != "heartbeat" {
            // Only this lease's entry: a stale lease of a job this handle
            // leased again must not drop the live one.
            let mut held = self.held.lock();
            if held.get(&lease.job.id) == Some(&token) {
                held.remove(&lease.job.id);
            }
        }
        result.map_err(|e| match e {
            Error::LeaseLost { .. } | Error::NoSuchJob { .. } => Error::LeaseLost {
                id: lease.token.record,
                attempt: u16::try_from(lease.job.attempt).unwrap_or(u16::MAX),
            },
            other => other,
        })
    }

    /// Ends every lease this handle holds, their attempts counted (as an
    /// embedded handle's end when it closes).
    async fn hand_back_held(&self, t: &impl Transport) -> Result<()> {
        let held: Vec<(String, String)> = self.held.lock().drain().collect();
        let now = self.now();
        let mut first_error = None;
        for (id, token) in held {
            let args: [&[u8]; 4] = [
                id.as_bytes(),
                self.queue.as_bytes(),
                self.worker.as_bytes(),
                token.as_bytes(),
            ];
            match t.script("abandon", now, &args).await {
                Ok(_) | Err(Error::LeaseLost { .. } | Error::NoSuchJob { .. }) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    pub(crate) async fn fail_with(
        &self,
        t: &impl Transport,
        lease: JobLease,
        group: &str,
        message: &str,
    ) -> Result<()> {
        self.settle(t, "fail", &lease, &[group.as_bytes(), message.as_bytes()])
            .await
            .map(drop)
    }

    /// The jobs listing command `command` answers for this queue, `max` at
    /// most.
    async fn list(&self, t: &impl Transport, command: &str, max: usize) -> Result<Vec<JobReply>> {
        let max = max.min(MAX_LISTED).to_string();
        let reply = self
            .call(t, command, &[self.queue.as_bytes(), max.as_bytes()])
            .await?;
        array_of(&reply)?.iter().map(JobReply::parse).collect()
    }

    async fn read_days(&self, t: &impl Transport) -> Result<Vec<DayStats>> {
        // qless keeps `ql:s:{wait,run,stats}:<day>:<queue>`; the days on
        // record are found by their keys.
        let pattern = format!("ql:s:*:{}", glob_escape(&self.queue));
        let keys = t.keys(&pattern).await?;
        let suffix = format!(":{}", self.queue);
        let mut days: BTreeMap<u64, DayStats> = BTreeMap::new();
        for key in keys {
            let Some(rest) = key
                .strip_prefix("ql:s:")
                .and_then(|k| k.strip_suffix(&suffix))
            else {
                continue;
            };
            let Some((kind, day)) = rest.split_once(':') else {
                continue;
            };
            let Ok(day) = day.parse::<u64>() else {
                continue;
            };
            let fields = t.hash(&key).await?;
            let record = days.entry(day).or_insert_with(|| DayStats::new(day));
            match kind {
                "wait" => record.wait = timing_of(&fields),
                "run" => record.run = timing_of(&fields),
                "stats" => {
                    let number = |name: &str| {
                        fields
                            .get(name)
                            .and_then(|v| v.parse::<i64>().ok())
                            .unwrap_or(0)
                            .max(0) as u64
                    };
                    record.retries = number("retries");
                    let mut grouped = 0;
                    for (name, value) in &fields {
                        if let Some(group) = name.strip_prefix("dque-failure:") {
                            let count = value.parse::<u64>().unwrap_or(0);
                            grouped += count;
                            record.failures.insert(group.to_owned(), count);
                        }
                    }
                    // Failures a qless client recorded carry no group here.
                    let others = number("failures").saturating_sub(grouped);
                    if others > 0 {
                        record.failures.insert("qless".to_owned(), others);
                    }
                }
                _ => {}
            }
        }
        Ok(days.into_values().collect())
    }

    /// The counts of qless's `counts` call: waiting, scheduled, running,
    /// failed, depends.
    pub(crate) async fn queue_counts(&self, t: &impl Transport) -> Result<[u64; 5]> {
        let reply = self.call(t, "counts", &[self.queue.as_bytes()]).await?;
        let parts = array_of(&reply)?;
        if parts.len() < 5 {
            return Err(Error::Backend {
                backend: "Redis",
                reason: "unexpected reply to counts".into(),
            });
        }
        let count = |value: &Value| int_of(value).unwrap_or(0).max(0) as u64;
        Ok([
            count(&parts[0]),
            count(&parts[1]),
            count(&parts[2]),
            count(&parts[3]),
            count(&parts[4]),
        ])
    }

    // The contract's calls, in `JobQueue`'s order.

    pub(crate) async fn enqueue_batch(
        &self,
        t: &impl Transport,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Enqueued>> {
        let jobs = jobs.into_iter().map(|job| (job, QlessPut::new())).collect();
        self.put_all(t, jobs, "new").await
    }

    pub(crate) async fn ack(&self, t: &impl Transport, lease: JobLease) -> Result<()> {
        self.settle(t, "complete", &lease, &[b"", b"0"])
            .await
            .map(drop)
    }

    pub(crate) async fn nack(
        &self,
        t: &impl Transport,
        lease: JobLease,
        retry: Retry,
        reason: &str,
    ) -> Result<Nacked> {
        // The job's own retries (qless's) or this handle's attempts,
        // whichever run out first.
        if lease.job.attempt >= u32::from(self.max_attempts) {
            let attempts = lease.job.attempt;
            // The group comes from the reason alone (not the note added to
            // it); without one, qless's group for used-up retries.
            let group = failure_group(reason);
            let group = if group.is_empty() {
                format!("failed-retries-{}", self.queue)
            } else {
                group
            };
            let reason = if reason.is_empty() {
                format!("Job exhausted retries in queue \"{}\"", self.queue)
            } else {
                reason.to_owned()
            };
            let message = format!("{reason} (attempts used up: {attempts})");
            self.fail_with(t, lease, &group, &message).await?;
            return Ok(Nacked::Dead);
        }
        let delay = match retry {
            Retry::Backoff => self.backoff.delay(lease.job.attempt),
            Retry::After(delay) => delay,
        };
        let now = self.now();
        let at = crate::jobs::job::due_after(now, delay);
        let delay = at.duration_since(now).unwrap_or_default();
        let group = failure_group(reason);
        let answer = self
            .settle(
                t,
                "retry",
                &lease,
                &[
                    duration_seconds(delay).as_bytes(),
                    group.as_bytes(),
                    reason.as_bytes(),
                ],
            )
            .await?;
        Ok(match text_of(&answer).as_str() {
            "failed" => Nacked::Dead,
            _ => Nacked::Retrying { at },
        })
    }

    pub(crate) async fn release(&self, t: &impl Transport, lease: JobLease) -> Result<()> {
        self.settle(t, "release", &lease, &[]).await.map(drop)
    }

    /// The job back, due after `delay`, its attempt uncounted (a snooze).
    pub(crate) async fn release_after(
        &self,
        t: &impl Transport,
        lease: JobLease,
        delay: std::time::Duration,
    ) -> Result<SystemTime> {
        let now = self.now();
        if delay.is_zero() {
            self.release(t, lease).await?;
            return Ok(now);
        }
        let at = crate::jobs::job::due_after(now, delay);
        let delay = at.duration_since(now).unwrap_or_default();
        self.settle(t, "snooze", &lease, &[duration_seconds(delay).as_bytes()])
            .await?;
        Ok(at)
    }

    pub(crate) async fn touch(&self, t: &impl Transport, lease: &JobLease) -> Result<()> {
        self.settle(
            t,
            "heartbeat",
            lease,
            &[duration_seconds(self.lease_time).as_bytes()],
        )
        .await
        .map(drop)
    }

    pub(crate) async fn fail(
        &self,
        t: &impl Transport,
        lease: JobLease,
        reason: &str,
    ) -> Result<()> {
        let group = failure_group(reason);
        let group = if group.is_empty() { "failed" } else { &group };
        self.fail_with(t, lease, group, reason).await
    }

    pub(crate) async fn set_priority(
        &self,
        t: &impl Transport,
        id: &str,
        priority: i32,
    ) -> Result<()> {
        self.call(
            t,
            "priority",
            &[
                id.as_bytes(),
                self.queue.as_bytes(),
                qless_priority(priority).to_string().as_bytes(),
                b"0",
            ],
        )
        .await
        .map(drop)
    }

    pub(crate) async fn cancel(&self, t: &impl Transport, id: &str) -> Result<()> {
        self.call(t, "cancel", &[self.queue.as_bytes(), id.as_bytes()])
            .await
            .map(drop)
    }

    pub(crate) async fn waiting(&self, t: &impl Transport, max: usize) -> Result<Vec<Waiting>> {
        let now = self.now();
        Ok(self
            .list(t, "waiting", max)
            .await?
            .into_iter()
            .map(|reply| {
                let state = match reply.state.as_str() {
                    "running" => WaitState::Leased,
                    "scheduled" => WaitState::Scheduled(reply.at.unwrap_or(now)),
                    _ => WaitState::Ready,
                };
                Waiting {
                    job: reply.job,
                    state,
                }
            })
            .collect())
    }

    pub(crate) async fn dead(&self, t: &impl Transport, max: usize) -> Result<Vec<DeadJob>> {
        Ok(self
            .list(t, "dead", max)
            .await?
            .into_iter()
            .map(|reply| DeadJob {
                reason: reply.failure_message(),
                job: reply.job,
            })
            .collect())
    }

    pub(crate) async fn run_now(&self, t: &impl Transport, id: &str) -> Result<bool> {
        let waits = self
            .call(t, "runnow", &[id.as_bytes(), self.queue.as_bytes()])
            .await?;
        Ok(int_of(&waits)? == 1)
    }

    pub(crate) async fn requeue_dead(&self, t: &impl Transport, id: &str) -> Result<()> {
        self.call(t, "requeue", &[id.as_bytes(), self.queue.as_bytes()])
            .await
            .map(drop)
    }

    pub(crate) async fn counts(&self, t: &impl Transport) -> Result<Counts> {
        let [waiting, scheduled, running, failed, _] = self.queue_counts(t).await?;
        Ok(Counts {
            ready: waiting,
            scheduled,
            leased: running,
            dead: failed,
        })
    }

    pub(crate) async fn stats(&self, t: &impl Transport) -> Result<QueueStats> {
        let counts = self.counts(t).await?;
        Ok(QueueStats {
            queue: self.queue.clone(),
            counts,
            days: self.read_days(t).await?,
        })
    }

    pub(crate) async fn close(&self, t: &impl Transport) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let handed_back = self.hand_back_held(t).await;
        // qless lists workers; one that holds nothing is forgotten.
        let forgotten = t
            .script("deregister", self.now(), &[self.worker.as_bytes()])
            .await;
        handed_back.and(forgotten.map(drop))
    }
}

/// How many fields a job takes in the script's `put` (jobs.lua's
/// `PUT_FIELDS`): every caller builds them with [`put_fields`], so a new
/// field is added in one place.
pub(crate) const PUT_FIELDS: usize = 14;

/// What one job's `put` fields are made of.
pub(crate) struct PutFields<'a> {
    pub id: &'a str,
    pub job: &'a NewJob,
    pub extra: &'a QlessPut,
    /// Whether the id was made here (not the caller's).
    pub made: bool,
    pub hold: Option<crate::jobs::unique::Hold>,
    pub delay: Duration,
    pub retries: u32,
}

/// One job's fields of the script's `put`, in its order.
pub(crate) fn put_fields(p: PutFields<'_>) -> [Vec<u8>; PUT_FIELDS] {
    let (data, raw) = encode_body(&p.job.body);
    let (klass, headers) = encode_headers(&p.job.headers);
    [
        p.id.as_bytes().to_vec(),
        klass.into_bytes(),
        data.into_bytes(),
        qless_priority(p.job.priority).to_string().into_bytes(),
        serde_json::to_vec(&p.extra.tags).expect("strings serialize"),
        duration_seconds(p.delay).into_bytes(),
        p.retries.to_string().into_bytes(),
        serde_json::to_vec(&p.extra.depends).expect("strings serialize"),
        if raw.is_some() {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        },
        raw.map(<[u8]>::to_vec).unwrap_or_default(),
        headers.into_bytes(),
        if p.made { b"1".to_vec() } else { b"0".to_vec() },
        p.hold.map_or(0, |h| h.until_ms).to_string().into_bytes(),
        p.hold
            .map_or(0, |h| h.states.bits())
            .to_string()
            .into_bytes(),
    ]
}

#[cfg(test)]
mod tests {
    // A job's put fields are counted in Rust and in the script: recurring
    // jobs once sent twelve while the script read fourteen (a schedule's
    // second missed tick became garbage). One count, checked here.
    #[test]
    fn the_script_reads_as_many_put_fields_as_rust_sends() {
        let script = include_str!("lua/jobs.lua");
        let line = script
            .lines()
            .find(|l| l.starts_with("local PUT_FIELDS = "))
            .expect("jobs.lua counts its put fields");
        let n: usize = line["local PUT_FIELDS = ".len()..].trim().parse().unwrap();
        assert_eq!(n, super::PUT_FIELDS);
    }
}
