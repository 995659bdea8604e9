//! Instants after a caller's `Duration`, which may be as large as
//! `Duration::MAX`: adding it to `Instant::now()` must never overflow.

use std::time::{Duration, Instant};

/// Longest wait an instant is made for; any longer one is "never" for a
/// process (as with std's `recv_timeout(Duration::MAX)`).
const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// When a wait of `timeout` from now ends, or `None` if that is past any
/// instant this platform can hold: such a wait has no end.
pub fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// `now + timeout`, saturated at about a century from `now`: a lease or a
/// wake-up that far off never comes within a process's life.
pub fn saturating_after(now: Instant, timeout: Duration) -> Instant {
    let mut span = timeout.min(CENTURY);
    loop {
        // Halving ends: `now + 0` always fits.
        match now.checked_add(span) {
            Some(instant) => return instant,
            None => span /= 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_saturate_instead_of_overflowing() {
        let now = Instant::now();
        assert!(saturating_after(now, Duration::MAX) >= now + CENTURY / 2);
        assert_eq!(
            saturating_after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert_eq!(deadline_after(Duration::MAX), None);
        assert!(deadline_after(Duration::from_secs(1)).is_some());
    }
}
