//! Failing disks and simulated power loss, through the `fault-injection`
//! seam: the Nth write or sync fails, or the files are cut to a crash image
//! (what was fsynced, plus any sector-wise mix of what was not).
//!
//! Runs with `cargo test --all-features` (CI does).

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::path::Path;

use dque::faults::{CrashImage, FaultOp, FaultPlan};
use dque::{DQue, Durability, Error, Options};

fn options(durability: Durability) -> Options {
    // Small segments: rollovers and deletions happen every few calls.
    Options::new()
        .durability(durability)
        .segment_items(4)
        .max_item_bytes(1 << 20)
}

/// Payload of item `n`: its number, padded so items vary in size.
fn item(n: u64) -> Vec<u8> {
    let mut bytes = n.to_le_bytes().to_vec();
    bytes.resize(8 + (n as usize * 37) % 300, n as u8);
    bytes
}

fn number(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// The numbers in the queue at `path`, drained from a fresh open.
fn contents(path: &Path) -> Result<Vec<u64>, Error> {
    let queue: DQue<Vec<u8>> = DQue::open(path)?;
    let mut numbers = Vec::new();
    while let Some(bytes) = queue.dequeue()? {
        numbers.push(number(&bytes));
    }
    Ok(numbers)
}

fn reopen_image(image: &CrashImage, at: &Path) -> Result<Vec<u64>, Error> {
    image.write_to(at).unwrap();
    let result = contents(at);
    std::fs::remove_dir_all(at).unwrap();
    result
}

/// A fixed script: mostly enqueues, some dequeues.
fn script_step(step: u64) -> bool {
    step % 3 != 2
}

/// Runs the script until a call fails; returns the model of acknowledged
/// calls and the error of the failing call with whether it was an enqueue.
fn run_until_failure(
    queue: &DQue<Vec<u8>>,
    steps: u64,
) -> (VecDeque<u64>, Option<(Error, Option<u64>)>) {
    let mut model = VecDeque::new();
    let mut next = 0;
    for step in 0..steps {
        if script_step(step) {
            match queue.enqueue(&item(next)) {
                Ok(()) => model.push_back(next),
                Err(e) => return (model, Some((e, Some(next)))),
            }
            next += 1;
        } else {
            match queue.dequeue() {
                Ok(got) => assert_eq!(got.map(|b| number(&b)), model.pop_front()),
                Err(e) => return (model, Some((e, None))),
            }
        }
    }
    (model, None)
}

// Guarantee: a failed write (including "no space" when a segment grows or a
// new one is made) returns the error, writes no half frame, and loses no
// acknowledged call: the reopened queue holds exactly what was acknowledged.
#[test]
fn failed_write_returns_the_error_and_loses_nothing() {
    for n in 1..=40 {
        for durability in [Durability::Safe, Durability::Turbo] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(durability)).unwrap();
            let plan = FaultPlan::install(&path);
            plan.fail_nth(FaultOp::Write, n, ErrorKind::StorageFull);
            let (model, failure) = run_until_failure(&queue, 60);
            let (error, _) = failure.unwrap_or_else(|| panic!("write {n} never failed"));
            match &error {
                Error::Io { source, .. } => assert_eq!(source.kind(), ErrorKind::StorageFull),
                other => panic!("write {n}: expected the injected I/O error, got {other}"),
            }
            drop(queue);
            drop(plan);
            assert_eq!(
                contents(&path).unwrap(),
                Vec::from(model),
                "write {n} ({durability:?}): reopened queue differs from the acknowledged calls"
            );
        }
    }
}

// Guarantee: after a write that failed before touching the file (no space
// to grow a segment), the same handle keeps working once space is back.
#[test]
fn queue_keeps_working_after_a_failed_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(Durability::Safe)).unwrap();
    let plan = FaultPlan::install(&path);
    queue.enqueue(&item(0)).unwrap();
    // The next write step is the copy of the record into the mapping.
    plan.fail_nth(FaultOp::Write, 1, ErrorKind::StorageFull);
    assert!(queue.enqueue(&item(1)).is_err());
    assert_eq!(queue.len(), 1);
    queue.enqueue(&item(2)).unwrap();
    assert_eq!(queue.dequeue().unwrap().map(|b| number(&b)), Some(0));
    drop(queue);
    drop(plan);
    assert_eq!(contents(&path).unwrap(), vec![2]);
}

