//! The inotify side of a watch: which directory each watch descriptor stands for, how kernel
//! events become E2B's changes, and how a recursive watch grows with the tree.
use std::{
    collections::{HashMap, HashSet},
    ffi::OsString,
    io,
    path::{Path, PathBuf},
    sync::Arc,
};

use nix::sys::inotify::{AddWatchFlags as M, Inotify as Raw, InotifyEvent, WatchDescriptor};

use super::{
    inotify::{self, Inotify},
    network_fs,
    queue::{Ended, Shared},
    Change, Kind, WatchError, WatchSpec,
};
use crate::events;

/// Batches of events handled back to back before giving other tasks a turn.
const BATCHES_PER_TURN: u32 = 16;

fn dir_mask() -> M {
    M::IN_CREATE
        | M::IN_DELETE
        | M::IN_MODIFY
        | M::IN_ATTRIB
        | M::IN_MOVED_FROM
        | M::IN_MOVED_TO
        | M::IN_DELETE_SELF
        | M::IN_MOVE_SELF
        | M::IN_ONLYDIR
        | inotify::excl_unlink()
}

/// E2B's kinds of one kernel event, in E2B's order (create, rename, chmod, write, remove): one
/// change with several kinds becomes several events.
fn kinds(mask: M) -> impl Iterator<Item = Kind> {
    [
        (M::IN_CREATE | M::IN_MOVED_TO, Kind::Create),
        (M::IN_MOVED_FROM, Kind::Rename),
        (M::IN_ATTRIB, Kind::Chmod),
        (M::IN_MODIFY, Kind::Write),
        (M::IN_DELETE, Kind::Remove),
    ]
    .into_iter()
    .filter(move |(bits, _)| mask.intersects(*bits))
    .map(|(_, k)| k)
}

pub(crate) struct Tree {
    root: PathBuf,
    recursive: bool,
    include_entry: bool,
    root_wd: WatchDescriptor,
    /// Each watched directory, relative to the root ("" for the root).
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Entries a scan of a new directory reported as created. The kernel may also have queued
    /// their creation (it happened after the directory's watch was added but before the scan);
    /// that event is skipped rather than reported twice. Cleared whenever the kernel's queue
    /// has been read empty, since by then every such event has been seen.
    synthesized: HashSet<(WatchDescriptor, OsString)>,
}

impl Tree {
    /// Checks the root and adds the watches: the root, and every directory under it when
    /// recursive. Blocking: runs off the async threads.
    pub(crate) fn setup(spec: WatchSpec) -> Result<(Raw, Tree), WatchError> {
        let root = spec.root;
        let md = std::fs::metadata(&root).map_err(|e| WatchError::io("reading", root.clone(), e))?;
        if !md.is_dir() {
            return Err(WatchError::NotADirectory(root));
        }
        if !spec.allow_network_mounts {
            if let Some(fs) = network_fs(&root).map_err(|e| WatchError::io("statfs", root.clone(), e))? {
                return Err(WatchError::NetworkMount { path: root, fs });
            }
        }
        let raw =
            inotify::open_raw().map_err(|e| WatchError::io("creating an inotify instance for", root.clone(), e))?;
        // The root itself may be a symlink to a directory: follow it, unlike directories below.
        let root_wd = inotify::add(&raw, &root, dir_mask()).map_err(|e| WatchError::io("watching", root.clone(), e))?;
        let mut tree = Tree {
            root,
            recursive: spec.recursive,
            include_entry: spec.include_entry,
            root_wd,
            dirs: HashMap::from([(root_wd, PathBuf::new())]),
            synthesized: HashSet::new(),
        };
        if tree.recursive {
            tree.walk(&raw, PathBuf::new(), root_wd, None)?;
        }
        Ok((raw, tree))
    }

    fn change(&self, rel: &Path, kind: Kind) -> Change {
        let entry = (self.include_entry && matches!(kind, Kind::Create | Kind::Write | Kind::Chmod))
            .then(|| crate::fs::entry_info(&self.root.join(rel)).ok().map(Box::new))
            .flatten();
        Change { name: rel.to_string_lossy().into_owned(), kind, entry }
    }

