//! Power loss around the dead letters: an item is in the queue or in the
//! dead letters, never in neither, in every durability mode; and `sync()`
//! makes the dead letters durable too.
//!
//! Bug pinned (issue 11, bug 4): in Turbo and Periodic, a consumer failed
//! items into the dead letters, acked the rest and called `sync()` (or
//! waited for the flusher); a power loss then lost every failed item (525
//! of 525), because `sync()` and the flusher never synced `dead/`, and the
//! letter was synced before its marker only in Safe mode. kill -9 cannot
//! see this class of bug (the page cache survives it): these tests take
//! crash images, the files as a power loss leaves them (what was fsynced,
//! plus any sector-wise mix of what was not), through the fault seam.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use dque::faults::{CrashImage, FaultPlan};
use dque::{DQue, Durability, Options};

const MODES: [Durability; 3] = [
    Durability::Safe,
    Durability::Turbo,
    Durability::Periodic(Duration::from_millis(5)),
];

fn options(durability: Durability) -> Options {
    Options::new().durability(durability).segment_items(8)
}

/// Items in the queue and items in the dead letters of a crash image.
fn reopen(image: &CrashImage, at: &Path) -> (BTreeSet<u32>, BTreeSet<u32>) {
    image.write_to(at).unwrap();
    let found = {
        let q: DQue<u32> = DQue::open_with(at, &options(Durability::Turbo))
            .unwrap_or_else(|e| panic!("a crash image does not open: {e}"));
        let queued = q.pending(usize::MAX).unwrap().into_iter().map(|p| p.item);
        let dead = q.dead_letters().unwrap().into_iter();
        let dead = dead.map(|letter| letter.item::<u32, dque::Bincode>().unwrap());
        (queued.collect(), dead.collect())
    };
    std::fs::remove_dir_all(at).unwrap();
    found
}

// After fail/ack and sync(), a power loss keeps every failed item in the
// dead letters and every acked item gone, in every mode.
#[test]
fn synced_dead_letters_survive_power_loss() {
    for durability in MODES {
        for seed in 0..10u64 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let q: DQue<u32> = DQue::create_with(&path, &options(durability)).unwrap();
            q.enqueue_batch((0..20).collect::<Vec<_>>()).unwrap();
            q.sync().unwrap();
            let plan = FaultPlan::install(&path);
            let mut failed = BTreeSet::new();
            while let Some(job) = q.lease().unwrap() {
                if *job.item() % 3 == 0 {
                    failed.insert(*job.item());
                    job.fail("divisible by three").unwrap();
                } else {
                    job.ack().unwrap();
                }
            }
            q.sync().unwrap();
            let image = plan.crash_image(seed);
            let (queued, dead) = reopen(&image, &dir.path().join("image"));
            assert!(
                queued.is_empty(),
                "{durability:?}: acked or failed items came back: {queued:?}"
            );
            assert_eq!(
                dead, failed,
                "{durability:?}: dead letters lost after sync()"
            );
        }
    }
}

// sync() covers every file a call wrote: a purge of the dead letters (its
// markers are in `dead/` only) stays done after a power loss.
#[test]
fn a_synced_purge_survives_power_loss() {
    for durability in MODES {
        for seed in 0..10u64 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let q: DQue<u32> = DQue::create_with(&path, &options(durability)).unwrap();
            q.enqueue_batch([1, 2, 3]).unwrap();
            while let Some(job) = q.lease().unwrap() {
                job.fail("all of them").unwrap();
            }
            q.sync().unwrap();
            let plan = FaultPlan::install(&path);
            assert_eq!(q.purge_dead().unwrap(), 3);
            q.sync().unwrap();
            let (queued, dead) = reopen(&plan.crash_image(seed), &dir.path().join("image"));
            assert!(
                queued.is_empty() && dead.is_empty(),
                "{durability:?}: purged letters came back: {dead:?}"
            );
        }
    }
}

// A power loss at any moment (before every sync step of a run that fails,
// acks and requeues) leaves every item in the queue or in the dead letters,
// unless its ack had been called: never lost in between.
#[test]
fn no_item_is_ever_in_neither_place() {
    for durability in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let q: DQue<u32> = DQue::create_with(&path, &options(durability)).unwrap();
        let all: Vec<u32> = (0..16).collect();
        q.enqueue_batch(&all).unwrap();
        q.sync().unwrap();
        let plan = FaultPlan::install(&path);
        plan.capture_before_syncs(0xDEAD);
        // Each image with the items whose ack had been called by then (an
        // ack in flight may or may not have reached the disk).
        let mut images: Vec<(CrashImage, BTreeSet<u32>)> = Vec::new();
        let mut acks_called = BTreeSet::new();
        let mut collect = |acks_called: &BTreeSet<u32>| {
            for image in plan.take_captured() {
                images.push((image, acks_called.clone()));
            }
        };
        while let Some(job) = q.lease().unwrap() {
            let item = *job.item();
            collect(&acks_called);
            if item % 2 == 0 {
                job.fail("even").unwrap();
            } else {
                acks_called.insert(item);
                job.ack().unwrap();
            }
            collect(&acks_called);
        }
        for letter in q.dead_letters().unwrap().iter().take(3) {
            q.requeue_dead(letter.id).unwrap();
            collect(&acks_called);
        }
        q.sync().unwrap();
        collect(&acks_called);
        drop(q);
        drop(plan);
        assert!(
            images.len() >= 16,
            "{durability:?}: only {} crash images",
            images.len()
        );
        for (i, (image, acks_called)) in images.iter().enumerate() {
            let (queued, dead) = reopen(image, &dir.path().join("image"));
            let lost: Vec<u32> = all
                .iter()
                .copied()
                .filter(|item| !queued.contains(item) && !dead.contains(item))
                .filter(|item| !acks_called.contains(item))
                .collect();
            assert!(
                lost.is_empty(),
                "{durability:?}, image {i}: in neither place: {lost:?}"
            );
        }
    }
}
