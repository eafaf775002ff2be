//! Log following: what `tail -F` does, inside the daemon, woken by inotify with no polling
//! interval.
//!
//! A `Follower` holds the file open and reads it from an offset, one chunk per call, only as
//! fast as its consumer asks: the file itself is the buffer, so a slow consumer loses nothing and
//! costs no memory. Two inotify watches wake it: one on the open file (its writes, wherever its
//! name now is) and one on the directory of its path (the name removed, renamed or created) or,
//! while that directory does not exist, on its nearest existing ancestor.
//!
//! Whenever it is at the end of the open file, it compares the file with what the path names
//! now: shorter than what was read is a truncation, another inode is a replacement, nothing is a
//! removal. So it goes on from offset 0 of the new or truncated file, as `tail -F` does, and every
//! byte written before the switch is read first.
//!
//! Every follow's watches are on the daemon's one shared inotify instance ([`Hub`]).
//!
//! Invariant: knows nothing of RPCs or HTTP.
mod hub;

use std::{
    fs::File,
    io,
    os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use nix::sys::inotify::{AddWatchFlags as M, WatchDescriptor};

pub use hub::Hub;

use crate::{
    events,
    fs::creds::{self, Identity},
    watch::{network_fs, Slot, Slots, SlotsFull},
};

/// The daemon's follows: their shared inotify instance and the bound on how many run at once.
#[derive(Clone)]
pub struct Follows {
    hub: Hub,
    slots: Slots,
}

impl Follows {
    pub fn new(max: u32) -> Follows {
        Follows { hub: Hub::default(), slots: Slots::new(max, "follows") }
    }

    pub fn max(&self) -> u32 {
        self.slots.max()
    }

    /// Starts following `spec.path`, in one of the daemon's slots. Must run inside the tokio
    /// runtime.
    pub fn start(&self, spec: FollowSpec) -> Result<(Follower, Start), FollowError> {
        let slot = self.slots.acquire()?;
        Follower::start(spec, &self.hub, slot)
    }
}

/// The largest data event.
pub const CHUNK: usize = 64 * 1024;

/// What to follow.
#[derive(Debug, Clone)]
pub struct FollowSpec {
    /// Absolute.
    pub path: PathBuf,
    /// Where to start in the file as it is now; `None`: its end.
    pub offset: Option<u64>,
    pub allow_network_mounts: bool,
    /// Whom the file is opened as: a follow reads only what its caller may read.
    pub who: Option<Identity>,
}

/// Where a follow starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub path: PathBuf,
    /// Whether the file exists now; if not, reading starts at offset 0 once it does.
    pub exists: bool,
    pub offset: u64,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes at `offset` of the file as it is now.
    Data { offset: u64, data: Vec<u8> },
    /// The file became shorter than `previous_offset`; reading goes on from 0.
    Truncated { previous_offset: u64, size: u64 },
    /// Another file is at the path now; reading goes on from 0 of it.
    Replaced { previous_offset: u64 },
    /// Nothing (or no regular file) is at the path any more; waiting for it.
    Removed { previous_offset: u64 },
    /// A file appeared at the path; reading starts at 0.
    Created,
}

#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Full(#[from] SlotsFull),
    #[error("{0} is a directory")]
    IsADirectory(PathBuf),
    #[error("{0} is not a regular file")]
    NotRegular(PathBuf),
    #[error(
        "{path} is on a network filesystem ({fs}) whose changes made elsewhere inotify cannot see; \
         set allow_network_mounts to follow it anyway"
    )]
    NetworkMount { path: PathBuf, fs: &'static str },
    #[error("permission denied: {path}: {source}")]
    PermissionDenied { path: PathBuf, source: io::Error },
    #[error("the kernel's inotify limit is reached ({limit}): {source}")]
    KernelLimit { limit: &'static str, source: io::Error },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: io::Error },
}

fn io_err(what: &'static str, path: &Path, source: io::Error) -> FollowError {
    let path = path.to_path_buf();
    match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => FollowError::PermissionDenied { path, source },
        Some(libc::ENOSPC) => FollowError::KernelLimit { limit: "fs.inotify.max_user_watches", source },
        Some(libc::EMFILE) => FollowError::KernelLimit { limit: "fs.inotify.max_user_instances", source },
        _ => FollowError::Io { what, path, source },
    }
}

