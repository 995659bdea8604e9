//! The `ops` target: operation sequences applied to a queue and to a model
//! ([`ops`](ops())), across reopens, kills and power losses.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dque::{Durability, Error, Options, RawQueue};

use super::common::{
    file_sizes, item, list_dir, scratch_dir, snapshot, write_files, Input, MAX_ITEM,
};
use super::format::{judge_header, replay, segment_name, HeaderVerdict, LOCK_FILE};

/// Durability of a handle in the `ops` target. Encoded in one byte:
/// `b % 4` = 1 Turbo, 2 Periodic every `1 + b / 4` ms, else Safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `Durability::Safe`.
    Safe,
    /// `Durability::Turbo`.
    Turbo,
    /// `Durability::Periodic`, every this many milliseconds (1 to 64).
    Periodic(u8),
}

impl Mode {
    fn decode(b: u8) -> Mode {
        match b % 4 {
            1 => Mode::Turbo,
            2 => Mode::Periodic(1 + b / 4),
            _ => Mode::Safe,
        }
    }

    fn encode(self) -> u8 {
        match self {
            Mode::Safe => 0,
            Mode::Turbo => 1,
            Mode::Periodic(ms) => 2 + 4 * (ms.clamp(1, 64) - 1),
        }
    }

    fn durability(self) -> Durability {
        match self {
            Mode::Safe => Durability::Safe,
            Mode::Turbo => Durability::Turbo,
            Mode::Periodic(ms) => Durability::Periodic(Duration::from_millis(u64::from(ms))),
        }
    }
}

/// One step of the `ops` target. Encoding: one byte picks the step
/// (`byte % 16`), then its arguments follow (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Enqueue a new item of this many bytes (0, 1, 2, 15: size (1); 3: size
    /// (2), modulo `MAX_ITEM + 100`, so some are too large).
    Enqueue(u16),
    /// `enqueue_batch` of `1 + count % 8` items of `size + 13 i` bytes; with
    /// `too_large`, the last one is over `MAX_ITEM` and nothing goes in
    /// (12: count (1), size (1), too_large (1, bit 0)).
    EnqueueBatch {
        /// Items in the batch: 1 + this modulo 8.
        count: u8,
        /// Bytes of the first item.
        size: u8,
        /// Whether the last item is too large.
        too_large: bool,
    },
    /// `dequeue` (4, 5).
    Dequeue,
    /// `dequeue_timeout(0)` (6).
    DequeueNow,
    /// `dequeue_batch(max % 10)` (13: max (1)).
    DequeueBatch(u8),
    /// `peek` (7 with argument bit 0 clear).
    Peek,
    /// `peek_timeout(0)` (7 with argument bit 0 set).
    PeekNow,
    /// Close and open again with these sizes (8: flags (1: bit 0 items, bit 1
    /// bytes), items (1), bytes (2), mode (1)).
    Reopen {
        /// `Options::segment_items`: 1 + this modulo 8.
        items: Option<u8>,
        /// `Options::segment_bytes`: 4096 plus this.
        bytes: Option<u16>,
        /// Durability of the new handle.
        mode: Mode,
    },
    /// `set_durability` (9: mode (1)).
    SetDurability(Mode),
    /// `sync` (10).
    Sync,
    /// Copy the files of the open queue to a new directory, drop the handle,
    /// continue on the copy (11 with argument bit 0 clear).
    Kill,
    /// Simulated power loss: continue on a crash image picked by this seed
    /// (11 with argument bit 0 set, then the seed (1)). Without the
    /// `fault-injection` feature, a kill.
    PowerLoss(u8),
    /// `verify()`: healthy, holding `len()` items (14).
    Verify,
}

