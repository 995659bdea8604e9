//! What a test does when a part it needs (a server, a client) is missing:
//! under `CI=true` it fails; elsewhere it says why in one line and skips.
//!
//! The line goes to the process's stderr itself, not through `eprintln!`:
//! the test harness captures what the print macros write (and shows it only
//! for a failed test), so `cargo test` would report "41 passed" with no
//! word that nothing ran. It is said once per test binary and reason.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

/// `None`, after saying `why` (or failing under `CI=true`).
pub fn missing<T>(why: &str) -> Option<T> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and {why}"
    );
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = SAID
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(why.to_owned());
    if first {
        let line = format!(
            "\nskipped: {binary}: {why}; the tests that need it pass without running \
             (under CI=true they fail)\n",
            binary = test_binary(),
        );
        // Straight to file descriptor 2, past the harness's capture.
        drop(std::io::stderr().lock().write_all(line.as_bytes()));
    }
    None
}

/// The name of this test binary (`jobs_redis` of `jobs_redis-0123abcd`).
fn test_binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
        _ => stem,
    }
}
