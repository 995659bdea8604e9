//! Pause and concurrency limits of an embedded jobs queue (FORMAT.md,
//! "Limits and pause"), shared by every handle and process on the queue.
//!
//! Three files in `jobs/limits/`:
//! - `settings`: the truth, written durably (whole, renamed into place)
//!   under the lock: whether the queue is paused, and each limit's maximum.
//! - `control`: 16 bytes every handle maps: a word saying whether anything
//!   is in use (paused, or a limit set), and a count bumped at each change
//!   of `settings`. A lease reads the word only: a queue that uses
//!   neither pays one memory read. Mended from `settings` at every open.
//! - `holds`: which leased records hold which limit, rewritten (renamed
//!   into place, not synced) under the lock. A hold counts only while its
//!   record is still leased in the same attempt: an ack, nack, fail or
//!   release, a lease that ran out, and a process that died (its leases
//!   given back) all end it with nothing written, so a crash never leaves
//!   a limit held.
//!
//! Every decision (a limited lease, a change of settings) is made under
//! the lock: this handle's mutex, and between processes an exclusive
//! `flock` on `jobs/limits/.lock`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapMut;
use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::jobs::job::JobLease;
use crate::jobs::limits::Limit;
use crate::jobs::JobQueue;
use crate::log::layout::QueueDir;
use crate::log::lock::lock_exclusive;

/// The control word's bits.
const PAUSED: u32 = 1;
const LIMITED: u32 = 2;

/// The size of `control`: the word, padding, the change count.
const CONTROL_BYTES: u64 = 16;

/// The first line of `settings`.
const SETTINGS_MAGIC: &str = "dque-limits 1";

/// At most this many jobs whose limits are full a lease looks past.
pub(super) const MAX_SKIPPED: usize = 1000;

/// What `settings` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Settings {
    pub paused: bool,
    pub limits: BTreeMap<String, u32>,
}

impl Settings {
    fn word(&self) -> u32 {
        u32::from(self.paused) * PAUSED + u32::from(!self.limits.is_empty()) * LIMITED
    }

    fn encode(&self) -> String {
        let mut text = format!("{SETTINGS_MAGIC}\n");
        if self.paused {
            text.push_str("paused\n");
        }
        for (name, max) in &self.limits {
            text.push_str(&format!("limit {name} {max}\n"));
        }
        text
    }

    fn decode(path: &Path, text: &str) -> Result<Settings> {
        let bad = |why: &str| Error::Corrupted {
            segment: path.to_path_buf(),
            offset: 0,
            reason: format!("limits settings: {why}; remove the file to clear pause and limits"),
        };
        let mut lines = text.lines();
        if lines.next() != Some(SETTINGS_MAGIC) {
            return Err(bad("not a settings file of this version"));
        }
        let mut settings = Settings::default();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["paused"] => settings.paused = true,
                ["limit", name, max] => {
                    let max = max.parse().map_err(|_| bad("a maximum is not a number"))?;
                    settings.limits.insert((*name).to_owned(), max);
                }
                [""] => {}
                _ => return Err(bad("a line it does not know")),
            }
        }
        Ok(settings)
    }
}

/// A leased record that holds limit `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hold {
    pub name: String,
    pub priority: i32,
    pub record: u64,
    pub attempt: u16,
}

/// The pause and limits of one queue, as this handle sees them.
#[derive(Debug)]
pub(super) struct Limits {
    dir: PathBuf,
    control: MmapMut,
    local: Mutex<Local>,
}

/// What the lock guards in this handle: the settings as last read.
#[derive(Debug)]
struct Local {
    seen: u64,
    settings: Settings,
}

/// The lock held: settings current, holds readable and writable.
pub(super) struct Locked<'a> {
    limits: &'a Limits,
    local: MutexGuard<'a, Local>,
    _file: File,
}

