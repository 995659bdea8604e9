//! Model test: random operation sequences applied to a queue and to a
//! `VecDeque`, compared after every step, across reopens with other segment
//! sizes and durability switches. After every step the segment files on disk
//! are checked too: exactly the files `segment_numbers()` names, and no more
//! of them than the items they hold can explain (consumed segments go away).

use std::collections::VecDeque;
use std::fmt::Debug;
use std::path::Path;
use std::time::Duration;

use dque::{Codec, DQue, Durability, Error, Options, Raw};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde::{Deserialize, Serialize};

/// Defaults of a new queue (see `Options::segment_items` / `segment_bytes`).
const DEFAULT_SEGMENT_ITEMS: u32 = 100_000;
const DEFAULT_SEGMENT_BYTES: u32 = 64 << 20;
/// Bytes a record frame adds to its payload (head word and CRC).
const RECORD_OVERHEAD: u32 = 8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Job {
    id: u32,
    name: String,
}

/// Segment sizes passed at an open; `None` keeps what the queue has stored.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    items: Option<u32>,
    bytes: Option<u32>,
}

#[derive(Debug, Clone)]
enum Op<T> {
    Enqueue(T),
    Dequeue,
    /// `dequeue_timeout(0)`: must behave exactly like `dequeue`.
    DequeueNow,
    Peek,
    /// `peek_timeout(0)`: must behave exactly like `peek`.
    PeekNow,
    /// Close (or drop) the handle and open the queue again with these sizes.
    Reopen {
        sizes: Sizes,
        by_drop: bool,
    },
    SetDurability(Durability),
    Sync,
    EnqueueBatch(Vec<T>),
    DequeueBatch(usize),
}

/// The queue's effective segment limits, as the model tracks them.
#[derive(Debug, Clone, Copy)]
struct Limits {
    items: u32,
    bytes: u32,
}

impl Limits {
    fn apply(self, sizes: Sizes) -> Limits {
        Limits {
            items: sizes.items.unwrap_or(self.items),
            bytes: sizes.bytes.unwrap_or(self.bytes),
        }
    }

    /// Fewest records a segment created under these limits holds once a
    /// successor exists (it rolled over because the next frame, at most
    /// `max_frame` bytes, did not fit, or it reached its record limit).
    fn min_full(self, max_frame: u32) -> u64 {
        let by_bytes = (self.bytes.saturating_sub(max_frame) / max_frame).max(1);
        u64::from(self.items.min(by_bytes))
    }
}

/// Shared mode too (issue 12): one handle alone must behave the same.
fn options(durability: Durability, sizes: Sizes, shared: bool) -> Options {
    let mut options = Options::new().durability(durability).shared(shared);
    if let Some(items) = sizes.items {
        options = options.segment_items(items);
    }
    if let Some(bytes) = sizes.bytes {
        options = options.segment_bytes(bytes);
    }
    options
}

