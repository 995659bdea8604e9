//! What several targets share: reading fuzz input (never fails, missing
//! bytes read as zeros), scratch directories, and the files of a queue
//! written, listed and compared.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub(super) struct Input<'a>(pub(super) &'a [u8]);

impl<'a> Input<'a> {
    pub(super) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }

    pub(super) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let taken = self.bytes(N);
        out[..taken.len()].copy_from_slice(taken);
        out
    }

    pub(super) fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Largest item the queues under test accept (`Options::max_item_bytes`).
pub const MAX_ITEM: u32 = 3000;

/// Item number `n` with `size` bytes: distinct for distinct `n` (from 4 bytes on).
pub(super) fn item(n: u32, size: usize) -> Vec<u8> {
    let tag = n.to_le_bytes();
    (0..size).map(|i| tag[i % 4] ^ (i / 4) as u8).collect()
}

/// A fresh directory, in memory when the machine has `/dev/shm` (fsync is
/// then cheap, and the fuzzer runs many times faster).
pub(super) fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new().prefix("dque-fuzz").tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix("dque-fuzz").tempdir()
    };
    dir.expect("make a scratch directory")
}

/// Writes `files` (names relative to `dir`) into `dir`.
pub(super) fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (name, bytes) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("make a directory of the input");
        }
        fs::write(path, bytes).expect("write an input file");
    }
}

/// Every file under `dir` and its length: what a read must leave alone.
pub(super) fn file_sizes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    fn walk(at: &Path, out: &mut BTreeMap<PathBuf, u64>) {
        for entry in fs::read_dir(at).expect("list a directory of the queue") {
            let entry = entry.expect("directory entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                walk(&entry.path(), out);
            } else {
                out.insert(entry.path(), meta.len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// The files of a queue directory.
#[derive(Debug, Default)]
pub(super) struct DirListing {
    pub(super) segments: Vec<(u64, PathBuf)>,
    pub(super) temp: Vec<PathBuf>,
}

pub(super) fn list_dir(dir: &Path) -> DirListing {
    let mut listing = DirListing::default();
    for entry in fs::read_dir(dir).expect("list the queue directory") {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(digits) = name.strip_suffix(".seg") {
            listing
                .segments
                .push((digits.parse().expect("segment number"), path));
        } else if name.ends_with(".tmp") {
            listing.temp.push(path);
        }
    }
    listing.segments.sort();
    listing
}

/// Every file and directory under a queue directory: path relative to it,
/// and bytes (`None` for a directory).
pub(super) type Snapshot = BTreeMap<PathBuf, Option<Vec<u8>>>;

pub(super) fn snapshot(dir: &Path) -> Snapshot {
    fn walk(root: &Path, at: &Path, out: &mut Snapshot) {
        let mut entries: Vec<PathBuf> = fs::read_dir(at)
            .expect("list a directory of the queue")
            .map(|entry| entry.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let relative = path
                .strip_prefix(root)
                .expect("under the queue")
                .to_path_buf();
            if path.is_dir() {
                out.insert(relative, None);
                walk(root, &path, out);
            } else {
                let bytes = fs::read(&path).expect("read a file of the queue");
                out.insert(relative, Some(bytes));
            }
        }
    }
    let mut out = Snapshot::new();
    walk(dir, dir, &mut out);
    out
}

/// The paths that differ between two snapshots, for a message.
pub(super) fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let paths: BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter_map(|p| match (before.get(p), after.get(p)) {
            (Some(a), Some(b)) if a == b => None,
            (Some(_), Some(_)) => Some(format!("changed {}", p.display())),
            (Some(_), None) => Some(format!("removed {}", p.display())),
            _ => Some(format!("added {}", p.display())),
        })
        .collect()
}
