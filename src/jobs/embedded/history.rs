//! Completed jobs kept for a while ([`KeepCompleted`]): `jobs/history/`,
//! one append-only file a day (`<unix day>.log`) of framed entries, and
//! the setting in `jobs/history/keep`. FORMAT.md, "Job history".
//!
//! An ack adds its entry to a buffer in memory (a copy of the job, no
//! system call); the buffer is written with one `write` (`O_APPEND`, so
//! processes sharing the queue append whole entries) when it holds 64 KiB,
//! when 200 ms passed since the last write, and when the handle is idle,
//! looks a job up, syncs or closes. History is an observation, not a
//! guarantee: a crash may lose the entries of the last 200 ms (never a
//! job). Files whose day lies wholly outside the time kept are deleted
//! when a handle starts a new day's file (a bounded cost: one directory
//! listing a day); the count is applied the same way, and both limits
//! apply exactly to lookups. Disabled ([`KeepCompleted::NONE`]), the
//! queue has no `History` and an ack does nothing more.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::envelope::Envelope;
use crate::error::{Error, Result};
use crate::jobs::clock::from_unix_ms;
use crate::jobs::history::{JobEvent, JobInfo, JobState, KeepCompleted};
use crate::jobs::job::Job;

/// The setting's file in the history directory.
const KEEP_FILE: &str = "keep";
/// A day in milliseconds: one file each.
const DAY_MS: u64 = 86_400_000;
/// The buffer is written when it holds this much...
const FLUSH_BYTES: usize = 64 << 10;
/// ...or this long after its last write.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// A completed job as its history entry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Completed {
    pub job: Job,
    pub started_ms: u64,
    pub finished_ms: u64,
    pub worker: String,
}

/// The history of one queue directory.
#[derive(Debug)]
pub(crate) struct History {
    dir: PathBuf,
    keep: KeepCompleted,
    /// The end of every entry this handle writes, after the times and the
    /// attempt: the worker (its name, else `host:pid`) with its length, and the reserved
    /// error length (0), made once.
    entry_tail: Vec<u8>,
    writer: Mutex<Writer>,
    /// The prunes this handle ran (what the tests look at).
    #[cfg(test)]
    prunes: std::sync::atomic::AtomicUsize,
}

#[derive(Debug)]
struct Writer {
    /// The day of the open file, and the file.
    day: u64,
    file: Option<File>,
    buffer: Vec<u8>,
    written_at: Instant,
    /// Entries added since the clock was last read.
    unread: u32,
}

/// An entry's fixed start: length, CRC, finished, started, attempt.
const ENTRY_HEAD: usize = 4 + 4 + 8 + 8 + 4;

/// What follows [`ENTRY_HEAD`] in every entry of `worker`: its length
/// (u16) and bytes, and the reserved error length (u32, 0: no error).
fn entry_tail(worker: &str) -> Vec<u8> {
    let worker = &worker.as_bytes()[..worker.len().min(u16::MAX as usize)];
    let mut tail = Vec::with_capacity(2 + worker.len() + 4);
    tail.extend_from_slice(&(worker.len() as u16).to_le_bytes());
    tail.extend_from_slice(worker);
    tail.extend_from_slice(&0u32.to_le_bytes());
    tail
}

/// The setting stored in `dir` (`None` if none is).
pub(crate) fn stored_keep(dir: &Path) -> Result<Option<KeepCompleted>> {
    let path = dir.join(KEEP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(ms)), Some(Ok(count))) => {
            Ok(Some(KeepCompleted::new(Duration::from_millis(ms), count)))
        }
        _ => Err(Error::InvalidOption {
            name: "keep_completed",
            reason: format!(
                "{} holds {text:?}, not `MILLISECONDS COUNT`: write it again or remove it",
                path.display()
            ),
        }),
    }
}

