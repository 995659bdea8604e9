//! Blocks written with zeros ahead of a Safe writer.
//!
//! A segment's blocks are reserved unwritten (`fallocate`). An fsync after
//! a write into unwritten blocks must also commit the metadata that marks
//! them written; and pages that the page cache holds in large folios (as a
//! large `write(2)` of zeros, or a read of the mapping with readahead,
//! leaves them) are written back whole after a write through the mapping
//! dirtied one byte of them. Measured on ext4 (Linux 6.18), 11 KB copied
//! into a mapping, then fdatasync: 160-190 µs into unwritten blocks, 290 µs
//! into blocks zeroed with 1 MiB writes, 90-100 µs into blocks zeroed a
//! page at a time. A Safe writer, which syncs after every call, therefore
//! has the blocks ahead of it written with zeros, one page per `pwrite(2)`
//! (small folios): after the one fsync that writes them, each fsync writes
//! only the pages the writer dirtied, and commits no metadata.
//!
//! Only in a segment file this handle created, whose pages nobody else has
//! read or written yet: a segment opened or attached was read to its end
//! (open judges what follows the last frame), so its pages are cached
//! already and zeros would only give the next fsync more to write; and in
//! shared mode one process, the creator, zeroes each segment once. Pages a
//! Turbo writer faulted in ahead (before a switch to Safe) are left alone
//! for the same reason.
//!
//! Why no frame is ever overwritten: zeros start at or after both the end
//! of the last frame and the end of the last stretch, rounded up to a
//! page, and stop at the mapping's length, which is never past the file's
//! (files only grow). The end is caught up with every process's frames
//! before any write (under the processes' mutex in shared mode), so bytes
//! after it are the zeros of the clean end (FORMAT.md), written again as
//! zeros; a frontier that lags behind other processes' frames is harmless
//! for the same reason. A failure here changes nothing: the pages are then
//! written as before, and a disk that fails fails the next fsync. `PAGE`
//! is 4 KiB; with larger pages the stretches only cost more.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// How far ahead of the writer blocks are written, in one go.
const AHEAD: usize = 256 * 1024;

const PAGE: usize = 4096;

const ZEROS: [u8; PAGE] = [0; PAGE];

/// Up to where a segment's blocks were written ahead of its writer.
#[derive(Debug)]
pub struct ZeroAhead {
    zeroed: usize,
    /// Off for files opened rather than made (see the module's doc).
    on: bool,
}

impl ZeroAhead {
    /// For a file this handle made: nothing of it is cached yet.
    pub fn for_new_file() -> ZeroAhead {
        ZeroAhead {
            zeroed: 0,
            on: true,
        }
    }

    /// For a file opened or attached: never writes anything.
    pub fn off() -> ZeroAhead {
        ZeroAhead {
            zeroed: 0,
            on: false,
        }
    }

    /// After a write that ended at `end`, in a file of at least `len` bytes:
    /// writes the next blocks with zeros when the writer has used half of
    /// those written last time.
    pub fn after_write(&mut self, file: &File, end: usize, len: usize) {
        if !self.on || end + AHEAD / 2 <= self.zeroed {
            return;
        }
        let start = self.zeroed.max(end).next_multiple_of(PAGE);
        let stop = (start + AHEAD).min(len);
        for at in (start..stop).step_by(PAGE) {
            let n = PAGE.min(stop - at);
            if file.write_all_at(&ZEROS[..n], at as u64).is_err() {
                return;
            }
        }
        self.zeroed = self.zeroed.max(stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{seek, SeekFrom};

    /// Where the first hole at or after `from` begins (the file's end if none).
    fn hole_at(file: &File, from: u64) -> u64 {
        seek(file, SeekFrom::Hole(from)).unwrap()
    }

    #[test]
    fn writes_zeros_only_after_the_writer_and_within_the_file() {
        let file = tempfile::tempfile().unwrap();
        let len = 1 << 20;
        file.set_len(len as u64).unwrap();
        let data: Vec<u8> = (0..5_000u32).map(|i| (i % 251 + 1) as u8).collect();
        file.write_all_at(&data, 0).unwrap();
        let mut ahead = ZeroAhead::for_new_file();

        ahead.after_write(&file, data.len(), len);
        // The page holding the writer's end is left alone; the stretch after
        // it is written (no longer a hole), the rest of the file is not.
        let stretch_end = (2 * PAGE + AHEAD) as u64;
        assert_eq!(hole_at(&file, 2 * PAGE as u64), stretch_end);
        let mut back = vec![0; len];
        file.read_exact_at(&mut back, 0).unwrap();
        assert!(
            back[..data.len()] == data[..],
            "a byte before the end changed"
        );
        assert!(back[data.len()..].iter().all(|&b| b == 0));
        assert_eq!(file.metadata().unwrap().len(), len as u64);

        // Nothing more until the writer used half of the stretch...
        ahead.after_write(&file, 2 * PAGE + AHEAD / 2 - 1, len);
        assert_eq!(hole_at(&file, 2 * PAGE as u64), stretch_end);
        // ...then the next stretch, from where the last one ended.
        ahead.after_write(&file, 2 * PAGE + AHEAD / 2 + 1, len);
        assert_eq!(hole_at(&file, 2 * PAGE as u64), stretch_end + AHEAD as u64);
    }

    #[test]
    fn a_file_opened_rather_than_made_gets_no_zeros() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(1 << 20).unwrap();
        ZeroAhead::off().after_write(&file, 10, 1 << 20);
        assert_eq!(hole_at(&file, 0), 0, "nothing was written");
    }

    #[test]
    fn never_writes_past_the_length_it_is_given() {
        let file = tempfile::tempfile().unwrap();
        let len = 3 * PAGE + 100;
        file.set_len(len as u64).unwrap();
        let mut ahead = ZeroAhead::for_new_file();
        ahead.after_write(&file, 10, len);
        assert_eq!(file.metadata().unwrap().len(), len as u64);
        // Written from the second page to the end: no hole left after it.
        assert_eq!(hole_at(&file, PAGE as u64), len as u64);

        // A writer past the whole file asks for nothing.
        let other = tempfile::tempfile().unwrap();
        other.set_len(PAGE as u64).unwrap();
        ZeroAhead::for_new_file().after_write(&other, PAGE, PAGE);
        assert_eq!(other.metadata().unwrap().len(), PAGE as u64);
        assert_eq!(hole_at(&other, 0), 0, "nothing was written");
    }
}
