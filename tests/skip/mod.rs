//! What a test does when a part it needs (a server, a client) is missing:
//! under `CI=true` it fails; elsewhere it says why in one line and skips.

/// `None`, after saying `why` (or failing under `CI=true`).
pub fn missing<T>(why: &str) -> Option<T> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and {why}"
    );
    eprintln!("skipped: {why}");
    None
}
