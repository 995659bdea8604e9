//! The runtime's rules, in one place for every runtime (threads now, tokio
//! tasks later) and for `dque work`: what an attempt's result does to its
//! job, how often a lease is touched, which errors are a server's passing
//! trouble.

use std::time::{Duration, SystemTime};

use super::job::{JobError, KindOptions};
#[cfg(feature = "tokio")]
use crate::jobs::AsyncJobQueue;
use crate::jobs::{JobLease, JobQueue, Nacked, Retry};
use crate::{Error, Result};

/// How an attempt ended, before its job is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The handler returned `Ok`.
    Ok,
    /// The handler returned an error.
    Job(JobError),
    /// The handler panicked with this message.
    Panicked(String),
    /// The handler ran past its kind's timeout.
    TimedOut,
    /// The body did not decode as the kind's arguments.
    Undecodable(String),
    /// No handler for the job's kind (`None`: the job has no kind header).
    UnknownKind(Option<String>),
}

/// What a worker does with a job whose kind it does not run. Either way the
/// job is never lost: it waits for a worker that has the kind, or stays a
/// dead letter that `requeue_dead` (or `dque dead --requeue`) puts back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnknownKind {
    /// A failed attempt (the queue's back-off, then a dead letter once its
    /// attempts are used up), as Sidekiq and River do: a worker deployed
    /// before its kind's handler leaves the job to the others meanwhile.
    #[default]
    Retry,
    /// A dead letter at once.
    DeadLetter,
}

/// What to do with a job whose attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settle {
    Ack,
    Nack {
        retry: Retry,
        reason: String,
    },
    Fail {
        reason: String,
    },
    Release,
    /// Given back uncounted, to run after this delay.
    Snooze(Duration),
}

/// The reason of an attempt that timed out.
pub const TIMED_OUT: &str = "timed out";

/// What an attempt's end does to job `attempt` (1 for the first) of a kind
/// with `options` (`None`: unknown kind), the worker `stopping` or not.
pub(crate) fn settle(
    ended: Ended,
    attempt: u32,
    options: Option<&KindOptions>,
    stopping: bool,
    unknown: UnknownKind,
) -> Settle {
    let retry = |reason: String, after: Option<Duration>| {
        let used_up = options
            .and_then(|o| o.max_attempts)
            .is_some_and(|max| attempt >= max);
        if used_up {
            return Settle::Fail { reason };
        }
        let retry = match (after, options.and_then(|o| o.backoff)) {
            (Some(delay), _) => Retry::After(delay),
            (None, Some(backoff)) => Retry::After(backoff.delay(attempt)),
            (None, None) => Retry::Backoff,
        };
        Settle::Nack { retry, reason }
    };
    match ended {
        Ended::Ok => Settle::Ack,
        Ended::Job(JobError::Retry { reason, after }) => retry(reason, after),
        Ended::Job(JobError::Fail(reason)) => Settle::Fail { reason },
        Ended::Job(JobError::Snooze(delay)) => Settle::Snooze(delay),
        Ended::Job(JobError::Interrupted) if stopping => Settle::Release,
        Ended::Job(JobError::Interrupted) => retry("interrupted".to_owned(), None),
        Ended::Panicked(message) => retry(message, None),
        Ended::TimedOut => retry(TIMED_OUT.to_owned(), None),
        Ended::Undecodable(reason) => Settle::Fail { reason },
        Ended::UnknownKind(kind) => {
            let reason = match kind {
                Some(kind) => format!(
                    "unknown kind {kind:?}: no worker handler is registered for it \
                     (register it, then requeue the dead letter)"
                ),
                None => format!(
                    "no kind: the job has no {:?} header (enqueue it with its kind)",
                    super::KIND_HEADER
                ),
            };
            match unknown {
                UnknownKind::Retry => Settle::Nack {
                    retry: Retry::Backoff,
                    reason,
                },
                UnknownKind::DeadLetter => Settle::Fail { reason },
            }
        }
    }
}

