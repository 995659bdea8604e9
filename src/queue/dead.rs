//! Dead letters: records that failed too often, kept aside with the reason.
//!
//! They live in a queue of their own in the `dead/` directory of the queue,
//! one record per letter: the original id (u64), the attempts (u16), the
//! reason's length (u16) and bytes (UTF-8), then the item's payload.

use crate::codec::Codec;
use crate::error::{Error, Result};

/// Codec id of the dead-letter queue's records.
pub const DEAD_LETTER_CODEC: u32 = 2;

const FIXED: usize = 12;

/// An item moved out of the queue after failing, with why.
///
/// ```
/// use dque::{DQue, Options};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let q: DQue<String> = Options::new().max_attempts(1).create(dir.path().join("q"))?;
/// q.enqueue(&"bad job".to_string())?;
/// q.lease()?.expect("an item").fail("malformed input")?;
/// let dead = q.dead_letters()?;
/// assert_eq!(dead[0].reason, "malformed input");
/// assert_eq!(dead[0].item::<String, dque::Bincode>()?, "bad job");
/// q.requeue_dead(dead[0].id)?;
/// assert_eq!(q.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The letter's id among the dead letters (for `requeue_dead`).
    pub id: u64,
    /// The item's id in the queue it came from.
    pub original_id: u64,
    /// Delivery attempts it had.
    pub attempts: u16,
    /// Why it was moved.
    pub reason: String,
    /// The item's bytes as stored.
    pub payload: Vec<u8>,
}

impl DeadLetter {
    /// Decodes the item with codec `C`.
    pub fn item<T, C: Codec<T>>(&self) -> Result<T> {
        C::default()
            .decode(&self.payload)
            .map_err(|source| Error::Decode {
                id: self.original_id,
                source,
            })
    }

    pub(crate) fn encode(original_id: u64, attempts: u16, reason: &str, payload: &[u8]) -> Vec<u8> {
        let mut reason_len = reason.len().min(u16::MAX as usize);
        while !reason.is_char_boundary(reason_len) {
            reason_len -= 1;
        }
        let mut bytes = Vec::with_capacity(FIXED + reason_len + payload.len());
        bytes.extend_from_slice(&original_id.to_le_bytes());
        bytes.extend_from_slice(&attempts.to_le_bytes());
        bytes.extend_from_slice(&(reason_len as u16).to_le_bytes());
        bytes.extend_from_slice(&reason.as_bytes()[..reason_len]);
        bytes.extend_from_slice(payload);
        bytes
    }

    pub(crate) fn decode(id: u64, bytes: &[u8]) -> Result<DeadLetter> {
        let bad = |reason: &str| Error::Decode {
            id,
            source: format!("dead letter: {reason}").into(),
        };
        if bytes.len() < FIXED {
            return Err(bad("shorter than its fixed fields"));
        }
        let original_id = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        let attempts = u16::from_le_bytes(bytes[8..10].try_into().expect("2 bytes"));
        let reason_len = u16::from_le_bytes(bytes[10..12].try_into().expect("2 bytes")) as usize;
        let reason = bytes
            .get(FIXED..FIXED + reason_len)
            .ok_or_else(|| bad("reason runs past the record"))?;
        let reason = String::from_utf8(reason.to_vec()).map_err(|_| bad("reason is not UTF-8"))?;
        Ok(DeadLetter {
            id,
            original_id,
            attempts,
            reason,
            payload: bytes[FIXED + reason_len..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_cuts_a_long_reason_on_a_char_boundary() {
        let letter = DeadLetter::encode(7, 3, "too slow", b"payload");
        let decoded = DeadLetter::decode(1, &letter).unwrap();
        assert_eq!(
            (
                decoded.original_id,
                decoded.attempts,
                decoded.reason.as_str()
            ),
            (7, 3, "too slow")
        );
        assert_eq!(decoded.payload, b"payload");
        let long = "é".repeat(40_000);
        let decoded = DeadLetter::decode(1, &DeadLetter::encode(1, 1, &long, b"")).unwrap();
        assert!(decoded.reason.len() <= u16::MAX as usize);
        assert!(DeadLetter::decode(1, &letter[..5]).is_err());
    }
}
