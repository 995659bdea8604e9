//! The `repair` target: `QueueFiles` and `repair()` on the `open` target's input.
//!
//! The repair is judged by properties that hold whatever steps it takes, not
//! by a model of the steps of FORMAT.md's "Repair": a model written from the
//! same text as the code agrees with any bug the two share. The yardstick is
//! what the input's files held, read with the checks' own frame reader
//! (`replay` in `format.rs`, written from FORMAT.md, not dque's): see `Before`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use dque::{repair, Error, OpenReport, Options, QueueFiles, RawQueue, RepairAction};

use super::common::{differences, scratch_dir, snapshot, write_files, Snapshot};
use super::format::{
    config_bytes, crc32, judge_config, judge_header, le_u32, replay, segment_name, ConfigVerdict,
    Header, HeaderVerdict, CONFIG_FILE, LOCK_FILE, QUARANTINE_DIR, RAW_CODEC, RECORD_LEN_MASK,
    RECORD_OVERHEAD,
};
use super::open::{expect_open, ConfigFile, Expect, Kind, OpenInput};

/// Where the caller counts allocations (with its global allocator): `reset`
/// forgets, `largest` gives the largest single allocation this thread made
/// since. The `repair` fuzz target and dque's corpus test both count.
#[derive(Debug, Clone, Copy)]
pub struct Allocations {
    /// Starts a new count.
    pub reset: fn(),
    /// The largest single allocation since the last `reset`.
    pub largest: fn() -> usize,
}

/// Placeholders of more ids than this are only planned, not written: a
/// placeholder takes 12 bytes per id on disk (and dque builds it in memory),
/// so that a gap of millions of ids would make files and allocations above
/// the corpus's 64 MiB limit and slow the fuzzer down; the dry run's plan is
/// still checked.
pub const MAX_PLACEHOLDER_IDS: u64 = 1 << 20;

/// What reading a queue's files may allocate at once: twice the largest
/// file (a segment read whole, the offsets of its records), and this much
/// for paths, messages and the like.
const READ_ALLOCATION_SLACK: usize = 256 << 10;

/// `snapshot` less the lock file, which taking the lock may create: it
/// must then be empty.
fn without_lock(mut snap: Snapshot) -> Snapshot {
    if let Some(lock) = snap.remove(Path::new(LOCK_FILE)) {
        assert_eq!(lock, Some(Vec::new()), "the lock file is not an empty file");
    }
    snap
}

fn assert_unchanged(dir: &Path, before: &Snapshot, what: &str) {
    let after = without_lock(snapshot(dir));
    let diff = differences(before, &after);
    assert!(
        diff.is_empty(),
        "{what} changed the queue directory: {diff:?}"
    );
}

/// The top-level segment files of `files`, by number.
fn segment_files(files: &[(String, Vec<u8>)]) -> BTreeMap<u64, &[u8]> {
    files
        .iter()
        .filter(|(name, _)| !name.contains('/'))
        .filter_map(|(name, bytes)| {
            let digits = name.strip_suffix(".seg")?;
            Some((digits.parse().expect("20 digits"), bytes.as_slice()))
        })
        .collect()
}

/// What an input's files held before any repair, read without dque.
struct Before {
    /// The top-level segment files, by number.
    segments: BTreeMap<u64, Vec<u8>>,
    /// The files of `quarantine/`.
    quarantined: Vec<Vec<u8>>,
    /// Every record a repaired queue may deliver: id and payload of each
    /// whole, unsettled record of a segment whose header reads, up to the
    /// segment's first invalid frame.
    pending: BTreeSet<(u64, Vec<u8>)>,
    /// The records that were whole and reachable, which a repaired queue
    /// must deliver: the pending records of every intact segment, in id
    /// order (see [`Before::read`]).
    reachable: Vec<(u64, Vec<u8>)>,
    /// Whether the files need no repair at all: a valid config, segments
    /// numbered without a gap, every one intact and ending at its clean end
    /// (no torn bytes to cut).
    sound: bool,
    /// Whether a segment holds markers outside the front run (see
    /// [`stray_markers`]): then `len()` may count settled records.
    stray_markers: bool,
    /// More items than the files could hold (a record takes 8 bytes at least).
    most_items: usize,
}

