//! The ids' index in memory, compact: an entry is the id's 64-bit seeded
//! hash, its records, and where the id's bytes lie in one arena shared by
//! all ids (no allocation per id, 32 bytes an entry). A lookup compares
//! the id's bytes on a hash hit, so it is exact: an id whose hash equals
//! the hash of another id held goes to a plain map beside (nearly always
//! empty), and ids are never told apart by their hash alone.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use super::{Location, Records};

/// Longest id kept in the arena (its length is one byte of the entry);
/// a longer one goes to the plain map.
const MAX_PACKED: usize = u8::MAX as usize;

/// Arena bytes below which no compaction is worth it.
const MIN_COMPACT: usize = 1 << 16;

/// The keys are hashes already (seeded): used as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Never used by a `u64` key; correct anyway.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
struct Slot {
    records: Records,
    /// Where the id's bytes are in the arena: offset << 8 | length.
    id: u64,
}

impl Slot {
    fn bytes<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        let (at, len) = ((self.id >> 8) as usize, (self.id & 0xff) as usize);
        &arena[at..at + len]
    }
}

/// Id → its records.
#[derive(Debug, Default)]
pub struct IdTable {
    /// Seeded per table: ids are callers' strings, perhaps an attacker's.
    seed: foldhash::fast::RandomState,
    slots: HashMap<u64, Slot, BuildHasherDefault<Prehashed>>,
    /// The ids of `slots`, back to back; a removed id's bytes stay until
    /// a compaction.
    arena: Vec<u8>,
    /// Bytes of the arena no slot names.
    garbage: usize,
    /// Ids whose hash is another held id's, and ids too long to pack.
    others: HashMap<Box<str>, Records, foldhash::fast::RandomState>,
    /// Tests: every id hashes to this (collisions everywhere).
    #[cfg(test)]
    fixed_hash: Option<u64>,
}

impl IdTable {
    fn hash(&self, id: &str) -> u64 {
        #[cfg(test)]
        if let Some(fixed) = self.fixed_hash {
            return fixed;
        }
        self.seed.hash_one(id)
    }

    /// How many ids are held.
    pub fn len(&self) -> usize {
        self.slots.len() + self.others.len()
    }

    /// The records of every id.
    pub fn all_records(&self) -> impl Iterator<Item = &Records> {
        self.slots
            .values()
            .map(|slot| &slot.records)
            .chain(self.others.values())
    }

    /// The records of `id`.
    pub fn get(&self, id: &str) -> Option<&Records> {
        match self.slots.get(&self.hash(id)) {
            Some(slot) if slot.bytes(&self.arena) == id.as_bytes() => Some(&slot.records),
            _ if self.others.is_empty() => None,
            _ => self.others.get(id),
        }
    }

    /// Adds record `location` to `id`'s (one hash, one probe for a new
    /// id); whether it was not there yet.
    pub fn add(&mut self, id: &str, location: Location) -> bool {
        let hash = self.hash(id);
        if id.len() <= MAX_PACKED {
            match self.slots.entry(hash) {
                Entry::Occupied(mut slot) if slot.get().bytes(&self.arena) == id.as_bytes() => {
                    return slot.get_mut().records.add(location);
                }
                Entry::Vacant(vacant) if !self.others.contains_key(id) => {
                    let at = self.arena.len() as u64;
                    self.arena.extend_from_slice(id.as_bytes());
                    vacant.insert(Slot {
                        records: Records::One(location),
                        id: at << 8 | id.len() as u64,
                    });
                    return true;
                }
                // Its hash is another id's: kept beside.
                _ => {}
            }
        }
        match self.others.get_mut(id) {
            Some(records) => records.add(location),
            None => {
                self.others.insert(id.into(), Records::One(location));
                true
            }
        }
    }

    /// Calls `keep` on the records of `id`, if it is held, and drops the
    /// id if `keep` leaves none (says false); whether it was held. One
    /// hash of the id, found or not.
    pub fn update(&mut self, id: &str, keep: impl FnOnce(&mut Records) -> bool) -> bool {
        let hash = self.hash(id);
        match self.slots.get_mut(&hash) {
            Some(slot) if slot.bytes(&self.arena) == id.as_bytes() => {
                if !keep(&mut slot.records) {
                    self.drop_slot(hash, id.len());
                }
                return true;
            }
            _ if self.others.is_empty() => return false,
            _ => {}
        }
        match self.others.get_mut(id) {
            Some(records) => {
                if !keep(records) {
                    self.others.remove(id);
                }
                true
            }
            None => false,
        }
    }

