//! The seed corpus of the three targets (`cargo run --bin seeds` writes it;
//! `tests/fuzz_corpus.rs` checks it is committed as generated): real queues,
//! hand-written inputs, and the reproducers of the bugs fuzzing found.

use std::fs;
use std::path::Path;

use dque::{Durability, Options, RawQueue};

use super::common::{item, list_dir, scratch_dir};
use super::format::{
    header_bytes, judge_header, le_u64, marker_word, record_frame, replay, HeaderVerdict, ACK,
    CONFIG_FILE, DEAD, HEADER_LEN, LEASE, RAW_CODEC, REACHED, RELEASE, SECTOR,
};
use super::open::{ConfigFile, HeaderSpec, OpenInput, OpenOutcome, Program, SegmentFile};
use super::ops::{Mode, Op, OpsInput};
use super::repair::RepairOutcome;

/// One seed file: the target it is for, a name, and its bytes.
#[derive(Debug, Clone)]
pub struct Seed {
    /// `open` or `ops`.
    pub target: &'static str,
    /// File name in the corpus: `seed-...`, or `bug-...` for the reproducer
    /// of a bug found by fuzzing (failing until it is fixed).
    pub name: String,
    /// The input.
    pub data: Vec<u8>,
    /// For `open` seeds: what [`check_open`](super::check_open) must see, if
    /// the seed is made for one outcome.
    pub outcome: Option<OpenOutcome>,
    /// For `repair` seeds: what [`check_repair`](super::check_repair) must
    /// see, if the seed is made for one outcome.
    pub repaired: Option<RepairOutcome>,
}

/// A real queue's files: the config and the segments (numbered from `first`).
struct RealQueue {
    config: Vec<u8>,
    first: u64,
    segments: Vec<Vec<u8>>,
}

impl RealQueue {
    /// Snapshots the queue directory `dir` (open or closed).
    fn read(dir: &Path) -> RealQueue {
        let listing = list_dir(dir);
        RealQueue {
            config: fs::read(dir.join(CONFIG_FILE)).expect("read config"),
            first: listing.segments.first().map_or(1, |s| s.0),
            segments: listing
                .segments
                .iter()
                .map(|(_, p)| fs::read(p).expect("read segment"))
                .collect(),
        }
    }

    fn input(&self) -> OpenInput {
        OpenInput {
            config: ConfigFile::Raw(self.config.clone()),
            turbo: true,
            sizes: None,
            create: false,
            temp_files: false,
            cut_damaged_tail: false,
            first_number: self.first,
            segments: self
                .segments
                .iter()
                .map(|s| SegmentFile::from_bytes(s))
                .collect(),
        }
    }
}

/// Builds a real queue of small segments with `items` per segment: enqueue
/// `n` items, dequeue `taken`, and snapshot the files while it is open (as a
/// kill leaves them) or after close.
fn real_queue(items: u32, n: u32, taken: u32, close: bool) -> RealQueue {
    let root = scratch_dir();
    let dir = root.path().join("q");
    let options = Options::new()
        .durability(Durability::Turbo)
        .segment_items(items)
        .segment_bytes(4096);
    let q = RawQueue::create_with(&dir, &options).expect("create a seed queue");
    for i in 0..n {
        q.enqueue(&item(i, 5 + (i as usize * 7) % 40))
            .expect("enqueue");
    }
    for _ in 0..taken {
        q.dequeue().expect("dequeue").expect("an item");
    }
    if close {
        q.close().expect("close");
    }
    RealQueue::read(&dir)
}

/// End of the last whole frame of a real segment.
fn record_end(segment: &[u8]) -> usize {
    let header = match judge_header(segment, le_u64(segment, 8)) {
        HeaderVerdict::Valid(h) => h,
        other => panic!("seed segment header: {other:?}"),
    };
    replay(segment, header.max_records).end
}

