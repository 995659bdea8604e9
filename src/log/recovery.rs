//! Replay of a segment's frames on open, and the report of what was repaired.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use crate::log::format::{
    claimed_frame_len, read_frame, read_frame_checking, Frame, FrameError, MarkerType, FRAME_ALIGN,
    SEGMENT_HEADER_LEN,
};

/// What opening a queue found and mended. Empty after a clean
/// [`close`](crate::DQue::close).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::DQue::<u8>::create(dir.path().join("q")).unwrap();
/// assert!(q.open_report().is_clean());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Torn or garbage tails cut off segments (a crash in the middle of a write).
    pub repairs: Vec<Repair>,
    /// Half-written temporary files (from a crash while creating a segment or
    /// writing the config) that were removed.
    pub removed_temp_files: Vec<PathBuf>,
    /// Segments whose every record was consumed, deleted on open (a crash
    /// came between the last dequeue and the deletion).
    pub deleted_segments: Vec<PathBuf>,
}

impl OpenReport {
    /// True when the queue opened without mending anything.
    pub fn is_clean(&self) -> bool {
        self.repairs.is_empty() && self.removed_temp_files.is_empty()
    }
}

/// One torn tail cut off a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repair {
    /// The segment file.
    pub segment: PathBuf,
    /// Offset of the cut: the end of the last whole frame.
    pub offset: u64,
    /// Bytes from the cut to the last non-zero byte, now zeroed.
    pub bytes_cut: u64,
    /// Why the frame at the cut was not whole.
    pub reason: String,
    /// The copy of the segment file kept in `quarantine/` before the cut
    /// (`dque salvage` reads it).
    pub kept: Option<PathBuf>,
    /// Whether whole records followed the bad frame (damage, cut only
    /// because [`Options::cut_damaged_tail`](crate::Options::cut_damaged_tail)
    /// allowed it) rather than a torn write.
    pub damage: bool,
}

/// The frames of one segment, as replayed.
#[derive(Debug, Default)]
pub struct Replay {
    /// Offset and payload length of each record frame, in order; a record's
    /// index is its position here.
    pub records: Vec<(u32, u32)>,
    /// Which records have a marker that settles them.
    pub settled: Vec<bool>,
    /// Delivery attempts (lease markers) of each record.
    pub attempts: Vec<u16>,
    /// Whether any marker was read.
    pub has_markers: bool,
    /// How many records are settled.
    pub settled_count: usize,
    /// End of the last valid frame: the next frame goes here.
    pub end: usize,
    /// The invalid frame that stopped the replay, if it did not stop at zeros.
    pub stopped_by: Option<&'static str>,
}

impl Replay {
    /// `Corrupted` at `path` unless the replay found exactly `expected`
    /// whole records, as a sealed segment must (its successor's first id
    /// says how many).
    pub fn check_sealed(&self, path: &Path, expected: u64) -> Result<()> {
        let found = self.records.len() as u64;
        if found == expected {
            return Ok(());
        }
        Err(Error::corrupted(
            path,
            self.end,
            short_of_records(found, expected, self.stopped_by),
        ))
    }
}

/// Why a sealed segment holds `found` whole records of the `expected`.
pub fn short_of_records(found: u64, expected: u64, stopped_by: Option<&str>) -> String {
    format!(
        "sealed segment has {found} whole records of {expected}, then: {}",
        stopped_by.unwrap_or("zeros")
    )
}

/// Reads every frame of `segment` (header included in the slice) up to the
/// first one that is not whole and valid.
pub fn replay(segment: &[u8], max_records: u32) -> Replay {
    let mut replay = Replay {
        end: SEGMENT_HEADER_LEN,
        ..Replay::default()
    };
    replay.resume(segment, max_records);
    replay
}

/// Reads the frames of `published` (header included in the slice), which
/// other processes wrote whole and published, without checking their CRCs.
pub fn replay_published(published: &[u8], max_records: u32) -> Replay {
    let mut replay = Replay {
        end: SEGMENT_HEADER_LEN,
        ..Replay::default()
    };
    replay.resume_published(published, max_records);
    replay
}

impl Replay {
    /// Reads on from `end`: the frames written since this replay stopped
    /// (by another process, in shared mode), up to the first one that is not
    /// whole and valid.
    pub fn resume(&mut self, segment: &[u8], max_records: u32) {
        self.stopped_by = None;
        replay_from(self, segment, max_records, true);
    }

