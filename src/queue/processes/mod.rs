//! Shared mode: several processes on one queue directory, no daemon.
//!
//! Every process maps the same segments and keeps its own view of them
//! (offsets, settled records), as in exclusive mode. What they share is the
//! control file ([`control`]): a robust process-shared mutex held around
//! every call, the queue's shape, so that a process catches up with what the
//! others changed since it last held the mutex, and a futex word that wakes
//! blocked callers of every process. Liveness is told by byte locks on
//! `dque.lock` ([`locks`]), which the kernel drops the moment a process dies,
//! so a reused pid can never pass for a live process. FORMAT.md, "Shared
//! mode", is the protocol.

mod commit;
mod control;
mod filesystem;
mod leases;
mod locks;

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use commit::{all_dirty, note_write, SharedCommit};
pub use control::{ControlFile, Locked, State, MAX_SLOTS, MAX_WORKER_NAME};
pub use leases::{from_monotonic, to_monotonic, LeaseTable, MonotonicNow, SharedLease, PARKED};

use crate::error::{Error, Result};
use crate::log::lock::{retry_while_held, LOCK_FILE};
use locks::{Kind, ALIVE_BYTE, JOIN_BYTE, SLOT_BYTES};

/// A handle on its way into a shared queue: it holds the shared `flock`
/// (which keeps exclusive handles out) and the join lock (one joiner at a
/// time), and knows whether it is alone.
#[derive(Debug)]
pub struct Joining {
    lock_file: File,
    alone: bool,
}

impl Joining {
    /// Starts joining the queue in `dir`; waits while another handle joins.
    ///
    /// # Errors
    /// `Locked` if an exclusive handle holds the queue,
    /// `SharedModeUnsupported` on a network file system.
    pub fn start(dir: &Path) -> Result<Joining> {
        let path = dir.join(LOCK_FILE);
        let io = |e| Error::io(&path, e);
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        filesystem::refuse_network(dir, &lock_file)?;
        if !retry_while_held(|| fs4::FileExt::try_lock_shared(&lock_file)).map_err(io)? {
            return Err(Error::Locked { path });
        }
        locks::lock(&lock_file, JOIN_BYTE, Kind::Write, true).map_err(io)?;
        let alone = locks::lock(&lock_file, ALIVE_BYTE, Kind::Write, false).map_err(io)?;
        Ok(Joining { lock_file, alone })
    }

    /// Whether no other handle has the queue open: this one recovers it and
    /// makes the control file anew.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// The control file: made anew when alone, else the one the others use.
    pub fn control(&self, dir: &Path) -> Result<ControlFile> {
        if self.alone {
            ControlFile::create(dir)
        } else {
            ControlFile::attach(dir)
        }
    }

    /// Takes a free process slot and ends the join. The caller registers
    /// the slot in the control file under its mutex ([`ProcessLink::register`]).
    ///
    /// # Errors
    /// `SharedModeUnsupported` when every slot is taken; the control file
    /// comes back with the error.
    pub fn finish(
        self,
        dir: &Path,
        control: ControlFile,
    ) -> std::result::Result<ProcessLink, (Error, ControlFile)> {
        let path = dir.join(LOCK_FILE);
        match self.take_slot(dir, &path) {
            Ok(slot) => Ok(ProcessLink {
                lock_file: self.lock_file,
                lock_path: path,
                control: Arc::new(control),
                slot,
                generation: 0,
                seen: 0,
            }),
            Err(e) => Err((e, control)),
        }
    }

    fn take_slot(&self, dir: &Path, path: &Path) -> Result<usize> {
        let io = |e| Error::io(path, e);
        let mut slot = None;
        for i in 0..MAX_SLOTS {
            if locks::lock(&self.lock_file, SLOT_BYTES + i as u64, Kind::Write, false)
                .map_err(io)?
            {
                slot = Some(i);
                break;
            }
        }
        let Some(slot) = slot else {
            return Err(Error::SharedModeUnsupported {
                path: dir.to_path_buf(),
                reason: format!("all {MAX_SLOTS} process slots are taken"),
            });
        };
        // From a write lock (alone) or none: either way no one else writes it.
        let joined = locks::lock(&self.lock_file, ALIVE_BYTE, Kind::Read, false).map_err(io)?;
        debug_assert!(joined, "only joiners, one at a time, lock it for writing");
        locks::unlock(&self.lock_file, JOIN_BYTE).map_err(io)?;
        Ok(slot)
    }
}

/// A handle's membership in a shared queue: the control file, its slot,
/// and the change it last saw.
#[derive(Debug)]
pub struct ProcessLink {
    lock_file: File,
    lock_path: PathBuf,
    control: Arc<ControlFile>,
    slot: usize,
    /// The generation of `slot` this handle holds (odd).
    generation: u64,
    /// The value of `State::change` this handle's view is current with.
    pub seen: u64,
}

/// What a slot's entry says about the process that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    pub slot: usize,
    pub generation: u64,
    pub pid: u32,
    pub host: String,
    pub started: SystemTime,
    /// The worker name its handle gave, if any.
    pub name: Option<String>,
}

impl ProcessLink {
    pub fn state(&self) -> &State {
        self.control.state()
    }

