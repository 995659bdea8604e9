//! Shared mode and power loss (issue 12): crash images (the files as a
//! power loss leaves them: what was fsynced, plus any sector-wise mix of
//! what was not) taken through the fault seam while two handles share the
//! queue. Every enqueue and dequeue a Safe handle returned is in the image,
//! whichever handle's fsync made it durable; `sync()` in one handle makes
//! every handle's writes so far durable.

use std::collections::BTreeSet;
use std::path::Path;

use dque::faults::{CrashImage, FaultPlan};
use dque::{DQue, Durability, Options};

fn shared(durability: Durability) -> Options {
    Options::new()
        .shared(true)
        .durability(durability)
        .segment_items(5)
}

/// The items of a crash image, opened alone in exclusive mode.
fn items_in(image: &CrashImage, at: &Path) -> BTreeSet<u32> {
    image.write_to(at).unwrap();
    let items = {
        let q: DQue<u32> = Options::new()
            .open(at)
            .unwrap_or_else(|e| panic!("a crash image does not open: {e}"));
        q.pending(usize::MAX)
            .unwrap()
            .into_iter()
            .map(|p| p.item)
            .collect()
    };
    std::fs::remove_dir_all(at).unwrap();
    items
}

#[test]
fn every_returned_safe_call_of_either_handle_survives_power_loss() {
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let a: DQue<u32> = shared(Durability::Safe).create(&path).unwrap();
        let b: DQue<u32> = shared(Durability::Safe).open(&path).unwrap();
        let plan = FaultPlan::install(&path);
        let mut expected = BTreeSet::new();
        for i in 0..24u32 {
            let (producer, consumer) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            producer.enqueue(&i).unwrap();
            expected.insert(i);
            if i % 3 == 2 {
                let taken = consumer.dequeue().unwrap().unwrap();
                expected.remove(&taken);
            }
            let image = plan.crash_image(seed * 100 + u64::from(i));
            let found = items_in(&image, &dir.path().join("image"));
            assert_eq!(found, expected, "seed {seed}, after step {i}");
        }
    }
}

#[test]
fn sync_in_one_handle_makes_every_handles_writes_durable() {
    for seed in 0..4u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let a: DQue<u32> = shared(Durability::Turbo).create(&path).unwrap();
        let b: DQue<u32> = shared(Durability::Turbo).open(&path).unwrap();
        let plan = FaultPlan::install(&path);
        b.enqueue_batch(0..12u32).unwrap();
        assert_eq!(a.dequeue_batch(3).unwrap(), vec![0, 1, 2]);
        a.sync().unwrap();
        let image = plan.crash_image(seed);
        let found = items_in(&image, &dir.path().join("image"));
        assert_eq!(found, (3..12).collect(), "seed {seed}");
    }
}
