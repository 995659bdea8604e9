//! Model test of shared mode (issue 12): three handles on one queue, as
//! three processes would hold it, each random step done through one of
//! them (enqueue, batches, lease, ack, nack, release, fail, touch, expiry,
//! dequeue, cancel, peek, closing and reopening a handle), and every handle
//! compared with one model after every step.
//!
//! Expiry is forced through the `fault-injection` seam, so nothing here
//! depends on timing. Runs with `cargo test --all-features`.

use std::collections::BTreeSet;

use dque::{DQue, Durability, Error, Leased, Options};
use proptest::prelude::*;

mod delivery_model;
use delivery_model::Model;

const MAX_ATTEMPTS: u16 = 3;
const HANDLES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Enqueue(usize, u32),
    EnqueueBatch(usize, Vec<u32>),
    Lease(usize),
    Ack(usize, usize),
    Nack(usize, usize),
    Release(usize, usize),
    Fail(usize, usize),
    Touch(usize, usize),
    ExpireAll(usize),
    Dequeue(usize),
    DequeueBatch(usize, usize),
    Peek(usize),
    Cancel(usize, usize),
    Reopen(usize),
}

/// One held guard, and whether the model says its lease still holds.
struct Held {
    guard: Leased<u32>,
    live: bool,
}

fn options() -> Options {
    Options::new()
        .shared(true)
        .durability(Durability::Turbo)
        .segment_items(3)
        .max_attempts(MAX_ATTEMPTS)
}

struct Handle {
    queue: DQue<u32>,
    held: Vec<Held>,
}

fn step(
    handles: &mut [Handle],
    path: &std::path::Path,
    model: &mut Model,
    op: &Op,
    at: usize,
) -> Result<(), TestCaseError> {
    let pick = |k: usize, held: &Vec<Held>| (!held.is_empty()).then(|| k % held.len());
    match op {
        Op::Enqueue(h, v) => {
            handles[*h].queue.enqueue(v)?;
            model.enqueue(*v);
        }
        Op::EnqueueBatch(h, vs) => {
            if vs.is_empty() {
                return Ok(());
            }
            handles[*h].queue.enqueue_batch(vs)?;
            vs.iter().for_each(|&v| model.enqueue(v));
        }
        Op::Lease(h) => {
            let want = model.lease();
            let got = handles[*h].queue.lease()?;
            let summary = got.as_ref().map(|g| (g.id(), **g, g.attempt()));
            prop_assert_eq!(summary, want, "step {}: lease", at);
            if let Some(guard) = got {
                handles[*h].held.push(Held { guard, live: true });
            }
        }
        Op::Ack(h, k) | Op::Nack(h, k) | Op::Release(h, k) | Op::Fail(h, k) => {
            let held = &mut handles[*h].held;
            let Some(i) = pick(*k, held) else {
                return Ok(());
            };
            let Held { guard, live } = held.swap_remove(i);
            let id = guard.id();
            let result = match op {
                Op::Ack(..) => guard.ack(),
                Op::Nack(..) => guard.nack(),
                Op::Release(..) => guard.release(),
                _ => guard.fail("the model says so"),
            };
            if !live {
                let lost = matches!(result, Err(Error::LeaseLost { .. }));
                prop_assert!(
                    lost,
                    "step {}: {:?} on an ended lease: {:?}",
                    at,
                    op,
                    result
                );
                return Ok(());
            }
            result?;
            match op {
                Op::Ack(..) => {
                    model.leased.remove(&id);
                    model.pending.remove(&id);
                }
                Op::Fail(..) => {
                    model.leased.remove(&id);
                    model.pending.remove(&id);
                    model.dead += 1;
                }
                Op::Release(..) => {
                    model.leased.remove(&id);
                    model.pending.get_mut(&id).expect("pending").1 -= 1;
                }
                _ => model.hand_back(id),
            }
        }
        Op::Touch(h, k) => {
            let held = &handles[*h].held;
            let Some(i) = pick(*k, held) else {
                return Ok(());
            };
            let result = held[i].guard.touch();
            prop_assert_eq!(result.is_ok(), held[i].live, "step {}: touch", at);
        }
        Op::ExpireAll(h) => {
            // Every process's leases end: the table is shared.
            handles[*h].queue.expire_leases_now()?;
            for handle in handles.iter_mut() {
                for held in &mut handle.held {
                    if held.live {
                        held.live = false;
                        model.hand_back(held.guard.id());
                    }
                }
            }
        }
        Op::Dequeue(h) => {
            let want = model.next_available();
            let got = handles[*h].queue.dequeue()?;
            prop_assert_eq!(got, want.map(|id| model.pending[&id].0), "step {}", at);
            if let Some(id) = want {
                model.pending.remove(&id);
            }
        }
        Op::DequeueBatch(h, n) => {
            let got = handles[*h].queue.dequeue_batch(*n)?;
            let mut want = Vec::new();
            while want.len() < *n {
                let Some(id) = model.next_available() else {
                    break;
                };
                want.push(model.pending.remove(&id).expect("pending").0);
            }
            prop_assert_eq!(got, want, "step {}: batch", at);
        }
        Op::Peek(h) => {
            let want = model.next_available().map(|id| model.pending[&id].0);
            prop_assert_eq!(handles[*h].queue.peek()?, want, "step {}: peek", at);
        }
        Op::Cancel(h, k) => {
            if model.pending.is_empty() {
                return Ok(());
            }
            let id = *model.pending.keys().nth(k % model.pending.len()).unwrap();
            let result = handles[*h].queue.cancel(id);
            if model.leased.contains_key(&id) {
                prop_assert!(matches!(result, Err(Error::Leased { .. })), "step {}", at);
            } else {
                result?;
                model.pending.remove(&id);
            }
        }
        Op::Reopen(h) => {
            // A closing handle gives its leases back at once.
            let handle = &mut handles[*h];
            let held: Vec<Held> = handle.held.drain(..).collect();
            handle.queue.close()?;
            for held in held {
                if held.live {
                    model.hand_back(held.guard.id());
                }
                // Dropped after the close: its nack finds the handle closed.
                drop(held.guard);
            }
            handle.queue = options().open(path)?;
        }
    }
    Ok(())
}

