//! `dque push --kind K`: a job pushed from the shell runs in a worker
//! runtime as kind K (the kind travels in header `klass`, the runtime's
//! `KIND_HEADER`, on every backend).

use std::sync::{Arc, Mutex};

use assert_cmd::Command;
use dque::jobs::{JobOptions, JobQueue};
use dque::runtime::{Context, Job, JobError, Worker, KIND_HEADER};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl Job for Greet {
    const KIND: &'static str = "greet";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        cx.state::<Arc<Mutex<Vec<String>>>>()
            .lock()
            .unwrap()
            .push(format!("hello {}", self.name));
        Ok(())
    }
}

fn dque() -> Command {
    Command::cargo_bin("dque").unwrap()
}

#[test]
fn a_job_pushed_with_a_kind_runs_as_that_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    dque()
        .arg("push")
        .arg(&path)
        .args(["--create", "--kind", "greet", r#"{"name":"ada"}"#])
        .assert()
        .success();
    let queue = Arc::new(JobOptions::new().open(&path).unwrap());
    let waiting = queue.waiting(10).unwrap();
    assert_eq!(waiting[0].job.header(KIND_HEADER), Some("greet"));
    let said: Arc<Mutex<Vec<String>>> = Arc::default();
    let summary = Worker::new(queue.clone())
        .register::<Greet>()
        .state(Arc::clone(&said))
        .handle_signals(false)
        .until_empty(true)
        .run()
        .unwrap();
    assert_eq!(summary.succeeded, 1, "{summary:?}");
    assert_eq!(*said.lock().unwrap(), ["hello ada"]);
    queue.close().unwrap();
}

#[test]
fn a_kind_given_twice_is_refused_and_pushes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    dque()
        .arg("push")
        .arg(&path)
        .args([
            "--create",
            "--kind",
            "greet",
            "--header",
            "klass=other",
            "{}",
        ])
        .assert()
        .code(2);
    assert!(!path.exists(), "nothing made");
}
