//! How writes reach a segment: frames of a batch are copied into the tail
//! together (through the mapping, or with `pwrite(2)` from 64 KiB on), and
//! each Safe write has the blocks ahead of it written with zeros before it
//! reaches them (`src/log/zeroing.rs`). Neither may ever touch a byte
//! already written: whatever the sizes (across pages, across the zeroed
//! stretches, larger than one), the mix of records and markers, batches
//! that fill a segment and spill into the next, a durability switched
//! midway or several handles on one queue, every item comes back whole
//! and in order, and the files verify.

mod rng;

use std::collections::VecDeque;

use dque::{Durability, Options, RawQueue};
use rng::Rng;

/// Sizes that straddle pages (4 KiB) and the stretch written ahead (256 KiB).
const SIZES: [usize; 9] = [
    1, 100, 4_079, 4_096, 4_097, 65_536, 131_000, 262_144, 300_001,
];

/// An item whose every byte says which item it is and where in it it sits.
fn item(serial: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (serial.wrapping_mul(31) as usize ^ i.wrapping_mul(7)) as u8)
        .collect()
}

fn next_item(rng: &mut Rng, serial: &mut u64) -> Vec<u8> {
    *serial += 1;
    let len = SIZES[rng.below(SIZES.len() as u64) as usize];
    item(*serial, len)
}

/// Random singles, batches and dequeues on `queues` (taken in turn), checked
/// against a model; returns the model of what is left.
fn run(queues: &[RawQueue], seed: u64, steps: usize) -> VecDeque<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut model = VecDeque::new();
    let mut serial = 0;
    for step in 0..steps {
        let q = &queues[step % queues.len()];
        match rng.below(10) {
            0..=3 => {
                let bytes = next_item(&mut rng, &mut serial);
                q.enqueue_bytes(&bytes).unwrap();
                model.push_back(bytes);
            }
            4..=6 => {
                let n = 1 + rng.below(12) as usize;
                let batch: Vec<Vec<u8>> =
                    (0..n).map(|_| next_item(&mut rng, &mut serial)).collect();
                q.enqueue_batch(&batch).unwrap();
                model.extend(batch);
            }
            7 | 8 => {
                let n = 1 + rng.below(30) as usize;
                let got = q.dequeue_batch(n).unwrap();
                let want: Vec<Vec<u8>> = model.drain(..n.min(model.len())).collect();
                assert!(got == want, "step {step}: a batch dequeue differs");
            }
            _ => {
                let got = q.dequeue().unwrap();
                assert!(got == model.pop_front(), "step {step}: a dequeue differs");
            }
        }
        assert_eq!(q.len(), model.len(), "step {step}");
    }
    model
}

fn drain_and_compare(q: &RawQueue, mut model: VecDeque<Vec<u8>>) {
    let report = q.verify().unwrap();
    assert!(report.is_healthy(), "{report}");
    while let Some(got) = q.dequeue().unwrap() {
        let want = model.pop_front().expect("no more items than were left");
        assert!(got == want, "an item came back changed after reopening");
    }
    assert!(
        model.is_empty(),
        "{} items missing after reopening",
        model.len()
    );
}

/// Small segments, so batches spill over and markers land in sealed ones.
fn options(durability: Durability) -> Options {
    Options::new()
        .durability(durability)
        .segment_items(50)
        .segment_bytes(2 << 20)
}

#[test]
fn safe_items_of_every_size_come_back_whole_after_reopening() {
    for seed in 1..=2 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q: RawQueue = options(Durability::Safe).create(&path).unwrap();
        let model = run(std::slice::from_ref(&q), seed, 200);
        q.close().unwrap();
        let q: RawQueue = options(Durability::Safe).open(&path).unwrap();
        drain_and_compare(&q, model);
    }
}

#[test]
fn a_queue_written_turbo_then_safe_keeps_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: RawQueue = options(Durability::Turbo).create(&path).unwrap();
    let mut model = run(std::slice::from_ref(&q), 7, 150);
    q.set_durability(Durability::Safe).unwrap();
    let mut rng = Rng::new(9);
    let mut serial = 1_000_000; // beyond the first run's serials
    for _ in 0..60 {
        let bytes = next_item(&mut rng, &mut serial);
        q.enqueue_bytes(&bytes).unwrap();
        model.push_back(bytes);
        if rng.below(3) == 0 {
            assert!(q.dequeue().unwrap() == model.pop_front());
        }
    }
    q.close().unwrap();
    let q: RawQueue = options(Durability::Safe).open(&path).unwrap();
    drain_and_compare(&q, model);
}

#[test]
fn safe_handles_sharing_a_queue_keep_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = options(Durability::Safe).shared(true);
    let a: RawQueue = shared.create(&path).unwrap();
    let b: RawQueue = shared.open(&path).unwrap();
    let model = run(&[a, b], 11, 300);
    let q: RawQueue = shared.open(&path).unwrap();
    drain_and_compare(&q, model);
}
