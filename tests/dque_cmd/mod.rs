//! Running the `dque` binary from a test: its output, or its stdout once
//! it succeeded.
#![allow(dead_code)] // each test binary uses the parts it needs

use std::process::{Command, Output, Stdio};

/// Runs `dque args` with an empty stdin.
pub fn dque(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dque"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dque")
}

/// Runs `dque args`, which must succeed; its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = dque(args);
    assert!(
        out.status.success(),
        "dque {args:?}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 stdout")
}
