//! `JobQueue::waiting_page` (issue 28: lists stopped at 10,000 jobs and a
//! deep page re-read every job before it): on every backend, a walk of
//! the pages lists every waiting job exactly once in `waiting`'s order on
//! a queue that does not change; on one that changes between pages, no
//! job that stayed where it waits is lost or listed twice; a cursor that
//! is garbled, forged or another backend's is an error.

use std::collections::HashMap;
use std::time::Duration;

use dque::jobs::{JobQueue, NewJob, Page, PageCursor, WaitState};
use dque::Error;

use super::{lease, new_queue, put, Backend};

/// One `#[test]` per check of this file, for the suite's runner.
#[macro_export]
macro_rules! jobs_api_paging_checks {
    (run = $runner:path) => {
        mod paging_checks {
            use super::*;
            $crate::jobs_api_suite!(@each_in $runner; paging;
                a_page_walk_lists_every_waiting_job_once_in_order,
                a_queue_changing_between_pages_loses_no_job_that_stayed_put,
                a_garbled_or_foreign_cursor_is_an_error,
                waiting_of_n_is_the_front_of_the_whole_list,
            );
        }
    };
}

/// Every page of size `size` from the first; at most `limit` pages.
fn walk(q: &dyn JobQueue, size: usize, limit: usize) -> Vec<Page> {
    let mut pages = Vec::new();
    let mut after: Option<PageCursor> = None;
    loop {
        let page = q.waiting_page(after.as_ref(), size).expect("a page");
        after = page.next.clone();
        pages.push(page);
        if after.is_none() {
            return pages;
        }
        assert!(pages.len() < limit, "more than {limit} pages of {size}");
    }
}

/// A job as a list shows it: id and state.
fn shown(w: &dque::jobs::Waiting) -> (String, WaitState) {
    (w.job.id.clone(), w.state)
}

pub fn a_page_walk_lists_every_waiting_job_once_in_order(backend: &dyn Backend) {
    let (q, settings) = new_queue(backend, "pages");
    let q = q.as_ref();
    for i in 0..5 {
        for priority in [2, 0, -1] {
            put(
                q,
                NewJob::new(format!("p{priority} {i}")).priority(priority),
            );
        }
    }
    let _held = lease(q);
    // A dead letter is in no page of the waiting jobs.
    let dead = lease(q);
    q.fail(dead, "boom").unwrap();
    for secs in [40, 10, 30, 5, 20] {
        put(
            q,
            NewJob::new(format!("later {secs}")).delay(Duration::from_secs(secs)),
        );
    }
    // Three fall due (not moved to their lanes: no write since).
    settings.clock.advance(Duration::from_secs(25));
    let all: Vec<_> = q.waiting(10_000).unwrap().iter().map(shown).collect();
    assert_eq!(all.len(), 19);
    for size in [1, 2, 3, 4, 7, 18, 19, 20, 100] {
        let pages = walk(q, size, 100);
        let listed: Vec<_> = pages
            .iter()
            .flat_map(|p| p.jobs.iter().map(shown))
            .collect();
        assert_eq!(listed, all, "pages of {size}");
        for page in &pages[..pages.len() - 1] {
            assert_eq!(page.jobs.len(), size, "a page before the last is full");
        }
        assert!(pages.last().unwrap().jobs.len() <= size);
        // The bodies come whole.
        let first = &pages[0].jobs[0].job;
        assert_eq!(first.body, q.waiting(1).unwrap()[0].job.body);
    }
    // A cursor printed into a URL and read back goes on as the value did.
    let first = q.waiting_page(None, 4).unwrap();
    let text = first.next.as_ref().expect("more").to_string();
    let read_back = PageCursor::parse(&text).unwrap();
    assert_eq!(
        q.waiting_page(Some(&read_back), 4).unwrap(),
        q.waiting_page(first.next.as_ref(), 4).unwrap()
    );
}

