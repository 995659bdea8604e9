//! Waiting in a task: the async form of `Shared::wait_for`. A task looks
//! under the queue's mutex (inline: a look never sleeps), and when it
//! finds nothing waits on the queue's [`Wakeups`](super::wakeups::Wakeups)
//! or until a lease it may take expires: no thread is held while it waits.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Instant;

use crate::error::Result;
use crate::queue::engine::Engine;
use crate::queue::shared::{Shared, Tried};

/// How a wait ended.
pub enum Waited<R> {
    /// What the look found, and the ticket to make durable (Safe mode).
    Found(R, Option<u64>),
    /// The deadline passed first.
    TimedOut,
    /// The handle is sealed and the queue holds no item.
    Drained,
}

/// Looks with `op` until it finds something, the deadline passes, or the
/// handle is sealed and the queue empty.
///
/// Cancel-safe: it returns in the poll whose look found something, so a
/// dropped future never found anything; what `op` found is the caller's
/// to hold in a guard before its next `.await`.
pub async fn wait<R>(
    shared: &Shared,
    deadline: Option<Instant>,
    writes: bool,
    mut op: impl FnMut(&mut Engine) -> Result<Option<R>>,
) -> Result<Waited<R>> {
    let wakeups = shared.wakeups();
    loop {
        // Registered before the look: a wake-up after it is kept.
        let sealed = shared.is_sealed();
        let mut available = pin!(wakeups.notified_available());
        available.as_mut().enable();
        let mut room = pin!(wakeups.notified_room());
        if sealed {
            room.as_mut().enable();
        }
        let wake = match shared.try_once(writes, &mut op)? {
            Tried::Found(found, ticket) => return Ok(Waited::Found(found, ticket)),
            Tried::Wait(wake) => wake,
        };
        if sealed && shared.read(|engine| Ok(engine.len_now()))? == 0 {
            return Ok(Waited::Drained);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Waited::TimedOut);
        }
        let until = match (deadline, wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut timer = until.map(|until| Box::pin(tokio::time::sleep_until(until.into())));
        std::future::poll_fn(|cx| {
            let woken = available.as_mut().poll(cx).is_ready()
                // Sealed: an ack may have settled the last item.
                || (sealed && room.as_mut().poll(cx).is_ready())
                || timer.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready());
            if woken {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}
