//! qless's own calls on a [`RedisJobs`], where the Jobs API has none:
//! a job's whole record and history, tags, dependencies, tracking, failure
//! groups and unfail, workers, queue counts by state, configuration.

use ::redis::Value;

use super::encoding::{array_of, bytes_of, int_of, text_of, JobReply};
use super::{RedisJobs, MAX_LISTED};
use crate::error::{Error, Result};
use crate::jobs::job::{check_id, Job, RunAt};
use crate::jobs::NewJob;

/// qless's settings of a job put with [`RedisJobs::put`].
///
/// ```
/// use dque::jobs::QlessPut;
///
/// let extra = QlessPut::new().tags(["nightly", "billing"]).retries(2).depends(["a1"]);
/// assert_eq!(extra.tag_list(), ["nightly", "billing"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QlessPut {
    pub(crate) tags: Vec<String>,
    pub(crate) depends: Vec<String>,
    pub(crate) retries: Option<u32>,
}

impl QlessPut {
    /// No tags, no dependencies, the handle's attempts.
    pub fn new() -> Self {
        QlessPut::default()
    }

    /// The job's tags (qless lists jobs by tag).
    #[must_use]
    pub fn tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Jobs that must complete before this one is ready (those complete or
    /// gone already are not waited for).
    #[must_use]
    pub fn depends<S: Into<String>>(mut self, jobs: impl IntoIterator<Item = S>) -> Self {
        self.depends = jobs.into_iter().map(Into::into).collect();
        self
    }

    /// qless's `retries`: how many times the job may be retried after its
    /// first attempt (default: the handle's attempts less one).
    #[must_use]
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = Some(retries);
        self
    }

    /// The tags set.
    pub fn tag_list(&self) -> &[String] {
        &self.tags
    }

    pub(crate) fn check(&self, job: &NewJob) -> Result<()> {
        for id in &self.depends {
            check_id(id)?;
        }
        if self.tags.iter().any(|t| t.is_empty()) {
            return Err(Error::InvalidJob {
                reason: "a tag cannot be empty".into(),
            });
        }
        if !self.depends.is_empty() && job.run_at != RunAt::Now {
            return Err(Error::InvalidJob {
                reason: "a job waits on dependencies or for a time, not both".into(),
            });
        }
        Ok(())
    }
}

/// A job's whole record, as qless keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QlessJob {
    /// The job as the Jobs API sees it (`attempt`: the attempts so far).
    pub job: Job,
    /// qless's state: `waiting`, `scheduled`, `depends`, `running`,
    /// `complete` or `failed`.
    pub state: String,
    /// Its queue (empty once complete).
    pub queue: String,
    /// The worker holding it, if running.
    pub worker: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// qless's `retries` and `remaining`.
    pub retries: i64,
    /// Retries left.
    pub remaining: i64,
    /// The last failure (qless's JSON: group, message, when, worker), or
    /// `{}`.
    pub failure: String,
    /// Its history, oldest first: qless's entries (`[when, what, {...}]`).
    pub history: Vec<String>,
    /// Jobs it waits on, and jobs waiting on it.
    pub dependencies: Vec<String>,
    /// Jobs waiting on it.
    pub dependents: Vec<String>,
    /// Whether it is tracked.
    pub tracked: bool,
}

impl QlessJob {
    /// What its history says happened, in order (`put`, `popped`, `done`,
    /// `failed`, `timed-out`, ...).
    pub fn history_events(&self) -> Vec<String> {
        self.history
            .iter()
            .filter_map(|entry| {
                let value: serde_json::Value = serde_json::from_str(entry).ok()?;
                match &value {
                    serde_json::Value::Array(items) => items.get(1)?.as_str().map(str::to_owned),
                    serde_json::Value::Object(map) => map.get("what")?.as_str().map(str::to_owned),
                    _ => None,
                }
            })
            .collect()
    }
}

/// A queue's jobs by qless state, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Ready to be popped.
    pub waiting: u64,
    /// Held by workers.
    pub running: u64,
    /// Waiting for their time.
    pub scheduled: u64,
    /// Waiting on other jobs.
    pub depends: u64,
    /// Failed.
    pub failed: u64,
}

/// A worker as qless lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerJobs {
    /// Its name.
    pub worker: String,
    /// Jobs it holds whose leases hold.
    pub jobs: u64,
    /// Jobs it held whose leases ended.
    pub stalled: u64,
}

