//! `dque`: inspect, verify, repair, push to, pop from and benchmark a queue
//! directory from the shell.

#[macro_use]
mod output;

mod address;
mod bench;
mod fail;
mod holder;
mod job;
mod limits;
mod push_pop;
mod records;
mod recurring;
mod repair;
mod report;
mod requeue;
mod salvage;
mod serve;
mod stats;
mod verify;
mod when;
mod work;
mod workers;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use fail::Failure;

/// Inspect, verify, repair and use dque queues from the shell.
///
/// A queue is a directory. Read-only commands (stats, peek, dump, dead, verify)
/// work while a program has the queue open. push, pop, requeue and workers join
/// the queue in shared mode: they work beside programs that share it
/// (Options::shared) and beside each other, and say so when a program holds it
/// alone. repair needs it closed.
#[derive(Debug, Parser)]
#[command(name = "dque", version, about, long_about)]
#[command(after_help = fail::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Count items, segments and bytes (reads headers and the head and tail segments only).
    Stats(stats::StatsArgs),
    /// Show the first records: id, delivery attempts, and the bytes as text or hex.
    Peek(records::PeekArgs),
    /// Show every record, from head to tail.
    Dump(records::DumpArgs),
    /// Show the dead letters: items moved out after failing too often, with why.
    Dead(records::DeadArgs),
    /// Put dead letters back at the end of their queue.
    Requeue(requeue::RequeueArgs),
    /// Add jobs to a queue (a jobs queue or a plain raw-bytes one): from arguments, a file, or stdin.
    Push(push_pop::PushArgs),
    /// Take jobs from a queue (the next ready one by priority) and write their bodies to stdout.
    Pop(push_pop::PopArgs),
    /// Read every byte of the queue and check every CRC, marker and count.
    Verify(verify::VerifyArgs),
    /// Cut torn tails and move damaged segments aside so that the queue opens again.
    Repair(repair::RepairArgs),
    /// Show the records still readable in a damaged segment file, or push them into a queue.
    Salvage(salvage::SalvageArgs),
    /// Measure Safe against Turbo (and Periodic, and batches) on the disk holding DIR.
    Bench(bench::BenchArgs),
    /// List the processes sharing the queue and the items each holds leased.
    Workers(workers::WorkersArgs),
    /// Run a command once per job: body on stdin, job in the environment; exit 0 acks.
    Work(work::WorkArgs),
    /// Stop leases from a queue (running jobs finish, pushes are kept) until `dque resume`.
    Pause(limits::PauseArgs),
    /// Let leases take jobs from a paused queue again.
    Resume(limits::PauseArgs),
    /// Set (or --remove) a limit: at most N jobs that name it run at once.
    Limit(limits::LimitArgs),
    /// List a queue's limits with the jobs holding each now.
    Limits(limits::LimitsArgs),

    /// Add or replace a recurring job: every DURATION or at cron times; `dque work` (any worker) enqueues it.
    Schedule(recurring::ScheduleArgs),
    /// List the recurring jobs with their next runs.
    Schedules(recurring::SchedulesArgs),
    /// Remove a recurring job (the jobs it enqueued stay).
    Unschedule(recurring::UnscheduleArgs),
    /// Show one job whatever its state (waiting, running, dead, completed): times, worker, history.
    Job(job::JobArgs),
    /// Serve the dashboard: every queue's numbers, its jobs and dead letters, actions, /metrics.
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<ExitCode, Failure> = match &cli.command {
        Command::Stats(args) => stats::run(args),
        Command::Peek(args) => records::peek(args),
        Command::Dump(args) => records::dump(args),
        Command::Dead(args) => records::dead(args),
        Command::Requeue(args) => requeue::run(args),
        Command::Push(args) => push_pop::push(args),
        Command::Pop(args) => push_pop::pop(args),
        Command::Verify(args) => verify::run(args),
        Command::Repair(args) => repair::run(args),
        Command::Salvage(args) => salvage::run(args),
        Command::Bench(args) => bench::run(args).map_err(Failure::other),
        Command::Workers(args) => workers::run(args),
        Command::Work(args) => work::run(args),
        Command::Pause(args) => limits::pause(args, true),
        Command::Resume(args) => limits::pause(args, false),
        Command::Limit(args) => limits::limit(args),
        Command::Limits(args) => limits::list(args),

        Command::Schedule(args) => recurring::schedule(args),
        Command::Schedules(args) => recurring::schedules(args),
        Command::Unschedule(args) => recurring::unschedule(args),
        Command::Job(args) => job::run(args),
        Command::Serve(args) => serve::run(args),
    };
    // What `print!` left in stdout's buffer, its failure reported as any.
    let result = result.and_then(|code| output::flush().map(|()| code));
    result.unwrap_or_else(|failure| failure.report())
}
