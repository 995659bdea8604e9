//! Bytes on disk: segment header, frames (records and markers), config.
//!
//! `FORMAT.md` at the repository root is the specification; this module is
//! its one implementation. Everything is little-endian.

/// Format version written into every segment header (and into a config
/// that stores nothing beyond version 1's fields).
pub const FORMAT_VERSION: u32 = 1;
/// Version of a config that stores what version 1 had no room for: the
/// item type, the schema version, `max_attempts`, the visibility timeout.
pub const CONFIG_VERSION: u32 = 2;

/// Magic bytes opening every segment file ("dque segment").
pub const SEGMENT_MAGIC: [u8; 4] = *b"DQSG";
/// Magic bytes opening the config file ("dque config").
pub const CONFIG_MAGIC: [u8; 4] = *b"DQCF";

/// Size of the segment header; the first frame starts here.
pub const SEGMENT_HEADER_LEN: usize = 40;
/// Size of a version-1 config file.
pub const CONFIG_LEN: usize = 28;
/// Size of a version-2 config file before the type name and the CRC.
const CONFIG_V2_FIXED: usize = 40;
/// Longest item type name a config stores.
pub const MAX_TYPE_NAME: usize = 4096;
/// Bytes before a record's payload: head word and CRC.
pub const RECORD_OVERHEAD: usize = 8;
/// Every frame starts at a multiple of this, so a 4-byte marker never
/// straddles two disk sectors and cannot be torn into another valid marker.
pub const FRAME_ALIGN: usize = 4;
/// Size of a marker frame.
pub const MARKER_LEN: usize = 4;

/// Largest payload a record can carry (the head word keeps 30 bits of length).
pub const MAX_RECORD_PAYLOAD: u32 = (1 << 30) - 1;
/// Most records one segment can hold (a marker keeps 24 bits of index).
pub const MAX_SEGMENT_RECORDS: u32 = (1 << 24) - 1;

const KIND_SHIFT: u32 = 30;
const KIND_MARKER: u32 = 0b01;
const KIND_RECORD: u32 = 0b10;
const MARKER_TYPE_SHIFT: u32 = 24;
const MARKER_TYPE_MASK: u32 = 0x3F;
const MARKER_INDEX_MASK: u32 = 0x00FF_FFFF;
const RECORD_LEN_MASK: u32 = (1 << 30) - 1;

/// What a marker says about the record it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerType {
    /// The record was consumed (dequeued or acked); it is settled.
    Ack = 1,
    /// A delivery attempt of the record began (it was leased); counts attempts.
    Lease = 2,
    /// The record was moved to the dead letters; it is settled here.
    Dead = 3,
    /// Changes no record: deliveries reached this segment (written, once,
    /// when a later segment gets a marker first, so that the segments with
    /// markers always form a run from the head, which open replays).
    Reached = 4,
    /// The record's last lease was given back unused: that attempt does not
    /// count (follows a lease marker of the record).
    Release = 5,
}

impl MarkerType {
    /// Whether the marker ends the record's life in this queue.
    pub fn settles(self) -> bool {
        match self {
            MarkerType::Ack | MarkerType::Dead => true,
            MarkerType::Lease | MarkerType::Release | MarkerType::Reached => false,
        }
    }
}

/// The fixed header of a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Position of the segment in the queue, counting from 1.
    pub number: u64,
    /// Id of the segment's first record; ids count records since creation.
    pub first_id: u64,
    /// Records this segment accepts before it is full.
    pub max_records: u32,
    /// Record bytes (frames included) this segment accepts after its header
    /// before it is full; its first record is accepted whatever its size.
    pub max_bytes: u32,
}

/// Why a header or config could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Too short, wrong magic or bad CRC.
    Invalid(&'static str),
    /// A version this build does not read.
    Version(u32),
}