    /// Reads on from `end` to the end of `published`: frames other
    /// processes wrote whole under the queue's mutex and published, whose
    /// CRCs are not checked again (their writers computed them).
    pub fn resume_published(&mut self, published: &[u8], max_records: u32) {
        self.stopped_by = None;
        replay_from(self, published, max_records, false);
    }
}

fn replay_from(replay: &mut Replay, segment: &[u8], max_records: u32, check_crc: bool) {
    loop {
        let at = replay.end;
        let frame = match read_frame_checking(&segment[at..], check_crc) {
            Ok(frame) => frame,
            Err(FrameError::End) => break,
            Err(FrameError::Invalid(why)) => {
                replay.stopped_by = Some(why);
                break;
            }
        };
        match frame {
            Frame::Record { len } => {
                if replay.records.len() >= max_records as usize {
                    replay.stopped_by = Some("more records than the segment's limit");
                    break;
                }
                replay.records.push((at as u32, len as u32));
                replay.settled.push(false);
                replay.attempts.push(0);
            }
            Frame::Marker { kind, index } => {
                let index = index as usize;
                match replay.settled.get(index) {
                    Some(_) if kind == MarkerType::Reached => {}
                    Some(false) if kind == MarkerType::Release && replay.attempts[index] == 0 => {
                        replay.stopped_by = Some("release marker for a record never leased");
                        break;
                    }
                    Some(false) => {}
                    Some(true) => {
                        replay.stopped_by = Some("marker for a record already settled");
                        break;
                    }
                    None => {
                        replay.stopped_by = Some("marker names a record not before it");
                        break;
                    }
                }
                replay.has_markers = true;
                match kind {
                    MarkerType::Ack | MarkerType::Dead => {
                        replay.settled[index] = true;
                        replay.settled_count += 1;
                    }
                    MarkerType::Lease => {
                        replay.attempts[index] = replay.attempts[index].saturating_add(1)
                    }
                    MarkerType::Release => replay.attempts[index] -= 1,
                    MarkerType::Reached => {}
                }
            }
        }
        replay.end = at + frame.size();
    }
}

/// Disks write sectors whole: what a power loss leaves unwritten is whole
/// sectors of zeros (or of older bytes, which are zeros past a segment's end).
pub const SECTOR: usize = 512;

/// Judges the bytes after a segment's last whole frame (at `end`), up to
/// `garbage_end`, its last non-zero byte: `None` when they are what a torn
/// write leaves (no whole record after them, or the frame at `end` holds an
/// unwritten sector: writes that were never synced, written back out of
/// order), `Some(offset)` of the first whole, CRC-checked record found after
/// a bad frame that no power loss explains: damage, not a torn write.
pub fn damage_before_records(bytes: &[u8], end: usize, garbage_end: usize) -> Option<usize> {
    if garbage_end <= end || torn_by_power_loss(bytes, end, garbage_end) {
        return None;
    }
    whole_records_after(bytes, end, garbage_end)
        .next()
        .map(|(at, _)| at)
}

/// The whole records (offset, frame end) that start at a frame boundary
/// after the bad frame at `end` and before `garbage_end`, the last non-zero
/// byte. A record may end past that byte: its payload's last bytes and its
/// padding can be zeros.
fn whole_records_after(
    bytes: &[u8],
    end: usize,
    garbage_end: usize,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    ((end + FRAME_ALIGN).next_multiple_of(FRAME_ALIGN)..garbage_end)
        .step_by(FRAME_ALIGN)
        .filter_map(move |at| match read_frame(&bytes[at..]) {
            Ok(frame @ Frame::Record { .. }) => Some((at, at + frame.size())),
            _ => None,
        })
}

/// How much of a segment a cut at `end` must keep in its copy so that
/// every byte it cuts, and every whole record after it, is in the copy:
/// up to the last non-zero byte (`garbage_end`) or the end of the last
/// whole record after `end`, whichever is later, at a frame boundary.
pub fn kept_end(bytes: &[u8], end: usize, garbage_end: usize) -> usize {
    let records_end = whole_records_after(bytes, end, garbage_end)
        .map(|(_, frame_end)| frame_end)
        .max()
        .unwrap_or(0);
    garbage_end
        .max(records_end)
        .next_multiple_of(FRAME_ALIGN)
        .min(bytes.len())
}

