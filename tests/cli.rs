//! The `dque` command, run as a real binary against real queues.
//!
//! Every test builds its queue with the library in a temporary directory,
//! damages it by hand where needed (FORMAT.md: a segment is a 40-byte header
//! followed by frames; a record frame is a head word, a CRC, the payload and
//! zero padding to a multiple of 4), runs the binary, and checks the exit
//! code (see `src/bin/dque/fail.rs`) and the key words of what it printed.
//!
//! The tests take `SERIAL` first: a child forked while another test holds a
//! queue open could otherwise see a lock that is not its test's.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dque::{DQue, Options, QueueFiles, RawQueue};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------

const OK: i32 = 0;
const ERROR: i32 = 1;
const USAGE: i32 = 2;
const DAMAGED: i32 = 3;
const LOCKED: i32 = 4;
const NO_QUEUE: i32 = 5;
const EMPTY: i32 = 6;

/// What one run of the binary did.
struct Run {
    args: Vec<String>,
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Everything about the run, for a failed assertion's message.
    fn describe(&self) -> String {
        format!(
            "dque {:?}\nexit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args,
            self.code,
            self.out(),
            self.stderr
        )
    }

    /// Asserts the exit code.
    fn code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "wrong exit code\n{}", self.describe());
        self
    }

    /// Asserts that stdout holds each of `words` (case-insensitive).
    fn stdout_has(&self, words: &[&str]) -> &Self {
        let out = self.out().to_lowercase();
        for word in words {
            assert!(
                out.contains(&word.to_lowercase()),
                "stdout lacks {word:?}\n{}",
                self.describe()
            );
        }
        self
    }

    /// Asserts that stderr holds each of `words` (case-insensitive).
    fn stderr_has(&self, words: &[&str]) -> &Self {
        let err = self.stderr.to_lowercase();
        for word in words {
            assert!(
                err.contains(&word.to_lowercase()),
                "stderr lacks {word:?}\n{}",
                self.describe()
            );
        }
        self
    }

    /// Asserts that stdout is empty.
    fn stdout_empty(&self) -> &Self {
        assert!(
            self.stdout.is_empty(),
            "stdout should be empty\n{}",
            self.describe()
        );
        self
    }
}

/// Runs `dque ARGS` with `stdin` (empty if `None`; never a terminal).
fn dque_in(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut cmd = assert_cmd::Command::cargo_bin("dque").expect("the dque binary is built");
    cmd.args(args).timeout(Duration::from_secs(60));
    // No colour or terminal width games from clap.
    cmd.env("NO_COLOR", "1").env_remove("CLICOLOR_FORCE");
    if let Some(input) = stdin {
        cmd.write_stdin(input.to_vec());
    }
    let output = cmd.output().expect("run dque");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: output.status.code().unwrap_or(-1),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn dque(args: &[&str]) -> Run {
    dque_in(args, None)
}

fn s(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

// ---------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------

const HEADER_LEN: u64 = 40;
/// Small segments, so that a snapshot of every file stays cheap.
const SEGMENT_BYTES: u32 = 1 << 16;

fn options(segment_items: u32) -> Options {
    Options::new()
        .segment_items(segment_items)
        .segment_bytes(SEGMENT_BYTES)
}

fn seg_name(number: u64) -> String {
    format!("{number:020}.seg")
}

fn seg_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(seg_name(number))
}

/// The binary item of the healthy queue (id 3): a NUL, a non-UTF-8 byte and
/// control bytes, so it can only be shown as hex.
const BINARY: [u8; 4] = [0x00, 0xff, 0x10, 0x01];

/// The items enqueued into the healthy queue, by id.
fn healthy_items() -> Vec<Vec<u8>> {
    let mut items = vec![
        b"first".to_vec(),
        b"second".to_vec(),
        b"third: text".to_vec(),
        BINARY.to_vec(),
    ];
    items.extend((4..10).map(|i| format!("item {i}").into_bytes()));
    items
}

/// A closed raw queue at `root/q`: ids 0..10 in 4 segments of 3 items
/// (text, and binary at id 3), ids 0 and 1 dequeued: 8 items, head id 2.
fn healthy(root: &Path) -> PathBuf {
    let path = root.join("q");
    let q = RawQueue::create_with(&path, &options(3)).expect("create");
    for item in healthy_items() {
        q.enqueue_bytes(&item).expect("enqueue");
    }
    assert_eq!(
        q.dequeue().expect("dequeue").as_deref(),
        Some(&b"first"[..])
    );
    assert_eq!(
        q.dequeue().expect("dequeue").as_deref(),
        Some(&b"second"[..])
    );
    q.close().expect("close");
    path
}

/// The items the healthy queue holds: ids 2..10.
fn healthy_left() -> Vec<Vec<u8>> {
    healthy_items().split_off(2)
}

/// An empty raw queue at `root/q`.
fn empty(root: &Path) -> PathBuf {
    let path = root.join("q");
    RawQueue::create_with(&path, &options(3))
        .expect("create")
        .close()
        .expect("close");
    path
}

/// The items of the torn and corrupt queues.
fn small_items(n: u8) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("t{i}").into_bytes()).collect()
}

/// Garbage written right after the last frame of a torn queue: the head
/// word of a record of 4508 bytes that never came, and half a CRC.
const TORN: [u8; 6] = [0x9c, 0x11, 0x00, 0x80, 0xff, 0xff];

/// A closed raw queue at `root/q` holding `t0`..`t4` in segments 1 (3
/// items) and 2 (2 items), with garbage right after the last frame of
/// segment 2. Returns the path and the offset of the garbage.
fn torn(root: &Path) -> (PathBuf, u64) {
    let path = root.join("q");
    let q = RawQueue::create_with(&path, &options(3)).expect("create");
    for item in small_items(5) {
        q.enqueue_bytes(&item).expect("enqueue");
    }
    q.close().expect("close");
    // Where the frames of the last segment end, as the library reads them.
    let report = QueueFiles::open(&path)
        .expect("files")
        .verify(|_, _| {})
        .expect("verify");
    assert!(report.is_healthy(), "{report}");
    let last = report.segments.last().expect("a segment");
    assert_eq!(last.number, 2, "{report}");
    let end = HEADER_LEN + last.frame_bytes;
    let file = fs::OpenOptions::new()
        .write(true)
        .open(seg_path(&path, 2))
        .expect("open segment");
    file.write_all_at(&TORN, end).expect("tear the tail");
    file.sync_all().expect("sync");
    (path, end)
}

/// A closed raw queue at `root/q` holding `t0`..`t5` in segments 1, 2 and
/// 3 of two items each, with the first payload byte of the sealed middle
/// segment 2 flipped (its first record, at byte 40, fails its CRC).
fn corrupt_middle(root: &Path) -> PathBuf {
    let path = root.join("q");
    let q = RawQueue::create_with(&path, &options(2)).expect("create");
    for item in small_items(6) {
        q.enqueue_bytes(&item).expect("enqueue");
    }
    assert_eq!(q.segment_numbers().expect("numbers"), 1..=3);
    q.close().expect("close");
    let middle = seg_path(&path, 2);
    let mut bytes = fs::read(&middle).expect("read");
    // Head word and CRC take 8 bytes; the payload "t2" follows.
    let at = (HEADER_LEN + 8) as usize;
    assert_eq!(bytes[at], b't', "the first payload byte of segment 2");
    bytes[at] ^= 0xFF;
    fs::write(&middle, bytes).expect("write");
    path
}

