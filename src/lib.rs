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
mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
#[cfg(not(feature = "fault-injection"))]
mod faults;
pub mod jobs;
mod log;
mod options;
mod queue;
#[cfg(feature = "runtime")]
pub mod runtime;
mod tools;
#[cfg(feature = "web")]
pub mod web;

pub use codec::{Bincode, Codec, Json, Raw};
pub use error::{CodecError, Error, Result};
pub use log::format::FORMAT_VERSION;
pub use log::quarantine::QUARANTINE_DIR;
pub use log::recovery::{OpenReport, Repair};
pub use log::verify::{Problem, SegmentSummary, VerifyReport};
pub use options::{Durability, Options};
#[cfg(feature = "tokio")]
pub use queue::asynchronous::{handle::AsyncQueue, lease::AsyncLeased, stream::QueueStream};
pub use queue::dead::DeadLetter;
pub use queue::dque::{DQue, RawQueue};
pub use queue::drain::Drain;
pub use queue::iter::{Iter, Pending};
pub use queue::lease::Leased;
pub use queue::retry::Retry;
pub use queue::workers::Worker;
pub use tools::inspect::{QueueFiles, Stats, StoredRecord};
pub use tools::job_files::{job_parts, job_stats, JobPart};
pub use tools::repair::{repair, RepairAction, RepairReport};
pub use tools::salvage::{salvage, Salvage, SalvagedRecord};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
