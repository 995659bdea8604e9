//! `dque pause`, `dque resume`, `dque limit`, `dque limits` (issue 27),
//! `push --limit`, and what `dque stats` shows of them: on a directory,
//! `postgres://…#QUEUE` and `redis://…#QUEUE` alike.

use std::process::ExitCode;

use dque::jobs::{JobQueue, LIMITS_HEADER};

use crate::address::{Address, AddressExt, Make};
use crate::fail::Failure;

/// Options of `dque pause` and `dque resume`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque pause q           no job is leased from q (running ones finish; pushes are kept)
  dque resume q          workers take jobs again")]
pub struct PauseArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
}

/// Options of `dque limit`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Jobs name the limits they take with `dque push --limit NAME`
(header `limits`, names separated by commas). A lease skips a job whose
limit is full and takes it once a holder ends (ack, nack, fail, release,
or its lease runs out).

Examples:
  dque limit q tenant-7 1        tenant-7's jobs run one at a time
  dque limit q smtp 4            at most 4 jobs naming smtp run at once
  dque limit q smtp --remove     smtp's jobs run with no limit"
)]
pub struct LimitArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// The limit's name.
    pub name: String,
    /// At most this many of its jobs run at once (1 or more).
    #[arg(required_unless_present = "remove", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// Remove the limit instead.
    #[arg(long, conflicts_with = "max")]
    pub remove: bool,
}

/// Options of `dque limits`.
#[derive(Debug, clap::Args)]
pub struct LimitsArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// Print JSON: {"paused": …, "limits": [{name, max, running}]}.
    #[arg(long)]
    pub json: bool,
}

/// Runs `call` on the queue at `address`, then closes it.
fn on_queue<R>(
    address: &Address,
    call: impl FnOnce(&dyn JobQueue) -> dque::Result<R>,
) -> Result<R, Failure> {
    let fail = |e| address.failure(e);
    let queue = address.open(Make::No)?;
    let answer = call(queue.as_ref()).map_err(fail)?;
    queue.close().map_err(fail)?;
    Ok(answer)
}

pub fn pause(args: &PauseArgs, paused: bool) -> Result<ExitCode, Failure> {
    on_queue(&args.address, |q| match paused {
        true => q.pause(),
        false => q.resume(),
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn limit(args: &LimitArgs) -> Result<ExitCode, Failure> {
    match args.max {
        Some(max) => on_queue(&args.address, |q| q.set_limit(&args.name, max))?,
        None => {
            if !on_queue(&args.address, |q| q.remove_limit(&args.name))? {
                say!("no limit {:?} was set", args.name);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn list(args: &LimitsArgs) -> Result<ExitCode, Failure> {
    let (paused, limits) = on_queue(&args.address, |q| Ok((q.is_paused()?, q.limits()?)))?;
    if args.json {
        let limits: Vec<_> = limits
            .iter()
            .map(|l| serde_json::json!({"name": l.name, "max": l.max, "running": l.running}))
            .collect();
        outln!(
            "{}",
            serde_json::json!({"paused": paused, "limits": limits})
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if paused {
        outln!("paused: no job is leased until `dque resume`")?;
    }
    if limits.is_empty() {
        outln!("no limits")?;
    }
    for l in &limits {
        outln!("{}  {} of {} running", l.name, l.running, l.max)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Adds `--limit` names to a push's headers (refused beside a `limits`
/// header: give them one way).
pub fn add_limits(headers: &mut Vec<(String, String)>, names: &[String]) -> Result<(), Failure> {
    if names.is_empty() {
        return Ok(());
    }
    if headers.iter().any(|(name, _)| name == LIMITS_HEADER) {
        return Err(Failure::new(
            2,
            format!("--limit and --header {LIMITS_HEADER}=…: give the limits one way"),
        ));
    }
    for name in names {
        dque::jobs::check_limit_name(name).map_err(|e| Failure::new(2, e.to_string()))?;
    }
    headers.push((LIMITS_HEADER.to_owned(), names.join(",")));
    Ok(())
}

/// What `dque stats` shows of pause and limits: for a directory as stored
/// (read without opening the queue, no running counts), for a server as
/// the backend answers.
pub struct Shown {
    paused: bool,
    limits: Vec<(String, u32, Option<u32>)>,
}

impl Shown {
    pub fn of_dir(dir: &std::path::Path) -> dque::Result<Shown> {
        let (paused, limits) = dque::jobs::stored_limits(dir)?;
        Ok(Shown {
            paused,
            limits: limits.into_iter().map(|(n, m)| (n, m, None)).collect(),
        })
    }

    pub fn of_queue(queue: &dyn JobQueue) -> dque::Result<Shown> {
        Ok(Shown {
            paused: queue.is_paused()?,
            limits: queue
                .limits()?
                .into_iter()
                .map(|l| (l.name, l.max, Some(l.running)))
                .collect(),
        })
    }

    /// The lines of the text: `paused` always, `limits` when some are set.
    pub fn text(&self) -> String {
        let mut out = format!(
            "paused       {}\n",
            match self.paused {
                true => "yes (no leases until `dque resume`)",
                false => "no",
            }
        );
        if !self.limits.is_empty() {
            let each: Vec<String> = self
                .limits
                .iter()
                .map(|(name, max, running)| match running {
                    Some(running) => format!("{name} {running} of {max} running"),
                    None => format!("{name} at most {max}"),
                })
                .collect();
            out.push_str(&format!("limits       {}\n", each.join(", ")));
        }
        out
    }

    /// Adds `paused` and `limits` to a JSON object.
    pub fn add_to(&self, value: &mut serde_json::Value) {
        value["paused"] = self.paused.into();
        value["limits"] = self
            .limits
            .iter()
            .map(|(name, max, running)| {
                let mut limit = serde_json::json!({"name": name, "max": max});
                if let Some(running) = running {
                    limit["running"] = (*running).into();
                }
                limit
            })
            .collect::<Vec<_>>()
            .into();
    }
}
