//! Who holds what on the embedded queue ([`JobQueue::leases`](crate::jobs::JobQueue::leases)): each
//! lane's leases, the handle holding each (the lane's workers; in shared
//! mode every process's, from the control file), and when each began and
//! ends. A handle shows under its worker name
//! ([`JobOptions::worker`](crate::jobs::JobOptions::worker)), else as the
//! process holding it, `host:pid`.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Instant, SystemTime};

use super::ids::Location;
use super::EmbeddedJobs;
use crate::error::Result;
use crate::jobs::LeaseInfo;

/// A handle's worker name, else its process as `host:pid`.
fn shown(worker: crate::queue::workers::Worker) -> String {
    match worker.name {
        Some(name) => name,
        None => format!("{}:{}", worker.host, worker.pid),
    }
}

/// A time of the clock read at `clock` as a wall-clock time, `now` then.
fn wall(at: Instant, clock: Instant, now: SystemTime) -> SystemTime {
    match at.checked_duration_since(clock) {
        Some(ahead) => now + ahead,
        None => now - clock.duration_since(at),
    }
}

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
            for mut worker in lane.workers()? {
                let leases = std::mem::take(&mut worker.leases);
                let shown = shown(worker);
                for id in leases {
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
                info.since = Some(wall(since, clock, now));
                info.until = Some(wall(ends, clock, now));
                found.push(info);
            }
        }
        found.sort_by_key(|lease| lease.until);
        found.truncate(max);
        Ok(found)
    }

    /// The worker holding the lane record at `location` and since when,
    /// if it is leased now (what [`leases_now`](Self::leases_now) shows
    /// of it).
    pub(super) fn holder_of(&self, location: Location) -> Result<Option<(String, SystemTime)>> {
        let Location::Lane(priority, record) = location else {
            return Ok(None);
        };
        let Some(lane) = self.lanes.get(priority)? else {
            return Ok(None);
        };
        let (now, clock) = (SystemTime::now(), Instant::now());
        let Some((since, _)) = lane.held_times(record)? else {
            return Ok(None);
        };
        let holder = lane
            .workers()?
            .into_iter()
            .find(|worker| worker.leases.contains(&record));
        Ok(holder.map(|worker| (shown(worker), wall(since, clock, now))))
    }
}
