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

/// Items per second of `n` calls of `op`: by the wall clock, or with
/// `DQUE_BENCH_CLOCK=cpu` by the CPU time of this process (all its
/// threads; not the time spent waiting for a core on a busy machine, nor
/// for a disk: for Turbo, not Safe).
pub fn rate(n: usize, mut op: impl FnMut(usize)) -> f64 {
    let cpu_start = cpu_clock().then(cpu_seconds);
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    let seconds = match cpu_start {
        Some(cpu_start) => cpu_seconds() - cpu_start,
        None => start.elapsed().as_secs_f64(),
    };
    n as f64 / seconds
}

/// Whether rates count CPU time (`DQUE_BENCH_CLOCK=cpu`).
pub fn cpu_clock() -> bool {
    std::env::var("DQUE_BENCH_CLOCK").is_ok_and(|clock| clock == "cpu")
}

/// CPU seconds of this process so far (all its threads).
pub fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
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