impl Op {
    fn decode(input: &mut Input) -> Op {
        match input.u8() % 16 {
            0..=2 | 15 => Op::Enqueue(u16::from(input.u8())),
            3 => Op::Enqueue(input.u16() % (MAX_ITEM as u16 + 100)),
            4 | 5 => Op::Dequeue,
            6 => Op::DequeueNow,
            7 if input.u8() & 1 == 0 => Op::Peek,
            7 => Op::PeekNow,
            8 => {
                let flags = input.u8();
                let items = input.u8();
                let bytes = input.u16();
                Op::Reopen {
                    items: (flags & 1 != 0).then_some(items),
                    bytes: (flags & 2 != 0).then_some(bytes),
                    mode: Mode::decode(input.u8()),
                }
            }
            9 => Op::SetDurability(Mode::decode(input.u8())),
            10 => Op::Sync,
            11 if input.u8() & 1 == 0 => Op::Kill,
            11 => Op::PowerLoss(input.u8()),
            12 => Op::EnqueueBatch {
                count: input.u8(),
                size: input.u8(),
                too_large: input.u8() & 1 != 0,
            },
            13 => Op::DequeueBatch(input.u8()),
            _ => Op::Verify,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Op::Enqueue(size) if size < 256 => out.extend_from_slice(&[0, size as u8]),
            Op::Enqueue(size) => {
                out.push(3);
                out.extend_from_slice(&size.to_le_bytes());
            }
            Op::EnqueueBatch {
                count,
                size,
                too_large,
            } => out.extend_from_slice(&[12, count, size, u8::from(too_large)]),
            Op::Dequeue => out.push(4),
            Op::DequeueNow => out.push(6),
            Op::DequeueBatch(max) => out.extend_from_slice(&[13, max]),
            Op::Peek => out.extend_from_slice(&[7, 0]),
            Op::PeekNow => out.extend_from_slice(&[7, 1]),
            Op::Reopen { items, bytes, mode } => {
                let flags = u8::from(items.is_some()) | (u8::from(bytes.is_some()) << 1);
                out.extend_from_slice(&[8, flags, items.unwrap_or(0)]);
                out.extend_from_slice(&bytes.unwrap_or(0).to_le_bytes());
                out.push(mode.encode());
            }
            Op::SetDurability(mode) => out.extend_from_slice(&[9, mode.encode()]),
            Op::Sync => out.push(10),
            Op::Kill => out.extend_from_slice(&[11, 0]),
            Op::PowerLoss(seed) => out.extend_from_slice(&[11, 1, seed]),
            Op::Verify => out.push(14),
        }
    }
}

/// An `ops` input: the first open's settings, then the steps.
///
/// Layout: mode (1, see [`Mode`]), segment items (1: 1 + it modulo 8),
/// segment bytes (2: 4096 + it), then [`Op`]s until the input ends (at most
/// [`MAX_OPS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsInput {
    /// Durability of the first handle.
    pub mode: Mode,
    /// Segment items of the new queue: 1 + this modulo 8.
    pub items: u8,
    /// Segment bytes of the new queue: 4096 + this.
    pub bytes: u16,
    /// The steps.
    pub ops: Vec<Op>,
}

/// Steps an `ops` input runs at most (the rest is ignored).
pub const MAX_OPS: usize = 400;

impl OpsInput {
    /// Reads an input; every byte string is one.
    pub fn decode(data: &[u8]) -> OpsInput {
        let mut input = Input(data);
        let mode = Mode::decode(input.u8());
        let items = input.u8();
        let bytes = input.u16();
        let mut ops = Vec::new();
        while !input.is_empty() && ops.len() < MAX_OPS {
            ops.push(Op::decode(&mut input));
        }
        OpsInput {
            mode,
            items,
            bytes,
            ops,
        }
    }

    /// The bytes that [`decode`](Self::decode) reads back as `self`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.mode.encode(), self.items];
        out.extend_from_slice(&self.bytes.to_le_bytes());
        for op in &self.ops {
            op.encode(&mut out);
        }
        out
    }
}

