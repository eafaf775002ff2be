//! Files: entry info, the operations E2B's filesystem service and file routes offer, and acting
//! as a user while doing them (`creds`).
//!
//! Invariant: builds E2B's `EntryInfo` data type but knows nothing of RPCs or HTTP. Every
//! operation here is blocking and meant to run through `creds::run_as`.
pub mod creds;
mod error;
pub mod meta;
pub mod ops;

use std::{
    collections::HashMap,
    io,
    os::unix::fs::MetadataExt,
    path::{Component, Path, PathBuf},
};

use hangar_proto::filesystem::{EntryInfo, FileType};
use nix::unistd::{Gid, Group, Uid, User as NixUser};

pub use creds::{run_as, Identity};
pub use error::{FsError, FsResult};

/// What E2B's `EntryInfo` says of `path`, without following a final symlink.
pub fn entry_info(path: &Path) -> io::Result<EntryInfo> {
    entry_info_with(path, &mut Names::default())
}

/// `entry_info` with a cache of owner and group names, for listings.
pub fn entry_info_with(path: &Path, names: &mut Names) -> io::Result<EntryInfo> {
    let md = std::fs::symlink_metadata(path)?;
    let ft = md.file_type();
    let (kind, symlink_target, perm) = if ft.is_symlink() {
        // As E2B: the target fully resolved, and the target's permission bits (0 when dangling).
        // A dangling link shows its raw target instead of nothing.
        let target = std::fs::canonicalize(path).or_else(|_| std::fs::read_link(path)).ok();
        let perm = std::fs::metadata(path).map(|m| m.mode() & 0o777).unwrap_or(0);
        (FileType::Symlink, target.map(|t| t.to_string_lossy().into_owned()), perm)
    } else if ft.is_dir() {
        (FileType::Directory, None, md.mode() & 0o777)
    } else if ft.is_file() {
        (FileType::File, None, md.mode() & 0o777)
    } else {
        // FIFOs, sockets and devices: E2B has no type for them.
        (FileType::Unspecified, None, md.mode() & 0o777)
    };
    Ok(EntryInfo {
        name: display_name(path),
        r#type: kind as i32,
        path: path.to_string_lossy().into_owned(),
        size: md.size() as i64,
        mode: perm,
        permissions: permissions_string(md.mode()),
        owner: names.user(md.uid()),
        group: names.group(md.gid()),
        modified_time: md.modified().ok().map(Into::into),
        symlink_target,
        metadata: if ft.is_symlink() { Default::default() } else { meta::read(path) },
    })
}

fn display_name(path: &Path) -> String {
    match path.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => path.to_string_lossy().into_owned(),
    }
}

/// A Unix mode as Go's `os.FileMode.String()` writes it (what E2B's envd sends): one letter per
/// type or special bit from `dalTLDpSugct?` (`-` when none), then `rwxrwxrwx`. So `-rw-r--r--`,
/// `drwxr-xr-x`, `Lrwxrwxrwx` for a symlink, `dtrwxrwxrwx` for /tmp, `urwxr-xr-x` for setuid.
pub fn permissions_string(mode: u32) -> String {
    let fmt = mode & libc::S_IFMT;
    let flags = [
        ('d', fmt == libc::S_IFDIR),
        ('L', fmt == libc::S_IFLNK),
        ('D', fmt == libc::S_IFBLK || fmt == libc::S_IFCHR),
        ('p', fmt == libc::S_IFIFO),
        ('S', fmt == libc::S_IFSOCK),
        ('u', mode & libc::S_ISUID != 0),
        ('g', mode & libc::S_ISGID != 0),
        ('c', fmt == libc::S_IFCHR),
        ('t', mode & libc::S_ISVTX != 0),
    ];
    let mut s: String = flags.iter().filter(|(_, on)| *on).map(|(c, _)| *c).collect();
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

/// Owner and group names by id; ids with no name show as numbers, as in E2B.
#[derive(Debug, Default)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    pub fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| {
                NixUser::from_uid(Uid::from_raw(uid)).ok().flatten().map(|u| u.name).unwrap_or_else(|| uid.to_string())
            })
            .clone()
    }

    pub fn group(&mut self, gid: u32) -> String {
        self.groups
            .entry(gid)
            .or_insert_with(|| {
                Group::from_gid(Gid::from_raw(gid)).ok().flatten().map(|g| g.name).unwrap_or_else(|| gid.to_string())
            })
            .clone()
    }
}

/// An absolute path with `.` and `..` removed lexically (as E2B's envd cleans paths), so replies
/// name entries the way a client would write them.
pub fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_like_go() {
        assert_eq!(permissions_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(permissions_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(permissions_string(libc::S_IFLNK | 0o777), "Lrwxrwxrwx");
        assert_eq!(permissions_string(libc::S_IFDIR | libc::S_ISVTX | 0o777), "dtrwxrwxrwx");
        assert_eq!(permissions_string(libc::S_IFREG | libc::S_ISUID | 0o755), "urwxr-xr-x");
        assert_eq!(permissions_string(libc::S_IFDIR | libc::S_ISGID | 0o775), "dgrwxrwxr-x");
        assert_eq!(permissions_string(libc::S_IFCHR | 0o666), "Dcrw-rw-rw-");
        assert_eq!(permissions_string(libc::S_IFIFO | 0o600), "prw-------");
        assert_eq!(permissions_string(libc::S_IFSOCK | 0o755), "Srwxr-xr-x");
        assert_eq!(permissions_string(libc::S_IFREG), "----------");
    }

    #[test]
    fn cleans_lexically() {
        assert_eq!(clean(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(clean(Path::new("/../..")), PathBuf::from("/"));
        assert_eq!(clean(Path::new("/home/user/x")), PathBuf::from("/home/user/x"));
    }

    #[test]
    fn entry_of_a_file_a_dir_and_a_symlink() {
        let dir = std::env::temp_dir().join(format!("hangar-entry-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.txt");
        std::fs::write(&file, b"abc").unwrap();
        let link = dir.join("l");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).unwrap();

        let f = entry_info(&file).unwrap();
        assert_eq!((f.name.as_str(), f.r#type, f.size), ("f.txt", FileType::File as i32, 3));
        assert!(f.permissions.starts_with('-') && f.permissions.len() == 10, "{}", f.permissions);
        assert!(f.modified_time.is_some() && !f.owner.is_empty() && !f.group.is_empty());
        let l = entry_info(&link).unwrap();
        assert_eq!(l.r#type, FileType::Symlink as i32);
        assert_eq!(l.symlink_target.as_deref(), Some(std::fs::canonicalize(&file).unwrap().to_str().unwrap()));
        assert!(l.permissions.starts_with('L'));
        let d = entry_info(&dir).unwrap();
        assert_eq!(d.r#type, FileType::Directory as i32);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
