//! How items become record payloads and back.

use crate::error::CodecError;

/// Turns items of type `T` into bytes and back.
///
/// A queue remembers the [`ID`](Codec::ID) of the codec it was created with
/// and refuses to open with another one. Implement it to bring your own
/// encoding; ids below 1024 are reserved for dque's codecs.
///
/// ```
/// use dque::{Codec, CodecError};
///
/// #[derive(Default)]
/// struct Utf8;
///
/// impl Codec<String> for Utf8 {
///     const ID: u32 = 4242;
///     fn encode(&self, item: &String, out: &mut Vec<u8>) -> Result<(), CodecError> {
///         out.extend_from_slice(item.as_bytes());
///         Ok(())
///     }
///     fn decode(&self, bytes: &[u8]) -> Result<String, CodecError> {
///         Ok(String::from_utf8(bytes.to_vec())?)
///     }
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::DQue::<String, Utf8>::create(dir.path().join("q")).unwrap();
/// q.enqueue(&"hi".to_string()).unwrap();
/// assert_eq!(q.dequeue().unwrap().as_deref(), Some("hi"));
/// ```
pub trait Codec<T>: Default + Send + Sync + 'static {
    /// Stored in the queue's config; must never change for a given encoding.
    const ID: u32;
    /// Appends the encoding of `item` to `out`.
    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), CodecError>;
    /// Decodes one item from the whole of `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError>;
}

/// The default codec: bincode 2 (standard config) over serde.
///
/// serde hands a plain `Vec<u8>` (or `[u8; N]`) field over one element at
/// a time, which costs about 1.5 ns a byte each way; mark such fields
/// `#[serde(with = "serde_bytes")]` for one length and one copy (bincode
/// writes the same bytes either way, so a queue keeps working when a field
/// gains the attribute).
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Plain {
///     body: Vec<u8>,
/// }
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Fast {
///     #[serde(with = "serde_bytes")]
///     body: Vec<u8>,
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("q");
/// let q = dque::DQue::<Plain>::create(&path).unwrap();
/// q.enqueue(&Plain { body: b"same bytes".to_vec() }).unwrap();
/// q.close().unwrap();
/// // The same queue, read with the faster field: another type by name, so
/// // the open says it means it.
/// let q: dque::DQue<Fast> = dque::Options::new().check_item_type(false).open(&path).unwrap();
/// assert_eq!(q.dequeue().unwrap(), Some(Fast { body: b"same bytes".to_vec() }));
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct Bincode;

impl<T: serde::Serialize + serde::de::DeserializeOwned> Codec<T> for Bincode {
    const ID: u32 = 1;

    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        bincode::serde::encode_into_std_write(item, out, bincode::config::standard())?;
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        // The limit keeps a hostile length prefix from sizing a huge allocation.
        let config = bincode::config::standard()
            .with_limit::<{ crate::log::format::MAX_RECORD_PAYLOAD as usize }>();
        let (item, used) = bincode::serde::decode_from_slice(bytes, config)?;
        if used != bytes.len() {
            return Err(format!("{} trailing bytes after the item", bytes.len() - used).into());
        }
        Ok(item)
    }
}

/// Items are byte strings stored as they are, for callers with their own encoding.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let q = dque::RawQueue::create(dir.path().join("q")).unwrap();
/// q.enqueue_bytes(b"\x00\x01 any bytes").unwrap();
/// assert_eq!(q.dequeue().unwrap(), Some(b"\x00\x01 any bytes".to_vec()));
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct Raw;

impl Codec<Vec<u8>> for Raw {
    const ID: u32 = 0;

    fn encode(&self, item: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(item);
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, CodecError> {
        Ok(bytes.to_vec())
    }
}

/// JSON (serde_json), one document per record: for queues whose item type
/// must evolve, or whose records are read from the shell (`dque peek`,
/// `dque dump` print them as text).
///
/// Unlike [`Bincode`], JSON names every field, so records stay readable
/// when the type changes the way serde allows: a field added with
/// `#[serde(default)]`, a field removed (unknown fields are ignored unless
/// the type says `#[serde(deny_unknown_fields)]`), an enum variant added.
/// It is larger and slower than bincode. Its codec id is 3.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use dque::{DQue, Json, Options};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize {
///     image: String,
/// }
///
/// // The next version of the program adds a field.
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct ResizeV2 {
///     image: String,
///     #[serde(default)]
///     width: u32,
/// }
///
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("q");
/// let q: DQue<Resize, Json> = DQue::create(&path)?;
/// q.enqueue(&Resize { image: "cat.png".into() })?;
/// drop(q);
/// // Another type by name: the open says it means it.
/// let q: DQue<ResizeV2, Json> = Options::new().check_item_type(false).open(&path)?;
/// assert_eq!(q.dequeue()?, Some(ResizeV2 { image: "cat.png".into(), width: 0 }));
/// # Ok(()) }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct Json;

impl<T: serde::Serialize + serde::de::DeserializeOwned> Codec<T> for Json {
    const ID: u32 = 3;

    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        serde_json::to_writer(out, item)?;
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}
