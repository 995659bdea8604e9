//! The checks behind the fuzz targets `open`, `repair` and `ops`, and the
//! generator of their seed corpus.
//!
//! This one file is compiled twice: as `dque_fuzz::checks` for cargo-fuzz
//! (nightly flags), and as a `#[path]` module of dque's `tests/fuzz_corpus.rs`,
//! which runs every saved corpus file through it on stable. So it uses only
//! `dque`, `std` and `tempfile`, and no `crate::` path.
//!
//! * [`open_files`]: the input is a queue directory (a config and up to three
//!   segment files, see [`OpenInput`]). Opening it must fail with the error
//!   an independent reading of FORMAT.md predicts (its "Tail damage" rule
//!   among them: `judge_tail`), changing nothing it may not, or succeed
//!   with exactly the predicted repairs (each with its copy kept in
//!   `quarantine/`), deletions, `len()`, `verify()` summary and items, with
//!   reads that write nothing; then the queue must take one more item and
//!   reopen clean.
//! * [`repair_files`]: the same input as `open`. `QueueFiles` must read it
//!   without writing, with allocations bounded by the file sizes. `repair()`
//!   is judged by properties, not by a model of its steps: a dry run changes
//!   nothing; a refusal changes nothing; the repaired queue opens clean and
//!   verifies healthy; every record that was whole and reachable before is
//!   delivered, in order, with its id and bytes, and nothing else is; no
//!   bytes are destroyed silently; nothing outside the queue directory is
//!   touched; a second repair changes nothing; and a repair stopped at any
//!   of its syncs is finished by the next (see [`check_repair`]).
//! * [`ops`]: the input is a sequence of operations (see [`Op`]) applied to a
//!   queue and to a model, compared after every one, across reopens with
//!   other sizes, durability switches, kills (the directory copied, its
//!   subdirectories too, while the queue is open, as a killed process leaves
//!   it) and power losses (crash images of dque's `fault-injection` feature,
//!   which must open; without it, a kill).
//!
//! The fuzz crate turns `fault-injection` on by default (its feature of that
//! name enables dque's); in dque's tests the same `cfg` is dque's own feature.
//!
//! Every check panics with a message that says what differed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dque::{
    repair, Durability, Error, OpenReport, Options, QueueFiles, RawQueue, RepairAction,
    FORMAT_VERSION,
};

/// Largest item the queues under test accept (`Options::max_item_bytes`).
pub const MAX_ITEM: u32 = 3000;

// ---------------------------------------------------------------------------
// The format, as FORMAT.md states it (written from the text, not the code).

const CONFIG_FILE: &str = "dque.conf";
const LOCK_FILE: &str = "dque.lock";
const CONFIG_TEMP: &str = "dque.conf.tmp";
const QUARANTINE_DIR: &str = "quarantine";
const CONFIG_LEN: usize = 28;
const HEADER_LEN: usize = 40;
const RECORD_OVERHEAD: usize = 8;
const MAX_SEGMENT_RECORDS: u32 = (1 << 24) - 1;
const RECORD_LEN_MASK: u32 = (1 << 30) - 1;
/// Marker types (bits 24..30 of a marker's head word).
const ACK: u32 = 1;
const LEASE: u32 = 2;
const DEAD: u32 = 3;
const REACHED: u32 = 4;
const RELEASE: u32 = 5;
const ACK_MARKER: u32 = marker_word(ACK, 0);

/// The head word of a marker of `kind` naming record `index`.
const fn marker_word(kind: u32, index: u32) -> u32 {
    (0b01 << 30) | ((kind & 0x3F) << 24) | (index & 0x00FF_FFFF)
}
/// Segment limits of a queue created without sizes (documented on `Options`).
const DEFAULT_SEGMENT_ITEMS: u32 = 100_000;
const DEFAULT_SEGMENT_BYTES: u32 = 64 << 20;
/// The codec id of [`RawQueue`].
const RAW_CODEC: u32 = 0;

/// CRC-32 (IEEE), the polynomial FORMAT.md names.
fn crc32(parts: &[&[u8]]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for part in parts {
        for &b in *part {
            crc = TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
        }
    }
    !crc
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn segment_name(number: u64) -> String {
    format!("{number:020}.seg")
}

/// The bytes of a version-1 config file.
fn config_bytes(records: u32, bytes: u32, codec: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(CONFIG_LEN);
    b.extend_from_slice(b"DQCF");
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&records.to_le_bytes());
    b.extend_from_slice(&bytes.to_le_bytes());
    b.extend_from_slice(&codec.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    let crc = crc32(&[&b]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// The bytes of a version-1 segment header.
fn header_bytes(number: u64, first_id: u64, max_records: u32, max_bytes: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    b.extend_from_slice(b"DQSG");
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&number.to_le_bytes());
    b.extend_from_slice(&first_id.to_le_bytes());
    b.extend_from_slice(&max_records.to_le_bytes());
    b.extend_from_slice(&max_bytes.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    let crc = crc32(&[&b]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A record frame: head word, CRC, payload, zero padding to 4 bytes.
fn record_frame(payload: &[u8]) -> Vec<u8> {
    let word = (0x8000_0000 | payload.len() as u32).to_le_bytes();
    let mut f = word.to_vec();
    f.extend_from_slice(&crc32(&[&word, payload]).to_le_bytes());
    f.extend_from_slice(payload);
    f.resize((RECORD_OVERHEAD + payload.len()).next_multiple_of(4), 0);
    f
}

/// What a config file says, per FORMAT.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigVerdict {
    Valid {
        records: u32,
        bytes: u32,
        codec: u32,
    },
    /// Does not parse: `NotAQueue`.
    Invalid,
    /// Another format version: `UnsupportedVersion` (checked before the CRC).
    Version(u32),
}

fn judge_config(b: &[u8]) -> ConfigVerdict {
    if b.len() < 8 || &b[..4] != b"DQCF" {
        return ConfigVerdict::Invalid;
    }
    let version = le_u32(b, 4);
    if version != FORMAT_VERSION {
        return ConfigVerdict::Version(version);
    }
    if b.len() != CONFIG_LEN || le_u32(b, 24) != crc32(&[&b[..24]]) {
        return ConfigVerdict::Invalid;
    }
    let records = le_u32(b, 8);
    if records == 0 || records > MAX_SEGMENT_RECORDS {
        return ConfigVerdict::Invalid;
    }
    ConfigVerdict::Valid {
        records,
        bytes: le_u32(b, 12),
        codec: le_u32(b, 16),
    }
}

#[derive(Debug, Clone, Copy)]
struct Header {
    first_id: u64,
    max_records: u32,
}

#[derive(Debug)]
enum HeaderVerdict {
    Valid(Header),
    Corrupted,
    Version,
}

fn judge_header(b: &[u8], number: u64) -> HeaderVerdict {
    if b.len() < HEADER_LEN || &b[..4] != b"DQSG" {
        return HeaderVerdict::Corrupted;
    }
    if le_u32(b, 4) != FORMAT_VERSION {
        return HeaderVerdict::Version;
    }
    let max_records = le_u32(b, 24);
    if le_u32(b, 36) != crc32(&[&b[..36]])
        || le_u64(b, 8) != number
        || max_records == 0
        || max_records > MAX_SEGMENT_RECORDS
    {
        return HeaderVerdict::Corrupted;
    }
    HeaderVerdict::Valid(Header {
        first_id: le_u64(b, 16),
        max_records,
    })
}

/// A segment's frames as replay reads them.
#[derive(Debug, Default)]
struct Replayed {
    /// Payload range of each whole record, in order.
    records: Vec<(usize, usize)>,
    settled: Vec<bool>,
    /// Delivery attempts of each record: its lease markers less its release markers.
    attempts: Vec<u16>,
    /// Whether any valid marker was read (the segment is in the front run).
    has_markers: bool,
    /// End of the last valid frame.
    end: usize,
    /// End of the last non-zero byte at or after `end` (the cut, if any).
    garbage_end: usize,
}

impl Replayed {
    fn unsettled<'a>(&'a self, file: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
        self.records
            .iter()
            .zip(&self.settled)
            .filter(|(_, &settled)| !settled)
            .map(|(&(at, len), _)| file[at..at + len].to_vec())
    }

    fn unsettled_count(&self) -> usize {
        self.settled.iter().filter(|&&s| !s).count()
    }

    /// The payload of record `k`.
    fn payload(&self, file: &[u8], k: usize) -> Vec<u8> {
        let (at, len) = self.records[k];
        file[at..at + len].to_vec()
    }
}

/// Replays frames from the end of the header: records (whole, CRC and zero
/// padding right, under the record limit) and markers of a known type (ack,
/// lease, dead, reached, release) naming an earlier record, not yet settled
/// unless the marker is `reached` (a `release` only while the record has a
/// lease not yet released), up to a zero word or the first invalid frame.
fn replay(file: &[u8], max_records: u32) -> Replayed {
    let mut r = Replayed {
        end: HEADER_LEN,
        ..Replayed::default()
    };
    while r.end + 4 <= file.len() {
        let at = r.end;
        let word = le_u32(file, at);
        let size = match word >> 30 {
            0b10 => {
                let len = (word & RECORD_LEN_MASK) as usize;
                let size = (RECORD_OVERHEAD + len).next_multiple_of(4);
                if at + size > file.len() {
                    break;
                }
                let payload = &file[at + RECORD_OVERHEAD..at + RECORD_OVERHEAD + len];
                let crc_ok = le_u32(file, at + 4) == crc32(&[&file[at..at + 4], payload]);
                let padding_ok = file[at + RECORD_OVERHEAD + len..at + size]
                    .iter()
                    .all(|&b| b == 0);
                if !crc_ok || !padding_ok || r.records.len() >= max_records as usize {
                    break;
                }
                r.records.push((at + RECORD_OVERHEAD, len));
                r.settled.push(false);
                r.attempts.push(0);
                size
            }
            0b01 => {
                let index = (word & 0x00FF_FFFF) as usize;
                let Some(&settled) = r.settled.get(index) else {
                    break;
                };
                match (word >> 24) & 0x3F {
                    ACK | DEAD if !settled => r.settled[index] = true,
                    LEASE if !settled => r.attempts[index] = r.attempts[index].saturating_add(1),
                    // Gives back the last lease not yet given back.
                    RELEASE if !settled && r.attempts[index] > 0 => r.attempts[index] -= 1,
                    REACHED => {}
                    _ => break,
                }
                r.has_markers = true;
                4
            }
            _ => break,
        };
        r.end = at + size;
    }
    r.garbage_end = file[r.end..]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(r.end, |i| r.end + i + 1);
    r
}

/// Disk sectors: a power loss leaves each one whole, old or new (FORMAT.md,
/// "What is assumed of the file system").
const SECTOR: usize = 512;

/// What FORMAT.md's "Tail damage" makes of the bytes after a segment's last
/// whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailVerdict {
    /// Only zeros: the clean end, nothing to cut.
    Clean,
    /// A torn write: cut, a copy kept.
    Torn,
    /// A bad frame no power loss explains, with whole records after it:
    /// the open refuses it, unless asked to cut it.
    Damage,
}

/// Judges the bytes of `file` after the end of its last whole frame (`end`,
/// a frame boundary) up to its last non-zero byte (`garbage_end`), by
/// FORMAT.md's "Tail damage", in its order:
///
/// * nothing but zeros after `end`: clean;
/// * no whole record anywhere after the frame at `end` (at a 4-byte
///   boundary from `end + 4` on): torn;
/// * the frame at `end` starts with a zero word, or one of the 512-byte
///   sectors (counted from the start of the file) after the sector holding
///   its head, within the bytes its head claims (a record's whole frame,
///   anything else 4 bytes) up to the last non-zero byte, is all zeros: a
///   frame a power loss cut short, torn;
/// * otherwise damage.
fn judge_tail(file: &[u8], end: usize, garbage_end: usize) -> TailVerdict {
    if garbage_end <= end {
        return TailVerdict::Clean;
    }
    if !whole_record_after(file, end + 4, garbage_end) {
        return TailVerdict::Torn;
    }
    // A whole record starts after `end`, so the file holds a head word there.
    let head = le_u32(file, end);
    if head == 0 {
        return TailVerdict::Torn;
    }
    let claimed = if head >> 30 == 0b10 {
        (RECORD_OVERHEAD + (head & RECORD_LEN_MASK) as usize).next_multiple_of(4)
    } else {
        4
    };
    let claim_end = (end + claimed).min(garbage_end);
    let first_after_head = (end / SECTOR + 1) * SECTOR;
    let unwritten_sector = (first_after_head..claim_end).step_by(SECTOR).any(|sector| {
        file[sector..(sector + SECTOR).min(claim_end)]
            .iter()
            .all(|&b| b == 0)
    });
    if unwritten_sector {
        TailVerdict::Torn
    } else {
        TailVerdict::Damage
    }
}

/// Whether a whole record (FORMAT.md: kind, length, CRC and zero padding
/// all valid, its frame inside the file) starts at a 4-byte boundary at or
/// after `from` (a frame boundary) and before `garbage_end` (every record
/// starts with a non-zero word, so none starts past the last non-zero byte).
fn whole_record_after(file: &[u8], from: usize, garbage_end: usize) -> bool {
    (from..garbage_end).step_by(4).any(|at| {
        if at + RECORD_OVERHEAD > file.len() {
            return false;
        }
        let word = le_u32(file, at);
        let len = (word & RECORD_LEN_MASK) as usize;
        let size = (RECORD_OVERHEAD + len).next_multiple_of(4);
        word >> 30 == 0b10
            && at + size <= file.len()
            && le_u32(file, at + 4) == crc32(&[&file[at..at + 4], &file[at + 8..at + 8 + len]])
            && file[at + RECORD_OVERHEAD + len..at + size]
                .iter()
                .all(|&b| b == 0)
    })
}

// ---------------------------------------------------------------------------
// Reading fuzz input: never fails, missing bytes read as zeros.

struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let taken = self.bytes(N);
        out[..taken.len()].copy_from_slice(taken);
        out
    }

    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

// ---------------------------------------------------------------------------
// The `open` target's input.

/// The config file an [`OpenInput`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFile {
    /// No `dque.conf`.
    Absent,
    /// These bytes, as they are.
    Raw(Vec<u8>),
    /// A valid version-1 config (right magic, version and CRC) with these fields.
    Valid {
        /// Segment record limit (valid only from 1 to 2^24 - 1).
        records: u32,
        /// Segment byte limit.
        bytes: u32,
        /// Codec id (the queue under test is raw bytes, id 0).
        codec: u32,
    },
}

/// A header with a right magic, version and CRC, and these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderSpec {
    /// Segment number; `None`: the one in the file name.
    pub number: Option<u64>,
    /// Id of the first record.
    pub first_id: u64,
    /// Record limit.
    pub max_records: u32,
    /// Byte limit.
    pub max_bytes: u32,
}

/// One segment file of an [`OpenInput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// A valid header to write before `body`, or none (the body is the whole file).
    pub header: Option<HeaderSpec>,
    /// Whether `body` is a frame program (see [`Program`]) rather than bytes.
    /// Only with a header.
    pub program: bool,
    /// Bytes, or the frame program.
    pub body: Vec<u8>,
    /// Zero bytes after the body, in units of 16 (a segment's clean end).
    pub zeros16: u16,
    /// The file is not in the queue directory: a segment missing from its
    /// place (a gap, if segments follow it).
    pub absent: bool,
    /// A copy of the file is in `quarantine/` under its name, as a repair
    /// moves it: with `absent`, a repair that stopped between moving it and
    /// filling the gap; without, a name a repair finds taken.
    pub quarantined: bool,
}

/// The `open` target's input: a queue directory and how it is opened.
///
/// Layout (little-endian; missing bytes read as zero):
///
/// | field | bytes |
/// |---|---|
/// | flags: bits 0-1 config (0 absent, 1 raw, 2-3 valid), bits 2-3 segment count, bit 4 Turbo, bit 5 sizes in `Options`, bit 6 `open_or_create` (else `open`), bit 7 leftover temp files | 1 |
/// | number of the first segment file | 8 |
/// | config: raw: length (2) and bytes; valid: record limit, byte limit, codec id (4 each) | |
/// | if bit 5: segment items, segment bytes given to `Options` (4 each, brought into range) | 8 |
/// | each segment: kind (bits 0-1: 0 raw, 1 header + bytes, 2-3 header + program; bit 2: header number given; bit 3: absent from the directory; bit 4: a copy in `quarantine/`; bit 5, of the first segment only: open with `Options::cut_damaged_tail(true)`), header (number (8) if given, first id (8), record limit (4), byte limit (4)), body length (2), body, zeros in units of 16 (2) | |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenInput {
    /// The config file.
    pub config: ConfigFile,
    /// Open with `Durability::Turbo`.
    pub turbo: bool,
    /// `Options::segment_items` and `segment_bytes`, before being brought into range.
    pub sizes: Option<(u32, u32)>,
    /// `open_or_create` rather than `open`.
    pub create: bool,
    /// Leave a `dque.conf.tmp` and a segment `.tmp` file, as a crash does.
    pub temp_files: bool,
    /// Open with `Options::cut_damaged_tail(true)` (bit 5 of the first
    /// segment's kind; without segments there is nothing to cut).
    pub cut_damaged_tail: bool,
    /// Number of the first segment file; the others follow it.
    pub first_number: u64,
    /// Up to three segment files.
    pub segments: Vec<SegmentFile>,
}

