//! Side-by-side throughput: dque in every durability mode, queue-file 2.0.0,
//! yaque 0.6.6, and the physical limits of the disk, all in one run, on the
//! same disk, with the same payloads. Prints markdown tables and the ratios
//! the design targets name.
//!
//! ```sh
//! cargo bench --bench throughput                      # the full run (a few minutes)
//! DQUE_BENCH_ITEMS=100000 DQUE_BENCH_SAFE_ITEMS=2000 cargo bench --bench throughput  # quick
//! cargo bench --bench throughput --features fault-injection  # adds the slow disk
//! ```
//!
//! With the `fault-injection` feature, the Safe producers are also measured
//! on a slower disk: the fault seam makes every fsync of that case 1 ms
//! longer, to show how group commit's gain follows fsync latency.
//!
//! Environment (all optional):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DQUE_BENCH_DIR` | the system temp dir | where the temporary queues go (the disk measured) |
//! | `DQUE_BENCH_SIZES` | `100,4096` | payload sizes in bytes, comma-separated |
//! | `DQUE_BENCH_ITEMS` | `1000000` | items per case without an fsync per item (Turbo, Periodic, batches) |
//! | `DQUE_BENCH_MAX_BYTES` | `400000000` | caps those items at this many payload bytes (4 KiB: 97,600 items) |
//! | `DQUE_BENCH_SAFE_ITEMS` | `20000` | items per case with an fsync per call (Safe, queue-file synced, the fsync loops) |
//! | `DQUE_BENCH_SAFE_SECS` | `3` | ...but each of those phases stops after this many seconds (a slow disk) |
//! | `DQUE_BENCH_ROUNDS` | `4` | the fsync-bound cases run interleaved in this many rounds |
//! | `DQUE_BENCH_PRODUCERS` | `8` | threads of the multi-producer Safe case (which gets 4x the Safe items) |
//! | `DQUE_BENCH_ONLY` | (all) | run only cases whose name contains one of these comma-separated words (`=name`: only the case named exactly so) |
//!
//! The typed API (`DQue<T>`, bincode) is measured beside raw bytes with
//! three items made from the payload: a struct with a plain `Vec<u8>` field
//! (serde sends it element by element), the same with `serde_bytes`, and a
//! job struct (an id, two strings, a number, a `serde_bytes` body), in
//! Turbo, Periodic and Safe.
//!
//! Every case gets a fresh temporary directory, removed afterwards, and the
//! page cache is written back (`sync`) before each case, so that one case's
//! writeback does not slow the next one down. The fsync-bound cases (whose
//! speed is the disk's flush latency, which drifts on a shared machine) run
//! interleaved, a quarter of their items per round, so that their ratios
//! compare the same minutes. Turbo, Periodic and the peers without fsync are
//! measured from the first call to the last return, without a final sync:
//! what a caller waits for.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use dque::{DQue, Durability, Options, RawQueue};
use futures::executor::block_on;
use queue_file::QueueFile;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

#[path = "../src/bin/dque/report.rs"]
mod report;

const BATCH: usize = 100;
/// The typed API's target: within 1.3x of raw bytes.
const TYPED_TARGET: f64 = 1.0 / 1.3;
const PERIODIC: Duration = Duration::from_millis(100);

const CEIL: &str = "limit";
const ENQ: &str = "enqueue";
const DEQ: &str = "dequeue";

fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// Items moved in how long.
#[derive(Debug, Clone, Copy, Default)]
struct Measure {
    items: usize,
    elapsed: Duration,
}

impl Measure {
    fn per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }
}

/// What one call of a case measured: (group, row name, measure).
type Out = Vec<(&'static str, &'static str, Measure)>;

/// Calls `op(i)` for `i` in `0..n`, stopping early once `cap` has passed
/// (checked every 8 calls, and only when a cap is set).
fn timed(n: usize, cap: Option<Duration>, mut op: impl FnMut(usize)) -> Measure {
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        op(i);
        i += 1;
        if let Some(cap) = cap {
            if i % 8 == 0 && start.elapsed() > cap {
                break;
            }
        }
    }
    Measure {
        items: i,
        elapsed: start.elapsed(),
    }
}

/// A payload that is not all one byte.
fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 + 7) as u8).collect()
}

// ---------------------------------------------------------------- limits

/// write(2) of each item at the end of a growing file, then fdatasync: every
/// sync also commits the new file size and blocks.
fn append_fdatasync(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let mut file = File::create(dir.join("plain")).expect("file");
    let m = timed(n, cap, |_| {
        file.write_all(data).expect("write");
        file.sync_data().expect("fdatasync");
    });
    vec![(CEIL, "append + fdatasync", m)]
}

