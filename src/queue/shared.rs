//! What the callers of one queue share: the engine behind a mutex, the
//! wake-ups of blocked callers, and group commit.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::log::commit::GroupCommit;
use crate::queue::engine::Engine;
use crate::queue::processes::{SharedCommit, Waker};

/// The state behind every [`DQue`](crate::DQue) handle and its flusher.
#[derive(Debug)]
pub struct Shared {
    /// `None` once closed.
    state: Mutex<Option<Engine>>,
    /// Signalled when an item arrives or the queue closes.
    changed: Condvar,
    /// Signalled when a write may have made room (an item settled, or
    /// handed back to the dead letters) or the queue closes.
    room: Condvar,
    commit: GroupCommit,
    /// Shared mode: blocked callers sleep on the control file's futex word
    /// instead of the condvars, so that other processes wake them too.
    waker: Option<Waker>,
    /// Shared mode: the group commit of every process, in place of `commit`.
    shared_commit: Option<SharedCommit>,
    /// The async side's wake-ups (feature `tokio`): told of everything the
    /// condvars are, so tasks wait without a thread each.
    #[cfg(feature = "tokio")]
    wakeups: std::sync::Arc<crate::queue::asynchronous::wakeups::Wakeups>,
    /// No more items through this handle ([`seal`](Self::seal)): set under
    /// the state mutex, and read there by every append, so an append
    /// either came before the seal or was refused.
    sealed: AtomicBool,
}

/// One look of [`Shared::try_once`].
#[cfg(feature = "tokio")]
pub enum Tried<R> {
    /// What the look found, and the ticket to make durable (Safe mode).
    Found(R, Option<u64>),
    /// Nothing yet: look again on a wake-up, or at this instant (a lease
    /// expiring, a dead process's leases to check) if no wake-up comes.
    Wait(Option<Instant>),
}

impl Shared {
    pub fn new(engine: Engine) -> Self {
        Shared {
            waker: engine.waker(),
            shared_commit: engine.shared_commit(),
            state: Mutex::new(Some(engine)),
            changed: Condvar::new(),
            room: Condvar::new(),
            commit: GroupCommit::default(),
            #[cfg(feature = "tokio")]
            wakeups: Default::default(),
            sealed: AtomicBool::new(false),
        }
    }

    /// No more items through this handle: later appends fail with
    /// `Closed`, and waiting consumers stop once the queue holds no item.
    pub fn seal(&self) {
        {
            let _state = self.state.lock();
            self.sealed.store(true, SeqCst);
        }
        self.changed.notify_all();
        self.room.notify_all();
        #[cfg(feature = "tokio")]
        self.wakeups.wake_all();
        if let Some(waker) = &self.waker {
            // This process's sleepers on the futex word look again.
            waker.wake_all();
        }
    }

    /// Whether [`seal`](Self::seal) was called.
    pub fn is_sealed(&self) -> bool {
        self.sealed.load(SeqCst)
    }

