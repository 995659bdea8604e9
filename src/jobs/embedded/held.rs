//! Who holds what on the embedded queue ([`JobQueue::leases`](crate::jobs::JobQueue::leases)): each
//! lane's leases, the process holding each (the lane's workers, `host:pid`;
//! in shared mode every process's), and when each ends. A lease records
//! no start, so `since` is unknown here.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Instant, SystemTime};

use super::EmbeddedJobs;
use crate::error::Result;
use crate::jobs::LeaseInfo;

impl EmbeddedJobs {
    /// The jobs leased now, soonest-ending first, `max` at most. Each lane
    /// is read from its first leased record until all its leases are
    /// found (leases are near a lane's front: it hands out records in
    /// order).
    pub(super) fn leases_now(&self, max: usize) -> Result<Vec<LeaseInfo>> {
        self.check_open()?;
        let (now, clock) = (SystemTime::now(), Instant::now());
        let mut found = Vec::new();
        for (_, lane) in self.lanes.all()? {
            let mut holders: HashMap<u64, String> = HashMap::new();
            for worker in lane.workers()? {
                for id in worker.leases {
                    holders.insert(id, format!("{}:{}", worker.host, worker.pid));
                }
            }
            let Some(&first) = holders.keys().min() else {
                continue;
            };
            let mut records = Vec::new();
            lane.visit_pending_from(first, |id, attempts, leased, bytes| {
                if leased && holders.contains_key(&id) {
                    records.push((id, attempts, bytes.to_vec()));
                }
                match records.len() == holders.len() {
                    true => ControlFlow::Break(()),
                    false => ControlFlow::Continue(()),
                }
            })?;
            for (id, attempts, bytes) in records {
                // Settled since it was seen: no longer held.
                let Some(ends) = lane.held_until(id)? else {
                    continue;
                };
                let mut envelope = self.job_of(bytes, id, attempts)?;
                envelope.job.attempt = envelope.attempts_before + u32::from(attempts);
                let mut info = LeaseInfo::of_job(envelope.job);
                info.worker = holders.remove(&id);
                info.until = Some(now + ends.saturating_duration_since(clock));
                found.push(info);
            }
        }
        found.sort_by_key(|lease| lease.until);
        found.truncate(max);
        Ok(found)
    }
}