fn check(handles: &[Handle], model: &Model, at: usize, op: &Op) -> Result<(), TestCaseError> {
    let modelled: BTreeSet<u64> = model.pending.keys().copied().collect();
    for (h, handle) in handles.iter().enumerate() {
        let q = &handle.queue;
        prop_assert_eq!(
            q.len(),
            model.pending.len(),
            "step {} ({:?}): len of {}",
            at,
            op,
            h
        );
        prop_assert_eq!(
            q.leased_len(),
            model.leased.len(),
            "step {}: leased of {}",
            at,
            h
        );
        prop_assert_eq!(
            q.dead_letters()?.len(),
            model.dead,
            "step {}: dead of {}",
            at,
            h
        );
        let browsed: BTreeSet<u64> = q.pending(usize::MAX)?.iter().map(|p| p.id).collect();
        prop_assert_eq!(&browsed, &modelled, "step {}: pending ids of {}", at, h);
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let mut model = Model::new(MAX_ATTEMPTS);
    let mut handles: Vec<Handle> = (0..HANDLES)
        .map(|_| {
            Ok(Handle {
                queue: options().open_or_create(&path)?,
                held: Vec::new(),
            })
        })
        .collect::<Result<_, Error>>()?;
    for (at, op) in ops.iter().enumerate() {
        step(&mut handles, &path, &mut model, op, at)?;
        check(&handles, &model, at, op)?;
    }
    // Everything closed, then opened alone: nothing is leased, everything
    // pending is still there, in order.
    for handle in handles.drain(..) {
        handle.queue.close()?;
        for held in handle.held {
            if held.live {
                model.hand_back(held.guard.id());
            }
        }
    }
    let q: DQue<u32> = options().open(&path)?;
    prop_assert_eq!(q.len(), model.pending.len());
    prop_assert_eq!(q.dead_letters()?.len(), model.dead);
    let mut left = Vec::new();
    while let Some(item) = q.dequeue()? {
        left.push(item);
    }
    let want: Vec<u32> = model.pending.values().map(|&(v, _)| v).collect();
    prop_assert_eq!(left, want);
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0..HANDLES;
    prop_oneof![
        6 => (h.clone(), any::<u32>()).prop_map(|(h, v)| Op::Enqueue(h, v)),
        2 => (h.clone(), proptest::collection::vec(any::<u32>(), 0..5))
            .prop_map(|(h, vs)| Op::EnqueueBatch(h, vs)),
        6 => h.clone().prop_map(Op::Lease),
        3 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Ack(h, k)),
        2 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Nack(h, k)),
        1 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Release(h, k)),
        1 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Fail(h, k)),
        1 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Touch(h, k)),
        1 => h.clone().prop_map(Op::ExpireAll),
        2 => h.clone().prop_map(Op::Dequeue),
        1 => (h.clone(), 0..5usize).prop_map(|(h, n)| Op::DequeueBatch(h, n)),
        1 => h.clone().prop_map(Op::Peek),
        1 => (h.clone(), any::<usize>()).prop_map(|(h, k)| Op::Cancel(h, k)),
        1 => h.prop_map(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_handle_agrees_with_one_model(ops in proptest::collection::vec(op(), 0..150)) {
        run(&ops)?;
    }
}