/// What happened to a job after an attempt, as hooks and the summary see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// It ran: acked.
    Succeeded,
    /// It failed this attempt and runs again at `at`.
    Retrying {
        /// Why it failed.
        reason: String,
        /// When it is ready again.
        at: SystemTime,
    },
    /// It is a dead letter now.
    Dead {
        /// Why (the last attempt's reason).
        reason: String,
    },
    /// It was given back without counting the attempt (the worker stopped).
    Released,
    /// The handler snoozed it ([`JobError::Snooze`]): given back without
    /// counting the attempt, it runs again at `at`.
    Snoozed {
        /// When it is ready again.
        at: SystemTime,
    },
    /// Its lease was lost before it could be settled (it ran past its
    /// lease, or the server failed): it runs again, the attempt counted.
    Lost {
        /// The error of the settling call.
        error: String,
    },
}

impl Outcome {
    /// `ok`, `retry`, `dead`, `released`, `snoozed` or `lost`.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "ok",
            Outcome::Retrying { .. } => "retry",
            Outcome::Dead { .. } => "dead",
            Outcome::Released => "released",
            Outcome::Snoozed { .. } => "snoozed",
            Outcome::Lost { .. } => "lost",
        }
    }

    /// The reason, for a retry or a dead letter.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Retrying { reason, .. } | Outcome::Dead { reason } => Some(reason),
            Outcome::Lost { error } => Some(error),
            Outcome::Succeeded | Outcome::Released | Outcome::Snoozed { .. } => None,
        }
    }
}

/// Settles `lease` on `queue` as `settle` says. `Err` only for an error
/// that must stop the worker; a lost lease or a server's trouble is an
/// [`Outcome::Lost`].
pub(crate) fn apply(queue: &dyn JobQueue, lease: JobLease, settle: Settle) -> Result<Outcome> {
    let done = match settle {
        Settle::Ack => queue.ack(lease).map(|()| Outcome::Succeeded),
        Settle::Release => queue.release(lease).map(|()| Outcome::Released),
        Settle::Snooze(delay) => queue
            .release_after(lease, delay)
            .map(|at| Outcome::Snoozed { at }),
        Settle::Fail { reason } => queue
            .fail(lease, &reason)
            .map(|()| Outcome::Dead { reason }),
        Settle::Nack { retry, reason } => queue
            .nack(lease, retry, &reason)
            .map(|nacked| nacked_outcome(nacked, reason)),
    };
    settled(done)
}

/// [`apply`] for the async contract (the tokio runtime): the same calls,
/// the same outcomes.
#[cfg(feature = "tokio")]
pub(crate) async fn apply_async(
    queue: &dyn AsyncJobQueue,
    lease: JobLease,
    settle: Settle,
) -> Result<Outcome> {
    let done = match settle {
        Settle::Ack => queue.ack(lease).await.map(|()| Outcome::Succeeded),
        Settle::Release => queue.release(lease).await.map(|()| Outcome::Released),
        Settle::Snooze(delay) => queue
            .release_after(lease, delay)
            .await
            .map(|at| Outcome::Snoozed { at }),
        Settle::Fail { reason } => queue
            .fail(lease, &reason)
            .await
            .map(|()| Outcome::Dead { reason }),
        Settle::Nack { retry, reason } => queue
            .nack(lease, retry, &reason)
            .await
            .map(|nacked| nacked_outcome(nacked, reason)),
    };
    settled(done)
}

fn nacked_outcome(nacked: Nacked, reason: String) -> Outcome {
    match nacked {
        Nacked::Retrying { at } => Outcome::Retrying { reason, at },
        Nacked::Dead => Outcome::Dead { reason },
    }
}

