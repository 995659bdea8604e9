#![no_main]
//! Operation sequences against a model, across reopens, kills and power
//! losses; see `dque_fuzz::checks::ops`.

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

libfuzzer_sys::fuzz_target!(|data: &[u8]| dque_fuzz::checks::ops(data));
