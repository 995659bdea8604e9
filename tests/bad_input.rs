//! Bad input and hostile files: items the codec refuses, records that do not
//! decode (and the raw calls that get past them), paths that cannot be a
//! queue, directories without permission, and `verify` on healthy and
//! damaged queues. Each must be a clear error or a report, never a panic,
//! and must leave what it found as it was.

mod disk;

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use disk::*;
use dque::{Codec, CodecError, DQue, Error, RawQueue, VerifyReport};
use serde::{Deserialize, Serialize, Serializer};

/// A codec that writes part of an item and then fails on items containing
/// "poison": a failed encode must not leave those bytes anywhere.
#[derive(Default)]
struct Picky;

impl Codec<String> for Picky {
    const ID: u32 = 4100;

    fn encode(&self, item: &String, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(item.as_bytes());
        if item.contains("poison") {
            return Err(format!("refusing {item:?}").into());
        }
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<String, CodecError> {
        Ok(String::from_utf8(bytes.to_vec())?)
    }
}

/// Tags serialized as a sequence of unknown length, which bincode refuses
/// (it writes the length first); decodes as a plain sequence.
#[derive(Debug, PartialEq, Deserialize)]
struct Tags(Vec<u32>);

impl Serialize for Tags {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A filter has no exact size hint, so serde passes no length.
        serializer.collect_seq(self.0.iter().filter(|_| true))
    }
}

/// An item whose id is written before its tags fail: a partial encoding.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Job {
    id: u32,
    tags: Option<Tags>,
}

fn verify_ok<T, C: Codec<T>>(q: &DQue<T, C>) -> VerifyReport {
    q.verify().expect("verify returns a report")
}

/// Asserts `result` is `Error::Io` on `path` of `kind`, and that its message names the path.
#[track_caller]
fn assert_io<T: std::fmt::Debug>(result: Result<T, Error>, path: &Path, kind: io::ErrorKind) {
    match result {
        Err(e @ Error::Io { .. }) => {
            let message = e.to_string();
            let Error::Io { path: p, source } = e else {
                unreachable!()
            };
            assert_eq!(p, path);
            assert_eq!(source.kind(), kind, "{message}");
            assert!(
                message.contains(&path.display().to_string()),
                "message does not name the path: {message}"
            );
        }
        other => panic!("expected Io({kind:?}) on {path:?}, got {other:?}"),
    }
}

/// Puts a directory's mode back when dropped, so a failed assertion does not
/// leave an unreadable directory behind.
struct RestoreMode(PathBuf, u32);

impl Drop for RestoreMode {
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(self.1));
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

// Guarantee: an item the codec cannot encode (a codec that fails after
// writing part of the item, and a serde type bincode refuses) is
// Error::Encode and writes nothing: len, every file byte and the segment
// count are unchanged (even when the tail is full and the next item would
// start a new segment), the queue keeps working, and a reopen shows the
// same items.
#[test]
fn item_the_codec_cannot_encode_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    // One item per segment: a refused item must not roll the tail over.
    let options = turbo().segment_items(1);
    let q: DQue<String, Picky> = DQue::create_with(&dir, &options).unwrap();
    q.enqueue(&"first".to_string()).unwrap();
    let before = snapshot(&dir);
    for bad in ["poison", "a longer poison pill that spills over"] {
        match q.enqueue(&bad.to_string()) {
            Err(e @ Error::Encode(_)) => {
                let message = e.to_string();
                assert!(message.contains("refusing"), "{message}");
                assert!(message.contains("nothing was written"), "{message}");
            }
            other => panic!("expected Encode, got {other:?}"),
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.segment_numbers().unwrap(), 1..=1);
        assert_eq!(snapshot(&dir), before, "a refused item reached the disk");
    }
    // The bytes the failed encode left in the scratch buffer are not reused.
    q.enqueue(&"second".to_string()).unwrap();
    assert_eq!(q.len(), 2);
    q.close().unwrap();
    let q: DQue<String, Picky> = DQue::open(&dir).unwrap();
    assert!(q.open_report().is_clean(), "{:?}", q.open_report());
    assert!(verify_ok(&q).is_healthy());
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("first"));
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("second"));
    assert_eq!(q.dequeue().unwrap(), None);
    q.close().unwrap();

    // Bincode: the id is encoded, then the tags fail.
    let typed = root.path().join("typed");
    let q: DQue<Job> = DQue::create_with(&typed, &turbo()).unwrap();
    q.enqueue(&Job { id: 1, tags: None }).unwrap();
    let before = snapshot(&typed);
    let bad = Job {
        id: 2,
        tags: Some(Tags(vec![1, 2, 3])),
    };
    let result = q.enqueue(&bad);
    assert!(matches!(result, Err(Error::Encode(_))), "{result:?}");
    assert_eq!(q.len(), 1);
    assert_eq!(snapshot(&typed), before, "a refused item reached the disk");
    q.enqueue(&Job { id: 3, tags: None }).unwrap();
    q.close().unwrap();
    let q: DQue<Job> = DQue::open(&typed).unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(q.dequeue().unwrap(), Some(Job { id: 1, tags: None }));
    assert_eq!(q.dequeue().unwrap(), Some(Job { id: 3, tags: None }));
}