impl SegmentHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..4].copy_from_slice(&SEGMENT_MAGIC);
        b[4..8].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.number.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_id.to_le_bytes());
        b[24..28].copy_from_slice(&self.max_records.to_le_bytes());
        b[28..32].copy_from_slice(&self.max_bytes.to_le_bytes());
        // 32..36 reserved, zero.
        let crc = crc32fast::hash(&b[0..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a header from the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
        let b = bytes.get(..SEGMENT_HEADER_LEN).ok_or(HeaderError::Invalid(
            "file is shorter than a segment header",
        ))?;
        if b[0..4] != SEGMENT_MAGIC {
            return Err(HeaderError::Invalid("no segment magic bytes"));
        }
        // The version comes before the CRC: a newer format may lay out the rest differently.
        let version = le_u32(b, 4);
        if version != FORMAT_VERSION {
            return Err(HeaderError::Version(version));
        }
        if le_u32(b, 36) != crc32fast::hash(&b[0..36]) {
            return Err(HeaderError::Invalid("segment header CRC does not match"));
        }
        let header = SegmentHeader {
            number: le_u64(b, 8),
            first_id: le_u64(b, 16),
            max_records: le_u32(b, 24),
            max_bytes: le_u32(b, 28),
        };
        if header.max_records == 0 || header.max_records > MAX_SEGMENT_RECORDS {
            return Err(HeaderError::Invalid("segment record limit out of range"));
        }
        // Room for a successor and for every id of this segment: a hostile
        // header must not make the queue's arithmetic overflow.
        if header.number == u64::MAX {
            return Err(HeaderError::Invalid(
                "segment number leaves no room for a successor",
            ));
        }
        if header
            .first_id
            .checked_add(u64::from(header.max_records))
            .is_none()
        {
            return Err(HeaderError::Invalid(
                "first id leaves no room for the segment's records",
            ));
        }
        Ok(header)
    }
}

/// The queue's config file: what every later open must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Record limit of segments created from now on.
    pub segment_records: u32,
    /// Byte limit of segments created from now on.
    pub segment_bytes: u32,
    /// Id of the codec items are encoded with.
    pub codec_id: u32,
    /// Delivery attempts an item gets, if stored (version 2).
    pub max_attempts: Option<u16>,
    /// How long a lease holds an item, in nanoseconds, if stored (version 2).
    pub visibility_timeout_nanos: Option<u64>,
    /// What the queue's items are, if recorded at its creation (version 2).
    pub item_type: Option<ItemType>,
}

/// The item type a typed queue was created for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemType {
    /// `std::any::type_name` of the item type.
    pub name: String,
    /// The caller's schema version, if one was set.
    pub schema: Option<u32>,
}

const STORES_ATTEMPTS: u32 = 1;
const STORES_TIMEOUT: u32 = 2;
const STORES_TYPE: u32 = 4;
const STORES_SCHEMA: u32 = 8;

