//! Unique jobs, embedded: the ids still held by jobs that ran or died
//! within their uniqueness period (issue 27). A waiting job holds its id
//! through its records (see `ids`); once its last record ends, only this
//! file remembers it: `jobs/ids/unique`, an append-only log of (id, end of
//! the period, done or dead), written before the record ends, read and
//! written under the ids' lock only (FORMAT.md, "Unique jobs").
//!
//! Bounded: an entry whose period ended is dropped when read, and the
//! file is rewritten with the live entries alone once it holds twice as
//! many entries as are live (at least 1,024), so its size and the time
//! to read it stay proportional to the ids held now. A rewrite (a new
//! file renamed over the old) bumps the generation in the header, by
//! which another process knows to read the file again from its start.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::faults::{check, synced, Durable, FaultOp};
use crate::jobs::unique::Settled;
use crate::log::layout::QueueDir;

/// The file's first 8 bytes.
const MAGIC: &[u8; 8] = b"dqueuniq";
/// Magic, then the generation (u64 LE).
const HEADER: usize = 16;
/// Kind (1), id length (1), end of the period (8), then the id, then a
/// CRC-32 of all that (4).
const ENTRY_FIXED: usize = 1 + 1 + 8;
const DONE: u8 = 1;
const DEAD: u8 = 2;
/// The id is free again (a settle that failed after its entry, a
/// requeued dead letter).
const FREED: u8 = 3;
/// Entries kept before a rewrite is considered.
const MIN_REWRITE: usize = 1024;

type IdMap<V> = std::collections::HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// An id held by a settled job: until when, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub until_ms: u64,
    pub state: Settled,
}

/// The held ids as read from `jobs/ids/unique`, with where reading stopped.
#[derive(Debug)]
pub struct Claims {
    path: PathBuf,
    held: IdMap<Held>,
    /// The generation read; `None` until the file was read once.
    generation: Option<u64>,
    /// The end of the last whole entry read.
    read_to: u64,
    /// Entries in the file (live or not): what a rewrite would drop.
    entries: usize,
}

impl Claims {
    pub fn new(dir: &Path) -> Claims {
        Claims {
            path: dir.join("unique"),
            held: IdMap::default(),
            generation: None,
            read_to: HEADER as u64,
            entries: 0,
        }
    }

    /// Whether `id` is held at `now_ms` by a job that ran or died.
    pub fn held(&self, id: &str, now_ms: u64) -> Option<Held> {
        self.held
            .get(id)
            .copied()
            .filter(|held| now_ms < held.until_ms)
    }