impl Limits {
    /// Opens (making if missing) `jobs/limits/` of the queue whose jobs
    /// directory is `jobs`, and mends the control word from `settings`.
    pub fn open(jobs: &Path) -> Result<Limits> {
        let dir = jobs.join("limits");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join("control");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < CONTROL_BYTES {
            file.set_len(CONTROL_BYTES)
                .map_err(|e| Error::io(&path, e))?;
        }
        // SAFETY: the file is this queue's own, only ever 16 bytes long
        // (nothing truncates it), and every access goes through atomics.
        let control = unsafe { MmapMut::map_mut(&file) }.map_err(|e| Error::io(&path, e))?;
        let limits = Limits {
            dir,
            control,
            local: Mutex::new(Local {
                seen: u64::MAX,
                settings: Settings::default(),
            }),
        };
        if limits.settings_path().exists() || limits.word().load(Ordering::Acquire) != 0 {
            let locked = limits.lock()?;
            let word = locked.local.settings.word();
            limits.word().store(word, Ordering::Release);
        }
        Ok(limits)
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is 16 bytes, page aligned, and lives as
        // long as `self`; other processes use it only through atomics.
        unsafe { &*self.control.as_ptr().cast::<AtomicU32>() }
    }

    fn changes(&self) -> &AtomicU64 {
        // SAFETY: as `word`, at offset 8 (aligned for a u64).
        unsafe { &*self.control.as_ptr().add(8).cast::<AtomicU64>() }
    }

    /// Whether the queue is paused or has a limit set: the lease path's
    /// one look when neither is used.
    #[inline]
    pub fn in_use(&self) -> bool {
        self.word().load(Ordering::Acquire) != 0
    }

    /// Whether the queue is paused. A read.
    pub fn is_paused(&self) -> bool {
        self.word().load(Ordering::Acquire) & PAUSED != 0
    }

    fn settings_path(&self) -> PathBuf {
        self.dir.join("settings")
    }

    fn holds_path(&self) -> PathBuf {
        self.dir.join("holds")
    }

    /// Takes the lock, with the settings read again if they changed.
    pub fn lock(&self) -> Result<Locked<'_>> {
        let mut local = self.local.lock();
        let file = lock_exclusive(&self.dir.join(".lock"))?;
        let changes = self.changes().load(Ordering::Acquire);
        if local.seen != changes {
            let path = self.settings_path();
            local.settings = match std::fs::read_to_string(&path) {
                Ok(text) => Settings::decode(&path, &text)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Settings::default(),
                Err(e) => return Err(Error::io(&path, e)),
            };
            local.seen = changes;
        }
        Ok(Locked {
            limits: self,
            local,
            _file: file,
        })
    }
}

impl Locked<'_> {
    pub fn settings(&self) -> &Settings {
        &self.local.settings
    }

    /// Writes `settings` durably, then tells every handle: nothing
    /// changes if the write fails.
    pub fn change(&mut self, change: impl FnOnce(&mut Settings)) -> Result<()> {
        let mut settings = self.local.settings.clone();
        change(&mut settings);
        if settings == self.local.settings {
            return Ok(());
        }
        let limits = self.limits;
        let dir = QueueDir::new(limits.dir.clone());
        let path = limits.settings_path();
        if let Err(e) = dir.write_durably(&path, settings.encode().as_bytes()) {
            // The new file may be in place already (the directory's sync
            // failed after the rename): the old settings go back, so that
            // the call that fails has no effect, here or after a reopen.
            let _ = dir.write_durably(&path, self.local.settings.encode().as_bytes());
            return Err(e);
        }
        limits.word().store(settings.word(), Ordering::Release);
        let changes = limits.changes().fetch_add(1, Ordering::AcqRel) + 1;
        self.local.settings = settings;
        self.local.seen = changes;
        Ok(())
    }

    /// The holds on record (some perhaps ended: check them).
    pub fn holds(&self) -> Result<Vec<Hold>> {
        let path = self.limits.holds_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        // A line cut short (a crash of the host) is no hold: its process
        // is gone with its leases.
        Ok(text
            .lines()
            .filter_map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                match words.as_slice() {
                    [name, priority, record, attempt] => Some(Hold {
                        name: (*name).to_owned(),
                        priority: priority.parse().ok()?,
                        record: record.parse().ok()?,
                        attempt: attempt.parse().ok()?,
                    }),
                    _ => None,
                }
            })
            .collect())
    }

    /// Replaces the holds on record (renamed into place: a reader sees
    /// the old list or the new one).
    pub fn write_holds(&self, holds: &[Hold]) -> Result<()> {
        let path = self.limits.holds_path();
        let temp = self.limits.dir.join("holds.tmp");
        let mut text = String::new();
        for hold in holds {
            text.push_str(&format!(
                "{} {} {} {}\n",
                hold.name, hold.priority, hold.record, hold.attempt
            ));
        }
        std::fs::write(&temp, text)
            .and_then(|()| std::fs::rename(&temp, &path))
            .map_err(|e| Error::io(&path, e))
    }
}

