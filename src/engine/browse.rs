//! Browsing pending records without consuming them.

use std::ops::ControlFlow;
use std::time::Instant;

use super::{sealed_records, Engine};
use crate::delivery::Deliveries;
use crate::error::Result;
use crate::segment::{SealedCopy, Segment};

impl Engine {
    /// Calls `visit` on every pending record in order (id, attempts so far,
    /// leased now, payload) until it says stop. Mapped segments are read in
    /// place; the ones between them are read into memory one at a time.
    /// Writes nothing: a lease past its time shows as not leased, and an
    /// item the next write moves to the dead letters is left out.
    pub fn visit_pending(
        &self,
        mut visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let seen = Seen {
            deliveries: &self.deliveries,
            now: Instant::now(),
            max_attempts: self.max_attempts,
        };
        for segment in &self.front {
            if visit_mapped(segment, &seen, &mut visit).is_break() {
                return Ok(());
            }
        }
        let Some(tail) = &self.tail else {
            return Ok(());
        };
        let after_front = self.front.back().expect("never empty").header.number + 1;
        for number in after_front..tail.header.number {
            let sealed = sealed_records(&self.dir, number, tail.header.number)?;
            let middle = SealedCopy::read(&self.dir, number, sealed.expect("has a successor"))?;
            // Outside the front run no lease reaches a record, and reading
            // a copy changes nothing on disk.
            for (id, attempts, payload) in middle.unsettled() {
                if visit(id, attempts, false, payload).is_break() {
                    return Ok(());
                }
            }
        }
        let _ = visit_mapped(tail, &seen, &mut visit);
        Ok(())
    }
}

/// The delivery state as a read sees it at one instant.
struct Seen<'a> {
    deliveries: &'a Deliveries,
    now: Instant,
    max_attempts: u16,
}

/// Calls `visit` on each pending record of a mapped segment.
fn visit_mapped(
    segment: &Segment,
    seen: &Seen<'_>,
    visit: &mut impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    (0..segment.record_count())
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
