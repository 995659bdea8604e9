//! How a job of the Jobs API is written in qless's fields, and read back.
//!
//! - The body is qless's `data`, a JSON text: a body that is JSON is
//!   written as it is; any other body is written as a JSON string of its
//!   text (invalid UTF-8 replaced) for qless clients to read, and its exact
//!   bytes are kept beside it (field `dque-body`), so a Rust reader gets
//!   back what was enqueued.
//! - Header `klass` is qless's `klass` ([`DEFAULT_KLASS`] without one);
//!   every header is kept in order in field `dque-headers`. A job a qless
//!   client put has one header: its `klass` (unless it is the default).
//! - Priorities run the other way: in qless the higher number runs first,
//!   in the Jobs API the smaller; a job of Jobs API priority `p` has qless
//!   priority `-p`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::redis::Value;

use crate::error::{Error, Result};
use crate::jobs::job::Job;

/// The `klass` of a job enqueued without a `klass` header.
pub const DEFAULT_KLASS: &str = "dque.Job";

/// The header that holds a job's qless `klass`.
pub const KLASS_HEADER: &str = "klass";

/// A body as qless's `data`, and the exact bytes when `data` cannot be them.
pub(crate) fn encode_body(body: &[u8]) -> (String, Option<&[u8]>) {
    // qless's complete refuses data that decodes to `false`: kept as text.
    let json = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|value| value != serde_json::Value::Bool(false));
    if json {
        // Valid JSON is valid UTF-8.
        return (String::from_utf8_lossy(body).into_owned(), None);
    }
    (text_data(body), Some(body))
}

/// The JSON string qless clients see for a body that is not JSON.
fn text_data(body: &[u8]) -> String {
    serde_json::to_string(&String::from_utf8_lossy(body)).expect("a string always serializes")
}

/// Whether `data` is still what dque wrote for `body` (a qless client's
/// put of the same id rewrites `data` and leaves dque's fields behind;
/// its complete may re-encode the same string, `/` as `\/`).
fn data_matches(data: &[u8], body: &[u8]) -> bool {
    let seen = serde_json::from_slice::<serde_json::Value>(data);
    let wrote = serde_json::from_str::<serde_json::Value>(&text_data(body));
    match (seen, wrote) {
        (Ok(seen), Ok(wrote)) => seen == wrote,
        _ => false,
    }
}

/// The `klass` and the `dque-headers` field (empty: no headers) of a job.
pub(crate) fn encode_headers(headers: &[(String, String)]) -> (String, String) {
    let klass = headers
        .iter()
        .find(|(name, _)| name == KLASS_HEADER)
        .map_or(DEFAULT_KLASS, |(_, value)| value.as_str())
        .to_owned();
    if headers.is_empty() {
        return (klass, String::new());
    }
    let pairs: Vec<[&str; 2]> = headers
        .iter()
        .map(|(n, v)| [n.as_str(), v.as_str()])
        .collect();
    (
        klass,
        serde_json::to_string(&pairs).expect("strings serialize"),
    )
}

/// qless's priority for a Jobs API priority.
pub(crate) fn qless_priority(priority: i32) -> i64 {
    -i64::from(priority)
}

/// Seconds since the Unix epoch, as the scripts take times.
pub(crate) fn seconds(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}", since.as_secs(), since.subsec_micros())
}

/// Seconds as a decimal, for delays and lease times.
pub(crate) fn duration_seconds(duration: Duration) -> String {
    format!("{}.{:06}", duration.as_secs(), duration.subsec_micros())
}

fn time_of(seconds: f64) -> SystemTime {
    if seconds.is_finite() && seconds > 0.0 {
        UNIX_EPOCH + Duration::from_secs_f64(seconds)
    } else {
        UNIX_EPOCH
    }
}

fn protocol(what: &str) -> Error {
    Error::Backend {
        backend: "Redis",
        reason: format!("unexpected reply from the dque script: {what}"),
    }
}

/// The bytes of a bulk or simple string reply (nil: none).
pub(crate) fn bytes_of(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) => Some(text.clone().into_bytes()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}

/// The text of a string reply ("" for nil).
pub(crate) fn text_of(value: &Value) -> String {
    bytes_of(value)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The elements of an array reply.
pub(crate) fn array_of(value: &Value) -> Result<&[Value]> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(protocol(&format!("expected an array, got {other:?}"))),
    }
}

/// An integer reply (or a string holding one).
pub(crate) fn int_of(value: &Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(*n),
        other => text_of(other)
            .parse()
            .map_err(|_| protocol(&format!("expected an integer, got {other:?}"))),
    }
}

/// A job as the scripts answer it (`job_reply` in base.lua).
#[derive(Debug, Clone)]
pub(crate) struct JobReply {
    pub job: Job,
    /// qless's `state`, or the state it is listed in.
    pub state: String,
    /// The due time or lease deadline, if the reply has one.
    pub at: Option<SystemTime>,
    /// qless's `failure` (JSON), `queue`, `worker`, `tags` (JSON), and the
    /// lease token.
    pub failure: String,
    pub queue: String,
    pub worker: String,
    pub tags: Vec<String>,
    pub lease: String,
    /// qless's `retries` and `remaining`.
    pub retries: i64,
    pub remaining: i64,
}