/// A closed bincode queue of `u32` at `root/q` holding 7 and 8.
fn bincode(root: &Path) -> PathBuf {
    let path = root.join("q");
    let q: DQue<u32> = DQue::create(&path).expect("create");
    q.enqueue(&7).expect("enqueue");
    q.enqueue(&8).expect("enqueue");
    q.close().expect("close");
    path
}

/// Every item of the raw queue at `path`, dequeued (the queue is left empty).
fn drain(path: &Path) -> Vec<Vec<u8>> {
    let q = RawQueue::open(path).expect("the queue opens");
    let mut items = Vec::new();
    while let Some(item) = q.dequeue().expect("dequeue") {
        items.push(item);
    }
    q.close().expect("close");
    items
}

/// Every item of the raw queue at `path`, read without taking any.
fn contents(path: &Path) -> Vec<Vec<u8>> {
    let mut items = Vec::new();
    QueueFiles::open(path)
        .expect("files")
        .visit_records(|record| {
            items.push(record.payload.to_vec());
            std::ops::ControlFlow::Continue(())
        })
        .expect("visit");
    items
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = fs::read(&path).expect("read");
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Asserts that nothing under `dir` changed since `before`.
fn assert_unchanged(dir: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, what: &str) {
    let after = snapshot(dir);
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&after), names(before), "{what}: the files changed");
    for (name, bytes) in before {
        assert!(after[name] == *bytes, "{what}: {} changed", name.display());
    }
}

/// The value of the `name` line of `dque stats` text ("items        8").
fn stat_line(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(name)?;
            rest.starts_with(' ').then(|| rest.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {name:?} line in\n{out}"))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn pid() -> String {
    std::process::id().to_string()
}

// ---------------------------------------------------------------------------
// 1. stats
// ---------------------------------------------------------------------------

#[test]
fn stats_text_counts_items_and_segments() {
    // Pins: `stats` prints the item count, the segment span and "not in use".
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["stats", s(&q)]);
    run.code(OK).stdout_has(&[s(&q), "raw bytes"]);
    let out = run.out();
    assert_eq!(stat_line(&out, "items"), "8", "{}", run.describe());
    assert_eq!(
        stat_line(&out, "segments"),
        "4 (head 1, tail 4)",
        "{}",
        run.describe()
    );
    assert_eq!(stat_line(&out, "in use"), "no", "{}", run.describe());
    assert!(run.stderr.is_empty(), "{}", run.describe());
}

#[test]
fn stats_json_has_the_counts() {
    // Pins: `stats --json` is one JSON object with the counts, the codec and
    // no lock holder on a closed queue.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["stats", s(&q), "--json"]);
    run.code(OK);
    let v = json(run.out().trim());
    assert_eq!(v["items"], 8, "{v}");
    assert_eq!(v["segments"], 4, "{v}");
    assert_eq!(v["head_segment"], 1, "{v}");
    assert_eq!(v["tail_segment"], 4, "{v}");
    assert_eq!(v["codec_id"], 0, "{v}");
    assert_eq!(v["codec"], "raw bytes", "{v}");
    assert_eq!(v["segment_items"], 3, "{v}");
    assert_eq!(v["segment_bytes"], SEGMENT_BYTES, "{v}");
    assert_eq!(v["delivered"], 0, "{v}");
    assert_eq!(v["dead_letters"], 0, "{v}");
    assert_eq!(v["queue"], s(&q), "{v}");
    assert!(v["locked_by_pid"].is_null(), "{v}");
    assert!(v["bytes_on_disk"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn stats_works_on_a_locked_queue_and_names_the_holder() {
    // Pins: `stats` reads a queue a program holds open (exit 0) and reports
    // that program's pid, in text and in JSON.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    let text = dque(&["stats", s(&path)]);
    text.code(OK);
    assert_eq!(
        stat_line(&text.out(), "in use"),
        format!("yes, by process {}", pid()),
        "{}",
        text.describe()
    );
    assert_eq!(stat_line(&text.out(), "items"), "8", "{}", text.describe());
    let run = dque(&["stats", s(&path), "--json"]);
    run.code(OK);
    let v = json(run.out().trim());
    assert_eq!(v["locked_by_pid"], std::process::id(), "{v}");
    assert_eq!(v["items"], 8, "{v}");
    drop(q);
}

#[test]
fn stats_on_no_queue_exits_5() {
    // Pins: a missing path, a plain file and a directory of other files are
    // "no queue" (5), each with a message that says which.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("missing");
    dque(&["stats", s(&missing)])
        .code(NO_QUEUE)
        .stdout_empty()
        .stderr_has(&["no queue at", s(&missing), "does not exist"]);

    let file = root.path().join("file");
    fs::write(&file, b"hello").unwrap();
    dque(&["stats", s(&file)])
        .code(NO_QUEUE)
        .stdout_empty()
        .stderr_has(&[s(&file), "not a dque queue"]);

    let other = root.path().join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("notes.txt"), b"mine").unwrap();
    dque(&["stats", s(&other)])
        .code(NO_QUEUE)
        .stdout_empty()
        .stderr_has(&[s(&other), "not a dque queue"]);
    assert!(
        fs::read_dir(&other).unwrap().count() == 1,
        "stats wrote into a directory that is not a queue"
    );
}

// ---------------------------------------------------------------------------
// 2. peek and dump
// ---------------------------------------------------------------------------

/// The id in a text line of `peek`/`dump` ("id 2      attempts 0 ...").
fn line_id(line: &str) -> u64 {
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("id"), "not a record line: {line}");
    words.next().unwrap().parse().expect("an id")
}

#[test]
fn peek_shows_the_first_records_as_text_or_hex() {
    // Pins: `peek -n 2` shows exactly the two head records, by id, the text
    // one as text and the binary one as hex.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["peek", s(&q), "-n", "2"]);
    run.code(OK);
    let out = run.out();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.describe());
    assert_eq!(line_id(lines[0]), 2, "{}", run.describe());
    assert_eq!(line_id(lines[1]), 3, "{}", run.describe());
    assert!(lines[0].contains("\"third: text\""), "{}", run.describe());
    assert!(lines[0].contains("11 bytes"), "{}", run.describe());
    assert!(lines[1].contains("hex 00 ff 10 01"), "{}", run.describe());
    assert!(lines[1].contains("4 bytes"), "{}", run.describe());
    assert!(!out.contains("item 4"), "{}", run.describe());
    // Nothing was taken.
    assert_eq!(contents(&q), healthy_left());
}

#[test]
fn peek_raw_writes_the_exact_bytes() {
    // Pins: `peek --raw` writes exactly the head item's bytes (no newline),
    // `peek --id 3 --raw` exactly the binary item's, and neither takes it.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["peek", s(&q), "--raw"]);
    run.code(OK);
    assert_eq!(run.stdout, b"third: text", "{}", run.describe());
    let run = dque(&["peek", s(&q), "--id", "3", "--raw"]);
    run.code(OK);
    assert_eq!(run.stdout, BINARY, "{}", run.describe());
    let run = dque(&["peek", s(&q), "--id", "9", "--raw"]);
    run.code(OK);
    assert_eq!(run.stdout, b"item 9", "{}", run.describe());
    assert_eq!(contents(&q), healthy_left());
}

