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
use crate::log::layout::QueueDir;
use crate::log::recovery::{nonzero_len, replay};
use crate::log::segment::Segment;
use crate::queue::processes::{ProcessLink, SharedCommit, State, Waker};
use crate::queue::workers::Worker;

/// How often a call that finds an item checks whether lease holders died
/// (one that finds none always does, while leases are held).
const REAP_INTERVAL: Duration = Duration::from_millis(20);

/// When [`Engine::reap_dead_workers`] looks at the process slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reap {
    /// At an open: always.
    Always,
    /// A call that found an item: while leases are held, every
    /// [`REAP_INTERVAL`] (a check costs a system call per process).
    Sometimes,
    /// A call about to find nothing: while leases are held.
    BeforeNone,
}
/// How often a blocked caller wakes to do so while leases are held.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

impl Engine {
    /// Shared mode: the group commit shared with every process.
    pub fn shared_commit(&self) -> Option<SharedCommit> {
        self.link.as_ref().map(|link| link.commit(&self.dir))
    }

    /// Makes the dead letters' writes durable (shared mode's `sync`: the
    /// queue's own files are the shared group commit's).
    pub fn sync_dead_letters(&mut self) -> Result<()> {
        let synced = self.dead.as_mut().map_or(Ok(()), |dead| dead.sync());
        if let Err(e) = &synced {
            self.refuse_after_sync(e);
        }
        synced
    }

    /// Shared mode: the futex word blocked callers sleep on.
    pub fn waker(&self) -> Option<Waker> {
        self.link.as_ref().map(ProcessLink::waker)
    }

    /// Shared mode: stops the writes of every process (an fsync failed, so
    /// the page cache they share holds bytes no one can call durable).
    pub(super) fn refuse_everywhere(&self) {
        if let Some(link) = &self.link {
            link.state().refused.store(1, Relaxed);
        }
    }

    /// Before a call: takes the cross-process mutex and brings this view up
    /// to date (the dead letters' too, once open). Nothing in exclusive mode.
    /// A call that `writes` first mends what a process that died holding
    /// the mutex left; a read leaves that to the next write (reads never
    /// write), reading only the whole frames others published.
    ///
    /// On error the mutex is released again and nothing is published.
    #[inline]
    pub fn enter(&mut self, writes: bool) -> Result<()> {
        if self.link.is_none() {
            return Ok(());
        }
        self.enter_shared(writes)
    }

