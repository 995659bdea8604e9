//! The worker runtime (`dque::runtime`) on the embedded queue: the shared
//! runtime checks (`tests/runtime_api/`), a real SIGTERM to a worker
//! process, and the inline test helper.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{JobOptions, JobQueue, WaitState};
use dque::runtime::{testing, Context, EnqueueJob, Job, JobError, StopReason, Worker};
use dque::Options;
use serde::{Deserialize, Serialize};

#[macro_use]
mod jobs_api;
#[macro_use]
mod runtime_api;
mod child;
use jobs_api::{Backend, Settings};

/// Queues in a temporary directory, one subdirectory per name.
struct Embedded {
    dir: tempfile::TempDir,
}

impl Embedded {
    fn options(settings: &Settings) -> JobOptions {
        JobOptions::new()
            .queue(
                Options::new()
                    .visibility_timeout(settings.lease_time)
                    .max_attempts(settings.max_attempts),
            )
            .backoff(settings.backoff)
            .clock(Arc::new(settings.clock.clone()))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Backend for Embedded {
    fn make(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(
            Self::options(settings)
                .create(self.path(name))
                .expect("create"),
        )
    }

    fn reopen(&self, name: &str, settings: &Settings) -> Arc<dyn JobQueue> {
        Arc::new(Self::options(settings).open(self.path(name)).expect("open"))
    }
}

fn on_a_new_queue(check: fn(&dyn Backend)) {
    check(&Embedded {
        dir: tempfile::tempdir().expect("temp dir"),
    });
}

mod suite {
    use super::*;
    runtime_suite!(run = on_a_new_queue);
}

/// Says it holds the job (on stdout), then sleeps without looking back.
#[derive(Serialize, Deserialize)]
struct Hold {
    n: u32,
}

impl Job for Hold {
    const KIND: &'static str = "hold";
    fn run(self, cx: &Context) -> Result<(), JobError> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "holding {} attempt {}", self.n, cx.attempt()).unwrap();
        out.flush().unwrap();
        drop(out);
        std::thread::sleep(Duration::from_secs(30));
        Ok(())
    }
}

const QUEUE_DIR: &str = "DQUE_TEST_RUNTIME_QUEUE";

#[test]
fn sigterm_gives_the_running_jobs_back_uncounted() {
    if child::run_as_child(|| {
        let dir = std::env::var(QUEUE_DIR).unwrap();
        let queue = Arc::new(JobOptions::new().open(&dir).unwrap());
        let summary = Worker::new(queue.clone())
            .register::<Hold>()
            .concurrency(2)
            .grace(Duration::from_millis(300))
            .run()
            .unwrap();
        queue.close().unwrap();
        println!(
            "summary released {} abandoned {} stopped {:?}",
            summary.released, summary.abandoned, summary.stopped
        );
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    {
        let queue = JobOptions::new().create(&path).unwrap();
        for n in 0..3 {
            queue.enqueue_job(&Hold { n }).unwrap();
        }
        queue.close().unwrap();
    }
    let mut worker = {
        let _one = child::one_spawner_at_a_time();
        child::command("sigterm_gives_the_running_jobs_back_uncounted")
            .env(QUEUE_DIR, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut lines = BufReader::new(worker.stdout.take().unwrap()).lines();
    let mut holding = Vec::new();
    while holding.len() < 2 {
        let line = lines.next().expect("the worker holds two jobs").unwrap();
        // libtest may print its "test NAME ... " before it on the line.
        if line.contains("holding ") {
            holding.push(line);
        }
    }
    let pid = rustix::process::Pid::from_child(&worker);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(worker.wait().unwrap().success(), "{rest:?}");
    assert!(
        rest.iter().any(|l| l
            == &format!(
                "summary released 2 abandoned 2 stopped {:?}",
                Some(StopReason::Signal)
            )),
        "{holding:?} {rest:?}"
    );
    // All three wait, ready, no attempt counted: the two held were given
    // back, the third was never leased.
    let queue = JobOptions::new().open(&path).unwrap();
    let waiting = queue.waiting(10).unwrap();
    assert_eq!(waiting.len(), 3, "{waiting:?}");
    for job in &waiting {
        assert_eq!(
            (job.state, job.job.attempt),
            (WaitState::Ready, 0),
            "{job:?}"
        );
    }
}

#[test]
fn an_inline_run_sees_the_state_and_the_attempt() {
    #[derive(Serialize, Deserialize)]
    struct Check;
    impl Job for Check {
        const KIND: &'static str = "check";
        fn run(self, cx: &Context) -> Result<(), JobError> {
            match (cx.state::<String>().as_str(), cx.attempt()) {
                ("db", 3) => Ok(()),
                other => Err(JobError::fail(format!("{other:?}"))),
            }
        }
    }
    let inline = testing::Inline::new().state("db".to_owned()).attempt(3);
    assert_eq!(inline.run(Check), Ok(()));
    assert_eq!(
        testing::Inline::new().state("db".to_owned()).run(Check),
        Err(JobError::fail("(\"db\", 1)"))
    );
}

#[test]
fn a_worker_runs_from_a_directory_address() {
    let dir = tempfile::tempdir().unwrap();
    runtime_api::a_worker_runs_from_an_address(&dir.path().join("q").display().to_string());
}

/// Pins the untested signal path on this backend: SIGTERM was tested on
/// the embedded queue only (server backends through the programmatic
/// stop). A worker process stopped by SIGTERM mid-job ends the job that
/// finishes within the grace, gives back the other uncounted, and no job
/// is lost or run twice.
#[test]
fn sigterm_mid_job_finishes_or_gives_back() {
    if child::run_as_child(runtime_api::sigterm_worker_process) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _one = child::one_spawner_at_a_time();
    runtime_api::sigterm_mid_job_finishes_or_gives_back(
        "sigterm_mid_job_finishes_or_gives_back",
        &dir.path().join("q").display().to_string(),
    );
}
