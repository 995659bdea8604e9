//! Batch calls on waiting jobs (`cancel_many`, `set_priority_many`): a
//! job with an id the queue made up is in no index, so a single call
//! reads the jobs up to it; a batch reads them once for all its ids, then
//! settles each job as the single call does (one job, one move: a crash
//! mid-batch leaves each job done or not, never half-moved).

use std::collections::{HashMap, HashSet};

use super::envelope::Envelope;
use super::ids::Location;
use super::{looks_made_up, EmbeddedJobs};
use crate::error::Result;

/// Where one pass over the jobs found the waiting (or leased) records of
/// a batch's made-up ids: the first record of each, in the order a
/// single call's look would meet them (the lanes by priority, then the
/// schedule).
pub(super) struct Scanned {
    found: HashMap<String, Location>,
}

impl Scanned {
    /// Where the pass found job `id`; `None`: it found no record of it.
    pub(super) fn get(&self, id: &str) -> Option<Location> {
        self.found.get(id).copied()
    }
}

impl EmbeddedJobs {
    /// `cancel` of each of `ids`, in order, the made-up ones found in one
    /// pass.
    pub(super) fn cancel_many_now(&self, ids: &[String]) -> Vec<Result<()>> {
        let scanned = match self.scan_made_up(ids) {
            Ok(scanned) => scanned,
            // Each its own try, as `cancel` of each.
            Err(_) => return ids.iter().map(|id| self.cancel_one(id, None)).collect(),
        };
        ids.iter()
            .map(|id| self.cancel_one(id, Some(&scanned)))
            .collect()
    }

    /// `set_priority` of each of `ids`, in order, the made-up ones found in
    /// one pass.
    pub(super) fn set_priority_many_now(&self, ids: &[String], priority: i32) -> Vec<Result<()>> {
        if self.is_plain() {
            let refusal = || Err(super::plain_refusal("a priority other than 0"));
            return ids.iter().map(|_| refusal()).collect();
        }
        let scanned = match self.scan_made_up(ids) {
            Ok(scanned) => scanned,
            Err(_) => {
                return ids
                    .iter()
                    .map(|id| self.set_priority_one(id, priority, None))
                    .collect()
            }
        };
        ids.iter()
            .map(|id| self.set_priority_one(id, priority, Some(&scanned)))
            .collect()
    }

    /// One job of a batch cancel, as `cancel` (the limited leases' lock
    /// taken per job, as a single call takes it: leases go on between).
    fn cancel_one(&self, id: &str, scanned: Option<&Scanned>) -> Result<()> {
        let _no_look_past = self.lock_limited_leases()?;
        self.cancel_in(id, scanned)
    }

    /// One job of a batch priority change, as `set_priority`.
    fn set_priority_one(&self, id: &str, priority: i32, scanned: Option<&Scanned>) -> Result<()> {
        let _no_look_past = self.lock_limited_leases()?;
        self.set_priority_in(id, priority, scanned)
    }

    /// One pass over the lanes and the schedule for the made-up ids of
    /// `ids` (due jobs moved to their lanes first, as each call does):
    /// the id alone is read of each record, not its headers or body.
    fn scan_made_up(&self, ids: &[String]) -> Result<Scanned> {
        let mut found = HashMap::new();
        let mut wanted: HashSet<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|id| looks_made_up(id))
            .collect();
        if self.is_plain() || wanted.is_empty() {
            return Ok(Scanned { found });
        }
        self.promote_due(self.now())?;
        let mut parts: Vec<_> = self
            .lanes
            .all()?
            .into_iter()
            .map(|(priority, lane)| (Some(priority), lane))
            .collect();
        if let Some(schedule) = &self.schedule {
            parts.push((None, std::sync::Arc::clone(&schedule.queue)));
        }
        for (lane, queue) in parts {
            for pending in queue.iter() {
                if wanted.is_empty() {
                    return Ok(Scanned { found });
                }
                let pending = pending?;
                let Some(id) = Envelope::id_of(&pending.item) else {
                    continue;
                };
                // A record a single call's look would skip (it decodes
                // each) is skipped here too.
                if wanted.contains(id) && Envelope::decode_head(&pending.item).is_ok() {
                    wanted.remove(id);
                    let location = match lane {
                        Some(priority) => Location::Lane(priority, pending.id),
                        None => Location::Scheduled(pending.id),
                    };
                    found.insert(id.to_owned(), location);
                }
            }
        }
        Ok(Scanned { found })
    }

    /// Whether a record a batch's pass found is still where the job
    /// waits: unsettled, and (in the schedule) not moved to its lane since
    /// (its lane record is then the one a look finds first).
    pub(super) fn still_there(&self, location: Location) -> Result<bool> {
        if let Location::Scheduled(record) = location {
            if self.moves.contains(record) {
                return Ok(false);
            }
        }
        self.is_live(location)
    }
}
