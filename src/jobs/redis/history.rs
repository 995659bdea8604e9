//! A job's record on Redis for [`JobQueue::job_info`](crate::jobs::JobQueue::job_info):
//! qless's own (`lua/history.lua`'s `job_info`, qless's `get` with a
//! scheduled job's due time: the job's hash and its `-history` list), so what
//! a qless client sees is what the contract answers. Completed jobs are
//! kept as qless keeps them (`ql:completed`, pruned by qless's config
//! `jobs-history`, default 7 days, and `jobs-history-count`, default
//! 50,000, at each completion: `prune_completed` in `lua/base.lua`).

use std::time::{Duration, SystemTime};

use ::redis::Value;

use super::core::{Core, Transport};
use super::encoding::{array_of, text_of, JobReply};
use crate::error::Result;
use crate::jobs::history::{JobEvent, JobInfo, JobState};

impl Core {
    /// Job `id` of this handle's queue (a completed one: last put into
    /// it), with its qless history; else the newest dead letter of the id
    /// set aside in this queue (the id taken by a job that was cancelled,
    /// pruned, or is another queue's), with its own history.
    pub(crate) async fn job_info(&self, t: &impl Transport, id: &str) -> Result<Option<JobInfo>> {
        let reply = self
            .call(t, "job_info", &[id.as_bytes(), self.queue.as_bytes()])
            .await?;
        let parts = array_of(&reply)?;
        // The job under the id, if it is this queue's: it is newer than
        // any dead letter of its id set aside here.
        if let Some(info) = self.read_info(parts.first())? {
            return Ok(Some(info));
        }
        self.read_info(parts.get(1))
    }

    /// A `[job, history]` pair of `job_info` (false: none), if it is this
    /// queue's job.
    fn read_info(&self, pair: Option<&Value>) -> Result<Option<JobInfo>> {
        let Some(pair) = pair.filter(|v| !matches!(v, Value::Nil)) else {
            return Ok(None);
        };
        let parts = array_of(pair)?;
        let job = JobReply::parse(&parts[0])?;
        let history: Vec<JobEvent> = match parts.get(1) {
            Some(list) => array_of(list)?
                .iter()
                .filter_map(|entry| event_of(&text_of(entry)))
                .collect(),
            None => Vec::new(),
        };
        Ok(info_of(job, history, &self.queue, self.now()))
    }
}

/// The contract's record of a qless job, if it is `queue`'s.
fn info_of(
    reply: JobReply,
    history: Vec<JobEvent>,
    queue: &str,
    now: SystemTime,
) -> Option<JobInfo> {
    let state = match reply.state.as_str() {
        "running" => JobState::Leased,
        // Due, not moved yet (the next lease moves it): ready, as
        // `waiting` and `counts` say.
        "scheduled" if reply.at.is_some_and(|at| at <= now) => JobState::Ready,
        "scheduled" | "depends" => JobState::Scheduled,
        "failed" => JobState::Dead,
        "complete" => JobState::Completed,
        _ => JobState::Ready,
    };
    // A completed job's queue is empty in qless: its last put says where
    // it ran.
    let in_queue = match state {
        JobState::Completed => {
            history
                .iter()
                .rev()
                .find(|e| e.what == "enqueued")
                .and_then(|e| e.detail.as_deref())
                == Some(queue)
        }
        _ => reply.queue == queue,
    };
    if !in_queue {
        return None;
    }
    // The job's own run: the events since its last enqueue. A new job
    // under a used id (a dead letter's set aside, a completed job's
    // replaced) goes on with the id's history, as qless keeps it.
    let own = &history[history
        .iter()
        .rposition(|e| e.what == "enqueued")
        .unwrap_or(0)..];
    let last = |what: &str| own.iter().rev().find(|e| e.what == what);
    let started_at = last("leased").map(|e| e.at);
    let finished_at = match state {
        JobState::Completed => last("completed").map(|e| e.at),
        JobState::Dead => last("failed").map(|e| e.at),
        _ => None,
    };
    let worker = Some(reply.worker.clone())
        .filter(|w| !w.is_empty())
        .or_else(|| last("leased").and_then(|e| e.worker.clone()));
    let last_error = Some(reply.failure_message()).filter(|m| !m.is_empty());
    let mut job = reply.job;
    if state == JobState::Completed {
        // qless gives a completed job its retries back: its attempts are
        // the leases its history shows since it was last put (a release's
        // lease included, which qless does not tell apart).
        let since_put = history
            .iter()
            .rev()
            .take_while(|e| e.what != "enqueued")
            .filter(|e| e.what == "leased")
            .count();
        job.attempt = u32::try_from(since_put).unwrap_or(u32::MAX);
    }
    let mut info = JobInfo::bare(job, queue, state);
    info.due_at = match state {
        JobState::Scheduled => reply.at,
        _ => None,
    };
    info.started_at = started_at;
    info.finished_at = finished_at;
    info.worker = worker;
    info.last_error = last_error;
    if !history.is_empty() {
        info.history = history;
    }
    Some(info)
}

/// One qless history entry (`[when, what, {detail}]`, or qless-core's
/// `{"when": …, "what": …, …}`), named as the contract names events.
pub(super) fn event_of(entry: &str) -> Option<JobEvent> {
    let value: serde_json::Value = serde_json::from_str(entry).ok()?;
    let (when, what, detail) = match &value {
        serde_json::Value::Array(items) => (
            items.first()?.as_f64()?,
            items.get(1)?.as_str()?.to_owned(),
            items.get(2).cloned().unwrap_or(serde_json::Value::Null),
        ),
        serde_json::Value::Object(map) => (
            map.get("when")?.as_f64()?,
            map.get("what")?.as_str()?.to_owned(),
            value.clone(),
        ),
        _ => return None,
    };
    let field = |name: &str| detail.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    let what = match what.as_str() {
        "put" => "enqueued".to_owned(),
        "popped" => "leased".to_owned(),
        "done" => "completed".to_owned(),
        other => other.to_owned(),
    };
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(when.max(0.0));
    Some(JobEvent {
        worker: field("worker"),
        detail: field("q").or_else(|| field("group")),
        ..JobEvent::new(at, what)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qless_entries_of_either_shape_are_named_as_the_contract_names_them() {
        let popped = event_of(r#"[1700000000, "popped", {"worker": "w1"}]"#).unwrap();
        assert_eq!(
            (popped.what.as_str(), popped.worker.as_deref()),
            ("leased", Some("w1"))
        );
        let put = event_of(r#"{"when": 1700000001, "what": "put", "q": "mail"}"#).unwrap();
        assert_eq!(
            (put.what.as_str(), put.detail.as_deref()),
            ("enqueued", Some("mail"))
        );
        assert_eq!(
            event_of(r#"[1700000002, "done"]"#).unwrap().what,
            "completed"
        );
        assert!(event_of("not json").is_none());
    }
}
