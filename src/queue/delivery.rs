//! Who holds which record: leases, records handed back, and the cursor of
//! records never delivered. In memory only (in shared mode, the leases are
//! in the control file, which all processes see, and a record handed back
//! moves the cursor back to it): after a reopen every record that is not
//! settled is available again (its attempts are on disk).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use crate::error::Result;
use crate::queue::processes::{
    from_monotonic, to_monotonic, LeaseTable, MonotonicNow, SharedLease, PARKED,
};

/// A record handed to a consumer until acked, nacked or expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The delivery attempt this lease is (1 for the first); also the
    /// token a guard must show to ack, nack or touch.
    pub attempt: u16,
    /// When the record becomes available again if not acked.
    pub expires: Instant,
    /// Held by no one: a nack with a delay (or a record that did not
    /// decode) keeps the record out of sight until `expires`.
    pub parked: bool,
    /// When the lease began; a touch keeps it (a parked record's: when it
    /// was parked).
    pub since: Instant,
}

/// The delivery state of one queue.
#[derive(Debug, Default)]
pub struct Deliveries {
    /// Keyed by record id, which the queue picks: a fast seeded hash
    /// (SipHash was a tenth of a lease and ack).
    leases: HashMap<u64, Lease, foldhash::fast::RandomState>,
    /// Unsettled records whose lease ended (nack or expiry): available
    /// again, before any record never delivered, oldest first.
    returned: BTreeSet<u64>,
    /// Every record before this id was settled, is leased, or is in
    /// `returned`; from here on, records were never delivered this session.
    fresh: u64,
    /// Shared mode: the leases of every process (`leases` and `returned`
    /// stay empty).
    table: Option<LeaseTable>,
    /// Exclusive mode: no lease in `leases` ends before this (`None`: not
    /// known), so a write need not look at every lease for expired ones.
    floor: std::cell::Cell<Option<Instant>>,
}

fn to_lease(shared: SharedLease) -> Lease {
    // One clock read for both times: a lease is looked up on every ack.
    let clock = MonotonicNow::now();
    Lease {
        attempt: shared.attempt,
        expires: clock.instant_of(shared.expires),
        parked: shared.generation == PARKED,
        since: clock.instant_of(shared.started),
    }
}

impl Deliveries {
    /// Shared mode: leases are kept in `table`, where every process sees them.
    pub fn share(&mut self, table: LeaseTable) {
        self.table = Some(table);
    }

    /// Shared mode: the cursor as the control file has it.
    pub fn set_fresh(&mut self, fresh: u64) {
        self.fresh = fresh;
    }