// Guarantee: peek_raw gives a record's stored bytes without removing it,
// dequeue_raw removes it (durably) and returns the same bytes, and a
// record that does not decode never stops a consumer: peek passes over it,
// dequeue moves it to the dead letters with its bytes (issue 23: it
// stopped every consumer for ever). Both raw calls return None on an
// empty queue.
#[test]
fn undecodable_record_can_be_read_raw_and_skipped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let q: DQue<Vec<u8>> = DQue::create(&dir).unwrap();
    q.enqueue(&b"first".to_vec()).unwrap();
    q.enqueue(&vec![0xff, 0xfe, 0xfd]).unwrap(); // not UTF-8
    q.enqueue(&b"third".to_vec()).unwrap();
    q.enqueue(&b"fourth".to_vec()).unwrap();
    q.close().unwrap();
    // Bincode of a Vec<u8>: its length (one byte here), then its bytes.
    let stored = vec![3, 0xff, 0xfe, 0xfd];

    let q: DQue<String> = any_type().open(&dir).unwrap();
    assert_eq!(q.peek_raw().unwrap(), Some(b"\x05first".to_vec()));
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("first"));
    for _ in 0..2 {
        assert_eq!(q.peek_raw().unwrap(), Some(stored.clone()));
        assert_eq!(q.len(), 3, "peek_raw removed the record");
    }
    assert_eq!(q.peek().unwrap().as_deref(), Some("third"));
    assert_eq!(q.dequeue_raw().unwrap(), Some(stored.clone()));
    assert_eq!(q.len(), 2);
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("third"));
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("fourth"));
    assert_eq!(q.peek_raw().unwrap(), None);
    assert_eq!(q.dequeue_raw().unwrap(), None);
    assert!(verify_ok(&q).is_healthy());
    assert!(q.dead_letters().unwrap().is_empty(), "dequeue_raw took it");
    q.close().unwrap();

    // The skip is a dequeue like any other: durable across a reopen.
    let q: DQue<String> = any_type().open(&dir).unwrap();
    assert_eq!(q.len(), 0);
    assert_eq!(q.dequeue().unwrap(), None);
    q.close().unwrap();
    assert!(matches!(q.peek_raw(), Err(Error::Closed)));
    assert!(matches!(q.dequeue_raw(), Err(Error::Closed)));
}

// Guarantee: a queue path under a regular file (`file/q`, `file/a/q`) is an
// Io error naming that path (NotADirectory) for every kind of open, and
// nothing is created: the file is unchanged and no directory appears.
#[test]
fn path_under_a_regular_file_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("file");
    fs::write(&file, b"precious").unwrap();
    let before = names(root.path());
    for path in [file.join("q"), file.join("a").join("q")] {
        for call in ["open", "create", "open_or_create"] {
            let result = disk::open_by(call, &path);
            assert_io(result, &path, io::ErrorKind::NotADirectory);
            assert_eq!(names(root.path()), before, "{call} created something");
            assert_eq!(fs::read(&file).unwrap(), b"precious", "{call}");
            assert!(fs::metadata(&file).unwrap().is_file());
        }
    }
}

