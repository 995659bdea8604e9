//! Crash recovery: torn, zero-filled and garbage tails, corrupt sealed
//! segments, missing segments, segments left behind by a crash, and
//! reopening with other segment sizes.
//!
//! Each test builds a small queue once, copies its files, damages the copy
//! the way a crash (or a disk) would, and checks what an open makes of it.

mod disk;

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::Path;

use disk::*;
use dque::{Error, Options, RawQueue};

/// Builds a queue in `dir` with `options`, runs `build` on it and closes it;
/// returns the files it left.
fn build(
    dir: &Path,
    options: &Options,
    build: impl FnOnce(&RawQueue),
) -> BTreeMap<String, Vec<u8>> {
    let q = RawQueue::create_with(dir, options).expect("create");
    build(&q);
    q.close().expect("close");
    snapshot(dir)
}

fn enqueue_ids(q: &RawQueue, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        q.enqueue_bytes(&payload(id)).expect("enqueue");
    }
}

fn dequeue_ids(q: &RawQueue, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        assert_eq!(q.dequeue().expect("dequeue"), Some(payload(id)));
    }
}

/// What an open of a damaged copy must do.
enum Expect {
    /// Fail with `Corrupted` at this offset of the damaged segment, changing nothing.
    Corrupted(u64),
    /// Open with exactly these items, after cutting `repair` (offset,
    /// bytes_cut) off the damaged segment, if any.
    Opens {
        items: Vec<u64>,
        repair: Option<(u64, u64)>,
    },
}

/// Restores `files` into `dst` and checks an open of it; see [`check_in_place`].
fn check_damaged_copy(files: &BTreeMap<String, Vec<u8>>, dst: &Path, seg: u64, expect: Expect) {
    restore(files, dst);
    check_in_place(files, dst, seg, expect);
}

/// Opens the queue in `dst` (whose files are `files`) and checks the open
/// against `expect`. After a successful open it also checks the cut bytes
/// were zeroed on disk, that the queue takes a new item, and that the next
/// open is clean and yields the survivors followed by the new item.
fn check_in_place(files: &BTreeMap<String, Vec<u8>>, dst: &Path, seg: u64, expect: Expect) {
    let seg_file = seg_path(dst, seg);
    let opened = RawQueue::open_with(dst, &turbo());
    match expect {
        Expect::Corrupted(offset) => {
            assert_corrupted(opened, &seg_file, offset);
            assert_eq!(&snapshot(dst), files, "a failed open changed the files");
        }
        Expect::Opens { items, repair } => {
            let q = opened.unwrap_or_else(|e| panic!("open of {dst:?} failed: {e}"));
            let report = q.open_report().clone();
            assert!(report.removed_temp_files.is_empty());
            assert!(report.deleted_segments.is_empty(), "{report:?}");
            match repair {
                None => assert!(report.repairs.is_empty(), "unexpected repair {report:?}"),
                Some((offset, cut)) => {
                    assert_eq!(report.repairs.len(), 1, "{report:?}");
                    let r = &report.repairs[0];
                    assert_eq!(r.segment, seg_file);
                    assert_eq!((r.offset, r.bytes_cut), (offset, cut), "{report:?}");
                    assert!(!r.reason.is_empty());
                    let on_disk = fs::read(&seg_file).unwrap();
                    let cut_range = offset as usize..(offset + cut) as usize;
                    assert!(
                        on_disk[cut_range].iter().all(|&b| b == 0),
                        "the cut bytes were not zeroed on disk"
                    );
                }
            }
            assert_eq!(q.len(), items.len(), "len after open");
            let new = b"written-after-recovery".to_vec();
            q.enqueue_bytes(&new).expect("enqueue after recovery");
            q.close().expect("close");

            let q = RawQueue::open_with(dst, &turbo()).expect("second open");
            assert!(q.open_report().is_clean(), "{:?}", q.open_report());
            assert!(q.open_report().deleted_segments.is_empty());
            let mut want = payloads(items);
            want.push(new);
            assert_eq!(q.len(), want.len());
            assert_eq!(drain(&q), want);
        }
    }
}