/// A settling call's result as an outcome: a lost lease or a server's
/// trouble is [`Outcome::Lost`] (the job runs again), any other error
/// stops the worker.
fn settled(done: Result<Outcome>) -> Result<Outcome> {
    match done {
        Err(e) if matches!(e, Error::LeaseLost { .. }) || is_server_trouble(&e) => {
            Ok(Outcome::Lost {
                error: e.to_string(),
            })
        }
        other => other,
    }
}

/// How often a running job's lease is touched: a third of the lease time,
/// so two touches in a row may fail (a slow server) before the lease ends.
pub fn touch_interval(lease_time: Duration) -> Duration {
    (lease_time / 3).max(Duration::from_millis(1))
}

/// The lease time of every backend unless set otherwise
/// (`Options::visibility_timeout`, `PgOptions::lease_time`, `RedisOptions::lease_time`).
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(30);

/// Whether `error` is a server's trouble, which may pass (it is down,
/// restarting, refusing connections for now, or a call's outcome was
/// lost with its connection), rather than the queue's or the worker's: a
/// worker waits and tries again instead of stopping.
///
/// ```
/// use dque::runtime::is_server_trouble;
/// assert!(!is_server_trouble(&dque::Error::InvalidJob { reason: "bad id".into() }));
/// ```
pub fn is_server_trouble(error: &Error) -> bool {
    match error {
        Error::Backend { .. } | Error::OutcomeUnknown { .. } => true,
        // PostgreSQL's classes 08 (connection), 53 (resources), 57
        // (operator intervention: shutdown, starting up).
        Error::ServerRefused { code, .. } => ["08", "53", "57"]
            .iter()
            .any(|class| code.trim_start_matches("SQLSTATE ").starts_with(class)),
        _ => false,
    }
}

/// The pause before trying a server again after `previous` (zero: the
/// first error): 100 ms, doubling, at most 5 s.
pub fn trouble_pause(previous: Duration) -> Duration {
    (previous * 2).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_attempts() -> KindOptions {
        KindOptions::new().max_attempts(2).no_backoff()
    }

    #[test]
    fn a_retry_is_a_nack_until_the_kinds_attempts_are_used_up() {
        let first = settle(
            Ended::Job(JobError::retry("x")),
            1,
            Some(&two_attempts()),
            false,
            UnknownKind::Retry,
        );
        assert_eq!(
            first,
            Settle::Nack {
                retry: Retry::After(Duration::ZERO),
                reason: "x".into()
            }
        );
        let last = settle(
            Ended::Panicked("boom".into()),
            2,
            Some(&two_attempts()),
            false,
            UnknownKind::Retry,
        );
        assert_eq!(
            last,
            Settle::Fail {
                reason: "boom".into()
            }
        );
    }

    #[test]
    fn interrupted_is_released_only_while_stopping() {
        let ended = || Ended::Job(JobError::Interrupted);
        let o = KindOptions::new();
        assert_eq!(
            settle(ended(), 1, Some(&o), true, UnknownKind::Retry),
            Settle::Release
        );
        assert_eq!(
            settle(ended(), 1, Some(&o), false, UnknownKind::Retry),
            Settle::Nack {
                retry: Retry::Backoff,
                reason: "interrupted".into()
            }
        );
    }

    /// Pins the counted snooze: a snooze was a nack with its delay, so a
    /// kind of 1 attempt that snoozed became a dead letter. It must be a
    /// snooze whatever the attempt, never a failure.
    #[test]
    fn a_snooze_is_never_a_failure_whatever_the_attempt() {
        let one = KindOptions::new().max_attempts(1);
        for attempt in [1, 2, 100] {
            let delay = Duration::from_secs(60);
            assert_eq!(
                settle(
                    Ended::Job(JobError::snooze(delay)),
                    attempt,
                    Some(&one),
                    false,
                    UnknownKind::Retry
                ),
                Settle::Snooze(delay)
            );
        }
    }

    #[test]
    fn touches_come_at_a_third_of_the_lease() {
        assert_eq!(touch_interval(DEFAULT_LEASE_TIME), Duration::from_secs(10));
    }
}