    pub fn slot(&self) -> usize {
        self.slot
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes the queue's cross-process mutex (the caller mends the state if
    /// its last holder died, see [`Locked`]).
    pub fn lock(&self) -> Result<Locked> {
        self.control.lock()
    }

    pub fn unlock(&self) {
        self.control.unlock();
    }

    /// Writes this handle into its slot, under the mutex; returns the
    /// generation of an earlier holder that died without leaving (whose
    /// leases the caller gives back), if any.
    pub fn register(&mut self) -> Option<u64> {
        let entry = &self.control.slots()[self.slot];
        let before = entry.generation.load(Relaxed);
        // Odd: taken. A holder that died without leaving left it odd.
        let died = (before % 2 == 1).then_some(before);
        self.generation = if died.is_some() {
            before + 2
        } else {
            before + 1
        };
        entry.pid.store(std::process::id(), Relaxed);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        entry.started_ms.store(started, Relaxed);
        entry.set_host(&host_name());
        // Not the last holder's name: this handle gives its own, if any.
        entry.set_name("");
        entry.generation.store(self.generation, Relaxed);
        died
    }

    /// Writes the worker name of this handle into its slot (`""`: none).
    /// Only this handle writes its slot's name, so no mutex is needed.
    pub fn set_name(&self, name: &str) {
        self.control.slots()[self.slot].set_name(name);
    }

    /// Frees this handle's slot, under the mutex.
    pub fn unregister(&self) {
        let entry = &self.control.slots()[self.slot];
        entry.generation.store(self.generation + 1, Relaxed);
    }

    /// The slots taken by live handles, this one included, in slot order.
    pub fn live_slots(&self) -> Result<Vec<SlotInfo>> {
        let mut live = Vec::new();
        for (slot, entry) in self.control.slots().iter().enumerate() {
            let generation = entry.generation.load(Relaxed);
            if generation % 2 == 0 || !self.is_alive(slot)? {
                continue;
            }
            live.push(SlotInfo {
                slot,
                generation,
                pid: entry.pid.load(Relaxed),
                host: entry.host(),
                started: UNIX_EPOCH
                    + std::time::Duration::from_millis(entry.started_ms.load(Relaxed)),
                name: entry.name(),
            });
        }
        Ok(live)
    }

    /// Whether the handle in `slot` is alive: it holds its slot's byte lock,
    /// which the kernel drops when the process dies, whatever its pid.
    pub fn is_alive(&self, slot: usize) -> Result<bool> {
        if slot == self.slot {
            return Ok(true);
        }
        locks::is_locked_elsewhere(&self.lock_file, SLOT_BYTES + slot as u64)
            .map_err(|e| Error::io(&self.lock_path, e))
    }

    /// The life of `slot` now (odd while taken).
    pub fn slot_generation(&self, slot: usize) -> u64 {
        self.control.slots()[slot].generation.load(Relaxed)
    }

    /// The slot entries marked taken whose holders are gone (they died
    /// without leaving), with their generations.
    pub fn dead_slots(&self) -> Result<Vec<(usize, u64)>> {
        let mut dead = Vec::new();
        for (slot, entry) in self.control.slots().iter().enumerate() {
            let generation = entry.generation.load(Relaxed);
            if generation % 2 == 1 && !self.is_alive(slot)? {
                dead.push((slot, generation));
            }
        }
        Ok(dead)
    }

    /// Frees the slot of a handle that died, under the mutex.
    pub fn clear_dead_slot(&self, slot: usize, generation: u64) {
        let entry = &self.control.slots()[slot];
        let _ = entry
            .generation
            .compare_exchange(generation, generation + 1, Relaxed, Relaxed);
    }

    /// The lease table, as this handle (its slot and generation) uses it.
    pub fn lease_table(&self) -> LeaseTable {
        LeaseTable::new(Arc::clone(&self.control), self.slot, self.generation)
    }

    /// The group commit this handle shares with every process.
    pub fn commit(&self, dir: &crate::log::layout::QueueDir) -> SharedCommit {
        SharedCommit::new(Arc::clone(&self.control), dir.clone())
    }

    /// A handle on the wake-up word that outlives no mapping it needs.
    pub fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.control))
    }

    /// Wakes every blocked caller of every process.
    pub fn wake_all(&self) {
        wake_all(self.state());
    }
}

/// Moves the wake-up word and wakes its sleepers, if any (a futex system
/// call only then).
fn wake_all(state: &State) {
    state.wake.fetch_add(1, SeqCst);
    if state.sleepers.load(SeqCst) > 0 {
        let _ = rustix::thread::futex::wake(
            &state.wake,
            rustix::thread::futex::Flags::empty(),
            WAKE_ALL,
        );
    }
}

/// The futex word that blocked callers of every process sleep on.
#[derive(Debug, Clone)]
pub struct Waker(Arc<ControlFile>);

impl Waker {
    fn state(&self) -> &State {
        self.0.state()
    }

    /// The current value of the wake-up word, read before deciding to sleep.
    pub fn wake_word(&self) -> u32 {
        self.state().wake.load(SeqCst)
    }

    /// Wakes every blocked caller of every process.
    pub fn wake_all(&self) {
        wake_all(self.state());
    }

    /// Sleeps until the wake-up word moves from `seen` (or it already has),
    /// or `until` passes. May return early; callers look again.
    pub fn sleep(&self, seen: u32, until: Option<Instant>) {
        let state = self.state();
        let timeout = until.map(|until| {
            let left = until.saturating_duration_since(Instant::now());
            rustix::time::Timespec {
                tv_sec: left.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            }
        });
        state.sleepers.fetch_add(1, SeqCst);
        // A wake between the read of `seen` and this call changed the word:
        // the futex returns at once rather than sleep through it.
        let _ = rustix::thread::futex::wait(
            &state.wake,
            rustix::thread::futex::Flags::empty(),
            seen,
            timeout.as_ref(),
        );
        state.sleepers.fetch_sub(1, SeqCst);
    }
}

/// The count that makes `FUTEX_WAKE` wake every sleeper. The kernel reads
/// it as an `int`: `u32::MAX` would be -1, and wake only one.
pub const WAKE_ALL: u32 = i32::MAX as u32;

/// This machine's name, for the workers view.
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}
