//! The checks behind the fuzz targets `open`, `repair` and `ops`, and the
//! generator of their seed corpus.
//!
//! One module per target (`open`, `ops`, `repair`) and for the seeds, with
//! what several share in `format` (FORMAT.md read independently of dque's
//! code) and `common` (fuzz input, scratch directories, file helpers).
//!
//! These files are compiled twice: as `dque_fuzz::checks` for cargo-fuzz
//! (nightly flags), and as a `#[path]` module of dque's `tests/fuzz_corpus.rs`,
//! which runs every saved corpus file through them on stable. So they use
//! only `dque`, `std` and `tempfile`, and no `crate::` path: the modules
//! reach each other through `super::`.
//!
//! * [`open_files`] (`open.rs`): the input is a queue directory (a config and
//!   up to three segment files, see [`OpenInput`](open::OpenInput)). Opening it
//!   must fail with the error an independent reading of FORMAT.md predicts (its
//!   "Tail damage" rule among them: `judge_tail` in `format.rs`), changing
//!   nothing it may not, or succeed with exactly the predicted repairs (each
//!   with its copy kept in `quarantine/`), deletions, `len()`, `verify()`
//!   summary and items, with reads that write nothing; then the queue must take
//!   one more item and reopen clean.
//! * [`repair_files`] (`repair.rs`): the same input as `open`. `QueueFiles`
//!   must read it without writing, with allocations bounded by the file sizes.
//!   `repair()` is judged by properties, not by a model of its steps: a dry run
//!   changes nothing; a refusal changes nothing; the repaired queue opens clean
//!   and verifies healthy; every record that was whole and reachable before is
//!   delivered, in order, with its id and bytes, and nothing else is; no bytes
//!   are destroyed silently; nothing outside the queue directory is touched; a
//!   second repair changes nothing; and a repair stopped at any of its syncs is
//!   finished by the next (see [`check_repair`]).
//! * [`ops`](ops()) (`ops.rs`): the input is a sequence of operations (see
//!   [`Op`](ops::Op)) applied to a queue and to a model, compared after every
//!   one, across reopens with other sizes, durability switches, kills (the
//!   directory copied, its subdirectories too, while the queue is open, as a
//!   killed process leaves it) and power losses (crash images of dque's
//!   `fault-injection` feature, which must open; without it, a kill).
//!
//! The fuzz crate turns `fault-injection` on by default (its feature of that
//! name enables dque's); in dque's tests the same `cfg` is dque's own feature.
//!
//! Every check panics with a message that says what differed.

mod common;
mod format;
pub mod open;
pub mod ops;
pub mod repair;
pub mod seeds;

pub use open::{check_open, open_files, same_outcome};
pub use ops::ops;
pub use repair::{check_repair, repair_files, same_repair_outcome, Allocations};
pub use seeds::seeds;
