//! Reading what can still be read from a damaged segment file, such as one
//! [`repair`](crate::repair) moved into `quarantine/`: [`salvage`].

use std::path::Path;

use crate::error::{Error, Result};
use crate::log::format::{read_frame, Frame, SegmentHeader, RECORD_OVERHEAD, SEGMENT_HEADER_LEN};
use crate::log::recovery::{nonzero_len, replay};
use crate::log::verify::{read_bounded, ReadError};

/// The records [`salvage`] found in a segment file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Salvage {
    /// Number and first id from the header, if the header reads.
    pub header: Option<(u64, u64)>,
    /// Every whole record found, in file order.
    pub records: Vec<SalvagedRecord>,
    /// Where the frames stopped being valid, if they did before the clean end.
    pub damaged_at: Option<u64>,
}

/// One record [`salvage`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvagedRecord {
    /// Offset of its frame in the file.
    pub offset: u64,
    /// Its id, when the header reads and no damage came before it.
    pub id: Option<u64>,
    /// Whether an ack or dead marker settles it: `None` after the damage,
    /// where markers can no longer be matched to records.
    pub settled: Option<bool>,
    /// The item's bytes as stored.
    pub payload: Vec<u8>,
}

impl SalvagedRecord {
    /// Whether the record may still be pending: not known to be settled.
    pub fn maybe_pending(&self) -> bool {
        self.settled != Some(true)
    }
}

/// Reads every whole record of the segment file at `path`, also past damage.
///
/// Before the first invalid frame, records are read as an open reads them,
/// with their ids and markers. After it, the file is searched at every
/// 4-byte boundary for frames that are whole records with a matching CRC;
/// their ids and acks are unknown (records between may be lost). Nothing
/// is written.
///
/// ```
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::RawQueue::create(dir.path().join("q"))?;
/// for item in [&b"one"[..], b"two", b"three"] {
///     q.enqueue_bytes(item)?;
/// }
/// q.close()?;
/// let segment = dir.path().join("q").join(format!("{:020}.seg", 1));
/// let mut bytes = std::fs::read(&segment).unwrap();
/// bytes[40 + 9] ^= 0xFF; // the first record's payload
/// std::fs::write(&segment, bytes).unwrap();
///
/// let found = dque::salvage(&segment)?;
/// assert_eq!(found.damaged_at, Some(40));
/// let items: Vec<&[u8]> = found.records.iter().map(|r| &r.payload[..]).collect();
/// assert_eq!(items, [&b"two"[..], b"three"]);
/// assert_eq!(found.records[0].id, None, "ids are unknown past the damage");
/// # Ok(()) }
/// ```
pub fn salvage(path: impl AsRef<Path>) -> Result<Salvage> {
    let path = path.as_ref();
    let bytes = read_bounded(path).map_err(|e| match e {
        ReadError::Gone => Error::io(path, std::io::ErrorKind::NotFound.into()),
        ReadError::Other(reason) => Error::io(path, std::io::Error::other(reason)),
    })?;
    let header = SegmentHeader::decode(&bytes).ok();
    let mut salvage = Salvage {
        header: header.map(|h| (h.number, h.first_id)),
        ..Salvage::default()
    };
    if bytes.len() < SEGMENT_HEADER_LEN {
        return Ok(salvage);
    }
    // Without a header the record limit is unknown: no limit.
    let limit = header.map_or(u32::MAX, |h| h.max_records);
    let replayed = replay(&bytes, limit);
    for (index, &(at, len)) in replayed.records.iter().enumerate() {
        salvage.records.push(SalvagedRecord {
            offset: u64::from(at),
            id: header.map(|h| h.first_id + index as u64),
            settled: Some(replayed.settled[index]),
            payload: payload(&bytes, at as usize, len as usize).to_vec(),
        });
    }
    // Zeros with bytes after them may be a zeroed sector, not the end.
    if replayed.stopped_by.is_none() && nonzero_len(&bytes[replayed.end..]) == 0 {
        return Ok(salvage);
    }
    salvage.damaged_at = Some(replayed.end as u64);
    let mut at = replayed.end + 4;
    while at + RECORD_OVERHEAD <= bytes.len() {
        match read_frame(&bytes[at..]) {
            Ok(frame @ Frame::Record { len }) => {
                salvage.records.push(SalvagedRecord {
                    offset: at as u64,
                    id: None,
                    settled: None,
                    payload: payload(&bytes, at, len).to_vec(),
                });
                at += frame.size();
            }
            // Markers past the damage name records by an index that may
            // have shifted; zeros and garbage are stepped over.
            _ => at += 4,
        }
    }
    Ok(salvage)
}

fn payload(bytes: &[u8], frame_at: usize, len: usize) -> &[u8] {
    let start = frame_at + RECORD_OVERHEAD;
    &bytes[start..start + len]
}
