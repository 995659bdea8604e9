//! Bad input: paths that are not queues, files of other versions or
//! codecs, items too large or not decodable, leftovers of a crash. Each
//! must be a clear error (or a reported clean-up), never a panic, and must
//! leave what it found as it was.

mod disk;

use std::fs;
use std::path::Path;

use disk::*;
use dque::{DQue, Error, Options, RawQueue, FORMAT_VERSION};

/// The three ways to open a queue.
/// A closed queue of `u32` items 0..n in `dir`.
fn make_queue(dir: &Path, n: u32, options: &Options) {
    let q: DQue<u32> = DQue::create_with(dir, options).unwrap();
    for i in 0..n {
        q.enqueue(&i).unwrap();
    }
    q.close().unwrap();
}

fn drain_u32(q: &DQue<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(i) = q.dequeue().unwrap() {
        out.push(i);
    }
    out
}

// Guarantee: a path that is a regular file is NotAQueue for every kind of
// open, and the file is left as it was.
#[test]
fn regular_file_is_not_a_queue() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("file");
    fs::write(&path, b"precious").unwrap();
    for call in disk::CALLS {
        match disk::open_by(call, &path) {
            Err(Error::NotAQueue { path: p, reason }) => {
                assert_eq!(p, path, "{call}");
                assert!(!reason.is_empty());
            }
            other => panic!("{call}: expected NotAQueue, got {other:?}"),
        }
    }
    assert_eq!(fs::read(&path).unwrap(), b"precious");
}

// Guarantee: a directory holding someone else's files and no dque.conf is
// NotAQueue for every kind of open, and is left untouched: no dque.conf,
// no dque.lock, no segment written into it.
#[test]
fn foreign_directory_is_not_a_queue_and_is_untouched() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("photos");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("holiday.jpg"), b"\xff\xd8jpeg").unwrap();
    fs::write(dir.join("notes.txt"), b"do not delete").unwrap();
    fs::create_dir(dir.join("sub")).unwrap();
    let before = names(&dir);
    for call in disk::CALLS {
        match disk::open_by(call, &dir) {
            Err(Error::NotAQueue { path, .. }) => assert_eq!(path, dir, "{call}"),
            other => panic!("{call}: expected NotAQueue, got {other:?}"),
        }
        assert_eq!(names(&dir), before, "{call} changed the directory");
    }
    assert_eq!(fs::read(dir.join("notes.txt")).unwrap(), b"do not delete");
}

// Regression: a directory of segment files whose dque.conf is gone (lost
// or deleted by hand) was refused with NotAQueue only after the lock was
// taken, so create/open_or_create left a dque.lock behind in a directory
// that is not a queue. It must be refused before anything is written.
#[test]
fn segments_without_config_are_not_a_queue_and_are_untouched() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    make_queue(&dir, 5, &Options::new());
    fs::remove_file(dir.join(CONFIG)).unwrap();
    fs::remove_file(dir.join(LOCK)).unwrap();
    let before = snapshot(&dir);
    let names_before = names(&dir);
    for call in disk::CALLS {
        match disk::open_by(call, &dir) {
            Err(Error::NotAQueue { path, .. }) => assert_eq!(path, dir, "{call}"),
            other => panic!("{call}: expected NotAQueue, got {other:?}"),
        }
        assert_eq!(names(&dir), names_before, "{call} changed the directory");
    }
    assert_eq!(snapshot(&dir), before);
}

// Guarantee: `open` never creates: a missing path is NotFound and stays
// missing; an existing empty directory is refused and stays empty.
#[test]
fn open_never_creates() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("missing").join("q");
    match DQue::<u32>::open(&missing) {
        Err(Error::NotFound { path }) => assert_eq!(path, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!missing.exists());
    assert!(!root.path().join("missing").exists());

    let empty = root.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let result = DQue::<u32>::open(&empty);
    let refused = matches!(
        result,
        Err(Error::NotAQueue { .. } | Error::NotFound { .. })
    );
    assert!(refused, "{result:?}");
    assert!(
        names(&empty).is_empty(),
        "open wrote into an empty directory"
    );
}

// Guarantee: `create` on an existing queue is AlreadyExists and leaves the
// queue and its items as they were.
#[test]
fn create_on_an_existing_queue_is_already_exists() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    make_queue(&dir, 3, &Options::new().segment_items(2));
    let before = snapshot(&dir);
    for options in [Options::new(), Options::new().segment_items(50)] {
        match DQue::<u32>::create_with(&dir, &options) {
            Err(Error::AlreadyExists { path }) => assert_eq!(path, dir),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        assert_eq!(snapshot(&dir), before, "a refused create changed the queue");
    }
    let q: DQue<u32> = DQue::open(&dir).unwrap();
    assert_eq!(drain_u32(&q), [0, 1, 2]);
}

