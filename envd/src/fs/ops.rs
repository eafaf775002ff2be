//! The file operations, with E2B envd's semantics. Blocking: run them through `creds::run_as` so
//! the kernel checks the acting user's permissions and new entries belong to that user.
use std::{
    collections::HashMap,
    ffi::OsString,
    fs::{File, Metadata, OpenOptions},
    io,
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use hangar_proto::filesystem::{EntryInfo, FileType};

use super::{entry_info, entry_info_with, meta, FsError, FsResult, Names};

/// Mode of directories the daemon creates (before the umask), as E2B's.
const DIR_MODE: u32 = 0o755;
/// Mode of files the daemon creates (before the umask).
const FILE_MODE: u32 = 0o666;

fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

/// `Stat`: the entry itself (a symlink is described, not followed).
pub fn stat(path: &Path) -> FsResult<EntryInfo> {
    entry_info(path).map_err(|e| FsError::io("stat", path, e))
}

/// `MakeDir`: creates the directory and any missing parents. An existing directory is
/// `DirExists`; an existing non-directory `ExistsNotDir`.
pub fn make_dir(path: &Path) -> FsResult<EntryInfo> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(FsError::DirExists(path.to_path_buf())),
        Ok(_) => return Err(FsError::ExistsNotDir(path.to_path_buf())),
        // ENOTDIR: a parent is a file; `ensure_dirs` says which.
        Err(e) if matches!(errno(&e), Some(libc::ENOENT | libc::ENOTDIR)) => {}
        Err(e) => return Err(FsError::io("stat", path, e)),
    }
    ensure_dirs(path)?;
    stat(path)
}

/// Creates `dir` and its missing parents, one at a time so an error names the component at
/// fault (a file in the way, a directory the user may not write).
pub fn ensure_dirs(dir: &Path) -> FsResult<()> {
    let mut at = PathBuf::new();
    for c in dir.components() {
        at.push(c);
        match std::fs::metadata(&at) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => return Err(FsError::NotADirectory(at)),
            Err(e) if errno(&e) == Some(libc::ENOENT) => {}
            Err(e) => return Err(FsError::io("stat", at, e)),
        }
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&at) {
            Ok(()) => {}
            // Someone else made it meanwhile: fine if it is a directory.
            Err(e) if errno(&e) == Some(libc::EEXIST) && at.is_dir() => {}
            Err(e) if errno(&e) == Some(libc::EEXIST) => return Err(FsError::NotADirectory(at)),
            Err(e) => return Err(FsError::io("creating directory", at, e)),
        }
    }
    Ok(())
}

/// `Move`: renames `src` to `dst`, creating `dst`'s missing parents, and describes `dst`.
pub fn rename(src: &Path, dst: &Path) -> FsResult<EntryInfo> {
    if let Err(e) = std::fs::symlink_metadata(src) {
        return Err(FsError::io("stat", src, e));
    }
    if let Some(parent) = dst.parent() {
        ensure_dirs(parent)?;
    }
    if let Err(e) = std::fs::rename(src, dst) {
        return Err(match errno(&e) {
            Some(libc::EINVAL) => FsError::IntoItself(src.to_path_buf()),
            Some(libc::EISDIR) => FsError::IsADirectory(dst.to_path_buf()),
            Some(libc::ENOTDIR) => FsError::NotADirectory(dst.to_path_buf()),
            Some(libc::ENOTEMPTY | libc::EEXIST) => FsError::NotEmpty(dst.to_path_buf()),
            _ => FsError::io("moving", format!("{} to {}", src.display(), dst.display()), e),
        });
    }
    stat(dst)
}

/// `ListDir`: the entries under `dir` down to `depth` levels (0 and 1: direct children), in
/// name order, each directory followed by its own entries. A symlink to a directory is listed
/// but not entered; `dir` itself may be one. Below the top level, a directory the user may not
/// read is listed but not entered, as `find` would.
pub fn list_dir(dir: &Path, depth: u32) -> FsResult<Vec<EntryInfo>> {
    let depth = depth.max(1);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(FsError::NotADirectory(dir.to_path_buf())),
        Err(e) => return Err(FsError::io("stat", dir, e)),
    }
    let mut out = Vec::new();
    let mut names = Names::default();
    let top = sorted_names(dir).map_err(|e| FsError::io("reading directory", dir, e))?;
    walk(dir, top, 1, depth, &mut names, &mut out);
    Ok(out)
}

fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.file_name())).collect::<Vec<_>>();
    names.sort();
    Ok(names)
}

