//! `dque requeue`: dead letters back into their queue.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::fail::Failure;
use crate::push_pop::{joining, open_raw, patiently};

/// Options of `dque requeue`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The ids are the dead letters' own (`dead N` in `dque dead DIR`). \
Each goes back at the end of the queue as it was stored, its attempts starting over."
)]
pub struct RequeueArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Dead letters to put back, by their dead-letter id.
    #[arg(required_unless_present = "all")]
    pub ids: Vec<u64>,
    /// Put every dead letter back.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

pub fn run(args: &RequeueArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    // Whatever the codec: a dead letter holds the item as its queue stored it.
    let queue = patiently(|| open_raw(&args.dir, &joining(), true)).map_err(fail)?;
    let ids = if args.all {
        queue
            .dead_letters()
            .map_err(fail)?
            .iter()
            .map(|letter| letter.id)
            .collect()
    } else {
        args.ids.clone()
    };
    for (done, &id) in ids.iter().enumerate() {
        queue.requeue_dead(id).map_err(|e| {
            let failure = match e {
                dque::Error::NotPending { id } => Failure::other(format!(
                    "no dead letter has id {id}; `dque dead {}` lists them",
                    args.dir.display()
                )),
                e => fail(e),
            };
            Failure::new(
                failure.code(),
                format!("{} ({done} requeued before it)", failure.message()),
            )
        })?;
    }
    queue.close().map_err(fail)?;
    println!(
        "requeued {} dead letters into {}",
        ids.len(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
