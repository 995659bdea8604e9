//! `dque stats`: what is in a queue, at a glance or as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use dque::{QueueFiles, Stats};

use crate::fail::{codec_name, Failure};

/// Options of `dque stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Print one JSON object instead of text, for scripts.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &StatsArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let files = QueueFiles::open(&args.dir).map_err(fail)?;
    let stats = files.stats().map_err(fail)?;
    let holder = crate::holder::lock_holder(&args.dir);
    if args.json {
        println!("{}", json(&args.dir, &stats, holder));
    } else {
        print!("{}", text(&args.dir, &stats, holder));
    }
    Ok(ExitCode::SUCCESS)
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
