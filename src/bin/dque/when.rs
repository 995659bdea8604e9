//! Times as people read them: a UTC date and time (RFC 3339) and an age
//! ("3m ago", "in 2h"), not seconds since the epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds); a time before 1970 is
/// shown as 1970-01-01T00:00:00Z.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let of_day = secs % 86_400;
    format!(
        "{}T{:02}:{:02}:{:02}Z",
        date(secs),
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// `YYYY-MM-DD` of a Unix time (UTC), by Howard Hinnant's civil_from_days.
pub fn date(unix_seconds: u64) -> String {
    let z = (unix_seconds / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// How far `time` is from `now`: "3m ago", "in 2h", "now".
pub fn age(time: SystemTime, now: SystemTime) -> String {
    match time.duration_since(now) {
        Ok(ahead) if ahead.as_secs() > 0 => format!("in {}", span(ahead)),
        Ok(_) => "now".into(),
        Err(behind) => match behind.duration().as_secs() {
            0 => "now".into(),
            _ => format!("{} ago", span(behind.duration())),
        },
    }
}

/// A duration in its largest whole unit: 45s, 3m, 2h, 5d, 3y.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..86_400 => format!("{}h", s / 3_600),
        86_400..31_536_000 => format!("{}d", s / 86_400),
        _ => format!("{}y", s / 31_536_000),
    }
}

/// A time and its age: `2026-11-23T10:31:04Z (3m ago)`.
pub fn shown(time: SystemTime) -> String {
    format!("{} ({})", rfc3339(time), age(time, SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_795_478_399), "2026-11-23");
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(1_795_478_399)), "2026-11-23T23:59:59Z");
        assert_eq!(rfc3339(at(253_402_300_799)), "9999-12-31T23:59:59Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn ages_use_the_largest_whole_unit() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let ago = |s| age(now - Duration::from_secs(s), now);
        let ahead = |s| age(now + Duration::from_secs(s), now);
        assert_eq!(ago(0), "now");
        assert_eq!(ago(45), "45s ago");
        assert_eq!(ago(180), "3m ago");
        assert_eq!(ago(7_300), "2h ago");
        assert_eq!(ahead(3 * 86_400), "in 3d");
        assert_eq!(ahead(400 * 86_400), "in 1y");
    }
}