/// A queue under test and its model. Fields drop in order: the handle,
/// then the plan that watches its directory, then the directory.
struct Model {
    q: RawQueue,
    /// Tracks what is durable in the queue's directory, for crash images.
    #[cfg(feature = "fault-injection")]
    plan: dque::faults::FaultPlan,
    /// Holds the current directory (a kill or power loss moves to a copy).
    root: tempfile::TempDir,
    /// Every item accepted, in order; the queue holds `history[head..]`.
    history: Vec<Vec<u8>>,
    head: usize,
    /// `(head, history.len())` when everything was last durable.
    durable: (usize, usize),
    options: Options,
    mode: Mode,
    next_item: u32,
    step: usize,
}

/// The `ops` fuzz target: see [`OpsInput`] and [`Op`]. After every step the
/// queue agrees with the model: every item returned and `len()`, and on disk
/// exactly the segments `segment_numbers()` names, no more of them than the
/// items explain, and no temp file. A kill loses nothing; a power loss keeps
/// a window of the items, in order, that holds everything made durable. At
/// the end the queue is drained and must reopen empty and clean.
pub fn ops(data: &[u8]) {
    let input = OpsInput::decode(data);
    let options = Options::new()
        .max_item_bytes(MAX_ITEM)
        .durability(input.mode.durability())
        .segment_items(1 + u32::from(input.items % 8))
        .segment_bytes(4096 + u32::from(input.bytes));
    let root = scratch_dir();
    let q = RawQueue::create_with(root.path().join("q"), &options).expect("create");
    assert!(q.open_report().is_clean());
    let mut m = Model {
        #[cfg(feature = "fault-injection")]
        plan: dque::faults::FaultPlan::install(root.path().join("q")),
        root,
        q,
        history: Vec::new(),
        head: 0,
        durable: (0, 0),
        options,
        mode: input.mode,
        next_item: 0,
        step: 0,
    };
    for (step, op) in input.ops.iter().enumerate() {
        m.step = step;
        m.apply(*op);
        m.check(op);
    }
    m.step = input.ops.len();
    m.apply(Op::Verify);
    let rest =
        m.q.dequeue_batch(usize::MAX)
            .unwrap_or_else(|e| m.fail(&format!("final drain: {e}")));
    assert!(rest == m.history[m.head..], "final drain");
    m.head = m.history.len();
    assert_eq!(m.q.dequeue().expect("dequeue an empty queue"), None);
    m.check(&Op::Dequeue);
    m.q.close().expect("close");
    m.reopen(m.options);
    assert!(
        m.q.is_empty(),
        "empty queue reopened with {} items",
        m.q.len()
    );
    m.q.close().expect("close");
}

impl Model {
    fn dir(&self) -> PathBuf {
        self.root.path().join("q")
    }

    fn fail(&self, what: &str) -> ! {
        panic!("step {}: {what}", self.step)
    }

    fn items(&self) -> &[Vec<u8>] {
        &self.history[self.head..]
    }

    fn new_item(&mut self, size: usize) -> Vec<u8> {
        self.next_item += 1;
        item(self.next_item - 1, size)
    }

    fn apply(&mut self, op: Op) {
        // A consumed head is retired by a write, never by a read: by the
        // call that settled its last record, or at the latest by the next
        // call that takes an item (before it takes one).
        let takes = match op {
            Op::Dequeue | Op::DequeueNow => true,
            Op::DequeueBatch(max) => max % 10 > 0,
            _ => false,
        };
        let consumed = if takes { self.consumed_head() } else { None };
        self.apply_op(op);
        if let Some(number) = consumed {
            if self.dir().join(segment_name(number)).exists() {
                self.fail(&format!(
                    "{op:?}: consumed head segment {number} is still there after a call \
                     that takes an item"
                ));
            }
        }
    }

