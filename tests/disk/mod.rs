//! Helpers shared by `tests/recovery.rs`, `tests/hostile.rs` and `tests/bad_input.rs`: build small
//! queues, copy and damage their files, and predict the byte layout of a
//! segment from the operations that wrote it (FORMAT.md), so tests know where
//! every frame starts and ends without asking the crate.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use dque::{DQue, Durability, Error, Options, RawQueue};

/// Bytes before the first frame of a segment.
pub const HEADER_LEN: usize = 40;
/// Bytes of a record frame before its payload (head word and CRC).
pub const RECORD_OVERHEAD: usize = 8;
/// Bytes of a marker frame.
pub const MARKER_LEN: usize = 4;
/// Frames start at multiples of this; records are zero-padded to it.
pub const FRAME_ALIGN: usize = 4;
/// Name of the config file.
pub const CONFIG: &str = "dque.conf";
/// Name of the lock file.
pub const LOCK: &str = "dque.lock";

/// File name of segment `number`.
pub fn seg_name(number: u64) -> String {
    format!("{number:020}.seg")
}

/// Path of segment `number` in queue `dir`.
pub fn seg_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(seg_name(number))
}

/// The payload of item `id`: distinct, of varying length, without zero bytes
/// (so the last byte of every frame is non-zero and the data end is visible).
pub fn payload(id: u64) -> Vec<u8> {
    let mut p = format!("item-{id}-").into_bytes();
    p.extend(std::iter::repeat_n(
        b'a' + (id % 26) as u8,
        (id % 7) as usize,
    ));
    p
}

/// Turbo options: recovery tests need no fsync per call, and it keeps them fast.
pub fn turbo() -> Options {
    Options::new().durability(Durability::Turbo)
}

/// Dequeues until empty.
pub fn drain(q: &RawQueue) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(item) = q.dequeue().expect("dequeue") {
        out.push(item);
    }
    out
}

/// Payloads of ids in `ids`, in order.
pub fn payloads(ids: impl IntoIterator<Item = u64>) -> Vec<Vec<u8>> {
    ids.into_iter().map(payload).collect()
}

/// Every file of a directory (not the lock file, which an open may create
/// and which holds nothing), by name.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == LOCK {
            continue;
        }
        if entry.path().is_dir() {
            // quarantine/ (copies kept by cuts) and dead/: their files by path.
            for (inner, bytes) in snapshot(&entry.path()) {
                files.insert(format!("{name}/{inner}"), bytes);
            }
            continue;
        }
        files.insert(name, fs::read(entry.path()).expect("read file"));
    }
    files
}

/// Names of every entry of a directory, lock file included.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes `files` into a new directory `dst`.
pub fn restore(files: &BTreeMap<String, Vec<u8>>, dst: &Path) {
    fs::create_dir_all(dst).expect("create dir");
    for (name, bytes) in files {
        fs::write(dst.join(name), bytes).expect("write file");
    }
}

/// Offset just past the last non-zero byte of `bytes` (0 if all are zero).
pub fn nonzero_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// Deterministic xorshift generator: tests stay reproducible without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `len` bytes, none of them zero.
    pub fn nonzero_bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| (self.below(255) + 1) as u8).collect()
    }
}

/// What a frame of a segment is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The record of item `id`.
    Record(u64),
    /// The ack marker settling item `id`.
    Ack(u64),
}

/// One frame's place in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
}

/// The frames of a segment as a sequence of calls writes them: records in
/// the order of enqueue, each dequeue appending an ack for the oldest
/// unsettled record. Only valid for a segment that is both head and tail,
/// or for a tail that takes no acks.
#[derive(Debug, Default)]
pub struct Layout {
    pub frames: Vec<Frame>,
    next_id: u64,
    next_ack: u64,
    first_id: u64,
}

impl Layout {
    pub fn new(first_id: u64) -> Self {
        Layout {
            frames: Vec::new(),
            next_id: first_id,
            next_ack: first_id,
            first_id,
        }
    }

    fn end(&self) -> usize {
        self.frames.last().map_or(HEADER_LEN, |f| f.end)
    }

    /// Records item `next_id` and returns its id.
    pub fn enqueue(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let start = self.end();
        self.frames.push(Frame {
            start,
            end: start + (RECORD_OVERHEAD + payload(id).len()).next_multiple_of(FRAME_ALIGN),
            kind: Kind::Record(id),
        });
        id
    }

