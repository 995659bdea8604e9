//! Where an async call runs: inline on its task when it cannot block for
//! long (no fsync: Turbo, Periodic), on tokio's blocking pool when it waits
//! for an fsync (Safe). Concurrent callers on the pool share one fsync, as
//! threads do (group commit).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::Durability;
use crate::queue::shared::Shared;

/// Whether a write of this handle waits for an fsync before it returns
/// (Safe mode). A closed queue: no (the call fails at once).
pub fn fsyncs(shared: &Shared) -> bool {
    shared
        .read(|engine| Ok(engine.durability() == Durability::Safe))
        .unwrap_or(false)
}

/// Runs `work` inline if `blocks` is false (or there is no runtime), else
/// on the blocking pool. A panic in `work` goes on in the caller.
///
/// Dropping the future does not stop `work` once it is on the pool: it
/// runs to its end, so a write is never half done.
pub async fn run<R: Send + 'static>(
    blocks: bool,
    work: impl FnOnce() -> Result<R> + Send + 'static,
) -> Result<R> {
    if !blocks {
        return work();
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return work();
    };
    match runtime.spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: the work never ran.
        Err(_) => Err(Error::Closed),
    }
}

/// Makes the writes up to `ticket` durable (Safe mode), on the blocking pool.
pub async fn durable(shared: &Arc<Shared>, ticket: Option<u64>) -> Result<()> {
    let Some(ticket) = ticket else {
        return Ok(());
    };
    let shared = Arc::clone(shared);
    run(true, move || shared.make_durable(ticket)).await
}