/// Expected outcome of cutting a segment laid out as `layout` at `cut`,
/// when it is the last segment and `before` are the items of the segments
/// before it.
fn expect_tail_cut(layout: &Layout, original: &[u8], cut: usize, before: &[u64]) -> Expect {
    if cut < HEADER_LEN {
        return Expect::Corrupted(0);
    }
    let whole = layout.whole_end(cut);
    let partial = nonzero_end(&original[whole..cut]);
    let mut items = before.to_vec();
    items.extend(layout.survivors(cut));
    Expect::Opens {
        items,
        repair: (partial > 0).then_some((whole as u64, partial as u64)),
    }
}

// Guarantee: a torn tail (the last segment cut at any byte, as a crash in
// the middle of a write leaves it) is truncated back to the last whole
// record on open; every whole record before the cut is kept, in order. A
// file shorter than the 40-byte header is not a torn tail (segments are
// created whole under a temporary name and renamed): it is a Corrupted
// error at offset 0, with nothing changed.
#[test]
fn tail_segment_cut_at_every_offset_keeps_every_whole_record() {
    let root = tempfile::tempdir().unwrap();
    let files = build(&root.path().join("src"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..10);
        dequeue_ids(q, [0]);
        assert_eq!(q.segment_numbers().unwrap(), 1..=3);
    });
    let mut layout = Layout::new(8);
    layout.enqueue();
    layout.enqueue();
    let original = &files[&seg_name(3)];
    layout.check_against(original);

    for cut in 0..=layout.data_end() + 8 {
        let mut damaged = files.clone();
        damaged.get_mut(&seg_name(3)).unwrap().truncate(cut);
        let expect = expect_tail_cut(&layout, original, cut, &(1..8).collect::<Vec<_>>());
        check_damaged_copy(&damaged, &root.path().join(format!("cut{cut}")), 3, expect);
    }
}

// Guarantee: in a segment where dequeues interleave ack markers with
// records, a cut at any byte keeps exactly the items whose record is whole
// and whose ack marker is not: nothing acked comes back unless its marker
// was torn, nothing whole is lost, order is kept.
#[test]
fn single_segment_with_acks_cut_at_every_offset() {
    let root = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(0);
    let ops = "EEDEEDDEEEDEDEE";
    let files = build(&root.path().join("src"), &turbo(), |q| {
        for op in ops.chars() {
            if op == 'E' {
                q.enqueue_bytes(&payload(layout.enqueue())).unwrap();
            } else {
                assert_eq!(q.dequeue().unwrap(), Some(payload(layout.dequeue())));
            }
        }
    });
    let original = &files[&seg_name(1)];
    layout.check_against(original);

    for cut in 0..=layout.data_end() + 8 {
        let mut damaged = files.clone();
        damaged.get_mut(&seg_name(1)).unwrap().truncate(cut);
        let expect = expect_tail_cut(&layout, original, cut, &[]);
        check_damaged_copy(&damaged, &root.path().join(format!("cut{cut}")), 1, expect);
    }
}

// Guarantee: a sealed segment (one with a successor) must keep all its
// records; only a torn tail of ack markers after them may be cut. Cutting
// it inside its records is a Corrupted error naming it (nothing changed);
// cutting it inside its markers redelivers exactly the items whose marker
// was torn.
#[test]
fn sealed_head_cut_in_records_is_corrupted_and_in_markers_is_repaired() {
    let root = tempfile::tempdir().unwrap();
    let mut layout = Layout::new(0);
    let files = build(&root.path().join("src"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..8);
        (0..4).for_each(|_| {
            layout.enqueue();
        });
        for _ in 0..3 {
            assert_eq!(q.dequeue().unwrap(), Some(payload(layout.dequeue())));
        }
        assert_eq!(q.segment_numbers().unwrap(), 1..=2);
    });
    let original = &files[&seg_name(1)];
    layout.check_against(original);
    let records_end = layout.frames[3].end;

    for cut in 0..=layout.data_end() + 8 {
        let mut damaged = files.clone();
        damaged.get_mut(&seg_name(1)).unwrap().truncate(cut);
        let expect = if cut < HEADER_LEN {
            Expect::Corrupted(0)
        } else if cut < records_end {
            Expect::Corrupted(layout.whole_end(cut) as u64)
        } else {
            let whole = layout.whole_end(cut);
            let partial = nonzero_end(&original[whole..cut]);
            let mut items = layout.survivors(cut);
            items.extend(4..8);
            Expect::Opens {
                items,
                repair: (partial > 0).then_some((whole as u64, partial as u64)),
            }
        };
        check_damaged_copy(&damaged, &root.path().join(format!("cut{cut}")), 1, expect);
    }
}

