//! Quick throughput figures for 100-byte items: Safe and Turbo, enqueue and
//! dequeue, beside a plain write + fdatasync loop on the same disk.
//!
//! `cargo bench --bench throughput` (temporary queue under the system temp
//! dir), or `DQUE_BENCH_DIR=/mnt/disk cargo bench --bench throughput` to
//! measure another disk. `DQUE_BENCH_TURBO_ITEMS` / `DQUE_BENCH_SAFE_ITEMS`
//! set the item counts.

use std::fs::File;
use std::io::Write;
use std::time::Instant;

use dque::{Durability, Options, RawQueue};

const PAYLOAD: [u8; 100] = [0xAB; 100];

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rate(label: &str, items: usize, start: Instant) {
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{label:<32} {items:>9} items {:>10.0} items/s {:>8.2} us/item",
        items as f64 / secs,
        secs * 1e6 / items as f64
    );
}

fn run(durability: Durability, items: usize, base: &std::path::Path) {
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    let queue: RawQueue =
        RawQueue::create_with(dir.path().join("q"), &Options::new().durability(durability))
            .expect("create");
    let start = Instant::now();
    for _ in 0..items {
        queue.enqueue_bytes(&PAYLOAD).expect("enqueue");
    }
    rate(&format!("dque {durability:?} enqueue"), items, start);
    let start = Instant::now();
    for _ in 0..items {
        queue.dequeue().expect("dequeue").expect("an item");
    }
    rate(&format!("dque {durability:?} dequeue"), items, start);
}

fn write_fdatasync(items: usize, base: &std::path::Path) {
    let dir = tempfile::tempdir_in(base).expect("temp dir");
    let mut file = File::create(dir.path().join("plain")).expect("file");
    let start = Instant::now();
    for _ in 0..items {
        file.write_all(&PAYLOAD).expect("write");
        file.sync_data().expect("fdatasync");
    }
    rate("plain write + fdatasync", items, start);
}

fn main() {
    // `cargo test --benches` passes --bench-less args; run only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let base = std::env::var_os("DQUE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    println!("items of {} bytes, under {}", PAYLOAD.len(), base.display());
    let safe = count("DQUE_BENCH_SAFE_ITEMS", 20_000);
    write_fdatasync(safe, &base);
    run(Durability::Safe, safe, &base);
    run(
        Durability::Turbo,
        count("DQUE_BENCH_TURBO_ITEMS", 2_000_000),
        &base,
    );
}
