//! Who holds what on the embedded queue ([`JobQueue::leases`](crate::jobs::JobQueue::leases)): each
//! lane's leases, the handle holding each (the lane's workers; in shared
//! mode every process's, from the control file), and when each began and
//! ends. A handle shows under its worker name
//! ([`JobOptions::worker`](crate::jobs::JobOptions::worker)), else as the
//! process holding it, `host:pid`.

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
        // A time of this handle's clock as a wall-clock time.
        let wall = |at: Instant| match at.checked_duration_since(clock) {
            Some(ahead) => now + ahead,
            None => now - clock.duration_since(at),
        };
        let mut found = Vec::new();
        for (_, lane) in self.lanes.all()? {
            let mut holders: HashMap<u64, String> = HashMap::new();
            for worker in lane.workers()? {
                let shown = match worker.name {
                    Some(name) => name,
                    None => format!("{}:{}", worker.host, worker.pid),
                };
                for id in worker.leases {
                    holders.insert(id, shown.clone());
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
                let Some((since, ends)) = lane.held_times(id)? else {
                    continue;
                };
                let mut envelope = self.job_of(bytes, id, attempts)?;
                envelope.job.attempt = envelope.attempts_before + u32::from(attempts);
                let mut info = LeaseInfo::of_job(envelope.job);
                info.worker = holders.remove(&id);
                info.since = Some(wall(since));
                info.until = Some(wall(ends));
                found.push(info);
            }
        }
        found.sort_by_key(|lease| lease.until);
        found.truncate(max);
        Ok(found)
    }
}