impl Before {
    /// Reads the input's files.
    ///
    /// "Reachable" is defined from FORMAT.md alone, with the checks' own
    /// `replay` (dque's `salvage` and `QueueFiles` share dque's frame
    /// reader with the repair, so they would agree with a bug in it). A
    /// segment is *intact* when its header reads, leaves room for its ids
    /// (its number is below `u64::MAX`, and ids up to its record limit and
    /// the one after stay below 2^64: FORMAT.md does not say what holds past
    /// the end of u64, and dque calls such a header damage), no whole record
    /// lies after the end of its frames (DESIGN.md: only a tail with no whole
    /// frame after it is torn; anything else is damage, which a repair may
    /// move aside whole), and every record it holds is known to be whole:
    ///
    /// * the tail (the last file): its records before the first invalid
    ///   frame (what follows is a torn write, cut on open);
    /// * a segment whose successor's header reads: exactly `successor's
    ///   first id - first id` whole records (the sealed rule; bytes after
    ///   them are a torn run of markers);
    /// * a segment whose successor is missing or unreadable: its record
    ///   count is unknown, so only if its frames run to its clean end
    ///   (nothing but zeros after them).
    ///
    /// Its unsettled records are reachable: a consumer reading it gets every
    /// one. This is wider than "the segments before the first damage": the
    /// repair gives up only damaged segments (FORMAT.md), so an intact
    /// segment after a gap or a damaged one keeps its records too.
    fn read(files: &[(String, Vec<u8>)]) -> Before {
        let segments: BTreeMap<u64, Vec<u8>> = segment_files(files)
            .into_iter()
            .map(|(number, bytes)| (number, bytes.to_vec()))
            .collect();
        let header = |number: u64| match segments.get(&number).map(|b| judge_header(b, number)) {
            Some(HeaderVerdict::Valid(header)) => Some(header),
            _ => None,
        };
        let config = files.iter().find(|(name, _)| name == CONFIG_FILE);
        let mut sound = matches!(
            config.map(|(_, bytes)| judge_config(bytes)),
            Some(ConfigVerdict::Valid { .. })
        );
        let last = segments.keys().next_back().copied();
        if let (Some(&first), Some(last)) = (segments.keys().next(), last) {
            sound &= last - first + 1 == segments.len() as u64;
        }
        let mut pending = BTreeSet::new();
        let mut reachable = Vec::new();
        for (&number, bytes) in &segments {
            let Some(h) = header(number) else {
                sound = false;
                continue;
            };
            let r = replay(bytes, h.max_records);
            let clean_end = r.garbage_end == r.end;
            let room = number < u64::MAX
                && h.first_id
                    .checked_add(u64::from(h.max_records) + 1)
                    .is_some();
            let held = |next: Header| next.first_id.checked_sub(h.first_id);
            let whole = room
                && !whole_record_from(bytes, r.end)
                && if Some(number) == last {
                    true
                } else if let Some(next) = header(number + 1) {
                    held(next) == Some(r.records.len() as u64)
                } else {
                    clean_end
                };
            sound &= whole && clean_end;
            for (index, (&(at, len), &settled)) in r.records.iter().zip(&r.settled).enumerate() {
                // Ids past u64::MAX name no record.
                let Some(id) = h.first_id.checked_add(index as u64) else {
                    break;
                };
                if !settled {
                    let record = (id, bytes[at..at + len].to_vec());
                    if whole {
                        reachable.push(record.clone());
                    }
                    pending.insert(record);
                }
            }
        }
        reachable.sort();
        Before {
            quarantined: files
                .iter()
                .filter(|(name, _)| name.starts_with(&format!("{QUARANTINE_DIR}/")))
                .map(|(_, bytes)| bytes.clone())
                .collect(),
            most_items: files
                .iter()
                .map(|(_, b)| b.len() / RECORD_OVERHEAD + 1)
                .sum::<usize>(),
            segments,
            pending,
            reachable,
            sound,
            stray_markers: stray_markers(files),
        }
    }
}

/// Whether a whole record (a record's head word, its payload in the file,
/// its CRC right) starts at a 4-byte boundary at or after `from`.
fn whole_record_from(file: &[u8], from: usize) -> bool {
    (from..file.len().saturating_sub(RECORD_OVERHEAD - 1))
        .step_by(4)
        .any(|at| {
            let word = le_u32(file, at);
            let len = (word & RECORD_LEN_MASK) as usize;
            let end = at + RECORD_OVERHEAD + len;
            word >> 30 == 0b10
                && end <= file.len()
                && le_u32(file, at + 4) == crc32(&[&file[at..at + 4], &file[at + 8..end]])
        })
}

/// A queue directory `q` made from an input's files, in a scratch directory
/// that also holds files that are not the queue's: copies of its config,
/// segments and temp files, and a `quarantine/` holding a copy of its
/// config, where a repair that strayed out of the queue directory would
/// find work to do. Nothing may touch them.
struct Sandbox {
    root: tempfile::TempDir,
    dir: PathBuf,
    /// Everything in `root` but the queue directory, as made.
    outside: Snapshot,
}