// Guarantee: a queue directory without read/write permission is a clear
// Io error (PermissionDenied, naming the directory) for every kind of open,
// and nothing in it or about it changes; a new queue under a read-only
// parent is the same. Tests often run as root, which ignores permission
// bits: the test detects whether the bits bite (reading the chmod-000
// directory) and, where they do not, checks instead that the opens work and
// still change none of the user's files (the mode included).
#[test]
fn directory_without_permission_is_a_clear_error_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let q: DQue<u32> = DQue::create(&dir).unwrap();
    for i in 0..3 {
        q.enqueue(&i).unwrap();
    }
    q.close().unwrap();
    let files = snapshot(&dir);
    let all_names = names(&dir);

    fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).unwrap();
    let guard = RestoreMode(dir.clone(), 0o755);
    let bites = fs::read_dir(&dir).is_err();
    for call in ["open", "open_or_create", "create"] {
        let result = disk::open_by(call, &dir);
        if bites {
            assert_io(result, &dir, io::ErrorKind::PermissionDenied);
        } else {
            // Root: the bits are ignored, the queue is simply there.
            match (call, result) {
                ("create", Err(Error::AlreadyExists { path })) => assert_eq!(path, dir),
                ("create", other) => panic!("create: expected AlreadyExists, got {other:?}"),
                (_, Ok(q)) => {
                    assert_eq!(q.len(), 3, "{call}");
                    assert!(verify_ok(&q).is_healthy(), "{call}");
                    q.close().unwrap();
                }
                (_, Err(e)) => panic!("{call} as root: {e}"),
            }
        }
        assert_eq!(mode(&dir), 0o000, "{call} changed the directory's mode");
    }
    drop(guard);
    assert_eq!(snapshot(&dir), files, "the queue's files changed");
    assert_eq!(names(&dir), all_names);
    let q: DQue<u32> = DQue::open(&dir).unwrap();
    assert_eq!(
        [
            q.dequeue().unwrap(),
            q.dequeue().unwrap(),
            q.dequeue().unwrap()
        ],
        [Some(0), Some(1), Some(2)]
    );
    q.close().unwrap();

    // A new queue under a read-only parent.
    let parent = root.path().join("ro");
    fs::create_dir(&parent).unwrap();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o555)).unwrap();
    let _guard = RestoreMode(parent.clone(), 0o755);
    let probe = parent.join("probe");
    let bites = fs::create_dir(&probe).is_err();
    if !bites {
        fs::remove_dir(&probe).unwrap();
    }
    let path = parent.join("q");
    for call in ["create", "open_or_create"] {
        let result = disk::open_by(call, &path);
        if bites {
            assert_io(result, &path, io::ErrorKind::PermissionDenied);
            assert!(names(&parent).is_empty(), "{call} wrote into {parent:?}");
        } else {
            let q = result.unwrap_or_else(|e| panic!("{call} as root: {e}"));
            assert!(q.is_empty());
            q.close().unwrap();
        }
        assert_eq!(mode(&parent), 0o555, "{call} changed the parent's mode");
    }
}

// Guarantee: verify on a healthy queue spanning several segments, with
// acks in the head, reports it healthy with each segment's number, first
// id, record, settled and byte counts exact, counts len() items, changes no
// file, and reports the same after a reopen. A closed handle is Closed.
#[test]
fn verify_a_healthy_queue_across_segments_with_acks() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let q: DQue<u32> = DQue::create_with(&dir, &turbo().segment_items(3)).unwrap();
    let fresh = verify_ok(&q);
    assert!(fresh.is_healthy(), "{fresh}");
    assert_eq!(fresh.segments.len(), 1);
    assert_eq!(
        (fresh.segments[0].records, fresh.segments[0].frame_bytes),
        (0, 0)
    );
    for i in 0..10 {
        q.enqueue(&i).unwrap();
    }
    for i in 0..4 {
        assert_eq!(q.dequeue().unwrap(), Some(i));
    }
    // Segment 1 (ids 0..3) is consumed and gone; 2 holds 3..6 (3 acked),
    // 3 holds 6..9 (a middle segment, on disk only), 4 holds 9.
    let before = snapshot(&dir);
    let report = verify_ok(&q);
    assert!(report.is_healthy(), "{report}");
    assert_eq!(snapshot(&dir), before, "verify changed a file");
    let got: Vec<_> = report
        .segments
        .iter()
        .map(|s| (s.number, s.first_id, s.records, s.settled, s.frame_bytes))
        .collect();
    // A u32 below 251 is one byte: a 12-byte record frame; a marker is 4.
    assert_eq!(
        got,
        [(2, 3, 3, 1, 3 * 12 + 4), (3, 6, 3, 0, 36), (4, 9, 1, 0, 12)]
    );
    for s in &report.segments {
        assert_eq!(s.path, seg_path(&dir, s.number));
    }
    assert_eq!(report.items(), 6);
    assert_eq!(q.len(), 6);
    assert!(report.to_string().contains("healthy"), "{report}");
    q.close().unwrap();
    assert!(matches!(q.verify(), Err(Error::Closed)));

    let q: DQue<u32> = DQue::open(&dir).unwrap();
    assert_eq!(verify_ok(&q), report);
    assert_eq!(snapshot(&dir), before);
    let mut rest = Vec::new();
    while let Some(i) = q.dequeue().unwrap() {
        rest.push(i);
    }
    assert_eq!(rest, [4, 5, 6, 7, 8, 9]);
    let empty = verify_ok(&q);
    assert!(empty.is_healthy(), "{empty}");
    assert_eq!(empty.items(), 0);
}