impl OpenInput {
    /// Reads an input; every byte string is one.
    pub fn decode(data: &[u8]) -> OpenInput {
        let mut input = Input(data);
        let flags = input.u8();
        let first_number = input.u64();
        let config = match flags & 3 {
            0 => ConfigFile::Absent,
            1 => {
                let len = input.u16() as usize;
                ConfigFile::Raw(input.bytes(len).to_vec())
            }
            _ => ConfigFile::Valid {
                records: input.u32(),
                bytes: input.u32(),
                codec: input.u32(),
            },
        };
        let sizes = (flags & 0x20 != 0).then(|| (input.u32(), input.u32()));
        let count = (flags >> 2) & 3;
        let mut cut_damaged_tail = false;
        let segments = (0..count)
            .map(|i| {
                let kind = input.u8();
                cut_damaged_tail |= i == 0 && kind & 32 != 0;
                let header = (kind & 3 != 0).then(|| HeaderSpec {
                    number: (kind & 4 != 0).then(|| input.u64()),
                    first_id: input.u64(),
                    max_records: input.u32(),
                    max_bytes: input.u32(),
                });
                let len = input.u16() as usize;
                SegmentFile {
                    program: kind & 3 >= 2,
                    header,
                    body: input.bytes(len).to_vec(),
                    zeros16: input.u16(),
                    absent: kind & 8 != 0,
                    quarantined: kind & 16 != 0,
                }
            })
            .collect();
        OpenInput {
            config,
            turbo: flags & 0x10 != 0,
            sizes,
            create: flags & 0x40 != 0,
            temp_files: flags & 0x80 != 0,
            cut_damaged_tail,
            first_number,
            segments,
        }
    }

    /// The bytes that [`decode`](Self::decode) reads back as `self`.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.segments.len() <= 3, "at most three segments");
        let mut flags = match self.config {
            ConfigFile::Absent => 0,
            ConfigFile::Raw(_) => 1,
            ConfigFile::Valid { .. } => 2,
        };
        flags |= (self.segments.len() as u8) << 2;
        flags |= u8::from(self.turbo) << 4;
        flags |= u8::from(self.sizes.is_some()) << 5;
        flags |= u8::from(self.create) << 6;
        flags |= u8::from(self.temp_files) << 7;
        let mut out = vec![flags];
        out.extend_from_slice(&self.first_number.to_le_bytes());
        match &self.config {
            ConfigFile::Absent => {}
            ConfigFile::Raw(bytes) => push_body(&mut out, bytes),
            ConfigFile::Valid {
                records,
                bytes,
                codec,
            } => {
                for v in [records, bytes, codec] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        if let Some((items, bytes)) = self.sizes {
            out.extend_from_slice(&items.to_le_bytes());
            out.extend_from_slice(&bytes.to_le_bytes());
        }
        for (i, seg) in self.segments.iter().enumerate() {
            let kind = match (&seg.header, seg.program) {
                (None, _) => 0,
                (Some(_), false) => 1,
                (Some(_), true) => 2,
            } | seg
                .header
                .as_ref()
                .map_or(0, |h| u8::from(h.number.is_some()) << 2)
                | u8::from(seg.absent) << 3
                | u8::from(seg.quarantined) << 4
                | u8::from(i == 0 && self.cut_damaged_tail) << 5;
            out.push(kind);
            if let Some(h) = &seg.header {
                if let Some(number) = h.number {
                    out.extend_from_slice(&number.to_le_bytes());
                }
                out.extend_from_slice(&h.first_id.to_le_bytes());
                out.extend_from_slice(&h.max_records.to_le_bytes());
                out.extend_from_slice(&h.max_bytes.to_le_bytes());
            }
            push_body(&mut out, &seg.body);
            out.extend_from_slice(&seg.zeros16.to_le_bytes());
        }
        out
    }

    /// The `Options` the queue is opened with.
    fn options(&self) -> Options {
        let mut options = Options::new()
            .max_item_bytes(MAX_ITEM)
            .durability(if self.turbo {
                Durability::Turbo
            } else {
                Durability::Safe
            })
            .cut_damaged_tail(self.cut_damaged_tail);
        if let Some((items, bytes)) = self.sizes_in_range() {
            options = options.segment_items(items).segment_bytes(bytes);
        }
        options
    }

    fn sizes_in_range(&self) -> Option<(u32, u32)> {
        self.sizes
            .map(|(items, bytes)| (1 + items % 64, 4096 + bytes % (1 << 20)))
    }

    /// The files to write: name (relative to the queue directory, `/`
    /// between directories) and bytes.
    fn files(&self) -> Vec<(String, Vec<u8>)> {
        let mut files = Vec::new();
        match &self.config {
            ConfigFile::Absent => {}
            ConfigFile::Raw(bytes) => files.push((CONFIG_FILE.to_string(), bytes.clone())),
            ConfigFile::Valid {
                records,
                bytes,
                codec,
            } => files.push((
                CONFIG_FILE.to_string(),
                config_bytes(*records, *bytes, *codec),
            )),
        }
        for (i, seg) in self.segments.iter().enumerate() {
            // Numbers past u64::MAX have no file name: such segments are left out.
            let Some(number) = self.first_number.checked_add(i as u64) else {
                break;
            };
            let bytes = seg.bytes(number);
            if seg.quarantined {
                files.push((
                    format!("{QUARANTINE_DIR}/{}", segment_name(number)),
                    bytes.clone(),
                ));
            }
            if !seg.absent {
                files.push((segment_name(number), bytes));
            }
        }
        if self.temp_files {
            files.push((CONFIG_TEMP.to_string(), b"DQCF half".to_vec()));
            let temp = format!("{}.tmp", segment_name(self.first_number));
            files.push((temp, b"DQSG half".to_vec()));
        }
        files
    }
}

fn push_body(out: &mut Vec<u8>, body: &[u8]) {
    let len = body.len().min(u16::MAX as usize);
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&body[..len]);
}

impl SegmentFile {
    /// The file's bytes when it is segment `number`.
    fn bytes(&self, number: u64) -> Vec<u8> {
        let mut out = match &self.header {
            None => Vec::new(),
            Some(h) => header_bytes(
                h.number.unwrap_or(number),
                h.first_id,
                h.max_records,
                h.max_bytes,
            ),
        };
        if self.program {
            Program::run(&self.body, &mut out);
        } else {
            out.extend_from_slice(&self.body);
        }
        out.resize(out.len() + 16 * self.zeros16 as usize, 0);
        out
    }

    /// A segment file as it is: body up to its last non-zero byte, then zeros.
    pub fn from_bytes(bytes: &[u8]) -> SegmentFile {
        let data_end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let zeros16 = ((bytes.len() - data_end) / 16).min(u16::MAX as usize);
        SegmentFile {
            header: None,
            program: false,
            body: bytes[..bytes.len() - 16 * zeros16].to_vec(),
            zeros16: zeros16 as u16,
            absent: false,
            quarantined: false,
        }
    }
}

/// A little language that writes frames with right CRCs, so the fuzzer gets
/// past them cheaply. One byte picks the instruction (`op % 8`), then:
///
/// | op | writes |
/// |---|---|
/// | 0, 1 | a record: payload length (1), payload (taken from the program) |
/// | 2 | a record of a generated payload: length (2, modulo 4096), fill byte (1) |
/// | 3 | an ack marker: record index (2) |
/// | 4 | a raw word (4): any marker type, kind or garbage |
/// | 5 | zero words: count (1) |
/// | 6 | a record with one bit flipped: payload length (1), bit (2) |
/// | 7 | 0 to 3 raw bytes, breaking the 4-byte alignment: count (1), bytes |
#[derive(Debug, Default, Clone)]
pub struct Program(Vec<u8>);

impl Program {
    /// A record of `payload` (at most 255 bytes).
    pub fn record(mut self, payload: &[u8]) -> Self {
        assert!(payload.len() <= 255);
        self.0.push(0);
        self.0.push(payload.len() as u8);
        self.0.extend_from_slice(payload);
        self
    }

    /// An ack marker naming record `index`.
    pub fn ack(mut self, index: u16) -> Self {
        self.0.push(3);
        self.0.extend_from_slice(&index.to_le_bytes());
        self
    }

    /// A marker of type `kind` naming record `index` (a raw word).
    pub fn marker(self, kind: u32, index: u32) -> Self {
        self.word(marker_word(kind, index))
    }

    /// A raw 4-byte word.
    pub fn word(mut self, word: u32) -> Self {
        self.0.push(4);
        self.0.extend_from_slice(&word.to_le_bytes());
        self
    }

    /// `count` zero words.
    pub fn zeros(mut self, count: u8) -> Self {
        self.0.push(5);
        self.0.push(count);
        self
    }

    /// A record whose bit `bit` is flipped.
    pub fn torn_record(mut self, len: u8, bit: u16) -> Self {
        self.0.push(6);
        self.0.push(len);
        self.0.extend_from_slice(&bit.to_le_bytes());
        self
    }

    /// The program's bytes.
    pub fn build(self) -> Vec<u8> {
        self.0
    }