impl Sandbox {
    fn new(files: &[(String, Vec<u8>)]) -> Sandbox {
        let root = scratch_dir();
        let dir = root.path().join("q");
        fs::create_dir(&dir).expect("create the queue directory");
        write_files(&dir, files);
        let mut beside: Vec<(String, Vec<u8>)> = files
            .iter()
            .filter(|(name, _)| !name.contains('/'))
            .cloned()
            .collect();
        beside.push((
            format!("{QUARANTINE_DIR}/{CONFIG_FILE}"),
            config_bytes(1, 4096, RAW_CODEC),
        ));
        write_files(root.path(), &beside);
        let outside = Sandbox::outside_of(root.path());
        Sandbox { root, dir, outside }
    }

    fn outside_of(root: &Path) -> Snapshot {
        let mut snap = snapshot(root);
        snap.retain(|path, _| !path.starts_with("q"));
        snap
    }

    /// Property: nothing outside the queue directory is touched.
    fn assert_outside_untouched(&self, what: &str) {
        let now = Sandbox::outside_of(self.root.path());
        let diff = differences(&self.outside, &now);
        assert!(
            diff.is_empty(),
            "{what} touched files outside the queue directory: {diff:?}"
        );
    }
}

/// What a repair came to.
enum Ran {
    /// It failed; the error's Display.
    Refused(String),
    /// Its dry run planned placeholders of more than
    /// [`MAX_PLACEHOLDER_IDS`] ids, so it was not run: the plan.
    Planned(Vec<RepairAction>),
    /// It succeeded: its steps, and the items the repaired queue then
    /// delivered (id and bytes, in order).
    Repaired {
        actions: Vec<RepairAction>,
        items: Vec<(u64, Vec<u8>)>,
    },
}

impl Ran {
    fn outcome(&self) -> RepairOutcome {
        match self {
            Ran::Refused(why) => RepairOutcome::Refused(why.clone()),
            Ran::Planned(actions) => RepairOutcome::Planned {
                steps: step_kinds(actions),
            },
            Ran::Repaired { actions, items } => RepairOutcome::Repaired {
                steps: step_kinds(actions),
                items: items.len(),
            },
        }
    }
}

fn step_kinds(actions: &[RepairAction]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|action| match action {
            RepairAction::Cut { .. } => "cut",
            RepairAction::MarkReached { .. } => "mark",
            RepairAction::MoveAside { .. } => "move",
            RepairAction::FillGap { .. } => "fill",
            RepairAction::NewTail { .. } => "new tail",
            _ => "other",
        })
        .collect()
}

/// Ids the placeholders of `actions` take.
fn placeholder_ids(actions: &[RepairAction]) -> u64 {
    actions
        .iter()
        .map(|action| match action {
            RepairAction::FillGap { records, .. } => *records,
            _ => 0,
        })
        .sum()
}

/// What [`check_repair`] saw, for tests of the seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The repair failed; the error's Display.
    Refused(String),
    /// The dry run planned placeholders of more than [`MAX_PLACEHOLDER_IDS`]
    /// ids, so the repair was not run: these steps.
    Planned {
        /// The planned steps, by kind.
        steps: Vec<&'static str>,
    },
    /// The repair succeeded.
    Repaired {
        /// Its steps, by kind: `cut`, `mark`, `move`, `fill`, `new tail`.
        steps: Vec<&'static str>,
        /// Items the repaired queue held.
        items: usize,
    },
}

/// Whether two outcomes agree, ignoring the error message of a refusal.
pub fn same_repair_outcome(a: &RepairOutcome, b: &RepairOutcome) -> bool {
    match (a, b) {
        (RepairOutcome::Refused(_), RepairOutcome::Refused(_)) => true,
        _ => a == b,
    }
}

/// The `repair` fuzz target: see [`check_repair`].
pub fn repair_files(data: &[u8], allocations: Option<&Allocations>) {
    check_repair(data, allocations);
}