/// A closed raw queue of items 0..9 in three segments of three; returns its files.
fn three_segments(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    // The smallest byte limit keeps the files (and the copies) small.
    let options = turbo().segment_items(3).segment_bytes(4096);
    let q = RawQueue::create_with(dir, &options).unwrap();
    for id in 0..9 {
        q.enqueue_bytes(&payload(id)).unwrap();
    }
    q.close().unwrap();
    snapshot(dir)
}

/// The layout of segment 2 of [`three_segments`], checked against its bytes.
fn middle_layout(files: &std::collections::BTreeMap<String, Vec<u8>>) -> Layout {
    let mut layout = Layout::new(3);
    for _ in 0..3 {
        layout.enqueue();
    }
    layout.check_against(&files[&seg_name(2)]);
    layout
}

/// Opens the damaged queue in `dst` (open must succeed: middle segments are
/// not read at open), verifies it, and checks that verify changed nothing
/// and reported exactly one problem, in segment 2 at `offset`; then
/// consumes up to segment 2 and checks the dequeue that reaches it fails at
/// the same offset. Returns the problem's reason.
fn check_damaged_middle(dst: &Path, offset: u64) -> String {
    let q = RawQueue::open_with(dst, &turbo()).unwrap();
    assert!(q.open_report().is_clean(), "{:?}", q.open_report());
    assert_eq!(q.len(), 9, "len is counted from the headers");
    let before = snapshot(dst);
    let report = verify_ok(&q);
    assert_eq!(snapshot(dst), before, "verify changed a file");
    assert!(!report.is_healthy());
    assert_eq!(report.problems.len(), 1, "{report}");
    let problem = &report.problems[0];
    assert_eq!(problem.segment, seg_path(dst, 2), "{report}");
    assert_eq!(problem.offset, offset, "{report}");
    assert!(!problem.reason.is_empty());
    assert!(report.to_string().contains(&problem.reason));
    let numbers: Vec<u64> = report.segments.iter().map(|s| s.number).collect();
    assert_eq!(numbers, [1, 2, 3]);
    for id in 0..3 {
        assert_eq!(q.dequeue().unwrap(), Some(payload(id)));
    }
    assert_corrupted(q.dequeue(), &seg_path(dst, 2), offset);
    problem.reason.clone()
}