#[test]
fn peek_id_shows_that_record_only() {
    // Pins: `peek --id N` shows that one record; an id that is not pending
    // (already taken) is "empty" (6) with a message naming the id.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["peek", s(&q), "--id", "5"]);
    run.code(OK);
    let out = run.out();
    assert_eq!(out.lines().count(), 1, "{}", run.describe());
    assert_eq!(line_id(&out), 5, "{}", run.describe());
    run.stdout_has(&["\"item 5\""]);
    dque(&["peek", s(&q), "--id", "0"])
        .code(EMPTY)
        .stdout_empty()
        .stderr_has(&["no pending record", "id 0"]);
}

#[test]
fn peek_on_an_empty_queue_exits_6() {
    // Pins: `peek` and `peek --raw` on an empty queue exit 6 saying it is
    // empty, and print nothing on stdout.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    dque(&["peek", s(&q)])
        .code(EMPTY)
        .stdout_empty()
        .stderr_has(&["empty"]);
    dque(&["peek", s(&q), "--raw"])
        .code(EMPTY)
        .stdout_empty()
        .stderr_has(&["empty"]);
}

#[test]
fn peek_n_0_shows_nothing() {
    // Pins: `peek -n 0` shows no record, and does not call a queue of 8
    // items empty: it is a usage error (2) or shows nothing with 0.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["peek", s(&q), "-n", "0"]);
    assert!(
        !run.out().contains("third: text"),
        "-n 0 printed a record\n{}",
        run.describe()
    );
    assert!(
        run.code == OK || run.code == USAGE,
        "-n 0 on 8 items\n{}",
        run.describe()
    );
}

#[test]
fn dump_lists_every_id_in_order() {
    // Pins: `dump` prints one line per pending record, ids 2..=9 in order.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["dump", s(&q)]);
    run.code(OK);
    let ids: Vec<u64> = run.out().lines().map(line_id).collect();
    assert_eq!(ids, (2..10).collect::<Vec<_>>(), "{}", run.describe());
    run.stdout_has(&["\"item 9\"", "hex 00 ff 10 01"]);
}

