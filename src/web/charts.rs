//! Durations in a few bins, and those bins as an inline SVG bar chart (no
//! script, no style attribute: the Content-Security-Policy allows neither).

use maud::{html, Markup};

use crate::jobs::{Histogram, Timing};

/// The bins' upper bounds in seconds; one more bin holds the rest. Each is
/// a bucket boundary of the stats' [`Histogram`], so a bin is a sum of
/// whole buckets (a duration is counted by its whole seconds: the bin
/// `≤ 1 s` holds those under one second).
pub const BOUNDS: [u64; 16] = [
    1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21_600, 43_200, 86_400, 604_800,
];

/// Where bucket `index` of a stats histogram ends (exclusive), in seconds;
/// `None` for the last one (7 days or more).
fn bucket_end(index: usize) -> Option<u64> {
    let i = index as u64;
    match index {
        0..=59 => Some(i + 1),
        60..=118 => Some((i - 58) * 60),
        119..=141 => Some((i - 117) * 3_600),
        142..=147 => Some((i - 140) * 86_400),
        _ => None,
    }
}

/// Counts per bin: one per bound, then the rest.
pub fn bins(histogram: &Histogram) -> Vec<u64> {
    let mut bins = vec![0; BOUNDS.len() + 1];
    for (index, &n) in histogram.buckets.iter().enumerate() {
        let bin = match bucket_end(index) {
            Some(end) => BOUNDS
                .iter()
                .position(|&b| end <= b)
                .unwrap_or(BOUNDS.len()),
            None => BOUNDS.len(),
        };
        bins[bin] += n;
    }
    bins
}

fn label(bound: u64) -> String {
    match bound {
        b if b < 60 => format!("{b}s"),
        b if b < 3_600 => format!("{}m", b / 60),
        b if b < 86_400 => format!("{}h", b / 3_600),
        b => format!("{}d", b / 86_400),
    }
}

/// A bar chart of `timing`'s bins, titled `title`.
pub fn chart(title: &str, timing: &Timing) -> Markup {
    let bins = bins(&timing.histogram);
    let most = bins.iter().copied().max().unwrap_or(0).max(1);
    let (bar, gap, height) = (28u64, 4u64, 120u64);
    let width = (bar + gap) * bins.len() as u64;
    html! {
        figure.chart {
            figcaption {
                (title) ": " (timing.count) " jobs"
                @if timing.count > 0 { ", mean " (format!("{:.1}", timing.mean)) " s" }
            }
            svg xmlns="http://www.w3.org/2000/svg" role="img" width=(width) height=(height + 20)
                viewBox={ "0 0 " (width) " " (height + 20) } {
                title { (title) }
                @for (i, &n) in bins.iter().enumerate() {
                    @let h = n * height / most;
                    @let x = i as u64 * (bar + gap);
                    @let name = if i < BOUNDS.len() { format!("≤ {}", label(BOUNDS[i])) } else { "more".to_owned() };
                    g {
                        title { (name) ": " (n) }
                        rect class="bar" x=(x) y=(height - h) width=(bar) height=(h.max(if n > 0 { 1 } else { 0 })) {}
                        text x=(x + bar / 2) y=(height + 14) text-anchor="middle" font-size="9" {
                            @if i < BOUNDS.len() { (label(BOUNDS[i])) } @else { "+" }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_duration_lands_in_the_bin_of_its_bound() {
        for (secs, bin) in [
            (0, 0),
            (1, 1),
            (4, 2),
            (59, 5),
            (60, 6),
            (119, 6),
            (120, 7),
            (3599, 10),
            (3600, 11),
            (86_399, 14),
            (604_799, 15),
            (604_800, 16),
            (9_000_000, 16),
        ] {
            let mut h = Histogram::default();
            h.buckets[Histogram::bucket_of(Duration::from_secs(secs))] += 1;
            let bins = bins(&h);
            assert_eq!(bins[bin], 1, "{secs}s: {bins:?}");
        }
    }
}
