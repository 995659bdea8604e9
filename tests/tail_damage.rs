//! Damage in the last segment is not a torn write (FORMAT.md, "Tail damage").
//!
//! Bug pinned (issue 11, bug 3): ten records in Safe mode, all fsynced, one
//! bit flipped in the first: `open()` succeeded with `len() == 0` and zeroed
//! the nine intact records; only `open_report()` said so, and `dque verify`
//! on a running queue called it healthy. Now an open refuses it and changes
//! nothing, `verify` reports it with or without the lock, a cut happens only
//! when asked for, and every cut keeps a copy where `salvage` reads it.

mod disk;

use std::fs;
use std::path::{Path, PathBuf};

use disk::{assert_corrupted, payload, seg_path, snapshot, HEADER_LEN};
use dque::{salvage, Durability, Options, QueueFiles, RawQueue, QUARANTINE_DIR};

/// A Safe queue of ten synced records, closed; returns the segment's path.
fn ten_synced_records(path: &Path) -> PathBuf {
    let q = RawQueue::create_with(path, &Options::new().durability(Durability::Safe)).unwrap();
    for id in 0..10 {
        q.enqueue(&payload(id)).unwrap();
    }
    q.close().unwrap();
    seg_path(path, 1)
}

/// Offsets of the ten records' frames (FORMAT.md: head word, CRC, payload
/// padded to 4 bytes), and the end of the last.
fn frame_starts() -> Vec<usize> {
    let mut at = HEADER_LEN;
    let mut starts = Vec::new();
    for id in 0..10 {
        starts.push(at);
        at += (8 + payload(id).len()).next_multiple_of(4);
    }
    starts.push(at);
    starts
}

fn flip_bit(segment: &Path, at: usize) {
    let mut bytes = fs::read(segment).unwrap();
    bytes[at] ^= 0x10;
    fs::write(segment, bytes).unwrap();
}

fn kept_copies(path: &Path) -> Vec<PathBuf> {
    match fs::read_dir(path.join(QUARANTINE_DIR)) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

// A flipped bit in any record but the last, in a synced tail, is damage:
// the open fails naming segment and offset, and no byte changes.
#[test]
fn a_flipped_bit_before_intact_records_is_refused_and_changes_nothing() {
    let starts = frame_starts();
    for (record, &start) in starts.iter().enumerate().take(9) {
        for byte in [0, 5, 9] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let segment = ten_synced_records(&path);
            flip_bit(&segment, start + byte);
            let before = snapshot(&path);
            let opened = RawQueue::open(&path);
            if let Ok(q) = &opened {
                panic!("record {record} byte {byte}: opened, {:?}", q.open_report());
            }
            assert_corrupted(opened, &segment, start as u64);
            assert_eq!(
                snapshot(&path),
                before,
                "record {record}: the refused open wrote"
            );
            assert!(kept_copies(&path).is_empty());
        }
    }
}

// verify reports that damage, without the lock and with it.
#[test]
fn verify_reports_damage_before_intact_records_with_or_without_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let segment = ten_synced_records(&path);
    flip_bit(&segment, frame_starts()[0] + 9);
    for files in [
        QueueFiles::open(&path).unwrap(),
        QueueFiles::open_locked(&path).unwrap(),
    ] {
        let report = files.verify(|_, _| {}).unwrap();
        assert!(!report.is_healthy(), "lock held: {}", files.holds_lock());
        let problem = &report.problems[0];
        assert_eq!(
            (problem.segment.as_path(), problem.offset),
            (segment.as_path(), HEADER_LEN as u64)
        );
        assert!(
            problem.reason.contains("followed by whole records"),
            "{}",
            problem.reason
        );
    }
}

// Asked to cut, the open keeps a copy first: salvage reads the nine intact
// records from it.
#[test]
fn cutting_a_damaged_tail_keeps_the_records_where_salvage_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let segment = ten_synced_records(&path);
    flip_bit(&segment, frame_starts()[0] + 9);
    let damaged = fs::read(&segment).unwrap();
    let q = RawQueue::open_with(&path, &Options::new().cut_damaged_tail(true)).unwrap();
    assert!(q.is_empty());
    let repair = &q.open_report().repairs[0];
    assert!(repair.damage);
    let kept = repair.kept.clone().expect("a copy");
    drop(q);
    let copy = fs::read(&kept).unwrap();
    assert_eq!(
        copy,
        damaged[..copy.len()],
        "the copy is the file as it was"
    );
    let found = salvage(&kept).unwrap();
    let payloads: Vec<Vec<u8>> = found.records.iter().map(|r| r.payload.clone()).collect();
    assert_eq!(payloads, (1..10).map(payload).collect::<Vec<_>>());
}

