//! A throwaway PostgreSQL server for the tests, started from the binaries
//! on PATH (`initdb`, `postgres`) or else where Debian puts them and
//! `.ci/run` looks (`/usr/lib/postgresql/NN/bin`, the newest), as redis-rs's tests start
//! `redis-server`: a temporary data directory, a Unix socket in it, no TCP
//! port, trust authentication for user `dque` (and for any other name, so
//! an unknown role is refused as such), a password for user
//! [`PASSWORD_USER`] (scram-sha-256). One server per test binary,
//! started at first use; a watchdog stops it and removes its directory
//! when the test process is gone (however it ends).
//!
//! The server refuses to run as root: as root, it runs as user `postgres`
//! (`runuser`). Without the binaries a test is skipped with one line
//! naming the package, unless `CI=true`, where it fails.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The user that must give a password ([`PASSWORD`]).
pub const PASSWORD_USER: &str = "dque_pw";
/// Its password.
pub const PASSWORD: &str = "right horse battery";

/// A running server: connect with [`PgServer::url`].
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
}

impl PgServer {
    /// The server of this test binary, started if needed; `None` (after
    /// printing why) when PostgreSQL is not installed and this is not CI.
    pub fn get() -> Option<&'static PgServer> {
        static SERVER: OnceLock<Option<PgServer>> = OnceLock::new();
        SERVER.get_or_init(start).as_ref()
    }

    /// A connection string for database `postgres` as user `dque`.
    pub fn url(&self) -> String {
        format!(
            "host={} user=dque dbname=postgres",
            self.socket_dir().display()
        )
    }

    /// A connection string for database `dbname` as `user`, with `password`.
    pub fn url_as(&self, user: &str, password: Option<&str>, dbname: &str) -> String {
        let password = password.map_or(String::new(), |p| format!(" password='{p}'"));
        format!(
            "host={} user={user} dbname={dbname}{password}",
            self.socket_dir().display()
        )
    }

    /// The ADDRESS of the `dque` command for `queue` on this server.
    pub fn address(&self, queue: &str) -> String {
        // libpq's URI form, the socket directory as `host`, percent-encoded.
        let host: String = self.socket_dir().display().to_string().replace('/', "%2F");
        format!("postgres://dque@{host}/postgres#{queue}")
    }

    /// What the server wrote to its log (since it first started).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Restarts the server as an operator would (`pg_ctl restart`, fast
    /// mode: sessions are ended, the data is flushed), and waits until it
    /// takes connections again.
    pub fn restart(&self) {
        self.stop_and_start("fast");
    }

    /// Stops the server at once (`-m immediate`: a crash, as far as the
    /// data is concerned) and starts it again.
    #[allow(clippy::zombie_processes)] // the server outlives this call
    pub fn restart_immediate(&self) {
        self.stop_and_start("immediate");
    }

    /// Stops the server (fast mode), keeps it down for `pause`, and starts
    /// it again: longer than a handle waits for a server coming back.
    pub fn down_for(&self, pause: Duration) {
        self.stop_and_start_after("fast", pause);
    }

    fn stop_and_start(&self, mode: &str) {
        self.stop_and_start_after(mode, Duration::ZERO);
    }

    #[allow(clippy::zombie_processes)] // the server outlives this call
    fn stop_and_start_after(&self, mode: &str, pause: Duration) {
        let data = self.dir.join("data");
        let stop = as_postgres(&["pg_ctl", "-D", path(&data), "-m", mode, "stop"])
            .output()
            .expect("pg_ctl stop");
        assert!(stop.status.success(), "pg_ctl stop: {stop:?}");
        std::thread::sleep(pause);
        let server = server_command(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres again");
        drop(server);
        wait_ready(&self.dir);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The server's programs this helper runs.
const PROGRAMS: [&str; 3] = ["initdb", "postgres", "pg_ctl"];

/// Where Debian installs each major version's programs, off PATH.
const DEBIAN_DIRS: &str = "/usr/lib/postgresql";

/// The directory holding all of [`PROGRAMS`]: the first on `path` (a PATH
/// value), else the newest `/usr/lib/postgresql/NN/bin`, as `.ci/run`
/// looks; `None` when there is none.
pub fn programs_dir(path: &std::ffi::OsStr) -> Option<PathBuf> {
    let has_all = |dir: &Path| PROGRAMS.iter().all(|p| dir.join(p).is_file());
    if let Some(dir) = std::env::split_paths(path).find(|dir| has_all(dir)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_DIRS)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The full path of the server's program `name`, found once.
fn program(name: &str) -> String {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| programs_dir(&std::env::var_os("PATH").unwrap_or_default()));
    match dir {
        Some(dir) if PROGRAMS.contains(&name) => path(&dir.join(name)).to_owned(),
        _ => name.to_owned(),
    }
}

/// `args` run as user `postgres` when this process is root (the server's
/// programs by their full path).
fn as_postgres(args: &[&str]) -> Command {
    let program = program(args[0]);
    if is_root() {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--", &program])
            .args(&args[1..]);
        command
    } else {
        let mut command = Command::new(program);
        command.args(&args[1..]);
        command
    }
}

fn installed() -> bool {
    PROGRAMS.iter().all(|binary| {
        Command::new(program(binary))
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn server_command(dir: &Path) -> Command {
    let data = dir.join("data");
    let mut command = as_postgres(&[
        "postgres",
        "-D",
        path(&data),
        "-k",
        path(dir),
        "-c",
        "listen_addresses=",
        "-c",
        "max_connections=200",
    ]);
    command.stdin(Stdio::null());
    command
}

// The server and its watchdog outlive the test process on purpose (the
// watchdog stops the server once the process is gone): never waited for.
#[allow(clippy::zombie_processes)]
fn start() -> Option<PgServer> {
    if !installed() {
        return crate::skip::missing(
            "PostgreSQL is not installed: no initdb, postgres and pg_ctl on PATH or in \
             /usr/lib/postgresql/NN/bin (Debian: apt-get install postgresql)",
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("dque-pg-")
        .tempdir()
        .expect("temp dir")
        .keep();
    if is_root() {
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres", path(&dir)])
            .status()
            .expect("chown");
        assert!(chown.success());
    }
    let initdb = as_postgres(&[
        "initdb",
        "-D",
        path(&dir.join("data")),
        "-U",
        "dque",
        "--auth=trust",
        "--no-instructions",
    ])
    .output()
    .expect("initdb");
    assert!(initdb.status.success(), "initdb: {initdb:?}");
    // The password user's rule comes first (the first matching line wins).
    let hba = dir.join("data").join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
    std::fs::write(
        &hba,
        format!("local all {PASSWORD_USER} scram-sha-256\n{rules}"),
    )
    .expect("write pg_hba.conf");
    let log = std::fs::File::create(dir.join("server.log")).expect("log file");
    let server = server_command(&dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start postgres");
    // The watchdog: once this process is gone, stop the server (SIGINT:
    // fast shutdown) and remove the directory.
    let watchdog = format!(
        "while [ -d /proc/{me} ]; do sleep 0.2; done; \
         {pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
        me = std::process::id(),
        pg_ctl = program("pg_ctl"),
        data = path(&dir.join("data")),
        dir = path(&dir),
    );
    as_postgres(&["sh", "-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watchdog");
    drop(server);
    wait_ready(&dir);
    let url = format!("host={} user=dque dbname=postgres", dir.display());
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect as dque");
    admin
        .batch_execute(&format!(
            "SET password_encryption = 'scram-sha-256';
             CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}';
             GRANT CREATE ON DATABASE postgres TO {PASSWORD_USER};"
        ))
        .expect("make the password user");
    Some(PgServer { dir })
}

/// Waits until the server takes connections.
fn wait_ready(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = format!("host={} user=dque dbname=postgres", dir.display());
    loop {
        match postgres::Client::connect(&url, postgres::NoTls) {
            Ok(_) => return,
            Err(e) => {
                let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
                assert!(
                    Instant::now() < deadline,
                    "PostgreSQL did not start: {e}\n{log}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
