//! Unique jobs: a caller id held for a period after enqueue, across the
//! states the job chooses (issue 27). Backend-neutral: the states, the
//! hold a job carries, and the answer of an enqueue that met a held id.
//!
//! A job enqueued with [`NewJob::unique_for`](super::NewJob::unique_for)
//! holds its id from its enqueue until the period ends, while it is in one
//! of its [`UniqueStates`]: any enqueue of that id meanwhile adds nothing.
//! Queued (ready or scheduled) and running are always covered (a caller id
//! names one waiting job, as in River, which refuses a `ByState` without
//! them); `done` (acked) is covered by default, as in Oban and River;
//! `dead` only when asked. A job cancelled while waiting frees its id.

use std::fmt;
use std::time::SystemTime;

use crate::error::{Error, Result};

/// The states in which a job with a uniqueness period holds its id.
///
/// ```
/// use dque::jobs::UniqueStates;
/// let states: UniqueStates = "queued,running,done,dead".parse()?;
/// assert_eq!(states, UniqueStates::ALL);
/// assert_eq!(UniqueStates::default().to_string(), "queued,running,done");
/// assert!("done".parse::<UniqueStates>().is_err(), "queued and running are required");
/// # Ok::<(), dque::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueStates(u8);

impl UniqueStates {
    /// Ready or scheduled (Oban's `available`/`scheduled`, River's
    /// `available`/`scheduled`/`pending`, Sidekiq's queued).
    pub const QUEUED: UniqueStates = UniqueStates(1);
    /// Leased by a worker (Oban's `executing`, River's `running`).
    pub const RUNNING: UniqueStates = UniqueStates(2);
    /// Acked (Oban's and River's `completed`): for the rest of the period.
    pub const DONE: UniqueStates = UniqueStates(4);
    /// A dead letter (Oban's `discarded`, River's `discarded`): for the
    /// rest of the period.
    pub const DEAD: UniqueStates = UniqueStates(8);
    /// Every state.
    pub const ALL: UniqueStates = UniqueStates(15);
    /// While waiting or running only (Sidekiq's `until_executed`).
    pub const WAITING: UniqueStates = UniqueStates(3);

    /// Whether every state of `other` is in these.
    pub fn contains(self, other: UniqueStates) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits, as the backends store them (1 queued, 2 running, 4 done,
    /// 8 dead).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The states of `bits` (unknown bits dropped, queued and running
    /// always in).
    pub fn from_bits(bits: u8) -> UniqueStates {
        UniqueStates((bits & Self::ALL.0) | Self::WAITING.0)
    }
}

impl Default for UniqueStates {
    /// Queued, running and done: Oban's and River's default.
    fn default() -> Self {
        UniqueStates(7)
    }
}

impl std::ops::BitOr for UniqueStates {
    type Output = UniqueStates;

    fn bitor(self, other: UniqueStates) -> UniqueStates {
        UniqueStates(self.0 | other.0)
    }
}

const NAMES: [(&str, UniqueStates); 4] = [
    ("queued", UniqueStates::QUEUED),
    ("running", UniqueStates::RUNNING),
    ("done", UniqueStates::DONE),
    ("dead", UniqueStates::DEAD),
];

impl fmt::Display for UniqueStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(_, s)| self.contains(*s))
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join(","))
    }
}

impl fmt::Debug for UniqueStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueStates({self})")
    }
}

impl std::str::FromStr for UniqueStates {
    type Err = Error;

    /// Comma-separated names: `queued` (also `ready`, `scheduled`,
    /// `available`), `running` (`executing`), `done` (`completed`,
    /// `complete`), `dead` (`discarded`, `failed`), or `all`. Queued and
    /// running must be in.
    fn from_str(text: &str) -> Result<UniqueStates> {
        let mut bits = 0;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            bits |= match name.to_ascii_lowercase().as_str() {
                "queued" | "ready" | "scheduled" | "available" => 1,
                "running" | "executing" | "leased" => 2,
                "done" | "completed" | "complete" => 4,
                "dead" | "discarded" | "failed" => 8,
                "all" => 15,
                _ => {
                    return Err(invalid(format!(
                        "unique state {name:?}: the states are queued, running, done and dead"
                    )))
                }
            };
        }
        let states = UniqueStates(bits);
        states.check()?;
        Ok(states)
    }
}

impl UniqueStates {
    /// `InvalidJob` unless queued and running are in.
    pub(crate) fn check(self) -> Result<()> {
        if !self.contains(Self::WAITING) {
            return Err(invalid(format!(
                "unique states {self:?}: queued and running are always covered (a caller id \
                 names one waiting job); list them, e.g. queued,running,done"
            )));
        }
        Ok(())
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidJob { reason }
}

/// What a job with a uniqueness period carries: until when, and in
/// which states, it holds its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// Unix milliseconds: the end of the period.
    pub until_ms: u64,
    pub states: UniqueStates,
}

impl Hold {
    /// Whether the id is still held at `now_ms` by a job settled as `state`.
    pub fn holds(self, state: Settled, now_ms: u64) -> bool {
        now_ms < self.until_ms && self.states.contains(state.states())
    }
}

/// How a job that held its id ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settled {
    /// Acked.
    Done,
    /// A dead letter.
    Dead,
}

impl Settled {
    fn states(self) -> UniqueStates {
        match self {
            Settled::Done => UniqueStates::DONE,
            Settled::Dead => UniqueStates::DEAD,
        }
    }

    /// `done` or `dead`.
    pub fn name(self) -> &'static str {
        match self {
            Settled::Done => "done",
            Settled::Dead => "dead",
        }
    }
}

/// An enqueue that met an id held by a job that ran (or died) within its
/// uniqueness period: nothing was added ([`Enqueued::Duplicate`](super::Enqueued::Duplicate)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The id, held by the earlier job.
    pub id: String,
    /// How the earlier job ended.
    pub state: Settled,
    /// When its period ends (the id is free again then).
    pub until: SystemTime,
}

/// The answer of an enqueue a server backend found held, from its
/// `done:UNTIL` or `dead:UNTIL` (Unix milliseconds); anything else is
/// taken as queued.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn duplicate_of(id: String, answer: &str) -> super::Enqueued {
    let parsed = answer.split_once(':').and_then(|(state, until)| {
        let state = match state {
            "done" => Settled::Done,
            "dead" => Settled::Dead,
            _ => return None,
        };
        Some((state, until.parse::<u64>().ok()?))
    });
    match parsed {
        Some((state, until_ms)) => super::Enqueued::Duplicate(Duplicate {
            id,
            state,
            until: crate::jobs::clock::from_unix_ms(until_ms),
        }),
        None => super::Enqueued::AlreadyQueued(id),
    }
}