// Guarantee (the dque (Go) bug this crate exists to avoid: zeros read as
// delete markers silently lose items): zero bytes after the last frame are
// the clean end. Zeros appended to a segment, or a file extended with
// set_len, lose nothing, delete nothing and need no repair.
#[test]
fn zero_filled_tails_lose_nothing_and_need_no_repair() {
    let root = tempfile::tempdir().unwrap();
    let files = build(&root.path().join("src"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..10);
        dequeue_ids(q, 0..2);
    });
    let mut tail = Layout::new(8);
    tail.enqueue();
    tail.enqueue();
    tail.check_against(&files[&seg_name(3)]);
    let mut head = Layout::new(0);
    (0..4).for_each(|_| {
        head.enqueue();
    });
    head.dequeue();
    head.dequeue();
    head.check_against(&files[&seg_name(1)]);

    let mut case = 0;
    for (seg, data_end) in [(3, tail.data_end()), (1, head.data_end())] {
        let original = &files[&seg_name(seg)];
        let mut variants: Vec<Vec<u8>> = Vec::new();
        for zeros in [4, 16, 4096] {
            // Zeros after the preallocated file.
            let mut v = original.clone();
            v.resize(v.len() + zeros, 0);
            variants.push(v);
            // Zeros right after the last frame of a file that ended there.
            let mut v = original[..data_end].to_vec();
            v.resize(data_end + zeros, 0);
            variants.push(v);
        }
        // Zero bytes of fewer than a frame's head word, right after the data.
        for zeros in 1..4 {
            let mut v = original[..data_end].to_vec();
            v.resize(data_end + zeros, 0);
            variants.push(v);
        }
        for bytes in variants {
            let mut damaged = files.clone();
            damaged.insert(seg_name(seg), bytes);
            let dst = root.path().join(format!("case{case}"));
            case += 1;
            let expect = Expect::Opens {
                items: (2..10).collect(),
                repair: None,
            };
            check_damaged_copy(&damaged, &dst, seg, expect);
        }
        // set_len beyond the end (a sparse hole), on the file as the queue left it.
        let dst = root.path().join(format!("case{case}"));
        case += 1;
        restore(&files, &dst);
        let file = fs::OpenOptions::new()
            .write(true)
            .open(seg_path(&dst, seg))
            .unwrap();
        file.set_len(original.len() as u64 + (3 << 20) + 5).unwrap();
        drop(file);
        let expect = Expect::Opens {
            items: (2..10).collect(),
            repair: None,
        };
        check_in_place(&snapshot(&dst), &dst, seg, expect);
    }
}

/// Marker bytes as FORMAT.md defines them.
fn ack_marker(index: u32) -> [u8; 4] {
    ((0b01 << 30) | (1 << 24) | index).to_le_bytes()
}

/// Garbage tails that are not a valid frame, each (name, bytes).
fn garbage_tails(rng: &mut Rng) -> Vec<(&'static str, Vec<u8>)> {
    let mut random = rng.nonzero_bytes(64);
    random[3] |= 0xC0; // frame kind 0b11: never valid
    let mut bad_crc = Vec::new();
    bad_crc.extend_from_slice(&((0b10u32 << 30) | 5).to_le_bytes());
    bad_crc.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    bad_crc.extend_from_slice(b"abcde");
    let mut huge = Vec::new();
    // A record head claiming 1 GiB - 1 bytes: must be refused, not allocated.
    huge.extend_from_slice(&((0b10u32 << 30) | ((1 << 30) - 1)).to_le_bytes());
    huge.extend_from_slice(&rng.nonzero_bytes(12));
    let mut unknown_marker = ack_marker(0);
    unknown_marker[3] = 0x40 | 0x3F; // marker type 63: unknown
    vec![
        ("one byte", vec![0xAB]),
        ("three bytes", vec![0x11, 0x22, 0x33]),
        ("random", random),
        ("record with a bad crc", bad_crc),
        ("record longer than the file", huge),
        (
            "marker naming a record not written",
            ack_marker(500).to_vec(),
        ),
        ("marker of an unknown type", unknown_marker.to_vec()),
    ]
}