// A flipped bit in the last record is indistinguishable from a torn write:
// cut, but the bytes are kept.
#[test]
fn a_bad_last_record_is_a_torn_write_and_its_bytes_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let segment = ten_synced_records(&path);
    flip_bit(&segment, frame_starts()[9] + 9);
    let before = fs::read(&segment).unwrap();
    let q = RawQueue::open(&path).unwrap();
    assert_eq!(q.len(), 9);
    let repair = &q.open_report().repairs[0];
    assert!(!repair.damage);
    let copy = fs::read(repair.kept.as_ref().expect("a copy")).unwrap();
    assert_eq!(copy, before[..copy.len()]);
    assert!(copy.len() >= frame_starts()[10]);
}

// What a power loss leaves (a hole: an unwritten sector inside a record,
// then records written back out of order) is a torn write, not damage: the
// queue opens, as Turbo promises.
#[test]
fn a_hole_left_by_a_power_loss_is_cut_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q = RawQueue::create_with(&path, &Options::new().durability(Durability::Turbo)).unwrap();
    // 700-byte records span sectors.
    for id in 0..6u8 {
        q.enqueue(&vec![id + 1; 700]).unwrap();
    }
    q.close().unwrap();
    let segment = seg_path(&path, 1);
    let mut bytes = fs::read(&segment).unwrap();
    // Record 2 starts at 40 + 2 * 708 = 1456; its sector 1536..2048 was
    // never written back, records after it were.
    bytes[1536..2048].fill(0);
    fs::write(&segment, &bytes).unwrap();
    let q = RawQueue::open(&path).unwrap();
    assert_eq!(q.len(), 2);
    let repair = &q.open_report().repairs[0];
    assert_eq!((repair.offset, repair.damage), (1456, false));
    assert!(repair.kept.is_some());
}

// The class: whatever damage a tail holds, an open either refuses and
// changes nothing, or opens and kept a copy of every byte it cut.
#[test]
fn no_open_destroys_bytes() {
    for seed in 0..150 {
        let mut rng = disk::Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let segment = ten_synced_records(&path);
        let mut bytes = fs::read(&segment).unwrap();
        let end = frame_starts()[10];
        let at = HEADER_LEN + rng.below((end - HEADER_LEN) as u64) as usize;
        let len = 1 + rng.below(24) as usize;
        let damage = if rng.below(2) == 0 {
            vec![0; len]
        } else {
            rng.nonzero_bytes(len)
        };
        bytes[at..at + len].copy_from_slice(&damage);
        fs::write(&segment, &bytes).unwrap();
        let before = snapshot(&path);
        match RawQueue::open(&path) {
            Err(_) => assert_eq!(snapshot(&path), before, "seed {seed}: a refused open wrote"),
            Ok(q) => {
                for repair in &q.open_report().repairs {
                    let copy = fs::read(repair.kept.as_ref().expect("a copy")).unwrap();
                    assert_eq!(copy, bytes[..copy.len()], "seed {seed}: the copy differs");
                    let rest_is_zero = bytes[copy.len()..].iter().all(|&b| b == 0);
                    assert!(rest_is_zero, "seed {seed}: bytes cut without a copy");
                }
            }
        }
    }
}

// Found by fuzzing (fuzz/corpus/open/bug-damage-before-a-record-ending-in-zeros):
// records whose payload ends in zeros (small integers, in most encodings)
// end past the last non-zero byte, and were missed, so damage before them
// was cut as a torn write. And the copy a cut keeps must hold them whole.
#[test]
fn records_ending_in_zeros_count_as_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q = RawQueue::create_with(&path, &Options::new().durability(Durability::Safe)).unwrap();
    let zeros = vec![7, 0, 0, 0, 0, 0, 0, 0];
    q.enqueue(&b"first record".to_vec()).unwrap();
    q.enqueue(&zeros).unwrap();
    q.close().unwrap();
    let segment = seg_path(&path, 1);
    flip_bit(&segment, HEADER_LEN + 8);
    let before = snapshot(&path);
    assert_corrupted(RawQueue::open(&path), &segment, HEADER_LEN as u64);
    assert_eq!(snapshot(&path), before);
    let q = RawQueue::open_with(&path, &Options::new().cut_damaged_tail(true)).unwrap();
    let kept = q.open_report().repairs[0].kept.clone().expect("a copy");
    let found = salvage(&kept).unwrap();
    let payloads: Vec<Vec<u8>> = found.records.iter().map(|r| r.payload.clone()).collect();
    assert_eq!(payloads, [zeros], "the copy holds the record whole");
}
