//! Network filesystems, where inotify sees only the changes made through this kernel: a watch
//! there would silently miss most of what happens, so it is refused unless asked for.
use std::{io, path::Path};

/// `f_type` magic numbers (linux/magic.h and the filesystems' sources) of the filesystems
/// treated as network mounts. FUSE covers sshfs, s3fs, GlusterFS and virtiofs alike, as E2B's
/// envd does.
const NETWORK_FS: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x6573_5546, "fuse"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "kafs"),
    (0x00C3_6400, "ceph"),
    (0x7375_7245, "coda"),
    (0x0BD0_0BD0, "lustre"),
];

/// The network filesystem `path` is on, if it is on one.
pub fn network_fs(path: &Path) -> io::Result<Option<&'static str>> {
    let st = nix::sys::statfs::statfs(path).map_err(io::Error::from)?;
    // Magic numbers are 32-bit; f_type's width and sign vary by architecture.
    let magic = st.filesystem_type().0 as u64 as u32;
    Ok(NETWORK_FS.iter().find(|(m, _)| *m == magic).map(|(_, name)| *name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_filesystems_are_not_network_mounts() {
        assert_eq!(network_fs(&std::env::temp_dir()).expect("statfs"), None);
        assert!(network_fs(Path::new("/nonexistent/dir")).is_err());
    }
}