// Guarantee: a flipped byte anywhere in the frames of a sealed segment
// (one the open does not read) is reported by verify as a problem naming
// that segment and the offset of the frame holding the byte, verify itself
// returns Ok and changes nothing, and the offset is the one the dequeue
// reaching the segment fails at. A flipped byte in the zeros after the last
// frame is reported at the clean end.
#[test]
fn verify_reports_a_flipped_byte_in_a_sealed_segment() {
    let root = tempfile::tempdir().unwrap();
    let files = three_segments(&root.path().join("src"));
    let layout = middle_layout(&files);
    for frame in &layout.frames {
        for at in frame.start..frame.end {
            let mut damaged = files.clone();
            damaged.get_mut(&seg_name(2)).unwrap()[at] ^= 1 << (at % 8);
            let dst = root.path().join(format!("flip{at}"));
            restore(&damaged, &dst);
            check_damaged_middle(&dst, frame.start as u64);
            fs::remove_dir_all(&dst).unwrap();
        }
    }

    // In the zeros after the frames: the records are whole, the stray byte
    // is reported at the clean end (an open reaching it would cut it).
    let mut damaged = files.clone();
    damaged.get_mut(&seg_name(2)).unwrap()[layout.data_end() + 9] = 0x5a;
    let dst = root.path().join("after");
    restore(&damaged, &dst);
    let q = RawQueue::open(&dst).unwrap();
    let report = verify_ok(&q);
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(report.problems[0].segment, seg_path(&dst, 2));
    assert_eq!(report.problems[0].offset, layout.data_end() as u64);
    assert_eq!(report.items(), 9);
}

// Guarantee: a torn tail that the open cut back (and reported) leaves a
// queue that verify finds healthy, with the surviving items counted; in a
// single segment and behind a sealed head.
#[test]
fn verify_after_open_repaired_a_torn_tail_is_healthy() {
    let root = tempfile::tempdir().unwrap();
    // (items, items per segment, segments)
    for (items, per_segment, segments) in [(5u64, 10, 1u64), (5, 3, 2)] {
        let src = root.path().join(format!("src{segments}"));
        let q = RawQueue::create_with(&src, &turbo().segment_items(per_segment)).unwrap();
        for id in 0..items {
            q.enqueue_bytes(&payload(id)).unwrap();
        }
        q.close().unwrap();
        let mut files = snapshot(&src);
        let tail = files.get_mut(&seg_name(segments)).unwrap();
        let end = nonzero_end(tail).next_multiple_of(FRAME_ALIGN);
        // Half of a record frame: a head word and CRC, and part of a payload.
        tail[end..end + 4].copy_from_slice(&(0x8000_0000u32 | 20).to_le_bytes());
        tail[end + 4..end + 11].copy_from_slice(b"torn!!!");
        let dst = root.path().join(format!("torn{segments}"));
        restore(&files, &dst);

        let q = RawQueue::open(&dst).unwrap();
        let repairs = &q.open_report().repairs;
        assert_eq!(repairs.len(), 1, "{:?}", q.open_report());
        assert_eq!(repairs[0].segment, seg_path(&dst, segments));
        assert_eq!(repairs[0].offset, end as u64);
        let before = snapshot(&dst);
        let report = verify_ok(&q);
        assert!(report.is_healthy(), "{report}");
        assert_eq!(snapshot(&dst), before, "verify changed a file");
        assert_eq!(report.segments.len() as u64, segments);
        assert_eq!(report.items(), items);
        assert_eq!(q.len() as u64, items);
        assert_eq!(drain(&q), payloads(0..items));
    }
}

// Guarantee: a middle segment damaged while the queue was closed (cut
// short inside a record, or a record zeroed) does not stop the open, which
// reads only headers of middle segments; verify reports it, naming the
// segment and the offset of the first missing record, and the dequeue that
// reaches it fails there.
#[test]
fn verify_reports_a_damaged_middle_segment_the_open_does_not_read() {
    let root = tempfile::tempdir().unwrap();
    let files = three_segments(&root.path().join("src"));
    let layout = middle_layout(&files);
    let second = layout.frames[1];

    let mut cut = files.clone();
    cut.get_mut(&seg_name(2))
        .unwrap()
        .truncate(second.start + 5);
    let dst = root.path().join("cut");
    restore(&cut, &dst);
    let reason = check_damaged_middle(&dst, second.start as u64);
    assert!(reason.contains("1 whole records of 3"), "{reason}");

    let mut zeroed = files.clone();
    zeroed.get_mut(&seg_name(2)).unwrap()[layout.frames[2].start..layout.frames[2].end].fill(0);
    let dst = root.path().join("zeroed");
    restore(&zeroed, &dst);
    let reason = check_damaged_middle(&dst, layout.frames[2].start as u64);
    assert!(reason.contains("2 whole records of 3"), "{reason}");
}

