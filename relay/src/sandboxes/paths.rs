//! Paths a client names in a sandbox (a watch's directory, a command's `cwd`). In a sandbox
//! whose files are on this host (`local`) they must stay inside the sandbox's directory.
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Removes `.` and `..` without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Refuses what no kernel call would take: an empty path, or one with a NUL byte.
pub fn check(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::invalid("path is required: absolute, or relative to the sandbox's working directory"));
    }
    if path.contains('\0') {
        return Err(Error::invalid("a path must not contain a NUL byte"));
    }
    Ok(())
}

/// `path` inside `root` (relative paths are taken from `from`, a directory inside it): neither
/// `..` nor a symlink may lead out. The path as the sandbox's processes will see it.
pub fn confine(root: &Path, from: &Path, path: &str) -> Result<PathBuf> {
    check(path)?;
    let base = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let from = from.canonicalize().unwrap_or_else(|_| from.to_path_buf());
    let joined = normalize(&from.join(path));
    let real = joined.canonicalize().unwrap_or_else(|_| joined.clone());
    if !joined.starts_with(&base) || !real.starts_with(&base) {
        return Err(Error::invalid(format!("path {path:?} leads outside the sandbox's directory")));
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_dot_is_resolved_lexically() {
        assert_eq!(normalize(Path::new("/a/b/../../../etc")), PathBuf::from("/etc"));
        assert_eq!(normalize(Path::new("/a/./b/c/..")), PathBuf::from("/a/b"));
    }

    #[test]
    fn paths_stay_inside_the_root() {
        let root = std::env::temp_dir();
        assert!(confine(&root, &root, "../etc").is_err());
        assert!(confine(&root, &root, "/etc").is_err());
        assert!(confine(&root, &root, "").is_err());
        assert!(confine(&root, &root, "a\0b").is_err());
        assert!(confine(&root, &root, "sub/dir").is_ok());
        // Relative paths are taken from the working directory, and may go up to the root.
        let work = root.join("work");
        assert_eq!(confine(&root, &work, "sub").unwrap(), root.canonicalize().unwrap().join("work/sub"));
        assert_eq!(confine(&root, &work, "../home").unwrap(), root.canonicalize().unwrap().join("home"));
        assert!(confine(&root, &work, "../../etc").is_err());
    }
}
