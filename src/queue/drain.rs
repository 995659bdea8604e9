//! A blocking consumer's loop as an iterator: it ends when the queue is
//! sealed and drained, or closed.

use crate::error::{Error, Result};

/// The leases or items of a blocking consumer, from [`DQue::leases`] and
/// [`DQue::items`]: each `next` waits for one. It ends (`None`) once the
/// handle is [`seal`](crate::DQue::seal)ed and the queue holds no item, or
/// when the queue closes; any other error is yielded, and the iterator
/// goes on.
///
/// [`DQue::leases`]: crate::DQue::leases
/// [`DQue::items`]: crate::DQue::items
pub struct Drain<'q, R> {
    next: Box<dyn FnMut() -> Result<R> + 'q>,
    done: bool,
}

impl<'q, R> Drain<'q, R> {
    pub(crate) fn new(next: impl FnMut() -> Result<R> + 'q) -> Self {
        Drain {
            next: Box::new(next),
            done: false,
        }
    }
}

impl<R> Iterator for Drain<'_, R> {
    type Item = Result<R>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match (self.next)() {
            // Sealed and drained, or closed: nothing more will come.
            Err(Error::Closed) => {
                self.done = true;
                None
            }
            other => Some(other),
        }
    }
}

impl<R> std::fmt::Debug for Drain<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drain").field("done", &self.done).finish()
    }
}
