//! Caller-chosen job ids: one small file per id in `jobs/ids/`, named by
//! the id in hex, saying where the job's record is. Memory does not grow
//! with the jobs, every process sees the same files, and creating a file
//! that must not exist is the one atomic claim between producers.
//!
//! A file is only a pointer: an id counts as queued while the record it
//! names is unsettled, so a file left behind by a crash (the job acked, the
//! file not yet removed) stands for nothing. A claim, written before the
//! record exists, names its process: it holds while that process lives.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::log::layout::QueueDir;
use crate::log::lock::lock_exclusive;

/// Where a job's record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// In the lane of this priority, record id.
    Lane(i32, u64),
    /// In the schedule, record id.
    Scheduled(u64),
}

impl Location {
    /// The record's id in its queue.
    pub fn record(self) -> u64 {
        match self {
            Location::Lane(_, record) | Location::Scheduled(record) => record,
        }
    }
}

/// What an id file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A producer is enqueueing it: process id and its start time.
    Claim(u32, u64),
    At(Location),
}

/// The outcome of [`Ids::claim`].
#[derive(Debug)]
pub enum Claim {
    /// This caller holds the id: enqueue, then [`Ids::point`].
    Mine,
    /// The id is queued (or being enqueued by another process).
    Taken,
}

#[derive(Debug)]
pub struct Ids {
    dir: QueueDir,
    /// Safe durability: id files and the directory are fsynced.
    sync: bool,
    /// This process's half of the ids' lock.
    mutex: parking_lot::Mutex<()>,
    /// Pointers replaced without an fsync (Turbo, Periodic), for `sync`.
    unsynced: parking_lot::Mutex<Vec<PathBuf>>,
}

impl Ids {
    pub fn new(path: PathBuf, sync: bool) -> Self {
        Ids {
            dir: QueueDir::new(path),
            sync,
            mutex: parking_lot::Mutex::new(()),
            unsynced: parking_lot::Mutex::new(Vec::new()),
        }
    }

    fn path_of(&self, id: &str) -> PathBuf {
        let mut name = String::with_capacity(id.len() * 2);
        for byte in id.bytes() {
            name.push_str(&format!("{byte:02x}"));
        }
        self.dir.path().join(name)
    }

    /// Claims `id` for an enqueue; `live` says whether a record is unsettled.
    ///
    /// The claim is written whole under a temporary name and hard-linked
    /// to the id's name, which fails if that exists: no one ever reads a
    /// half-written claim. A file that stands for nothing is taken over
    /// only under the ids' lock (this process's mutex, then an exclusive
    /// `flock` between processes), and so is a file removed by
    /// [`forget`](Self::forget): a fresh claim is never removed for a
    /// stale one.
    pub fn claim(&self, id: &str, live: impl Fn(Location) -> Result<bool>) -> Result<Claim> {
        let path = self.path_of(id);
        let me = Entry::Claim(std::process::id(), process_start(std::process::id()));
        let temp = self.temp_of(&path);
        fs::write(&temp, render(me)).map_err(|e| Error::io(&temp, e))?;
        let claimed = self.claim_with(&path, &temp, live);
        let _ = fs::remove_file(&temp);
        claimed
    }

    fn claim_with(
        &self,
        path: &Path,
        temp: &Path,
        live: impl Fn(Location) -> Result<bool>,
    ) -> Result<Claim> {
        if self.link(temp, path)? {
            return Ok(Claim::Mine);
        }
        let _locked = self.lock()?;
        loop {
            let held = match self.read(path)? {
                None => false,
                Some(Entry::At(location)) => live(location)?,
                Some(Entry::Claim(pid, started)) => process_start(pid) == started && started != 0,
            };
            if held {
                return Ok(Claim::Taken);
            }
            // Stale: its job is gone, or its producer died before
            // enqueueing. A claim linked meanwhile by another producer (who
            // needs no lock) makes the link fail, and is read next round.
            remove_if_there(path)?;
            if self.link(temp, path)? {
                return Ok(Claim::Mine);
            }
        }
    }

