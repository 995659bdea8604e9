//! Shared mode needs one kernel's page cache, futexes and locks: a queue on
//! a network file system is refused, since other hosts would see none of it.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// `statfs` magic numbers of file systems whose files other hosts share.
const NETWORK_FILE_SYSTEMS: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x0102_1997, "9P"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
];

/// Fails with `SharedModeUnsupported` when `dir` is on a network file system.
pub fn refuse_network(dir: &Path, lock_file: &File) -> Result<()> {
    let stat = rustix::fs::fstatfs(lock_file).map_err(|e| Error::io(dir, e.into()))?;
    match network_name(stat.f_type as i64) {
        None => Ok(()),
        Some(name) => Err(Error::SharedModeUnsupported {
            path: dir.to_path_buf(),
            reason: format!(
                "it is on {name}, a network file system: processes on other hosts \
                 would see neither the shared memory nor the locks"
            ),
        }),
    }
}

fn network_name(magic: i64) -> Option<&'static str> {
    NETWORK_FILE_SYSTEMS
        .iter()
        .find(|&&(m, _)| m == magic || m == magic & 0xFFFF_FFFF)
        .map(|&(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_file_systems_are_named_and_local_ones_pass() {
        assert_eq!(network_name(0x6969), Some("NFS"));
        // f_type is signed on some targets: CIFS's magic arrives negative.
        assert_eq!(network_name(0xFF53_4D42_u32 as i32 as i64), Some("CIFS"));
        assert_eq!(network_name(0xEF53), None, "ext4");
        assert_eq!(network_name(0x0102_1994), None, "tmpfs");
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        refuse_network(dir.path(), &file).unwrap();
    }
}