/// Writes the queue directory `data` describes ([`OpenInput`]; the options
/// in it are not used) and checks `QueueFiles`, `salvage` and `repair()` on
/// it by properties:
///
/// * `QueueFiles` (no lock) writes nothing, not even the lock file, agrees
///   with the model of the open, and allocates at most twice the largest
///   file at once (when `allocations` counts); `salvage` reads every
///   segment file without writing;
/// * a dry run changes nothing on disk (the empty lock file aside) and
///   plans exactly the steps the repair then takes, or fails as it does;
/// * a repair that fails changes nothing (unless it failed on I/O);
/// * after a repair, the queue opens with default options mending nothing,
///   and `verify()` finds it healthy;
/// * every record that was whole and reachable before ([`Before::read`])
///   is delivered, in order, with its id and bytes; nothing else is: no
///   record is made up, none settled comes back;
/// * no bytes are destroyed silently: every segment file is still in
///   place with its whole frames unchanged, byte-identical in
///   `quarantine/`, or retired holding no pending record;
/// * nothing outside the queue directory is touched;
/// * repairing twice changes nothing: a second repair takes no step and
///   leaves every file byte-identical;
/// * files that need no repair get none;
/// * with dque's `fault-injection` feature: a repair stopped at any of its
///   syncs returns the error, and the next repair finishes the job, by all
///   of the above, delivering the same items.
///
/// Placeholders of more than [`MAX_PLACEHOLDER_IDS`] ids are only planned.
pub fn check_repair(data: &[u8], allocations: Option<&Allocations>) -> RepairOutcome {
    let files = OpenInput::decode(data).files();
    check_salvage(&files);
    let before = Before::read(&files);
    let sandbox = Sandbox::new(&files);
    // Asserted last, so that the repair's properties are still checked.
    let deferred = queue_files_read_only(&sandbox.dir, &files, allocations);
    let ran = repair_by_properties(&sandbox, &before);
    leaves_sound_files_alone(&before, &ran);
    #[cfg(feature = "fault-injection")]
    if let Ran::Repaired { actions, items } = &ran {
        if !actions.is_empty() {
            finishes_after_a_crash_at_each_sync(&files, &before, items);
        }
    }
    if let Some(failure) = deferred {
        panic!("{failure}");
    }
    ran.outcome()
}

/// `dque::salvage` on every segment file: it reads any bytes without a
/// panic, and the records it finds before the damage are the file's
/// records in order, with ids following the header's first id.
fn check_salvage(files: &[(String, Vec<u8>)]) {
    let root = scratch_dir();
    for (name, bytes) in files.iter().filter(|(name, _)| name.ends_with(".seg")) {
        let path = root.path().join(name.replace('/', "_"));
        fs::write(&path, bytes).expect("write a segment file");
        let found = dque::salvage(&path).unwrap_or_else(|e| panic!("salvage of {name}: {e}"));
        let mut next_id = found.header.map(|(_, first_id)| first_id);
        for record in &found.records {
            // Before the damage, ids follow; after it they are unknown.
            if record.settled.is_some() {
                assert_eq!(record.id, next_id, "{name}: ids before the damage");
                next_id = next_id.map(|id| id + 1);
            } else {
                assert_eq!(record.id, None, "{name}: an id past the damage");
            }
            let start = record.offset as usize + 8;
            assert_eq!(
                bytes.get(start..start + record.payload.len()),
                Some(&record.payload[..]),
                "{name}: a record's payload is not where it says"
            );
        }
        assert_eq!(
            &fs::read(&path).expect("read back"),
            bytes,
            "{name}: salvage wrote"
        );
    }
}

/// `QueueFiles` on the input's files, before any repair: it reads without
/// writing (not even the lock file), and [`check_queue_files`] holds. Gives
/// that check's deferred failure.
fn queue_files_read_only(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    allocations: Option<&Allocations>,
) -> Option<String> {
    // The model of the open, as a RawQueue opened without options would.
    let plain = OpenInput {
        config: ConfigFile::Absent,
        turbo: false,
        sizes: None,
        create: false,
        temp_files: false,
        cut_damaged_tail: false,
        first_number: 1,
        segments: Vec::new(),
    };
    let open_model = expect_open(&plain, dir, &as_raw_queue(files));
    let found = snapshot(dir);
    let deferred = check_queue_files(dir, files, &open_model, allocations);
    assert_unchanged(dir, &found, "reading with QueueFiles");
    assert!(
        !dir.join(LOCK_FILE).exists(),
        "QueueFiles::open made a lock file"
    );
    deferred
}

/// Runs a dry run, the repair, a second repair, and the repaired queue in
/// `sandbox`, checking the properties of [`check_repair`] against what the
/// input held (`before`; the directory may be a later state of it, left by
/// a repair that stopped).
fn repair_by_properties(sandbox: &Sandbox, before: &Before) -> Ran {
    let dir = &sandbox.dir;
    let found = without_lock(snapshot(dir));
    let plan = repair(dir, true);
    assert_unchanged(dir, &found, "a dry run of repair");
    sandbox.assert_outside_untouched("a dry run of repair");
    let plan = match plan {
        Ok(plan) => plan,
        Err(dry) => return refusal_changes_nothing(sandbox, &found, &dry),
    };
    assert!(plan.dry_run, "a dry run's report: {plan:?}");
    assert_eq!(plan.opened, OpenReport::default(), "a dry run opened");
    if placeholder_ids(&plan.actions) > MAX_PLACEHOLDER_IDS {
        return Ran::Planned(plan.actions);
    }

    let report = repair(dir, false);
    sandbox.assert_outside_untouched("a repair");
    let report = report
        .unwrap_or_else(|e| panic!("the dry run planned {plan}, the repair failed: {e:?} ({e})"));
    assert!(!report.dry_run, "a repair's report: {report:?}");
    assert_eq!(
        plan.actions, report.actions,
        "the repair took other steps than its dry run planned"
    );
    steps_say_why(&report.actions);
    let repaired = without_lock(snapshot(dir));
    destroys_no_bytes(before, &found, &repaired);
    second_repair_changes_nothing(sandbox, &repaired);

    let items = opens_clean_and_healthy(dir, before.most_items, !before.stray_markers);
    keeps_reachable_records(before, &items);
    delivers_only_pending_records(before, &items);
    // Drained and closed: still nothing to repair.
    let last = repair(dir, false).expect("a repair of the drained queue");
    assert!(
        last.actions.is_empty(),
        "a repair of the drained queue: {last}"
    );
    sandbox.assert_outside_untouched("a repair of the drained queue");
    Ran::Repaired {
        actions: report.actions,
        items,
    }
}

