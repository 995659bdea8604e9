//! The Redis backend (`RedisJobs`) against the Python client it shares its
//! jobs with, qless-py 0.11.4, side by side in one run on one throwaway
//! `redis-server` this bench starts (a unix socket in a temporary
//! directory, no persistence), small JSON bodies (`{"n": 123}`):
//!
//! - put (enqueue), one job a call, 1 producer and 8 (threads with a
//!   handle each; for qless-py, processes);
//! - pop + complete (lease + ack), 1 worker and 8, taking the jobs the
//!   put case before it left;
//! - batches of 100, 1 worker and 8: dque's `enqueue_batch`, and its
//!   `lease_batch` + acks against qless-py's `pop(100)` + completes (qless
//!   has no batch put);
//! - per job, from `INFO commandstats` before and after each case: the
//!   round trips (commands the clients sent), the Redis commands their Lua
//!   scripts ran, and the server's time in them.
//!
//! The Python side is `benches/qless_py_bench.py`, run with the tests'
//! virtualenv (`target/tmp/qless-venv`, made as the tests make it if
//! missing); without Python the qless-py columns say "—".
//!
//! ```sh
//! cargo bench --features redis --bench redis
//! DQUE_BENCH_JOBS=2000 DQUE_BENCH_PY_JOBS=500 cargo bench --features redis --bench redis  # quick
//! DQUE_BENCH_REDIS_AOF=1 cargo bench --features redis --bench redis  # also appendfsync always
//! ```
//!
//! Knobs: `DQUE_BENCH_JOBS` (dque's jobs a case, default 20000),
//! `DQUE_BENCH_PY_JOBS` (qless-py's, default 5000; 0 skips Python),
//! `DQUE_BENCH_REDIS_AOF=1` (a second server with `--appendonly yes
//! --appendfsync always`, its data in `DQUE_BENCH_DIR`),
//! `DQUE_BENCH_REDIS_DETAIL=1` (each case's commands per job, by name).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use dque::jobs::{JobQueue, NewJob, RedisJobs};

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/qless_clients/mod.rs"]
mod qless_clients;
#[path = "../tests/skip/mod.rs"]
mod skip;
use common::env_usize;

const QUEUE: &str = "bench";
/// Producers and workers of the concurrent cases.
const MANY: usize = 8;
const BATCH: usize = 100;

// ---------------------------------------------------------------- server

