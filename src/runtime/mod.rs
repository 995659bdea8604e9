//! Typed jobs and a worker runtime (feature `runtime`): write
//! [`impl Job`](Job) for a serde type, register it with a [`Worker`], and
//! get retries, dead letters, panics caught, leases touched, timeouts and
//! a graceful stop on SIGINT/SIGTERM, on any [`JobQueue`](crate::jobs::JobQueue):
//! the embedded queue, PostgreSQL or Redis.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use dque::jobs::EmbeddedJobs;
//! use dque::runtime::{Context, EnqueueJob, Job, JobError, KindOptions, Worker};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Resize {
//!     image: String,
//!     width: u32,
//! }
//!
//! impl Job for Resize {
//!     const KIND: &'static str = "resize";
//!
//!     fn run(self, cx: &Context) -> Result<(), JobError> {
//!         if self.width == 0 {
//!             return Err(JobError::fail("width 0: fix the request"));
//!         }
//!         println!("{} to {} px (attempt {})", self.image, self.width, cx.attempt());
//!         Ok(())
//!     }
//!
//!     fn options() -> KindOptions {
//!         KindOptions::new().max_attempts(5).timeout(Duration::from_secs(60))
//!     }
//! }
//!
//! # fn main() -> Result<(), dque::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let queue = Arc::new(EmbeddedJobs::create(dir.path().join("jobs"))?);
//! queue.enqueue_job(&Resize { image: "cat.jpg".into(), width: 640 })?;
//! queue.enqueue_job_with(&Resize { image: "dog.jpg".into(), width: 0 }, |job| job.priority(-1))?;
//!
//! let summary = Worker::new(queue.clone())
//!     .register::<Resize>()
//!     .concurrency(4)
//!     .handle_signals(false) // a doctest; a program keeps the default
//!     .until_empty(true)
//!     .run()?;
//! assert_eq!((summary.succeeded, summary.dead), (1, 1));
//! # Ok(()) }
//! ```
//!
//! The layer is written against the Jobs API's public contract only; its
//! rules (what an attempt's end does to a job, the touch interval, a
//! server's passing trouble, the stop and its grace period) live in one
//! place each (`rules`, `shutdown`) for this thread runtime, the tokio one
//! beside it, and `dque work`.
//!
//! With feature `tokio` too, `AsyncWorker` runs `AsyncJob` kinds (an
//! `async fn perform`) as tokio tasks over an `AsyncJobQueue`, by the
//! same rules: a concurrency limit, leases touched, timeouts that abort
//! the handler's task, panics caught, the same stop and grace period.
//!
//! The kind travels in header [`KIND_HEADER`] (`klass`, qless's name for
//! it, so on Redis a qless client sees it as the job's class); bodies are
//! JSON unless a kind says otherwise. `dque push ADDRESS --kind K BODY`
//! enqueues a job of kind `K` from the shell.

#[cfg(feature = "tokio")]
mod async_job;
#[cfg(feature = "tokio")]
mod async_worker;
mod context;
mod job;
mod registry;
mod rules;
mod shutdown;
pub mod testing;
mod worker;

#[cfg(feature = "tokio")]
pub use async_job::{new_async_job, AsyncContext, AsyncJob, EnqueueAsyncJob};
#[cfg(feature = "tokio")]
pub use async_worker::AsyncWorker;
pub use context::Context;
pub use job::{new_job, EnqueueJob, Job, JobError, KindOptions, KIND_HEADER};
pub use rules::{
    is_server_trouble, touch_interval, trouble_pause, Outcome, UnknownKind, DEFAULT_LEASE_TIME,
    TIMED_OUT,
};
pub use shutdown::{SignalGuard, StopHandle, StopReason, DEFAULT_GRACE};
pub use worker::{Finished, Summary, Worker};
