//! Priority lanes: one queue of job records per priority in use. The
//! root queue directory is the lane of priority 0; the others are made in
//! `jobs/lanes/` when a job first needs them (and stay). Leasing looks at
//! the lanes from the smallest priority up, so memory never holds the
//! ready jobs, only two mapped segments per lane.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use parking_lot::RwLock;

use super::envelope::{JobRecords, JOB_CODEC_ID};
use crate::error::{Error, Result};
use crate::log::layout::QueueDir;
use crate::options::Options;
use crate::queue::dque::RawQueue;

/// The lanes open in this handle, and when their directory was listed.
#[derive(Debug)]
pub struct Lanes {
    /// `jobs/lanes/`; `None` for a plain FIFO queue (its root is its only lane).
    dir: Option<PathBuf>,
    options: Options,
    /// The worker name every lane's handle leases under (`""`: none).
    worker: String,
    /// The lane of priority 0, which exists from the start and is never
    /// replaced: most jobs' lane, found without the lock or the map.
    root: Arc<RawQueue>,
    state: RwLock<State>,
}

#[derive(Debug)]
struct State {
    open: BTreeMap<i32, Arc<RawQueue>>,
    /// `open` as a list, smallest priority first, made again when a lane
    /// opens: a lease walks it without copying the map.
    list: LaneList,
    /// The modification time of `dir` when it was last listed: a lane made
    /// by another process changes it.
    listed: Option<SystemTime>,
    listed_at: Instant,
    /// When the directory's mtime was last read.
    looked_at: Instant,
}

/// The open lanes, smallest priority first.
pub type LaneList = Arc<[(i32, Arc<RawQueue>)]>;

impl State {
    fn insert(&mut self, priority: i32, lane: Arc<RawQueue>) {
        self.open.insert(priority, lane);
        self.list = self.open.iter().map(|(&p, q)| (p, Arc::clone(q))).collect();
    }
}

/// How often a handle in shared mode reads the lanes directory's mtime.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// The most priorities one embedded job queue holds jobs of: each is a
/// lane with its own files (two descriptors, one mapping) that every
/// handle keeps open, and a lease looks at each.
pub const MAX_LANES: usize = 100;

/// The longest a handle in shared mode goes without listing the lanes.
const RELIST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The directory name of a lane: sign and ten digits, so that listings sort.
pub fn lane_name(priority: i32) -> String {
    format!("{priority:+011}")
}

impl Lanes {
    /// `root`, already named `worker`, and the lanes in `dir`.
    pub fn new(root: Arc<RawQueue>, dir: Option<PathBuf>, options: Options, worker: &str) -> Self {
        Lanes {
            dir,
            options,
            worker: worker.to_owned(),
            root: Arc::clone(&root),
            state: RwLock::new(State {
                list: Arc::from([(0, Arc::clone(&root))]),
                open: BTreeMap::from([(0, root)]),
                listed: None,
                listed_at: Instant::now(),
                looked_at: Instant::now(),
            }),
        }
    }

    /// The lanes, smallest priority first, after opening any lane another
    /// process made since the last look.
    pub fn all(&self) -> Result<Vec<(i32, Arc<RawQueue>)>> {
        self.refresh(false)?;
        Ok(self.known())
    }

    /// The lanes, after listing the lanes directory whatever its mtime
    /// says (a lane made in the clock tick of the last listing included).
    pub fn listed(&self) -> Result<Vec<(i32, Arc<RawQueue>)>> {
        self.refresh(true)?;
        Ok(self.known())
    }

    /// As [`all`](Self::all), without copying the list.
    pub fn list(&self) -> Result<LaneList> {
        // Alone (exclusive mode) and listed: one read lock (a lease's case).
        if !self.options.shared {
            let state = self.state.read();
            if state.listed.is_some() {
                return Ok(Arc::clone(&state.list));
            }
        }
        self.refresh(false)?;
        Ok(Arc::clone(&self.state.read().list))
    }

    /// The lanes this handle has open, without looking for new ones.
    pub fn known(&self) -> Vec<(i32, Arc<RawQueue>)> {
        let state = self.state.read();
        state
            .open
            .iter()
            .map(|(&p, q)| (p, Arc::clone(q)))
            .collect()
    }

    /// The lane of `priority` if it exists (opened if another process made it).
    pub fn get(&self, priority: i32) -> Result<Option<Arc<RawQueue>>> {
        if priority == 0 {
            return Ok(Some(Arc::clone(&self.root)));
        }
        if let Some(lane) = self.state.read().open.get(&priority) {
            return Ok(Some(Arc::clone(lane)));
        }
        // Not known here: made by another process, perhaps in the same
        // clock tick as this handle's last listing (same mtime).
        self.refresh(true)?;
        Ok(self.state.read().open.get(&priority).cloned())
    }

