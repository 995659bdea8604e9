//! A queue's numbers now: what the overview, the live refresh and
//! `/metrics` show, read through the Jobs API (counts, stats, the front
//! of `waiting`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::jobs::{JobQueue, QueueStats, Timing, WaitState, DAY_SECONDS};

/// Ready jobs read to find the oldest: the front of the queue, in the
/// order they will be leased (a lower priority's older jobs further back
/// are not seen).
pub const OLDEST_LOOKS_AT: usize = 64;

/// One queue's numbers.
#[derive(Debug, Clone)]
pub struct Numbers {
    /// Counts and days on record.
    pub stats: QueueStats,
    /// The age of the oldest of the first [`OLDEST_LOOKS_AT`] ready jobs.
    pub oldest_ready: Option<Duration>,
}

impl Numbers {
    /// Reads them.
    pub fn read(queue: &dyn JobQueue, now: SystemTime) -> Result<Numbers> {
        let stats = queue.stats()?;
        let oldest_ready = if stats.counts.ready == 0 {
            None
        } else {
            queue
                .waiting(OLDEST_LOOKS_AT)?
                .iter()
                .filter(|w| w.state == WaitState::Ready)
                .filter_map(|w| now.duration_since(w.job.enqueued_at).ok())
                .max()
        };
        Ok(Numbers {
            stats,
            oldest_ready,
        })
    }

    /// Today's record (UTC), if there is one.
    fn today(&self, now: SystemTime) -> Option<&crate::jobs::DayStats> {
        let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let today = secs - secs % DAY_SECONDS;
        self.stats.days.iter().find(|d| d.day == today)
    }

    /// Jobs acked today.
    pub fn done_today(&self, now: SystemTime) -> u64 {
        self.today(now).map_or(0, |d| d.run.count)
    }

    /// Jobs that became dead letters today.
    pub fn failed_today(&self, now: SystemTime) -> u64 {
        self.today(now).map_or(0, |d| d.failed())
    }

    /// Wait and run times of every day on record, merged.
    pub fn timings(&self) -> (Timing, Timing) {
        let (mut wait, mut run) = (Timing::default(), Timing::default());
        for day in &self.stats.days {
            wait.merge(&day.wait);
            run.merge(&day.run);
        }
        (wait, run)
    }
}
