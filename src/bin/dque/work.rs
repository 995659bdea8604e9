//! `dque work`: a shell worker. Leases jobs and runs a command once per
//! job, N at a time: the body on stdin, the job in the environment. Exit 0
//! acks; another exit retries the job after a back-off, or makes it a dead
//! letter (with the exit status and the last line of stderr) once its
//! attempts are used up. The lease is touched while the command runs. On
//! SIGTERM or SIGINT it stops leasing, stops the commands it runs and gives
//! their jobs back without counting the attempt, then exits. A server
//! (PostgreSQL, Redis) that fails or goes away does not stop it: it says
//! so, tries again with back-off, and goes on once the server is back.
//!
//! The rules it shares with the worker runtime come from `dque::runtime`
//! (one implementation): the stop on SIGINT/SIGTERM, the touch interval (a
//! third of the lease time), the grace period, and which errors are a
//! server's passing trouble with their back-off.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dque::jobs::{Backoff, JobLease, JobQueue, Retry};
use dque::runtime::{
    is_server_trouble, touch_interval, trouble_pause, StopHandle, DEFAULT_GRACE,
    DEFAULT_LEASE_TIME, TIMED_OUT,
};

use crate::address::{Address, AddressExt, Make, Tuning};
use crate::fail::Failure;

/// Options of `dque work`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  dque work q -- sh -c 'lpr < /dev/stdin'          print each job's body
  dque work q --jobs 4 -- ./resize.sh               four jobs at a time
  dque work q --until-empty -- ./import.py          run what is ready, then exit

The command gets the body on stdin and DQUE_JOB_ID, DQUE_ATTEMPT (1 for the
first), DQUE_PRIORITY, DQUE_QUEUE and DQUE_HEADER_<NAME> for each header.")]
pub struct WorkArgs {
    /// The queue: a directory (or postgres://…#QUEUE, redis://…#QUEUE).
    #[arg(value_name = "ADDRESS", value_parser = crate::address::parse)]
    pub address: Address,
    /// How many jobs run at once.
    #[arg(long, short = 'j', value_name = "N", default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub jobs: usize,
    /// Exit (0) once no job is ready; scheduled jobs are not waited for.
    #[arg(long)]
    pub until_empty: bool,
    /// Attempts a job gets before it becomes a dead letter.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub attempts: u16,
    /// Seconds to wait before the first retry of a failed job; each retry
    /// waits twice as long as the one before (at most an hour, ± 10 %).
    /// 0 retries at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub backoff: f64,
    /// Seconds a command may run: past it, it is stopped (SIGTERM, then
    /// SIGKILL after the grace period) and the attempt fails with reason
    /// "timed out". A job's own timeout (`dque push --timeout`) takes
    /// precedence. Default: none.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// The name this worker leases jobs under, which `dque serve`'s
    /// workers page shows (default: host:pid on PostgreSQL and an
    /// embedded queue, host-pid-n on Redis; at most 188 bytes on an
    /// embedded queue).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub worker: Option<String>,
    /// The command to run for each job, and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// How long a lease waits for a job before the worker looks at its flags.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How long the stderr relay may run on after its command exited.
const RELAY_GRACE: Duration = Duration::from_millis(500);

/// What the worker threads share.
struct Crew<'a> {
    queue: &'a dyn JobQueue,
    args: &'a WorkArgs,
    /// `--timeout`, checked.
    timeout: Option<Duration>,
    /// Stopped by SIGTERM or SIGINT.
    stop: StopHandle,
    /// Set when the work is over (empty with --until-empty, or a failure).
    done: AtomicBool,
    /// Threads whose last look found no job ready.
    idle: AtomicUsize,
    failure: Mutex<Option<Failure>>,
    /// The last server error said, while the server is in trouble.
    trouble: Mutex<Option<String>>,
}

pub fn run(args: &WorkArgs) -> Result<ExitCode, Failure> {
    let first = Duration::try_from_secs_f64(args.backoff).map_err(|_| {
        Failure::new(
            2,
            format!(
                "--backoff {}: give a number of seconds, 0 or more",
                args.backoff
            ),
        )
    })?;
    let tuning = Tuning {
        max_attempts: Some(args.attempts),
        backoff: Some(Backoff::new(first, 2.0, Duration::from_secs(3600))),
        worker: args.worker.clone(),
    };
    let timeout = match args.timeout {
        None => None,
        Some(seconds) => Some(
            Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|t| !t.is_zero())
                .ok_or_else(|| {
                    Failure::new(
                        2,
                        format!("--timeout {seconds}: give a number of seconds, more than 0"),
                    )
                })?,
        ),
    };
    let queue = args.address.open_tuned(Make::No, &tuning)?;
    let stop = StopHandle::new();
    let _signals = stop.on_signals().map_err(Failure::other)?;
    let crew = Crew {
        queue: queue.as_ref(),
        args,
        timeout,
        stop,
        done: AtomicBool::new(false),
        idle: AtomicUsize::new(0),
        failure: Mutex::new(None),
        trouble: Mutex::new(None),
    };
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| crew.work());
        }
    });
    let failure = crew.failure.lock().expect("not poisoned").take();
    let closed = queue.close().map_err(|e| args.address.failure(e));
    if let Some(failure) = failure {
        return Err(failure);
    }
    closed?;
    if crew.stop.is_stopping() {
        eprintln!("dque: work stopped by a signal; jobs that were running were given back");
    }
    Ok(ExitCode::SUCCESS)
}

