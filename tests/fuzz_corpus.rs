//! The fuzz targets' saved corpus (`fuzz/corpus/open`, `fuzz/corpus/repair`,
//! `fuzz/corpus/ops`),
//! run on stable through the very checks the fuzzers run
//! (`fuzz/src/checks/`), so every input a fuzzer once found interesting,
//! and every bug reproducer kept there, stays a test. A failure names the
//! corpus file; `cargo fuzz run <target> <file>` replays it under the fuzzer.
//!
//! No single allocation may exceed [`ALLOCATION_LIMIT`] (fuzzed lengths must
//! never size an allocation): a counting allocator checks it per thread. The
//! `repair` check also asks it (`counting::ALLOCATIONS`) for the largest allocation
//! of reading the files with `QueueFiles`, which it bounds by their sizes.

#[path = "../fuzz/src/checks/mod.rs"]
mod checks;
#[path = "../fuzz/src/counting.rs"]
mod counting;

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

/// Largest single allocation a corpus input may cause.
const ALLOCATION_LIMIT: usize = 64 << 20;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// Runs `check` on `data`; the panic message, or the allocation over the limit.
fn run(check: &dyn Fn(&[u8]), data: &[u8]) -> Result<(), String> {
    counting::reset_largest();
    let result = panic::catch_unwind(panic::AssertUnwindSafe(|| check(data)));
    let largest = counting::largest();
    match result {
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())),
        Ok(()) if largest > ALLOCATION_LIMIT => Err(format!(
            "allocated {largest} bytes at once (limit {ALLOCATION_LIMIT})"
        )),
        Ok(()) => Ok(()),
    }
}

/// Every file of `fuzz/corpus/<target>`, sorted.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    files
}

/// Runs `check` on every file of `fuzz/corpus/<dir>` for each of `dirs`.
fn run_corpus(dirs: &[&str], check: &dyn Fn(&[u8])) {
    let mut failures = Vec::new();
    let files: Vec<(&str, PathBuf)> = dirs
        .iter()
        .flat_map(|&dir| corpus(dir).into_iter().map(move |file| (dir, file)))
        .collect();
    for (dir, file) in &files {
        let data = fs::read(file).expect("read a corpus file");
        if let Err(why) = run(check, &data) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            failures.push(format!("fuzz/corpus/{dir}/{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

// Guarantee: every saved input of the `open` target (queue directories of
// valid, torn, damaged and hostile files) opens as FORMAT.md predicts or
// fails with the predicted clear error, never panics, and reopens clean.
#[test]
fn open_corpus() {
    run_corpus(&["open"], &checks::open_files);
}

// Guarantee: on every saved input of the `repair` target, and of the `open`
// target (the same format: queue directories, with gaps and quarantine/
// too; the repair fuzzer starts from both), QueueFiles reads without
// writing or panicking, with allocations bounded by the file sizes; a dry
// run changes nothing; repair() refuses changing nothing, or leaves a queue
// that opens clean, verifies healthy and delivers every record that was
// whole and reachable before (and nothing else), destroys no bytes, touches
// nothing outside the queue directory, and a second repair changes nothing;
// with `fault-injection`, a repair stopped at any sync is finished by the
// next.
#[test]
fn repair_corpus() {
    run_corpus(&["repair", "open"], &|data| {
        checks::repair_files(data, Some(&counting::ALLOCATIONS))
    });
}

// Guarantee: every saved operation sequence of the `ops` target (enqueue,
// dequeue, peek, reopen with other sizes, durability, sync, kill) agrees
// with a VecDeque after every step.
#[test]
fn ops_corpus() {
    run_corpus(&["ops"], &checks::ops);
}

// Guarantee: the seeds made from real queues give the outcome each is made
// for (so the corpus reaches the open, repair and damage paths), and the
// committed corpus holds every seed as the generator makes it today.
#[test]
fn seeds_give_their_outcomes_and_are_in_the_corpus() {
    let mut failures = Vec::new();
    for seed in checks::seeds() {
        let name = format!("{}/{}", seed.target, seed.name);
        let committed = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(&name);
        if fs::read(&committed).ok().as_ref() != Some(&seed.data) {
            failures.push(format!(
                "{name}: not in fuzz/corpus as generated; run `cargo run --bin seeds` in fuzz/"
            ));
        }
        let result = match (seed.target, &seed.outcome) {
            ("open", Some(expected)) => run(
                &|data| {
                    let outcome = checks::check_open(data);
                    assert!(
                        checks::same_outcome(&outcome, expected),
                        "gave {outcome:?}, expected {expected:?}"
                    );
                },
                &seed.data,
            ),
            ("open", None) => run(&checks::open_files, &seed.data),
            ("repair", _) => run(
                &|data| {
                    let outcome = checks::check_repair(data, Some(&counting::ALLOCATIONS));
                    if let Some(expected) = &seed.repaired {
                        assert!(
                            checks::same_repair_outcome(&outcome, expected),
                            "gave {outcome:?}, expected {expected:?}"
                        );
                    }
                },
                &seed.data,
            ),
            _ => run(&checks::ops, &seed.data),
        };
        if let Err(why) = result {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
