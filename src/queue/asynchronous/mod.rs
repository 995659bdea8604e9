//! The embedded queue for tokio programs (feature `tokio`):
//! [`AsyncQueue`](handle::AsyncQueue) over a [`DQue`](crate::DQue), its
//! lease guard, its streams; the wake-ups that let tasks wait without a
//! thread each; and where a call that fsyncs runs.

pub(crate) mod handle;
pub(crate) mod lease;
pub(crate) mod offload;
pub(crate) mod stream;
pub(crate) mod waiting;
pub(crate) mod wakeups;