    fn enter_shared(&mut self, writes: bool) -> Result<()> {
        // A dead holder is recorded in `mending` by the lock itself.
        self.link.as_ref().expect("shared").lock()?;
        self.held = true;
        // A panic while catching up must not leave the mutex held: every
        // later call of every process (this one's drop included) would
        // wait for it for ever.
        let settled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.settle_in(writes)));
        match settled {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.unlock_unpublished();
                Err(e)
            }
            Err(panic) => {
                self.unlock_unpublished();
                std::panic::resume_unwind(panic)
            }
        }
    }

    fn settle_in(&mut self, writes: bool) -> Result<()> {
        let state = self.link.as_ref().expect("shared").state();
        if writes && state.mending.load(Relaxed) != 0 {
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
            dead.enter(writes)?;
        }
        Ok(())
    }

    /// Releases the mutexes (this queue's and its dead letters') without
    /// publishing: after a failed `enter`, whose view may be half caught up.
    fn unlock_unpublished(&mut self) {
        if let Some(dead) = &mut self.dead {
            dead.unlock_unpublished();
        }
        if std::mem::take(&mut self.held) {
            // Looked at again from scratch by the next call.
            let link = self.link.as_mut().expect("held only in shared mode");
            link.seen = link.seen.wrapping_sub(1);
            link.unlock();
        }
    }

    /// After a call: publishes what it changed, wakes blocked callers of
    /// every process if anything did, and releases the mutex.
    #[inline]
    pub fn leave(&mut self) {
        if self.link.is_none() {
            return;
        }
        self.leave_shared();
    }

    fn leave_shared(&mut self) {
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
            self.enter(true)?;
        }
        Ok(())
    }

    /// Reads what other processes changed since this view last held the
    /// mutex: segments they created and retired, how far deliveries reached,
    /// and the frames they wrote. Segments are opened before any is let go,
    /// so a failure (a damaged segment) leaves the view as it was or only
    /// partly advanced, never without a head or a tail.
    fn catch_up(&mut self) -> Result<()> {
        let link = self.link.as_ref().expect("shared");
        let state = link.state();
        let change = state.change.load(Relaxed);
        if change == link.seen {
            self.written_at_enter = self.written;
            return Ok(());
        }
        let (head, tail, tail_end, front_end, fresh) = (
            state.head.load(Relaxed),
            state.tail.load(Relaxed),
            state.tail_end.load(Relaxed) as usize,
            state.front_end.load(Relaxed),
            state.fresh.load(Relaxed),
        );
        if tail > self.tail().header.number {
            // Its frames up to `tail_end` were published with it.
            let new_tail = Segment::attach_published(&self.dir, tail, tail_end)?;
            // Sealed by another process: its frames are whole to the end.
            self.tail_mut().sealed_elsewhere();
            if self.tail.is_none() {
                // It stays mapped, the last of the front run: read to its
                // end. (One that is let go below is not read first.)
                self.tail_mut().catch_up()?;
            }
            // Outside the front run it is a middle segment now, unmapped
            // (the front run below maps it again if deliveries reached it).
            drop(self.tail.replace(new_tail));
        }
        if self.head().header.number < head {
            let tail_number = self.tail().header.number;
            let retired = self.front.iter().filter(|s| s.header.number < head).count();
            if retired == self.front.len() {
                // Every mapped front segment is gone: the head is mapped anew.
                let head_segment = match self.tail.take_if(|t| t.header.number == head) {
                    Some(tail) => tail,
                    None => {
                        let sealed = sealed_records(&self.dir, head, tail_number)?;
                        Segment::attach(&self.dir, head, sealed)?
                    }
                };
                self.front.clear();
                self.front.push_back(head_segment);
            } else {
                // Deleted by the processes that retired them; the mappings go.
                self.front.drain(..retired);
            }
        }
        while self.front.back().expect("never empty").header.number < front_end {
            if !self.extend_front()? {
                break;
            }
        }
        let front_len = self.front.len();
        for (at, segment) in self.front.iter_mut().enumerate() {
            // The last of the front run is the tail when `tail` is `None`.
            if at + 1 == front_len && self.tail.is_none() {
                segment.catch_up_published(tail_end)?;
            } else {
                segment.catch_up()?;
            }
        }
        if let Some(segment) = &mut self.tail {
            segment.catch_up_published(tail_end)?;
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
            dead.enter(true)?;
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
            let slot = self.link.as_ref().expect("shared").slot();
            self.give_back_leases_of(slot, generation)?;
        }
        self.reap_dead_workers(Reap::Always).map(drop)
    }

    /// Shared mode: gives back the leases of handles that died (their
    /// attempts count: one on its last attempt goes to the dead letters)
    /// and frees their slots. Checked at most every [`REAP_INTERVAL`]
    /// unless `now`, and only while leases are held.
    #[inline]
    pub(super) fn reap_dead_workers(&mut self, when: Reap) -> Result<usize> {
        if self.link.is_none() {
            return Ok(0);
        }
        self.reap_dead_workers_shared(when)
    }

    fn reap_dead_workers_shared(&mut self, when: Reap) -> Result<usize> {
        let link = self.link.as_ref().expect("shared");
        let due = match when {
            Reap::Always => true,
            Reap::BeforeNone => self.deliveries.leased_count() > 0,
            Reap::Sometimes => {
                self.deliveries.leased_count() > 0
                    && self
                        .last_reap
                        .is_none_or(|at| at.elapsed() >= REAP_INTERVAL)
            }
        };
        if !due {
            return Ok(0);
        }
        self.last_reap = Some(Instant::now());
        let dead = if when == Reap::Always {
            link.dead_slots()?
        } else {
            // Only the holders of leases matter here: one system call per
            // process holding some, not per process.
            let mut holders: Vec<(usize, u64)> = self
                .deliveries
                .holders()
                .into_iter()
                .filter_map(|(_, holder)| holder)
                .filter(|&(slot, _)| slot != link.slot())
                .collect();
            holders.sort_unstable();
            holders.dedup();
            let mut dead = Vec::new();
            for (slot, generation) in holders {
                // A live slot in a later life is not the holder either.
                if link.slot_generation(slot) != generation || !link.is_alive(slot)? {
                    dead.push((slot, generation));
                }
            }
            dead
        };
        let mut given_back = 0;
        for (slot, generation) in dead {
            given_back += self.give_back_leases_of(slot, generation)?;
            self.link
                .as_ref()
                .expect("shared")
                .clear_dead_slot(slot, generation);
        }
        Ok(given_back)
    }

    fn give_back_leases_of(&mut self, slot: usize, generation: u64) -> Result<usize> {
        let leases = self.deliveries.leases_of(slot, generation);
        for &(id, lease) in &leases {
            self.hand_back(id, lease.attempt)?;
        }
        Ok(leases.len())
    }

    /// Shared mode, at close: gives back this handle's leases (its guards
    /// can no longer ack) and frees its slot, under the mutex.
    pub(super) fn leave_slot(&mut self) -> Result<()> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        let (slot, generation) = (link.slot(), link.generation());
        self.give_back_leases_of(slot, generation)?;
        // Only once its leases are back: else the slot stays taken, and the
        // others give them back when they find its holder gone.
        self.link.as_ref().expect("shared").unregister();
        Ok(())
    }

    /// The handles that have the queue open (just this one in exclusive
    /// mode), with the leases each holds. A read: a dead handle's slot and
    /// leases are left for the next write to clear, and not listed.
    pub fn workers(&self) -> Result<Vec<Worker>> {
        let holders = self.deliveries.holders_now();
        let Some(link) = &self.link else {
            let mut leases: Vec<u64> = holders.into_iter().map(|(id, _)| id).collect();
            leases.sort_unstable();
            return Ok(vec![Worker {
                pid: std::process::id(),
                host: crate::queue::processes::host_name(),
                started: self.opened_at,
                leases,
                this_handle: true,
                name: self.worker_name.clone(),
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
                name: info.name,
            }
        });
        Ok(workers.collect())
    }

    /// Names the worker this handle leases under (`""`: none), for the
    /// workers view of this handle and, in shared mode, of every other.
    pub fn set_worker_name(&mut self, name: &str) {
        if let Some(link) = &self.link {
            link.set_name(name);
        }
        self.worker_name = (!name.is_empty()).then(|| name.to_owned());
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
/// segment it made but did not publish, a frame it was copying into the
/// tail (cut after the last whole frame, a copy kept, as an open cuts a
/// torn write; whole frames stay, as a kill in exclusive mode leaves them),
/// a head segment it deleted, a half-made segment file. Marked in the
/// control file while it runs, so that the next writer does it again if
/// this process dies too.
pub(super) fn mend(dir: &QueueDir, state: &State) -> Result<()> {
    state.mending.store(1, Relaxed);
    let mut tail = state.tail.load(Relaxed);
    // Segments are renamed into place whole: one that exists was made.
    while dir.segment_path(tail + 1).exists() {
        tail += 1;
    }
    let tail_end = match cut_torn_tail(dir, tail) {
        Ok(end) => end,
        Err(e) => {
            // Its bytes may be in no state a later fsync could vouch for.
            state.refused.store(1, Relaxed);
            return Err(e);
        }
    };
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
    // What it wrote may not be among the segments a sync would cover.
    crate::queue::processes::all_dirty(state, head, tail);
    // The dead process may have written and not counted leases.
    state.lease_count.store(u64::MAX / 2, Relaxed);
    state.lease_floor.store(0, Relaxed);
    // And it may have ended a lease, or taken a record, whose marker it
    // never wrote: deliveries look again from the head.
    state.fresh.store(0, Relaxed);
    state.change.fetch_add(1, Relaxed);
    state.mending.store(0, Relaxed);
    Ok(())
}

/// Zeroes what follows the last whole frame of segment `number` (part of
/// a frame a dead process was copying), keeping a copy in `quarantine/`
/// first, durably; returns where the whole frames end.
fn cut_torn_tail(dir: &QueueDir, number: u64) -> Result<usize> {
    let path = dir.segment_path(number);
    let io = |e| Error::io(&path, e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io)?;
    let bytes = std::fs::read(&path).map_err(io)?;
    let header = crate::log::segment::check_header(&path, &bytes, number)?;
    let end = replay(&bytes, header.max_records).end;
    let torn = nonzero_len(&bytes[end..]);
    if torn > 0 {
        crate::log::quarantine::keep_copy(dir, &path, &bytes[..end + torn], end)?;
        file.write_all_at(&vec![0; torn], end as u64).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    Ok(end)
}