fn dir_mask() -> M {
    M::IN_CREATE
        | M::IN_MOVED_TO
        | M::IN_MOVED_FROM
        | M::IN_DELETE
        | M::IN_DELETE_SELF
        | M::IN_MOVE_SELF
        | M::IN_ONLYDIR
}

fn file_mask() -> M {
    M::IN_MODIFY | M::IN_ATTRIB | M::IN_MOVE_SELF | M::IN_DELETE_SELF
}

struct OpenFile {
    file: File,
    dev: u64,
    ino: u64,
    size: u64,
    /// The next byte to read.
    offset: u64,
    wd: Option<WatchDescriptor>,
}

enum Opened {
    File(OpenFile),
    Missing,
    NotRegular { dir: bool },
}

pub struct Follower {
    sub: hub::Sub,
    path: PathBuf,
    parent: PathBuf,
    /// The watched directory: the path's parent, or its nearest existing ancestor.
    dir: Option<(WatchDescriptor, PathBuf)>,
    dir_stale: bool,
    file: Option<OpenFile>,
    buf: Box<[u8]>,
    who: Option<Identity>,
    _slot: Slot,
}

impl Follower {
    fn start(spec: FollowSpec, hub: &Hub, slot: Slot) -> Result<(Follower, Start), FollowError> {
        let path = spec.path;
        let parent = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        let sub = hub.subscribe().map_err(|e| io_err("opening the daemon's inotify instance for", &path, e))?;
        let mut f = Follower {
            sub,
            path,
            parent,
            dir: None,
            dir_stale: false,
            file: None,
            buf: vec![0; CHUNK].into_boxed_slice(),
            who: spec.who,
            _slot: slot,
        };
        // The directory is watched before the file is looked for, so a file created right after
        // the look is still seen.
        f.arm_dir()?;
        if !spec.allow_network_mounts {
            if let Some((_, dir)) = &f.dir {
                if let Some(fs) = network_fs(dir).map_err(|e| io_err("statfs", dir, e))? {
                    return Err(FollowError::NetworkMount { path: f.path.clone(), fs });
                }
            }
        }
        let start = match f.open()? {
            Opened::File(mut of) => {
                let (size, offset) = (of.size, spec.offset.unwrap_or(of.size));
                of.offset = offset;
                f.file = Some(of);
                Start { path: f.path.clone(), exists: true, offset, size }
            }
            Opened::Missing => Start { path: f.path.clone(), exists: false, offset: 0, size: 0 },
            Opened::NotRegular { dir: true } => return Err(FollowError::IsADirectory(f.path.clone())),
            Opened::NotRegular { dir: false } => return Err(FollowError::NotRegular(f.path.clone())),
        };
        events::FollowStarted { path: &f.path, exists: start.exists, offset: start.offset }.emit();
        Ok((f, start))
    }

    /// The next event, waiting as long as nothing happens. Cancel-safe: the only wait is for
    /// inotify, and everything after it is done before returning.
    pub async fn next(&mut self) -> Result<Event, FollowError> {
        loop {
            if let Some(ev) = self.step()? {
                return Ok(ev);
            }
            self.wait().await?;
        }
    }

    /// One step without waiting: a chunk of data, or what changed at the path, or nothing.
    fn step(&mut self) -> Result<Option<Event>, FollowError> {
        if self.dir_stale {
            self.arm_dir()?;
        }
        let Some(f) = &mut self.file else {
            return Ok(match self.open()? {
                Opened::File(of) => {
                    self.file = Some(of);
                    Some(Event::Created)
                }
                Opened::Missing | Opened::NotRegular { .. } => None,
            });
        };
        let n = f.file.read_at(&mut self.buf, f.offset).map_err(|e| io_err("reading", &self.path, e))?;
        if n > 0 {
            let ev = Event::Data { offset: f.offset, data: self.buf[..n].to_vec() };
            f.offset += n as u64;
            return Ok(Some(ev));
        }
        // At the end of the open file: has it shrunk, or does the path name another file now?
        let size = f.file.metadata().map_err(|e| io_err("reading", &self.path, e))?.len();
        if size < f.offset {
            let previous_offset = std::mem::replace(&mut f.offset, 0);
            return Ok(Some(Event::Truncated { previous_offset, size }));
        }
        let previous_offset = f.offset;
        match std::fs::metadata(&self.path) {
            Ok(md) if md.dev() == f.dev && md.ino() == f.ino => Ok(None),
            Ok(_) => {
                self.close_file();
                Ok(Some(match self.open()? {
                    Opened::File(of) => {
                        self.file = Some(of);
                        Event::Replaced { previous_offset }
                    }
                    Opened::Missing | Opened::NotRegular { .. } => Event::Removed { previous_offset },
                }))
            }
            Err(_) => {
                self.close_file();
                Ok(Some(Event::Removed { previous_offset }))
            }
        }
    }

