//! Statistics kept on disk: `jobs/stats/days`, one text file for all days
//! (the last [`KEPT_DAYS`]). Each handle adds up what it saw in memory
//! and merges it in under a file lock at most once a second (by the
//! queue's clock, read by every job call anyway) and when it closes:
//! statistics cost no write and no clock read per job, and a crash loses
//! at most the last second's.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::jobs::stats::{DayStats, Histogram, Timing, DAY_SECONDS, HISTOGRAM_BUCKETS};
use crate::log::layout::QueueDir;
use crate::log::lock::lock_exclusive;

/// Days kept on record.
pub const KEPT_DAYS: u64 = 30;
const FLUSH_EVERY: Duration = Duration::from_secs(1);
const FLUSH_EVERY_MS: u64 = FLUSH_EVERY.as_millis() as u64;
const FIRST_LINE: &str = "dque-job-stats 1";

/// What this handle saw since it last merged into the file.
#[derive(Debug)]
pub struct StatsBook {
    dir: PathBuf,
    /// The days added to before `today`.
    pending: BTreeMap<u64, DayStats>,
    /// The day added to last, outside `pending` (no map search per job
    /// call); its day is never a key of `pending`.
    today: Option<DayStats>,
    /// The queue clock's time (Unix ms) of the last merge, or of the
    /// book's making.
    flushed_ms: Option<u64>,
}

/// The first second of the UTC day holding Unix millisecond `ms`.
fn day_of(ms: u64) -> u64 {
    let seconds = ms / 1_000;
    seconds - seconds % DAY_SECONDS
}

impl StatsBook {
    pub fn new(dir: PathBuf) -> Self {
        StatsBook {
            dir,
            pending: BTreeMap::new(),
            today: None,
            flushed_ms: None,
        }
    }

    /// The record of the day holding Unix millisecond `ms`, to add to.
    pub fn day(&mut self, ms: u64) -> &mut DayStats {
        let day = day_of(ms);
        if self.today.as_ref().is_none_or(|today| today.day != day) {
            self.start_day(day);
        }
        self.today.as_mut().expect("set above")
    }

    /// Makes `day` the one added to, the last one put with the others.
    #[cold]
    fn start_day(&mut self, day: u64) {
        if let Some(last) = self.today.take() {
            self.pending.insert(last.day, last);
        }
        let stats = self.pending.remove(&day);
        self.today = Some(stats.unwrap_or_else(|| DayStats::new(day)));
    }

    /// What this handle saw and has not merged yet, by day.
    fn unmerged(&self) -> impl Iterator<Item = &DayStats> {
        self.pending.values().chain(self.today.as_ref())
    }

    /// Merges into the file if a second has passed since the last time
    /// by the queue's clock at `now_ms` (or the clock went back a second).
    pub fn flush_if_due(&mut self, now_ms: u64) -> Result<()> {
        let last = *self.flushed_ms.get_or_insert(now_ms);
        if now_ms.abs_diff(last) >= FLUSH_EVERY_MS {
            self.flushed_ms = Some(now_ms);
            self.flush()?;
        }
        Ok(())
    }

    /// Merges what this handle saw into the file (under its lock).
    pub fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() && self.today.is_none() {
            return Ok(());
        }
        let lock = lock_exclusive(&self.dir.join("lock"))?;
        let days = merged(read_days(&self.dir)?, self.unmerged());
        write_days(&self.dir, &days)?;
        drop(lock);
        // Only once written: a failed write keeps them for the next flush.
        self.pending.clear();
        self.today = None;
        Ok(())
    }

    /// The days on record with what this handle has not merged yet. A
    /// read: the file is not written.
    pub fn days(&self) -> Result<Vec<DayStats>> {
        Ok(merged(read_days(&self.dir)?, self.unmerged())
            .into_values()
            .collect())
    }
}

/// `days` with `pending` added, the last [`KEPT_DAYS`] kept.
fn merged<'a>(
    mut days: BTreeMap<u64, DayStats>,
    pending: impl Iterator<Item = &'a DayStats>,
) -> BTreeMap<u64, DayStats> {
    for stats in pending {
        let day = stats.day;
        days.entry(day)
            .or_insert_with(|| DayStats::new(day))
            .merge(stats);
    }
    if let Some(&newest) = days.keys().next_back() {
        days.retain(|&day, _| day + KEPT_DAYS * DAY_SECONDS > newest);
    }
    days
}

pub fn read_days(dir: &Path) -> Result<BTreeMap<u64, DayStats>> {
    let path = dir.join("days");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(Error::io(&path, e)),
    };
    parse(&text).ok_or_else(|| {
        Error::corrupted(
            &path,
            0,
            "the statistics file does not parse; delete it to start counting anew",
        )
    })
}

/// Replaces the file whole and durably (temp file, fsync, rename, fsync
/// of the directory): a power loss leaves the old statistics or the new,
/// never a torn file that would stop every later merge. Once a second at
/// most, so the fsyncs cost nothing a job would notice.
fn write_days(dir: &Path, days: &BTreeMap<u64, DayStats>) -> Result<()> {
    QueueDir::new(dir.to_path_buf()).write_durably(&dir.join("days"), render(days).as_bytes())
}

