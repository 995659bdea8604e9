//! When an item a consumer failed comes back: [`Retry`].

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// When an item handed back by [`Leased::nack_with`](crate::Leased::nack_with)
/// is delivered again: the plain queue's counterpart of the Jobs API's
/// [`jobs::Retry`](crate::jobs::Retry).
///
/// ```
/// use std::time::Duration;
/// use dque::Retry;
///
/// assert_eq!(Retry::After(Duration::from_secs(5)).delay(3), Duration::from_secs(5));
/// let third = Retry::Backoff.delay(3); // 4 s ± 10 %
/// assert!(third >= Duration::from_millis(3_600) && third <= Duration::from_millis(4_400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// After an exponential back-off for the attempt that failed: 1 s
    /// after the first, doubling, at most 1 h, ± 10 % so that items
    /// failing together do not come back together (the Jobs API's default
    /// [`Backoff`](crate::jobs::Backoff)).
    Backoff,
    /// After this delay (zero: at once, before newer items, as
    /// [`Leased::nack`](crate::Leased::nack)).
    After(Duration),
}

const FIRST: Duration = Duration::from_secs(1);
const LONGEST: Duration = Duration::from_secs(3600);
const JITTER: f64 = 0.1;

impl Retry {
    /// How long an item waits after failed attempt `attempt` (1 for the first).
    pub fn delay(&self, attempt: u16) -> Duration {
        match *self {
            Retry::After(delay) => delay,
            Retry::Backoff => {
                let exponent = i32::from(attempt.saturating_sub(1).min(64));
                let base = (FIRST.as_secs_f64() * 2f64.powi(exponent)).min(LONGEST.as_secs_f64());
                // Uniform in [-1, 1): a random hash is enough for spreading.
                let random = std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish();
                let spread = (random as f64 / u64::MAX as f64) * 2.0 - 1.0;
                Duration::try_from_secs_f64(base * (1.0 + JITTER * spread)).unwrap_or(LONGEST)
            }
        }
    }
}