    /// `Err` if no lease can be added now (the shared table is full); checked
    /// before the lease marker is written.
    pub fn room_for_lease(&self) -> Result<()> {
        self.table.as_ref().map_or(Ok(()), LeaseTable::room)
    }

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
        match &self.table {
            Some(table) => table.get(id).is_some(),
            None => self.leases.contains_key(&id),
        }
    }

    pub fn lease(&self, id: u64) -> Option<Lease> {
        match &self.table {
            Some(table) => table.get(id).map(to_lease),
            None => self.leases.get(&id).copied(),
        }
    }

    pub fn leased_count(&self) -> usize {
        match &self.table {
            Some(table) => table.count() as usize,
            None => self.leases.len(),
        }
    }

    /// Records `id` as taken (leased, or settled at once): no longer available.
    pub fn take(&mut self, id: u64) {
        self.returned.remove(&id);
        self.skip_if_fresh(id);
    }

    /// Records the lease of `id` (checked by [`room_for_lease`](Self::room_for_lease)).
    pub fn start_lease(&mut self, id: u64, lease: Lease) {
        self.take(id);
        match &self.table {
            Some(table) => {
                let clock = MonotonicNow::now();
                let (since, expires) = (clock.nanos_of(lease.since), clock.nanos_of(lease.expires));
                table.insert(id, lease.attempt, expires, since);
            }
            None => {
                self.lower_floor(lease.expires);
                self.leases.insert(id, lease);
            }
        }
    }

    /// Keeps `id` (whose lease just ended, or that was just taken) out of
    /// sight until `until`, held by no one; then it is handed back like
    /// an expired lease of `attempt`.
    pub fn park(&mut self, id: u64, attempt: u16, until: Instant) {
        self.take(id);
        match &self.table {
            Some(table) => table.insert_parked(id, attempt, to_monotonic(until)),
            None => {
                self.lower_floor(until);
                self.leases.insert(
                    id,
                    Lease {
                        attempt,
                        expires: until,
                        parked: true,
                        since: until,
                    },
                );
            }
        }
    }

    pub fn extend_lease(&mut self, id: u64, expires: Instant) {
        match &self.table {
            Some(table) => table.set_expiry(id, to_monotonic(expires)),
            None => {
                if let Some(lease) = self.leases.get_mut(&id) {
                    lease.expires = expires;
                    self.lower_floor(expires);
                }
            }
        }
    }

    /// Ends the lease of `id`; the record is settled or about to be.
    pub fn end_lease(&mut self, id: u64) -> Option<Lease> {
        match &self.table {
            Some(table) => table.remove(id).map(to_lease),
            None => self.leases.remove(&id),
        }
    }

    /// Ends the lease of `id` and makes the record available again.
    pub fn hand_back(&mut self, id: u64) {
        match &self.table {
            Some(table) => {
                table.remove(id);
                // Every record before the cursor is settled or leased: it
                // moves back, and the next delivery finds this one first.
                self.fresh = self.fresh.min(id);
            }
            None => {
                self.leases.remove(&id);
                self.returned.insert(id);
            }
        }
    }

    /// Every lease as (id, lease), in no order. Shared mode reads the
    /// table only when some lease may have run out by `now` (or always,
    /// without `now`).
    fn all_leases(&self, now: Option<Instant>) -> Vec<(u64, Lease)> {
        match &self.table {
            Some(table) => {
                let due = now.is_none_or(|now| to_monotonic(now) >= table.floor());
                if table.count() == 0 || !due {
                    return Vec::new();
                }
                table
                    .all()
                    .into_iter()
                    .map(|l| (l.id, to_lease(l)))
                    .collect()
            }
            None => self
                .leases
                .iter()
                .map(|(&id, &lease)| (id, lease))
                .collect(),
        }
    }

    /// Keeps `floor` at or below `expires`.
    fn lower_floor(&self, expires: Instant) {
        if let Some(floor) = self.floor.get() {
            self.floor.set(Some(floor.min(expires)));
        }
    }

    /// Leases whose time is up at `now`, oldest id first.
    pub fn expired(&self, now: Instant) -> Vec<(u64, Lease)> {
        if self.table.is_none() {
            // Exclusive: every lease is looked at only once the earliest
            // may have ended (the ones found are handed back by the caller,
            // and the next look finds the floor above them).
            if self.floor.get().is_some_and(|floor| floor > now) {
                return Vec::new();
            }
            self.floor
                .set(self.leases.values().map(|l| l.expires).min());
        }
        let mut expired: Vec<_> = self
            .all_leases(Some(now))
            .into_iter()
            .filter(|(_, lease)| lease.expires <= now)
            .collect();
        expired.sort_unstable_by_key(|&(id, _)| id);
        expired
    }

    /// Shared mode: the leases held by the handle in `slot` in its life
    /// `generation`, oldest id first.
    pub fn leases_of(&self, slot: usize, generation: u64) -> Vec<(u64, Lease)> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let mut held: Vec<_> = table
            .all()
            .into_iter()
            .filter(|l| l.slot as usize == slot && l.generation == generation)
            .map(|l| (l.id, to_lease(l)))
            .collect();
        held.sort_unstable_by_key(|&(id, _)| id);
        held
    }

    /// Every lease's id, with its holder's slot and generation in shared
    /// mode (`None` in exclusive mode: this handle holds them all). For a
    /// write: the shared table's floor and count are set again (mended).
    pub fn holders(&self) -> Vec<(u64, Option<(usize, u64)>)> {
        self.holders_in(self.table.as_ref().map(LeaseTable::all))
    }

    /// As [`holders`](Self::holders), for a read: the control file is left
    /// as it was.
    pub fn holders_now(&self) -> Vec<(u64, Option<(usize, u64)>)> {
        self.holders_in(self.table.as_ref().map(LeaseTable::entries))
    }

    /// `shared`: the shared table's leases, in shared mode.
    fn holders_in(&self, shared: Option<Vec<SharedLease>>) -> Vec<(u64, Option<(usize, u64)>)> {
        match shared {
            Some(leases) => leases
                .into_iter()
                .filter(|l| l.generation != PARKED)
                .map(|l| (l.id, Some((l.slot as usize, l.generation))))
                .collect(),
            None => self
                .leases
                .iter()
                .filter(|(_, lease)| !lease.parked)
                .map(|(&id, _)| (id, None))
                .collect(),
        }
    }

    /// Makes every lease end now (a test seam: expiry without waiting).
    #[cfg(feature = "fault-injection")]
    pub fn expire_all(&mut self) {
        let now = Instant::now();
        if self.table.is_some() {
            for (id, _) in self.all_leases(None) {
                self.extend_lease(id, now);
            }
        }
        for lease in self.leases.values_mut() {
            lease.expires = now;
        }
        self.floor.set(None);
    }

    /// Whether `id` is held by a lease that has not run out at `now`.
    pub fn is_held(&self, id: u64, now: Instant) -> bool {
        self.lease(id)
            .is_some_and(|lease| lease.expires > now && !lease.parked)
    }

    /// Leases not run out at `now`.
    pub fn held_count(&self, now: Instant) -> usize {
        if self.table.as_ref().is_some_and(|t| t.count() == 0) {
            return 0;
        }
        let all = self.all_leases(None);
        all.iter()
            .filter(|(_, l)| l.expires > now && !l.parked)
            .count()
    }

    /// Whether `id`'s lease ran out at `now` after its last allowed attempt:
    /// the next write moves it to the dead letters, so reads leave it out.
    pub fn is_doomed(&self, id: u64, now: Instant, max_attempts: u16) -> bool {
        self.lease(id)
            .is_some_and(|l| l.expires <= now && l.attempt >= max_attempts)
    }

    /// Whether no lease can have ended by `now`: every lease is looked at
    /// only once the earliest known end has come (exclusive mode keeps it
    /// in `floor`, the shared table beside its leases).
    fn none_ended_by(&self, now: Instant) -> bool {
        match &self.table {
            Some(table) => table.count() == 0 || to_monotonic(now) < table.floor(),
            None if self.leases.is_empty() => true,
            None => {
                if self.floor.get().is_none_or(|floor| floor <= now) {
                    self.floor
                        .set(self.leases.values().map(|l| l.expires).min());
                }
                self.floor.get().is_some_and(|floor| floor > now)
            }
        }
    }

    /// How many leases [`is_doomed`](Self::is_doomed) at `now`.
    pub fn doomed_count(&self, now: Instant, max_attempts: u16) -> usize {
        if self.none_ended_by(now) {
            return 0;
        }
        self.all_leases(Some(now))
            .iter()
            .filter(|(_, l)| l.expires <= now && l.attempt >= max_attempts)
            .count()
    }

    /// The oldest record available at `now` as a read sees it, among those
    /// ever delivered: handed back, or with a lease run out that the next
    /// write hands back. (In shared mode records handed back are found from
    /// the cursor, which moved back to them.)
    pub fn first_available_again(&self, now: Instant, max_attempts: u16) -> Option<u64> {
        if self.none_ended_by(now) {
            return self.first_returned();
        }
        let expired = self
            .all_leases(Some(now))
            .into_iter()
            .filter(|(_, l)| l.expires <= now && l.attempt < max_attempts)
            .map(|(id, _)| id)
            .min();
        match (self.first_returned(), expired) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the nearest lease ends (in shared mode, no later than that).
    pub fn next_expiry(&self) -> Option<Instant> {
        match &self.table {
            Some(table) if table.count() == 0 => None,
            Some(table) => Some(from_monotonic(table.floor())),
            None => self.leases.values().map(|lease| lease.expires).min(),
        }
    }

    fn skip_if_fresh(&mut self, id: u64) {
        if id == self.fresh {
            self.fresh += 1;
        }
    }
}
