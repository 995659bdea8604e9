//! Caller-chosen job ids: one small file per id in `jobs/ids/`, named by
//! the id in hex, saying where the job's record is. Memory does not grow
//! with the jobs and every process sees the same files.
//!
//! A file is only a pointer: an id counts as queued while the record it
//! names is unsettled, so a file left behind by a crash (the job acked, the
//! file not yet removed) stands for nothing.
//!
//! Every read that decides and every change of an id file happens under
//! the ids' lock ([`Ids::lock`]), and a job's record with a caller id
//! becomes visible and gets its pointer within one hold of that lock
//! (enqueues and moves alike). So no one moves or settles a record whose
//! pointer is not written yet, a pointer is never replaced by an older
//! one, and an id whose pointer names a settled record names no live job.
//! An enqueue writes a claim naming its process before its record: a
//! claim found under the lock is an enqueue that never finished (its
//! process died, or its write failed), and its record, if written, is
//! looked for before the id is taken.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

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

/// What an id names, read under the ids' lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// No live job: the id may be enqueued.
    Free,
    /// The unsettled record of a live job.
    Live(Location),
    /// An enqueue that never finished (its process died between its
    /// claim and its pointer, or its write failed): its record may exist.
    Interrupted,
}

#[derive(Debug)]
pub struct Ids {
    dir: QueueDir,
    /// Safe durability: pointers and the directory are fsynced.
    sync: bool,
    /// This process's half of the ids' lock.
    mutex: parking_lot::Mutex<()>,
    /// Pointers replaced without an fsync (Turbo, Periodic), for `sync`.
    unsynced: parking_lot::Mutex<Vec<PathBuf>>,
}

/// The ids' lock, held: this process's mutex, then an exclusive `flock`
/// on `.lock` between processes (threads of one process would share it).
/// Every change of an id file goes through it.
pub struct IdsLock<'a> {
    ids: &'a Ids,
    _guard: parking_lot::MutexGuard<'a, ()>,
    _file: fs::File,
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

    /// Takes the ids' lock: hold it from before a record with a caller id
    /// is written until its pointer is.
    pub fn lock(&self) -> Result<IdsLock<'_>> {
        let guard = self.mutex.lock();
        let file = lock_exclusive(&self.dir.path().join(".lock"))?;
        Ok(IdsLock {
            ids: self,
            _guard: guard,
            _file: file,
        })
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

    /// Where `id` points, if its file names a record (a read without the
    /// lock: the record may have been settled since).
    pub fn find(&self, id: &str) -> Result<Option<Location>> {
        Ok(match self.read(&self.path_of(id))? {
            Some(Entry::At(location)) => Some(location),
            _ => None,
        })
    }

    fn read(&self, path: &Path) -> Result<Option<Entry>> {
        match fs::read_to_string(path) {
            // A torn or empty file is a claim whose writer died.
            Ok(text) => Ok(Some(parse(&text).unwrap_or(Entry::Claim(0, 0)))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Replaces `path` whole with `entry` (temporary file and rename; the
    /// temporary name is shared, which the lock makes safe): durably in
    /// Safe mode if `durable`, else left for the next `sync`.
    fn replace(&self, path: PathBuf, entry: Entry, durable: bool) -> Result<()> {
        let bytes = render(entry);
        if self.sync && durable {
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
        if durable {
            self.unsynced.lock().push(path);
        }
        Ok(())
    }
}

impl IdsLock<'_> {
    /// What `id` names now; `live` says whether a record is unsettled.
    pub fn holder(&self, id: &str, live: impl Fn(Location) -> Result<bool>) -> Result<Holder> {
        Ok(match self.ids.read(&self.ids.path_of(id))? {
            None => Holder::Free,
            Some(Entry::At(location)) if live(location)? => Holder::Live(location),
            Some(Entry::At(_)) => Holder::Free,
            // Claims are written and resolved within one hold of the lock:
            // one seen here was never resolved.
            Some(Entry::Claim(..)) => Holder::Interrupted,
        })
    }

    /// Marks `id` as being enqueued by this process, before its record is
    /// written: if the process dies before [`point`](Self::point), the
    /// next enqueue of the id looks for the record. (Not fsynced: it lives
    /// for one call, and is replaced by the pointer, durable in Safe mode.)
    pub fn claim(&self, id: &str) -> Result<()> {
        let me = Entry::Claim(std::process::id(), process_start(std::process::id()));
        self.ids.replace(self.ids.path_of(id), me, false)
    }

    /// Gives up a claim (the enqueue failed and wrote nothing).
    pub fn unclaim(&self, id: &str) {
        let _ = fs::remove_file(self.ids.path_of(id));
    }

    /// Points `id` at `location`, where its record was just written:
    /// replaced whole, durably in Safe mode.
    pub fn point(&self, id: &str, location: Location) -> Result<()> {
        self.ids
            .replace(self.ids.path_of(id), Entry::At(location), true)
    }

    /// Removes `id`'s file if it still points at `location` (a job that
    /// ran, died or was cancelled). Best effort: a file left behind names
    /// a settled record, which stands for nothing.
    pub fn forget(&self, id: &str, location: Location) {
        let path = self.ids.path_of(id);
        if let Ok(Some(Entry::At(at))) = self.ids.read(&path) {
            if at == location {
                let _ = fs::remove_file(&path);
            }
        }
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
