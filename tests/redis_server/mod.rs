//! A throwaway `redis-server` for the tests, started from PATH as
//! redis-rs's own tests start it: a temporary directory, a unix socket in
//! it, no TCP port, no persistence. One server per test binary, started at
//! first use; a watchdog stops it and removes its directory once the test
//! process is gone (however it ends). Without `redis-server` a test is
//! skipped with one line naming the package, unless `CI=true`, where it
//! fails.
//!
//! [`OwnServer`] is a server of one test's own, with extra settings (a
//! password), that the test can stop and start again on the same socket.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running server: connect with [`RedisServer::url`].
#[derive(Debug)]
pub struct RedisServer {
    dir: PathBuf,
}

impl RedisServer {
    /// The server of this test binary, started if needed; `None` (after
    /// printing why) when `redis-server` is not installed and this is not
    /// CI.
    pub fn get() -> Option<&'static RedisServer> {
        static SERVER: OnceLock<Option<RedisServer>> = OnceLock::new();
        SERVER.get_or_init(start).as_ref()
    }

    /// The server's unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// A URL of database `db` for the redis crate and for Python's clients.
    pub fn url(&self, db: u32) -> String {
        format!("unix://{}?db={db}", self.socket().display())
    }

    /// The ADDRESS of the `dque` command for `queue` in database `db`.
    pub fn address(&self, db: u32, queue: &str) -> String {
        format!("redis+unix://{}?db={db}#{queue}", self.socket().display())
    }

    /// Runs `redis-cli` with `args` on this server; its output.
    pub fn cli(&self, db: u32, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .arg("-s")
            .arg(self.socket())
            .arg("-n")
            .arg(db.to_string())
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

// The server and its watchdog outlive the test process on purpose (the
// watchdog stops the server once the process is gone): never waited for.
#[allow(clippy::zombie_processes)]
fn start() -> Option<RedisServer> {
    if !installed() {
        return crate::skip::missing(
            "redis-server is not installed (Debian: apt-get install redis-server)",
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("dque-redis-")
        .tempdir()
        .expect("temp dir")
        .keep();
    let socket = dir.join("redis.sock");
    let log = std::fs::File::create(dir.join("server.log")).expect("log file");
    let server = Command::new("redis-server")
        .args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args([
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--databases", "64", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let watchdog = format!(
        "while [ -d /proc/{me} ]; do sleep 0.2; done; kill {server} 2>/dev/null; \
         sleep 0.5; kill -9 {server} 2>/dev/null; rm -rf {dir}",
        me = std::process::id(),
        server = server.id(),
        dir = path(&dir),
    );
    Command::new("sh")
        .args(["-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watchdog");
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Listening, not just bound: a test connecting between the two was
    // refused.
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "redis-server did not start:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(RedisServer { dir })
}

/// A server of one test's own: started with extra arguments, stopped and
/// started again on the same socket by the test, stopped when dropped (a
/// watchdog stops it if the test process dies first).
#[derive(Debug)]
pub struct OwnServer {
    dir: PathBuf,
    args: Vec<String>,
    child: Option<std::process::Child>,
}

impl OwnServer {
    /// Starts a server with `args` added (e.g. `["--requirepass", "pw"]`);
    /// `None` (after printing why) when `redis-server` is not installed
    /// and this is not CI.
    // The watchdog outlives the test on purpose (it stops the server once
    // the process is gone): never waited for.
    #[allow(clippy::zombie_processes)]
    pub fn start(args: &[&str]) -> Option<OwnServer> {
        if !installed() {
            return crate::skip::missing(
                "redis-server is not installed (Debian: apt-get install redis-server)",
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("dque-redis-own-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let watchdog = format!(
            "while [ -d /proc/{me} ]; do sleep 0.2; done; \
             pid=$(cat {dir}/redis.pid 2>/dev/null); [ -n \"$pid\" ] && kill $pid 2>/dev/null; \
             sleep 0.5; [ -n \"$pid\" ] && kill -9 $pid 2>/dev/null; rm -rf {dir}",
            me = std::process::id(),
            dir = path(&dir),
        );
        Command::new("sh")
            .args(["-c", &watchdog])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the watchdog");
        let mut server = OwnServer {
            dir,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
        };
        server.resume();
        Some(server)
    }

    /// The server's unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// A URL of database `db` for the redis crate (`extra`: more query
    /// parameters, e.g. `&pass=pw`).
    pub fn url(&self, db: u32, extra: &str) -> String {
        format!("unix://{}?db={db}{extra}", self.socket().display())
    }

    /// Stops the server (SIGTERM) and waits until it is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts the server again on the same socket, with the same
    /// settings (its data is gone: nothing is persisted).
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "the server runs");
        let socket = self.socket();
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log file");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--pidfile")
            .arg(self.dir.join("redis.pid"))
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        // Listening, not just bound.
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "redis-server did not start:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
