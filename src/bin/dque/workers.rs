//! `dque workers`: the processes that share a queue, and the items each
//! holds leased.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::UNIX_EPOCH;

use crate::fail::Failure;
use crate::push_pop::{joining, open_raw, patiently};

/// Options of `dque workers`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Lists the handles of the programs that share the queue \
(opened with Options::shared), with pid, host, start time and leased item ids. \
It joins the queue to look, so a queue held by a program in exclusive mode exits 4.")]
pub struct WorkersArgs {
    /// The queue directory.
    pub dir: PathBuf,
    /// Print JSON: a list of {pid, host, started_unix_ms, started (RFC 3339), leases}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &WorkersArgs) -> Result<ExitCode, Failure> {
    let fail = |e| Failure::from_queue(&args.dir, e);
    let queue = patiently(|| open_raw(&args.dir, &joining(), true)).map_err(fail)?;
    let workers: Vec<_> = queue
        .workers()
        .map_err(fail)?
        .into_iter()
        .filter(|worker| !worker.this_handle)
        .collect();
    queue.close().map_err(fail)?;
    let started_ms = |w: &dque::Worker| {
        w.started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    if args.json {
        let list: Vec<_> = workers
            .iter()
            .map(|w| {
                serde_json::json!({
                    "pid": w.pid,
                    "host": w.host,
                    "started_unix_ms": started_ms(w),
                    "started": crate::when::rfc3339(w.started),
                    "leases": w.leases,
                })
            })
            .collect();
        outln!("{}", serde_json::Value::Array(list))?;
        return Ok(ExitCode::SUCCESS);
    }
    if workers.is_empty() {
        outln!("no other process has {} open", args.dir.display())?;
    }
    for w in &workers {
        let leases: Vec<String> = w.leases.iter().map(u64::to_string).collect();
        outln!(
            "pid {} on {}, since {}, holds {} lease(s){}{}",
            w.pid,
            w.host,
            crate::when::shown(w.started),
            w.leases.len(),
            if leases.is_empty() { "" } else { ": " },
            leases.join(" ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
