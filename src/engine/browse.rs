//! Browsing pending records without consuming them.

use std::ops::ControlFlow;

use super::{sealed_records, Engine};
use crate::delivery::Deliveries;
use crate::error::Result;
use crate::segment::{SealedCopy, Segment};

impl Engine {
    /// Calls `visit` on every pending record in order (id, attempts so far,
    /// leased now, payload) until it says stop. Mapped segments are read in
    /// place; the ones between them are mapped one at a time.
    pub fn visit_pending(
        &mut self,
        mut visit: impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        self.expire_leases()?;
        for segment in &self.front {
            if visit_mapped(segment, &self.deliveries, &mut visit).is_break() {
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
        let _ = visit_mapped(tail, &self.deliveries, &mut visit);
        Ok(())
    }
}

/// Calls `visit` on each unsettled record of a mapped segment.
fn visit_mapped(
    segment: &Segment,
    deliveries: &Deliveries,
    visit: &mut impl FnMut(u64, u16, bool, &[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    (0..segment.record_count())
        .filter(|&index| !segment.is_settled(index))
        .try_for_each(|index| {
            let id = segment.header.first_id + index as u64;
            let leased = deliveries.is_leased(id);
            visit(id, segment.attempts(index), leased, segment.payload(index))
        })
}
