//! `dque requeue`: dead letters back into their queue.

use std::process::ExitCode;

use crate::address::{Address, AddressExt, Make};
use crate::fail::Failure;
use crate::push_pop::{joining, open_raw, patiently};

/// Options of `dque requeue`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The ids are the dead letters' own (`dead N` in `dque dead DIR`), or in a \
jobs queue the jobs' ids (`job ID`). Each goes back at the end of the queue (a job: of its \
priority), its attempts starting over."
)]
pub struct RequeueArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// Dead letters to put back, by their dead-letter id (a job's id in a
    /// jobs queue).
    #[arg(required_unless_present = "all")]
    pub ids: Vec<String>,
    /// Put every dead letter back.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
}

pub fn run(args: &RequeueArgs) -> Result<ExitCode, Failure> {
    let Address::Dir(dir) = &args.address else {
        return requeue_jobs(args);
    };
    let fail = |e| Failure::from_queue(dir, e);
    let files = dque::QueueFiles::open(dir).and_then(|f| f.stats());
    if files.map_err(fail)?.codec_id == dque::jobs::JOB_CODEC_ID {
        return requeue_jobs(args);
    }
    let ids = args
        .ids
        .iter()
        .map(|id| {
            id.parse::<u64>()
                .map_err(|_| Failure::new(2, format!("{id:?}: dead-letter ids are numbers")))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    // Whatever the codec: a dead letter holds the item as its queue stored it.
    let queue = patiently(|| open_raw(dir, &joining(), true)).map_err(fail)?;
    let ids = if args.all {
        queue
            .dead_letters()
            .map_err(fail)?
            .iter()
            .map(|letter| letter.id)
            .collect()
    } else {
        ids
    };
    requeue_each(&ids, |&id| match queue.requeue_dead(id) {
        Err(dque::Error::NotPending { id }) => Err(Failure::other(format!(
            "no dead letter has id {id}; `dque dead {}` lists them",
            dir.display()
        ))),
        other => other.map_err(fail),
    })?;
    queue.close().map_err(fail)?;
    outln!("requeued {} dead letters into {}", ids.len(), dir.display())?;
    Ok(ExitCode::SUCCESS)
}

/// Requeues dead jobs of a jobs queue by their job ids.
fn requeue_jobs(args: &RequeueArgs) -> Result<ExitCode, Failure> {
    let address = &args.address;
    let queue = address.open(Make::No)?;
    let fail = |e| address.failure(e);
    let ids: Vec<String> = if args.all {
        let dead = queue.dead(usize::MAX).map_err(fail)?;
        dead.into_iter().map(|dead| dead.job.id).collect()
    } else {
        args.ids.clone()
    };
    requeue_each(&ids, |id| match queue.requeue_dead(id) {
        Err(dque::Error::NoSuchJob { id }) => Err(Failure::other(format!(
            "no dead job has id {id:?}; `dque dead {}` lists them",
            args.address
        ))),
        other => other.map_err(fail),
    })?;
    queue.close().map_err(fail)?;
    outln!("requeued {} dead jobs into {}", ids.len(), args.address)?;
    Ok(ExitCode::SUCCESS)
}

/// Requeues each of `ids`; a failure says how many went back before it.
fn requeue_each<I>(
    ids: &[I],
    mut requeue: impl FnMut(&I) -> Result<(), Failure>,
) -> Result<(), Failure> {
    for (done, id) in ids.iter().enumerate() {
        requeue(id).map_err(|failure| {
            Failure::new(
                failure.code(),
                format!("{} ({done} requeued before it)", failure.message()),
            )
        })?;
    }
    Ok(())
}