// Guarantee: a config written by a newer format version is
// UnsupportedVersion naming the config file, and is not rewritten (even
// when the open asks for other segment sizes).
#[test]
fn config_of_a_newer_version_is_unsupported() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    make_queue(&dir, 3, &Options::new());
    // Version 2 is the config's own (FORMAT.md, "Config"): 3 is newer.
    let newer = config_bytes(FORMAT_VERSION + 2, 100, 1 << 20, 1);
    fs::write(dir.join(CONFIG), &newer).unwrap();
    // A newer format may also change the config's size.
    let mut longer = newer.clone();
    longer.extend_from_slice(&[7; 12]);
    for bytes in [newer, longer] {
        fs::write(dir.join(CONFIG), &bytes).unwrap();
        let before = snapshot(&dir);
        for options in [Options::new(), Options::new().segment_items(9)] {
            match DQue::<u32>::open_with(&dir, &options) {
                Err(Error::UnsupportedVersion {
                    path,
                    found,
                    supported,
                }) => {
                    assert_eq!(path, dir.join(CONFIG));
                    assert_eq!((found, supported), (FORMAT_VERSION + 2, FORMAT_VERSION + 1));
                }
                other => panic!("expected UnsupportedVersion, got {other:?}"),
            }
            assert_eq!(snapshot(&dir), before);
        }
    }
}

// Guarantee: a config that does not parse (garbage, truncated, empty,
// wrong CRC, out-of-range limits) is NotAQueue, never a panic, and is not
// overwritten.
#[test]
fn garbage_config_is_not_a_queue() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    make_queue(&dir, 3, &Options::new());
    let good = fs::read(dir.join(CONFIG)).unwrap();
    // A typed queue's config is version 2 (it names the item type).
    assert!(good.len() > 28);
    let mut bad_crc = good.clone();
    bad_crc[9] ^= 0x40;
    let zero_limit = config_bytes(FORMAT_VERSION, 0, 1 << 20, 1);
    let mut rng = Rng::new(3);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("random", rng.nonzero_bytes(28)),
        ("empty", Vec::new()),
        ("magic only", b"DQCF".to_vec()),
        ("truncated", good[..20].to_vec()),
        ("too long", [good.clone(), vec![1]].concat()),
        ("bad crc", bad_crc),
        ("zero record limit", zero_limit),
        ("text", b"segment_items = 100\n".to_vec()),
    ];
    for (name, bytes) in cases {
        fs::write(dir.join(CONFIG), &bytes).unwrap();
        let before = snapshot(&dir);
        for call in ["open", "open_or_create"] {
            match disk::open_by(call, &dir) {
                Err(Error::NotAQueue { path, reason }) => {
                    assert!(path.starts_with(&dir), "{name}/{call}: {path:?}");
                    assert!(!reason.is_empty());
                }
                other => panic!("{name}/{call}: expected NotAQueue, got {other:?}"),
            }
            assert_eq!(snapshot(&dir), before, "{name}/{call} changed the queue");
        }
    }
    fs::write(dir.join(CONFIG), &good).unwrap();
    let q: DQue<u32> = DQue::open(&dir).unwrap();
    assert_eq!(drain_u32(&q), [0, 1, 2]);
}

// Guarantee: a segment whose header carries a newer format version (head,
// middle or tail) is UnsupportedVersion naming that segment, and no file
// is changed.
#[test]
fn segment_of_a_newer_version_is_unsupported() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src");
    make_queue(&src, 9, &Options::new().segment_items(3));
    let files = snapshot(&src);
    for seg in 1..=3 {
        let mut damaged = files.clone();
        set_header_version(damaged.get_mut(&seg_name(seg)).unwrap(), FORMAT_VERSION + 1);
        let dst = root.path().join(format!("newer{seg}"));
        restore(&damaged, &dst);
        match DQue::<u32>::open(&dst) {
            Err(Error::UnsupportedVersion { path, found, .. }) => {
                assert_eq!(path, seg_path(&dst, seg));
                assert_eq!(found, FORMAT_VERSION + 1);
            }
            other => panic!("segment {seg}: expected UnsupportedVersion, got {other:?}"),
        }
        assert_eq!(snapshot(&dst), damaged);
    }
}

