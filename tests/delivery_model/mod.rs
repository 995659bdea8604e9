//! The model of at-least-once delivery that `lease_model.rs` (one handle)
//! and `shared_model.rs` (three handles on one queue) compare the queue
//! with: pending items in id order, who holds which lease, dead letters.
#![allow(dead_code)]

use std::collections::BTreeMap;

#[derive(Debug)]
pub struct Model {
    /// Pending items by id: value and attempts so far.
    pub pending: BTreeMap<u64, (u32, u16)>,
    /// Leased ids and the attempt each lease is.
    pub leased: BTreeMap<u64, u16>,
    pub dead: usize,
    pub next_id: u64,
    max_attempts: u16,
}

impl Model {
    pub fn new(max_attempts: u16) -> Self {
        Model {
            pending: BTreeMap::new(),
            leased: BTreeMap::new(),
            dead: 0,
            next_id: 0,
            max_attempts,
        }
    }

    /// The oldest pending item no one holds.
    pub fn next_available(&self) -> Option<u64> {
        self.pending
            .keys()
            .copied()
            .find(|id| !self.leased.contains_key(id))
    }

    pub fn enqueue(&mut self, value: u32) {
        self.pending.insert(self.next_id, (value, 0));
        self.next_id += 1;
    }

    /// What a nack, an expiry or a closing holder does to the lease of `id`.
    pub fn hand_back(&mut self, id: u64) {
        let attempt = self.leased.remove(&id).expect("leased");
        if attempt >= self.max_attempts {
            self.pending.remove(&id);
            self.dead += 1;
        }
    }

    /// What a lease finds (id, value, attempt): the next available item,
    /// dead-lettering those out of attempts on the way.
    pub fn lease(&mut self) -> Option<(u64, u32, u16)> {
        loop {
            let id = self.next_available()?;
            let (value, attempts) = self.pending[&id];
            if attempts >= self.max_attempts {
                self.pending.remove(&id);
                self.dead += 1;
                continue;
            }
            self.pending.insert(id, (value, attempts + 1));
            self.leased.insert(id, attempts + 1);
            return Some((id, value, attempts + 1));
        }
    }
}