#[test]
fn dump_json_lines_parse() {
    // Pins: `dump --json` prints one JSON object per record with id, len,
    // segment and text or hex matching the stored bytes.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["dump", s(&q), "--json"]);
    run.code(OK);
    let values: Vec<serde_json::Value> = run.out().lines().map(json).collect();
    let ids: Vec<u64> = values.iter().map(|v| v["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (2..10).collect::<Vec<_>>(), "{}", run.describe());
    for (v, item) in values.iter().zip(healthy_left()) {
        assert_eq!(v["len"], item.len(), "{v}");
        assert_eq!(v["attempts"], 0, "{v}");
        assert_eq!(v["truncated"], false, "{v}");
        let segment = v["segment"].as_u64().unwrap();
        assert!((1..=4).contains(&segment), "{v}");
        match std::str::from_utf8(&item) {
            Ok(text) if item != BINARY => assert_eq!(v["text"], text, "{v}"),
            _ => assert_eq!(v["hex"], "00 ff 10 01", "{v}"),
        }
    }
    // Ids 2..=4 live in segments 1 (id 2) and 2 (ids 3, 4): three per segment.
    assert_eq!(values[0]["segment"], 1, "{}", run.describe());
    assert_eq!(values[1]["segment"], 2, "{}", run.describe());
    assert_eq!(values[0]["offset"].as_u64().unwrap() % 4, 0);
}

#[test]
fn dump_and_peek_work_on_a_locked_queue() {
    // Pins: `dump` and `peek` read a queue a program holds open (exit 0),
    // including the record that program added last.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    q.enqueue_bytes(b"added while open").expect("enqueue");
    let run = dque(&["dump", s(&path)]);
    run.code(OK).stdout_has(&["\"added while open\""]);
    let ids: Vec<u64> = run.out().lines().map(line_id).collect();
    assert_eq!(ids, (2..11).collect::<Vec<_>>(), "{}", run.describe());
    dque(&["peek", s(&path), "-n", "1"])
        .code(OK)
        .stdout_has(&["third: text"]);
    drop(q);
}

#[test]
fn dump_on_a_corrupt_queue_exits_3() {
    // Pins: reading records through a corrupt segment fails with "damaged"
    // (3) and points at verify and repair.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = corrupt_middle(root.path());
    dque(&["dump", s(&q)])
        .code(DAMAGED)
        .stderr_has(&["dque verify", "dque repair"]);
}

// ---------------------------------------------------------------------------
// 3. push
// ---------------------------------------------------------------------------

#[test]
fn push_from_args_file_stdin_and_lines() {
    // Pins: push adds one item per argument, a file's bytes as one item,
    // all of stdin (NUL bytes included) as one item, and each line of stdin
    // with --lines (without "\n" or "\r\n"), in that order.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    dque(&["push", s(&q), "one", "two words"])
        .code(OK)
        .stdout_empty();
    let file = root.path().join("payload.bin");
    let file_bytes = vec![0u8, 1, 2, 0xff, b'\n', 0];
    fs::write(&file, &file_bytes).unwrap();
    dque(&["push", s(&q), "--file", s(&file)]).code(OK);
    let stdin_bytes = b"bin\x00ary\nwith a newline\n".to_vec();
    dque_in(&["push", s(&q)], Some(&stdin_bytes)).code(OK);
    dque_in(&["push", s(&q), "--lines"], Some(b"l1\nl2\r\nl3\n")).code(OK);
    let expected: Vec<Vec<u8>> = vec![
        b"one".to_vec(),
        b"two words".to_vec(),
        file_bytes,
        stdin_bytes,
        b"l1".to_vec(),
        b"l2".to_vec(),
        b"l3".to_vec(),
    ];
    assert_eq!(drain(&q), expected);
}

#[test]
fn push_file_missing_names_the_file() {
    // Pins: push --file of a missing file exits 1 (not 5: the queue is
    // there), names the file, and adds nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let missing = root.path().join("no-such-input.bin");
    dque(&["push", s(&q), "--file", s(&missing)])
        .code(ERROR)
        .stderr_has(&["no-such-input.bin"]);
    assert_eq!(contents(&q), healthy_left());
}

#[test]
fn push_to_a_missing_dir() {
    // Pins: push to a missing directory is "no queue" (5) and creates
    // nothing; with --create it makes a jobs queue holding the item.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("new");
    dque(&["push", s(&path), "x"]).code(NO_QUEUE).stderr_has(&[
        "no queue at",
        s(&path),
        "does not exist",
    ]);
    assert!(!path.exists(), "push without --create made {path:?}");
    dque(&["push", s(&path), "--create", "x"]).code(OK);
    let v = json(dque(&["stats", s(&path), "--json"]).code(OK).out().trim());
    assert_eq!(v["codec_id"], dque::jobs::JOB_CODEC_ID, "{v}");
    assert_eq!(dque(&["pop", s(&path)]).code(OK).out(), "x");
}

#[test]
fn push_to_a_locked_queue_exits_4_and_adds_nothing() {
    // Pins: push to a queue a program holds open exits 4 naming the
    // holder's pid, and adds nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    dque(&["push", s(&path), "intruder"])
        .code(LOCKED)
        .stdout_empty()
        .stderr_has(&["in use", &format!("process {}", pid())]);
    drop(q);
    assert_eq!(drain(&path), healthy_left());
}

#[test]
fn push_and_pop_refuse_a_bincode_queue() {
    // Pins: push and pop on a bincode queue fail with 1, say push and pop
    // handle jobs and raw-bytes queues only, and leave the queue as it was.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = bincode(root.path());
    let before = snapshot(&path);
    dque(&["push", s(&path), "9"])
        .code(ERROR)
        .stdout_empty()
        .stderr_has(&["codec bincode", "raw-bytes", "jobs queues"]);
    dque(&["pop", s(&path)])
        .code(ERROR)
        .stdout_empty()
        .stderr_has(&["codec bincode", "raw-bytes", "jobs queues"]);
    assert_unchanged(&path, &before, "push and pop on a bincode queue");
    let q: DQue<u32> = DQue::open(&path).expect("open");
    assert_eq!(q.dequeue_batch(10).expect("dequeue"), vec![7, 8]);
}

// ---------------------------------------------------------------------------
// 4. pop
// ---------------------------------------------------------------------------

#[test]
fn pop_writes_the_head_item_exactly() {
    // Pins: `pop` writes the head item's bytes, nothing more, and takes it.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["pop", s(&q)]);
    run.code(OK);
    assert_eq!(run.stdout, b"third: text", "{}", run.describe());
    assert_eq!(contents(&q), healthy_left().split_off(1));
}

#[test]
fn pop_n_writes_a_line_per_item() {
    // Pins: `pop -n 3` takes three items and writes each followed by "\n"
    // (binary bytes unchanged); the rest stay in order.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["pop", s(&q), "-n", "3"]);
    run.code(OK);
    assert_eq!(
        run.stdout,
        b"third: text\n\x00\xff\x10\x01\nitem 4\n",
        "{}",
        run.describe()
    );
    assert_eq!(contents(&q), healthy_left().split_off(3));
    // More than there are: all of them, still 0.
    let run = dque(&["pop", s(&q), "-n", "100"]);
    run.code(OK);
    assert_eq!(run.out().lines().count(), 5, "{}", run.describe());
    assert!(contents(&q).is_empty());
}

#[test]
fn pop_n_0_does_not_call_the_queue_empty() {
    // Pins: `pop -n 0` on a queue with items must not report "the queue is
    // empty" with exit 6 (a script would believe there is nothing to do);
    // it should be a usage error (2) or take nothing and exit 0.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let run = dque(&["pop", s(&q), "-n", "0"]);
    assert!(
        run.code == OK || run.code == USAGE,
        "-n 0 on 8 items\n{}",
        run.describe()
    );
    assert_eq!(contents(&q), healthy_left());
}

#[test]
fn pop_on_an_empty_queue_exits_6() {
    // Pins: `pop` on an empty queue exits 6 at once, with nothing on stdout.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    let start = Instant::now();
    dque(&["pop", s(&q)])
        .code(EMPTY)
        .stdout_empty()
        .stderr_has(&["empty"]);
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn pop_wait_waits_then_exits_6() {
    // Pins: `pop --wait 0.2` on an empty queue waits about 0.2 s, then exits
    // 6; a negative wait is a usage error (2).
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    let start = Instant::now();
    dque(&["pop", s(&q), "--wait", "0.2"])
        .code(EMPTY)
        .stdout_empty()
        .stderr_has(&["empty"]);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "returned after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "returned after {took:?}");
    dque(&["pop", s(&q), "--wait=-1"])
        .code(USAGE)
        .stderr_has(&["--wait"]);
}

#[test]
fn pop_on_a_locked_queue_exits_4_and_the_item_stays() {
    // Pins: pop on a queue a program holds open exits 4 naming its pid,
    // writes nothing and takes nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    dque(&["pop", s(&path)])
        .code(LOCKED)
        .stdout_empty()
        .stderr_has(&["in use", &format!("process {}", pid())]);
    assert_eq!(q.len(), 8);
    drop(q);
    assert_eq!(drain(&path), healthy_left());
}

/// Runs `dque pop DIR` with stdout on `/dev/full`, so that writing the item
/// fails; returns the exit code and stderr.
fn pop_to_dev_full(dir: &Path) -> (i32, String) {
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(["pop", s(dir)])
        .stdin(std::process::Stdio::null())
        .stdout(full)
        .output()
        .expect("run dque");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn pop_whose_output_fails_keeps_the_item() {
    // Pins: when the item's bytes cannot be written to stdout (a full disk),
    // pop exits 1 and the item stays at the head of the queue.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let (code, stderr) = pop_to_dev_full(&q);
    assert_eq!(code, ERROR, "{stderr}");
    assert!(stderr.to_lowercase().contains("no space"), "{stderr}");
    assert_eq!(contents(&q), healthy_left());
}

#[test]
fn pop_whose_output_keeps_failing_keeps_the_item() {
    // Pins: however often writing stdout fails, the item stays in the queue
    // (the CLI has no command to take an item back out of DIR/dead).
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    for _ in 0..6 {
        let (code, stderr) = pop_to_dev_full(&q);
        assert_eq!(code, ERROR, "{stderr}");
    }
    let v = json(dque(&["stats", s(&q), "--json"]).code(OK).out().trim());
    assert_eq!(v["dead_letters"], 0, "{v}");
    assert_eq!(v["items"], 8, "{v}");
    let run = dque(&["pop", s(&q)]);
    run.code(OK);
    assert_eq!(run.stdout, b"third: text", "{}", run.describe());
}

#[test]
fn pop_wait_gets_an_item_pushed_meanwhile() {
    // Pins: `pop --wait 3` on an empty queue returns an item another
    // `dque push` adds while it waits.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    let waiting = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(["pop", s(&q), "--wait", "3"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn pop");
    std::thread::sleep(Duration::from_millis(300));
    let push = dque(&["push", s(&q), "hello"]);
    let popped = waiting.wait_with_output().expect("pop");
    let pop_stderr = String::from_utf8_lossy(&popped.stderr);
    push.code(OK);
    assert_eq!(popped.status.code(), Some(OK), "{pop_stderr}");
    assert_eq!(popped.stdout, b"hello", "{pop_stderr}");
}

// ---------------------------------------------------------------------------
// 5. verify
// ---------------------------------------------------------------------------

#[test]
fn verify_a_healthy_queue() {
    // Pins: verify on a healthy queue exits 0 and says "healthy" with the
    // counts; -q says nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    dque(&["verify", s(&q)])
        .code(OK)
        .stdout_has(&["4 segments", "8 items", "healthy"]);
    dque(&["verify", s(&q), "-q"]).code(OK).stdout_empty();
}

#[test]
fn verify_names_the_corrupt_segment_and_offset() {
    // Pins: a flipped payload byte in a sealed middle segment makes verify
    // exit 3 (also with -q) naming that segment file and the byte offset of
    // the bad record; verify changes nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = corrupt_middle(root.path());
    let before = snapshot(&q);
    let run = dque(&["verify", s(&q)]);
    run.code(DAMAGED)
        .stdout_has(&[&seg_name(2), &format!("byte {HEADER_LEN}"), "problem"]);
    assert!(
        !run.out().contains("healthy"),
        "a damaged queue called healthy\n{}",
        run.describe()
    );
    dque(&["verify", s(&q), "--quiet"])
        .code(DAMAGED)
        .stdout_has(&[&seg_name(2)]);
    assert_unchanged(&q, &before, "verify");
}

#[test]
fn verify_reports_a_torn_tail() {
    // Pins: garbage after the last frame of a closed queue makes verify exit
    // 3 naming the tail segment and where the garbage starts.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let (q, end) = torn(root.path());
    let before = snapshot(&q);
    dque(&["verify", s(&q)])
        .code(DAMAGED)
        .stdout_has(&[&seg_name(2), &format!("byte {end}")]);
    assert_unchanged(&q, &before, "verify");
}

#[test]
fn verify_a_locked_queue_says_it_is_in_use() {
    // Pins: verify on a healthy queue a program holds open exits 0 and says
    // on stderr that it is in use by our pid.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    dque(&["verify", s(&path)])
        .code(OK)
        .stdout_has(&["healthy"])
        .stderr_has(&["in use", &format!("process {}", pid())]);
    drop(q);
}

// ---------------------------------------------------------------------------
// 6. repair
// ---------------------------------------------------------------------------

#[test]
fn repair_dry_run_changes_nothing() {
    // Pins: `repair --dry-run` on a torn tail exits 0, lists the cut of the
    // tail segment at the garbage's offset, and changes no byte.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let (q, end) = torn(root.path());
    let before = snapshot(&q);
    dque(&["repair", s(&q), "--dry-run"]).code(OK).stdout_has(&[
        "would",
        "cut",
        &seg_name(2),
        &format!("byte {end}"),
        "nothing was changed",
    ]);
    assert_unchanged(&q, &before, "repair --dry-run");
}

#[test]
fn repair_without_yes_and_no_terminal_exits_2() {
    // Pins: `repair` without --yes, stdin not a terminal, exits 2 pointing
    // at --yes, and changes nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let (q, _) = torn(root.path());
    let before = snapshot(&q);
    dque_in(&["repair", s(&q)], Some(b"y\n"))
        .code(USAGE)
        .stderr_has(&["not a terminal", "--yes"]);
    assert_unchanged(&q, &before, "repair without --yes");
}

#[test]
fn repair_yes_cuts_a_torn_tail() {
    // Pins: `repair --yes` on a torn tail exits 0, reports healthy after it,
    // verify then exits 0, and every item is still there in order.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let (q, end) = torn(root.path());
    dque(&["repair", s(&q), "--yes"]).code(OK).stdout_has(&[
        "cut",
        &seg_name(2),
        "after repair",
        "healthy",
    ]);
    let bytes = fs::read(seg_path(&q, 2)).unwrap();
    assert!(
        bytes[end as usize..].iter().all(|&b| b == 0),
        "the garbage is still there"
    );
    dque(&["verify", s(&q)]).code(OK).stdout_has(&["healthy"]);
    assert_eq!(drain(&q), small_items(5));
}

#[test]
fn repair_yes_moves_a_corrupt_middle_segment_aside() {
    // Pins: `repair --yes` on a corrupt middle segment exits 0, moves the
    // file unchanged into DIR/quarantine/, says which ids leave, and leaves a
    // queue that opens, verifies, and holds the other segments' items.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = corrupt_middle(root.path());
    let damaged = fs::read(seg_path(&q, 2)).unwrap();
    dque(&["repair", s(&q), "--yes"]).code(OK).stdout_has(&[
        "move",
        &seg_name(2),
        "quarantine",
        "2 ids leave",
        "after repair",
    ]);
    let moved = q.join("quarantine").join(seg_name(2));
    assert!(
        fs::read(&moved).ok() == Some(damaged),
        "{moved:?} missing or changed"
    );
    dque(&["verify", s(&q)]).code(OK).stdout_has(&["healthy"]);
    let left = drain(&q);
    let expected: Vec<Vec<u8>> = [0, 1, 4, 5]
        .iter()
        .map(|i| format!("t{i}").into_bytes())
        .collect();
    assert_eq!(left, expected);
}

#[test]
fn repair_a_healthy_queue_does_nothing() {
    // Pins: repair on a healthy queue says "nothing to repair", exits 0 and
    // changes no byte.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let before = snapshot(&q);
    dque(&["repair", s(&q), "--yes"])
        .code(OK)
        .stdout_has(&["nothing to repair"]);
    assert_unchanged(&q, &before, "repair of a healthy queue");
}

#[test]
fn repair_a_locked_queue_exits_4() {
    // Pins: repair (also --dry-run) on a queue a program holds open exits 4
    // naming its pid, and changes nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = healthy(root.path());
    let q = RawQueue::open(&path).expect("hold it open");
    let before = snapshot(&path);
    for args in [
        &["repair", s(&path), "--yes"][..],
        &["repair", s(&path), "--dry-run"][..],
    ] {
        dque(args)
            .code(LOCKED)
            .stdout_empty()
            .stderr_has(&["in use", &format!("process {}", pid())]);
    }
    assert_unchanged(&path, &before, "repair of a locked queue");
    drop(q);
}

// ---------------------------------------------------------------------------
// 7. help and bench
// ---------------------------------------------------------------------------

#[test]
fn help_lists_every_subcommand_and_the_exit_codes() {
    // Pins: `dque --help` names every subcommand and every exit code.
    let _serial = serial();
    let run = dque(&["--help"]);
    run.code(OK).stdout_has(&[
        "stats",
        "peek",
        "dump",
        "push",
        "pop",
        "verify",
        "repair",
        "bench",
        "exit codes",
    ]);
    let out = run.out();
    for code in 0..=6 {
        assert!(
            out.lines()
                .any(|line| line.trim_start().starts_with(&format!("{code} "))),
            "exit code {code} is not listed\n{}",
            run.describe()
        );
    }
    // No subcommand is wrong usage.
    dque(&[]).code(USAGE).stderr_has(&["usage"]);
}

#[test]
fn bench_runs_and_cleans_up() {
    // Pins: a small bench exits 0, prints a Turbo row of the table, and
    // removes its .dque-bench-* directory.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let run = dque(&[
        "bench",
        s(root.path()),
        "--count",
        "200",
        "--safe-count",
        "20",
    ]);
    run.code(OK).stdout_has(&[
        "| mode |",
        "| Turbo | enqueue | 200 |",
        "| Safe | enqueue | 20 |",
    ]);
    let left: Vec<_> = fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "bench left {left:?}\n{}", run.describe());
}

#[test]
fn bench_on_a_missing_dir_is_usage() {
    // Pins: `dque bench` on a missing directory exits 2 and says so.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("nonexistent");
    dque(&["bench", s(&missing)])
        .code(USAGE)
        .stdout_empty()
        .stderr_has(&["no such directory"]);
    assert!(!missing.exists());
}

#[test]
fn push_refuses_empty_stdin() {
    // Pins: an empty stdin (most likely a producer that failed) pushes
    // nothing and says so, rather than adding a 0-byte item.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    dque_in(&["push", s(&q)], Some(b""))
        .code(ERROR)
        .stderr_has(&["stdin was empty", "nothing pushed"]);
    assert!(drain(&q).is_empty());
    // An empty item asked for in so many words is pushed.
    dque(&["push", s(&q), ""]).code(OK);
    assert_eq!(drain(&q), vec![Vec::<u8>::new()]);
}

#[test]
fn push_takes_items_above_the_library_default_cap() {
    // Pins: the CLI pushes any item the format holds, not only those under
    // the library's default 16 MiB cap, and pop gives back every byte.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = empty(root.path());
    let big: Vec<u8> = (0..17u32 << 20).map(|i| (i % 251) as u8).collect();
    let file = root.path().join("big.bin");
    fs::write(&file, &big).unwrap();
    dque(&["push", s(&q), "--file", s(&file)]).code(OK);
    let run = dque(&["pop", s(&q)]);
    run.code(OK);
    assert!(run.stdout == big, "popped {} bytes", run.stdout.len());
}

#[test]
fn dead_lists_dead_letters_with_their_reasons() {
    // Pins: `dque dead` shows each dead letter's original id, attempts,
    // reason and payload, as text and as JSON, while the queue is open, and
    // a queue without dead letters lists nothing.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("q");
    let q = RawQueue::create_with(&path, &options(3)).unwrap();
    for item in [&b"fine"[..], b"poison \x00\xff", b"also fine"] {
        q.enqueue_bytes(item).unwrap();
    }
    let first = q.lease().unwrap().unwrap();
    let poison = q.lease().unwrap().unwrap();
    poison.fail("cannot parse").unwrap();
    first.ack().unwrap();

    let run = dque(&["dead", s(&path)]);
    run.code(OK)
        .stdout_has(&["id 1", "attempts 1", "\"cannot parse\"", "hex 70 6f"]);
    assert_eq!(run.out().matches("dead ").count(), 1, "{}", run.describe());
    let run = dque(&["dead", s(&path), "--json"]);
    run.code(OK);
    let v = json(run.out().trim());
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["reason"], "cannot parse", "{v}");
    assert_eq!(v["len"], 9, "{v}");
    drop(q);
    // verify checks the dead-letter queue too, and names it.
    let dead_dir = format!("{}/dead: 1 segments, 1 items, healthy", s(&path));
    dque(&["verify", s(&path)])
        .code(OK)
        .stdout_has(&["healthy", &dead_dir]);

    let clean = empty(&root.path().join("clean"));
    let run = dque(&["dead", s(&clean)]);
    run.code(OK).stdout_empty();
}

