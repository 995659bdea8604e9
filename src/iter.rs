//! A lazy walk over a queue's pending items.

use std::collections::VecDeque;

use crate::codec::Codec;
use crate::engine::PendingRecord;
use crate::error::Result;
use crate::queue::{DQue, Pending};

/// The pending items of a queue in delivery order (items handed back aside),
/// from [`DQue::iter`]: decoded one at a time as the walk reaches them,
/// without consuming them or writing anything.
///
/// The walk takes the queue's lock once per segment, copies that segment's
/// pending records, and lets go: memory holds one segment's items at most,
/// whatever the queue's length. It is a walk, not a snapshot: items taken
/// by others after it copied their segment are still yielded, items added
/// after its cursor are yielded too. After an error it yields `None`.
pub struct Iter<'q, T, C: Codec<T>> {
    queue: &'q DQue<T, C>,
    /// The next id to look from.
    from: u64,
    chunk: VecDeque<PendingRecord>,
    done: bool,
}

impl<'q, T, C: Codec<T>> Iter<'q, T, C> {
    pub(crate) fn new(queue: &'q DQue<T, C>) -> Self {
        Iter {
            queue,
            from: 0,
            chunk: VecDeque::new(),
            done: false,
        }
    }
}

impl<T, C: Codec<T>> Iterator for Iter<'_, T, C> {
    type Item = Result<Pending<T>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.chunk.is_empty() {
            match self.queue.pending_chunk(self.from) {
                Ok(chunk) if chunk.is_empty() => {
                    self.done = true;
                    return None;
                }
                Ok(chunk) => self.chunk = chunk.into(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let record = self.chunk.pop_front()?;
        self.from = record.id + 1;
        let item = self.queue.decode_item(record.id, &record.payload);
        self.done = item.is_err();
        Some(item.map(|item| Pending {
            id: record.id,
            attempts: record.attempts,
            leased: record.leased,
            item,
        }))
    }
}
