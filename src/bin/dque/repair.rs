//! `dque repair`: say what will be done, do it, then check the result.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::fail::{Failure, DAMAGED};

/// Options of `dque repair`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Repair cuts torn tails back to the last whole record (what every open \
does), and moves a segment it cannot read into DIR/quarantine/, never deleting it; the items \
in a moved segment leave the queue (their ids are listed). A gap a move leaves in the middle \
gets a placeholder segment, so that the segments after it still open. The queue must be \
closed: repair holds its lock from the first read to the last write."
)]
pub struct RepairArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Only say what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do it without asking (needed when stdin is not a terminal).
    #[arg(short, long)]
    pub yes: bool,
}

pub fn run(args: &RepairArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let plan = dque::repair(&args.dir, true).map_err(fail)?;
    if plan.actions.is_empty() {
        outln!("{}: nothing to repair", args.dir.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.dry_run || !args.yes {
        outln!("{plan}")?;
    }
    if args.dry_run {
        outln!("dry run: nothing was changed")?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.yes && !confirmed()? {
        outln!("nothing was changed")?;
        return Ok(ExitCode::from(1));
    }
    // Planned again under the lock it then keeps: the queue may have
    // changed since the plan above was shown.
    let done = dque::repair(&args.dir, false).map_err(fail)?;
    outln!("{done}")?;
    let opened = &done.opened;
    for path in opened
        .removed_temp_files
        .iter()
        .chain(&opened.deleted_segments)
    {
        outln!("  removed {}", path.display())?;
    }
    let files = dque::QueueFiles::open(&args.dir).map_err(fail)?;
    let report = crate::verify::verify_with_progress(&files).map_err(fail)?;
    outln!("after repair: {report}")?;
    if report.is_healthy() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(DAMAGED))
    }
}

/// Asks on the terminal; without one, the answer is no (use --yes).
fn confirmed() -> Result<bool, Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::new(
            2,
            "stdin is not a terminal: pass --yes to repair, or --dry-run to look",
        ));
    }
    out!("go ahead? [y/N] ")?;
    crate::output::flush()?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(Failure::other)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
