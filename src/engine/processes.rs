//! The engine in shared mode: taking the cross-process mutex, catching up
//! with what other processes changed, mending what a dead one left half
//! done, and publishing this view's changes (FORMAT.md, "Shared mode").

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{sealed_records, Engine};
use crate::error::{Error, Result};
use crate::format::SEGMENT_HEADER_LEN;
use crate::layout::QueueDir;
use crate::processes::{Locked, ProcessLink, State, Waker};
use crate::recovery::{nonzero_len, OpenReport};
use crate::segment::Segment;
use crate::workers::Worker;

/// How often a call that finds no item checks whether lease holders died.
const REAP_INTERVAL: Duration = Duration::from_millis(20);
/// How often a blocked caller wakes to do so while leases are held.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

fn link_slot(link: &Option<ProcessLink>) -> usize {
    link.as_ref().expect("shared").slot()
}

impl Engine {
    /// Shared mode: the futex word blocked callers sleep on.
    pub fn waker(&self) -> Option<Waker> {
        self.link.as_ref().map(ProcessLink::waker)
    }

    /// Shared mode: stops the writes of every process (an fsync failed).
    pub(super) fn refuse_everywhere(&self) {
        if let Some(link) = &self.link {
            link.state().refused.store(1, Relaxed);
        }
    }

