//! Non-blocking reads and writes on pipe and PTY master file descriptors.
use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
};

use bytes::{BufMut as _, BytesMut};
use tokio::io::unix::AsyncFd;

pub struct AsyncFdIo {
    fd: AsyncFd<OwnedFd>,
    /// A pipe: a read shorter than asked emptied it, so the read that would only answer EAGAIN
    /// is skipped (as tokio's own pipes do). Not for a PTY master, whose line discipline may
    /// hand over less than it holds.
    pipe: bool,
}

impl AsyncFdIo {
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        set_nonblocking(&fd)?;
        let pipe = is_fifo(&fd)?;
        // SAFETY: `fd` is owned here, registered once, and closed only when the AsyncFd drops.
        let fd = unsafe { AsyncFd::register(fd) }?;
        Ok(Self { fd, pipe })
    }

    pub fn raw(&self) -> i32 {
        self.fd.get_ref().as_raw_fd()
    }

    /// Waits until a read would not block (data, end of file or an error is there to read).
    pub async fn readable(&self) -> io::Result<()> {
        self.fd.readable().await.map(drop)
    }

    /// Reads once into `buf`'s spare capacity (at least one byte of it), growing its length by
    /// what was read: the bytes land where they will be kept, and pages a short read does not
    /// reach are never touched. `Ok(0)` at end of file; a PTY master answers EIO once every
    /// slave is closed, which is its end of file. Waits only until the fd is readable as tokio
    /// last saw it: when that readiness was stale (a read that filled the buffer leaves it set)
    /// and the read would block, answers `WouldBlock`, so that the caller waits where it
    /// chooses (the pump, beside its quiet timer).
    pub async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        if buf.capacity() == buf.len() {
            buf.reserve(1);
        }
        loop {
            let mut guard = self.fd.readable().await?;
            let spare = buf.spare_capacity_mut();
            let asked = spare.len();
            let res = guard.try_io(|inner| {
                // SAFETY: `spare` is valid for writes of spare.len() bytes; read(2) writes at most
                // that many and we never read them before it initialized them.
                let n = unsafe { libc::read(inner.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match res {
                Ok(Ok(n)) => {
                    // SAFETY: read(2) initialized the first `n` bytes of the spare capacity.
                    unsafe { buf.advance_mut(n) };
                    if self.pipe && n > 0 && n < asked {
                        // Readiness that arrived since this guard was taken is kept.
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => return Err(io::ErrorKind::WouldBlock.into()),
            }
        }
    }

    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            let res = guard.try_io(|inner| {
                // SAFETY: data is valid for data.len() bytes; the fd is owned by inner.
                let n = unsafe { libc::write(inner.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match res {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

fn is_fifo(fd: &OwnedFd) -> io::Result<bool> {
    let st = nix::sys::stat::fstat(fd)?;
    Ok(nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
        == nix::sys::stat::SFlag::S_IFIFO)
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a valid, owned fd.
    unsafe {
        let flags = libc::fcntl(raw, libc::F_GETFL);
        if flags < 0 || libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