    /// Watches every directory under `start` (already watched as `start_wd`). With `report`,
    /// every entry found is reported as created: the directory is new to the watch, so its
    /// contents are too, even those created before its watch could be added.
    ///
    /// For a directory that appears under a running watch this runs on the blocking pool (see
    /// [`run`]), and must finish before later events are handled.
    fn walk(
        &mut self,
        raw: &Raw,
        start: PathBuf,
        start_wd: WatchDescriptor,
        mut report: Option<&mut Vec<Change>>,
    ) -> Result<(), WatchError> {
        let mut todo = vec![(start, start_wd)];
        while let Some((rel, wd)) = todo.pop() {
            // A directory removed or replaced meanwhile has nothing left to report; one that
            // cannot be read cannot be watched either.
            let Ok(entries) = std::fs::read_dir(self.root.join(&rel)) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let child = rel.join(&name);
                if let Some(out) = report.as_deref_mut() {
                    out.push(self.change(&child, Kind::Create));
                    self.synthesized.insert((wd, name));
                }
                // Not following symlinks: a link to a directory is an entry, not a subtree.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    if let Some(child_wd) = self.add_dir(raw, &child)? {
                        todo.push((child, child_wd));
                    }
                }
            }
        }
        Ok(())
    }

    /// Watches the directory at `rel`; `None` if it is gone or unreadable.
    fn add_dir(&mut self, raw: &Raw, rel: &Path) -> Result<Option<WatchDescriptor>, WatchError> {
        let path = self.root.join(rel);
        match inotify::add(raw, &path, dir_mask() | M::IN_DONT_FOLLOW) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_path_buf());
                Ok(Some(wd))
            }
            Err(e) => match WatchError::io("watching", path, e) {
                WatchError::NotFound(_) | WatchError::NotADirectory(_) | WatchError::PermissionDenied { .. } => {
                    Ok(None)
                }
                other => Err(other),
            },
        }
    }

    /// Stops watching `rel` and everything under it (it left the tree).
    fn forget(&mut self, raw: &Raw, rel: &Path) {
        let gone: Vec<WatchDescriptor> =
            self.dirs.iter().filter(|(_, p)| p.starts_with(rel)).map(|(wd, _)| *wd).collect();
        for wd in gone {
            let _ = raw.rm_watch(wd);
            self.dirs.remove(&wd);
        }
    }

    /// Turns one kernel event into changes; `Some` when the watch is over.
    fn handle(&mut self, raw: &Raw, ev: InotifyEvent, out: &mut Vec<Change>) -> Option<Ended> {
        // Events of a watch already forgotten (a subtree moved out) are stale.
        let rel = self.dirs.get(&ev.wd)?.clone();
        let is_root = ev.wd == self.root_wd;
        if ev.mask.contains(M::IN_IGNORED) {
            self.dirs.remove(&ev.wd);
            return is_root.then_some(Ended::Gone);
        }
        if ev.mask.intersects(M::IN_DELETE_SELF | M::IN_MOVE_SELF | M::IN_UNMOUNT) {
            if !is_root {
                // The parent directory reports it by name.
                return None;
            }
            if !ev.mask.contains(M::IN_UNMOUNT) {
                let kind = if ev.mask.contains(M::IN_MOVE_SELF) { Kind::Rename } else { Kind::Remove };
                out.push(Change { name: ".".into(), kind, entry: None });
            }
            return Some(Ended::Gone);
        }
        let name = ev.name?;
        let full = rel.join(&name);
        let created = ev.mask.intersects(M::IN_CREATE | M::IN_MOVED_TO);
        let already_reported = self.synthesized.remove(&(ev.wd, name)) && created;
        if already_reported {
            return None;
        }
        out.extend(kinds(ev.mask).map(|k| self.change(&full, k)));
        if self.recursive && ev.mask.contains(M::IN_ISDIR) {
            if ev.mask.contains(M::IN_MOVED_FROM) {
                self.forget(raw, &full);
            }
            if created {
                let added = self.add_dir(raw, &full).and_then(|wd| match wd {
                    Some(wd) => self.walk(raw, full, wd, Some(out)),
                    None => Ok(()),
                });
                if let Err(e) = added {
                    return Some(Ended::Failed(e));
                }
            }
        }
        None
    }

    /// Whether handling `ev` walks directories: see [`run`].
    fn walks_for(&self, ev: &InotifyEvent) -> bool {
        ev.mask.contains(M::IN_Q_OVERFLOW)
            || (self.recursive && ev.mask.contains(M::IN_ISDIR) && ev.mask.intersects(M::IN_CREATE | M::IN_MOVED_TO))
    }

    /// After the kernel dropped events: make sure the root is still there, and rebuild the
    /// tree's watches from scratch, since directories may have come and gone unseen. Done before
    /// the overflow is reported, so a client that rescans on it misses nothing after.
    fn resync(&mut self, raw: &Raw) -> Option<Ended> {
        match inotify::add(raw, &self.root, dir_mask()) {
            Ok(wd) if wd == self.root_wd => {}
            Ok(other) => {
                let _ = raw.rm_watch(other);
                return Some(Ended::Gone);
            }
            Err(_) => return Some(Ended::Gone),
        }
        if !self.recursive {
            return None;
        }
        let root_wd = self.root_wd;
        for wd in self.dirs.keys().filter(|wd| **wd != root_wd) {
            let _ = raw.rm_watch(*wd);
        }
        self.dirs.retain(|wd, _| *wd == root_wd);
        self.synthesized.clear();
        self.walk(raw, PathBuf::new(), root_wd, None).err().map(Ended::Failed)
    }
}