    /// Reads what was appended since the last read (all of it the first
    /// time, or after another process rewrote the file). `changed`: other
    /// processes may have written (shared mode, the write count moved).
    pub fn refresh(&mut self, changed: bool, now_ms: u64) -> Result<()> {
        if self.generation.is_some() && !changed {
            return Ok(());
        }
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.generation.get_or_insert(0);
                return Ok(());
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let mut head = [0u8; HEADER];
        let generation = match file.read_exact_at(&mut head, 0) {
            Ok(()) => header(&head),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        // Cut before its header was whole (or not ours): nothing in it yet.
        let Some(generation) = generation else {
            self.generation.get_or_insert(0);
            return Ok(());
        };
        if self.generation != Some(generation) {
            self.held.clear();
            self.read_to = HEADER as u64;
            self.entries = 0;
            self.generation = Some(generation);
        }
        // Only what was appended since the last read.
        let bytes = read_from(&file, self.read_to, &self.path)?;
        let mut at = 0;
        while let Some((entry, next)) = entry_at(&bytes, at) {
            self.apply(entry, now_ms);
            self.entries += 1;
            at = next;
        }
        self.read_to += at as u64;
        Ok(())
    }

    fn apply(&mut self, (kind, until_ms, id): (u8, u64, &str), now_ms: u64) {
        let state = match kind {
            DONE => Settled::Done,
            DEAD => Settled::Dead,
            _ => {
                self.held.remove(id);
                return;
            }
        };
        if now_ms < until_ms {
            self.held.insert(id.into(), Held { until_ms, state });
        } else {
            self.held.remove(id);
        }
    }

    /// Appends that `id` is held until `until_ms` by a job settled as
    /// `state` (`None`: free again); `durable`: synced before it returns
    /// (Safe mode: the record's end that follows is).
    pub fn append(
        &mut self,
        id: &str,
        held: Option<Held>,
        durable: bool,
        now_ms: u64,
    ) -> Result<()> {
        let (kind, until_ms) = match held {
            Some(Held {
                state: Settled::Done,
                until_ms,
            }) => (DONE, until_ms),
            Some(Held {
                state: Settled::Dead,
                until_ms,
            }) => (DEAD, until_ms),
            None => (FREED, 0),
        };
        let file = self.open_for_append()?;
        let bytes = encode_entry(kind, until_ms, id);
        let at = self.read_to;
        check(FaultOp::Write, &self.path)
            .and_then(|()| file.set_len(at))
            .and_then(|()| file.write_all_at(&bytes, at))
            .map_err(|e| Error::io(&self.path, e))?;
        if durable {
            check(FaultOp::Sync, &self.path)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io(&self.path, e))?;
            synced(&self.path, Durable::File);
        }
        self.read_to += bytes.len() as u64;
        self.entries += 1;
        self.apply((kind, until_ms, id), now_ms);
        // The entry is written: a rewrite that fails is tried again later.
        let _ = self.rewrite_if_due(now_ms);
        Ok(())
    }

    /// The file, made with its header if it is missing or cut short.
    fn open_for_append(&mut self) -> Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| Error::io(&self.path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        if len < HEADER as u64 {
            // Made (or cut before its header was whole): the header and
            // the file's name made durable before any entry relies on them.
            let generation = self.generation.unwrap_or(0);
            let dir = self.path.parent().expect("in jobs/ids/");
            check(FaultOp::Write, &self.path)
                .and_then(|()| file.write_all_at(&header_bytes(generation), 0))
                .and_then(|()| check(FaultOp::Sync, &self.path))
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io(&self.path, e))?;
            synced(&self.path, Durable::File);
            QueueDir::new(dir.to_path_buf()).sync()?;
            self.generation = Some(generation);
            self.read_to = HEADER as u64;
        }
        Ok(file)
    }

    /// Rewrites the file with the live entries alone once most are not:
    /// a new file, synced, renamed over the old, the directory synced.
    fn rewrite_if_due(&mut self, now_ms: u64) -> Result<()> {
        self.held.retain(|_, held| now_ms < held.until_ms);
        if self.entries < MIN_REWRITE.max(2 * self.held.len()) {
            return Ok(());
        }
        let generation = self.generation.unwrap_or(0) + 1;
        let mut bytes = header_bytes(generation).to_vec();
        for (id, held) in &self.held {
            let kind = match held.state {
                Settled::Done => DONE,
                Settled::Dead => DEAD,
            };
            bytes.extend_from_slice(&encode_entry(kind, held.until_ms, id));
        }
        let dir = self.path.parent().expect("in jobs/ids/");
        QueueDir::new(dir.to_path_buf()).write_durably(&self.path, &bytes)?;
        self.generation = Some(generation);
        self.read_to = bytes.len() as u64;
        self.entries = self.held.len();
        Ok(())
    }
}

fn header_bytes(generation: u64) -> [u8; HEADER] {
    let mut bytes = [0u8; HEADER];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..].copy_from_slice(&generation.to_le_bytes());
    bytes
}

fn header(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..HEADER)?;
    (header[..8] == MAGIC[..]).then(|| u64::from_le_bytes(header[8..].try_into().expect("8")))
}