// Guarantee: a torn tail of non-zero garbage (a crash mid-write on a disk
// that leaves garbage, not zeros) is cut on open and reported at the end of
// the last whole frame, all items before it stay, and the garbage is zeroed
// durably so that new items written over it are read back and the next
// open is clean.
#[test]
fn garbage_tail_is_cut_reported_and_zeroed() {
    let root = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(7);
    // Two shapes: a 3-segment queue (garbage after the tail's records) and a
    // single segment whose records interleave with acks.
    let multi = build(&root.path().join("multi"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..10);
        dequeue_ids(q, [0]);
    });
    let mut multi_tail = Layout::new(8);
    multi_tail.enqueue();
    multi_tail.enqueue();
    multi_tail.check_against(&multi[&seg_name(3)]);

    let mut single_layout = Layout::new(0);
    let single = build(&root.path().join("single"), &turbo(), |q| {
        for op in "EEDEDEE".chars() {
            if op == 'E' {
                q.enqueue_bytes(&payload(single_layout.enqueue())).unwrap();
            } else {
                assert_eq!(q.dequeue().unwrap(), Some(payload(single_layout.dequeue())));
            }
        }
    });
    single_layout.check_against(&single[&seg_name(1)]);
    let single_end = single_layout.data_end();

    let shapes = [
        (
            &multi,
            3u64,
            multi_tail.data_end(),
            (1..10).collect::<Vec<u64>>(),
        ),
        (&single, 1, single_end, single_layout.survivors(single_end)),
    ];
    let mut case = 0;
    for (files, seg, end, items) in &shapes {
        let original = &files[&seg_name(*seg)];
        let mut tails = garbage_tails(&mut rng);
        if *seg == 1 {
            // Record 0 is already acked in this shape: a second ack is invalid.
            tails.push(("second ack of one record", ack_marker(0).to_vec()));
        }
        for (name, garbage) in tails {
            // Right after the last frame, inside the preallocated zeros.
            let mut bytes = original.clone();
            bytes[*end..*end + garbage.len()].copy_from_slice(&garbage);
            let cut = nonzero_end(&garbage) as u64;
            variant(&root, &mut case, files, *seg, bytes, name, items, *end, cut);

            // Right after the last frame, past the end of a file that ended there.
            let mut bytes = original[..*end].to_vec();
            bytes.extend_from_slice(&garbage);
            variant(&root, &mut case, files, *seg, bytes, name, items, *end, cut);
        }
        // Garbage after a gap of zeros, and after the preallocated end.
        let garbage = rng.nonzero_bytes(32);
        let mut bytes = original.clone();
        bytes[end + 100..end + 132].copy_from_slice(&garbage);
        variant(
            &root,
            &mut case,
            files,
            *seg,
            bytes,
            "after zeros",
            items,
            *end,
            132,
        );
        let mut bytes = original.clone();
        bytes.extend_from_slice(&garbage);
        let cut = (original.len() + 32 - end) as u64;
        variant(
            &root,
            &mut case,
            files,
            *seg,
            bytes,
            "after the file",
            items,
            *end,
            cut,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn variant(
        root: &tempfile::TempDir,
        case: &mut usize,
        files: &BTreeMap<String, Vec<u8>>,
        seg: u64,
        bytes: Vec<u8>,
        name: &str,
        items: &[u64],
        end: usize,
        cut: u64,
    ) {
        let mut damaged = files.clone();
        damaged.insert(seg_name(seg), bytes);
        let dst = root.path().join(format!("case{case}"));
        *case += 1;
        eprintln!("garbage tail: {name} in segment {seg} ({dst:?})");
        let expect = Expect::Opens {
            items: items.to_vec(),
            repair: Some((end as u64, cut)),
        };
        check_damaged_copy(&damaged, &dst, seg, expect);
    }
}

// Guarantee: a corrupt byte inside a record of a sealed segment (one with
// a successor) is never taken for a torn tail: the open (head segment)
// fails with Corrupted naming the segment file and the offset of the bad
// record, without a panic and without changing or deleting any file.
#[test]
fn flipped_byte_in_a_sealed_head_segment_fails_the_open() {
    let root = tempfile::tempdir().unwrap();
    let files = build(&root.path().join("src"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..12);
        dequeue_ids(q, [0]);
        assert_eq!(q.segment_numbers().unwrap(), 1..=3);
    });
    let mut layout = Layout::new(0);
    (0..4).for_each(|_| {
        layout.enqueue();
    });
    layout.dequeue();
    layout.check_against(&files[&seg_name(1)]);

    let mut case = 0;
    for frame in layout
        .frames
        .iter()
        .filter(|f| matches!(f.kind, Kind::Record(_)))
    {
        for at in frame.start..frame.end {
            for mask in [0x01u8, 0x80, 0xFF] {
                let mut damaged = files.clone();
                damaged.get_mut(&seg_name(1)).unwrap()[at] ^= mask;
                let dst = root.path().join(format!("case{case}"));
                case += 1;
                check_damaged_copy(&damaged, &dst, 1, Expect::Corrupted(frame.start as u64));
            }
        }
    }
}

