//! `quarantine/` in a queue directory: bytes the queue no longer reads are
//! kept there, never deleted, where `dque salvage` reads them.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::layout::QueueDir;

/// The folder inside a queue directory where repairs move damaged segments
/// and where cuts keep a copy of what they cut.
pub const QUARANTINE_DIR: &str = "quarantine";

/// Keeps a copy of segment file `segment` (its first `bytes`) before its
/// bytes from `offset` on are cut: durable when this returns (written under
/// a temporary name, fsynced, renamed, directories fsynced). The copy is a
/// segment file: `salvage` reads it. Returns its path.
pub fn keep_copy(dir: &QueueDir, segment: &Path, bytes: &[u8], offset: usize) -> Result<PathBuf> {
    let quarantine = QueueDir::new(dir.path().join(QUARANTINE_DIR));
    if !quarantine.path().is_dir() {
        fs::create_dir_all(quarantine.path()).map_err(|e| Error::io(quarantine.path(), e))?;
        dir.sync()?;
    }
    let name = segment.file_name().unwrap_or_default().to_string_lossy();
    let copy = free_name(quarantine.path(), &format!("{name}.cut-at-{offset}"));
    quarantine.write_durably(&copy, bytes)?;
    Ok(copy)
}

/// `name` inside `dir`, with `.1`, `.2`, … added if taken.
pub fn free_name(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(name);
    let mut n = 0;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{name}.{n}"));
    }
    path
}
