//! The real Python qless clients, driven from the Rust tests: qless-py
//! 0.11.4 and its maintained fork reqless 0.13.3, installed from PyPI into
//! a virtualenv made once under the target directory (`driver.py` runs one
//! client and answers JSON commands on its stdin).
//!
//! qless-py 0.11.4 bundles a qless.lua that defines a global function
//! (`function table.extend`), which Redis 7 refuses ("Attempt to modify a
//! readonly table"): setup patches that one definition, and its two calls,
//! into a local function in the virtualenv's copy. Nothing else is changed.
//!
//! Without Python 3 (with venv and pip) or without PyPI a test is skipped
//! with one line saying why, unless `CI=true`, where it fails.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};

/// The clients, pinned.
const PACKAGES: [&str; 3] = ["qless-py==0.11.4", "reqless==0.13.3", "redis==8.1.0"];

/// Which Python client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// qless-py 0.11.4.
    QlessPy,
    /// reqless 0.13.3.
    Reqless,
}

impl Kind {
    pub const BOTH: [Kind; 2] = [Kind::QlessPy, Kind::Reqless];

    fn module(self) -> &'static str {
        match self {
            Kind::QlessPy => "qless",
            Kind::Reqless => "reqless",
        }
    }
}

/// The virtualenv's python, made on first use; `None` (after printing
/// why) when it cannot be made and this is not CI.
pub fn python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    PYTHON.get_or_init(make_venv).as_deref()
}

fn skip_or_fail(why: &str) -> Option<PathBuf> {
    crate::skip::missing(&format!("the Python qless clients cannot be set up: {why}"))
}

fn make_venv() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qless-venv");
    let python = dir.join("bin/python");
    let stamp = dir.join("dque-ready");
    // One test binary at a time sets it up (others wait on the lock).
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).expect("target tmp dir");
    let lock = std::fs::File::create(dir.with_extension("lock")).expect("lock file");
    fs4::FileExt::lock(&lock).expect("lock the venv");
    if stamp.exists() {
        return Some(python);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&dir)
        .output();
    match made {
        Ok(out) if out.status.success() => {}
        Ok(out) => return skip_or_fail(&format!("python3 -m venv: {out:?}")),
        Err(e) => return skip_or_fail(&format!("python3: {e}")),
    }
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .args(PACKAGES)
        .output()
        .expect("run pip");
    if !installed.status.success() {
        return skip_or_fail(&format!("pip install {PACKAGES:?}: {installed:?}"));
    }
    patch_qless_py(&python);
    std::fs::write(&stamp, "").expect("stamp");
    Some(python)
}

/// Makes qless-py's global `table.extend` a local function (see above).
fn patch_qless_py(python: &Path) {
    let out = Command::new(python)
        .args([
            "-c",
            "import os, qless; print(os.path.join(os.path.dirname(qless.__file__), 'qless-core', 'qless.lua'))",
        ])
        .output()
        .expect("find qless.lua");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let lua = std::fs::read_to_string(&path).expect("read qless.lua");
    let definition = "function table.extend(self, other)";
    assert_eq!(
        lua.matches(definition).count(),
        1,
        "qless-py's qless.lua changed"
    );
    let patched = lua
        .replace(definition, "local function table_extend(self, other)")
        .replace("table.extend(", "table_extend(");
    std::fs::write(&path, patched).expect("patch qless.lua");
}

/// One Python client process.
pub struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub kind: Kind,
}

impl Client {
    /// Starts client `kind` on `url` as worker `worker`.
    pub fn start(kind: Kind, url: &str, worker: &str) -> Client {
        let python = python().expect("checked by the caller");
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/qless_clients/driver.py");
        let mut child = Command::new(python)
            .arg(driver)
            .args([kind.module(), url, worker])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python client");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            stdin,
            stdout,
            kind,
        }
    }

    /// Sends `command`; the client's answer, or its error's text.
    pub fn try_call(&mut self, command: Value) -> Result<Value, String> {
        writeln!(self.stdin, "{command}").expect("write to the client");
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read the client");
        assert!(!line.is_empty(), "the Python client exited");
        let mut answer: Value = serde_json::from_str(&line).expect("JSON answer");
        match answer.get("error") {
            Some(error) => Err(error.as_str().unwrap_or_default().to_owned()),
            None => Ok(answer["ok"].take()),
        }
    }

    /// Sends `command`; the client's answer (an error fails the test).
    pub fn call(&mut self, command: Value) -> Value {
        let kind = self.kind;
        self.try_call(command.clone())
            .unwrap_or_else(|e| panic!("{kind:?} {command}: {e}"))
    }

    /// Puts a job with `fields` (queue, data, priority, tags, delay,
    /// retries, jid, depends, klass); its jid.
    pub fn put(&mut self, fields: Value) -> String {
        let mut command = fields;
        command["op"] = json!("put");
        self.call(command).as_str().expect("a jid").to_owned()
    }

    /// Pops a job of `queue`: its view, or `None`.
    pub fn pop(&mut self, queue: &str) -> Option<Value> {
        let job = self.call(json!({"op": "pop", "queue": queue}));
        (!job.is_null()).then_some(job)
    }

    /// Job `jid` as the client sees it (`None`: no such job).
    pub fn get(&mut self, jid: &str) -> Option<Value> {
        let job = self.call(json!({"op": "get", "jid": jid}));
        (!job.is_null()).then_some(job)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
