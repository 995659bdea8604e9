//! Opening a queue: the directory checks, the config, and the replay of
//! the front run and the tail.

use std::collections::VecDeque;
use std::fs;
use std::path::Path;
use std::time::Duration;

use super::processes::mend;
use super::{new_header, sealed_records, Engine, OpenMode};
use crate::error::{Error, Result};
use crate::log::format::{Config, ItemType};
use crate::log::layout::QueueDir;
use crate::log::lock::DirLock;
use crate::log::recovery::OpenReport;
use crate::log::segment::Segment;
use crate::options::{
    Options, DEFAULT_MAX_ATTEMPTS, DEFAULT_SEGMENT_BYTES, DEFAULT_SEGMENT_ITEMS,
    DEFAULT_VISIBILITY_TIMEOUT,
};
use crate::queue::delivery::Deliveries;
use crate::queue::processes::Joining;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    pub fn open(
        path: &Path,
        options: &Options,
        codec_id: u32,
        mode: OpenMode,
    ) -> Result<(Engine, OpenReport)> {
        Engine::open_holding(path, options, codec_id, mode, None)
    }

    /// [`open`](Self::open) with the queue's lock already taken, if `lock`
    /// holds it (a repair keeps it from its first read to the end).
    pub fn open_holding(
        path: &Path,
        options: &Options,
        codec_id: u32,
        mode: OpenMode,
        lock: Option<DirLock>,
    ) -> Result<(Engine, OpenReport)> {
        options.validate()?;
        prepare_directory(path, mode)?;
        let dir = QueueDir::new(path.to_path_buf());
        if options.shared {
            return Engine::open_shared(dir, options, codec_id, mode);
        }
        let lock = match lock {
            Some(lock) => lock,
            None => DirLock::acquire(path)?,
        };
        Engine::open_locked(dir, options, codec_id, mode, Some(lock), true)
    }

    /// Opens the queue in shared mode, all under the join lock (one joiner
    /// at a time) and the cross-process mutex: a handle alone recovers the
    /// queue as an exclusive open does and makes the control file anew;
    /// one joining others mends what a dead mutex holder left, then reads
    /// the segments as they are. Then it takes a process slot.
    fn open_shared(
        dir: QueueDir,
        options: &Options,
        codec_id: u32,
        mode: OpenMode,
    ) -> Result<(Engine, OpenReport)> {
        let path = dir.path().to_path_buf();
        let joining = Joining::start(&path)?;
        let alone = joining.alone();
        let control = joining.control(&path)?;
        // A dead holder is recorded in `mending` by the lock itself.
        control.lock()?;
        let opened = (|| {
            if !alone && control.state().mending.load(Relaxed) != 0 {
                mend(&dir, control.state())?;
            }
            Engine::open_locked(dir, options, codec_id, mode, None, alone)
        })();
        let (mut engine, report) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                control.unlock();
                if alone {
                    // A refused open leaves the directory as it found it
                    // (the lock file aside); no other handle maps this one.
                    let _ = std::fs::remove_file(control.path());
                }
                return Err(e);
            }
        };
        let link = match joining.finish(&path, control) {
            Ok(link) => link,
            Err((e, control)) => {
                control.unlock();
                return Err(e);
            }
        };
        engine.link = Some(link);
        engine.held = true;
        engine.attach_segments = true;
        let joined = engine.join(alone);
        engine.leave();
        joined?;
        Ok((engine, report))
    }

    /// The open under the queue's lock (`lock`, in exclusive mode) or the
    /// shared mutex: `recover` (exclusive, or shared and alone) removes
    /// leftovers of crashes; a view taken beside other processes does not.
    fn open_locked(
        dir: QueueDir,
        options: &Options,
        codec_id: u32,
        mode: OpenMode,
        lock: Option<DirLock>,
        recover: bool,
    ) -> Result<(Engine, OpenReport)> {
        let path = dir.path();
        // Listed again under the lock: another handle may have changed it.
        let listing = dir.list()?;
        if listing.has_config && mode == OpenMode::Create {
            return Err(Error::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        let mut report = OpenReport::default();
        // Leftovers of a crash go first: writing the config reuses its temp name.
        for temp in listing.temp_files.iter().filter(|_| recover) {
            fs::remove_file(temp).map_err(|e| Error::io(temp, e))?;
            report.removed_temp_files.push(temp.clone());
        }
        if recover && !listing.temp_files.is_empty() {
            dir.sync()?;
        }
        let config = if listing.has_config {
            let stored = dir.read_config()?;
            if stored.codec_id != codec_id {
                return Err(Error::CodecMismatch {
                    path: dir.config_path(),
                    found: stored.codec_id,
                    expected: codec_id,
                });
            }
            check_item_type(&dir, options, &stored)?;
            let wanted = config_for(options, codec_id, Some(&stored), !recover)?;
            if wanted != stored {
                dir.write_config(&wanted)?;
            }
            wanted
        } else {
            if !listing.segments.is_empty() {
                return Err(Error::NotAQueue {
                    path: path.to_path_buf(),
                    reason: format!(
                        "it holds segments but no {}",
                        crate::log::layout::CONFIG_FILE
                    ),
                });
            }
            let config = config_for(options, codec_id, None, false)?;
            dir.write_config(&config)?;
            config
        };
        let max_attempts = config.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        let visibility_timeout = config
            .visibility_timeout_nanos
            .map_or(DEFAULT_VISIBILITY_TIMEOUT, Duration::from_nanos);

        let segments = &listing.segments;
        for pair in segments.windows(2) {
            if pair[1] != pair[0] + 1 {
                return Err(Error::MissingSegment {
                    path: dir.segment_path(pair[0] + 1),
                });
            }
        }
        let (front, tail) = match (segments.first(), segments.last()) {
            (Some(&first), Some(&last)) => {
                check_middle_headers(&dir, first, last)?;
                let mut front = VecDeque::new();
                // Markers only ever reach a run of segments from the head, so
                // replaying until a segment without any finds them all.
                let mut number = first;
                loop {
                    let sealed = sealed_records(&dir, number, last)?;
                    let segment =
                        open_segment(&dir, number, sealed, recover, options, &mut report)?;
                    let more = segment.has_markers() && number + 1 < last;
                    front.push_back(segment);
                    if !more {
                        break;
                    }
                    number += 1;
                }
                let tail = if number == last {
                    None
                } else {
                    Some(open_segment(
                        &dir,
                        last,
                        None,
                        recover,
                        options,
                        &mut report,
                    )?)
                };
                (front, tail)
            }
            _ => {
                let header = new_header(&config, 1, 0);
                (VecDeque::from([Segment::create(&dir, header)?]), None)
            }
        };
        let mut engine = Engine {
            dir,
            config,
            durability: options.durability,
            max_item_bytes: options.max_item_bytes,
            front,
            tail,
            deliveries: Deliveries::default(),
            max_attempts,
            visibility_timeout,
            cut_damaged_tail: options.cut_damaged_tail,
            max_items: options.max_items,
            reasons: Default::default(),
            reasons_kept: 0,
            dead: None,
            len: 0,
            refused: None,
            deferred: None,
            written: 0,
            scratch: Vec::new(),
            spans: Vec::new(),
            _lock: lock,
            shared: options.shared,
            attach_segments: !recover,
            link: None,
            held: false,
            written_at_enter: 0,
            last_reap: None,
            shared_ticket: 0,
            opened_at: std::time::SystemTime::now(),
            worker_name: None,
        };
        let settled: usize = engine
            .mapped_segments()
            .map(|s| s.record_count() - s.unsettled_count())
            .sum();
        engine.len = engine.tail().end_id() - engine.head().header.first_id - settled as u64;
        // A tail with markers belongs to the front run: a rollover must not
        // turn it into a middle segment that open would not replay.
        if engine.tail.as_ref().is_some_and(Segment::has_markers) {
            while engine.tail.is_some() {
                engine.extend_front_into(&mut report)?;
            }
        }
        engine.retire_settled_head(&mut report)?;
        if engine.dir.dead_letter_path().is_dir() {
            // A dead-letter queue that does not open does not keep this one
            // from opening: the calls that need it report its error.
            let _ = engine.open_dead_letters(&mut report);
        }
        Ok((engine, report))
    }
}

/// Opens segment `number` at open: judging and cutting its end when the
/// open `recover`s, else (joining other processes) as they left it.
fn open_segment(
    dir: &QueueDir,
    number: u64,
    sealed: Option<u64>,
    recover: bool,
    options: &Options,
    report: &mut OpenReport,
) -> Result<Segment> {
    if recover {
        Segment::open(dir, number, sealed, options.cut_damaged_tail, report)
    } else {
        Segment::attach(dir, number, sealed)
    }
}

/// Checks the path and makes the directory when the mode allows, without
/// touching a directory that holds someone else's files.
pub(crate) fn prepare_directory(path: &Path, mode: OpenMode) -> Result<()> {
    match fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            return Err(Error::NotAQueue {
                path: path.to_path_buf(),
                reason: "it is a file, not a directory".into(),
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if mode == OpenMode::Open {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                QueueDir::new(parent.to_path_buf()).sync()?;
            }
            return Ok(());
        }
        Err(e) => return Err(Error::io(path, e)),
    }
    let listing = QueueDir::new(path.to_path_buf()).list()?;
    if listing.has_config {
        return Ok(());
    }
    if !listing.foreign.is_empty() {
        return Err(Error::NotAQueue {
            path: path.to_path_buf(),
            reason: format!(
                "it has no {} and holds other files, such as {}",
                crate::log::layout::CONFIG_FILE,
                listing.foreign[0]
            ),
        });
    }
    // Segments without a config (lost or deleted): refused before the lock
    // file is made, like any other directory that is not a queue.
    if mode == OpenMode::Open || !listing.segments.is_empty() {
        let holds = if listing.segments.is_empty() {
            ""
        } else {
            "segments but "
        };
        return Err(Error::NotAQueue {
            path: path.to_path_buf(),
            reason: format!("it holds {holds}no {}", crate::log::layout::CONFIG_FILE),
        });
    }
    Ok(())
}

/// The config an open leaves: sizes as given or stored; `max_attempts`
/// and the visibility timeout as given (stored from now on) or stored; the
/// item type recorded at creation only. A handle `joining` others in shared
/// mode must not change what they run with: it adopts the stored values,
/// and one that asks for others is refused.
fn config_for(
    options: &Options,
    codec_id: u32,
    stored: Option<&Config>,
    joining: bool,
) -> Result<Config> {
    let timeout_nanos = u64::try_from(options.visibility_timeout.as_nanos()).unwrap_or(u64::MAX);
    let stored_attempts = stored.and_then(|c| c.max_attempts);
    let stored_timeout = stored.and_then(|c| c.visibility_timeout_nanos);
    if joining {
        let running = stored_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if options.max_attempts_set && options.max_attempts != running {
            return Err(refused_beside_others(
                "max_attempts",
                options.max_attempts,
                running,
            ));
        }
        let running = stored_timeout.map_or(DEFAULT_VISIBILITY_TIMEOUT, Duration::from_nanos);
        if options.visibility_timeout_set && timeout_nanos != running.as_nanos() as u64 {
            return Err(refused_beside_others(
                "visibility_timeout",
                format!("{:?}", options.visibility_timeout),
                format!("{running:?}"),
            ));
        }
    }
    let given = |set: bool| set && !joining;
    Ok(Config {
        segment_records: options
            .segment_items
            .or(stored.map(|c| c.segment_records))
            .unwrap_or(DEFAULT_SEGMENT_ITEMS),
        segment_bytes: options
            .segment_bytes
            .or(stored.map(|c| c.segment_bytes))
            .unwrap_or(DEFAULT_SEGMENT_BYTES),
        codec_id,
        max_attempts: if given(options.max_attempts_set) {
            Some(options.max_attempts)
        } else {
            stored_attempts
        },
        visibility_timeout_nanos: if given(options.visibility_timeout_set) {
            Some(timeout_nanos)
        } else {
            stored_timeout
        },
        item_type: match stored {
            Some(stored) => stored.item_type.clone(),
            None => options.item_type.map(|name| ItemType {
                name: name.to_string(),
                schema: options.schema_version,
            }),
        },
    })
}

fn refused_beside_others(
    name: &'static str,
    asked: impl std::fmt::Display,
    running: impl std::fmt::Display,
) -> Error {
    Error::InvalidOption {
        name,
        reason: format!(
            "the queue is open in shared mode by other handles, which use {running} \
             (stored in its config), not {asked}: open with {running} or without setting \
             it, or change it once no other handle has the queue open"
        ),
    }
}

/// Refuses a typed handle on a queue created for another item type or
/// schema version, unless the caller opted out. A queue that recorded no
/// type (made before types were recorded, or by a raw handle) and a raw
/// handle are never refused.
fn check_item_type(dir: &QueueDir, options: &Options, stored: &Config) -> Result<()> {
    let (Some(opened), Some(recorded)) = (options.item_type, &stored.item_type) else {
        return Ok(());
    };
    if !options.check_item_type
        || (recorded.name == opened && recorded.schema == options.schema_version)
    {
        return Ok(());
    }
    Err(Error::ItemTypeMismatch {
        path: dir.config_path(),
        stored: recorded.name.as_str().into(),
        stored_schema: recorded.schema,
        opened,
        opened_schema: options.schema_version,
    })
}

/// Reads every header from `first` to `last` (one small read each, never the
/// records) and checks that ids grow by at most each segment's record limit.
fn check_middle_headers(dir: &QueueDir, first: u64, last: u64) -> Result<()> {
    let mut previous = Segment::read_header(dir, first)?;
    for number in first + 1..=last {
        let header = Segment::read_header(dir, number)?;
        let gap = header.first_id.checked_sub(previous.first_id);
        if gap.is_none_or(|gap| gap > u64::from(previous.max_records)) {
            return Err(Error::corrupted(
                dir.segment_path(number),
                16,
                format!(
                    "first id {} does not follow segment {} (first id {}, at most {} records)",
                    header.first_id, previous.number, previous.first_id, previous.max_records
                ),
            ));
        }
        previous = header;
    }
    Ok(())
}