// Guarantee: a corrupt byte inside a record of a sealed middle segment is
// found by the dequeue that reaches it (open reads only the head and the
// tail): that dequeue, and every later one, and peek, fail with Corrupted
// naming the segment and the record's offset; no panic; the consumed head
// segment before it is not deleted and the damaged files are not changed.
#[test]
fn flipped_byte_in_a_sealed_middle_segment_fails_the_dequeue_that_reaches_it() {
    let root = tempfile::tempdir().unwrap();
    let files = build(&root.path().join("src"), &turbo().segment_items(4), |q| {
        enqueue_ids(q, 0..12)
    });
    let mut layout = Layout::new(4);
    (0..4).for_each(|_| {
        layout.enqueue();
    });
    layout.check_against(&files[&seg_name(2)]);

    let mut case = 0;
    for frame in &layout.frames {
        for at in [frame.start, frame.start + 3, frame.start + 5, frame.end - 1] {
            let mut damaged = files.clone();
            damaged.get_mut(&seg_name(2)).unwrap()[at] ^= 0x10;
            let dst = root.path().join(format!("case{case}"));
            case += 1;
            restore(&damaged, &dst);
            let q = RawQueue::open_with(&dst, &turbo()).expect("open reads only head and tail");
            dequeue_ids(&q, 0..4);
            let seg2 = seg_path(&dst, 2);
            for _ in 0..2 {
                assert_corrupted(q.dequeue(), &seg2, frame.start as u64);
                assert_corrupted(q.peek(), &seg2, frame.start as u64);
            }
            assert_eq!(q.len(), 8);
            q.close().unwrap();
            let after = snapshot(&dst);
            let names: Vec<_> = after.keys().cloned().collect();
            assert_eq!(
                names,
                [seg_name(1), seg_name(2), seg_name(3), CONFIG.to_string()]
            );
            assert_eq!(after[&seg_name(2)], damaged[&seg_name(2)]);
            assert_eq!(after[&seg_name(3)], damaged[&seg_name(3)]);
        }
    }
}

// Guarantee: a segment missing between the head and the tail is a clear
// MissingSegment error naming the missing file, and the open deletes or
// changes nothing (the items after the gap cannot be trusted without it).
#[test]
fn missing_middle_segment_is_reported_and_nothing_is_deleted() {
    let root = tempfile::tempdir().unwrap();
    let files = build(&root.path().join("src"), &turbo().segment_items(2), |q| {
        enqueue_ids(q, 0..10);
        dequeue_ids(q, [0]);
        assert_eq!(q.segment_numbers().unwrap(), 1..=5);
    });
    for missing in [vec![2], vec![3], vec![4], vec![2, 3], vec![3, 4]] {
        let mut damaged = files.clone();
        for &m in &missing {
            damaged.remove(&seg_name(m)).unwrap();
        }
        let dst = root.path().join(format!("missing{missing:?}"));
        restore(&damaged, &dst);
        match RawQueue::open_with(&dst, &turbo()) {
            Err(Error::MissingSegment { path }) => {
                assert_eq!(path, seg_path(&dst, missing[0]));
            }
            other => panic!("expected MissingSegment for {missing:?}, got {other:?}"),
        }
        assert_eq!(snapshot(&dst), damaged, "the failed open changed files");
    }
}