/// pwrite(2) + fdatasync into a file whose blocks were written and synced
/// beforehand: a sync writes data only, no metadata. The disk's own floor,
/// for one item per sync (`per_sync` 1) or for a batch's bytes.
fn overwrite_fdatasync(
    dir: &Path,
    name: &'static str,
    data: &[u8],
    per_sync: usize,
    n: usize,
    cap: Option<Duration>,
) -> Out {
    let file = File::create(dir.join("plain")).expect("file");
    let unit = data.repeat(per_sync);
    let syncs = (n / per_sync).max(1);
    let total = unit.len() * syncs;
    let zeros = vec![0u8; 1 << 20];
    let mut written = 0;
    while written < total {
        let len = zeros.len().min(total - written);
        file.write_all_at(&zeros[..len], written as u64)
            .expect("write");
        written += len;
    }
    file.sync_all().expect("fsync");
    let mut m = timed(syncs, cap, |i| {
        file.write_all_at(&unit, (i * unit.len()) as u64)
            .expect("pwrite");
        file.sync_data().expect("fdatasync");
    });
    m.items *= per_sync;
    vec![(CEIL, name, m)]
}

/// write(2) of each item at the end of a file, no sync: a system call per item.
fn append_no_sync(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let mut file = File::create(dir.join("plain")).expect("file");
    let m = timed(n, cap, |_| file.write_all(data).expect("write"));
    vec![(CEIL, "append write(2), no sync", m)]
}

/// memcpy of each item into a preallocated, mapped file (what Turbo does
/// for an append, without framing, CRC or bookkeeping), and the read side's
/// floor: copy each item out of a mapped file into a new Vec.
fn mapped_copies(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("plain"))
        .expect("file");
    let len = (data.len() * n) as u64;
    file.set_len(len).expect("set_len");
    fs4::FileExt::allocate(&file, len).expect("fallocate");
    // SAFETY: the file was created above in a private temporary directory;
    // nothing else truncates or writes it while it is mapped.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.expect("mmap");
    let mut chunks = map.chunks_exact_mut(data.len());
    let into = timed(n, cap, |_| {
        chunks.next().expect("a slot").copy_from_slice(data);
    });
    black_box(&map[..]);
    let mut chunks = map.chunks_exact(data.len());
    let out = timed(into.items, cap, |_| {
        black_box(chunks.next().expect("a slot").to_vec());
    });
    vec![
        (CEIL, "memcpy into mapped file", into),
        (CEIL, "copy out of mapped file", out),
    ]
}

// ---------------------------------------------------------------- dque

fn dque_open(dir: &Path, durability: Durability) -> RawQueue {
    RawQueue::create_with(dir.join("q"), &Options::new().durability(durability)).expect("create")
}

/// One call per item: enqueue `n`, then dequeue as many.
fn dque_single(
    dir: &Path,
    durability: Durability,
    name: &'static str,
    data: &[u8],
    n: usize,
    cap: Option<Duration>,
) -> Out {
    let queue = dque_open(dir, durability);
    let enq = timed(n, cap, |_| queue.enqueue_bytes(data).expect("enqueue"));
    let deq = timed(enq.items, cap, |_| {
        black_box(queue.dequeue().expect("dequeue").expect("an item"));
    });
    queue.close().expect("close");
    vec![(ENQ, name, enq), (DEQ, name, deq)]
}

// ------------------------------------------------------- the typed API

/// An item whose bytes are a plain `Vec<u8>`: serde treats it as a
/// sequence, one element at a time.
#[derive(Serialize, Deserialize)]
struct PlainBytes {
    body: Vec<u8>,
}

/// The same with `serde_bytes`: one length and one copy.
#[derive(Serialize, Deserialize)]
struct SerdeBytes {
    #[serde(with = "serde_bytes")]
    body: Vec<u8>,
}

/// A realistic job: an id, a few strings, a byte body.
#[derive(Serialize, Deserialize)]
struct Job {
    id: u64,
    kind: String,
    owner: String,
    attempt: u32,
    #[serde(with = "serde_bytes")]
    body: Vec<u8>,
}

/// The typed items of the bench, each made from the payload.
fn plain_bytes(data: &[u8]) -> PlainBytes {
    PlainBytes {
        body: data.to_vec(),
    }
}

fn serde_bytes_item(data: &[u8]) -> SerdeBytes {
    SerdeBytes {
        body: data.to_vec(),
    }
}

fn job_item(data: &[u8]) -> Job {
    Job {
        id: 7_340_033,
        kind: "thumbnail".into(),
        owner: "photos@example.com".into(),
        attempt: 1,
        body: data.to_vec(),
    }
}