fn encode_entry(kind: u8, until_ms: u64, id: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(ENTRY_FIXED + id.len() + 4);
    bytes.push(kind);
    // Ids are at most 100 bytes (checked at enqueue).
    bytes.push(id.len() as u8);
    bytes.extend_from_slice(&until_ms.to_le_bytes());
    bytes.extend_from_slice(id.as_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// The whole entry at `at` and where the next starts; `None` at the end
/// or at an entry a crash cut (or damage: the rest is not read, and the
/// next append writes over it).
fn entry_at(bytes: &[u8], at: usize) -> Option<((u8, u64, &str), usize)> {
    let fixed = bytes.get(at..at + ENTRY_FIXED)?;
    let (kind, len) = (fixed[0], usize::from(fixed[1]));
    let end = at + ENTRY_FIXED + len;
    let crc = u32::from_le_bytes(bytes.get(end..end + 4)?.try_into().ok()?);
    if crc32fast::hash(&bytes[at..end]) != crc || !(DONE..=FREED).contains(&kind) {
        return None;
    }
    let until_ms = u64::from_le_bytes(fixed[2..10].try_into().ok()?);
    let id = std::str::from_utf8(&bytes[at + ENTRY_FIXED..end]).ok()?;
    Some(((kind, until_ms, id), end + 4))
}

/// The bytes of `file` from `offset` to its end.
fn read_from(file: &File, offset: u64, path: &Path) -> Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(offset))
        .and_then(|_| reader.read_to_end(&mut bytes))
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_ids_survive_a_reread_and_expired_ones_are_dropped_by_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let mut claims = Claims::new(dir.path());
        claims.refresh(false, 0).unwrap();
        let held = |until_ms, state| Some(Held { until_ms, state });
        claims
            .append("a", held(1_000, Settled::Done), true, 0)
            .unwrap();
        claims
            .append("b", held(10, Settled::Dead), true, 0)
            .unwrap();
        claims
            .append("c", held(1_000, Settled::Done), true, 0)
            .unwrap();
        claims.append("c", None, true, 0).unwrap();
        let mut again = Claims::new(dir.path());
        again.refresh(false, 5).unwrap();
        assert_eq!(again.held("a", 5).map(|h| h.state), Some(Settled::Done));
        assert_eq!(again.held("b", 5).map(|h| h.state), Some(Settled::Dead));
        assert_eq!(again.held("b", 10), None, "the period ended");
        assert_eq!(again.held("c", 5), None, "freed");
        // Past every period, enough entries to rewrite: one live one kept.
        for i in 0..MIN_REWRITE {
            let id = format!("x{i}");
            again
                .append(&id, held(20, Settled::Done), false, 15)
                .unwrap();
        }
        again
            .append("z", held(5_000, Settled::Done), false, 30)
            .unwrap();
        let size = std::fs::metadata(dir.path().join("unique")).unwrap().len();
        assert!(size < 200, "rewritten to the live entries: {size} bytes");
        // A reader of the old generation reads the new one from its start.
        claims.refresh(true, 30).unwrap();
        assert_eq!(claims.held("z", 30).map(|h| h.until_ms), Some(5_000));
        assert_eq!(claims.held("a", 30).map(|h| h.state), Some(Settled::Done));
        assert_eq!(claims.held("x1", 30), None);
    }

    #[test]
    fn a_cut_entry_ends_the_reading_and_the_next_append_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut claims = Claims::new(dir.path());
        claims.refresh(false, 0).unwrap();
        let held = Some(Held {
            until_ms: 100,
            state: Settled::Done,
        });
        claims.append("a", held, true, 0).unwrap();
        let path = dir.path().join("unique");
        let whole = std::fs::metadata(&path).unwrap().len();
        // A crash cut the second entry.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&encode_entry(DONE, 100, "b")[..7]);
        std::fs::write(&path, &bytes).unwrap();
        let mut reader = Claims::new(dir.path());
        reader.refresh(false, 0).unwrap();
        assert!(reader.held("a", 0).is_some() && reader.held("b", 0).is_none());
        reader.append("c", held, true, 0).unwrap();
        let mut last = Claims::new(dir.path());
        last.refresh(false, 0).unwrap();
        assert!(last.held("c", 0).is_some(), "written over the cut entry");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            whole + encode_entry(DONE, 100, "c").len() as u64
        );
    }
}