impl Config {
    /// The config file's bytes: version 1 when it stores nothing more
    /// (so a queue that never set a new field stays readable by older
    /// builds), else version 2.
    pub fn encode(&self) -> Vec<u8> {
        let v2 = self.max_attempts.is_some()
            || self.visibility_timeout_nanos.is_some()
            || self.item_type.is_some();
        let mut b = Vec::with_capacity(CONFIG_LEN);
        b.extend_from_slice(&CONFIG_MAGIC);
        let version = if v2 { CONFIG_VERSION } else { FORMAT_VERSION };
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&self.segment_records.to_le_bytes());
        b.extend_from_slice(&self.segment_bytes.to_le_bytes());
        b.extend_from_slice(&self.codec_id.to_le_bytes());
        if !v2 {
            // 20..24 reserved, zero.
            b.extend_from_slice(&[0; 4]);
        } else {
            let mut flags = 0;
            let name = self.item_type.as_ref().map_or("", |t| {
                flags |= STORES_TYPE;
                if t.schema.is_some() {
                    flags |= STORES_SCHEMA;
                }
                // Cut on a char boundary: a name is compared, never parsed.
                let mut len = t.name.len().min(MAX_TYPE_NAME);
                while !t.name.is_char_boundary(len) {
                    len -= 1;
                }
                &t.name[..len]
            });
            if self.max_attempts.is_some() {
                flags |= STORES_ATTEMPTS;
            }
            if self.visibility_timeout_nanos.is_some() {
                flags |= STORES_TIMEOUT;
            }
            b.extend_from_slice(&flags.to_le_bytes());
            b.extend_from_slice(&self.max_attempts.unwrap_or(0).to_le_bytes());
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(&self.visibility_timeout_nanos.unwrap_or(0).to_le_bytes());
            let schema = self.item_type.as_ref().and_then(|t| t.schema);
            b.extend_from_slice(&schema.unwrap_or(0).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a config file's bytes (version 1 or 2).
    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        if b.len() < 8 || b[0..4] != CONFIG_MAGIC {
            return Err(HeaderError::Invalid("no config magic bytes"));
        }
        let version = le_u32(b, 4);
        if version != FORMAT_VERSION && version != CONFIG_VERSION {
            return Err(HeaderError::Version(version));
        }
        let len = if version == FORMAT_VERSION {
            CONFIG_LEN
        } else if b.len() >= CONFIG_V2_FIXED {
            CONFIG_V2_FIXED + usize::from(le_u16(b, 26)) + 4
        } else {
            return Err(HeaderError::Invalid("config file has the wrong size"));
        };
        if b.len() != len {
            return Err(HeaderError::Invalid("config file has the wrong size"));
        }
        if le_u32(b, len - 4) != crc32fast::hash(&b[0..len - 4]) {
            return Err(HeaderError::Invalid("config CRC does not match"));
        }
        let mut config = Config {
            segment_records: le_u32(b, 8),
            segment_bytes: le_u32(b, 12),
            codec_id: le_u32(b, 16),
            max_attempts: None,
            visibility_timeout_nanos: None,
            item_type: None,
        };
        if config.segment_records == 0 || config.segment_records > MAX_SEGMENT_RECORDS {
            return Err(HeaderError::Invalid("segment record limit out of range"));
        }
        if version == CONFIG_VERSION {
            let flags = le_u32(b, 20);
            let known = STORES_ATTEMPTS | STORES_TIMEOUT | STORES_TYPE | STORES_SCHEMA;
            if flags & !known != 0 || (flags & STORES_SCHEMA != 0 && flags & STORES_TYPE == 0) {
                return Err(HeaderError::Invalid("config flags unknown"));
            }
            let name = &b[CONFIG_V2_FIXED..len - 4];
            if flags & STORES_TYPE == 0 && !name.is_empty() {
                return Err(HeaderError::Invalid(
                    "config has a type name it does not store",
                ));
            }
            if flags & STORES_ATTEMPTS != 0 {
                let attempts = le_u16(b, 24);
                if attempts == 0 {
                    return Err(HeaderError::Invalid("config max attempts is zero"));
                }
                config.max_attempts = Some(attempts);
            }
            if flags & STORES_TIMEOUT != 0 {
                let nanos = u64::from(le_u32(b, 28)) | (u64::from(le_u32(b, 32)) << 32);
                if nanos == 0 {
                    return Err(HeaderError::Invalid("config visibility timeout is zero"));
                }
                config.visibility_timeout_nanos = Some(nanos);
            }
            if flags & STORES_TYPE != 0 {
                let name = std::str::from_utf8(name)
                    .map_err(|_| HeaderError::Invalid("config type name is not UTF-8"))?;
                config.item_type = Some(ItemType {
                    name: name.to_string(),
                    schema: (flags & STORES_SCHEMA != 0).then(|| le_u32(b, 36)),
                });
            }
        }
        Ok(config)
    }
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// One frame read from a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// An item: its payload sits at `offset + RECORD_OVERHEAD`, `len` bytes.
    Record {
        /// Payload length.
        len: usize,
    },
    /// A note about record `index` of the same segment.
    Marker {
        /// What happened to the record.
        kind: MarkerType,
        /// Index of the record within its segment.
        index: u32,
    },
}

impl Frame {
    /// Bytes the frame takes in the segment, padding included.
    pub fn size(&self) -> usize {
        match self {
            Frame::Record { len } => record_frame_len(*len),
            Frame::Marker { .. } => MARKER_LEN,
        }
    }
}

/// Bytes a record frame with a payload of `payload_len` bytes takes: head
/// word, CRC, payload, and zero padding up to the next multiple of 4.
pub fn record_frame_len(payload_len: usize) -> usize {
    (RECORD_OVERHEAD + payload_len).next_multiple_of(FRAME_ALIGN)
}

/// Bytes a frame with head word `head` says it takes, valid or not: a
/// record's whole frame, or a marker's four bytes.
pub fn claimed_frame_len(head: u32) -> usize {
    match head >> KIND_SHIFT {
        KIND_RECORD => record_frame_len((head & RECORD_LEN_MASK) as usize),
        _ => MARKER_LEN,
    }
}

/// Why no frame could be read at an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Zero bytes (never written) or the end of the file: the clean end.
    End,
    /// Bytes that are not a whole, valid frame.
    Invalid(&'static str),
}

/// Reads the frame starting at `bytes[0]`.
///
/// Checks everything a frame carries itself (kind, length, CRC); whether a
/// marker names a real record is the caller's to check.
pub fn read_frame(bytes: &[u8]) -> Result<Frame, FrameError> {
    read_frame_checking(bytes, true)
}

/// [`read_frame`], checking a record's CRC only if `check_crc`: frames
/// another process published under the queue's mutex were whole when it
/// wrote them, and their CRC was checked by whoever wrote them.
pub fn read_frame_checking(bytes: &[u8], check_crc: bool) -> Result<Frame, FrameError> {
    let Some(word) = bytes.get(..4) else {
        return if bytes.iter().all(|&b| b == 0) {
            Err(FrameError::End)
        } else {
            Err(FrameError::Invalid("partial frame at the end of the file"))
        };
    };
    let word = u32::from_le_bytes(word.try_into().expect("4 bytes"));
    if word == 0 {
        return Err(FrameError::End);
    }
    match word >> KIND_SHIFT {
        KIND_RECORD => {
            let len = (word & RECORD_LEN_MASK) as usize;
            let frame = bytes
                .get(..record_frame_len(len))
                .ok_or(FrameError::Invalid("record runs past the end of the file"))?;
            let (payload, padding) = frame[RECORD_OVERHEAD..].split_at(len);
            if check_crc && le_u32(frame, 4) != record_crc(&frame[..4], payload) {
                return Err(FrameError::Invalid("record CRC does not match"));
            }
            if padding.iter().any(|&b| b != 0) {
                return Err(FrameError::Invalid("record padding is not zero"));
            }
            Ok(Frame::Record { len })
        }
        KIND_MARKER => {
            let kind = match (word >> MARKER_TYPE_SHIFT) & MARKER_TYPE_MASK {
                1 => MarkerType::Ack,
                2 => MarkerType::Lease,
                3 => MarkerType::Dead,
                4 => MarkerType::Reached,
                5 => MarkerType::Release,
                _ => return Err(FrameError::Invalid("unknown marker type")),
            };
            Ok(Frame::Marker {
                kind,
                index: word & MARKER_INDEX_MASK,
            })
        }
        _ => Err(FrameError::Invalid("unknown frame kind")),
    }
}

/// Head word and CRC of a record frame for `payload`, to be written right
/// before it (and zero padding after it, see [`record_frame_len`]).
pub fn record_prefix(payload: &[u8]) -> [u8; RECORD_OVERHEAD] {
    debug_assert!(payload.len() <= MAX_RECORD_PAYLOAD as usize);
    let word = ((KIND_RECORD << KIND_SHIFT) | payload.len() as u32).to_le_bytes();
    let mut prefix = [0u8; RECORD_OVERHEAD];
    prefix[..4].copy_from_slice(&word);
    prefix[4..].copy_from_slice(&record_crc(&word, payload).to_le_bytes());
    prefix
}

/// The bytes of a marker frame; never all zero.
pub fn marker(kind: MarkerType, index: u32) -> [u8; MARKER_LEN] {
    debug_assert!(index <= MARKER_INDEX_MASK);
    ((KIND_MARKER << KIND_SHIFT) | ((kind as u32) << MARKER_TYPE_SHIFT) | index).to_le_bytes()
}

fn record_crc(word: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(word);
    hasher.update(payload);
    hasher.finalize()
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_detects_a_flipped_bit() {
        let payload = b"hello";
        let mut frame = record_prefix(payload).to_vec();
        frame.extend_from_slice(payload);
        frame.resize(record_frame_len(payload.len()), 0);
        assert_eq!(frame.len(), 16);
        assert_eq!(read_frame(&frame), Ok(Frame::Record { len: 5 }));
        assert!(
            read_frame(&frame[..13]).is_err(),
            "padding is part of the frame"
        );
        for bit in 0..frame.len() * 8 {
            let mut bad = frame.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(read_frame(&bad), Ok(Frame::Record { len: 5 }), "bit {bit}");
        }
    }

    #[test]
    fn zeros_are_the_end_never_a_marker() {
        assert_eq!(read_frame(&[0; 16]), Err(FrameError::End));
        assert_eq!(read_frame(&[0; 3]), Err(FrameError::End));
        assert_ne!(marker(MarkerType::Ack, 0), [0; 4]);
        assert_eq!(
            read_frame(&marker(MarkerType::Ack, 77)),
            Ok(Frame::Marker {
                kind: MarkerType::Ack,
                index: 77
            })
        );
    }

    #[test]
    fn header_and_config_round_trip() {
        let h = SegmentHeader {
            number: 3,
            first_id: 99,
            max_records: 10,
            max_bytes: 4096,
        };
        assert_eq!(SegmentHeader::decode(&h.encode()), Ok(h));
        let mut newer = h.encode();
        newer[4] = 2;
        assert_eq!(SegmentHeader::decode(&newer), Err(HeaderError::Version(2)));
        let c = Config {
            segment_records: 5,
            segment_bytes: 1 << 20,
            codec_id: 1,
            max_attempts: None,
            visibility_timeout_nanos: None,
            item_type: None,
        };
        assert_eq!(
            c.encode().len(),
            CONFIG_LEN,
            "nothing new stored: version 1"
        );
        assert_eq!(Config::decode(&c.encode()), Ok(c.clone()));
        assert!(Config::decode(&c.encode()[..10]).is_err());
        let v2 = Config {
            max_attempts: Some(3),
            visibility_timeout_nanos: Some(u64::MAX - 7),
            item_type: Some(ItemType {
                name: "app::Job<é>".into(),
                schema: Some(4),
            }),
            ..c.clone()
        };
        let bytes = v2.encode();
        assert_eq!(le_u32(&bytes, 4), CONFIG_VERSION);
        assert_eq!(Config::decode(&bytes), Ok(v2.clone()));
        assert!(Config::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut flipped = bytes.clone();
        flipped[41] ^= 1;
        assert!(Config::decode(&flipped).is_err());
        let unnamed = Config {
            item_type: None,
            ..v2
        };
        assert_eq!(Config::decode(&unnamed.encode()), Ok(unnamed));
        let mut newer = c.encode();
        newer[4] = 3;
        assert_eq!(Config::decode(&newer), Err(HeaderError::Version(3)));
    }
}