// Guarantee: a failed fsync returns the error, and the handle refuses every
// later write (it cannot know what reached the disk) until reopened; the
// reopened queue holds every acknowledged call, and the failed call either
// took effect or did not.
#[test]
fn failed_sync_refuses_later_writes_until_reopen() {
    for n in 1..=30 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(Durability::Safe)).unwrap();
        let plan = FaultPlan::install(&path);
        plan.fail_nth(FaultOp::Sync, n, ErrorKind::Other);
        let (model, failure) = run_until_failure(&queue, 60);
        let (error, enqueued) = failure.unwrap_or_else(|| panic!("sync {n} never failed"));
        let matched = matches!(error, Error::Io { .. });
        assert!(
            matched,
            "sync {n}: expected the injected I/O error, got {error}"
        );
        let refused = queue.enqueue(&item(999)).unwrap_err();
        let matched = matches!(refused, Error::WritesRefused { .. });
        assert!(
            matched,
            "sync {n}: a write after a failed sync must be refused, got {refused}"
        );
        // Issue 11, bug 7: the refusal keeps the failure as its source, down
        // to the operating system's error (kind and errno).
        let cause = std::error::Error::source(&refused).expect("a source");
        let os = cause
            .downcast_ref::<Error>()
            .and_then(|e| std::error::Error::source(e))
            .and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(
            os.map(|e| e.kind()),
            Some(ErrorKind::Other),
            "sync {n}: {cause}"
        );
        assert!(matches!(queue.dequeue(), Err(Error::WritesRefused { .. })));
        drop(queue);
        drop(plan);

        let after = contents(&path).unwrap();
        let without: Vec<u64> = model.iter().copied().collect();
        let mut with = without.clone();
        match enqueued {
            Some(n) => with.push(n),
            None => {
                with.remove(0);
            }
        }
        assert!(
            after == without || after == with,
            "sync {n}: reopened {after:?}, acknowledged {without:?}"
        );
    }
}

// Guarantee (Safe): a power loss in the middle of any call keeps every call
// acknowledged before it, and the interrupted call either happened whole or
// not at all; the queue always reopens.
#[test]
fn safe_crash_images_keep_every_acknowledged_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(Durability::Safe)).unwrap();
    let plan = FaultPlan::install(&path);
    plan.capture_before_syncs(0xC0FFEE);
    let mut model: VecDeque<u64> = VecDeque::new();
    let mut next = 0;
    let (mut images, mut lost_in_flight) = (0, 0);
    for step in 0..90u64 {
        let before: Vec<u64> = model.iter().copied().collect();
        if script_step(step) || step % 7 == 0 {
            queue.enqueue(&item(next)).unwrap();
            model.push_back(next);
            next += 1;
        } else {
            let got = queue.dequeue().unwrap().map(|b| number(&b));
            assert_eq!(got, model.pop_front());
        }
        let after: Vec<u64> = model.iter().copied().collect();
        for (i, image) in plan.take_captured().iter().enumerate() {
            let reopened = reopen_image(image, &dir.path().join("image"))
                .unwrap_or_else(|e| panic!("step {step} image {i} does not open: {e}"));
            assert!(
                reopened == before || reopened == after,
                "step {step} image {i}: {reopened:?} is neither {before:?} nor {after:?}"
            );
            images += 1;
            lost_in_flight += usize::from(reopened != after);
        }
    }
    assert!(images >= 90, "only {images} crash images were taken");
    // Both outcomes of an interrupted call must show up, or the images test nothing.
    assert!(
        lost_in_flight > 0 && lost_in_flight < images,
        "{lost_in_flight} of {images} images lost the call in flight"
    );
}