    fn apply_op(&mut self, op: Op) {
        match op {
            Op::Enqueue(size) => {
                let item = self.new_item(size as usize);
                match self.q.enqueue(&item) {
                    Ok(()) => self.history.push(item),
                    Err(Error::ItemTooLarge { size: s, max }) => {
                        assert!(s == item.len() && max == MAX_ITEM && s > MAX_ITEM as usize)
                    }
                    Err(e) => self.fail(&format!("enqueue of {size} bytes: {e}")),
                }
            }
            Op::EnqueueBatch {
                count,
                size,
                too_large,
            } => {
                let count = 1 + usize::from(count % 8);
                let mut items: Vec<Vec<u8>> = (0..count)
                    .map(|i| self.new_item(usize::from(size) + 13 * i))
                    .collect();
                if too_large {
                    items[count - 1] = self.new_item(MAX_ITEM as usize + 1);
                }
                match self.q.enqueue_batch(&items) {
                    Ok(()) if !too_large => self.history.extend(items),
                    Err(Error::ItemTooLarge { .. }) if too_large => {}
                    other => self.fail(&format!(
                        "enqueue_batch (too large: {too_large}): {other:?}"
                    )),
                }
            }
            Op::Dequeue | Op::DequeueNow => {
                let got = match op {
                    Op::Dequeue => self.q.dequeue(),
                    _ => self.q.dequeue_timeout(Duration::ZERO),
                };
                let got = got.unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                let expected = self.items().first().cloned();
                if got != expected {
                    self.fail(&format!("{op:?} gave {got:?}, expected {expected:?}"));
                }
                self.head += usize::from(got.is_some());
            }
            Op::DequeueBatch(max) => {
                let max = usize::from(max % 10);
                let got = self
                    .q
                    .dequeue_batch(max)
                    .unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                let expected = &self.items()[..max.min(self.items().len())];
                if got != expected {
                    self.fail(&format!("{op:?} gave {got:?}, expected {expected:?}"));
                }
                self.head += got.len();
            }
            Op::Peek | Op::PeekNow => {
                let got = self.reads_only("peek", |m| match op {
                    Op::Peek => m.q.peek(),
                    _ => m.q.peek_timeout(Duration::ZERO),
                });
                let got = got.unwrap_or_else(|e| self.fail(&format!("{op:?}: {e}")));
                if got.as_ref() != self.items().first() {
                    self.fail(&format!(
                        "{op:?} gave {got:?}, expected {:?}",
                        self.items().first()
                    ));
                }
            }
            Op::Reopen { items, bytes, mode } => {
                let mut options = Options::new()
                    .max_item_bytes(MAX_ITEM)
                    .durability(mode.durability());
                if let Some(items) = items {
                    options = options.segment_items(1 + u32::from(items % 8));
                }
                if let Some(bytes) = bytes {
                    options = options.segment_bytes(4096 + u32::from(bytes));
                }
                self.q
                    .close()
                    .unwrap_or_else(|e| self.fail(&format!("close: {e}")));
                self.mode = mode;
                self.reopen(options);
            }
            Op::SetDurability(mode) => {
                self.q
                    .set_durability(mode.durability())
                    .unwrap_or_else(|e| self.fail(&format!("set_durability: {e}")));
                if mode == Mode::Safe && self.mode != Mode::Safe {
                    // Switching to Safe syncs what was written before.
                    self.durable = (self.head, self.history.len());
                }
                self.mode = mode;
            }
            Op::Sync => {
                self.q
                    .sync()
                    .unwrap_or_else(|e| self.fail(&format!("sync: {e}")));
                self.durable = (self.head, self.history.len());
            }
            Op::Kill => self.kill(),
            Op::PowerLoss(seed) => self.power_loss(seed),
            Op::Verify => {
                let report = self
                    .reads_only("verify", |m| m.q.verify())
                    .unwrap_or_else(|e| self.fail(&format!("verify: {e}")));
                if !report.is_healthy() || report.items() != self.items().len() as u64 {
                    self.fail(&format!(
                        "verify: {report}, model {} items",
                        self.items().len()
                    ));
                }
            }
        }
        if self.mode == Mode::Safe {
            self.durable = (self.head, self.history.len());
        }
    }

