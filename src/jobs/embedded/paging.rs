//! Keyset pages of the embedded queue's waiting jobs: the cursor names
//! the last job's place in the waiting order (a lane record, or a
//! scheduled job's due time and record), and the next page walks on from
//! there (`walk`): a lane resumes at the record after it (segments before
//! it skipped by their headers), so a deep page costs what the first
//! does, bar the schedule, which each page reads whole, keys only.
//!
//! The cursor also carries the first page's time, which splits the
//! schedule for the whole walk (due by then: with their lanes; later:
//! after every lane), so a scheduled job falling due during a walk keeps
//! its place in it.
//!
//! A job keeps its record while it waits where it is; a job that moves
//! (priority change, retry, promotion from the schedule, lease ended and
//! handed back) gets a new record at its new place: the rule of
//! [`PageCursor`](crate::jobs::PageCursor).

use std::ops::ControlFlow;

use super::walk::{Met, Slot};
use super::EmbeddedJobs;
use crate::error::Result;
use crate::jobs::clock::unix_ms;
use crate::jobs::job::Waiting;
use crate::jobs::paging::{Page, PageCursor};

/// Cursor kinds: a lane record, a due scheduled job, a later one.
const LANE: &str = "eL";
const DUE: &str = "eD";
const LATER: &str = "eS";

impl EmbeddedJobs {
    /// `waiting_page` by a walk from the cursor's place, the schedule
    /// split at the first page's time (`walk`).
    pub(super) fn waiting_page_now(&self, after: Option<&PageCursor>, max: usize) -> Result<Page> {
        let (as_of, from) = match after {
            Some(cursor) => {
                let (as_of, slot) = place_of(cursor)?;
                (as_of, Some(slot))
            }
            None => (unix_ms(self.now()), None),
        };
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
        let room = max.saturating_add(1);
        self.walk_waiting(from, Some(as_of), &keep_all, room, &mut visit)?;
        let next = match (more, last) {
            (true, Some(slot)) => Some(cursor_of(as_of, slot)),
            _ => None,
        };
        Ok(Page { jobs, next })
    }
}

/// The cursor after `slot` in a walk split at `as_of`.
fn cursor_of(as_of: u64, slot: Slot) -> PageCursor {
    let as_of = i128::from(as_of);
    match slot {
        Slot::Lane(priority, record) => {
            PageCursor::new(LANE, &[as_of, i128::from(priority), i128::from(record)])
        }
        Slot::Due(priority, at, record) => PageCursor::new(
            DUE,
            &[
                as_of,
                i128::from(priority),
                i128::from(at),
                i128::from(record),
            ],
        ),
        Slot::Later(at, record) => {
            PageCursor::new(LATER, &[as_of, i128::from(at), i128::from(record)])
        }
    }
}

/// The split time and the place a cursor names.
///
/// # Errors
///
/// `BadCursor` for one of another backend or out of range.
fn place_of(cursor: &PageCursor) -> Result<(u64, Slot)> {
    let range = || out_of_range(cursor);
    Ok(match cursor.kind() {
        DUE => {
            let [as_of, priority, at, record] = cursor.fields::<i128, 4>(DUE)?;
            let priority = i32::try_from(priority).map_err(|_| range())?;
            let [as_of, at, record] =
                [as_of, at, record].map(|f| u64::try_from(f).map_err(|_| range()));
            (as_of?, Slot::Due(priority, at?, record?))
        }
        LATER => {
            let [as_of, at, record] = cursor.fields::<u64, 3>(LATER)?;
            (as_of, Slot::Later(at, record))
        }
        _ => {
            let [as_of, priority, record] = cursor.fields::<i128, 3>(LANE)?;
            let priority = i32::try_from(priority).map_err(|_| range())?;
            let [as_of, record] = [as_of, record].map(|f| u64::try_from(f).map_err(|_| range()));
            (as_of?, Slot::Lane(priority, record?))
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
            let text = cursor_of(77, slot).to_string();
            let read = place_of(&PageCursor::parse(&text).unwrap()).unwrap();
            assert_eq!(read, (77, slot));
        }
        let foreign = PageCursor::new("o", &[10]);
        assert!(place_of(&foreign).is_err());
        let big = PageCursor::new(LANE, &[0, i128::from(i64::MAX), 1]);
        assert!(place_of(&big).is_err());
        let negative = PageCursor::new(LATER, &[-1, 1, 1]);
        assert!(place_of(&negative).is_err());
    }

    // A cursor anyone can forge (its check is no secret): with any
    // values in range, a page is an answer or an error, never a panic.
    #[test]
    fn a_forged_cursor_gives_a_page_or_an_error() {
        use crate::jobs::{JobQueue, NewJob};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let q = EmbeddedJobs::create(dir.path().join("q")).unwrap();
        for i in 0..20 {
            let job = NewJob::new(format!("j{i}")).priority(i % 3 - 1);
            let job = match i % 4 {
                0 => job.delay(Duration::from_secs(u64::from(i as u32) * 10)),
                _ => job,
            };
            q.enqueue(job).unwrap();
        }
        let big = [0, 1, i128::from(u64::MAX), i128::from(i64::MAX), -1];
        let priorities = [i128::from(i32::MIN), -1, 0, 1, i128::from(i32::MAX)];
        for &a in &big {
            for &b in &big {
                for &p in &priorities {
                    for cursor in [
                        PageCursor::new(LANE, &[a, p, b]),
                        PageCursor::new(DUE, &[a, p, b, b]),
                        PageCursor::new(DUE, &[a, p, 0, b]),
                        PageCursor::new(LATER, &[a, b, b]),
                        PageCursor::new(LATER, &[a, 0, b]),
                    ] {
                        match q.waiting_page(Some(&cursor), 7) {
                            Ok(page) => assert!(page.jobs.len() <= 7),
                            Err(e) => assert!(
                                matches!(e, crate::Error::BadCursor { .. }),
                                "{cursor}: {e}"
                            ),
                        }
                    }
                }
            }
        }
    }
}