/// A throwaway `redis-server`, stopped (and its directory removed) on drop.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts one with `config` on top of: no TCP port, a unix socket, no
    /// RDB snapshots.
    fn start(config: &[&str]) -> Server {
        let dir = common::tempdir();
        let socket = dir.path().join("redis.sock");
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--save", "", "--dir"])
            .arg(dir.path())
            .args(config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let server = Server { child, dir };
        server.wait_ready();
        server
    }

    fn url(&self) -> String {
        format!("unix://{}", self.dir.path().join("redis.sock").display())
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Admin::connect(&self.url()).is_none() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("server.log"));
                panic!("redis-server did not start: {log:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

// ---------------------------------------------------- counting commands

/// Calls and microseconds of each command, from `INFO commandstats`.
type CommandStats = HashMap<String, (u64, u64)>;

/// The bench's own connection: flushes between cases, reads the counters.
struct Admin(redis::Connection);

impl Admin {
    fn connect(url: &str) -> Option<Admin> {
        let mut connection = redis::Client::open(url).ok()?.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut connection).ok()?;
        Some(Admin(connection))
    }

    /// Empties the database, so that each case starts alike; with AOF on,
    /// rewrites the file too, so that no case pays for a rewrite of the
    /// cases before it.
    fn flush(&mut self) {
        redis::cmd("FLUSHDB").query::<()>(&mut self.0).unwrap();
        if self.persistence("aof_enabled") != "1" {
            return;
        }
        redis::cmd("BGREWRITEAOF")
            .query::<String>(&mut self.0)
            .unwrap();
        while self.persistence("aof_rewrite_in_progress") != "0"
            || self.persistence("aof_rewrite_scheduled") != "0"
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Field `name` of `INFO persistence`.
    fn persistence(&mut self, name: &str) -> String {
        let text = self.info("persistence");
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'));
        value.unwrap_or_default().to_owned()
    }

    fn info(&mut self, section: &str) -> String {
        redis::cmd("INFO").arg(section).query(&mut self.0).unwrap()
    }

    /// PINGs a second, one at a time: the round-trip floor of one client.
    fn ping_rate(&mut self, count: usize) -> f64 {
        let start = Instant::now();
        for _ in 0..count {
            redis::cmd("PING").query::<String>(&mut self.0).unwrap();
        }
        count as f64 / start.elapsed().as_secs_f64()
    }

    fn command_stats(&mut self) -> CommandStats {
        let text = self.info("commandstats");
        text.lines().filter_map(parse_command_stat).collect()
    }
}

/// `cmdstat_evalsha:calls=3,usec=40,...` as `("evalsha", (3, 40))`.
fn parse_command_stat(line: &str) -> Option<(String, (u64, u64))> {
    let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
    let field = |key: &str| {
        fields
            .split(',')
            .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    Some((name.to_owned(), (field("calls")?, field("usec")?)))
}

/// Whether a client sends `command` itself. Both clients do each operation
/// as one script call, so every other command counted (HSET, ZADD, ...)
/// ran inside their scripts. `info` is the bench's own.
fn sent_by_client(command: &str) -> bool {
    let base = command.split('|').next().unwrap_or(command);
    matches!(
        base,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "script" | "client" | "hello" | "select"
    )
}

/// What a case cost the server, per job.
#[derive(Default)]
struct Cost {
    round_trips: f64,
    in_scripts: f64,
    server_us: f64,
    /// Calls per job of each command, most first.
    by_command: Vec<(String, f64)>,
}

fn cost(before: &CommandStats, after: &CommandStats, jobs: usize) -> Cost {
    let jobs = jobs.max(1) as f64;
    let mut cost = Cost::default();
    for (name, &(calls, usec)) in after {
        let (calls_before, usec_before) = before.get(name).copied().unwrap_or_default();
        if name == "info" || calls == calls_before {
            continue;
        }
        let calls = (calls - calls_before) as f64 / jobs;
        if sent_by_client(name) {
            cost.round_trips += calls;
            // A script's time includes the commands it ran.
            cost.server_us += (usec - usec_before) as f64 / jobs;
        } else {
            cost.in_scripts += calls;
        }
        cost.by_command.push((name.clone(), calls));
    }
    cost.by_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    cost
}

/// One measured case: jobs a second, and the cost per job.
struct Measured {
    rate: f64,
    cost: Cost,
}

/// Runs `case` (which returns the jobs it did) between two readings of
/// the counters.
fn measure(admin: &mut Admin, case: impl FnOnce() -> usize) -> Measured {
    let before = admin.command_stats();
    let start = Instant::now();
    let jobs = case();
    let seconds = start.elapsed().as_secs_f64();
    let after = admin.command_stats();
    Measured {
        rate: jobs as f64 / seconds,
        cost: cost(&before, &after, jobs),
    }
}

// ------------------------------------------------------------------ dque

fn body(n: usize) -> NewJob {
    NewJob::new(format!("{{\"n\": {n}}}"))
}

fn handles(url: &str, count: usize) -> Vec<RedisJobs> {
    (0..count)
        .map(|_| RedisJobs::connect(url, QUEUE).unwrap())
        .collect()
}

/// Each handle enqueues `per` jobs, one call each, on a thread of its own.
fn put_each(handles: &[RedisJobs], per: usize) -> usize {
    std::thread::scope(|scope| {
        for (h, handle) in handles.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..per {
                    handle.enqueue(body(h * per + i)).unwrap();
                }
            });
        }
    });
    handles.len() * per
}