    fn run(program: &[u8], out: &mut Vec<u8>) {
        let mut p = Input(program);
        while !p.is_empty() {
            match p.u8() % 8 {
                0 | 1 => {
                    let len = p.u8() as usize;
                    out.extend_from_slice(&record_frame(p.bytes(len)));
                }
                2 => {
                    let len = p.u16() as usize % 4096;
                    let fill = p.u8();
                    let payload: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                    out.extend_from_slice(&record_frame(&payload));
                }
                3 => out.extend_from_slice(&(ACK_MARKER | u32::from(p.u16())).to_le_bytes()),
                4 => out.extend_from_slice(&p.array::<4>()),
                5 => out.resize(out.len() + 4 * p.u8() as usize, 0),
                6 => {
                    let len = p.u8() as usize;
                    let mut frame = record_frame(&vec![0xA5; len]);
                    let bit = p.u16() as usize % (frame.len() * 8);
                    frame[bit / 8] ^= 1 << (bit % 8);
                    out.extend_from_slice(&frame);
                }
                _ => {
                    let n = p.u8() as usize % 4;
                    out.extend_from_slice(p.bytes(n));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// What an open must do, predicted from the files by FORMAT.md's rules.

/// The errors an open of fuzzed files may give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NotAQueue,
    Version,
    Codec,
    Corrupted,
    /// `MissingSegment`: a gap in the segment numbers.
    Missing,
}

/// The kind of `e` and the file it names, or a panic for an error no file
/// content should cause.
fn kind_of(e: &Error) -> (Kind, Option<&Path>) {
    match e {
        Error::NotAQueue { .. } => (Kind::NotAQueue, None),
        Error::UnsupportedVersion {
            path,
            found,
            supported,
        } => {
            assert_eq!(*supported, FORMAT_VERSION, "{e}");
            assert_ne!(found, supported, "{e}");
            (Kind::Version, Some(path))
        }
        Error::CodecMismatch {
            found, expected, ..
        } => {
            assert_eq!((*expected, *found != RAW_CODEC), (RAW_CODEC, true), "{e}");
            (Kind::Codec, None)
        }
        Error::Corrupted {
            segment, reason, ..
        } => {
            assert!(!reason.is_empty(), "{e}");
            (Kind::Corrupted, Some(segment))
        }
        Error::MissingSegment { path } => (Kind::Missing, Some(path)),
        other => panic!("an open of fuzzed files gave an unexpected error: {other:?} ({other})"),
    }
}

#[derive(Debug)]
enum Expect {
    /// The open fails with this kind of error, naming this file (when it
    /// names one), having done what `Refusal` says.
    Fail(Kind, Option<PathBuf>, Refusal),
    /// The open succeeds.
    Open(Opened),
}

/// What a refused open leaves behind.
#[derive(Debug, Default)]
struct Refusal {
    /// The offset `Corrupted` names, where FORMAT.md says which: the end of
    /// the last whole frame before damage.
    offset: Option<u64>,
    /// Torn tails of segments replayed before the refused one, already cut
    /// (each with its copy in `quarantine/`).
    cuts: BTreeSet<Cut>,
    /// Not a queue, and without a config: the directory is left exactly as
    /// it was, not even a lock file made.
    writes_nothing: bool,
}

/// One cut FORMAT.md predicts ("Recovery on open", "Tail damage"): the
/// bytes from `offset` (the end of the segment's last whole frame) up to its
/// last non-zero byte are zeroed, after a copy of the file up to that byte
/// is kept as `quarantine/NAME.cut-at-OFFSET`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Cut {
    segment: PathBuf,
    offset: u64,
    bytes: u64,
    /// Damage, cut only because the open was asked to (`cut_damaged_tail`).
    damage: bool,
}

impl Cut {
    /// Where the copy of the segment file is kept.
    fn kept(&self) -> PathBuf {
        let dir = self.segment.parent().expect("in the queue directory");
        let name = self.segment.file_name().expect("a file name");
        dir.join(QUARANTINE_DIR)
            .join(format!("{}.cut-at-{}", name.to_string_lossy(), self.offset))
    }
}

#[derive(Default)]
struct Opened {
    /// The items, in order, that dequeues return.
    items: Vec<Vec<u8>>,
    /// What `pending()` lists: id, delivery attempts (lease markers) and
    /// item; the same as `items` unless the dequeues stop at damage after
    /// whole records of a middle segment (`pending()` only reads them).
    pending: Vec<(u64, u16, Vec<u8>)>,
    /// The middle segment whose damage ends the dequeues with `Corrupted`.
    stops_at: Option<PathBuf>,
    /// The middle segment short of records where `pending()` ends with
    /// `Corrupted`.
    pending_stops_at: Option<PathBuf>,
    /// Cuts the open makes and reports.
    repairs: BTreeSet<Cut>,
    /// Cuts made when the dequeues reach a middle segment the open did not
    /// replay (the sealed rule applies then): a copy is kept for each.
    late_cuts: BTreeSet<Cut>,
    /// Segments the open deletes, in order.
    deleted: Vec<PathBuf>,
    /// Segments present after the open (input less deleted, or a new one).
    segments: BTreeSet<PathBuf>,
    /// The config after the open.
    config: Vec<u8>,
    /// `len()` right after the open, by FORMAT.md's formula.
    len: u64,
    /// What `verify()` sums up for each segment, head to tail.
    summaries: Vec<Summary>,
    /// Whether `verify()` finds nothing wrong: no damage and no garbage in
    /// middle segments, and the formula's count is the items' count.
    healthy: bool,
    /// The format does not say (a segment number or ids at the end of
    /// u64): no panic, and a clear error or a queue consistent in itself.
    unspecified: bool,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("items", &self.items.len())
            .field("first_items", &&self.items[..self.items.len().min(3)])
            .field("stops_at", &self.stops_at)
            .field("pending_stops_at", &self.pending_stops_at)
            .field("repairs", &self.repairs)
            .field("late_cuts", &self.late_cuts)
            .field("deleted", &self.deleted)
            .field("len", &self.len)
            .field("healthy", &self.healthy)
            .field("unspecified", &self.unspecified)
            .finish()
    }
}

/// A segment as `verify()` sums it up: path, number, first id, records,
/// settled records, frame bytes.
type Summary = (PathBuf, u64, u64, u64, u64, u64);

/// Predicts the open of `files` (config, segments) in `dir`.
fn expect_open(input: &OpenInput, dir: &Path, files: &[(String, Vec<u8>)]) -> Expect {
    let fail = |kind, path: Option<PathBuf>| Expect::Fail(kind, path, Refusal::default());
    let mut segments: Vec<(u64, PathBuf, &[u8])> = Vec::new();
    let mut config = None;
    for (name, bytes) in files {
        if name == CONFIG_FILE {
            config = Some(bytes.as_slice());
        } else if name.contains('/') {
            // In a subdirectory (quarantine/): not part of the queue.
        } else if let Some(digits) = name.strip_suffix(".seg") {
            segments.push((digits.parse().expect("20 digits"), dir.join(name), bytes));
        }
    }
    let config_path = dir.join(CONFIG_FILE);
    // "The queue directory": without a config, a directory that holds
    // anything but the lock and temp files (segments, or only
    // `quarantine/`) is not a queue, even to `open_or_create`, and is left
    // as it is.
    let holds_more = files.iter().any(|(name, _)| !name.ends_with(".tmp"));
    let (stored_records, stored_bytes) = match config.map(judge_config) {
        None if !input.create || holds_more => {
            let refusal = Refusal {
                writes_nothing: true,
                ..Refusal::default()
            };
            return Expect::Fail(Kind::NotAQueue, None, refusal);
        }
        None => (DEFAULT_SEGMENT_ITEMS, DEFAULT_SEGMENT_BYTES),
        Some(ConfigVerdict::Invalid) => return fail(Kind::NotAQueue, None),
        Some(ConfigVerdict::Version(_)) => return fail(Kind::Version, Some(config_path)),
        Some(ConfigVerdict::Valid { codec, .. }) if codec != RAW_CODEC => {
            return fail(Kind::Codec, None)
        }
        Some(ConfigVerdict::Valid { records, bytes, .. }) => (records, bytes),
    };
    let (records, bytes) = input
        .sizes_in_range()
        .unwrap_or((stored_records, stored_bytes));
    let mut opened = Opened {
        config: config_bytes(records, bytes, RAW_CODEC),
        healthy: true,
        ..Opened::default()
    };
    if segments.is_empty() {
        let path = dir.join(segment_name(1));
        opened.segments.insert(path.clone());
        opened.summaries.push((path, 1, 0, 0, 0, 0));
        return Expect::Open(opened);
    }

    // Numbers without gaps: the first missing one is named.
    segments.sort_by_key(|s| s.0);
    for pair in segments.windows(2) {
        if pair[1].0 != pair[0].0 + 1 {
            return fail(Kind::Missing, Some(dir.join(segment_name(pair[0].0 + 1))));
        }
    }

    // Every header, in order, and ids that grow by at most the record limit.
    let mut headers: Vec<Header> = Vec::new();
    for (number, path, bytes) in &segments {
        let header = match judge_header(bytes, *number) {
            HeaderVerdict::Valid(h) => h,
            HeaderVerdict::Corrupted => return fail(Kind::Corrupted, Some(path.clone())),
            HeaderVerdict::Version => return fail(Kind::Version, Some(path.clone())),
        };
        // Near the end of u64 (numbers or ids) a rollover fails rather than
        // make a header the format refuses: which call meets it is left
        // unspecified here (a margin of 2^33 ids covers any two segments).
        let edge = header.first_id.checked_add(1 << 33);
        if edge.is_none() || *number >= u64::MAX - 1 {
            opened.unspecified = true;
            return Expect::Open(opened);
        }
        if let Some(previous) = headers.last() {
            let gap = header.first_id.checked_sub(previous.first_id);
            if gap.is_none_or(|gap| gap > u64::from(previous.max_records)) {
                return fail(Kind::Corrupted, Some(path.clone()));
            }
        }
        headers.push(header);
    }
    let last = segments.len() - 1;
    let sealed = |i: usize| (i < last).then(|| headers[i + 1].first_id - headers[i].first_id);
    let replays: Vec<Replayed> = segments
        .iter()
        .zip(&headers)
        .map(|((_, _, bytes), h)| replay(bytes, h.max_records))
        .collect();
    let whole = |i: usize| sealed(i).is_none_or(|n| n == replays[i].records.len() as u64);
    // What follows segment i's last whole frame ("Tail damage"), as a cut if
    // it is one: `Err` for damage the open may not cut.
    let tail = |i: usize| -> Result<Option<Cut>, u64> {
        let r = &replays[i];
        let cut = |damage| Cut {
            segment: segments[i].1.clone(),
            offset: r.end as u64,
            bytes: (r.garbage_end - r.end) as u64,
            damage,
        };
        match judge_tail(segments[i].2, r.end, r.garbage_end) {
            TailVerdict::Clean => Ok(None),
            TailVerdict::Torn => Ok(Some(cut(false))),
            TailVerdict::Damage if input.cut_damaged_tail => Ok(Some(cut(true))),
            TailVerdict::Damage => Err(r.end as u64),
        }
    };
    // Replayed at open (FORMAT.md, "The front run" and "Recovery on open"):
    // the head and the segments after it up to the first one without
    // markers, and the tail; a tail with markers is part of the run, so the
    // segments between join it. Each of them with a successor must be whole
    // (the first that is not fails the open); each has its torn tail cut,
    // while damage fails the open, which has then cut the torn tails of the
    // segments replayed before.
    let mut replayed = vec![false; segments.len()];
    let open_replay = |opened: &mut Opened, replayed: &mut [bool], i: usize| {
        let refused = |offset| {
            let refusal = Refusal {
                offset,
                cuts: opened.repairs.clone(),
                writes_nothing: false,
            };
            // Boxed: an `Expect` is large for an `Err`.
            Box::new(Expect::Fail(
                Kind::Corrupted,
                Some(segments[i].1.clone()),
                refusal,
            ))
        };
        if !whole(i) {
            return Err(refused(None));
        }
        match tail(i) {
            Ok(cut) => opened.repairs.extend(cut),
            Err(offset) => return Err(refused(Some(offset))),
        }
        replayed[i] = true;
        Ok(())
    };
    let mut run_end = 0;
    loop {
        if let Err(refused) = open_replay(&mut opened, &mut replayed, run_end) {
            return *refused;
        }
        if !replays[run_end].has_markers || run_end + 1 >= last {
            break;
        }
        run_end += 1;
    }
    if let Err(refused) = open_replay(&mut opened, &mut replayed, last) {
        return *refused;
    }
    if replays[last].has_markers {
        for i in run_end + 1..last {
            if let Err(refused) = open_replay(&mut opened, &mut replayed, i) {
                return *refused;
            }
        }
    }
    // Settled heads with a successor are deleted; a segment that becomes
    // the head is replayed (with the sealed rule) if it was not yet.
    let mut head = 0;
    while head < last && replays[head].unsettled_count() == 0 {
        let next = head + 1;
        if !replayed[next] {
            if let Err(refused) = open_replay(&mut opened, &mut replayed, next) {
                return *refused;
            }
        }
        opened.deleted.push(segments[head].1.clone());
        head = next;
    }
    for (i, (number, path, bytes)) in segments.iter().enumerate().skip(head) {
        let r = &replays[i];
        let settled = r.records.len() - r.unsettled_count();
        opened.segments.insert(path.clone());
        opened.summaries.push((
            path.clone(),
            *number,
            headers[i].first_id,
            r.records.len() as u64,
            settled as u64,
            (r.end - HEADER_LEN) as u64,
        ));
        // Garbage left where the open did not cut: in segments it did not replay.
        if !replayed[i] && r.garbage_end > r.end {
            opened.healthy = false;
        }
        // A segment after the run is replayed when the dequeues reach it,
        // with the sealed rule: short of records, or damage after them
        // that may not be cut, stops them; a torn tail is cut then.
        // `pending()` reads its records without replaying it: only a
        // segment short of records stops it.
        if opened.pending_stops_at.is_some() {
            continue;
        }
        if !replayed[i] && !whole(i) {
            opened.stops_at.get_or_insert(path.clone());
            opened.pending_stops_at = Some(path.clone());
            continue;
        }
        let first_id = headers[i].first_id;
        opened.pending.extend(
            (0..r.records.len())
                .filter(|&k| !r.settled[k])
                .map(|k| (first_id + k as u64, r.attempts[k], r.payload(bytes, k))),
        );
        if opened.stops_at.is_some() {
            continue;
        }
        if !replayed[i] {
            match tail(i) {
                Ok(cut) => opened.late_cuts.extend(cut),
                Err(_) => {
                    opened.stops_at = Some(path.clone());
                    continue;
                }
            }
        }
        opened.items.extend(r.unsettled(bytes));
    }
    if !opened.unspecified {
        // FORMAT.md's formula: settled records are subtracted only for the
        // segments the open replayed (the front run and the tail).
        let settled: u64 = (head..=last)
            .filter(|&i| replayed[i])
            .map(|i| (replays[i].records.len() - replays[i].unsettled_count()) as u64)
            .sum();
        opened.len = headers[last].first_id + replays[last].records.len() as u64
            - headers[head].first_id
            - settled;
        if opened.stops_at.is_some() || opened.len != opened.items.len() as u64 {
            opened.healthy = false;
        }
    }
    Expect::Open(opened)
}

// ---------------------------------------------------------------------------
// The `open` target.

/// What [`check_open`] saw, for tests of the seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenOutcome {
    /// The open failed as predicted, with this error's Display.
    Refused(String),
    /// The open succeeded.
    Opened {
        /// Items dequeued.
        items: usize,
        /// Repairs the open reported.
        repairs: usize,
        /// Whether the dequeues ended with a damaged middle segment.
        stopped_by_damage: bool,
    },
}

/// Whether two outcomes agree, ignoring the error message of a refusal.
pub fn same_outcome(a: &OpenOutcome, b: &OpenOutcome) -> bool {
    match (a, b) {
        (OpenOutcome::Refused(_), OpenOutcome::Refused(_)) => true,
        _ => a == b,
    }
}

/// The `open` fuzz target: see [`check_open`].
pub fn open_files(data: &[u8]) {
    check_open(data);
}

/// Writes the queue directory `data` describes ([`OpenInput`]), opens it as a
/// [`RawQueue`] and checks everything against the prediction from FORMAT.md:
///
/// * a failed open gives the predicted kind of error naming the predicted
///   file (and, for damage in a tail, the end of its last whole frame); a
///   segment reported as corrupted is left unchanged, only the torn tails
///   of segments replayed before it are cut, and a directory without a
///   config that is not a queue is left exactly as it was;
/// * a successful open reports exactly the predicted repairs (torn tails,
///   and damaged ones when asked to cut them), deletions and removed temp
///   files, changes the files only that way, leaves the config predicted,
///   has `len()` by FORMAT.md's formula, `verify()` sums up each segment as
///   predicted and is healthy exactly when nothing is wrong, `pending()`
///   lists the predicted items with their ids and attempts (lease markers),
///   and dequeues (peeked first) return exactly them, ending with `None`
///   (then `len()` was their number), or with `Corrupted` naming the
///   predicted damaged middle segment;
/// * every cut (at the open, or when the dequeues reach a middle segment)
///   keeps a copy first: `quarantine/NAME.cut-at-OFFSET` holds the file as
///   it was, up to its last non-zero byte at least, and `quarantine/` holds
///   nothing else but what the input put there, unchanged;
/// * reads never write: `len()`, `verify()` and `pending()` leave every
///   file as it was, and no `peek()` adds, removes or resizes a file;
/// * then one more item goes in, and after close and reopen the queue opens
///   clean with exactly that item (or, after damage, fails at the same segment).
pub fn check_open(data: &[u8]) -> OpenOutcome {
    let input = OpenInput::decode(data);
    let root = scratch_dir();
    let dir = root.path().join("q");
    fs::create_dir(&dir).expect("create the queue directory");
    let files = input.files();
    write_files(&dir, &files);
    let original = |path: &Path| -> Option<&[u8]> {
        let name = path.file_name()?.to_str()?;
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    };
    let expect = expect_open(&input, &dir, &files);
    let options = input.options();
    let open = || {
        if input.create {
            RawQueue::open_or_create_with(&dir, &options)
        } else {
            RawQueue::open_with(&dir, &options)
        }
    };

    let found =
        matches!(&expect, Expect::Fail(_, _, r) if r.writes_nothing).then(|| snapshot(&dir));
    let (q, opened) = match (open(), expect) {
        (Err(e), Expect::Fail(kind, path, refusal)) => {
            let (got_kind, got_path) = kind_of(&e);
            assert_eq!(got_kind, kind, "wrong kind of error: {e}");
            if let Some(path) = &path {
                assert_eq!(
                    got_path,
                    Some(path.as_path()),
                    "error names another file: {e}"
                );
            }
            if let Error::Corrupted {
                segment, offset, ..
            } = &e
            {
                let now = fs::read(segment).expect("the corrupted segment is still there");
                assert_eq!(
                    Some(now.as_slice()),
                    original(segment),
                    "{e}: but it was changed"
                );
                assert!(*offset <= now.len() as u64, "{e}: offset past the end");
                if let Some(expected) = refusal.offset {
                    assert_eq!(
                        *offset, expected,
                        "{e}: not the end of the last whole frame"
                    );
                }
            }
            if let Some(found) = &found {
                let diff = differences(found, &snapshot(&dir));
                assert!(diff.is_empty(), "{e}: but the open wrote {diff:?}");
            } else {
                for cut in &refusal.cuts {
                    let mut expected = original(&cut.segment).expect("an input file").to_vec();
                    expected[cut.offset as usize..(cut.offset + cut.bytes) as usize].fill(0);
                    let now = fs::read(&cut.segment).expect("a segment cut before the refusal");
                    assert!(
                        now == expected,
                        "{e}: {} is not cut as {cut:?}",
                        cut.segment.display()
                    );
                }
                check_kept_copies(&dir, &files, &refusal.cuts);
            }
            assert!(!e.to_string().is_empty());
            return OpenOutcome::Refused(e.to_string());
        }
        (Err(e), Expect::Open(opened)) if opened.unspecified => {
            kind_of(&e);
            return OpenOutcome::Refused(e.to_string());
        }
        (Err(e), expect) => panic!("open failed with {e:?} ({e}), expected {expect:?}"),
        (Ok(q), Expect::Fail(kind, path, _)) => panic!(
            "open succeeded with report {:?} and len {}, expected {kind:?} on {path:?}",
            q.open_report(),
            q.len()
        ),
        (Ok(q), Expect::Open(opened)) => (q, opened),
    };
    let report = q.open_report().clone();

    // The report, and the files changed only as it says.
    let temp_expected: BTreeSet<PathBuf> = files
        .iter()
        .filter(|(n, _)| n.ends_with(".tmp"))
        .map(|(n, _)| dir.join(n))
        .collect();
    let temp_removed: BTreeSet<PathBuf> = report.removed_temp_files.iter().cloned().collect();
    assert_eq!(
        temp_removed, temp_expected,
        "removed temp files: {report:?}"
    );
    let listing = list_dir(&dir);
    assert!(
        listing.temp.is_empty(),
        "temp files left: {:?}",
        listing.temp
    );
    let config_now = fs::read(dir.join(CONFIG_FILE)).expect("config after open");
    let config_before = original(&dir.join(CONFIG_FILE));
    let config_kept = config_before == Some(config_now.as_slice())
        && judge_config(&config_now) == judge_config(&opened.config);
    assert!(
        config_now == opened.config || config_kept,
        "config after open is {config_now:?}, expected {:?}",
        opened.config
    );
    if !opened.unspecified {
        assert_eq!(
            report.deleted_segments, opened.deleted,
            "deleted segments: {report:?}"
        );
        let repairs: BTreeSet<Cut> = report
            .repairs
            .iter()
            .map(|r| Cut {
                segment: r.segment.clone(),
                offset: r.offset,
                bytes: r.bytes_cut,
                damage: r.damage,
            })
            .collect();
        assert_eq!(repairs, opened.repairs, "repairs: {report:?}");
        for r in &report.repairs {
            assert!(!r.reason.is_empty(), "a repair without a reason: {r:?}");
            let cut = Cut {
                segment: r.segment.clone(),
                offset: r.offset,
                bytes: r.bytes_cut,
                damage: r.damage,
            };
            assert_eq!(
                r.kept.as_deref(),
                Some(cut.kept().as_path()),
                "the copy a repair kept: {r:?}"
            );
        }
        check_kept_copies(&dir, &files, &opened.repairs);
        let on_disk: BTreeSet<PathBuf> = listing.segments.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(on_disk, opened.segments, "segment files after open");
        for path in &on_disk {
            let Some(before) = original(path) else {
                continue;
            };
            let mut expected = before.to_vec();
            for cut in opened.repairs.iter().filter(|cut| &cut.segment == path) {
                expected[cut.offset as usize..(cut.offset + cut.bytes) as usize].fill(0);
            }
            let now = fs::read(path).expect("read a segment after open");
            assert!(
                now == expected,
                "{} changed beyond its reported repairs",
                path.display()
            );
        }
    }

    // What verify() finds, and len() by FORMAT.md's formula. Reads never
    // write: len(), verify() and pending() leave every file as it was.
    let after_open = snapshot(&dir);
    let len_at_open = q.len();
    let verified = q.verify().expect("verify an open queue");
    if !opened.unspecified {
        assert_eq!(
            len_at_open as u64, opened.len,
            "len() at open (FORMAT.md's formula)"
        );
        let summaries: Vec<Summary> = verified
            .segments
            .iter()
            .map(|s| {
                let (path, number, first_id) = (s.path.clone(), s.number, s.first_id);
                (path, number, first_id, s.records, s.settled, s.frame_bytes)
            })
            .collect();
        assert_eq!(summaries, opened.summaries, "verify(): segments");
        assert_eq!(
            verified.is_healthy(),
            opened.healthy,
            "verify(): {verified}"
        );
        if let Some(at) = &opened.stops_at {
            let named = verified.problems.iter().any(|p| &p.segment == at);
            assert!(
                named,
                "verify() does not name damaged {}: {verified}",
                at.display()
            );
        }
        if opened.healthy {
            assert_eq!(verified.items(), len_at_open as u64, "verify(): items");
        }
    }

    // pending(): every item in order with its id and its attempts (the
    // lease markers), none leased right after an open. It reads the records
    // of a middle segment without replaying it: it ends only where one is
    // short of records (and may end at damage the dequeues stop at).
    if !opened.unspecified {
        match (q.pending(usize::MAX), &opened.pending_stops_at) {
            (Ok(pending), None) => {
                let got: Vec<(u64, u16)> = pending.iter().map(|p| (p.id, p.attempts)).collect();
                let expected: Vec<(u64, u16)> = opened.pending.iter().map(|p| (p.0, p.1)).collect();
                assert_eq!(got, expected, "pending(): ids and attempts");
                assert!(
                    pending.iter().all(|p| !p.leased),
                    "pending(): an item is leased right after the open"
                );
                assert!(
                    pending
                        .iter()
                        .map(|p| &p.item)
                        .eq(opened.pending.iter().map(|p| &p.2)),
                    "pending(): items differ from the predicted ones"
                );
            }
            (Err(Error::Corrupted { segment, .. }), Some(at)) if &segment == at => {}
            (Err(Error::Corrupted { segment, .. }), _)
                if opened.stops_at.as_ref() == Some(&segment) => {}
            (got, at) => panic!(
                "pending() gave {:?}, expected the items or damage at {at:?}",
                got.map(|p| p.len())
            ),
        }
    }
    let diff = differences(&after_open, &snapshot(&dir));
    assert!(
        diff.is_empty(),
        "len(), verify() or pending() wrote: {diff:?}"
    );

    // The items: peek and dequeue until None or damage. A peek adds,
    // removes or resizes no file.
    let most = files
        .iter()
        .map(|(_, b)| b.len() / RECORD_OVERHEAD + 1)
        .sum::<usize>();
    let mut items = Vec::new();
    let stopped_at = loop {
        let before_peek = file_sizes(&dir);
        let peeked = q.peek();
        let after_peek = file_sizes(&dir);
        assert!(
            before_peek == after_peek,
            "peek() at item {} changed the files: {before_peek:?} -> {after_peek:?}",
            items.len()
        );
        let popped = q.dequeue();
        match (peeked, popped) {
            (Ok(Some(a)), Ok(Some(b))) => {
                assert_eq!(a, b, "peek and dequeue disagree at item {}", items.len());
                items.push(b);
                assert!(items.len() <= most, "more items than the files can hold");
            }
            (Ok(None), Ok(None)) => break None,
            (Err(Error::Corrupted { segment, .. }), Err(Error::Corrupted { segment: s, .. }))
                if segment == s =>
            {
                break Some(segment)
            }
            (peeked, popped) => panic!(
                "after {} items: peek gave {peeked:?}, dequeue gave {popped:?}",
                items.len()
            ),
        }
    };
    // len() is exact unless markers lie outside the front run (which dque
    // never writes): then the formula counts records they settle.
    let exact = opened.unspecified || opened.len == opened.items.len() as u64;
    if stopped_at.is_none() {
        if exact {
            assert_eq!(len_at_open, items.len(), "len() at open vs items dequeued");
        }
        assert_eq!(q.len(), 0, "len() after draining");
    }
    if !opened.unspecified {
        assert_eq!(stopped_at, opened.stops_at, "where the dequeues stop");
        assert!(
            items == opened.items,
            "dequeued {} items {:?}..., expected {} items {:?}...",
            items.len(),
            items.iter().take(3).collect::<Vec<_>>(),
            opened.items.len(),
            opened.items.iter().take(3).collect::<Vec<_>>()
        );
        // The middle segments the dequeues reached had their torn tails cut,
        // each with a copy kept.
        let cuts: BTreeSet<Cut> = opened
            .repairs
            .iter()
            .chain(&opened.late_cuts)
            .cloned()
            .collect();
        check_kept_copies(&dir, &files, &cuts);
    }

    // One more item, then a clean reopen.
    let probe = b"probe item".to_vec();
    let enqueued = q.enqueue(&probe);
    match (&enqueued, &stopped_at) {
        (Ok(()), _) => {}
        // A full tail cannot roll over to a segment that does not exist.
        (Err(e), _) if opened.unspecified => {
            kind_of_any(e);
        }
        // Rolling over retires the consumed head, which reaches the damage.
        (Err(Error::Corrupted { segment, .. }), Some(at)) if segment == at => {}
        (Err(e), _) => panic!("enqueue after open failed: {e:?} ({e})"),
    }
    let closed = q.close();
    if !opened.unspecified {
        closed.expect("close after open");
    }
    match (open(), &stopped_at) {
        (Err(Error::Corrupted { segment, .. }), Some(at)) if &segment == at => {}
        (Err(e), _) if opened.unspecified => kind_of_any(&e),
        (Err(e), _) => panic!("reopen failed: {e:?} ({e})"),
        (Ok(q), Some(at)) => panic!(
            "reopen succeeded after dequeues stopped at damaged {}: {:?}",
            at.display(),
            q.open_report()
        ),
        (Ok(q), None) => {
            let again = q.open_report();
            assert!(
                again.repairs.is_empty()
                    && again.removed_temp_files.is_empty()
                    && again.deleted_segments.is_empty(),
                "reopen after a clean close is not clean: {again:?}"
            );
            if enqueued.is_ok() {
                assert_eq!(q.len(), 1, "len() after reopen");
                assert_eq!(q.dequeue().expect("dequeue the probe"), Some(probe));
            }
            assert_eq!(q.len(), 0, "len() after dequeuing the probe");
            assert_eq!(q.dequeue().expect("dequeue an empty queue"), None);
            q.close().expect("close after reopen");
        }
    }
    OpenOutcome::Opened {
        items: items.len(),
        repairs: report.repairs.len(),
        stopped_by_damage: stopped_at.is_some(),
    }
}

/// Property: `quarantine/` holds the files the input put there, unchanged,
/// and for each of `cuts` the copy FORMAT.md says is kept before it: the
/// segment file as the input had it, byte for byte, from its start up to
/// at least its last non-zero byte (the end of the cut). Nothing else: no
/// other copy, no temp file; no `quarantine/` at all if neither the input
/// nor a cut made one.
fn check_kept_copies(dir: &Path, files: &[(String, Vec<u8>)], cuts: &BTreeSet<Cut>) {
    let quarantine = dir.join(QUARANTINE_DIR);
    let prefix = format!("{QUARANTINE_DIR}/");
    let mut expected: BTreeMap<PathBuf, Option<&[u8]>> = files
        .iter()
        .filter_map(|(name, bytes)| {
            let name = name.strip_prefix(&prefix)?;
            Some((PathBuf::from(name), Some(bytes.as_slice())))
        })
        .collect();
    for cut in cuts {
        let kept = cut.kept();
        let name = kept.strip_prefix(&quarantine).expect("in quarantine/");
        let previous = expected.insert(name.to_path_buf(), None);
        assert!(previous.is_none(), "two copies named {}", kept.display());
    }
    if expected.is_empty() {
        assert!(
            !quarantine.exists(),
            "nothing was cut, yet there is a {QUARANTINE_DIR}/: {:?}",
            snapshot(&quarantine).keys().collect::<Vec<_>>()
        );
        return;
    }
    let mut found = snapshot(&quarantine);
    found.retain(|_, bytes| bytes.is_some());
    let names = |m: &mut dyn Iterator<Item = &PathBuf>| m.cloned().collect::<BTreeSet<_>>();
    assert_eq!(
        names(&mut found.keys()),
        names(&mut expected.keys()),
        "the files in {QUARANTINE_DIR}/"
    );
    for (name, bytes) in &expected {
        let now = found[name].as_deref().expect("a file");
        if let Some(bytes) = bytes {
            assert!(now == *bytes, "{QUARANTINE_DIR}/{} changed", name.display());
        }
    }
    for cut in cuts {
        let kept = cut.kept();
        let name = kept.strip_prefix(&quarantine).expect("in quarantine/");
        let copy = found[name].as_deref().expect("a file");
        let segment_name = cut.segment.file_name().expect("a name").to_string_lossy();
        let segment = &files
            .iter()
            .find(|(n, _)| *n == segment_name)
            .expect("the input's segment")
            .1;
        let cut_end = (cut.offset + cut.bytes) as usize;
        assert!(
            copy.len() >= cut_end && copy.len() <= segment.len() && copy == &segment[..copy.len()],
            "{} ({} bytes) is not the segment's first {cut_end} bytes or more ({} bytes, {cut:?})",
            kept.display(),
            copy.len(),
            segment.len()
        );
    }
}

/// Every file under `dir` and its length: what a read must leave alone.
fn file_sizes(dir: &Path) -> BTreeMap<PathBuf, u64> {
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

/// Writes `files` (names relative to `dir`) into `dir`.
fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (name, bytes) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("make a directory of the input");
        }
        fs::write(path, bytes).expect("write an input file");
    }
}

