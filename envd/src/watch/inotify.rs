//! A non-blocking inotify instance on tokio's reactor, shared by watches and follows.
use std::{
    io,
    os::fd::{AsFd, AsRawFd, RawFd},
    path::Path,
};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify as Raw, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;

/// Opens a raw instance: close-on-exec (children must not inherit it) and non-blocking.
pub fn open_raw() -> io::Result<Raw> {
    Raw::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(io::Error::from)
}

pub fn add(raw: &Raw, path: &Path, mask: AddWatchFlags) -> io::Result<WatchDescriptor> {
    raw.add_watch(path, mask).map_err(io::Error::from)
}

/// Don't report events on children that were unlinked but are still open somewhere.
pub fn excl_unlink() -> AddWatchFlags {
    AddWatchFlags::from_bits_retain(libc::IN_EXCL_UNLINK)
}

/// What tokio's reactor needs to see of an instance.
struct Registered(Raw);

impl AsRawFd for Registered {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// An instance registered with the reactor.
pub struct Inotify {
    fd: AsyncFd<Registered>,
}

impl Inotify {
    /// Must run inside the tokio runtime.
    pub fn new(raw: Raw) -> io::Result<Inotify> {
        // SAFETY: the instance is owned here, registered once, and closed only when the AsyncFd
        // (and so `Registered`) drops.
        let fd = unsafe { AsyncFd::register(Registered(raw)) }?;
        Ok(Inotify { fd })
    }

    pub fn raw(&self) -> &Raw {
        &self.fd.get_ref().0
    }

    /// Removing a watch the kernel already dropped is not an error worth reporting.
    pub fn remove(&self, wd: WatchDescriptor) {
        let _ = self.raw().rm_watch(wd);
    }

    /// Events ready now, without waiting; `None` once the kernel's queue is empty.
    pub fn try_read(&self) -> io::Result<Option<Vec<InotifyEvent>>> {
        match self.raw().read_events() {
            Ok(evs) => Ok(Some(evs)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until events are ready and returns them. Cancel-safe: nothing is read from the
    /// kernel until the read itself, which does not wait.
    pub async fn read(&self) -> io::Result<Vec<InotifyEvent>> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}
