//! A lazy walk over a queue's pending items.

use std::collections::VecDeque;
use std::marker::PhantomData;

use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::queue::engine::PendingRecord;
use crate::queue::shared::Shared;

/// The pending items of a queue in delivery order (items handed back aside),
/// from [`DQue::iter`]: decoded one at a time as the walk reaches them,
/// without consuming them or writing anything.
///
/// The walk takes the queue's lock once per segment, copies that segment's
/// pending records, and lets go: memory holds one segment's items at most,
/// whatever the queue's length. It is a walk, not a snapshot: items taken
/// by others after it copied their segment are still yielded, items added
/// after its cursor are yielded too. A record that does not decode is
/// yielded as `Err(Decode)` and the walk goes on with the next; after
/// any other error it yields `None`.
///
/// [`DQue::iter`]: crate::DQue::iter
pub struct Iter<'q, T, C: Codec<T>> {
    /// The state of the queue walked, borrowed from its [`DQue`](crate::DQue).
    shared: &'q Shared,
    /// The queue's codec.
    codec: &'q C,
    /// The next id to look from.
    from: u64,
    chunk: VecDeque<PendingRecord>,
    done: bool,
    // As in `DQue`: items are only ever held encoded.
    _item: PhantomData<fn(T) -> T>,
}

impl<'q, T, C: Codec<T>> Iter<'q, T, C> {
    /// A walk over the queue behind `shared`, decoding with `codec`.
    pub(crate) fn new(shared: &'q Shared, codec: &'q C) -> Self {
        Iter {
            shared,
            codec,
            from: 0,
            chunk: VecDeque::new(),
            done: false,
            _item: PhantomData,
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
            match self.shared.read(|engine| engine.pending_chunk(self.from)) {
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
        let item = self
            .codec
            .decode(&record.payload)
            .map_err(|source| Error::Decode {
                id: record.id,
                source,
            });
        // A record that does not decode is reported, and the walk goes on.
        Some(item.map(|item| Pending {
            id: record.id,
            attempts: record.attempts,
            leased: record.leased,
            item,
        }))
    }
}

/// A pending item as [`DQue::pending`](crate::DQue::pending) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pending<T> {
    /// The item's id (stable; what [`DQue::cancel`](crate::DQue::cancel) takes).
    pub id: u64,
    /// Delivery attempts so far.
    pub attempts: u16,
    /// Whether a consumer holds it now.
    pub leased: bool,
    /// The item.
    pub item: T,
}
