//! `dque stats`: what is in a queue, at a glance or as JSON: its jobs by
//! state and per day (wait and run times, failures, retries), and for a
//! queue directory its files. Read without the queue's lock.

use std::process::ExitCode;

use dque::jobs::{DayStats, Histogram, QueueStats, Timing};
use dque::{QueueFiles, Stats};

use crate::address::{Address, Make};
use crate::fail::{codec_name, Failure};

/// Options of `dque stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS")]
    pub address: Address,
    /// Print one JSON object instead of text, for scripts.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &StatsArgs) -> Result<ExitCode, Failure> {
    let fail = |e| args.address.failure(e);
    let Address::Dir(dir) = &args.address else {
        // A server's queue: its jobs, as the backend counts them.
        let queue = args.address.open(Make::No)?;
        let jobs = queue.stats().map_err(fail)?;
        if args.json {
            outln!("{}", jobs_json(&jobs))?;
        } else {
            out!("{}", jobs_text(&jobs))?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let files = QueueFiles::open(dir).map_err(fail)?;
    let stats = files.stats().map_err(fail)?;
    let jobs = dque::job_stats(dir).map_err(fail)?;
    let holder = crate::holder::lock_holder(dir);
    if args.json {
        let mut value = json(dir, &stats, holder);
        let serde_json::Value::Object(extra) = jobs_json(&jobs) else {
            unreachable!("an object")
        };
        for (key, field) in extra {
            if key != "queue" {
                value[key] = field;
            }
        }
        outln!("{value}")?;
    } else {
        out!("{}", text(dir, &stats, holder))?;
        out!("{}", jobs_text(&jobs))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The jobs by state, then one line per day on record.
fn jobs_text(jobs: &QueueStats) -> String {
    let c = &jobs.counts;
    let mut out = format!(
        "jobs         {} ready, {} scheduled, {} leased, {} dead\n",
        c.ready, c.scheduled, c.leased, c.dead
    );
    for day in &jobs.days {
        let failures: Vec<String> = day
            .failures
            .iter()
            .map(|(group, n)| format!("{group} ×{n}"))
            .collect();
        out.push_str(&format!(
            "{}   waited {}, ran {}, failed {}{}, retried {}\n",
            date(day.day),
            timing_text(&day.wait),
            timing_text(&day.run),
            day.failed(),
            match failures.is_empty() {
                true => String::new(),
                false => format!(" ({})", failures.join(", ")),
            },
            day.retries
        ));
    }
    out
}

fn timing_text(timing: &Timing) -> String {
    match timing.count {
        0 => "0".into(),
        n => format!(
            "{n} (mean {:.3} s, sd {:.3} s)",
            timing.mean,
            timing.variance().sqrt()
        ),
    }
}

/// The jobs part of `stats --json`: `counts` and `days`.
fn jobs_json(jobs: &QueueStats) -> serde_json::Value {
    let c = &jobs.counts;
    serde_json::json!({
        "queue": jobs.queue,
        "counts": {
            "ready": c.ready,
            "scheduled": c.scheduled,
            "leased": c.leased,
            "dead": c.dead,
        },
        "days": jobs.days.iter().map(day_json).collect::<Vec<_>>(),
    })
}

fn day_json(day: &DayStats) -> serde_json::Value {
    serde_json::json!({
        "day": date(day.day),
        "day_start": day.day,
        "wait": timing_json(&day.wait),
        "run": timing_json(&day.run),
        "failed": day.failed(),
        "failures": day.failures,
        "retries": day.retries,
    })
}

/// Count, mean and variance in seconds, and the histogram's non-empty
/// buckets by qless's names (`s0`…`s59`, `m1`…, `h1`…, `d1`…).
fn timing_json(timing: &Timing) -> serde_json::Value {
    let histogram: serde_json::Map<String, serde_json::Value> = timing
        .histogram
        .buckets
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(i, &n)| (Histogram::bucket_name(i), n.into()))
        .collect();
    serde_json::json!({
        "count": timing.count,
        "mean": timing.mean,
        "variance": timing.variance(),
        "histogram": histogram,
    })
}

/// `YYYY-MM-DD` of a Unix time (UTC), by Howard Hinnant's civil_from_days.
fn date(unix_seconds: u64) -> String {
    let z = (unix_seconds / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn text(dir: &std::path::Path, s: &Stats, holder: Option<u32>) -> String {
    let segments = match s.segments {
        Some((head, tail)) => format!("{} (head {head}, tail {tail})", tail - head + 1),
        None => "none yet".into(),
    };
    let in_use = match holder {
        Some(pid) => format!("yes, by process {pid}"),
        None => "no".into(),
    };
    format!(
        "queue        {}\n\
         items        {}\n\
         delivered    {} (leased or handed back, not acked)\n\
         dead letters {}\n\
         segments     {segments}\n\
         on disk      {}\n\
         format       version {}, codec {} ({})\n\
         new segments up to {} items or {}\n\
         durability   chosen by each program that opens it (not stored)\n\
         in use       {in_use}\n",
        dir.display(),
        s.items,
        s.delivered,
        s.dead_letters,
        bytes(s.bytes_on_disk),
        s.format_version,
        s.codec_id,
        codec_name(s.codec_id),
        s.segment_items,
        bytes(u64::from(s.segment_bytes)),
    )
}

fn json(dir: &std::path::Path, s: &Stats, holder: Option<u32>) -> serde_json::Value {
    serde_json::json!({
        "queue": dir,
        "items": s.items,
        "delivered": s.delivered,
        "dead_letters": s.dead_letters,
        "head_segment": s.segments.map(|(head, _)| head),
        "tail_segment": s.segments.map(|(_, tail)| tail),
        "segments": s.segments.map_or(0, |(head, tail)| tail - head + 1),
        "bytes_on_disk": s.bytes_on_disk,
        "format_version": s.format_version,
        "codec_id": s.codec_id,
        "codec": codec_name(s.codec_id),
        "segment_items": s.segment_items,
        "segment_bytes": s.segment_bytes,
        "locked_by_pid": holder,
    })
}

/// A byte count in B, KiB, MiB or GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(super::date(0), "1970-01-01");
        assert_eq!(super::date(951_782_400), "2000-02-29");
        assert_eq!(super::date(1_795_478_399), "2026-11-23");
    }
}