#[test]
fn salvage_lists_and_pushes_back_what_repair_moved_aside() {
    // Pins: after repair moves a damaged segment aside, salvage lists the
    // record still whole in it (id unknown past the damage) and --into
    // pushes it into the queue; the damaged record stays lost.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = corrupt_middle(root.path());
    dque(&["repair", s(&q), "--yes"]).code(OK);
    let moved = q.join("quarantine").join(seg_name(2));
    let before = fs::read(&moved).unwrap();

    let run = dque(&["salvage", s(&moved)]);
    run.code(OK)
        .stdout_has(&["damaged at byte 40", "id ?", "\"t3\""]);
    assert!(!run.out().contains("\"t2\""), "{}", run.describe());
    let run = dque(&["salvage", s(&moved), "--json"]);
    run.code(OK);
    let v = json(run.out().trim());
    assert_eq!(v["text"], "t3", "{v}");
    assert!(v["id"].is_null(), "{v}");

    dque(&["salvage", s(&moved), "--into", s(&q)])
        .code(OK)
        .stdout_has(&["pushed 1 of 1"]);
    assert_eq!(
        fs::read(&moved).unwrap(),
        before,
        "salvage changed the file"
    );
    let left: Vec<Vec<u8>> = contents(&q);
    assert_eq!(left.last().map(Vec::as_slice), Some(&b"t3"[..]));
    assert!(!left.contains(&b"t2".to_vec()));

    dque(&["salvage", s(&root.path().join("nope.seg"))])
        .code(ERROR)
        .stderr_has(&["nope.seg"]);
}