// Guarantee: a queue opened with another codec than it was written with is
// CodecMismatch (both ways), and the queue is left as it was.
#[test]
fn opening_with_another_codec_is_a_codec_mismatch() {
    let root = tempfile::tempdir().unwrap();
    let typed = root.path().join("typed");
    make_queue(&typed, 2, &Options::new());
    let before = snapshot(&typed);
    match RawQueue::open(&typed) {
        Err(Error::CodecMismatch {
            path,
            found,
            expected,
        }) => {
            assert_eq!(path, typed.join(CONFIG));
            assert_eq!((found, expected), (1, 0));
        }
        other => panic!("expected CodecMismatch, got {other:?}"),
    }
    assert_eq!(snapshot(&typed), before);
    let q: DQue<u32> = DQue::open(&typed).unwrap();
    assert_eq!(drain_u32(&q), [0, 1]);

    let raw = root.path().join("raw");
    let q = RawQueue::create(&raw).unwrap();
    q.enqueue_bytes(b"bytes").unwrap();
    q.close().unwrap();
    match DQue::<u32>::open_or_create(&raw) {
        Err(Error::CodecMismatch {
            found, expected, ..
        }) => assert_eq!((found, expected), (0, 1)),
        other => panic!("expected CodecMismatch, got {other:?}"),
    }
    let q = RawQueue::open(&raw).unwrap();
    assert_eq!(q.dequeue().unwrap(), Some(b"bytes".to_vec()));
}

// Guarantee: an item over max_item_bytes is ItemTooLarge and writes
// nothing: len and the segment bytes are unchanged, the queue still works,
// and a reopen shows the same items.
#[test]
fn item_over_max_item_bytes_writes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let options = turbo().max_item_bytes(100).segment_items(2);
    let q = RawQueue::create_with(&dir, &options).unwrap();
    q.enqueue_bytes(&[1; 100]).unwrap();
    let before = snapshot(&dir);
    for size in [101, 4096, 1 << 20] {
        match q.enqueue_bytes(&vec![2; size]) {
            Err(Error::ItemTooLarge { size: s, max }) => assert_eq!((s, max), (size, 100)),
            other => panic!("expected ItemTooLarge, got {other:?}"),
        }
        assert_eq!(q.len(), 1);
        assert_eq!(snapshot(&dir), before, "a refused item reached the disk");
    }
    q.enqueue_bytes(&[3; 7]).unwrap();
    q.close().unwrap();

    // Typed: the limit applies to the encoded size (bincode: length + bytes).
    let typed = root.path().join("typed");
    let q: DQue<Vec<u8>> = DQue::create_with(&typed, &turbo().max_item_bytes(10)).unwrap();
    q.enqueue(&vec![0; 9]).unwrap();
    match q.enqueue(&vec![0; 10]) {
        Err(Error::ItemTooLarge { size, max }) => assert_eq!((size, max), (11, 10)),
        other => panic!("expected ItemTooLarge, got {other:?}"),
    }
    assert_eq!(q.len(), 1);
    q.close().unwrap();

    let q = RawQueue::open_with(&dir, &options).unwrap();
    assert!(q.open_report().is_clean());
    assert_eq!(q.len(), 2);
    assert_eq!(drain(&q), [vec![1; 100], vec![3; 7]]);
    let q: DQue<Vec<u8>> = DQue::open(&typed).unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q.dequeue().unwrap(), Some(vec![0; 9]));
}

// Guarantee: a record that does not decode as the item type never stops
// the queue and is never dropped (issue 23: every dequeue failed with the
// same Decode error for ever): peek passes over it, dequeue moves it to
// the dead letters with its bytes and the decode error and goes on, and
// the letter decodes as what it was written as.
#[test]
fn undecodable_record_is_a_decode_error_and_is_not_dropped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let bad = vec![0xff, 0xfe, 0xfd]; // not UTF-8
    let q: DQue<Vec<u8>> = DQue::create(&dir).unwrap();
    q.enqueue(&b"first".to_vec()).unwrap();
    q.enqueue(&bad).unwrap();
    q.enqueue(&b"third".to_vec()).unwrap();
    q.close().unwrap();

    // Same codec id (bincode), another item type.
    let q: DQue<String> = any_type().open(&dir).unwrap();
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("first"));
    for _ in 0..3 {
        assert_eq!(q.peek().unwrap().as_deref(), Some("third"));
        assert_eq!(q.len(), 2, "a peek writes nothing");
    }
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("third"));
    assert_eq!(q.dequeue().unwrap(), None);
    let dead = q.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].original_id, 1);
    assert!(
        dead[0].reason.contains("does not decode"),
        "{}",
        dead[0].reason
    );
    assert_eq!(dead[0].item::<Vec<u8>, dque::Bincode>().unwrap(), bad);
    q.close().unwrap();

    // Trailing bytes are refused too: a u64 read as a u8.
    let ints = root.path().join("ints");
    let q: DQue<u64> = DQue::create(&ints).unwrap();
    q.enqueue(&u64::MAX).unwrap();
    q.close().unwrap();
    let q: DQue<u8> = any_type().open(&ints).unwrap();
    assert_eq!(q.dequeue().unwrap(), None);
    assert_eq!(q.dead_letters().unwrap()[0].original_id, 0);
}

