#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| dque_fuzz::checks::ops(data));
