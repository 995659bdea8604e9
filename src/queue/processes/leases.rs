//! The leases of a shared queue, in the control file: an open-addressing
//! table keyed by record id, with tombstones, so that every change to an
//! entry becomes visible by one store of its key (a process killed in the
//! middle leaves the old entry or the new one, never half of one). Two
//! tables take turns: tombstones are swept by copying the live entries
//! into the idle table and switching with one store.

use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control::{ControlFile, LeaseEntry, LEASE_CAPACITY};
use crate::error::{Error, Result};
use crate::queue::deadline::saturating_after;

/// Leases a shared queue holds at once: at most half the table is used.
pub const MAX_LEASES: usize = LEASE_CAPACITY / 2;
const EMPTY: u64 = 0;
/// The holder generation of a lease no handle holds (see `insert_parked`).
pub const PARKED: u64 = 0;
const REMOVED: u64 = u64::MAX;

/// One lease as the table holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLease {
    pub id: u64,
    pub attempt: u16,
    /// Monotonic nanoseconds (the same clock in every process).
    pub expires: u64,
    /// When the lease began, monotonic nanoseconds (0 for a parked record).
    pub started: u64,
    pub slot: u32,
    pub generation: u64,
}

/// The lease table of a shared queue, seen from one handle (its slot).
#[derive(Debug, Clone)]
pub struct LeaseTable {
    control: Arc<ControlFile>,
    slot: u32,
    generation: u64,
}

impl LeaseTable {
    pub fn new(control: Arc<ControlFile>, slot: usize, generation: u64) -> Self {
        LeaseTable {
            control,
            slot: slot as u32,
            generation,
        }
    }

    fn table(&self) -> &[LeaseEntry] {
        let which = self.control.state().lease_table.load(Relaxed) as usize % 2;
        &self.control.leases()[which * LEASE_CAPACITY..(which + 1) * LEASE_CAPACITY]
    }

    fn idle_table(&self) -> &[LeaseEntry] {
        let which = 1 - self.control.state().lease_table.load(Relaxed) as usize % 2;
        &self.control.leases()[which * LEASE_CAPACITY..(which + 1) * LEASE_CAPACITY]
    }

    pub fn count(&self) -> u64 {
        self.control.state().lease_count.load(Relaxed)
    }

    /// No lease ends before this (a lower bound, exact after a sweep).
    pub fn floor(&self) -> u64 {
        self.control.state().lease_floor.load(Relaxed)
    }

    pub fn get(&self, id: u64) -> Option<SharedLease> {
        let table = self.table();
        probe(id).take(table.len()).find_map(|at| {
            let entry = &table[at];
            match entry.key.load(Relaxed) {
                EMPTY => Some(None),
                key if key == id + 1 => Some(Some(read(id, entry))),
                _ => None,
            }
        })?
    }

    /// `Err` when the table holds as many leases as it may.
    pub fn room(&self) -> Result<()> {
        // The count is an upper bound (a process killed between its two
        // stores, or a mend, leaves it high): counted again before refusing.
        if self.count() as usize >= MAX_LEASES && self.all().len() >= MAX_LEASES {
            return Err(Error::SharedModeUnsupported {
                path: self.control.path().to_path_buf(),
                reason: format!(
                    "{MAX_LEASES} leases are held, the most a shared queue holds at once"
                ),
            });
        }
        Ok(())
    }

    /// Adds the lease of record `id` (not leased now), held by this handle;
    /// the caller checked [`room`](Self::room).
    pub fn insert(&self, id: u64, attempt: u16, expires: u64, started: u64) {
        let holder = (self.slot, self.generation);
        self.insert_for(id, attempt, (started, expires), holder);
    }

    /// Adds a lease of record `id` that no handle holds (a delayed nack):
    /// generation [`PARKED`] is never a live slot's (those are odd), so
    /// no holder's death gives it back early; it ends when it runs out.
    pub fn insert_parked(&self, id: u64, attempt: u16, expires: u64) {
        self.insert_for(id, attempt, (0, expires), (u32::MAX, PARKED));
    }