/// Each handle leases and acks until the queue is empty; the jobs done.
fn pop_each(handles: &[RedisJobs]) -> usize {
    std::thread::scope(|scope| {
        let workers: Vec<_> = handles
            .iter()
            .map(|handle| {
                scope.spawn(move || {
                    let mut done = 0;
                    while let Some(lease) = handle.lease().unwrap() {
                        handle.ack(lease).unwrap();
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    })
}

/// Each handle enqueues `per` jobs in batches of [`BATCH`], on a thread
/// of its own.
fn put_batches(handles: &[RedisJobs], per: usize) -> usize {
    std::thread::scope(|scope| {
        for (h, handle) in handles.iter().enumerate() {
            scope.spawn(move || {
                let first = h * per;
                for start in (first..first + per).step_by(BATCH) {
                    let batch = (start..(start + BATCH).min(first + per))
                        .map(body)
                        .collect();
                    handle.enqueue_batch(batch).unwrap();
                }
            });
        }
    });
    handles.len() * per
}

/// Each handle leases [`BATCH`] at a time and acks them until the queue is
/// empty; the jobs done.
fn pop_batches(handles: &[RedisJobs]) -> usize {
    std::thread::scope(|scope| {
        let workers: Vec<_> = handles
            .iter()
            .map(|handle| {
                scope.spawn(move || {
                    let mut done = 0;
                    loop {
                        let leases = handle.lease_batch(BATCH).unwrap();
                        if leases.is_empty() {
                            return done;
                        }
                        done += leases.len();
                        for lease in leases {
                            handle.ack(lease).unwrap();
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    })
}

// -------------------------------------------------------------- qless-py

/// One `qless_py_bench.py` process, connected and waiting for its start.
struct PyProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PyProcess {
    fn start(python: &Path, url: &str, op: &str, count: usize, first: usize) -> PyProcess {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/qless_py_bench.py");
        let mut child = Command::new(python)
            .arg(script)
            .args([url, QUEUE, op])
            .args([count.to_string(), first.to_string()])
            .arg(format!("py-{op}-{first}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut process = PyProcess {
            child,
            stdin,
            stdout,
        };
        let ready = process.line();
        assert_eq!(ready["ready"], true, "qless_py_bench.py: {ready}");
        process
    }

    fn line(&mut self) -> serde_json::Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("qless_py_bench.py printed {line:?}"))
    }
}

/// `processes` processes doing `op` (`put`: `jobs` in all), started
/// together once all are connected; the jobs they did (their JSON lines).
fn run_py(
    python: &Path,
    url: &str,
    op: &str,
    jobs: usize,
    processes: usize,
) -> impl FnOnce() -> usize {
    let per = jobs / processes;
    let mut started: Vec<PyProcess> = (0..processes)
        .map(|p| PyProcess::start(python, url, op, per, p * per))
        .collect();
    move || {
        for process in &mut started {
            writeln!(process.stdin, "go").unwrap();
            process.stdin.flush().unwrap();
        }
        let mut done = 0;
        for mut process in started {
            let result = process.line();
            done += result["jobs"].as_u64().expect("a count of jobs") as usize;
            process.child.wait().unwrap();
        }
        done
    }
}

// ----------------------------------------------------------------- cases

/// A row: dque's measurement and, where there is one, qless-py's.
struct Row {
    case: String,
    dque: Measured,
    qless: Option<Measured>,
}

/// The put and pop + complete cases at `workers`, for both sides: one job
/// a call, or (`batch`) dque's `enqueue_batch` and `lease_batch` of
/// [`BATCH`] against qless-py's `pop(count)` (qless has no batch put: its
/// put only fills the queue there, and its column stays empty).
fn put_pop_rows(
    admin: &mut Admin,
    url: &str,
    python: Option<&Path>,
    sizes: (usize, usize),
    workers: usize,
    batch: bool,
) -> [Row; 2] {
    let (jobs, py_jobs) = sizes;
    let dque = handles(url, workers);
    type Put = fn(&[RedisJobs], usize) -> usize;
    type Pop = fn(&[RedisJobs]) -> usize;
    let (put, pop): (Put, Pop) = if batch {
        (put_batches, pop_batches)
    } else {
        (put_each, pop_each)
    };
    admin.flush();
    let dque_put = measure(admin, || put(&dque, jobs / workers));
    let dque_pop = measure(admin, || pop(&dque));
    let (mut qless_put, mut qless_pop) = (None, None);
    if let Some(python) = python {
        admin.flush();
        let fill = run_py(python, url, "put", py_jobs, workers);
        if batch {
            fill();
        } else {
            qless_put = Some(measure(admin, fill));
        }
        let op = if batch { "popbatch" } else { "pop" };
        qless_pop = Some(measure(admin, run_py(python, url, op, 0, workers)));
    }
    let plural = if workers == 1 { "" } else { "s" };
    let (put_case, pop_case) = if batch {
        (
            format!("enqueue_batch of {BATCH}, {workers} producer{plural}"),
            format!("lease_batch / pop of {BATCH} + completes, {workers} worker{plural}"),
        )
    } else {
        (
            format!("put, {workers} producer{plural}"),
            format!("pop + complete, {workers} worker{plural}"),
        )
    };
    [
        Row {
            case: put_case,
            dque: dque_put,
            qless: qless_put,
        },
        Row {
            case: pop_case,
            dque: dque_pop,
            qless: qless_pop,
        },
    ]
}

/// The rows of one server configuration, and its PING floor.
fn run(config: &[&str], python: Option<&Path>, jobs: usize, py_jobs: usize) -> (Vec<Row>, f64) {
    let server = Server::start(config);
    let url = server.url();
    let mut admin = Admin::connect(&url).expect("connect to redis-server");
    let ping = admin.ping_rate(jobs);
    let mut rows = Vec::new();
    for batch in [false, true] {
        for workers in [1, MANY] {
            let sizes = (jobs, py_jobs);
            rows.extend(put_pop_rows(
                &mut admin, &url, python, sizes, workers, batch,
            ));
        }
    }
    (rows, ping)
}

// ----------------------------------------------------------------- table

fn pair(dque: f64, qless: Option<f64>, digits: usize) -> String {
    match qless {
        Some(q) => format!("{dque:.digits$} / {q:.digits$}"),
        None => format!("{dque:.digits$} / —"),
    }
}

fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}\n");
    println!(
        "| case | dque | qless-py | dque / qless-py | round trips/job (dque / py) \
         | Redis cmds in scripts/job (dque / py) | server µs/job (dque / py) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        let (d, q) = (&row.dque, row.qless.as_ref());
        println!(
            "| {} | {:.0}/s | {} | {} | {} | {} | {} |",
            row.case,
            d.rate,
            q.map_or("—".into(), |q| format!("{:.0}/s", q.rate)),
            q.map_or("—".into(), |q| format!("{:.2}x", d.rate / q.rate)),
            pair(d.cost.round_trips, q.map(|q| q.cost.round_trips), 2),
            pair(d.cost.in_scripts, q.map(|q| q.cost.in_scripts), 1),
            pair(d.cost.server_us, q.map(|q| q.cost.server_us), 1),
        );
    }
}

/// Each case's commands per job, by name (`DQUE_BENCH_REDIS_DETAIL=1`).
fn print_detail(rows: &[Row]) {
    let line = |who: &str, cost: &Cost| {
        let commands: Vec<String> = cost
            .by_command
            .iter()
            .map(|(name, calls)| format!("{name} {calls:.2}"))
            .collect();
        println!("  {who}: {}", commands.join(", "));
    };
    println!("\nRedis commands per job, by name:");
    for row in rows {
        println!("- {}", row.case);
        line("dque", &row.dque.cost);
        if let Some(qless) = &row.qless {
            line("qless-py", &qless.cost);
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !redis_installed() {
        println!("skipped: redis-server is not installed (Debian: apt-get install redis-server)");
        return;
    }
    let jobs = env_usize("DQUE_BENCH_JOBS", 20_000).max(MANY);
    let py_jobs = env_usize("DQUE_BENCH_PY_JOBS", 5_000);
    let python = if py_jobs == 0 {
        println!("qless-py rows skipped: DQUE_BENCH_PY_JOBS=0");
        None
    } else {
        let python = qless_clients::python();
        if python.is_none() {
            println!("qless-py rows skipped: the Python virtualenv could not be set up");
        }
        python
    };
    let py_jobs = py_jobs.max(MANY);

    let mut configs = vec![(
        "no persistence (--appendonly no)",
        vec!["--appendonly", "no"],
    )];
    if std::env::var("DQUE_BENCH_REDIS_AOF").as_deref() == Ok("1") {
        configs.push((
            "AOF, fsync every write (--appendonly yes --appendfsync always)",
            // Rewrites only between cases (`Admin::flush`).
            vec![
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--auto-aof-rewrite-percentage",
                "0",
            ],
        ));
    }
    for (name, config) in configs {
        let (rows, ping) = run(&config, python, jobs, py_jobs);
        print_table(
            &format!(
                "RedisJobs against qless-py 0.11.4, redis-server {name}, unix socket; \
                 {jobs} dque jobs a case, {py_jobs} qless-py jobs"
            ),
            &rows,
        );
        println!("\nfloor: one Rust client's PING round trips on this socket: {ping:.0}/s");
        if std::env::var("DQUE_BENCH_REDIS_DETAIL").as_deref() == Ok("1") {
            print_detail(&rows);
        }
    }
}