impl Crew<'_> {
    fn over(&self) -> bool {
        self.stop.is_stopping() || self.done.load(Ordering::SeqCst)
    }

    fn give_up(&self, failure: Failure) {
        self.failure
            .lock()
            .expect("not poisoned")
            .get_or_insert(failure);
        self.done.store(true, Ordering::SeqCst);
    }

    /// Says that the server is in trouble (each new message once).
    fn in_trouble(&self, error: &dque::Error) {
        let said = error.to_string();
        let mut trouble = self.trouble.lock().expect("not poisoned");
        if trouble.as_deref() != Some(said.as_str()) {
            eprintln!("dque: {said}; the worker tries again until the server is back");
            *trouble = Some(said);
        }
    }

    /// Says that the server answers again, if it was in trouble.
    fn out_of_trouble(&self) {
        let mut trouble = self.trouble.lock().expect("not poisoned");
        if trouble.take().is_some() {
            eprintln!("dque: the server answers again; working");
        }
    }

    /// Waits `pause`, or less if the work is over meanwhile.
    fn nap(&self, pause: Duration) {
        let until = Instant::now() + pause;
        while !self.over() && Instant::now() < until {
            std::thread::sleep(LOOK_EVERY.min(until.saturating_duration_since(Instant::now())));
        }
    }

    /// The failure of settling a job, if it must stop the worker: a
    /// server's trouble does not (the job's lease ends and it runs again).
    fn settled(&self, result: dque::Result<()>) -> Result<(), Failure> {
        match result {
            Err(e) if is_server_trouble(&e) => {
                self.in_trouble(&e);
                Ok(())
            }
            // The lease ran out while the command ran (a worker that
            // stalled): the job went back to the queue, and runs again;
            // as the worker runtime does, the work goes on.
            Err(dque::Error::LeaseLost { .. }) => Ok(()),
            Err(e) => Err(self.args.address.failure(e)),
            Ok(()) => Ok(()),
        }
    }

    /// One worker thread: lease, run, settle, until the work is over.
    fn work(&self) {
        let mut idle = false;
        let mut retry = Duration::ZERO;
        while !self.over() {
            let leased = self.queue.lease_timeout(LOOK_EVERY);
            match &leased {
                Err(e) if is_server_trouble(e) => {
                    self.in_trouble(e);
                    retry = trouble_pause(retry);
                    self.nap(retry);
                    continue;
                }
                Ok(_) if !retry.is_zero() => {
                    retry = Duration::ZERO;
                    self.out_of_trouble();
                }
                _ => {}
            }
            let (outcome, found) = match leased {
                // Told to stop while it waited: the job is not started.
                Ok(Some(lease)) if self.over() => (self.settled(self.queue.release(lease)), true),
                Ok(Some(lease)) => {
                    if idle {
                        idle = false;
                        self.idle.fetch_sub(1, Ordering::SeqCst);
                    }
                    (self.run_job(lease), true)
                }
                Ok(None) => (Ok(()), false),
                Err(e) => (Err(self.args.address.failure(e)), false),
            };
            if let Err(failure) = outcome {
                self.give_up(failure);
                break;
            }
            if !found && !idle {
                idle = true;
                self.idle.fetch_add(1, Ordering::SeqCst);
            }
            // Every thread found nothing at its last look, after its last
            // job (which may have made a job ready again) was settled.
            if self.args.until_empty && self.idle.load(Ordering::SeqCst) == self.args.jobs {
                self.done.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Runs the command for one job and settles the job by its exit.
    fn run_job(&self, lease: JobLease) -> Result<(), Failure> {
        let mut child = match self.spawn(&lease) {
            Ok(child) => child,
            Err(e) => {
                // The worker is misconfigured, not the job: give it back.
                self.settled(self.queue.release(lease))?;
                return Err(Failure::other(format!(
                    "cannot run {:?}: {e}",
                    self.args.command[0]
                )));
            }
        };
        // Each helper thread says when it is done, so that waiting for one
        // costs nothing once it is.
        let (relay_done, relays) = crossbeam_channel::unbounded::<()>();
        let mut running = 0;
        if let Some(mut stdin) = child.stdin.take() {
            let body = lease.body.clone();
            let done = relay_done.clone();
            running += 1;
            // A command that does not read its stdin closes the pipe: fine.
            std::thread::spawn(move || {
                drop(stdin.write_all(&body));
                drop(stdin);
                let _ = done.send(());
            });
        }
        let last_line = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let last_line = Arc::clone(&last_line);
            let done = relay_done.clone();
            running += 1;
            std::thread::spawn(move || {
                relay_stderr(stderr, &last_line);
                let _ = done.send(());
            });
        }
        let status = self.wait(child, &lease);
        // A process the command left behind may hold its pipes open: the
        // relays are given a moment, then left to finish on their own.
        let deadline = Instant::now() + RELAY_GRACE;
        for _ in 0..running {
            if relays.recv_deadline(deadline).is_err() {
                break;
            }
        }
        let status = match status.map_err(Failure::other)? {
            Waited::Exited(status) => status,
            // Stopped by a signal to this worker: back without an attempt.
            Waited::Stopped => return self.settled(self.queue.release(lease)),
            Waited::TimedOut => {
                let nacked = self.queue.nack(lease, Retry::Backoff, TIMED_OUT);
                return self.settled(nacked.map(drop));
            }
        };
        if status.success() {
            return self.settled(self.queue.ack(lease));
        }
        let last = last_line.lock().expect("not poisoned").clone();
        let reason = reason(status, &last);
        self.settled(self.queue.nack(lease, Retry::Backoff, &reason).map(drop))
    }

    fn spawn(&self, lease: &JobLease) -> std::io::Result<Child> {
        let mut command = Command::new(&self.args.command[0]);
        // A worker started by a job must not hand its own job's variables
        // (a header this job lacks, say) to the next.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("DQUE_") {
                command.env_remove(name);
            }
        }
        command
            .args(&self.args.command[1..])
            .env("DQUE_JOB_ID", &lease.id)
            .env("DQUE_ATTEMPT", lease.attempt.to_string())
            .env("DQUE_PRIORITY", lease.priority.to_string())
            .env("DQUE_QUEUE", self.queue.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            // Its own process group: stopping a job stops what it started.
            .process_group(0);
        for (name, value) in &lease.headers {
            command.env(format!("DQUE_HEADER_{name}"), value);
        }
        command.spawn()
    }

    /// Waits for the command, touching the lease, until it exits, the
    /// worker is told to stop, or the job's timeout passes (the job's own,
    /// else `--timeout`): then the command is stopped too.
    fn wait(&self, mut child: Child, lease: &JobLease) -> std::io::Result<Waited> {
        let started = Instant::now();
        let timeout = lease.timeout().or(self.timeout);
        let group = child.id();
        // A thread blocks in wait(2): the exit is seen at once.
        let (exited, exit) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = exited.send(child.wait());
        });
        let mut touched = Instant::now();
        loop {
            match exit.recv_timeout(LOOK_EVERY) {
                Ok(status) => return status.map(Waited::Exited),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    unreachable!("the waiter sends before it ends")
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            }
            if self.stop.is_stopping() {
                terminate(group, &exit)?;
                return Ok(Waited::Stopped);
            }
            if timeout.is_some_and(|t| started.elapsed() >= t) {
                terminate(group, &exit)?;
                return Ok(Waited::TimedOut);
            }
            // By the queue's own lease time (an embedded queue keeps the
            // one it was made with).
            let lease_time = self.queue.lease_time().unwrap_or(DEFAULT_LEASE_TIME);
            if touched.elapsed() >= touch_interval(lease_time) {
                // A lease lost meanwhile is found by the settle that follows.
                let _ = self.queue.touch(lease);
                touched = Instant::now();
            }
        }
    }
}

