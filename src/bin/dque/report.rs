//! Formatting shared by the `dque bench` command (`bench.rs` beside this
//! file) and `benches/throughput.rs`, which includes this file by
//! `#[path]`: keep it self-contained (std only, nothing from the binary).

use std::path::Path;

/// A rate in items (or bytes) per second, scaled to k or M.
pub fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A duration in nanoseconds, scaled to µs or ms.
pub fn nanos(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// The file system type of the mount holding `path`, from /proc/self/mounts.
pub fn filesystem_of(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, mount, fs) = (fields.next()?, fields.next()?, fields.next()?);
            let mount = mount.replace("\\040", " ");
            path.starts_with(&mount)
                .then(|| (mount.len(), format!("{fs} on {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown file system".into(), |(_, fs)| fs)
}