fn strings(value: &Value) -> Result<Vec<String>> {
    Ok(array_of(value)?.iter().map(text_of).collect())
}

/// `n` as the script takes it (Redis's ranges are signed 64-bit; Lua's
/// numbers are doubles).
fn limit(n: u64) -> String {
    n.min(MAX_LISTED as u64).to_string()
}

fn count(value: &Value) -> u64 {
    int_of(value).unwrap_or(0).max(0) as u64
}

impl RedisJobs {
    /// Job `id`'s whole record (any queue, any state), if there is one.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn job(&self, id: &str) -> Result<Option<QlessJob>> {
        let reply = self.call("get", &[id.as_bytes()])?;
        if matches!(reply, Value::Nil) {
            return Ok(None);
        }
        let parts = array_of(&reply)?;
        let job = JobReply::parse(&parts[0])?;
        Ok(Some(QlessJob {
            state: job.state,
            queue: job.queue,
            worker: job.worker,
            tags: job.tags,
            retries: job.retries,
            remaining: job.remaining,
            failure: job.failure,
            job: job.job,
            history: strings(&parts[1])?,
            dependencies: strings(&parts[2])?,
            dependents: strings(&parts[3])?,
            tracked: count(&parts[4]) == 1,
        }))
    }

    fn retag(&self, what: &str, id: &str, tags: &[&str]) -> Result<Vec<String>> {
        let mut args: Vec<&[u8]> = vec![what.as_bytes(), id.as_bytes()];
        args.extend(tags.iter().map(|t| t.as_bytes()));
        strings(&self.call("tag", &args)?)
    }

    /// Adds `tags` to job `id`; its tags after.
    ///
    /// # Errors
    ///
    /// `NoSuchJob` if there is no such job; `Backend` if the call failed.
    pub fn tag(&self, id: &str, tags: &[&str]) -> Result<Vec<String>> {
        self.retag("add", id, tags)
    }

    /// Takes `tags` off job `id`; its tags after.
    ///
    /// # Errors
    ///
    /// As [`tag`](Self::tag).
    pub fn untag(&self, id: &str, tags: &[&str]) -> Result<Vec<String>> {
        self.retag("remove", id, tags)
    }

    /// How many jobs have `tag`, and up to `count` of them from `offset`.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn tagged(&self, tag: &str, offset: u64, count: u64) -> Result<(u64, Vec<String>)> {
        let reply = self.call(
            "tagged",
            &[
                tag.as_bytes(),
                limit(offset).as_bytes(),
                limit(count).as_bytes(),
            ],
        )?;
        let parts = array_of(&reply)?;
        Ok((self::count(&parts[0]), strings(&parts[1])?))
    }

    fn redepend(&self, what: &str, id: &str, jobs: &[&str]) -> Result<bool> {
        let mut args: Vec<&[u8]> = vec![id.as_bytes(), what.as_bytes()];
        args.extend(jobs.iter().map(|j| j.as_bytes()));
        Ok(text_of(&self.call("depends", &args)?) == "waiting")
    }

    /// Makes job `id` (waiting on dependencies) wait on `jobs` too.
    /// Answers whether it is ready now.
    ///
    /// # Errors
    ///
    /// `NoSuchJob`; `InvalidJob` if the job is not waiting on
    /// dependencies; `Backend` if the call failed.
    pub fn depend(&self, id: &str, jobs: &[&str]) -> Result<bool> {
        self.redepend("on", id, jobs)
    }

    /// Stops job `id` waiting on `jobs`; ready when none are left.
    /// Answers whether it is ready now.
    ///
    /// # Errors
    ///
    /// As [`depend`](Self::depend).
    pub fn undepend(&self, id: &str, jobs: &[&str]) -> Result<bool> {
        self.redepend("off", id, jobs)
    }

    /// Tracks job `id` (qless's UI lists tracked jobs).
    ///
    /// # Errors
    ///
    /// `NoSuchJob`; `Backend` if the call failed.
    pub fn track(&self, id: &str) -> Result<()> {
        self.call("track", &[b"track", id.as_bytes()]).map(drop)
    }

    /// Stops tracking job `id`.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn untrack(&self, id: &str) -> Result<()> {
        self.call("track", &[b"untrack", id.as_bytes()]).map(drop)
    }

    /// The tracked jobs.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn tracked(&self) -> Result<Vec<String>> {
        strings(&self.call("track", &[b"list"])?)
    }

    /// Every failure group and how many failed jobs it holds (all queues).
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn failure_groups(&self) -> Result<Vec<(String, u64)>> {
        let reply = self.call("failures", &[])?;
        let mut groups = array_of(&reply)?
            .iter()
            .map(|pair| {
                let pair = array_of(pair)?;
                Ok((text_of(&pair[0]), count(&pair[1])))
            })
            .collect::<Result<Vec<_>>>()?;
        groups.sort();
        Ok(groups)
    }

    /// How many jobs failure `group` holds, and up to `count` of their ids
    /// from `offset` (the latest failure first).
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn failed(&self, group: &str, offset: u64, count: u64) -> Result<(u64, Vec<String>)> {
        let reply = self.call(
            "failed",
            &[
                group.as_bytes(),
                limit(offset).as_bytes(),
                limit(count).as_bytes(),
            ],
        )?;
        let parts = array_of(&reply)?;
        Ok((self::count(&parts[0]), strings(&parts[1])?))
    }

    /// Moves up to `count` jobs of failure `group` (the oldest failures
    /// first) to this queue, their retries restored; how many moved.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn unfail(&self, group: &str, count: u64) -> Result<u64> {
        let reply = self.call(
            "unfail",
            &[
                self.core.queue.as_bytes(),
                group.as_bytes(),
                limit(count).as_bytes(),
            ],
        )?;
        Ok(self::count(&reply))
    }

    /// Cancels jobs `ids` in any state and queue, as qless's cancel does:
    /// all of them, or none if one is missing or other jobs depend on it.
    ///
    /// # Errors
    ///
    /// `NoSuchJob`; `InvalidJob` if a job that stays depends on one;
    /// `Backend` if the call failed.
    pub fn cancel_any(&self, ids: &[&str]) -> Result<()> {
        let mut args: Vec<&[u8]> = vec![b""];
        args.extend(ids.iter().map(|id| id.as_bytes()));
        self.call("cancel", &args).map(drop)
    }

    /// Every worker qless has seen, the most recent first.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn workers(&self) -> Result<Vec<WorkerJobs>> {
        let reply = self.call("workers", &[])?;
        array_of(&reply)?
            .iter()
            .map(|entry| {
                let entry = array_of(entry)?;
                Ok(WorkerJobs {
                    worker: text_of(&entry[0]),
                    jobs: count(&entry[1]),
                    stalled: count(&entry[2]),
                })
            })
            .collect()
    }

    /// The jobs `worker` holds, and those whose leases ended.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn worker_jobs(&self, worker: &str) -> Result<(Vec<String>, Vec<String>)> {
        let reply = self.call("worker", &[worker.as_bytes()])?;
        let parts = array_of(&reply)?;
        Ok((strings(&parts[0])?, strings(&parts[1])?))
    }

    /// This queue's jobs by qless state (due jobs counted as waiting,
    /// expired leases reclaimed first).
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn queue_counts(&self) -> Result<QueueCounts> {
        self.queue_counts_now()
    }

    pub(super) fn queue_counts_now(&self) -> Result<QueueCounts> {
        let [waiting, scheduled, running, failed, depends] =
            super::core::ready(self.core.queue_counts(&self.server))?;
        Ok(QueueCounts {
            waiting,
            scheduled,
            running,
            failed,
            depends,
        })
    }

    /// The queues qless knows, oldest first.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn queues(&self) -> Result<Vec<String>> {
        strings(&self.call("queues", &[])?)
    }

    /// qless setting `name` (`heartbeat`, `grace-period`, `jobs-history`,
    /// `jobs-history-count`, ...), if set.
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn config(&self, name: &str) -> Result<Option<String>> {
        let reply = self.call("config", &[b"get", name.as_bytes()])?;
        Ok(bytes_of(&reply).map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Sets qless setting `name` (`None`: back to its default).
    ///
    /// # Errors
    ///
    /// `Backend` if the call failed.
    pub fn set_config(&self, name: &str, value: Option<&str>) -> Result<()> {
        match value {
            Some(value) => self.call("config", &[b"set", name.as_bytes(), value.as_bytes()]),
            None => self.call("config", &[b"unset", name.as_bytes()]),
        }
        .map(drop)
    }
}
