//! A job as one record of a jobs queue: a small header (version, flags,
//! priority, times, attempts, id, headers) before the body, so the headers
//! are read without touching the body. Byte table in FORMAT.md, "Jobs".

use crate::codec::Codec;
use crate::error::CodecError;
use crate::jobs::clock::{from_unix_ms, unix_ms};
use crate::jobs::job::Job;
use crate::jobs::unique::{Hold, UniqueStates};

/// The codec id in the config of every queue that holds job envelopes
/// (the root lane, the other lanes, the schedule): "jobs" in ASCII.
pub const JOB_CODEC_ID: u32 = u32::from_le_bytes(*b"jobs");

const VERSION: u8 = 1;
/// An envelope with a uniqueness hold after the id (issue 27): a version
/// of its own, so a build that reads version 1 only refuses it whole
/// instead of reading the hold as headers.
const VERSION_HOLD: u8 = 2;
/// The hold: the period's end (u64) and the states (u8).
const HOLD_BYTES: usize = 9;
const CALLER_ID: u8 = 1;
/// Version, flags, priority, enqueued, due, attempts before, id length.
const FIXED: usize = 1 + 1 + 4 + 8 + 8 + 4 + 1;

/// The codec of job queues: records are envelopes, passed through as
/// bytes; its id keeps plain `DQue<T>` handles from reading them as items.
#[derive(Debug, Default, Clone, Copy)]
pub struct JobRecords;

impl Codec<Vec<u8>> for JobRecords {
    const ID: u32 = JOB_CODEC_ID;

    fn encode(&self, item: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(item);
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
        Ok(bytes.to_vec())
    }
}

/// A job as stored: the job, when it falls due, and the attempts it had
/// in records before this one (a job moved by a delayed retry or a
/// priority change starts a new record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub job: Job,
    /// Unix milliseconds; 0 when it was ready at enqueue.
    pub due_ms: u64,
    pub attempts_before: u32,
    /// The id's uniqueness hold, if the job was enqueued with a period.
    pub hold: Option<Hold>,
}

/// Whether `version` is one this build reads.
fn known(version: u8) -> bool {
    version == VERSION || version == VERSION_HOLD
}

