//! `dque::salvage`: what can still be read from a damaged segment file.

use std::fs;
use std::path::{Path, PathBuf};

use dque::{salvage, Options, RawQueue};

/// A raw queue of one segment holding `items`, the first `acked` of them
/// dequeued; returns the segment file.
fn segment_with(dir: &Path, items: &[&[u8]], acked: usize) -> PathBuf {
    let path = dir.join("q");
    let q = RawQueue::create_with(&path, &Options::new().segment_items(1_000)).unwrap();
    for item in items {
        q.enqueue_bytes(item).unwrap();
    }
    for _ in 0..acked {
        q.dequeue().unwrap();
    }
    q.close().unwrap();
    path.join(format!("{:020}.seg", 1))
}

fn payloads(found: &dque::Salvage) -> Vec<&[u8]> {
    found.records.iter().map(|r| &r.payload[..]).collect()
}

/// Frame offsets of a segment's records, from a salvage of the sound file.
fn offsets(segment: &Path) -> Vec<usize> {
    let found = salvage(segment).unwrap();
    found.records.iter().map(|r| r.offset as usize).collect()
}

#[test]
fn a_sound_segment_gives_every_record_with_its_id_and_ack() {
    // Pins: before any damage, records keep their ids and ack state.
    let dir = tempfile::tempdir().unwrap();
    let file = segment_with(dir.path(), &[b"a", b"bb", b"ccc"], 1);
    let found = salvage(&file).unwrap();
    assert_eq!(found.header, Some((1, 0)));
    assert_eq!(found.damaged_at, None);
    assert_eq!(payloads(&found), [&b"a"[..], b"bb", b"ccc"]);
    let ids: Vec<_> = found.records.iter().map(|r| r.id).collect();
    assert_eq!(ids, [Some(0), Some(1), Some(2)]);
    let settled: Vec<_> = found.records.iter().map(|r| r.settled).collect();
    assert_eq!(settled, [Some(true), Some(false), Some(false)]);
    assert!(!found.records[0].maybe_pending());
    assert!(found.records[1].maybe_pending());
}

#[test]
fn records_after_a_damaged_one_are_found_without_ids() {
    // Pins: a flipped byte in a middle record loses that record only; the
    // ones after it are found by their CRC, with ids and acks unknown.
    let dir = tempfile::tempdir().unwrap();
    let items: [&[u8]; 5] = [b"one", b"two", b"three", b"four", b"five"];
    let file = segment_with(dir.path(), &items, 0);
    let at = offsets(&file);
    let mut bytes = fs::read(&file).unwrap();
    bytes[at[2] + 9] ^= 0x40; // inside "three"
    fs::write(&file, &bytes).unwrap();

    let found = salvage(&file).unwrap();
    assert_eq!(found.damaged_at, Some(at[2] as u64));
    assert_eq!(payloads(&found), [&b"one"[..], b"two", b"four", b"five"]);
    assert_eq!(found.records[1].id, Some(1));
    assert_eq!(found.records[2].id, None);
    assert_eq!(found.records[2].settled, None);
    assert_eq!(found.records[2].offset, at[3] as u64);
}

#[test]
fn records_after_a_zeroed_range_are_found() {
    // Pins: zeros are not the end when bytes follow them (a zeroed sector).
    let dir = tempfile::tempdir().unwrap();
    let items: [&[u8]; 4] = [b"w", b"x", b"y", b"z"];
    let file = segment_with(dir.path(), &items, 0);
    let at = offsets(&file);
    let mut bytes = fs::read(&file).unwrap();
    bytes[at[1]..at[3]].fill(0);
    fs::write(&file, &bytes).unwrap();

    let found = salvage(&file).unwrap();
    assert_eq!(found.damaged_at, Some(at[1] as u64));
    assert_eq!(payloads(&found), [&b"w"[..], b"z"]);
}

#[test]
fn a_damaged_header_still_gives_the_records() {
    // Pins: without a readable header the records are still read, ids unknown.
    let dir = tempfile::tempdir().unwrap();
    let file = segment_with(dir.path(), &[b"kept", b"also kept"], 0);
    let mut bytes = fs::read(&file).unwrap();
    bytes[20] ^= 0xFF;
    fs::write(&file, &bytes).unwrap();

    let found = salvage(&file).unwrap();
    assert_eq!(found.header, None);
    assert_eq!(payloads(&found), [&b"kept"[..], b"also kept"]);
    assert!(found.records.iter().all(|r| r.id.is_none()));
}

#[test]
fn salvage_writes_nothing_and_a_missing_file_is_an_error() {
    // Pins: salvage only reads; a path that is not there is a clear error.
    let dir = tempfile::tempdir().unwrap();
    let file = segment_with(dir.path(), &[b"a"], 0);
    let before = fs::read(&file).unwrap();
    salvage(&file).unwrap();
    assert_eq!(fs::read(&file).unwrap(), before);
    let err = salvage(dir.path().join("nope.seg")).unwrap_err();
    assert!(err.to_string().contains("nope.seg"), "{err}");
}
