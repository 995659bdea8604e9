//! A global allocator that notes the largest request of each thread, so
//! that a check can bound what a fuzzed input makes dque allocate at once.
//! Used by the `repair` target and by dque's `tests/fuzz_corpus.rs`, each
//! of which installs it with `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::checks::Allocations;

/// The system allocator, noting the largest request of each thread.
pub struct Counting;

thread_local! {
    /// The largest since [`reset_largest`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    /// The largest since the check last reset it (see [`ALLOCATIONS`]).
    static LARGEST_IN_PHASE: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: a thread being torn down has no slot, and must not panic here.
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
    let _ = LARGEST_IN_PHASE.try_with(|largest| largest.set(largest.get().max(size)));
}

/// Starts counting this thread's largest allocation again.
pub fn reset_largest() {
    LARGEST.with(|largest| largest.set(0));
}

/// This thread's largest allocation since [`reset_largest`].
pub fn largest() -> usize {
    LARGEST.with(Cell::get)
}

/// The counts a check may reset and read itself, apart from [`largest`].
pub const ALLOCATIONS: Allocations = Allocations {
    reset: || LARGEST_IN_PHASE.with(|largest| largest.set(0)),
    largest: || LARGEST_IN_PHASE.with(Cell::get),
};

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