    /// Before a call: takes the cross-process mutex and brings this view up
    /// to date (the dead letters' too, once open). Nothing in exclusive mode.
    pub fn enter(&mut self) -> Result<()> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        let locked = link.lock()?;
        self.held = true;
        let result = self.settle_in(locked);
        if result.is_err() {
            self.leave();
        }
        result
    }

    fn settle_in(&mut self, locked: Locked) -> Result<()> {
        let state = self.link.as_ref().expect("shared").state();
        if locked == Locked::OwnerDied || state.mending.load(Relaxed) != 0 {
            mend(&self.dir, state)?;
        }
        if state.refused.load(Relaxed) != 0 && self.refused.is_none() {
            let cause = Error::io(
                self.dir.path(),
                std::io::Error::other("an fsync failed in another process sharing the queue"),
            );
            self.refused = Some(Arc::new(cause));
        }
        self.catch_up()?;
        if let Some(dead) = &mut self.dead {
            dead.enter()?;
        }
        Ok(())
    }

    /// After a call: publishes what it changed, wakes blocked callers of
    /// every process if anything did, and releases the mutex.
    pub fn leave(&mut self) {
        if let Some(dead) = &mut self.dead {
            dead.leave();
        }
        if !self.held {
            return;
        }
        self.held = false;
        let changed = self.publish();
        let link = self.link.as_ref().expect("held only in shared mode");
        link.unlock();
        if changed {
            link.wake_all();
        }
    }

    /// Enters a dead-letter queue opened during a call, so that it is held
    /// like the queue it belongs to.
    pub(super) fn enter_like_parent(&mut self, parent_held: bool) -> Result<()> {
        if parent_held {
            self.enter()?;
        }
        Ok(())
    }

    /// Reads what other processes changed since this view last held the
    /// mutex: segments they created and retired, how far deliveries reached,
    /// and the frames they wrote.
    fn catch_up(&mut self) -> Result<()> {
        let link = self.link.as_ref().expect("shared");
        let state = link.state();
        let change = state.change.load(Relaxed);
        if change == link.seen {
            self.written_at_enter = self.written;
            return Ok(());
        }
        let (head, tail, front_end, fresh) = (
            state.head.load(Relaxed),
            state.tail.load(Relaxed),
            state.front_end.load(Relaxed),
            state.fresh.load(Relaxed),
        );
        if tail > self.tail().header.number {
            // Sealed by another process: its frames are whole to the end.
            self.tail_mut().catch_up()?;
            // Outside the front run it is a middle segment now, unmapped
            // (the front run below maps it again if deliveries reached it).
            drop(self.tail.take());
            let segment = Segment::open(&self.dir, tail, None, false, &mut OpenReport::default())?;
            self.tail = Some(segment);
        }
        if self.head().header.number < head {
            // Deleted by the processes that retired them; the mappings go.
            self.front.retain(|segment| segment.header.number >= head);
            if self.front.is_empty() {
                let head_segment = match self.tail.take_if(|t| t.header.number == head) {
                    Some(tail) => tail,
                    None => {
                        let sealed = sealed_records(&self.dir, head, tail)?;
                        let report = &mut OpenReport::default();
                        Segment::open(&self.dir, head, sealed, false, report)?
                    }
                };
                self.front.push_back(head_segment);
            }
        }
        while self.front.back().expect("never empty").header.number < front_end {
            if !self.extend_front()? {
                break;
            }
        }
        for segment in self.front.iter_mut().chain(&mut self.tail) {
            segment.catch_up()?;
        }
        self.deliveries.set_fresh(fresh);
        self.len = self.counted_len();
        let link = self.link.as_mut().expect("shared");
        link.seen = change;
        self.written_at_enter = self.written;
        Ok(())
    }

    /// Puts this view's shape in the control file if the call changed
    /// anything; returns whether it did.
    fn publish(&mut self) -> bool {
        let (head, tail, tail_end, front_end, fresh) = (
            self.head().header.number,
            self.tail().header.number,
            self.tail().end() as u64,
            self.front.back().expect("never empty").header.number,
            self.deliveries.fresh(),
        );
        let wrote = self.written != self.written_at_enter;
        let link = self.link.as_mut().expect("shared");
        let state = link.state();
        let same = state.head.load(Relaxed) == head
            && state.tail.load(Relaxed) == tail
            && state.tail_end.load(Relaxed) == tail_end
            && state.front_end.load(Relaxed) == front_end
            && state.fresh.load(Relaxed) == fresh;
        if same && !wrote {
            return false;
        }
        state.head.store(head, Relaxed);
        state.tail.store(tail, Relaxed);
        state.tail_end.store(tail_end, Relaxed);
        state.front_end.store(front_end, Relaxed);
        state.fresh.store(fresh, Relaxed);
        link.seen = state.change.fetch_add(1, Relaxed) + 1;
        self.written_at_enter = self.written;
        true
    }

    /// Sets up a control file made anew from this view (by a process that
    /// opened the queue alone).
    pub(super) fn start_control(&mut self) {
        self.written_at_enter = self.written.wrapping_sub(1);
        self.publish();
    }

    /// Ends the open of a shared handle, under the mutex: publishes a control
    /// file made anew (alone) or takes the others' cursor, registers this
    /// handle in its slot, and frees the slots of handles that died.
    pub(super) fn join(&mut self, alone: bool) -> Result<()> {
        if let Some(dead) = &mut self.dead {
            dead.enter()?;
        }
        let link = self.link.as_mut().expect("shared");
        if alone {
            self.start_control();
        } else {
            link.seen = link.state().change.load(Relaxed);
            self.deliveries.set_fresh(link.state().fresh.load(Relaxed));
            self.written_at_enter = self.written;
        }
        let link = self.link.as_mut().expect("shared");
        let earlier_life = link.register();
        self.deliveries.share(link.lease_table());
        if let Some(generation) = earlier_life {
            self.give_back_leases_of(link_slot(&self.link), generation)?;
        }
        self.reap_dead_workers(true)
    }

    /// Shared mode: gives back the leases of handles that died (their
    /// attempts count: one on its last attempt goes to the dead letters)
    /// and frees their slots. Checked at most every [`REAP_INTERVAL`]
    /// unless `now`, and only while leases are held.
    pub(super) fn reap_dead_workers(&mut self, now: bool) -> Result<()> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        if !now
            && (self.deliveries.leased_count() == 0
                || self
                    .last_reap
                    .is_some_and(|at| at.elapsed() < REAP_INTERVAL))
        {
            return Ok(());
        }
        self.last_reap = Some(Instant::now());
        for (slot, generation) in link.dead_slots()? {
            self.give_back_leases_of(slot, generation)?;
            self.link
                .as_ref()
                .expect("shared")
                .clear_dead_slot(slot, generation);
        }
        Ok(())
    }

    fn give_back_leases_of(&mut self, slot: usize, generation: u64) -> Result<()> {
        for (id, lease) in self.deliveries.leases_of(slot, generation) {
            self.hand_back(id, lease.attempt)?;
        }
        Ok(())
    }

    /// Shared mode, at close: gives back this handle's leases (its guards
    /// can no longer ack) and frees its slot, under the mutex.
    pub(super) fn leave_slot(&mut self) -> Result<()> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        let (slot, generation) = (link.slot(), link.generation());
        let given_back = self.give_back_leases_of(slot, generation);
        self.link.as_ref().expect("shared").unregister();
        given_back
    }

    /// The handles that have the queue open (just this one in exclusive
    /// mode), with the leases each holds. A read: a dead handle's slot and
    /// leases are left for the next write to clear, and not listed.
    pub fn workers(&self) -> Result<Vec<Worker>> {
        let holders = self.deliveries.holders();
        let Some(link) = &self.link else {
            let mut leases: Vec<u64> = holders.into_iter().map(|(id, _)| id).collect();
            leases.sort_unstable();
            return Ok(vec![Worker {
                pid: std::process::id(),
                host: crate::processes::host_name(),
                started: self.opened_at,
                leases,
                this_handle: true,
            }]);
        };
        let workers = link.live_slots()?.into_iter().map(|info| {
            let mut leases: Vec<u64> = holders
                .iter()
                .filter(|(_, holder)| *holder == Some((info.slot, info.generation)))
                .map(|&(id, _)| id)
                .collect();
            leases.sort_unstable();
            Worker {
                pid: info.pid,
                host: info.host,
                started: info.started,
                leases,
                this_handle: info.slot == link.slot(),
            }
        });
        Ok(workers.collect())
    }

    /// Shared mode, while leases are held: when a blocked caller should look
    /// again whether their holders are alive (a dead one's leases come back
    /// with no one to signal it).
    pub fn lease_watch(&self) -> Option<Instant> {
        (self.link.is_some() && self.deliveries.leased_count() > 0)
            .then(|| Instant::now() + WATCH_INTERVAL)
    }
}

