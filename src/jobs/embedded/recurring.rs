//! Recurring jobs of the embedded queue: the schedules in one text file,
//! `jobs/schedules/list` (FORMAT.md, "Schedules"), rewritten whole
//! (durably, by rename) under the lock file beside it. Firing a schedule
//! reads the file under the lock, enqueues the jobs of its due ticks
//! (caller ids `NAME@TICK`) and writes its next tick, all under the lock:
//! the compare-and-set that gives one job per tick between the threads and
//! processes of a queue.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::EmbeddedJobs;
use crate::error::{Error, Result};
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::recurring::{next_run_for, Schedule, ScheduleInfo};
use crate::jobs::{JobQueue, UniqueStates};
use crate::log::layout::QueueDir;
use crate::log::lock::lock_exclusive;

const FIRST_LINE: &str = "dque-schedules 1";

/// The schedules directory of the queue at `path`.
pub(super) fn dir_of(path: &Path) -> PathBuf {
    path.join("jobs").join("schedules")
}

fn list_path(dir: &Path) -> PathBuf {
    dir.join("list")
}

/// The schedules in the file (none if there is no file yet). A read.
fn read(dir: &Path) -> Result<Vec<ScheduleInfo>> {
    let path = list_path(dir);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let bad = || {
        Error::corrupted(
            &path,
            0,
            "the schedules file does not parse; remove it and add the schedules again",
        )
    };
    let mut lines = text.lines();
    if lines.next() != Some(FIRST_LINE) {
        return Err(bad());
    }
    lines
        .map(|line| {
            let (next, json) = line.split_once('\t').ok_or_else(bad)?;
            let next = next.parse::<u64>().map_err(|_| bad())?;
            Ok(ScheduleInfo {
                schedule: Schedule::from_json(json).map_err(|_| bad())?,
                next_run: from_unix_ms(next),
            })
        })
        .collect()
}

fn write(dir: &Path, schedules: &[ScheduleInfo]) -> Result<()> {
    let mut text = format!("{FIRST_LINE}\n");
    for info in schedules {
        text.push_str(&format!(
            "{}\t{}\n",
            unix_ms(info.next_run),
            info.schedule.to_json()
        ));
    }
    QueueDir::new(dir.to_path_buf()).write_durably(&list_path(dir), text.as_bytes())
}

/// The schedules of the jobs queue directory `dir`, with their next runs,
/// read from its schedules file without opening the queue (as `dque
/// stats` reads a queue another process holds): none if it has none. A
/// read; the file is replaced whole by a rename, so it is never seen
/// half written.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::{stored_schedules, EmbeddedJobs, JobQueue, Schedule};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.schedule(Schedule::every("tick", Duration::from_secs(60)))?;
/// let listed = stored_schedules(&dir.path().join("q"))?;
/// assert_eq!(listed[0].schedule.name(), "tick");
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `Io` if the file cannot be read; `Corrupted` if it does not parse.
pub fn stored_schedules(dir: &Path) -> Result<Vec<ScheduleInfo>> {
    read(&dir_of(dir))
}

/// Runs `change` on the schedules under the lock, and writes them if it
/// says so.
fn locked<R>(
    dir: &Path,
    change: impl FnOnce(&mut Vec<ScheduleInfo>) -> Result<(R, bool)>,
) -> Result<R> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let _lock = lock_exclusive(&dir.join("lock"))?;
    let mut schedules = read(dir)?;
    let (answer, changed) = change(&mut schedules)?;
    if changed {
        write(dir, &schedules)?;
    }
    Ok(answer)
}

impl EmbeddedJobs {
    fn schedules_dir(&self) -> Result<PathBuf> {
        if self.is_plain() {
            return Err(Error::InvalidJob {
                reason: "a plain FIFO queue has no schedules: make a jobs queue \
                         (EmbeddedJobs::create)"
                    .to_owned(),
            });
        }
        Ok(dir_of(&self.path))
    }

    pub(super) fn add_schedule(&self, schedule: Schedule) -> Result<ScheduleInfo> {
        self.check_open()?;
        schedule.check()?;
        let dir = self.schedules_dir()?;
        let now = self.now();
        let info = locked(&dir, |schedules| {
            let at = schedules
                .iter()
                .position(|s| s.schedule.name() == schedule.name());
            let replaced = at.map(|i| (&schedules[i].schedule, schedules[i].next_run));
            let info = ScheduleInfo {
                next_run: next_run_for(&schedule, replaced, now)?,
                schedule,
            };
            match at {
                Some(i) => schedules[i] = info.clone(),
                None => {
                    schedules.push(info.clone());
                    schedules.sort_by(|a, b| a.schedule.name().cmp(b.schedule.name()));
                }
            }
            Ok((info, true))
        })?;
        self.due_schedules.forget();
        Ok(info)
    }

    pub(super) fn remove_schedule(&self, name: &str) -> Result<bool> {
        self.check_open()?;
        let dir = self.schedules_dir()?;
        let removed = locked(&dir, |schedules| {
            let before = schedules.len();
            schedules.retain(|s| s.schedule.name() != name);
            let removed = schedules.len() != before;
            Ok((removed, removed))
        })?;
        self.due_schedules.forget();
        Ok(removed)
    }

    pub(super) fn list_schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.check_open()?;
        read(&self.schedules_dir()?)
    }

    /// Fires the schedules due at `now`: the jobs of their ticks, and
    /// their next ticks written, under the lock. The number of jobs added.
    pub(super) fn fire_due(&self, now: SystemTime) -> Result<usize> {
        let now_ms = unix_ms(now);
        if self.is_plain() {
            self.due_schedules.never();
            return Ok(0);
        }
        let dir = dir_of(&self.path);
        // A read first: most checks (the refresh every second) find
        // nothing due and take no lock.
        let listed = read(&dir)?;
        let earliest = listed.iter().map(|s| s.next_run).min();
        if earliest.is_none_or(|t| t > now) {
            self.due_schedules.remember(earliest, now_ms);
            return Ok(0);
        }
        let (added, earliest) = locked(&dir, |schedules| {
            let mut added = 0;
            let mut changed = false;
            for info in schedules.iter_mut() {
                let Some(firing) = info.schedule.plan(info.next_run, now)? else {
                    continue;
                };
                // The enqueue and the file's write below are two steps: a
                // failure or crash between them fires these ticks again,
                // which their ids' holds make add nothing.
                let hold = info.schedule.refire_hold(&firing, now)?;
                let jobs = firing
                    .ticks
                    .iter()
                    .map(|&tick| {
                        info.schedule
                            .job_for(tick)
                            .unique_for(hold)
                            .unique_states(UniqueStates::ALL)
                    })
                    .collect::<Vec<_>>();
                added += self
                    .enqueue_batch(jobs)?
                    .iter()
                    .filter(|e| e.is_added())
                    .count();
                info.next_run = firing.next;
                changed = true;
            }
            let earliest = schedules.iter().map(|s| s.next_run).min();
            Ok(((added, earliest), changed))
        })?;
        self.due_schedules.remember(earliest, now_ms);
        Ok(added)
    }

    /// As [`fire_due`](Self::fire_due) for a lease: an error does not stop
    /// the lease (the schedules are tried again within a second).
    pub(super) fn fire_due_quietly(&self, now: SystemTime) {
        if self.fire_due(now).is_err() {
            self.due_schedules.remember(None, unix_ms(now));
        }
    }
}