/// Any error is allowed, but it must be a clear one: not a closed handle.
fn kind_of_any(e: &Error) {
    assert!(!matches!(e, Error::Closed), "unexpected {e:?}");
    assert!(!e.to_string().is_empty());
}

/// The files of a queue directory.
#[derive(Debug, Default)]
struct DirListing {
    segments: Vec<(u64, PathBuf)>,
    temp: Vec<PathBuf>,
}

fn list_dir(dir: &Path) -> DirListing {
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

/// A fresh directory, in memory when the machine has `/dev/shm` (fsync is
/// then cheap, and the fuzzer runs many times faster).
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new().prefix("dque-fuzz").tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix("dque-fuzz").tempdir()
    };
    dir.expect("make a scratch directory")
}

// ---------------------------------------------------------------------------
// The `ops` target.

/// Durability of a handle in the `ops` target. Encoded in one byte:
/// `b % 4` = 1 Turbo, 2 Periodic every `1 + b / 4` ms, else Safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `Durability::Safe`.
    Safe,
    /// `Durability::Turbo`.
    Turbo,
    /// `Durability::Periodic`, every this many milliseconds (1 to 64).
    Periodic(u8),
}

impl Mode {
    fn decode(b: u8) -> Mode {
        match b % 4 {
            1 => Mode::Turbo,
            2 => Mode::Periodic(1 + b / 4),
            _ => Mode::Safe,
        }
    }

    fn encode(self) -> u8 {
        match self {
            Mode::Safe => 0,
            Mode::Turbo => 1,
            Mode::Periodic(ms) => 2 + 4 * (ms.clamp(1, 64) - 1),
        }
    }

    fn durability(self) -> Durability {
        match self {
            Mode::Safe => Durability::Safe,
            Mode::Turbo => Durability::Turbo,
            Mode::Periodic(ms) => Durability::Periodic(Duration::from_millis(u64::from(ms))),
        }
    }
}

/// One step of the `ops` target. Encoding: one byte picks the step
/// (`byte % 16`), then its arguments follow (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Enqueue a new item of this many bytes (0, 1, 2, 15: size (1); 3: size
    /// (2), modulo `MAX_ITEM + 100`, so some are too large).
    Enqueue(u16),
    /// `enqueue_batch` of `1 + count % 8` items of `size + 13 i` bytes; with
    /// `too_large`, the last one is over `MAX_ITEM` and nothing goes in
    /// (12: count (1), size (1), too_large (1, bit 0)).
    EnqueueBatch {
        /// Items in the batch: 1 + this modulo 8.
        count: u8,
        /// Bytes of the first item.
        size: u8,
        /// Whether the last item is too large.
        too_large: bool,
    },
    /// `dequeue` (4, 5).
    Dequeue,
    /// `dequeue_timeout(0)` (6).
    DequeueNow,
    /// `dequeue_batch(max % 10)` (13: max (1)).
    DequeueBatch(u8),
    /// `peek` (7 with argument bit 0 clear).
    Peek,
    /// `peek_timeout(0)` (7 with argument bit 0 set).
    PeekNow,
    /// Close and open again with these sizes (8: flags (1: bit 0 items, bit 1
    /// bytes), items (1), bytes (2), mode (1)).
    Reopen {
        /// `Options::segment_items`: 1 + this modulo 8.
        items: Option<u8>,
        /// `Options::segment_bytes`: 4096 plus this.
        bytes: Option<u16>,
        /// Durability of the new handle.
        mode: Mode,
    },
    /// `set_durability` (9: mode (1)).
    SetDurability(Mode),
    /// `sync` (10).
    Sync,
    /// Copy the files of the open queue to a new directory, drop the handle,
    /// continue on the copy (11 with argument bit 0 clear).
    Kill,
    /// Simulated power loss: continue on a crash image picked by this seed
    /// (11 with argument bit 0 set, then the seed (1)). Without the
    /// `fault-injection` feature, a kill.
    PowerLoss(u8),
    /// `verify()`: healthy, holding `len()` items (14).
    Verify,
}

impl Op {
    fn decode(input: &mut Input) -> Op {
        match input.u8() % 16 {
            0..=2 | 15 => Op::Enqueue(u16::from(input.u8())),
            3 => Op::Enqueue(input.u16() % (MAX_ITEM as u16 + 100)),
            4 | 5 => Op::Dequeue,
            6 => Op::DequeueNow,
            7 if input.u8() & 1 == 0 => Op::Peek,
            7 => Op::PeekNow,
            8 => {
                let flags = input.u8();
                let items = input.u8();
                let bytes = input.u16();
                Op::Reopen {
                    items: (flags & 1 != 0).then_some(items),
                    bytes: (flags & 2 != 0).then_some(bytes),
                    mode: Mode::decode(input.u8()),
                }
            }
            9 => Op::SetDurability(Mode::decode(input.u8())),
            10 => Op::Sync,
            11 if input.u8() & 1 == 0 => Op::Kill,
            11 => Op::PowerLoss(input.u8()),
            12 => Op::EnqueueBatch {
                count: input.u8(),
                size: input.u8(),
                too_large: input.u8() & 1 != 0,
            },
            13 => Op::DequeueBatch(input.u8()),
            _ => Op::Verify,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Op::Enqueue(size) if size < 256 => out.extend_from_slice(&[0, size as u8]),
            Op::Enqueue(size) => {
                out.push(3);
                out.extend_from_slice(&size.to_le_bytes());
            }
            Op::EnqueueBatch {
                count,
                size,
                too_large,
            } => out.extend_from_slice(&[12, count, size, u8::from(too_large)]),
            Op::Dequeue => out.push(4),
            Op::DequeueNow => out.push(6),
            Op::DequeueBatch(max) => out.extend_from_slice(&[13, max]),
            Op::Peek => out.extend_from_slice(&[7, 0]),
            Op::PeekNow => out.extend_from_slice(&[7, 1]),
            Op::Reopen { items, bytes, mode } => {
                let flags = u8::from(items.is_some()) | (u8::from(bytes.is_some()) << 1);
                out.extend_from_slice(&[8, flags, items.unwrap_or(0)]);
                out.extend_from_slice(&bytes.unwrap_or(0).to_le_bytes());
                out.push(mode.encode());
            }
            Op::SetDurability(mode) => out.extend_from_slice(&[9, mode.encode()]),
            Op::Sync => out.push(10),
            Op::Kill => out.extend_from_slice(&[11, 0]),
            Op::PowerLoss(seed) => out.extend_from_slice(&[11, 1, seed]),
            Op::Verify => out.push(14),
        }
    }
}

/// An `ops` input: the first open's settings, then the steps.
///
/// Layout: mode (1, see [`Mode`]), segment items (1: 1 + it modulo 8),
/// segment bytes (2: 4096 + it), then [`Op`]s until the input ends (at most
/// [`MAX_OPS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsInput {
    /// Durability of the first handle.
    pub mode: Mode,
    /// Segment items of the new queue: 1 + this modulo 8.
    pub items: u8,
    /// Segment bytes of the new queue: 4096 + this.
    pub bytes: u16,
    /// The steps.
    pub ops: Vec<Op>,
}

/// Steps an `ops` input runs at most (the rest is ignored).
pub const MAX_OPS: usize = 400;

impl OpsInput {
    /// Reads an input; every byte string is one.
    pub fn decode(data: &[u8]) -> OpsInput {
        let mut input = Input(data);
        let mode = Mode::decode(input.u8());
        let items = input.u8();
        let bytes = input.u16();
        let mut ops = Vec::new();
        while !input.is_empty() && ops.len() < MAX_OPS {
            ops.push(Op::decode(&mut input));
        }
        OpsInput {
            mode,
            items,
            bytes,
            ops,
        }
    }

    /// The bytes that [`decode`](Self::decode) reads back as `self`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.mode.encode(), self.items];
        out.extend_from_slice(&self.bytes.to_le_bytes());
        for op in &self.ops {
            op.encode(&mut out);
        }
        out
    }
}

/// Item number `n` with `size` bytes: distinct for distinct `n` (from 4 bytes on).
fn item(n: u32, size: usize) -> Vec<u8> {
    let tag = n.to_le_bytes();
    (0..size).map(|i| tag[i % 4] ^ (i / 4) as u8).collect()
}

/// A queue under test and its model. Fields drop in order: the handle,
/// then the plan that watches its directory, then the directory.
struct Model {
    q: RawQueue,
    /// Tracks what is durable in the queue's directory, for crash images.
    #[cfg(feature = "fault-injection")]
    plan: dque::faults::FaultPlan,
    /// Holds the current directory (a kill or power loss moves to a copy).
    root: tempfile::TempDir,
    /// Every item accepted, in order; the queue holds `history[head..]`.
    history: Vec<Vec<u8>>,
    head: usize,
    /// `(head, history.len())` when everything was last durable.
    durable: (usize, usize),
    options: Options,
    mode: Mode,
    next_item: u32,
    step: usize,
}

/// The `ops` fuzz target: see [`OpsInput`] and [`Op`]. After every step the
/// queue agrees with the model: every item returned and `len()`, and on disk
/// exactly the segments `segment_numbers()` names, no more of them than the
/// items explain, and no temp file. A kill loses nothing; a power loss keeps
/// a window of the items, in order, that holds everything made durable. At
/// the end the queue is drained and must reopen empty and clean.
pub fn ops(data: &[u8]) {
    let input = OpsInput::decode(data);
    let options = Options::new()
        .max_item_bytes(MAX_ITEM)
        .durability(input.mode.durability())
        .segment_items(1 + u32::from(input.items % 8))
        .segment_bytes(4096 + u32::from(input.bytes));
    let root = scratch_dir();
    let q = RawQueue::create_with(root.path().join("q"), &options).expect("create");
    assert!(q.open_report().is_clean());
    let mut m = Model {
        #[cfg(feature = "fault-injection")]
        plan: dque::faults::FaultPlan::install(root.path().join("q")),
        root,
        q,
        history: Vec::new(),
        head: 0,
        durable: (0, 0),
        options,
        mode: input.mode,
        next_item: 0,
        step: 0,
    };
    for (step, op) in input.ops.iter().enumerate() {
        m.step = step;
        m.apply(*op);
        m.check(op);
    }
    m.step = input.ops.len();
    m.apply(Op::Verify);
    let rest =
        m.q.dequeue_batch(usize::MAX)
            .unwrap_or_else(|e| m.fail(&format!("final drain: {e}")));
    assert!(rest == m.history[m.head..], "final drain");
    m.head = m.history.len();
    assert_eq!(m.q.dequeue().expect("dequeue an empty queue"), None);
    m.check(&Op::Dequeue);
    m.q.close().expect("close");
    m.reopen(m.options);
    assert!(
        m.q.is_empty(),
        "empty queue reopened with {} items",
        m.q.len()
    );
    m.q.close().expect("close");
}

impl Model {
    fn dir(&self) -> PathBuf {
        self.root.path().join("q")
    }

    fn fail(&self, what: &str) -> ! {
        panic!("step {}: {what}", self.step)
    }

    fn items(&self) -> &[Vec<u8>] {
        &self.history[self.head..]
    }

    fn new_item(&mut self, size: usize) -> Vec<u8> {
        self.next_item += 1;
        item(self.next_item - 1, size)
    }

    fn apply(&mut self, op: Op) {
        // A consumed head is retired by a write, never by a read: by the
        // call that settled its last record, or at the latest by the next
        // call that takes an item (before it takes one).
        let takes = match op {
            Op::Dequeue | Op::DequeueNow => true,
            Op::DequeueBatch(max) => max % 10 > 0,
            _ => false,
        };
        let consumed = if takes { self.consumed_head() } else { None };
        self.apply_op(op);
        if let Some(number) = consumed {
            if self.dir().join(segment_name(number)).exists() {
                self.fail(&format!(
                    "{op:?}: consumed head segment {number} is still there after a call \
                     that takes an item"
                ));
            }
        }
    }