// Guarantee (Turbo): after a power loss the queue reopens holding a window
// of the items in order: a prefix of the enqueues survives (at least those
// before the last sync) and a prefix of the dequeues (likewise); nothing is
// duplicated or reordered.
#[test]
fn turbo_crash_images_keep_a_prefix_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(Durability::Turbo)).unwrap();
    let plan = FaultPlan::install(&path);
    let (mut enqueued, mut dequeued) = (0u64, 0u64);
    let (mut synced_enqueued, mut synced_dequeued) = (0u64, 0u64);
    let mut rng = 0x9E3779B97F4A7C15u64;
    let (mut images, mut lost_enqueues, mut redelivered) = (0, 0, 0);
    for step in 0..300u64 {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
        match (rng >> 33) % 10 {
            0..=5 => {
                queue.enqueue(&item(enqueued)).unwrap();
                enqueued += 1;
            }
            6..=8 => {
                if let Some(bytes) = queue.dequeue().unwrap() {
                    assert_eq!(number(&bytes), dequeued);
                    dequeued += 1;
                }
            }
            _ => {
                queue.sync().unwrap();
                (synced_enqueued, synced_dequeued) = (enqueued, dequeued);
            }
        }
        if step % 3 != 0 {
            continue;
        }
        let image = plan.crash_image(rng);
        let reopened = reopen_image(&image, &dir.path().join("image"))
            .unwrap_or_else(|e| panic!("step {step}: crash image does not open: {e}"));
        let first = reopened.first().copied().unwrap_or(enqueued.min(dequeued));
        let end = first + reopened.len() as u64;
        assert_eq!(
            reopened,
            (first..end).collect::<Vec<_>>(),
            "step {step}: items lost in the middle, duplicated or reordered"
        );
        if !reopened.is_empty() {
            assert!(
                (synced_dequeued..=dequeued).contains(&first),
                "step {step}: first item {first}, dequeues acknowledged {dequeued}, synced {synced_dequeued}"
            );
        }
        assert!(
            (synced_enqueued..=enqueued).contains(&end) || reopened.is_empty(),
            "step {step}: items end at {end}, enqueues acknowledged {enqueued}, synced {synced_enqueued}"
        );
        assert!(
            reopened.len() as u64 >= synced_enqueued.saturating_sub(dequeued),
            "step {step}: synced items are missing"
        );
        images += 1;
        lost_enqueues += usize::from(end < enqueued && !reopened.is_empty());
        redelivered += usize::from(first < dequeued && !reopened.is_empty());
    }
    // Power loss in turbo must really lose recent calls in some images.
    assert!(
        lost_enqueues > 0 && redelivered > 0,
        "of {images} images, {lost_enqueues} lost enqueues and {redelivered} redelivered"
    );
}

/// Ids pending in the queue at `path` after a reopen.
fn pending_ids(image: &CrashImage, at: &Path) -> Vec<u64> {
    image.write_to(at).unwrap();
    let ids = {
        let queue: DQue<Vec<u8>> = DQue::open(at).unwrap();
        queue
            .pending(usize::MAX)
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect()
    };
    std::fs::remove_dir_all(at).unwrap();
    ids
}

// Guarantee (Safe): a power loss in the middle of a lease or an ack keeps
// every ack acknowledged before it, and the interrupted ack either happened
// or not; a lease changes nothing that survives but its attempt count.
#[test]
fn safe_crash_images_keep_every_acknowledged_ack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue: DQue<Vec<u8>> = DQue::create_with(&path, &options(Durability::Safe)).unwrap();
    queue
        .enqueue_batch((0..24).map(item).collect::<Vec<_>>())
        .unwrap();
    let plan = FaultPlan::install(&path);
    plan.capture_before_syncs(0xACC);
    let mut pending: Vec<u64> = (0..24).collect();
    let (mut images, mut lost_in_flight) = (0, 0);
    let image_dir = dir.path().join("image");
    while let Some(first) = queue.lease().unwrap() {
        for image in plan.take_captured() {
            assert_eq!(
                pending_ids(&image, &image_dir),
                pending,
                "a lease changed the items"
            );
            images += 1;
        }
        let second = queue.lease().unwrap();
        plan.take_captured();
        // Acks out of order: the second lease first.
        for guard in second.into_iter().chain([first]) {
            let id = guard.id();
            let before = pending.clone();
            guard.ack().unwrap();
            pending.retain(|&p| p != id);
            for image in plan.take_captured() {
                let reopened = pending_ids(&image, &image_dir);
                assert!(
                    reopened == before || reopened == pending,
                    "ack of {id}: {reopened:?} is neither {before:?} nor {pending:?}"
                );
                images += 1;
                lost_in_flight += usize::from(reopened == before);
            }
        }
    }
    assert!(pending.is_empty());
    assert!(images >= 24, "only {images} crash images");
    assert!(
        lost_in_flight > 0,
        "no image lost the ack in flight: the images test nothing"
    );
}

