//! A segment file's mapping, and pages faulted in ahead of its writer by a
//! background thread.
//!
//! The first write to each page of a mapping takes a page fault in which
//! the kernel finds or makes the page and zero-fills it (the file's blocks
//! are preallocated, unwritten): for 4 KiB records that is a fault per
//! record, the largest cost of a Turbo append. `MADV_POPULATE_WRITE` (Linux
//! 5.14) does the same work without the write; asked from another thread,
//! ahead of the writer, it runs on another core while the writer copies.
//! It changes no byte of the file: the pages only become present and
//! writable (and dirty, so writeback may store zeros in blocks the writer
//! has not reached, which recovery reads as the zero-filled tail it is).
//!
//! The same thread also hands the written pages behind the writer to
//! writeback (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, [`WRITE_BACK`] bytes
//! at a time), so that the fsync that seals a full segment (every mode
//! seals with one) finds most of its pages written: at 4 KiB records a seal
//! wrote 64 MiB while the writer waited (145-155 ms of fsync per 60,000
//! records; 53 ms with this). It promises nothing durable and changes no
//! byte; it runs under the same rules as a fault-in (below), and is done
//! for Turbo and Periodic writers only.
//!
//! # The invariant: no fault-in while the file is synced
//!
//! A fault-in is a second writer to the mapping, in another thread, at a
//! time of its own. Concurrent with an fsync of the same file it is not
//! harmless: on LazyFS (FUSE), a Turbo segment sealed while a fault-in on
//! it was in flight lost its last page on power loss although the seal's
//! fsync had returned (issue 23: 18 of 650 rounds; 0 of 260 without
//! fault-ins, 0 of 240 with the sync holding them off). So, in this
//! process, for every file:
//!
//! - no fault-in runs while the file is being synced: every fsync of a
//!   segment goes through [`sync_data`], which holds the file's [`FileGate`]
//!   for writing across the fsync, while a fault-in holds it for reading
//!   (so a sync waits for the one in flight, and the next one waits for the
//!   sync). That covers the seal, group commit, `sync()`, the Periodic
//!   flusher, `close` and shared-mode commits, whichever handle of this
//!   process mapped the file (the gate is one per file, found by its inode);
//! - once a segment is full no fault-in is asked for it (only markers go
//!   there any more), and once it is sealed those asked before and still
//!   queued are dropped too ([`FileGate::seal`]): a sealed file must stay
//!   as its seal's fsync left it.
//!
//! Between processes (shared mode, where any process may lead a commit or
//! seal a segment that others map and fault in), a `flock` on the file
//! does the same: a fault-in runs only under an exclusive one, taken
//! without waiting (it is dropped if a sync runs), and a sync holds a
//! shared one, which waits for the fault-in in flight. The kernel lets go
//! of a dead process's. A sealed segment's fault-ins still queued in a
//! process that has not seen the seal yet may run after the seal's fsync
//! returned, never during it; they change no byte.
//!
//! The thread may be late: a request for a mapping that was replaced or
//! dropped meanwhile is skipped, under a lock that the mapping's drop takes
//! (so an address is never advised after it was unmapped).

use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use memmap2::MmapMut;
use parking_lot::{Mutex, RwLock};

use crate::faults::{self, Durable, FaultOp};

/// How far ahead of the writer pages are faulted in, in one request.
const AHEAD: usize = 512 * 1024;

/// How many bytes behind the writer are handed to writeback at a time.
const WRITE_BACK: usize = 4 << 20;

const PAGE: usize = 4096;

/// What fault-ins and syncs of one file (in this process) agree on.
#[derive(Debug)]
pub struct FileGate {
    /// A fault-in runs under a read lock; a sync holds the write lock.
    syncs: RwLock<()>,
    /// Set once the file can take no more records: every request is dropped.
    sealed: AtomicBool,
    /// For the fault seam's reports.
    path: PathBuf,
    /// An open description of the file, for the fault-ins' `flock`.
    file: Arc<File>,
}

/// A file's identity: device and inode (its name changes at creation), and
/// the name it is mapped under (an inode of a deleted segment, still mapped
/// by a handle that has not caught up, may come back as a new segment's).
type FileId = (u64, u64, PathBuf);

/// The gates of the files mapped in this process (one per file, shared by
/// every mapping of it, of every handle).
static GATES: Mutex<Vec<(FileId, Weak<FileGate>)>> = Mutex::new(Vec::new());