/// Property: a repair whose dry run refuses refuses too, alike, and
/// changes nothing.
fn refusal_changes_nothing(sandbox: &Sandbox, found: &Snapshot, dry: &Error) -> Ran {
    let e = match repair(&sandbox.dir, false) {
        Ok(report) => panic!("the dry run failed with {dry:?} ({dry}), the repair did {report}"),
        Err(e) => e,
    };
    sandbox.assert_outside_untouched("a repair that failed");
    assert_eq!(
        repair_error_kind(dry),
        repair_error_kind(&e),
        "the dry run failed with {dry}, the repair with {e}"
    );
    assert_unchanged(
        &sandbox.dir,
        found,
        &format!("a repair that failed with {e}"),
    );
    Ran::Refused(e.to_string())
}

/// Every cut and move says why it was taken.
fn steps_say_why(actions: &[RepairAction]) {
    for action in actions {
        let reason = match action {
            RepairAction::Cut { reason, .. } | RepairAction::MoveAside { reason, .. } => {
                Some(reason)
            }
            _ => None,
        };
        assert!(
            reason.is_none_or(|reason| !reason.is_empty()),
            "a step without a reason: {action:?}"
        );
    }
}

/// Property: bytes are never destroyed silently (DESIGN.md). Each segment
/// file of the input is still in place with its whole frames unchanged
/// (only what follows the last whole frame may be cut or marked), or one
/// more copy of it than the input had is in `quarantine/`, or it is gone
/// holding no pending record (retired as settled). What `quarantine/` held
/// when this repair began (`found`) is still there, unchanged, but for
/// half-made `.tmp` files a stopped repair left (which are no copy).
fn destroys_no_bytes(before: &Before, found: &Snapshot, repaired: &Snapshot) {
    let kept = |path: &Path| {
        path.starts_with(QUARANTINE_DIR) && path.extension().is_none_or(|ext| ext != "tmp")
    };
    let quarantined: Vec<Vec<u8>> = repaired
        .iter()
        .filter(|(path, _)| kept(path))
        .filter_map(|(_, bytes)| bytes.clone())
        .collect();
    for (&number, original) in &before.segments {
        let copies = |files: &[Vec<u8>]| files.iter().filter(|b| *b == original).count();
        if copies(&quarantined) > copies(&before.quarantined) {
            continue;
        }
        let name = segment_name(number);
        // Its header and whole frames, and its pending records.
        let (whole, pending) = match judge_header(original, number) {
            HeaderVerdict::Valid(h) => {
                let r = replay(original, h.max_records);
                (r.end, r.unsettled_count())
            }
            _ => (original.len(), usize::MAX),
        };
        match repaired.get(Path::new(&name)) {
            Some(Some(now)) => assert!(
                now.get(..whole) == Some(&original[..whole]),
                "{name}: its first {whole} bytes (header and whole frames) changed, \
                 and no copy went to {QUARANTINE_DIR}/"
            ),
            _ => assert!(
                pending == 0,
                "{name} is gone, and no copy went to {QUARANTINE_DIR}/ (pending records: {})",
                match pending {
                    usize::MAX => "unknown, its header does not read".to_string(),
                    n => n.to_string(),
                }
            ),
        }
    }
    for (path, bytes) in found {
        if kept(path) {
            assert!(
                repaired.get(path) == Some(bytes),
                "{} in {QUARANTINE_DIR}/ changed or went",
                path.display()
            );
        }
    }
}

/// Property: repairing twice changes nothing: the second repair takes no
/// step, its open mends nothing, and every file stays byte-identical.
fn second_repair_changes_nothing(sandbox: &Sandbox, repaired: &Snapshot) {
    let again = repair(&sandbox.dir, false)
        .unwrap_or_else(|e| panic!("a second repair failed: {e:?} ({e})"));
    assert!(
        again.actions.is_empty() && again.opened == OpenReport::default(),
        "a second repair is not a no-op: {again} {:?}",
        again.opened
    );
    assert_unchanged(&sandbox.dir, repaired, "a second repair");
    sandbox.assert_outside_untouched("a second repair");
}