    fn apply_op(&mut self, op: Op) {
        match op {
            Op::Enqueue(size) => {
                let item = self.new_item(size as usize);
                match self.q.enqueue(&item) {
                    Ok(()) => self.history.push(item),
                    Err(Error::ItemTooLarge { size: s, max }) => {
                        assert!(s == item.len() && max == MAX_ITEM && s > MAX_ITEM as usize)
                    }
                    Err(e) => self.fail(&format!("enqueue of {size} bytes: {e}")),
                }
            }
            Op::EnqueueBatch {
                count,
                size,
                too_large,
            } => {
                let count = 1 + usize::from(count % 8);
                let mut items: Vec<Vec<u8>> = (0..count)
                    .map(|i| self.new_item(usize::from(size) + 13 * i))
                    .collect();
                if too_large {
                    items[count - 1] = self.new_item(MAX_ITEM as usize + 1);
                }
                match self.q.enqueue_batch(&items) {
                    Ok(()) if !too_large => self.history.extend(items),
                    Err(Error::ItemTooLarge { .. }) if too_large => {}
                    other => self.fail(&format!(
                        "enqueue_batch (too large: {too_large}): {other:?}"
                    )),
                }
            }
            Op::Dequeue | Op::DequeueNow => {
                let got = match op {
                    Op::Dequeue => self.q.dequeue(),
                    _ => self.q.dequeue_timeout(Duration::ZERO),
                };
                let got = got.unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                let expected = self.items().first().cloned();
                if got != expected {
                    self.fail(&format!("{op:?} gave {got:?}, expected {expected:?}"));
                }
                self.head += usize::from(got.is_some());
            }
            Op::DequeueBatch(max) => {
                let max = usize::from(max % 10);
                let got = self
                    .q
                    .dequeue_batch(max)
                    .unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                let expected = &self.items()[..max.min(self.items().len())];
                if got != expected {
                    self.fail(&format!("{op:?} gave {got:?}, expected {expected:?}"));
                }
                self.head += got.len();
            }
            Op::Peek | Op::PeekNow => {
                let got = self.reads_only("peek", |m| match op {
                    Op::Peek => m.q.peek(),
                    _ => m.q.peek_timeout(Duration::ZERO),
                });
                let got = got.unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                if got.as_ref() != self.items().first() {
                    self.fail(&format!(
                        "{op:?} gave {got:?}, expected {:?}",
                        self.items().first()
                    ));
                }
            }
            Op::Reopen { items, bytes, mode } => {
                let mut options = Options::new()
                    .max_item_bytes(MAX_ITEM)
                    .durability(mode.durability());
                if let Some(items) = items {
                    options = options.segment_items(1 + u32::from(items % 8));
                }
                if let Some(bytes) = bytes {
                    options = options.segment_bytes(4096 + u32::from(bytes));
                }
                self.q
                    .close()
                    .unwrap_or_else(|e| self.fail(&format!("close: {e}")));
                self.mode = mode;
                self.reopen(options);
            }
            Op::SetDurability(mode) => {
                self.q
                    .set_durability(mode.durability())
                    .unwrap_or_else(|e| self.fail(&format!("set_durability: {e}")));
                if mode == Mode::Safe && self.mode != Mode::Safe {
                    // Switching to Safe syncs what was written before.
                    self.durable = (self.head, self.history.len());
                }
                self.mode = mode;
            }
            Op::Sync => {
                self.q
                    .sync()
                    .unwrap_or_else(|e| self.fail(&format!("sync: {e}")));
                self.durable = (self.head, self.history.len());
            }
            Op::Kill => self.kill(),
            Op::PowerLoss(seed) => self.power_loss(seed),
            Op::Verify => {
                let report = self
                    .reads_only("verify", |m| m.q.verify())
                    .unwrap_or_else(|e| self.fail(&format!("verify: {e}")));
                if !report.is_healthy() || report.items() != self.items().len() as u64 {
                    self.fail(&format!(
                        "verify: {report}, model {} items",
                        self.items().len()
                    ));
                }
            }
        }
        if self.mode == Mode::Safe {
            self.durable = (self.head, self.history.len());
        }
    }

    /// Opens the closed queue again; a clean close leaves nothing to mend
    /// and makes everything durable.
    fn reopen(&mut self, options: Options) {
        let q = RawQueue::open_with(self.dir(), &options)
            .unwrap_or_else(|e| self.fail(&format!("reopen: {e}")));
        let report = q.open_report();
        if !report.is_clean() || !report.deleted_segments.is_empty() {
            self.fail(&format!("reopen after close is not clean: {report:?}"));
        }
        self.options = options.durability(self.mode.durability());
        self.q = q;
        self.durable = (self.head, self.history.len());
    }

    /// Moves to a new directory holding `files`, opens the queue there and
    /// drops the old handle; returns the open's report.
    fn move_to(&mut self, files: Vec<(String, Vec<u8>)>) -> dque::OpenReport {
        let root = scratch_dir();
        let dir = root.path().join("q");
        fs::create_dir(&dir).expect("make the new queue directory");
        // Names are relative paths: `dead/...` and `quarantine/...` too.
        write_files(&dir, &files);
        let old_root = std::mem::replace(&mut self.root, root);
        // The files written count as durable for the new plan.
        #[cfg(feature = "fault-injection")]
        let plan = dque::faults::FaultPlan::install(self.dir());
        #[cfg(feature = "fault-injection")]
        let old_plan = std::mem::replace(&mut self.plan, plan);
        let options = self.options.durability(self.mode.durability());
        let q = RawQueue::open_with(self.dir(), &options)
            .unwrap_or_else(|e| self.fail(&format!("open after a crash: {e}")));
        let report = q.open_report().clone();
        drop(std::mem::replace(&mut self.q, q));
        #[cfg(feature = "fault-injection")]
        drop(old_plan);
        drop(old_root);
        self.durable = (self.head, self.history.len());
        report
    }

    /// What a killed process leaves: every file as the page cache has it.
    /// The copy must open without repairs, holding every item, having
    /// deleted at most the consumed head.
    fn kill(&mut self) {
        // Every file, those in subdirectories (`dead/`, `quarantine/`) too,
        // by its path relative to the queue directory; the lock aside.
        let files: Vec<(String, Vec<u8>)> = snapshot(&self.dir())
            .into_iter()
            .filter_map(|(path, bytes)| Some((path.to_str()?.to_string(), bytes?)))
            .filter(|(name, _)| name != LOCK_FILE)
            .collect();
        let head_before = *self.segment_numbers().start();
        let report = self.move_to(files);
        if !report.is_clean() {
            self.fail(&format!("open after kill mended something: {report:?}"));
        }
        let head_after = *self.segment_numbers().start();
        let expected: Vec<PathBuf> = (head_before..head_after)
            .map(|n| self.dir().join(segment_name(n)))
            .collect();
        if report.deleted_segments != expected {
            self.fail(&format!(
                "open after kill deleted {:?}, expected {expected:?}",
                report.deleted_segments
            ));
        }
    }

    /// A simulated power loss: continue on a crash image (the files as a
    /// power cut now may leave them). It must open, holding a window of the
    /// items in order: it starts between the first item not durably
    /// dequeued and the first not dequeued, and ends between the end of
    /// the durable enqueues and the end of all. Without the
    /// `fault-injection` feature there are no crash images: a kill.
    fn power_loss(&mut self, seed: u8) {
        #[cfg(feature = "fault-injection")]
        {
            let (durable_head, durable_end) = self.durable;
            let image = self
                .plan
                .crash_image((u64::from(seed) << 32) | self.step as u64);
            self.move_to(image.files.into_iter().collect());
            let got = self
                .q
                .dequeue_batch(usize::MAX)
                .unwrap_or_else(|e| self.fail(&format!("read the crash image: {e}")));
            let first = (durable_head..=self.head).find(|&first| {
                let end = first + got.len();
                (durable_end..=self.history.len()).contains(&end)
                    && self.history[first..end] == got[..]
            });
            let Some(first) = first else {
                self.fail(&format!(
                    "after a power loss the queue holds {} items that are no window of the \
                     history starting in {durable_head}..={} and ending in {durable_end}..={}",
                    got.len(),
                    self.head,
                    self.history.len()
                ));
            };
            // Put them back, durably, and go on from what survived.
            self.q
                .enqueue_batch(&got)
                .and_then(|()| self.q.sync())
                .unwrap_or_else(|e| self.fail(&format!("enqueue after a power loss: {e}")));
            self.history.truncate(first + got.len());
            self.head = first;
            self.durable = (self.head, self.history.len());
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = seed;
            self.kill();
        }
    }

    fn segment_numbers(&self) -> std::ops::RangeInclusive<u64> {
        self.q
            .segment_numbers()
            .unwrap_or_else(|e| self.fail(&format!("segment_numbers: {e}")))
    }

    fn check(&self, op: &Op) {
        let items = self.items().len();
        if self.q.len() != items || self.q.is_empty() != (items == 0) {
            self.fail(&format!(
                "after {op:?}: len() {} but model {items}",
                self.q.len()
            ));
        }
        let mode = self.q.durability().expect("durability");
        assert_eq!(mode, self.mode.durability(), "durability");
        let listing = list_dir(&self.dir());
        let numbers: Vec<u64> = listing.segments.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u64> = self.segment_numbers().collect();
        if numbers != expected || !listing.temp.is_empty() {
            self.fail(&format!(
                "after {op:?}: segment files {numbers:?} and temp files {:?}, expected {expected:?} and none",
                listing.temp
            ));
        }
        // Each segment after the head holds at least one item; only the head
        // may be fully consumed (see `apply` for when it must be gone).
        if numbers.len() > items + 1 {
            self.fail(&format!(
                "after {op:?}: {} segments for {items} items",
                numbers.len()
            ));
        }
    }

    /// The head segment's number if every record in it is settled and a
    /// segment follows it: a consumed head, which the queue retires.
    fn consumed_head(&self) -> Option<u64> {
        let listing = list_dir(&self.dir());
        let [(number, head), _, ..] = listing.segments.as_slice() else {
            return None;
        };
        let bytes = read_prefix(head, SEGMENT_READ);
        let HeaderVerdict::Valid(header) = judge_header(&bytes, *number) else {
            self.fail("the head's header does not read");
        };
        (replay(&bytes, header.max_records).unsettled_count() == 0).then_some(*number)
    }

    /// Runs `read` (a call that must not write) and checks that it added,
    /// removed or resized no file.
    fn reads_only<R>(&mut self, what: &str, read: impl FnOnce(&mut Self) -> R) -> R {
        let before = file_sizes(&self.dir());
        let result = read(self);
        let after = file_sizes(&self.dir());
        if before != after {
            self.fail(&format!(
                "{what} changed the files (reads never write): {before:?} -> {after:?}"
            ));
        }
        result
    }
}

/// Bytes of a segment the `ops` target reads to replay it: more than its
/// frames can take (at most 8 records of at most `MAX_ITEM` bytes, and
/// their markers).
const SEGMENT_READ: u64 = 64 << 10;