fn file_id(file: &File, path: &Path) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino(), path.to_path_buf()))
}

impl FileGate {
    /// The gate of `file` (at `path`), made if no mapping of it has one.
    pub fn of(file: &Arc<File>, path: &Path) -> std::io::Result<Arc<FileGate>> {
        let fresh = || {
            Arc::new(FileGate {
                syncs: RwLock::new(()),
                sealed: AtomicBool::new(false),
                path: path.to_path_buf(),
                file: Arc::clone(file),
            })
        };
        if toucher::in_forked_child() {
            // No fault-in runs here, and the list may be copied locked.
            return Ok(fresh());
        }
        let id = file_id(file, path)?;
        let mut gates = GATES.lock();
        if let Some(gate) = gates
            .iter()
            .find(|(at, _)| *at == id)
            .and_then(|(_, gate)| gate.upgrade())
        {
            return Ok(gate);
        }
        gates.retain(|(_, gate)| gate.strong_count() > 0);
        let gate = fresh();
        gates.push((id, Arc::downgrade(&gate)));
        Ok(gate)
    }

    /// The gate of `file` (at `path`) if a mapping of it in this process
    /// has one.
    fn existing(file: &File, path: &Path) -> std::io::Result<Option<Arc<FileGate>>> {
        // No fault-in thread in this process (a Safe writer): no gate,
        // and no `statx` per fsync to look for one.
        if toucher::in_forked_child() || GATES.lock().is_empty() {
            return Ok(None);
        }
        let id = file_id(file, path)?;
        let gates = GATES.lock();
        Ok(gates
            .iter()
            .find(|(at, _)| *at == id)
            .and_then(|(_, gate)| gate.upgrade()))
    }

    /// Drops every fault-in of the file from now on; returns once the one
    /// in flight, if any, is done.
    pub fn seal(&self) {
        if !self.sealed.load(Ordering::Relaxed) {
            let _quiet = self.hold_off();
            self.sealed.store(true, Ordering::Relaxed);
        }
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::Relaxed)
    }

    /// Waits for the fault-in in flight, and holds off the next ones until
    /// dropped. In a child made by `fork` (no fault-in thread, and the lock
    /// may have been copied read-locked) it holds nothing.
    fn hold_off(&self) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
        (!toucher::in_forked_child()).then(|| self.syncs.write())
    }
}

/// Makes the bytes of `file` (at `path`) durable, fdatasync, with no
/// fault-in of this process running on a mapping of it meanwhile (see the
/// module's doc): every fsync of a segment file goes through here.
pub fn sync_data(file: &File, path: &Path) -> std::io::Result<()> {
    sync_data_holding_off(file, path, true)
}

/// As [`sync_data`], for a file no other process maps (a queue opened in
/// exclusive mode): no `flock` to hold off other processes' fault-ins,
/// two system calls an fsync fewer for a Safe writer.
pub fn sync_data_alone(file: &File, path: &Path) -> std::io::Result<()> {
    sync_data_holding_off(file, path, false)
}

fn sync_data_holding_off(file: &File, path: &Path, others: bool) -> std::io::Result<()> {
    let gate = FileGate::existing(file, path)?;
    let _quiet = gate.as_deref().and_then(FileGate::hold_off);
    // After the gate, as the fault-ins take them (see `SyncFlock`).
    let _others_quiet = others.then(|| SyncFlock::take(file));
    let _seen = faults::syncing(path);
    faults::check(FaultOp::Sync, path)?;
    file.sync_data()?;
    faults::synced(path, Durable::File);
    Ok(())
}

/// A shared `flock` on a file being synced: other processes' fault-ins of
/// it (which take an exclusive one, without waiting) do not run meanwhile.
/// Taken after the file's gate, and let go before it (see `toucher::run`).
struct SyncFlock<'a>(Option<&'a File>);

impl<'a> SyncFlock<'a> {
    fn take(file: &'a File) -> SyncFlock<'a> {
        if toucher::in_forked_child() {
            // Its descriptions are its parent's: a lock here would be theirs.
            return SyncFlock(None);
        }
        loop {
            match rustix::fs::flock(file, rustix::fs::FlockOperation::LockShared) {
                Ok(()) => return SyncFlock(Some(file)),
                Err(rustix::io::Errno::INTR) => continue,
                // A file system without `flock`: the fault-ins of other
                // processes cannot be held off there (nor are they, in
                // `toucher::run`); this process's still are.
                Err(_) => return SyncFlock(None),
            }
        }
    }
}

impl Drop for SyncFlock<'_> {
    fn drop(&mut self) {
        if let Some(file) = self.0 {
            let _ = rustix::fs::flock(file, rustix::fs::FlockOperation::Unlock);
        }
    }
}

