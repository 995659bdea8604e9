//! Layer 2, the embedded queue: `DQue`, its engine, leases, dead letters,
//! and shared mode between processes (`processes/`). It imports only the log
//! (layer 1) and the top modules (`error`, `faults`, `codec`, `options`).

#[cfg(feature = "tokio")]
pub(crate) mod asynchronous;
pub(crate) mod dead;
pub(crate) mod deadline;
pub(crate) mod delivery;
pub(crate) mod dque;
pub(crate) mod drain;
pub(crate) mod engine;
pub(crate) mod flusher;
pub(crate) mod iter;
pub(crate) mod lease;
pub(crate) mod processes;
pub(crate) mod retry;
pub(crate) mod shared;
pub(crate) mod workers;