/// The first `most` bytes of the file at `path`, read in one allocation of
/// at most `most` bytes (this runs after every step).
fn read_prefix(path: &Path, most: u64) -> Vec<u8> {
    use std::io::Read;
    let read = |mut file: fs::File| {
        let len = file.metadata()?.len().min(most);
        let mut bytes = vec![0; len as usize];
        file.read_exact(&mut bytes)?;
        Ok::<_, std::io::Error>(bytes)
    };
    fs::File::open(path)
        .and_then(read)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// The `repair` target: `QueueFiles` and `repair()` on the `open` target's input.
//
// The repair is judged by properties that hold whatever steps it takes, not
// by a model of the steps of FORMAT.md's "Repair": a model written from the
// same text as the code agrees with any bug the two share. The yardstick is
// what the input's files held, read with this file's own frame reader
// (`replay`, written from FORMAT.md, not dque's): see [`Before`].

/// Where the caller counts allocations (with its global allocator): `reset`
/// forgets, `largest` gives the largest single allocation this thread made
/// since. The `repair` fuzz target and dque's corpus test both count.
#[derive(Debug, Clone, Copy)]
pub struct Allocations {
    /// Starts a new count.
    pub reset: fn(),
    /// The largest single allocation since the last `reset`.
    pub largest: fn() -> usize,
}

/// Placeholders of more ids than this are only planned, not written: a
/// placeholder takes 12 bytes per id on disk (and dque builds it in memory),
/// so that a gap of millions of ids would make files and allocations above
/// the corpus's 64 MiB limit and slow the fuzzer down; the dry run's plan is
/// still checked.
pub const MAX_PLACEHOLDER_IDS: u64 = 1 << 20;

/// What reading a queue's files may allocate at once: twice the largest
/// file (a segment read whole, the offsets of its records), and this much
/// for paths, messages and the like.
const READ_ALLOCATION_SLACK: usize = 256 << 10;

/// Every file and directory under a queue directory: path relative to it,
/// and bytes (`None` for a directory).
type Snapshot = BTreeMap<PathBuf, Option<Vec<u8>>>;

fn snapshot(dir: &Path) -> Snapshot {
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

/// `snapshot` less the lock file, which taking the lock may create: it
/// must then be empty.
fn without_lock(mut snap: Snapshot) -> Snapshot {
    if let Some(lock) = snap.remove(Path::new(LOCK_FILE)) {
        assert_eq!(lock, Some(Vec::new()), "the lock file is not an empty file");
    }
    snap
}

/// The paths that differ between two snapshots, for a message.
fn differences(before: &Snapshot, after: &Snapshot) -> Vec<String> {
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

fn assert_unchanged(dir: &Path, before: &Snapshot, what: &str) {
    let after = without_lock(snapshot(dir));
    let diff = differences(before, &after);
    assert!(
        diff.is_empty(),
        "{what} changed the queue directory: {diff:?}"
    );
}

/// The top-level segment files of `files`, by number.
fn segment_files(files: &[(String, Vec<u8>)]) -> BTreeMap<u64, &[u8]> {
    files
        .iter()
        .filter(|(name, _)| !name.contains('/'))
        .filter_map(|(name, bytes)| {
            let digits = name.strip_suffix(".seg")?;
            Some((digits.parse().expect("20 digits"), bytes.as_slice()))
        })
        .collect()
}

/// What an input's files held before any repair, read without dque.
struct Before {
    /// The top-level segment files, by number.
    segments: BTreeMap<u64, Vec<u8>>,
    /// The files of `quarantine/`.
    quarantined: Vec<Vec<u8>>,
    /// Every record a repaired queue may deliver: id and payload of each
    /// whole, unsettled record of a segment whose header reads, up to the
    /// segment's first invalid frame.
    pending: BTreeSet<(u64, Vec<u8>)>,
    /// The records that were whole and reachable, which a repaired queue
    /// must deliver: the pending records of every intact segment, in id
    /// order (see [`Before::read`]).
    reachable: Vec<(u64, Vec<u8>)>,
    /// Whether the files need no repair at all: a valid config, segments
    /// numbered without a gap, every one intact and ending at its clean end
    /// (no torn bytes to cut).
    sound: bool,
    /// Whether a segment holds markers outside the front run (see
    /// [`stray_markers`]): then `len()` may count settled records.
    stray_markers: bool,
    /// More items than the files could hold (a record takes 8 bytes at least).
    most_items: usize,
}

impl Before {
    /// Reads the input's files.
    ///
    /// "Reachable" is defined from FORMAT.md alone, with this file's
    /// `replay` (dque's `salvage` and `QueueFiles` share dque's frame
    /// reader with the repair, so they would agree with a bug in it). A
    /// segment is *intact* when its header reads, leaves room for its ids
    /// (its number is below `u64::MAX`, and ids up to its record limit and
    /// the one after stay below 2^64: FORMAT.md does not say what holds past
    /// the end of u64, and dque calls such a header damage), no whole record
    /// lies after the end of its frames (DESIGN.md: only a tail with no whole
    /// frame after it is torn; anything else is damage, which a repair may
    /// move aside whole), and every record it holds is known to be whole:
    ///
    /// * the tail (the last file): its records before the first invalid
    ///   frame (what follows is a torn write, cut on open);
    /// * a segment whose successor's header reads: exactly `successor's
    ///   first id - first id` whole records (the sealed rule; bytes after
    ///   them are a torn run of markers);
    /// * a segment whose successor is missing or unreadable: its record
    ///   count is unknown, so only if its frames run to its clean end
    ///   (nothing but zeros after them).
    ///
    /// Its unsettled records are reachable: a consumer reading it gets every
    /// one. This is wider than "the segments before the first damage": the
    /// repair gives up only damaged segments (FORMAT.md), so an intact
    /// segment after a gap or a damaged one keeps its records too.
    fn read(files: &[(String, Vec<u8>)]) -> Before {
        let segments: BTreeMap<u64, Vec<u8>> = segment_files(files)
            .into_iter()
            .map(|(number, bytes)| (number, bytes.to_vec()))
            .collect();
        let header = |number: u64| match segments.get(&number).map(|b| judge_header(b, number)) {
            Some(HeaderVerdict::Valid(header)) => Some(header),
            _ => None,
        };
        let config = files.iter().find(|(name, _)| name == CONFIG_FILE);
        let mut sound = matches!(
            config.map(|(_, bytes)| judge_config(bytes)),
            Some(ConfigVerdict::Valid { .. })
        );
        let last = segments.keys().next_back().copied();
        if let (Some(&first), Some(last)) = (segments.keys().next(), last) {
            sound &= last - first + 1 == segments.len() as u64;
        }
        let mut pending = BTreeSet::new();
        let mut reachable = Vec::new();
        for (&number, bytes) in &segments {
            let Some(h) = header(number) else {
                sound = false;
                continue;
            };
            let r = replay(bytes, h.max_records);
            let clean_end = r.garbage_end == r.end;
            let room = number < u64::MAX
                && h.first_id
                    .checked_add(u64::from(h.max_records) + 1)
                    .is_some();
            let held = |next: Header| next.first_id.checked_sub(h.first_id);
            let whole = room
                && !whole_record_from(bytes, r.end)
                && if Some(number) == last {
                    true
                } else if let Some(next) = header(number + 1) {
                    held(next) == Some(r.records.len() as u64)
                } else {
                    clean_end
                };
            sound &= whole && clean_end;
            for (index, (&(at, len), &settled)) in r.records.iter().zip(&r.settled).enumerate() {
                // Ids past u64::MAX name no record.
                let Some(id) = h.first_id.checked_add(index as u64) else {
                    break;
                };
                if !settled {
                    let record = (id, bytes[at..at + len].to_vec());
                    if whole {
                        reachable.push(record.clone());
                    }
                    pending.insert(record);
                }
            }
        }
        reachable.sort();
        Before {
            quarantined: files
                .iter()
                .filter(|(name, _)| name.starts_with(&format!("{QUARANTINE_DIR}/")))
                .map(|(_, bytes)| bytes.clone())
                .collect(),
            most_items: files
                .iter()
                .map(|(_, b)| b.len() / RECORD_OVERHEAD + 1)
                .sum::<usize>(),
            segments,
            pending,
            reachable,
            sound,
            stray_markers: stray_markers(files),
        }
    }
}

/// Whether a whole record (a record's head word, its payload in the file,
/// its CRC right) starts at a 4-byte boundary at or after `from`.
fn whole_record_from(file: &[u8], from: usize) -> bool {
    (from..file.len().saturating_sub(RECORD_OVERHEAD - 1))
        .step_by(4)
        .any(|at| {
            let word = le_u32(file, at);
            let len = (word & RECORD_LEN_MASK) as usize;
            let end = at + RECORD_OVERHEAD + len;
            word >> 30 == 0b10
                && end <= file.len()
                && le_u32(file, at + 4) == crc32(&[&file[at..at + 4], &file[at + 8..end]])
        })
}

/// A queue directory `q` made from an input's files, in a scratch directory
/// that also holds files that are not the queue's: copies of its config,
/// segments and temp files, and a `quarantine/` holding a copy of its
/// config, where a repair that strayed out of the queue directory would
/// find work to do. Nothing may touch them.
struct Sandbox {
    root: tempfile::TempDir,
    dir: PathBuf,
    /// Everything in `root` but the queue directory, as made.
    outside: Snapshot,
}

impl Sandbox {
    fn new(files: &[(String, Vec<u8>)]) -> Sandbox {
        let root = scratch_dir();
        let dir = root.path().join("q");
        fs::create_dir(&dir).expect("create the queue directory");
        write_files(&dir, files);
        let mut beside: Vec<(String, Vec<u8>)> = files
            .iter()
            .filter(|(name, _)| !name.contains('/'))
            .cloned()
            .collect();
        beside.push((
            format!("{QUARANTINE_DIR}/{CONFIG_FILE}"),
            config_bytes(1, 4096, RAW_CODEC),
        ));
        write_files(root.path(), &beside);
        let outside = Sandbox::outside_of(root.path());
        Sandbox { root, dir, outside }
    }

    fn outside_of(root: &Path) -> Snapshot {
        let mut snap = snapshot(root);
        snap.retain(|path, _| !path.starts_with("q"));
        snap
    }

    /// Property: nothing outside the queue directory is touched.
    fn assert_outside_untouched(&self, what: &str) {
        let now = Sandbox::outside_of(self.root.path());
        let diff = differences(&self.outside, &now);
        assert!(
            diff.is_empty(),
            "{what} touched files outside the queue directory: {diff:?}"
        );
    }
}

/// What a repair came to.
enum Ran {
    /// It failed; the error's Display.
    Refused(String),
    /// Its dry run planned placeholders of more than
    /// [`MAX_PLACEHOLDER_IDS`] ids, so it was not run: the plan.
    Planned(Vec<RepairAction>),
    /// It succeeded: its steps, and the items the repaired queue then
    /// delivered (id and bytes, in order).
    Repaired {
        actions: Vec<RepairAction>,
        items: Vec<(u64, Vec<u8>)>,
    },
}

impl Ran {
    fn outcome(&self) -> RepairOutcome {
        match self {
            Ran::Refused(why) => RepairOutcome::Refused(why.clone()),
            Ran::Planned(actions) => RepairOutcome::Planned {
                steps: step_kinds(actions),
            },
            Ran::Repaired { actions, items } => RepairOutcome::Repaired {
                steps: step_kinds(actions),
                items: items.len(),
            },
        }
    }
}

fn step_kinds(actions: &[RepairAction]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|action| match action {
            RepairAction::Cut { .. } => "cut",
            RepairAction::MarkReached { .. } => "mark",
            RepairAction::MoveAside { .. } => "move",
            RepairAction::FillGap { .. } => "fill",
            RepairAction::NewTail { .. } => "new tail",
            _ => "other",
        })
        .collect()
}

/// Ids the placeholders of `actions` take.
fn placeholder_ids(actions: &[RepairAction]) -> u64 {
    actions
        .iter()
        .map(|action| match action {
            RepairAction::FillGap { records, .. } => *records,
            _ => 0,
        })
        .sum()
}

/// What [`check_repair`] saw, for tests of the seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The repair failed; the error's Display.
    Refused(String),
    /// The dry run planned placeholders of more than [`MAX_PLACEHOLDER_IDS`]
    /// ids, so the repair was not run: these steps.
    Planned {
        /// The planned steps, by kind.
        steps: Vec<&'static str>,
    },
    /// The repair succeeded.
    Repaired {
        /// Its steps, by kind: `cut`, `mark`, `move`, `fill`, `new tail`.
        steps: Vec<&'static str>,
        /// Items the repaired queue held.
        items: usize,
    },
}

/// Whether two outcomes agree, ignoring the error message of a refusal.
pub fn same_repair_outcome(a: &RepairOutcome, b: &RepairOutcome) -> bool {
    match (a, b) {
        (RepairOutcome::Refused(_), RepairOutcome::Refused(_)) => true,
        _ => a == b,
    }
}

/// The `repair` fuzz target: see [`check_repair`].
pub fn repair_files(data: &[u8], allocations: Option<&Allocations>) {
    check_repair(data, allocations);
}

/// Writes the queue directory `data` describes ([`OpenInput`]; the options
/// in it are not used) and checks `QueueFiles`, `salvage` and `repair()` on
/// it by properties:
///
/// * `QueueFiles` (no lock) writes nothing, not even the lock file, agrees
///   with the model of the open, and allocates at most twice the largest
///   file at once (when `allocations` counts); `salvage` reads every
///   segment file without writing;
/// * a dry run changes nothing on disk (the empty lock file aside) and
///   plans exactly the steps the repair then takes, or fails as it does;
/// * a repair that fails changes nothing (unless it failed on I/O);
/// * after a repair, the queue opens with default options mending nothing,
///   and `verify()` finds it healthy;
/// * every record that was whole and reachable before ([`Before::read`])
///   is delivered, in order, with its id and bytes; nothing else is: no
///   record is made up, none settled comes back;
/// * no bytes are destroyed silently: every segment file is still in
///   place with its whole frames unchanged, byte-identical in
///   `quarantine/`, or retired holding no pending record;
/// * nothing outside the queue directory is touched;
/// * repairing twice changes nothing: a second repair takes no step and
///   leaves every file byte-identical;
/// * files that need no repair get none;
/// * with dque's `fault-injection` feature: a repair stopped at any of its
///   syncs returns the error, and the next repair finishes the job, by all
///   of the above, delivering the same items.
///
/// Placeholders of more than [`MAX_PLACEHOLDER_IDS`] ids are only planned.
pub fn check_repair(data: &[u8], allocations: Option<&Allocations>) -> RepairOutcome {
    let files = OpenInput::decode(data).files();
    check_salvage(&files);
    let before = Before::read(&files);
    let sandbox = Sandbox::new(&files);
    // Asserted last, so that the repair's properties are still checked.
    let deferred = queue_files_read_only(&sandbox.dir, &files, allocations);
    let ran = repair_by_properties(&sandbox, &before);
    leaves_sound_files_alone(&before, &ran);
    #[cfg(feature = "fault-injection")]
    if let Ran::Repaired { actions, items } = &ran {
        if !actions.is_empty() {
            finishes_after_a_crash_at_each_sync(&files, &before, items);
        }
    }
    if let Some(failure) = deferred {
        panic!("{failure}");
    }
    ran.outcome()
}

/// `dque::salvage` on every segment file: it reads any bytes without a
/// panic, and the records it finds before the damage are the file's
/// records in order, with ids following the header's first id.
fn check_salvage(files: &[(String, Vec<u8>)]) {
    let root = scratch_dir();
    for (name, bytes) in files.iter().filter(|(name, _)| name.ends_with(".seg")) {
        let path = root.path().join(name.replace('/', "_"));
        fs::write(&path, bytes).expect("write a segment file");
        let found = dque::salvage(&path).unwrap_or_else(|e| panic!("salvage of {name}: {e}"));
        let mut next_id = found.header.map(|(_, first_id)| first_id);
        for record in &found.records {
            // Before the damage, ids follow; after it they are unknown.
            if record.settled.is_some() {
                assert_eq!(record.id, next_id, "{name}: ids before the damage");
                next_id = next_id.map(|id| id + 1);
            } else {
                assert_eq!(record.id, None, "{name}: an id past the damage");
            }
            let start = record.offset as usize + 8;
            assert_eq!(
                bytes.get(start..start + record.payload.len()),
                Some(&record.payload[..]),
                "{name}: a record's payload is not where it says"
            );
        }
        assert_eq!(
            &fs::read(&path).expect("read back"),
            bytes,
            "{name}: salvage wrote"
        );
    }
}

/// `QueueFiles` on the input's files, before any repair: it reads without
/// writing (not even the lock file), and [`check_queue_files`] holds. Gives
/// that check's deferred failure.
fn queue_files_read_only(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    allocations: Option<&Allocations>,
) -> Option<String> {
    // The model of the open, as a RawQueue opened without options would.
    let plain = OpenInput {
        config: ConfigFile::Absent,
        turbo: false,
        sizes: None,
        create: false,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 1,
        segments: Vec::new(),
    };
    let open_model = expect_open(&plain, dir, &as_raw_queue(files));
    let found = snapshot(dir);
    let deferred = check_queue_files(dir, files, &open_model, allocations);
    assert_unchanged(dir, &found, "reading with QueueFiles");
    assert!(
        !dir.join(LOCK_FILE).exists(),
        "QueueFiles::open made a lock file"
    );
    deferred
}

/// Runs a dry run, the repair, a second repair, and the repaired queue in
/// `sandbox`, checking the properties of [`check_repair`] against what the
/// input held (`before`; the directory may be a later state of it, left by
/// a repair that stopped).
fn repair_by_properties(sandbox: &Sandbox, before: &Before) -> Ran {
    let dir = &sandbox.dir;
    let found = without_lock(snapshot(dir));
    let plan = repair(dir, true);
    assert_unchanged(dir, &found, "a dry run of repair");
    sandbox.assert_outside_untouched("a dry run of repair");
    let plan = match plan {
        Ok(plan) => plan,
        Err(dry) => return refusal_changes_nothing(sandbox, &found, &dry),
    };
    assert!(plan.dry_run, "a dry run's report: {plan:?}");
    assert_eq!(plan.opened, OpenReport::default(), "a dry run opened");
    if placeholder_ids(&plan.actions) > MAX_PLACEHOLDER_IDS {
        return Ran::Planned(plan.actions);
    }

    let report = repair(dir, false);
    sandbox.assert_outside_untouched("a repair");
    let report = report
        .unwrap_or_else(|e| panic!("the dry run planned {plan}, the repair failed: {e:?} ({e})"));
    assert!(!report.dry_run, "a repair's report: {report:?}");
    assert_eq!(
        plan.actions, report.actions,
        "the repair took other steps than its dry run planned"
    );
    steps_say_why(&report.actions);
    let repaired = without_lock(snapshot(dir));
    destroys_no_bytes(before, &found, &repaired);
    second_repair_changes_nothing(sandbox, &repaired);

    let items = opens_clean_and_healthy(dir, before.most_items, !before.stray_markers);
    keeps_reachable_records(before, &items);
    delivers_only_pending_records(before, &items);
    // Drained and closed: still nothing to repair.
    let last = repair(dir, false).expect("a repair of the drained queue");
    assert!(
        last.actions.is_empty(),
        "a repair of the drained queue: {last}"
    );
    sandbox.assert_outside_untouched("a repair of the drained queue");
    Ran::Repaired {
        actions: report.actions,
        items,
    }
}

/// Property: a repair whose dry run refuses refuses too, alike, and
/// changes nothing.
fn refusal_changes_nothing(sandbox: &Sandbox, found: &Snapshot, dry: &Error) -> Ran {
    let e = match repair(&sandbox.dir, false) {
        Ok(report) => panic!("the dry run failed with {dry:?} ({dry}), the repair did {report}"),
        Err(e) => e,
    };
    sandbox.assert_outside_untouched("a repair that failed");
    assert_eq!(
        repair_error_kind(dry),
        repair_error_kind(&e),
        "the dry run failed with {dry}, the repair with {e}"
    );
    assert_unchanged(
        &sandbox.dir,
        found,
        &format!("a repair that failed with {e}"),
    );
    Ran::Refused(e.to_string())
}

/// Every cut and move says why it was taken.
fn steps_say_why(actions: &[RepairAction]) {
    for action in actions {
        let reason = match action {
            RepairAction::Cut { reason, .. } | RepairAction::MoveAside { reason, .. } => {
                Some(reason)
            }
            _ => None,
        };
        assert!(
            reason.is_none_or(|reason| !reason.is_empty()),
            "a step without a reason: {action:?}"
        );
    }
}

/// Property: bytes are never destroyed silently (DESIGN.md). Each segment
/// file of the input is still in place with its whole frames unchanged
/// (only what follows the last whole frame may be cut or marked), or one
/// more copy of it than the input had is in `quarantine/`, or it is gone
/// holding no pending record (retired as settled). What `quarantine/` held
/// when this repair began (`found`) is still there, unchanged, but for
/// half-made `.tmp` files a stopped repair left (which are no copy).
fn destroys_no_bytes(before: &Before, found: &Snapshot, repaired: &Snapshot) {
    let kept = |path: &Path| {
        path.starts_with(QUARANTINE_DIR) && path.extension().is_none_or(|ext| ext != "tmp")
    };
    let quarantined: Vec<Vec<u8>> = repaired
        .iter()
        .filter(|(path, _)| kept(path))
        .filter_map(|(_, bytes)| bytes.clone())
        .collect();
    for (&number, original) in &before.segments {
        let copies = |files: &[Vec<u8>]| files.iter().filter(|b| *b == original).count();
        if copies(&quarantined) > copies(&before.quarantined) {
            continue;
        }
        let name = segment_name(number);
        // Its header and whole frames, and its pending records.
        let (whole, pending) = match judge_header(original, number) {
            HeaderVerdict::Valid(h) => {
                let r = replay(original, h.max_records);
                (r.end, r.unsettled_count())
            }
            _ => (original.len(), usize::MAX),
        };
        match repaired.get(Path::new(&name)) {
            Some(Some(now)) => assert!(
                now.get(..whole) == Some(&original[..whole]),
                "{name}: its first {whole} bytes (header and whole frames) changed, \
                 and no copy went to {QUARANTINE_DIR}/"
            ),
            _ => assert!(
                pending == 0,
                "{name} is gone, and no copy went to {QUARANTINE_DIR}/ (pending records: {})",
                match pending {
                    usize::MAX => "unknown, its header does not read".to_string(),
                    n => n.to_string(),
                }
            ),
        }
    }
    for (path, bytes) in found {
        if kept(path) {
            assert!(
                repaired.get(path) == Some(bytes),
                "{} in {QUARANTINE_DIR}/ changed or went",
                path.display()
            );
        }
    }
}

/// Property: repairing twice changes nothing: the second repair takes no
/// step, its open mends nothing, and every file stays byte-identical.
fn second_repair_changes_nothing(sandbox: &Sandbox, repaired: &Snapshot) {
    let again = repair(&sandbox.dir, false)
        .unwrap_or_else(|e| panic!("a second repair failed: {e:?} ({e})"));
    assert!(
        again.actions.is_empty() && again.opened == OpenReport::default(),
        "a second repair is not a no-op: {again} {:?}",
        again.opened
    );
    assert_unchanged(&sandbox.dir, repaired, "a second repair");
    sandbox.assert_outside_untouched("a second repair");
}

/// Property: the repaired queue opens with default options (as raw bytes,
/// whatever its codec) mending nothing; `verify()` and `QueueFiles::verify`
/// find it healthy; `len()`, `pending()`, `QueueFiles::visit_records` and
/// the dequeues agree, ids increasing. Dequeues every item (`most` is more
/// than the files can hold) and gives them, id and bytes, in order.
///
/// Unless `exact`: the input held markers outside the front run, which
/// dque never writes and the repair leaves as they are, so `len()` (the
/// count FORMAT.md's formula gives) may differ from the items, and the
/// open queue's `verify()` says so.
fn opens_clean_and_healthy(dir: &Path, most: usize, exact: bool) -> Vec<(u64, Vec<u8>)> {
    let files = QueueFiles::open(dir).expect("QueueFiles::open of the repaired queue");
    let verified = files.verify(|_, _| {}).expect("QueueFiles::verify");
    assert!(
        verified.is_healthy(),
        "QueueFiles::verify of the repaired queue: {verified}"
    );
    let mut visited = Vec::new();
    files
        .visit_records(|record| {
            visited.push((record.id, record.payload.to_vec()));
            std::ops::ControlFlow::Continue(())
        })
        .expect("visit the records of the repaired queue");
    drop(files);

    let q = RawQueue::open_encoded_with(dir, &Options::new())
        .unwrap_or_else(|e| panic!("the repaired queue does not open: {e:?} ({e})"));
    assert_eq!(
        q.open_report(),
        &OpenReport::default(),
        "the open after a repair mended more"
    );
    let verified = q.verify().expect("verify the repaired queue");
    assert!(
        verified.is_healthy() || !exact,
        "verify() of the repaired queue: {verified}"
    );
    let items: Vec<(u64, Vec<u8>)> = q
        .pending(most)
        .expect("pending() of the repaired queue")
        .into_iter()
        .map(|p| (p.id, p.item))
        .collect();
    let ids: Vec<u64> = items.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "the repaired queue's ids do not increase: {ids:?}"
    );
    if exact {
        assert_eq!(q.len(), items.len(), "len() of the repaired queue");
    }
    assert!(
        visited == items,
        "QueueFiles visits other records than pending() gives"
    );
    let taken = q.dequeue_batch(most).expect("dequeue the repaired queue");
    assert!(
        taken.iter().eq(items.iter().map(|(_, item)| item)),
        "the dequeues give other items than pending()"
    );
    let after = q.dequeue().expect("dequeue the drained queue");
    assert_eq!(after, None, "an item after the last of pending()");
    assert_eq!(q.len(), 0, "len() of the drained queue");
    q.close().expect("close the repaired queue");
    items
}

/// Property: every record that was whole and reachable before the repair
/// ([`Before::read`]) is delivered, with its id and bytes (and so in order:
/// the ids delivered increase).
fn keeps_reachable_records(before: &Before, items: &[(u64, Vec<u8>)]) {
    let delivered: BTreeMap<u64, &Vec<u8>> = items.iter().map(|(id, item)| (*id, item)).collect();
    for (id, payload) in &before.reachable {
        match delivered.get(id) {
            Some(&item) if item == payload => {}
            Some(item) => panic!(
                "record {id} held {} bytes, the repaired queue delivers {} other bytes for it",
                payload.len(),
                item.len()
            ),
            None => panic!(
                "record {id} ({} bytes) was whole and reachable, the repaired queue does not \
                 deliver it (it delivers ids {:?})",
                payload.len(),
                delivered.keys().collect::<Vec<_>>()
            ),
        }
    }
}

