#![no_main]
//! `QueueFiles` and `repair()` on the `open` target's input; see
//! `dque_fuzz::checks::check_repair`. Allocations are counted here so that
//! the check can bound what reading the files allocates at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dque_fuzz::checks::{repair_files, Allocations};

/// The system allocator, noting the largest request of each thread.
struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: a thread being torn down has no slot, and must not panic here.
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: every call is passed on unchanged to `System`; `note` neither
// allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ALLOCATIONS: Allocations = Allocations {
    reset: || LARGEST.with(|largest| largest.set(0)),
    largest: || LARGEST.with(Cell::get),
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| repair_files(data, Some(&ALLOCATIONS)));