/// `DQue<T>` (bincode): enqueue `n` of the item `make` builds from the
/// payload, then dequeue as many.
fn dque_typed<T: Serialize + DeserializeOwned>(
    dir: &Path,
    durability: Durability,
    name: &'static str,
    item: T,
    n: usize,
    cap: Option<Duration>,
) -> Out {
    let options = Options::new().durability(durability);
    let queue = DQue::<T>::create_with(dir.join("q"), &options).expect("create");
    let enq = timed(n, cap, |_| queue.enqueue(&item).expect("enqueue"));
    let deq = timed(enq.items, cap, |_| {
        black_box(queue.dequeue().expect("dequeue").expect("an item"));
    });
    queue.close().expect("close");
    vec![(ENQ, name, enq), (DEQ, name, deq)]
}

/// Safe calls on a queue with a backlog: its first segment is full (written
/// in Turbo), so enqueues go to a second segment while dequeues take from
/// the first: head and tail are two files.
fn dque_safe_backlog(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let queue = dque_open(dir, Durability::Turbo);
    let segments = |q: &RawQueue| q.segment_numbers().expect("segments").count();
    while segments(&queue) < 2 {
        queue.enqueue_bytes(data).expect("enqueue");
    }
    queue.set_durability(Durability::Safe).expect("to Safe");
    let name = "dque Safe, backlog: head and tail in 2 segments";
    let enq = timed(n, cap, |_| queue.enqueue_bytes(data).expect("enqueue"));
    let deq = timed(enq.items, cap, |_| {
        black_box(queue.dequeue().expect("dequeue").expect("an item"));
    });
    assert_eq!(segments(&queue), 2, "head and tail stayed two segments");
    queue.close().expect("close");
    vec![(ENQ, name, enq), (DEQ, name, deq)]
}

/// Batches of `BATCH`: `enqueue_batch`, then `dequeue_batch`.
fn dque_batches(
    dir: &Path,
    durability: Durability,
    name: &'static str,
    data: &[u8],
    n: usize,
    cap: Option<Duration>,
) -> Out {
    let queue = dque_open(dir, durability);
    let batch = vec![data.to_vec(); BATCH];
    let mut enq = timed(n / BATCH, cap, |_| {
        queue.enqueue_batch(&batch).expect("enqueue_batch")
    });
    let mut deq = timed(enq.items, cap, |_| {
        let items = queue.dequeue_batch(BATCH).expect("dequeue_batch");
        assert_eq!(items.len(), BATCH);
        black_box(items);
    });
    queue.close().expect("close");
    enq.items *= BATCH;
    deq.items *= BATCH;
    vec![(ENQ, name, enq), (DEQ, name, deq)]
}

/// Safe leases: `lease` + `ack` per item, then `lease_batch` + `ack_batch`
/// of `BATCH` (items per second taken and acked; the dequeue group).
fn dque_safe_leases(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let queue = dque_open(dir, Durability::Turbo);
    let batch = vec![data.to_vec(); BATCH];
    for _ in 0..n.div_ceil(BATCH) * 2 {
        queue.enqueue_batch(&batch).expect("enqueue_batch");
    }
    queue.set_durability(Durability::Safe).expect("to Safe");
    let one = timed(n, cap, |_| {
        let job = queue.lease().expect("lease").expect("an item");
        black_box(job.item());
        job.ack().expect("ack");
    });
    let mut batches = timed(n.div_ceil(BATCH), cap, |_| {
        let mut jobs = queue.lease_batch(BATCH).expect("lease_batch");
        assert_eq!(jobs.len(), BATCH);
        queue.ack_batch(&mut jobs).expect("ack_batch");
    });
    batches.items *= BATCH;
    queue.close().expect("close");
    vec![
        (DEQ, "dque Safe, lease + ack", one),
        (DEQ, "dque Safe, lease_batch + ack_batch of 100", batches),
    ]
}

/// `threads` producers enqueueing `n` items in all, in Safe mode.
fn dque_producers(
    dir: &Path,
    name: &'static str,
    data: &[u8],
    n: usize,
    threads: usize,
    cap: Option<Duration>,
) -> Out {
    let queue = Arc::new(dque_open(dir, Durability::Safe));
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (queue, start, data) = (Arc::clone(&queue), Arc::clone(&start), data.to_vec());
            let mine = n / threads + usize::from(t < n % threads);
            std::thread::spawn(move || {
                start.wait();
                timed(mine, cap, |_| queue.enqueue_bytes(&data).expect("enqueue")).items
            })
        })
        .collect();
    let begun = Instant::now();
    start.wait();
    let items = handles
        .into_iter()
        .map(|h| h.join().expect("producer"))
        .sum();
    let elapsed = begun.elapsed();
    assert_eq!(queue.len(), items);
    vec![(ENQ, name, Measure { items, elapsed })]
}

