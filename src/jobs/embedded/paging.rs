//! Keyset pages of the embedded queue's waiting jobs: the cursor names
//! the last job's place in the waiting order (a lane record, or a
//! scheduled job's due time and record), and the next page walks on from
//! there (`walk`): a lane resumes at the record after it (segments before
//! it skipped by their headers), so a deep page costs what the first
//! does, bar the schedule, which each page reads whole, keys only.
//!
//! A job keeps its record while it waits where it is; a job that moves
//! (priority change, retry, promotion from the schedule, lease ended and
//! handed back) gets a new record at its new place: the rule of
//! [`PageCursor`](crate::jobs::PageCursor).

use std::ops::ControlFlow;

use super::walk::{Met, Slot};
use super::EmbeddedJobs;
use crate::error::Result;
use crate::jobs::job::Waiting;
use crate::jobs::paging::{Page, PageCursor};

/// Cursor kinds: a lane record, a due scheduled job, a later one.
const LANE: &str = "eL";
const DUE: &str = "eD";
const LATER: &str = "eS";

impl EmbeddedJobs {
    /// `waiting_page` by a walk from the cursor's place.
    pub(super) fn waiting_page_now(
        &self,
        after: Option<&PageCursor>,
        max: usize,
    ) -> Result<Page> {
        let from = after.map(slot_of).transpose()?;
        let _no_look_past = self.lock_limited_leases()?;
        let mut jobs = Vec::new();
        let mut last = None;
        let mut more = false;
        let keep_all = |_: &[u8], _| Ok(true);
        let mut visit = |met: Met<'_>| -> Result<ControlFlow<()>> {
            if jobs.len() == max {
                more = true;
                return Ok(ControlFlow::Break(()));
            }
            jobs.push(Waiting {
                job: self.job_met(&met)?,
                state: met.state,
            });
            last = Some(met.slot);
            Ok(ControlFlow::Continue(()))
        };
        self.walk_waiting(from, &keep_all, max.saturating_add(1), &mut visit)?;
        let next = match (more, last) {
            (true, Some(slot)) => Some(cursor_of(slot)),
            _ => None,
        };
        Ok(Page { jobs, next })
    }
}

/// The cursor after `slot`.
fn cursor_of(slot: Slot) -> PageCursor {
    match slot {
        Slot::Lane(priority, record) => {
            PageCursor::new(LANE, &[i128::from(priority), i128::from(record)])
        }
        Slot::Due(priority, at, record) => PageCursor::new(
            DUE,
            &[i128::from(priority), i128::from(at), i128::from(record)],
        ),
        Slot::Later(at, record) => PageCursor::new(LATER, &[i128::from(at), i128::from(record)]),
    }
}

/// The place a cursor names.
///
/// # Errors
///
/// `BadCursor` for one of another backend or out of range.
fn slot_of(cursor: &PageCursor) -> Result<Slot> {
    Ok(match cursor.kind() {
        DUE => {
            let [priority, at, record] = cursor.fields::<i128, 3>(DUE)?;
            let priority = i32::try_from(priority).map_err(|_| out_of_range(cursor))?;
            let at = u64::try_from(at).map_err(|_| out_of_range(cursor))?;
            let record = u64::try_from(record).map_err(|_| out_of_range(cursor))?;
            Slot::Due(priority, at, record)
        }
        LATER => {
            let [at, record] = cursor.fields::<u64, 2>(LATER)?;
            Slot::Later(at, record)
        }
        _ => {
            let [priority, record] = cursor.fields::<i128, 2>(LANE)?;
            let priority = i32::try_from(priority).map_err(|_| out_of_range(cursor))?;
            let record = u64::try_from(record).map_err(|_| out_of_range(cursor))?;
            Slot::Lane(priority, record)
        }
    })
}

fn out_of_range(cursor: &PageCursor) -> crate::Error {
    crate::Error::BadCursor {
        reason: format!("a field out of range in {:?}", cursor.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_reads_back_from_its_cursor() {
        for slot in [
            Slot::Lane(-3, 0),
            Slot::Lane(i32::MAX, u64::MAX),
            Slot::Due(7, 1_700_000_000_000, 12),
            Slot::Later(u64::MAX, 1),
        ] {
            let text = cursor_of(slot).to_string();
            assert_eq!(slot_of(&PageCursor::parse(&text).unwrap()).unwrap(), slot);
        }
        let foreign = PageCursor::new("o", &[10]);
        assert!(slot_of(&foreign).is_err());
        let big = PageCursor::new(LANE, &[i128::from(i64::MAX), 1]);
        assert!(slot_of(&big).is_err());
    }
}