    /// Drops the slot of `hash`, whose id is `len` bytes long.
    fn drop_slot(&mut self, hash: u64, len: usize) {
        self.garbage += len;
        self.slots.remove(&hash);
        if self.slots.is_empty() {
            self.arena.clear();
            self.garbage = 0;
        }
    }

    /// Keeps the ids whose records `keep` leaves some of (it drops the
    /// others' records), then compacts the arena if most of it is garbage.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Records) -> bool) {
        let arena_len = self.arena.len();
        let mut garbage = self.garbage;
        self.slots.retain(|_, slot| {
            let kept = keep(&mut slot.records);
            if !kept {
                garbage += (slot.id & 0xff) as usize;
            }
            kept
        });
        self.others.retain(|_, records| keep(records));
        self.garbage = garbage;
        if (self.garbage > arena_len / 2 && arena_len >= MIN_COMPACT) || self.slots.is_empty() {
            self.compact();
        }
    }

    /// Copies the bytes of the ids held into a new arena of their size.
    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len().saturating_sub(self.garbage));
        for slot in self.slots.values_mut() {
            let len = slot.id & 0xff;
            let at = arena.len() as u64;
            arena.extend_from_slice(slot.bytes(&self.arena));
            slot.id = at << 8 | len;
        }
        self.arena = arena;
        self.garbage = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(record: u64) -> Records {
        Records::One(Location::Lane(0, record))
    }

    fn record_of(table: &IdTable, id: &str) -> Option<u64> {
        table.get(id).map(|records| records.as_slice()[0].record())
    }

    /// The entry stays small: the index's memory per id (issue 24).
    #[test]
    fn an_entry_is_thirty_two_bytes() {
        assert_eq!(std::mem::size_of::<(u64, Slot)>(), 32);
    }

    /// Ids whose hashes collide are still told apart by their bytes: a
    /// table where every id has one hash, against a plain map, through
    /// inserts, lookups, removals, sweeps and compactions (the dedup rule
    /// must stay exact whatever the hashes).
    #[test]
    fn ids_are_exact_whatever_their_hashes() {
        for fixed in [None, Some(7)] {
            let mut table = IdTable {
                fixed_hash: fixed,
                ..IdTable::default()
            };
            let mut model: HashMap<String, u64> = HashMap::new();
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            for step in 0..20_000u64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let n = rng % 300;
                // Long ones too (past what an entry packs).
                let id = match n % 50 {
                    0 => format!("{}-{n}", "x".repeat(300)),
                    _ => format!("id-{n}"),
                };
                match rng >> 60 {
                    0..=7 => {
                        let replace = |records: &mut Records| {
                            *records = one(step);
                            true
                        };
                        if !table.update(&id, replace) {
                            assert!(table.add(&id, Location::Lane(0, step)));
                        }
                        model.insert(id.clone(), step);
                    }
                    8..=10 => {
                        table.update(&id, |_| false);
                        model.remove(&id);
                    }
                    11..=13 => {
                        // Kept if even, else dropped, through `update`.
                        let held =
                            table.update(&id, |records| records.as_slice()[0].record() % 2 == 0);
                        assert_eq!(held, model.contains_key(&id));
                        model.retain(|key, record| key != &id || *record % 2 == 0);
                    }
                    _ => {
                        // A sweep that settles a third of the records.
                        table.retain(|records| records.as_slice()[0].record() % 3 != 0);
                        model.retain(|_, record| *record % 3 != 0);
                    }
                }
                assert_eq!(record_of(&table, &id), model.get(&id).copied(), "{id}");
                assert_eq!(table.len(), model.len());
            }
            for n in 0..300 {
                let id = format!("id-{n}");
                assert_eq!(record_of(&table, &id), model.get(&id).copied(), "{id}");
            }
        }
    }

    /// Removed ids' bytes do not pile up: the arena is compacted once they
    /// are most of it.
    #[test]
    fn the_arena_holds_the_ids_held_and_not_much_more() {
        let mut table = IdTable::default();
        for n in 0..100_000u64 {
            table.add(&format!("order-{n:08}"), Location::Lane(0, n));
            if n >= 10 {
                table.update(&format!("order-{:08}", n - 10), |_| false);
            }
            if n % 1024 == 0 {
                table.retain(|_| true);
            }
        }
        table.retain(|_| true);
        assert_eq!(table.len(), 10);
        assert!(
            table.arena.len() <= 2 * MIN_COMPACT,
            "{}",
            table.arena.len()
        );
    }
}