/// How much longer each fsync takes on the slow disk.
#[cfg(feature = "fault-injection")]
const SLOW_SYNC: Duration = Duration::from_millis(1);

/// Safe producers on a slower disk: every fsync takes [`SLOW_SYNC`] longer
/// (the fault seam's `slow_disk`); one producer, then `threads`.
#[cfg(feature = "fault-injection")]
fn dque_slow_disk(dir: &Path, data: &[u8], n: usize, threads: usize, cap: Option<Duration>) -> Out {
    let _slow = dque::faults::FaultPlan::slow_disk(dir, SLOW_SYNC);
    let (one, many) = (dir.join("one"), dir.join("many"));
    std::fs::create_dir_all(&one).expect("a directory");
    std::fs::create_dir_all(&many).expect("a directory");
    let name = "dque Safe, slow disk: 1 producer";
    let mut out = dque_producers(&one, name, data, n / threads.max(1), 1, cap);
    let name = "dque Safe, slow disk: N producers";
    out.extend(dque_producers(&many, name, data, n, threads, cap));
    out
}

// ---------------------------------------------------------------- queue-file

fn queue_file_open(dir: &Path, sync: bool) -> QueueFile {
    let mut qf = QueueFile::open(dir.join("q.qf")).expect("queue-file open");
    qf.set_sync_writes(sync);
    // Its default zero-fills removed elements (one more write per remove);
    // dque does not, so neither does the peer here: its fastest setting.
    qf.set_overwrite_on_remove(false);
    qf
}

/// `add` each item, then `peek` + `remove` each.
fn queue_file_single(dir: &Path, sync: bool, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let mut qf = queue_file_open(dir, sync);
    let enq = timed(n, cap, |_| qf.add(data).expect("add"));
    let deq = timed(enq.items, cap, |_| {
        black_box(qf.peek().expect("peek").expect("an item"));
        qf.remove().expect("remove");
    });
    if sync {
        vec![
            (ENQ, "queue-file synced: add", enq),
            (DEQ, "queue-file synced: peek + remove", deq),
        ]
    } else {
        vec![
            (ENQ, "queue-file no sync: add", enq),
            (DEQ, "queue-file no sync: peek + remove", deq),
        ]
    }
}

/// `add_n` of `BATCH`, then `iter().take(BATCH)` + `remove_n(BATCH)`.
fn queue_file_batches(dir: &Path, sync: bool, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let mut qf = queue_file_open(dir, sync);
    let mut enq = timed(n / BATCH, cap, |_| {
        qf.add_n(std::iter::repeat_n(data, BATCH)).expect("add_n")
    });
    // Keep one item behind, so remove_n never takes the `clear` shortcut.
    qf.add(data).expect("add");
    let mut deq = timed(enq.items, cap, |_| {
        let items: Vec<Vec<u8>> = qf.iter().take(BATCH).collect();
        assert_eq!(items.len(), BATCH);
        black_box(items);
        qf.remove_n(BATCH).expect("remove_n");
    });
    enq.items *= BATCH;
    deq.items *= BATCH;
    if sync {
        vec![
            (ENQ, "queue-file synced: add_n(100)", enq),
            (DEQ, "queue-file synced: iter + remove_n(100)", deq),
        ]
    } else {
        vec![
            (ENQ, "queue-file no sync: add_n(100)", enq),
            (DEQ, "queue-file no sync: iter + remove_n(100)", deq),
        ]
    }
}

// ---------------------------------------------------------------- yaque

/// `send` each item, then `recv` + `commit` each (driven by `block_on`).
fn yaque_single(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let (mut tx, mut rx) = yaque::channel(dir.join("yq")).expect("yaque channel");
    let enq = timed(n, cap, |_| block_on(tx.send(data)).expect("send"));
    let deq = timed(enq.items, cap, |_| {
        let guard = block_on(rx.recv()).expect("recv");
        black_box(&*guard);
        guard.commit().expect("commit");
    });
    vec![
        (ENQ, "yaque: send", enq),
        (DEQ, "yaque: recv + commit", deq),
    ]
}