/// One block per day:
/// `day D retries R` / `wait` timing / `run` timing / `fail COUNT GROUP`…
fn render(days: &BTreeMap<u64, DayStats>) -> String {
    let mut out = format!("{FIRST_LINE}\n");
    for stats in days.values() {
        let _ = writeln!(out, "day {} retries {}", stats.day, stats.retries);
        for (name, timing) in [("wait", &stats.wait), ("run", &stats.run)] {
            let _ = write!(
                out,
                "{name} {} {} {}",
                timing.count, timing.mean, timing.sum_squares
            );
            for count in &timing.histogram.buckets {
                let _ = write!(out, " {count}");
            }
            out.push('\n');
        }
        for (group, count) in &stats.failures {
            let _ = writeln!(out, "fail {count} {}", group.escape_default());
        }
    }
    out
}

fn parse(text: &str) -> Option<BTreeMap<u64, DayStats>> {
    let mut lines = text.lines();
    if lines.next()? != FIRST_LINE {
        return None;
    }
    let mut days = BTreeMap::new();
    let mut current: Option<DayStats> = None;
    for line in lines {
        let (kind, rest) = line.split_once(' ')?;
        match kind {
            "day" => {
                let mut words = rest.split(' ');
                let day = words.next()?.parse().ok()?;
                (words.next()? == "retries").then_some(())?;
                let mut stats = DayStats::new(day);
                stats.retries = words.next()?.parse().ok()?;
                if let Some(done) = current.replace(stats) {
                    days.insert(done.day, done);
                }
            }
            "wait" | "run" => {
                let timing = parse_timing(rest)?;
                let stats = current.as_mut()?;
                *(if kind == "wait" {
                    &mut stats.wait
                } else {
                    &mut stats.run
                }) = timing;
            }
            "fail" => {
                let (count, group) = rest.split_once(' ')?;
                let group = unescape(group)?;
                current
                    .as_mut()?
                    .failures
                    .insert(group, count.parse().ok()?);
            }
            _ => return None,
        }
    }
    if let Some(done) = current {
        days.insert(done.day, done);
    }
    Some(days)
}

fn parse_timing(rest: &str) -> Option<Timing> {
    let mut words = rest.split(' ');
    let count = words.next()?.parse().ok()?;
    let mean = words.next()?.parse().ok()?;
    let sum_squares = words.next()?.parse().ok()?;
    let buckets: Vec<u64> = words.map(|w| w.parse().ok()).collect::<Option<_>>()?;
    (buckets.len() == HISTOGRAM_BUCKETS).then_some(Timing {
        count,
        mean,
        sum_squares,
        histogram: Histogram { buckets },
    })
}

/// Undoes `str::escape_default` (`\n`, `\t`, `\\`, `\'`, `\"`, `\u{…}`).
fn unescape(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'u' => {
                (chars.next()? == '{').then_some(())?;
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pins the day kept outside the map (the one a job call adds to):
    // calls that go back and forth between days, read before and after
    // a flush, count every duration once, in its own day.
    #[test]
    fn days_added_to_in_turn_are_each_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut book = StatsBook::new(dir.path().to_path_buf());
        let (a, b) = (20_000 * DAY_SECONDS, 20_001 * DAY_SECONDS);
        for (day, secs) in [(a, 1), (b, 2), (a, 3), (a, 4), (b, 5)] {
            book.day(day * 1_000 + 5)
                .run
                .record(Duration::from_secs(secs));
        }
        let counts = |days: Vec<DayStats>| -> Vec<(u64, u64, f64)> {
            days.iter()
                .map(|d| (d.day, d.run.count, d.run.mean))
                .collect()
        };
        let expected = vec![(a, 3, 8.0 / 3.0), (b, 2, 3.5)];
        let close = |got: Vec<(u64, u64, f64)>| {
            assert_eq!(got.len(), expected.len(), "{got:?}");
            for (g, e) in got.iter().zip(&expected) {
                assert!(
                    g.0 == e.0 && g.1 == e.1 && (g.2 - e.2).abs() < 1e-9,
                    "{got:?}"
                );
            }
        };
        close(counts(book.days().unwrap()));
        book.flush().unwrap();
        close(counts(book.days().unwrap()));
        book.day(b * 1_000).run.record(Duration::from_secs(8));
        book.flush().unwrap();
        let days = read_days(dir.path()).unwrap();
        assert_eq!((days[&a].run.count, days[&b].run.count), (3, 3));
    }

    #[test]
    fn days_read_back_as_written() {
        let mut day = DayStats::new(86_400 * 20_000);
        day.wait.record(Duration::from_millis(1_500));
        day.wait.record(Duration::from_secs(4_000));
        day.run.record(Duration::from_secs(90));
        day.retries = 3;
        day.record_failure("exit 3: disk \"full\"\n\u{1}é");
        day.record_failure("timeout");
        let days = BTreeMap::from([(day.day, day)]);
        assert_eq!(parse(&render(&days)), Some(days));
        assert_eq!(parse("dque-job-stats 1\nwait 1 2 3"), None);
    }
}
