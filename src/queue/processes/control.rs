//! The control file `dque.shm`: the state that processes sharing a queue
//! keep in one mapping, as SQLite keeps its WAL index: the queue's shape,
//! the delivery cursor, group commit, the process slots and the leases. It
//! is rebuilt from the segments by whichever process opens the queue alone,
//! so nothing in it is needed to reopen the queue.
//!
//! Every field is an atomic or a process-shared robust mutex: the bytes are
//! shared with other processes, so plain loads and stores would be data
//! races. Fields are changed only under [`ControlFile::lock`] unless their
//! comment says otherwise. This module holds the `unsafe` of shared mode:
//! the casts of the mapping and the pthread calls.

use std::cell::UnsafeCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::log::layout::{CONTROL_FILE, CONTROL_TEMP};
/// `DQSH`, then the layout version.
const MAGIC: u32 = u32::from_le_bytes(*b"DQSH");
/// 2: a slot holds its handle's worker name, a lease its start. A process
/// of another layout refuses to join (an older one finds the size wrong).
const LAYOUT_VERSION: u32 = 2;
/// Processes (handles) that can share one queue at once.
pub const MAX_SLOTS: usize = 1024;
/// Leases (and records handed back) that can be outstanding at once.
pub const LEASE_CAPACITY: usize = 1 << 16;
const HEADER_BYTES: usize = 4096;
const SLOTS_AT: usize = HEADER_BYTES;
const LEASES_AT: usize = SLOTS_AT + MAX_SLOTS * std::mem::size_of::<Slot>();
const FILE_BYTES: usize = LEASES_AT + 2 * LEASE_CAPACITY * std::mem::size_of::<LeaseEntry>();

/// A pthread mutex shared between processes, robust: if its holder dies, the
/// next locker is told so (`EOWNERDEAD`) and mends what it left half done.
#[repr(C, align(64))]
pub struct RobustMutex {
    inner: UnsafeCell<libc::pthread_mutex_t>,
}

const _: () = assert!(std::mem::size_of::<RobustMutex>() == 64);

/// Tries of [`RobustMutex::lock_spinning`] before it sleeps.
const SPINS: usize = 40;

/// Whether a lock came clean, or from a holder that died holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locked {
    Clean,
    OwnerDied,
}

impl RobustMutex {
    /// Initializes the mutex in place; only while no other process maps it.
    fn init(&self) -> io::Result<()> {
        // SAFETY: the attribute object is initialized before use and
        // destroyed after; the mutex lives in memory mapped for as long as
        // `self`, which no other process maps while the file is created.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            check(libc::pthread_mutexattr_init(&mut attr))?;
            let set = check(libc::pthread_mutexattr_setpshared(
                &mut attr,
                libc::PTHREAD_PROCESS_SHARED,
            ))
            .and_then(|()| {
                check(libc::pthread_mutexattr_setrobust(
                    &mut attr,
                    libc::PTHREAD_MUTEX_ROBUST,
                ))
            })
            .and_then(|()| check(libc::pthread_mutex_init(self.inner.get(), &attr)));
            libc::pthread_mutexattr_destroy(&mut attr);
            set
        }
    }

    /// Blocks until the mutex is held by this thread. If its holder died
    /// holding it, `died` is set to 1 before the mutex is marked consistent
    /// again (so that a death of this thread in between still leaves the
    /// mark), and `OwnerDied` is returned: the caller mends the state and
    /// then clears `died`.
    pub fn lock(&self, died: &AtomicU32) -> io::Result<Locked> {
        // SAFETY: an initialized process-shared mutex in a live mapping.
        let status = unsafe { libc::pthread_mutex_lock(self.inner.get()) };
        self.locked(status, died)
    }

    /// Takes the mutex if it is free now; `None` if another thread holds
    /// it. `died` as for [`lock`](Self::lock).
    pub fn try_lock(&self, died: &AtomicU32) -> io::Result<Option<Locked>> {
        // SAFETY: an initialized process-shared mutex in a live mapping.
        match unsafe { libc::pthread_mutex_trylock(self.inner.get()) } {
            libc::EBUSY => Ok(None),
            status => self.locked(status, died).map(Some),
        }
    }

    fn locked(&self, status: libc::c_int, died: &AtomicU32) -> io::Result<Locked> {
        match status {
            0 => Ok(Locked::Clean),
            libc::EOWNERDEAD => {
                died.store(1, SeqCst);
                // SAFETY: this thread holds the mutex (EOWNERDEAD locks it).
                check(unsafe { libc::pthread_mutex_consistent(self.inner.get()) })?;
                Ok(Locked::OwnerDied)
            }
            error => Err(io::Error::from_raw_os_error(error)),
        }
    }

    /// Takes the mutex, spinning a little first: it is held for a few
    /// microseconds at a time, less than a sleep and a wake-up cost.
    pub fn lock_spinning(&self, died: &AtomicU32) -> io::Result<Locked> {
        for _ in 0..SPINS {
            if let Some(locked) = self.try_lock(died)? {
                return Ok(locked);
            }
            std::hint::spin_loop();
        }
        self.lock(died)
    }

    /// Releases the mutex, which this thread holds.
    pub fn unlock(&self) {
        // SAFETY: called only by the thread that locked it (the guards of
        // the callers are not `Send`).
        let status = unsafe { libc::pthread_mutex_unlock(self.inner.get()) };
        debug_assert_eq!(status, 0, "unlock of a mutex this thread holds");
    }
}