// Guarantee: temporary files left by a crash while creating a segment or
// writing the config are removed on open and listed in
// removed_temp_files; the queue is intact and the next open is clean.
#[test]
fn leftover_temp_files_are_removed_and_reported() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    make_queue(&dir, 4, &Options::new().segment_items(3));
    let seg_tmp = dir.join(format!("{}.tmp", seg_name(3)));
    let conf_tmp = dir.join("dque.conf.tmp");
    fs::write(&seg_tmp, b"DQSG half written").unwrap();
    fs::write(&conf_tmp, b"DQCF").unwrap();

    let q: DQue<u32> = DQue::open(&dir).unwrap();
    let report = q.open_report();
    let mut removed = report.removed_temp_files.clone();
    removed.sort();
    assert_eq!(removed, [seg_tmp.clone(), conf_tmp.clone()]);
    assert!(!report.is_clean());
    assert!(report.repairs.is_empty());
    assert!(!seg_tmp.exists() && !conf_tmp.exists());
    assert_eq!(q.len(), 4);
    q.close().unwrap();

    let q: DQue<u32> = DQue::open(&dir).unwrap();
    assert!(q.open_report().is_clean(), "{:?}", q.open_report());
    assert_eq!(drain_u32(&q), [0, 1, 2, 3]);
}

// Found by fuzzing (fuzz/corpus/open/bug-rollover-to-segment-number-u64-max):
// a tail numbered 2^64 - 2 rolled over into a segment numbered 2^64 - 1,
// whose header the format refuses, so the queue no longer opened. Now that
// enqueue fails with `Corrupted`, writes nothing, and the queue reopens.
#[test]
fn segment_numbers_end_without_breaking_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    drop(DQue::<u32>::create_with(&path, &Options::new().segment_items(2)).unwrap());
    // Renumber the only segment to 2^64 - 3 (header fields per FORMAT.md).
    let number = u64::MAX - 2;
    let first = path.join(format!("{:020}.seg", 1));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[8..16].copy_from_slice(&number.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    std::fs::remove_file(&first).unwrap();
    std::fs::write(path.join(format!("{number:020}.seg")), bytes).unwrap();

    let q: DQue<u32> = DQue::open(&path).unwrap();
    q.enqueue_batch([1, 2, 3, 4]).unwrap(); // fills 2^64 - 3 and 2^64 - 2
    let full = q.enqueue(&5);
    let corrupted = matches!(full, Err(Error::Corrupted { .. }));
    assert!(corrupted, "{full:?}");
    assert_eq!(q.len(), 4);
    drop(q);
    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.dequeue_batch(10).unwrap(), [1, 2, 3, 4]);
}

// The same at the end of ids (fuzz/corpus/open/bug-rollover-past-the-last-id):
// a rollover whose new segment's ids would pass u64::MAX fails, writes
// nothing, and the queue still opens with every item.
#[test]
fn ids_end_without_breaking_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    drop(DQue::<u32>::create_with(&path, &Options::new().segment_items(2)).unwrap());
    let first = path.join(format!("{:020}.seg", 1));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[16..24].copy_from_slice(&(u64::MAX - 6).to_le_bytes());
    let crc = crc32fast::hash(&bytes[..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&first, bytes).unwrap();

    let q: DQue<u32> = DQue::open(&path).unwrap();
    q.enqueue_batch([1, 2, 3, 4, 5, 6]).unwrap();
    let past = q.enqueue(&7);
    let corrupted = matches!(past, Err(Error::Corrupted { .. }));
    assert!(corrupted, "{past:?}");
    drop(q);
    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.dequeue_batch(10).unwrap(), [1, 2, 3, 4, 5, 6]);
}

/// Options that open a queue as another item type than it was made for.
fn any_type() -> dque::Options {
    dque::Options::new().check_item_type(false)
}
