//! Reading a jobs queue directory without opening it (no lock, no shared
//! mode join), for tools: which queues it is made of, and its statistics.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::jobs::embedded::{lane_name, read_days};
use crate::jobs::{Counts, QueueStats, JOB_CODEC_ID};
use crate::tools::inspect::QueueFiles;

/// A part of a jobs queue: a priority lane, or the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobPart {
    /// The lane of this priority (0: the queue directory itself).
    Lane(i32),
    /// The jobs waiting for their time.
    Scheduled,
}

/// The queues a job queue directory is made of, each with its directory:
/// the lanes from the smallest priority up, then the schedule. A plain
/// FIFO queue is one lane of priority 0. A read: nothing is opened.
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob};
/// use dque::{job_parts, JobPart};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q = EmbeddedJobs::create(dir.path().join("q"))?;
/// q.enqueue(NewJob::new("x").priority(-2))?;
/// let parts: Vec<JobPart> = job_parts(q.path())?.into_iter().map(|(part, _)| part).collect();
/// assert_eq!(parts, [JobPart::Lane(-2), JobPart::Lane(0), JobPart::Scheduled]);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `NotFound` or `NotAQueue` if `path` holds no queue; `Io` listing it.
pub fn job_parts(path: impl AsRef<Path>) -> Result<Vec<(JobPart, PathBuf)>> {
    let path = path.as_ref();
    let root = QueueFiles::open(path)?;
    let mut lanes = vec![(0, path.to_path_buf())];
    if root.stats()?.codec_id != JOB_CODEC_ID {
        return Ok(vec![(JobPart::Lane(0), path.to_path_buf())]);
    }
    let lanes_dir = path.join("jobs").join("lanes");
    match std::fs::read_dir(&lanes_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(&lanes_dir, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Ok(priority) = name.parse::<i32>() {
                    if priority != 0 && lane_name(priority) == name {
                        lanes.push((priority, entry.path()));
                    }
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&lanes_dir, e)),
    }
    lanes.sort_by_key(|(priority, _)| *priority);
    let mut parts: Vec<(JobPart, PathBuf)> = lanes
        .into_iter()
        .map(|(priority, dir)| (JobPart::Lane(priority), dir))
        .collect();
    let scheduled = path.join("jobs").join("scheduled");
    if scheduled.is_dir() {
        parts.push((JobPart::Scheduled, scheduled));
    }
    Ok(parts)
}

/// The statistics of the job queue at `path`, read without opening it (it
/// works while programs have it open, in any mode). Counts: `leased` is
/// every job delivered and not acked (held now, or handed back to run
/// again), `ready` the rest of the lanes.
///
/// # Errors
///
/// As [`job_parts`]; `Corrupted` for a statistics file that does not parse.
pub fn job_stats(path: impl AsRef<Path>) -> Result<QueueStats> {
    let path = path.as_ref();
    let mut counts = Counts::default();
    for (part, dir) in job_parts(path)? {
        let stats = QueueFiles::open(&dir)?.stats()?;
        match part {
            JobPart::Lane(_) => {
                counts.ready += stats.items - stats.delivered;
                counts.leased += stats.delivered;
                counts.dead += stats.dead_letters;
            }
            JobPart::Scheduled => counts.scheduled += stats.items,
        }
    }
    let stats_dir = path.join("jobs").join("stats");
    let days = if stats_dir.is_dir() {
        read_days(&stats_dir)?.into_values().collect()
    } else {
        Vec::new()
    };
    let queue = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(QueueStats {
        queue,
        counts,
        days,
    })
}