/// Property: the repaired queue delivers nothing that was not pending: each
/// item is a whole, unsettled record of the input with that id and those
/// bytes. No record is made up, and none that was settled comes back.
fn delivers_only_pending_records(before: &Before, items: &[(u64, Vec<u8>)]) {
    for item in items {
        assert!(
            before.pending.contains(item),
            "the repaired queue delivers id {} ({} bytes), no pending record of the input",
            item.0,
            item.1.len()
        );
    }
}

/// Whether a segment of `files` other than the tail holds markers while a
/// segment before it holds none and the tail none either: markers outside
/// the front run, which dque never writes, and which make the count the open
/// computes differ from the items (see `bug-ack-in-middle-segment`).
fn stray_markers(files: &[(String, Vec<u8>)]) -> bool {
    let segments = segment_files(files);
    let marked: Vec<bool> = segments
        .iter()
        .map(|(&number, bytes)| match judge_header(bytes, number) {
            HeaderVerdict::Valid(h) => replay(bytes, h.max_records).has_markers,
            _ => false,
        })
        .collect();
    let Some((&tail, middle)) = marked.split_last() else {
        return false;
    };
    !tail
        && middle
            .iter()
            .enumerate()
            .any(|(j, &m)| m && marked[..j].iter().any(|&before| !before))
}

/// Property: files that need no repair ([`Before::sound`]) get none.
fn leaves_sound_files_alone(before: &Before, ran: &Ran) {
    if !before.sound {
        return;
    }
    let untouched = matches!(ran, Ran::Repaired { actions, .. } if actions.is_empty());
    assert!(
        untouched,
        "the files need no repair, the repair came to {:?}",
        ran.outcome()
    );
}

/// Property: a repair stopped at any of its syncs (failed there, as a kill
/// would leave the files: what it wrote stays, nothing after it happens)
/// returns an error, and the next repair finishes the job: it passes every
/// check of [`repair_by_properties`] against the input as it was, and the
/// queue delivers the same items as after the repair that was not stopped.
/// Stopping a repair takes dque's `fault-injection` feature.
#[cfg(feature = "fault-injection")]
fn finishes_after_a_crash_at_each_sync(
    files: &[(String, Vec<u8>)],
    before: &Before,
    items: &[(u64, Vec<u8>)],
) {
    use dque::faults::{FaultOp, FaultPlan};
    let syncs = {
        let sandbox = Sandbox::new(files);
        let plan = FaultPlan::install(&sandbox.dir);
        repair(&sandbox.dir, false).expect("the repair once more");
        plan.count(FaultOp::Sync)
    };
    for k in 1..=syncs {
        let sandbox = Sandbox::new(files);
        let stopped = {
            let plan = FaultPlan::install(&sandbox.dir);
            plan.fail_nth(FaultOp::Sync, k, std::io::ErrorKind::Other);
            repair(&sandbox.dir, false)
        };
        sandbox.assert_outside_untouched("a repair stopped by a failed sync");
        assert!(
            stopped.is_err(),
            "sync {k} of {syncs} failed, the repair returned {stopped:?}"
        );
        match repair_by_properties(&sandbox, before) {
            Ran::Repaired { items: again, .. } => assert!(
                again == items,
                "after a repair stopped at sync {k} of {syncs}, the next one delivers other items"
            ),
            other => panic!(
                "after a repair stopped at sync {k} of {syncs} ({stopped:?}), the next one came \
                 to {:?}",
                other.outcome()
            ),
        }
    }
}

/// The kind of a repair's refusal and the file it names; a panic for an
/// error no file content should cause, `Io` among them: the scratch
/// directory's file system does not fail.
fn repair_error_kind(e: &Error) -> (Kind, Option<&Path>) {
    assert!(!e.to_string().is_empty(), "{e:?}");
    match e {
        Error::NotAQueue { .. } => (Kind::NotAQueue, None),
        Error::UnsupportedVersion { path, .. } => (Kind::Version, Some(path)),
        Error::Corrupted {
            segment, reason, ..
        } => {
            assert!(!reason.is_empty(), "{e}");
            (Kind::Corrupted, Some(segment))
        }
        other => panic!("a repair of fuzzed files gave an unexpected error: {other:?} ({other})"),
    }
}

/// The files as the model of the open reads them: the config's codec made
/// the raw one (the open under test is a `RawQueue`; a repair keeps any).
fn as_raw_queue(files: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|(name, bytes)| match judge_config(bytes) {
            ConfigVerdict::Valid { records, bytes, .. } if name == CONFIG_FILE => {
                (name.clone(), config_bytes(records, bytes, RAW_CODEC))
            }
            _ => (name.clone(), bytes.clone()),
        })
        .collect()
}

/// `QueueFiles` without the lock on the input's files: no panic, clear
/// errors, answers that agree with each other and with the model of the
/// open, and allocations bounded by the files' sizes.
fn check_queue_files(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    open_model: &Expect,
    allocations: Option<&Allocations>,
) -> Option<String> {
    if let Some(a) = allocations {
        (a.reset)();
    }
    let config = files
        .iter()
        .find(|(n, _)| n == CONFIG_FILE)
        .map(|(_, b)| judge_config(b));
    let queue_files = match (QueueFiles::open(dir), config) {
        (Ok(q), Some(ConfigVerdict::Valid { .. })) => q,
        (Err(Error::NotAQueue { .. }), None | Some(ConfigVerdict::Invalid)) => return None,
        (Err(Error::UnsupportedVersion { .. }), Some(ConfigVerdict::Version(_))) => return None,
        (got, config) => panic!("QueueFiles::open gave {got:?} for config {config:?}"),
    };
    assert!(!queue_files.holds_lock());
    let segments = segment_files(files);
    let clear = |e: &Error, what: &str| {
        let expected = matches!(
            e,
            Error::Corrupted { .. }
                | Error::MissingSegment { .. }
                | Error::UnsupportedVersion { .. }
        );
        assert!(expected, "{what} gave an unexpected error: {e:?} ({e})");
    };
    let stats = queue_files.stats();
    if let Ok(stats) = &stats {
        let Some(ConfigVerdict::Valid { codec, .. }) = config else {
            unreachable!()
        };
        assert_eq!(stats.codec_id, codec, "stats(): codec");
        let listed = segments.keys().next().zip(segments.keys().next_back());
        assert_eq!(
            stats.segments,
            listed.map(|(a, b)| (*a, *b)),
            "stats(): segments"
        );
        let bytes: u64 = segments.values().map(|b| b.len() as u64).sum();
        assert_eq!(stats.bytes_on_disk, bytes, "stats(): bytes on disk");
        assert_eq!(stats.dead_letters, 0, "stats(): dead letters");
    }
    if let Err(e) = &stats {
        clear(e, "stats()");
    }
    // Records: each where it says it is, ids growing, compared with the
    // model's items as they come (nothing is kept, so nothing allocated).
    let healthy_items = match open_model {
        Expect::Open(opened)
            if !opened.unspecified && opened.healthy && opened.repairs.is_empty() =>
        {
            Some(&opened.items)
        }
        _ => None,
    };
    let mut visited = 0usize;
    let mut last_id = None;
    let mut deferred = None;
    let mut same_as_model = true;
    let visit = queue_files.visit_records(|record| {
        let file = segments.get(&record.segment).expect("a record of a listed segment");
        let at = record.offset as usize + RECORD_OVERHEAD;
        assert!(
            file.get(at..at + record.payload.len()) == Some(record.payload),
            "visit_records: the payload is not at segment {} offset {}",
            record.segment,
            record.offset
        );
        if last_id >= Some(record.id) && deferred.is_none() {
            // Ids that overlap or go back are damage, as a sealed segment
            // with too few records is (see `bug-visit-records-ids-overlap`).
            deferred = Some(format!(
                "visit_records: id {} (segment {} offset {}) after id {last_id:?}, where verify() finds: {:?}",
                record.id,
                record.segment,
                record.offset,
                queue_files.verify(|_, _| {}).map(|v| v.to_string())
            ));
        }
        last_id = Some(record.id);
        if let Some(items) = healthy_items {
            same_as_model &= items.get(visited).map(Vec::as_slice) == Some(record.payload);
        }
        visited += 1;
        std::ops::ControlFlow::Continue(())
    });
    if let Err(e) = &visit {
        clear(e, "visit_records()");
    }
    let mut progress = (0, 0);
    let verified = queue_files
        .verify(|read, total| {
            assert!(
                read >= progress.0 && read <= total,
                "verify progress {read} of {total} after {progress:?}"
            );
            progress = (read, total);
        })
        .expect("QueueFiles::verify");
    if let Some(a) = allocations {
        let largest = segments.values().map(|b| b.len()).max().unwrap_or(0);
        let bound = 2 * largest + READ_ALLOCATION_SLACK;
        let got = (a.largest)();
        assert!(
            got <= bound,
            "QueueFiles allocated {got} bytes at once; the largest file has {largest}"
        );
    }
    match open_model {
        Expect::Open(opened) if !opened.unspecified => {
            if let Some(items) = healthy_items {
                assert!(
                    verified.is_healthy(),
                    "QueueFiles::verify of healthy files: {verified}"
                );
                assert!(
                    visit.is_ok() && same_as_model && visited == items.len(),
                    "visit_records: other items than the open's ({visited} of {})",
                    items.len()
                );
                let stats = stats.expect("stats() of healthy files");
                assert_eq!(stats.items, opened.len, "stats(): items");
            }
            if opened.stops_at.is_some() {
                assert!(
                    !verified.is_healthy(),
                    "QueueFiles::verify misses damage at {:?}",
                    opened.stops_at
                );
            }
        }
        // Where the open refuses the segments, verify() finds what is wrong.
        Expect::Fail(Kind::Corrupted | Kind::Missing, ..) => assert!(
            !verified.is_healthy(),
            "QueueFiles::verify finds nothing where the open fails: {open_model:?}"
        ),
        Expect::Fail(Kind::Version, Some(path), _) if !path.ends_with(CONFIG_FILE) => assert!(
            !verified.is_healthy(),
            "QueueFiles::verify finds nothing where the open fails: {open_model:?}"
        ),
        _ => {}
    }
    deferred
}

// ---------------------------------------------------------------------------
// Seeds.

/// One seed file: the target it is for, a name, and its bytes.
#[derive(Debug, Clone)]
pub struct Seed {
    /// `open` or `ops`.
    pub target: &'static str,
    /// File name in the corpus: `seed-...`, or `bug-...` for the reproducer
    /// of a bug found by fuzzing (failing until it is fixed).
    pub name: String,
    /// The input.
    pub data: Vec<u8>,
    /// For `open` seeds: what [`check_open`] must see, if the seed is made
    /// for one outcome.
    pub outcome: Option<OpenOutcome>,
    /// For `repair` seeds: what [`check_repair`] must see, if the seed is
    /// made for one outcome.
    pub repaired: Option<RepairOutcome>,
}

/// A real queue's files: the config and the segments (numbered from `first`).
struct RealQueue {
    config: Vec<u8>,
    first: u64,
    segments: Vec<Vec<u8>>,
}

impl RealQueue {
    /// Snapshots the queue directory `dir` (open or closed).
    fn read(dir: &Path) -> RealQueue {
        let listing = list_dir(dir);
        RealQueue {
            config: fs::read(dir.join(CONFIG_FILE)).expect("read config"),
            first: listing.segments.first().map_or(1, |s| s.0),
            segments: listing
                .segments
                .iter()
                .map(|(_, p)| fs::read(p).expect("read segment"))
                .collect(),
        }
    }

    fn input(&self) -> OpenInput {
        OpenInput {
            config: ConfigFile::Raw(self.config.clone()),
            turbo: true,
            sizes: None,
            create: false,
            temp_files: false,
            cut_damaged_tail: false,
            first_number: self.first,
            segments: self
                .segments
                .iter()
                .map(|s| SegmentFile::from_bytes(s))
                .collect(),
        }
    }
}

/// Builds a real queue of small segments with `items` per segment: enqueue
/// `n` items, dequeue `taken`, and snapshot the files while it is open (as a
/// kill leaves them) or after close.
fn real_queue(items: u32, n: u32, taken: u32, close: bool) -> RealQueue {
    let root = scratch_dir();
    let dir = root.path().join("q");
    let options = Options::new()
        .durability(Durability::Turbo)
        .segment_items(items)
        .segment_bytes(4096);
    let q = RawQueue::create_with(&dir, &options).expect("create a seed queue");
    for i in 0..n {
        q.enqueue(&item(i, 5 + (i as usize * 7) % 40))
            .expect("enqueue");
    }
    for _ in 0..taken {
        q.dequeue().expect("dequeue").expect("an item");
    }
    if close {
        q.close().expect("close");
    }
    RealQueue::read(&dir)
}

/// End of the last whole frame of a real segment.
fn record_end(segment: &[u8]) -> usize {
    let header = match judge_header(segment, le_u64(segment, 8)) {
        HeaderVerdict::Valid(h) => h,
        other => panic!("seed segment header: {other:?}"),
    };
    replay(segment, header.max_records).end
}

