//! `dque verify`: read every byte, report every problem, exit non-zero on any.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dque::{QueueFiles, VerifyReport};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::fail::{Failure, DAMAGED};

/// Options of `dque verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "When no program has the queue open, verify holds its lock while it \
reads, so nothing changes under it. While a program has it open, verify reads without the \
lock and does not judge what follows the last whole frame of each segment, where a write may be \
in progress."
)]
pub struct VerifyArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Say nothing when the queue is healthy (the exit code tells).
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(args: &VerifyArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let files = match QueueFiles::open_locked(&args.dir) {
        Err(dque::Error::Locked { .. }) => {
            let who = crate::holder::lock_holder(&args.dir).map_or_else(
                || "a running program".into(),
                |pid| format!("process {pid}"),
            );
            say!(
                "dque: {} is in use by {who}: checking what is written so far, \
                 without judging the ends of segments, where writes may be in progress",
                args.dir.display()
            );
            QueueFiles::open(&args.dir)
        }
        other => other,
    }
    .map_err(fail)?;
    let report = verify_with_progress(&files).map_err(fail)?;
    let dead = files.dead_letter_queue().map_err(fail)?;
    let dead_report = dead
        .as_ref()
        .map(verify_with_progress)
        .transpose()
        .map_err(fail)?;
    let healthy = report.is_healthy() && dead_report.as_ref().is_none_or(VerifyReport::is_healthy);
    if !healthy || !args.quiet {
        print_report(&args.dir, &report)?;
        if let (Some(dead), Some(dead_report)) = (&dead, &dead_report) {
            print_report(dead.path(), dead_report)?;
        }
    }
    if healthy {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(DAMAGED))
    }
}

/// Queues smaller than this are read too fast for a progress bar to help.
const LARGE: u64 = 64 << 20;

/// Verifies with a progress bar on stderr, for large queues, drawn only on a
/// terminal.
pub fn verify_with_progress(files: &QueueFiles) -> dque::Result<VerifyReport> {
    let bar = ProgressBar::hidden().with_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message("verify");
    let report = files.verify(|done, total| {
        if bar.is_hidden() && total >= LARGE {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    report
}

fn print_report(dir: &Path, report: &VerifyReport) -> Result<(), Failure> {
    let state = match report.problems.len() {
        0 => "healthy".to_string(),
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    outln!(
        "{}: {} segments, {} items, {state}",
        dir.display(),
        report.segments.len(),
        report.items()
    )?;
    for problem in &report.problems {
        outln!(
            "  {} at byte {}: {}",
            problem.segment.display(),
            problem.offset,
            problem.reason
        )?;
    }
    Ok(())
}
