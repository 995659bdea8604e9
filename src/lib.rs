//! # dque: a durable, segmented, append-only queue
//!
//! [`DQue<T>`] keeps typed items on disk in one directory. It survives
//! restarts and crashes (a torn tail is cut back on open, never read as
//! data), is not limited by RAM (only the head and tail segments are mapped,
//! and records are decoded only when taken), and is shared safely between
//! threads.
//!
//! ```
//! use dque::{DQue, Durability, Options};
//! # fn main() -> Result<(), dque::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let q: DQue<(u32, String)> = Options::new()
//!     .durability(Durability::Safe)
//!     .segment_items(1_000)
//!     .open_or_create(dir.path().join("jobs"))?;
//! q.enqueue(&(1, "resize image".into()))?;
//! assert_eq!(q.dequeue()?, Some((1, "resize image".into())));
//! # Ok(()) }
//! ```
//!
//! Several processes (producers and workers started and killed at will)
//! can share one queue directory, with no daemon: [`Options::shared`].
//!
//! For tools and operators: [`QueueFiles`] reads a queue without taking
//! its lock (counts, records, a full check), [`repair()`] mends a queue that
//! no longer opens, and [`salvage()`] reads what is left in a damaged
//! segment. The `dque` command (feature `cli`) puts them in a shell.
//!
//! The on-disk format is specified in `FORMAT.md` in the repository.
#![deny(missing_docs)]

mod codec;
mod commit;
mod dead;
mod deadline;
mod delivery;
mod engine;
mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
#[cfg(not(feature = "fault-injection"))]
mod faults;
mod flusher;
mod format;
mod inspect;
mod iter;
pub mod jobs;
mod layout;
mod lease;
mod lock;
mod options;
mod processes;
mod quarantine;
mod queue;
mod recovery;
mod repair;
mod salvage;
mod segment;
mod shared;
mod verify;
mod workers;

pub use codec::{Bincode, Codec, Raw};
pub use dead::DeadLetter;
pub use error::{CodecError, Error, Result};
pub use format::FORMAT_VERSION;
pub use inspect::{QueueFiles, Stats, StoredRecord};
pub use iter::Iter;
pub use lease::Leased;
pub use options::{Durability, Options};
pub use quarantine::QUARANTINE_DIR;
pub use queue::{DQue, Pending, RawQueue};
pub use recovery::{OpenReport, Repair};
pub use repair::{repair, RepairAction, RepairReport};
pub use salvage::{salvage, Salvage, SalvagedRecord};
pub use verify::{Problem, SegmentSummary, VerifyReport};
pub use workers::Worker;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