/// Property: the repaired queue opens with default options (as raw bytes,
/// whatever its codec) mending nothing; `verify()` and `QueueFiles::verify`
/// find it healthy; `len()`, `pending()`, `QueueFiles::visit_records` and
/// the dequeues agree, ids increasing. Dequeues every item (`most` is more
/// than the files can hold) and gives them, id and bytes, in order.
///
/// Unless `exact`: the input held markers outside the front run, which
/// dque never writes and the repair leaves as they are, so `len()` (the
/// count FORMAT.md's formula gives) may differ from the items, and the
/// open queue's `verify()` says so.
fn opens_clean_and_healthy(dir: &Path, most: usize, exact: bool) -> Vec<(u64, Vec<u8>)> {
    let files = QueueFiles::open(dir).expect("QueueFiles::open of the repaired queue");
    let verified = files.verify(|_, _| {}).expect("QueueFiles::verify");
    assert!(
        verified.is_healthy(),
        "QueueFiles::verify of the repaired queue: {verified}"
    );
    let mut visited = Vec::new();
    files
        .visit_records(|record| {
            visited.push((record.id, record.payload.to_vec()));
            std::ops::ControlFlow::Continue(())
        })
        .expect("visit the records of the repaired queue");
    drop(files);

    let q = RawQueue::open_encoded_with(dir, &Options::new())
        .unwrap_or_else(|e| panic!("the repaired queue does not open: {e:?} ({e})"));
    assert_eq!(
        q.open_report(),
        &OpenReport::default(),
        "the open after a repair mended more"
    );
    let verified = q.verify().expect("verify the repaired queue");
    assert!(
        verified.is_healthy() || !exact,
        "verify() of the repaired queue: {verified}"
    );
    let items: Vec<(u64, Vec<u8>)> = q
        .pending(most)
        .expect("pending() of the repaired queue")
        .into_iter()
        .map(|p| (p.id, p.item))
        .collect();
    let ids: Vec<u64> = items.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "the repaired queue's ids do not increase: {ids:?}"
    );
    if exact {
        assert_eq!(q.len(), items.len(), "len() of the repaired queue");
    }
    assert!(
        visited == items,
        "QueueFiles visits other records than pending() gives"
    );
    let taken = q.dequeue_batch(most).expect("dequeue the repaired queue");
    assert!(
        taken.iter().eq(items.iter().map(|(_, item)| item)),
        "the dequeues give other items than pending()"
    );
    let after = q.dequeue().expect("dequeue the drained queue");
    assert_eq!(after, None, "an item after the last of pending()");
    assert_eq!(q.len(), 0, "len() of the drained queue");
    q.close().expect("close the repaired queue");
    items
}

/// Property: every record that was whole and reachable before the repair
/// ([`Before::read`]) is delivered, with its id and bytes (and so in order:
/// the ids delivered increase).
fn keeps_reachable_records(before: &Before, items: &[(u64, Vec<u8>)]) {
    let delivered: BTreeMap<u64, &Vec<u8>> = items.iter().map(|(id, item)| (*id, item)).collect();
    for (id, payload) in &before.reachable {
        match delivered.get(id) {
            Some(&item) if item == payload => {}
            Some(item) => panic!(
                "record {id} held {} bytes, the repaired queue delivers {} other bytes for it",
                payload.len(),
                item.len()
            ),
            None => panic!(
                "record {id} ({} bytes) was whole and reachable, the repaired queue does not \
                 deliver it (it delivers ids {:?})",
                payload.len(),
                delivered.keys().collect::<Vec<_>>()
            ),
        }
    }
}

/// Property: the repaired queue delivers nothing that was not pending: each
/// item is a whole, unsettled record of the input with that id and those
/// bytes. No record is made up, and none that was settled comes back.
fn delivers_only_pending_records(before: &Before, items: &[(u64, Vec<u8>)]) {
    for item in items {
        assert!(
            before.pending.contains(item),
            "the repaired queue delivers id {} ({} bytes), no pending record of the input",
            item.0,
            item.1.len()
        );
    }
}