    /// `Closed` once sealed; called under the state mutex by every append.
    fn refuse_if_sealed(&self) -> Result<()> {
        if self.is_sealed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Sealed and nothing left, leased items included: a waiting consumer stops.
    fn drained(&self, engine: &Engine) -> bool {
        self.is_sealed() && engine.len_now() == 0
    }

    /// Wakes one blocked consumer (and one async waiter): an item came.
    fn signal_available(&self) {
        self.changed.notify_one();
        #[cfg(feature = "tokio")]
        self.wakeups.available();
    }

    /// Wakes every producer blocked on a full queue: a write may have made room.
    fn signal_room(&self) {
        self.room.notify_all();
        if self.is_sealed() {
            // An item settled: a consumer waiting for the drain's end looks again.
            self.changed.notify_all();
        }
        #[cfg(feature = "tokio")]
        self.wakeups.room();
    }

    /// The async side's wake-ups.
    #[cfg(feature = "tokio")]
    pub fn wakeups(&self) -> &std::sync::Arc<crate::queue::asynchronous::wakeups::Wakeups> {
        &self.wakeups
    }

    /// One look of [`wait_for`](Self::wait_for)'s loop, for a caller that
    /// waits elsewhere (an async task): never sleeps; the ticket of what
    /// `op` wrote is the caller's to make durable ([`make_durable`](Self::make_durable)).
    #[cfg(feature = "tokio")]
    pub fn try_once<R>(
        &self,
        writes: bool,
        op: impl FnOnce(&mut Engine) -> Result<Option<R>>,
    ) -> Result<Tried<R>> {
        let shared_mode = self.waker.is_some();
        let (tried, more, freed) = entered(&mut self.state.lock(), writes, |engine| {
            let before = engine.len();
            let tried = match op(engine)? {
                Some(found) => Tried::Found(found, engine.ticket_to_wait().filter(|_| writes)),
                None if shared_mode => {
                    Tried::Wait(earliest(engine.next_expiry(), engine.lease_watch()))
                }
                None => Tried::Wait(engine.next_expiry()),
            };
            Ok((tried, engine.len() > 0, engine.len() < before))
        })?;
        // Only a look that took items out (a dequeue, a lease that
        // dead-lettered) made room: signalling every look would wake the
        // waiters of a sealed queue, which listen for room, into waking
        // each other for ever while one item stays leased.
        if writes && freed {
            self.signal_room();
        }
        if matches!(tried, Tried::Found(..)) && more {
            // A batch brings several, a peek leaves the item: pass the
            // wake-up on so no waiter sleeps on an item.
            self.signal_available();
        }
        Ok(tried)
    }

    /// Runs `op` on the engine; for calls that write nothing.
    pub fn read<R>(&self, op: impl FnOnce(&mut Engine) -> Result<R>) -> Result<R> {
        entered(&mut self.state.lock(), false, op)
    }

    /// Runs `op` on the engine, then (in Safe mode, outside the lock) waits
    /// until what it wrote is durable, sharing the fsync with other callers.
    pub fn write<R>(&self, op: impl FnOnce(&mut Engine) -> Result<R>) -> Result<R> {
        let (result, ticket) = self.run_locked(op)?;
        // Whatever it settled made room for a producer waiting on a limit.
        self.signal_room();
        self.wait_ticket(ticket)?;
        Ok(result)
    }

    /// Like [`write_item`](Self::write_item), but while `op` fails with
    /// `Full` it waits for room, up to `deadline` (then returns that `Full`).
    pub fn write_item_when_room<R>(
        &self,
        deadline: Option<Instant>,
        mut op: impl FnMut(&mut Engine) -> Result<R>,
    ) -> Result<R> {
        if let Some(waker) = &self.waker {
            return self.write_item_when_room_shared(waker, deadline, op);
        }
        let mut state = self.state.lock();
        let (result, ticket) = loop {
            let engine = state.as_mut().ok_or(Error::Closed)?;
            self.refuse_if_sealed()?;
            match op(engine) {
                Err(full @ Error::Full { .. }) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(full);
                    }
                    // A lease running out on its last attempt makes room
                    // with no one to signal it: wake up for it too.
                    match earliest(deadline, engine.next_expiry()) {
                        None => self.room.wait(&mut state),
                        Some(wake) => {
                            self.room.wait_until(&mut state, wake);
                        }
                    }
                }
                other => break (other?, engine.ticket_to_wait()),
            }
        };
        drop(state);
        self.signal_available();
        self.wait_ticket(ticket)?;
        Ok(result)
    }

    /// Like [`write`](Self::write), and wakes one blocked consumer.
    pub fn write_item<R>(&self, op: impl FnOnce(&mut Engine) -> Result<R>) -> Result<R> {
        let (result, ticket) = self.run_locked(|engine| {
            self.refuse_if_sealed()?;
            op(engine)
        })?;
        // Consumers may take the item before it is durable: their own
        // dequeue's fsync covers it, as it syncs every file written so far.
        self.signal_available();
        self.wait_ticket(ticket)?;
        Ok(result)
    }

    /// [`write_item_when_room`](Self::write_item_when_room) in shared mode:
    /// sleeps on the futex word between tries, without the mutexes.
    fn write_item_when_room_shared<R>(
        &self,
        waker: &Waker,
        deadline: Option<Instant>,
        mut op: impl FnMut(&mut Engine) -> Result<R>,
    ) -> Result<R> {
        loop {
            let mut state = self.state.lock();
            let mut seen = 0;
            let mut wake = None;
            let tried = entered(&mut state, true, |engine| {
                seen = waker.wake_word();
                wake = engine.next_expiry();
                self.refuse_if_sealed()?;
                let result = op(engine);
                Ok(result.map(|found| (found, engine.ticket_to_wait())))
            })?;
            drop(state);
            match tried {
                Err(full @ Error::Full { .. }) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(full);
                    }
                    waker.sleep(seen, earliest(deadline, wake));
                }
                other => {
                    let (result, ticket) = other?;
                    self.wait_ticket(ticket)?;
                    return Ok(result);
                }
            }
        }
    }

    fn run_locked<R>(&self, op: impl FnOnce(&mut Engine) -> Result<R>) -> Result<(R, Option<u64>)> {
        entered(&mut self.state.lock(), true, |engine| {
            Ok((op(engine)?, engine.ticket_to_wait()))
        })
    }

    fn wait_ticket(&self, ticket: Option<u64>) -> Result<()> {
        ticket.map_or(Ok(()), |ticket| self.make_durable(ticket))
    }

    /// Runs `op` until it yields something, waiting for enqueues in
    /// between, up to `deadline`; then makes its writes durable like `write`.
    /// `None` when the deadline passed, or at once when the handle is
    /// sealed and the queue holds no item.
    pub fn wait_for<R>(
        &self,
        deadline: Option<Instant>,
        writes: bool,
        mut op: impl FnMut(&mut Engine) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        if let Some(waker) = &self.waker {
            return self.wait_for_shared(waker, deadline, writes, op);
        }
        let ticket = |engine: &Engine| engine.ticket_to_wait().filter(|_| writes);
        let mut state = self.state.lock();
        let found = loop {
            let engine = state.as_mut().ok_or(Error::Closed)?;
            if let Some(found) = op(engine)? {
                if engine.len() > 0 {
                    // A peek leaves the item, and a batch brings several:
                    // pass the wake-up on so no waiter sleeps on an item.
                    self.signal_available();
                }
                break Some((found, ticket(engine)));
            }
            if self.drained(engine) {
                break None;
            }
            // An expiring lease makes an item available with no one to
            // signal it: wake up for it too.
            match earliest(deadline, engine.next_expiry()) {
                None => self.changed.wait(&mut state),
                Some(wake) => {
                    let timed_out = self.changed.wait_until(&mut state, wake).timed_out();
                    if timed_out && deadline.is_some_and(|d| Instant::now() >= d) {
                        let engine = state.as_mut().ok_or(Error::Closed)?;
                        break op(engine)?.map(|found| (found, ticket(engine)));
                    }
                }
            }
        };
        drop(state);
        // A consuming call (or a lease that dead-lettered) may have made room.
        self.signal_room();
        match found {
            None => Ok(None),
            Some((found, ticket)) => {
                self.wait_ticket(ticket)?;
                Ok(Some(found))
            }
        }
    }

    /// [`wait_for`](Self::wait_for) in shared mode: sleeps on the futex word
    /// between tries, without the mutexes, so a write in any process wakes it.
    fn wait_for_shared<R>(
        &self,
        waker: &Waker,
        deadline: Option<Instant>,
        writes: bool,
        mut op: impl FnMut(&mut Engine) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        loop {
            let mut state = self.state.lock();
            let mut seen = 0;
            let mut wake = None;
            let mut drained = false;
            let found = entered(&mut state, writes, |engine| {
                // Read before looking, under the mutex: a write after the
                // look moves the word, and the sleep below returns at once.
                seen = waker.wake_word();
                let found = op(engine)?;
                wake = earliest(engine.next_expiry(), engine.lease_watch());
                drained = found.is_none() && self.drained(engine);
                Ok(found.map(|found| (found, engine.ticket_to_wait().filter(|_| writes))))
            })?;
            drop(state);
            if drained {
                return Ok(None);
            }
            if let Some((found, ticket)) = found {
                self.wait_ticket(ticket)?;
                return Ok(Some(found));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            waker.sleep(seen, earliest(deadline, wake));
        }
    }

    /// Makes every write up to `ticket` durable, leading or joining a group fsync.
    pub fn make_durable(&self, ticket: u64) -> Result<()> {
        if let Some(commit) = &self.shared_commit {
            // Needs no engine: a close in between cannot leave it undone.
            let made = commit.make_durable(ticket);
            if let (Err(e), Some(engine)) = (&made, self.state.lock().as_mut()) {
                engine.refuse(e);
            }
            return made;
        }
        self.commit.wait_durable(
            ticket,
            // A refused engine's files cannot be called durable: a retried
            // fsync may return OK after the failed one consumed the error.
            // This handle's own files: no need for the cross-process mutex.
            || {
                let mut state = self.state.lock();
                let engine = state.as_mut().ok_or(Error::Closed)?;
                engine.check_refused()?;
                Ok(engine.sync_batch())
            },
            |error| {
                if let Some(engine) = self.state.lock().as_mut() {
                    engine.refuse_after_sync(error);
                }
            },
        )
    }

    /// Shared mode: the futex word every write of every process moves.
    pub fn waker(&self) -> Option<Waker> {
        self.waker.clone()
    }

    /// Wakes one blocked caller: an item became available without an enqueue.
    pub fn notify_available(&self) {
        self.signal_available();
        if let Some(waker) = &self.waker {
            waker.wake_all();
        }
    }

    /// Makes everything written so far durable, in any mode.
    pub fn sync(&self) -> Result<()> {
        if let Some(commit) = &self.shared_commit {
            // A handle that refused writes cannot call anything durable.
            self.read(|engine| engine.check_refused())?;
            // Every process's writes so far, and this handle's dead letters.
            commit.make_durable(commit.written())?;
            return self.write(Engine::sync_dead_letters);
        }
        let written = self.read(|engine| Ok(engine.written()))?;
        self.make_durable(written)
    }

    /// Takes the engine out, wakes every blocked caller, and closes it.
    ///
    /// Callers that finished their write and wait for durability are
    /// settled by the close's own sync: `Ok` if it succeeds (their effect is
    /// durable, so they must not report an error), its error if it fails.
    /// Callers that had not started get `Closed`.
    pub fn close(&self) -> Result<()> {
        self.commit.begin_close();
        let engine = self.state.lock().take();
        self.changed.notify_all();
        self.room.notify_all();
        #[cfg(feature = "tokio")]
        self.wakeups.close();
        if let Some(waker) = &self.waker {
            // Every sleeper of every process looks again; this one's find
            // the queue closed.
            waker.wake_all();
        }
        let Some(engine) = engine else {
            return Err(Error::Closed);
        };
        let written = engine.written();
        let result = engine.close();
        self.commit.finish_close(written, &result);
        result
    }
}

/// Runs `op` on the engine under the cross-process mutex in shared mode
/// (taken, and the view brought up to date, by `enter`; released, with this
/// call's changes published, by `leave`).
///
/// The mutex is released on the way out even if `op` panics (a codec may):
/// a panic must not leave every process of the queue blocked.
fn entered<R>(
    state: &mut Option<Engine>,
    writes: bool,
    op: impl FnOnce(&mut Engine) -> Result<R>,
) -> Result<R> {
    let engine = state.as_mut().ok_or(Error::Closed)?;
    engine.enter(writes)?;
    let held = Held(engine);
    op(held.0)
}

/// An engine whose cross-process mutex is held; left (changes published,
/// mutex released) when dropped, on unwinding too.
struct Held<'a>(&'a mut Engine);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// The earlier of two optional instants (`None`: never).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
