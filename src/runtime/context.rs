//! What a handler sees besides its arguments: the job's coordinates, the
//! application's shared state, and whether it should stop early.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::jobs::JobQueue;

/// Values shared by every handler, one per type ([`Worker::state`](super::Worker::state)).
#[derive(Default, Clone)]
pub(crate) struct StateMap(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl StateMap {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    pub(crate) fn get<T: 'static>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }
}

impl std::fmt::Debug for StateMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateMap({} values)", self.0.len())
    }
}

/// The context of one attempt of a job, given to [`Job::run`](super::Job::run).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use dque::runtime::{testing, Context, Job, JobError};
/// # use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Count;
///
/// impl Job for Count {
///     const KIND: &'static str = "count";
///     fn run(self, cx: &Context) -> Result<(), JobError> {
///         cx.state::<AtomicUsize>().fetch_add(1, Ordering::SeqCst);
///         Ok(())
///     }
/// }
///
/// let runs = testing::Inline::new().state(AtomicUsize::new(0));
/// runs.run(Count).unwrap();
/// assert_eq!(runs.state_ref::<AtomicUsize>().load(Ordering::SeqCst), 1);
/// ```
pub struct Context<'a> {
    pub(crate) kind: &'a str,
    pub(crate) id: &'a str,
    pub(crate) attempt: u32,
    pub(crate) priority: i32,
    pub(crate) headers: &'a [(String, String)],
    pub(crate) queue: Option<&'a dyn JobQueue>,
    pub(crate) queue_name: &'a str,
    pub(crate) state: &'a StateMap,
    pub(crate) stop: &'a AtomicBool,
    pub(crate) worker_stop: &'a AtomicBool,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("queue", &self.queue_name)
            .finish_non_exhaustive()
    }
}

impl Context<'_> {
    /// The job's kind.
    pub fn kind(&self) -> &str {
        self.kind
    }

    /// The job's id.
    pub fn id(&self) -> &str {
        self.id
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The value of header `name`, if the job has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The job's headers, in the order given.
    pub fn headers(&self) -> &[(String, String)] {
        self.headers
    }

    /// The name of the queue the job came from.
    pub fn queue_name(&self) -> &str {
        self.queue_name
    }

    /// The queue the job came from, to enqueue follow-up jobs (`None` for
    /// a job run inline by [`testing::Inline`](super::testing::Inline)).
    pub fn queue(&self) -> Option<&dyn JobQueue> {
        self.queue
    }

    /// The shared value of type `T` given to the worker.
    ///
    /// # Panics
    ///
    /// If the worker has no value of type `T` (a programming error: the
    /// panic is caught and fails the attempt with this message).
    pub fn state<T: Send + Sync + 'static>(&self) -> &T {
        self.try_state().unwrap_or_else(|| {
            panic!(
                "no shared state of type {}: give it with Worker::state",
                std::any::type_name::<T>()
            )
        })
    }

    /// The shared value of type `T`, if the worker has one.
    pub fn try_state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.state.get()
    }

    /// Whether the handler should stop early: the worker is stopping
    /// (return [`JobError::Interrupted`](super::JobError::Interrupted) to
    /// give the job back uncounted), or this attempt's timeout has passed
    /// (its result no longer counts). Long handlers look at it now and then.
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.worker_stop.load(Ordering::SeqCst)
    }

    /// Whether the worker is stopping (a signal or a stop handle).
    pub fn worker_stopping(&self) -> bool {
        self.worker_stop.load(Ordering::SeqCst)
    }
}
