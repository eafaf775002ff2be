//! Directory watches: inotify, recursive on demand, each with a bounded queue that says when it
//! lost events instead of growing without bound.
//!
//! A `Watch` owns one inotify instance and a task that reads it eagerly (so new directories are
//! watched as soon as they appear, whatever the client's pace) and queues `Change`s for its
//! consumer: a stream (E2B's `WatchDir`, hangar's `Files/WatchDir`) or the polling `Registry`
//! (E2B's `CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher`). Dropping a `Watch` ends its task,
//! closes its inotify instance and frees its slot.
//!
//! Invariant: knows nothing of RPCs or HTTP; the only protocol type it touches is E2B's
//! `EntryInfo` data, built by `crate::fs::entry_info`.
pub(crate) mod inotify;
mod mounts;
mod queue;
mod registry;
mod slots;
mod tree;

use std::{io, path::PathBuf, sync::Arc};

use hangar_proto::filesystem::EntryInfo;
use tokio::task::JoinHandle;

pub use mounts::network_fs;
pub use queue::{Batch, Ended, Item};
pub use registry::{Registry, WatchSettings};
pub use slots::{Slot, Slots, SlotsFull};

use crate::events;

/// What a change was, in E2B's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Write => "write",
            Kind::Remove => "remove",
            Kind::Rename => "rename",
            Kind::Chmod => "chmod",
        }
    }
}

/// One change under a watched directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Relative to the watched directory; `.` for the directory itself.
    pub name: String,
    pub kind: Kind,
    /// The entry as it is now, for create, write and chmod when asked (best effort: `None` when
    /// it is already gone). Boxed: most changes carry none, and queues hold many.
    pub entry: Option<Box<EntryInfo>>,
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// Absolute path of an existing directory.
    pub root: PathBuf,
    pub recursive: bool,
    pub include_entry: bool,
    pub allow_network_mounts: bool,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum WatchError {
    #[error("{0} does not exist")]
    NotFound(PathBuf),
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error(
        "{path} is on a network filesystem ({fs}) whose changes made elsewhere inotify cannot see; \
         set allow_network_mounts to watch it anyway"
    )]
    NetworkMount { path: PathBuf, fs: &'static str },
    #[error(transparent)]
    Full(#[from] SlotsFull),
    #[error("permission denied watching {path}: {source}")]
    PermissionDenied { path: PathBuf, source: Arc<io::Error> },
    #[error("the kernel's inotify limit is reached ({limit}): {source}")]
    KernelLimit { limit: &'static str, source: Arc<io::Error> },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: Arc<io::Error> },
    #[error("no watcher with id {0:?}")]
    NoWatcher(String),
    #[error("{} events were lost (the watch's queue or the kernel's overflowed): rescan the directory and watch it again", match .dropped { 0 => "some".to_string(), n => n.to_string() })]
    EventsLost { dropped: u64 },
}

impl WatchError {
    /// Classifies an error from an inotify or filesystem call on `path`.
    pub(crate) fn io(what: &'static str, path: PathBuf, e: io::Error) -> WatchError {
        let source = Arc::new(e);
        match source.raw_os_error() {
            Some(libc::ENOENT) => WatchError::NotFound(path),
            Some(libc::ENOTDIR) => WatchError::NotADirectory(path),
            Some(libc::EACCES | libc::EPERM) => WatchError::PermissionDenied { path, source },
            Some(libc::ENOSPC) => WatchError::KernelLimit { limit: "fs.inotify.max_user_watches", source },
            Some(libc::EMFILE) => WatchError::KernelLimit { limit: "fs.inotify.max_user_instances", source },
            _ => WatchError::Io { what, path, source },
        }
    }
}

/// A running directory watch. Dropping it stops the watch and frees its slot.
pub struct Watch {
    shared: Arc<queue::Shared>,
    task: JoinHandle<()>,
    root: PathBuf,
    _slot: Slot,
}

impl Watch {
    /// Checks `spec`, sets the inotify watches up (the whole tree when recursive, off the async
    /// threads since a tree may be large) and starts reading events.
    pub async fn start(spec: WatchSpec, slot: Slot, queue_events: usize) -> Result<Watch, WatchError> {
        let root = spec.root.clone();
        let (raw, tree) = tokio::task::spawn_blocking(move || tree::Tree::setup(spec)).await.map_err(|e| {
            WatchError::Io { what: "setting up a watch on", path: root.clone(), source: Arc::new(io::Error::other(e)) }
        })??;
        let shared = Arc::new(queue::Shared::new(queue_events));
        let task = tokio::spawn(tree::run(raw, tree, shared.clone()));
        events::WatchStarted { path: &root }.emit();
        Ok(Watch { shared, task, root, _slot: slot })
    }

    /// The next changes, waiting for at least one (or the watch's end). Cancel-safe: nothing is
    /// taken from the queue until this returns.
    pub async fn next(&self) -> Batch {
        self.shared.next().await
    }

    /// Whatever is queued now, without waiting.
    pub fn take(&self) -> Batch {
        self.shared.take()
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
        events::WatchEnded { path: &self.root }.emit();
    }
}
