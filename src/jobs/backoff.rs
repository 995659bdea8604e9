//! How long a nacked job waits before it runs again.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Exponential back-off with jitter: attempt `n` waits
/// `initial × factor^(n-1)`, at most `max`, then moved by up to
/// `± jitter` of itself so that jobs failing together do not return
/// together.
///
/// ```
/// use std::time::Duration;
/// use dque::jobs::Backoff;
///
/// let backoff = Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(60)).jitter(0.0);
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(4));
/// assert_eq!(backoff.delay(30), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    factor: f64,
    max: Duration,
    jitter: f64,
}

impl Default for Backoff {
    /// 1 s, doubling, at most 1 h, ± 10 %.
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(3600))
    }
}

impl Backoff {
    /// Waits `initial`, then `factor` times longer each attempt, at most
    /// `max`; jitter ± 10 %. A `factor` below 1 (or not a number) counts as 1.
    pub fn new(initial: Duration, factor: f64, max: Duration) -> Self {
        Backoff {
            initial,
            factor: if factor >= 1.0 { factor } else { 1.0 },
            max,
            jitter: 0.1,
        }
    }

    /// Sets the jitter: a fraction from 0 (none) to 1 (default 0.1), clamped.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The wait after attempt `attempt` (1 for the first) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(1_000) as i32;
        let base =
            (self.initial.as_secs_f64() * self.factor.powi(exponent)).min(self.max.as_secs_f64());
        let spread = if self.jitter > 0.0 {
            // Uniform in [-1, 1): a random hash is enough for spreading.
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            (random as f64 / u64::MAX as f64) * 2.0 - 1.0
        } else {
            0.0
        };
        let seconds = (base * (1.0 + self.jitter * spread)).max(0.0);
        Duration::try_from_secs_f64(seconds).unwrap_or(self.max)
    }
}
