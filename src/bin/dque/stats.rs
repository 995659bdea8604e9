//! `dque stats`: what is in a queue, at a glance or as JSON: its jobs by
//! state and per day (wait and run times, failures, retries), its pause,
//! limits and schedules, and for a queue directory its files. Read without
//! the queue's lock.

use std::process::ExitCode;

use dque::jobs::{DayStats, Histogram, QueueStats, ScheduleInfo, Timing, JOB_CODEC_ID};
use dque::{QueueFiles, Stats};

use crate::address::{Address, AddressExt, Make};
use crate::fail::{codec_name, Failure};

/// Options of `dque stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
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
        let shown = crate::limits::Shown::of_queue(queue.as_ref()).map_err(fail)?;
        let schedules = Schedules(queue.schedules().map_err(fail)?);
        if args.json {
            let mut value = jobs_json(&jobs);
            shown.add_to(&mut value);
            schedules.add_to(&mut value);
            outln!("{value}")?;
        } else {
            out!("{}{}{}", jobs_text(&jobs), shown.text(), schedules.text())?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let files = QueueFiles::open(dir).map_err(fail)?;
    let stats = files.stats().map_err(fail)?;
    let jobs = dque::job_stats(dir).map_err(fail)?;
    let on_disk = Disk {
        holder: crate::holder::lock_holder(dir),
        files: directory_bytes(dir),
    };
    let is_jobs = stats.codec_id == JOB_CODEC_ID;
    if args.json {
        let mut value = json(dir, &stats, &on_disk);
        if is_jobs {
            // The root lane's files are one part of a jobs queue: its
            // counts are the jobs'.
            let c = &jobs.counts;
            value["items"] = (c.ready + c.scheduled + c.leased).into();
            value["delivered"] = c.leased.into();
            value["dead_letters"] = c.dead.into();
            value["bytes_on_disk"] = on_disk.files.length.into();
        }
        let serde_json::Value::Object(extra) = jobs_json(&jobs) else {
            unreachable!("an object")
        };
        for (key, field) in extra {
            if key != "queue" {
                value[key] = field;
            }
        }
        if is_jobs {
            crate::limits::Shown::of_dir(dir)
                .map_err(fail)?
                .add_to(&mut value);
            Schedules::of_dir(dir).map_err(fail)?.add_to(&mut value);
        }
        outln!("{value}")?;
    } else if is_jobs {
        let shown = crate::limits::Shown::of_dir(dir).map_err(fail)?;
        let schedules = Schedules::of_dir(dir).map_err(fail)?;
        out!(
            "{}{}{}",
            jobs_dir_text(dir, &stats, &jobs, &on_disk),
            shown.text(),
            schedules.text()
        )?;
    } else {
        out!("{}", text(dir, &stats, &on_disk))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A queue's schedules, as `stats` shows them: name, cadence, next run.
struct Schedules(Vec<ScheduleInfo>);

impl Schedules {
    /// Read from the directory's schedules file, without opening the queue.
    fn of_dir(dir: &std::path::Path) -> dque::Result<Schedules> {
        dque::jobs::stored_schedules(dir).map(Schedules)
    }

    /// One line per schedule (none when there are none), the first headed
    /// `schedules`.
    fn text(&self) -> String {
        let mut out = String::new();
        for (at, info) in self.0.iter().enumerate() {
            out.push_str(&format!(
                "{:<13}{} ({}), next run {}\n",
                if at == 0 { "schedules" } else { "" },
                info.schedule.name(),
                crate::recurring::cadence_text(&info.schedule),
                crate::when::rfc3339(info.next_run)
            ));
        }
        out
    }

    /// Adds `schedules` (as `dque schedules --json` lists them) to a JSON
    /// object.
    fn add_to(&self, value: &mut serde_json::Value) {
        value["schedules"] = self
            .0
            .iter()
            .map(crate::recurring::json_of)
            .collect::<Vec<_>>()
            .into();
    }
}

/// What `stats` of a queue directory shows beside the queue's own counts.
struct Disk {
    /// The process holding the queue's lock.
    holder: Option<u32>,
    /// Every file under the directory (dead letters, lanes and schedule of
    /// a jobs queue included).
    files: FileBytes,
}

/// What the files under a directory take.
#[derive(Debug, Clone, Copy, Default)]
struct FileBytes {
    /// Blocks allocated, in bytes (what `du` counts).
    allocated: u64,
    /// Lengths, preallocation included (what `du --apparent-size` counts).
    length: u64,
}

impl std::ops::Add for FileBytes {
    type Output = FileBytes;
    fn add(self, other: FileBytes) -> FileBytes {
        FileBytes {
            allocated: self.allocated + other.allocated,
            length: self.length + other.length,
        }
    }
}

impl Disk {
    /// `3.1 MiB (16.0 MiB of file lengths)`.
    fn on_disk(&self) -> String {
        format!(
            "{} ({} of file lengths, preallocation included; every file under the directory)",
            bytes(self.files.allocated),
            bytes(self.files.length)
        )
    }

    fn in_use(&self) -> String {
        match self.holder {
            Some(pid) => format!("yes, by process {pid}"),
            None => "no".into(),
        }
    }
}

/// The bytes of every file under `dir`; what cannot be read counts
/// nothing.
fn directory_bytes(dir: &std::path::Path) -> FileBytes {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return FileBytes::default();
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => directory_bytes(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or_else(
                |_| FileBytes::default(),
                |m| FileBytes {
                    allocated: m.blocks() * 512,
                    length: m.len(),
                },
            ),
            _ => FileBytes::default(),
        })
        .fold(FileBytes::default(), |sum, files| sum + files)
}

/// A jobs queue directory: its jobs by state (every lane, the schedule
/// and the dead letters), the files, then one line per day.
fn jobs_dir_text(dir: &std::path::Path, s: &Stats, jobs: &QueueStats, disk: &Disk) -> String {
    let c = &jobs.counts;
    let mut out = format!(
        "queue        {} (a jobs queue)\n\
         jobs         {} ready, {} scheduled, {} leased, {} dead ({} in all)\n\
         on disk      {}\n\
         format       version {}, codec {}\n\
         new segments up to {} items or {}\n\
         durability   chosen by each program that opens it (not stored)\n\
         in use       {}\n",
        dir.display(),
        c.ready,
        c.scheduled,
        c.leased,
        c.dead,
        c.ready + c.scheduled + c.leased + c.dead,
        disk.on_disk(),
        s.format_version,
        codec_name(s.codec_id),
        s.segment_items,
        bytes(u64::from(s.segment_bytes)),
        disk.in_use(),
    );
    out.push_str(&days_text(jobs));
    out
}

/// A server's queue: the jobs by state, then one line per day on record.
fn jobs_text(jobs: &QueueStats) -> String {
    let c = &jobs.counts;
    let mut out = format!(
        "jobs         {} ready, {} scheduled, {} leased, {} dead\n",
        c.ready, c.scheduled, c.leased, c.dead
    );
    out.push_str(&days_text(jobs));
    out
}

/// One line per day on record: wait and run times, failures, retries.
fn days_text(jobs: &QueueStats) -> String {
    let mut out = String::new();
    for day in &jobs.days {
        let failures: Vec<String> = day
            .failures
            .iter()
            .map(|(group, n)| format!("{group} ×{n}"))
            .collect();
        out.push_str(&format!(
            "{}   waited {}, ran {}, failed {}{}, retried {}\n",
            crate::when::date(day.day),
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
        "day": crate::when::date(day.day),
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

/// A plain FIFO queue directory: its items, segments and files.
fn text(dir: &std::path::Path, s: &Stats, disk: &Disk) -> String {
    let segments = match s.segments {
        Some((head, tail)) => format!("{} (head {head}, tail {tail})", tail - head + 1),
        None => "none yet".into(),
    };
    format!(
        "queue        {}\n\
         items        {}\n\
         delivered    {} (leased or handed back, not acked)\n\
         dead letters {}\n\
         segments     {segments}\n\
         on disk      {}\n\
         format       version {}, codec {}\n\
         new segments up to {} items or {}\n\
         durability   chosen by each program that opens it (not stored)\n\
         in use       {}\n",
        dir.display(),
        s.items,
        s.delivered,
        s.dead_letters,
        disk.on_disk(),
        s.format_version,
        codec_name(s.codec_id),
        s.segment_items,
        bytes(u64::from(s.segment_bytes)),
        disk.in_use(),
    )
}

fn json(dir: &std::path::Path, s: &Stats, disk: &Disk) -> serde_json::Value {
    serde_json::json!({
        "queue": dir,
        "kind": if s.codec_id == JOB_CODEC_ID { "jobs" } else { "fifo" },
        "directory_bytes": disk.files.allocated,
        "directory_length_bytes": disk.files.length,
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
        "locked_by_pid": disk.holder,
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
