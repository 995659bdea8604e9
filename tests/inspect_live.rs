//! `QueueFiles` beside a queue in use: what the `dque` command's read-only
//! subcommands promise while a program writes, consumes and retires
//! segments under them.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use dque::{Durability, Options, QueueFiles, RawQueue};

// Pins: without the lock, verify must not call a healthy queue damaged
// because a record was half copied at the tail or a head segment was
// retired during the scan; stats and visit_records must not fail either,
// and every record they see must be one the program wrote, in order.
#[test]
fn read_only_views_of_a_busy_queue_see_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = Arc::new(
        RawQueue::create_with(
            &path,
            &Options::new()
                .segment_items(50)
                .durability(Durability::Turbo),
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (queue, stop, written) = (Arc::clone(&queue), Arc::clone(&stop), Arc::clone(&written));
        thread::spawn(move || {
            let mut next = 0u64;
            let enqueue = |queue: &RawQueue, next: &mut u64| {
                // Payloads of many sizes, so that copies cross pages.
                let len = 8 + (*next % 97) as usize * 13;
                let mut item = next.to_le_bytes().to_vec();
                item.resize(len, (*next % 251) as u8);
                queue.enqueue_bytes(&item).unwrap();
                *next += 1;
            };
            // A backlog of a few segments, which then stays as long.
            for _ in 0..200 {
                enqueue(&queue, &mut next);
            }
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..30 {
                    enqueue(&queue, &mut next);
                }
                for _ in 0..30 {
                    queue.dequeue().unwrap();
                }
                written.store(next, Ordering::Relaxed);
            }
        })
    };

    let files = QueueFiles::open(&path).unwrap();
    assert!(!files.holds_lock());
    let mut scans = 0;
    let mut seen_records = 0u64;
    // Enough scans, and enough churn under them: the writer has rolled over
    // and retired segments many times while they ran.
    while scans < 100 || written.load(Ordering::Relaxed) < 10_000 {
        let report = files.verify(|_, _| {}).unwrap();
        assert!(report.is_healthy(), "scan {scans}: {report}");
        files.stats().unwrap();
        let mut last_id = None;
        files
            .visit_records(|record| {
                let number = u64::from_le_bytes(record.payload[..8].try_into().unwrap());
                assert_eq!(number, record.id, "payload of id {}", record.id);
                assert!(last_id.is_none_or(|last| record.id > last), "out of order");
                last_id = Some(record.id);
                seen_records += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(seen_records > 0);
    let len = queue.len() as u64;
    drop(queue);
    // Once closed, the locked view is exact.
    let files = QueueFiles::open_locked(&path).unwrap();
    assert_eq!(files.stats().unwrap().items, len);
    assert!(files.verify(|_, _| {}).unwrap().is_healthy());
}