/// How a command's wait ended.
enum Waited {
    Exited(ExitStatus),
    /// The worker was told to stop.
    Stopped,
    /// The job's timeout passed.
    TimedOut,
}

/// Sends SIGTERM to the command's process group, then SIGKILL after the
/// grace period ([`DEFAULT_GRACE`], the worker runtime's) (and to what is left of the group once it exited); returns
/// when the command was reaped.
fn terminate(
    group: u32,
    exit: &crossbeam_channel::Receiver<std::io::Result<ExitStatus>>,
) -> std::io::Result<()> {
    let signal_group = |signal| {
        if let Some(group) = rustix::process::Pid::from_raw(group as i32) {
            let _ = rustix::process::kill_process_group(group, signal);
        }
    };
    signal_group(rustix::process::Signal::TERM);
    let status = match exit.recv_timeout(DEFAULT_GRACE) {
        Ok(status) => status,
        Err(_) => {
            signal_group(rustix::process::Signal::KILL);
            exit.recv().map_err(std::io::Error::other)?
        }
    };
    signal_group(rustix::process::Signal::KILL);
    status.map(drop)
}

/// Copies the command's stderr to ours, keeping its last non-empty line.
fn relay_stderr(stderr: impl std::io::Read, last_line: &Mutex<String>) {
    let mut ours = std::io::stderr();
    for line in BufReader::new(stderr).split(b'\n') {
        let Ok(line) = line else { break };
        let _ = ours.write_all(&line).and_then(|()| ours.write_all(b"\n"));
        let text = String::from_utf8_lossy(&line).trim().to_owned();
        if !text.is_empty() {
            *last_line.lock().expect("not poisoned") = text;
        }
    }
}

/// Why a job failed: `exit N` or `signal N`, then the last line of stderr.
fn reason(status: ExitStatus, last_line: &str) -> String {
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "failed".to_owned(),
    };
    match last_line {
        "" => how,
        line => format!("{how}: {line}"),
    }
}
