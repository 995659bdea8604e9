//! The process lock: one open handle per queue, across processes and within one.

use std::fs::{File, OpenOptions};
use std::path::Path;

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

impl DirLock {
    /// Takes the lock of the queue in `dir`, or fails at once with `Locked`.
    pub fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE);
        let file = lock_file(&path)?;
        match fs4::FileExt::try_lock(&file) {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(fs4::TryLockError::WouldBlock) => Err(Error::Locked { path }),
            Err(fs4::TryLockError::Error(e)) => Err(Error::io(&path, e)),
        }
    }
}
