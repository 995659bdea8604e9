//! Keyset paging of the waiting jobs: a [`Page`] of jobs and an opaque
//! [`PageCursor`] naming where the next page starts, so that a deep page
//! costs about what the first does (no re-reading from the front where
//! the backend can resume: the embedded queue from a lane position,
//! PostgreSQL from the order columns of its lease index).
//!
//! The rule for a queue that changes between pages (as Sidekiq's and
//! River's cursors): a job that stays where it waits is listed exactly
//! once; a job that moves (a priority change, a retry, a lease ending
//! and the job handed back, a dead letter requeued, on the embedded
//! queue a due job moved from the schedule to its lane by a write) shows
//! at its new place: once more if that is after the cursor, not at all
//! if it is before; a job that settles meanwhile is simply gone. A
//! keyset cursor carries the first page's time, which splits ready from
//! scheduled jobs for the whole walk: a scheduled job falling due during
//! the walk keeps its place in it (listed with the scheduled ones, its
//! state ready). The default cursor (Redis) is an offset: a job settled
//! or added before it shifts the rest by one (one listed twice or
//! skipped).
//!
//! A cursor is text of `[A-Za-z0-9._~-]` (safe in a URL query as it is)
//! carrying a check: a garbled or truncated one is refused
//! ([`Error::BadCursor`](crate::Error::BadCursor)), as is one made by
//! another kind of backend. It is no secret and not signed: a forged one
//! that passes the check names a position, and a page from there is
//! still only jobs of the queue.

use super::job::Waiting;
use crate::error::{Error, Result};

/// Where the next page of a list starts: opaque, printable into a URL
/// query and read back with [`PageCursor::parse`].
///
/// ```
/// use dque::jobs::{EmbeddedJobs, JobQueue, NewJob, PageCursor};
/// # fn main() -> Result<(), dque::Error> {
/// let dir = tempfile::tempdir().unwrap();
/// let queue = EmbeddedJobs::create(dir.path().join("q"))?;
/// for i in 0..5 {
///     queue.enqueue(NewJob::new(format!("job {i}")))?;
/// }
/// let first = queue.waiting_page(None, 2)?;
/// let text = first.next.expect("more jobs").to_string();
/// let cursor = PageCursor::parse(&text)?;
/// let second = queue.waiting_page(Some(&cursor), 2)?;
/// assert_eq!(second.jobs[0].job.body, b"job 2");
/// assert!(PageCursor::parse("e1.L.0.7~00000000").is_err(), "a garbled cursor");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageCursor {
    /// The backend's tag for the kind of position (`o` an offset, `eL` an
    /// embedded lane record, ...).
    kind: String,
    fields: Vec<i128>,
}

/// One page of a list: the jobs and, if more may follow, the cursor of
/// the next page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The jobs of this page, in the list's order.
    pub jobs: Vec<Waiting>,
    /// Where the next page starts; `None`: this page ended the list.
    pub next: Option<PageCursor>,
}

/// The cursor format's version: a cursor of another version is refused.
const VERSION: &str = "c1";

/// The longest cursor text read (a few numbers: anything longer is not one).
const MAX_CURSOR_LEN: usize = 256;

impl PageCursor {
    /// A cursor of `kind` (letters only) with `fields`.
    pub(crate) fn new(kind: &str, fields: &[i128]) -> Self {
        debug_assert!(kind.bytes().all(|b| b.is_ascii_alphabetic()));
        PageCursor {
            kind: kind.to_owned(),
            fields: fields.to_vec(),
        }
    }

    /// Reads a cursor printed by [`Display`](std::fmt::Display).
    ///
    /// # Errors
    ///
    /// [`Error::BadCursor`](crate::Error::BadCursor) for text that is not a
    /// cursor, or whose check does not match (garbled, cut short).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| Error::BadCursor {
            reason: format!("{why} in {:?}", shorten(text)),
        };
        if text.len() > MAX_CURSOR_LEN {
            return Err(bad("too long"));
        }
        let (body, check) = text.rsplit_once('~').ok_or_else(|| bad("no check"))?;
        if check.len() != 8 || format!("{:08x}", checksum(body)) != check {
            return Err(bad("the check does not match"));
        }
        let mut parts = body.split('.');
        if parts.next() != Some(VERSION) {
            return Err(bad("an unknown version"));
        }
        let kind = parts.next().filter(|k| {
            !k.is_empty() && k.len() <= 8 && k.bytes().all(|b| b.is_ascii_alphabetic())
        });
        let kind = kind.ok_or_else(|| bad("no kind"))?;
        let fields = parts
            .map(|p| {
                // Plain decimal only ("+1", "01" and "" are not written).
                let plain = p.strip_prefix('-').unwrap_or(p);
                let canonical = !plain.is_empty()
                    && plain.bytes().all(|b| b.is_ascii_digit())
                    && (plain == "0" || !plain.starts_with('0'));
                canonical
                    .then(|| p.parse::<i128>().ok())
                    .flatten()
                    .ok_or_else(|| bad("a field that is not a number"))
            })
            .collect::<Result<Vec<i128>>>()?;
        Ok(PageCursor::new(kind, &fields))
    }

    /// The fields of a cursor of `kind` with `N` fields, each converted.
    ///
    /// # Errors
    ///
    /// `BadCursor` for a cursor of another kind or shape, or a field out
    /// of its type's range.
    pub(crate) fn fields<T: TryFrom<i128>, const N: usize>(&self, kind: &str) -> Result<[T; N]> {
        let bad = |why: String| Error::BadCursor {
            reason: format!("{why} in {:?}", self.to_string()),
        };
        if self.kind != kind || self.fields.len() != N {
            return Err(bad(format!(
                "a cursor of kind {:?} with {} fields where {kind:?} with {N} was expected \
                 (made by another backend or another list?)",
                self.kind,
                self.fields.len()
            )));
        }
        let mut out = Vec::with_capacity(N);
        for &f in &self.fields {
            out.push(T::try_from(f).map_err(|_| bad(format!("field {f} out of range")))?);
        }
        Ok(out
            .try_into()
            .unwrap_or_else(|_| unreachable!("N fields checked")))
    }

    /// The cursor's kind.
    pub(crate) fn kind(&self) -> &str {
        &self.kind
    }
}

