//! Any `Duration` a caller passes works: huge ones saturate (as std's
//! `recv_timeout(Duration::MAX)` does) instead of overflowing an `Instant`.
//!
//! Bug pinned (issue 11, bug 2): `dequeue_timeout(Duration::MAX)` panicked
//! on `Instant + Duration` overflow even with an item ready, and so did
//! `peek_timeout`, `lease_timeout`, and a `visibility_timeout` of
//! `Duration::MAX`, which passed validation and panicked in `lease()` after
//! the lease marker was on disk.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dque::{DQue, Options};
use proptest::prelude::*;

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::MAX),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::from_nanos(1)),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..10_000u64).prop_map(Duration::from_millis),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_timeout_call_takes_any_duration(timeout in durations()) {
        let dir = tempfile::tempdir().unwrap();
        // At least an hour, so the lease surely holds while the test looks.
        let visibility = timeout.max(Duration::from_secs(3600));
        let options = Options::new().visibility_timeout(visibility);
        let q: DQue<u32> = DQue::create_with(dir.path().join("q"), &options).unwrap();
        q.enqueue_batch([1, 2, 3, 4]).unwrap();
        prop_assert_eq!(q.peek_timeout(timeout).unwrap(), Some(1));
        prop_assert_eq!(q.dequeue_timeout(timeout).unwrap(), Some(1));
        let leased = q.lease_timeout(timeout).unwrap().expect("an item is ready");
        prop_assert_eq!(*leased.item(), 2);
        leased.touch().unwrap();
        prop_assert_eq!(q.leased_len(), 1);
        leased.ack().unwrap();
        // A lease of any length is held: no one else gets the item.
        let held = q.lease().unwrap().expect("an item");
        prop_assert_eq!(*held.item(), 3);
        prop_assert_eq!(q.lease().unwrap().map(|l| *l.item()), Some(4));
        prop_assert_eq!(q.len(), 2);
        held.nack().unwrap();
        prop_assert_eq!(q.dequeue().unwrap(), Some(3));
    }

    #[test]
    fn any_visibility_timeout_leases_without_a_panic(timeout in durations()) {
        let dir = tempfile::tempdir().unwrap();
        let options = Options::new().visibility_timeout(timeout);
        let q: DQue<u32> = DQue::create_with(dir.path().join("q"), &options).unwrap();
        q.enqueue(&1).unwrap();
        let leased = q.lease().unwrap().expect("an item is ready");
        // A lease of a nanosecond may be gone already: LeaseLost, no effect.
        let touched = leased.touch();
        let acked = leased.ack();
        match acked {
            Ok(()) => prop_assert!(q.is_empty()),
            Err(dque::Error::LeaseLost { .. }) => prop_assert_eq!(q.len(), 1),
            Err(e) => prop_assert!(false, "ack failed: {e} (touch: {touched:?})"),
        }
    }
}

// A waiter with no end (Duration::MAX) still wakes for an item, also while
// a lease of Duration::MAX is held (its expiry is a wake-up far away).
#[test]
fn endless_waits_still_wake_for_an_item() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().visibility_timeout(Duration::MAX);
    let q: Arc<DQue<u32>> = Arc::new(DQue::create_with(dir.path().join("q"), &options).unwrap());
    q.enqueue(&7).unwrap();
    let held = q.lease().unwrap().expect("an item");
    let waiter = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.dequeue_timeout(Duration::MAX))
    };
    thread::sleep(Duration::from_millis(50));
    q.enqueue(&8).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), Some(8));
    held.ack().unwrap();
}
