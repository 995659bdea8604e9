//! Helpers the benches share (included by `#[path]` from each bench).
#![allow(dead_code)] // each bench uses the parts it needs

use std::time::Instant;

/// The value of environment variable `var`, or `default`.
pub fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A temporary directory on the disk measured (`DQUE_BENCH_DIR`, default
/// the system temp dir).
pub fn tempdir() -> tempfile::TempDir {
    match std::env::var_os("DQUE_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

/// Items per second of `n` calls of `op`.
pub fn rate(n: usize, mut op: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}