impl JobReply {
    pub(crate) fn parse(value: &Value) -> Result<JobReply> {
        let fields = array_of(value)?;
        if fields.len() < 17 {
            return Err(protocol(&format!("a job of {} fields", fields.len())));
        }
        let text = |i: usize| text_of(&fields[i]);
        let number = |i: usize| text(i).parse::<f64>().unwrap_or(0.0);
        let data = bytes_of(&fields[1]).unwrap_or_default();
        // dque's own fields hold only while qless's agree with them.
        let body = match bytes_of(&fields[2]) {
            Some(raw) if data_matches(&data, &raw) => raw,
            _ => data,
        };
        let klass = text(4);
        let ours = bytes_of(&fields[3])
            .and_then(|json| serde_json::from_slice::<Vec<(String, String)>>(&json).ok())
            .filter(|headers| encode_headers(headers).0 == klass);
        let headers = match ours {
            Some(headers) => headers,
            None if klass.is_empty() || klass == DEFAULT_KLASS => Vec::new(),
            None => vec![(KLASS_HEADER.to_owned(), klass)],
        };
        let priority = -(number(5) as i64);
        let retries = number(6) as i64;
        let remaining = number(7) as i64;
        let state = text(9);
        // Attempts so far. A running job's count includes this one; a
        // failed job's too, unless its retries ran out (the last attempt
        // took `remaining` below zero).
        let attempt = match state.as_str() {
            "running" => retries - remaining + 1,
            "failed" => retries + 1 - remaining.max(0),
            _ => retries - remaining,
        }
        .max(0);
        let at = text(10)
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0)
            .map(time_of);
        let tags = serde_json::from_str::<Vec<String>>(&text(14)).unwrap_or_default();
        let id = text(0);
        Ok(JobReply {
            job: Job {
                // dque marks the ids it made up; any other id (a qless
                // client's uuid included) counts as the caller's.
                caller_id: text(16) != "1",
                id,
                body,
                priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
                headers,
                attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                enqueued_at: time_of(number(8)),
            },
            state,
            at,
            failure: text(11),
            queue: text(12),
            worker: text(13),
            tags,
            lease: text(15),
            retries,
            remaining,
        })
    }

    /// The failure's message (its group when it has none).
    pub(crate) fn failure_message(&self) -> String {
        let failure: serde_json::Value =
            serde_json::from_str(&self.failure).unwrap_or(serde_json::Value::Null);
        let field = |name: &str| {
            failure
                .get(name)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let message = field("message");
        if message.is_empty() {
            field("group")
        } else {
            message
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_are_data_and_others_keep_their_bytes() {
        assert_eq!(
            encode_body(br#"{"a": 1}"#),
            (r#"{"a": 1}"#.to_owned(), None)
        );
        assert_eq!(encode_body(b"7"), ("7".to_owned(), None));
        let (data, raw) = encode_body(b"hello \"you\"");
        assert_eq!(data, r#""hello \"you\"""#);
        assert_eq!(raw, Some(&b"hello \"you\""[..]));
        let (data, raw) = encode_body(&[0xff, b'a']);
        assert_eq!(data, "\"\u{fffd}a\"");
        assert_eq!(raw, Some(&[0xff, b'a'][..]));
        assert_eq!(encode_body(b"").1, Some(&b""[..]));
        assert_eq!(
            encode_body(b"false"),
            ("\"false\"".to_owned(), Some(&b"false"[..]))
        );
        assert_eq!(encode_body(b"true").1, None);
    }

    #[test]
    fn dque_fields_hold_only_while_data_agrees() {
        assert!(data_matches(br#""a/b""#, b"a/b"));
        assert!(data_matches(br#""a\/b""#, b"a/b"), "cjson's escaped slash");
        assert!(!data_matches(br#"{"to":"new"}"#, b"hello"));
    }

    #[test]
    fn klass_comes_from_its_header() {
        assert_eq!(
            encode_headers(&[]),
            (DEFAULT_KLASS.to_owned(), String::new())
        );
        let headers = vec![
            ("owner".to_owned(), "ops".to_owned()),
            ("klass".to_owned(), "mail.Send".to_owned()),
        ];
        assert_eq!(
            encode_headers(&headers),
            (
                "mail.Send".to_owned(),
                r#"[["owner","ops"],["klass","mail.Send"]]"#.to_owned()
            )
        );
    }

    #[test]
    fn times_are_decimal_seconds() {
        let t = UNIX_EPOCH + Duration::from_micros(1_800_000_000_250_001);
        assert_eq!(seconds(t), "1800000000.250001");
        assert_eq!(duration_seconds(Duration::from_millis(1500)), "1.500000");
        assert_eq!(qless_priority(-5), 5);
        assert_eq!(qless_priority(i32::MIN), 2_147_483_648);
    }
}