/// The pause and the limits' maxima stored in the jobs queue directory
/// `dir`, read without opening the queue (what `dque stats` shows): not
/// paused and no limits for a queue that never had them.
///
/// ```
/// use dque::jobs::{stored_limits, EmbeddedJobs, JobQueue};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// queue.pause()?;
/// queue.set_limit("smtp", 2)?;
/// let (paused, limits) = stored_limits(&dir.path().join("q"))?;
/// assert!(paused);
/// assert_eq!(limits, [("smtp".to_owned(), 2)]);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `Io` if the settings file cannot be read; `Corrupted` if it is not one.
pub fn stored_limits(dir: &Path) -> Result<(bool, Vec<(String, u32)>)> {
    let path = dir.join("jobs").join("limits").join("settings");
    let settings = match std::fs::read_to_string(&path) {
        Ok(text) => Settings::decode(&path, &text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Settings::default(),
        Err(e) => return Err(Error::io(&path, e)),
    };
    Ok((settings.paused, settings.limits.into_iter().collect()))
}

/// The running count of each limit among `holds`.
pub(super) fn running(holds: &[Hold]) -> BTreeMap<&str, u32> {
    let mut running: BTreeMap<&str, u32> = BTreeMap::new();
    for hold in holds {
        *running.entry(hold.name.as_str()).or_default() += 1;
    }
    running
}

/// Whether each of `names` has room for one more holder (a limit with
/// no maximum always has).
fn has_room(maxima: &BTreeMap<String, u32>, running: &BTreeMap<&str, u32>, names: &[&str]) -> bool {
    names.iter().all(|name| match maxima.get(*name) {
        Some(&max) => running.get(name).copied().unwrap_or(0) < max,
        None => true,
    })
}

/// The limits of `settings` with their holders among `holds`.
pub(super) fn listed(settings: &Settings, holds: &[Hold]) -> Vec<Limit> {
    let running = running(holds);
    settings
        .limits
        .iter()
        .map(|(name, &max)| Limit {
            name: name.clone(),
            max,
            running: running.get(name.as_str()).copied().unwrap_or(0),
        })
        .collect()
}

impl super::EmbeddedJobs {
    /// The pause and limits, or `InvalidJob` on a plain FIFO queue.
    fn limits_or_refuse(&self, what: &str) -> Result<&Limits> {
        self.limits
            .as_ref()
            .ok_or_else(|| super::lanes::plain_refusal(what))
    }

    /// A lease on a queue that is paused or has limits: under the lock,
    /// the first ready job whose limits all have room, its holds written.
    pub(super) fn lease_limited(&self, limits: &Limits) -> Result<Option<JobLease>> {
        let locked = limits.lock()?;
        if locked.settings().paused {
            return Ok(None);
        }
        let (on_record, mut holds) = self.live_holds(&locked)?;
        let maxima = &locked.settings().limits;
        let counts = running(&holds);
        let mut taken: Vec<Hold> = Vec::new();
        // The jobs looked past are only read, never leased (a process
        // killed while looking must not leave them leased to the dead).
        let found = self.lease_with_room(|job, priority, record, attempt| {
            let names = crate::jobs::limits::limits_of(&job.headers);
            let room = has_room(maxima, &counts, &names);
            if room {
                taken = names
                    .iter()
                    .map(|name| Hold {
                        name: (*name).to_owned(),
                        priority,
                        record,
                        attempt,
                    })
                    .collect();
            }
            room
        })?;
        let changed = holds.len() != on_record.len() || !taken.is_empty();
        if found.is_some() {
            holds.extend(taken);
        }
        if changed {
            if let Err(e) = locked.write_holds(&holds) {
                // Not held on record: the lease goes back (no effect).
                if let Some(lease) = found {
                    let _ = JobQueue::release(self, lease);
                }
                return Err(e);
            }
        }
        Ok(found)
    }

    /// The holds on record, and those of them still live (dead
    /// processes' leases given back first).
    fn live_holds(&self, locked: &Locked<'_>) -> Result<(Vec<Hold>, Vec<Hold>)> {
        let on_record = locked.holds()?;
        let mut live = Vec::with_capacity(on_record.len() + 1);
        for hold in &on_record {
            if self.hold_is_live(hold, true)? {
                live.push(hold.clone());
            }
        }
        Ok((on_record, live))
    }

    /// Decides a lease taken without the lock (`found`, taken while the
    /// queue had neither a pause nor a limit). A pause or a limit may have
    /// been set since, and a limit set later must count this job: so a job
    /// that names limits is kept only if, under the lock, they all have
    /// room, its holds written; otherwise it goes back (uncounted) and a
    /// limited lease looks for another. A job that names none is handed
    /// back only if the queue was paused meanwhile.
    pub(super) fn admit_unlocked(
        &self,
        limits: &Limits,
        found: Option<JobLease>,
    ) -> Result<Option<JobLease>> {
        let Some(lease) = found else {
            return Ok(None);
        };
        // Most jobs name no limit: no look for one.
        if lease.job.headers.is_empty() && !limits.is_paused() {
            return Ok(Some(lease));
        }
        let names = crate::jobs::limits::limits_of(&lease.job.headers);
        if names.is_empty() && !limits.is_paused() {
            return Ok(Some(lease));
        }
        let kept = match names.is_empty() {
            true => Ok(false),
            false => self.hold_if_room(limits, &lease, &names),
        };
        match kept {
            Ok(true) => Ok(Some(lease)),
            Ok(false) => {
                self.hand_back(&lease)?;
                self.lease_limited(limits)
            }
            Err(e) => {
                let _ = self.hand_back(&lease);
                Err(e)
            }
        }
    }

    /// Under the lock: whether the queue is not paused and each of `names`
    /// has room for `lease`'s job; if so its holds are written.
    fn hold_if_room(&self, limits: &Limits, lease: &JobLease, names: &[&str]) -> Result<bool> {
        let locked = limits.lock()?;
        if locked.settings().paused {
            return Ok(false);
        }
        let (_, mut holds) = self.live_holds(&locked)?;
        let counts = running(&holds);
        let maxima = &locked.settings().limits;
        if !has_room(maxima, &counts, names) {
            return Ok(false);
        }
        let token = &lease.token;
        holds.extend(names.iter().map(|name| Hold {
            name: (*name).to_owned(),
            priority: i32::try_from(token.part).unwrap_or(i32::MAX),
            record: token.record,
            attempt: Self::lane_attempt(lease),
        }));
        locked.write_holds(&holds)?;
        Ok(true)
    }

    /// Gives a lease back uncounted, waking no one (it was never out).
    fn hand_back(&self, lease: &JobLease) -> Result<()> {
        let (_, lane) = self.lane_of(lease)?;
        lane.lessor()
            .release(lease.token.record, Self::lane_attempt(lease))
    }

    /// Whether `hold`'s record is still leased in its attempt (`mend`:
    /// dead processes' leases given back first, a write).
    fn hold_is_live(&self, hold: &Hold, mend: bool) -> Result<bool> {
        let Some(lane) = self.lanes.get(hold.priority)? else {
            return Ok(false);
        };
        match mend {
            true => lane.holds_lease(hold.record, hold.attempt),
            false => Ok(lane.held_attempt(hold.record)? == Some(hold.attempt)),
        }
    }

    /// The lock, while the queue is paused or has limits, for a call
    /// that must not see a job leased by a limited lease looking past it
    /// (`cancel`, `set_priority`, `counts`, `waiting`: such a job is
    /// waiting, not leased). Not reentrant: taken once a call.
    pub(super) fn lock_limited_leases(&self) -> Result<Option<Locked<'_>>> {
        match self.limits.as_ref().filter(|l| l.in_use()) {
            Some(limits) => limits.lock().map(Some),
            None => Ok(None),
        }
    }

    pub(super) fn set_paused(&self, paused: bool) -> Result<()> {
        self.check_open()?;
        let limits = self.limits_or_refuse("a pause")?;
        limits.lock()?.change(|s| s.paused = paused)?;
        if !paused {
            self.signal.notify();
        }
        Ok(())
    }

    pub(super) fn paused(&self) -> Result<bool> {
        self.check_open()?;
        Ok(self.limits.as_ref().is_some_and(Limits::is_paused))
    }

    pub(super) fn set_limit_to(&self, name: &str, max: Option<u32>) -> Result<bool> {
        self.check_open()?;
        crate::jobs::limits::check_limit_name(name)?;
        if let Some(max) = max {
            crate::jobs::limits::check_max(name, max)?;
        }
        let limits = self.limits_or_refuse("a limit")?;
        let mut locked = limits.lock()?;
        let was = locked.settings().limits.contains_key(name);
        locked.change(|s| match max {
            Some(max) => {
                s.limits.insert(name.to_owned(), max);
            }
            None => {
                s.limits.remove(name);
            }
        })?;
        drop(locked);
        // A higher maximum (or none) may let waiting jobs run.
        self.signal.notify();
        Ok(was)
    }

    pub(super) fn list_limits(&self) -> Result<Vec<Limit>> {
        self.check_open()?;
        let Some(limits) = &self.limits else {
            return Ok(Vec::new());
        };
        let locked = limits.lock()?;
        let mut live = Vec::new();
        for hold in locked.holds()? {
            if self.hold_is_live(&hold, false)? {
                live.push(hold);
            }
        }
        Ok(listed(locked.settings(), &live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_written() {
        let mut settings = Settings {
            paused: true,
            ..Settings::default()
        };
        settings.limits.insert("ql:q:a".into(), 3);
        let text = settings.encode();
        assert_eq!(Settings::decode(Path::new("s"), &text).unwrap(), settings);
        assert!(Settings::decode(Path::new("s"), "other\n").is_err());
    }

    #[test]
    fn a_change_is_seen_by_another_handle_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Limits::open(dir.path()).unwrap(),
            Limits::open(dir.path()).unwrap(),
        );
        assert!(!a.in_use());
        a.lock().unwrap().change(|s| s.paused = true).unwrap();
        assert!(b.is_paused(), "the mapped word is shared");
        b.lock()
            .unwrap()
            .change(|s| {
                s.limits.insert("x".into(), 1);
            })
            .unwrap();
        assert_eq!(a.lock().unwrap().settings().limits.len(), 1);
        drop((a, b));
        // A control file lost (or stale) is mended from the settings.
        std::fs::remove_file(dir.path().join("limits/control")).unwrap();
        let c = Limits::open(dir.path()).unwrap();
        assert!(c.is_paused() && c.in_use());
    }
}
