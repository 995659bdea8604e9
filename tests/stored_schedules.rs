//! `stored_schedules` (what `dque stats` shows of a queue directory's
//! schedules) read beside a running queue: never a failure for a file the
//! queue is rewriting, never a lock the queue waits on, and a clear
//! answer for no file, a leftover temporary file, and a damaged file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dque::jobs::{stored_schedules, EmbeddedJobs, JobQueue, Schedule};

#[test]
fn stored_schedules_never_fails_while_the_queue_rewrites_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = Arc::new(EmbeddedJobs::create(&path).unwrap());
    assert!(stored_schedules(&path).unwrap().is_empty(), "no file yet");
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (queue, done) = (Arc::clone(&queue), Arc::clone(&done));
        std::thread::spawn(move || {
            for i in 0..300u64 {
                let name = format!("s{}", i % 7);
                queue
                    .schedule(Schedule::every(name.as_str(), Duration::from_secs(60 + i)))
                    .unwrap();
                if i % 5 == 0 {
                    queue.unschedule(&name).unwrap();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut reads = 0;
    while !done.load(Ordering::Acquire) {
        let listed = stored_schedules(&path).unwrap();
        assert!(listed.len() <= 7, "{listed:?}");
        reads += 1;
    }
    writer.join().unwrap();
    assert!(reads > 0);
    assert_eq!(
        stored_schedules(&path).unwrap().len(),
        queue.schedules().unwrap().len()
    );
}

#[test]
fn stored_schedules_ignores_a_leftover_temporary_file_and_names_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q");
    let queue = EmbeddedJobs::create(&path).unwrap();
    queue
        .schedule(Schedule::every("tick", Duration::from_secs(60)))
        .unwrap();
    let list = path.join("jobs/schedules/list");
    // A writer that died before its rename leaves `list.tmp`, half
    // written: the file in place is still read.
    std::fs::write(list.with_extension("tmp"), "dque-sched").unwrap();
    let listed = stored_schedules(&path).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].schedule.name(), "tick");
    // Damaged: an error that names the file and says what to do.
    std::fs::write(&list, "dque-schedules 1\nnot a schedule\n").unwrap();
    let e = stored_schedules(&path).unwrap_err();
    assert!(matches!(e, dque::Error::Corrupted { .. }), "{e:?}");
    assert!(e.to_string().contains("schedules"), "{e}");
    // A plain queue's directory: none.
    let plain = dir.path().join("plain");
    dque::RawQueue::create_with(&plain, &dque::Options::new())
        .unwrap()
        .close()
        .unwrap();
    assert!(stored_schedules(&plain).unwrap().is_empty());
}
