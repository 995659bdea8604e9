//! Who holds which record: leases, records handed back, and the cursor of
//! records never delivered. In memory only: after a reopen every record
//! that is not settled is available again (its attempts are on disk).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// A record handed to a consumer until acked, nacked or expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The delivery attempt this lease is (1 for the first); also the
    /// token a guard must show to ack, nack or touch.
    pub attempt: u16,
    /// When the record becomes available again if not acked.
    pub expires: Instant,
}

/// The delivery state of one queue.
#[derive(Debug, Default)]
pub struct Deliveries {
    leases: HashMap<u64, Lease>,
    /// Unsettled records whose lease ended (nack or expiry): available
    /// again, before any record never delivered, oldest first.
    returned: BTreeSet<u64>,
    /// Every record before this id was settled, is leased, or is in
    /// `returned`; from here on, records were never delivered this session.
    fresh: u64,
}

impl Deliveries {
    /// The oldest available record handed back, if any.
    pub fn first_returned(&self) -> Option<u64> {
        self.returned.first().copied()
    }

    /// The cursor of records never delivered: every record before it is
    /// settled, leased or handed back.
    pub fn fresh(&self) -> u64 {
        self.fresh
    }

    /// The cursor of records never delivered, moved up to `floor` if below.
    pub fn fresh_from(&mut self, floor: u64) -> u64 {
        self.fresh = self.fresh.max(floor);
        self.fresh
    }

    /// Moves the cursor past `id`, which is not available.
    pub fn skip(&mut self, id: u64) {
        self.fresh = self.fresh.max(id + 1);
    }

    pub fn is_leased(&self, id: u64) -> bool {
        self.leases.contains_key(&id)
    }

    pub fn lease(&self, id: u64) -> Option<Lease> {
        self.leases.get(&id).copied()
    }

    pub fn leased_count(&self) -> usize {
        self.leases.len()
    }

    /// Records `id` as taken (leased, or settled at once): no longer available.
    pub fn take(&mut self, id: u64) {
        self.returned.remove(&id);
        self.skip_if_fresh(id);
    }

    pub fn start_lease(&mut self, id: u64, lease: Lease) {
        self.take(id);
        self.leases.insert(id, lease);
    }

    pub fn extend_lease(&mut self, id: u64, expires: Instant) {
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.expires = expires;
        }
    }

    /// Ends the lease of `id`; the record is settled or about to be.
    pub fn end_lease(&mut self, id: u64) -> Option<Lease> {
        self.leases.remove(&id)
    }

    /// Ends the lease of `id` and makes the record available again.
    pub fn hand_back(&mut self, id: u64) {
        self.leases.remove(&id);
        self.returned.insert(id);
    }

    /// Leases whose time is up at `now`, oldest id first.
    pub fn expired(&self, now: Instant) -> Vec<(u64, Lease)> {
        let mut expired: Vec<_> = self
            .leases
            .iter()
            .filter(|(_, lease)| lease.expires <= now)
            .map(|(&id, &lease)| (id, lease))
            .collect();
        expired.sort_unstable_by_key(|&(id, _)| id);
        expired
    }

    /// Makes every lease end now (a test seam: expiry without waiting).
    #[cfg(feature = "fault-injection")]
    pub fn expire_all(&mut self) {
        let now = Instant::now();
        for lease in self.leases.values_mut() {
            lease.expires = now;
        }
    }

    /// Whether `id` is held by a lease that has not run out at `now`.
    pub fn is_held(&self, id: u64, now: Instant) -> bool {
        self.leases
            .get(&id)
            .is_some_and(|lease| lease.expires > now)
    }

    /// Leases not run out at `now`.
    pub fn held_count(&self, now: Instant) -> usize {
        self.leases.values().filter(|l| l.expires > now).count()
    }

    /// Whether `id`'s lease ran out at `now` after its last allowed attempt:
    /// the next write moves it to the dead letters, so reads leave it out.
    pub fn is_doomed(&self, id: u64, now: Instant, max_attempts: u16) -> bool {
        self.leases
            .get(&id)
            .is_some_and(|l| l.expires <= now && l.attempt >= max_attempts)
    }

    /// How many leases [`is_doomed`](Self::is_doomed) at `now`.
    pub fn doomed_count(&self, now: Instant, max_attempts: u16) -> usize {
        self.leases
            .values()
            .filter(|l| l.expires <= now && l.attempt >= max_attempts)
            .count()
    }

    /// The oldest record available at `now` as a read sees it, among those
    /// ever delivered: handed back, or with a lease run out that the next
    /// write hands back.
    pub fn first_available_again(&self, now: Instant, max_attempts: u16) -> Option<u64> {
        let expired = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now && l.attempt < max_attempts)
            .map(|(&id, _)| id)
            .min();
        match (self.first_returned(), expired) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the nearest lease ends.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.leases.values().map(|lease| lease.expires).min()
    }

    fn skip_if_fresh(&mut self, id: u64) {
        if id == self.fresh {
            self.fresh += 1;
        }
    }
}