impl Envelope {
    /// When the job in envelope `bytes` became (or becomes) ready, in Unix
    /// milliseconds, read from the fixed part (a lease's wait statistics:
    /// no round trip through `SystemTime`); `None` if it is no envelope.
    pub fn ready_ms_of(bytes: &[u8]) -> Option<u64> {
        let fixed = Fixed::read(bytes).ok()?;
        Some(match fixed.due_ms {
            0 => fixed.enqueued_ms,
            due => due,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the envelope's bytes to `out` (a queue's frame buffer: no
    /// buffer of its own, no second copy of the body).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        Self::encode_job_into(&self.job, self.due_ms, self.attempts_before, self.hold, out);
    }

    /// As [`encode_into`](Self::encode_into), from the envelope's parts
    /// (a history entry encodes a job it only borrows).
    pub fn encode_job_into(
        job: &Job,
        due_ms: u64,
        attempts_before: u32,
        hold: Option<Hold>,
        out: &mut Vec<u8>,
    ) {
        let headers: usize = job.headers.iter().map(|(n, v)| 5 + n.len() + v.len()).sum();
        out.reserve(FIXED + job.id.len() + HOLD_BYTES + 2 + headers + job.body.len());
        // The fixed part with one copy (a job's every write has one).
        let mut fixed = [0u8; FIXED];
        fixed[0] = match hold {
            Some(_) => VERSION_HOLD,
            None => VERSION,
        };
        fixed[1] = if job.caller_id { CALLER_ID } else { 0 };
        fixed[2..6].copy_from_slice(&job.priority.to_le_bytes());
        fixed[6..14].copy_from_slice(&unix_ms(job.enqueued_at).to_le_bytes());
        fixed[14..22].copy_from_slice(&due_ms.to_le_bytes());
        fixed[22..26].copy_from_slice(&attempts_before.to_le_bytes());
        // Lengths were checked when the job was made (ids ≤ 100 bytes,
        // names ≤ 255); made-up ids are short.
        fixed[FIXED - 1] = job.id.len() as u8;
        out.extend_from_slice(&fixed);
        out.extend_from_slice(job.id.as_bytes());
        if let Some(hold) = hold {
            out.extend_from_slice(&hold.until_ms.to_le_bytes());
            out.push(hold.states.bits());
        }
        out.extend_from_slice(&(job.headers.len() as u16).to_le_bytes());
        for (name, value) in &job.headers {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(&job.body);
    }

    /// Reads an envelope; `attempt` of the job is `attempts_before`.
    pub fn decode(bytes: &[u8]) -> Result<Envelope, CodecError> {
        let (mut envelope, at) = Self::decode_head(bytes)?;
        envelope.job.body = bytes[at..].to_vec();
        Ok(envelope)
    }

    /// As [`decode`](Self::decode), the body kept in `bytes`' buffer (the
    /// header is cut off its front: no second copy of the body).
    pub fn decode_owned(mut bytes: Vec<u8>) -> Result<Envelope, CodecError> {
        let (mut envelope, at) = Self::decode_head(&bytes)?;
        // The body moved to the front in place (one `memmove`, none of a
        // `Drain`'s bookkeeping).
        let body_len = bytes.len() - at;
        bytes.copy_within(at.., 0);
        bytes.truncate(body_len);
        envelope.job.body = bytes;
        Ok(envelope)
    }

    /// What a move out of the schedule reads: as
    /// [`decode_head`](Self::decode_head), but the id (and headers) only
    /// of a job with a caller id, which the ids' protocol names.
    pub fn decode_for_move(bytes: &[u8]) -> Result<Envelope, CodecError> {
        match Fixed::read(bytes) {
            Ok(fixed) if fixed.flags & CALLER_ID == 0 => {
                Ok(fixed.envelope(String::new(), Vec::new()))
            }
            _ => Self::decode_head(bytes).map(|(envelope, _)| envelope),
        }
    }

    /// Reads all but the body (left empty); returns where the body starts.
    pub fn decode_head(bytes: &[u8]) -> Result<(Envelope, usize), CodecError> {
        let fixed = Fixed::read(bytes)?;
        let mut r = Reader { bytes, at: FIXED };
        let id = r.text(usize::from(fixed.id_len))?;
        let hold = match fixed.version {
            VERSION_HOLD => Some(Hold {
                until_ms: u64::from_le_bytes(r.array()?),
                states: UniqueStates::from_bits(r.u8()?),
            }),
            _ => None,
        };
        let count = u16::from_le_bytes(r.array()?);
        let mut headers = Vec::with_capacity(usize::from(count).min(64));
        for _ in 0..count {
            let name_len = r.u8()? as usize;
            let name = r.text(name_len)?;
            let value_len = u32::from_le_bytes(r.array()?) as usize;
            headers.push((name, r.text(value_len)?));
        }
        let mut envelope = fixed.envelope(id, headers);
        envelope.hold = hold;
        Ok((envelope, r.at))
    }

    /// The caller-chosen id alone, if the envelope has one (read from the
    /// fixed part and the id, not the headers or the body).
    pub fn caller_id_of(bytes: &[u8]) -> Option<&str> {
        if bytes.len() < FIXED || !known(bytes[0]) || bytes[1] & CALLER_ID == 0 {
            return None;
        }
        let len = usize::from(bytes[FIXED - 1]);
        std::str::from_utf8(bytes.get(FIXED..FIXED + len)?).ok()
    }

    /// The id alone, caller's or made up (read from the fixed part and
    /// the id, not the headers or the body): what a search by id reads.
    pub fn id_of(bytes: &[u8]) -> Option<&str> {
        if bytes.len() < FIXED || !known(bytes[0]) {
            return None;
        }
        let len = usize::from(bytes[FIXED - 1]);
        std::str::from_utf8(bytes.get(FIXED..FIXED + len)?).ok()
    }

    /// The priority alone, read from the fixed part.
    pub fn priority_of(bytes: &[u8]) -> Result<i32, CodecError> {
        Fixed::read(bytes).map(|fixed| fixed.priority)
    }

    /// The due time alone, read from the fixed part.
    pub fn due_ms_of(bytes: &[u8]) -> Result<u64, CodecError> {
        if bytes.len() < FIXED || !known(bytes[0]) {
            return Err("not a job envelope".into());
        }
        Ok(u64::from_le_bytes(
            bytes[14..22].try_into().expect("8 bytes"),
        ))
    }
}

/// The fixed part of an envelope, read at once (a lease reads it for
/// every job).
struct Fixed {
    version: u8,
    flags: u8,
    priority: i32,
    enqueued_ms: u64,
    due_ms: u64,
    attempts_before: u32,
    id_len: u8,
}

impl Fixed {
    fn read(bytes: &[u8]) -> Result<Fixed, CodecError> {
        if let Some(&version) = bytes.first().filter(|&&v| !known(v)) {
            return Err(format!(
                "job envelope version {version}, this build reads {VERSION} and {VERSION_HOLD}"
            )
            .into());
        }
        let fixed = bytes
            .get(..FIXED)
            .ok_or_else(|| CodecError::from("job envelope cut short"))?;
        let word = |at: usize| u64::from_le_bytes(fixed[at..at + 8].try_into().expect("8 bytes"));
        Ok(Fixed {
            version: fixed[0],
            flags: fixed[1],
            priority: i32::from_le_bytes(fixed[2..6].try_into().expect("4 bytes")),
            enqueued_ms: word(6),
            due_ms: word(14),
            attempts_before: u32::from_le_bytes(fixed[22..26].try_into().expect("4 bytes")),
            id_len: fixed[FIXED - 1],
        })
    }

    /// The envelope with `id` and `headers`, its body left empty.
    fn envelope(&self, id: String, headers: Vec<(String, String)>) -> Envelope {
        Envelope {
            job: Job {
                id,
                body: Vec::new(),
                priority: self.priority,
                headers,
                attempt: self.attempts_before,
                enqueued_at: from_unix_ms(self.enqueued_ms),
                caller_id: self.flags & CALLER_ID != 0,
            },
            due_ms: self.due_ms,
            attempts_before: self.attempts_before,
            hold: None,
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&[u8], CodecError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| CodecError::from("job envelope cut short"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    #[inline]
    fn text(&mut self, n: usize) -> Result<String, CodecError> {
        let bytes = self.take(n)?;
        // Ids and names are mostly ASCII: a word-at-a-time look, cheaper
        // than `from_utf8`'s (which the rest still get).
        if bytes.is_ascii() {
            // SAFETY: ASCII bytes are UTF-8.
            return Ok(unsafe { String::from_utf8_unchecked(bytes.to_vec()) });
        }
        String::from_utf8(bytes.to_vec())
            .map_err(|_| CodecError::from("job envelope text is not UTF-8"))
    }
}

/// A job as a record of a jobs queue holds it, for tools that show records.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredJob {
    /// The job (`attempt`: the attempts it had in records before this one).
    pub job: Job,
    /// When a scheduled job falls due (or fell due, for one moved to its lane).
    pub due: Option<std::time::SystemTime>,
}

impl StoredJob {
    /// A job and its due time, as a tool shows them.
    pub fn new(job: Job, due: Option<std::time::SystemTime>) -> Self {
        StoredJob { job, due }
    }
}

/// Reads a record of a jobs queue as the job it holds.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use dque::jobs::{job_from_record, EmbeddedJobs, JobQueue, NewJob};
/// let dir = tempfile::tempdir().unwrap();
/// let q = EmbeddedJobs::create(dir.path().join("q"))?;
/// q.enqueue(NewJob::new("body").header("owner", "ops"))?;
/// q.close()?;
/// // The queue's root is a queue directory of job records:
/// let raw = dque::RawQueue::open_encoded_with(dir.path().join("q"), &dque::Options::new())?;
/// let stored = job_from_record(&raw.peek_raw()?.expect("a record"))?;
/// assert_eq!(stored.job.header("owner"), Some("ops"));
/// assert_eq!((&stored.job.body[..], stored.due), (&b"body"[..], None));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// A message saying what is wrong with the bytes.
pub fn job_from_record(bytes: &[u8]) -> Result<StoredJob, CodecError> {
    Envelope::decode(bytes).map(|envelope| StoredJob {
        due: (envelope.due_ms > 0).then(|| from_unix_ms(envelope.due_ms)),
        job: envelope.job,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    // Pins the ready time a lease's wait statistics read from the fixed
    // part (no decode): the enqueue time of a job ready at enqueue, the
    // due time of a scheduled one, nothing for bytes that are no envelope.
    #[test]
    fn the_ready_time_is_read_from_the_fixed_part() {
        let mut envelope = Envelope {
            job: Job {
                id: "r".into(),
                body: b"b".to_vec(),
                priority: 0,
                headers: Vec::new(),
                attempt: 0,
                enqueued_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                caller_id: false,
            },
            due_ms: 0,
            attempts_before: 0,
            hold: None,
        };
        assert_eq!(
            Envelope::ready_ms_of(&envelope.encode()),
            Some(1_700_000_000_123)
        );
        envelope.due_ms = 1_700_000_009_000;
        assert_eq!(
            Envelope::ready_ms_of(&envelope.encode()),
            Some(1_700_000_009_000)
        );
        assert_eq!(Envelope::ready_ms_of(b"\xffnot a job"), None);
        assert_eq!(Envelope::ready_ms_of(&envelope.encode()[..10]), None);
    }

    // Guards the reader's two ways of taking a text (ASCII checked word
    // by word, the rest by `from_utf8`): both read back what was written,
    // and bytes that are no UTF-8 are refused wherever they stand.
    #[test]
    fn texts_read_back_ascii_or_not_and_bytes_that_are_no_utf8_are_refused() {
        let envelope = Envelope {
            job: Job {
                id: "café-✓".into(),
                body: b"b".to_vec(),
                priority: 0,
                headers: vec![
                    ("plain".into(), "ascii value".into()),
                    ("ünï".into(), "wert ß".into()),
                ],
                attempt: 0,
                enqueued_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                caller_id: true,
            },
            due_ms: 0,
            attempts_before: 0,
            hold: None,
        };
        let bytes = envelope.encode();
        assert_eq!(Envelope::decode(&bytes).unwrap(), envelope);
        for text in ["café-✓", "ünï", "wert ß", "ascii value"] {
            let at = bytes
                .windows(text.len())
                .position(|w| w == text.as_bytes())
                .expect("the text is in the envelope");
            let mut bad = bytes.clone();
            // A lone continuation byte: no UTF-8, ASCII or not around it.
            bad[at] = 0x80;
            assert!(Envelope::decode(&bad).is_err(), "{text:?} spoilt");
        }
    }

    #[test]
    fn an_envelope_reads_back_as_written_and_cut_ones_are_refused() {
        let envelope = Envelope {
            job: Job {
                id: "photo-1".into(),
                body: b"\x00body\xff".to_vec(),
                priority: -7,
                headers: vec![
                    ("owner".into(), "ops".into()),
                    ("a_b".into(), String::new()),
                ],
                attempt: 2,
                enqueued_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                caller_id: true,
            },
            due_ms: 1_700_000_005_000,
            attempts_before: 2,
            hold: None,
        };
        let bytes = envelope.encode();
        assert_eq!(Envelope::decode(&bytes).unwrap(), envelope);
        assert_eq!(Envelope::decode_owned(bytes.clone()).unwrap(), envelope);
        let moved = Envelope::decode_for_move(&bytes).unwrap();
        assert_eq!(
            (moved.job.id, moved.due_ms),
            (envelope.job.id.clone(), envelope.due_ms)
        );
        let mut plain = envelope.clone();
        plain.job.caller_id = false;
        let moved = Envelope::decode_for_move(&plain.encode()).unwrap();
        assert_eq!(
            (
                moved.job.priority,
                moved.due_ms,
                moved.attempts_before,
                moved.job.enqueued_at
            ),
            (-7, 1_700_000_005_000, 2, envelope.job.enqueued_at)
        );
        assert_eq!(Envelope::due_ms_of(&bytes).unwrap(), 1_700_000_005_000);
        assert_eq!(Envelope::caller_id_of(&bytes), Some("photo-1"));
        let made_up = Envelope {
            job: Job {
                caller_id: false,
                ..envelope.job.clone()
            },
            ..envelope.clone()
        };
        assert_eq!(Envelope::caller_id_of(&made_up.encode()), None);
        assert_eq!(
            Envelope::caller_id_of(&bytes[..FIXED + 3]),
            None,
            "a cut id"
        );
        for cut in 0..bytes.len() - envelope.job.body.len() {
            assert!(Envelope::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A uniqueness hold (issue 27): version 2, read back whole by
        // every reader of this build; version 1 without one.
        let held = Envelope {
            hold: Some(Hold {
                until_ms: 1_700_003_600_123,
                states: UniqueStates::ALL,
            }),
            ..envelope.clone()
        };
        let held_bytes = held.encode();
        assert_eq!((bytes[0], held_bytes[0]), (VERSION, VERSION_HOLD));
        assert_eq!(Envelope::decode(&held_bytes).unwrap(), held);
        assert_eq!(
            Envelope::decode_for_move(&held_bytes).unwrap().hold,
            held.hold
        );
        assert_eq!(Envelope::caller_id_of(&held_bytes), Some("photo-1"));
        assert_eq!(Envelope::due_ms_of(&held_bytes).unwrap(), 1_700_000_005_000);
        for cut in 0..held_bytes.len() - held.job.body.len() {
            assert!(
                Envelope::decode(&held_bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
