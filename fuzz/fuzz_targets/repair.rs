#![no_main]
//! `QueueFiles` and `repair()` on the `open` target's input; see
//! `dque_fuzz::checks::check_repair`. Allocations are counted here so that
//! the check can bound what reading the files allocates at once.

use dque_fuzz::checks::repair_files;
use dque_fuzz::counting::{Counting, ALLOCATIONS};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// AddressSanitizer's defaults for this target (`ASAN_OPTIONS` overrides
/// them). Its 256 MB quarantine recycles freed memory only within a size
/// class, and each check reads whole segment files of many sizes, as does
/// dque's fault seam (see FORMAT.md, "Fuzzing"): every size class then
/// keeps its own share of the quarantine, and the peak RSS grows toward
/// libFuzzer's 2048 MB limit (over 1 GB after 3,000 `ops` inputs), which
/// stops a run with default flags. A 16 MB quarantine, given back to the
/// system, keeps it under 250 MB.
#[no_mangle]
pub extern "C" fn __asan_default_options() -> *const std::os::raw::c_char {
    c"quarantine_size_mb=16:allocator_release_to_os_interval_ms=500".as_ptr()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| repair_files(data, Some(&ALLOCATIONS)));