/// `send_batch` of `BATCH`, then `recv_batch(BATCH)` + `commit`.
fn yaque_batches(dir: &Path, data: &[u8], n: usize, cap: Option<Duration>) -> Out {
    let (mut tx, mut rx) = yaque::channel(dir.join("yq")).expect("yaque channel");
    let mut enq = timed(n / BATCH, cap, |_| {
        block_on(tx.send_batch(std::iter::repeat_n(data, BATCH))).expect("send_batch")
    });
    let mut deq = timed(enq.items, cap, |_| {
        let guard = block_on(rx.recv_batch(BATCH)).expect("recv_batch");
        assert_eq!(guard.len(), BATCH);
        black_box(&*guard);
        guard.commit().expect("commit");
    });
    enq.items *= BATCH;
    deq.items *= BATCH;
    vec![
        (ENQ, "yaque: send_batch(100)", enq),
        (DEQ, "yaque: recv_batch(100) + commit", deq),
    ]
}

// ---------------------------------------------------------------- the run

struct Bench {
    base: PathBuf,
    only: Vec<String>,
    items: usize,
    max_bytes: usize,
    safe_items: usize,
    safe_cap: Duration,
    rounds: usize,
    producers: usize,
}

/// A case: (name to filter on, items it is given, whether it fsyncs per
/// call, the function).
type Case<'a> = (
    &'static str,
    usize,
    bool,
    Box<dyn Fn(&Path, usize, Option<Duration>) -> Out + 'a>,
);

/// Rows of one payload size, in the order first measured.
struct Results {
    size: usize,
    rows: Vec<(&'static str, &'static str, Measure)>,
}

impl Results {
    fn add(&mut self, out: Out) {
        for (group, name, m) in out {
            match self
                .rows
                .iter_mut()
                .find(|(g, n, _)| *g == group && *n == name)
            {
                Some((_, _, total)) => {
                    total.items += m.items;
                    total.elapsed += m.elapsed;
                }
                None => self.rows.push((group, name, m)),
            }
        }
    }

    fn find(&self, name: &str, enqueue: bool) -> Option<Measure> {
        let group = if enqueue { ENQ } else { DEQ };
        self.rows
            .iter()
            .find(|(g, n, _)| *n == name && (*g == group || *g == CEIL))
            .map(|(_, _, m)| *m)
    }
}