/// Whether a segment of `files` other than the tail holds markers while a
/// segment before it holds none and the tail none either: markers outside
/// the front run, which dque never writes, and which make the count the open
/// computes differ from the items (see `bug-ack-in-middle-segment`).
fn stray_markers(files: &[(String, Vec<u8>)]) -> bool {
    let segments = segment_files(files);
    let marked: Vec<bool> = segments
        .iter()
        .map(|(&number, bytes)| match judge_header(bytes, number) {
            HeaderVerdict::Valid(h) => replay(bytes, h.max_records).has_markers,
            _ => false,
        })
        .collect();
    let Some((&tail, middle)) = marked.split_last() else {
        return false;
    };
    !tail
        && middle
            .iter()
            .enumerate()
            .any(|(j, &m)| m && marked[..j].iter().any(|&before| !before))
}

/// Property: files that need no repair ([`Before::sound`]) get none.
fn leaves_sound_files_alone(before: &Before, ran: &Ran) {
    if !before.sound {
        return;
    }
    let untouched = matches!(ran, Ran::Repaired { actions, .. } if actions.is_empty());
    assert!(
        untouched,
        "the files need no repair, the repair came to {:?}",
        ran.outcome()
    );
}

/// Property: a repair stopped at any of its syncs (failed there, as a kill
/// would leave the files: what it wrote stays, nothing after it happens)
/// returns an error, and the next repair finishes the job: it passes every
/// check of [`repair_by_properties`] against the input as it was, and the
/// queue delivers the same items as after the repair that was not stopped.
/// Stopping a repair takes dque's `fault-injection` feature.
#[cfg(feature = "fault-injection")]
fn finishes_after_a_crash_at_each_sync(
    files: &[(String, Vec<u8>)],
    before: &Before,
    items: &[(u64, Vec<u8>)],
) {
    use dque::faults::{FaultOp, FaultPlan};
    let syncs = {
        let sandbox = Sandbox::new(files);
        let plan = FaultPlan::install(&sandbox.dir);
        repair(&sandbox.dir, false).expect("the repair once more");
        plan.count(FaultOp::Sync)
    };
    for k in 1..=syncs {
        let sandbox = Sandbox::new(files);
        let stopped = {
            let plan = FaultPlan::install(&sandbox.dir);
            plan.fail_nth(FaultOp::Sync, k, std::io::ErrorKind::Other);
            repair(&sandbox.dir, false)
        };
        sandbox.assert_outside_untouched("a repair stopped by a failed sync");
        assert!(
            stopped.is_err(),
            "sync {k} of {syncs} failed, the repair returned {stopped:?}"
        );
        match repair_by_properties(&sandbox, before) {
            Ran::Repaired { items: again, .. } => assert!(
                again == items,
                "after a repair stopped at sync {k} of {syncs}, the next one delivers other items"
            ),
            other => panic!(
                "after a repair stopped at sync {k} of {syncs} ({stopped:?}), the next one came \
                 to {:?}",
                other.outcome()
            ),
        }
    }
}

/// The kind of a repair's refusal and the file it names; a panic for an
/// error no file content should cause, `Io` among them: the scratch
/// directory's file system does not fail.
fn repair_error_kind(e: &Error) -> (Kind, Option<&Path>) {
    assert!(!e.to_string().is_empty(), "{e:?}");
    match e {
        Error::NotAQueue { .. } => (Kind::NotAQueue, None),
        Error::UnsupportedVersion { path, .. } => (Kind::Version, Some(path)),
        Error::Corrupted {
            segment, reason, ..
        } => {
            assert!(!reason.is_empty(), "{e}");
            (Kind::Corrupted, Some(segment))
        }
        other => panic!("a repair of fuzzed files gave an unexpected error: {other:?} ({other})"),
    }
}

/// The files as the model of the open reads them: the config's codec made
/// the raw one (the open under test is a `RawQueue`; a repair keeps any).
fn as_raw_queue(files: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|(name, bytes)| match judge_config(bytes) {
            ConfigVerdict::Valid { records, bytes, .. } if name == CONFIG_FILE => {
                (name.clone(), config_bytes(records, bytes, RAW_CODEC))
            }
            _ => (name.clone(), bytes.clone()),
        })
        .collect()
}

