//! The format, as FORMAT.md states it (written from the text, not the
//! code): names, lengths, frames, and the judgments of the recovery rules.
//! Shared by every target.

use dque::FORMAT_VERSION;

pub(super) const CONFIG_FILE: &str = "dque.conf";
pub(super) const LOCK_FILE: &str = "dque.lock";
pub(super) const CONFIG_TEMP: &str = "dque.conf.tmp";
pub(super) const QUARANTINE_DIR: &str = "quarantine";
const CONFIG_LEN: usize = 28;
/// The config's version when it stores more than version 1 had room for.
const CONFIG_VERSION: u32 = 2;
pub(super) const HEADER_LEN: usize = 40;
pub(super) const RECORD_OVERHEAD: usize = 8;
const MAX_SEGMENT_RECORDS: u32 = (1 << 24) - 1;
pub(super) const RECORD_LEN_MASK: u32 = (1 << 30) - 1;
/// Marker types (bits 24..30 of a marker's head word).
pub(super) const ACK: u32 = 1;
pub(super) const LEASE: u32 = 2;
pub(super) const DEAD: u32 = 3;
pub(super) const REACHED: u32 = 4;
pub(super) const RELEASE: u32 = 5;
pub(super) const ACK_MARKER: u32 = marker_word(ACK, 0);

/// The head word of a marker of `kind` naming record `index`.
pub(super) const fn marker_word(kind: u32, index: u32) -> u32 {
    (0b01 << 30) | ((kind & 0x3F) << 24) | (index & 0x00FF_FFFF)
}
/// Segment limits of a queue created without sizes (documented on `Options`).
pub(super) const DEFAULT_SEGMENT_ITEMS: u32 = 100_000;
pub(super) const DEFAULT_SEGMENT_BYTES: u32 = 64 << 20;
/// The codec id of [`RawQueue`].
pub(super) const RAW_CODEC: u32 = 0;

/// CRC-32 (IEEE), the polynomial FORMAT.md names.
pub(super) fn crc32(parts: &[&[u8]]) -> u32 {
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

pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(super) fn segment_name(number: u64) -> String {
    format!("{number:020}.seg")
}

/// The bytes of a version-1 config file.
pub(super) fn config_bytes(records: u32, bytes: u32, codec: u32) -> Vec<u8> {
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
pub(super) fn header_bytes(
    number: u64,
    first_id: u64,
    max_records: u32,
    max_bytes: u32,
) -> Vec<u8> {
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
pub(super) fn record_frame(payload: &[u8]) -> Vec<u8> {
    let word = (0x8000_0000 | payload.len() as u32).to_le_bytes();
    let mut f = word.to_vec();
    f.extend_from_slice(&crc32(&[&word, payload]).to_le_bytes());
    f.extend_from_slice(payload);
    f.resize((RECORD_OVERHEAD + payload.len()).next_multiple_of(4), 0);
    f
}

/// What a config file says, per FORMAT.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConfigVerdict {
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

pub(super) fn judge_config(b: &[u8]) -> ConfigVerdict {
    if b.len() < 8 || &b[..4] != b"DQCF" {
        return ConfigVerdict::Invalid;
    }
    let version = le_u32(b, 4);
    if version == CONFIG_VERSION {
        return judge_config_v2(b);
    }
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

/// Version 2 of the config (FORMAT.md, "Config"): version 1's fields, flags,
/// max attempts, name length, visibility timeout, schema, the type name,
/// then the CRC of everything before it.
fn judge_config_v2(b: &[u8]) -> ConfigVerdict {
    const FIXED: usize = 40;
    if b.len() < FIXED {
        return ConfigVerdict::Invalid;
    }
    let name_len = usize::from(u16::from_le_bytes([b[26], b[27]]));
    let len = FIXED + name_len + 4;
    if b.len() != len || le_u32(b, len - 4) != crc32(&[&b[..len - 4]]) {
        return ConfigVerdict::Invalid;
    }
    let flags = le_u32(b, 20);
    let records = le_u32(b, 8);
    let valid = flags & !15 == 0
        && (flags & 8 == 0 || flags & 4 != 0)
        && (flags & 4 != 0 || name_len == 0)
        && (flags & 1 == 0 || u16::from_le_bytes([b[24], b[25]]) != 0)
        && (flags & 2 == 0 || le_u64(b, 28) != 0)
        && (flags & 4 == 0 || std::str::from_utf8(&b[FIXED..len - 4]).is_ok())
        && records != 0
        && records <= MAX_SEGMENT_RECORDS;
    if !valid {
        return ConfigVerdict::Invalid;
    }
    ConfigVerdict::Valid {
        records,
        bytes: le_u32(b, 12),
        codec: le_u32(b, 16),
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub(super) first_id: u64,
    pub(super) max_records: u32,
}

#[derive(Debug)]
pub(super) enum HeaderVerdict {
    Valid(Header),
    Corrupted,
    Version,
}

pub(super) fn judge_header(b: &[u8], number: u64) -> HeaderVerdict {
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
pub(super) struct Replayed {
    /// Payload range of each whole record, in order.
    pub(super) records: Vec<(usize, usize)>,
    pub(super) settled: Vec<bool>,
    /// Delivery attempts of each record: its lease markers less its release markers.
    pub(super) attempts: Vec<u16>,
    /// Whether any valid marker was read (the segment is in the front run).
    pub(super) has_markers: bool,
    /// End of the last valid frame.
    pub(super) end: usize,
    /// End of the last non-zero byte at or after `end` (the cut, if any).
    pub(super) garbage_end: usize,
}

impl Replayed {
    pub(super) fn unsettled<'a>(&'a self, file: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
        self.records
            .iter()
            .zip(&self.settled)
            .filter(|(_, &settled)| !settled)
            .map(|(&(at, len), _)| file[at..at + len].to_vec())
    }

    pub(super) fn unsettled_count(&self) -> usize {
        self.settled.iter().filter(|&&s| !s).count()
    }

    /// The payload of record `k`.
    pub(super) fn payload(&self, file: &[u8], k: usize) -> Vec<u8> {
        let (at, len) = self.records[k];
        file[at..at + len].to_vec()
    }
}

/// Replays frames from the end of the header: records (whole, CRC and zero
/// padding right, under the record limit) and markers of a known type (ack,
/// lease, dead, reached, release) naming an earlier record, not yet settled
/// unless the marker is `reached` (a `release` only while the record has a
/// lease not yet released), up to a zero word or the first invalid frame.
pub(super) fn replay(file: &[u8], max_records: u32) -> Replayed {
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
pub(super) const SECTOR: usize = 512;

/// What FORMAT.md's "Tail damage" makes of the bytes after a segment's last
/// whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TailVerdict {
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
pub(super) fn judge_tail(file: &[u8], end: usize, garbage_end: usize) -> TailVerdict {
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