    /// The lane of `priority`, made if no job had that priority before.
    pub fn get_or_make(&self, priority: i32) -> Result<Arc<RawQueue>> {
        if let Some(lane) = self.get(priority)? {
            return Ok(lane);
        }
        let Some(dir) = &self.dir else {
            return Err(plain_refusal("a priority other than 0"));
        };
        let path = dir.join(lane_name(priority));
        let mut state = self.state.write();
        if let Some(lane) = state.open.get(&priority) {
            return Ok(Arc::clone(lane));
        }
        if state.open.len() >= MAX_LANES {
            return Err(Error::InvalidJob {
                reason: format!(
                    "priority {priority}: this queue has lanes for {MAX_LANES} priorities \
                     already, the most an embedded job queue keeps (each is a queue with its \
                     own files); use fewer distinct priorities"
                ),
            });
        }
        let lane = Arc::new(self.named(make_part(&path, &self.options)?)?);
        state.insert(priority, Arc::clone(&lane));
        Ok(lane)
    }

    /// Opens the lanes other processes made since the last listing: when
    /// the directory's mtime moved, at least every [`RELIST_EVERY`] (a
    /// lane made in the clock tick of the last listing leaves the mtime as
    /// it was), or with `force`.
    fn refresh(&self, force: bool) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        // Alone (exclusive mode), no lane appears but through this handle.
        if !self.options.shared && self.state.read().listed.is_some() {
            return Ok(());
        }
        // Shared: not a stat(2) per lease; a lane made meanwhile waits at
        // most this long to be seen (one looked for is seen at once).
        {
            let state = self.state.read();
            if !force && state.listed.is_some() && state.looked_at.elapsed() < LOOK_EVERY {
                return Ok(());
            }
        }
        let modified = fs::metadata(dir)
            .and_then(|m| m.modified())
            .map_err(|e| Error::io(dir, e))?;
        {
            let mut state = self.state.write();
            let fresh = state.listed_at.elapsed() < RELIST_EVERY;
            if !force && fresh && state.listed == Some(modified) {
                state.looked_at = Instant::now();
                return Ok(());
            }
        }
        remove_stale_temps(dir);
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            let Some(priority) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if priority != 0 && lane_name(priority) == name.to_string_lossy() {
                found.push(priority);
            }
        }
        let mut state = self.state.write();
        for priority in found {
            if !state.open.contains_key(&priority) {
                let lane = open_part(&dir.join(lane_name(priority)), &self.options)?;
                let lane = self.named(lane)?;
                state.insert(priority, Arc::new(lane));
            }
        }
        state.listed = Some(modified);
        state.listed_at = Instant::now();
        state.looked_at = state.listed_at;
        Ok(())
    }

    /// `lane`, opened now, leasing under this handle's worker name.
    fn named(&self, lane: RawQueue) -> Result<RawQueue> {
        if !self.worker.is_empty() {
            lane.set_worker_name(&self.worker)?;
        }
        Ok(lane)
    }

    /// Closes every lane; the first error is returned.
    pub fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for (_, lane) in self.known() {
            let closed = lane.close();
            if first.is_ok() {
                first = closed;
            }
        }
        first
    }
}

/// Opens a part of a jobs queue (a lane, the schedule), checking it holds jobs.
pub fn open_part(path: &Path, options: &Options) -> Result<RawQueue> {
    let queue = RawQueue::open_encoded_with(path, options)?;
    if queue.codec_id() != JOB_CODEC_ID {
        return Err(Error::CodecMismatch {
            path: path.join(crate::log::layout::CONFIG_FILE),
            expected: JOB_CODEC_ID,
            found: queue.codec_id(),
        });
    }
    Ok(queue)
}

/// Opens a part of a jobs queue, made first if it does not exist. It is
/// made whole under a temporary name and renamed into place, so a crash
/// never leaves a part that is half made (the next opener would refuse
/// it), and of two processes making it at once one wins.
pub fn make_part(path: &Path, options: &Options) -> Result<RawQueue> {
    match open_part(path, options) {
        Err(Error::NotFound { .. }) => {}
        opened => return opened,
    }
    let parent = path.parent().expect("parts live in a directory");
    let name = path
        .file_name()
        .expect("a part has a name")
        .to_string_lossy();
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let temp = parent.join(format!(
        ".{name}.{}.{nanos}{TEMP_SUFFIX}",
        std::process::id()
    ));
    options.create::<Vec<u8>, JobRecords>(&temp)?.close()?;
    let renamed = crate::faults::check(crate::faults::FaultOp::Write, path)
        .and_then(|()| fs::rename(&temp, path));
    match renamed {
        Ok(()) => {
            crate::faults::renamed(&temp, path);
            QueueDir::new(parent.to_path_buf()).sync()?;
        }
        // Another process made it first: use theirs.
        Err(_) if path.is_dir() => {
            let _ = fs::remove_dir_all(&temp);
        }
        Err(e) => return Err(Error::io(path, e)),
    }
    open_part(path, options)
}

/// How the temporary directory of a part being made ends.
const TEMP_SUFFIX: &str = ".making";

/// Removes the temporary directories of parts whose maker died.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(TEMP_SUFFIX) else {
            continue;
        };
        // `.NAME.PID.NANOS`: the maker's pid is the second field from the end.
        let pid = stem.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The error for a job a plain FIFO queue cannot hold.
pub fn plain_refusal(what: &str) -> Error {
    Error::InvalidJob {
        reason: format!(
            "{what} needs a jobs queue, and this is a plain FIFO queue (its records are \
             bodies only); make a jobs queue in a new directory (EmbeddedJobs::create, or \
             `dque push --create`) and move the items with `dque pop | dque push`"
        ),
    }
}