    /// Opens the closed queue again; a clean close leaves nothing to mend
    /// and makes everything durable.
    fn reopen(&mut self, options: Options) {
        let q = RawQueue::open_with(self.dir(), &options)
            .unwrap_or_else(|e| self.fail(&format!("reopen: {e}")));
        let report = q.open_report();
        if !report.is_clean() || !report.deleted_segments.is_empty() {
            self.fail(&format!("reopen after close is not clean: {report:?}"));
        }
        self.options = options.durability(self.mode.durability());
        self.q = q;
        self.durable = (self.head, self.history.len());
    }

    /// Moves to a new directory holding `files`, opens the queue there and
    /// drops the old handle; returns the open's report.
    fn move_to(&mut self, files: Vec<(String, Vec<u8>)>) -> dque::OpenReport {
        let root = scratch_dir();
        let dir = root.path().join("q");
        fs::create_dir(&dir).expect("make the new queue directory");
        // Names are relative paths: `dead/...` and `quarantine/...` too.
        write_files(&dir, &files);
        let old_root = std::mem::replace(&mut self.root, root);
        // The files written count as durable for the new plan.
        #[cfg(feature = "fault-injection")]
        let plan = dque::faults::FaultPlan::install(self.dir());
        #[cfg(feature = "fault-injection")]
        let old_plan = std::mem::replace(&mut self.plan, plan);
        let options = self.options.durability(self.mode.durability());
        let q = RawQueue::open_with(self.dir(), &options)
            .unwrap_or_else(|e| self.fail(&format!("open after a crash: {e}")));
        let report = q.open_report().clone();
        drop(std::mem::replace(&mut self.q, q));
        #[cfg(feature = "fault-injection")]
        drop(old_plan);
        drop(old_root);
        self.durable = (self.head, self.history.len());
        report
    }

    /// What a killed process leaves: every file as the page cache has it.
    /// The copy must open without repairs, holding every item, having
    /// deleted at most the consumed head.
    fn kill(&mut self) {
        // Every file, those in subdirectories (`dead/`, `quarantine/`) too,
        // by its path relative to the queue directory; the lock aside.
        let files: Vec<(String, Vec<u8>)> = snapshot(&self.dir())
            .into_iter()
            .filter_map(|(path, bytes)| Some((path.to_str()?.to_string(), bytes?)))
            .filter(|(name, _)| name != LOCK_FILE)
            .collect();
        let head_before = *self.segment_numbers().start();
        let report = self.move_to(files);
        if !report.is_clean() {
            self.fail(&format!("open after kill mended something: {report:?}"));
        }
        let head_after = *self.segment_numbers().start();
        let expected: Vec<PathBuf> = (head_before..head_after)
            .map(|n| self.dir().join(segment_name(n)))
            .collect();
        if report.deleted_segments != expected {
            self.fail(&format!(
                "open after kill deleted {:?}, expected {expected:?}",
                report.deleted_segments
            ));
        }
    }