/// A mapping of a segment file.
pub struct Mapping {
    map: MmapMut,
    /// Up to where pages were asked for.
    requested: usize,
    /// Up to where writeback was asked for.
    written_back: usize,
    /// The file's gate, shared with its other mappings and its syncs.
    gate: Arc<FileGate>,
    /// `true` while the mapping is alive: the background thread advises it
    /// only under a read lock of this.
    alive: Arc<RwLock<bool>>,
    /// The process that made it (see `drop`).
    pid: u32,
}

impl Mapping {
    /// `map`, of the file whose gate is `gate`.
    pub fn new(map: MmapMut, gate: Arc<FileGate>) -> Mapping {
        Mapping {
            map,
            requested: 0,
            written_back: 0,
            gate,
            alive: Arc::new(RwLock::new(true)),
            pid: std::process::id(),
        }
    }

    /// The file's gate.
    pub fn gate(&self) -> &Arc<FileGate> {
        &self.gate
    }

    /// Up to where pages were asked to be faulted in ahead of the writer.
    pub fn faulted_in_to(&self) -> usize {
        self.requested
    }

    /// Asks for the pages after `written`, up to `limit` at most, to be
    /// faulted in, when the writer has used half of those asked for last.
    /// Nothing once the file is sealed.
    pub fn fault_in_ahead(&mut self, written: usize, limit: usize) {
        if written + AHEAD / 2 <= self.requested || self.gate.is_sealed() {
            return;
        }
        let start = written.max(self.requested).div_ceil(PAGE) * PAGE;
        let end = (start + AHEAD).min(self.map.len()).min(limit);
        self.requested = end.max(self.requested);
        if end > start {
            let address = self.map.as_ptr() as usize + start;
            toucher::request(toucher::Request {
                gate: Arc::clone(&self.gate),
                alive: Arc::clone(&self.alive),
                address,
                len: end - start,
                kind: toucher::Kind::Populate,
            });
        }
    }

    /// Asks for the whole pages before `written` to be handed to writeback
    /// (without waiting for it), [`WRITE_BACK`] bytes at a time, so that the
    /// fsync that seals the file finds most of them written already.
    pub fn write_back_behind(&mut self, written: usize) {
        let end = written / PAGE * PAGE;
        if end < self.written_back + WRITE_BACK || self.gate.is_sealed() {
            return;
        }
        toucher::request(toucher::Request {
            gate: Arc::clone(&self.gate),
            alive: Arc::clone(&self.alive),
            address: self.written_back,
            len: end - self.written_back,
            kind: toucher::Kind::WriteBack,
        });
        self.written_back = end;
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.map.len())
            .field("requested", &self.requested)
            .field("sealed", &self.gate.is_sealed())
            .finish()
    }
}

impl Deref for Mapping {
    type Target = MmapMut;

    fn deref(&self) -> &MmapMut {
        &self.map
    }
}

impl DerefMut for Mapping {
    fn deref_mut(&mut self) -> &mut MmapMut {
        &mut self.map
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Waits for a request in progress; later ones are skipped. The
        // mapping itself is unmapped after this, when `map` drops. Only
        // this mapping's lock: a sync of the file does not hold it up.
        if std::process::id() == self.pid {
            *self.alive.write() = false;
        } else if let Some(mut alive) = self.alive.try_write() {
            // A child made by `fork`: no thread advises its mappings, but
            // the lock may have been copied read-locked from the parent.
            *alive = false;
        }
    }
}

#[cfg(target_os = "linux")]
mod toucher {
    use super::*;

    /// One fault-in: `len` bytes from `address`, in a mapping of the file
    /// of `gate` while `alive`; or a writeback of `len` bytes of the file
    /// from offset `address`.
    pub struct Request {
        pub gate: Arc<FileGate>,
        pub alive: Arc<RwLock<bool>>,
        pub address: usize,
        pub len: usize,
        pub kind: Kind,
    }