// Guarantee: a crash between the dequeue of a segment's last record and
// the deletion of that segment leaves a fully consumed segment behind; the
// next open deletes it, reports it in deleted_segments, and counts stay
// right. Simulated by copying the directory while the queue is open, with
// segment 1 as it was read through a handle kept open across its deletion
// (the dequeue that settles its last record deletes it).
#[test]
fn fully_consumed_segment_left_by_a_crash_is_deleted_on_open() {
    use std::io::{Read, Seek};
    let root = tempfile::tempdir().unwrap();
    for (total, segments) in [(7u64, 1..=3u64), (5, 1..=2)] {
        let src = root.path().join(format!("src{total}"));
        let q = RawQueue::create_with(&src, &turbo().segment_items(3)).unwrap();
        enqueue_ids(&q, 0..total);
        dequeue_ids(&q, 0..2);
        assert_eq!(q.segment_numbers().unwrap(), segments);
        let mut crashed = snapshot(&src);
        let mut first = fs::File::open(seg_path(&src, 1)).unwrap();
        dequeue_ids(&q, 2..3);
        // The "crash": the segment with its last ack, not yet deleted.
        let mut settled = Vec::new();
        first.rewind().unwrap();
        first.read_to_end(&mut settled).unwrap();
        crashed.insert(seg_name(1), settled);
        drop(q);
        assert!(
            crashed.contains_key(&seg_name(1)),
            "test premise: segment 1 still there"
        );
        let mut acked = Layout::new(0);
        (0..3).for_each(|_| {
            acked.enqueue();
        });
        (0..3).for_each(|_| {
            acked.dequeue();
        });
        acked.check_against(&crashed[&seg_name(1)]);

        let dst = root.path().join(format!("crashed{total}"));
        restore(&crashed, &dst);
        let q = RawQueue::open_with(&dst, &turbo()).unwrap();
        let report = q.open_report();
        assert_eq!(report.deleted_segments, vec![seg_path(&dst, 1)]);
        assert!(report.repairs.is_empty() && report.removed_temp_files.is_empty());
        assert!(!seg_path(&dst, 1).exists());
        assert_eq!(q.len(), (total - 3) as usize);
        assert_eq!(*q.segment_numbers().unwrap().start(), 2);
        q.close().unwrap();

        let q = RawQueue::open_with(&dst, &turbo()).unwrap();
        assert!(q.open_report().deleted_segments.is_empty());
        assert_eq!(drain(&q), payloads(3..total));
    }
}

// Guarantee: a segment whose every record is acked, written by hand the
// way FORMAT.md describes it, is retired on open even when the segment
// after it is a middle one (on disk only), and len counts only the rest.
#[test]
fn hand_written_fully_acked_head_is_retired_on_open() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src");
    let files = build(&src, &turbo().segment_items(2), |q| {
        enqueue_ids(q, 0..6);
    });
    // Append acks for both records of segment 1 after its records.
    let mut layout = Layout::new(0);
    layout.enqueue();
    layout.enqueue();
    let mut damaged = files.clone();
    let seg1 = damaged.get_mut(&seg_name(1)).unwrap();
    let end = layout.data_end();
    seg1[end..end + 4].copy_from_slice(&ack_marker(1));
    seg1[end + 4..end + 8].copy_from_slice(&ack_marker(0));
    let dst = root.path().join("dst");
    restore(&damaged, &dst);
    let q = RawQueue::open_with(&dst, &turbo()).unwrap();
    assert_eq!(q.open_report().deleted_segments, vec![seg_path(&dst, 1)]);
    assert_eq!(q.len(), 4);
    assert_eq!(q.segment_numbers().unwrap(), 2..=3);
    assert_eq!(drain(&q), payloads(2..6));
}