    /// A simulated power loss: continue on a crash image (the files as a
    /// power cut now may leave them). It must open, holding a window of the
    /// items in order: it starts between the first item not durably
    /// dequeued and the first not dequeued, and ends between the end of
    /// the durable enqueues and the end of all. Without the
    /// `fault-injection` feature there are no crash images: a kill.
    fn power_loss(&mut self, seed: u8) {
        #[cfg(feature = "fault-injection")]
        {
            let (durable_head, durable_end) = self.durable;
            let image = self
                .plan
                .crash_image((u64::from(seed) << 32) | self.step as u64);
            self.move_to(image.files.into_iter().collect());
            let got = self
                .q
                .dequeue_batch(usize::MAX)
                .unwrap_or_else(|e| self.fail(&format!("read the crash image: {e}")));
            let first = (durable_head..=self.head).find(|&first| {
                let end = first + got.len();
                (durable_end..=self.history.len()).contains(&end)
                    && self.history[first..end] == got[..]
            });
            let Some(first) = first else {
                self.fail(&format!(
                    "after a power loss the queue holds {} items that are no window of the \
                     history starting in {durable_head}..={} and ending in {durable_end}..={}",
                    got.len(),
                    self.head,
                    self.history.len()
                ));
            };
            // Put them back, durably, and go on from what survived.
            self.q
                .enqueue_batch(&got)
                .and_then(|()| self.q.sync())
                .unwrap_or_else(|e| self.fail(&format!("enqueue after a power loss: {e}")));
            self.history.truncate(first + got.len());
            self.head = first;
            self.durable = (self.head, self.history.len());
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            let _ = seed;
            self.kill();
        }
    }

    fn segment_numbers(&self) -> std::ops::RangeInclusive<u64> {
        self.q
            .segment_numbers()
            .unwrap_or_else(|e| self.fail(&format!("segment_numbers: {e}")))
    }

    fn check(&self, op: &Op) {
        let items = self.items().len();
        if self.q.len() != items || self.q.is_empty() != (items == 0) {
            self.fail(&format!(
                "after {op:?}: len() {} but model {items}",
                self.q.len()
            ));
        }
        let mode = self.q.durability().expect("durability");
        assert_eq!(mode, self.mode.durability(), "durability");
        let listing = list_dir(&self.dir());
        let numbers: Vec<u64> = listing.segments.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u64> = self.segment_numbers().collect();
        if numbers != expected || !listing.temp.is_empty() {
            self.fail(&format!(
                "after {op:?}: segment files {numbers:?} and temp files {:?}, expected {expected:?} and none",
                listing.temp
            ));
        }
        // Each segment after the head holds at least one item; only the head
        // may be fully consumed (see `apply` for when it must be gone).
        if numbers.len() > items + 1 {
            self.fail(&format!(
                "after {op:?}: {} segments for {items} items",
                numbers.len()
            ));
        }
    }

    /// The head segment's number if every record in it is settled and a
    /// segment follows it: a consumed head, which the queue retires.
    fn consumed_head(&self) -> Option<u64> {
        let listing = list_dir(&self.dir());
        let [(number, head), _, ..] = listing.segments.as_slice() else {
            return None;
        };
        let bytes = read_prefix(head, SEGMENT_READ);
        let HeaderVerdict::Valid(header) = judge_header(&bytes, *number) else {
            self.fail("the head's header does not read");
        };
        (replay(&bytes, header.max_records).unsettled_count() == 0).then_some(*number)
    }

    /// Runs `read` (a call that must not write) and checks that it added,
    /// removed or resized no file.
    fn reads_only<R>(&mut self, what: &str, read: impl FnOnce(&mut Self) -> R) -> R {
        let before = file_sizes(&self.dir());
        let result = read(self);
        let after = file_sizes(&self.dir());
        if before != after {
            self.fail(&format!(
                "{what} changed the files (reads never write): {before:?} -> {after:?}"
            ));
        }
        result
    }
}

/// Bytes of a segment the `ops` target reads to replay it: more than its
/// frames can take (at most 8 records of at most `MAX_ITEM` bytes, and
/// their markers).
const SEGMENT_READ: u64 = 64 << 10;

/// The first `most` bytes of the file at `path`, read in one allocation of
/// at most `most` bytes (this runs after every step).
fn read_prefix(path: &Path, most: u64) -> Vec<u8> {
    use std::io::Read;
    let read = |mut file: fs::File| {
        let len = file.metadata()?.len().min(most);
        let mut bytes = vec![0; len as usize];
        file.read_exact(&mut bytes)?;
        Ok::<_, std::io::Error>(bytes)
    };
    fs::File::open(path)
        .and_then(read)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