/// The seed corpus of both targets, from real queues and hand-written inputs.
pub fn seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut open = |name: &str, input: OpenInput, outcome: Option<OpenOutcome>| {
        seeds.push(Seed {
            target: "open",
            name: name.to_string(),
            data: input.encode(),
            outcome,
            repaired: None,
        });
    };
    let opened = |items, repairs, stopped_by_damage| {
        Some(OpenOutcome::Opened {
            items,
            repairs,
            stopped_by_damage,
        })
    };
    let refused = || Some(OpenOutcome::Refused(String::new()));

    let empty = OpenInput {
        config: ConfigFile::Absent,
        turbo: false,
        sizes: None,
        create: true,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 1,
        segments: Vec::new(),
    };
    open(
        "seed-create-in-empty-dir",
        empty.clone(),
        opened(0, 0, false),
    );
    open(
        "seed-config-only",
        OpenInput {
            config: ConfigFile::Valid {
                records: 4,
                bytes: 4096,
                codec: RAW_CODEC,
            },
            ..empty.clone()
        },
        opened(0, 0, false),
    );
    let one = real_queue(100, 6, 2, true);
    open("seed-one-segment-acked", one.input(), opened(4, 0, false));
    let leftovers = OpenInput {
        temp_files: true,
        turbo: false,
        ..one.input()
    };
    open(
        "seed-one-segment-temp-files",
        leftovers.clone(),
        opened(4, 0, false),
    );
    // Opening rewrites the config (new sizes, or a new queue) through
    // dque.conf.tmp, which replaces a leftover one: removing the leftovers
    // listed before must not then fail (a bug until 7a4b5e0: Io NotFound).
    let resized = OpenInput {
        sizes: Some((2, 0)),
        ..leftovers
    };
    open(
        "seed-temp-config-rewritten-then-removed",
        resized,
        opened(4, 0, false),
    );
    let created = OpenInput {
        temp_files: true,
        ..empty.clone()
    };
    open("seed-create-over-temp-config", created, opened(0, 0, false));
    let three = real_queue(3, 8, 1, true);
    open("seed-three-segments", three.input(), opened(7, 0, false));
    // A kill between the ack of a head's last record and the head's
    // retirement (by the same call) leaves a settled head: the open deletes it.
    let mut killed = real_queue(3, 8, 2, false);
    let head = &mut killed.segments[0];
    let end = record_end(head);
    head[end..end + 4].copy_from_slice(&marker_word(ACK, 2).to_le_bytes());
    open(
        "seed-settled-head-left-by-kill",
        killed.input(),
        opened(5, 0, false),
    );

    // A torn tail: the last record's payload damaged, then zeros over it.
    let mut torn = three.input();
    let tail = three.segments.last().expect("a tail");
    let end = record_end(tail);
    let mut bytes = tail.clone();
    bytes[end - 3] ^= 0x5A;
    torn.segments[2] = SegmentFile::from_bytes(&bytes);
    open("seed-torn-tail-record", torn.clone(), opened(6, 1, false));
    let mut zeroed = bytes.clone();
    zeroed[end - 20..end - 8].fill(0);
    torn.segments[2] = SegmentFile::from_bytes(&zeroed);
    open("seed-zeroed-tail-record", torn, opened(6, 1, false));

    // Damage inside sealed segments: the head refuses to open, and so does a
    // middle one in the front run (the head has an ack marker, so the open
    // replays the middle); a middle one after the run stops the dequeues
    // that reach it.
    let mut sealed = three.input();
    let mut head = three.segments[0].clone();
    head[HEADER_LEN + 10] ^= 1;
    sealed.segments[0] = SegmentFile::from_bytes(&head);
    open("seed-damaged-head", sealed, refused());
    let mut middle = three.input();
    let mut seg = three.segments[1].clone();
    seg[HEADER_LEN + 10] ^= 1;
    middle.segments[1] = SegmentFile::from_bytes(&seg);
    open("seed-damaged-middle", middle, refused());
    let untouched = real_queue(3, 8, 0, true);
    let mut after_run = untouched.input();
    let mut seg = untouched.segments[1].clone();
    seg[HEADER_LEN + 10] ^= 1;
    after_run.segments[1] = SegmentFile::from_bytes(&seg);
    open(
        "seed-damaged-middle-after-the-run",
        after_run,
        opened(3, 0, true),
    );

    // Config and header trouble.
    open(
        "seed-segments-without-config",
        OpenInput {
            config: ConfigFile::Absent,
            ..three.input()
        },
        refused(),
    );
    let mut newer = three.config.clone();
    newer[4] = 2;
    open(
        "seed-config-of-version-2",
        OpenInput {
            config: ConfigFile::Raw(newer),
            ..one.input()
        },
        refused(),
    );
    open(
        "seed-config-of-bincode",
        OpenInput {
            config: ConfigFile::Valid {
                records: 3,
                bytes: 4096,
                codec: 1,
            },
            ..one.input()
        },
        refused(),
    );

    // Frames written by the program language, with valid headers.
    let header = |first_id, max_records| {
        Some(HeaderSpec {
            number: None,
            first_id,
            max_records,
            max_bytes: 4096,
        })
    };
    let program = |header, body: Vec<u8>| SegmentFile {
        header,
        program: true,
        body,
        zeros16: 64,
        absent: false,
        quarantined: false,
    };
    let built = OpenInput {
        config: ConfigFile::Valid {
            records: 3,
            bytes: 4096,
            codec: RAW_CODEC,
        },
        turbo: true,
        sizes: None,
        create: false,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 7,
        segments: vec![
            program(
                header(10, 3),
                Program::default()
                    .record(b"a")
                    .record(b"bb")
                    .record(b"ccc")
                    .ack(2)
                    .ack(0)
                    .build(),
            ),
            program(
                header(13, 3),
                Program::default().record(b"dddd").record(b"e").build(),
            ),
            // A torn write: the record after "f" has a bit flipped, and
            // no whole record follows it.
            program(
                header(15, 3),
                Program::default().record(b"f").torn_record(9, 70).build(),
            ),
        ],
    };
    open(
        "seed-program-three-segments",
        built.clone(),
        opened(4, 1, false),
    );

    // FORMAT.md, "Tail damage". A bad frame followed by a whole record is
    // damage: the open refuses it and changes nothing, unless asked to cut
    // it (then it is reported as damage, a copy kept).
    let mut damaged = built.clone();
    damaged.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .torn_record(9, 70)
            .record(b"g")
            .build(),
    );
    open("seed-damaged-tail", damaged.clone(), refused());
    damaged.cut_damaged_tail = true;
    open("seed-damaged-tail-cut", damaged, opened(4, 1, false));
    // What a power loss leaves is a torn write, whole records after it or
    // not: a zero word where the frame should start...
    let mut hole = built.clone();
    hole.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .zeros(2)
            .record(b"g")
            .build(),
    );
    open("seed-zero-word-then-a-record", hole, opened(4, 1, false));
    // ... or a record with an unwritten (all-zero) sector inside it,
    // written back out of order with the record after it.
    let mut sector = built.clone();
    let mut bytes = header_bytes(9, 15, 3, 4096);
    bytes.extend_from_slice(&record_frame(b"f"));
    let big_at = bytes.len();
    bytes.extend_from_slice(&record_frame(&[0x5A; 1500]));
    bytes.extend_from_slice(&record_frame(b"g"));
    bytes.resize(bytes.len() + 1024, 0);
    let second_sector = (big_at / SECTOR + 1) * SECTOR;
    bytes[second_sector..second_sector + SECTOR].fill(0);
    sector.segments[2] = SegmentFile::from_bytes(&bytes);
    open(
        "seed-unwritten-sector-then-a-record",
        sector.clone(),
        opened(4, 1, false),
    );
    // The same record with one bit flipped instead: damage.
    let mut flipped = header_bytes(9, 15, 3, 4096);
    flipped.extend_from_slice(&record_frame(b"f"));
    flipped.extend_from_slice(&record_frame(&[0x5A; 1500]));
    flipped.extend_from_slice(&record_frame(b"g"));
    flipped.resize(flipped.len() + 1024, 0);
    flipped[second_sector + 7] ^= 0x10;
    sector.segments[2] = SegmentFile::from_bytes(&flipped);
    open("seed-flipped-bit-then-a-record", sector, refused());
    // A torn run of markers after a sealed segment's records is cut; a bad
    // marker followed by a whole record there is damage.
    let mut sealed_damage = built.clone();
    sealed_damage.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .marker(REACHED, 0)
            .word(0x7F00_0000)
            .record(b"x")
            .build(),
    );
    open("seed-damaged-marker-run", sealed_damage, refused());
    // No config, only quarantine/ (kept bytes of a queue whose config was
    // lost): not a queue, even to open_or_create, which writes nothing.
    let mut kept_only = empty.clone();
    kept_only.segments = vec![SegmentFile {
        absent: true,
        quarantined: true,
        ..SegmentFile::from_bytes(&three.segments[0])
    }];
    open("seed-only-quarantine-is-not-a-queue", kept_only, refused());
    let mut markers = built.clone();
    markers.segments.truncate(1);
    markers.segments[0] = program(
        header(0, 5),
        Program::default()
            .record(b"x")
            .record(b"y")
            .ack(1)
            .ack(1)
            .word(0x7F00_0000)
            .build(),
    );
    open("seed-program-double-ack", markers, opened(1, 1, false));

    // Lease, release, dead and reached markers: attempts count lease
    // markers less release markers, dead settles, reached changes nothing
    // (also after an ack); the marked segments form a run from the head
    // through the tail; a release with no lease left to give back ends the
    // tail's replay and is cut.
    let mut leases = built.clone();
    leases.segments = vec![
        program(
            header(10, 3),
            Program::default()
                .record(b"a")
                .record(b"bb")
                .record(b"ccc")
                .marker(LEASE, 0)
                .marker(LEASE, 1)
                .marker(LEASE, 0)
                .marker(LEASE, 0)
                .marker(RELEASE, 0)
                .marker(DEAD, 1)
                .ack(2)
                .marker(REACHED, 2)
                .build(),
        ),
        program(
            header(13, 3),
            Program::default()
                .record(b"dddd")
                .record(b"e")
                .marker(REACHED, 0)
                .build(),
        ),
        program(
            header(15, 3),
            Program::default()
                .record(b"f")
                .marker(LEASE, 0)
                .marker(RELEASE, 0)
                .marker(RELEASE, 0)
                .build(),
        ),
    ];
    open(
        "seed-program-lease-markers",
        leases.clone(),
        opened(4, 1, false),
    );
    // A torn marker after the last record of a sealed segment in the front
    // run: cut and reported at open.
    let mut torn_marker = leases.clone();
    torn_marker.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .marker(REACHED, 0)
            .marker(LEASE, 7)
            .build(),
    );
    open(
        "seed-torn-marker-in-the-run",
        torn_marker,
        opened(4, 2, false),
    );
    // A tail with markers pulls the middle segment into the front run: its
    // damage fails the open even though the head has no markers.
    let mut marked_tail = built.clone();
    marked_tail.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    marked_tail.segments[1] = program(header(13, 3), Program::default().record(b"dddd").build());
    marked_tail.segments[2] = program(
        header(15, 3),
        Program::default().record(b"f").marker(LEASE, 0).build(),
    );
    open(
        "seed-damaged-middle-before-a-marked-tail",
        marked_tail,
        refused(),
    );

    // Bug: a header whose first id leaves no room for its records: the id
    // after the last record overflows u64 (a panic with overflow checks).
    let mut ids_end = built.clone();
    ids_end.segments.truncate(1);
    ids_end.segments[0] = program(
        header(u64::MAX, 3),
        Program::default().record(b"last id").build(),
    );
    open("bug-first-id-overflows", ids_end, None);
    // Bug: a segment numbered u64::MAX: the open computes the number after
    // it, and so would the roll-over of this full tail (a panic with
    // overflow checks).
    let mut numbers_end = built.clone();
    numbers_end.first_number = u64::MAX;
    numbers_end.segments.truncate(1);
    numbers_end.segments[0] = program(header(0, 1), Program::default().record(b"full").build());
    open("bug-segment-number-u64-max", numbers_end, None);
    // Bug: an ack marker in a middle segment (never written by dque, but
    // valid by FORMAT.md): len() counts the record, dequeues skip it.
    let mut middle_ack = built.clone();
    middle_ack.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .ack(0)
            .build(),
    );
    open("bug-ack-in-middle-segment", middle_ack, opened(3, 1, false));

    // Bug: the open deletes a consumed head and replays the middle segment
    // after it as the new head, cutting the garbage after its records, but
    // does not report that cut.
    let mut unreported = built.clone();
    unreported.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .ack(0)
            .ack(1)
            .ack(2)
            .build(),
    );
    unreported.segments[1] = program(
        header(13, 3),
        Program::default()
            .record(b"dddd")
            .record(b"e")
            .word(0x7F00_0000)
            .build(),
    );
    unreported.segments[2] = program(header(15, 3), Program::default().record(b"f").build());
    open(
        "bug-unreported-cut-at-open",
        unreported,
        opened(3, 1, false),
    );

    // Bug: damage before a whole record whose payload ends in zero bytes is
    // taken for a torn write and cut. The open looks for whole records only
    // up to the last non-zero byte (rounded up to 4), where the record's
    // last payload bytes, zeros, lie past it; but the record is whole in
    // the file (FORMAT.md, "Tail damage": no whole record anywhere after the
    // bad frame), so the open must refuse it. Found by the `open` fuzzer.
    let mut zero_tail = built.clone();
    zero_tail.segments[2] = program(
        header(15, 3),
        Program::default()
            .record(b"f")
            .torn_record(9, 70)
            .record(&[0; 8])
            .build(),
    );
    open(
        "bug-damage-before-a-record-ending-in-zeros",
        zero_tail,
        refused(),
    );

    // Bug: a middle segment after the run holds records its successor's
    // first id leaves no room for (the successor starts at the same id): the
    // dequeues that reach it stop with `Corrupted`, but `peek()` there gives
    // the tail's first record (the id it looks for is the tail's too), so
    // peek and dequeue disagree. Found by the `open` fuzzer.
    let mut overlapping = built.clone();
    overlapping.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    overlapping.segments[2] = program(header(13, 3), Program::default().record(b"f").build());
    open(
        "bug-peek-past-a-damaged-middle-segment",
        overlapping,
        opened(3, 0, true),
    );

    // The repair target (its corpus also holds the open target's): gaps,
    // segments moved aside, placeholders, a new tail, and what it refuses.
    let mut repair = |name: &str, input: OpenInput, steps: Option<(&[&'static str], usize)>| {
        seeds.push(Seed {
            target: "repair",
            name: name.to_string(),
            data: input.encode(),
            outcome: None,
            repaired: Some(match steps {
                Some((steps, items)) => RepairOutcome::Repaired {
                    steps: steps.to_vec(),
                    items,
                },
                None => RepairOutcome::Refused(String::new()),
            }),
        });
    };
    // A middle segment gone: a placeholder takes its ids (13 and 14).
    let mut gap = built.clone();
    gap.segments[1].absent = true;
    repair(
        "seed-repair-missing-middle",
        gap.clone(),
        Some((&["cut", "fill"], 2)),
    );
    // A repair stopped after moving it: the gap is filled the same way, the
    // file in quarantine/ is left alone.
    gap.segments[1].quarantined = true;
    repair("seed-repair-moved-middle", gap, Some((&["cut", "fill"], 2)));
    // A sealed middle segment with a torn record, moved under another name
    // as its own is taken in quarantine/.
    let mut taken = built.clone();
    taken.segments[1] = program(
        header(13, 3),
        Program::default().record(b"dddd").torn_record(1, 3).build(),
    );
    taken.segments[1].quarantined = true;
    repair(
        "seed-repair-quarantine-name-taken",
        taken,
        Some((&["cut", "move", "fill"], 2)),
    );
    // The tail's header gone: moved, a new tail starts at id 15.
    let mut tail_gone = built.clone();
    tail_gone.segments[2] = SegmentFile::from_bytes(b"DQSG, then nothing a header holds");
    repair(
        "seed-repair-new-tail",
        tail_gone,
        Some((&["move", "new tail"], 3)),
    );
    // The head's header gone: moved, nothing fills ids before the queue.
    let mut head_gone = built.clone();
    head_gone.segments[0] = SegmentFile::from_bytes(&[0xFF; 40]);
    repair(
        "seed-repair-head-header",
        head_gone,
        Some((&["cut", "move"], 3)),
    );
    // A head without markers before a gap gets a reached marker, so that
    // the open replays up to the placeholder.
    let mut unmarked = built.clone();
    unmarked.segments[0] = program(
        header(10, 3),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .build(),
    );
    unmarked.segments[1].absent = true;
    repair(
        "seed-repair-mark-reached",
        unmarked.clone(),
        Some((&["cut", "mark", "fill"], 4)),
    );
    // An empty head before a gap can take no marker: refused.
    unmarked.segments[0] = program(header(10, 3), Vec::new());
    repair("seed-repair-empty-before-gap", unmarked, None);
    // Ids that overlap: refused.
    let mut overlap = built.clone();
    overlap.segments[1] = program(header(12, 3), Program::default().record(b"dddd").build());
    repair("seed-repair-ids-overlap", overlap, None);
    // Garbage in a segment whose successor's header is gone: its record
    // count is unknown, so it is moved too; the new tail follows the head.
    let mut unknown = built.clone();
    unknown.segments[1] = program(
        header(13, 3),
        Program::default().record(b"dddd").word(0x7F00_0000).build(),
    );
    unknown.segments[2] = SegmentFile::from_bytes(&[1; 8]);
    repair(
        "seed-repair-torn-before-lost-header",
        unknown,
        Some((&["move", "move", "new tail"], 1)),
    );

    // Bug: visit_records() walks on where a sealed segment holds more
    // records than its successor's first id allows (the open, the repair
    // and verify() call it damage), and gives id 13 twice.
    let mut overfull = built.clone();
    overfull.segments[0] = program(
        header(10, 4),
        Program::default()
            .record(b"a")
            .record(b"bb")
            .record(b"ccc")
            .record(b"dd")
            .ack(0)
            .build(),
    );
    repair("bug-visit-records-ids-overlap", overfull, None);
    // Bug: the same where the successor's first id is below the segment's
    // own: ids 20, then 13.
    let mut backwards = built.clone();
    backwards.segments[0] = program(header(20, 3), Program::default().record(b"a").build());
    repair("bug-visit-records-ids-go-back", backwards, None); // Bug: the tail's header is gone, and the new tail would start at id
                                                              // 2^64 - 100 with the config's limit of 1000 records, past u64::MAX: its
                                                              // header does not read, so the open that ends the repair fails, after
                                                              // the tail was moved and the new one written ("nothing was changed",
                                                              // says the error). A repair must fail before it changes anything, or
                                                              // write a header that reads.
    let mut last_ids = built.clone();
    last_ids.config = ConfigFile::Valid {
        records: 1000,
        bytes: 4096,
        codec: RAW_CODEC,
    };
    last_ids.segments = vec![
        program(
            header(u64::MAX - 100, 3),
            Program::default().record(b"a").build(),
        ),
        SegmentFile::from_bytes(b"not a header"),
    ];
    seeds.push(Seed {
        target: "repair",
        name: "bug-repair-fails-after-a-new-tail".to_string(),
        data: last_ids.encode(),
        outcome: None,
        repaired: None,
    });

    // The ops target.
    let mut ops = |name: &str, input: OpsInput| {
        seeds.push(Seed {
            target: "ops",
            name: name.to_string(),
            data: input.encode(),
            outcome: None,
            repaired: None,
        });
    };
    use Op::*;
    ops(
        "seed-basic",
        OpsInput {
            mode: Mode::Safe,
            items: 2,
            bytes: 0,
            ops: vec![
                Enqueue(10),
                Enqueue(0),
                Enqueue(200),
                Peek,
                Dequeue,
                Enqueue(7),
                Enqueue(8),
                DequeueNow,
                PeekNow,
                Sync,
                Dequeue,
                Dequeue,
                Dequeue,
            ],
        },
    );
    ops(
        "seed-rollover-by-bytes-and-too-large",
        OpsInput {
            mode: Mode::Turbo,
            items: 7,
            bytes: 0,
            ops: vec![
                Enqueue(2500),
                Enqueue(2000),
                Enqueue(3000),
                Enqueue(3050),
                Dequeue,
                Enqueue(100),
                Dequeue,
                Dequeue,
                Enqueue(1),
            ],
        },
    );
    ops(
        "seed-reopen-resized",
        OpsInput {
            mode: Mode::Periodic(5),
            items: 0,
            bytes: 100,
            ops: vec![
                Enqueue(3),
                Enqueue(4),
                Reopen {
                    items: Some(4),
                    bytes: None,
                    mode: Mode::Safe,
                },
                Enqueue(5),
                Enqueue(6),
                Dequeue,
                Reopen {
                    items: Some(0),
                    bytes: Some(9000),
                    mode: Mode::Turbo,
                },
                Enqueue(250),
                Dequeue,
                Dequeue,
            ],
        },
    );
    ops(
        "seed-kill-after-consuming-a-segment",
        OpsInput {
            mode: Mode::Turbo,
            items: 1,
            bytes: 0,
            ops: vec![
                Enqueue(20),
                Enqueue(21),
                Enqueue(22),
                Dequeue,
                Dequeue,
                Kill,
                Enqueue(23),
                SetDurability(Mode::Safe),
                Dequeue,
                PowerLoss(0),
                Dequeue,
                SetDurability(Mode::Turbo),
                Enqueue(1),
                Kill,
                Verify,
            ],
        },
    );
    ops(
        "seed-batches-and-verify",
        OpsInput {
            mode: Mode::Safe,
            items: 3,
            bytes: 0,
            ops: vec![
                EnqueueBatch {
                    count: 6,
                    size: 30,
                    too_large: false,
                },
                Verify,
                DequeueBatch(4),
                EnqueueBatch {
                    count: 2,
                    size: 1,
                    too_large: true,
                },
                Enqueue(9),
                DequeueBatch(9),
                Verify,
                Peek,
                DequeueBatch(0),
            ],
        },
    );
    ops(
        "seed-turbo-power-loss",
        OpsInput {
            mode: Mode::Turbo,
            items: 2,
            bytes: 0,
            ops: vec![
                Enqueue(40),
                Enqueue(41),
                Enqueue(42),
                Sync,
                Enqueue(43),
                Dequeue,
                Enqueue(600),
                PowerLoss(7),
                Dequeue,
                Enqueue(44),
                EnqueueBatch {
                    count: 3,
                    size: 200,
                    too_large: false,
                },
                PowerLoss(200),
                SetDurability(Mode::Periodic(2)),
                Enqueue(45),
                Dequeue,
                PowerLoss(3),
                Verify,
            ],
        },
    );
    // A power loss whose image the open cuts (a copy kept in quarantine/),
    // then kills: the copy of the directory takes quarantine/ along.
    ops(
        "seed-power-loss-then-kill",
        OpsInput {
            mode: Mode::Turbo,
            items: 1,
            bytes: 0,
            ops: vec![
                Enqueue(700),
                Enqueue(1200),
                Enqueue(10),
                PowerLoss(1),
                Kill,
                Enqueue(900),
                Enqueue(5),
                PowerLoss(9),
                Kill,
                Dequeue,
                Verify,
            ],
        },
    );
    seeds
}