/// Mends what a process that died holding the mutex left half done: a
/// segment it made but did not publish, a frame it was copying (cut, a copy
/// kept, as a torn write), a head segment it deleted, a half-made segment
/// file. Marked in the control file while it runs, so that the next holder
/// does it again if this process dies too.
pub(super) fn mend(dir: &QueueDir, state: &State) -> Result<()> {
    state.mending.store(1, Relaxed);
    let mut tail = state.tail.load(Relaxed);
    let mut tail_end = state.tail_end.load(Relaxed) as usize;
    // Segments are renamed into place whole: one that exists was made.
    while dir.segment_path(tail + 1).exists() {
        tail += 1;
        tail_end = SEGMENT_HEADER_LEN;
    }
    cut_torn_tail(dir, tail, tail_end)?;
    let mut head = state.head.load(Relaxed);
    while head < tail && !dir.segment_path(head).exists() {
        head += 1;
    }
    for temp in dir.list()?.temp_files {
        // Segments are made under the mutex, so a segment's temp file is the
        // dead process's; the config's is a joiner's (under the join lock),
        // maybe alive.
        if temp.to_string_lossy().ends_with(".seg.tmp") {
            std::fs::remove_file(&temp).map_err(|e| Error::io(&temp, e))?;
        }
    }
    state.head.store(head, Relaxed);
    state.tail.store(tail, Relaxed);
    state.tail_end.store(tail_end as u64, Relaxed);
    state
        .front_end
        .store(state.front_end.load(Relaxed).max(head), Relaxed);
    state.change.fetch_add(1, Relaxed);
    state.mending.store(0, Relaxed);
    Ok(())
}

/// Zeroes what follows `end` in segment `number` (part of a frame a dead
/// process was copying), keeping a copy in `quarantine/` first, durably.
fn cut_torn_tail(dir: &QueueDir, number: u64, end: usize) -> Result<()> {
    let path = dir.segment_path(number);
    let io = |e| Error::io(&path, e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io)?;
    let len = file.metadata().map_err(io)?.len() as usize;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0).map_err(io)?;
    let torn = nonzero_len(&bytes[end.min(len)..]);
    if torn == 0 {
        return Ok(());
    }
    crate::quarantine::keep_copy(dir, &path, &bytes[..end + torn], end)?;
    file.write_all_at(&vec![0; torn], end as u64).map_err(io)?;
    file.sync_data().map_err(io)
}
