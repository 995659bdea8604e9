//! A typed queue records the item type (and schema version) it was created
//! for, and an open as another type is refused (issue 23, item 3: a
//! `DQue<u32>` opened as `DQue<u64>` decoded garbage without complaint).

use dque::{Bincode, DQue, Error, Options, RawQueue};

// Pins: an open with another item type decoded the records as that type
// silently; it must fail with ItemTypeMismatch naming both types and
// saying what to do, and write nothing.
#[test]
fn an_open_as_another_type_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = DQue::create(&path).unwrap();
    q.enqueue(&7).unwrap();
    q.close().unwrap();
    let before = std::fs::read(path.join("dque.conf")).unwrap();

    let err = DQue::<u64>::open(&path).unwrap_err();
    let text = err.to_string();
    match &err {
        Error::ItemTypeMismatch { stored, opened, .. } => {
            assert_eq!((&**stored, *opened), ("u32", "u64"));
        }
        other => panic!("expected ItemTypeMismatch, got {other:?}"),
    }
    assert!(
        text.contains("u32") && text.contains("u64") && text.contains("check_item_type(false)"),
        "{text}"
    );
    // Every kind of typed open checks, a string as much as a number.
    assert!(matches!(
        DQue::<String>::open_or_create(&path),
        Err(Error::ItemTypeMismatch { .. })
    ));
    assert_eq!(std::fs::read(path.join("dque.conf")).unwrap(), before);

    // The type it was made for opens it; so does an opt-out, which
    // leaves the record as it was.
    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.peek().unwrap(), Some(7));
    drop(q);
    let q: DQue<u64> = Options::new().check_item_type(false).open(&path).unwrap();
    drop(q);
    assert_eq!(std::fs::read(path.join("dque.conf")).unwrap(), before);
}

// Pins: the schema version is recorded with the type; another one is refused.
#[test]
fn another_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    drop(
        Options::new()
            .schema_version(1)
            .create::<String, Bincode>(&path)
            .unwrap(),
    );
    for other in [Options::new().schema_version(2), Options::new()] {
        let err = other.open::<String, Bincode>(&path).unwrap_err();
        let refused = matches!(
            &err,
            Error::ItemTypeMismatch {
                stored_schema: Some(1),
                ..
            }
        );
        assert!(refused, "{err:?}");
        assert!(err.to_string().contains("schema 1"), "{err}");
    }
    drop(
        Options::new()
            .schema_version(1)
            .open::<String, Bincode>(&path)
            .unwrap(),
    );
}

// Pins: raw handles (the dque command, tools moving records) are never
// refused, and a raw queue records no type.
#[test]
fn raw_handles_are_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<(u8, String)> = DQue::create(&path).unwrap();
    q.enqueue(&(1, "a".into())).unwrap();
    drop(q);
    let raw = RawQueue::open_encoded_with(&path, &Options::new()).unwrap();
    assert_eq!(raw.len(), 1);
    drop(raw);

    let raw_path = dir.path().join("raw");
    drop(RawQueue::create(&raw_path).unwrap());
    let conf = std::fs::read(raw_path.join("dque.conf")).unwrap();
    assert_eq!(conf.len(), 28, "a raw queue stores nothing new: version 1");
    assert_eq!(&conf[4..8], &1u32.to_le_bytes());
}

// Pins: a queue made before types were recorded (a version-1 config)
// opens with any type, and an open writes nothing into its config.
#[test]
fn an_old_queue_opens_as_before_and_is_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<u32> = DQue::create(&path).unwrap();
    q.enqueue(&5).unwrap();
    drop(q);
    // The config as version 1 wrote it: 28 bytes, codec 1 (bincode).
    let mut old = Vec::new();
    old.extend_from_slice(b"DQCF");
    for field in [1u32, 100_000, 64 << 20, 1, 0] {
        old.extend_from_slice(&field.to_le_bytes());
    }
    let crc = crc32(&old);
    old.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(path.join("dque.conf"), &old).unwrap();

    let q: DQue<u32> = DQue::open(&path).unwrap();
    assert_eq!(q.dequeue().unwrap(), Some(5));
    assert_eq!(q.max_attempts(), 5);
    drop(q);
    drop(DQue::<i32>::open(&path).unwrap());
    assert_eq!(std::fs::read(path.join("dque.conf")).unwrap(), old);
}

// Pins: the dque command opens a typed queue (its records as bytes).
#[test]
fn the_dque_command_reads_a_typed_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let q: DQue<String> = Options::new().schema_version(3).create(&path).unwrap();
    q.enqueue(&"hello".to_string()).unwrap();
    drop(q);
    for args in [&["stats"][..], &["peek"], &["pop", "--encoded"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dque"))
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "dque {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let q: DQue<String> = Options::new().schema_version(3).open(&path).unwrap();
    assert!(q.is_empty(), "dque pop took the item");
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
