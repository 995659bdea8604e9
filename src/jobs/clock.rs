//! Where a job queue reads the time: the system clock, or a clock a test
//! moves by hand (so due times and statistics are tested without sleeping).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// The time a job queue uses for due times and statistics. Lease lengths
/// are not read from it: they run on the monotonic clock.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told: for tests of due times.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use dque::jobs::{Clock, ManualClock};
///
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_005));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<SystemTime>>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// Moves the clock (and every clone of it) forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock();
        *now = now.checked_add(by).unwrap_or(*now);
    }

    /// Sets the clock (and every clone of it) to `time`.
    pub fn set(&self, time: SystemTime) {
        *self.0.lock() = time;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock()
    }
}

/// Milliseconds since the Unix epoch (0 before it): how times are stored.
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}
