#![no_main]
//! `QueueFiles` and `repair()` on the `open` target's input; see
//! `dque_fuzz::checks::check_repair`. Allocations are counted here so that
//! the check can bound what reading the files allocates at once.

use dque_fuzz::checks::repair_files;
use dque_fuzz::counting::{Counting, ALLOCATIONS};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| repair_files(data, Some(&ALLOCATIONS)));
