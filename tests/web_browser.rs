//! The dashboard in a real browser: headless Chromium driven through
//! WebDriver (Debian's `chromium` and `chromium-driver`; `.ci/run` installs
//! them), against `dque serve` over an embedded queue. Without them the
//! tests say so and pass, except under `CI=true`, where they fail.
//!
//! Screenshots of every page are kept under `target/web-screenshots/`.

mod skip;
mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dque::jobs::{JobOptions, JobQueue, NewJob};
use dque::Options;
use webdriver::Session;

/// A `dque serve` process, killed on drop.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(queue: &Path) -> (Served, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dque"))
        .arg("serve")
        .arg(queue)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("{line}"));
    (Served(child), url.trim_end_matches('/').to_owned())
}

fn shots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("web-screenshots")
}

/// A shared-mode handle: `dque serve` holds the queue too.
fn open(path: &Path) -> dque::jobs::EmbeddedJobs {
    JobOptions::new()
        .queue(Options::new().shared(true))
        .open_or_create(path)
        .unwrap()
}

#[test]
fn filter_to_dead_jobs_bulk_requeue_them_and_see_the_counts_change() {
    let Some((driver, browser)) = webdriver::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mail");
    let q = open(&path);
    for i in 0..5 {
        q.enqueue(
            NewJob::new(format!("{{\"to\":\"user{i}@example.com\"}}"))
                .header("klass", "send_email"),
        )
        .unwrap();
    }
    for i in 0..3 {
        q.enqueue(
            NewJob::new(format!("bounce {i}"))
                .id(format!("dead{i}"))
                .priority(-1)
                .header("klass", "send_email"),
        )
        .unwrap();
        let lease = q.lease().unwrap().unwrap();
        q.fail(lease, &format!("exit 3: mailbox {i} full")).unwrap();
    }
    // A dead letter of another kind, which the filter leaves out.
    q.enqueue(
        NewJob::new("a photo")
            .id("photo")
            .priority(-1)
            .header("klass", "resize"),
    )
    .unwrap();
    let lease = q.lease().unwrap().unwrap();
    q.fail(lease, "exit 3: too big").unwrap();
    let (_served, url) = serve(&path);
    let browser = Session::new(&driver, &browser, true);
    browser.open(&format!("{url}/"));
    assert_eq!(browser.title(), "Queues · dque");
    assert_eq!(browser.text("[data-live='0.dead']"), "4");
    assert_eq!(browser.text("[data-live='0.ready']"), "5");
    browser.screenshot(&shots().join("overview.png"));
    // Live: a job enqueued meanwhile shows up without a reload.
    q.enqueue(NewJob::new("one more")).unwrap();
    assert!(
        browser.wait_text("[data-live='0.ready']", "6", Duration::from_secs(15)),
        "the live refresh"
    );
    // To the queue, then its dead jobs.
    browser.click("a[href='/queues/0']");
    browser.screenshot(&shots().join("queue.png"));
    browser.click("a[href='/queues/0?state=dead']");
    assert_eq!(browser.count("input[name=id]"), 4);
    // Filtered to the dead jobs of one kind.
    browser.type_into("input[name=kind]", "send_email");
    browser.click("form.filter button");
    // A form's navigation may end after the click's answer.
    assert_eq!(
        browser.wait_count("input[name=id]", 3, Duration::from_secs(10)),
        3
    );
    assert!(browser.title().contains("mail"));
    browser.click("input[data-select-all]");
    browser.screenshot(&shots().join("queue-dead-selected.png"));
    browser.click("button[name=action][value=requeue]");
    browser.screenshot(&shots().join("requeued.png"));
    assert!(browser.wait_text("#outcome", "Requeued 3 of 3 jobs.", Duration::from_secs(10)));
    browser.click("#back");
    assert_eq!(
        browser.count("input[name=id]"),
        0,
        "no dead send_email jobs left"
    );
    browser.open(&format!("{url}/"));
    assert_eq!(
        browser.text("[data-live='0.dead']"),
        "1",
        "the other kind's stays"
    );
    assert_eq!(browser.text("[data-live='0.ready']"), "9");
    assert_eq!(q.counts().unwrap().dead, 1);
    q.close().unwrap();
}

/// The scenario with an action on every match rather than a
/// ticked page: more failed jobs of the kind than one page shows.
#[test]
fn filter_to_failed_jobs_of_a_kind_retry_every_match_and_see_the_counts_change() {
    let Some((driver, browser)) = webdriver::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mail");
    let q = open(&path);
    let failing = |kind: &str, n: usize, reason: &str| {
        for i in 0..n {
            q.enqueue(NewJob::new(format!("{kind} {i}")).header("klass", kind))
                .unwrap();
            let lease = q.lease().unwrap().unwrap();
            q.fail(lease, reason).unwrap();
        }
    };
    failing("send_email", 60, "exit 3: smtp timeout");
    failing("resize", 2, "exit 3: smtp timeout");
    for i in 0..4 {
        q.enqueue(NewJob::new(format!("ready {i}")).header("klass", "send_email"))
            .unwrap();
    }
    let (_served, url) = serve(&path);
    let browser = Session::new(&driver, &browser, true);
    browser.open(&format!("{url}/"));
    assert_eq!(browser.text("[data-live='0.dead']"), "62");
    browser.click("a[href='/queues/0']");
    browser.click("a[href='/queues/0?state=dead']");
    browser.type_into("input[name=kind]", "send_email");
    browser.click("form.filter button");
    assert_eq!(
        browser.wait_count("input[name=id]", 50, Duration::from_secs(10)),
        50,
        "one page of the 60"
    );
    assert_eq!(browser.text("#scanned"), "Searched 62 of 62 dead jobs.");
    browser.screenshot(&shots().join("queue-filtered.png"));
    browser.click("button[name=do][value=retry]");
    assert!(browser.wait_text(
        "#count",
        "Retry 60 jobs: dead jobs, kind send_email.",
        Duration::from_secs(10)
    ));
    browser.screenshot(&shots().join("bulk-confirm.png"));
    browser.click("#confirm");
    assert!(browser.wait_text(
        "#outcome",
        "Retried 60 of 60 matching jobs (60 when confirmed): dead jobs, kind send_email.",
        Duration::from_secs(10)
    ));
    browser.click("#back");
    assert_eq!(browser.count("input[name=id]"), 0, "none left of the kind");
    browser.open(&format!("{url}/"));
    assert_eq!(
        browser.text("[data-live='0.dead']"),
        "2",
        "the other kind's stay"
    );
    assert_eq!(browser.text("[data-live='0.ready']"), "64");
    q.close().unwrap();
}

