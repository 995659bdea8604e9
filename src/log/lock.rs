//! The process lock: one open handle per queue, across processes and within one.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Name of the lock file inside the queue directory.
pub const LOCK_FILE: &str = "dque.lock";

/// Holds an exclusive `flock` on the queue's lock file until dropped.
///
/// `flock` locks belong to the open file description, so a second open in
/// the same process conflicts just like one from another process.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// The file at `path` (made if missing), opened to be locked.
fn lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

/// Waits for an exclusive `flock` on the file at `path` (made if missing);
/// held until the returned file is dropped.
pub fn lock_exclusive(path: &Path) -> Result<File> {
    let file = lock_file(path)?;
    fs4::FileExt::lock(&file).map_err(|e| Error::io(path, e))?;
    Ok(file)
}

/// How long an open waits for a lock that is held before it says `Locked`.
///
/// A child process holds copies of its parent's open files from its fork to
/// its exec, lock files included: a handle this program just closed can stay
/// locked for that long while another thread spawns a process. The wait
/// covers that window; a handle that is really open elsewhere is still
/// refused, a moment later.
pub const RELEASE_WAIT: Duration = Duration::from_millis(500);

/// Runs `try_lock` until it takes the lock (`Ok(true)`), fails, or finds the
/// lock held for [`RELEASE_WAIT`] (`Ok(false)`).
pub fn retry_while_held(
    mut try_lock: impl FnMut() -> std::result::Result<(), fs4::TryLockError>,
) -> std::io::Result<bool> {
    let deadline = Instant::now() + RELEASE_WAIT;
    let mut pause = Duration::from_millis(1);
    loop {
        match try_lock() {
            Ok(()) => return Ok(true),
            Err(fs4::TryLockError::Error(e)) => return Err(e),
            Err(fs4::TryLockError::WouldBlock) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

impl DirLock {
    /// Takes the lock of the queue in `dir`, or fails with `Locked` if it
    /// stays held for [`RELEASE_WAIT`].
    pub fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE);
        let file = lock_file(&path)?;
        match retry_while_held(|| fs4::FileExt::try_lock(&file)) {
            Ok(true) => Ok(DirLock { _file: file }),
            Ok(false) => Err(Error::Locked { path }),
            Err(e) => Err(Error::io(&path, e)),
        }
    }
}
