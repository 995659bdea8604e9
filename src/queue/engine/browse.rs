//! Browsing pending records without consuming them.

use std::ops::ControlFlow;
use std::time::Instant;

use super::{sealed_records, Engine};
use crate::error::Result;
use crate::log::segment::{SealedCopy, Segment};
use crate::queue::delivery::Deliveries;

impl Engine {
    /// Calls `visit` on every pending record in order (id, attempts so far,
    /// leased now, payload) until it says stop. Mapped segments are read in
    /// place; the ones between them are read into memory one at a time.
    /// Writes nothing: a lease past its time shows as not leased, and an
    /// item the next write moves to the dead letters is left out.
    pub fn visit_pending(
        &self,
        visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        self.visit_pending_from(0, false, visit)
    }

    /// [`visit_pending`](Self::visit_pending) from id `from` on, over
    /// every segment, until `visit` says stop. Writes nothing.
    pub fn visit_pending_after(
        &self,
        from: u64,
        visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        self.visit_pending_from(from, false, visit)
    }

    /// [`visit_pending`](Self::visit_pending) from id `from` on: segments
    /// that end before it are skipped by their headers, never read. With
    /// `one_segment`, stops after the first segment that had any.
    pub(super) fn visit_pending_from(
        &self,
        from: u64,
        one_segment: bool,
        mut visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let visited = std::cell::Cell::new(false);
        let mut visit = |id, attempts, leased, payload: &[u8]| {
            visited.set(true);
            visit(id, attempts, leased, payload)
        };
        let seen = Seen {
            deliveries: &self.deliveries,
            now: Instant::now(),
            max_attempts: self.max_attempts,
            from,
        };
        for segment in &self.front {
            if visit_mapped(segment, &seen, &mut visit).is_break() || (one_segment && visited.get())
            {
                return Ok(());
            }
        }
        let Some(tail) = &self.tail else {
            return Ok(());
        };
        let after_front = self.front.back().expect("never empty").header.number + 1;
        for number in after_front..tail.header.number {
            let sealed = sealed_records(&self.dir, number, tail.header.number)?;
            let records = sealed.expect("has a successor");
            // Walked already (a sealed segment holds at least one record:
            // one that says none is damaged, and is read to report it).
            if records > 0 && Segment::read_header(&self.dir, number)?.first_id + records <= from {
                continue;
            }
            let middle = SealedCopy::read(&self.dir, number, records, self.cut_damaged_tail)?;
            // Outside the front run no lease reaches a record, and reading
            // a copy changes nothing on disk.
            for (id, attempts, payload) in middle.unsettled() {
                if id >= from && visit(id, attempts, false, payload).is_break() {
                    return Ok(());
                }
            }
            if one_segment && visited.get() {
                return Ok(());
            }
        }
        let _ = visit_mapped(tail, &seen, &mut visit);
        Ok(())
    }

    /// The pending records from id `from` to the end of the segment that
    /// holds the first of them (id, attempts, leased, payload copied): one
    /// step of a lazy walk, which never holds more than one segment's items.
    /// Empty at the end of the queue.
    pub fn pending_chunk(&self, from: u64) -> Result<Vec<PendingRecord>> {
        let mut chunk = Vec::new();
        self.visit_pending_from(from, true, |id, attempts, leased, payload| {
            chunk.push(PendingRecord {
                id,
                attempts,
                leased,
                payload: payload.to_vec(),
            });
            ControlFlow::Continue(())
        })?;
        Ok(chunk)
    }
}

impl Engine {
    /// As [`pending_chunk`](Self::pending_chunk), without copying: calls
    /// `visit` on the id and payload of each record of the chunk; returns
    /// the last id visited (`None` at the end of the queue).
    pub fn visit_chunk(&self, from: u64, mut visit: impl FnMut(u64, &[u8])) -> Result<Option<u64>> {
        let mut last = None;
        self.visit_pending_from(from, true, |id, _, _, payload| {
            visit(id, payload);
            last = Some(id);
            ControlFlow::Continue(())
        })?;
        Ok(last)
    }
}

/// A pending record copied out of its segment, for a walk.
#[derive(Debug)]
pub struct PendingRecord {
    pub id: u64,
    pub attempts: u16,
    pub leased: bool,
    pub payload: Vec<u8>,
}

/// The delivery state as a read sees it at one instant.
struct Seen<'a> {
    deliveries: &'a Deliveries,
    now: Instant,
    max_attempts: u16,
    /// Records before this id are left out.
    from: u64,
}

/// Calls `visit` on each pending record of a mapped segment.
fn visit_mapped(
    segment: &Segment,
    seen: &Seen<'_>,
    visit: &mut impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let first = seen.from.saturating_sub(segment.header.first_id) as usize;
    (first.min(segment.record_count())..segment.record_count())
        .filter(|&index| !segment.is_settled(index))
        .try_for_each(|index| {
            let id = segment.header.first_id + index as u64;
            if seen.deliveries.is_doomed(id, seen.now, seen.max_attempts) {
                return ControlFlow::Continue(());
            }
            let leased = seen.deliveries.is_held(id, seen.now);
            visit(id, segment.attempts(index), leased, segment.payload(index))
        })
}
