//! `max_attempts` and `visibility_timeout` are stored with the queue, so
//! every handle agrees (issue 23, item 7: in shared mode two processes
//! with different settings disagreed about when an item is dead).

use std::time::Duration;

use dque::{Bincode, DQue, Error, Options};

// Pins: a shared handle that set no max_attempts used the default (5)
// while another used 1: its nack handed back an item the other would
// have dead-lettered. Now it uses the stored value.
#[test]
fn a_joining_handle_uses_the_stored_max_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = Options::new().shared(true);
    let first: DQue<u32> = shared.max_attempts(1).create(&path).unwrap();
    let second: DQue<u32> = shared.open(&path).unwrap();
    assert_eq!(second.max_attempts(), 1);
    first.enqueue(&9).unwrap();
    second.lease().unwrap().expect("an item").nack().unwrap();
    assert!(first.is_empty(), "one attempt was all it had");
    assert_eq!(first.dead_letters().unwrap().len(), 1);
}

// Pins: a joining handle asking for other settings is refused (naming
// both values), not left to disagree; alone, a new value is stored.
#[test]
fn other_settings_beside_others_are_refused_and_stored_when_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = Options::new().shared(true);
    let first: DQue<u32> = shared
        .max_attempts(2)
        .visibility_timeout(Duration::from_secs(9))
        .create(&path)
        .unwrap();
    for (options, name) in [
        (shared.max_attempts(3), "max_attempts"),
        (
            shared.visibility_timeout(Duration::from_secs(1)),
            "visibility_timeout",
        ),
    ] {
        match options.open::<u32, Bincode>(&path) {
            Err(Error::InvalidOption { name: got, reason }) => {
                assert_eq!(got, name);
                assert!(reason.contains("shared mode"), "{reason}");
            }
            other => panic!("expected InvalidOption, got {other:?}"),
        }
    }
    // The same values join.
    let same: DQue<u32> = shared
        .max_attempts(2)
        .visibility_timeout(Duration::from_secs(9))
        .open(&path)
        .unwrap();
    drop((first, same));
    let alone: DQue<u32> = Options::new().max_attempts(4).open(&path).unwrap();
    assert_eq!(alone.max_attempts(), 4);
    assert_eq!(alone.visibility_timeout(), Duration::from_secs(9));
    drop(alone);
    let later: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(later.max_attempts(), 4);
}

// Pins: a joining handle's leases last the stored visibility timeout,
// not its own default of 30 s.
#[test]
fn a_joining_handle_uses_the_stored_visibility_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let shared = Options::new().shared(true);
    let first: DQue<u32> = shared
        .visibility_timeout(Duration::from_millis(50))
        .create(&path)
        .unwrap();
    let second: DQue<u32> = shared.open(&path).unwrap();
    first.enqueue(&1).unwrap();
    let held = second.lease().unwrap().expect("an item");
    let again = first
        .lease_timeout(Duration::from_secs(20))
        .unwrap()
        .expect("the lease ran out after the stored 50 ms");
    assert_eq!((*again, again.attempt()), (1, 2));
    drop(held);
}
