//! Which process holds a queue's lock, read from `/proc/locks` (Linux), so
//! that finding out never takes the lock, not even for a moment.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The pid holding the `flock` on the queue's lock file, when the system
/// says (Linux); `None` when no one holds it or it cannot be told.
pub fn lock_holder(queue: &Path) -> Option<u32> {
    let meta = std::fs::metadata(queue.join("dque.lock")).ok()?;
    let (major, minor) = split_dev(meta.dev());
    // /proc/locks is read in pages; while other processes take and drop
    // locks, a line can slip between two pages: look a few times.
    (0..3).find_map(|_| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        holder_in(&locks, major, minor, meta.ino())
    })
}

/// The pid of the granted `FLOCK` on the file `major:minor:inode` in the
/// text of `/proc/locks`.
fn holder_in(locks: &str, major: u64, minor: u64, inode: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Waiters are listed as "N: -> FLOCK ...": only holders count.
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let pid = fields.get(4)?.parse().ok()?;
        let mut file = fields.get(5)?.split(':');
        let m = u64::from_str_radix(file.next()?, 16).ok()?;
        let n = u64::from_str_radix(file.next()?, 16).ok()?;
        let i: u64 = file.next()?.parse().ok()?;
        (m == major && n == minor && i == inode).then_some(pid)
    })
}

/// Major and minor numbers of a Linux `dev_t` (glibc's encoding).
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_holder_and_skips_waiters_and_other_files() {
        let locks = "\
1: POSIX  ADVISORY  WRITE 900 fd:01:77 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 fd:01:4242 0 EOF
2: -> FLOCK  ADVISORY  WRITE 999 fd:01:4242 0 EOF
3: FLOCK  ADVISORY  WRITE 55 08:02:4242 0 EOF";
        assert_eq!(holder_in(locks, 0xfd, 1, 4242), Some(1234));
        assert_eq!(holder_in(locks, 8, 2, 4242), Some(55));
        assert_eq!(
            holder_in(locks, 0xfd, 1, 77),
            None,
            "a POSIX lock is not ours"
        );
        assert_eq!(holder_in(locks, 0xfd, 1, 1), None);
    }

    #[test]
    fn splits_device_numbers() {
        assert_eq!(split_dev(0xfd01), (0xfd, 1));
        assert_eq!(split_dev((259 << 8) | 3), (259, 3));
    }
}
