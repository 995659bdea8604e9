//! `dque job ADDRESS ID`: one job's whole record whatever its state
//! (ready, scheduled, leased, dead, or completed and kept), with its
//! history, as text or JSON (`JobInfo::to_json`, what a dashboard reads).

use std::process::ExitCode;

use dque::jobs::JobInfo;

use crate::address::{Address, AddressExt, Make};
use crate::fail::{Failure, EMPTY};
use crate::when::shown;

/// Options of `dque job`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque job q order-7                      one job: state, times, worker, history
  dque job 'redis://localhost#mail' 3f2a --json

Completed jobs are kept a day (at most 50,000) by default: a directory's
jobs/history/keep, PostgreSQL's PgOptions::keep_completed, Redis's qless
config jobs-history and jobs-history-count. Exit code 6: no such job.")]
pub struct JobArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// The job's id (the caller's, or the one the queue made up).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Print one JSON object instead of text, for scripts and pages.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &JobArgs) -> Result<ExitCode, Failure> {
    let queue = args.address.open(Make::No)?;
    let found = queue
        .job_info(&args.id)
        .map_err(|e| args.address.failure(e));
    let closed = queue.close().map_err(|e| args.address.failure(e));
    let Some(info) = found? else {
        closed?;
        return Err(Failure::new(
            EMPTY,
            format!(
                "no job {:?} in queue {}: never enqueued, or completed and no longer kept",
                args.id,
                queue.name()
            ),
        ));
    };
    closed?;
    if args.json {
        outln!("{}", info.to_json())?;
    } else {
        out!("{}", text(&info))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The record as an operator reads it.
fn text(info: &JobInfo) -> String {
    let job = &info.job;
    let mut out = format!("job {} in queue {}: {}\n", job.id, info.queue, info.state);
    let mut line = |name: &str, value: String| out.push_str(&format!("  {name:<11} {value}\n"));
    line("priority", job.priority.to_string());
    line("attempts", job.attempt.to_string());
    line("enqueued", shown(job.enqueued_at));
    let times = [
        ("due", info.due_at),
        ("started", info.started_at),
        ("finished", info.finished_at),
    ];
    for (name, time) in times {
        if let Some(time) = time {
            line(name, shown(time));
        }
    }
    if let Some(worker) = &info.worker {
        line("worker", worker.clone());
    }
    if let Some(timeout) = info.timeout {
        line("timeout", format!("{:.3} s", timeout.as_secs_f64()));
    }
    if let Some(error) = &info.last_error {
        line("last error", error.clone());
    }
    for (name, value) in &job.headers {
        line("header", format!("{name}={value}"));
    }
    line("body", body(&job.body));
    out.push_str("history\n");
    for event in &info.history {
        let mut said = format!("  {}  {}", shown(event.at), event.what);
        if let Some(worker) = &event.worker {
            said.push_str(&format!(" by {worker}"));
        }
        if let Some(detail) = &event.detail {
            said.push_str(&format!(" ({detail})"));
        }
        out.push_str(&said);
        out.push('\n');
    }
    out
}

/// The body: its size, then its text (or hex), the first 200 characters.
fn body(bytes: &[u8]) -> String {
    const SHOWN: usize = 200;
    let cut = &bytes[..bytes.len().min(SHOWN)];
    let more = if bytes.len() > SHOWN { " …" } else { "" };
    match std::str::from_utf8(cut) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            format!("{} bytes: {}{more}", bytes.len(), text.escape_debug())
        }
        _ => {
            let hex: Vec<String> = cut.iter().map(|b| format!("{b:02x}")).collect();
            format!("{} bytes, hex: {}{more}", bytes.len(), hex.join(" "))
        }
    }
}
