//! Layer 1, the on-disk log: frames, segments, the queue directory, replay
//! and recovery, group commit, and the read-only check of the files.
//! It imports only `error` and `faults`, never a layer above it.

pub(crate) mod commit;
pub(crate) mod format;
pub(crate) mod layout;
pub(crate) mod lock;
pub(crate) mod mapping;
pub(crate) mod quarantine;
pub(crate) mod recovery;
pub(crate) mod segment;
pub(crate) mod verify;
pub(crate) mod zeroing;