    /// `times`: (started, expires); `holder`: (slot, generation).
    fn insert_for(&self, id: u64, attempt: u16, times: (u64, u64), holder: (u32, u64)) {
        let ((started, expires), (slot, generation)) = (times, holder);
        let state = self.control.state();
        if state.lease_removed.load(Relaxed) as usize >= LEASE_CAPACITY / 4 {
            self.sweep();
        }
        let table = self.table();
        let at = probe(id)
            .take(table.len())
            .find(|&at| matches!(table[at].key.load(Relaxed), EMPTY | REMOVED))
            .expect("the table is never more than three quarters used");
        let entry = &table[at];
        let reuses_removed = entry.key.load(Relaxed) == REMOVED;
        entry.expires.store(expires, Relaxed);
        entry.started.store(started, Relaxed);
        entry.attempt.store(u32::from(attempt), Relaxed);
        entry.slot.store(slot, Relaxed);
        entry.generation.store(generation, Relaxed);
        // Count and floor first: a process killed before the key leaves them
        // an upper and a lower bound, which a scan puts right.
        state.lease_count.fetch_add(1, Relaxed);
        state.lease_floor.fetch_min(expires, Relaxed);
        // Release: the fields above are stored before the key that makes
        // the entry live, also as far as the compiler is concerned.
        entry.key.store(id + 1, Release);
        if reuses_removed {
            // After the key: a count left high only sweeps sooner.
            state.lease_removed.fetch_sub(1, Relaxed);
        }
    }

    pub fn set_expiry(&self, id: u64, expires: u64) {
        if let Some(entry) = self.entry(id) {
            entry.expires.store(expires, Relaxed);
            self.control.state().lease_floor.fetch_min(expires, Relaxed);
        }
    }

    pub fn remove(&self, id: u64) -> Option<SharedLease> {
        let entry = self.entry(id)?;
        let lease = read(id, entry);
        let state = self.control.state();
        state.lease_removed.fetch_add(1, Relaxed);
        entry.key.store(REMOVED, Relaxed);
        // After the key: a count left high is an upper bound.
        state.lease_count.fetch_sub(1, Relaxed);
        Some(lease)
    }

    fn entry(&self, id: u64) -> Option<&LeaseEntry> {
        let table = self.table();
        probe(id).take(table.len()).find_map(|at| {
            let entry = &table[at];
            match entry.key.load(Relaxed) {
                EMPTY => Some(None),
                key if key == id + 1 => Some(Some(entry)),
                _ => None,
            }
        })?
    }

    /// Every lease, in no order, read only (the control file is left as
    /// it was: what a read of the queue may look at).
    pub fn entries(&self) -> Vec<SharedLease> {
        if self.count() == 0 {
            return Vec::new();
        }
        self.table()
            .iter()
            .filter_map(|entry| match entry.key.load(Relaxed) {
                EMPTY | REMOVED => None,
                key => Some(read(key - 1, entry)),
            })
            .collect()
    }

    /// Every lease, in no order; also sets the floor to the earliest end.
    pub fn all(&self) -> Vec<SharedLease> {
        let state = self.control.state();
        if state.lease_count.load(Relaxed) == 0 {
            state.lease_floor.store(u64::MAX, Relaxed);
            return Vec::new();
        }
        let leases = self.entries();
        let floor = leases.iter().map(|l| l.expires).min().unwrap_or(u64::MAX);
        state.lease_floor.store(floor, Relaxed);
        // Mends a count a process killed between two stores left wrong.
        state.lease_count.store(leases.len() as u64, Relaxed);
        leases
    }

    /// Copies the live entries into the idle table and switches to it, so
    /// that removed entries no longer lengthen the probes.
    fn sweep(&self) {
        let live = self.all();
        let idle = self.idle_table();
        for entry in idle {
            entry.key.store(EMPTY, Relaxed);
        }
        for lease in &live {
            let at = probe(lease.id)
                .find(|&at| idle[at].key.load(Relaxed) == EMPTY)
                .expect("fewer leases than entries");
            let entry = &idle[at];
            entry.expires.store(lease.expires, Relaxed);
            entry.started.store(lease.started, Relaxed);
            entry.attempt.store(u32::from(lease.attempt), Relaxed);
            entry.slot.store(lease.slot, Relaxed);
            entry.generation.store(lease.generation, Relaxed);
            entry.key.store(lease.id + 1, Release);
        }
        let state = self.control.state();
        state.lease_table.fetch_add(1, Relaxed);
        state.lease_removed.store(0, Relaxed);
    }
}

fn read(id: u64, entry: &LeaseEntry) -> SharedLease {
    SharedLease {
        id,
        attempt: entry.attempt.load(Relaxed) as u16,
        expires: entry.expires.load(Relaxed),
        started: entry.started.load(Relaxed),
        slot: entry.slot.load(Relaxed),
        generation: entry.generation.load(Relaxed),
    }
}