/// The seed corpus of both targets, from real queues and hand-written inputs.
pub fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut open = |name: &str, input: OpenInput, outcome: Option<OpenOutcome>| {
        seeds.push(Seed {
            target: "open",
            name: name.to_string(),
            data: input.encode(),
            outcome,
            repaired: None,
        });
    };
    let opened = |items, repairs, stopped_by_damage| {
        Some(OpenOutcome::Opened {
            items,
            repairs,
            stopped_by_damage,
        })
    };
    let refused = || Some(OpenOutcome::Refused(String::new()));

    let empty = OpenInput {
        config: ConfigFile::Absent,
        turbo: false,
        sizes: None,
        create: true,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 1,
        segments: Vec::new(),
    };
    open(
        "seed-create-in-empty-dir",
        empty.clone(),
        opened(0, 0, false),
    );
    open(
        "seed-config-only",
        OpenInput {
            config: ConfigFile::Valid {
                records: 4,
                bytes: 4096,
                codec: RAW_CODEC,
            },
            ..empty.clone()
        },
        opened(0, 0, false),
    );
    let one = real_queue(100, 6, 2, true);
    open("seed-one-segment-acked", one.input(), opened(4, 0, false));
    let leftovers = OpenInput {
        temp_files: true,
        turbo: false,
        ..one.input()
    };
    open(
        "seed-one-segment-temp-files",
        leftovers.clone(),
        opened(4, 0, false),
    );
    // Opening rewrites the config (new sizes, or a new queue) through
    // dque.conf.tmp, which replaces a leftover one: removing the leftovers
    // listed before must not then fail (a bug until 7a4b5e0: Io NotFound).
    let resized = OpenInput {
        sizes: Some((2, 0)),
        ..leftovers
    };
    open(
        "seed-temp-config-rewritten-then-removed",
        resized,
        opened(4, 0, false),
    );
    let created = OpenInput {
        temp_files: true,
        ..empty.clone()
    };
    open("seed-create-over-temp-config", created, opened(0, 0, false));
    let three = real_queue(3, 8, 1, true);
    open("seed-three-segments", three.input(), opened(7, 0, false));
    // A kill between the ack of a head's last record and the head's
    // retirement (by the same call) leaves a settled head: the open deletes it.
    let mut killed = real_queue(3, 8, 2, false);
    let head = &mut killed.segments[0];
    let end = record_end(head);
    head[end..end + 4].copy_from_slice(&marker_word(ACK, 2).to_le_bytes());
    open(
        "seed-settled-head-left-by-kill",
        killed.input(),
        opened(5, 0, false),
    );

    // A torn tail: the last record's payload damaged, then zeros over it.
    let mut torn = three.input();
    let tail = three.segments.last().expect("a tail");
    let end = record_end(tail);
    let mut bytes = tail.clone();
    bytes[end - 3] ^= 0x5A;
    torn.segments[2] = SegmentFile::from_bytes(&bytes);
    open("seed-torn-tail-record", torn.clone(), opened(6, 1, false));
    let mut zeroed = bytes.clone();
    zeroed[end - 20..end - 8].fill(0);
    torn.segments[2] = SegmentFile::from_bytes(&zeroed);
    open("seed-zeroed-tail-record", torn, opened(6, 1, false));

    // Damage inside sealed segments: the head refuses to open, and so does a
    // middle one in the front run (the head has an ack marker, so the open
    // replays the middle); a middle one after the run stops the dequeues
    // that reach it.
    let mut sealed = three.input();
    let mut head = three.segments[0].clone();
    head[HEADER_LEN + 10] ^= 1;
    sealed.segments[0] = SegmentFile::from_bytes(&head);
    open("seed-damaged-head", sealed, refused());
    let mut middle = three.input();
    let mut seg = three.segments[1].clone();
    seg[HEADER_LEN + 10] ^= 1;
    middle.segments[1] = SegmentFile::from_bytes(&seg);
    open("seed-damaged-middle", middle, refused());
    let untouched = real_queue(3, 8, 0, true);
    let mut after_run = untouched.input();
    let mut seg = untouched.segments[1].clone();
    seg[HEADER_LEN + 10] ^= 1;
    after_run.segments[1] = SegmentFile::from_bytes(&seg);
    open(
        "seed-damaged-middle-after-the-run",
        after_run,
        opened(3, 0, true),
    );

    // Config and header trouble.
    open(
        "seed-segments-without-config",
        OpenInput {
            config: ConfigFile::Absent,
            ..three.input()
        },
        refused(),
    );
    let mut newer = three.config.clone();
    newer[4] = 2;
    open(
        "seed-config-of-version-2",
        OpenInput {
            config: ConfigFile::Raw(newer),
            ..one.input()
        },
        refused(),
    );
    open(
        "seed-config-of-bincode",
        OpenInput {
            config: ConfigFile::Valid {
                records: 3,
                bytes: 4096,
                codec: 1,
            },
            ..one.input()
        },
        refused(),
    );

    // Frames written by the program language, with valid headers.
    let header = |first_id, max_records| {
        Some(HeaderSpec {
            number: None,
            first_id,
            max_records,
            max_bytes: 4096,
        })
    };
    let program = |header, body: Vec<u8>| SegmentFile {
        header,
        program: true,
        body,
        zeros16: 64,
        absent: false,
        quarantined: false,
    };
    let built = OpenInput {
        config: ConfigFile::Valid {
            records: 3,
            bytes: 4096,
            codec: RAW_CODEC,
        },
        turbo: true,
        sizes: None,
        create: false,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 7,
        segments: vec![
            program(
                header(10, 3),
                Program::default()
                    .record(b"a")
                    .record(b"bb")
                    .record(b"ccc")
                    .ack(2)
                    .ack(0)
                    .build(),
            ),
            program(
                header(13, 3),
                Program::default().record(b"dddd").record(b"e").build(),
            ),
            // A torn write: the record after "f" has a bit flipped, and
            // no whole record follows it.
            program(
                header(15, 3),
                Program::default().record(b"f").torn_record(9, 70).build(),
            ),
        ],
    };
    open(
        "seed-program-three-segments",
        built.clone(),
        opened(4, 1, false),
    );

    // FORMAT.md, "Tail damage". A bad frame followed by a whole record is
    // damage: the open refuses it and changes nothing, unless asked to cut
    // it (then it is reported as damage, a copy kept).
    let mut damaged = built.clone();
    damaged.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .torn_record(9, 70)
            .record(b"g")
            .build(),
    );
    open("seed-damaged-tail", damaged.clone(), refused());
    damaged.cut_damaged_tail = true;
    open("seed-damaged-tail-cut", damaged, opened(4, 1, false));
    // What a power loss leaves is a torn write, whole records after it or
    // not: a zero word where the frame should start...
    let mut hole = built.clone();
    hole.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .zeros(2)
            .record(b"g")
            .build(),
    );
    open("seed-zero-word-then-a-record", hole, opened(4, 1, false));
    // ... or a record with an unwritten (all-zero) sector inside it,
    // written back out of order with the record after it.
    let mut sector = built.clone();
    let mut bytes = header_bytes(9, 15, 3, 4096);
    bytes.extend_from_slice(&record_frame(b"f"));
    let big_at = bytes.len();
    bytes.extend_from_slice(&record_frame(&[0x5A; 1500]));
    bytes.extend_from_slice(&record_frame(b"g"));
    bytes.resize(bytes.len() + 1024, 0);
    let second_sector = (big_at / SECTOR + 1) * SECTOR;
    bytes[second_sector..second_sector + SECTOR].fill(0);
    sector.segments[2] = SegmentFile::from_bytes(&bytes);
    open(
        "seed-unwritten-sector-then-a-record",
        sector.clone(),
        opened(4, 1, false),
    );
    // The same record with one bit flipped instead: damage.
    let mut flipped = header_bytes(9, 15, 3, 4096);
    flipped.extend_from_slice(&record_frame(b"f"));
    flipped.extend_from_slice(&record_frame(&[0x5A; 1500]));
    flipped.extend_from_slice(&record_frame(b"g"));
    flipped.resize(flipped.len() + 1024, 0);
    flipped[second_sector + 7] ^= 0x10;
    sector.segments[2] = SegmentFile::from_bytes(&flipped);
    open("seed-flipped-bit-then-a-record", sector, refused());
    // A torn run of markers after a sealed segment's records is cut; a bad
    // marker followed by a whole record there is damage.
    let mut sealed_damage = built.clone();
    sealed_damage.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .marker(REACHED, 0)
            .word(0x7F00_0000)
            .record(b"x")
            .build(),
    );
    open("seed-damaged-marker-run", sealed_damage, refused());
    // No config, only quarantine/ (kept bytes of a queue whose config was
    // lost): not a queue, even to open_or_create, which writes nothing.
    let mut kept_only = empty.clone();
    kept_only.segments = vec![SegmentFile {
        absent: true,
        quarantined: true,
        ..SegmentFile::from_bytes(&three.segments[0])
    }];
    open("seed-only-quarantine-is-not-a-queue", kept_only, refused());
    let mut markers = built.clone();
    markers.segments.truncate(1);
    markers.segments[0] = program(
        header(0, 5),
        Program::default()
            .record(b"x")
            .record(b"y")
            .ack(1)
            .ack(1)
            .word(0x7F00_0000)
            .build(),
    );
    open("seed-program-double-ack", markers, opened(1, 1, false));

    // Lease, release, dead and reached markers: attempts count lease
    // markers less release markers, dead settles, reached changes nothing
    // (also after an ack); the marked segments form a run from the head
    // through the tail; a release with no lease left to give back ends the
    // tail's replay and is cut.
    let mut leases = built.clone();
    leases.segments = vec![
        program(
            header(10, 3),
            Program::default()
                .record(b"a")
                .record(b"bb")
                .record(b"ccc")
                .marker(LEASE, 0)
                .marker(LEASE, 1)
                .marker(LEASE, 0)
                .marker(LEASE, 0)
                .marker(RELEASE, 0)
                .marker(DEAD, 1)
                .ack(2)
                .marker(REACHED, 2)
                .build(),
        ),
        program(
            header(13, 3),
            Program::default()
                .record(b"dddd")
                .record(b"e")
                .marker(REACHED, 0)
                .build(),
        ),
        program(
            header(15, 3),
            Program::default()
                .record(b"f")
                .marker(LEASE, 0)
                .marker(RELEASE, 0)
                .marker(RELEASE, 0)
                .build(),
        ),
    ];
    open(
        "seed-program-lease-markers",
        leases.clone(),
        opened(4, 1, false),
    );
    // A torn marker after the last record of a sealed segment in the front
    // run: cut and reported at open.
    let mut torn_marker = leases.clone();
    torn_marker.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .marker(REACHED, 0)
            .marker(LEASE, 7)
            .build(),
    );
    open(
        "seed-torn-marker-in-the-run",
        torn_marker,
        opened(4, 2, false),
    );
    // A tail with markers pulls the middle segment into the front run: its
    // damage fails the open even though the head has no markers.
    let mut marked_tail = built.clone();
    marked_tail.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    marked_tail.segments[1] = program(header(13, 3), Program::default().record(b"dddd").build());
    marked_tail.segments[2] = program(
        header(15, 3),
        Program::default().record(b"f").marker(LEASE, 0).build(),
    );
    open(
        "seed-damaged-middle-before-a-marked-tail",
        marked_tail,
        refused(),
    );

    // Bug: a header whose first id leaves no room for its records: the id
    // after the last record overflows u64 (a panic with overflow checks).
    let mut ids_end = built.clone();
    ids_end.segments.truncate(1);
    ids_end.segments[0] = program(
        header(u64::MAX, 3),
        Program::default().record(b"last id").build(),
    );
    open("bug-first-id-overflows", ids_end, None);
    // Bug: a segment numbered u64::MAX: the open computes the number after
    // it, and so would the roll-over of this full tail (a panic with
    // overflow checks).
    let mut numbers_end = built.clone();
    numbers_end.first_number = u64::MAX;
    numbers_end.segments.truncate(1);
    numbers_end.segments[0] = program(header(0, 1), Program::default().record(b"full").build());
    open("bug-segment-number-u64-max", numbers_end, None);
    // Bug: an ack marker in a middle segment (never written by dque, but
    // valid by FORMAT.md): len() counts the record, dequeues skip it.
    let mut middle_ack = built.clone();
    middle_ack.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .ack(0)
            .build(),
    );
    open("bug-ack-in-middle-segment", middle_ack, opened(3, 1, false));

    // Bug: the open deletes a consumed head and replays the middle segment
    // after it as the new head, cutting the garbage after its records, but
    // does not report that cut.
    let mut unreported = built.clone();
    unreported.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .ack(0)
            .ack(1)
            .ack(2)
            .build(),
    );
    unreported.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .word(0x7F00_0000)
            .build(),
    );
    unreported.segments[2] = program(header(15, 3), Program::default().record(b"f").build());
    open(
        "bug-unreported-cut-at-open",
        unreported,
        opened(3, 1, false),
    );

    // Bug: damage before a whole record whose payload ends in zero bytes is
    // taken for a torn write and cut. The open looks for whole records only
    // up to the last non-zero byte (rounded up to 4), where the record's
    // last payload bytes, zeros, lie past it; but the record is whole in
    // the file (FORMAT.md, "Tail damage": no whole record anywhere after the
    // bad frame), so the open must refuse it. Found by the `open` fuzzer.
    let mut zero_tail = built.clone();
    zero_tail.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .torn_record(9, 70)
            .record(&[0; 8])
            .build(),
    );
    open(
        "bug-damage-before-a-record-ending-in-zeros",
        zero_tail,
        refused(),
    );

    // Bug: a middle segment after the run holds records its successor's
    // first id leaves no room for (the successor starts at the same id): the
    // dequeues that reach it stop with `Corrupted`, but `peek()` there gives
    // the tail's first record (the id it looks for is the tail's too), so
    // peek and dequeue disagree. Found by the `open` fuzzer.
    let mut overlapping = built.clone();
    overlapping.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    overlapping.segments[2] = program(header(13, 3), Program::default().record(b"f").build());
    open(
        "bug-peek-past-a-damaged-middle-segment",
        overlapping,
        opened(3, 0, true),
    );

    // The repair target (its corpus also holds the open target's): gaps,
    // segments moved aside, placeholders, a new tail, and what it refuses.
    let mut repair = |name: &str, input: OpenInput, steps: Option<(&[&'static str], usize)>| {
        seeds.push(Seed {
            target: "repair",
            name: name.to_string(),
            data: input.encode(),
            outcome: None,
            repaired: Some(match steps {
                Some((steps, items)) => RepairOutcome::Repaired {
                    steps: steps.to_vec(),
                    items,
                },
                None => RepairOutcome::Refused(String::new()),
            }),
        });
    };
    // A middle segment gone: a placeholder takes its ids (13 and 14).
    let mut gap = built.clone();
    gap.segments[1].absent = true;
    repair(
        "seed-repair-missing-middle",
        gap.clone(),
        Some((&["cut", "fill"], 2)),
    );
    // A repair stopped after moving it: the gap is filled the same way, the
    // file in quarantine/ is left alone.
    gap.segments[1].quarantined = true;
    repair("seed-repair-moved-middle", gap, Some((&["cut", "fill"], 2)));
    // A sealed middle segment with a torn record, moved under another name
    // as its own is taken in quarantine/.
    let mut taken = built.clone();
    taken.segments[1] = program(
        header(13, 3),
        Program::default().record(b"dddd").torn_record(1, 3).build(),
    );
    taken.segments[1].quarantined = true;
    repair(
        "seed-repair-quarantine-name-taken",
        taken,
        Some((&["cut", "move", "fill"], 2)),
    );
    // The tail's header gone: moved, a new tail starts at id 15.
    let mut tail_gone = built.clone();
    tail_gone.segments[2] = SegmentFile::from_bytes(b"DQSG, then nothing a header holds");
    repair(
        "seed-repair-new-tail",
        tail_gone,
        Some((&["move", "new tail"], 3)),
    );
    // The head's header gone: moved, nothing fills ids before the queue.
    let mut head_gone = built.clone();
    head_gone.segments[0] = SegmentFile::from_bytes(&[0xFF; 40]);
    repair(
        "seed-repair-head-header",
        head_gone,
        Some((&["cut", "move"], 3)),
    );
    // A head without markers before a gap gets a reached marker, so that
    // the open replays up to the placeholder.
    let mut unmarked = built.clone();
    unmarked.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    unmarked.segments[1].absent = true;
    repair(
        "seed-repair-mark-reached",
        unmarked.clone(),
        Some((&["cut", "mark", "fill"], 4)),
    );
    // An empty head before a gap can take no marker: refused.
    unmarked.segments[0] = program(header(10, 3), Vec::new());
    repair("seed-repair-empty-before-gap", unmarked, None);
    // Ids that overlap: refused.
    let mut overlap = built.clone();
    overlap.segments[1] = program(header(12, 3), Program::default().record(b"dddd").build());
    repair("seed-repair-ids-overlap", overlap, None);
    // Garbage in a segment whose successor's header is gone: its record
    // count is unknown, so it is moved too; the new tail follows the head.
    let mut unknown = built.clone();
    unknown.segments[1] = program(
        header(13, 3),
        Program::default().record(b"dddd").word(0x7F00_0000).build(),
    );
    unknown.segments[2] = SegmentFile::from_bytes(&[1; 8]);
    repair(
        "seed-repair-torn-before-lost-header",
        unknown,
        Some((&["move", "move", "new tail"], 1)),
    );

    // Bug: visit_records() walks on where a sealed segment holds more
    // records than its successor's first id allows (the open, the repair
    // and verify() call it damage), and gives id 13 twice.
    let mut overfull = built.clone();
    overfull.segments[0] = program(
        header(10, 4),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .record(b"dd")
            .ack(0)
            .build(),
    );
    repair("bug-visit-records-ids-overlap", overfull, None);
    // Bug: the same where the successor's first id is below the segment's
    // own: ids 20, then 13.
    let mut backwards = built.clone();
    backwards.segments[0] = program(header(20, 3), Program::default().record(b"a").build());
    repair("bug-visit-records-ids-go-back", backwards, None); // Bug: the tail's header is gone, and the new tail would start at id
                                                              // 2^64 - 100 with the config's limit of 1000 records, past u64::MAX: its
                                                              // header does not read, so the open that ends the repair fails, after
                                                              // the tail was moved and the new one written ("nothing was changed",
                                                              // says the error). A repair must fail before it changes anything, or
                                                              // write a header that reads.
    let mut last_ids = built.clone();
    last_ids.config = ConfigFile::Valid {
        records: 1000,
        bytes: 4096,
        codec: RAW_CODEC,
    };
    last_ids.segments = vec![
        program(
            header(u64::MAX - 100, 3),
            Program::default().record(b"a").build(),
        ),
        SegmentFile::from_bytes(b"not a header"),
    ];
    seeds.push(Seed {
        target: "repair",
        name: "bug-repair-fails-after-a-new-tail".to_string(),
        data: last_ids.encode(),
        outcome: None,
        repaired: None,
    });

    // The ops target.
    let mut ops = |name: &str, input: OpsInput| {
        seeds.push(Seed {
            target: "ops",
            name: name.to_string(),
            data: input.encode(),
            outcome: None,
            repaired: None,
        });
    };
    use Op::*;
    ops(
        "seed-basic",
        OpsInput {
            mode: Mode::Safe,
            items: 2,
            bytes: 0,
            ops: vec![
                Enqueue(10),
                Enqueue(0),
                Enqueue(200),
                Peek,
                Dequeue,
                Enqueue(7),
                Enqueue(8),
                DequeueNow,
                PeekNow,
                Sync,
                Dequeue,
                Dequeue,
                Dequeue,
            ],
        },
    );
    ops(
        "seed-rollover-by-bytes-and-too-large",
        OpsInput {
            mode: Mode::Turbo,
            items: 7,
            bytes: 0,
            ops: vec![
                Enqueue(2500),
                Enqueue(2000),
                Enqueue(3000),
                Enqueue(3050),
                Dequeue,
                Enqueue(100),
                Dequeue,
                Dequeue,
                Enqueue(1),
            ],
        },
    );
    ops(
        "seed-reopen-resized",
        OpsInput {
            mode: Mode::Periodic(5),
            items: 0,
            bytes: 100,
            ops: vec![
                Enqueue(3),
                Enqueue(4),
                Reopen {
                    items: Some(4),
                    bytes: None,
                    mode: Mode::Safe,
                },
                Enqueue(5),
                Enqueue(6),
                Dequeue,
                Reopen {
                    items: Some(0),
                    bytes: Some(9000),
                    mode: Mode::Turbo,
                },
                Enqueue(250),
                Dequeue,
                Dequeue,
            ],
        },
    );
    ops(
        "seed-kill-after-consuming-a-segment",
        OpsInput {
            mode: Mode::Turbo,
            items: 1,
            bytes: 0,
            ops: vec![
                Enqueue(20),
                Enqueue(21),
                Enqueue(22),
                Dequeue,
                Dequeue,
                Kill,
                Enqueue(23),
                SetDurability(Mode::Safe),
                Dequeue,
                PowerLoss(0),
                Dequeue,
                SetDurability(Mode::Turbo),
                Enqueue(1),
                Kill,
                Verify,
            ],
        },
    );
    ops(
        "seed-batches-and-verify",
        OpsInput {
            mode: Mode::Safe,
            items: 3,
            bytes: 0,
            ops: vec![
                EnqueueBatch {
                    count: 6,
                    size: 30,
                    too_large: false,
                },
                Verify,
                DequeueBatch(4),
                EnqueueBatch {
                    count: 2,
                    size: 1,
                    too_large: true,
                },
                Enqueue(9),
                DequeueBatch(9),
                Verify,
                Peek,
                DequeueBatch(0),
            ],
        },
    );
    ops(
        "seed-turbo-power-loss",
        OpsInput {
            mode: Mode::Turbo,
            items: 2,
            bytes: 0,
            ops: vec![
                Enqueue(40),
                Enqueue(41),
                Enqueue(42),
                Sync,
                Enqueue(43),
                Dequeue,
                Enqueue(600),
                PowerLoss(7),
                Dequeue,
                Enqueue(44),
                EnqueueBatch {
                    count: 3,
                    size: 200,
                    too_large: false,
                },
                PowerLoss(200),
                SetDurability(Mode::Periodic(2)),
                Enqueue(45),
                Dequeue,
                PowerLoss(3),
                Verify,
            ],
        },
    );
    // A power loss whose image the open cuts (a copy kept in quarantine/),
    // then kills: the copy of the directory takes quarantine/ along.
    ops(
        "seed-power-loss-then-kill",
        OpsInput {
            mode: Mode::Turbo,
            items: 1,
            bytes: 0,
            ops: vec![
                Enqueue(700),
                Enqueue(1200),
                Enqueue(10),
                PowerLoss(1),
                Kill,
                Enqueue(900),
                Enqueue(5),
                PowerLoss(9),
                Kill,
                Dequeue,
                Verify,
            ],
        },
    );
    seeds
}
