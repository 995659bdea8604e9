//! The seam between the queue and the file system, for tests.
//!
//! Every step that changes files calls `check` first (which may fail it)
//! and every step that makes bytes durable reports to `synced` after. In a
//! normal build both are empty and vanish; with the `fault-injection`
//! feature a [`FaultPlan`] installed on a queue directory can fail the Nth
//! write or sync (with any error, such as "no space") and take crash images:
//! the files as a power loss could leave them. It also sees the background
//! writer of a mapping (the thread that faults pages in ahead of a Turbo or
//! Periodic writer) and tells whether it ever touched a file while that
//! file was being synced ([`FaultPlan::touched_while_syncing`]).

use std::io;
use std::ops::Range;
use std::path::Path;

/// A kind of step a [`FaultPlan`] can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// A step that changes bytes or names: a copy into a mapping, a file
    /// extension, a file written, renamed or removed.
    Write,
    /// A step that makes bytes durable: msync, fdatasync, fsync (of a file
    /// or of the directory).
    Sync,
}

/// What became durable.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(crate) enum Durable {
    /// The whole file.
    File,
    /// These bytes of the file.
    Range(Range<usize>),
    /// The directory's entries.
    Dir,
}

/// Called before a step on `path`; an injected failure comes back as its error.
#[inline(always)]
pub(crate) fn check(op: FaultOp, path: &Path) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    return plan::check(op, path);
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (op, path);
        Ok(())
    }
}

/// Called after a step made `what` of `path` durable.
#[inline(always)]
pub(crate) fn synced(path: &Path, what: Durable) {
    #[cfg(feature = "fault-injection")]
    plan::synced(path, what);
    #[cfg(not(feature = "fault-injection"))]
    let _ = (path, what);
}

/// Called after `from` was renamed to `to`: durable bytes follow the file.
#[inline(always)]
pub(crate) fn renamed(from: &Path, to: &Path) {
    #[cfg(feature = "fault-injection")]
    plan::renamed(from, to);
    #[cfg(not(feature = "fault-injection"))]
    let _ = (from, to);
}

/// A stretch of time the seam watches: a sync of a file, or a background
/// fault-in on a mapping of it. It ends when dropped.
#[must_use]
pub(crate) struct Window {
    #[cfg(feature = "fault-injection")]
    _seen: Option<plan::Seen>,
}

/// Called when a sync of `path` begins (before its `check`); it ends when
/// the returned window is dropped.
#[inline(always)]
pub(crate) fn syncing(path: &Path) -> Window {
    #[cfg(feature = "fault-injection")]
    return Window {
        _seen: plan::begin(path, plan::Kind::Sync),
    };
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = path;
        Window {}
    }
}

/// Called when the background thread begins to fault in pages of a
/// mapping of `path`; it ends when the returned window is dropped.
#[inline(always)]
pub(crate) fn touching(path: &Path) -> Window {
    #[cfg(feature = "fault-injection")]
    return Window {
        _seen: plan::begin(path, plan::Kind::Touch),
    };
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = path;
        Window {}
    }
}

#[cfg(feature = "fault-injection")]
pub use plan::{CrashImage, FaultPlan};

#[cfg(feature = "fault-injection")]
mod plan {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fs;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::{Durable, FaultOp};
    use crate::log::lock::LOCK_FILE;

    /// Disk sectors are written whole or not at all; anything larger may tear.
    const SECTOR: usize = 512;

    static PLANS: Mutex<Vec<(PathBuf, Arc<Mutex<State>>)>> = Mutex::new(Vec::new());

