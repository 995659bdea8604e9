//! Numbers and bytes as a page shows them.

use std::time::{Duration, SystemTime};

/// A duration in its two largest units: `3m 12s`, `2h 5m`, `4d 1h`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// How long ago `at` was (`in 5m` for a time to come).
pub fn ago(at: SystemTime, now: SystemTime) -> String {
    match now.duration_since(at) {
        Ok(past) => format!("{} ago", duration(past)),
        Err(future) => format!("in {}", duration(future.duration())),
    }
}

/// The start of a body: its text when it is UTF-8, else hex.
pub fn preview(body: &[u8], max: usize) -> String {
    let cut = &body[..body.len().min(max)];
    let more = if body.len() > max { "…" } else { "" };
    match std::str::from_utf8(cut) {
        Ok(text) => format!("{text}{more}"),
        // A cut in the middle of a character is still text.
        Err(e) if e.valid_up_to() + 4 > cut.len() && std::str::from_utf8(body).is_ok() => {
            format!("{}…", &body_text(cut, e.valid_up_to()))
        }
        Err(_) => {
            let hex: String = cut
                .iter()
                .take(max / 2)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("0x{hex}{}", if body.len() > max / 2 { "…" } else { "" })
        }
    }
}

fn body_text(cut: &[u8], valid: usize) -> String {
    String::from_utf8_lossy(&cut[..valid]).into_owned()
}

/// A count with thousands separated: `1 234 567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_show_as_text_or_hex() {
        assert_eq!(preview(b"hello", 10), "hello");
        assert_eq!(preview(b"hello world", 5), "hello…");
        assert_eq!(preview(&[0xff, 0x00], 10), "0xff00");
        assert_eq!(preview("héllo".as_bytes(), 2), "h…");
        assert_eq!(duration(Duration::from_secs(3725)), "1h 2m");
        assert_eq!(count(1_234_567), "1\u{202f}234\u{202f}567");
    }
}