/// Segment numbers of the `.seg` files in `dir`, ascending; fails on leftovers.
fn segment_files(dir: &Path) -> Result<Vec<u64>, TestCaseError> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        prop_assert!(!name.ends_with(".tmp"), "temporary file left: {}", name);
        if let Some(stem) = name.strip_suffix(".seg") {
            prop_assert_eq!(stem.len(), 20, "segment name not zero-padded: {}", name);
            numbers.push(stem.parse::<u64>()?);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Checks the queue's answers that do not change it, and its files.
///
/// `retired` is true after a call that retires a fully consumed head (a
/// dequeue that found nothing, open): then the head holds an item or is
/// the tail. `min_full` is the fewest records any sealed segment can hold.
fn check_state<T, C: Codec<T>>(
    q: &DQue<T, C>,
    model: &VecDeque<T>,
    dir: &Path,
    retired: bool,
    min_full: u64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(q.len(), model.len());
    prop_assert_eq!(q.is_empty(), model.is_empty());
    let range = q.segment_numbers()?;
    let files = segment_files(dir)?;
    prop_assert_eq!(
        &files,
        &range.clone().collect::<Vec<_>>(),
        "files on disk differ from segment_numbers() {:?}",
        range
    );
    let files = files.len() as u64;
    let len = model.len() as u64;
    if files >= 2 {
        // Segments between head and tail are sealed (full) and untouched by
        // dequeues; the tail holds at least one item; the head, once retired
        // where it should be, holds one too.
        let least = (files - 2) * min_full + 1 + u64::from(retired);
        prop_assert!(
            len >= least,
            "{} segment files for {} items (at least {} items expected): \
             consumed segments were not deleted",
            files,
            len,
            least
        );
    }
    Ok(())
}

fn run<T, C>(
    dir: &Path,
    create: Sizes,
    durability: Durability,
    shared: bool,
    ops: &[Op<T>],
    max_payload: u32,
) -> Result<(), TestCaseError>
where
    T: Clone + PartialEq + Debug,
    C: Codec<T>,
{
    let path = dir.join("q");
    // Frames are padded to a multiple of 4 bytes.
    let max_frame = (max_payload + RECORD_OVERHEAD).next_multiple_of(4);
    let mut limits = Limits {
        items: DEFAULT_SEGMENT_ITEMS,
        bytes: DEFAULT_SEGMENT_BYTES,
    }
    .apply(create);
    let mut min_full = limits.min_full(max_frame);
    let mut durability = durability;
    let mut model: VecDeque<T> = VecDeque::new();
    let mut q = DQue::<T, C>::create_with(&path, &options(durability, create, shared))?;
    check_state(&q, &model, &path, true, min_full)?;

    for (step, op) in ops.iter().enumerate() {
        let mut retired = false;
        match op {
            Op::Enqueue(item) => {
                q.enqueue(item)?;
                model.push_back(item.clone());
            }
            Op::Dequeue | Op::DequeueNow => {
                let got = match op {
                    Op::Dequeue => q.dequeue()?,
                    _ => q.dequeue_timeout(Duration::ZERO)?,
                };
                let want = model.pop_front();
                retired = want.is_none();
                prop_assert_eq!(got, want, "step {}: {:?}", step, op);
            }
            Op::Peek | Op::PeekNow => {
                let got = match op {
                    Op::Peek => q.peek()?,
                    _ => q.peek_timeout(Duration::ZERO)?,
                };
                // A read: it retires nothing (reads never write).
                prop_assert_eq!(got.as_ref(), model.front(), "step {}: {:?}", step, op);
            }
            Op::Reopen { sizes, by_drop } => {
                if *by_drop {
                    drop(q);
                } else {
                    q.close()?;
                    let after = q.dequeue();
                    let closed = matches!(after, Err(Error::Closed));
                    prop_assert!(closed, "dequeue after close: {:?}", after);
                    prop_assert_eq!(q.len(), 0);
                    drop(q);
                }
                q = DQue::<T, C>::open_with(&path, &options(durability, *sizes, shared))?;
                prop_assert!(
                    q.open_report().is_clean(),
                    "open after a clean close mended something: {:?}",
                    q.open_report()
                );
                prop_assert_eq!(q.durability()?, durability);
                limits = limits.apply(*sizes);
                min_full = min_full.min(limits.min_full(max_frame));
                retired = true;
            }
            Op::SetDurability(d) => {
                q.set_durability(*d)?;
                durability = *d;
                prop_assert_eq!(q.durability()?, durability);
            }
            Op::Sync => q.sync()?,
            Op::EnqueueBatch(items) => {
                q.enqueue_batch(items)?;
                model.extend(items.iter().cloned());
            }
            Op::DequeueBatch(max) => {
                let got = q.dequeue_batch(*max)?;
                let want: Vec<T> = (0..*max).map_while(|_| model.pop_front()).collect();
                // A batch that came up short ended with an empty pop, which retires.
                retired = want.len() < *max;
                prop_assert_eq!(got, want, "step {}: {:?}", step, op);
            }
        }
        check_state(&q, &model, &path, retired, min_full)?;
    }

    // Everything left comes out in order, and then one segment remains.
    while let Some(want) = model.pop_front() {
        prop_assert_eq!(q.dequeue()?, Some(want));
    }
    prop_assert_eq!(q.dequeue()?, None);
    check_state(&q, &model, &path, true, min_full)?;
    prop_assert_eq!(segment_files(&path)?.len(), 1);
    q.close()?;
    Ok(())
}

fn durability() -> impl Strategy<Value = Durability> {
    // Mostly Turbo: Safe syncs every call and makes the test slow.
    prop_oneof![
        1 => Just(Durability::Safe),
        4 => Just(Durability::Turbo),
        1 => Just(Durability::Periodic(Duration::from_millis(1))),
    ]
}

fn ops<T: Clone + Debug>(
    item: impl Strategy<Value = T> + 'static,
    sizes: impl Strategy<Value = Sizes> + 'static,
    max_len: usize,
) -> impl Strategy<Value = Vec<Op<T>>> {
    let item = item.boxed();
    let op = prop_oneof![
        10 => item.clone().prop_map(Op::Enqueue),
        6 => Just(Op::Dequeue),
        1 => Just(Op::DequeueNow),
        2 => Just(Op::Peek),
        1 => Just(Op::PeekNow),
        1 => (sizes, any::<bool>()).prop_map(|(sizes, by_drop)| Op::Reopen { sizes, by_drop }),
        1 => durability().prop_map(Op::SetDurability),
        1 => Just(Op::Sync),
        2 => proptest::collection::vec(item.clone(), 0..8).prop_map(Op::EnqueueBatch),
        2 => (0usize..10).prop_map(Op::DequeueBatch),
    ];
    proptest::collection::vec(op, 0..=max_len)
}

fn job() -> impl Strategy<Value = Job> {
    (any::<u32>(), "[a-z0-9 ]{0,24}").prop_map(|(id, name)| Job { id, name })
}

/// Sizes for the typed test: tiny item limits, so segments roll over often.
fn item_sizes() -> impl Strategy<Value = Sizes> {
    proptest::option::of(1u32..=5).prop_map(|items| Sizes { items, bytes: None })
}

/// Sizes for the raw test: 4 KiB segments holding a handful of items, with
/// an item limit now and then.
fn byte_sizes() -> impl Strategy<Value = Sizes> {
    (
        proptest::option::weighted(0.2, 2u32..=8),
        proptest::option::of(prop_oneof![Just(4096u32), Just(8192)]),
    )
        .prop_map(|(items, bytes)| Sizes { items, bytes })
}

const MAX_RAW_PAYLOAD: u32 = 600;
/// Bincode of a `Job`: varint id (at most 5 bytes), varint length, ASCII name.
const MAX_JOB_PAYLOAD: u32 = 5 + 1 + 24;

// Case counts are kept modest: every roll-over and every deleted segment
// costs a few fsyncs, even in Turbo mode.
proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn typed_queue_matches_vecdeque_with_tiny_item_segments(
        items in 1u32..=5,
        durability in durability(),
        shared in any::<bool>(),
        ops in ops(job(), item_sizes(), 200),
    ) {
        let dir = tempfile::tempdir()?;
        let create = Sizes { items: Some(items), bytes: None };
        run::<Job, dque::Bincode>(dir.path(), create, durability, shared, &ops, MAX_JOB_PAYLOAD)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn raw_queue_matches_vecdeque_with_4k_byte_segments(
        durability in durability(),
        shared in any::<bool>(),
        ops in ops(
            proptest::collection::vec(any::<u8>(), 0..=MAX_RAW_PAYLOAD as usize),
            byte_sizes(),
            200,
        ),
    ) {
        let dir = tempfile::tempdir()?;
        let create = Sizes { items: None, bytes: Some(4096) };
        run::<Vec<u8>, Raw>(dir.path(), create, durability, shared, &ops, MAX_RAW_PAYLOAD)?;
    }
}

const MAX_LARGE_PAYLOAD: u32 = 48 << 10;

/// A payload of `len` bytes filled from `seed` (cheap to generate and shrink).
fn large_payload() -> impl Strategy<Value = Vec<u8>> {
    (0..=MAX_LARGE_PAYLOAD as usize, any::<u64>()).prop_map(|(len, mut seed)| {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    })
}

/// Sizes for large items: segments of tens of items and megabytes, so a
/// segment's file grows past its first size (and is mapped again) before
/// it rolls over.
fn large_sizes() -> impl Strategy<Value = Sizes> {
    (
        proptest::option::of(30u32..=80),
        proptest::option::weighted(0.3, prop_oneof![Just(2u32 << 20), Just(3 << 20)]),
    )
        .prop_map(|(items, bytes)| Sizes { items, bytes })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn raw_queue_matches_vecdeque_with_segments_that_grow(
        durability in durability(),
        shared in any::<bool>(),
        ops in ops(large_payload(), large_sizes(), 150),
    ) {
        let dir = tempfile::tempdir()?;
        let create = Sizes { items: Some(60), bytes: None };
        run::<Vec<u8>, Raw>(dir.path(), create, durability, shared, &ops, MAX_LARGE_PAYLOAD)?;
    }
}

/// The file check must see a leaked segment: consume a whole non-tail
/// segment, dequeue again (which retires it first), and the file must be
/// gone. A peek retires nothing: reads never write.
#[test]
fn consumed_head_segment_is_deleted_by_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = Options::new()
        .durability(Durability::Turbo)
        .segment_items(2)
        .create(&path)
        .unwrap();
    for i in 0..5 {
        q.enqueue(&i).unwrap();
    }
    assert_eq!(q.segment_numbers().unwrap(), 1..=3);
    assert_eq!(q.dequeue().unwrap(), Some(0));
    assert_eq!(q.dequeue().unwrap(), Some(1));
    assert_eq!(q.peek().unwrap(), Some(2));
    assert_eq!(segment_files(&path).unwrap(), vec![1, 2, 3], "a peek wrote");
    assert_eq!(q.dequeue().unwrap(), Some(2));
    assert_eq!(q.segment_numbers().unwrap(), 2..=3);
    assert_eq!(segment_files(&path).unwrap(), vec![2, 3]);
    assert_eq!(q.dequeue().unwrap(), Some(3));
    assert_eq!(q.dequeue().unwrap(), Some(4));
    assert_eq!(q.dequeue().unwrap(), None);
    assert_eq!(q.segment_numbers().unwrap(), 3..=3);
    assert_eq!(segment_files(&path).unwrap(), vec![3]);
}
