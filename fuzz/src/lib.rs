//! The fuzz targets' checks, shared with `tests/fuzz_corpus.rs` of dque so
//! the saved corpus runs as ordinary tests on stable.
pub mod checks;
pub mod counting;