// Guarantee: a segment's fullness comes from its own header, never from the
// options of the open, so reopening with other segment sizes (larger,
// smaller, by items and by bytes) never wedges or miscounts the queue:
// the tail keeps its own limit, new segments take the new one, and the
// stored config keeps the last sizes given.
#[test]
fn reopen_with_other_segment_items_keeps_each_segment_limit() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let q = RawQueue::create_with(&dir, &turbo().segment_items(10)).unwrap();
    enqueue_ids(&q, 0..8);
    q.close().unwrap();

    // Smaller: the tail still takes records up to its own limit of 10.
    let q = RawQueue::open_with(&dir, &turbo().segment_items(3)).unwrap();
    assert_eq!(q.len(), 8);
    enqueue_ids(&q, 8..10);
    assert_eq!(q.segment_numbers().unwrap(), 1..=1);
    enqueue_ids(&q, 10..11);
    assert_eq!(q.segment_numbers().unwrap(), 1..=2);
    enqueue_ids(&q, 11..14);
    assert_eq!(q.segment_numbers().unwrap(), 1..=3);
    q.close().unwrap();

    // No sizes given: the stored ones (3) apply to new segments.
    let q = RawQueue::open_with(&dir, &turbo()).unwrap();
    assert_eq!(q.len(), 14);
    enqueue_ids(&q, 14..17);
    assert_eq!(q.segment_numbers().unwrap(), 1..=4);
    q.close().unwrap();

    // Larger: the full tail (3 records) is not reopened for more.
    let q = RawQueue::open_with(&dir, &turbo().segment_items(100)).unwrap();
    enqueue_ids(&q, 17..40);
    assert_eq!(q.segment_numbers().unwrap(), 1..=5);
    assert_eq!(q.len(), 40);
    dequeue_ids(&q, 0..12);
    q.close().unwrap();

    let q = RawQueue::open_with(&dir, &turbo().segment_items(1)).unwrap();
    assert_eq!(q.len(), 28);
    assert_eq!(drain(&q), payloads(12..40));
}

// Guarantee: random reopen cycles with other segment sizes (items and
// bytes, larger and smaller) and enqueues/dequeues in between keep the
// count and the order of a VecDeque model, and the segment files on disk
// are exactly the ones from head to tail.
#[test]
fn reopen_cycles_with_changing_segment_sizes_keep_counts_and_order() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("q");
    let mut rng = Rng::new(42);
    let mut model: VecDeque<Vec<u8>> = VecDeque::new();
    let mut next = 0u64;
    let sizes: [(Option<u32>, Option<u32>); 9] = [
        (Some(3), None),
        (Some(10), None),
        (Some(1), None),
        (None, Some(4096)),
        (Some(2), Some(8192)),
        (None, None),
        (Some(1000), Some(1 << 20)),
        (Some(5), Some(4096)),
        (None, Some(1 << 16)),
    ];
    drop(RawQueue::create_with(&dir, &turbo()).unwrap());
    for round in 0..3 {
        for (items, bytes) in sizes {
            let mut options = turbo();
            if let Some(items) = items {
                options = options.segment_items(items);
            }
            if let Some(bytes) = bytes {
                options = options.segment_bytes(bytes);
            }
            let q = RawQueue::open_with(&dir, &options).unwrap();
            assert!(q.open_report().is_clean(), "{:?}", q.open_report());
            assert_eq!(
                q.len(),
                model.len(),
                "round {round}, sizes {items:?}/{bytes:?}"
            );
            assert_eq!(q.peek().unwrap(), model.front().cloned());
            for _ in 0..rng.below(25) {
                // Some items near a kilobyte, so byte limits of 4 KiB matter.
                let mut item = payload(next);
                next += 1;
                item.resize(item.len() + rng.below(1500) as usize, b'z');
                q.enqueue_bytes(&item).unwrap();
                model.push_back(item);
            }
            for _ in 0..rng.below(20) {
                assert_eq!(q.dequeue().unwrap(), model.pop_front());
            }
            assert_eq!(q.len(), model.len());
            let numbers = q.segment_numbers().unwrap();
            let on_disk: Vec<String> = names(&dir)
                .into_iter()
                .filter(|n| n.ends_with(".seg"))
                .collect();
            let expected: Vec<String> = numbers.map(seg_name).collect();
            assert_eq!(on_disk, expected);
            q.close().unwrap();
        }
    }
    let q = RawQueue::open(&dir).unwrap();
    assert_eq!(q.len(), model.len());
    assert_eq!(drain(&q), Vec::from(model));
}