pub fn a_queue_changing_between_pages_loses_no_job_that_stayed_put(backend: &dyn Backend) {
    let (q, settings) = new_queue(backend, "changing");
    let q = q.as_ref();
    if is_offset(q) {
        // The default's cursor is an offset (Redis): a job settled before
        // it shifts the rest, so it keeps no such promise (documented).
        eprintln!("skipped: {} pages by offset", q.name());
        return;
    }
    let mut stayed = Vec::new();
    for i in 0..12 {
        stayed.push(put(q, NewJob::new(format!("s{i}")).id(format!("s-{i}"))));
    }
    for i in 0..6 {
        let job = NewJob::new(format!("p{i}"))
            .id(format!("p-{i}"))
            .priority(1);
        stayed.push(put(q, job));
    }
    for i in 0..4 {
        let job = NewJob::new(format!("l{i}"))
            .id(format!("l-{i}"))
            .delay(Duration::from_secs(100 + i));
        stayed.push(put(q, job));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut touched: Vec<String> = Vec::new();
    let mut after: Option<PageCursor> = None;
    for turn in 0.. {
        let page = q.waiting_page(after.as_ref(), 3).unwrap();
        for w in &page.jobs {
            *seen.entry(w.job.id.clone()).or_default() += 1;
        }
        // Between pages: jobs come, go and move.
        match turn {
            0 => {
                put(q, NewJob::new("new first").id("n-0").priority(-1));
                put(q, NewJob::new("new last").id("n-1"));
                q.cancel("s-7").unwrap();
                touched.push("s-7".into());
            }
            1 => {
                q.set_priority("s-9", 5).unwrap();
                q.set_priority("p-0", -2).unwrap();
                touched.extend(["s-9".into(), "p-0".into()]);
            }
            2 => {
                let l = lease(q);
                touched.push(l.job.id.clone());
                q.ack(l).unwrap();
                put(
                    q,
                    NewJob::new("new later")
                        .id("n-2")
                        .delay(Duration::from_secs(1)),
                );
            }
            3 => {
                // A scheduled job falls due.
                settings.clock.advance(Duration::from_secs(101));
            }
            _ => {}
        }
        after = page.next;
        if after.is_none() {
            break;
        }
        assert!(turn < 100, "the walk ends");
    }
    for id in stayed.iter().filter(|id| !touched.contains(id)) {
        assert_eq!(seen.get(id), Some(&1), "{id} stayed put: listed once");
    }
    for (id, times) in &seen {
        assert!(*times <= 2, "{id} listed {times} times");
    }
    assert_eq!(
        seen.get("n-1"),
        Some(&1),
        "a job added at the end is listed"
    );
}

/// Whether the queue's pages resume from an offset (the contract's
/// default) rather than a key.
fn is_offset(q: &dyn JobQueue) -> bool {
    put(q, NewJob::new("probe 1"));
    put(q, NewJob::new("probe 2"));
    let next = q.waiting_page(None, 1).unwrap().next.expect("more");
    for w in q.waiting(2).unwrap() {
        q.cancel(&w.job.id).unwrap();
    }
    next.to_string().starts_with("c1.o.")
}

/// A cursor text with a valid check for `body` (the format is opaque to
/// callers; a forger can still compute it).
fn forged(body: &str) -> String {
    let check = body.bytes().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{body}~{check:08x}")
}

pub fn a_garbled_or_foreign_cursor_is_an_error(backend: &dyn Backend) {
    let (q, _) = new_queue(backend, "cursors");
    let q = q.as_ref();
    for i in 0..6 {
        put(q, NewJob::new(format!("j{i}")));
    }
    let next = q.waiting_page(None, 2).unwrap().next.expect("more");
    let text = next.to_string();
    // Garbled on the way back: refused by the parse.
    for bad in [
        &text[..text.len() - 1],
        &text[1..],
        &text.replace('~', "-"),
        "",
        "page 2",
    ] {
        assert!(
            matches!(PageCursor::parse(bad), Err(Error::BadCursor { .. })),
            "{bad:?}"
        );
    }
    // Well formed but of another kind (another backend's, or made up):
    // refused by the queue, nothing read.
    for foreign in [
        "c1.o.2",
        "c1.eL.0.3",
        "c1.pR.0.1.2",
        "c1.zz.1",
        "c1.o.99999999999999",
    ] {
        let cursor = PageCursor::parse(&forged(foreign)).unwrap();
        if cursor == next {
            continue;
        }
        let kind = foreign.split('.').nth(1).unwrap();
        let own = next.to_string().starts_with(&format!("c1.{kind}."));
        let page = q.waiting_page(Some(&cursor), 2);
        match page {
            Err(Error::BadCursor { reason }) => {
                assert!(!reason.is_empty());
            }
            // A cursor of this backend's own kind is a position: a page.
            Ok(page) => assert!(own, "{foreign:?} answered {page:?}"),
            Err(e) => panic!("{foreign:?}: {e}"),
        }
    }
    assert_eq!(q.counts().unwrap().ready, 6, "nothing changed");
}

// Bug (issue 28, found by the randomized search comparison): the
// embedded `waiting(n)` kept, of a lane's jobs fallen due but not yet
// moved to it, the first `n` in record order and then sorted them by due
// time; due times need not rise with records (a longer delay enqueued
// first), so `waiting(n)` was not the front of the whole list, and a
// search reading the front in steps answered jobs from further on.
pub fn waiting_of_n_is_the_front_of_the_whole_list(backend: &dyn Backend) {
    let (q, settings) = new_queue(backend, "front");
    let q = q.as_ref();
    put(q, NewJob::new("ready"));
    for secs in [50, 40, 30, 20, 10] {
        put(
            q,
            NewJob::new(format!("due {secs}")).delay(Duration::from_secs(secs)),
        );
    }
    put(q, NewJob::new("later").delay(Duration::from_secs(500)));
    // All but the last fall due; no write moves them to their lane.
    settings.clock.advance(Duration::from_secs(60));
    let all: Vec<_> = q.waiting(100).unwrap().iter().map(shown).collect();
    assert_eq!(all.len(), 7);
    for n in 1..=7 {
        let front: Vec<_> = q.waiting(n).unwrap().iter().map(shown).collect();
        assert_eq!(front, all[..n], "waiting({n})");
    }
}