    /// Waits for inotify and notes what needs redoing.
    async fn wait(&mut self) -> Result<(), FollowError> {
        let woken = self.sub.next().await.map_err(|e| io_err("reading inotify events for", &self.path, e))?;
        // Some of our own events may be lost: re-arm; the next step re-reads the state.
        if woken.overflow {
            self.dir_stale = true;
        }
        for (ev_wd, mask) in woken.seen {
            if let Some((wd, dir)) = &self.dir {
                let gone = M::IN_DELETE_SELF | M::IN_MOVE_SELF | M::IN_IGNORED | M::IN_UNMOUNT;
                // While an ancestor stands in for the directory, anything in it may be the
                // directory appearing.
                if ev_wd == *wd && (*dir != self.parent || mask.intersects(gone)) {
                    self.dir_stale = true;
                }
            }
        }
        Ok(())
    }

    /// Watches the path's directory, or its nearest existing ancestor while it is missing.
    fn arm_dir(&mut self) -> Result<(), FollowError> {
        loop {
            let mut dir = self.parent.clone();
            let wd = loop {
                match self.sub.add(&dir, dir_mask()) {
                    Ok(wd) => break wd,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => match dir.parent() {
                        Some(up) => dir = up.to_path_buf(),
                        None => return Err(io_err("watching", &dir, e)),
                    },
                    Err(e) => return Err(io_err("watching", &dir, e)),
                }
            };
            let file_wd = self.file.as_ref().and_then(|f| f.wd);
            if let Some((old, _)) = self.dir.replace((wd, dir.clone())) {
                if old != wd && Some(old) != file_wd {
                    self.sub.remove(old);
                }
            }
            self.dir_stale = false;
            if dir == self.parent {
                return Ok(());
            }
            // The next directory down may have appeared before the ancestor's watch was added,
            // unseen: then look again.
            let next_down = self.parent.ancestors().find(|a| a.parent() == Some(dir.as_path()));
            if !next_down.is_some_and(Path::is_dir) {
                return Ok(());
            }
        }
    }

    fn open(&mut self) -> Result<Opened, FollowError> {
        // O_NONBLOCK: opening a FIFO must not wait for a writer.
        let opened = creds::as_identity(self.who.as_ref(), || {
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(&self.path)
        })
        .map_err(|e| io_err("switching user to open", &self.path, e))?;
        let file = match opened {
            Ok(f) => f,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return Ok(Opened::Missing),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Ok(Opened::NotRegular { dir: false }),
            Err(e) => return Err(io_err("opening", &self.path, e)),
        };
        let md = file.metadata().map_err(|e| io_err("reading", &self.path, e))?;
        if !md.is_file() {
            return Ok(Opened::NotRegular { dir: md.is_dir() });
        }
        // Watch the inode just opened, not whatever the path names by now: /proc/self/fd/N
        // resolves to exactly it. Without /proc the path will do: a mismatch shows as a
        // replacement at the next end of file.
        use std::os::fd::AsRawFd as _;
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let wd = self.sub.add(&by_fd, file_mask()).or_else(|_| self.sub.add(&self.path, file_mask())).ok();
        Ok(Opened::File(OpenFile { file, dev: md.dev(), ino: md.ino(), size: md.len(), offset: 0, wd }))
    }

    fn close_file(&mut self) {
        let dir_wd = self.dir.as_ref().map(|(wd, _)| *wd);
        if let Some(wd) = self.file.take().and_then(|f| f.wd) {
            if Some(wd) != dir_wd {
                self.sub.remove(wd);
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        events::FollowEnded { path: &self.path }.emit();
    }
}