/// How a run of Turbo or Periodic writes ends up synced: each way a
/// segment file is fsynced while its writer (and so its fault-ins) runs.
#[derive(Debug, Clone, Copy)]
enum SyncedBy {
    /// Rollovers: each full segment is sealed with an fsync.
    Seals,
    /// `sync()` after every few items (group commit).
    Syncs,
    /// The Periodic flusher, while writes go on.
    Flusher,
    /// `close()` right after the last write.
    Close,
    /// Two shared-mode handles, each calling `sync()` (shared group commit).
    SharedCommits,
}

/// Writes `items` items of 100 bytes in Turbo (or Periodic for the
/// flusher) into segments of `segment_items`, synced as `by` says, then
/// closes the queue once `plan` saw a fault-in begin.
fn write_and_sync(plan: &FaultPlan, path: &Path, by: SyncedBy, items: u64, segment_items: u32) {
    let durability = match by {
        SyncedBy::Flusher => Durability::Periodic(std::time::Duration::from_millis(1)),
        _ => Durability::Turbo,
    };
    let options = Options::new()
        .durability(durability)
        .segment_items(segment_items)
        .shared(matches!(by, SyncedBy::SharedCommits));
    let queue = DQue::<Vec<u8>>::open_with(path, &options).unwrap();
    let other = matches!(by, SyncedBy::SharedCommits)
        .then(|| DQue::<Vec<u8>>::open_with(path, &options).unwrap());
    for n in 0..items {
        let mut bytes = n.to_le_bytes().to_vec();
        bytes.resize(100, 7);
        let handle = match &other {
            Some(other) if n % 2 == 1 => other,
            _ => &queue,
        };
        handle.enqueue(&bytes).unwrap();
        if matches!(by, SyncedBy::Syncs | SyncedBy::SharedCommits) && n % 50 == 49 {
            handle.sync().unwrap();
        }
    }
    drop(other);
    // So that the close's sync meets the last one (or one ran at all).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while plan.background_touches() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    queue.close().unwrap();
}

// Issue 23: a sealed Turbo segment lost its last page on power loss, and
// did not without the thread that faults pages in ahead of the writer, or
// with the seal's fsync holding it off: it could touch the segment's
// mapping while the fsync ran. The seam slows every
// fault-in down, so that one is in flight at nearly every sync unless the
// sync waits for it and holds the next off, and reports every sync that a
// fault-in of the same file overlapped: none may, whichever path syncs.
#[test]
fn no_background_fault_in_touches_a_file_while_it_is_synced() {
    let rounds = std::env::var("DQUE_FAULT_IN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64);
    let cases = [
        (SyncedBy::Seals, 400, 16),
        (SyncedBy::Syncs, 600, 4_000),
        (SyncedBy::Flusher, 600, 4_000),
        (SyncedBy::Close, 300, 4_000),
        (SyncedBy::SharedCommits, 600, 4_000),
    ];
    let mut overlapped = Vec::new();
    for round in 0..rounds {
        for (by, items, segment_items) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("q");
            DQue::<Vec<u8>>::create(&path).unwrap().close().unwrap();
            let plan = FaultPlan::install(&path);
            plan.delay_fault_ins(std::time::Duration::from_millis(20));
            plan.delay_syncs(std::time::Duration::from_millis(1));
            write_and_sync(&plan, &path, by, items, segment_items);
            assert!(
                plan.background_touches() > 0,
                "{by:?}: no fault-in ran, so nothing was checked"
            );
            let files = plan.touched_while_syncing();
            if !files.is_empty() {
                overlapped.push(format!("{by:?}, round {round}: {files:?}"));
            }
            drop(plan);
            assert_eq!(contents(&path).unwrap().len() as u64, items, "{by:?}");
        }
    }
    assert!(
        overlapped.is_empty(),
        "fault-ins ran during syncs of these files: {overlapped:#?}"
    );
}