#[test]
fn encoded_pop_and_push_move_a_typed_queue_s_items_as_they_are() {
    // Pins: --encoded lets pop take a bincode queue's item as its stored
    // bytes and push put them back; the program's typed handle decodes it.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("typed");
    let q: DQue<u32> = DQue::create(&path).unwrap();
    q.enqueue(&7).unwrap();
    q.enqueue(&8).unwrap();
    drop(q);

    let popped = dque(&["pop", s(&path), "--encoded"]);
    popped.code(OK);
    assert!(!popped.stdout.is_empty());
    let file = root.path().join("item.bin");
    fs::write(&file, &popped.stdout).unwrap();
    dque(&["push", s(&path), "--encoded", "--file", s(&file)]).code(OK);

    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.dequeue().unwrap(), Some(8));
    assert_eq!(
        q.dequeue().unwrap(),
        Some(7),
        "the item went back at the end"
    );
    assert!(q.verify().unwrap().is_healthy());
}

#[test]
fn requeue_puts_dead_letters_back_into_a_typed_queue() {
    // Pins: `dque requeue DIR ID` puts a dead letter back at the end of its
    // queue, whatever the codec, and the program decodes it; an unknown id
    // is a clear error; --all empties the dead letters.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("typed");
    let q: DQue<String> = DQue::create(&path).unwrap();
    for job in ["a", "b", "c"] {
        q.enqueue(&job.to_string()).unwrap();
    }
    q.lease().unwrap().unwrap().fail("bad a").unwrap();
    q.lease().unwrap().unwrap().fail("bad b").unwrap();
    let ids: Vec<u64> = q.dead_letters().unwrap().iter().map(|d| d.id).collect();
    drop(q);

    dque(&["requeue", s(&path), &ids[1].to_string()])
        .code(OK)
        .stdout_has(&["requeued 1"]);
    dque(&["requeue", s(&path), "999"])
        .code(ERROR)
        .stderr_has(&["no dead letter has id 999", "dque dead"]);
    let q: DQue<String> = DQue::open(&path).unwrap();
    assert_eq!(q.dead_letters().unwrap().len(), 1);
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("c"));
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("b"));
    drop(q);

    dque(&["requeue", s(&path), "--all"]).code(OK);
    let q: DQue<String> = DQue::open(&path).unwrap();
    assert!(q.dead_letters().unwrap().is_empty());
    assert_eq!(q.dequeue().unwrap().as_deref(), Some("a"));
    dque(&["requeue", s(&path)]).code(USAGE);
}

// ---------------------------------------------------------------------------
// Shared queues (issue 12): the command joins a queue programs share
// ---------------------------------------------------------------------------

#[test]
fn push_pop_and_workers_work_beside_a_program_that_shares_the_queue() {
    // Serial: a command spawned while another test holds a queue open
    // holds that queue's lock until it execs (fork copies the descriptor).
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let program: RawQueue = Options::new().shared(true).create(&path).unwrap();
    program.enqueue_bytes(b"from the program").unwrap();
    dque(&["push", s(&path), "from the shell"]).code(OK);
    assert_eq!(program.len(), 2);
    let held = program.lease().unwrap().unwrap();
    assert_eq!(&held[..], b"from the program");
    // The item the program holds is not the shell's to take.
    let run = dque(&["pop", s(&path)]);
    run.code(OK);
    assert_eq!(run.stdout, b"from the shell");
    dque(&["pop", s(&path)]).code(EMPTY);
    let run = dque(&["workers", s(&path), "--json"]);
    run.code(OK);
    let workers: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(workers[0]["pid"], std::process::id(), "{workers}");
    assert_eq!(
        workers[0]["leases"],
        serde_json::json!([held.id()]),
        "{workers}"
    );
    assert_eq!(workers.as_array().unwrap().len(), 1, "{workers}");
    held.ack().unwrap();
    assert!(program.is_empty());
}

#[test]
fn pop_wait_is_woken_by_a_push_from_another_process() {
    // Serial: a command spawned while another test holds a queue open
    // holds that queue's lock until it execs (fork copies the descriptor).
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let program: RawQueue = Options::new().shared(true).create(&path).unwrap();
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || dque(&["pop", s(&path), "--wait", "60"]))
    };
    // Until the command has joined, the program is the only worker.
    let deadline = Instant::now() + Duration::from_secs(30);
    while program.workers().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(program.workers().unwrap().len(), 2, "the command joined");
    program.enqueue_bytes(b"wake up").unwrap();
    let run = waiter.join().unwrap();
    run.code(OK);
    assert_eq!(run.stdout, b"wake up");
    assert!(program.is_empty());
}

