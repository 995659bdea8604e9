//! The `open` target: its input (a queue directory), what an open must do
//! predicted from the files by FORMAT.md's rules, and the check
//! ([`open_files`], [`check_open`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use dque::{Durability, Error, Options, RawQueue, FORMAT_VERSION};

use super::common::{
    differences, file_sizes, list_dir, scratch_dir, snapshot, write_files, Input, MAX_ITEM,
};
use super::format::{
    config_bytes, header_bytes, judge_config, judge_header, judge_tail, marker_word, record_frame,
    replay, segment_name, ConfigVerdict, Header, HeaderVerdict, Replayed, TailVerdict, ACK_MARKER,
    CONFIG_FILE, CONFIG_TEMP, DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_ITEMS, HEADER_LEN,
    QUARANTINE_DIR, RAW_CODEC, RECORD_OVERHEAD,
};

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
    pub(super) fn files(&self) -> Vec<(String, Vec<u8>)> {
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
pub(super) enum Kind {
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
pub(super) enum Expect {
    /// The open fails with this kind of error, naming this file (when it
    /// names one), having done what `Refusal` says.
    Fail(Kind, Option<PathBuf>, Refusal),
    /// The open succeeds.
    Open(Opened),
}

/// What a refused open leaves behind.
#[derive(Debug, Default)]
pub(super) struct Refusal {
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
pub(super) struct Cut {
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
pub(super) struct Opened {
    /// The items, in order, that dequeues return.
    pub(super) items: Vec<Vec<u8>>,
    /// What `pending()` lists: id, delivery attempts (lease markers) and
    /// item; the same as `items` unless the dequeues stop at damage after
    /// whole records of a middle segment (`pending()` only reads them).
    pending: Vec<(u64, u16, Vec<u8>)>,
    /// The middle segment whose damage ends the dequeues with `Corrupted`.
    pub(super) stops_at: Option<PathBuf>,
    /// The middle segment short of records where `pending()` ends with
    /// `Corrupted`.
    pending_stops_at: Option<PathBuf>,
    /// Cuts the open makes and reports.
    pub(super) repairs: BTreeSet<Cut>,
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
    pub(super) len: u64,
    /// What `verify()` sums up for each segment, head to tail.
    summaries: Vec<Summary>,
    /// Whether `verify()` finds nothing wrong: no damage and no garbage in
    /// middle segments, and the formula's count is the items' count.
    pub(super) healthy: bool,
    /// The format does not say (a segment number or ids at the end of
    /// u64): no panic, and a clear error or a queue consistent in itself.
    pub(super) unspecified: bool,
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
pub(super) fn expect_open(input: &OpenInput, dir: &Path, files: &[(String, Vec<u8>)]) -> Expect {
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

/// Any error is allowed, but it must be a clear one: not a closed handle.
fn kind_of_any(e: &Error) {
    assert!(!matches!(e, Error::Closed), "unexpected {e:?}");
    assert!(!e.to_string().is_empty());
}
