//! Where a local sandbox's files are, below its directory `<dir>`.
//!
//! A sandbox holds two directories on its one filesystem `<dir>/disk` (the mount point of its
//! image, `disk.rs`, or a plain directory where there are no images): `work/`, the default
//! working directory, where repositories go; and `home/`, its user's `HOME`, where agent CLIs
//! keep their own state (`~/.claude`, `~/.claude.json`, `~/.codex`) and hangar its `.hangar/`.
//! So a repository in the work directory never holds the agent's home: `git status` after a turn
//! shows what the agent changed, not its CLI's state, and a project's own `.claude/` is not the
//! user's.
//!
//! Sandboxes made before homes had `<dir>/work` alone, both working directory and home (and the
//! image mounted there); they keep it.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// What is mounted, bound into the sandbox's namespace and given to its user: everything of
    /// the sandbox a client's path may name.
    pub top: PathBuf,
    /// The default working directory.
    pub work: PathBuf,
    /// The sandbox user's home.
    pub home: PathBuf,
}

impl Layout {
    /// The layout of the sandbox in `dir`: the one it was made with, and for a new sandbox (no
    /// directory yet) a home apart from the work directory.
    pub fn of(dir: &Path) -> Self {
        let (disk, old) = (dir.join("disk"), dir.join("work"));
        if !disk.exists() && old.exists() {
            return Self { top: old.clone(), work: old.clone(), home: old };
        }
        Self { work: disk.join("work"), home: disk.join("home"), top: disk }
    }

    /// The directories the sandbox's user owns: the top, and the two below it where apart.
    pub fn owned(&self) -> Vec<&Path> {
        let mut dirs = vec![self.top.as_path()];
        for d in [&self.work, &self.home] {
            if !dirs.contains(&d.as_path()) {
                dirs.push(d);
            }
        }
        dirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_sandbox_has_its_home_beside_its_work_directory() {
        let dir = std::env::temp_dir().join(format!("hangar-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let new = Layout::of(&dir);
        assert_eq!((new.work.clone(), new.home.clone()), (dir.join("disk/work"), dir.join("disk/home")));
        assert_eq!(new.owned().len(), 3);
        // One made before homes: its work directory is everything.
        std::fs::create_dir_all(dir.join("work")).unwrap();
        let old = Layout::of(&dir);
        assert_eq!(
            (old.top.clone(), old.work.clone(), old.home.clone()),
            (dir.join("work"), dir.join("work"), dir.join("work"))
        );
        assert_eq!(old.owned(), vec![dir.join("work").as_path()]);
        // Once it has a disk, the disk decides.
        std::fs::create_dir_all(dir.join("disk")).unwrap();
        assert_eq!(Layout::of(&dir), new);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