fn flush(shared: &Shared, out: &mut Vec<Change>) {
    if out.is_empty() {
        return;
    }
    let mut st = shared.lock();
    for c in out.drain(..) {
        st.push(c);
    }
    drop(st);
    shared.wake();
}

fn finish(shared: &Shared, out: &mut Vec<Change>, why: Ended) {
    flush(shared, out);
    shared.lock().end(why);
    shared.wake();
}

fn failed(root: &Path, e: io::Error) -> Ended {
    Ended::Failed(WatchError::Io { what: "reading inotify events for", path: root.to_path_buf(), source: Arc::new(e) })
}

/// Reads the kernel's events until the watch ends or its owner drops it (aborting this task,
/// which closes the inotify instance and so every watch in it).
///
/// A batch that makes the tree walk directories (a directory created or moved into a recursive
/// watch, or the rebuild after the kernel dropped events) is handled on the blocking pool: a
/// tree moved in may be huge, and the daemon's serving thread must not wait for it.
pub(crate) async fn run(raw: Raw, mut tree: Tree, shared: Arc<Shared>) {
    let mut out = Vec::new();
    let ino = match Inotify::new(raw) {
        Ok(i) => Arc::new(i),
        Err(e) => return finish(&shared, &mut out, failed(&tree.root, e)),
    };
    let mut pending = None;
    let mut batches = 0u32;
    loop {
        let evs = match pending.take() {
            Some(evs) => evs,
            None => match ino.read().await {
                Ok(evs) => evs,
                Err(e) => return finish(&shared, &mut out, failed(&tree.root, e)),
            },
        };
        let end = if evs.iter().any(|ev| tree.walks_for(ev)) {
            let root = tree.root.clone();
            let (ino, into) = (ino.clone(), shared.clone());
            let walked = tokio::task::spawn_blocking(move || {
                let end = handle_batch(&mut tree, ino.raw(), evs, &into, &mut out);
                (tree, out, end)
            })
            .await;
            match walked {
                Ok((t, o, end)) => {
                    (tree, out) = (t, o);
                    end
                }
                Err(e) => {
                    let e = io::Error::other(format!("walking new directories: {e}"));
                    return finish(&shared, &mut Vec::new(), failed(&root, e));
                }
            }
        } else {
            handle_batch(&mut tree, ino.raw(), evs, &shared, &mut out)
        };
        if let Some(why) = end {
            return finish(&shared, &mut out, why);
        }
        flush(&shared, &mut out);
        match ino.try_read() {
            Ok(Some(more)) => {
                pending = Some(more);
                batches += 1;
                if batches.is_multiple_of(BATCHES_PER_TURN) {
                    tokio::task::yield_now().await;
                }
            }
            Ok(None) => tree.synthesized.clear(),
            Err(e) => return finish(&shared, &mut out, failed(&tree.root, e)),
        }
    }
}

/// Turns one batch of kernel events into changes in `out`; `Some` when the watch is over.
fn handle_batch(
    tree: &mut Tree,
    raw: &Raw,
    evs: Vec<InotifyEvent>,
    shared: &Shared,
    out: &mut Vec<Change>,
) -> Option<Ended> {
    for ev in evs {
        if ev.mask.contains(M::IN_Q_OVERFLOW) {
            flush(shared, out);
            let end = tree.resync(raw);
            shared.lock().kernel_overflow();
            events::WatchKernelOverflow { path: &tree.root }.emit();
            if end.is_some() {
                return end;
            }
            shared.wake();
            continue;
        }
        if let Some(why) = tree.handle(raw, ev, out) {
            return Some(why);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_kinds_in_e2b_order() {
        let k: Vec<Kind> = kinds(M::IN_MODIFY | M::IN_ATTRIB | M::IN_CREATE).collect();
        assert_eq!(k, vec![Kind::Create, Kind::Chmod, Kind::Write]);
        assert_eq!(kinds(M::IN_MOVED_TO).collect::<Vec<_>>(), vec![Kind::Create]);
        assert_eq!(kinds(M::IN_MOVED_FROM).collect::<Vec<_>>(), vec![Kind::Rename]);
        assert_eq!(kinds(M::IN_CLOSE_WRITE).count(), 0);
    }
}