#[test]
fn several_commands_at_once_on_one_queue_just_work() {
    // Serial: a command spawned while another test holds a queue open
    // holds that queue's lock until it execs (fork copies the descriptor).
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    dque(&["push", s(&path), "--create", "seed"]).code(OK);
    let pushers: Vec<_> = (0..4)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                for j in 0..5 {
                    dque(&["push", s(&path), &format!("{i}-{j}")]).code(OK);
                }
            })
        })
        .collect();
    for pusher in pushers {
        pusher.join().unwrap();
    }
    let run = dque(&["pop", s(&path), "-n", "100"]);
    run.code(OK);
    let mut lines: Vec<String> = run.out().lines().map(str::to_string).collect();
    assert_eq!(lines.remove(0), "seed");
    lines.sort();
    let mut expected: Vec<String> = (0..4)
        .flat_map(|i| (0..5).map(move |j| format!("{i}-{j}")))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
}

// ---------------------------------------------------------------------------
// A reader that leaves early
// ---------------------------------------------------------------------------

/// Runs `dque ARGS` with stdout a pipe whose read end is already closed
/// (a reader such as `head` or `grep -q` that has gone); stdin is empty.
fn dque_into_closed_pipe(args: &[&str]) -> Run {
    // The reader: `true`, which exits without reading; its stdin's write
    // end is all that is left of the pipe here.
    let mut reader = std::process::Command::new("true")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("run true");
    let writer = reader.stdin.take().expect("the pipe's write end");
    assert!(reader.wait().expect("true exits").success());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run dque");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: output.status.code().unwrap_or(-1),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn no_command_panics_when_its_reader_has_gone() {
    // Issue 23, item 7: `dque stats DIR | head` (or `| grep -q`, `| true`)
    // panicked with exit 101, "failed printing to stdout: Broken pipe", in
    // stats, stats --json, verify, workers and every other command that
    // prints with `println!`. A reader that leaves is not an error: each
    // command ends quietly with the status it would have had, and pop gives
    // back the item it could not write.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    // A dead letter, for `dead` and `requeue`.
    let raw = RawQueue::open_with(&q, &options(3)).unwrap();
    raw.lease().unwrap().unwrap().fail("broken").unwrap();
    raw.close().unwrap();
    let jobs_root = root.path().join("jobs");
    fs::create_dir(&jobs_root).unwrap();
    let jobs = jobs_root.join("q");
    dque(&["push", s(&jobs), "--create", "a", "b"]).code(OK);
    dque(&["push", s(&jobs), "--delay", "600", "later"]).code(OK);
    let torn_root = root.path().join("torn");
    fs::create_dir(&torn_root).unwrap();
    let (torn, _) = torn(&torn_root);
    let damaged_root = root.path().join("damaged");
    fs::create_dir(&damaged_root).unwrap();
    let damaged = corrupt_middle(&damaged_root);
    dque(&["repair", s(&damaged), "--yes"]).code(OK);
    let quarantined = damaged.join("quarantine").join(seg_name(2));
    let bench = root.path().join("bench");
    fs::create_dir(&bench).unwrap();

    let (q, jobs, torn) = (s(&q), s(&jobs), s(&torn));
    let commands: Vec<(Vec<&str>, i32)> = vec![
        (vec!["--help"], OK),
        (vec!["--version"], OK),
        (vec!["stats", "--help"], OK),
        (vec!["stats", q], OK),
        (vec!["stats", q, "--json"], OK),
        (vec!["stats", jobs], OK),
        (vec!["stats", jobs, "--json"], OK),
        (vec!["peek", q], OK),
        (vec!["peek", q, "--raw"], OK),
        (vec!["peek", q, "--json", "-n", "5"], OK),
        (vec!["peek", jobs, "-n", "5"], OK),
        (vec!["dump", q], OK),
        (vec!["dump", jobs, "--json"], OK),
        (vec!["dead", q], OK),
        (vec!["dead", q, "--json"], OK),
        (vec!["verify", q], OK),
        // A verdict stays the verdict: a damaged queue still exits 3.
        (vec!["verify", torn], DAMAGED),
        (vec!["repair", torn, "--dry-run"], OK),
        (vec!["salvage", s(&quarantined)], OK),
        (vec!["salvage", s(&quarantined), "--json"], OK),
        (vec!["workers", q], OK),
        (vec!["workers", q, "--json"], OK),
        (vec!["requeue", q, "--all"], OK),
        (vec!["work", jobs, "--until-empty", "--", "true"], OK),
        (
            vec!["bench", s(&bench), "--count", "50", "--safe-count", "5"],
            OK,
        ),
    ];
    for (args, code) in commands {
        let run = dque_into_closed_pipe(&args);
        run.code(code);
        assert!(
            !run.stderr.contains("panicked") && run.stderr.trim().is_empty(),
            "a closed pipe is not worth a word\n{}",
            run.describe()
        );
    }

    // pop: the item it could not write stays, at the head of the queue.
    let before = contents(Path::new(q));
    for args in [vec!["pop", q], vec!["pop", q, "-n", "3"]] {
        dque_into_closed_pipe(&args).code(OK);
        assert_eq!(contents(Path::new(q)), before, "{args:?} kept the items");
    }
    let v = json(dque(&["stats", q, "--json"]).code(OK).out().trim());
    assert_eq!(v["delivered"], 0, "no delivery was counted: {v}");
}

// ---------------------------------------------------------------------------
// One view per kind of queue, times as dates, names for codecs
// ---------------------------------------------------------------------------

/// What the files under `dir` take: (allocated bytes, lengths).
fn file_bytes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut sum = (0, 0);
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            let (allocated, length) = file_bytes(&entry.path());
            sum = (sum.0 + allocated, sum.1 + length);
        } else {
            sum = (sum.0 + meta.blocks() * 512, sum.1 + meta.len());
        }
    }
    sum
}

/// A byte count as `dque stats` prints it.
fn shown_bytes(n: u64) -> String {
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < 3 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", ["B", "KiB", "MiB", "GiB"][unit]),
    }
}