impl std::fmt::Display for PageCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut body = format!("{VERSION}.{}", self.kind);
        for field in &self.fields {
            body.push('.');
            body.push_str(&field.to_string());
        }
        write!(f, "{body}~{:08x}", checksum(&body))
    }
}

impl std::str::FromStr for PageCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        PageCursor::parse(text)
    }
}

/// FNV-1a (32 bits) of `text`: catches garbling, not forgery.
fn checksum(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// At most 64 characters of `text`, for an error message.
fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The kind of the default cursor: an offset into the list.
const OFFSET: &str = "o";

/// The jobs a default cursor skips (0 for the first page).
///
/// # Errors
///
/// `BadCursor` for a cursor that is not an offset.
pub(crate) fn offset_of(after: Option<&PageCursor>) -> Result<usize> {
    match after {
        None => Ok(0),
        Some(cursor) => {
            let [skip] = cursor.fields::<u32, 1>(OFFSET)?;
            // No list this default pages through is that long (it reads
            // every job before the page): a larger offset was forged.
            Ok(skip as usize)
        }
    }
}

/// The default page: the front of `waiting` read up to the page's end
/// (a deep page re-reads every job before it), the cursor an offset.
pub(crate) fn by_offset(
    after: Option<&PageCursor>,
    max: usize,
    waiting: impl FnOnce(usize) -> Result<Vec<Waiting>>,
) -> Result<Page> {
    let skip = offset_of(after)?;
    let mut jobs = waiting(skip.saturating_add(max).saturating_add(1))?;
    let more = jobs.len() > skip.saturating_add(max);
    jobs.truncate(skip.saturating_add(max));
    let jobs = jobs.split_off(skip.min(jobs.len()));
    let next = (more && max > 0).then(|| PageCursor::new(OFFSET, &[(skip + max) as i128]));
    Ok(Page { jobs, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_printed() {
        for fields in [vec![], vec![0], vec![-7, 3, i128::from(u64::MAX)]] {
            let cursor = PageCursor::new("eL", &fields);
            let text = cursor.to_string();
            assert!(text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b)));
            assert_eq!(PageCursor::parse(&text).unwrap(), cursor);
        }
    }

    // A cursor comes back from a URL anyone can edit: every change of one
    // is an error (never a panic, never a page from elsewhere by chance).
    #[test]
    fn a_garbled_cursor_is_an_error() {
        let text = PageCursor::new("eL", &[3, 12345]).to_string();
        let mut bad = vec![
            String::new(),
            "~".into(),
            "c1.eL.3.12345".into(),
            text[..text.len() - 1].into(),
            text[1..].into(),
            format!("{text}0"),
            "x".repeat(10_000),
        ];
        for i in 0..text.len() {
            for c in ['0', '9', 'a', '.', '~', '-', 'é'] {
                let mut s: Vec<char> = text.chars().collect();
                if s[i] != c {
                    s[i] = c;
                    bad.push(s.into_iter().collect());
                }
            }
        }
        for text in bad {
            let parsed = PageCursor::parse(&text);
            assert!(
                matches!(parsed, Err(Error::BadCursor { .. })),
                "{text:?}: {parsed:?}"
            );
        }
        let cursor = PageCursor::parse(&PageCursor::new("eL", &[3, -1]).to_string()).unwrap();
        assert!(cursor.fields::<u64, 2>("eL").is_err(), "out of range");
        assert!(cursor.fields::<i64, 3>("eL").is_err(), "wrong shape");
        assert!(cursor.fields::<i64, 2>("o").is_err(), "wrong kind");
        assert_eq!(cursor.fields::<i64, 2>("eL").unwrap(), [3, -1]);
    }
}