// Guarantee: verify never panics and never fails on garbage in a segment
// the open does not read (random bytes over the frames, random lengths,
// even a file shorter than a header); every problem names that segment,
// and a report without problems counts exactly len() items.
#[test]
fn verify_never_panics_on_a_garbage_middle_segment() {
    let root = tempfile::tempdir().unwrap();
    let files = three_segments(&root.path().join("src"));
    let mut rng = Rng::new(7);
    for case in 0..60 {
        let mut damaged = files.clone();
        let seg = damaged.get_mut(&seg_name(2)).unwrap();
        let len = seg.len();
        match case % 3 {
            0 => {
                let at = HEADER_LEN + rng.below(200) as usize;
                let n = 1 + rng.below(64) as usize;
                let garbage = rng.nonzero_bytes(n);
                seg[at..at + garbage.len()].copy_from_slice(&garbage);
            }
            1 => seg.truncate(rng.below(len as u64) as usize),
            _ => {
                let n = rng.below(100) as usize;
                seg.extend(rng.nonzero_bytes(n));
            }
        }
        let dst = root.path().join(format!("garbage{case}"));
        restore(&damaged, &dst);
        // A file cut inside its header fails the open (headers are read).
        let Ok(q) = RawQueue::open(&dst) else {
            continue;
        };
        let report = verify_ok(&q);
        for problem in &report.problems {
            assert_eq!(problem.segment, seg_path(&dst, 2), "case {case}: {report}");
        }
        if report.is_healthy() {
            assert_eq!(report.items(), q.len() as u64, "case {case}");
        }
        drop(q);
        fs::remove_dir_all(&dst).unwrap();
    }
}

// Guarantee: a segment file outside the head..tail range (a stray copy that
// the next open would take for part of the queue) and a missing middle
// segment are reported by verify, naming the file.
#[test]
fn verify_reports_stray_and_missing_segment_files() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    three_segments(&dir);
    let q = RawQueue::open(&dir).unwrap();
    assert!(verify_ok(&q).is_healthy());
    let stray = seg_path(&dir, 7);
    fs::copy(seg_path(&dir, 1), &stray).unwrap();
    let report = verify_ok(&q);
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(report.problems[0].segment, stray);
    fs::remove_file(&stray).unwrap();

    let missing = seg_path(&dir, 2);
    fs::rename(&missing, root.path().join("aside")).unwrap();
    let report = verify_ok(&q);
    assert!(!report.is_healthy());
    assert!(
        report.problems.iter().any(|p| p.segment == missing),
        "{report}"
    );
    let numbers: Vec<u64> = report.segments.iter().map(|s| s.number).collect();
    assert_eq!(numbers, [1, 3]);
}

// Guarantee: verify compares the items the segments hold with len(), which
// an open computes from the headers without reading middle segments. A
// middle segment carrying an ack marker (no dque writes one there: only the
// head is acked, so this is a hand-made file, valid frame by frame) holds
// one item less than len() says, and verify reports the difference, naming
// the queue directory.
#[test]
fn verify_reports_a_count_that_differs_from_len() {
    let root = tempfile::tempdir().unwrap();
    let files = three_segments(&root.path().join("src"));
    let layout = middle_layout(&files);
    let mut damaged = files.clone();
    let seg = damaged.get_mut(&seg_name(2)).unwrap();
    let end = layout.data_end();
    // Ack marker for record 0: kind 01, type 1, index 0 (FORMAT.md).
    seg[end..end + MARKER_LEN].copy_from_slice(&((0b01u32 << 30) | (1 << 24)).to_le_bytes());
    let dst = root.path().join("q");
    restore(&damaged, &dst);
    let q = RawQueue::open(&dst).unwrap();
    assert_eq!(q.len(), 9);
    let report = verify_ok(&q);
    assert_eq!(report.items(), 8, "{report}");
    assert_eq!(report.segments[1].settled, 1);
    assert_eq!(report.problems.len(), 1, "{report}");
    let problem = &report.problems[0];
    assert_eq!(problem.segment, dst);
    assert!(
        problem.reason.contains('8') && problem.reason.contains('9'),
        "{report}"
    );
}

/// Options that open a queue as another item type than it was made for.
fn any_type() -> dque::Options {
    dque::Options::new().check_item_type(false)
}
