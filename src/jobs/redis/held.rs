//! Who holds what on Redis ([`JobQueue::leases`](crate::jobs::JobQueue::leases)):
//! qless's locks (`ql:q:<queue>-locks`, scored by the lease's end), each
//! job's `worker`, and its lease's start from its last `popped` history
//! entry (`lua/jobs.lua`'s `leases`).

use ::redis::Value;

use super::core::{Core, Transport};
use super::encoding::{array_of, text_of, JobReply};
use super::history::event_of;
use super::MAX_LISTED;
use crate::error::Result;
use crate::jobs::LeaseInfo;

impl Core {
    /// The jobs leased now, soonest-ending first, `max` at most.
    pub(crate) async fn leases(&self, t: &impl Transport, max: usize) -> Result<Vec<LeaseInfo>> {
        let max = max.min(MAX_LISTED).to_string();
        let reply = self
            .call(t, "leases", &[self.queue.as_bytes(), max.as_bytes()])
            .await?;
        array_of(&reply)?.iter().map(lease_of).collect()
    }
}

/// One `[job, recent history]` of the script's answer.
fn lease_of(entry: &Value) -> Result<LeaseInfo> {
    let parts = array_of(entry)?;
    let reply = JobReply::parse(&parts[0])?;
    let since = match parts.get(1) {
        Some(list) => array_of(list)?
            .iter()
            .filter_map(|entry| event_of(&text_of(entry)))
            .filter(|event| event.what == "leased")
            .map(|event| event.at)
            .next_back(),
        None => None,
    };
    let mut info = LeaseInfo::of_job(reply.job);
    info.worker = Some(reply.worker).filter(|w| !w.is_empty());
    info.since = since;
    info.until = reply.at;
    Ok(info)
}
