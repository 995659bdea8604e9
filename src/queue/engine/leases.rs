//! Deliveries that can fail: leases, acks, nacks, expiry, cancel.

use std::time::{Duration, Instant};

use super::Engine;
use crate::error::{Error, Result};
use crate::log::format::MarkerType;
use crate::queue::deadline::saturating_after;
use crate::queue::delivery::Lease;

/// A set of record ids, which the queue picks: a fast seeded hash.
type HashSet = std::collections::HashSet<u64, foldhash::fast::RandomState>;

/// What [`Engine::lease_id`] found.
#[derive(Debug)]
pub enum ById<R> {
    /// Leased now: what `read` gave, and the lease.
    Leased(R, Lease),
    /// Leased by someone else: it may come back.
    Busy,
    /// Settled, or never in the queue.
    Gone,
}

/// What [`Engine::unleased_payload`] found.
#[derive(Debug)]
pub enum Unleased<R> {
    /// Unsettled and held by no one: its payload.
    Read(R),
    /// Leased by someone: it may come back.
    Busy,
    /// Settled, or never in the queue.
    Gone,
}

impl Engine {
    /// Leases the next available record for `timeout`: calls `read` on it,
    /// and if that succeeds counts the attempt on disk; returns what `read`
    /// gave and the lease.
    pub fn lease_with<R>(
        &mut self,
        timeout: Duration,
        mut read: impl FnMut(u64, &[u8]) -> Result<R>,
    ) -> Result<Option<(R, u64, Lease)>> {
        self.check_writable()?;
        self.deliveries.room_for_lease()?;
        loop {
            let Some(id) = self.next_available()? else {
                return Ok(None);
            };
            let (segment, index) = self.find(id).expect("available records are mapped");
            let attempts = segment.attempts(index);
            if attempts >= self.max_attempts {
                // Leased that often by handles that never came back (crashes).
                let reason = self.last_reason_or(
                    id,
                    format!("{attempts} attempts, the last ones never ended"),
                );
                self.dead_letter(id, attempts, &reason)?;
                continue;
            }
            let attempt = attempts + 1;
            let item = match read(id, segment.payload(index)) {
                Ok(item) => item,
                Err(Error::Decode { source, .. }) => {
                    // A failed attempt, not a stop: counted on disk, out of
                    // sight for a lease's time (another consumer may read
                    // it), dead-lettered with its bytes once attempts run
                    // out. This call goes on with the next record.
                    self.mark(id, MarkerType::Lease)?;
                    self.deliveries.take(id);
                    let reason = format!("does not decode as the item type: {source}");
                    self.settle_failed_attempt(id, attempt, reason, timeout)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let lease = self.start_lease(id, attempt, timeout)?;
            return Ok(Some((item, id, lease)));
        }
    }

    /// After failed attempt `attempt` of record `id` (leased, or taken just
    /// now): dead-lettered with `reason` if it was the last, else out of
    /// sight for `delay` (available at once for a zero delay), `reason`
    /// kept for its dead letter.
    pub(super) fn settle_failed_attempt(
        &mut self,
        id: u64,
        attempt: u16,
        reason: String,
        delay: Duration,
    ) -> Result<()> {
        if attempt >= self.max_attempts {
            // As in `fail`: the lease ends once the letter is written.
            self.dead_letter(id, attempt, &reason)?;
            self.deliveries.end_lease(id);
            return Ok(());
        }
        self.reasons.insert(id, reason);
        if delay.is_zero() {
            self.deliveries.hand_back(id);
        } else {
            self.deliveries.end_lease(id);
            self.deliveries
                .park(id, attempt, saturating_after(Instant::now(), delay));
        }
        Ok(())
    }

    /// The reason the last failed attempt of `id` gave (as stored by any
    /// handle, else as this one heard it), or `otherwise`.
    fn last_reason_or(&self, id: u64, otherwise: String) -> String {
        let stored = self.stored_reason(id);
        match stored.as_ref().or_else(|| self.reasons.get(&id)) {
            Some(last) => format!("{otherwise}; last failure: {last}"),
            None => otherwise,
        }
    }

    /// Leases up to `max` available records with `read`, each as
    /// [`lease_with`](Self::lease_with) does. An error after the first ends
    /// the batch, which keeps what it leased; the error (which had no
    /// effect) is the next write's.
    pub fn lease_many<R>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut read: impl FnMut(u64, &[u8]) -> Result<R>,
    ) -> Result<Vec<(R, u64, Lease)>> {
        self.take_many(max, |engine| engine.lease_with(timeout, &mut read))
    }

    /// Settles every leased record of `leases` (id and attempt), if every
    /// one of those leases still holds (otherwise it writes nothing), and
    /// counts in `acked` those it settled: a write that fails midway (a
    /// full disk) leaves the ones before it acked.
    pub fn ack(&mut self, leases: &[(u64, u16)], acked: &mut usize) -> Result<()> {
        self.check_refused()?;
        for &(id, attempt) in leases {
            self.current_lease(id, attempt)?;
        }
        // A record named twice would be acked twice: the second is lost.
        if leases.len() > 1 {
            let mut seen = HashSet::with_capacity_and_hasher(leases.len(), Default::default());
            for &(id, attempt) in leases {
                if !seen.insert(id) {
                    return Err(Error::LeaseLost { id, attempt });
                }
            }
        }
        for &(id, _) in leases {
            self.mark(id, MarkerType::Ack)?;
            self.deliveries.end_lease(id);
            *acked += 1;
        }
        Ok(())
    }

    /// Hands leased record `id` back as if the lease with `attempt` had not
    /// happened: a release marker takes its attempt back.
    pub fn release(&mut self, id: u64, attempt: u16) -> Result<()> {
        self.check_refused()?;
        self.current_lease(id, attempt)?;
        self.mark(id, MarkerType::Release)?;
        self.deliveries.hand_back(id);
        Ok(())
    }

    /// Hands leased record `id` back: available again at its place in the
    /// order, or dead-lettered once it has had `max_attempts` attempts.
    pub fn nack(&mut self, id: u64, attempt: u16) -> Result<()> {
        self.check_refused()?;
        self.current_lease(id, attempt)?;
        self.hand_back(id, attempt)
    }

    /// Hands leased record `id` back after a failure: dead-lettered with
    /// `reason` if this was its last attempt, else out of sight for
    /// `delay` (available at once for zero), `reason` kept for its dead
    /// letter. Returns whether it went to the dead letters.
    pub fn nack_with(
        &mut self,
        id: u64,
        attempt: u16,
        reason: &str,
        delay: Duration,
    ) -> Result<bool> {
        self.check_refused()?;
        self.current_lease(id, attempt)?;
        let dead = attempt >= self.max_attempts;
        if !dead && !reason.is_empty() {
            // On disk before anything else: an error leaves the lease as it was.
            self.store_reason(id, reason)?;
        }
        self.settle_failed_attempt(id, attempt, reason.to_string(), delay)?;
        Ok(dead)
    }

    /// Extends the lease of `id` to `timeout` from now.
    pub fn touch(&mut self, id: u64, attempt: u16, timeout: Duration) -> Result<()> {
        self.current_lease(id, attempt)?;
        self.deliveries
            .extend_lease(id, saturating_after(Instant::now(), timeout));
        Ok(())
    }

    /// Moves leased record `id` to the dead letters at once.
    pub fn fail(&mut self, id: u64, attempt: u16, reason: &str) -> Result<()> {
        self.check_refused()?;
        self.current_lease(id, attempt)?;
        // The lease ends only once the letter is written and the record
        // settled: a failure (or, shared, a crash) in between leaves it
        // leased, never unleased and undelivered.
        self.dead_letter(id, attempt, reason)?;
        self.deliveries.end_lease(id);
        Ok(())
    }

    /// Leases pending record `id`, out of order, for `timeout`: calls
    /// `read` on it and returns what it gave with the lease. Unlike
    /// [`lease_with`](Self::lease_with) it never dead-letters: the caller
    /// chose the record and decides what its attempts mean.
    pub fn lease_id<R>(
        &mut self,
        id: u64,
        timeout: Duration,
        read: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<ById<R>> {
        self.check_writable()?;
        self.deliveries.room_for_lease()?;
        self.expire_leases()?;
        if self.deliveries.is_leased(id) {
            return Ok(ById::Busy);
        }
        if !self.reach(id)? {
            return Ok(ById::Gone);
        }
        let (segment, index) = self.find(id).expect("reached");
        if segment.is_settled(index) {
            return Ok(ById::Gone);
        }
        let attempt = segment.attempts(index).saturating_add(1);
        let item = read(segment.payload(index))?;
        let lease = self.start_lease(id, attempt, timeout)?;
        Ok(ById::Leased(item, lease))
    }

    /// The payload of record `id` if it is unsettled and no one holds it,
    /// without leasing it: for a handle alone on its
    /// queue that moves records by id and ends them with
    /// [`cancel`](Self::cancel). Maps segments up to it; writes nothing.
    pub fn unleased_payload(&mut self, id: u64) -> Result<Unleased<&[u8]>> {
        if self.deliveries.is_leased(id) {
            return Ok(Unleased::Busy);
        }
        if !self.reach(id)? {
            return Ok(Unleased::Gone);
        }
        let (segment, index) = self.find(id).expect("reached");
        Ok(match segment.is_settled(index) {
            true => Unleased::Gone,
            false => Unleased::Read(segment.payload(index)),
        })
    }

    /// Leases record `id` for attempt `attempt`: its lease marker, then
    /// its place among the deliveries, for `timeout`.
    fn start_lease(&mut self, id: u64, attempt: u16, timeout: Duration) -> Result<Lease> {
        self.mark(id, MarkerType::Lease)?;
        let now = Instant::now();
        let lease = Lease {
            attempt,
            expires: saturating_after(now, timeout),
            parked: false,
            since: now,
        };
        self.deliveries.start_lease(id, lease);
        Ok(lease)
    }

    /// Whether record `id` is in the queue and not settled (leased counts
    /// as not settled). A read: segments between the front run and the tail
    /// hold no markers, so a record there is unsettled without reading it.
    pub fn is_unsettled(&self, id: u64) -> bool {
        if id < self.head().header.first_id || id >= self.tail().end_id() {
            return false;
        }
        self.find(id)
            .is_none_or(|(segment, index)| !segment.is_settled(index))
    }

    /// Whether record `id` is leased now (a lease past its time is not). A read.
    pub fn is_held(&self, id: u64) -> bool {
        self.deliveries.is_held(id, Instant::now())
    }

    /// Whether record `id` is leased now in its attempt `attempt` (a lease
    /// past its time, or one a dead process held, is not): what a jobs
    /// queue's limit hold goes by. Gives back dead processes' leases first.
    pub fn holds_lease(&mut self, id: u64, attempt: u16) -> Result<bool> {
        self.reap_dead_workers(super::processes::Reap::Sometimes)?;
        Ok(self.held_attempt(id) == Some(attempt))
    }

    /// The attempt of record `id`'s lease if it is leased now. A read.
    pub fn held_attempt(&self, id: u64) -> Option<u16> {
        self.deliveries
            .lease(id)
            .filter(|lease| lease.expires > Instant::now() && !lease.parked)
            .map(|lease| lease.attempt)
    }

    /// Item `id`'s lease, if it is leased now (not parked): its start
    /// and end among the rest.
    pub fn held_lease(&self, id: u64) -> Option<Lease> {
        self.deliveries
            .lease(id)
            .filter(|lease| lease.expires > Instant::now() && !lease.parked)
    }

    /// The id the next appended record gets.
    pub fn end_id(&self) -> u64 {
        self.tail().end_id()
    }

    /// Maps segments up to the one holding `id`; false if `id` is before
    /// the head or after the tail.
    fn reach(&mut self, id: u64) -> Result<bool> {
        if id < self.head().header.first_id || id >= self.tail().end_id() {
            return Ok(false);
        }
        while self.find(id).is_none() {
            if !self.extend_front()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Settles pending record `id`, which no one holds.
    pub fn cancel(&mut self, id: u64) -> Result<()> {
        self.check_writable()?;
        self.expire_leases()?;
        match self.deliveries.lease(id) {
            // Waiting out a delay, held by no one: cancelled like a pending one.
            Some(lease) if lease.parked => {
                self.deliveries.end_lease(id);
            }
            Some(_) => return Err(Error::Leased { id }),
            None => {}
        }
        self.reach(id)?;
        match self.find(id) {
            Some((segment, index)) if !segment.is_settled(index) => {}
            _ => return Err(Error::NotPending { id }),
        }
        self.mark(id, MarkerType::Ack)?;
        self.deliveries.take(id);
        Ok(())
    }

    /// When the nearest lease ends, if any is held.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.deliveries.next_expiry()
    }

    /// Ends every lease as if its time were up, and settles them (a test seam).
    #[cfg(feature = "fault-injection")]
    pub fn expire_leases_now(&mut self) -> Result<()> {
        self.deliveries.expire_all();
        self.expire_leases()
    }

    /// Records leased now; a lease past its time is not counted (a read:
    /// it is handed back by the next write).
    pub fn leased_count(&self) -> usize {
        self.deliveries.held_count(Instant::now())
    }

    pub(super) fn expire_leases(&mut self) -> Result<()> {
        if self.deliveries.leased_count() == 0 {
            return Ok(());
        }
        for (id, lease) in self.deliveries.expired(Instant::now()) {
            self.hand_back(id, lease.attempt)?;
        }
        Ok(())
    }

    pub(super) fn hand_back(&mut self, id: u64, attempt: u16) -> Result<()> {
        if self
            .find(id)
            .is_none_or(|(segment, index)| segment.is_settled(index))
        {
            // Shared: settled by a process killed before it ended the lease.
            self.deliveries.end_lease(id);
            return Ok(());
        }
        if attempt >= self.max_attempts {
            let reason = self.last_reason_or(id, format!("not acked after {attempt} attempts"));
            // As in `fail`: the lease ends once the letter is written.
            self.dead_letter(id, attempt, &reason)?;
            self.deliveries.end_lease(id);
            return Ok(());
        }
        self.deliveries.hand_back(id);
        Ok(())
    }

    pub(super) fn current_lease(&self, id: u64, attempt: u16) -> Result<()> {
        match self.deliveries.lease(id) {
            Some(lease)
                if lease.attempt == attempt && lease.expires > Instant::now() && !lease.parked =>
            {
                Ok(())
            }
            _ => Err(Error::LeaseLost { id, attempt }),
        }
    }
}