impl Bench {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty()
            || self.only.iter().any(|w| match w.strip_prefix('=') {
                Some(exact) => name == exact,
                None => name.contains(w.as_str()),
            })
    }

    /// A fresh directory for one case, after the page cache of earlier cases
    /// has been written back.
    fn fresh_dir(&self) -> tempfile::TempDir {
        let _ = std::process::Command::new("sync").status();
        tempfile::tempdir_in(&self.base).expect("a temporary directory under DQUE_BENCH_DIR")
    }

    fn run_size(&self, size: usize) -> Results {
        let data = payload(size);
        let data = &data[..];
        // Whole batches, and no more payload bytes than the cap.
        let fast = (self.items.min(self.max_bytes / size.max(1)) / BATCH).max(1) * BATCH;
        let safe = self.safe_items.max(1);
        let producers = self.producers;
        let cases: Vec<Case> = vec![
            (
                "fdatasync",
                safe,
                true,
                Box::new(|d, n, c| append_fdatasync(d, data, n, c)),
            ),
            (
                "fdatasync",
                safe,
                true,
                Box::new(|d, n, c| overwrite_fdatasync(d, "overwrite + fdatasync", data, 1, n, c)),
            ),
            (
                "fdatasync batches",
                fast,
                true,
                Box::new(|d, n, c| {
                    let name = "overwrite 100 items + fdatasync";
                    overwrite_fdatasync(d, name, data, BATCH, n, c)
                }),
            ),
            (
                "dque Safe",
                safe,
                true,
                Box::new(|d, n, c| dque_single(d, Durability::Safe, "dque Safe", data, n, c)),
            ),
            (
                "dque Safe backlog",
                safe,
                true,
                Box::new(|d, n, c| dque_safe_backlog(d, data, n, c)),
            ),
            (
                "dque Safe producers",
                safe * 4,
                true,
                Box::new(move |d, n, c| {
                    dque_producers(d, "dque Safe, N producers", data, n, producers, c)
                }),
            ),
            #[cfg(feature = "fault-injection")]
            (
                "dque Safe slow disk",
                safe,
                true,
                Box::new(move |d, n, c| dque_slow_disk(d, data, n, producers, c)),
            ),
            (
                "dque Safe typed job",
                safe,
                true,
                Box::new(|d, n, c| {
                    let name = "dque Safe, typed: a job struct";
                    dque_typed(d, Durability::Safe, name, job_item(data), n, c)
                }),
            ),
            (
                "dque Safe batches",
                fast,
                true,
                Box::new(|d, n, c| {
                    dque_batches(d, Durability::Safe, "dque Safe, batches of 100", data, n, c)
                }),
            ),
            (
                "dque Safe leases",
                safe,
                true,
                Box::new(|d, n, c| dque_safe_leases(d, data, n, c)),
            ),
            (
                "queue-file synced",
                safe,
                true,
                Box::new(|d, n, c| queue_file_single(d, true, data, n, c)),
            ),
            (
                "queue-file synced batches",
                fast,
                true,
                Box::new(|d, n, c| queue_file_batches(d, true, data, n, c)),
            ),
            (
                "write no sync",
                fast,
                false,
                Box::new(|d, n, c| append_no_sync(d, data, n, c)),
            ),
            (
                "memcpy",
                fast,
                false,
                Box::new(|d, n, c| mapped_copies(d, data, n, c)),
            ),
            (
                "dque Turbo",
                fast,
                false,
                Box::new(|d, n, c| dque_single(d, Durability::Turbo, "dque Turbo", data, n, c)),
            ),
            (
                "dque Turbo batches",
                fast,
                false,
                Box::new(|d, n, c| {
                    dque_batches(
                        d,
                        Durability::Turbo,
                        "dque Turbo, batches of 100",
                        data,
                        n,
                        c,
                    )
                }),
            ),
            (
                "dque Turbo typed Vec<u8>",
                fast,
                false,
                Box::new(|d, n, c| {
                    let item = plain_bytes(data);
                    dque_typed(
                        d,
                        Durability::Turbo,
                        "dque Turbo, typed: Vec<u8> field",
                        item,
                        n,
                        c,
                    )
                }),
            ),
            (
                "dque Turbo typed serde_bytes",
                fast,
                false,
                Box::new(|d, n, c| {
                    let item = serde_bytes_item(data);
                    let name = "dque Turbo, typed: serde_bytes field";
                    dque_typed(d, Durability::Turbo, name, item, n, c)
                }),
            ),
            (
                "dque Turbo typed job",
                fast,
                false,
                Box::new(|d, n, c| {
                    let name = "dque Turbo, typed: a job struct";
                    dque_typed(d, Durability::Turbo, name, job_item(data), n, c)
                }),
            ),
            (
                "dque Periodic typed job",
                fast,
                false,
                Box::new(|d, n, c| {
                    let name = "dque Periodic(100 ms), typed: a job struct";
                    dque_typed(
                        d,
                        Durability::Periodic(PERIODIC),
                        name,
                        job_item(data),
                        n,
                        c,
                    )
                }),
            ),
            (
                "dque Periodic",
                fast,
                false,
                Box::new(|d, n, c| {
                    dque_single(
                        d,
                        Durability::Periodic(PERIODIC),
                        "dque Periodic(100 ms)",
                        data,
                        n,
                        c,
                    )
                }),
            ),
            (
                "queue-file no sync",
                fast,
                false,
                Box::new(|d, n, c| queue_file_single(d, false, data, n, c)),
            ),
            (
                "queue-file no sync batches",
                fast,
                false,
                Box::new(|d, n, c| queue_file_batches(d, false, data, n, c)),
            ),
            (
                "yaque",
                fast,
                false,
                Box::new(|d, n, c| yaque_single(d, data, n, c)),
            ),
            (
                "yaque batches",
                fast,
                false,
                Box::new(|d, n, c| yaque_batches(d, data, n, c)),
            ),
        ];
        let cases: Vec<Case> = cases.into_iter().filter(|c| self.wants(c.0)).collect();
        let mut results = Results {
            size,
            rows: Vec::new(),
        };
        eprintln!(
            "== {size}-byte payloads: {fast} items; {safe} with an fsync per call, \
             in {} rounds, at most {:?} per phase",
            self.rounds, self.safe_cap
        );
        let rounds = self.rounds.max(1);
        let cap = self.safe_cap.div_f64(rounds as f64);
        for round in 0..rounds {
            for (name, n, _, case) in cases.iter().filter(|c| c.2) {
                let dir = self.fresh_dir();
                let out = case(dir.path(), (n / rounds).max(BATCH), Some(cap));
                eprintln!("  round {round}: {name}: {out:?}");
                results.add(out);
            }
        }
        for (name, n, _, case) in cases.iter().filter(|c| !c.2) {
            let dir = self.fresh_dir();
            let out = case(dir.path(), *n, None);
            eprintln!("  {name}: {out:?}");
            results.add(out);
        }
        results
    }
}

