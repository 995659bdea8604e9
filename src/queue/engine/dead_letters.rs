//! The dead letters: moving an item there, listing, requeueing, purging.

use std::ops::ControlFlow;

use super::{Engine, OpenMode};
use crate::error::{Error, Result};
use crate::log::format::MarkerType;
use crate::log::recovery::OpenReport;
use crate::options::{Durability, Options};
use crate::queue::dead::{DeadLetter, DEAD_LETTER_CODEC};

impl Engine {
    /// The dead letters, oldest first (none if no item ever failed).
    pub fn dead_letter_list(&mut self) -> Result<Vec<DeadLetter>> {
        self.dead_letters_up_to(usize::MAX)
    }

    /// The first `max` dead letters, oldest first.
    pub fn dead_letters_up_to(&mut self, max: usize) -> Result<Vec<DeadLetter>> {
        let Some(dead) = self.existing_dead_letters()? else {
            return Ok(Vec::new());
        };
        let mut letters = Vec::new();
        dead.visit_pending(|id, _, _, bytes| {
            if letters.len() >= max {
                return ControlFlow::Break(());
            }
            letters.push(DeadLetter::decode(id, bytes));
            ControlFlow::Continue(())
        })?;
        letters.into_iter().collect()
    }

    /// How many dead letters there are.
    pub fn dead_letter_count(&mut self) -> Result<u64> {
        Ok(self.existing_dead_letters()?.map_or(0, |dead| dead.len()))
    }

    /// Puts dead letter `id` back at the end of the queue (attempts start
    /// over); returns the item's new id.
    pub fn requeue_dead(&mut self, id: u64) -> Result<u64> {
        self.requeue_dead_with(id, |payload| payload)
    }

    /// [`requeue_dead`](Self::requeue_dead), putting back what `rewrite`
    /// makes of the item's bytes (the jobs layer resets a job's attempts).
    pub fn requeue_dead_with(
        &mut self,
        id: u64,
        rewrite: impl FnOnce(Vec<u8>) -> Vec<u8>,
    ) -> Result<u64> {
        let dead = self
            .existing_dead_letters()?
            .ok_or(Error::NotPending { id })?;
        let mut payload = None;
        dead.visit_pending(|at, _, _, bytes| {
            if at == id {
                payload = Some(DeadLetter::decode(id, bytes).map(|letter| letter.payload));
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        let payload = rewrite(payload.ok_or(Error::NotPending { id })??);
        dead.check_writable()?;
        // Durable in the queue before the letter is removed, in every mode:
        // a power loss in between leaves the item in both places, never in
        // neither (Turbo's page writeback keeps no order between files).
        let new_id = self.append_with(|out| {
            out.extend_from_slice(&payload);
            Ok(())
        })?;
        self.sync()?;
        // The item is back: the call has had its effect, so a failure to
        // remove the letter (left in both places) is the next write's error,
        // and a caller does not requeue it twice.
        let safe = self.durability == Durability::Safe;
        let dead = self.dead_letters()?;
        let removed = dead
            .cancel(id)
            .and_then(|()| if safe { dead.sync() } else { Ok(()) });
        if let Err(e) = removed {
            self.defer(e);
        }
        Ok(new_id)
    }

    /// Removes every dead letter; returns how many there were.
    pub fn purge_dead(&mut self) -> Result<u64> {
        let safe = self.durability == Durability::Safe;
        let Some(dead) = self.existing_dead_letters()? else {
            return Ok(0);
        };
        // An error after some letters were removed is the next write's.
        let purged = dead.pop_many(usize::MAX, |_, _| Ok(()))?.len() as u64;
        let synced = if safe { dead.sync() } else { Ok(()) };
        let left_over = dead.deferred.take();
        synced?;
        if let Some(e) = left_over {
            self.defer(e);
        }
        Ok(purged)
    }

    pub(super) fn existing_dead_letters(&mut self) -> Result<Option<&mut Engine>> {
        if self.dead.is_none() && !self.dir.dead_letter_path().exists() {
            return Ok(None);
        }
        self.dead_letters().map(Some)
    }

    /// Copies record `id` to the dead letters with `reason`, then settles it here.
    pub(super) fn dead_letter(&mut self, id: u64, attempts: u16, reason: &str) -> Result<()> {
        let (segment, index) = self.find(id).expect("leased records are mapped");
        let letter = DeadLetter::encode(id, attempts, reason, segment.payload(index));
        // Written and synced before the marker, in every mode: a power loss
        // in between leaves the record in both places, never in neither
        // (Turbo's page writeback keeps no order between files).
        let dead = self.dead_letters()?;
        dead.append_with(|out| {
            out.extend_from_slice(&letter);
            Ok(())
        })?;
        let synced = dead.sync();
        self.refuse_on_sync_error(synced)?;
        self.mark(id, MarkerType::Dead)
    }

    /// The dead-letter queue, opened (or created) on first use.
    pub(super) fn dead_letters(&mut self) -> Result<&mut Engine> {
        self.open_dead_letters(&mut OpenReport::default())
    }

    /// [`dead_letters`](Self::dead_letters), noting what its open mended in
    /// `report`. The queue's open calls it when `dead/` exists, so that the
    /// reads that list letters never open (and mend) anything themselves.
    pub(super) fn open_dead_letters(&mut self, report: &mut OpenReport) -> Result<&mut Engine> {
        if self.dead.is_none() {
            let options = Options::new()
                .durability(self.durability)
                .max_item_bytes(crate::log::format::MAX_RECORD_PAYLOAD)
                .shared(self.shared);
            let path = self.dir.dead_letter_path();
            let (mut dead, opened) =
                Engine::open(&path, &options, DEAD_LETTER_CODEC, OpenMode::OpenOrCreate)?;
            // Opened during a call: held like this queue until it ends.
            dead.enter_like_parent(self.held)?;
            report.repairs.extend(opened.repairs);
            report.removed_temp_files.extend(opened.removed_temp_files);
            report.deleted_segments.extend(opened.deleted_segments);
            self.dead = Some(Box::new(dead));
        }
        Ok(self.dead.as_mut().expect("just opened"))
    }
}