    /// Acks the oldest unsettled record and returns its id.
    pub fn dequeue(&mut self) -> u64 {
        let id = self.next_ack;
        assert!(id < self.next_id, "layout: dequeue from an empty segment");
        self.next_ack += 1;
        let start = self.end();
        self.frames.push(Frame {
            start,
            end: start + MARKER_LEN,
            kind: Kind::Ack(id),
        });
        id
    }

    /// End of the last frame.
    pub fn data_end(&self) -> usize {
        self.end()
    }

    /// Ids whose record is whole before `cut` and whose ack is not: what a
    /// queue truncated at `cut` must still hold, in order.
    pub fn survivors(&self, cut: usize) -> Vec<u64> {
        let whole = |kind: Kind| self.frames.iter().any(|f| f.kind == kind && f.end <= cut);
        (self.first_id..self.next_id)
            .filter(|&id| whole(Kind::Record(id)) && !whole(Kind::Ack(id)))
            .collect()
    }

    /// End of the last frame that is whole before `cut`.
    pub fn whole_end(&self, cut: usize) -> usize {
        self.frames
            .iter()
            .filter(|f| f.end <= cut)
            .map(|f| f.end)
            .max()
            .unwrap_or(HEADER_LEN)
    }

    /// Checks the layout against the bytes of the segment it predicts: each
    /// ack marker is the 4 bytes FORMAT.md gives, and nothing follows the
    /// last frame. Guards the tests against predicting the wrong offsets.
    pub fn check_against(&self, segment: &[u8]) {
        for f in &self.frames {
            match f.kind {
                Kind::Record(id) => {
                    let word =
                        u32::from_le_bytes(segment[f.start..f.start + 4].try_into().unwrap());
                    assert_eq!(word >> 30, 0b10, "record {id} kind at {}", f.start);
                    assert_eq!(word & ((1 << 30) - 1), payload(id).len() as u32);
                    let payload_end = f.start + RECORD_OVERHEAD + payload(id).len();
                    assert_eq!(
                        &segment[f.start + RECORD_OVERHEAD..payload_end],
                        &payload(id)[..]
                    );
                    assert!(
                        segment[payload_end..f.end].iter().all(|&b| b == 0),
                        "record {id} padding"
                    );
                }
                Kind::Ack(id) => {
                    let index = (id - self.first_id) as u32;
                    let word = (0b01 << 30) | (1 << 24) | index;
                    assert_eq!(&segment[f.start..f.end], &word.to_le_bytes(), "ack of {id}");
                }
            }
        }
        assert!(
            segment[self.data_end()..].iter().all(|&b| b == 0),
            "bytes after the layout"
        );
    }
}

/// Asserts `result` is `Error::Corrupted` naming `segment` at `offset`.
#[track_caller]
pub fn assert_corrupted<T>(result: Result<T, Error>, segment: &Path, offset: u64) {
    match result {
        Err(Error::Corrupted {
            segment: s,
            offset: o,
            reason,
        }) => {
            assert_eq!(s, segment, "corrupted segment ({reason})");
            assert_eq!(o, offset, "corrupted offset ({reason})");
            assert!(!reason.is_empty());
        }
        Err(other) => panic!("expected Corrupted at {offset} of {segment:?}, got {other:?}"),
        Ok(_) => panic!("expected Corrupted at {offset} of {segment:?}, got Ok"),
    }
}

/// Bytes of a config file with `version`, segment limits and codec id, CRC included.
pub fn config_bytes(version: u32, records: u32, bytes: u32, codec: u32) -> Vec<u8> {
    let mut b = vec![0u8; 28];
    b[0..4].copy_from_slice(b"DQCF");
    b[4..8].copy_from_slice(&version.to_le_bytes());
    b[8..12].copy_from_slice(&records.to_le_bytes());
    b[12..16].copy_from_slice(&bytes.to_le_bytes());
    b[16..20].copy_from_slice(&codec.to_le_bytes());
    let crc = crc32fast::hash(&b[0..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Rewrites the version of the segment header at the start of `segment` and
/// its CRC, as a newer dque would write it.
pub fn set_header_version(segment: &mut [u8], version: u32) {
    segment[4..8].copy_from_slice(&version.to_le_bytes());
    let crc = crc32fast::hash(&segment[0..36]);
    segment[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// The three ways to open a queue, by name.
pub const CALLS: [&str; 3] = ["open", "create", "open_or_create"];

/// Opens `path` as a `DQue<u32>` the way `call` names.
pub fn open_by(call: &str, path: &Path) -> Result<DQue<u32>, Error> {
    match call {
        "open" => DQue::open(path),
        "create" => DQue::create(path),
        "open_or_create" => DQue::open_or_create(path),
        _ => unreachable!("unknown call {call}"),
    }
}
