//! The byte locks of `dque.lock` that processes sharing a queue coordinate
//! with: open-file-description (OFD) locks, released by the kernel the
//! moment their holder dies, and owned by an open file rather than a
//! process, so that two handles in one process exclude each other too and
//! a checker sees the holder's lock from its own open of the file.
//!
//! They are independent of the whole-file `flock` that keeps exclusive and
//! shared handles apart (Linux keeps the two kinds of lock apart).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Held for writing while a handle joins or leaves: openers go one at a time.
pub const JOIN_BYTE: u64 = 0;
/// Held for reading by every handle that has joined; whoever can lock it for
/// writing knows it is alone, so it recovers the queue and starts the control
/// file afresh.
pub const ALIVE_BYTE: u64 = 1;
/// Process slot `i` is alive while byte `SLOT_BYTES + i` is locked for writing.
pub const SLOT_BYTES: u64 = 64;

/// How a byte is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// Locks `byte` of `file`; with `wait`, blocks until it can, else returns
/// `Ok(false)` at once when another holder is in the way. A lock already held
/// through `file` is converted (atomically, as POSIX promises).
pub fn lock(file: &File, byte: u64, kind: Kind, wait: bool) -> io::Result<bool> {
    let kind = match kind {
        Kind::Read => libc::F_RDLCK,
        Kind::Write => libc::F_WRLCK,
    };
    let command = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        match fcntl(file, command, kind, byte) {
            Ok(_) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e)
                if !wait && matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Releases `byte` of `file`.
pub fn unlock(file: &File, byte: u64) -> io::Result<()> {
    fcntl(file, libc::F_OFD_SETLK, libc::F_UNLCK, byte).map(drop)
}

/// Whether some other open file holds a lock on `byte` that a write lock
/// would conflict with: a slot's owner is alive exactly while this is true.
pub fn is_locked_elsewhere(file: &File, byte: u64) -> io::Result<bool> {
    let found = fcntl(file, libc::F_OFD_GETLK, libc::F_WRLCK, byte)?;
    Ok(found != libc::F_UNLCK)
}

/// One `fcntl` lock call on the single byte `byte`; returns the lock type
/// the kernel wrote back (meaningful for `F_OFD_GETLK`).
fn fcntl(file: &File, command: libc::c_int, kind: libc::c_int, byte: u64) -> io::Result<i32> {
    // SAFETY: `flock` is a plain C struct for which all zeros is valid; OFD
    // locks require `l_pid` to be zero.
    let mut request: libc::flock = unsafe { std::mem::zeroed() };
    request.l_type = kind as libc::c_short;
    request.l_whence = libc::SEEK_SET as libc::c_short;
    request.l_start = byte as libc::off_t;
    request.l_len = 1;
    // SAFETY: the descriptor is open for the life of `file`, and `request`
    // is a valid `flock` the call may write to.
    let status = unsafe { libc::fcntl(file.as_raw_fd(), command, &mut request) };
    if status == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(i32::from(request.l_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> File {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    #[test]
    fn two_opens_of_one_file_exclude_each_other_and_see_each_others_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let (a, b) = (open(&path), open(&path));
        assert!(lock(&a, 5, Kind::Write, false).unwrap());
        assert!(!lock(&b, 5, Kind::Write, false).unwrap());
        assert!(!lock(&b, 5, Kind::Read, false).unwrap());
        assert!(is_locked_elsewhere(&b, 5).unwrap());
        assert!(!is_locked_elsewhere(&a, 5).unwrap(), "its own lock");
        assert!(!is_locked_elsewhere(&b, 6).unwrap());
        // A write lock turned into a read lock lets other readers in.
        assert!(lock(&a, 5, Kind::Read, false).unwrap());
        assert!(lock(&b, 5, Kind::Read, false).unwrap());
        drop(a);
        assert!(lock(&b, 5, Kind::Write, false).unwrap(), "closing releases");
        unlock(&b, 5).unwrap();
        let c = open(&path);
        assert!(!is_locked_elsewhere(&c, 5).unwrap());
    }
}