#[test]
fn stats_of_a_jobs_queue_agrees_with_itself() {
    // Issue 23, item 7: `dque stats` of a jobs queue printed the root
    // lane's files (`items 5`, `dead letters 0`, `on disk 1.0 MiB`) next to
    // the jobs' counts (`7 ready, 1 scheduled, 1 dead`) of the whole queue
    // in a 4.2 MiB directory. One view per kind: a jobs queue shows its jobs
    // by state and every file under it; --json's `items`, `dead_letters`
    // and `bytes_on_disk` say the same.
    use dque::jobs::{JobOptions, JobQueue, NewJob};
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("jobs");
    let jobs = JobOptions::new().create(&dir).unwrap();
    for n in 0..5 {
        jobs.enqueue(NewJob::new(format!("plain {n}"))).unwrap();
    }
    for n in 0..3 {
        jobs.enqueue(NewJob::new(format!("urgent {n}")).priority(-3))
            .unwrap();
    }
    jobs.enqueue(NewJob::new("later").delay(Duration::from_secs(3600)))
        .unwrap();
    let poison = jobs.lease().unwrap().unwrap();
    jobs.fail(poison, "cannot parse").unwrap();
    jobs.close().unwrap();

    let run = dque(&["stats", s(&dir)]);
    run.code(OK).stdout_has(&[
        "(a jobs queue)",
        "7 ready, 1 scheduled, 0 leased, 1 dead (9 in all)",
        "codec jobs",
    ]);
    let out = run.out();
    for line in ["items", "dead letters", "delivered", "segments"] {
        assert!(
            !out.lines().any(|l| l.starts_with(line)),
            "a jobs queue shows no lane's {line:?}\n{}",
            run.describe()
        );
    }
    let (allocated, length) = file_bytes(&dir);
    assert_eq!(
        stat_line(&out, "on disk"),
        format!(
            "{} ({} of file lengths, preallocation included; every file under the directory)",
            shown_bytes(allocated),
            shown_bytes(length)
        ),
        "{}",
        run.describe()
    );
    let v = json(dque(&["stats", s(&dir), "--json"]).code(OK).out().trim());
    assert_eq!(v["kind"], "jobs", "{v}");
    assert_eq!(v["items"], 8, "{v}");
    assert_eq!(v["dead_letters"], 1, "{v}");
    assert_eq!(v["bytes_on_disk"], length, "{v}");
    assert_eq!(v["directory_bytes"], allocated, "{v}");
    assert_eq!(v["counts"]["ready"], 7, "{v}");
}

#[test]
fn stats_of_a_plain_queue_counts_every_file_and_names_its_codec() {
    // Issue 23, item 7: `on disk` counted the segments only, not the dead
    // letters' files, and the codec printed as a number.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let q = healthy(root.path());
    let raw = RawQueue::open_with(&q, &options(3)).unwrap();
    raw.lease().unwrap().unwrap().fail("broken").unwrap();
    raw.close().unwrap();
    let run = dque(&["stats", s(&q)]);
    run.code(OK);
    let out = run.out();
    assert_eq!(stat_line(&out, "items"), "7", "{}", run.describe());
    assert_eq!(stat_line(&out, "dead letters"), "1", "{}", run.describe());
    assert_eq!(stat_line(&out, "format"), "version 1, codec raw bytes");
    let (allocated, _) = file_bytes(&q);
    assert!(
        stat_line(&out, "on disk").starts_with(&format!("{} (", shown_bytes(allocated))),
        "{}",
        run.describe()
    );
    let v = json(dque(&["stats", s(&q), "--json"]).code(OK).out().trim());
    assert_eq!(
        (v["kind"].as_str(), v["codec"].as_str()),
        (Some("fifo"), Some("raw bytes"))
    );
}

#[test]
fn times_print_as_dates_and_ages() {
    // Issue 23, item 7: `dque workers` said `since 1795659064385 ms after
    // the epoch` and `dque peek` a scheduled job's `due 1795662650`. Times
    // print as UTC dates (RFC 3339) with an age; JSON keeps its numbers and
    // adds the dates.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("jobs");
    dque(&["push", s(&dir), "--create", "--delay", "3600", "later"]).code(OK);
    let rfc3339 = |text: &str| {
        text.split_whitespace().any(|word| {
            let b = word.as_bytes();
            b.len() == 20 && b[4] == b'-' && b[10] == b'T' && b[19] == b'Z'
        })
    };
    let run = dque(&["peek", s(&dir)]);
    run.code(OK).stdout_has(&["due ", "(in 59m)"]);
    assert!(rfc3339(&run.out()), "{}", run.describe());
    let v = json(dque(&["peek", s(&dir), "--json"]).code(OK).out().trim());
    assert!(v["due"].as_u64().is_some(), "{v}");
    assert!(rfc3339(v["due_at"].as_str().unwrap()), "{v}");

    let shared = RawQueue::open_encoded_with(&dir, &Options::new().shared(true)).unwrap();
    let run = dque(&["workers", s(&dir)]);
    run.code(OK).stdout_has(&["since "]);
    let out = run.out();
    assert!(
        out.contains("(now)") || out.contains(" ago)"),
        "an age\n{out}"
    );
    assert!(!run.out().contains("after the epoch"), "{}", run.describe());
    assert!(rfc3339(&run.out()), "{}", run.describe());
    let v = json(dque(&["workers", s(&dir), "--json"]).code(OK).out().trim());
    assert!(rfc3339(v[0]["started"].as_str().unwrap()), "{v}");
    assert!(v[0]["started_unix_ms"].as_u64().is_some(), "{v}");
    drop(shared);
}

#[test]
fn push_and_pop_help_speaks_of_jobs() {
    // Issue 23, item 7: the help of push and pop said "raw-bytes queue",
    // though both take jobs queues (and push --create makes one).
    let _serial = serial();
    let run = dque(&["--help"]);
    run.code(OK);
    for line in run.out().lines() {
        let line = line.trim_start();
        if line.starts_with("push ") || line.starts_with("pop ") {
            assert!(line.contains("jobs"), "{line}");
            assert!(!line.contains("raw-bytes queue:"), "{line}");
        }
    }
    dque(&["push", "--help"])
        .code(OK)
        .stdout_has(&["add jobs to a queue"]);
    dque(&["pop", "--help"])
        .code(OK)
        .stdout_has(&["take jobs from a queue"]);
}

#[test]
fn a_codec_mismatch_names_the_codec() {
    // Issue 23, item 7: a codec mismatch printed `codec 1935830890`: known
    // codecs print by name, a program's own by its id's four bytes.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("own");
    #[derive(Default)]
    struct Own;
    impl dque::Codec<Vec<u8>> for Own {
        const ID: u32 = u32::from_le_bytes(*b"mine");
        fn encode(&self, item: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), dque::CodecError> {
            out.extend_from_slice(item);
            Ok(())
        }
        fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, dque::CodecError> {
            Ok(bytes.to_vec())
        }
    }
    let q: DQue<Vec<u8>, Own> = DQue::create_with(&path, &Options::new()).unwrap();
    q.enqueue(&b"x".to_vec()).unwrap();
    q.close().unwrap();
    dque(&["pop", s(&path)])
        .code(ERROR)
        .stderr_has(&["codec \"mine\" (a program's own)", "--encoded"]);
    dque(&["stats", s(&path)])
        .code(OK)
        .stdout_has(&["codec \"mine\" (a program's own)"]);
    fs::create_dir_all(root.path().join("typed")).unwrap();
    let typed = bincode(&root.path().join("typed"));
    dque(&["pop", s(&typed)]).code(ERROR).stderr_has(&[
        "codec bincode",
        "jobs queues",
        "raw-bytes queues",
    ]);
}

#[test]
fn locked_by_shared_handles_says_how_to_join() {
    // Issue 23, item 7: opening a queue that others have open in shared
    // mode, without Options::shared(true), said "locked by another handle
    // … close the other handle": it says the queue is open in shared mode
    // and how to join. A queue held alone still says to close the holder.
    let _serial = serial();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("q");
    let shared = RawQueue::create_with(&path, &Options::new().shared(true)).unwrap();
    let error = RawQueue::open(&path).expect_err("held in shared mode");
    assert!(matches!(error, dque::Error::Locked { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("open in shared mode"), "{text}");
    assert!(text.contains("Options::shared(true)"), "{text}");
    drop(shared);
    let alone = RawQueue::open(&path).unwrap();
    let text = RawQueue::open(&path).expect_err("held alone").to_string();
    assert!(text.contains("close the other handle"), "{text}");
    assert!(!text.contains("open in shared mode"), "{text}");
    drop(alone);
}