fn walk(dir: &Path, children: Vec<OsString>, level: u32, depth: u32, names: &mut Names, out: &mut Vec<EntryInfo>) {
    for name in children {
        let path = dir.join(&name);
        // An entry that vanished since the directory was read is simply not listed.
        let Ok(info) = entry_info_with(&path, names) else { continue };
        let enter = level < depth && info.r#type == FileType::Directory as i32;
        out.push(info);
        if enter {
            if let Ok(grandchildren) = sorted_names(&path) {
                walk(&path, grandchildren, level + 1, depth, names, out);
            }
        }
    }
}

/// `Remove`: a file, a symlink (not its target) or a whole directory tree. A path that does not
/// exist is already removed (E2B's envd answers it with success too).
pub fn remove(path: &Path) -> FsResult<()> {
    if path.parent().is_none() {
        return Err(FsError::RemoveRoot);
    }
    let md = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if errno(&e) == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(FsError::io("stat", path, e)),
    };
    let r = if md.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match r {
        Err(e) if errno(&e) == Some(libc::ENOENT) => Ok(()),
        r => r.map_err(|e| FsError::io("removing", path, e)),
    }
}

/// Opens `path` for an upload: parents created, the file created or truncated in place (so
/// special files such as /sys entries can be written too), and its metadata replaced by
/// `metadata`. A directory or a FIFO/socket in the way is refused.
pub fn create_file(path: &Path, metadata: &HashMap<String, String>) -> FsResult<File> {
    meta::validate(metadata)?;
    if let Some(parent) = path.parent() {
        ensure_dirs(parent)?;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(FsError::IsADirectory(path.to_path_buf())),
        Ok(m) if is_fifo_or_socket(&m) => return Err(FsError::NotARegularFile(path.to_path_buf())),
        Ok(_) => {}
        Err(e) if errno(&e) == Some(libc::ENOENT) => {}
        Err(e) => return Err(FsError::io("stat", path, e)),
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| FsError::io("creating", path, e))?;
    meta::replace(&file, path, metadata)?;
    Ok(file)
}

fn is_fifo_or_socket(m: &Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    m.file_type().is_fifo() || m.file_type().is_socket()
}

/// Opens a regular file for a download. Opening never blocks (a FIFO is refused, not waited on).
pub fn open_file(path: &Path) -> FsResult<(File, Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| FsError::io("opening", path, e))?;
    let md = file.metadata().map_err(|e| FsError::io("stat", path, e))?;
    if md.is_dir() {
        return Err(FsError::IsADirectory(path.to_path_buf()));
    }
    if !md.is_file() {
        return Err(FsError::NotARegularFile(path.to_path_buf()));
    }
    Ok((file, md))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hangar-ops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn listing_order_and_depth() {
        let d = scratch("list");
        for p in ["b/b1/b11", "a/a1", "c"] {
            std::fs::create_dir_all(d.join(p)).unwrap();
        }
        std::fs::write(d.join("a.txt"), b"x").unwrap();
        let names = |depth| list_dir(&d, depth).unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(names(0), ["a", "a.txt", "b", "c"]);
        assert_eq!(names(1), ["a", "a.txt", "b", "c"]);
        assert_eq!(names(2), ["a", "a1", "a.txt", "b", "b1", "c"]);
        assert_eq!(names(9), ["a", "a1", "a.txt", "b", "b1", "b11", "c"]);
        assert!(matches!(list_dir(&d.join("a.txt"), 1), Err(FsError::NotADirectory(_))));
        assert!(matches!(list_dir(&d.join("nope"), 1), Err(FsError::NotFound(_))));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn make_dir_move_remove() {
        let d = scratch("mk");
        let deep = d.join("x/y/z");
        assert_eq!(make_dir(&deep).unwrap().r#type, FileType::Directory as i32);
        assert!(matches!(make_dir(&deep), Err(FsError::DirExists(_))));
        std::fs::write(d.join("f"), b"1").unwrap();
        assert!(matches!(make_dir(&d.join("f")), Err(FsError::ExistsNotDir(_))));
        assert!(matches!(make_dir(&d.join("f/g")), Err(FsError::NotADirectory(p)) if p == d.join("f")));
        let moved = rename(&d.join("f"), &d.join("new/parent/g")).unwrap();
        assert_eq!(moved.path, d.join("new/parent/g").to_string_lossy());
        assert!(matches!(rename(&d.join("f"), &d.join("h")), Err(FsError::NotFound(_))));
        remove(&d.join("x")).unwrap();
        remove(&d.join("x")).unwrap();
        assert!(!d.join("x").exists());
        assert!(matches!(remove(Path::new("/")), Err(FsError::RemoveRoot)));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