/// The entries to look at for `id`, in order (linear probing).
fn probe(id: u64) -> impl Iterator<Item = usize> {
    let start = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % LEASE_CAPACITY;
    (0..LEASE_CAPACITY).map(move |i| (start + i) % LEASE_CAPACITY)
}

/// Now on the monotonic clock every process shares, in nanoseconds.
pub fn monotonic_now() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// One reading of std's clock and of the shared monotonic clock, to
/// convert several times between them at the cost of one.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicNow {
    now: Instant,
    nanos: u64,
}

impl MonotonicNow {
    pub fn now() -> Self {
        MonotonicNow {
            now: Instant::now(),
            nanos: monotonic_now(),
        }
    }

    /// `at` on the shared monotonic clock (std's `Instant` reads the same
    /// clock, but does not say its value).
    pub fn nanos_of(self, at: Instant) -> u64 {
        let (now, nanos) = (self.now, self.nanos);
        match at.checked_duration_since(now) {
            Some(ahead) => nanos.saturating_add(ahead.as_nanos().min(u128::from(u64::MAX)) as u64),
            None => nanos.saturating_sub((now - at).as_nanos().min(u128::from(u64::MAX)) as u64),
        }
    }

    /// The `Instant` of shared monotonic time `nanos`.
    pub fn instant_of(self, nanos: u64) -> Instant {
        let (now, current) = (self.now, self.nanos);
        if nanos >= current {
            saturating_after(now, Duration::from_nanos(nanos - current))
        } else {
            now.checked_sub(Duration::from_nanos(current - nanos))
                .unwrap_or(now)
        }
    }
}

/// `at` on the shared monotonic clock.
pub fn to_monotonic(at: Instant) -> u64 {
    MonotonicNow::now().nanos_of(at)
}

/// The `Instant` of shared monotonic time `nanos`.
pub fn from_monotonic(nanos: u64) -> Instant {
    MonotonicNow::now().instant_of(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (tempfile::TempDir, LeaseTable) {
        let dir = tempfile::tempdir().unwrap();
        let control = Arc::new(ControlFile::create(dir.path()).unwrap());
        (dir, LeaseTable::new(control, 3, 7))
    }

    #[test]
    fn entries_stay_found_across_many_sweeps() {
        let (_dir, table) = table();
        // Ten times the tombstones that trigger a sweep, with a few leases
        // held all along.
        for id in 0..5u64 {
            table.insert(id, 1, 1_000 + id, 500 + id);
        }
        for id in 5..(5 + 10 * LEASE_CAPACITY as u64 / 4) {
            table.insert(id, 2, 50, 40);
            assert_eq!(table.get(id).map(|l| l.expires), Some(50));
            assert_eq!(table.remove(id).map(|l| l.id), Some(id));
            assert_eq!(table.get(id), None);
        }
        for id in 0..5u64 {
            let lease = table.get(id).expect("held all along");
            // Its start too, copied with the entry at each sweep.
            assert_eq!(
                (lease.attempt, lease.expires, lease.started),
                (1, 1_000 + id, 500 + id)
            );
            assert_eq!((lease.slot, lease.generation), (3, 7));
        }
        assert_eq!(table.count(), 5);
        let mut all: Vec<u64> = table.all().iter().map(|l| l.id).collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3, 4]);
        assert_eq!(table.floor(), 1_000);
    }

    #[test]
    fn a_full_table_refuses_more_and_says_why() {
        let (_dir, table) = table();
        for id in 0..MAX_LEASES as u64 {
            table.room().unwrap();
            table.insert(id, 1, id, 0);
        }
        let err = table.room().unwrap_err();
        assert!(err.to_string().contains("32768 leases"), "{err}");
        table.remove(0);
        table.room().unwrap();
    }

    #[test]
    fn monotonic_times_round_trip() {
        let now = Instant::now();
        let later = now + Duration::from_secs(90);
        let back = from_monotonic(to_monotonic(later));
        let off = back.max(later) - back.min(later);
        // Two clock reads apart: a wrong unit would be off by far more.
        assert!(off < Duration::from_secs(5), "{off:?}");
        // Far futures saturate rather than overflow.
        let far = saturating_after(now, Duration::MAX);
        assert!(from_monotonic(to_monotonic(far)) > later);
    }
}