fn check(status: libc::c_int) -> io::Result<()> {
    match status {
        0 => Ok(()),
        error => Err(io::Error::from_raw_os_error(error)),
    }
}

/// The header page: identity, the two mutexes and the shared state.
#[repr(C)]
pub struct Header {
    magic: AtomicU32,
    version: AtomicU32,
    _reserved: [u8; 56],
    /// Held around every change to the queue (and its catch-up).
    pub mutex: RobustMutex,
    /// Held by the process running a group fsync.
    pub sync_mutex: RobustMutex,
    pub state: State,
}

/// The queue as the processes share it. Segment numbers and offsets follow
/// the segment format; ids are record ids.
#[repr(C)]
pub struct State {
    /// Grows with every change any process makes under the mutex: a process
    /// that saw this value last has nothing to catch up.
    pub change: AtomicU64,
    /// The head segment's number.
    pub head: AtomicU64,
    /// The tail segment's number.
    pub tail: AtomicU64,
    /// End of the tail's last whole frame: a process that died while holding
    /// the mutex may have left part of a frame after it.
    pub tail_end: AtomicU64,
    /// The last segment of the front run (the segments holding markers).
    pub front_end: AtomicU64,
    /// Delivery cursor: every record before it is settled or leased.
    pub fresh: AtomicU64,
    /// Frames written by every process (group commit's tickets).
    pub written: AtomicU64,
    /// Every ticket up to this one is durable (changed under `sync_mutex`).
    pub synced: AtomicU64,
    /// Segment numbers written since the last sync began (`low > high`: none).
    pub dirty_low: AtomicU64,
    pub dirty_high: AtomicU64,
    /// The range a sync in progress covers (under `sync_mutex`), so that the
    /// next leader covers it again if that sync's process died.
    pub syncing_low: AtomicU64,
    pub syncing_high: AtomicU64,
    /// Wakes blocked callers of every process: bumped when items may have
    /// become available or room may have been made (a futex word, changed
    /// without the mutex).
    pub wake: AtomicU32,
    /// Callers sleeping on `wake` (changed without the mutex).
    pub sleepers: AtomicU32,
    /// Set when an fsync failed: no process may write until the queue is
    /// opened again by a process alone.
    pub refused: AtomicU32,
    /// Set while what a dead mutex holder left is not mended yet.
    pub mending: AtomicU32,
    /// Set while the dirty ranges a dead sync leader took are not merged
    /// back yet (under the queue mutex).
    pub sync_mending: AtomicU32,
    /// Bumped when `synced` moves: callers waiting for durability sleep on
    /// it (a futex word, changed without the mutex).
    pub synced_wake: AtomicU32,
    /// Callers sleeping on `synced_wake`.
    pub sync_sleepers: AtomicU32,
    /// Callers the last sync woke, its leader included: they write again
    /// soon, and the next leader waits a moment for them.
    pub woken_writers: AtomicU32,
    /// Segment numbers of the tail written since the last sync began
    /// (`low > high`: none), apart from `dirty_low..=dirty_high`, which
    /// holds the others (markers in the front run): two tight ranges, not
    /// one from the head to the tail.
    pub dirty_tail_low: AtomicU64,
    pub dirty_tail_high: AtomicU64,
    pub syncing_tail_low: AtomicU64,
    pub syncing_tail_high: AtomicU64,
    /// Leases in the table.
    pub lease_count: AtomicU64,
    /// Removed entries (tombstones) in the table.
    pub lease_removed: AtomicU64,
    /// No lease in the table ends before this (monotonic nanoseconds).
    pub lease_floor: AtomicU64,
    /// `written` when the last sync woke its callers.
    pub written_at_wake: AtomicU64,
    /// Which of the two lease tables is in use (its lowest bit).
    pub lease_table: AtomicU64,
}

