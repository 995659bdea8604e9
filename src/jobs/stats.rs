//! Statistics of a job queue: jobs by state now, and per day the wait
//! and run times, failures by reason and retries, in qless's shape.

use std::collections::BTreeMap;
use std::time::Duration;

/// Seconds in a day: statistics are kept per UTC day.
pub const DAY_SECONDS: u64 = 86_400;

/// Buckets of a [`Histogram`]: seconds 0–59, minutes 1–59, hours 1–23,
/// days 1–7 (the last one: 7 days or more).
pub const HISTOGRAM_BUCKETS: usize = 60 + 59 + 23 + 7;

/// Jobs by state, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Ready to be leased.
    pub ready: u64,
    /// Waiting for their time.
    pub scheduled: u64,
    /// Held by a worker.
    pub leased: u64,
    /// Dead letters.
    pub dead: u64,
}

/// Durations in qless's histogram: one bucket per second for the first
/// minute, per minute for the first hour, per hour for the first day,
/// then per day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// Counts per bucket, in the order of [`Histogram::bucket_name`].
    pub buckets: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; HISTOGRAM_BUCKETS],
        }
    }
}

impl Histogram {
    /// The bucket a duration falls in.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dque::jobs::Histogram;
    ///
    /// let bucket = Histogram::bucket_of(Duration::from_secs(90));
    /// assert_eq!(Histogram::bucket_name(bucket), "m1");
    /// ```
    pub fn bucket_of(duration: Duration) -> usize {
        let s = duration.as_secs();
        if s < 60 {
            s as usize
        } else if s < 3_600 {
            59 + (s / 60) as usize
        } else if s < DAY_SECONDS {
            59 + 59 + (s / 3_600) as usize
        } else {
            59 + 59 + 23 + (s / DAY_SECONDS).min(7) as usize
        }
    }

    /// qless's name of bucket `index`: `s0`…`s59`, `m1`…`m59`,
    /// `h1`…`h23`, `d1`…`d7`.
    pub fn bucket_name(index: usize) -> String {
        match index {
            0..=59 => format!("s{index}"),
            60..=118 => format!("m{}", index - 59),
            119..=141 => format!("h{}", index - 118),
            _ => format!("d{}", index - 141),
        }
    }

    fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
    }
}

/// Count, mean and variance of durations (Welford's method, as qless keeps
/// them), and their histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    /// How many durations.
    pub count: u64,
    /// Their mean, in seconds.
    pub mean: f64,
    /// The sum of squared differences from the mean (qless's `vk`).
    pub sum_squares: f64,
    /// Their histogram.
    pub histogram: Histogram,
}

impl Timing {
    /// Adds one duration.
    pub fn record(&mut self, duration: Duration) {
        let value = duration.as_secs_f64();
        self.count += 1;
        let old_mean = self.mean;
        self.mean += (value - old_mean) / self.count as f64;
        self.sum_squares += (value - self.mean) * (value - old_mean);
        self.histogram.buckets[Histogram::bucket_of(duration)] += 1;
    }

    /// The sample variance in seconds² (0 with fewer than two).
    pub fn variance(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            self.sum_squares / (self.count - 1) as f64
        }
    }

    /// Adds every duration of `other` (Chan's parallel combination).
    pub fn merge(&mut self, other: &Timing) {
        if other.count == 0 {
            return;
        }
        let total = self.count + other.count;
        let delta = other.mean - self.mean;
        self.mean += delta * other.count as f64 / total as f64;
        self.sum_squares += other.sum_squares
            + delta * delta * self.count as f64 * other.count as f64 / total as f64;
        self.count = total;
        self.histogram.add(&other.histogram);
    }
}

/// What happened in one queue on one UTC day.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DayStats {
    /// The day's first second (Unix time, a multiple of [`DAY_SECONDS`]).
    pub day: u64,
    /// Enqueue (or due time) to first lease.
    pub wait: Timing,
    /// Lease to ack.
    pub run: Timing,
    /// Jobs that became dead letters, by reason: the text before the
    /// reason's first colon (`dque work` says `exit 3: …`, grouped as
    /// `exit 3`).
    pub failures: BTreeMap<String, u64>,
    /// Nacks that put a job back to run again.
    pub retries: u64,
}

impl DayStats {
    /// An empty record of `day`.
    pub fn new(day: u64) -> Self {
        DayStats {
            day,
            ..DayStats::default()
        }
    }

    /// Jobs that became dead letters that day.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// Adds everything of `other` (the same day) to this one.
    pub fn merge(&mut self, other: &DayStats) {
        self.wait.merge(&other.wait);
        self.run.merge(&other.run);
        for (reason, count) in &other.failures {
            *self.failures.entry(reason.clone()).or_default() += count;
        }
        self.retries += other.retries;
    }

    /// Counts one failure with `reason`.
    pub fn record_failure(&mut self, reason: &str) {
        *self.failures.entry(failure_group(reason)).or_default() += 1;
    }
}

/// The group a failure reason is counted in: the text before its first colon.
pub fn failure_group(reason: &str) -> String {
    reason.split(':').next().unwrap_or("").trim().to_owned()
}

/// A queue's statistics: the counts now, and the days on record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Jobs by state now.
    pub counts: Counts,
    /// The days on record, oldest first.
    pub days: Vec<DayStats>,
}
