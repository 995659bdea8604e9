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
//! The thread may be late: a request for a mapping that was replaced or
//! dropped meanwhile is skipped, under a lock that the mapping's drop takes
//! (so an address is never advised after it was unmapped).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use memmap2::MmapMut;
use parking_lot::RwLock;

/// How far ahead of the writer pages are faulted in, in one request.
const AHEAD: usize = 512 * 1024;

const PAGE: usize = 4096;

/// A mapping of a segment file.
pub struct Mapping {
    map: MmapMut,
    /// Up to where pages were asked for.
    requested: usize,
    /// `true` while the mapping is alive: the background thread advises it
    /// only under a read lock of this.
    alive: Arc<RwLock<bool>>,
    /// The process that made it (see `drop`).
    pid: u32,
}

impl Mapping {
    pub fn new(map: MmapMut) -> Mapping {
        Mapping {
            map,
            requested: 0,
            alive: Arc::new(RwLock::new(true)),
            pid: std::process::id(),
        }
    }

    /// Up to where pages were asked to be faulted in ahead of the writer.
    pub fn faulted_in_to(&self) -> usize {
        self.requested
    }

    /// Asks for the pages after `written` to be faulted in, when the writer
    /// has used half of those asked for last.
    pub fn fault_in_ahead(&mut self, written: usize) {
        if written + AHEAD / 2 <= self.requested {
            return;
        }
        let start = written.max(self.requested).div_ceil(PAGE) * PAGE;
        let end = (start + AHEAD).min(self.map.len());
        self.requested = end.max(self.requested);
        if end > start {
            let address = self.map.as_ptr() as usize + start;
            toucher::request(Arc::clone(&self.alive), address, end - start);
        }
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("len", &self.map.len())
            .field("requested", &self.requested)
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
        // mapping itself is unmapped after this, when `map` drops.
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
    use std::sync::atomic::{AtomicBool, Ordering};

    type Request = (Arc<RwLock<bool>>, usize, usize);

    /// The thread's queue, and the process that started it (a child made
    /// by `fork` has no such thread: it faults its pages itself).
    static QUEUE: OnceLock<(crossbeam_channel::Sender<Request>, u32)> = OnceLock::new();

    /// Set when the kernel does not know `MADV_POPULATE_WRITE`.
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

    pub fn request(alive: Arc<RwLock<bool>>, address: usize, len: usize) {
        if UNSUPPORTED.load(Ordering::Relaxed) {
            return;
        }
        let (queue, pid) = QUEUE.get_or_init(|| {
            let (sender, receiver) = crossbeam_channel::unbounded::<Request>();
            let started = std::thread::Builder::new()
                .name("dque-fault-ahead".into())
                .spawn(move || {
                    for (alive, address, len) in receiver {
                        let alive = alive.read();
                        if *alive {
                            populate(address, len);
                        }
                    }
                });
            if started.is_err() {
                UNSUPPORTED.store(true, Ordering::Relaxed);
            }
            (sender, std::process::id())
        });
        if *pid == std::process::id() {
            let _ = queue.send((alive, address, len));
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

    pub fn request(_alive: Arc<RwLock<bool>>, _address: usize, _len: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(len: usize) -> (tempfile::TempDir, Mapping) {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap();
        file.set_len(len as u64).unwrap();
        // SAFETY: a private temporary file nothing else maps or truncates.
        let map = unsafe { MmapMut::map_mut(&file) }.unwrap();
        (dir, Mapping::new(map))
    }

    #[test]
    fn faulting_ahead_changes_no_byte_and_dropping_waits_for_it() {
        for _ in 0..50 {
            let (_dir, mut mapping) = mapping(4 * AHEAD);
            mapping[..5].copy_from_slice(b"hello");
            mapping.fault_in_ahead(5);
            mapping.fault_in_ahead(AHEAD);
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
    fn requests_stay_inside_the_mapping() {
        let (_dir, mut mapping) = mapping(3 * PAGE);
        mapping.fault_in_ahead(0);
        assert_eq!(mapping.requested, 3 * PAGE);
        mapping.fault_in_ahead(PAGE);
        assert_eq!(mapping.requested, 3 * PAGE, "nothing past the end");
    }
}