    /// Links the claim at `temp` to `path`; false if `path` exists.
    fn link(&self, temp: &Path, path: &Path) -> Result<bool> {
        match fs::hard_link(temp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// A temporary name beside `path`, unique to this call.
    fn temp_of(&self, path: &Path) -> PathBuf {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let name = path.file_name().expect("an id file").to_string_lossy();
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        self.dir
            .path()
            .join(format!(".{name}.{}.{call}.claim", std::process::id()))
    }

    /// The ids' lock: this process's mutex, then `.lock`'s `flock` (which
    /// threads of one process would share).
    fn lock(&self) -> Result<(parking_lot::MutexGuard<'_, ()>, fs::File)> {
        let guard = self.mutex.lock();
        let file = lock_exclusive(&self.dir.path().join(".lock"))?;
        Ok((guard, file))
    }

    /// Gives up a claim (the enqueue failed).
    pub fn unclaim(&self, id: &str) {
        let _ = fs::remove_file(self.path_of(id));
    }

    /// Points `id` at `location` (after the record is written there):
    /// replaced whole, durably in Safe mode.
    pub fn point(&self, id: &str, location: Location) -> Result<()> {
        let path = self.path_of(id);
        let bytes = render(Entry::At(location));
        if self.sync {
            return self.dir.write_durably(&path, bytes.as_bytes());
        }
        let temp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            crate::faults::check(crate::faults::FaultOp::Write, &temp)?;
            fs::write(&temp, bytes.as_bytes())?;
            fs::rename(&temp, &path)?;
            crate::faults::renamed(&temp, &path);
            Ok(())
        };
        write().map_err(|e| Error::io(&path, e))?;
        // Made durable by the next `sync` (Turbo and Periodic).
        self.unsynced.lock().push(path);
        Ok(())
    }

    /// Makes the pointers written since the last call durable, files and
    /// directory (Safe mode writes each durably already).
    pub fn sync(&self) -> Result<()> {
        let unsynced = std::mem::take(&mut *self.unsynced.lock());
        if unsynced.is_empty() {
            return Ok(());
        }
        for path in &unsynced {
            let synced = crate::faults::check(crate::faults::FaultOp::Sync, path)
                .and_then(|()| fs::File::open(path))
                .and_then(|file| file.sync_data());
            match synced {
                Ok(()) => crate::faults::synced(path, crate::faults::Durable::File),
                // Removed since (its job ended): nothing to keep.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    self.unsynced.lock().extend(unsynced.iter().cloned());
                    return Err(Error::io(path, e));
                }
            }
        }
        self.dir.sync()
    }

    /// Where `id` points, if its file names a record.
    pub fn find(&self, id: &str) -> Result<Option<Location>> {
        Ok(match self.read(&self.path_of(id))? {
            Some(Entry::At(location)) => Some(location),
            _ => None,
        })
    }

    /// Removes `id`'s file if it still points at `location` (a job that
    /// ran, died or was cancelled), under the ids' lock. Best effort: a
    /// file left behind is stale.
    pub fn forget(&self, id: &str, location: Location) {
        let path = self.path_of(id);
        let Ok(_locked) = self.lock() else {
            return;
        };
        if let Ok(Some(Entry::At(at))) = self.read(&path) {
            if at == location {
                let _ = fs::remove_file(&path);
            }
        }
    }

    fn read(&self, path: &Path) -> Result<Option<Entry>> {
        match fs::read_to_string(path) {
            Ok(text) => Ok(Some(parse(&text).unwrap_or(Entry::Claim(0, 0)))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

fn remove_if_there(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn render(entry: Entry) -> String {
    match entry {
        Entry::Claim(pid, started) => format!("claim {pid} {started}\n"),
        Entry::At(Location::Lane(priority, record)) => format!("lane {priority} {record}\n"),
        Entry::At(Location::Scheduled(record)) => format!("scheduled {record}\n"),
    }
}

/// Reads an entry; a torn or empty file (a crash while claiming) reads as
/// `None`, which the caller takes for a dead claim.
fn parse(text: &str) -> Option<Entry> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["claim", pid, started] => Some(Entry::Claim(pid.parse().ok()?, started.parse().ok()?)),
        ["lane", priority, record] => Some(Entry::At(Location::Lane(
            priority.parse().ok()?,
            record.parse().ok()?,
        ))),
        ["scheduled", record] => Some(Entry::At(Location::Scheduled(record.parse().ok()?))),
        _ => None,
    }
}

/// When process `pid` started (clock ticks after boot, from
/// `/proc/PID/stat`), or 0 if there is no such process: a pid reused by
/// another process has another start time.
fn process_start(pid: u32) -> u64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name may hold spaces: fields are counted after its ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|field| field.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_this_process_has_a_start_time() {
        for entry in [
            Entry::Claim(12, 34),
            Entry::At(Location::Lane(-3, 9)),
            Entry::At(Location::Scheduled(u64::MAX)),
        ] {
            assert_eq!(parse(&render(entry)), Some(entry));
        }
        assert_eq!(parse("lane 1"), None);
        assert_ne!(process_start(std::process::id()), 0);
        assert_eq!(process_start(u32::MAX), 0);
    }
}
