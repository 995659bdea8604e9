//! Layer 4, the tools: reading a queue without its lock (`QueueFiles`),
//! repair and salvage. They may import every layer below; the `dque`
//! command (`src/bin/dque/`) uses only the public API.

pub(crate) mod inspect;
pub(crate) mod job_files;
pub(crate) mod repair;
pub(crate) mod salvage;