/// `QueueFiles` without the lock on the input's files: no panic, clear
/// errors, answers that agree with each other and with the model of the
/// open, and allocations bounded by the files' sizes.
fn check_queue_files(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    open_model: &Expect,
    allocations: Option<&Allocations>,
) -> Option<String> {
    if let Some(a) = allocations {
        (a.reset)();
    }
    let config = files
        .iter()
        .find(|(n, _)| n == CONFIG_FILE)
        .map(|(_, b)| judge_config(b));
    let queue_files = match (QueueFiles::open(dir), config) {
        (Ok(q), Some(ConfigVerdict::Valid { .. })) => q,
        (Err(Error::NotAQueue { .. }), None | Some(ConfigVerdict::Invalid)) => return None,
        (Err(Error::UnsupportedVersion { .. }), Some(ConfigVerdict::Version(_))) => return None,
        (got, config) => panic!("QueueFiles::open gave {got:?} for config {config:?}"),
    };
    assert!(!queue_files.holds_lock());
    let segments = segment_files(files);
    let clear = |e: &Error, what: &str| {
        let expected = matches!(
            e,
            Error::Corrupted { .. }
                | Error::MissingSegment { .. }
                | Error::UnsupportedVersion { .. }
        );
        assert!(expected, "{what} gave an unexpected error: {e:?} ({e})");
    };
    let stats = queue_files.stats();
    if let Ok(stats) = &stats {
        let Some(ConfigVerdict::Valid { codec, .. }) = config else {
            unreachable!()
        };
        assert_eq!(stats.codec_id, codec, "stats(): codec");
        let listed = segments.keys().next().zip(segments.keys().next_back());
        assert_eq!(
            stats.segments,
            listed.map(|(a, b)| (*a, *b)),
            "stats(): segments"
        );
        let bytes: u64 = segments.values().map(|b| b.len() as u64).sum();
        assert_eq!(stats.bytes_on_disk, bytes, "stats(): bytes on disk");
        assert_eq!(stats.dead_letters, 0, "stats(): dead letters");
    }
    if let Err(e) = &stats {
        clear(e, "stats()");
    }
    // Records: each where it says it is, ids growing, compared with the
    // model's items as they come (nothing is kept, so nothing allocated).
    let healthy_items = match open_model {
        Expect::Open(opened)
            if !opened.unspecified && opened.healthy && opened.repairs.is_empty() =>
        {
            Some(&opened.items)
        }
        _ => None,
    };
    let mut visited = 0usize;
    let mut last_id = None;
    let mut deferred = None;
    let mut same_as_model = true;
    let visit = queue_files.visit_records(|record| {
        let file = segments.get(&record.segment).expect("a record of a listed segment");
        let at = record.offset as usize + RECORD_OVERHEAD;
        assert!(
            file.get(at..at + record.payload.len()) == Some(record.payload),
            "visit_records: the payload is not at segment {} offset {}",
            record.segment,
            record.offset
        );
        if last_id >= Some(record.id) && deferred.is_none() {
            // Ids that overlap or go back are damage, as a sealed segment
            // with too few records is (see `bug-visit-records-ids-overlap`).
            deferred = Some(format!(
                "visit_records: id {} (segment {} offset {}) after id {last_id:?}, where verify() finds: {:?}",
                record.id,
                record.segment,
                record.offset,
                queue_files.verify(|_, _| {}).map(|v| v.to_string())
            ));
        }
        last_id = Some(record.id);
        if let Some(items) = healthy_items {
            same_as_model &= items.get(visited).map(Vec::as_slice) == Some(record.payload);
        }
        visited += 1;
        std::ops::ControlFlow::Continue(())
    });
    if let Err(e) = &visit {
        clear(e, "visit_records()");
    }
    let mut progress = (0, 0);
    let verified = queue_files
        .verify(|read, total| {
            assert!(
                read >= progress.0 && read <= total,
                "verify progress {read} of {total} after {progress:?}"
            );
            progress = (read, total);
        })
        .expect("QueueFiles::verify");
    if let Some(a) = allocations {
        let largest = segments.values().map(|b| b.len()).max().unwrap_or(0);
        let bound = 2 * largest + READ_ALLOCATION_SLACK;
        let got = (a.largest)();
        assert!(
            got <= bound,
            "QueueFiles allocated {got} bytes at once; the largest file has {largest}"
        );
    }
    match open_model {
        Expect::Open(opened) if !opened.unspecified => {
            if let Some(items) = healthy_items {
                assert!(
                    verified.is_healthy(),
                    "QueueFiles::verify of healthy files: {verified}"
                );
                assert!(
                    visit.is_ok() && same_as_model && visited == items.len(),
                    "visit_records: other items than the open's ({visited} of {})",
                    items.len()
                );
                let stats = stats.expect("stats() of healthy files");
                assert_eq!(stats.items, opened.len, "stats(): items");
            }
            if opened.stops_at.is_some() {
                assert!(
                    !verified.is_healthy(),
                    "QueueFiles::verify misses damage at {:?}",
                    opened.stops_at
                );
            }
        }
        // Where the open refuses the segments, verify() finds what is wrong.
        Expect::Fail(Kind::Corrupted | Kind::Missing, ..) => assert!(
            !verified.is_healthy(),
            "QueueFiles::verify finds nothing where the open fails: {open_model:?}"
        ),
        Expect::Fail(Kind::Version, Some(path), _) if !path.ends_with(CONFIG_FILE) => assert!(
            !verified.is_healthy(),
            "QueueFiles::verify finds nothing where the open fails: {open_model:?}"
        ),
        _ => {}
    }
    deferred
}