/// Stores `keep` in `dir` (made if missing), replacing what was there.
pub(crate) fn store_keep(dir: &Path, keep: KeepCompleted) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let text = format!("{} {}\n", keep.for_time().as_millis(), keep.count());
    let path = dir.join(KEEP_FILE);
    // Written aside, then renamed: a reader sees the old or the new.
    let aside = dir.join(format!("{KEEP_FILE}.{}", std::process::id()));
    std::fs::write(&aside, text).map_err(|e| Error::io(&aside, e))?;
    std::fs::rename(&aside, &path).map_err(|e| Error::io(&path, e))
}

impl History {
    /// The history, its completed jobs recorded as run by `worker` (as
    /// PostgreSQL records a handle's worker name).
    pub(crate) fn named(mut self, worker: &str) -> History {
        self.entry_tail = entry_tail(worker);
        self
    }

    pub(crate) fn new(dir: PathBuf, keep: KeepCompleted) -> History {
        History {
            dir,
            keep,
            entry_tail: entry_tail(&crate::jobs::history::worker_name()),
            writer: Mutex::new(Writer {
                day: u64::MAX,
                file: None,
                buffer: Vec::new(),
                written_at: Instant::now(),
                unread: 0,
            }),
            #[cfg(test)]
            prunes: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    #[cfg(test)]
    fn prunes(&self) -> usize {
        self.prunes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Adds the entry of `job`, leased at `started_ms`, acked at
    /// `finished_ms`. Never fails the ack: a write that fails is retried
    /// with the next (its entries kept in the buffer up to a bound).
    pub(crate) fn record(&self, job: &Job, started_ms: u64, finished_ms: u64) {
        let mut writer = self.writer.lock();
        let day = finished_ms / DAY_MS;
        if day != writer.day {
            let _ = self.write_out(&mut writer);
            writer.file = None;
            writer.day = day;
            // A new day's file: the old ones outside what is kept go. Only
            // the handle that starts it prunes (one stat a handle and day
            // otherwise): a handle that acks once pays no read of the
            // history. Two starting it at once both prune, harmlessly.
            if !self.day_path(day).exists() {
                let _ = self.prune(finished_ms);
            }
        }
        let buffer = &mut writer.buffer;
        let start = buffer.len();
        // Length and CRC (filled in below), the times and the attempt: one copy.
        let mut head = [0u8; ENTRY_HEAD];
        head[8..16].copy_from_slice(&finished_ms.to_le_bytes());
        head[16..24].copy_from_slice(&started_ms.to_le_bytes());
        head[24..28].copy_from_slice(&job.attempt.to_le_bytes());
        buffer.extend_from_slice(&head);
        buffer.extend_from_slice(&self.entry_tail);
        // A kept entry is a record of what ran, not a hold (the ids file
        // keeps those): no due time, no attempts before, no hold.
        Envelope::encode_job_into(job, 0, 0, None, buffer);
        let len = (buffer.len() - start - 8) as u32;
        let crc = crc32fast::hash(&buffer[start + 8..]);
        buffer[start..start + 4].copy_from_slice(&len.to_le_bytes());
        buffer[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        // The clock is read every 16th entry only (a busy worker's acks
        // cost no clock read each).
        writer.unread += 1;
        let look = writer.unread >= 16;
        if writer.buffer.len() >= FLUSH_BYTES
            || (look && writer.written_at.elapsed() >= FLUSH_EVERY)
        {
            let _ = self.write_out(&mut writer);
        }
        if look {
            writer.unread = 0;
        }
        if writer.buffer.len() > 64 * FLUSH_BYTES {
            // The disk refuses: history is not worth the memory.
            writer.buffer.clear();
        }
    }

    /// Writes the buffered entries if any wait.
    pub(crate) fn flush(&self) -> Result<()> {
        let mut writer = self.writer.lock();
        self.write_out(&mut writer)
    }

    /// Writes the buffered entries if any wait and the last write is older
    /// than the flush interval (an idle worker's).
    pub(crate) fn flush_if_due(&self) {
        let mut writer = self.writer.lock();
        if !writer.buffer.is_empty() && writer.written_at.elapsed() >= FLUSH_EVERY {
            let _ = self.write_out(&mut writer);
        }
    }

    fn write_out(&self, writer: &mut Writer) -> Result<()> {
        writer.written_at = Instant::now();
        if writer.buffer.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(format!("{}.log", writer.day));
        if writer.file.is_none() {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?;
            writer.file = Some(file);
        }
        let file = writer.file.as_mut().expect("opened above");
        // One write of whole entries (O_APPEND): another process's
        // entries go before or after, not between.
        file.write_all(&writer.buffer)
            .map_err(|e| Error::io(&path, e))?;
        writer.buffer.clear();
        Ok(())
    }

    fn day_path(&self, day: u64) -> PathBuf {
        self.dir.join(format!("{day}.log"))
    }

    /// The day files, newest first.
    fn days(&self) -> Result<Vec<u64>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.dir, e)),
        };
        let mut days: Vec<u64> = entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name();
                name.to_str()?.strip_suffix(".log")?.parse().ok()
            })
            .collect();
        days.sort_unstable_by(|a, b| b.cmp(a));
        Ok(days)
    }

    fn read_day(&self, day: u64) -> Result<Vec<u8>> {
        let path = self.dir.join(format!("{day}.log"));
        match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Deletes the files wholly outside what is kept at `now_ms`: older
    /// than the time kept, or older than the newest `count` entries.
    fn prune(&self, now_ms: u64) -> Result<()> {
        #[cfg(test)]
        self.prunes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let cutoff = now_ms.saturating_sub(self.keep.for_time().as_millis() as u64);
        let mut newer = 0u64;
        for day in self.days()? {
            let too_old = (day + 1) * DAY_MS <= cutoff;
            if too_old || newer >= self.keep.count() {
                let path = self.dir.join(format!("{day}.log"));
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io(&path, e))
                    }
                    _ => continue,
                }
            }
            newer += frames(&self.read_day(day)?).count() as u64;
        }
        Ok(())
    }

    /// The newest entry of job `id` within what is kept at `now_ms`. A
    /// read: this handle's entries not written yet are looked at where
    /// they wait, not written out first.
    pub(crate) fn find(&self, id: &str, now_ms: u64) -> Result<Option<Completed>> {
        let cutoff = now_ms.saturating_sub(self.keep.for_time().as_millis() as u64);
        // The newest entries; written out meanwhile, they are looked at
        // twice, harmlessly.
        let waiting = self.writer.lock().buffer.clone();
        let mut newer = 0u64;
        if let Some(found) = self.look_in(&waiting, id, cutoff, &mut newer) {
            return Ok(found);
        }
        for day in self.days()? {
            if (day + 1) * DAY_MS <= cutoff || newer >= self.keep.count() {
                break;
            }
            if let Some(found) = self.look_in(&self.read_day(day)?, id, cutoff, &mut newer) {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Job `id`'s newest entry among `bytes`' entries, newest first:
    /// `Some` once the answer is known (found, or past what is kept),
    /// `None` to go on to older ones; `newer` counts the entries passed.
    fn look_in(
        &self,
        bytes: &[u8],
        id: &str,
        cutoff: u64,
        newer: &mut u64,
    ) -> Option<Option<Completed>> {
        let entries: Vec<&[u8]> = frames(bytes).collect();
        for (back, entry) in entries.iter().rev().enumerate() {
            if *newer + back as u64 >= self.keep.count() {
                return Some(None);
            }
            let Some(completed) = decode(entry) else {
                continue;
            };
            if completed.finished_ms < cutoff {
                return Some(None);
            }
            if completed.job.id == id {
                return Some(Some(completed));
            }
        }
        *newer += entries.len() as u64;
        None
    }
}

/// A completed job's record: its entry, its history made of its times.
pub(crate) fn info_of(done: Completed, queue: &str) -> JobInfo {
    let (started, finished) = (
        from_unix_ms(done.started_ms),
        from_unix_ms(done.finished_ms),
    );
    let worker = Some(done.worker);
    let history = vec![
        JobEvent::new(done.job.enqueued_at, "enqueued"),
        JobEvent {
            worker: worker.clone(),
            ..JobEvent::new(started, "leased")
        },
        JobEvent {
            worker: worker.clone(),
            ..JobEvent::new(finished, "completed")
        },
    ];
    let mut info = JobInfo::bare(done.job, queue, JobState::Completed);
    info.started_at = Some(started);
    info.finished_at = Some(finished);
    info.worker = worker;
    info.history = history;
    info
}

/// The entries of a day's bytes whose CRC holds, in order. Bytes that
/// are no entry (a write cut by a crash or a kill, which other processes
/// appended after) are stepped over a byte at a time until an entry's
/// length and CRC hold again.
fn frames(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || loop {
        let head = bytes.get(at..at + 8)?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        match bytes.get(at + 8..at + 8 + len) {
            Some(body) if len > 0 && crc32fast::hash(body) == crc => {
                at += 8 + len;
                return Some(body);
            }
            _ => at += 1,
        }
    })
}

fn decode(entry: &[u8]) -> Option<Completed> {
    let u64_at = |at: usize| Some(u64::from_le_bytes(entry.get(at..at + 8)?.try_into().ok()?));
    let finished_ms = u64_at(0)?;
    let started_ms = u64_at(8)?;
    let attempts = u32::from_le_bytes(entry.get(16..20)?.try_into().ok()?);
    let worker_len = usize::from(u16::from_le_bytes(entry.get(20..22)?.try_into().ok()?));
    let worker = String::from_utf8_lossy(entry.get(22..22 + worker_len)?).into_owned();
    let at = 22 + worker_len;
    let error_len = u32::from_le_bytes(entry.get(at..at + 4)?.try_into().ok()?) as usize;
    let rest = entry.get(at + 4 + error_len..)?;
    let mut envelope = Envelope::decode(rest).ok()?;
    envelope.job.attempt = attempts;
    Some(Completed {
        job: envelope.job,
        started_ms,
        finished_ms,
        worker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> Job {
        Job {
            id: id.to_owned(),
            body: b"body".to_vec(),
            priority: 3,
            headers: vec![("a".into(), "b".into())],
            attempt: 2,
            enqueued_at: std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(5),
            caller_id: true,
        }
    }

    #[test]
    fn entries_are_found_within_the_time_and_count_kept() {
        let dir = tempfile::tempdir().unwrap();
        let keep = KeepCompleted::new(Duration::from_millis(2 * DAY_MS), 2);
        let history = History::new(dir.path().to_path_buf(), keep);
        let t0 = 10 * DAY_MS;
        history.record(&job("a"), t0 - 5, t0);
        history.record(&job("b"), t0 + 1, t0 + 2);
        let found = history.find("a", t0 + 3).unwrap().expect("kept");
        assert_eq!(
            (found.job, found.started_ms, found.finished_ms),
            (job("a"), t0 - 5, t0)
        );
        // A third entry puts "a" beyond the count kept.
        history.record(&job("c"), t0 + 3, t0 + 4);
        assert_eq!(history.find("a", t0 + 5).unwrap(), None);
        assert!(history.find("b", t0 + 5).unwrap().is_some());
        // Past the time kept, even the newest is gone; its day's file
        // goes when a later day's file starts.
        assert_eq!(history.find("c", t0 + 2 * DAY_MS + 5).unwrap(), None);
        history.record(&job("d"), t0 + 3 * DAY_MS, t0 + 3 * DAY_MS);
        history.flush().unwrap();
        assert_eq!(history.days().unwrap(), vec![13]);
    }

    // Pins the entry's bytes to FORMAT.md ("Job history"), field by
    // field, now that the entry's head and worker are written in one copy
    // each and the job is encoded from a borrow: a reader written from
    // the format (or an older build) reads what this one writes.
    #[test]
    fn an_entry_is_written_byte_for_byte_as_the_format_says() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path().to_path_buf(), KeepCompleted::DEFAULT);
        let t0 = 10 * DAY_MS;
        let mut leased = job("e1");
        leased.attempt = 3;
        history.record(&leased, t0 - 7, t0);
        history.flush().unwrap();
        let written = history.read_day(10).unwrap();

        let worker = crate::jobs::history::worker_name();
        let mut rest = Vec::new();
        rest.extend_from_slice(&t0.to_le_bytes());
        rest.extend_from_slice(&(t0 - 7).to_le_bytes());
        rest.extend_from_slice(&3u32.to_le_bytes());
        rest.extend_from_slice(&(worker.len() as u16).to_le_bytes());
        rest.extend_from_slice(worker.as_bytes());
        rest.extend_from_slice(&0u32.to_le_bytes());
        // The envelope: version 1, flags (caller id), priority, enqueued,
        // due 0, attempts before 0, the id, the headers, the body.
        rest.push(1);
        rest.push(1);
        rest.extend_from_slice(&3i32.to_le_bytes());
        rest.extend_from_slice(&5_000u64.to_le_bytes());
        rest.extend_from_slice(&0u64.to_le_bytes());
        rest.extend_from_slice(&0u32.to_le_bytes());
        rest.push(2);
        rest.extend_from_slice(b"e1");
        rest.extend_from_slice(&1u16.to_le_bytes());
        rest.push(1);
        rest.extend_from_slice(b"a");
        rest.extend_from_slice(&1u32.to_le_bytes());
        rest.extend_from_slice(b"b");
        rest.extend_from_slice(b"body");
        let mut expected = Vec::new();
        expected.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        expected.extend_from_slice(&crc32fast::hash(&rest).to_le_bytes());
        expected.extend_from_slice(&rest);
        assert_eq!(written, expected);
    }

    // Bug pinned: every handle's first ack pruned (a listing of the
    // history and a read of every kept day file, 50,000 entries by
    // default, on the ack's path), not only the handle that starts a new
    // day's file: a process that acks once, as `dque pop --ack` does, paid
    // for the whole history each time.
    #[test]
    fn only_the_handle_that_starts_a_days_file_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = 10 * DAY_MS;
        let first = History::new(dir.path().to_path_buf(), KeepCompleted::DEFAULT);
        first.record(&job("a"), t0, t0 + 1);
        first.flush().unwrap();
        assert_eq!(first.prunes(), 1, "the day's file was started");
        for n in 0..3 {
            let later = History::new(dir.path().to_path_buf(), KeepCompleted::DEFAULT);
            later.record(&job("b"), t0 + 2, t0 + 3 + n);
            later.flush().unwrap();
            assert_eq!(later.prunes(), 0, "handle {n}: the day's file was there");
        }
        // The next day's file: pruned by the handle that starts it.
        first.record(&job("c"), t0 + DAY_MS, t0 + DAY_MS);
        assert_eq!(first.prunes(), 2);
    }

    // A write cut by a kill (a short write) or a power loss leaves part of
    // an entry that another process appends after: the entries after it
    // must still be found (a reader that stopped at the first bad entry
    // hid them for the rest of the day).
    #[test]
    fn a_torn_entry_is_stepped_over_and_the_entries_after_it_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path().to_path_buf(), KeepCompleted::DEFAULT);
        history.record(&job("a"), 1, 2);
        history.flush().unwrap();
        let path = dir.path().join("0.log");
        let whole = std::fs::read(&path).unwrap();
        // "x" torn after 30 bytes, then "b" whole, by another handle.
        let mut torn = whole.clone();
        let x = {
            let other = tempfile::tempdir().unwrap();
            let h = History::new(other.path().to_path_buf(), KeepCompleted::DEFAULT);
            h.record(&job("x"), 1, 2);
            h.flush().unwrap();
            std::fs::read(other.path().join("0.log")).unwrap()
        };
        torn.extend_from_slice(&x[..30]);
        std::fs::write(&path, &torn).unwrap();
        history.record(&job("b"), 3, 4);
        history.flush().unwrap();
        assert!(history.find("a", 5).unwrap().is_some());
        assert!(
            history.find("b", 5).unwrap().is_some(),
            "after the torn entry"
        );
        assert!(history.find("x", 5).unwrap().is_none());
    }
}
