//! `dque schedule`, `dque schedules` and `dque unschedule`: recurring
//! jobs on any ADDRESS. A schedule's jobs are enqueued by the leases of
//! the workers on the queue (`dque work`, or a program's worker): no
//! scheduler process is needed.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;
use dque::jobs::{Cadence, CatchUp, Schedule, ScheduleInfo};

use crate::address::{Address, AddressExt, Make};
use crate::fail::Failure;

/// Arguments of `dque schedule`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  dque schedule q heartbeat --every 30s ping
  dque schedule postgres://db/app#mail digest --cron '0 8 * * MON-FRI' --tz Europe/Paris \\
      --kind mail.Digest '{\"list\": \"all\"}'")]
pub struct ScheduleArgs {
    /// The queue: a directory (made if missing), postgres://…#QUEUE or redis://…#QUEUE.
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// The schedule's name; adding a name again replaces its schedule.
    pub name: String,
    /// A fixed interval: a number with a unit (500ms, 1s, 5m, 1h, 1d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "cron", required_unless_present = "cron")]
    pub every: Option<Duration>,
    /// A cron expression: 5 fields (minute hour day month weekday), or 6 with seconds first.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// The jobs' priority: smaller runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// A header NAME=VALUE for every job; repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub header: Vec<String>,
    /// The jobs' kind (header `klass`: the runtime's kind, qless's class).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// Missed ticks after downtime: latest (one job), skip (none), or N (up to N jobs).
    #[arg(long, value_name = "POLICY", default_value = "latest", value_parser = parse_catch_up)]
    pub catch_up: CatchUp,
    /// The body of every job.
    pub body: String,
}

/// Arguments of `dque schedules`.
#[derive(Debug, Args)]
pub struct SchedulesArgs {
    /// The queue: a directory, postgres://…#QUEUE or redis://…#QUEUE.
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// One JSON array instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `dque unschedule`.
#[derive(Debug, Args)]
pub struct UnscheduleArgs {
    /// The queue: a directory, postgres://…#QUEUE or redis://…#QUEUE.
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// The schedule to remove (the jobs it enqueued stay).
    pub name: String,
}

/// A duration with a unit: `500ms`, `1s`, `5m`, `1h`, `1d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?}: give a whole number with a unit: 500ms, 1s, 5m, 1h, 1d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(ms).filter(|&ms| ms > 0).ok_or_else(bad)?;
    Ok(Duration::from_millis(ms))
}

fn parse_catch_up(text: &str) -> Result<CatchUp, String> {
    match text {
        "latest" => Ok(CatchUp::Latest),
        "skip" => Ok(CatchUp::Skip),
        n => match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(CatchUp::Missed(n)),
            _ => Err(format!(
                "{text:?}: give latest, skip, or a number of ticks (1 or more)"
            )),
        },
    }
}

fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

fn catch_up_text(c: CatchUp) -> String {
    match c {
        CatchUp::Latest => "latest".into(),
        CatchUp::Skip => "skip".into(),
        CatchUp::Missed(n) => n.to_string(),
    }
}

pub fn cadence_text(s: &Schedule) -> String {
    match s.cadence() {
        Cadence::Every(every) => format!("every {}", duration_text(*every)),
        Cadence::Cron(expression) => format!("cron {expression:?} {}", s.zone()),
    }
}

fn rfc3339(t: SystemTime) -> String {
    crate::when::rfc3339(t)
}

/// `dque schedule`.
pub fn schedule(args: &ScheduleArgs) -> Result<ExitCode, Failure> {
    let mut schedule = match (&args.every, &args.cron) {
        (Some(every), _) => Schedule::every(args.name.clone(), *every),
        (None, Some(cron)) => Schedule::cron(args.name.clone(), cron.clone()),
        (None, None) => return Err(Failure::new(2, "give --every DURATION or --cron EXPR")),
    }
    .time_zone(args.tz.clone())
    .priority(args.priority)
    .catch_up(args.catch_up)
    .body(args.body.clone().into_bytes());
    for pair in &args.header {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| Failure::new(2, format!("--header {pair:?}: give it as NAME=VALUE")))?;
        schedule = schedule.header(name, value);
    }
    if let Some(kind) = &args.kind {
        schedule = schedule.kind(kind.clone());
    }
    // Checked before the queue is opened: bad input makes no queue.
    schedule.check().map_err(|e| match e {
        dque::Error::InvalidJob { reason } => Failure::new(2, reason),
        e => Failure::new(2, e.to_string()),
    })?;
    let queue = args.address.open(Make::IfMissing {
        segment_items: None,
    })?;
    let info = queue.schedule(schedule).map_err(|e| match e {
        dque::Error::InvalidJob { reason } => Failure::new(2, reason),
        e => args.address.failure(e),
    })?;
    outln!(
        "dque: schedule {:?} ({}): next run {}",
        info.schedule.name(),
        cadence_text(&info.schedule),
        rfc3339(info.next_run)
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A schedule as `dque schedules --json` (and `dque stats --json`) prints it.
pub fn json_of(info: &ScheduleInfo) -> serde_json::Value {
    let s = &info.schedule;
    let (every_ms, cron) = match s.cadence() {
        Cadence::Every(every) => (Some(every.as_millis() as u64), None),
        Cadence::Cron(expression) => (None, Some(expression.clone())),
    };
    serde_json::json!({
        "name": s.name(),
        "every_ms": every_ms,
        "cron": cron,
        "tz": s.zone(),
        "priority": s.priority_value(),
        "headers": s.headers().iter().map(|(n, v)| [n, v]).collect::<Vec<_>>(),
        "catch_up": catch_up_text(s.catch_up_policy()),
        "body": String::from_utf8_lossy(s.body_bytes()),
        "next_run": rfc3339(info.next_run),
    })
}

/// `dque schedules`.
pub fn schedules(args: &SchedulesArgs) -> Result<ExitCode, Failure> {
    let queue = args.address.open(Make::No)?;
    let listed = queue.schedules().map_err(|e| args.address.failure(e))?;
    if args.json {
        let all: Vec<_> = listed.iter().map(json_of).collect();
        outln!("{}", serde_json::Value::Array(all))?;
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        say!("dque: no schedules on this queue (dque schedule adds one)");
    }
    for info in &listed {
        outln!(
            "{}\t{}\tnext {}\tpriority {}\tcatch-up {}",
            info.schedule.name(),
            cadence_text(&info.schedule),
            rfc3339(info.next_run),
            info.schedule.priority_value(),
            catch_up_text(info.schedule.catch_up_policy())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `dque unschedule`.
pub fn unschedule(args: &UnscheduleArgs) -> Result<ExitCode, Failure> {
    let queue = args.address.open(Make::No)?;
    let removed = queue
        .unschedule(&args.name)
        .map_err(|e| args.address.failure(e))?;
    if !removed {
        return Err(Failure::new(
            1,
            format!(
                "no schedule {:?} on this queue (dque schedules lists them)",
                args.name
            ),
        ));
    }
    outln!("dque: schedule {:?} removed", args.name)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["5", "ms", "1.5s", "0s", "-1s", "3w"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
        assert_eq!(duration_text(Duration::from_secs(7200)), "2h");
    }
}
