//! The full check of an open queue: its config, its segment files and its
//! count, the segments read through [`check_segments`].

use std::borrow::Cow;
use std::path::Path;

use super::Engine;
use crate::error::Result;
use crate::log::verify::{check_segments, read_bounded, Problem, ScanInput, VerifyReport};

impl Engine {
    /// Checks every segment of the queue, reading the mapped head and tail
    /// from their mappings and the others from disk, one at a time.
    pub fn verify(&self, queue: &Path, codec_id: u32) -> Result<VerifyReport> {
        let dir = self.dir();
        let mut problems = Vec::new();
        match dir.read_config() {
            Ok(config) if config.codec_id != codec_id => problems.push(Problem {
                segment: dir.config_path(),
                offset: 16,
                reason: format!(
                    "codec id is {}, the open handle's is {codec_id}",
                    config.codec_id
                ),
            }),
            Ok(_) => {}
            Err(e) => problems.push(Problem {
                segment: dir.config_path(),
                offset: 0,
                reason: e.to_string(),
            }),
        }

        let numbers = self.segment_numbers();
        let listing = dir.list()?;
        for &number in &listing.segments {
            if !numbers.contains(&number) {
                problems.push(Problem {
                    segment: dir.segment_path(number),
                    offset: 0,
                    reason: format!(
                        "segment file outside the queue's segments {}..={}: \
                         the next open would take it for part of the queue",
                        numbers.start(),
                        numbers.end()
                    ),
                });
            }
        }

        let input = ScanInput {
            dir,
            numbers,
            listed: &listing.segments,
            live: false,
        };
        let read = |number: u64| match self.mapped_segments().find(|s| s.header.number == number) {
            Some(segment) => Ok(Cow::Borrowed(segment.bytes())),
            None => read_bounded(&dir.segment_path(number)).map(Cow::Owned),
        };
        let mut report = check_segments(&input, read, |_| {});
        report.problems.splice(0..0, problems);
        // Damage found above already explains a count that differs; the count
        // is compared only for sound segments, where it must be exact.
        if report.problems.is_empty() && report.items() != self.len() {
            report.problems.push(Problem {
                segment: queue.to_path_buf(),
                offset: 0,
                reason: format!(
                    "the segments hold {} items, the open queue counts {}",
                    report.items(),
                    self.len()
                ),
            });
        }
        Ok(report)
    }
}