/// Why an open refuses a segment whose bad frame (`why`) is followed by a
/// whole record at `record_at`.
pub fn damaged_tail(why: Option<&str>, record_at: usize) -> String {
    format!(
        "{} followed by whole records (the first at byte {record_at}): damage, not a torn \
         write, and nothing was changed; `dque salvage` reads the records, `dque repair` or \
         Options::cut_damaged_tail(true) cuts them off, keeping a copy in quarantine/",
        why.unwrap_or("zeros")
    )
}

/// Whether the bad frame at `at` (up to `garbage_end`) is one a power loss
/// can leave: its head unwritten (zeros), or a later sector of the bytes its
/// head claims unwritten. A bit flipped in a synced frame leaves neither.
fn torn_by_power_loss(bytes: &[u8], at: usize, garbage_end: usize) -> bool {
    let Some(head) = bytes.get(at..at + 4) else {
        return true;
    };
    let head = u32::from_le_bytes(head.try_into().expect("4 bytes"));
    if head == 0 {
        return true;
    }
    let frame_end = (at + claimed_frame_len(head)).min(garbage_end);
    // The sector holding the head was written; look at the ones after it.
    let mut sector = (at / SECTOR + 1) * SECTOR;
    while sector < frame_end {
        let unwritten = &bytes[sector..(sector + SECTOR).min(frame_end)];
        if unwritten.iter().all(|&b| b == 0) {
            return true;
        }
        sector += SECTOR;
    }
    false
}

/// Offset just past the last non-zero byte of `bytes`, or 0 if all are zero.
pub fn nonzero_len(bytes: &[u8]) -> usize {
    // Word-sized steps: tails are mostly zeros and can be megabytes long.
    let words = bytes.len() / 8;
    for (i, chunk) in bytes[words * 8..].iter().enumerate().rev() {
        if *chunk != 0 {
            return words * 8 + i + 1;
        }
    }
    for w in (0..words).rev() {
        let word = u64::from_ne_bytes(bytes[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        if word != 0 {
            let last = bytes[w * 8..w * 8 + 8]
                .iter()
                .rposition(|&b| b != 0)
                .expect("nonzero");
            return w * 8 + last + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::{marker, record_frame_len, record_prefix, MarkerType};

    fn segment(frames: &[&[u8]]) -> Vec<u8> {
        let mut bytes = vec![0u8; SEGMENT_HEADER_LEN];
        for f in frames {
            bytes.extend_from_slice(f);
        }
        bytes.extend_from_slice(&[0; 64]);
        bytes
    }

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut f = record_prefix(payload).to_vec();
        f.extend_from_slice(payload);
        f.resize(record_frame_len(payload.len()), 0);
        f
    }

    #[test]
    fn replays_records_and_out_of_order_markers() {
        let a = record(b"a");
        let b = record(b"bb");
        let bytes = segment(&[
            &a,
            &b,
            &marker(MarkerType::Ack, 1),
            &marker(MarkerType::Ack, 0),
        ]);
        let r = replay(&bytes, 10);
        assert_eq!(r.records, vec![(40, 1), (52, 2)]);
        assert_eq!(r.settled, vec![true, true]);
        assert_eq!(r.end, 40 + 12 + 12 + 8);
        assert_eq!(r.stopped_by, None);
    }

    #[test]
    fn a_marker_for_an_unknown_or_settled_record_stops_the_replay() {
        let a = record(b"a");
        let bytes = segment(&[&a, &marker(MarkerType::Ack, 3)]);
        assert!(replay(&bytes, 10).stopped_by.is_some());
        let bytes = segment(&[&a, &marker(MarkerType::Ack, 0), &marker(MarkerType::Ack, 0)]);
        let r = replay(&bytes, 10);
        assert_eq!(r.stopped_by, Some("marker for a record already settled"));
        assert_eq!(r.end, 40 + 12 + 4);
    }

    #[test]
    fn nonzero_len_finds_the_last_nonzero_byte() {
        let mut bytes = vec![0u8; 100];
        assert_eq!(nonzero_len(&bytes), 0);
        bytes[3] = 1;
        assert_eq!(nonzero_len(&bytes), 4);
        bytes[97] = 1;
        assert_eq!(nonzero_len(&bytes), 98);
        bytes[99] = 1;
        assert_eq!(nonzero_len(&bytes), 100);
    }
}