fn print_table(r: &Results, producers: usize) {
    println!("\n### {}-byte payloads\n", r.size);
    println!("| | case | items | items/s | MB/s | per item |");
    println!("|---|---|---:|---:|---:|---:|");
    for (group, name, m) in &r.rows {
        let name = name.replace("N producers", &format!("{producers} producers"));
        println!(
            "| {group} | {name} | {} | {} | {:.1} | {} |",
            m.items,
            report::rate(m.per_sec()),
            m.per_sec() * r.size as f64 / 1e6,
            report::nanos(m.elapsed.as_secs_f64() * 1e9 / m.items as f64),
        );
    }
}

fn print_ratios(r: &Results, producers: usize) {
    // (what, ours, theirs, enqueue rows (or dequeue), target: at least this ratio)
    type Line = (&'static str, &'static str, &'static str, bool, Option<f64>);
    let lines: &[Line] = &[
        (
            "Turbo enqueue / yaque send",
            "dque Turbo",
            "yaque: send",
            true,
            Some(2.0),
        ),
        (
            "Turbo enqueue / queue-file add (no sync)",
            "dque Turbo",
            "queue-file no sync: add",
            true,
            Some(4.0),
        ),
        (
            "Turbo dequeue / yaque recv + commit",
            "dque Turbo",
            "yaque: recv + commit",
            false,
            Some(5.0),
        ),
        (
            "Turbo dequeue / queue-file peek + remove (no sync)",
            "dque Turbo",
            "queue-file no sync: peek + remove",
            false,
            Some(5.0),
        ),
        (
            "Turbo batch enqueue / yaque send_batch(100)",
            "dque Turbo, batches of 100",
            "yaque: send_batch(100)",
            true,
            None,
        ),
        (
            "Turbo batch enqueue / queue-file add_n(100) (no sync)",
            "dque Turbo, batches of 100",
            "queue-file no sync: add_n(100)",
            true,
            None,
        ),
        (
            "Turbo batch dequeue / yaque recv_batch(100) + commit",
            "dque Turbo, batches of 100",
            "yaque: recv_batch(100) + commit",
            false,
            None,
        ),
        (
            "Turbo batch dequeue / queue-file iter + remove_n(100) (no sync)",
            "dque Turbo, batches of 100",
            "queue-file no sync: iter + remove_n(100)",
            false,
            None,
        ),
        (
            "Periodic(100 ms) enqueue / Turbo enqueue",
            "dque Periodic(100 ms)",
            "dque Turbo",
            true,
            None,
        ),
        (
            "Turbo enqueue / append write(2), no sync",
            "dque Turbo",
            "append write(2), no sync",
            true,
            None,
        ),
        (
            "Turbo enqueue / memcpy into mapped file",
            "dque Turbo",
            "memcpy into mapped file",
            true,
            None,
        ),
        (
            "Turbo dequeue / copy out of mapped file",
            "dque Turbo",
            "copy out of mapped file",
            false,
            None,
        ),
        (
            "Safe enqueue / append + fdatasync",
            "dque Safe",
            "append + fdatasync",
            true,
            Some(0.9),
        ),
        (
            "Safe enqueue / overwrite + fdatasync",
            "dque Safe",
            "overwrite + fdatasync",
            true,
            None,
        ),
        (
            "Safe enqueue with a backlog (2 segments) / without",
            "dque Safe, backlog: head and tail in 2 segments",
            "dque Safe",
            true,
            None,
        ),
        (
            "Safe dequeue with a backlog (2 segments) / without",
            "dque Safe, backlog: head and tail in 2 segments",
            "dque Safe",
            false,
            None,
        ),
        (
            "Safe enqueue / queue-file synced add",
            "dque Safe",
            "queue-file synced: add",
            true,
            None,
        ),
        (
            "Safe dequeue / queue-file synced peek + remove",
            "dque Safe",
            "queue-file synced: peek + remove",
            false,
            None,
        ),
        (
            "Safe, N producers / 1 producer",
            "dque Safe, N producers",
            "dque Safe",
            true,
            Some(4.0),
        ),
        (
            "Safe on a slow disk (+1 ms per fsync), N producers / 1 producer",
            "dque Safe, slow disk: N producers",
            "dque Safe, slow disk: 1 producer",
            true,
            Some(4.0),
        ),
        (
            "Safe batch enqueue / queue-file synced add_n(100)",
            "dque Safe, batches of 100",
            "queue-file synced: add_n(100)",
            true,
            None,
        ),
        // The typed API against raw bytes: within 1.3x (a ratio ≥ 1 / 1.3).
        (
            "Turbo typed (serde_bytes field) enqueue / raw enqueue",
            "dque Turbo, typed: serde_bytes field",
            "dque Turbo",
            true,
            Some(TYPED_TARGET),
        ),
        (
            "Turbo typed (serde_bytes field) dequeue / raw dequeue",
            "dque Turbo, typed: serde_bytes field",
            "dque Turbo",
            false,
            Some(TYPED_TARGET),
        ),
        (
            "Turbo typed (Vec<u8> field) enqueue / raw enqueue",
            "dque Turbo, typed: Vec<u8> field",
            "dque Turbo",
            true,
            None,
        ),
        (
            "Turbo typed (Vec<u8> field) dequeue / raw dequeue",
            "dque Turbo, typed: Vec<u8> field",
            "dque Turbo",
            false,
            None,
        ),
        (
            "Turbo typed (job struct) enqueue / raw enqueue",
            "dque Turbo, typed: a job struct",
            "dque Turbo",
            true,
            None,
        ),
        (
            "Turbo typed (job struct) dequeue / raw dequeue",
            "dque Turbo, typed: a job struct",
            "dque Turbo",
            false,
            None,
        ),
    ];
    println!(
        "\n| {}-byte payloads: ratio of items/s | x | target | met |",
        r.size
    );
    println!("|---|---:|---:|---|");
    for &(what, ours, theirs, enqueue, target) in lines {
        let (Some(a), Some(b)) = (r.find(ours, enqueue), r.find(theirs, enqueue)) else {
            continue;
        };
        let ratio = a.per_sec() / b.per_sec();
        let (target, met) = match target {
            Some(t) => (
                format!("≥ {t:.2}"),
                if ratio >= t { "yes" } else { "**no**" },
            ),
            None => (String::new(), ""),
        };
        let what = what.replace("N producers", &format!("{producers} producers"));
        println!("| {what} | {ratio:.2} | {target} | {met} |");
    }
    // A batch costs at least one fsync: issue 16's ceiling is a batch per
    // overwrite + fdatasync of one item; the disk's own limit for a batch
    // enqueue is an overwrite + fdatasync of its bytes.
    let one = r
        .find("overwrite + fdatasync", true)
        .map(|m| m.per_sec() * BATCH as f64);
    let whole = r
        .find("overwrite 100 items + fdatasync", true)
        .map(|m| m.per_sec());
    for enqueue in [true, false] {
        let Some(m) = r.find("dque Safe, batches of 100", enqueue) else {
            continue;
        };
        let call = if enqueue { "enqueue" } else { "dequeue" };
        if let Some(ceiling) = one {
            let ratio = m.per_sec() / ceiling;
            let met = if ratio >= 0.8 { "yes" } else { "**no**" };
            println!(
                "| Safe batches of 100, {call} / (100 × overwrite + fdatasync) | {ratio:.2} | ≥ 0.80 | {met} |"
            );
        }
        // Only an enqueue writes the batch's bytes (a dequeue, its markers).
        if let (Some(floor), true) = (whole, enqueue) {
            let ratio = m.per_sec() / floor;
            println!(
                "| Safe batches of 100, {call} / overwrite 100 items + fdatasync | {ratio:.2} | | |"
            );
        }
    }
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let bench = Bench {
        base: std::env::var_os("DQUE_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
        only: std::env::var("DQUE_BENCH_ONLY")
            .map(|s| s.split(',').map(|w| w.trim().to_string()).collect())
            .unwrap_or_default(),
        items: env_usize("DQUE_BENCH_ITEMS", 1_000_000),
        max_bytes: env_usize("DQUE_BENCH_MAX_BYTES", 400_000_000),
        safe_items: env_usize("DQUE_BENCH_SAFE_ITEMS", 20_000),
        safe_cap: Duration::from_secs_f64(
            std::env::var("DQUE_BENCH_SAFE_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(3.0),
        ),
        rounds: env_usize("DQUE_BENCH_ROUNDS", 4).max(1),
        producers: env_usize("DQUE_BENCH_PRODUCERS", 8).max(1),
    };
    let sizes: Vec<usize> = std::env::var("DQUE_BENCH_SIZES")
        .unwrap_or_else(|_| "100,4096".into())
        .split(',')
        .map(|s| s.trim().parse().expect("DQUE_BENCH_SIZES: sizes in bytes"))
        .collect();
    println!(
        "dque side-by-side run under {} ({}), {} cores, load average {}",
        bench.base.display(),
        report::filesystem_of(&bench.base),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    let started = Instant::now();
    for size in sizes {
        let r = bench.run_size(size);
        print_table(&r, bench.producers);
        print_ratios(&r, bench.producers);
    }
    println!(
        "\n(whole run: {:.0} s; load average at the end {})",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