/// One process handle's entry.
#[repr(C)]
pub struct Slot {
    /// Odd while the slot is taken; grows by one when it is taken or freed,
    /// so a lease names the one life of the slot it belongs to.
    pub generation: AtomicU64,
    /// Wall-clock time the handle joined, in milliseconds since the epoch.
    pub started_ms: AtomicU64,
    pub pid: AtomicU32,
    host_len: AtomicU32,
    host: [AtomicU8; 40],
    /// Bytes of `name`; stored after them, by the slot's holder only.
    name_len: AtomicU32,
    name: [AtomicU8; MAX_WORKER_NAME],
}

/// The longest worker name a slot holds, in bytes.
pub const MAX_WORKER_NAME: usize = 188;

impl Slot {
    pub fn set_host(&self, host: &str) {
        let bytes = &host.as_bytes()[..host.len().min(self.host.len())];
        for (cell, &byte) in self.host.iter().zip(bytes) {
            cell.store(byte, Relaxed);
        }
        self.host_len.store(bytes.len() as u32, Relaxed);
    }

    pub fn host(&self) -> String {
        let len = (self.host_len.load(Relaxed) as usize).min(self.host.len());
        let bytes: Vec<u8> = self.host[..len].iter().map(|b| b.load(Relaxed)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Sets the worker name (at most [`MAX_WORKER_NAME`] bytes, checked by
    /// the caller); `""`: none.
    pub fn set_name(&self, name: &str) {
        let bytes = &name.as_bytes()[..name.len().min(self.name.len())];
        // Length 0 first, the length last: a reader sees no name or a whole one.
        self.name_len.store(0, Release);
        for (cell, &byte) in self.name.iter().zip(bytes) {
            cell.store(byte, Relaxed);
        }
        self.name_len.store(bytes.len() as u32, Release);
    }

    /// The worker name, if its handle gave one.
    pub fn name(&self) -> Option<String> {
        let len = (self.name_len.load(Acquire) as usize).min(self.name.len());
        let bytes: Vec<u8> = self.name[..len].iter().map(|b| b.load(Relaxed)).collect();
        (len > 0).then(|| String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// One lease: open addressing by record id, with tombstones, so that every
/// change is one store of `key` (a process killed in between leaves either
/// the old entry or the new one). One cache line each (aligned, padded):
/// a lease or an ack touches one line of the table, as with the 32-byte
/// entries of layout 1; 40 bytes unaligned would straddle two for half.
#[repr(C, align(64))]
pub struct LeaseEntry {
    /// 0: empty; `u64::MAX`: removed; otherwise the record id + 1.
    pub key: AtomicU64,
    /// When the lease ends, in monotonic nanoseconds.
    pub expires: AtomicU64,
    /// When the lease began, in monotonic nanoseconds (0: parked).
    pub started: AtomicU64,
    /// The generation of the slot that holds it.
    pub generation: AtomicU64,
    pub slot: AtomicU32,
    pub attempt: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 256);
const _: () = assert!(std::mem::size_of::<LeaseEntry>() == 64);
const _: () = assert!(LEASES_AT % 64 == 0);
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// The mapped control file of one queue.
pub struct ControlFile {
    map: MmapRaw,
    path: PathBuf,
}

// SAFETY: every byte of the mapping is read and written through atomics or
// the robust mutexes, which are made to be shared between threads (and
// processes).
unsafe impl Send for ControlFile {}
// SAFETY: as above.
unsafe impl Sync for ControlFile {}

impl std::fmt::Debug for ControlFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlFile")
            .field("path", &self.path)
            .finish()
    }
}

impl ControlFile {
    /// Makes the control file anew. Only a process that holds the queue
    /// alone may. It is made under a temporary name and renamed into place:
    /// a closed handle that still maps the old one (a waiter on its way
    /// out) keeps a whole file, never one cut short under it.
    pub fn create(dir: &Path) -> Result<ControlFile> {
        let path = dir.join(CONTROL_FILE);
        let temp = dir.join(CONTROL_TEMP);
        let io = |e| Error::io(&temp, e);
        let file = open(&temp).map_err(io)?;
        // Zero length first: whatever a crash left there is gone.
        file.set_len(0).map_err(io)?;
        file.set_len(FILE_BYTES as u64).map_err(io)?;
        let control = ControlFile::map(&file, &path)?;
        let header = control.header();
        header.mutex.init().map_err(io)?;
        header.sync_mutex.init().map_err(io)?;
        let state = &header.state;
        state.dirty_low.store(u64::MAX, Relaxed);
        state.dirty_tail_low.store(u64::MAX, Relaxed);
        state.syncing_tail_low.store(u64::MAX, Relaxed);
        state.lease_floor.store(u64::MAX, Relaxed);
        state.syncing_low.store(u64::MAX, Relaxed);
        header.version.store(LAYOUT_VERSION, Relaxed);
        header.magic.store(MAGIC, Relaxed);
        // Not fsynced: the file is rebuilt after any crash, never read back.
        std::fs::rename(&temp, &path).map_err(io)?;
        Ok(control)
    }

    /// Maps the control file another process made.
    ///
    /// # Errors
    /// `UnsupportedVersion` if a process of another layout made it (an
    /// older or newer dque shares the queue now); `Corrupted` if it is not
    /// a control file.
    pub fn attach(dir: &Path) -> Result<ControlFile> {
        let path = dir.join(CONTROL_FILE);
        let file = open(&path).map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < HEADER_BYTES as u64 {
            return Err(Error::corrupted(
                &path,
                0,
                format!("control file is {len} bytes, not {FILE_BYTES}"),
            ));
        }
        let control = ControlFile::map(&file, &path)?;
        // The header first (every layout has one): a file of another
        // layout is told apart from a damaged one.
        let header = control.header();
        let (magic, version) = (header.magic.load(Relaxed), header.version.load(Relaxed));
        if magic == MAGIC && version != LAYOUT_VERSION {
            return Err(Error::UnsupportedVersion {
                path,
                found: version,
                supported: LAYOUT_VERSION,
            });
        }
        if magic != MAGIC || len != FILE_BYTES as u64 {
            return Err(Error::corrupted(
                &path,
                0,
                format!("control file of {len} bytes has magic {magic:#x}, layout {version}"),
            ));
        }
        Ok(control)
    }

    fn map(file: &File, path: &Path) -> Result<ControlFile> {
        let map = MmapRaw::map_raw(file).map_err(|e| Error::io(path, e))?;
        Ok(ControlFile {
            map,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the queue's cross-process mutex (see [`RobustMutex::lock`]);
    /// a dead holder is recorded in `mending`.
    pub fn lock(&self) -> Result<Locked> {
        self.header()
            .mutex
            .lock_spinning(&self.state().mending)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Releases the queue's cross-process mutex, which this thread holds.
    pub fn unlock(&self) {
        self.header().mutex.unlock();
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is FILE_BYTES long (checked or set), page
        // aligned, and `Header` is made of atomics and mutexes, for which
        // any bytes another process wrote are valid to read.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    pub fn state(&self) -> &State {
        &self.header().state
    }

    pub fn slots(&self) -> &[Slot] {
        // SAFETY: as in `header`: MAX_SLOTS slots fit in the mapping at
        // SLOTS_AT, aligned (4096), and are made of atomics.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(SLOTS_AT).cast::<Slot>(), MAX_SLOTS)
        }
    }

    /// The two lease tables, one after the other.
    pub fn leases(&self) -> &[LeaseEntry] {
        // SAFETY: as in `slots`, for 2 * LEASE_CAPACITY entries at LEASES_AT.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(LEASES_AT).cast::<LeaseEntry>(),
                2 * LEASE_CAPACITY,
            )
        }
    }
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_mapping_sees_the_first_ones_state_and_mutex() {
        let dir = tempfile::tempdir().unwrap();
        let first = ControlFile::create(dir.path()).unwrap();
        let second = ControlFile::attach(dir.path()).unwrap();
        first.state().tail.store(7, Relaxed);
        assert_eq!(second.state().tail.load(Relaxed), 7);
        assert_eq!(first.lock().unwrap(), Locked::Clean);
        first.header().mutex.unlock();
        assert_eq!(second.lock().unwrap(), Locked::Clean);
        second.header().mutex.unlock();
    }

    #[test]
    fn every_lease_entry_lies_in_one_cache_line() {
        // Bug pinned: layout 2 grew a lease entry from 32 to 40 bytes, so
        // half of them straddled two cache lines and a lease or an ack in
        // shared mode (the hot path) touched two lines where it touched one.
        // Every entry of both tables, from the mapping's real addresses.
        let dir = tempfile::tempdir().unwrap();
        let control = ControlFile::create(dir.path()).unwrap();
        let size = std::mem::size_of::<LeaseEntry>();
        let straddling = control
            .leases()
            .iter()
            .map(|entry| entry as *const LeaseEntry as usize)
            .filter(|&at| at / 64 != (at + size - 1) / 64)
            .count();
        assert_eq!(
            straddling, 0,
            "entries of {size} bytes straddle cache lines"
        );
    }

    #[test]
    fn a_mapping_of_something_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONTROL_FILE), vec![1u8; FILE_BYTES]).unwrap();
        assert!(ControlFile::attach(dir.path()).is_err());
        std::fs::write(dir.path().join(CONTROL_FILE), b"short").unwrap();
        assert!(ControlFile::attach(dir.path()).is_err());
    }
}
