//! Streams of a waiting call's answers: leases, batches, items.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use crate::error::{Error, Result};

/// The future of one call: `Some` answer, or `None` when the stream is over.
type Call<O> = Pin<Box<dyn Future<Output = Result<Option<O>>> + Send>>;

/// A [`Stream`] of the answers of one waiting call made again and again
/// ([`AsyncQueue::leases`](crate::AsyncQueue::leases),
/// [`lease_batches`](crate::AsyncQueue::lease_batches),
/// [`items`](crate::AsyncQueue::items)).
///
/// It ends (yields `None`) when the call says it is over (the handle
/// sealed and the queue empty) or fails with `Closed`; another error is
/// yielded as `Some(Err(..))` and the next poll calls again. Dropping the
/// stream drops the call it waits in: as cancel-safe as that call.
pub struct QueueStream<O> {
    call: Box<dyn FnMut() -> Call<O> + Send>,
    running: Option<Call<O>>,
    over: bool,
}

impl<O> QueueStream<O> {
    pub(crate) fn new(call: impl FnMut() -> Call<O> + Send + 'static) -> Self {
        QueueStream {
            call: Box::new(call),
            running: None,
            over: false,
        }
    }
}

impl<O> std::fmt::Debug for QueueStream<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueStream")
            .field("waiting", &self.running.is_some())
            .field("over", &self.over)
            .finish()
    }
}

impl<O> Stream for QueueStream<O> {
    type Item = Result<O>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<O>>> {
        let this = &mut *self;
        if this.over {
            return Poll::Ready(None);
        }
        let call = this.running.get_or_insert_with(|| (this.call)());
        let answer = std::task::ready!(call.as_mut().poll(cx));
        this.running = None;
        Poll::Ready(match answer {
            Ok(Some(found)) => Some(Ok(found)),
            Ok(None) | Err(Error::Closed) => {
                this.over = true;
                None
            }
            Err(e) => Some(Err(e)),
        })
    }
}