#[test]
fn pages_work_with_javascript_off() {
    let Some((driver, browser)) = webdriver::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reports");
    let q = open(&path);
    for i in 0..3 {
        q.enqueue(NewJob::new(format!("report {i}")).id(format!("r{i}")))
            .unwrap();
    }
    q.enqueue(NewJob::new("broken").id("x").priority(-1))
        .unwrap();
    let lease = q.lease().unwrap().unwrap();
    q.fail(lease, "timeout: after 30 s").unwrap();
    let (_served, url) = serve(&path);
    let browser = Session::new(&driver, &browser, false);
    browser.open(&format!("{url}/queues/0/dead"));
    browser.screenshot(&shots().join("dead-by-reason.png"));
    browser.click("a[href='/queues/0/dead?reason=timeout']");
    browser.screenshot(&shots().join("dead-group.png"));
    // No script: the group's button and a row's button still act.
    browser.click("form.bar-actions button");
    assert!(browser.wait_text("#outcome", "Requeued 1 of 1 jobs.", Duration::from_secs(10)));
    browser.open(&format!("{url}/queues/0"));
    browser.click("button[name=row][value='cancel:r1']");
    assert!(browser.wait_text(
        "#outcome",
        "Cancelled 1 of 1 jobs.",
        Duration::from_secs(10)
    ));
    browser.open(&format!("{url}/metrics"));
    let counts = q.counts().unwrap();
    assert_eq!((counts.ready, counts.dead), (3, 0), "x back, r1 cancelled");
    q.close().unwrap();
}

#[test]
fn find_a_job_open_its_page_and_pause_and_resume_the_queue() {
    let Some((driver, browser)) = webdriver::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders");
    let q = open(&path);
    q.enqueue(
        NewJob::new("{\"order\":7,\"items\":[\"<b>tea</b>\"]}")
            .id("order-7")
            .header("klass", "ship"),
    )
    .unwrap();
    q.enqueue(NewJob::new("later").id("order-8")).unwrap();
    let (_served, url) = serve(&path);
    let browser = Session::new(&driver, &browser, false);
    // The find box, without a script.
    browser.open(&format!("{url}/queues/0"));
    browser.type_into("#find input[name=job]", "order-7");
    browser.click("#find button");
    assert!(browser.wait_text("#state", "ready", Duration::from_secs(10)));
    assert!(
        browser.text("#body").contains("\"<b>tea</b>\""),
        "the body's JSON, as text"
    );
    browser.screenshot(&shots().join("job.png"));
    // A list's id links to its page.
    browser.open(&format!("{url}/queues/0"));
    browser.click("a[href='/queues/0/jobs/order-8']");
    assert!(browser.wait_text("h1", "Job order-8", Duration::from_secs(10)));
    // Pause, seen on the overview; resume.
    browser.open(&format!("{url}/queues/0"));
    browser.click("button[name=queue][value=pause]");
    assert!(browser.wait_count("#outcome", 1, Duration::from_secs(10)) == 1);
    assert!(q.is_paused().unwrap());
    browser.open(&format!("{url}/"));
    assert_eq!(browser.text(".badge.paused"), "paused");
    browser.screenshot(&shots().join("overview-paused.png"));
    browser.open(&format!("{url}/queues/0"));
    browser.click("button[name=queue][value=resume]");
    assert!(browser.wait_count("#outcome", 1, Duration::from_secs(10)) == 1);
    assert!(!q.is_paused().unwrap());
    q.close().unwrap();
}

#[test]
fn the_workers_page_shows_who_holds_what() {
    let Some((driver, browser)) = webdriver::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mail");
    let q = open(&path);
    q.enqueue(NewJob::new("to ops").id("m1").header("klass", "send_email"))
        .unwrap();
    q.enqueue(NewJob::new("later").id("m2")).unwrap();
    let lease = q.lease().unwrap().unwrap();
    let (_served, url) = serve(&path);
    let browser = Session::new(&driver, &browser, false);
    browser.open(&format!("{url}/"));
    browser.click("main a[href='/workers']");
    assert!(browser.wait_count("table.leases tbody tr", 1, Duration::from_secs(10)) == 1);
    // `dque serve` is another process: it shows this one as the holder.
    let holder = browser.text("table.leases td.worker");
    assert!(
        holder.ends_with(&format!(":{}", std::process::id())),
        "{holder}"
    );
    assert_eq!(browser.text("table.leases td.kind"), "send_email");
    browser.screenshot(&shots().join("workers.png"));
    q.ack(lease).unwrap();
    q.close().unwrap();
}