    /// What a request asks for.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Populate,
        WriteBack,
    }

    /// The thread's queue, and the process that started it (a child made
    /// by `fork` has no such thread: it faults its pages itself).
    static QUEUE: OnceLock<(crossbeam_channel::Sender<Request>, u32)> = OnceLock::new();

    /// Set when the kernel does not know `MADV_POPULATE_WRITE`.
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

    /// Whether this is a child made by `fork` from a process whose thread
    /// had started (none runs here).
    pub fn in_forked_child() -> bool {
        QUEUE
            .get()
            .is_some_and(|(_, pid)| *pid != std::process::id())
    }

    pub fn request(request: Request) {
        if UNSUPPORTED.load(Ordering::Relaxed) {
            return;
        }
        let (queue, pid) = QUEUE.get_or_init(|| {
            let (sender, receiver) = crossbeam_channel::unbounded::<Request>();
            let started = std::thread::Builder::new()
                .name("dque-fault-ahead".into())
                .spawn(move || {
                    for request in receiver {
                        run(&request);
                    }
                });
            if started.is_err() {
                UNSUPPORTED.store(true, Ordering::Relaxed);
            }
            (sender, std::process::id())
        });
        if *pid == std::process::id() {
            let _ = queue.send(request);
        }
    }

    fn run(request: &Request) {
        // The file's gate first: a sync of the file holds it for writing
        // (it waits for this, and this waits for it); then the mapping's.
        let _not_syncing = request.gate.syncs.read();
        if request.gate.is_sealed() {
            return;
        }
        // A writeback does not need the mapping: the pages are the file's.
        let alive = (request.kind == Kind::Populate).then(|| request.alive.read());
        if alive.as_ref().is_some_and(|alive| !**alive) {
            return;
        }
        // Syncs of the file in other processes hold a shared `flock`: if
        // one runs now, this is dropped. Taken and let go under the gate, so
        // that this process's syncs (which lock the same descriptions) and
        // this never mix their `flock`s.
        let file = &request.gate.file;
        let exclusive = rustix::fs::FlockOperation::NonBlockingLockExclusive;
        let locked = match rustix::fs::flock(&**file, exclusive) {
            Ok(()) => true,
            Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => return,
            // No `flock` on this file system: see `SyncFlock::take`.
            Err(_) => false,
        };
        match request.kind {
            Kind::Populate => {
                let _seen = faults::touching(&request.gate.path);
                populate(request.address, request.len);
            }
            Kind::WriteBack => write_back(file, request.address, request.len),
        }
        if locked {
            let _ = rustix::fs::flock(&**file, rustix::fs::FlockOperation::Unlock);
        }
    }

    /// Starts writing the dirty pages of `len` bytes of `file` from
    /// `offset`, without waiting: no byte changes, nothing is promised
    /// durable (the seal's fsync still is what makes them so).
    fn write_back(file: &File, offset: usize, len: usize) {
        use std::os::fd::AsRawFd;
        // SAFETY: a system call on a descriptor the gate keeps open.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }

    fn populate(address: usize, len: usize) {
        // SAFETY: the range lies inside a live mapping of this process
        // (checked by the caller under the mapping's lock, which its
        // unmapping waits for); populating changes no byte of it.
        let done =
            unsafe { libc::madvise(address as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
        if done != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            UNSUPPORTED.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod toucher {
    use super::*;

    pub struct Request {
        pub gate: Arc<FileGate>,
        pub alive: Arc<RwLock<bool>>,
        pub address: usize,
        pub len: usize,
        pub kind: Kind,
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Populate,
        WriteBack,
    }

    pub fn in_forked_child() -> bool {
        false
    }

    pub fn request(_request: Request) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn mapping(len: usize) -> (tempfile::TempDir, Arc<File>, Mapping) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(len as u64).unwrap();
        // SAFETY: a private temporary file nothing else maps or truncates.
        let map = unsafe { MmapMut::map_mut(&file) }.unwrap();
        let file = Arc::new(file);
        let gate = FileGate::of(&file, &path).unwrap();
        (dir, file, Mapping::new(map, gate))
    }

    /// Whether the page at `offset` of the mapping is in memory (a sparse
    /// file nobody read or wrote has none until a fault-in makes them).
    fn resident(mapping: &Mapping, offset: usize) -> bool {
        let mut vec = [0u8; 1];
        // SAFETY: one page inside a live mapping; `vec` has room for it.
        let done = unsafe {
            libc::mincore(
                mapping.as_ptr().add(offset) as *mut libc::c_void,
                PAGE,
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
        vec[0] & 1 == 1
    }

    /// Waits (a long while at most) until the page at `offset` is in memory.
    fn becomes_resident(mapping: &Mapping, offset: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if resident(mapping, offset) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn faulting_ahead_changes_no_byte_and_dropping_waits_for_it() {
        for _ in 0..50 {
            let (_dir, _file, mut mapping) = mapping(4 * AHEAD);
            mapping[..5].copy_from_slice(b"hello");
            mapping.fault_in_ahead(5, usize::MAX);
            mapping.fault_in_ahead(AHEAD, usize::MAX);
            mapping[AHEAD..AHEAD + 3].copy_from_slice(b"abc");
            assert_eq!(&mapping[..5], b"hello");
            assert_eq!(&mapping[AHEAD..AHEAD + 3], b"abc");
            assert!(mapping[5..AHEAD].iter().all(|&b| b == 0));
            // Dropped right after a request: the thread skips or finishes
            // it first, and never touches the unmapped range.
            drop(mapping);
        }
    }

    #[test]
    fn requests_stay_inside_the_mapping_and_the_limit() {
        let (_dir, _file, mut mapping) = mapping(3 * PAGE);
        mapping.fault_in_ahead(0, usize::MAX);
        assert_eq!(mapping.requested, 3 * PAGE);
        mapping.fault_in_ahead(PAGE, usize::MAX);
        assert_eq!(mapping.requested, 3 * PAGE, "nothing past the end");

        let (_dir, _file, mut mapping) = self::mapping(8 * PAGE);
        mapping.fault_in_ahead(0, 2 * PAGE + 10);
        assert_eq!(mapping.requested, 2 * PAGE + 10, "nothing past the limit");
    }

    /// Kilobytes of the mapping's pages that are dirty (`/proc/self/smaps`).
    fn dirty_kb(mapping: &Mapping) -> usize {
        let start = format!("{:x}-", mapping.as_ptr() as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        lines.next().expect("the mapping is listed");
        lines
            .take_while(|l| {
                // Up to the next mapping's line: `start-end perms ...`.
                let first = l.split_whitespace().next().unwrap_or("");
                !(first.contains('-') && first.chars().all(|c| c == '-' || c.is_ascii_hexdigit()))
            })
            .filter(|l| l.starts_with("Shared_Dirty:") || l.starts_with("Private_Dirty:"))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum()
    }

    // Issue 24: the fsync sealing a Turbo segment wrote all of it (64 MiB
    // at 4 KiB records) while the writer waited. The written pages behind
    // the writer are handed to writeback as it goes, whole pages only.
    #[test]
    fn written_pages_behind_the_writer_are_handed_to_writeback() {
        let (dir, _file, mut mapping) = mapping(3 * WRITE_BACK);
        // tmpfs has no writeback: its pages stay dirty.
        let statfs = rustix::fs::statfs(dir.path()).unwrap();
        let on_tmpfs = i128::from(statfs.f_type) == i128::from(libc::TMPFS_MAGIC);
        let written = WRITE_BACK + WRITE_BACK / 2 + 10;
        mapping[..written].fill(7);
        assert!(
            dirty_kb(&mapping) * 1024 >= written - PAGE,
            "written pages are dirty"
        );
        mapping.write_back_behind(WRITE_BACK - 1);
        assert_eq!(
            mapping.written_back, 0,
            "less than a stretch behind: nothing asked"
        );
        mapping.write_back_behind(written);
        assert_eq!(
            mapping.written_back,
            written / PAGE * PAGE,
            "whole pages only"
        );
        mapping.write_back_behind(written + PAGE);
        assert_eq!(
            mapping.written_back,
            written / PAGE * PAGE,
            "a stretch at a time"
        );
        if !on_tmpfs {
            let deadline = Instant::now() + Duration::from_secs(20);
            while dirty_kb(&mapping) * 1024 > PAGE && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                dirty_kb(&mapping) * 1024 <= PAGE,
                "only the writer's page stays dirty"
            );
        }
        assert!(
            mapping[..written].iter().all(|&b| b == 7),
            "no byte changed"
        );
        // Nothing is asked once the file is sealed.
        mapping.gate().seal();
        mapping.write_back_behind(3 * WRITE_BACK);
        assert_eq!(mapping.written_back, written / PAGE * PAGE);
    }

    #[test]
    fn every_mapping_of_a_file_shares_its_gate() {
        let (dir, file, mapping) = mapping(PAGE);
        let again = Arc::new(File::open(dir.path().join("f")).unwrap());
        let gate = FileGate::of(&again, &dir.path().join("f")).unwrap();
        assert!(Arc::ptr_eq(&gate, mapping.gate()));
        assert!(Arc::ptr_eq(
            &FileGate::existing(&file, &dir.path().join("f"))
                .unwrap()
                .unwrap(),
            &gate
        ));
        let (_other_dir, _other_file, other) = self::mapping(PAGE);
        assert!(!Arc::ptr_eq(other.gate(), &gate));
    }

    // Issue 23: a fault-in ran on a segment while the segment was fsynced
    // (its seal), and the page it touched was missing after a power loss.
    // A sync holds fault-ins of its file off; they run after it.
    #[test]
    fn no_fault_in_runs_while_its_file_is_synced() {
        let (_dir, _file, mut mapping) = mapping(4 * AHEAD);
        let gate = Arc::clone(mapping.gate());
        let syncing = gate.hold_off();
        mapping.fault_in_ahead(0, usize::MAX);
        // Not timed: a thread that is merely slow passes too.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!resident(&mapping, 0), "faulted in during the sync");
        drop(syncing);
        assert!(becomes_resident(&mapping, 0), "never faulted in after it");
    }

    // Issue 23: a sealed segment must stay as its seal's fsync left it: a
    // fault-in asked before the seal and still queued is dropped, and none
    // is asked after.
    #[test]
    fn fault_ins_of_a_sealed_file_are_dropped() {
        let (_dir, _file, mut sealed) = mapping(4 * AHEAD);
        let (_other_dir, _other_file, mut later) = mapping(4 * AHEAD);
        // Asked before the seal, run (in order) after it.
        let gate = Arc::clone(sealed.gate());
        let syncing = gate.syncs.write();
        sealed.fault_in_ahead(0, usize::MAX);
        gate.sealed.store(true, Ordering::Relaxed);
        drop(syncing);
        gate.seal();
        sealed.fault_in_ahead(AHEAD, usize::MAX);
        assert_eq!(sealed.faulted_in_to(), AHEAD, "asked for after the seal");
        // The thread takes requests in order: once a later one ran, the
        // sealed file's were looked at.
        later.fault_in_ahead(0, usize::MAX);
        assert!(becomes_resident(&later, 0));
        assert!(!resident(&sealed, 0) && !resident(&sealed, AHEAD));
    }

    // Issue 23, between processes: a sync in another process (a shared
    // `flock` on another open description of the file) drops the fault-ins
    // that would run meanwhile.
    #[test]
    fn a_sync_in_another_process_drops_fault_ins() {
        let (dir, _file, mut mapping) = mapping(4 * AHEAD);
        let (_other_dir, _other_file, mut later) = self::mapping(4 * AHEAD);
        let elsewhere = File::open(dir.path().join("f")).unwrap();
        rustix::fs::flock(&elsewhere, rustix::fs::FlockOperation::LockShared).unwrap();
        mapping.fault_in_ahead(0, usize::MAX);
        later.fault_in_ahead(0, usize::MAX);
        assert!(becomes_resident(&later, 0));
        assert!(!resident(&mapping, 0), "faulted in during another's sync");
    }

    // Issue 23, between processes: a sync waits for a fault-in that another
    // process runs on the file (an exclusive `flock` while it runs).
    #[test]
    fn a_sync_waits_for_a_fault_in_in_another_process() {
        let (dir, file, _mapping) = mapping(PAGE);
        let elsewhere = File::open(dir.path().join("f")).unwrap();
        rustix::fs::flock(&elsewhere, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let (done, synced) = std::sync::mpsc::channel();
        let path = dir.path().join("f");
        let syncing = std::thread::spawn(move || {
            sync_data(&file, &path).unwrap();
            done.send(()).unwrap();
        });
        // Not timed: a thread that is merely slow passes too.
        std::thread::sleep(Duration::from_millis(50));
        assert!(synced.try_recv().is_err(), "synced during the fault-in");
        rustix::fs::flock(&elsewhere, rustix::fs::FlockOperation::Unlock).unwrap();
        synced.recv_timeout(Duration::from_secs(20)).unwrap();
        syncing.join().unwrap();
    }
}
