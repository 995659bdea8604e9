//! The queue directory: file names, listing, config file, directory fsync.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::faults::{self, Durable, FaultOp};
use crate::log::format::{Config, HeaderError};
use crate::log::lock::LOCK_FILE;

/// Name of the config file inside the queue directory.
pub const CONFIG_FILE: &str = "dque.conf";
/// The name `create_durably` gives the config while it is written.
const CONFIG_TEMP: &str = "dque.conf.tmp";
/// Name of the dead-letter queue's directory inside the queue's.
pub const DEAD_LETTER_DIR: &str = "dead";
/// Name of the control file of shared mode inside the queue directory.
pub const CONTROL_FILE: &str = "dque.shm";
/// The name the control file is made under.
pub const CONTROL_TEMP: &str = "dque.shm.tmp";
/// The last nack reason of records (see `queue::engine::reasons`).
pub const REASONS_FILE: &str = "dque.reasons";
/// The reasons file while it is compacted.
pub const REASONS_TEMP: &str = "dque.reasons.tmp";
const SEGMENT_EXT: &str = "seg";
const TEMP_EXT: &str = "tmp";

/// What a directory listing found.
#[derive(Debug, Default)]
pub struct Listing {
    /// Segment numbers, ascending.
    pub segments: Vec<u64>,
    /// Half-made files left by a crash (segments or config being written).
    pub temp_files: Vec<PathBuf>,
    /// Whether the config file exists.
    pub has_config: bool,
    /// Names of entries that are none of dque's.
    pub foreign: Vec<String>,
}

/// Paths and directory-level operations of one queue.
#[derive(Debug, Clone)]
pub struct QueueDir {
    path: PathBuf,
}

impl QueueDir {
    pub fn new(path: PathBuf) -> Self {
        QueueDir { path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn segment_path(&self, number: u64) -> PathBuf {
        self.path.join(format!("{number:020}.{SEGMENT_EXT}"))
    }

    pub fn dead_letter_path(&self) -> PathBuf {
        self.path.join(DEAD_LETTER_DIR)
    }

    pub fn config_path(&self) -> PathBuf {
        self.path.join(CONFIG_FILE)
    }

    pub fn list(&self) -> Result<Listing> {
        let mut listing = Listing::default();
        let entries = fs::read_dir(&self.path).map_err(|e| Error::io(&self.path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == CONFIG_FILE {
                listing.has_config = true;
            } else if name == LOCK_FILE || name == CONTROL_FILE || name == REASONS_FILE {
                // Ours, and says nothing about the queue's state.
            } else if let Some(number) = parse_segment_name(&name) {
                listing.segments.push(number);
            } else if name == CONFIG_TEMP
                || name == CONTROL_TEMP
                || name == REASONS_TEMP
                || name.ends_with(&format!(".{SEGMENT_EXT}.{TEMP_EXT}"))
            {
                listing.temp_files.push(entry.path());
            } else {
                listing.foreign.push(name);
            }
        }
        listing.segments.sort_unstable();
        listing.foreign.sort();
        Ok(listing)
    }

    /// Makes renames, creations and deletions in the directory durable.
    pub fn sync(&self) -> Result<()> {
        faults::check(FaultOp::Sync, &self.path)
            .and_then(|()| File::open(&self.path))
            .and_then(|dir| dir.sync_all())
            .map_err(|e| Error::io(&self.path, e))?;
        faults::synced(&self.path, Durable::Dir);
        Ok(())
    }

    pub fn read_config(&self) -> Result<Config> {
        let path = self.config_path();
        let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        Config::decode(&bytes).map_err(|e| match e {
            HeaderError::Version(found) => Error::UnsupportedVersion {
                path,
                found,
                supported: crate::log::format::CONFIG_VERSION,
            },
            HeaderError::Invalid(reason) => Error::NotAQueue {
                path,
                reason: format!("config file does not parse: {reason}"),
            },
        })
    }

    /// Replaces the config atomically: temp file, fsync, rename, fsync directory.
    pub fn write_config(&self, config: &Config) -> Result<()> {
        self.write_durably(&self.config_path(), &config.encode())
    }

    /// Writes `bytes` as the file `path` in this directory; see
    /// [`create_durably`](Self::create_durably).
    pub fn write_durably(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        self.create_durably(path, |file| file.write_all(bytes))
            .map(drop)
    }

    /// Creates the file `path` in this directory so that a crash leaves
    /// either no file or the whole one: `fill` writes it under the name
    /// `path` + `.tmp` (which an open removes as a leftover), then it is
    /// fsynced, renamed into place, and the directory fsynced. The one way
    /// dque makes a file (config, segments, placeholders, kept copies).
    /// Returns the file, open for reading and writing.
    pub fn create_durably(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<File> {
        let mut temp = path.as_os_str().to_owned();
        temp.push(format!(".{TEMP_EXT}"));
        let temp = PathBuf::from(temp);
        let file = faults::check(FaultOp::Write, &temp)
            .and_then(|()| {
                let mut file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&temp)?;
                fill(&mut file)?;
                faults::check(FaultOp::Sync, &temp)?;
                file.sync_all()?;
                Ok(file)
            })
            .map_err(|e| Error::io(&temp, e))?;
        faults::synced(&temp, Durable::File);
        faults::check(FaultOp::Write, path)
            .and_then(|()| fs::rename(&temp, path))
            .map_err(|e| Error::io(path, e))?;
        faults::renamed(&temp, path);
        self.sync()?;
        Ok(file)
    }
}

pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(&format!(".{SEGMENT_EXT}"))?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip() {
        let dir = QueueDir::new(PathBuf::from("/q"));
        let path = dir.segment_path(42);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_segment_name(name), Some(42));
        assert_eq!(parse_segment_name("42.seg"), None);
        assert_eq!(parse_segment_name("0000000000000000004x.seg"), None);
    }
}