    #[derive(Default)]
    struct State {
        counts: BTreeMap<FaultOpKey, u64>,
        failures: Vec<(FaultOpKey, u64, io::ErrorKind)>,
        /// The process kills itself at this step (before it happens).
        death: Option<(FaultOpKey, u64)>,
        /// Durable bytes of each file, by name.
        durable: BTreeMap<String, Vec<u8>>,
        /// Names whose existence is durable (the directory was fsynced).
        durable_names: BTreeSet<String>,
        capture_seed: Option<u64>,
        captured: Vec<CrashImage>,
        /// Every sync step takes this much longer (a slower disk).
        sync_delay: Option<std::time::Duration>,
        /// Every background fault-in takes this much longer.
        touch_delay: Option<std::time::Duration>,
        /// Only slows syncs down: durable bytes are not kept (reading each
        /// file after every sync would cost more than the delay measured).
        untracked: bool,
        /// Syncs and background fault-ins running now, by file name.
        running: BTreeMap<(Kind, String), u32>,
        /// Background fault-ins begun so far.
        touches: u64,
        /// A file's name each time a fault-in and a sync of it overlapped.
        overlaps: Vec<String>,
    }

    /// What a [`Seen`] window is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub(crate) enum Kind {
        Sync,
        Touch,
    }

    /// A sync or a fault-in running now; it ends when dropped.
    pub(crate) struct Seen {
        state: Arc<Mutex<State>>,
        key: (Kind, String),
    }

    impl Drop for Seen {
        fn drop(&mut self) {
            let mut s = self.state.lock();
            if let Some(running) = s.running.get_mut(&self.key) {
                *running -= 1;
                if *running == 0 {
                    s.running.remove(&self.key);
                }
            }
        }
    }

    pub(super) fn begin(path: &Path, kind: Kind) -> Option<Seen> {
        let (dir, state) = plan_for(path)?;
        let name = name_in(&dir, path)?;
        let other = match kind {
            Kind::Sync => Kind::Touch,
            Kind::Touch => Kind::Sync,
        };
        let mut s = state.lock();
        if kind == Kind::Touch {
            s.touches += 1;
        }
        if s.running.contains_key(&(other, name.clone())) {
            s.overlaps.push(name.clone());
        }
        let key = (kind, name);
        *s.running.entry(key.clone()).or_insert(0) += 1;
        let delay = s.touch_delay.filter(|_| kind == Kind::Touch);
        drop(s);
        let seen = Seen { state, key };
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        Some(seen)
    }

    type FaultOpKey = u8;

    fn key(op: FaultOp) -> FaultOpKey {
        op as u8
    }

    /// Faults and crash images for the queue in one directory, installed
    /// until dropped. Every queue step under that directory goes through it.
    ///
    /// ```
    /// use dque::faults::{FaultOp, FaultPlan};
    /// use dque::{DQue, Error};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("q");
    /// let q = DQue::<u32>::create(&path).unwrap();
    /// let plan = FaultPlan::install(&path);
    /// plan.fail_nth(FaultOp::Sync, 1, std::io::ErrorKind::Other);
    /// assert!(q.enqueue(&1).is_err());
    /// assert!(matches!(q.enqueue(&2), Err(Error::WritesRefused { .. })));
    /// ```
    pub struct FaultPlan {
        dir: PathBuf,
        state: Arc<Mutex<State>>,
    }

    impl FaultPlan {
        /// Installs a plan on the queue directory `dir`. Files already there
        /// are taken as durable, as they would be after a clean shutdown.
        pub fn install(dir: impl AsRef<Path>) -> FaultPlan {
            let dir = dir.as_ref().to_path_buf();
            let state = Arc::new(Mutex::new(State::default()));
            {
                let mut s = state.lock();
                for (name, bytes) in read_dir_files(&dir) {
                    s.durable_names.insert(name.clone());
                    s.durable.insert(name, bytes);
                }
            }
            PLANS.lock().push((dir.clone(), Arc::clone(&state)));
            FaultPlan { dir, state }
        }

        /// A plan that only makes every sync step under `dir` take `delay`
        /// longer, as a slower disk would: for measuring how a queue's
        /// throughput follows fsync latency. It keeps no crash images.
        ///
        /// ```
        /// use std::time::{Duration, Instant};
        /// use dque::faults::FaultPlan;
        /// use dque::DQue;
        /// let dir = tempfile::tempdir().unwrap();
        /// let path = dir.path().join("q");
        /// let q = DQue::<u32>::create(&path).unwrap();
        /// let _slow = FaultPlan::slow_disk(&path, Duration::from_millis(20));
        /// let began = Instant::now();
        /// q.enqueue(&1).unwrap(); // Safe: one fsync
        /// assert!(began.elapsed() >= Duration::from_millis(20));
        /// ```
        pub fn slow_disk(dir: impl AsRef<Path>, delay: std::time::Duration) -> FaultPlan {
            let dir = dir.as_ref().to_path_buf();
            let state = Arc::new(Mutex::new(State {
                sync_delay: Some(delay),
                untracked: true,
                ..State::default()
            }));
            PLANS.lock().push((dir.clone(), Arc::clone(&state)));
            FaultPlan { dir, state }
        }

        /// The `n`th step of kind `op` from now (1 is the next one) fails
        /// with `kind`, and does nothing.
        pub fn fail_nth(&self, op: FaultOp, n: u64, kind: io::ErrorKind) {
            let mut s = self.state.lock();
            let at = s.counts.get(&key(op)).copied().unwrap_or(0) + n;
            s.failures.push((key(op), at, kind));
        }

        /// The process kills itself (SIGKILL) right before the `n`th step of
        /// kind `op` from now: a crash in the middle of a call, with the
        /// queue's locks held, the mutex of a shared queue included.
        pub fn die_at_nth(&self, op: FaultOp, n: u64) {
            let mut s = self.state.lock();
            let at = s.counts.get(&key(op)).copied().unwrap_or(0) + n;
            s.death = Some((key(op), at));
        }

        /// From now on, every sync step under the directory takes `delay`
        /// longer (crash images are still taken): a wider window for what
        /// runs beside a sync to show.
        pub fn delay_syncs(&self, delay: std::time::Duration) {
            self.state.lock().sync_delay = Some(delay);
        }

        /// From now on, every background fault-in on a file under the
        /// directory takes `delay` longer (it sleeps before it begins, as a
        /// slow one would, with the locks it runs under held), so that a
        /// sync that does not wait for it overlaps it.
        pub fn delay_fault_ins(&self, delay: std::time::Duration) {
            self.state.lock().touch_delay = Some(delay);
        }

        /// Background fault-ins (pages made present ahead of a Turbo or
        /// Periodic writer, by another thread) begun on files of the queue
        /// so far.
        pub fn background_touches(&self) -> u64 {
            self.state.lock().touches
        }

        /// The files (by name in the directory) that a background fault-in
        /// touched while a sync of the same file ran, once per time it
        /// happened. A second writer to a mapping during its fsync is what
        /// lost a sealed segment's last page on power loss (issue 23): this
        /// is empty when the queue keeps them apart, as it must.
        ///
        /// ```
        /// use dque::faults::FaultPlan;
        /// use dque::{DQue, Durability, Options};
        /// let dir = tempfile::tempdir().unwrap();
        /// let path = dir.path().join("q");
        /// let options = Options::new().durability(Durability::Turbo);
        /// let q = DQue::<u32>::create_with(&path, &options).unwrap();
        /// let plan = FaultPlan::install(&path);
        /// for n in 0..1000 {
        ///     q.enqueue(&n).unwrap();
        /// }
        /// q.sync().unwrap();
        /// assert!(plan.touched_while_syncing().is_empty());
        /// ```
        pub fn touched_while_syncing(&self) -> Vec<String> {
            self.state.lock().overlaps.clone()
        }

        /// Steps of kind `op` seen so far.
        pub fn count(&self, op: FaultOp) -> u64 {
            self.state.lock().counts.get(&key(op)).copied().unwrap_or(0)
        }

        /// From now on, takes a crash image right before every sync step:
        /// the files as a power loss in the middle of that call would leave
        /// them. Collect them with [`take_captured`](Self::take_captured).
        pub fn capture_before_syncs(&self, seed: u64) {
            self.state.lock().capture_seed = Some(seed);
        }

        /// The crash images captured so far, oldest first.
        pub fn take_captured(&self) -> Vec<CrashImage> {
            std::mem::take(&mut self.state.lock().captured)
        }

        /// The files as a power loss now could leave them: what was made
        /// durable, plus, sector by sector, any mix of old and new contents
        /// of what was not; names created or removed since the directory was
        /// last fsynced may or may not be there. `seed` picks one such image.
        pub fn crash_image(&self, seed: u64) -> CrashImage {
            image(&self.dir, &self.state.lock(), seed)
        }
    }

    impl Drop for FaultPlan {
        fn drop(&mut self) {
            PLANS
                .lock()
                .retain(|(_, state)| !Arc::ptr_eq(state, &self.state));
        }
    }

    /// Files of a queue directory as a crash left them (the lock file aside).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CrashImage {
        /// Contents by file name.
        pub files: BTreeMap<String, Vec<u8>>,
    }

    impl CrashImage {
        /// Writes the image's files into `dir`, creating it.
        pub fn write_to(&self, dir: impl AsRef<Path>) -> io::Result<()> {
            let dir = dir.as_ref();
            fs::create_dir_all(dir)?;
            for (name, bytes) in &self.files {
                let path = dir.join(name);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)?;
                }
                fs::write(path, bytes)?;
            }
            Ok(())
        }
    }

    fn plan_for(path: &Path) -> Option<(PathBuf, Arc<Mutex<State>>)> {
        PLANS
            .lock()
            .iter()
            .find(|(dir, _)| path.starts_with(dir))
            .map(|(dir, state)| (dir.clone(), Arc::clone(state)))
    }

    fn name_in(dir: &Path, path: &Path) -> Option<String> {
        let name = path.strip_prefix(dir).ok()?.to_str()?.to_string();
        (!name.is_empty()).then_some(name)
    }

    pub(super) fn check(op: FaultOp, path: &Path) -> io::Result<()> {
        let Some((dir, state)) = plan_for(path) else {
            return Ok(());
        };
        let mut s = state.lock();
        let count = s.counts.entry(key(op)).or_insert(0);
        *count += 1;
        let now = *count;
        if s.death == Some((key(op), now)) {
            // SAFETY: kill(2) on this process, with a valid signal number.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        if op == FaultOp::Sync {
            if let Some(seed) = s.capture_seed {
                let image = image(&dir, &s, seed ^ now);
                s.captured.push(image);
            }
        }
        let delay = s.sync_delay.filter(|_| op == FaultOp::Sync);
        let result = match s
            .failures
            .iter()
            .position(|&(k, at, _)| k == key(op) && at == now)
        {
            Some(i) => {
                let (_, _, kind) = s.failures.remove(i);
                Err(io::Error::new(
                    kind,
                    format!("injected {op:?} failure #{now}"),
                ))
            }
            None => Ok(()),
        };
        drop(s);
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        result
    }

    pub(super) fn synced(path: &Path, what: Durable) {
        let Some((dir, state)) = plan_for(path) else {
            return;
        };
        let mut s = state.lock();
        if s.untracked {
            return;
        }
        if let Durable::Dir = what {
            // The entries of this directory (not of those inside it) are durable now.
            let synced_dir = name_in(&dir, path).map(PathBuf::from).unwrap_or_default();
            let in_synced_dir = |name: &String| Path::new(name).parent() == Some(&synced_dir);
            s.durable_names.retain(|name| !in_synced_dir(name));
            let current = read_dir_files(&dir).into_keys().filter(in_synced_dir);
            s.durable_names.extend(current.collect::<Vec<_>>());
            return;
        }
        let Some(name) = name_in(&dir, path) else {
            return;
        };
        let current = fs::read(path).unwrap_or_default();
        let durable = s.durable.entry(name).or_default();
        match what {
            Durable::File | Durable::Dir => *durable = current,
            Durable::Range(range) => {
                durable.resize(current.len(), 0);
                let range = range.start.min(current.len())..range.end.min(current.len());
                durable[range.clone()].copy_from_slice(&current[range]);
            }
        }
    }

    pub(super) fn renamed(from: &Path, to: &Path) {
        let Some((dir, state)) = plan_for(to) else {
            return;
        };
        let mut s = state.lock();
        let (Some(from), Some(to)) = (name_in(&dir, from), name_in(&dir, to)) else {
            return;
        };
        if let Some(bytes) = s.durable.remove(&from) {
            s.durable.insert(to.clone(), bytes);
        }
        // A directory renamed: the files in it keep what was durable, and
        // the names whose entries were durable in it stay durable.
        let inside = format!("{from}/");
        let moved = |name: &String| {
            name.strip_prefix(&inside)
                .map(|rest| format!("{to}/{rest}"))
        };
        let contents: Vec<(String, String)> = s
            .durable
            .keys()
            .filter_map(|name| moved(name).map(|new| (name.clone(), new)))
            .collect();
        for (old, new) in contents {
            let bytes = s.durable.remove(&old).expect("listed");
            s.durable.insert(new, bytes);
        }
        let names: Vec<(String, String)> = s
            .durable_names
            .iter()
            .filter_map(|name| moved(name).map(|new| (name.clone(), new)))
            .collect();
        for (old, new) in names {
            s.durable_names.remove(&old);
            s.durable_names.insert(new);
        }
    }

    /// Every file under `dir` (the dead letters' in `dead/` too) by its
    /// path relative to `dir`, lock files aside.
    fn read_dir_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        add_files(dir, "", &mut files);
        files
    }

    fn add_files(dir: &Path, prefix: &str, files: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_name() == LOCK_FILE {
                continue;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                add_files(&entry.path(), &format!("{name}/"), files);
            } else if let Ok(bytes) = fs::read(entry.path()) {
                files.insert(name, bytes);
            }
        }
    }

    fn image(dir: &Path, s: &State, seed: u64) -> CrashImage {
        // Mixed first: small seeds would otherwise all start alike (the
        // first outcomes of xorshift from a small state barely differ).
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut coin = move |n: u64| {
            // xorshift64: enough to pick among crash outcomes.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let current = read_dir_files(dir);
        let names: BTreeSet<&String> = current.keys().chain(&s.durable_names).collect();
        let mut files = BTreeMap::new();
        for name in names {
            let exists = match (s.durable_names.contains(name), current.contains_key(name)) {
                (true, true) => true,
                (false, false) => false,
                // Created or removed since the last directory fsync: either way.
                _ => coin(2) == 0,
            };
            if !exists {
                continue;
            }
            let old = s.durable.get(name).map(Vec::as_slice).unwrap_or(&[]);
            let new = current.get(name).map(Vec::as_slice).unwrap_or(old);
            files.insert(name.clone(), torn_mix(old, new, &mut coin));
        }
        CrashImage { files }
    }

    /// Each sector that differs comes from the old or the new contents; the
    /// length is the old or the new one.
    fn torn_mix(old: &[u8], new: &[u8], coin: &mut impl FnMut(u64) -> u64) -> Vec<u8> {
        let len = if coin(2) == 0 { old.len() } else { new.len() };
        let mut out = vec![0u8; len];
        for start in (0..len).step_by(SECTOR) {
            let end = (start + SECTOR).min(len);
            let pick_new = coin(2) == 0;
            let source = if pick_new { new } else { old };
            // Bytes past the end of the chosen version stay zero.
            if let Some(bytes) = source.get(start..end.min(source.len())) {
                out[start..start + bytes.len()].copy_from_slice(bytes);
            }
        }
        out
    }
}
